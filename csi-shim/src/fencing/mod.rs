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

mod sweep;

pub use sweep::{sweep, watch, Watch};

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
    warned: crate::every::Every,
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
            warned: crate::every::Every::default(),
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
                if self.warned.due(WARN_EVERY) {
                    tracing::warn!(reason = %why, "UNSAFE: this host cannot be fenced and --unsafe-without-fencing lets it use shared VGs: a host that loses its leases may corrupt volumes another host took over");
                }
                Ok(())
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
