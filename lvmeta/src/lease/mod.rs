//! Leases that coordinate hosts sharing a VG, laid out exactly as lvmlockd lays them out with
//! sanlock (reference: lvm2-format.md section 6), so that lvmeta hosts and stock lvmlockd hosts
//! exclude each other.
//!
//! [`layout`] is pure: lockspace and resource names, offsets inside the `lvmlock` LV and their
//! place on the PVs, the value block. [`LeaseManager`] is what a lock manager must do;
//! [`FakeLeases`] keeps leases in memory for unit tests, and the `sanlock` feature adds
//! [`sanlock::SanlockLeases`], which talks to the host's sanlock daemon.

pub mod layout;
pub mod paxos;
#[cfg(feature = "sanlock")]
pub mod sanlock;

use std::collections::HashMap;
use std::sync::Mutex;

pub use layout::{Geometry, Lvb, LOCKSPACE_PREFIX};

/// A lease mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Exclusive.
    Exclusive,
    /// Shared.
    Shared,
}

/// Where a lockspace's delta leases are and who we are in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockspaceSpec {
    /// `lvm_<vg>`.
    pub name: String,
    /// This host's id.
    pub host_id: u64,
    /// Device of the `lvmlock` LV's first extent.
    pub path: String,
    /// Byte offset of the `lvmlock` LV on it.
    pub offset: u64,
    /// Sector size and alignment.
    pub geometry: Geometry,
}

/// One paxos lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceSpec {
    /// Lockspace name.
    pub lockspace: String,
    /// Resource name (`VGLK`, `GLLK`, an LV uuid, `#unused`).
    pub name: String,
    /// Device holding it.
    pub path: String,
    /// Absolute byte offset on that device.
    pub offset: u64,
    /// Sector size and alignment of its lockspace.
    pub geometry: Geometry,
}

/// Why a lease operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// Another host holds the lease in a conflicting mode (retry later).
    #[error("lease {name} is held by another host")]
    Busy {
        /// The resource.
        name: String,
    },
    /// This host has not joined the lockspace (or lost it).
    #[error("lockspace {lockspace} is not started on this host (lvmeta vgchange --lockstart)")]
    NotJoined {
        /// The lockspace.
        lockspace: String,
    },
    /// The lock manager failed.
    #[error("{what}: {why}")]
    Manager {
        /// The operation and object.
        what: String,
        /// The manager's error.
        why: String,
    },
}

/// What lvmeta needs of a lock manager.
pub trait LeaseManager: Send + Sync {
    /// Writes a fresh lockspace (all hosts' delta leases) with `io_timeout`.
    fn init_lockspace(&self, ls: &LockspaceSpec, io_timeout: u32) -> Result<(), LeaseError>;
    /// Writes a fresh, free paxos lease.
    fn init_resource(&self, r: &ResourceSpec) -> Result<(), LeaseError>;
    /// The resource name written at `r`'s place (`None` if none was ever written there).
    fn resource_name(&self, r: &ResourceSpec) -> Result<Option<String>, LeaseError>;
    /// Joins the lockspace (can take many seconds: sanlock waits on the disk).
    fn join(&self, ls: &LockspaceSpec, io_timeout: u32) -> Result<(), LeaseError>;
    /// Leaves the lockspace.
    fn leave(&self, ls: &LockspaceSpec) -> Result<(), LeaseError>;
    /// Has this host joined the lockspace?
    fn joined(&self, ls: &LockspaceSpec) -> Result<bool, LeaseError>;
    /// Takes the lease; with `want_lvb`, returns its value block.
    fn acquire(
        &self,
        r: &ResourceSpec,
        mode: Mode,
        want_lvb: bool,
    ) -> Result<Option<Lvb>, LeaseError>;
    /// Gives the lease back, first storing `lvb` in it when given.
    fn release(&self, r: &ResourceSpec, lvb: Option<Lvb>) -> Result<(), LeaseError>;
}

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
}

impl FakeLeases {
    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
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
        if s.joined.get(&r.lockspace).is_none_or(|h| h.is_empty()) {
            return Err(LeaseError::NotJoined {
                lockspace: r.lockspace.clone(),
            });
        }
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
        if let Some(e) = s.held.get_mut(&(r.path.clone(), r.offset)) {
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
}

/// This host in shared VGs: its lock manager, host id and how long it waits for a lease.
#[derive(Clone)]
pub struct Host {
    /// The lock manager.
    pub manager: std::sync::Arc<dyn LeaseManager>,
    /// This host's id in every lockspace (1..=2000).
    pub host_id: u64,
    /// io_timeout written into new lockspaces and used to join them.
    pub io_timeout: u32,
    /// How long a change waits for a VG lease another host holds.
    pub wait: std::time::Duration,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("host_id", &self.host_id)
            .field("io_timeout", &self.io_timeout)
            .finish_non_exhaustive()
    }
}

/// An LV's lease as the metadata names it, kept from before a change to compare with after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseRef {
    /// LV name.
    pub name: String,
    /// LV id.
    pub id: crate::uuid::Uuid,
    /// Its `lock_args`.
    pub lock_args: String,
}

impl LeaseRef {
    /// The LVs of `vg` that have a lease.
    pub fn of(vg: &crate::model::Vg) -> Vec<LeaseRef> {
        vg.lvs
            .iter()
            .filter_map(|l| {
                Some(LeaseRef {
                    name: l.name.clone(),
                    id: l.id,
                    lock_args: l.lock_args.clone()?,
                })
            })
            .collect()
    }
}

/// Where a shared VG's leases are: the device of each PV and the lockspace geometry.
#[derive(Debug, Clone)]
pub struct VgPlaces {
    /// Device of each PV of the VG (VG order).
    pub paths: Vec<Option<String>>,
    /// Sector size and alignment.
    pub geometry: Geometry,
}

fn missing(vg: &crate::model::Vg, what: &str) -> LeaseError {
    LeaseError::Manager {
        what: format!("VG {}", vg.name),
        why: format!("cannot place the {what}: the lvmlock LV is missing or not linear"),
    }
}

impl Host {
    /// The lockspace of `vg`.
    pub fn lockspace(
        &self,
        vg: &crate::model::Vg,
        at: &VgPlaces,
    ) -> Result<LockspaceSpec, LeaseError> {
        layout::lockspace(vg, &at.paths, self.host_id, at.geometry)
            .ok_or_else(|| missing(vg, "lockspace"))
    }

    /// Joins `vg`'s lockspace (`vgchange --lockstart`).
    pub fn start(&self, vg: &crate::model::Vg, at: &VgPlaces) -> Result<(), LeaseError> {
        let ls = self.lockspace(vg, at)?;
        tracing::info!(lockspace = %ls.name, host_id = self.host_id, "joining lockspace");
        self.manager.join(&ls, self.io_timeout)
    }

    /// Fails with [`LeaseError::NotJoined`] unless this host is in `vg`'s lockspace.
    pub fn check_joined(&self, vg: &crate::model::Vg, at: &VgPlaces) -> Result<(), LeaseError> {
        let ls = self.lockspace(vg, at)?;
        if self.manager.joined(&ls)? {
            Ok(())
        } else {
            Err(LeaseError::NotJoined { lockspace: ls.name })
        }
    }

    /// Leaves `vg`'s lockspace (`vgchange --lockstop`).
    pub fn stop(&self, vg: &crate::model::Vg, at: &VgPlaces) -> Result<(), LeaseError> {
        self.manager.leave(&self.lockspace(vg, at)?)
    }

    /// Takes `vg`'s VG lease in `mode` (exclusive to change the VG, shared to read it),
    /// retrying while another host holds it in a conflicting mode, up to [`Host::wait`].
    /// Returns the lease and the seqno its value block announces.
    pub fn lock_vg(
        &self,
        vg: &crate::model::Vg,
        at: &VgPlaces,
        mode: Mode,
    ) -> Result<(ResourceSpec, Option<Lvb>), LeaseError> {
        self.check_joined(vg, at)?;
        let r =
            layout::vg_lease(vg, &at.paths, at.geometry).ok_or_else(|| missing(vg, "VG lease"))?;
        let lvb = self.acquire_waiting(&vg.name, &r, mode, true)?;
        Ok((r, lvb))
    }

    /// Takes the global lease in `mode` when `vg` holds the enabled one and this host has
    /// joined `vg`'s lockspace (lvmlockd uses the GL of a started lockspace only); `None`
    /// when it does not.
    pub fn lock_gl(
        &self,
        vg: &crate::model::Vg,
        at: &VgPlaces,
        mode: Mode,
    ) -> Result<Option<ResourceSpec>, LeaseError> {
        let Ok(ls) = self.lockspace(vg, at) else {
            return Ok(None);
        };
        if !self.manager.joined(&ls)? || !self.holds_gl(vg, at)? {
            return Ok(None);
        }
        let r = layout::gl_lease(vg, &at.paths, layout::GL_NAME, at.geometry)
            .ok_or_else(|| missing(vg, "GL lease"))?;
        self.acquire_waiting(&vg.name, &r, mode, false)?;
        Ok(Some(r))
    }

    /// Gives `r` back unchanged where nothing can be done about a failure (guards being
    /// dropped): logs it, naming the `kind` of lease.
    pub fn release_or_warn(&self, r: &ResourceSpec, kind: &str) {
        if let Err(e) = self.manager.release(r, None) {
            tracing::warn!(lease = %r.name, kind, error = %e, "releasing a lease failed");
        }
    }

    /// Acquires `r`, retrying while another host holds it, up to [`Host::wait`].
    fn acquire_waiting(
        &self,
        vg: &str,
        r: &ResourceSpec,
        mode: Mode,
        want_lvb: bool,
    ) -> Result<Option<Lvb>, LeaseError> {
        let deadline = std::time::Instant::now() + self.wait;
        loop {
            match self.manager.acquire(r, mode, want_lvb) {
                Ok(lvb) => return Ok(lvb),
                Err(LeaseError::Busy { .. }) if std::time::Instant::now() < deadline => {
                    tracing::debug!(vg, lease = %r.name, "lease busy; retrying");
                    // 20-80 ms, different per process, so contending hosts do not stay in step.
                    let jitter = u64::from(std::process::id() % 61);
                    std::thread::sleep(std::time::Duration::from_millis(20 + jitter));
                }
                Err(LeaseError::Busy { name }) => {
                    return Err(LeaseError::Manager {
                        what: format!("VG {vg} lease {name}"),
                        why: format!("still held by another host after {:?}", self.wait),
                    })
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Does the shared VG `vg` hold the enabled global lease (`GLLK` in its GL slot)?
    pub fn holds_gl(&self, vg: &crate::model::Vg, at: &VgPlaces) -> Result<bool, LeaseError> {
        match layout::gl_lease(vg, &at.paths, layout::GL_NAME, at.geometry) {
            Some(gl) => Ok(self.manager.resource_name(&gl)?.as_deref() == Some(layout::GL_NAME)),
            None => Ok(false),
        }
    }

    /// Writes what `vgcreate --shared` and lvmlockd write: the lockspace, the GL lease (enabled
    /// unless `gl_elsewhere`: lvmlockd enables the global lease in one VG only), the VG lease
    /// and `#unused` in every LV lease slot.
    pub fn init_vg(
        &self,
        vg: &crate::model::Vg,
        at: &VgPlaces,
        gl_elsewhere: bool,
    ) -> Result<(), LeaseError> {
        let ls = self.lockspace(vg, at)?;
        self.manager.init_lockspace(&ls, self.io_timeout)?;
        let g = at.geometry;
        let gl_name = if gl_elsewhere {
            layout::GL_DISABLED
        } else {
            layout::GL_NAME
        };
        let gl =
            layout::gl_lease(vg, &at.paths, gl_name, g).ok_or_else(|| missing(vg, "GL lease"))?;
        let vgl = layout::vg_lease(vg, &at.paths, g).ok_or_else(|| missing(vg, "VG lease"))?;
        self.manager.init_resource(&gl)?;
        self.manager.init_resource(&vgl)?;
        for slot in layout::lv_slots(vg, &at.paths, g) {
            self.manager.init_resource(&slot)?;
        }
        Ok(())
    }

    /// Before a commit: writes the lease of every LV of `new` that has a lease offset it did
    /// not have in `old` (lvmlockd's `init_lv`).
    pub fn init_new_lvs(
        &self,
        old: &[LeaseRef],
        new: &crate::model::Vg,
        at: &VgPlaces,
    ) -> Result<(), LeaseError> {
        for lv in &new.lvs {
            let before = old.iter().find(|o| o.id == lv.id).map(|o| &o.lock_args);
            if lv.lock_args.is_some() && before != lv.lock_args.as_ref() {
                if let Some(r) = layout::lv_lease(new, &at.paths, &lv.name, at.geometry) {
                    self.manager.init_resource(&r)?;
                }
            }
        }
        Ok(())
    }

    /// After a commit: marks the lease slots of LVs that are gone `#unused` (lvmlockd's
    /// `free_lv`).
    pub fn free_old_lvs(
        &self,
        old: &[LeaseRef],
        new: &crate::model::Vg,
        at: &VgPlaces,
    ) -> Result<(), LeaseError> {
        for lv in old {
            let kept = new
                .lvs
                .iter()
                .any(|l| l.id == lv.id && l.lock_args.as_ref() == Some(&lv.lock_args));
            if kept {
                continue;
            }
            let offset = lv
                .lock_args
                .strip_prefix("1.0.0:")
                .and_then(|o| o.parse().ok());
            let slot = offset.and_then(|o| {
                layout::lease_at(new, &at.paths, layout::UNUSED_NAME, o, at.geometry)
            });
            if let Some(r) = slot {
                self.manager.init_resource(&r)?;
            }
        }
        Ok(())
    }
}

/// `local/host_id` of lvm2's lvmlocal.conf (in `LVM_SYSTEM_DIR` or /etc/lvm).
pub fn lvmlocal_host_id() -> Option<u64> {
    let dir = std::env::var("LVM_SYSTEM_DIR").unwrap_or_else(|_| "/etc/lvm".into());
    let text = std::fs::read_to_string(std::path::Path::new(&dir).join("lvmlocal.conf")).ok()?;
    text.lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter_map(|l| l.strip_prefix("host_id"))
        .filter_map(|rest| rest.trim_start().strip_prefix('='))
        .find_map(|v| v.trim().parse().ok())
}
