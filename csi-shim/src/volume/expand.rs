//! Growing a volume (a thin volume's pool with it).

use super::*;

impl<'s> Volumes<'s> {
    /// Grows `name` to at least `size.required` bytes (a thin volume's pool grows with it).
    /// A volume already that large is returned unchanged; shrinking is refused.
    pub fn expand(&self, name: &str, size: SizeRange) -> Result<Volume, VolumeError> {
        let vg = self.view()?;
        let v = volume_of(&vg, name).ok_or_else(|| VolumeError::NotFound(name.to_owned()))?;
        let extents = size.extents(vg.extent())?;
        if vg.bytes_of(u64::from(extents)).0 <= v.bytes {
            return Ok(v);
        }
        self.update("lvextend", |vg, ctx| {
            let v = volume_of(&vg, name).ok_or_else(|| EditError::NoLv {
                vg: vg.name.clone(),
                lv: name.to_owned(),
            })?;
            if vg.bytes_of(u64::from(extents)).0 <= v.bytes {
                return Ok((vg, v));
            }
            let vg = match v.mode {
                Mode::Linear => edit::lv::resize(vg, ctx, name, extents, None, false)?,
                Mode::Thin => {
                    let pool = pool_of(&vg, name).unwrap_or_default();
                    let more =
                        u64::from(extents).saturating_sub(vg.lv(name).map_or(0, |l| l.extents()));
                    let vg = grow_by(vg, ctx, &pool, more)?;
                    edit::lv::resize(vg, ctx, name, extents, None, false)?
                }
            };
            let v = volume_of(&vg, name).ok_or_else(|| {
                edit::refused(name, "the resized LV is not a volume (internal error)")
            })?;
            Ok((vg, v))
        })
        .map_err(VolumeError::from)
    }
}

/// Grows the pool `pool` by `more` extents.
pub(super) fn grow_by(vg: Vg, ctx: &EditCtx, pool: &str, more: u64) -> Result<Vg, EditError> {
    if more == 0 {
        return Ok(vg);
    }
    let current = vg.lv(pool).map_or(0, |l| l.extents());
    let to = u32::try_from(current + more)
        .map_err(|_| edit::refused(pool, "the pool would be too large"))?;
    edit::lv::resize(vg, ctx, pool, to, None, false)
}
