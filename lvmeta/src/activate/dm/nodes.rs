//! Devices and their nodes: found, made, checked by uuid and device number, removed.

use std::path::{Path, PathBuf};

use devicemapper::{DevId, DmOptions, DmUuid, DM};

use super::super::{ActivateError, Layout, Placement};
use super::tables::{linear_table, striped_table, TableLine};
use super::{dm_err, dm_name, dm_name_of, table_flags, Dev, DmBackend, MAPPER_DIR};
use crate::activate::status::{DmDev, Usage};

/// The `major:minor` of the block device at `path`.
pub(super) fn block_devnum(path: &str) -> Result<(u32, u32), ActivateError> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let m = std::fs::metadata(path).map_err(|e| ActivateError::Io {
        device: path.to_owned(),
        why: e.to_string(),
    })?;
    if !m.file_type().is_block_device() {
        return Err(ActivateError::Io {
            device: path.to_owned(),
            why: "not a block device (device-mapper maps block devices only)".into(),
        });
    }
    Ok((libc::major(m.rdev()), libc::minor(m.rdev())))
}

/// The device number of the block device node at `node` (not following a symlink); `None`
/// when there is none or it is something else.
pub(super) fn node_devnum(node: &Path) -> Option<(u32, u32)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let m = std::fs::symlink_metadata(node).ok()?;
    m.file_type()
        .is_block_device()
        .then(|| (libc::major(m.rdev()), libc::minor(m.rdev())))
}

/// The usage device-mapper device `name` reports ([`crate::activate::status`]); `None` when
/// there is no such device, its target reports none, or its status does not parse.
/// - Asked without a flush, as lvm2 asks: a flushing status makes a thin pool or a cache
///   commit its metadata, so a report would change what it reports (a new cache's metadata
///   use drops from 12 to 9 blocks once committed).
pub fn usage(name: &str) -> Option<Usage> {
    let dm = DM::new().ok()?;
    let quiet = DmOptions::default().set_flags(devicemapper::DmFlags::DM_NOFLUSH);
    let (_, lines) = dm
        .table_status(&DevId::Name(dm_name_of(name).ok()?), quiet)
        .ok()?;
    let (_, _, target, status) = lines.first()?;
    crate::activate::status::parse(target, status)
}

/// Every device-mapper device's uuid, open count and whether it is suspended; `None`
/// without device-mapper.
pub fn device_opens() -> Option<std::collections::BTreeMap<String, DmDev>> {
    let dm = DM::new().ok()?;
    let mut out = std::collections::BTreeMap::new();
    for (name, _, _) in dm.list_devices().ok()? {
        // A device removed meanwhile is simply not reported.
        if let Ok(info) = dm.device_info(&DevId::Name(&name)) {
            if let Some(u) = info.uuid() {
                let dev = DmDev {
                    open: info.open_count(),
                    suspended: info.flags().contains(devicemapper::DmFlags::DM_SUSPEND),
                };
                out.insert(u.to_string(), dev);
            }
        }
    }
    Some(out)
}

impl DmBackend {
    pub(super) fn node(p: &Placement) -> PathBuf {
        Path::new(MAPPER_DIR).join(dm_name(&p.vg, &p.lv))
    }

    /// The device number of `name` when device-mapper has such a device.
    pub(super) fn find(&self, name: &str) -> Result<Option<(u32, u32)>, ActivateError> {
        let devices = self
            .dm
            .list_devices()
            .map_err(|e| dm_err("list devices", e))?;
        Ok(devices
            .iter()
            .find(|(n, _, _)| n.to_string() == name)
            .map(|(_, d, _)| (d.major, d.minor)))
    }

    /// The device number of `name` when device-mapper has it with uuid `uuid`; an error
    /// when a device of that name has another uuid (another VG's LV, a tool's device): it
    /// is never used, changed or removed as this LV's.
    pub(super) fn mine(&self, name: &str, uuid: &str) -> Result<Option<(u32, u32)>, ActivateError> {
        let Some(info) = self.info(name)? else {
            return Ok(None);
        };
        let found = info.uuid().map(|u| u.to_string()).unwrap_or_default();
        if found != uuid {
            return Err(ActivateError::Io {
                device: format!("{MAPPER_DIR}/{name}"),
                why: format!(
                    "device-mapper has a device of this name with uuid {found:?}, not this \
                     LV's {uuid:?}: another VG of the same name, or another tool's device; \
                     it is left alone"
                ),
            });
        }
        let dev = info.device();
        Ok(Some((dev.major, dev.minor)))
    }

    /// Device-mapper's information on device `name` (uuid, number, open count), when it has
    /// such a device.
    pub(super) fn info(
        &self,
        name: &str,
    ) -> Result<Option<devicemapper::DeviceInfo>, ActivateError> {
        if self.find(name)?.is_none() {
            return Ok(None);
        }
        let n = dm_name_of(name)?;
        let info = self
            .dm
            .device_info(&DevId::Name(n))
            .map_err(|e| dm_err(&format!("info of {name}"), e))?;
        Ok(Some(info))
    }

    /// Makes the node of `p` for `devnum`: an existing node is kept only when it is a block
    /// device with that number; anything else there is replaced (a new node made beside it
    /// and renamed over it, so the name never points elsewhere meanwhile).
    pub(super) fn make_node(p: &Placement, devnum: (u32, u32)) -> Result<PathBuf, ActivateError> {
        Self::make_named_node(&dm_name(&p.vg, &p.lv), devnum)
    }

    /// Makes `/dev/mapper/<name>` for `devnum` (see [`DmBackend::make_node`]).
    pub(super) fn make_named_node(
        name: &str,
        devnum: (u32, u32),
    ) -> Result<PathBuf, ActivateError> {
        let node = Path::new(MAPPER_DIR).join(name);
        let io = |e: std::io::Error, what: &str| ActivateError::Io {
            device: node.display().to_string(),
            why: format!("{what}: {e}"),
        };
        match node_devnum(&node) {
            Some(d) if d == devnum => return Ok(node),
            Some(d) => {
                tracing::warn!(node = %node.display(), found = ?d, want = ?devnum, "replacing a device node that points at another device")
            }
            None if node.symlink_metadata().is_ok() => {
                tracing::warn!(node = %node.display(), "replacing a device path that is not a block device node")
            }
            None => {}
        }
        std::fs::create_dir_all(MAPPER_DIR).map_err(|e| ActivateError::Io {
            device: MAPPER_DIR.into(),
            why: e.to_string(),
        })?;
        let tmp = Path::new(MAPPER_DIR).join(format!(".lvmeta-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        crate::ioctl::mknod_block(&tmp, devnum.0, devnum.1).map_err(|e| io(e, "mknod"))?;
        std::fs::rename(&tmp, &node).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            io(e, "rename the new node into place")
        })?;
        Ok(node)
    }

    /// The device `d`, made (created, loaded, resumed) unless device-mapper has it already;
    /// a failure removes a half-made device again.
    pub(super) fn ensure(&self, d: &Dev) -> Result<(u32, u32), ActivateError> {
        if let Some(devnum) = self.mine(&d.name, &d.uuid)? {
            return Ok(devnum);
        }
        let name = dm_name_of(&d.name)?;
        let uuid = DmUuid::new(&d.uuid).map_err(|e| dm_err("device uuid", e))?;
        let flags = table_flags(d.read_only);
        let id = DevId::Name(name);
        let info = self
            .dm
            .device_create(name, Some(uuid), DmOptions::default().set_flags(flags))
            .map_err(|e| dm_err(&format!("create {}", d.name), e))?;
        let loaded = self
            .dm
            .table_load(&id, &d.table, DmOptions::default().set_flags(flags))
            .and_then(|_| self.dm.device_suspend(&id, DmOptions::default()));
        if let Err(e) = loaded {
            let _ = self.dm.device_remove(&id, DmOptions::default());
            return Err(dm_err(&format!("load {}", d.name), e));
        }
        let dev = info.device();
        tracing::debug!(device = %d.name, targets = d.table.len(), read_only = d.read_only, "device-mapper device made");
        Ok((dev.major, dev.minor))
    }

    /// Removes device `name` when device-mapper has it (with `uuid`, else an error), and a
    /// block device node of that name (a node without its device only ever points at
    /// whatever takes its number next).
    pub(super) fn remove(&self, name: &str, uuid: &str) -> Result<(), ActivateError> {
        if self.mine(name, uuid)?.is_some() {
            let n = dm_name_of(name)?;
            self.dm
                .device_remove(&DevId::Name(n), DmOptions::default())
                .map_err(|e| dm_err(&format!("remove {name} (in use?)"), e))?;
        }
        let node = Path::new(MAPPER_DIR).join(name);
        if node_devnum(&node).is_some() {
            std::fs::remove_file(&node).map_err(|e| ActivateError::Io {
                device: node.display().to_string(),
                why: format!("remove the node: {e}"),
            })?;
        }
        Ok(())
    }

    /// Open count of device `name` (0 when device-mapper has no such device).
    pub(super) fn open_count(&self, name: &str) -> Result<i32, ActivateError> {
        Ok(self.info(name)?.map_or(0, |i| i.open_count()))
    }

    /// Loads `table` into device `name` and makes it live: suspending first flushes what is
    /// in flight, the new table goes live at resume.
    pub(super) fn reload(&self, name: &str, table: &[TableLine]) -> Result<(), ActivateError> {
        let n = dm_name_of(name)?;
        self.dm
            .table_load(&DevId::Name(n), table, DmOptions::default())
            .map_err(|e| dm_err(&format!("reload {name}"), e))?;
        self.set_suspended(name, true)?;
        self.set_suspended(name, false)
    }

    /// The device of a linear or striped LV (a pool's sub-LV: with lvm2's uuid suffix).
    pub(super) fn mapped_dev(p: &Placement) -> Result<Dev, ActivateError> {
        let table = match &p.layout {
            Layout::Linear(pieces) => linear_table(pieces, block_devnum)?,
            Layout::Striped(segments) => striped_table(segments, block_devnum)?,
            _ => {
                return Err(ActivateError::Unsupported {
                    lv: format!("{}/{}", p.vg, p.lv),
                    why: "neither linear nor striped".into(),
                })
            }
        };
        Ok(Dev {
            name: dm_name(&p.vg, &p.lv),
            uuid: p.dm_uuid.clone(),
            table,
            read_only: false,
        })
    }

    /// A pool's sub-LV device's name and uuid: lvm2 gives it the sub-LV's uuid with a
    /// `-tmeta`/`-tdata` suffix, so that lvm2 finds it as its own.
    pub(super) fn sub_id(p: &Placement, suffix: &str) -> (String, String) {
        (dm_name(&p.vg, &p.lv), format!("{}-{suffix}", p.dm_uuid))
    }

    /// A pool's sub-LV device (see [`DmBackend::sub_id`]).
    pub(super) fn sub_dev(p: &Placement, suffix: &str) -> Result<Dev, ActivateError> {
        let mut d = Self::mapped_dev(p)?;
        d.uuid = Self::sub_id(p, suffix).1;
        Ok(d)
    }
}
