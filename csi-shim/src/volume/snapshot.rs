//! Snapshots: thin snapshots of thin volumes, listed, found, made and deleted.

use super::create::snapshot_in_pool;
use super::delete::remove_thin;
use super::*;

impl<'s> Volumes<'s> {
    /// Every snapshot, by name.
    pub fn snapshots(&self) -> Result<Vec<Snapshot>, VolumeError> {
        let vg = self.view()?;
        let index = vg.by_name();
        let mut out: Vec<Snapshot> = vg
            .lvs
            .iter()
            .filter_map(|l| snapshot_in(&vg, l, |n| index.get(n)))
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The snapshot `name`, if it exists.
    pub fn get_snapshot(&self, name: &str) -> Result<Option<Snapshot>, VolumeError> {
        Ok(snapshot_of(self.view()?.vg(), name))
    }

    /// Takes snapshot `name` of thin volume `source` (a thin snapshot in its pool, which grows
    /// by the source's size); returns it when it exists already of the same source.
    pub fn snapshot(&self, name: &str, source: &str) -> Result<Snapshot, VolumeError> {
        lvmeta::names::check_new_lv_name(&self.vg, name)
            .map_err(|e| VolumeError::Invalid(e.to_string()))?;
        let stamp = Stamp::now();
        self.update("lvcreate", |vg, ctx| {
            if let Some(s) = snapshot_of(&vg, name) {
                if s.source == source {
                    return Ok((vg, s));
                }
                return Err(EditError::Exists {
                    what: "Snapshot (of another volume)",
                    name: format!("{name} (of {})", s.source),
                    vg: vg.name.clone(),
                });
            }
            if vg.lv(name).is_some() {
                return Err(EditError::Exists {
                    what: "Logical Volume (not a snapshot)",
                    name: name.to_owned(),
                    vg: vg.name.clone(),
                });
            }
            let v = volume_of(&vg, source).ok_or_else(|| EditError::NoLv {
                vg: vg.name.clone(),
                lv: source.to_owned(),
            })?;
            if v.mode != Mode::Thin {
                return Err(edit::refused(
                    source,
                    "snapshots are taken of thin volumes only (mode thin)",
                ));
            }
            let more = vg.lv(source).map_or(0, |l| l.extents());
            let snap = ThinSpec {
                tags: vec![format!("{SNAPSHOT_TAG}{source}")],
                activation_skip: Some(true),
                ..ThinSpec::snapshot_of(&vg, source, Some(name.to_owned()), stamp)?
            };
            let vg = snapshot_in_pool(vg, ctx, more, &snap)?;
            let s = snapshot_of(&vg, name).ok_or_else(|| {
                edit::refused(name, "the new LV is not a snapshot (internal error)")
            })?;
            Ok((vg, s))
        })
        .map_err(VolumeError::from)
    }

    /// Removes snapshot `name` (and its pool when nothing else is left in it, its extents
    /// held for erasure). Returns false when there was no such snapshot.
    pub fn delete_snapshot(&self, name: &str) -> Result<bool, VolumeError> {
        if snapshot_of(self.view()?.vg(), name).is_none() {
            return Ok(false);
        }
        self.check_unmapped(name)?;
        self.update("lvremove", |vg, ctx| match snapshot_of(&vg, name) {
            None => Ok((vg, false)),
            Some(_) => Ok((
                self.remove_holding(vg, ctx, name, |vg| remove_thin(vg, ctx, name))?,
                true,
            )),
        })
        .map_err(VolumeError::from)
    }
}
