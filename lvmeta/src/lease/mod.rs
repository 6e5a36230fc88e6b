//! Leases that coordinate hosts sharing a VG, laid out exactly as lvmlockd lays them out with
//! sanlock (lvm2's `daemons/lvmlockd/lvmlockd-sanlock.c`), so that lvmeta hosts and stock lvmlockd hosts
//! exclude each other.
//!
//! [`layout`] is pure: lockspace and resource names, offsets inside the `lvmlock` LV and their
//! place on the PVs, the value block. [`LeaseManager`] is what a lock manager must do;
//! [`FakeLeases`] keeps leases in memory for unit tests, and the `sanlock` feature adds
//! [`sanlock::SanlockLeases`], which talks to the host's sanlock daemon.
//!
//! [`Host`] is one host's view: `host.rs` (construction, the fencing gate, lockspaces, VG
//! and global leases, an LV's lease for activation) and `lv_leases.rs` (every lease a new
//! shared VG writes; LV leases across a change).

pub mod board;
pub mod board_io;
pub mod daemon;
mod fake;
#[cfg(feature = "sanlock")]
pub mod holder;
mod host;
pub mod hostid;
pub mod layout;
mod linger;
mod lv_leases;
pub mod observe;
pub mod paxos;
#[cfg(feature = "sanlock")]
pub mod sanlock;
pub mod standing;

pub use fake::FakeLeases;
pub use host::lvmlocal_host_id;
pub use layout::{Geometry, Lvb, LOCKSPACE_PREFIX};
pub use lv_leases::{pool_state, LeaseRef, PoolState};
pub use standing::{HeldLease, LockspaceHealth, Standing};

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
    /// Another live host holds this host id in the lockspace (sanlock's SANLK_HOSTID_BUSY).
    #[error("host id {host_id} of lockspace {lockspace} is held by another live host")]
    HostIdBusy {
        /// The lockspace.
        lockspace: String,
        /// The host id.
        host_id: u64,
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
    /// Host `host_id` of `lockspace`, which this host has joined, as the manager sees it
    /// now; `None` while it cannot say yet (sanlock: until it has read the lockspace's
    /// delta leases once after the join, about a second).
    fn host(&self, lockspace: &str, host_id: u64) -> Result<Option<HostView>, LeaseError>;
}

/// A host of a lockspace as the lock manager sees it (sanlock's `sanlk_host`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostView {
    /// Its host id.
    pub host_id: u64,
    /// How many times a host has joined under this id (grows by one per join).
    pub generation: u64,
    /// What its delta lease says of it now.
    pub state: HostState,
}

/// What a host's delta lease says of it (sanlock's `SANLK_HOST_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostState {
    /// Not watched long enough to say.
    Unknown,
    /// It left the lockspace (its delta lease is free).
    Free,
    /// It renews its delta lease.
    Live,
    /// It stopped renewing, not yet long enough to be dead.
    Fail,
    /// It stopped renewing for the host-dead time: its leases may be taken (a host that
    /// held some was reset by its watchdog by then; one that held none was not, but it
    /// has lost the lockspace).
    Dead,
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
