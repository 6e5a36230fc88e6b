//! What this host's lock manager says of this host: whether it can fence the host (reset it
//! when the holders of a lost lockspace cannot be stopped), how each lockspace is, and which
//! leases the host holds, orphans included. Fencing decisions are made on this.

/// The lock manager's account of this host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Standing {
    /// This host's name in the manager (what its lockspace records carry; may be empty).
    pub host_name: String,
    /// The manager resets this host when lease holders of a failed lockspace do not stop
    /// (sanlock with its watchdog, through wdmd).
    pub watchdog: bool,
    /// The lockspaces this host is in (joined, joining or leaving).
    pub lockspaces: Vec<LockspaceHealth>,
    /// Every lease held on this host.
    pub held: Vec<HeldLease>,
}

/// One lockspace of this host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockspaceHealth {
    /// Its name (`lvm_<vg>`).
    pub name: String,
    /// This host's id in it.
    pub host_id: u64,
    /// Joined and renewing: its leases hold.
    pub healthy: bool,
    /// Its renewals failed (or it is being left): its leases hold nothing any more.
    /// Neither healthy nor failed: still being joined.
    pub failed: bool,
    /// Orphans keep it after a failure, so the watchdog still resets the host.
    pub kept_by_orphans: bool,
    /// Seconds without a renewal after which other hosts count this one dead and take its
    /// leases (sanlock: 8 x io_timeout + the watchdog fire timeout), if known.
    pub host_dead_seconds: Option<u32>,
}

/// One lease held on this host.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeldLease {
    /// Its lockspace.
    pub lockspace: String,
    /// Its name (an LV's uuid for an LV lease).
    pub name: String,
    /// Kept by the host for a process that ended.
    pub orphan: bool,
}

impl Standing {
    /// Lockspace `name` as the manager has it, if this host is in it.
    pub fn lockspace(&self, name: &str) -> Option<&LockspaceHealth> {
        self.lockspaces.iter().find(|l| l.name == name)
    }

    /// Has lockspace `name` failed on this host (see [`LockspaceHealth::failed`])?
    pub fn failed(&self, name: &str) -> bool {
        self.lockspace(name).is_some_and(|l| l.failed)
    }

    /// Is lockspace `name` joined and healthy?
    pub fn healthy(&self, name: &str) -> bool {
        self.lockspace(name).is_some_and(|l| l.healthy)
    }

    /// Does this host hold lease `name` of lockspace `lockspace` (any process, or an
    /// orphan), in a healthy lockspace?
    pub fn holds(&self, lockspace: &str, name: &str) -> bool {
        self.healthy(lockspace)
            && self
                .held
                .iter()
                .any(|h| h.lockspace == lockspace && h.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_in_a_failed_lockspace_is_not_held() {
        let mut s = Standing {
            lockspaces: vec![LockspaceHealth {
                name: "lvm_vg".into(),
                host_id: 1,
                healthy: true,
                failed: false,
                kept_by_orphans: true,
                host_dead_seconds: None,
            }],
            held: vec![HeldLease {
                lockspace: "lvm_vg".into(),
                name: "u1".into(),
                orphan: true,
            }],
            ..Standing::default()
        };
        assert!(s.holds("lvm_vg", "u1"));
        assert!(!s.holds("lvm_vg", "u2"));
        assert!(!s.holds("lvm_other", "u1"));
        s.lockspaces[0].healthy = false;
        s.lockspaces[0].failed = true;
        assert!(s.failed("lvm_vg"));
        assert!(!s.holds("lvm_vg", "u1"));
    }
}
