//! VG leases kept for a moment after use, so that back-to-back changes on this host pay one
//! sanlock acquire (a paxos ballot, 5-7 ms) instead of one each.
//!
//! lvmlockd releases the VG lease at the end of every command. With [`Linger::idle`] zero
//! (the default) lvmeta does the same. With a non-zero `idle`, an exclusive VG lease given back
//! stays held for `idle`; a change (or a read) that comes within that time reuses it, and a
//! releaser thread gives it back to sanlock once it has been unused for `idle`. `max_hold`
//! bounds how long one acquire is reused, so a busy host still lets the lease go and other
//! hosts (lvmlockd hosts retry once a second) get their turn. Holding the lease longer is
//! safe: nobody else can change the VG meanwhile, and the value block, which tells lvmlockd
//! hosts the new seqno, is written when sanlock finally releases it.
//!
//! Shared leases (reads) are never kept: they would hold other hosts' changes back.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{LeaseError, LeaseManager, Lvb, Mode, ResourceSpec};

/// The VG leases this host holds through one [`super::Host`] (and its clones). Dropping the
/// last clone releases every lease kept.
pub(super) struct Linger {
    shared: Arc<Shared>,
}

struct Shared {
    manager: Arc<dyn LeaseManager>,
    idle: Duration,
    max_hold: Duration,
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    held: Vec<Held>,
    /// A releaser thread is running.
    releaser: bool,
}

/// One VG lease this process holds (or is acquiring).
struct Held {
    r: ResourceSpec,
    mode: Mode,
    /// The value block to store when it is finally released (the last commit's seqno).
    lvb: Option<Lvb>,
    /// In use by a caller (or being acquired).
    busy: bool,
    /// Acquired from the lock manager at.
    since: Instant,
    /// Given back by its last user at.
    idle_since: Instant,
}

fn same(a: &ResourceSpec, b: &ResourceSpec) -> bool {
    a.path == b.path && a.offset == b.offset
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn release(&self, h: Held) {
        if let Err(e) = self.manager.release(&h.r, h.lvb) {
            tracing::warn!(lease = %h.r.name, error = %e, "releasing a kept VG lease failed");
        }
    }

    /// The releaser thread: gives back leases unused for `idle`; ends when none is kept.
    fn run_releaser(self: Arc<Self>) {
        let mut s = self.lock();
        loop {
            let now = Instant::now();
            let idle = self.idle;
            let due = drain(&mut s.held, |h| {
                !h.busy && now.saturating_duration_since(h.idle_since) >= idle
            });
            if !due.is_empty() {
                drop(s);
                for h in due {
                    tracing::debug!(lease = %h.r.name, "kept VG lease released");
                    self.release(h);
                }
                s = self.lock();
                continue;
            }
            if s.held.is_empty() {
                s.releaser = false;
                return;
            }
            let next = s
                .held
                .iter()
                .filter(|h| !h.busy)
                .map(|h| h.idle_since + idle)
                .min();
            s = match next {
                Some(t) => self
                    .changed
                    .wait_timeout(s, t.saturating_duration_since(now))
                    .map(|(g, _)| g)
                    .unwrap_or_else(|p| p.into_inner().0),
                None => self.changed.wait(s).unwrap_or_else(|p| p.into_inner()),
            };
        }
    }
}

/// Removes and returns the entries of `held` that `pred` picks.
fn drain(held: &mut Vec<Held>, pred: impl Fn(&Held) -> bool) -> Vec<Held> {
    let (out, kept) = std::mem::take(held).into_iter().partition(pred);
    *held = kept;
    out
}

impl Linger {
    /// Keeps nothing: every lease is released when given back (lvmlockd's behaviour).
    pub(super) fn none(manager: Arc<dyn LeaseManager>) -> Self {
        Self::new(manager, Duration::ZERO, Duration::ZERO)
    }

    /// Keeps exclusive VG leases for `idle` after use, reusing one acquire for up to
    /// `max_hold`.
    pub(super) fn new(manager: Arc<dyn LeaseManager>, idle: Duration, max_hold: Duration) -> Self {
        Self {
            shared: Arc::new(Shared {
                manager,
                idle,
                max_hold,
                state: Mutex::new(State::default()),
                changed: Condvar::new(),
            }),
        }
    }

    /// Takes `r` in `mode` for a caller: a kept lease that covers `mode` is reused (returns
    /// true), otherwise `acquire` gets it from the lock manager (false). Another caller of this
    /// process using `r` is waited for until `deadline`.
    pub(super) fn take(
        &self,
        r: &ResourceSpec,
        mode: Mode,
        deadline: Instant,
        acquire: impl FnOnce() -> Result<Option<Lvb>, LeaseError>,
    ) -> Result<bool, LeaseError> {
        let sh = &self.shared;
        let mut s = sh.lock();
        while let Some(i) = s.held.iter().position(|h| same(&h.r, r)) {
            let now = Instant::now();
            if s.held[i].busy {
                if now >= deadline {
                    return Err(LeaseError::Manager {
                        what: format!("VG lease {}", r.name),
                        why: "still in use by another request of this process".into(),
                    });
                }
                s = sh
                    .changed
                    .wait_timeout(s, deadline - now)
                    .map(|(g, _)| g)
                    .unwrap_or_else(|p| p.into_inner().0);
                continue;
            }
            let h = &mut s.held[i];
            let covers = h.mode == Mode::Exclusive || mode == Mode::Shared;
            if covers && now.saturating_duration_since(h.since) < sh.max_hold {
                h.busy = true;
                tracing::debug!(lease = %r.name, "kept VG lease reused");
                return Ok(true);
            }
            let old = s.held.swap_remove(i);
            drop(s);
            sh.release(old);
            s = sh.lock();
        }
        let now = Instant::now();
        s.held.push(Held {
            r: r.clone(),
            mode,
            lvb: None,
            busy: true,
            since: now,
            idle_since: now,
        });
        drop(s);
        let got = acquire();
        let mut s = sh.lock();
        match &got {
            Ok(lvb) => {
                if let Some(h) = s.held.iter_mut().find(|h| same(&h.r, r)) {
                    h.lvb = *lvb;
                    h.since = Instant::now();
                }
            }
            Err(_) => s.held.retain(|h| !same(&h.r, r)),
        }
        sh.changed.notify_all();
        got.map(|_| false)
    }

    /// Gives `r` back, to be stored with `lvb` (when given) once it is released: at once when
    /// `now`, when nothing is kept, or for shared leases; otherwise after `idle` unused.
    pub(super) fn give_back(
        &self,
        r: &ResourceSpec,
        lvb: Option<Lvb>,
        now: bool,
    ) -> Result<(), LeaseError> {
        let sh = &self.shared;
        let mut s = sh.lock();
        let Some(i) = s.held.iter().position(|h| same(&h.r, r)) else {
            // Not taken through here: release it as it is.
            drop(s);
            return sh.manager.release(r, lvb);
        };
        let h = &mut s.held[i];
        if lvb.is_some() {
            h.lvb = lvb;
        }
        h.busy = false;
        h.idle_since = Instant::now();
        let mut keep = !now && !sh.idle.is_zero() && h.mode == Mode::Exclusive;
        if keep && !s.releaser {
            let shared = Arc::clone(sh);
            let spawned = std::thread::Builder::new()
                .name("vg-lease-releaser".into())
                .spawn(move || shared.run_releaser());
            match spawned {
                Ok(_) => s.releaser = true,
                // Without the thread nothing would ever release it: do it now.
                Err(e) => {
                    tracing::warn!(error = %e, "no releaser thread; VG lease released at once");
                    keep = false;
                }
            }
        }
        sh.changed.notify_all();
        if keep {
            return Ok(());
        }
        let h = s.held.swap_remove(i);
        drop(s);
        sh.manager.release(&h.r, h.lvb)
    }

    /// Releases at once every kept, unused lease of `lockspace` (before leaving it: leaving
    /// fails while a lease is held there).
    pub(super) fn release_lockspace(&self, lockspace: &str) -> Result<(), LeaseError> {
        let sh = &self.shared;
        let mut s = sh.lock();
        let gone = drain(&mut s.held, |h| h.r.lockspace == lockspace && !h.busy);
        sh.changed.notify_all();
        drop(s);
        let mut first = Ok(());
        for h in gone {
            let r = sh.manager.release(&h.r, h.lvb);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

impl Drop for Linger {
    fn drop(&mut self) {
        let sh = &self.shared;
        let mut s = sh.lock();
        // Nobody can give a lease back any more; the releaser ends on an empty list.
        let gone: Vec<Held> = std::mem::take(&mut s.held);
        sh.changed.notify_all();
        drop(s);
        for h in gone {
            sh.release(h);
        }
    }
}
