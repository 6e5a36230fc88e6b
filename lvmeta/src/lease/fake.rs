//! [`FakeLeases`]: leases in memory for unit tests, one process simulating hosts, with
//! knobs for what sanlock would report (a failed lockspace, no watchdog).

use std::collections::HashMap;
use std::sync::Mutex;

use super::{
    HeldLease, HostState, HostView, LeaseError, LeaseManager, LockspaceHealth, LockspaceSpec, Lvb,
    Mode, ResourceSpec, SeenFree, Standing,
};
/// Leases in memory, shared by every [`FakeLeases`] clone: one process simulating hosts.
#[derive(Debug, Default)]
pub struct FakeLeases {
    state: Mutex<FakeState>,
}

#[derive(Debug, Default)]
struct FakeState {
    /// (path, offset) -> resource name written there.
    written: HashMap<(String, u64), String>,
    /// lockspace -> joined host ids.
    joined: HashMap<String, Vec<u64>>,
    /// (path, offset) -> (exclusive holder count, shared holder count, lvb).
    held: HashMap<(String, u64), (u32, u32, Lvb)>,
    /// Persistent leases this process holds: (path, offset) -> mode, one per holder.
    persistent: Vec<((String, u64), Mode)>,
    /// Orphans ended processes left: (path, offset) -> mode, one per holder.
    orphans: Vec<((String, u64), Mode)>,
    /// Lockspaces whose renewals failed ([`FakeLeases::fail_lockspace`]).
    failed: Vec<String>,
    /// (path, offset) -> the lockspace it was last acquired in.
    lockspace_of: HashMap<(String, u64), String>,
    /// sanlock runs without its watchdog ([`FakeLeases::without_watchdog`]).
    no_watchdog: bool,
    /// (lockspace, host id) -> the generation of its last join.
    generations: HashMap<(String, u64), u64>,
    /// Hosts sanlock would report dead ([`FakeLeases::kill_host`]).
    dead: Vec<(String, u64)>,
}

impl FakeLeases {
    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What sanlock reports when this host's renewals in lockspace `name` fail: the
    /// lockspace is unhealthy, nothing more can be acquired in it, and what is held in it
    /// protects nothing (until the holders release it).
    pub fn fail_lockspace(&self, name: &str) {
        let mut s = self.lock();
        if !s.failed.iter().any(|f| f == name) {
            s.failed.push(name.to_owned());
        }
    }

    /// What sanlock reports once host `host_id` of lockspace `name` stopped renewing long
    /// enough ago: dead (until it joins again).
    pub fn kill_host(&self, name: &str, host_id: u64) {
        self.lock().dead.push((name.to_owned(), host_id));
    }

    /// What sanlock reports when it runs with `-w 0`: no watchdog can reset this host.
    pub fn without_watchdog(&self) {
        self.lock().no_watchdog = true;
    }

    /// Is lease `name` of lockspace `lockspace` held, by a process or as an orphan?
    pub fn is_held(&self, lockspace: &str, name: &str) -> bool {
        let s = self.lock();
        s.held.iter().any(|(k, e)| {
            (e.0 > 0 || e.1 > 0)
                && s.written.get(k).is_some_and(|n| n == name)
                && s.lockspace_of.get(k).is_some_and(|l| l == lockspace)
        })
    }

    /// What sanlock does when this process ends: its persistent leases become the host's
    /// orphans (still held), and its other leases are released.
    pub fn end_process(&self) {
        let mut s = self.lock();
        let kept = std::mem::take(&mut s.persistent);
        for e in s.held.values_mut() {
            e.0 = 0;
            e.1 = 0;
        }
        for (key, mode) in &kept {
            let e = s.held.entry(key.clone()).or_insert((0, 0, Lvb::default()));
            match mode {
                Mode::Exclusive => e.0 += 1,
                Mode::Shared => e.1 += 1,
            }
        }
        s.orphans.extend(kept);
    }

    /// Drops one holder of `key` in `mode`.
    fn unhold(s: &mut FakeState, key: &(String, u64), mode: Mode) {
        if let Some(e) = s.held.get_mut(key) {
            match mode {
                Mode::Exclusive => e.0 = e.0.saturating_sub(1),
                Mode::Shared => e.1 = e.1.saturating_sub(1),
            }
        }
    }
}

impl LeaseManager for FakeLeases {
    fn init_lockspace(&self, ls: &LockspaceSpec, _io_timeout: u32) -> Result<(), LeaseError> {
        self.lock()
            .written
            .insert((ls.path.clone(), ls.offset), ls.name.clone());
        Ok(())
    }
    fn init_resource(&self, r: &ResourceSpec) -> Result<(), LeaseError> {
        let mut s = self.lock();
        s.written.insert((r.path.clone(), r.offset), r.name.clone());
        s.held.remove(&(r.path.clone(), r.offset));
        Ok(())
    }
    fn resource_name(&self, r: &ResourceSpec) -> Result<Option<String>, LeaseError> {
        Ok(self
            .lock()
            .written
            .get(&(r.path.clone(), r.offset))
            .cloned())
    }
    fn join(&self, ls: &LockspaceSpec, _io_timeout: u32) -> Result<(), LeaseError> {
        let mut s = self.lock();
        let hosts = s.joined.entry(ls.name.clone()).or_default();
        if !hosts.contains(&ls.host_id) {
            hosts.push(ls.host_id);
            let key = (ls.name.clone(), ls.host_id);
            s.dead.retain(|d| *d != key);
            *s.generations.entry(key).or_insert(0) += 1;
        }
        Ok(())
    }
    fn leave(&self, ls: &LockspaceSpec) -> Result<(), LeaseError> {
        if let Some(h) = self.lock().joined.get_mut(&ls.name) {
            h.retain(|x| *x != ls.host_id);
        }
        Ok(())
    }
    fn joined(&self, ls: &LockspaceSpec) -> Result<bool, LeaseError> {
        Ok(self
            .lock()
            .joined
            .get(&ls.name)
            .is_some_and(|h| h.contains(&ls.host_id)))
    }
    fn acquire(
        &self,
        r: &ResourceSpec,
        mode: Mode,
        want_lvb: bool,
    ) -> Result<Option<Lvb>, LeaseError> {
        let mut s = self.lock();
        if s.joined.get(&r.lockspace).is_none_or(|h| h.is_empty())
            || s.failed.contains(&r.lockspace)
        {
            return Err(LeaseError::NotJoined {
                lockspace: r.lockspace.clone(),
            });
        }
        s.lockspace_of
            .insert((r.path.clone(), r.offset), r.lockspace.clone());
        let e = s
            .held
            .entry((r.path.clone(), r.offset))
            .or_insert((0, 0, Lvb::default()));
        let free = match mode {
            Mode::Exclusive => e.0 == 0 && e.1 == 0,
            Mode::Shared => e.0 == 0,
        };
        if !free {
            return Err(LeaseError::Busy {
                name: r.name.clone(),
            });
        }
        match mode {
            Mode::Exclusive => e.0 += 1,
            Mode::Shared => e.1 += 1,
        }
        Ok(want_lvb.then_some(e.2))
    }
    fn release(&self, r: &ResourceSpec, lvb: Option<Lvb>) -> Result<(), LeaseError> {
        let mut s = self.lock();
        let key = (r.path.clone(), r.offset);
        if let Some(i) = s.persistent.iter().position(|(k, _)| *k == key) {
            s.persistent.swap_remove(i);
        }
        if let Some(e) = s.held.get_mut(&key) {
            if let Some(v) = lvb {
                e.2 = v;
            }
            if e.0 > 0 {
                e.0 -= 1;
            } else {
                e.1 = e.1.saturating_sub(1);
            }
        }
        Ok(())
    }
    fn unheld(&self, r: &ResourceSpec) -> Result<Option<SeenFree>, LeaseError> {
        let s = self.lock();
        let key = (r.path.clone(), r.offset);
        let free = s.held.get(&key).is_none_or(|e| e.0 == 0 && e.1 == 0);
        Ok(free.then(SeenFree::default))
    }
    fn acquire_persistent(&self, r: &ResourceSpec, mode: Mode) -> Result<(), LeaseError> {
        let key = (r.path.clone(), r.offset);
        {
            let mut s = self.lock();
            if let Some(i) = s.orphans.iter().position(|(k, _)| *k == key) {
                if s.orphans[i].1 != mode {
                    return Err(LeaseError::Orphan {
                        name: r.name.clone(),
                    });
                }
                // Adopted: the orphan's hold becomes this process's.
                s.orphans.swap_remove(i);
                s.persistent.push((key, mode));
                return Ok(());
            }
        }
        self.acquire(r, mode, false)?;
        self.lock().persistent.push((key, mode));
        Ok(())
    }
    fn release_orphans(&self, r: &ResourceSpec) -> Result<u32, LeaseError> {
        let mut s = self.lock();
        let key = (r.path.clone(), r.offset);
        let Some(i) = s.orphans.iter().position(|(k, _)| *k == key) else {
            return Ok(0);
        };
        let (_, mode) = s.orphans.swap_remove(i);
        Self::unhold(&mut s, &key, mode);
        Ok(1)
    }
    fn drop_orphans(&self, r: &ResourceSpec) -> Result<u32, LeaseError> {
        // Without the acquire: as release_orphans, minus the joined lockspace.
        self.release_orphans(r)
    }
    fn standing(&self) -> Result<Standing, LeaseError> {
        let s = self.lock();
        let lockspaces = s
            .joined
            .iter()
            .filter(|(_, hosts)| !hosts.is_empty())
            .map(|(name, hosts)| LockspaceHealth {
                name: name.clone(),
                host_id: hosts.first().copied().unwrap_or(0),
                healthy: !s.failed.contains(name),
                failed: s.failed.contains(name),
                kept_by_orphans: true,
                host_dead_seconds: None,
            })
            .collect();
        let orphan = |k: &(String, u64)| s.orphans.iter().any(|(o, _)| o == k);
        let held = s
            .held
            .iter()
            .filter(|(_, e)| e.0 > 0 || e.1 > 0)
            .filter_map(|(k, _)| {
                let name = s.written.get(k)?;
                let lockspace = s.lockspace_of.get(k)?.clone();
                Some(HeldLease {
                    lockspace,
                    name: name.clone(),
                    orphan: orphan(k),
                })
            })
            .collect();
        Ok(Standing {
            host_name: String::new(),
            watchdog: !s.no_watchdog,
            lockspaces,
            held,
        })
    }
    fn let_go(&self, lockspace: &str, names: &[String]) -> Result<(), LeaseError> {
        let mut s = self.lock();
        let keys: Vec<(String, u64)> = s
            .written
            .iter()
            .filter(|(k, n)| {
                names.contains(n) && s.lockspace_of.get(*k).is_some_and(|l| l == lockspace)
            })
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            s.held.remove(&k);
            s.persistent.retain(|(p, _)| *p != k);
            s.orphans.retain(|(p, _)| *p != k);
        }
        Ok(())
    }
    fn keep_for_orphans(&self, _lockspace: &str) -> Result<(), LeaseError> {
        Ok(())
    }
    fn host(&self, lockspace: &str, host_id: u64) -> Result<Option<HostView>, LeaseError> {
        let s = self.lock();
        let key = (lockspace.to_owned(), host_id);
        let Some(generation) = s.generations.get(&key) else {
            return Ok(None);
        };
        let joined = s
            .joined
            .get(lockspace)
            .is_some_and(|j| j.contains(&host_id));
        let state = if s.dead.contains(&key) {
            HostState::Dead
        } else if joined {
            HostState::Live
        } else {
            HostState::Free
        };
        Ok(Some(HostView {
            host_id,
            generation: *generation,
            state,
        }))
    }
}
