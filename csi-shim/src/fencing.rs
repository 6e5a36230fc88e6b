//! Fencing, the driver's policy: a host that cannot be fenced never writes to a shared VG,
//! and a host that loses a lockspace stops its volumes there before another host can take
//! them over.
//!
//! - [`Fencing`] tells whether this host can be fenced: sanlock arms its watchdog (so a
//!   host whose lease holders do not stop is reset) and, in a node plugin, the activation
//!   backend can fail a volume's I/O in place (device-mapper). It is the lease gate of the
//!   session (no change, no activation in a shared VG otherwise) and Probe's readiness. The
//!   operator may turn the refusal into a warning, a metric and an alert
//!   (`--unsafe-without-fencing`), for labs.
//! - [`sweep`] runs every [`SWEEP_EVERY`], at once on SIGTERM (how sanlock tells a lease
//!   holder that its lockspace failed) and once before a node plugin serves: every volume
//!   of a served shared VG that is live on this host while this host does not hold its
//!   lease in a healthy lockspace is fenced (error tables in place), then its lease and its
//!   orphan are let go; a lost lockspace's kept VG lease is given back; a lockspace this
//!   host left (lost, then cleared by sanlock) is joined again once the host can be fenced,
//!   every [`REJOIN_EVERY`] at most, so a node whose path to the LUN came back serves again
//!   without a restart.
//!
//! Invariants:
//! - a lease is let go only after the devices it protected fail every I/O; until then this
//!   process stays registered with sanlock, which may not SIGKILL it (`lvmeta::lease::
//!   sanlock`), so a fence that cannot finish leaves the lockspace held and the watchdog
//!   resets the host before another host may take the lease (sanlock's host-dead time);
//! - a process that ends with volumes staged leaves their leases as orphans, which keep a
//!   lockspace that then fails (and with it the watchdog) until the next process fences.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lvmeta::lease::LeaseManager;

use crate::driver::Driver;
use crate::node::Node;

/// How often the sweep runs.
pub const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Every this many sweeps, one looks at the volumes of healthy lockspaces too.
pub const FULL_EVERY: u64 = 10;

/// How long after a lost lockspace a SIGTERM is still taken for sanlock's.
pub const RECENTLY: Duration = Duration::from_secs(30);

/// How often, at most, joining a lockspace this host is not in is tried again.
pub const REJOIN_EVERY: Duration = Duration::from_secs(10);

/// How long an answer about this host's fencing is reused.
const CHECK_EVERY: Duration = Duration::from_secs(2);

/// How often the warning of a driver told to run without fencing is repeated.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// Whether this host can be fenced, asked of the lock manager and cached.
pub struct Fencing {
    manager: Option<Arc<dyn LeaseManager>>,
    /// Refuse shared VGs when this host cannot be fenced (`false`: warn only).
    required: bool,
    /// Why this node's volumes cannot be fenced, if they cannot.
    devices: Option<String>,
    last: Mutex<Option<(Instant, Result<(), String>)>>,
    warned: Mutex<Option<Instant>>,
    /// Lockspace joins started by the sweep: VG, when, and whether one is running.
    joins: Mutex<Vec<(String, Instant, bool)>>,
    /// The served VGs whose lockspace the last sweep found failed.
    lost: Mutex<Vec<String>>,
}

impl Fencing {
    /// Fencing through `manager` (`None`: this host has no leases, so no shared VG), refusing
    /// shared VGs without it when `required`; `devices` says why this node's volumes cannot
    /// be fenced, if they cannot.
    pub fn new(
        manager: Option<Arc<dyn LeaseManager>>,
        required: bool,
        devices: Option<String>,
    ) -> Self {
        Self {
            manager,
            required,
            devices,
            last: Mutex::new(None),
            warned: Mutex::new(None),
            joins: Mutex::new(Vec::new()),
            lost: Mutex::new(Vec::new()),
        }
    }

    /// Did the last sweep find a served VG's lockspace failed? (Writes under its leases,
    /// an erasure, must stop.)
    pub fn any_lost(&self) -> bool {
        !self
            .lost
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    /// Is fencing required (not turned off by the operator)?
    pub fn required(&self) -> bool {
        self.required
    }

    /// `Err(why)` when this host cannot be fenced now (asked again every 2 s at most).
    pub fn can_fence(&self) -> Result<(), String> {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((at, r)) = &*last {
            if at.elapsed() < CHECK_EVERY {
                return r.clone();
            }
        }
        let r = self.ask();
        *last = Some((Instant::now(), r.clone()));
        r
    }

    fn ask(&self) -> Result<(), String> {
        let Some(m) = &self.manager else {
            return Err("this host has no sanlock host id, so no leases".into());
        };
        let standing = m
            .standing()
            .map_err(|e| format!("cannot ask the sanlock daemon: {e}"))?;
        if !standing.watchdog {
            return Err(
                "the sanlock daemon runs without its watchdog (-w 0, the default of \
                 Debian's /etc/default/sanlock): a host that loses its leases but keeps \
                 running would not be reset (deploy/README.md, \"1. Every node that sees the LUN\")"
                    .into(),
            );
        }
        if let Some(why) = &self.devices {
            return Err(why.clone());
        }
        Ok(())
    }

    /// Whether a shared VG may be changed or activated on: `Err(why)` when this host cannot
    /// be fenced and fencing is required; warned about (once a minute) when it is not.
    pub fn admit(&self) -> Result<(), String> {
        match self.can_fence() {
            Ok(()) => Ok(()),
            Err(why) if self.required => Err(why),
            Err(why) => {
                let mut w = self.warned.lock().unwrap_or_else(|p| p.into_inner());
                if w.is_none_or(|t| t.elapsed() >= WARN_EVERY) {
                    *w = Some(Instant::now());
                    tracing::warn!(reason = %why, "UNSAFE: this host cannot be fenced and --unsafe-without-fencing lets it use shared VGs: a host that loses its leases may corrupt volumes another host took over");
                }
                Ok(())
            }
        }
    }
}

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

/// The gate of the session's leases (see [`lvmeta::lease::Gate`]).
pub struct Gate(pub Arc<Fencing>);

impl lvmeta::lease::Gate for Gate {
    fn check(&self) -> Result<(), String> {
        self.0.admit()
    }
}

/// What one sweep did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// Served shared VGs whose lockspace failed here (what sanlock's SIGTERM is about).
    pub lost: Vec<String>,
    /// Served shared VGs whose lockspace this host is not in at all (never joined, or lost
    /// and cleared).
    pub unjoined: Vec<String>,
    /// Volumes fenced (`vg/lv`).
    pub fenced: Vec<String>,
    /// Volumes that could not be fenced (`vg/lv: why`): their leases are kept.
    pub failed: Vec<String>,
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
