//! [`LeaseManager`] on the host's sanlock daemon (`SANLOCK_RUN_DIR` chooses which), through
//! `sanlock_sys::safe`. Leases live as long as this process's registration with the daemon.

use std::path::Path;
use std::sync::Mutex;

use crate::dev::{BlockDevice, FileDevice};
use sanlock_sys::safe::{self, Client, Lockspace, Resource, Rv};
use sanlock_sys::{
    SANLK_ACQUIRE_IDLIVE, SANLK_ACQUIRE_OTHER, SANLK_ACQUIRE_OWNED, SANLK_ACQUIRE_OWNED_RETRY,
    SANLK_ACQUIRE_SHRETRY, SANLK_LEADER_MAGIC, SANLK_LSF_ALIGN1M, SANLK_LSF_ALIGN8M,
    SANLK_LSF_SECTOR4K, SANLK_LSF_SECTOR512, SANLK_RES_ALIGN1M, SANLK_RES_ALIGN8M,
    SANLK_RES_SECTOR4K, SANLK_RES_SECTOR512, SANLK_RES_SHARED,
};

use super::{paxos, Geometry, LeaseError, LeaseManager, LockspaceSpec, Lvb, Mode, ResourceSpec};

/// Leases held through this process's registration with the sanlock daemon.
#[derive(Debug, Default)]
pub struct SanlockLeases {
    client: Mutex<Option<Client>>,
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

impl SanlockLeases {
    /// A manager that registers with the daemon on first use.
    pub fn new() -> Self {
        Self::default()
    }

    fn with_client<T>(
        &self,
        f: impl FnOnce(&Client) -> Result<T, LeaseError>,
    ) -> Result<T, LeaseError> {
        let mut c = self.client.lock().unwrap_or_else(|p| p.into_inner());
        if c.is_none() {
            *c = Some(Client::register().map_err(|rv| err("sanlock register".into(), rv))?);
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

/// Gives a never-held lease its new name with one synchronous sector write, the bytes
/// `sanlock_write_resource` would have written (see [`super::paxos`]). Returns false, having
/// written nothing, when the area is not such a lease and must be written whole.
fn rename_in_place(r: &ResourceSpec) -> std::io::Result<bool> {
    let dev = FileDevice::open_rw(Path::new(&r.path))?;
    // Bounded: a lease area is 1 MiB, or 8 MiB with 4 KiB sectors (`Geometry::for_sector`).
    let mut area = vec![
        0u8;
        usize::try_from(r.geometry.align)
            .unwrap_or(usize::MAX)
            .min(8 << 20)
    ];
    dev.read_at(r.offset, &mut area)?;
    match paxos::renamed_leader(&area, r.geometry, &r.lockspace, &r.name) {
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
        match rename_in_place(r) {
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
        self.with_client(|c| match c.acquire(&raw, want_lvb) {
            Ok(()) => Ok(()),
            Err(Rv(rv))
                if rv == SANLK_ACQUIRE_IDLIVE
                    || rv == SANLK_ACQUIRE_OWNED
                    || rv == SANLK_ACQUIRE_OWNED_RETRY
                    || rv == SANLK_ACQUIRE_SHRETRY
                    || rv == SANLK_ACQUIRE_OTHER
                    || rv == -libc::EAGAIN
                    // Another process of this host holds or is acquiring it.
                    || rv == -libc::EBUSY
                    || rv == -libc::EEXIST =>
            {
                Err(LeaseError::Busy {
                    name: r.name.clone(),
                })
            }
            Err(Rv(rv)) if rv == -libc::ENOSPC => Err(LeaseError::NotJoined {
                lockspace: r.lockspace.clone(),
            }),
            Err(rv) => Err(err(format!("acquire {} in {}", r.name, r.lockspace), rv)),
        })?;
        if !want_lvb {
            return Ok(None);
        }
        let mut b = [0u8; 8];
        safe::get_lvb(&raw, &mut b).map_err(|rv| err(format!("value block of {}", r.name), rv))?;
        Ok(Some(Lvb::decode(&b)))
    }

    fn release(&self, r: &ResourceSpec, lvb: Option<Lvb>) -> Result<(), LeaseError> {
        let raw = res(r, Mode::Exclusive);
        if let Some(v) = lvb {
            safe::set_lvb(&raw, &v.encode())
                .map_err(|rv| err(format!("value block of {}", r.name), rv))?;
        }
        self.with_client(|c| {
            c.release(&raw)
                .map_err(|rv| err(format!("release {} in {}", r.name, r.lockspace), rv))
        })
    }
}
