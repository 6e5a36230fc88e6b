//! The sweep: every volume live here whose lease the host lost is fenced, at once on
//! notice and every [`SWEEP_EVERY`]; and a lost lockspace joined again once cleared.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::*;
use crate::driver::Driver;
use crate::node::Node;

impl Fencing {
    /// Starts joining `vg`'s lockspace on a thread of its own, unless a join of it runs or
    /// started less than [`REJOIN_EVERY`] ago, or this host may not use shared VGs.
    fn rejoin(self: &Arc<Self>, backend: &Arc<Driver>, vg: &str) {
        if self.admit().is_err() {
            return;
        }
        {
            let mut joins = self.joins.lock().unwrap_or_else(|p| p.into_inner());
            match joins.iter_mut().find(|(v, _, _)| v == vg) {
                Some((_, _, true)) => return,
                Some((_, at, _)) if at.elapsed() < REJOIN_EVERY => return,
                Some(e) => *e = (vg.to_owned(), Instant::now(), true),
                None => joins.push((vg.to_owned(), Instant::now(), true)),
            }
        }
        let (me, b, name) = (self.clone(), backend.clone(), vg.to_owned());
        let spawned = std::thread::Builder::new()
            .name("lockspace-join".into())
            .spawn(move || {
                tracing::info!(vg = %name, "joining the lockspace again");
                match b.session().lockstart(&name) {
                    Ok(()) => tracing::info!(vg = %name, "lockspace joined again"),
                    Err(e) => tracing::warn!(vg = %name, error = %e, "joining the lockspace again failed; tried again later"),
                }
                let mut joins = me.joins.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(e) = joins.iter_mut().find(|(v, _, _)| *v == name) {
                    e.2 = false;
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(vg, error = %e, "cannot start a thread to join the lockspace");
            let mut joins = self.joins.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(e) = joins.iter_mut().find(|(v, _, _)| v == vg) {
                e.2 = false;
            }
        }
    }
}

/// One sweep (see the module documentation): the volumes of served shared VGs whose
/// lockspace is not healthy here are looked at, and with `full` those of every served shared
/// VG. `Err` when the lock manager could not be asked.
pub fn sweep(backend: &Driver, node: Option<&Node>, full: bool) -> Result<Swept, String> {
    let session = backend.session();
    let standing = match session.standing() {
        Ok(Some(s)) => s,
        Ok(None) => return Ok(Swept::default()),
        Err(e) => return Err(e.to_string()),
    };
    let mut out = Swept::default();
    for vg in backend.vgs() {
        let ls = lvmeta::lease::layout::lockspace_name(vg);
        // A VG whose lockspace this host is in is shared, whatever the LUN answers now.
        if standing.lockspace(&ls).is_none() && !session.is_shared(vg).unwrap_or(false) {
            continue;
        }
        if standing.lockspace(&ls).is_none() {
            out.unjoined.push(vg.clone());
        }
        if standing.failed(&ls) {
            out.lost.push(vg.clone());
            if let Err(e) = session.release_kept(vg) {
                tracing::warn!(vg, error = %e, "giving back the kept VG lease of a lost lockspace");
            }
        }
        if let Some(n) = node {
            if full || !standing.healthy(&ls) {
                n.fence_unheld(vg, &standing, &mut out);
            }
        }
    }
    if let Some(f) = backend.fencing() {
        *f.lost.lock().unwrap_or_else(|p| p.into_inner()) = out.lost.clone();
    }
    let volumes = out.fenced.len() as u64;
    if volumes > 0 {
        backend.metrics().fenced(volumes);
    }
    Ok(out)
}

/// Runs [`sweep`] every [`SWEEP_EVERY`] on a thread of its own (never held up by the async
/// runtime) and at once when asked ([`Watch::sweep_now`]), until the process ends; joins
/// again the lockspaces a sweep finds this host out of.
pub fn watch(backend: Arc<Driver>, node: Option<Arc<Node>>) -> std::io::Result<Arc<Watch>> {
    let w = Arc::new(Watch::default());
    let me = w.clone();
    std::thread::Builder::new()
        .name("fencing".into())
        .spawn(move || loop {
            let full = me.lock().sweeps % FULL_EVERY == 0;
            let r = sweep(&backend, node.as_deref(), full);
            if let (Ok(s), Some(f)) = (&r, backend.fencing()) {
                for vg in &s.unjoined {
                    f.rejoin(&backend, vg);
                }
            }
            me.record(r);
            me.wait(SWEEP_EVERY);
        })?;
    Ok(w)
}

/// The sweeper's state and wake-up.
#[derive(Default)]
pub struct Watch {
    state: Mutex<WatchState>,
    changed: std::sync::Condvar,
}

#[derive(Default)]
struct WatchState {
    /// Sweeps done.
    sweeps: u64,
    /// A sweep is asked for.
    wake: bool,
    /// The last sweep's lost lockspaces (`None`: the manager could not be asked).
    lost: Option<Vec<String>>,
    /// When a sweep last found a lost lockspace or fenced a volume.
    last_lost: Option<Instant>,
}

impl Watch {
    fn lock(&self) -> std::sync::MutexGuard<'_, WatchState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn record(&self, r: Result<Swept, String>) {
        match &r {
            Ok(s) if !s.fenced.is_empty() => tracing::error!(
                lost = ?s.lost, fenced = ?s.fenced, failed = ?s.failed,
                "volumes fenced: this host no longer holds their leases; their I/O now fails"
            ),
            Ok(s) if !s.failed.is_empty() => tracing::error!(
                lost = ?s.lost, failed = ?s.failed,
                "volumes whose leases may be lost could not be fenced: their leases stay held, so a failed lockspace ends in a watchdog reset"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "fencing sweep: cannot ask the lock manager"),
        }
        let mut s = self.lock();
        s.sweeps += 1;
        if r.as_ref()
            .is_ok_and(|s| !s.lost.is_empty() || !s.fenced.is_empty())
        {
            s.last_lost = Some(Instant::now());
        }
        s.lost = r.ok().map(|s| s.lost);
        self.changed.notify_all();
    }

    fn wait(&self, most: Duration) {
        let s = self.lock();
        let (mut s, _) = self
            .changed
            .wait_timeout_while(s, most, |s| !s.wake)
            .unwrap_or_else(|p| p.into_inner());
        s.wake = false;
    }

    /// Asks for a sweep now and waits (at most `most`) for it; returns the lockspaces it
    /// found lost, or, when it found none but one was lost within [`RECENTLY`] (sanlock
    /// clears a lockspace as soon as its leases are let go, so a SIGTERM it sent may come
    /// after), `["(recently)"]`. `None` when the sweep could not ask the lock manager or did
    /// not finish.
    pub fn sweep_now(&self, most: Duration) -> Option<Vec<String>> {
        let mut s = self.lock();
        let target = s.sweeps + 2;
        s.wake = true;
        self.changed.notify_all();
        let (s, timeout) = self
            .changed
            .wait_timeout_while(s, most, |s| s.sweeps < target)
            .unwrap_or_else(|p| p.into_inner());
        if timeout.timed_out() {
            return None;
        }
        let recent = s.last_lost.is_some_and(|t| t.elapsed() < RECENTLY);
        match s.lost.clone() {
            Some(l) if l.is_empty() && recent => Some(vec!["(recently)".into()]),
            other => other,
        }
    }
}
