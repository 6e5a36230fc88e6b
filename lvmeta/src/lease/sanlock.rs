//! [`LeaseManager`] on the host's sanlock daemon (`SANLOCK_RUN_DIR` chooses which), through
//! `sanlock_sys::safe`. Leases live as long as this process's registration with the daemon.

use std::path::Path;
use std::sync::Mutex;

use crate::dev::{BlockDevice, FileDevice};
use sanlock_sys::safe::{self, Client, Lockspace, Resource, Rv};
use sanlock_sys::{
    SANLK_ACQUIRE_IDLIVE, SANLK_ACQUIRE_LVB, SANLK_ACQUIRE_ORPHAN, SANLK_ACQUIRE_ORPHAN_ONLY,
    SANLK_ACQUIRE_OTHER, SANLK_ACQUIRE_OWNED, SANLK_ACQUIRE_OWNED_RETRY, SANLK_ACQUIRE_SHRETRY,
    SANLK_HOSTID_BUSY, SANLK_LEADER_MAGIC, SANLK_LSF_ALIGN1M, SANLK_LSF_ALIGN8M,
    SANLK_LSF_SECTOR4K, SANLK_LSF_SECTOR512, SANLK_RES_ALIGN1M, SANLK_RES_ALIGN8M,
    SANLK_RES_PERSISTENT, SANLK_RES_SECTOR4K, SANLK_RES_SECTOR512, SANLK_RES_SHARED,
};
use sanlock_sys::{
    SANLK_ACQUIRE_OWNER_NOWAIT, SANLK_CONFIG_USED_BY_ORPHANS, SANLK_HOST_DEAD, SANLK_HOST_FAIL,
    SANLK_HOST_FREE, SANLK_HOST_LIVE, SANLK_HOST_MASK, SANLK_RESTRICT_SIGKILL,
};

use super::holder::{status, ForHolder};
use super::{
    daemon, paxos, Geometry, HeldLease, HostState, HostView, LeaseError, LeaseManager,
    LockspaceHealth, LockspaceSpec, Lvb, Mode, ResourceSpec, SeenFree, Standing,
};

/// Longest wait for another process's join of the same lockspace to end.
const JOIN_IN_PROGRESS_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

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
    /// The registered process LV leases are taken for, if not this one.
    holder: Option<ForHolder>,
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

    /// A manager whose LV leases are held by registered process `pid` (a
    /// [`super::holder::Holder`]), as the daemon sees pids (the host's: a container needs
    /// the host's pid namespace). What the holder holds already is asked of the daemon.
    pub fn with_holder(pid: i32) -> Self {
        Self {
            holder: Some(ForHolder::new(pid)),
            ..Self::default()
        }
    }

    /// The holder, when it holds `r`.
    fn holder_of(&self, r: &ResourceSpec) -> Option<&ForHolder> {
        self.holder
            .as_ref()
            .filter(|h| h.holds(&r.lockspace, &r.name))
    }

    /// Acquires `raw` (of `r`) with `flags`: for the holder if there is one, else on this
    /// process's registration. The outer error: this process could not register.
    fn acquire_lv(
        &self,
        r: &ResourceSpec,
        raw: &Resource,
        flags: u32,
    ) -> Result<Result<(), Rv>, LeaseError> {
        let Some(h) = &self.holder else {
            return self.with_client(|c| Ok(c.acquire(raw, flags)));
        };
        match safe::acquire_for(h.pid, raw, flags) {
            Ok(()) => {
                h.note(&r.lockspace, &r.name, true);
                Ok(Ok(()))
            }
            // The holder has it already (an earlier serving process took it): adopted.
            Err(Rv(rv)) if rv == -libc::EEXIST && h.holds(&r.lockspace, &r.name) => Ok(Ok(())),
            Err(rv) => Ok(Err(rv)),
        }
    }

    /// Releases `r` held by the holder; `Ok(false)` when the daemon says the holder does
    /// not hold it.
    fn release_for_holder(&self, h: &ForHolder, r: &Resource) -> Result<bool, LeaseError> {
        h.note(&r.lockspace, &r.name, false);
        match safe::release_for(h.pid, r, 0) {
            Ok(_) => Ok(true),
            // sanlock answers -1 (or -ENOENT) for a lease the pid does not hold.
            Err(Rv(rv)) if rv == -1 || rv == -libc::ENOENT => Ok(false),
            Err(rv) => Err(err(
                format!(
                    "release {} in {} held for process {}",
                    r.name, r.lockspace, h.pid
                ),
                rv,
            )),
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

    /// Marks `lockspace` used by orphans: the mark belongs to the daemon's lockspace
    /// instance (a lockspace joined again has lost it), so it is set at every LV lease.
    /// A failure is logged: the lease itself still holds; only the protection once this
    /// process and its holder are gone is weaker.
    fn mark_for_orphans(&self, lockspace: &str) {
        if let Err(e) = self.keep_for_orphans(lockspace) {
            tracing::warn!(
                lockspace, error = %e,
                "should the lease holder end with LVs active and the lockspace then fail, no \
                 watchdog reset would follow"
            );
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
        match self.holder.as_ref().map(|h| h.pid) {
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
        // Another process of this host joining it now: its join is waited for (sanlock may
        // wait out a previous owner of the id, 8 io_timeouts, before it ends).
        let mut added = safe::add_lockspace(&ls(s), io_timeout);
        let since = std::time::Instant::now();
        while matches!(added, Err(Rv(rv)) if rv == -libc::EINPROGRESS)
            && since.elapsed() < JOIN_IN_PROGRESS_WAIT
        {
            if since.elapsed().as_secs().is_multiple_of(30) {
                tracing::info!(lockspace = %s.name, "another process of this host is joining the lockspace: waiting for it");
            }
            std::thread::sleep(std::time::Duration::from_secs(1));
            added = safe::add_lockspace(&ls(s), io_timeout);
        }
        match added {
            Ok(()) => Ok(()),
            // Already joined (under the id asked or another: callers that care check).
            Err(Rv(rv)) if rv == -libc::EEXIST => Ok(()),
            Err(Rv(SANLK_HOSTID_BUSY)) => Err(LeaseError::HostIdBusy {
                lockspace: s.name.clone(),
                host_id: s.host_id,
            }),
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
        self.mark_for_orphans(&r.lockspace);
        let mut raw = res(r, mode);
        raw.flags |= SANLK_RES_PERSISTENT;
        self.acquire_lv(r, &raw, SANLK_ACQUIRE_ORPHAN)?
            .map_err(|rv| self.holder_err(r, rv))
    }

    fn release_orphans(&self, r: &ResourceSpec) -> Result<u32, LeaseError> {
        // Held for the holder by an earlier serving process: released as such.
        if let Some(h) = self.holder_of(r) {
            return Ok(u32::from(
                self.release_for_holder(h, &res(r, Mode::Exclusive))?,
            ));
        }
        // Adopting the orphan (ORPHAN_ONLY) and then releasing it is synchronous, where
        // SANLK_REL_ORPHAN leaves the release on disk to a daemon thread: another node may
        // take the lease as soon as this returns. OWNER_NOWAIT: sanlock 3.8.5 tests
        // ORPHAN_ONLY against the wrong bit, so with no orphan it acquires for real, and
        // must not wait out a dead owner here.
        for mode in [Mode::Exclusive, Mode::Shared] {
            let mut raw = res(r, mode);
            raw.flags |= SANLK_RES_PERSISTENT;
            let flags = SANLK_ACQUIRE_ORPHAN_ONLY | SANLK_ACQUIRE_OWNER_NOWAIT;
            match self.acquire_lv(r, &raw, flags)? {
                Ok(()) => {
                    self.release(r, None)?;
                    return Ok(1);
                }
                // The orphan is in the other mode.
                Err(Rv(rv)) if rv == -libc::EUCLEAN => continue,
                Err(Rv(rv)) if rv == -libc::ENOENT => return Ok(0),
                // No orphan of this host: the lease is being released (an orphan dropped
                // after a fence), held by another process here, or by another host.
                Err(rv) if matches!(acquire_err(r, rv), LeaseError::Busy { .. }) => return Ok(0),
                Err(rv) => return Err(self.holder_err(r, rv)),
            }
        }
        Ok(0)
    }

    fn release(&self, r: &ResourceSpec, lvb: Option<Lvb>) -> Result<(), LeaseError> {
        let raw = res(r, Mode::Exclusive);
        if let Some(h) = self.holder_of(r) {
            return self.release_for_holder(h, &raw).map(drop);
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
        let mut first = Ok(());
        for name in names {
            // The daemon finds a held lease by its lockspace and name.
            let raw = Resource {
                lockspace: lockspace.to_owned(),
                name: name.clone(),
                path: String::new(),
                offset: 0,
                flags: 0,
            };
            if let Some(h) = &self.holder {
                if let Err(e) = self.release_for_holder(h, &raw) {
                    first = first.and(Err(e));
                }
            }
            // An orphan of it; a lease of another process (lvmlockd) the daemon ends itself.
            if let Err(rv) = self.with_client(|c| Ok(c.release_orphans(&raw)))? {
                tracing::debug!(lockspace, lease = %name, error = %rv, "no orphan to drop");
            }
        }
        first
    }

    fn keep_for_orphans(&self, lockspace: &str) -> Result<(), LeaseError> {
        safe::set_config(lockspace, SANLK_CONFIG_USED_BY_ORPHANS)
            .map_err(|rv| err(format!("mark {lockspace} used by orphans"), rv))
    }

    fn host(&self, lockspace: &str, host_id: u64) -> Result<Option<HostView>, LeaseError> {
        // Asked by id: the daemon's answer for all hosts leaves out those whose delta lease
        // is free (timestamp 0), which is how a host that left looks.
        let hosts = match safe::get_hosts(lockspace, host_id) {
            Ok(h) => h,
            // Not read the lockspace's delta leases yet (about a second after a join).
            Err(Rv(rv)) if rv == -libc::EAGAIN => return Ok(None),
            Err(rv) => return Err(err(format!("host {host_id} of lockspace {lockspace}"), rv)),
        };
        Ok(hosts
            .iter()
            .find(|h| h.host_id == host_id)
            .map(|h| HostView {
                host_id: h.host_id,
                generation: h.generation,
                state: match h.flags & SANLK_HOST_MASK {
                    SANLK_HOST_FREE => HostState::Free,
                    SANLK_HOST_LIVE => HostState::Live,
                    SANLK_HOST_FAIL => HostState::Fail,
                    SANLK_HOST_DEAD => HostState::Dead,
                    _ => HostState::Unknown,
                },
            }))
    }

    fn standing(&self) -> Result<Standing, LeaseError> {
        Ok(standing_of(&status()?))
    }
}

/// The manager-neutral account of a sanlock status.
pub fn standing_of(st: &daemon::DaemonStatus) -> Standing {
    Standing {
        host_name: st.our_host_name.clone(),
        watchdog: st.use_watchdog,
        lockspaces: st
            .lockspaces
            .iter()
            .map(|l| LockspaceHealth {
                name: l.name.clone(),
                host_id: l.host_id,
                healthy: l.healthy(),
                failed: l.renew_fail || l.space_dead || l.killing_pids || l.list == "rem",
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
            .filter(|r| r.list == "held" || r.list == "orphan")
            .map(|r| HeldLease {
                lockspace: r.lockspace.clone(),
                name: r.name.clone(),
                orphan: r.list == "orphan",
            })
            .collect(),
    }
}
