//! The checks of a changed VG, in work proportional to the change: a VG of 40,000 LVs that
//! gains four is checked by looking at those four against the others, not by checking all
//! 40,000 again.
//!
//! Sound because the version before the change passed every check, and a change reaches
//! the model only through LVs it adds, replaces (an edit copies an LV it changes: see
//! [`crate::model::Vg::lv_mut`]) or removes; LVs still shared with the old version (the same
//! allocation) are as checked. What a change can break:
//! - its own LVs: names, tags, segments, references, leases ([`check_lv`], [`lease_of`]);
//! - uniqueness and exclusion against every other LV: names, ids, lease offsets, thin device
//!   ids per pool, extents on the PVs, the one pool metadata spare;
//! - LVs it did not touch that refer to an LV it replaced or removed.
//!
//! The VG's own fields, or a change to most of its LVs, get the full checks.

use std::collections::HashSet;
use std::sync::Arc;

use super::{check_lv, check_lv_names, check_read, check_write, err, is_spare, lease_of, lv_path};
use crate::model::extents::{extents_of, PeRun};
use crate::model::index::{diff, VgIndex};
use crate::model::{Area, Lv, ModelError, SegKind, Vg};

/// A set hashed with foldhash (seeded at random per process, as the full checks' maps).
type Set<T> = HashSet<T, foldhash::fast::RandomState>;

/// What a change did to the LVs (see [`check_change`]).
#[derive(Debug)]
pub struct Delta<'b, 'a> {
    /// LVs of the new version that are not in the old one (added, or copied and changed).
    pub changed: Vec<&'a Lv>,
    /// LVs of the old version that are not in the new one (removed, or the old copies of
    /// changed ones).
    pub removed: Vec<&'b Lv>,
}

/// [`check_read`] and [`check_write`] of `after`, a change of `before`, which passed them.
/// Returns what the change did to the LVs. With `index` (of `before`), the changed LVs are
/// compared with the others through it, in work proportional to the change; without it, or
/// when it sees a possible conflict, with each other LV.
pub fn check_change<'b, 'a>(
    before: &'b Vg,
    after: &'a Vg,
    index: Option<&VgIndex>,
) -> Result<Delta<'b, 'a>, ModelError> {
    let Some(d) = diff(before, after) else {
        return full_delta(before, after);
    };
    let placed = &d.placed;
    let changed: Vec<&Lv> = placed.iter().map(|(_, l)| *l).collect();
    // The changed LVs refer to each other most (a thin LV to its new pool): looked up first.
    let find = |n: &str| {
        placed
            .iter()
            .rev()
            .map(|(_, l)| *l)
            .find(|l| l.name == n)
            .or_else(|| after.lv(n))
    };
    let mine = Mine::of(after, placed)?;
    for lv in &changed {
        check_lv_names(after, lv)?;
        check_lv(after, lv, find)?;
    }
    if index.is_some_and(|ix| ix.clear_of(before, after, &d)) {
        // Nothing outside the change conflicts with it: the changed LVs among themselves.
        for &(at, lv) in placed {
            mine.against(after, at, lv)?;
        }
        debug_assert!(
            full(after).is_ok(),
            "the index cleared a change the full checks refuse"
        );
        return Ok(Delta {
            changed,
            removed: d.removed,
        });
    }
    let removed = d.removed;
    // LVs the change touched by name (a few: compared, not hashed): others that refer to
    // them are checked again.
    let touched: Vec<&str> = changed
        .iter()
        .chain(&removed)
        .map(|l| l.name.as_str())
        .collect();
    let mut spares = 0;
    for (at, lv) in after.lvs.iter().enumerate() {
        let is_mine = placed.iter().any(|(i, _)| *i == at);
        mine.against(after, at, lv)?;
        if mine.spare && is_spare(lv) {
            spares += 1;
            if spares > 1 {
                return Err(err(
                    lv_path(after, lv),
                    "name",
                    "a VG has at most one pool metadata spare",
                ));
            }
        }
        if !is_mine {
            let mut refers = false;
            for seg in &lv.segments {
                seg.kind.each_lv_ref(|_, t| refers |= touched.contains(&t));
            }
            if refers {
                check_lv(after, lv, find)?;
            }
        }
    }
    Ok(Delta { changed, removed })
}

fn full(vg: &Vg) -> Result<(), ModelError> {
    check_read(vg)?;
    check_write(vg)
}

/// The full checks, and the change found by ids.
fn full_delta<'b, 'a>(before: &'b Vg, after: &'a Vg) -> Result<Delta<'b, 'a>, ModelError> {
    full(after)?;
    let old: Set<*const Lv> = before.lvs.iter().map(Arc::as_ptr).collect();
    let new: Set<*const Lv> = after.lvs.iter().map(Arc::as_ptr).collect();
    Ok(Delta {
        changed: after
            .lvs
            .iter()
            .filter(|l| !old.contains(&Arc::as_ptr(l)))
            .map(|l| &**l)
            .collect(),
        removed: before
            .lvs
            .iter()
            .filter(|l| !new.contains(&Arc::as_ptr(l)))
            .map(|l| &**l)
            .collect(),
    })
}

/// What the changed LVs hold that no other LV may.
struct Mine<'v> {
    lvs: Vec<Held<'v>>,
    /// A changed LV is a pool metadata spare: the spares are counted.
    spare: bool,
}

/// One changed LV's exclusive things.
struct Held<'v> {
    /// Its position in the VG.
    at: usize,
    lv: &'v Lv,
    lease: Option<u64>,
    /// A thin LV's pool and device id.
    thin: Option<(&'v str, u32)>,
    /// Its areas on PVs.
    extents: Vec<PeRun>,
}

impl<'v> Mine<'v> {
    fn of(vg: &Vg, changed: &[(usize, &'v Lv)]) -> Result<Self, ModelError> {
        let lvs = changed
            .iter()
            .map(|&(at, lv)| {
                Ok(Held {
                    at,
                    lv,
                    lease: lease_of(vg, lv)?,
                    thin: thin_id(lv),
                    extents: extents_of(lv),
                })
            })
            .collect::<Result<_, ModelError>>()?;
        Ok(Self {
            lvs,
            spare: changed.iter().any(|(_, l)| is_spare(l)),
        })
    }

    /// Refuses when `other` (the LV at `at` of the VG) has what a changed LV holds.
    fn against(&self, vg: &Vg, at: usize, other: &Lv) -> Result<(), ModelError> {
        if self.lvs.is_empty() {
            return Ok(());
        }
        let lease = match self.lvs.iter().any(|h| h.lease.is_some()) {
            true => lease_of(vg, other)?,
            false => None,
        };
        let thin = thin_id(other);
        // By position: the same LV at two places is two LVs of one name.
        for h in self.lvs.iter().filter(|h| h.at != at) {
            let at = |field: &str, why: String| Err(err(lv_path(vg, other), field, why));
            if h.lv.name == other.name {
                return at("name", "duplicate LV name".into());
            }
            if h.lv.id == other.id {
                return at("id", format!("duplicate LV id {}", other.id));
            }
            if lease.is_some() && h.lease == lease {
                return at(
                    "lock_args",
                    format!("lease offset {} is used twice", lease.unwrap_or_default()),
                );
            }
            if let (Some((p, i)), Some(mine)) = (thin, h.thin) {
                if (p, i) == mine {
                    return at(
                        "device_id",
                        format!("device_id {i} is used twice in pool {p}"),
                    );
                }
            }
            for seg in &other.segments {
                let len = u64::from(seg.area_len());
                for a in seg.kind.areas() {
                    let Area::Pv { pv, pe } = *a else { continue };
                    let (start, end) = (u64::from(pe), u64::from(pe) + len);
                    if h.extents.iter().any(|x| {
                        let (s, e) = (u64::from(x.pe), u64::from(x.pe) + u64::from(x.len));
                        x.pv == pv && s < end && start < e
                    }) {
                        return Err(err(
                            format!("{}/physical_volumes/pv{pv}", vg.name),
                            "pe_count",
                            format!(
                                "extents of {} and {} overlap near PE {start}",
                                h.lv.name, other.name
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

fn thin_id(lv: &Lv) -> Option<(&str, u32)> {
    match &lv.segments.first()?.kind {
        SegKind::Thin(t) => Some((t.thin_pool.as_str(), t.device_id)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edit::{self, LvSpec};
    use crate::testing::{stamp, vg_in_memory};

    /// A VG of `n` linear LVs of one extent.
    fn vg(n: usize) -> Vg {
        let mut v = vg_in_memory();
        for i in 0..n {
            v = edit::lv::create(
                v,
                &edit::EditCtx::default(),
                &LvSpec::linear(&format!("lv{i}"), 1, stamp()),
            )
            .expect("lv")
            .0;
        }
        v
    }

    /// Each way a change can break the VG is found by the incremental check exactly as by
    /// the full one.
    #[test]
    fn the_incremental_check_finds_what_the_full_check_finds() {
        let before = vg(100);
        type Breakage = (&'static str, Box<dyn Fn(&mut Vg)>);
        let broken: Vec<Breakage> = vec![
            (
                "duplicate name",
                Box::new(|v| v.lv_mut("lv7").expect("lv").name = "lv8".into()),
            ),
            (
                "duplicate id",
                Box::new(|v| {
                    let id = v.lv("lv3").expect("lv").id;
                    v.lv_mut("lv9").expect("lv").id = id;
                }),
            ),
            (
                "overlapping extents",
                Box::new(|v| {
                    let mut lv = (*v.lvs[5]).clone();
                    lv.name = "copy".into();
                    lv.id = crate::uuid::Uuid::random();
                    v.lvs.push(Arc::new(lv));
                }),
            ),
            (
                "unknown reference",
                Box::new(|v| {
                    let lv = v.lv_mut("lv1").expect("lv");
                    lv.segments[0].kind = SegKind::Thin(crate::model::Thin {
                        thin_pool: "nowhere".into(),
                        transaction_id: 0,
                        device_id: 1,
                        origin: None,
                        external_origin: None,
                        merge: None,
                    });
                }),
            ),
            (
                "bad tag",
                Box::new(|v| v.lv_mut("lv2").expect("lv").tags.push("bad tag!".into())),
            ),
            (
                "lease without a lock type",
                Box::new(|v| {
                    v.lv_mut("lv4").expect("lv").lock_args = Some("1.0.0:70254592".into())
                }),
            ),
        ];
        let ix = VgIndex::of(&before);
        for (what, f) in broken {
            let mut after = before.clone();
            f(&mut after);
            assert!(full(&after).is_err(), "{what}: the full check passes it");
            for index in [None, Some(&ix)] {
                let e = check_change(&before, &after, index).expect_err(what);
                assert!(!e.why.is_empty(), "{what}");
            }
        }
        // A good change passes, and so does removing an LV nothing refers to; the index
        // follows each.
        let grown = edit::lv::create(
            before.clone(),
            &edit::EditCtx::default(),
            &LvSpec::linear("new", 2, stamp()),
        )
        .expect("create")
        .0;
        let shrunk = edit::lv::remove(before.clone(), &edit::EditCtx::default(), "lv50", false)
            .expect("remove");
        for after in [grown, shrunk] {
            check_change(&before, &after, None).expect("without the index");
            let d = check_change(&before, &after, Some(&ix)).expect("with the index");
            let change = ix.change(&before, &after, &d.removed, &d.changed);
            let mut next = ix.clone();
            next.apply(change.expect("the same VG fields"));
            assert!(next.same_as(&ix.rebuilt(&after)));
        }
    }
}
