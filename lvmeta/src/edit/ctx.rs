//! What an edit is told about the commit it is part of.
//!
//! - A standalone edit ([`EditCtx::default`]) checks every invariant itself and may hand
//!   out any free extent or lease slot.
//! - An edit of a group commit ([`EditCtx::in_group`]) leaves the checks to its caller, does
//!   not hand out what earlier changes of the group freed, and finds names and free extents
//!   through the index of the version the group started from.

use std::sync::Arc;

use crate::alloc::FreeMap;
use crate::model::extents::{PeRun, UsedMap};
use crate::model::index::Indexed;
use crate::model::{validate, Area, Lv, Vg};

/// The context an edit runs in; see the module documentation.
#[derive(Debug, Clone, Default)]
pub struct EditCtx {
    /// The version the edit starts from, indexed.
    base: Option<Arc<Indexed>>,
    /// What earlier changes of the group freed.
    reserved: Reserved,
    /// Who runs the checks of [`super::check`].
    checks: Checks,
    /// Byte alignment of sanlock leases in `lvmlock` (`None`: 1 MiB).
    lease_align: Option<u64>,
}

/// Who checks the VG an edit returns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Checks {
    /// The edit itself, every invariant.
    #[default]
    All,
    /// The caller (the session, once per change, with [`validate::check_change`]).
    ByCaller,
}

impl EditCtx {
    /// An edit of its own: every check, nothing reserved, no index.
    pub fn standalone() -> Self {
        Self::default()
    }

    /// One change of a group commit that started from `base`:
    /// - the checks of [`super::check`] are left to the caller, which must check the VG the
    ///   edit returns: an edit of several steps is checked once, in work proportional to
    ///   what it changed;
    /// - lease slots and extents in `reserved` are not allocated;
    /// - names and free extents are found through `base`'s index.
    pub fn in_group(base: Arc<Indexed>, reserved: Reserved) -> Self {
        Self {
            base: Some(base),
            reserved,
            checks: Checks::ByCaller,
            lease_align: None,
        }
    }

    /// The same, with leases aligned as lvmlockd aligns them on the VG's lease device
    /// (`lease::layout::Geometry`): 1 MiB on 512-byte sectors, 8 MiB on 4K ones.
    pub fn with_lease_align(self, align: u64) -> Self {
        Self {
            lease_align: Some(align),
            ..self
        }
    }

    /// Byte alignment of new leases in `lvmlock`.
    pub fn lease_align(&self) -> u64 {
        self.lease_align
            .unwrap_or(crate::lease::layout::LEASE_ALIGN)
    }

    /// Whether [`super::check`] runs every check.
    pub(crate) fn checks_all(&self) -> bool {
        self.checks == Checks::All
    }

    /// Whether `vg` certainly has no LV named `name`, known through the index of the
    /// version the edit started from (`false`: look).
    pub fn lacks_lv(&self, vg: &Vg, name: &str) -> bool {
        self.base.as_ref().is_some_and(|b| b.lacks(vg, name))
    }

    /// [`UsedMap::of`] `vg`, through the index of the version the edit started from when
    /// `vg` is a small change of it.
    pub fn used(&self, vg: &Vg) -> UsedMap {
        self.base
            .as_ref()
            .and_then(|b| b.used_of(vg))
            .unwrap_or_else(|| UsedMap::of(vg))
    }

    /// The extents of `vg` this edit may allocate.
    pub fn free_map(&self, vg: &Vg) -> FreeMap {
        FreeMap::of(vg, &self.used(vg), &self.reserved.extents)
    }

    /// Lease offsets this edit must not hand out.
    pub fn reserved_leases(&self) -> &[u64] {
        &self.reserved.leases
    }
}

/// What earlier changes of a group commit freed and the group has not committed yet: an
/// edit must not hand these out again, since their old owners are on disk until the commit
/// (a lease slot would be re-initialised, then freed as the old owner's; extents would be
/// zeroed for a new LV before the commit that frees them).
#[derive(Debug, Clone, Default)]
pub struct Reserved {
    /// Lease offsets in `lvmlock`.
    pub leases: Vec<u64>,
    /// Extents on the PVs.
    pub extents: Vec<PeRun>,
}

impl Reserved {
    /// Adds what `delta` freed: the lease slots and extents of the LVs it removed (or the
    /// old copies of those it replaced) that its new LVs do not hold.
    pub fn add_freed(&mut self, delta: &validate::Delta<'_, '_>) {
        let offset = |l: &Lv| crate::lease::layout::lease_offset(l.lock_args.as_deref()?);
        let kept: Vec<u64> = delta.changed.iter().filter_map(|l| offset(l)).collect();
        self.leases.extend(
            delta
                .removed
                .iter()
                .filter_map(|l| offset(l))
                .filter(|o| !kept.contains(o)),
        );
        let areas = |l: &Lv| -> Vec<(usize, u32, u32)> {
            l.segments
                .iter()
                .flat_map(|s| {
                    let len = s.area_len();
                    s.kind.areas().iter().filter_map(move |a| match a {
                        Area::Pv { pv, pe } => Some((*pv, *pe, pe.saturating_add(len))),
                        Area::Lv { .. } => None,
                    })
                })
                .collect()
        };
        let now: Vec<(usize, u32, u32)> = delta.changed.iter().flat_map(|l| areas(l)).collect();
        for (pv, start, end) in delta.removed.iter().flat_map(|l| areas(l)) {
            // The parts of [start, end) no new LV holds.
            let mut pieces = vec![(start, end)];
            for &(_, s, e) in now.iter().filter(|a| a.0 == pv) {
                pieces = pieces
                    .into_iter()
                    .flat_map(|(a, b)| [(a, b.min(s)), (a.max(e), b)])
                    .filter(|(a, b)| a < b)
                    .collect();
            }
            self.extents
                .extend(pieces.into_iter().map(|(pe, end)| PeRun {
                    pv,
                    pe,
                    len: end - pe,
                }));
        }
    }
}
