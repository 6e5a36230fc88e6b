//! [`LeaseManager`] on the host's sanlock daemon (`SANLOCK_RUN_DIR` chooses which), through
//! `sanlock_sys::safe`. Leases live as long as this process's registration with the daemon.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use crate::dev::{BlockDevice, FileDevice};
use sanlock_sys::safe::{self, Client, Lockspace, Resource, Rv};
use sanlock_sys::{
    SANLK_ACQUIRE_IDLIVE, SANLK_ACQUIRE_LVB, SANLK_ACQUIRE_ORPHAN, SANLK_ACQUIRE_ORPHAN_ONLY,
    SANLK_ACQUIRE_OTHER, SANLK_ACQUIRE_OWNED, SANLK_ACQUIRE_OWNED_RETRY, SANLK_ACQUIRE_SHRETRY,
    SANLK_LEADER_MAGIC, SANLK_LSF_ALIGN1M, SANLK_LSF_ALIGN8M, SANLK_LSF_SECTOR4K,
    SANLK_LSF_SECTOR512, SANLK_RES_ALIGN1M, SANLK_RES_ALIGN8M, SANLK_RES_PERSISTENT,
    SANLK_RES_SECTOR4K, SANLK_RES_SECTOR512, SANLK_RES_SHARED,
};
use sanlock_sys::{SANLK_CONFIG_USED_BY_ORPHANS, SANLK_RESTRICT_SIGKILL};

use super::{
    daemon, paxos, Geometry, HeldLease, LeaseError, LeaseManager, LockspaceHealth, LockspaceSpec,
    Lvb, Mode, ResourceSpec, SeenFree, Standing,
};

/// How long a status query waits for the daemon.
const STATUS_TIMEOUT: Duration = Duration::from_secs(5);

/// Leases held through this process's registration with the sanlock daemon.
///
/// Invariants that fencing rests on:
/// - the registration is restricted from SIGKILL: when a lockspace fails, the daemon keeps
///   sending SIGTERM, so the process can stop its devices before it lets go of the leases;
///   one that never does keeps the lockspace, and the watchdog resets the host;
/// - every lockspace an LV lease is taken in is marked used by orphans: should the process
///   end with LVs active, their orphans keep a failed lockspace, and with it the watchdog;
/// - with a holder ([`SanlockLeases::with_holder`]), LV leases are the holder's: taken and
///   released on its behalf, they outlive this process for as long as the holder lives.
#[derive(Debug, Default)]
pub struct SanlockLeases {
    client: Mutex<Option<Client>>,
    /// Lockspaces marked used by orphans by this process.
    kept: Mutex<Vec<String>>,
    /// The registered process LV leases are taken for, if not this one.
    holder: Option<i32>,
    /// The LV leases held for `holder`: (path, offset).
    for_holder: Mutex<Vec<(String, u64)>>,
}

/// A registration with the daemon that holds leases other processes take for it
/// ([`SanlockLeases::with_holder`]); restricted from SIGKILL, as every registration of
/// lvmeta is. The leases go (or become orphans) when it is dropped.
#[derive(Debug)]
pub struct Holder {
    _client: Client,
}

impl Holder {
    /// Registers this process as a holder.
    pub fn register() -> Result<Self, LeaseError> {
        let client = Client::register().map_err(|rv| err("sanlock register".into(), rv))?;
        client
            .restrict(SANLK_RESTRICT_SIGKILL)
            .map_err(|rv| err("sanlock restrict".into(), rv))?;
        Ok(Self { _client: client })
    }
}

/// How many leases the daemon's status shows held for process `pid` (sanlock's view of
/// pids: the host's).
pub fn held_by(pid: i32) -> Result<usize, LeaseError> {
    let st =
        daemon::query(&daemon::socket_path(), STATUS_TIMEOUT).map_err(|e| LeaseError::Manager {
            what: "sanlock status".into(),
            why: e.to_string(),
        })?;
    Ok(st
        .resources
        .iter()
        .filter(|r| r.pid == pid && r.list != "rem")
        .count())
}

fn ls_flags(g: Geometry) -> u32 {
    if g.sector == 4096 {
        SANLK_LSF_SECTOR4K | SANLK_LSF_ALIGN8M
    } else {
        SANLK_LSF_SECTOR512 | SANLK_LSF_ALIGN1M
    }
}

fn res_flags(g: Geometry) -> u32 {
    if g.sector == 4096 {
        SANLK_RES_SECTOR4K | SANLK_RES_ALIGN8M
    } else {
        SANLK_RES_SECTOR512 | SANLK_RES_ALIGN1M
    }
}

fn ls(s: &LockspaceSpec) -> Lockspace {
    Lockspace {
        name: s.name.clone(),
        host_id: s.host_id,
        path: s.path.clone(),
        offset: s.offset,
        flags: ls_flags(s.geometry),
    }
}

fn res(r: &ResourceSpec, mode: Mode) -> Resource {
    let shared = if mode == Mode::Shared {
        SANLK_RES_SHARED
    } else {
        0
    };
    Resource {
        lockspace: r.lockspace.clone(),
        name: r.name.clone(),
        path: r.path.clone(),
        offset: r.offset,
        flags: res_flags(r.geometry) | shared,
    }
}

fn err(what: String, rv: Rv) -> LeaseError {
    LeaseError::Manager {
        what,
        why: rv.to_string(),
    }
}

/// What a failed acquire of `r` means.
fn acquire_err(r: &ResourceSpec, Rv(rv): Rv) -> LeaseError {
    let busy = rv == SANLK_ACQUIRE_IDLIVE
        || rv == SANLK_ACQUIRE_OWNED
        || rv == SANLK_ACQUIRE_OWNED_RETRY
        || rv == SANLK_ACQUIRE_SHRETRY
        || rv == SANLK_ACQUIRE_OTHER
        || rv == -libc::EAGAIN
        // Another process of this host holds or is acquiring it.
        || rv == -libc::EBUSY
        || rv == -libc::EEXIST;
    if busy {
        LeaseError::Busy {
            name: r.name.clone(),
        }
    } else if rv == -libc::ENOSPC {
        LeaseError::NotJoined {
            lockspace: r.lockspace.clone(),
        }
    } else if rv == -libc::EUCLEAN {
        LeaseError::Orphan {
            name: r.name.clone(),
        }
    } else {
        err(format!("acquire {} in {}", r.name, r.lockspace), Rv(rv))
    }
}

impl SanlockLeases {
    /// A manager that registers with the daemon on first use.
    pub fn new() -> Self {
        Self::default()
    }

    /// A manager whose LV leases are held by registered process `pid` (a [`Holder`]), as
    /// the daemon sees pids (the host's: a container needs the host's pid namespace).
    pub fn with_holder(pid: i32) -> Self {
        Self {
            holder: Some(pid),
            ..Self::default()
        }
    }

    /// Records (or forgets) that `r` is held for the holder.
    fn note_for_holder(&self, r: &ResourceSpec, held: bool) {
        let key = (r.path.clone(), r.offset);
        let mut v = self.for_holder.lock().unwrap_or_else(|p| p.into_inner());
        v.retain(|k| *k != key);
        if held {
            v.push(key);
        }
    }

    /// Was `r` taken for the holder (and not released since)?
    fn is_for_holder(&self, r: &ResourceSpec) -> bool {
        let key = (r.path.clone(), r.offset);
        self.for_holder
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(&key)
    }

    /// Acquires `raw` (of `r`) with `flags`: for the holder if there is one, else on this
    /// process's registration. The outer error: this process could not register.
    fn acquire_lv(
        &self,
        r: &ResourceSpec,
        raw: &Resource,
        flags: u32,
    ) -> Result<Result<(), Rv>, LeaseError> {
        match self.holder {
            Some(pid) => {
                Ok(safe::acquire_for(pid, raw, flags).inspect(|()| self.note_for_holder(r, true)))
            }
            None => self.with_client(|c| Ok(c.acquire(raw, flags))),
        }
    }

    /// Writes a fresh free lease at `r`: renamed in place when the area (`seen`, or read) is
    /// a never-held lease, else written whole through sanlock.
    fn write_resource(&self, r: &ResourceSpec, seen: Option<&[u8]>) -> Result<(), LeaseError> {
        match rename_in_place(r, seen) {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => tracing::debug!(
                path = %r.path, offset = r.offset, error = %e,
                "lease area unreadable here; writing it through sanlock"
            ),
        }
        safe::write_resource(&res(r, Mode::Exclusive)).map_err(|rv| {
            err(
                format!("write resource {} on {}:{}", r.name, r.path, r.offset),
                rv,
            )
        })
    }

    /// Marks `lockspace` used by orphans (once per process): a failure is logged, since the
    /// lease itself still holds; only the protection across a restart is weaker.
    fn keep_for_orphans(&self, lockspace: &str) {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if kept.iter().any(|k| k == lockspace) {
            return;
        }
        match safe::set_config(lockspace, SANLK_CONFIG_USED_BY_ORPHANS) {
            Ok(()) => kept.push(lockspace.to_owned()),
            Err(rv) => tracing::warn!(
                lockspace, error = %rv,
                "cannot mark the lockspace used by orphans: should this process end with LVs \
                 active and the lockspace then fail, no watchdog reset would follow"
            ),
        }
    }

    fn with_client<T>(
        &self,
        f: impl FnOnce(&Client) -> Result<T, LeaseError>,
    ) -> Result<T, LeaseError> {
        let mut c = self.client.lock().unwrap_or_else(|p| p.into_inner());
        if c.is_none() {
            let client = Client::register().map_err(|rv| err("sanlock register".into(), rv))?;
            client
                .restrict(SANLK_RESTRICT_SIGKILL)
                .map_err(|rv| err("sanlock restrict".into(), rv))?;
            *c = Some(client);
        }
        match c.as_ref() {
            Some(client) => f(client),
            None => Err(LeaseError::Manager {
                what: "sanlock register".into(),
                why: "no connection".into(),
            }),
        }
    }
}

impl SanlockLeases {
    /// What a failed acquire of `r` for the holder means: as [`acquire_err`], or naming the
    /// holder when the daemon does not know it.
    fn holder_err(&self, r: &ResourceSpec, rv: Rv) -> LeaseError {
        match self.holder {
            Some(pid) if rv.0 == -libc::ESRCH => LeaseError::Manager {
                what: format!("acquire {} in {} for process {pid}", r.name, r.lockspace),
                why: "the daemon has no such registered process (the lease keeper is gone, \
                      or runs in another pid namespace than the daemon's: a node plugin \
                      needs the host's pid namespace)"
                    .into(),
            },
            _ => acquire_err(r, rv),
        }
    }
}

/// Gives a never-held lease its new name with one synchronous sector write, the bytes
/// `sanlock_write_resource` would have written (see [`super::paxos`]). The area is `seen`
/// when the caller has it as it is on disk, else read. Returns false, having written
/// nothing, when the area is not such a lease and must be written whole.
fn rename_in_place(r: &ResourceSpec, seen: Option<&[u8]>) -> std::io::Result<bool> {
    let dev = FileDevice::open_rw(Path::new(&r.path))?;
    let read;
    let area = match seen {
        Some(a) => a,
        None => {
            read = read_area_from(&dev, r)?;
            &read
        }
    };
    match paxos::renamed_leader(area, r.geometry, &r.lockspace, &r.name) {
        Ok(leader) => {
            // FileDevice writes with O_DSYNC: durable on return, as sanlock's own writes.
            dev.write_at(r.offset, &leader)?;
            tracing::debug!(path = %r.path, offset = r.offset, name = %r.name, "lease renamed in place");
            Ok(true)
        }
        Err(why) => {
            tracing::debug!(path = %r.path, offset = r.offset, %why, "lease written whole");
            Ok(false)
        }
    }
}

/// Reads `r`'s whole lease area.
fn read_area(r: &ResourceSpec) -> std::io::Result<Vec<u8>> {
    read_area_from(&FileDevice::open(Path::new(&r.path))?, r)
}

fn read_area_from(dev: &FileDevice, r: &ResourceSpec) -> std::io::Result<Vec<u8>> {
    // Bounded: a lease area is 1 MiB, or 8 MiB with 4 KiB sectors (`Geometry::for_sector`).
    let mut area = vec![
        0u8;
        usize::try_from(r.geometry.align)
            .unwrap_or(usize::MAX)
            .min(8 << 20)
    ];
    dev.read_at(r.offset, &mut area)?;
    Ok(area)
}

impl LeaseManager for SanlockLeases {
    fn init_lockspace(&self, s: &LockspaceSpec, io_timeout: u32) -> Result<(), LeaseError> {
        safe::write_lockspace(&ls(s), io_timeout).map_err(|rv| {
            err(
                format!("write lockspace {} on {}:{}", s.name, s.path, s.offset),
                rv,
            )
        })
    }

    fn init_resource(&self, r: &ResourceSpec) -> Result<(), LeaseError> {
        self.write_resource(r, None)
    }

    fn init_free_resource(&self, r: &ResourceSpec, seen: &SeenFree) -> Result<(), LeaseError> {
        self.write_resource(r, seen.area.as_deref())
    }

    fn resource_name(&self, r: &ResourceSpec) -> Result<Option<String>, LeaseError> {
        match safe::read_resource(&r.path, r.offset) {
            Ok((_, name, _)) => Ok(Some(name)),
            Err(Rv(SANLK_LEADER_MAGIC)) => Ok(None),
            Err(rv) => Err(err(format!("read resource on {}:{}", r.path, r.offset), rv)),
        }
    }

    fn join(&self, s: &LockspaceSpec, io_timeout: u32) -> Result<(), LeaseError> {
        match safe::add_lockspace(&ls(s), io_timeout) {
            Ok(()) => Ok(()),
            // Already joined.
            Err(Rv(rv)) if rv == -libc::EEXIST => Ok(()),
            Err(rv) => Err(err(
                format!("join lockspace {} as host {}", s.name, s.host_id),
                rv,
            )),
        }
    }

    fn leave(&self, s: &LockspaceSpec) -> Result<(), LeaseError> {
        match safe::rem_lockspace(&ls(s)) {
            Ok(()) => Ok(()),
            Err(Rv(rv)) if rv == -libc::ENOENT => Ok(()),
            Err(Rv(rv)) if rv == -libc::EBUSY => Err(LeaseError::Manager {
                what: format!("leave lockspace {}", s.name),
                why: "leases are still held in it on this host (active LVs, staged volumes, or \
                      orphans they left); deactivate them first"
                    .into(),
            }),
            Err(rv) => Err(err(format!("leave lockspace {}", s.name), rv)),
        }
    }

    fn joined(&self, s: &LockspaceSpec) -> Result<bool, LeaseError> {
        safe::inq_lockspace(&ls(s)).map_err(|rv| err(format!("lockspace {}", s.name), rv))
    }

    fn acquire(
        &self,
        r: &ResourceSpec,
        mode: Mode,
        want_lvb: bool,
    ) -> Result<Option<Lvb>, LeaseError> {
        let raw = res(r, mode);
        let flags = if want_lvb { SANLK_ACQUIRE_LVB } else { 0 };
        self.with_client(|c| c.acquire(&raw, flags).map_err(|rv| acquire_err(r, rv)))?;
        if !want_lvb {
            return Ok(None);
        }
        let mut b = [0u8; 8];
        safe::get_lvb(&raw, &mut b).map_err(|rv| err(format!("value block of {}", r.name), rv))?;
        Ok(Some(Lvb::decode(&b)))
    }

    fn unheld(&self, r: &ResourceSpec) -> Result<Option<SeenFree>, LeaseError> {
        let area = read_area(r).map_err(|e| LeaseError::Manager {
            what: format!("lease {} at {}:{}", r.name, r.path, r.offset),
            why: e.to_string(),
        })?;
        // An area that is not a lease is no proof of anything: ask the daemon.
        let free = paxos::unheld(&area, r.geometry).unwrap_or(false);
        Ok(free.then_some(SeenFree { area: Some(area) }))
    }

    fn acquire_persistent(&self, r: &ResourceSpec, mode: Mode) -> Result<(), LeaseError> {
        self.keep_for_orphans(&r.lockspace);
        let mut raw = res(r, mode);
        raw.flags |= SANLK_RES_PERSISTENT;
        self.acquire_lv(r, &raw, SANLK_ACQUIRE_ORPHAN)?
            .map_err(|rv| self.holder_err(r, rv))
    }

    fn release_orphans(&self, r: &ResourceSpec) -> Result<u32, LeaseError> {
        // Adopting the orphan (ORPHAN_ONLY: nothing is acquired when there is none) and then
        // releasing it is synchronous, where SANLK_REL_ORPHAN leaves the release on disk to
        // a daemon thread: another node may take the lease as soon as this returns.
        for mode in [Mode::Exclusive, Mode::Shared] {
            let mut raw = res(r, mode);
            raw.flags |= SANLK_RES_PERSISTENT;
            match self.acquire_lv(r, &raw, SANLK_ACQUIRE_ORPHAN_ONLY)? {
                Ok(()) => {
                    self.release(r, None)?;
                    return Ok(1);
                }
                // The orphan is in the other mode.
                Err(Rv(rv)) if rv == -libc::EUCLEAN => continue,
                Err(Rv(rv)) if rv == -libc::ENOENT => return Ok(0),
                // No orphan of this host: the lease is being released (an orphan dropped
                // after a fence), held by another process here, or by another host.
                // (sanlock 3.8.5 tests ORPHAN_ONLY against the wrong bit, so with no
                // orphan it acquires a free lease: released again just above.)
                Err(rv) if matches!(acquire_err(r, rv), LeaseError::Busy { .. }) => return Ok(0),
                Err(rv) => return Err(self.holder_err(r, rv)),
            }
        }
        Ok(0)
    }

    fn release(&self, r: &ResourceSpec, lvb: Option<Lvb>) -> Result<(), LeaseError> {
        let raw = res(r, Mode::Exclusive);
        if let (Some(pid), true) = (self.holder, self.is_for_holder(r)) {
            self.note_for_holder(r, false);
            return safe::release_for(pid, &raw, 0).map(drop).map_err(|rv| {
                err(
                    format!(
                        "release {} in {} held for process {pid}",
                        r.name, r.lockspace
                    ),
                    rv,
                )
            });
        }
        if let Some(v) = lvb {
            safe::set_lvb(&raw, &v.encode())
                .map_err(|rv| err(format!("value block of {}", r.name), rv))?;
        }
        self.with_client(|c| {
            c.release(&raw)
                .map_err(|rv| err(format!("release {} in {}", r.name, r.lockspace), rv))
        })
    }

    fn drop_orphans(&self, r: &ResourceSpec) -> Result<u32, LeaseError> {
        let raw = res(r, Mode::Exclusive);
        self.note_for_holder(r, false);
        self.with_client(|c| {
            c.release_orphans(&raw).map_err(|rv| {
                err(
                    format!("drop the orphan of {} in {}", r.name, r.lockspace),
                    rv,
                )
            })
        })
    }

    fn let_go(&self, lockspace: &str, names: &[String]) -> Result<(), LeaseError> {
        for name in names {
            // The daemon finds a held lease by its lockspace and name.
            let raw = Resource {
                lockspace: lockspace.to_owned(),
                name: name.clone(),
                path: String::new(),
                offset: 0,
                flags: 0,
            };
            let released = match self.holder {
                Some(pid) => safe::release_for(pid, &raw, 0).map(drop),
                None => self.with_client(|c| Ok(c.release(&raw)))?,
            };
            match released {
                // Another process's (lvmlockd's): the daemon ends that one itself.
                Err(Rv(rv)) if rv == -libc::ENOENT => {}
                Err(rv) => return Err(err(format!("let go of {name} in {lockspace}"), rv)),
                Ok(()) => {}
            }
        }
        let mut v = self.for_holder.lock().unwrap_or_else(|p| p.into_inner());
        v.clear();
        Ok(())
    }

    fn standing(&self) -> Result<Standing, LeaseError> {
        let socket = daemon::socket_path();
        let st = daemon::query(&socket, STATUS_TIMEOUT).map_err(|e| LeaseError::Manager {
            what: "sanlock status".into(),
            why: e.to_string(),
        })?;
        Ok(standing_of(&st))
    }
}

/// The manager-neutral account of a sanlock status.
pub fn standing_of(st: &daemon::DaemonStatus) -> Standing {
    Standing {
        watchdog: st.use_watchdog,
        lockspaces: st
            .lockspaces
            .iter()
            .map(|l| LockspaceHealth {
                name: l.name.clone(),
                healthy: l.healthy(),
                kept_by_orphans: l.used_by_orphans,
                host_dead_seconds: st
                    .watchdog_fire_timeout
                    .filter(|_| l.io_timeout > 0)
                    .map(|w| 8 * l.io_timeout + w),
            })
            .collect(),
        held: st
            .resources
            .iter()
            .filter(|r| r.list != "rem")
            .map(|r| HeldLease {
                lockspace: r.lockspace.clone(),
                name: r.name.clone(),
                orphan: r.list == "orphan",
            })
            .collect(),
    }
}
