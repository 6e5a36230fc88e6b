//! Runs of physical extents and the map of the ones a VG's LVs hold.
//!
//! - A [`PeRun`] is `len` PEs of one PV from `pe` on; `len` may be zero.
//! - A [`UsedMap`] keeps, per PV, sorted runs that neither overlap nor touch.

use crate::model::{Area, Lv, Vg};

/// A run of free or allocated extents on one PV.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeRun {
    /// Index of the PV in the VG.
    pub pv: usize,
    /// First PE.
    pub pe: u32,
    /// Number of PEs.
    pub len: u32,
}

/// (PV, first PE, length) of each of `lv`'s areas on PVs, zero-length ones included.
pub fn extents_of(lv: &Lv) -> Vec<PeRun> {
    lv.segments
        .iter()
        .flat_map(|seg| {
            let len = seg.area_len();
            seg.kind.areas().iter().filter_map(move |a| match *a {
                Area::Pv { pv, pe } => Some(PeRun { pv, pe, len }),
                Area::Lv { .. } => None,
            })
        })
        .collect()
}

/// The allocated extents of every PV of a VG: sorted, merged runs (PE, length) per PV.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsedMap {
    used: Vec<Vec<(u32, u32)>>,
}

impl UsedMap {
    /// The extents the LVs of `vg` hold, on every PV (allocatable or not).
    pub fn of(vg: &Vg) -> Self {
        let mut used: Vec<Vec<(u32, u32)>> = vec![Vec::new(); vg.pvs.len()];
        for lv in &vg.lvs {
            for seg in &lv.segments {
                for a in seg.kind.areas() {
                    // A zero-length area holds nothing.
                    if let (Area::Pv { pv, pe }, 1..) = (a, seg.area_len()) {
                        if let Some(u) = used.get_mut(*pv) {
                            u.push((*pe, seg.area_len()));
                        }
                    }
                }
            }
        }
        for runs in &mut used {
            runs.sort_unstable();
            let mut merged: Vec<(u32, u32)> = Vec::with_capacity(runs.len());
            for &(pe, len) in runs.iter() {
                match merged.last_mut() {
                    Some((p, l)) if pe <= p.saturating_add(*l) => {
                        *l = (*l).max(pe.saturating_add(len) - *p);
                    }
                    _ => merged.push((pe, len)),
                }
            }
            *runs = merged;
        }
        Self { used }
    }

    /// The runs (PE, length) of each PV, in VG order.
    pub(crate) fn runs(&self) -> impl Iterator<Item = &[(u32, u32)]> {
        self.used.iter().map(Vec::as_slice)
    }

    /// Marks `e` held and returns true when none of it was; false (nothing changed) when
    /// some of it is held already.
    pub fn take_free(&mut self, e: PeRun) -> bool {
        let Some(runs) = self.used.get_mut(e.pv) else {
            return false;
        };
        let end = e.pe.saturating_add(e.len);
        let i = runs.partition_point(|&(pe, _)| pe < end);
        if i > 0 && runs[i - 1].0.saturating_add(runs[i - 1].1) > e.pe {
            return false;
        }
        runs.insert(i, (e.pe, e.len));
        true
    }

    /// Marks `e` held (merged with the runs it touches), whether or not some of it was.
    pub fn take(&mut self, e: PeRun) {
        let Some(runs) = self.used.get_mut(e.pv).filter(|_| e.len > 0) else {
            return;
        };
        let (mut start, mut end) = (e.pe, e.pe.saturating_add(e.len));
        // The runs that overlap or touch [start, end): merged into one.
        let first = runs.partition_point(|&(pe, len)| pe.saturating_add(len) < start);
        let last = runs.partition_point(|&(pe, _)| pe <= end);
        if first < last {
            start = start.min(runs[first].0);
            end = end.max(runs[last - 1].0.saturating_add(runs[last - 1].1));
        }
        runs.splice(first..last, [(start, end - start)]);
    }

    /// Marks `e` free (the runs it covers split or shortened).
    pub fn release(&mut self, e: PeRun) {
        let Some(runs) = self.used.get_mut(e.pv) else {
            return;
        };
        let (start, end) = (e.pe, e.pe.saturating_add(e.len));
        let first = runs.partition_point(|&(pe, len)| pe.saturating_add(len) <= start);
        let last = runs.partition_point(|&(pe, _)| pe < end);
        if first >= last {
            return;
        }
        let (lo, hi) = (
            runs[first].0,
            runs[last - 1].0.saturating_add(runs[last - 1].1),
        );
        let mut keep = Vec::with_capacity(2);
        if lo < start {
            keep.push((lo, start - lo));
        }
        if end < hi {
            keep.push((end, hi - end));
        }
        runs.splice(first..last, keep);
    }

    /// Whether any of `e` is held.
    pub fn overlaps(&self, e: PeRun) -> bool {
        let Some(runs) = self.used.get(e.pv) else {
            return false;
        };
        let end = e.pe.saturating_add(e.len);
        let i = runs.partition_point(|&(pe, len)| pe.saturating_add(len) <= e.pe);
        runs.get(i).is_some_and(|&(pe, _)| pe < end)
    }

    /// The extents held here that `now` (the map of the same VG after a change) no longer
    /// holds, in PV and PE order.
    pub fn freed_in(&self, now: &UsedMap) -> Vec<PeRun> {
        let mut out = Vec::new();
        for (pv, runs) in self.used.iter().enumerate() {
            let kept = now.used.get(pv).map_or(&[][..], Vec::as_slice);
            for &(pe, len) in runs {
                subtract(pv, pe, pe.saturating_add(len), kept, &mut out);
            }
        }
        out
    }
}

/// Pushes the parts of extents `[start, end)` of `pv` that no run of `kept` (sorted, merged)
/// covers.
fn subtract(pv: usize, start: u32, end: u32, kept: &[(u32, u32)], out: &mut Vec<PeRun>) {
    let mut at = start;
    // The first run that could overlap: the last one starting at or before `start`.
    let from = kept
        .partition_point(|&(pe, _)| pe <= start)
        .saturating_sub(1);
    for &(pe, len) in &kept[from..] {
        let run_end = pe.saturating_add(len);
        if pe >= end {
            break;
        }
        if run_end <= at {
            continue;
        }
        if pe > at {
            out.push(PeRun {
                pv,
                pe: at,
                len: pe - at,
            });
        }
        at = at.max(run_end);
    }
    if at < end {
        out.push(PeRun {
            pv,
            pe: at,
            len: end - at,
        });
    }
}
