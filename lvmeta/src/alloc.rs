//! Free-extent maps and lvm2's "normal" allocation policy, as pure functions over the model.
//!
//! The policy, measured against lvm2 2.03.16 (tests in this module replay those runs): walk
//! the PVs in VG order and take each PV's largest free area as a candidate (the lowest one
//! among equals); stop walking as soon as enough candidates can hold the whole request on
//! their own; then use the largest candidates (earlier PV first among equals), each from its
//! start. What is still missing is allocated by the same rule again. So sequential LVs fill
//! the first PV, a hole that fits is reused, and an LV is split only when no area holds it.

use crate::model::extents::{PeRun, UsedMap};
use crate::model::Vg;

/// Allocation failures, with lvm2's wording.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// Fewer free extents in the VG (or the PVs allowed) than asked for.
    #[error(
        "Volume group \"{vg}\" has insufficient free space ({free} extents): {needed} required."
    )]
    NoSpace {
        /// VG name.
        vg: String,
        /// Free extents where allocation was allowed.
        free: u64,
        /// Extents asked for.
        needed: u64,
    },
    /// Enough extents in total, but not in the shape asked for (stripes on distinct PVs).
    #[error("Insufficient suitable allocatable extents for logical volume {lv}: {missing} more required")]
    Unsuitable {
        /// LV name.
        lv: String,
        /// Extents that could not be placed.
        missing: u64,
    },
}

/// The free areas of every PV of a VG, each list sorted by PE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreeMap {
    free: Vec<Vec<(u32, u32)>>,
}

impl FreeMap {
    /// The free areas of `vg` whose held extents are `used` (PVs marked not allocatable have
    /// none), without the `reserved` ones.
    pub fn of(vg: &Vg, used: &UsedMap, reserved: &[PeRun]) -> Self {
        let free = vg
            .pvs
            .iter()
            .zip(used.runs())
            .map(|(pv, used)| {
                if !pv.status.iter().any(|s| s == "ALLOCATABLE") || pv.is_marked_missing() {
                    return Vec::new();
                }
                let mut out = Vec::new();
                let mut next = 0u32;
                for &(pe, len) in used {
                    if pe > next {
                        out.push((next, pe - next));
                    }
                    next = next.max(pe.saturating_add(len));
                }
                if pv.pe_count > next {
                    out.push((next, pv.pe_count - next));
                }
                out
            })
            .collect();
        let mut map = Self { free };
        // Extents an earlier change of a group freed are still their old owners' on disk.
        map.reserve(reserved);
        map
    }

    /// Free extents on the PVs in `allowed` (all PVs when `None`).
    pub fn free_count(&self, allowed: Option<&[usize]>) -> u64 {
        self.pvs(allowed)
            .map(|pv| self.free[pv].iter().map(|a| u64::from(a.1)).sum::<u64>())
            .sum()
    }

    fn pvs<'s>(&'s self, allowed: Option<&'s [usize]>) -> impl Iterator<Item = usize> + 's {
        (0..self.free.len()).filter(move |pv| allowed.is_none_or(|a| a.contains(pv)))
    }

    /// The largest free area of `pv` (lowest PE among equals).
    fn largest(&self, pv: usize) -> Option<PeRun> {
        let mut best: Option<PeRun> = None;
        for &(pe, len) in &self.free[pv] {
            if best.is_none_or(|b| len > b.len) {
                best = Some(PeRun { pv, pe, len });
            }
        }
        best
    }

    /// Length of the free run that starts exactly at `pe` of `pv` (0 if `pe` is not free or
    /// not the start of a free area's remaining part).
    pub fn run_at(&self, pv: usize, pe: u32) -> u32 {
        self.free.get(pv).map_or(0, |areas| {
            areas
                .iter()
                .find(|&&(start, len)| start <= pe && pe < start + len)
                .map_or(0, |&(start, len)| start + len - pe)
        })
    }

    /// Marks every piece used.
    pub fn reserve(&mut self, pieces: &[PeRun]) {
        for e in pieces {
            self.take(*e);
        }
    }

    /// Marks `e` used.
    fn take(&mut self, e: PeRun) {
        let areas = &mut self.free[e.pv];
        if let Some(i) = areas
            .iter()
            .position(|&(pe, len)| pe <= e.pe && e.pe + e.len <= pe + len)
        {
            let (pe, len) = areas[i];
            let mut repl = Vec::with_capacity(2);
            if e.pe > pe {
                repl.push((pe, e.pe - pe));
            }
            if e.pe + e.len < pe + len {
                repl.push((e.pe + e.len, pe + len - e.pe - e.len));
            }
            areas.splice(i..=i, repl);
        }
    }

    /// Allocates `stripes` parallel areas of `per_stripe` extents each on distinct PVs (one
    /// stripe is a linear LV), by lvm2's normal policy. Returns the pieces in LE order, each
    /// one `PeRun` per stripe. Nothing changes on failure.
    pub fn allocate(
        &mut self,
        vg: &str,
        lv: &str,
        stripes: u32,
        per_stripe: u32,
        allowed: Option<&[usize]>,
    ) -> Result<Vec<Vec<PeRun>>, AllocError> {
        let needed = u64::from(stripes) * u64::from(per_stripe);
        let free = self.free_count(allowed);
        if needed > free {
            return Err(AllocError::NoSpace {
                vg: vg.to_owned(),
                free,
                needed,
            });
        }
        let mut trial = self.clone();
        let mut pieces = Vec::new();
        let mut left = per_stripe;
        let n = stripes as usize;
        while left > 0 {
            let mut cands: Vec<PeRun> = Vec::new();
            for pv in trial.pvs(allowed) {
                if let Some(a) = trial.largest(pv) {
                    cands.push(a);
                    if cands.iter().filter(|c| c.len >= left).count() >= n {
                        break;
                    }
                }
            }
            if cands.len() < n {
                return Err(AllocError::Unsuitable {
                    lv: lv.to_owned(),
                    missing: u64::from(left) * u64::from(stripes),
                });
            }
            // Stable: among equal sizes the earlier PV stays first.
            cands.sort_by_key(|c| std::cmp::Reverse(c.len));
            cands.truncate(n);
            let len = cands.iter().map(|c| c.len).min().unwrap_or(0).min(left);
            let piece: Vec<PeRun> = cands.iter().map(|c| PeRun { len, ..*c }).collect();
            for e in &piece {
                trial.take(*e);
            }
            pieces.push(piece);
            left -= len;
        }
        *self = trial;
        Ok(pieces)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edit::{LvSpec, NewPv, VgSpec};
    use crate::model::{Area, SegKind, Segment, Striped};
    use crate::testing::stamp;

    /// A VG with PVs of the given PE counts (4 MiB extents) and no LVs.
    fn vg(pe_counts: &[u32]) -> Vg {
        let pvs: Vec<NewPv> = pe_counts
            .iter()
            .enumerate()
            .map(|(i, n)| NewPv {
                id: crate::uuid::Uuid::random(),
                device: format!("/dev/pv{i}"),
                dev_size: crate::units::Bytes((1 << 20) + u64::from(*n) * (4 << 20)),
                pe_start: crate::units::Bytes(1 << 20),
                tail: crate::units::Bytes(0),
                bootloader: None,
            })
            .collect();
        let spec = VgSpec {
            name: "vg".into(),
            extent_size: 8192,
            tags: Vec::new(),
            shared: None,
        };
        crate::edit::vg::create(&spec, &pvs, &stamp()).expect("valid")
    }

    fn free(vg: &Vg) -> FreeMap {
        FreeMap::of(vg, &UsedMap::of(vg), &[])
    }

    fn add(vg: &mut Vg, name: &str, pieces: &[Vec<PeRun>]) {
        let mut segs = Vec::new();
        let mut le = 0;
        for p in pieces {
            segs.push(Segment {
                start_extent: le,
                extent_count: p[0].len * p.len() as u32,
                reshape_count: None,
                data_copies: None,
                type_flags: Vec::new(),
                tags: Vec::new(),
                kind: SegKind::Striped(Striped {
                    stripe_size: (p.len() > 1).then_some(128),
                    areas: p.iter().map(|e| Area::Pv { pv: e.pv, pe: e.pe }).collect(),
                }),
            });
            le += p[0].len * p.len() as u32;
        }
        let mut lv = crate::edit::parts::new_lv(name, &LvSpec::linear(name, 1, stamp()), true);
        lv.segments = segs;
        vg.lvs.push(std::sync::Arc::new(lv));
    }

    fn create(vg: &mut Vg, name: &str, n: u32) -> Vec<Vec<PeRun>> {
        let p = free(vg).allocate("vg", name, 1, n, None).expect("fits");
        add(vg, name, &p);
        p
    }

    fn at(pv: usize, pe: u32, len: u32) -> Vec<PeRun> {
        vec![PeRun { pv, pe, len }]
    }

    #[test]
    fn replays_lvm2_linear_choices() {
        // Two PVs of 15 PEs: l1..l3 of 5, remove l2, l4 of 3, l5 of 10 (lvm2 2.03.16).
        let mut v = vg(&[15, 15]);
        assert_eq!(create(&mut v, "l1", 5), vec![at(0, 0, 5)]);
        assert_eq!(create(&mut v, "l2", 5), vec![at(0, 5, 5)]);
        assert_eq!(create(&mut v, "l3", 5), vec![at(0, 10, 5)]);
        v.lvs.retain(|l| l.name != "l2");
        assert_eq!(create(&mut v, "l4", 3), vec![at(0, 5, 3)]);
        assert_eq!(create(&mut v, "l5", 10), vec![at(1, 0, 10)]);
    }

    #[test]
    fn replays_lvm2_hole_choices() {
        // Holes of 2 (PE 0), 4 (PE 5) and 3 (PE 12) on a full 33-PE PV, a 15-PE PV beside.
        let mut v = vg(&[33, 15]);
        for (name, n) in [
            ("x", 2),
            ("k1", 3),
            ("y", 4),
            ("k2", 3),
            ("z", 3),
            ("k3", 18),
        ] {
            create(&mut v, name, n);
        }
        v.lvs
            .retain(|l| !["x", "y", "z"].contains(&l.name.as_str()));
        assert_eq!(create(&mut v, "t3", 3), vec![at(0, 5, 3)]);
        assert_eq!(create(&mut v, "t2", 2), vec![at(0, 12, 2)]);
        let err = free(&v).allocate("vg", "big", 1, 20, None);
        assert_eq!(
            err,
            Err(AllocError::NoSpace {
                vg: "vg".into(),
                free: 19,
                needed: 20
            })
        );
        assert_eq!(create(&mut v, "spl", 12), vec![at(1, 0, 12)]);
        // Nothing holds 5 now: split, largest piece first.
        assert_eq!(create(&mut v, "sp2", 5), vec![at(1, 12, 3), at(0, 0, 2)]);
    }

    #[test]
    fn freed_extents_are_what_a_change_gave_back() {
        let mut before = vg(&[100, 50]);
        add(&mut before, "a", &[at(0, 0, 10)]);
        add(&mut before, "b", &[at(0, 10, 5), at(1, 0, 20)]);
        add(&mut before, "c", &[at(0, 15, 30)]);
        let used = UsedMap::of(&before);
        let mut after = before.clone();
        after.lvs.retain(|l| l.name != "b");
        assert_eq!(
            used.freed_in(&UsedMap::of(&after)),
            vec![
                PeRun {
                    pv: 0,
                    pe: 10,
                    len: 5
                },
                PeRun {
                    pv: 1,
                    pe: 0,
                    len: 20
                }
            ]
        );
        // A new LV over part of what was freed keeps that part.
        add(&mut after, "d", &[at(1, 5, 10)]);
        assert_eq!(
            used.freed_in(&UsedMap::of(&after)),
            vec![
                PeRun {
                    pv: 0,
                    pe: 10,
                    len: 5
                },
                PeRun {
                    pv: 1,
                    pe: 0,
                    len: 5
                },
                PeRun {
                    pv: 1,
                    pe: 15,
                    len: 5
                }
            ]
        );
        assert!(used.freed_in(&UsedMap::of(&before)).is_empty());
    }

    #[test]
    fn a_pv_marked_missing_gets_nothing() {
        let mut v = vg(&[15, 15]);
        v.pvs[0].flags.push(crate::model::word("MISSING"));
        assert_eq!(create(&mut v, "l1", 5), vec![at(1, 0, 5)]);
        assert_eq!(free(&v).free_count(None), 10);
    }

    #[test]
    fn stripes_need_distinct_pvs() {
        let mut v = vg(&[10, 10]);
        let p = free(&v).allocate("vg", "s", 2, 4, None).expect("fits");
        assert_eq!(
            p,
            vec![vec![
                PeRun {
                    pv: 0,
                    pe: 0,
                    len: 4
                },
                PeRun {
                    pv: 1,
                    pe: 0,
                    len: 4
                }
            ]]
        );
        add(&mut v, "s", &p);
        create(&mut v, "fill", 6);
        // 6 free extents, all on PV 1: two stripes cannot be placed.
        assert!(matches!(
            free(&v).allocate("vg", "s2", 2, 1, None),
            Err(AllocError::Unsuitable { .. })
        ));
        // A PV list is honoured.
        let p = free(&v)
            .allocate("vg", "only1", 1, 2, Some(&[1]))
            .expect("fits");
        assert_eq!(p, vec![at(1, 4, 2)]);
        assert!(free(&v).allocate("vg", "only0", 1, 1, Some(&[0])).is_err());
    }
}
