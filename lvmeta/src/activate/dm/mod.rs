//! The device-mapper backend: an LV becomes `/dev/mapper/<vg>-<lv>`, lvm2's name for it, with
//! lvm2's device uuid (`LVM-<vg id><lv id>`), so that stock lvm2 on the same host sees it
//! active. Its table is built here from the LV's [`Placement`] (pure: [`dm_name`],
//! [`linear_table`]) and loaded with the devicemapper crate through `/dev/mapper/control`.
//! There is no udev: activation makes the device node, as libdevmapper does without udev,
//! and checks an existing one by its device number (a wrong one is replaced, never
//! trusted); removing a device removes its node. A status query makes nothing.
//!
//! Linear LVs of any number of pieces and striped LVs are built, and thin LVs and thin
//! pools the way lvm2 stacks them: `<vg>-<pool>_tmeta` (linear, uuid suffix `-tmeta`) and
//! `<vg>-<pool>_tdata` (linear or striped, `-tdata`), `<vg>-<pool>-tpool` (the `thin-pool`
//! target, `-tpool`), `<vg>-<thin>` (`thin <tpool> <device id>`) and, only when the pool LV
//! itself is activated, `<vg>-<pool>` (read-only linear over the tpool). When the pool comes up, the
//! messages queued in the metadata are sent by lvm2's transaction rule
//! ([`super::thin::deliveries`]). Striped LVs get one `striped` target per segment. Other
//! segment types (raid, cache, ...) are refused with [`ActivateError::Unsupported`] naming
//! the target they need.
//!
//! Files: this one (the backend and its [`Backend`] methods), `tables.rs` (the tables,
//! pure), `nodes.rs` (devices and their nodes), `pool.rs` (a thin pool's stack),
//! `messages.rs` (pool messages, suspend and resume), `fencing.rs` (error tables),
//! `wrap.rs` (the two-layer wrappers of volumes used on several hosts).

use std::path::{Path, PathBuf};

use devicemapper::{DevId, DmError, DmFlags, DmName, DmOptions, DM};

use super::fence;
use super::{ActivateError, Backend, Layout, Piece, Placement};

mod fencing;
mod messages;
mod nodes;
mod pool;
mod tables;
mod wrap;

use nodes::{block_devnum, node_devnum};
pub use nodes::{device_opens, usage};
use tables::over;
pub use tables::{linear_table, mapped_ranges, pool_table, striped_table, thin_table, TableLine};

/// Where device nodes go.
const MAPPER_DIR: &str = "/dev/mapper";

pub use super::dm_names::{dm_layer_name, dm_name};

/// LVs as device-mapper devices (see the module documentation).
pub struct DmBackend {
    dm: DM,
}

impl std::fmt::Debug for DmBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DmBackend")
    }
}

fn dm_err(what: &str, e: impl std::fmt::Display) -> ActivateError {
    ActivateError::Io {
        device: format!("{MAPPER_DIR}/control"),
        why: format!("{what}: {e}"),
    }
}

/// `name` as device-mapper takes it (at most 127 bytes, no `/`).
/// The flags of a table load: read-only when asked.
fn table_flags(read_only: bool) -> DmFlags {
    match read_only {
        true => DmFlags::DM_READONLY,
        false => DmFlags::empty(),
    }
}

fn dm_name_of(name: &str) -> Result<&DmName, ActivateError> {
    DmName::new(name).map_err(|e| dm_err(&format!("device name {name:?}"), e))
}

/// The errno of a failed ioctl.
fn errno(e: &DmError) -> Option<i32> {
    match e {
        DmError::Core(devicemapper::errors::Error::Ioctl(_, _, _, err)) => Some(**err as i32),
        _ => None,
    }
}

/// One device to make: lvm2's name and uuid for it, its table, and whether it is read-only.
struct Dev {
    name: String,
    uuid: String,
    table: Vec<TableLine>,
    read_only: bool,
}

impl DmBackend {
    /// The backend, when this kernel has device-mapper (`/dev/mapper/control` opens).
    pub fn probe() -> Option<Self> {
        DM::new().ok().map(|dm| Self { dm })
    }

    fn unsupported(p: &Placement, t: &str) -> ActivateError {
        ActivateError::Unsupported {
            lv: format!("{}/{}", p.vg, p.lv),
            why: format!(
                "{t} LVs need the dm-{} target, whose tables lvmeta does not build yet",
                t.split(' ').next().unwrap_or(t)
            ),
        }
    }
}

impl Backend for DmBackend {
    fn name(&self) -> &'static str {
        "device-mapper"
    }

    fn active(&self, p: &Placement) -> Result<Option<PathBuf>, ActivateError> {
        let Some(devnum) = self.mine(&dm_name(&p.vg, &p.lv), &p.dm_uuid)? else {
            return Ok(None);
        };
        let node = Self::node(p);
        match node_devnum(&node) {
            Some(d) if d == devnum => Ok(Some(node)),
            found => Err(ActivateError::Io {
                device: node.display().to_string(),
                why: format!(
                    "device-mapper has {}:{} for {}/{}, but this node {}: activate the LV \
                     again to make it",
                    devnum.0,
                    devnum.1,
                    p.vg,
                    p.lv,
                    match found {
                        Some((a, b)) => format!("points at {a}:{b}"),
                        None => "is missing or not a block device".into(),
                    }
                ),
            }),
        }
    }

    fn activate(&self, p: &Placement, read_only: bool) -> Result<PathBuf, ActivateError> {
        let name = dm_name(&p.vg, &p.lv);
        // A stack fenced after its lease was lost may show stale data: never used again,
        // made anew once its last user is gone.
        if self.fenced(p)? {
            let gone = self.deactivate(p).and_then(|()| self.fenced(p));
            if !matches!(gone, Ok(false)) {
                return Err(ActivateError::InUse {
                    lv: format!("{}/{}", p.vg, p.lv),
                    by: format!(
                        "{name} or its pool, fenced after this host lost the lease and still \
                         open (unpublish and unstage every volume of it first)"
                    ),
                });
            }
        }
        if let Some(devnum) = self.mine(&name, &p.dm_uuid)? {
            return Self::make_node(p, devnum);
        }
        let devnum = match &p.layout {
            Layout::Linear(_) | Layout::Striped(_) => {
                let mut d = Self::mapped_dev(p)?;
                d.read_only = read_only;
                self.ensure(&d)?
            }
            Layout::Thin { pool, device_id } => {
                let tpool = self.ensure_pool(pool)?;
                let made = self.ensure(&Dev {
                    name: name.clone(),
                    uuid: p.dm_uuid.clone(),
                    table: vec![thin_table(p.bytes, tpool, *device_id)],
                    read_only,
                });
                match made {
                    Ok(d) => d,
                    Err(e) => {
                        // Leave nothing behind for a thin LV that did not come up.
                        if let Err(e2) = self.release_pool(pool, false) {
                            tracing::warn!(pool = %pool.name, error = %e2, "could not take the pool down again");
                        }
                        return Err(e);
                    }
                }
            }
            Layout::Pool(pool) => {
                let tpool = self.ensure_pool(pool)?;
                self.ensure(&Dev {
                    name: name.clone(),
                    uuid: pool.dm_uuid.clone(),
                    table: vec![over(pool.bytes, tpool)],
                    read_only: true,
                })?
            }
            Layout::Other(t) => return Err(Self::unsupported(p, t)),
        };
        tracing::info!(vg = %p.vg, lv = %p.lv, device = %name, read_only, "activated with device-mapper");
        Self::make_node(p, devnum)
    }

    fn deactivate(&self, p: &Placement) -> Result<(), ActivateError> {
        match &p.layout {
            Layout::Thin { pool, .. } => {
                self.remove(&dm_name(&p.vg, &p.lv), &p.dm_uuid)?;
                self.release_pool(pool, false)
            }
            Layout::Pool(pool) => self.release_pool(pool, true),
            _ => self.remove(&dm_name(&p.vg, &p.lv), &p.dm_uuid),
        }
    }

    fn refresh(&self, p: &Placement) -> Result<(), ActivateError> {
        let name = dm_name(&p.vg, &p.lv);
        // A fenced stack never gets a live table back: its lease is gone.
        if self.fenced(p)? {
            return Err(ActivateError::InUse {
                lv: format!("{}/{}", p.vg, p.lv),
                by: format!("{name}, fenced after this host lost the LV's lease"),
            });
        }
        // A pool is live in the kernel when its tpool is, whether or not the pool LV's own
        // device is up.
        let live = match &p.layout {
            Layout::Pool(pool) => Self::tpool_name(pool),
            _ => name.clone(),
        };
        if self.find(&live)?.is_none() {
            return Ok(());
        }
        match &p.layout {
            Layout::Linear(_) | Layout::Striped(_) => {
                self.reload(&name, &Self::mapped_dev(p)?.table)
            }
            Layout::Thin { pool, device_id } => {
                // Bottom up: the data LV, the pool over it, the pool device, the queued
                // messages, the thin LV.
                let tpool = self.refresh_pool(pool)?;
                self.deliver(pool, &Self::tpool_name(pool))?;
                self.reload(&name, &[thin_table(p.bytes, tpool, *device_id)])
            }
            Layout::Pool(pool) => {
                self.refresh_pool(pool)?;
                self.deliver(pool, &Self::tpool_name(pool))
            }
            Layout::Other(t) => Err(Self::unsupported(p, t)),
        }
    }

    fn pool_status(&self, p: &Placement) -> Result<Option<super::thin::PoolStatus>, ActivateError> {
        let (Layout::Thin { pool, .. } | Layout::Pool(pool)) = &p.layout else {
            return Ok(None);
        };
        let tpool = Self::tpool_name(pool);
        if self.find(&tpool)?.is_none() {
            return Ok(None);
        }
        self.tpool_status(&tpool).map(Some)
    }

    fn can_fence(&self) -> bool {
        true
    }

    fn is_fenced(&self, p: &Placement) -> Result<bool, ActivateError> {
        self.fenced(p)
    }

    fn devices(&self) -> Result<Vec<(String, String)>, ActivateError> {
        let listed = self
            .dm
            .list_devices()
            .map_err(|e| dm_err("list devices", e))?;
        let mut out = Vec::with_capacity(listed.len());
        for (name, _, _) in listed {
            // A device removed meanwhile is simply not reported.
            if let Ok(info) = self.dm.device_info(&DevId::Name(&name)) {
                let uuid = info.uuid().map(|u| u.to_string()).unwrap_or_default();
                out.push((name.to_string(), uuid));
            }
        }
        Ok(out)
    }

    fn fence_device(&self, name: &str) -> Result<(), ActivateError> {
        self.load_error(name)?;
        tracing::warn!(device = name, "fenced: every I/O now fails");
        Ok(())
    }

    fn fence(&self, p: &Placement) -> Result<Vec<String>, ActivateError> {
        let mut done = Vec::new();
        for t in fence::stack(p) {
            let Some(info) = self.info(&t.name)? else {
                continue;
            };
            let found = info.uuid().map(|u| u.to_string()).unwrap_or_default();
            if !t.uuid.matches(&found) {
                tracing::warn!(device = %t.name, uuid = %found, "not fenced: another VG's or tool's device of this name");
                continue;
            }
            self.load_error(&t.name)?;
            done.push(t.name);
        }
        if !done.is_empty() {
            tracing::warn!(vg = %p.vg, lv = %p.lv, devices = ?done, "fenced: every I/O now fails");
        }
        Ok(done)
    }

    fn users(&self, pieces: &[&Piece]) -> Result<Vec<PathBuf>, ActivateError> {
        let mut wanted = Vec::with_capacity(pieces.len());
        for p in pieces {
            wanted.push((block_devnum(&p.device)?, p.offset, p.len));
        }
        let devices = self
            .dm
            .list_devices()
            .map_err(|e| dm_err("list devices", e))?;
        let mut out = Vec::new();
        for (name, _, _) in devices {
            let flags = DmOptions::default().set_flags(DmFlags::DM_STATUS_TABLE);
            let shown = name.to_string();
            let (_, table) = self
                .dm
                .table_status(&DevId::Name(&name), flags)
                .map_err(|e| dm_err(&format!("table of {shown}"), e))?;
            let hit = mapped_ranges(&table).iter().any(|&(d, o, l)| {
                wanted.iter().any(|&(w, wo, wl)| {
                    w == d && o < wo.saturating_add(wl) && wo < o.saturating_add(l)
                })
            });
            if hit {
                out.push(Path::new(MAPPER_DIR).join(shown));
            }
        }
        Ok(out)
    }

    fn wrap(
        &self,
        w: &super::wrap::Wrap,
        backing: &str,
        sectors: crate::units::Sectors,
        read_only: bool,
    ) -> Result<PathBuf, ActivateError> {
        DmBackend::wrap(self, w, backing, sectors, read_only)
    }

    fn unwrap(&self, w: &super::wrap::Wrap) -> Result<(), ActivateError> {
        DmBackend::unwrap(self, w)
    }

    fn wrapped(&self, w: &super::wrap::Wrap) -> Result<Option<(u32, u32)>, ActivateError> {
        DmBackend::wrapped_backing(self, w)
    }

    fn hold(&self, w: &super::wrap::Wrap) -> Result<(), ActivateError> {
        DmBackend::hold(self, w)
    }

    fn held(&self, w: &super::wrap::Wrap) -> Result<bool, ActivateError> {
        DmBackend::is_held(self, w)
    }

    fn switch(
        &self,
        w: &super::wrap::Wrap,
        backing: &str,
        sectors: crate::units::Sectors,
        read_only: bool,
    ) -> Result<(), ActivateError> {
        DmBackend::switch(self, w, backing, sectors, read_only)
    }

    fn release(&self, w: &super::wrap::Wrap) -> Result<(), ActivateError> {
        DmBackend::release(self, w)
    }

    fn resize_wrap(
        &self,
        w: &super::wrap::Wrap,
        backing: &str,
        sectors: crate::units::Sectors,
        read_only: bool,
    ) -> Result<(), ActivateError> {
        DmBackend::resize(self, w, backing, sectors, read_only)
    }
}
