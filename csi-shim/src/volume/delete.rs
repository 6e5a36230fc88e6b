//! Deleting a volume: its LVs removed, their extents held for erasure.

use super::*;

impl<'s> Volumes<'s> {
    /// Removes `name` (a thin volume with its pool when nothing else is left in it): the
    /// volume is gone at once, and the extents it frees are held in a wipe LV until erased
    /// (see [`Volumes::wipe`]). Returns false when there was no such volume. Refused while the volume
    /// is in use: its lease held by a host (shared VG), or a device of this host mapping it
    /// ([`Volumes::on_host`]).
    pub fn delete(&self, name: &str) -> Result<bool, VolumeError> {
        let vg = self.view()?;
        if volume_of(&vg, name).is_none() {
            return Ok(false);
        }
        self.check_unmapped(name)?;
        self.update("lvremove", |vg, ctx| match volume_of(&vg, name) {
            None => Ok((vg, false)),
            Some(v) => {
                let vg = self.remove_holding(vg, ctx, name, |vg| match v.mode {
                    Mode::Linear => edit::lv::remove(vg, ctx, name, false),
                    Mode::Thin => remove_thin(vg, ctx, name),
                })?;
                Ok((vg, true))
            }
        })
        .map_err(VolumeError::from)
    }
}

/// Removes thin LV `name`, and its pool once no thin LV is left in it.
pub(super) fn remove_thin(vg: Vg, ctx: &EditCtx, name: &str) -> Result<Vg, EditError> {
    let pool = pool_of(&vg, name);
    let vg = edit::lv::remove(vg, ctx, name, false)?;
    match pool {
        Some(p) if !vg.lvs.iter().any(|l| l.thin_pool() == Some(p.as_str())) => {
            edit::lv::remove(vg, ctx, &p, false)
        }
        _ => Ok(vg),
    }
}
