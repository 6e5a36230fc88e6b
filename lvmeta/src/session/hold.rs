//! One command's VG: lvm2's file lock of it taken once and kept for the session, so that
//! the VG is read once (what the `lvmeta` command does; see [`Session::hold`]).
//! - While held, reads of the VG start from the cached scan: it was made under the lock, or
//!   published by this session's own commit.
//! - One VG at a time: two commands holding two VGs in opposite orders cannot deadlock.

use std::sync::Arc;

use super::Session;
use crate::lockfile::Resource;
use crate::scan::Scan;
use crate::Error;

impl Session {
    /// Takes lvm2's file lock of VG `vg` and keeps it until the session ends or another VG
    /// is held (one command's VG, as lvm2 does): the VG is then read once, and the changes
    /// of a VG without leases start from that read instead of checking the devices again.
    /// - Drops the cached scan: the next read is made under the lock.
    /// - A VG with leases is still read again under its lease (another host may write it).
    /// - Returns false when `vg` was already held (nothing read or locked).
    /// - For a command's one thread: a change another thread makes in the held VG would run
    ///   without the file lock once this session holds another VG.
    pub fn hold(&self, vg: &str) -> Result<bool, Error> {
        // The whole swap under the mutex: two callers cannot both lock the file.
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if held.as_ref().is_some_and(|(n, _)| n == vg) {
            return Ok(false);
        }
        *held = None;
        let lock = match &self.lock_dir {
            Some(dir) => Some(
                crate::lockfile::lock(dir, &Resource::Vg(vg.to_owned()), true).map_err(
                    |source| Error::Lock {
                        path: dir.display().to_string(),
                        source,
                    },
                )?,
            ),
            None => None,
        };
        // Forgotten before the VG counts as held: no scan from before the lock is trusted.
        self.forget();
        *held = Some((vg.to_owned(), lock));
        Ok(true)
    }

    /// Gives back the file lock [`Session::hold`] keeps, if any: for work that may take
    /// long and needs no VG lock (joining a lockspace), so that local commands do not wait.
    pub fn unhold(&self) {
        *self.held.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// Whether this session keeps `vg`'s file lock ([`Session::hold`]).
    pub(super) fn holds(&self, vg: &str) -> bool {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(|(n, _)| n == vg)
    }

    /// The scan that reads of `vg` start from: while `vg` is held, the cached scan as it is
    /// (made under the lock, or published by this session's own commit); else
    /// [`Session::current`].
    pub(super) fn cached_for(&self, vg: &str) -> Arc<Scan> {
        if self.holds(vg) {
            if let Some(c) = self.cache.lock().unwrap_or_else(|p| p.into_inner()).clone() {
                return c;
            }
        }
        self.current()
    }

    /// The scan this session works from (cached while the devices match it), with its
    /// warnings when it was read from the devices.
    pub fn cached_scan(&self) -> Arc<Scan> {
        self.current()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use crate::edit::{self, LvSpec};
    use crate::testing::{session_with_vg, stamp};

    /// Whether another process could take VG `vg`'s file lock in `dir` now.
    fn free(dir: &std::path::Path, vg: &str) -> bool {
        // A released lock's file is removed, as lvm2 removes it.
        std::fs::File::open(dir.join(format!("V_{vg}"))).map_or(true, |f| f.try_lock().is_ok())
    }

    #[test]
    fn a_held_vg_stays_locked_and_changes_without_waiting_for_itself() {
        let dir = std::env::temp_dir().join(format!("lvmeta-hold-{}", std::process::id()));
        let s = session_with_vg(1).with_lock_dir(dir.clone());
        assert!(s.hold("vg").expect("hold"));
        assert!(!s.hold("vg").expect("hold again"), "already held");
        assert!(
            !free(&dir, "vg"),
            "the lock is kept between reads and changes"
        );
        // The change takes the lock this session holds: it must not wait for itself.
        let (tx, rx) = mpsc::channel();
        std::thread::scope(|t| {
            t.spawn(|| {
                let spec = LvSpec::linear("a", 1, stamp());
                let made = s.update("vg", "lvcreate", |v, ctx| edit::lv::create(v, ctx, &spec));
                tx.send(made.map_err(|e| e.to_string())).expect("send");
            });
            let made = rx
                .recv_timeout(Duration::from_secs(30))
                .expect("no self-deadlock");
            assert_eq!(made.as_deref(), Ok("a"));
        });
        assert!(
            s.vg("vg").expect("vg").lv("a").is_some(),
            "reads see the commit"
        );
        assert!(!free(&dir, "vg"), "still held after the commit");
        // Holding another VG gives the first one back.
        assert!(s.hold("other").expect("hold other"));
        assert!(free(&dir, "vg"));
        assert!(!free(&dir, "other"));
        s.unhold();
        assert!(free(&dir, "other"), "given back");
        assert!(s.hold("other").expect("hold other again"), "held anew");
        drop(s);
        assert!(free(&dir, "other"), "released with the session");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
