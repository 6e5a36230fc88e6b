//! Changes to a VG, as pure functions over the model: what `vgcreate`, `lvcreate`, `lvremove`
//! and the other verbs decide before anything is written. Each takes a [`Vg`] and returns it
//! changed (or an [`EditError`], the VG untouched); [`crate::session`] adds the I/O around them.
//!
//! Every edit ends in [`finish`]: seqno + 1 and every check lvm2 makes on write.

pub mod lv;
pub mod slots;
pub mod thin;
pub mod vg;

pub use lv::{LvChange, LvSpec, Permission};
pub use thin::{PoolSpec, ThinSpec};
pub use vg::{NewPv, SharedVg, VgSpec};

use crate::alloc::AllocError;
use std::sync::Arc;

use crate::model::extents::UsedMap;
use crate::model::index::Indexed;
use crate::model::{validate, ModelError, Vg};
use crate::names::NameError;

/// When and where a change is made (an LV's `creation_time` and `creation_host`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stamp {
    /// Seconds since the epoch.
    pub time: u64,
    /// The host name.
    pub host: String,
}

impl Stamp {
    /// Now, on this host.
    pub fn now() -> Self {
        let time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_default();
        Self { time, host }
    }
}

/// Why a change was refused. Nothing has been changed or written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// A name breaks lvm2's rules.
    #[error(transparent)]
    Name(#[from] NameError),
    /// The name is taken.
    #[error("{what} \"{name}\" already exists in volume group \"{vg}\"")]
    Exists {
        /// "Logical Volume", "Physical volume".
        what: &'static str,
        /// The name.
        name: String,
        /// The VG.
        vg: String,
    },
    /// No such LV.
    #[error("Failed to find logical volume \"{vg}/{lv}\"")]
    NoLv {
        /// VG name.
        vg: String,
        /// LV name.
        lv: String,
    },
    /// Not enough room, or not in the shape asked for.
    #[error(transparent)]
    Alloc(#[from] AllocError),
    /// An option value lvm2 would refuse.
    #[error("{option}: {why}")]
    Option {
        /// The option (`-I`, `--chunksize`, ...).
        option: &'static str,
        /// What is wrong.
        why: String,
    },
    /// The change is not allowed on this object as it is.
    #[error("{object}: {why}")]
    Refused {
        /// The VG, LV or PV concerned.
        object: String,
        /// Why.
        why: String,
    },
    /// The result would break an invariant lvm2 checks (a bug if ever seen).
    #[error("the changed metadata fails validation: {0}")]
    Invalid(#[from] ModelError),
}

/// An edit refused: `object` cannot be changed so, for the reason `why`.
pub fn refused(object: impl Into<String>, why: impl Into<String>) -> EditError {
    EditError::Refused {
        object: object.into(),
        why: why.into(),
    }
}

/// Ends every edit: seqno + 1, then every invariant lvm2 checks on read and on write
/// (unless [`in_group`] leaves them to its caller).
pub fn finish(vg: &mut Vg) -> Result<(), EditError> {
    vg.seqno = vg.seqno.checked_add(1).ok_or_else(|| {
        refused(
            vg.name.clone(),
            "seqno would overflow; run vgck --updatemetadata",
        )
    })?;
    if !DEFERRED.get() {
        validate::check_read(vg)?;
        validate::check_write(vg)?;
    }
    Ok(())
}

thread_local! {
    /// Set while [`in_group`] runs on this thread.
    static DEFERRED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The group [`in_group`] runs an edit of on this thread.
    static GROUP: std::cell::RefCell<Group> = std::cell::RefCell::default();
}

/// What an edit of a group commit is told about its group (see [`in_group`]).
#[derive(Debug, Clone, Default)]
pub struct Group {
    /// What earlier changes of the group freed.
    pub reserved: Reserved,
    /// The version the edit starts from, indexed: lookups and allocations in the edit's
    /// versions (small changes of it) go through the index instead of every LV.
    pub base: Option<Arc<Indexed>>,
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
    pub extents: Vec<crate::model::extents::PeRun>,
}

impl Reserved {
    /// Adds what `delta` freed: the lease slots and extents of the LVs it removed (or the
    /// old copies of those it replaced) that its new LVs do not hold.
    pub fn add_freed(&mut self, delta: &validate::Delta<'_, '_>) {
        let offset =
            |l: &crate::model::Lv| crate::lease::layout::lease_offset(l.lock_args.as_deref()?);
        let kept: Vec<u64> = delta.changed.iter().filter_map(|l| offset(l)).collect();
        self.leases.extend(
            delta
                .removed
                .iter()
                .filter_map(|l| offset(l))
                .filter(|o| !kept.contains(o)),
        );
        let areas = |l: &crate::model::Lv| -> Vec<(usize, u32, u32)> {
            l.segments
                .iter()
                .flat_map(|s| {
                    let len = s.area_len();
                    s.kind.areas().iter().filter_map(move |a| match a {
                        crate::model::Area::Pv { pv, pe } => {
                            Some((*pv, *pe, pe.saturating_add(len)))
                        }
                        crate::model::Area::Lv { .. } => None,
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
            self.extents.extend(
                pieces
                    .into_iter()
                    .map(|(pe, end)| crate::model::extents::PeRun {
                        pv,
                        pe,
                        len: end - pe,
                    }),
            );
        }
    }
}

/// Runs `f`, an edit, as one change of a group commit:
/// - the checks of [`finish`] are left to the caller, which must check the VG `f` returns
///   (the session does, once per change, with [`validate::check_change`]): an edit of
///   several steps is checked once, in work proportional to what it changed;
/// - lease slots and extents in `group.reserved` are not allocated;
/// - names and free extents are found through `group.base`'s index.
pub fn in_group<T>(group: Group, f: impl FnOnce() -> T) -> T {
    /// Puts the state back, also when `f` panics.
    struct Restore(bool, Group);
    impl Drop for Restore {
        fn drop(&mut self) {
            DEFERRED.set(self.0);
            GROUP.replace(std::mem::take(&mut self.1));
        }
    }
    let _restore = Restore(DEFERRED.replace(true), GROUP.replace(group));
    f()
}

/// The reservations of the group this thread's edit is part of (see [`in_group`]).
pub(crate) fn reserved<T>(f: impl FnOnce(&Reserved) -> T) -> T {
    GROUP.with(|g| f(&g.borrow().reserved))
}

/// The version this thread's edit started from, with its index, if it runs in a group.
pub(crate) fn base() -> Option<Arc<Indexed>> {
    GROUP.with(|g| g.borrow().base.clone())
}

/// [`UsedMap::of`], through the index of the version the running edit started from when
/// `vg` is a small change of it ([`in_group`]).
pub fn used_of_version(vg: &Vg) -> UsedMap {
    base()
        .and_then(|b| b.used_of(vg))
        .unwrap_or_else(|| UsedMap::of(vg))
}

/// Whether `vg` certainly has no LV named `name`, known through the index of the version
/// this thread's edit started from (`false`: look).
pub fn lacks_lv(vg: &Vg, name: &str) -> bool {
    base().is_some_and(|b| b.lacks(vg, name))
}
