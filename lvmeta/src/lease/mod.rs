//! Leases that coordinate hosts sharing a VG, laid out exactly as lvmlockd lays them out with
//! sanlock (lvm2's `daemons/lvmlockd/lvmlockd-sanlock.c`), so that lvmeta hosts and stock lvmlockd hosts
//! exclude each other.
//!
//! [`layout`] is pure: lockspace and resource names, offsets inside the `lvmlock` LV and their
//! place on the PVs, the value block. [`LeaseManager`] is what a lock manager must do;
//! [`FakeLeases`] keeps leases in memory for unit tests, and the `sanlock` feature adds
//! [`sanlock::SanlockLeases`], which talks to the host's sanlock daemon.

pub mod daemon;
mod fake;
#[cfg(feature = "sanlock")]
pub mod holder;
pub mod layout;
mod linger;
pub mod observe;
pub mod paxos;
#[cfg(feature = "sanlock")]
pub mod sanlock;
pub mod standing;

pub use fake::FakeLeases;
pub use layout::{Geometry, Lvb, LOCKSPACE_PREFIX};
pub use standing::{HeldLease, LockspaceHealth, Standing};

use std::collections::HashMap;

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
    /// An orphan holds the lease: a lease this host keeps for a process that ended while
    /// using it (a volume still staged here), or one in the other mode.
    #[error("lease {name} is held on this host by an orphan an ended process left (the LV is still in use here)")]
    Orphan {
        /// The resource.
        name: String,
    },
    /// An LV to be removed is active on some host: its lease is held.
    #[error("LV {lv} is active on this or another host (its lease is held); deactivate it first")]
    InUse {
        /// `vg/lv`.
        lv: String,
    },
    /// This host may not take a lease that lets it write (see [`Gate`]): it could not be
    /// fenced should it lose the lease.
    #[error("this host cannot be fenced, so it does not change or activate anything in a shared VG: {why}")]
    Unfenced {
        /// Why (no watchdog, ...).
        why: String,
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
    /// Does no host hold `r`, as its lease area on disk shows (read without the daemon)?
    /// `Some`, with what was read, when none does; `None` when one may: a holder, an
    /// orphan, or a dead host's mark that only an acquire can take over.
    fn unheld(&self, r: &ResourceSpec) -> Result<Option<SeenFree>, LeaseError>;
    /// [`LeaseManager::init_resource`] at a place that [`LeaseManager::unheld`] found free
    /// (`seen`) and that nobody can have taken since (the VG lease held exclusively
    /// throughout): may write from `seen` instead of reading the area again.
    fn init_free_resource(&self, r: &ResourceSpec, seen: &SeenFree) -> Result<(), LeaseError> {
        let _ = seen;
        self.init_resource(r)
    }
    /// Takes an LV's lease so that it outlives this process: should the process end holding
    /// it, the host keeps it as an *orphan* (sanlock's `SANLK_RES_PERSISTENT`), which still
    /// excludes other hosts. An orphan of `r` in `mode` that an ended process of this host
    /// left is adopted; one in the other mode is an error.
    fn acquire_persistent(&self, r: &ResourceSpec, mode: Mode) -> Result<(), LeaseError>;
    /// Releases the orphan of `r` an ended process of this host left, if any; returns how
    /// many were released (0 or 1).
    fn release_orphans(&self, r: &ResourceSpec) -> Result<u32, LeaseError>;
    /// Drops this host's orphan of `r` without acquiring it first, which also works in a
    /// failed lockspace (where it protects nothing any more): only once the devices it
    /// protected can no longer write. Returns how many were dropped.
    fn drop_orphans(&self, r: &ResourceSpec) -> Result<u32, LeaseError>;
    /// This host as the manager sees it: whether it can fence the host, its lockspaces'
    /// health, the leases it holds.
    fn standing(&self) -> Result<Standing, LeaseError>;
    /// Lets go of leases `names` of lockspace `lockspace`, which has failed, known by name
    /// only (no disk I/O: they protect nothing any more): only once their devices are
    /// fenced.
    fn let_go(&self, lockspace: &str, names: &[String]) -> Result<(), LeaseError>;
    /// Marks `lockspace` so that orphans of it keep it (and the host's watchdog) after it
    /// fails, as they would not otherwise.
    fn keep_for_orphans(&self, lockspace: &str) -> Result<(), LeaseError>;
}

/// A lease area [`LeaseManager::unheld`] found free, as it read it.
#[derive(Debug, Clone, Default)]
pub struct SeenFree {
    /// The area's bytes (`None` from a manager that reads no disk).
    pub area: Option<Vec<u8>>,
}

/// What [`Host::lock_changed_lvs`] took and saw.
#[derive(Debug, Default)]
pub struct Locked {
    /// The leases it holds: release them after the commit.
    pub held: Vec<ResourceSpec>,
    /// The lease areas of removed LVs it found free, by offset in `lvmlock`, for
    /// [`Host::free_old_lvs`].
    pub seen: Vec<(u64, SeenFree)>,
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
    /// The VG leases kept after use (see [`Host::with_linger`]).
    linger: std::sync::Arc<linger::Linger>,
    /// Told of every VG lease request (see [`Host::with_observer`]).
    observer: Option<std::sync::Arc<dyn observe::LeaseObserver>>,
    gate: Option<std::sync::Arc<dyn Gate>>,
}

/// A condition every lease that lets this host write must meet: checked before an exclusive
/// VG lease (a change) and before an LV lease (an activation) is taken. Shared VG leases
/// (reads) pass.
pub trait Gate: Send + Sync {
    /// `Err(why)` when no such lease may be taken now.
    fn check(&self) -> Result<(), String>;
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("host_id", &self.host_id)
            .field("io_timeout", &self.io_timeout)
            .finish_non_exhaustive()
    }
}

/// A lease held until this is dropped (then released; a failure is logged), or until
/// [`Held::keep`] leaves it held past this process.
pub struct Held {
    host: Host,
    /// `None` once kept.
    r: Option<ResourceSpec>,
    kind: &'static str,
}

impl Held {
    /// `r`, taken through `host`; `kind` names it in logs ("LV", ...).
    pub fn new(host: Host, r: ResourceSpec, kind: &'static str) -> Self {
        Self {
            host,
            r: Some(r),
            kind,
        }
    }

    /// Forgets the lease without releasing it: a persistent lease then stays held by this
    /// host as an orphan once the process ends.
    pub fn keep(mut self) {
        if let Some(r) = self.r.take() {
            tracing::info!(lease = %r.name, kind = self.kind, "lease left held");
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(r) = self.r.take() {
            self.host.release_or_warn(&r, self.kind);
        }
    }
}

impl std::fmt::Debug for Held {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Held")
            .field("lease", &self.r.as_ref().map(|r| &r.name))
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
    /// A thin pool's state for its kernel pool: what changes when its thin LVs or its table
    /// features do.
    pub pool: Option<PoolState>,
}

impl LeaseRef {
    /// The LVs of `vg` that have a lease.
    pub fn of(vg: &crate::model::Vg) -> Vec<LeaseRef> {
        Self::of_lvs(vg.lvs.iter().map(|l| &**l))
    }

    /// Those of `lvs` that have a lease.
    pub fn of_lvs<'a>(lvs: impl IntoIterator<Item = &'a crate::model::Lv>) -> Vec<LeaseRef> {
        lvs.into_iter()
            .filter_map(|l| {
                Some(LeaseRef {
                    name: l.name.clone(),
                    id: l.id,
                    lock_args: l.lock_args.clone()?,
                    pool: pool_state(l),
                })
            })
            .collect()
    }

    /// The offset of its lease in `lvmlock`.
    fn offset(&self) -> Option<u64> {
        layout::lease_offset(&self.lock_args)
    }

    /// The same LV in `new` (by id), under the same lease.
    fn kept_in<'a>(&self, new: &ById<'a>) -> Option<&'a crate::model::Lv> {
        new.get(&self.id)
            .copied()
            .filter(|l| l.lock_args.as_ref() == Some(&self.lock_args))
    }
}

/// What the host where a thin pool is active must deliver to its kernel pool when it
/// changes: a change to any of it needs the pool's lease (or its holder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolState {
    /// The transaction id.
    pub transaction_id: u64,
    /// The queued messages.
    pub messages: Vec<crate::model::ThinMessage>,
    /// Zeroing of new chunks (a pool table feature).
    pub zero_new_blocks: bool,
    /// The discard handling (a pool table feature).
    pub discards: Option<String>,
}

/// A thin pool LV's [`PoolState`] (`None` for other LVs).
pub fn pool_state(lv: &crate::model::Lv) -> Option<PoolState> {
    lv.pool().map(|p| PoolState {
        transaction_id: p.transaction_id,
        messages: p.messages.clone(),
        zero_new_blocks: p.zero_new_blocks,
        discards: p.discards.clone(),
    })
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
    /// This host as `host_id` through `manager`, waiting up to `wait` for leases other hosts
    /// hold; VG leases are released after every change, as lvmlockd does.
    pub fn new(
        manager: std::sync::Arc<dyn LeaseManager>,
        host_id: u64,
        io_timeout: u32,
        wait: std::time::Duration,
    ) -> Self {
        let linger = std::sync::Arc::new(linger::Linger::none(manager.clone()));
        Self {
            manager,
            host_id,
            io_timeout,
            wait,
            linger,
            observer: None,
            gate: None,
        }
    }

    /// The same host, taking leases that let it write only while `gate` passes.
    pub fn with_gate(mut self, gate: std::sync::Arc<dyn Gate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Checks the gate (see [`Gate`]).
    fn gated(&self) -> Result<(), LeaseError> {
        match &self.gate {
            Some(g) => g.check().map_err(|why| LeaseError::Unfenced { why }),
            None => Ok(()),
        }
    }

    /// Takes LV lease `r` for this process only, once the gate passes (a data copy or an
    /// erasure: writes to the LUN under the lease, released when done).
    pub fn acquire_gated(&self, r: &ResourceSpec, mode: Mode) -> Result<(), LeaseError> {
        self.gated()?;
        self.manager.acquire(r, mode, false).map(drop)
    }

    /// Gives back the VG lease kept after a change in lockspace `lockspace`, if any.
    pub fn release_kept(&self, lockspace: &str) -> Result<(), LeaseError> {
        self.linger.release_lockspace(lockspace)
    }

    /// Takes LV lease `r` for an activation ([`LeaseManager::acquire_persistent`]), once the
    /// gate passes.
    pub fn acquire_lv(&self, r: &ResourceSpec, mode: Mode) -> Result<(), LeaseError> {
        self.gated()?;
        self.manager.acquire_persistent(r, mode)
    }

    /// The same, telling `observer` what every VG lease request cost.
    pub fn with_observer(mut self, observer: std::sync::Arc<dyn observe::LeaseObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Keeps an exclusive VG lease for `idle` after a change, so that the next change (or
    /// read) of this host within that time reuses it instead of acquiring it again; one
    /// acquire is reused for at most `max_hold`. Zero `idle` keeps nothing. See
    /// `lease/linger.rs` for why this is safe beside lvmlockd hosts.
    pub fn with_linger(mut self, idle: std::time::Duration, max_hold: std::time::Duration) -> Self {
        self.linger =
            std::sync::Arc::new(linger::Linger::new(self.manager.clone(), idle, max_hold));
        self
    }

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

    /// Leaves `vg`'s lockspace (`vgchange --lockstop`), releasing first the VG lease kept
    /// there.
    pub fn stop(&self, vg: &crate::model::Vg, at: &VgPlaces) -> Result<(), LeaseError> {
        let ls = self.lockspace(vg, at)?;
        self.linger.release_lockspace(&ls.name)?;
        self.manager.leave(&ls)
    }

    /// Takes `vg`'s VG lease in `mode` (exclusive to change the VG, shared to read it),
    /// retrying while another host holds it in a conflicting mode, up to [`Host::wait`]; a
    /// lease this host kept (see [`Host::with_linger`]) is reused. Give it back with
    /// [`Host::unlock_vg`]. Returns the lease, and true when it was kept since before the
    /// call (so whatever the caller read before the call was read under it).
    pub fn lock_vg(
        &self,
        vg: &crate::model::Vg,
        at: &VgPlaces,
        mode: Mode,
    ) -> Result<(ResourceSpec, bool), LeaseError> {
        let r =
            layout::vg_lease(vg, &at.paths, at.geometry).ok_or_else(|| missing(vg, "VG lease"))?;
        let started = std::time::Instant::now();
        let deadline = started + self.wait;
        let busy = std::cell::Cell::new(0);
        if mode == Mode::Exclusive {
            self.gated()?;
        }
        // A kept lease proves the lockspace joined: sanlock ends the holders of a lost one.
        // The value block is asked for so that a release can store one (sanlock keeps it
        // only for leases acquired with it).
        let kept = self.linger.take(&r, mode, deadline, || {
            self.check_joined(vg, at)?;
            self.acquire_waiting(&vg.name, &r, mode, true, &busy)
        });
        if let Some(o) = &self.observer {
            o.vg_lease(&observe::VgLeaseTaken {
                vg: &vg.name,
                waited: started.elapsed(),
                busy: busy.get(),
                outcome: match kept {
                    Ok(true) => observe::Outcome::Kept,
                    Ok(false) => observe::Outcome::Acquired,
                    Err(_) => observe::Outcome::Failed,
                },
            });
        }
        let kept = kept?;
        Ok((r, kept))
    }

    /// Gives back a VG lease from [`Host::lock_vg`], to be stored with `lvb` when given: kept
    /// for a moment when this host lingers, released otherwise.
    pub fn unlock_vg(&self, r: &ResourceSpec, lvb: Option<Lvb>) -> Result<(), LeaseError> {
        self.linger.give_back(r, lvb, false)
    }

    /// Like [`Host::unlock_vg`], but released at once (the VG is being removed).
    pub fn unlock_vg_now(&self, r: &ResourceSpec, lvb: Option<Lvb>) -> Result<(), LeaseError> {
        self.linger.give_back(r, lvb, true)
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
        self.acquire_waiting(&vg.name, &r, mode, false, &std::cell::Cell::new(0))?;
        Ok(Some(r))
    }

    /// Gives `r` back unchanged where nothing can be done about a failure (guards being
    /// dropped): logs it, naming the `kind` of lease.
    pub fn release_or_warn(&self, r: &ResourceSpec, kind: &str) {
        if let Err(e) = self.linger.give_back(r, None, false) {
            tracing::warn!(lease = %r.name, kind, error = %e, "releasing a lease failed");
        }
    }

    /// Acquires `r`, retrying while another host holds it, up to [`Host::wait`]; counts
    /// those refusals in `busy`.
    fn acquire_waiting(
        &self,
        vg: &str,
        r: &ResourceSpec,
        mode: Mode,
        want_lvb: bool,
        busy: &std::cell::Cell<u32>,
    ) -> Result<Option<Lvb>, LeaseError> {
        let deadline = std::time::Instant::now() + self.wait;
        loop {
            match self.manager.acquire(r, mode, want_lvb) {
                Ok(lvb) => return Ok(lvb),
                Err(LeaseError::Busy { .. }) if std::time::Instant::now() < deadline => {
                    busy.set(busy.get().saturating_add(1));
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
        let old: HashMap<crate::uuid::Uuid, &String> =
            old.iter().map(|o| (o.id, &o.lock_args)).collect();
        for lv in &new.lvs {
            let before = old.get(&lv.id).copied();
            if lv.lock_args.is_some() && before != lv.lock_args.as_ref() {
                if let Some(r) = layout::lv_lease(new, &at.paths, &lv.name, at.geometry) {
                    self.manager.init_resource(&r)?;
                }
            }
        }
        Ok(())
    }

    /// Before a commit, under the VG lease held exclusively: makes sure no host holds the
    /// lease of any LV of `old` that `new` no longer has, as lvmlockd's `lvremove` does by
    /// taking it, so that an LV active on any host is never removed; and the lease of any thin
    /// pool whose thin LVs or table settings change (its [`PoolState`] differs), as
    /// lvmlockd's `lvcreate`/`lvremove` of a thin LV take the pool's lease, so that a pool
    /// active on a host never gets messages or settings that only its next activation would
    /// deliver (a snapshot cut later than asked, a delete under a live device). Either gives
    /// [`LeaseError::InUse`], and nothing is held. Pools in `owned` are the caller's: it
    /// holds their leases (a host clearing the queue it delivered). A lease the disk does not
    /// show free is taken exclusively without waiting; release the returned leases after the
    /// commit, before [`Host::free_old_lvs`], which takes what was seen of the free ones.
    pub fn lock_changed_lvs(
        &self,
        old: &[LeaseRef],
        new: &crate::model::Vg,
        at: &VgPlaces,
        owned: &[crate::uuid::Uuid],
    ) -> Result<Locked, LeaseError> {
        let mut out = Locked::default();
        let removed = gone(old, new).map(|g| (g, true));
        let pools = changed_pools(old, new, owned).map(|c| (c, false));
        for ((lv, offset), is_gone) in removed.chain(pools) {
            let Some(r) = layout::lease_at(new, &at.paths, &lv.id.to_string(), offset, at.geometry)
            else {
                continue;
            };
            // Under the VG lease held exclusively no host can start taking an LV lease (every
            // activation reads the VG under its lease shared first, lvmlockd's included), so
            // a lease the disk shows free stays free: no acquire needed. Anything else is
            // settled by the daemon, which also takes over a dead host's lease.
            if let Some(seen) = self.manager.unheld(&r)? {
                if is_gone {
                    out.seen.push((offset, seen));
                }
                continue;
            }
            match self.manager.acquire(&r, Mode::Exclusive, false) {
                Ok(_) => out.held.push(r),
                Err(e) => {
                    for h in &out.held {
                        self.release_or_warn(h, "removed LV");
                    }
                    return Err(match e {
                        LeaseError::Busy { .. } | LeaseError::Orphan { .. } => LeaseError::InUse {
                            lv: format!("{}/{}", new.name, lv.name),
                        },
                        e => e,
                    });
                }
            }
        }
        Ok(out)
    }

    /// After a commit: marks the lease slots of LVs that are gone `#unused` (lvmlockd's
    /// `free_lv`), from what [`Host::lock_changed_lvs`] saw of them (`seen`) where it found
    /// them free.
    pub fn free_old_lvs(
        &self,
        old: &[LeaseRef],
        new: &crate::model::Vg,
        at: &VgPlaces,
        seen: &[(u64, SeenFree)],
    ) -> Result<(), LeaseError> {
        // A slot an LV of `new` holds is never marked free (it cannot be, as the edits of a
        // group do not hand out slots freed earlier in it; this keeps it so regardless).
        let held: std::collections::HashSet<u64> = new
            .lvs
            .iter()
            .filter_map(|l| layout::lease_offset(l.lock_args.as_deref()?))
            .collect();
        for (_, offset) in gone(old, new).filter(|(_, o)| !held.contains(o)) {
            let Some(r) =
                layout::lease_at(new, &at.paths, layout::UNUSED_NAME, offset, at.geometry)
            else {
                continue;
            };
            match seen.iter().find(|(o, _)| *o == offset) {
                Some((_, s)) => self.manager.init_free_resource(&r, s)?,
                None => self.manager.init_resource(&r)?,
            }
        }
        Ok(())
    }
}

/// The LVs of `old` whose lease `new` no longer has (removed, or given another slot), with
/// the offset of that lease in `lvmlock`.
fn gone<'a>(
    old: &'a [LeaseRef],
    new: &'a crate::model::Vg,
) -> impl Iterator<Item = (&'a LeaseRef, u64)> + 'a {
    let new = by_id(new);
    old.iter().filter_map(move |lv| match lv.kept_in(&new) {
        Some(_) => None,
        None => Some((lv, lv.offset()?)),
    })
}

/// The LVs of a VG by id.
type ById<'a> = HashMap<crate::uuid::Uuid, &'a crate::model::Lv>;

fn by_id(vg: &crate::model::Vg) -> ById<'_> {
    vg.lvs.iter().map(|l| (l.id, &**l)).collect()
}

/// The thin pools of `old` still in `new`, under the same lease, whose [`PoolState`]
/// (transaction id, message queue, table settings) `new` changes, with the offset of their
/// lease in `lvmlock`; pools in `owned` (whose lease the caller holds) are left out.
fn changed_pools<'a>(
    old: &'a [LeaseRef],
    new: &'a crate::model::Vg,
    owned: &'a [crate::uuid::Uuid],
) -> impl Iterator<Item = (&'a LeaseRef, u64)> + 'a {
    let new = by_id(new);
    old.iter().filter_map(move |lv| {
        let before = lv.pool.as_ref()?;
        let now = lv.kept_in(&new)?;
        if pool_state(now).as_ref() == Some(before) || owned.contains(&lv.id) {
            return None;
        }
        Some((lv, lv.offset()?))
    })
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
