//! A volume's condition as the metadata and the LUN show it (CSI's VOLUME_CONDITION of the
//! controller): abnormal when part of its data cannot be read (an extent of it, or of its
//! thin pool, on a PV that is missing) or was never written (a linear clone whose copy did
//! not finish). What only the kernel knows (a thin pool out of space) is the node's to say.

use std::collections::HashSet;

use super::{clone_source_of, volume_in, Volume, VolumeError, Volumes};
use lvmeta::model::{Area, Lv, Vg};

/// A volume's health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// Whether the volume is not as it should be.
    pub abnormal: bool,
    /// What is wrong, or that nothing is.
    pub message: String,
}

impl Volumes<'_> {
    /// Every volume, by name, with its condition (one read of the VG, one index of its LVs).
    pub fn list_with_condition(&self) -> Result<Vec<(Volume, Condition)>, VolumeError> {
        let vg = self.view()?;
        let missing = vg.missing();
        let index = vg.by_name();
        let find = |n: &str| index.get(n);
        let mut out: Vec<(Volume, Condition)> = vg
            .lvs
            .iter()
            .filter_map(|l| {
                let v = volume_in(&vg, l, find)?;
                Some((v, condition_in(&vg, l, &missing, find)))
            })
            .collect();
        out.sort_by(|(a, _), (b, _)| a.name.cmp(&b.name));
        Ok(out)
    }

    /// Volume `name` with its condition, or `None` when there is no such volume.
    pub fn get_with_condition(
        &self,
        name: &str,
    ) -> Result<Option<(Volume, Condition)>, VolumeError> {
        let vg = self.view()?;
        let Some(lv) = vg.lv(name) else {
            return Ok(None);
        };
        let find = |n: &str| vg.lv(n);
        Ok(volume_in(&vg, lv, find).map(|v| (v, condition_in(&vg, lv, &vg.missing(), find))))
    }
}

/// The condition of volume `name` of `vg`, whose PVs `missing` (indexes in `vg.pvs`) have
/// no device.
pub fn condition(vg: &Vg, name: &str, missing: &[usize]) -> Condition {
    match vg.lv(name) {
        Some(lv) => condition_in(vg, lv, missing, |n| vg.lv(n)),
        None => Condition {
            abnormal: true,
            message: format!("volume {}/{name} does not exist", vg.name),
        },
    }
}

/// The condition of volume `lv` of `vg`; `find` looks up other LVs of `vg` by name.
fn condition_in<'a>(
    vg: &Vg,
    lv: &'a Lv,
    missing: &[usize],
    find: impl Fn(&str) -> Option<&'a Lv>,
) -> Condition {
    let name = &lv.name;
    // Without missing PVs nothing is lost: the walk down the LV's stack is skipped.
    let under = match missing.is_empty() {
        true => Vec::new(),
        false => pvs_under(lv, find),
    };
    let lost: Vec<String> = under
        .into_iter()
        .filter(|i| missing.contains(i))
        .map(|i| {
            let pv = &vg.pvs[i];
            match &pv.device {
                Some(d) => format!("{} (last seen as {d})", pv.id),
                None => pv.id.to_string(),
            }
        })
        .collect();
    if !lost.is_empty() {
        return Condition {
            abnormal: true,
            message: format!(
                "volume {}/{name} has data on missing PV {}: those blocks cannot be read \
                 until the device is back",
                vg.name,
                lost.join(", ")
            ),
        };
    }
    if let Some(src) = clone_source_of(lv) {
        return Condition {
            abnormal: true,
            message: format!(
                "volume {}/{name} is a copy of {src} that did not finish: its data are \
                 incomplete until CreateVolume is called again",
                vg.name
            ),
        };
    }
    Condition {
        abnormal: false,
        message: "healthy".into(),
    }
}

/// The PVs (indexes in the VG's PVs) holding `lv` and every LV it rests on (a thin LV's
/// pool, a pool's metadata and data LVs, a thin snapshot's origin); `find` looks up LVs.
fn pvs_under<'a>(lv: &'a Lv, find: impl Fn(&str) -> Option<&'a Lv>) -> Vec<usize> {
    let mut pvs = Vec::new();
    let mut seen: HashSet<&str> = HashSet::new();
    let mut todo = vec![lv];
    while let Some(lv) = todo.pop() {
        if !seen.insert(lv.name.as_str()) {
            continue;
        }
        for seg in &lv.segments {
            for a in seg.kind.areas() {
                if let Area::Pv { pv, .. } = a {
                    if !pvs.contains(pv) {
                        pvs.push(*pv);
                    }
                }
            }
            seg.kind.each_lv_ref(|_, l| todo.extend(find(l)));
        }
    }
    pvs.sort_unstable();
    pvs
}

#[cfg(test)]
mod tests {
    use super::*;
    use lvmeta::edit::{self, LvSpec};
    use lvmeta::testing::{session_with_vg, stamp};

    #[test]
    fn a_volume_on_a_missing_pv_or_an_unfinished_copy_is_abnormal() {
        let s = session_with_vg(2);
        let vols = Volumes::new(&s, "vg");
        let size = |mib: u64| super::super::SizeRange {
            required: mib << 20,
            limit: 0,
        };
        // "a" fills most of the first PV, "b" goes to the second.
        vols.create("a", super::super::Mode::Linear, size(48))
            .expect("a");
        vols.create("b", super::super::Mode::Linear, size(32))
            .expect("b");
        vols.create("t", super::super::Mode::Thin, size(4))
            .expect("t");
        let vg = s.vg("vg").expect("vg");
        let on = |lv: &str| pvs_under(vg.lv(lv).expect("lv"), |n| vg.lv(n));
        assert_eq!(on("a"), [0]);
        assert!(on("b").contains(&1), "{:?}", on("b"));
        // A thin volume rests on its pool's data and metadata LVs.
        assert!(!on("t").is_empty());
        assert!(on("t").iter().all(|i| on("t-pool").contains(i)));
        for (v, c) in vols.list_with_condition().expect("list") {
            assert!(!c.abnormal, "{v:?}: {c:?}");
        }
        let c = condition(&vg, "b", &[1]);
        assert!(
            c.abnormal && c.message.contains(&vg.pvs[1].id.to_string()),
            "{c:?}"
        );
        assert!(!condition(&vg, "a", &[1]).abnormal);
        // A linear clone whose copy never finished.
        s.update("vg", "test", |v, ctx| {
            let mut spec = LvSpec::linear("c", 1, stamp());
            spec.tags = vec![
                "lvmeta.csi/mode=linear".into(),
                format!("{}a", super::super::CLONE_PENDING_TAG),
            ];
            edit::lv::create(v, ctx, &spec)
        })
        .expect("pending clone");
        let (_, c) = vols.get_with_condition("c").expect("get").expect("c");
        assert!(c.abnormal && c.message.contains("copy of a"), "{c:?}");
        // lvm2 marks a PV it lost MISSING in its flags.
        s.update("vg", "test", |mut v, _| {
            v.pvs[1].flags.push(lvmeta::model::word("MISSING"));
            Ok(v)
        })
        .expect("mark");
        let (_, got) = vols.get_with_condition("b").expect("get").expect("b");
        assert!(got.abnormal, "{got:?}");
        assert_eq!(vols.get_with_condition("none").expect("get"), None);
    }
}
