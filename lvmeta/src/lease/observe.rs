//! What a host's VG lease requests cost, told to whoever watches (a server's metrics).

use std::time::Duration;

/// How a VG lease request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Taken from the lock manager.
    Acquired,
    /// A lease this host kept after an earlier change was reused.
    Kept,
    /// Not taken (another host held it past the wait, or the lock manager failed).
    Failed,
}

impl Outcome {
    /// A short lower-case name (`acquired`, `kept`, `failed`).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Acquired => "acquired",
            Outcome::Kept => "kept",
            Outcome::Failed => "failed",
        }
    }
}

/// One VG lease request.
#[derive(Debug, Clone, Copy)]
pub struct VgLeaseTaken<'a> {
    /// The VG.
    pub vg: &'a str,
    /// From the request to its end, waits included.
    pub waited: Duration,
    /// How often the lock manager answered that another host held the lease.
    pub busy: u32,
    /// How it ended.
    pub outcome: Outcome,
}

/// Watches a host's VG lease requests (see [`super::Host::with_observer`]).
pub trait LeaseObserver: Send + Sync {
    /// Called once per request of a VG lease, when it ends.
    fn vg_lease(&self, taken: &VgLeaseTaken<'_>);
}
