//! ListVolumes from snapshots: the list of every served volume is built once per version of
//! the served VGs and paged from there. A token names the snapshot and a position in it
//! (`<snapshot>.<position>`), so one listing sees one version of the VGs however many pages
//! it takes, and each page costs a slice, not a rebuild.
//!
//! The last [`KEPT`] snapshots are kept: a listing whose snapshot was dropped (the VGs
//! changed that many times meanwhile) gets ABORTED and starts again, as the spec asks for a
//! token that is no longer valid.

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use tonic::Status;

use crate::volume::{Condition, Volume};

/// Snapshots kept for listings in progress.
pub const KEPT: usize = 4;

/// Every served volume with its condition, ordered by id, as of one version of the VGs.
pub struct Listing {
    id: u64,
    /// The seqno of each served VG it was built from.
    versions: Vec<u32>,
    /// The volumes.
    pub entries: Vec<(Volume, Condition)>,
}

/// The snapshots (see the module's documentation).
#[derive(Default)]
pub struct Listings {
    kept: Mutex<(u64, VecDeque<Arc<Listing>>)>,
}

impl Listings {
    /// The snapshot of the VGs at `versions`: the newest one when it was built from them,
    /// else a new one made by `build`.
    pub fn current<E>(
        &self,
        versions: Vec<u32>,
        build: impl FnOnce() -> Result<Vec<(Volume, Condition)>, E>,
    ) -> Result<Arc<Listing>, E> {
        if let Some(l) = self.lock().1.back() {
            if l.versions == versions {
                return Ok(l.clone());
            }
        }
        let entries = build()?;
        let mut kept = self.lock();
        kept.0 += 1;
        let l = Arc::new(Listing {
            id: kept.0,
            versions,
            entries,
        });
        kept.1.push_back(l.clone());
        while kept.1.len() > KEPT {
            kept.1.pop_front();
        }
        Ok(l)
    }

    /// The snapshot a token names with the position it names: ABORTED when the token is not
    /// one this driver gave, or its snapshot is no longer kept.
    pub fn resume(&self, token: &str) -> Result<(Arc<Listing>, usize), Status> {
        let bad = || {
            Status::aborted(format!(
                "starting_token {} is not valid",
                crate::params::shown(token)
            ))
        };
        let (id, pos) = token.split_once('.').ok_or_else(bad)?;
        let (id, pos): (u64, usize) = (
            id.parse().map_err(|_| bad())?,
            pos.parse().map_err(|_| bad())?,
        );
        let l = self
            .lock()
            .1
            .iter()
            .find(|l| l.id == id)
            .cloned()
            .ok_or_else(|| {
                Status::aborted(format!(
                    "starting_token {} names a listing of volumes that changed since: list again from the start",
                    crate::params::shown(token)
                ))
            })?;
        if pos > l.entries.len() {
            return Err(bad());
        }
        Ok((l, pos))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, VecDeque<Arc<Listing>>)> {
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Listing {
    /// The page of at most `max_entries` (0: all) from `start`, and the token of the next
    /// (empty at the end).
    pub fn page(&self, start: usize, max_entries: i32) -> Result<(Range<usize>, String), Status> {
        let max = usize::try_from(max_entries)
            .map_err(|_| Status::invalid_argument("max_entries is negative"))?;
        let len = self.entries.len();
        let end = match max {
            0 => len,
            m => start.saturating_add(m).min(len),
        };
        let next = match end < len {
            true => format!("{}.{end}", self.id),
            false => String::new(),
        };
        Ok((start..end, next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume::Mode;

    fn entries(n: usize) -> Vec<(Volume, Condition)> {
        (0..n)
            .map(|i| {
                let v = Volume {
                    vg: "vg".into(),
                    name: format!("v{i:03}"),
                    mode: Mode::Linear,
                    bytes: 4 << 20,
                };
                let c = Condition {
                    abnormal: false,
                    message: "healthy".into(),
                };
                (v, c)
            })
            .collect()
    }

    #[test]
    fn pages_come_from_one_snapshot_until_it_is_dropped() {
        let ls = Listings::default();
        let built = std::cell::Cell::new(0);
        let build = |n| {
            built.set(built.get() + 1);
            Ok::<_, ()>(entries(n))
        };
        let l = ls.current(vec![7], || build(5)).expect("list");
        let (r, next) = l.page(0, 2).expect("page");
        assert_eq!((r, next.as_str()), (0..2, "1.2"));
        // Same versions: the same snapshot, not rebuilt.
        assert!(Arc::ptr_eq(
            &l,
            &ls.current(vec![7], || build(5)).expect("list")
        ));
        assert_eq!(built.get(), 1);
        // The VG changed: a new snapshot for new listings, the old one for the token.
        let newer = ls.current(vec![8], || build(6)).expect("list");
        assert_eq!(newer.entries.len(), 6);
        let (old, pos) = ls.resume(&next).expect("resume");
        assert_eq!((old.entries.len(), pos), (5, 2));
        let (r, next) = old.page(pos, 2).expect("page");
        assert_eq!((r, next.as_str()), (2..4, "1.4"));
        let (r, next) = old.page(4, 2).expect("page");
        assert_eq!((r, next.as_str()), (4..5, ""));
        // Dropped after KEPT newer versions: ABORTED, start again.
        for v in 0..KEPT as u32 {
            ls.current(vec![100 + v], || build(1)).expect("list");
        }
        let e = ls.resume("1.2").map(|_| ()).expect_err("dropped");
        assert_eq!(e.code(), tonic::Code::Aborted);
        for bad in ["", "x", "1", "1.x", "999.0", "2.99"] {
            let e = ls.resume(bad).map(|_| ()).expect_err(bad);
            assert_eq!(e.code(), tonic::Code::Aborted, "{bad}");
        }
        assert_eq!(
            l.page(0, -1).map(|_| ()).expect_err("negative").code(),
            tonic::Code::InvalidArgument
        );
    }
}
