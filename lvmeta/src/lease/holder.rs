//! Leases held for another registered process: a node plugin's lease keeper registers with
//! the daemon ([`Holder`]) and the serving process takes and releases LV leases on its
//! behalf ([`super::sanlock::SanlockLeases::with_holder`]).
//!
//! Invariants:
//! - which leases the holder holds is the daemon's to say: a serving process that starts
//!   (again) learns them from its status, so it can release, adopt and let go of leases an
//!   earlier serving process took;
//! - the holder's registration is restricted from SIGKILL, as every registration of lvmeta.

use std::sync::Mutex;

use sanlock_sys::safe::Client;
use sanlock_sys::SANLK_RESTRICT_SIGKILL;

use super::{daemon, LeaseError};

/// How long a status query waits for the daemon.
pub(super) const STATUS_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// A registration with the daemon that holds leases other processes take for it. The
/// leases go (or become orphans) when it is dropped.
#[derive(Debug)]
pub struct Holder {
    _client: Client,
}

impl Holder {
    /// Registers this process as a holder.
    pub fn register() -> Result<Self, LeaseError> {
        let client = Client::register().map_err(|rv| manager("sanlock register", rv))?;
        client
            .restrict(SANLK_RESTRICT_SIGKILL)
            .map_err(|rv| manager("sanlock restrict", rv))?;
        Ok(Self { _client: client })
    }
}

fn manager(what: &str, why: impl std::fmt::Display) -> LeaseError {
    LeaseError::Manager {
        what: what.into(),
        why: why.to_string(),
    }
}

/// The daemon's status now.
pub(super) fn status() -> Result<daemon::DaemonStatus, LeaseError> {
    daemon::query(&daemon::socket_path(), STATUS_TIMEOUT).map_err(|e| manager("sanlock status", e))
}

/// What the daemon says of a holder's leases.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HolderState {
    /// Leases held for it.
    pub held: usize,
    /// One of them is in a lockspace that failed (or is being left).
    pub in_failed: bool,
}

/// The leases process `pid` holds (sanlock's view of pids: the host's).
pub fn holder_state(pid: i32) -> Result<HolderState, LeaseError> {
    Ok(state_of(&status()?, pid))
}

fn state_of(st: &daemon::DaemonStatus, pid: i32) -> HolderState {
    let mine: Vec<&daemon::ResourceState> = st
        .resources
        .iter()
        .filter(|r| r.pid == pid && r.list != "rem")
        .collect();
    let in_failed = mine.iter().any(|r| {
        st.lockspaces
            .iter()
            .any(|l| l.name == r.lockspace && !l.healthy() && l.list != "add")
    });
    HolderState {
        held: mine.len(),
        in_failed,
    }
}

/// The leases this process took for its holder, by lockspace and name.
#[derive(Debug)]
pub(super) struct ForHolder {
    pub(super) pid: i32,
    held: Mutex<Vec<(String, String)>>,
}

impl ForHolder {
    /// Tracking for holder `pid`, starting with what the daemon says it holds.
    pub(super) fn new(pid: i32) -> Self {
        let held = match status() {
            Ok(st) => st
                .resources
                .iter()
                .filter(|r| r.pid == pid && r.list == "held")
                .map(|r| (r.lockspace.clone(), r.name.clone()))
                .collect(),
            Err(e) => {
                tracing::warn!(holder = pid, error = %e, "cannot learn the leases held for the lease keeper; releases of earlier ones will go through the daemon by name");
                Vec::new()
            }
        };
        Self {
            pid,
            held: Mutex::new(held),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(String, String)>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records (or forgets) lease `name` of `lockspace` as the holder's.
    pub(super) fn note(&self, lockspace: &str, name: &str, held: bool) {
        let mut v = self.lock();
        v.retain(|(l, n)| !(l == lockspace && n == name));
        if held {
            v.push((lockspace.to_owned(), name.to_owned()));
        }
    }

    /// Does the holder hold lease `name` of `lockspace` (taken by this process or an
    /// earlier one)?
    pub(super) fn holds(&self, lockspace: &str, name: &str) -> bool {
        self.lock().iter().any(|(l, n)| l == lockspace && n == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_in_a_failed_lockspace_is_told() {
        let ls = |name: &str, dead: bool| daemon::LockspaceState {
            name: name.into(),
            list: "spaces".into(),
            space_dead: dead,
            ..Default::default()
        };
        let res = |ls: &str, pid: i32, list: &str| daemon::ResourceState {
            lockspace: ls.into(),
            name: "u".into(),
            list: list.into(),
            pid,
            shared: false,
        };
        let mut st = daemon::DaemonStatus {
            lockspaces: vec![ls("lvm_a", false), ls("lvm_b", true)],
            resources: vec![res("lvm_a", 7, "held"), res("lvm_b", 8, "held")],
            ..Default::default()
        };
        assert_eq!(
            state_of(&st, 7),
            HolderState {
                held: 1,
                in_failed: false
            }
        );
        st.resources.push(res("lvm_b", 7, "held"));
        assert_eq!(
            state_of(&st, 7),
            HolderState {
                held: 2,
                in_failed: true
            }
        );
        assert_eq!(state_of(&st, 9), HolderState::default());
    }
}
