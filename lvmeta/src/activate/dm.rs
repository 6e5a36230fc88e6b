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

use std::path::{Path, PathBuf};

use devicemapper::{DevId, DmError, DmFlags, DmName, DmOptions, DmUuid, DM};

use super::fence;
use super::thin::{deliveries, parse_pool_status, PoolMessage, PoolPlan};
use super::{ActivateError, Backend, Layout, Piece, Placement, Stripe};

/// One line of a device-mapper table: start and length in sectors, target, parameters.
pub type TableLine = (u64, u64, String, String);

/// Where device nodes go.
const MAPPER_DIR: &str = "/dev/mapper";

pub use super::dm_names::{dm_layer_name, dm_name};

/// The `thin-pool` line of `pool` over metadata device `meta` and data device `data`, as
/// libdevmapper writes it: chunk size, low water mark 0 (lvm2's default threshold of 100%),
/// then the feature words lvm2 sets ([`PoolPlan::features`]).
pub fn pool_table(pool: &PoolPlan, meta: (u32, u32), data: (u32, u32)) -> TableLine {
    let features = pool.features();
    let mut params = format!(
        "{}:{} {}:{} {} 0 {}",
        meta.0,
        meta.1,
        data.0,
        data.1,
        pool.chunk_size,
        features.len()
    );
    for f in features {
        params.push(' ');
        params.push_str(f);
    }
    (0, pool.bytes / 512, "thin-pool".into(), params)
}

/// The `thin` line of a thin LV of `bytes` that is device `device_id` of the pool device
/// `tpool`.
pub fn thin_table(bytes: u64, tpool: (u32, u32), device_id: u32) -> TableLine {
    (
        0,
        bytes / 512,
        "thin".into(),
        format!("{}:{} {device_id}", tpool.0, tpool.1),
    )
}

/// A one-line `linear` table over all of device `dev`: how lvm2 exposes a used pool.
fn over(bytes: u64, dev: (u32, u32)) -> TableLine {
    (
        0,
        bytes / 512,
        "linear".into(),
        format!("{}:{} 0", dev.0, dev.1),
    )
}

/// The table of a linear LV laid out as `pieces`: one `linear` target per piece, in sectors,
/// the device named by its `major:minor` (`devnum` finds it for a device path).
pub fn linear_table(
    pieces: &[Piece],
    mut devnum: impl FnMut(&str) -> Result<(u32, u32), ActivateError>,
) -> Result<Vec<TableLine>, ActivateError> {
    let mut start = 0;
    let mut table = Vec::with_capacity(pieces.len());
    for p in pieces {
        let (major, minor) = devnum(&p.device)?;
        let len = p.len / 512;
        table.push((
            start,
            len,
            "linear".to_owned(),
            format!("{major}:{minor} {}", p.offset / 512),
        ));
        start += len;
    }
    Ok(table)
}

/// The table of a striped LV laid out as `segments`: per segment a `striped` target
/// (`<stripes> <stripe size> <dev> <offset>...`, in sectors, as lvm2 writes it), or `linear`
/// for a one-area segment.
pub fn striped_table(
    segments: &[Stripe],
    mut devnum: impl FnMut(&str) -> Result<(u32, u32), ActivateError>,
) -> Result<Vec<TableLine>, ActivateError> {
    let mut start = 0;
    let mut table = Vec::with_capacity(segments.len());
    for seg in segments {
        let len = seg.len / 512;
        let mut devs = Vec::with_capacity(seg.areas.len());
        for a in &seg.areas {
            let (major, minor) = devnum(&a.device)?;
            devs.push(format!("{major}:{minor} {}", a.offset / 512));
        }
        let line = match devs.as_slice() {
            [one] => ("linear".to_owned(), one.clone()),
            _ => (
                "striped".to_owned(),
                format!(
                    "{} {} {}",
                    devs.len(),
                    seg.stripe_bytes / 512,
                    devs.join(" ")
                ),
            ),
        };
        table.push((start, len, line.0, line.1));
        start += len;
    }
    Ok(table)
}

/// The byte ranges of block devices a table maps directly (`linear` and `striped` targets;
/// other targets map other device-mapper devices): device number, offset and length.
pub fn mapped_ranges(table: &[TableLine]) -> Vec<((u32, u32), u64, u64)> {
    let devnum = |s: &str| {
        let (a, b) = s.split_once(':')?;
        Some((a.parse().ok()?, b.parse().ok()?))
    };
    let mut out = Vec::new();
    for (_, len, target, params) in table {
        let words: Vec<&str> = params.split_whitespace().collect();
        let (areas, per_area) = match (target.as_str(), words.as_slice()) {
            ("linear", [dev, off, ..]) => (vec![(*dev, *off)], *len),
            ("striped", [n, _chunk, rest @ ..]) => {
                let n: u64 = n.parse().unwrap_or(0);
                let pairs: Vec<(&str, &str)> = rest.chunks_exact(2).map(|p| (p[0], p[1])).collect();
                (pairs, len.checked_div(n).unwrap_or(0))
            }
            _ => continue,
        };
        for (dev, off) in areas {
            if let (Some(d), Ok(o)) = (devnum(dev), off.parse::<u64>()) {
                out.push((d, o.saturating_mul(512), per_area.saturating_mul(512)));
            }
        }
    }
    out
}

/// The `major:minor` of the block device at `path`.
fn block_devnum(path: &str) -> Result<(u32, u32), ActivateError> {
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
fn node_devnum(node: &Path) -> Option<(u32, u32)> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let m = std::fs::symlink_metadata(node).ok()?;
    m.file_type()
        .is_block_device()
        .then(|| (libc::major(m.rdev()), libc::minor(m.rdev())))
}

/// Every device-mapper device's uuid and open count; `None` without device-mapper.
pub fn device_opens() -> Option<std::collections::HashMap<String, i32>> {
    let dm = DM::new().ok()?;
    let mut out = std::collections::HashMap::new();
    for (name, _, _) in dm.list_devices().ok()? {
        // A device removed meanwhile is simply not reported.
        if let Ok(info) = dm.device_info(&DevId::Name(&name)) {
            if let Some(u) = info.uuid() {
                out.insert(u.to_string(), info.open_count());
            }
        }
    }
    Some(out)
}

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

    fn node(p: &Placement) -> PathBuf {
        Path::new(MAPPER_DIR).join(dm_name(&p.vg, &p.lv))
    }

    /// The device number of `name` when device-mapper has such a device.
    fn find(&self, name: &str) -> Result<Option<(u32, u32)>, ActivateError> {
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
    fn mine(&self, name: &str, uuid: &str) -> Result<Option<(u32, u32)>, ActivateError> {
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
    fn info(&self, name: &str) -> Result<Option<devicemapper::DeviceInfo>, ActivateError> {
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
    fn make_node(p: &Placement, devnum: (u32, u32)) -> Result<PathBuf, ActivateError> {
        let node = Self::node(p);
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
        let tmp = Path::new(MAPPER_DIR).join(format!(
            ".lvmeta-{}-{}",
            std::process::id(),
            dm_name(&p.vg, &p.lv)
        ));
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
    fn ensure(&self, d: &Dev) -> Result<(u32, u32), ActivateError> {
        if let Some(devnum) = self.mine(&d.name, &d.uuid)? {
            return Ok(devnum);
        }
        let name = dm_name_of(&d.name)?;
        let uuid = DmUuid::new(&d.uuid).map_err(|e| dm_err("device uuid", e))?;
        let flags = if d.read_only {
            DmFlags::DM_READONLY
        } else {
            DmFlags::empty()
        };
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
    fn remove(&self, name: &str, uuid: &str) -> Result<(), ActivateError> {
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
    fn open_count(&self, name: &str) -> Result<i32, ActivateError> {
        Ok(self.info(name)?.map_or(0, |i| i.open_count()))
    }

    /// Loads `table` into device `name` and makes it live: suspending first flushes what is
    /// in flight, the new table goes live at resume.
    fn reload(&self, name: &str, table: &[TableLine]) -> Result<(), ActivateError> {
        let n = dm_name_of(name)?;
        self.dm
            .table_load(&DevId::Name(n), table, DmOptions::default())
            .map_err(|e| dm_err(&format!("reload {name}"), e))?;
        self.set_suspended(name, true)?;
        self.set_suspended(name, false)
    }

    /// The device of a linear or striped LV (a pool's sub-LV: with lvm2's uuid suffix).
    fn mapped_dev(p: &Placement) -> Result<Dev, ActivateError> {
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

    fn tpool_name(pool: &PoolPlan) -> String {
        dm_layer_name(&pool.metadata.vg, &pool.name, "tpool")
    }

    /// The kernel status of pool device `tpool`.
    fn tpool_status(&self, tpool: &str) -> Result<super::thin::PoolStatus, ActivateError> {
        let n = dm_name_of(tpool)?;
        let (_, lines) = self
            .dm
            .table_status(&DevId::Name(n), DmOptions::default())
            .map_err(|e| dm_err(&format!("status of {tpool}"), e))?;
        match lines.first() {
            Some((_, _, target, status)) if target == "thin-pool" => {
                parse_pool_status(tpool, status)
            }
            other => Err(ActivateError::Io {
                device: tpool.into(),
                why: format!("expected a thin-pool target, found {other:?}"),
            }),
        }
    }

    /// A pool's sub-LV device's name and uuid: lvm2 gives it the sub-LV's uuid with a
    /// `-tmeta`/`-tdata` suffix, so that lvm2 finds it as its own.
    fn sub_id(p: &Placement, suffix: &str) -> (String, String) {
        (dm_name(&p.vg, &p.lv), format!("{}-{suffix}", p.dm_uuid))
    }

    /// A pool's sub-LV device (see [`DmBackend::sub_id`]).
    fn sub_dev(p: &Placement, suffix: &str) -> Result<Dev, ActivateError> {
        let mut d = Self::mapped_dev(p)?;
        d.uuid = Self::sub_id(p, suffix).1;
        Ok(d)
    }

    /// Brings pool `pool`'s stack up as lvm2 does for a thin LV (its sub-LVs and the tpool;
    /// not the pool LV's own device), delivers the messages queued for it, and returns the
    /// tpool's device number.
    fn ensure_pool(&self, pool: &PoolPlan) -> Result<(u32, u32), ActivateError> {
        let meta = self.ensure(&Self::sub_dev(&pool.metadata, "tmeta")?)?;
        let data = self.ensure(&Self::sub_dev(&pool.data, "tdata")?)?;
        let tpool_name = Self::tpool_name(pool);
        let tpool = self.ensure(&Dev {
            name: tpool_name.clone(),
            uuid: format!("{}-tpool", pool.dm_uuid),
            table: vec![pool_table(pool, meta, data)],
            read_only: false,
        })?;
        self.deliver(pool, &tpool_name)?;
        Ok(tpool)
    }

    /// Sends the kernel pool `tpool_name` the messages lvm2's rule asks for, each thin LV
    /// active here that is the origin of a new snapshot suspended around them (the kernel
    /// needs it quiet for a consistent snapshot), and checks the transaction id after.
    fn deliver(&self, pool: &PoolPlan, tpool_name: &str) -> Result<(), ActivateError> {
        let status = self.tpool_status(tpool_name)?;
        let messages = deliveries(pool, status.transaction_id)?;
        if messages.is_empty() {
            return Ok(());
        }
        if status.read_only || status.needs_check {
            return Err(ActivateError::Io {
                device: tpool_name.into(),
                why: "cannot send the queued messages: the pool's metadata is read-only or \
                      needs thin_check first"
                    .into(),
            });
        }
        let vg = &pool.metadata.vg;
        let mut suspended = Vec::new();
        let mut result = Ok(());
        for m in &messages {
            if let PoolMessage::CreateSnap { origin, .. } = m {
                let name = pool
                    .thin_lvs
                    .iter()
                    .find(|(id, _)| id == origin)
                    .map(|(_, lv)| dm_name(vg, lv));
                if let Some(name) = name.filter(|n| !suspended.contains(n)) {
                    if self.find(&name)?.is_some() {
                        result = self.set_suspended(&name, true);
                        if result.is_err() {
                            break;
                        }
                        suspended.push(name);
                    }
                }
            }
        }
        if result.is_ok() {
            result = self.send(tpool_name, &messages);
        }
        for name in &suspended {
            if let Err(e) = self.set_suspended(name, false) {
                tracing::error!(device = %name, error = %e, "could not resume a snapshot origin");
                result = result.and(Err(e));
            }
        }
        result?;
        let now = self.tpool_status(tpool_name)?.transaction_id;
        if now != pool.transaction_id {
            return Err(ActivateError::Io {
                device: tpool_name.into(),
                why: format!(
                    "transaction id is {now} after the messages, expected {}",
                    pool.transaction_id
                ),
            });
        }
        tracing::info!(pool = %tpool_name, messages = messages.len(), transaction_id = now, "delivered the queued thin pool messages");
        Ok(())
    }

    /// Suspends (flushing what is in flight, freezing a filesystem on it) or resumes
    /// device `name`.
    /// - a filesystem frozen already (the node's fsfreeze around a cut) makes the kernel
    ///   refuse the freeze: the suspend is then made without it (`DM_SKIP_LOCKFS`), the
    ///   filesystem being quiet already.
    fn set_suspended(&self, name: &str, suspend: bool) -> Result<(), ActivateError> {
        let n = dm_name_of(name)?;
        let id = DevId::Name(n);
        let what = if suspend { "suspend" } else { "resume" };
        let flags = if suspend {
            DmFlags::DM_SUSPEND
        } else {
            DmFlags::empty()
        };
        let first = self
            .dm
            .device_suspend(&id, DmOptions::default().set_flags(flags));
        match first {
            Ok(_) => Ok(()),
            Err(e) if suspend => {
                tracing::info!(device = %name, error = %e, "suspend with a filesystem freeze refused (frozen already?): suspending without it");
                self.dm
                    .device_suspend(
                        &id,
                        DmOptions::default().set_flags(flags | DmFlags::DM_SKIP_LOCKFS),
                    )
                    .map(drop)
                    .map_err(|e| dm_err(&format!("{what} {name}"), e))
            }
            Err(e) => Err(dm_err(&format!("{what} {name}"), e)),
        }
    }

    /// Sends `messages` to pool device `tpool_name`, sector 0, in order.
    fn send(&self, tpool_name: &str, messages: &[PoolMessage]) -> Result<(), ActivateError> {
        let n = dm_name_of(tpool_name)?;
        for m in messages {
            let sent = self.dm.target_msg(&DevId::Name(n), Some(0), &m.to_string());
            match (sent, m) {
                (Ok(_), _) => {}
                // A delivery cut short before `set_transaction_id` is sent again whole; a
                // delete it did already leaves what was asked for.
                (Err(e), PoolMessage::Delete(_)) if errno(&e) == Some(libc::ENODATA) => {
                    tracing::warn!(pool = %tpool_name, message = %m, "thin device is gone already: an earlier delivery deleted it");
                }
                // A create of an id the pool has: that device's blocks are not known to be
                // empty (another tool, a lost delete), so it is never handed out as new.
                (Err(e), PoolMessage::CreateThin(id) | PoolMessage::CreateSnap { id, .. })
                    if errno(&e) == Some(libc::EEXIST) =>
                {
                    return Err(ActivateError::Io {
                        device: tpool_name.into(),
                        why: format!(
                            "the pool already has thin device {id}: remove it from the pool \
                             metadata by hand (thin_dump/thin_restore) before this volume \
                             can be used, as lvm2 asks"
                        ),
                    });
                }
                (Err(e), _) => return Err(dm_err(&format!("{tpool_name}: message {m}"), e)),
            }
        }
        Ok(())
    }

    /// Takes pool `pool`'s stack down unless something still uses it: the pool LV's own
    /// device (the pool is active itself) or a thin LV (the tpool is open). With `pool_too`
    /// the pool LV's own device goes first (`lvchange -an` of the pool).
    fn release_pool(&self, pool: &PoolPlan, pool_too: bool) -> Result<(), ActivateError> {
        let vg = &pool.metadata.vg;
        let pool_dev = dm_name(vg, &pool.name);
        if pool_too {
            self.remove(&pool_dev, &pool.dm_uuid)?;
        } else if self.find(&pool_dev)?.is_some() {
            return Ok(());
        }
        let tpool = Self::tpool_name(pool);
        if self.open_count(&tpool)? > 0 {
            return Ok(());
        }
        self.remove(&tpool, &format!("{}-tpool", pool.dm_uuid))?;
        let (name, uuid) = Self::sub_id(&pool.data, "tdata");
        self.remove(&name, &uuid)?;
        let (name, uuid) = Self::sub_id(&pool.metadata, "tmeta");
        self.remove(&name, &uuid)
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
}

impl DmBackend {
    /// Has any device of `p`'s stack a table of `error` targets only ([`Backend::fence`])?
    fn fenced(&self, p: &Placement) -> Result<bool, ActivateError> {
        for t in fence::stack(p) {
            // Only this LV's own devices: another VG's or tool's device of the same name,
            // error table or not, says nothing about this stack.
            let Some(info) = self.info(&t.name)? else {
                continue;
            };
            if !t
                .uuid
                .matches(&info.uuid().map(|u| u.to_string()).unwrap_or_default())
            {
                continue;
            }
            let n = dm_name_of(&t.name)?;
            let flags = DmOptions::default().set_flags(DmFlags::DM_STATUS_TABLE);
            let (_, table) = self
                .dm
                .table_status(&DevId::Name(n), flags)
                .map_err(|e| dm_err(&format!("table of {}", t.name), e))?;
            // All of it: lvm2's partial activation puts error segments in live tables.
            if !table.is_empty() && table.iter().all(|(_, _, target, _)| target == "error") {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Makes device `name` fail every I/O: an `error` table of its current size, made live
    /// without freezing a filesystem on it or waiting for queued I/O to be flushed (a
    /// suspend still waits for I/O in flight: one hung on a dead path keeps this waiting,
    /// and the lease with it, which is what the watchdog is for).
    fn load_error(&self, name: &str) -> Result<(), ActivateError> {
        let n = dm_name_of(name)?;
        let id = DevId::Name(n);
        let (_, table) = self
            .dm
            .table_status(
                &id,
                DmOptions::default().set_flags(DmFlags::DM_STATUS_TABLE),
            )
            .map_err(|e| dm_err(&format!("table of {name}"), e))?;
        let sectors = table.iter().map(|(s, l, _, _)| s + l).max().unwrap_or(0);
        if sectors == 0 || table.iter().all(|(_, _, t, _)| t == "error") {
            return Ok(());
        }
        self.dm
            .table_load(&id, &[fence::error_table(sectors)], DmOptions::default())
            .map_err(|e| dm_err(&format!("load an error table into {name}"), e))?;
        let quick = DmFlags::DM_SUSPEND | DmFlags::DM_NOFLUSH | DmFlags::DM_SKIP_LOCKFS;
        self.dm
            .device_suspend(&id, DmOptions::default().set_flags(quick))
            .map_err(|e| dm_err(&format!("suspend {name} to fence it"), e))?;
        self.dm
            .device_suspend(&id, DmOptions::default())
            .map_err(|e| dm_err(&format!("resume {name} fenced"), e))?;
        Ok(())
    }

    /// Reloads an active pool's data LV, tpool and pool device with their current sizes;
    /// returns the tpool's device number.
    fn refresh_pool(&self, pool: &PoolPlan) -> Result<(u32, u32), ActivateError> {
        let vg = &pool.metadata.vg;
        let tpool_name = Self::tpool_name(pool);
        let (Some(meta), Some(data), Some(tpool)) = (
            self.find(&dm_name(vg, &pool.metadata.lv))?,
            self.find(&dm_name(vg, &pool.data.lv))?,
            self.find(&tpool_name)?,
        ) else {
            return Err(ActivateError::Io {
                device: tpool_name,
                why: "the pool is not fully active on this host".into(),
            });
        };
        self.reload(
            &dm_name(vg, &pool.data.lv),
            &Self::mapped_dev(&pool.data)?.table,
        )?;
        self.reload(&tpool_name, &[pool_table(pool, meta, data)])?;
        let pool_dev = dm_name(vg, &pool.name);
        if self.find(&pool_dev)?.is_some() {
            self.reload(&pool_dev, &[over(pool.bytes, tpool)])?;
        }
        Ok(tpool)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_ranges_read_linear_and_striped_tables() {
        let table: Vec<TableLine> = vec![
            (0, 8, "linear".into(), "7:0 2048".into()),
            (8, 16, "striped".into(), "2 128 7:1 0 7:2 4096".into()),
            (24, 8, "thin".into(), "253:3 1".into()),
            (32, 8, "linear".into(), "garbage".into()),
        ];
        assert_eq!(
            mapped_ranges(&table),
            vec![
                ((7, 0), 2048 * 512, 8 * 512),
                ((7, 1), 0, 8 * 512),
                ((7, 2), 4096 * 512, 8 * 512)
            ]
        );
    }

    #[test]
    fn names_double_dashes_as_lvm2_does() {
        assert_eq!(dm_name("vg", "lv"), "vg-lv");
        assert_eq!(dm_name("my-vg", "pvc-1-a"), "my--vg-pvc--1--a");
    }

    #[test]
    fn a_linear_table_maps_each_piece_in_sectors() {
        let pieces = [
            Piece {
                device: "/dev/sdb".into(),
                offset: 1 << 20,
                len: 4 << 20,
            },
            Piece {
                device: "/dev/sdc".into(),
                offset: 9 << 20,
                len: 8 << 20,
            },
        ];
        let table = linear_table(&pieces, |d| {
            Ok(if d == "/dev/sdb" { (8, 16) } else { (8, 32) })
        })
        .expect("table");
        // As `dmsetup table` prints an lvm2 LV of the same layout.
        let lines: Vec<String> = table
            .iter()
            .map(|(s, l, t, p)| format!("{s} {l} {t} {p}"))
            .collect();
        assert_eq!(
            lines,
            ["0 8192 linear 8:16 2048", "8192 16384 linear 8:32 18432"]
        );
        let missing = linear_table(&pieces, |d| {
            Err(ActivateError::Io {
                device: d.into(),
                why: "gone".into(),
            })
        });
        assert!(missing.is_err());
    }

    fn pool(zero: bool, discards: &str, error_if_no_space: bool) -> PoolPlan {
        let sub = |lv: &str| Placement {
            vg: "vg".into(),
            lv: lv.into(),
            bytes: 4 << 20,
            layout: Layout::Linear(vec![]),
            dm_uuid: String::new(),
        };
        PoolPlan {
            name: "pool".into(),
            dm_uuid: "LVM-x".into(),
            bytes: 100 << 20,
            metadata: sub("pool_tmeta"),
            data: sub("pool_tdata"),
            chunk_size: 128,
            zero_new_blocks: zero,
            discards: discards.into(),
            error_if_no_space,
            transaction_id: 1,
            messages: vec![],
            thin_lvs: vec![],
        }
    }

    fn line(t: &TableLine) -> String {
        format!("{} {} {} {}", t.0, t.1, t.2, t.3)
    }

    #[test]
    fn a_striped_table_has_one_target_per_segment() {
        let area = |device: &str, offset: u64| Piece {
            device: device.into(),
            offset,
            len: 8 << 20,
        };
        let segments = [
            Stripe {
                len: 16 << 20,
                stripe_bytes: 64 << 10,
                areas: vec![area("/dev/sdb", 1 << 20), area("/dev/sdc", 1 << 20)],
            },
            Stripe {
                len: 8 << 20,
                stripe_bytes: 0,
                areas: vec![area("/dev/sdb", 9 << 20)],
            },
        ];
        let table = striped_table(&segments, |d| {
            Ok(if d == "/dev/sdb" { (8, 16) } else { (8, 32) })
        })
        .expect("table");
        let lines: Vec<String> = table.iter().map(line).collect();
        // As `dmsetup table` prints `lvcreate -i2 -I64k` followed by a linear extension.
        assert_eq!(
            lines,
            [
                "0 32768 striped 2 128 8:16 2048 8:32 2048",
                "32768 16384 linear 8:16 18432"
            ]
        );
    }

    #[test]
    fn thin_tables_are_written_as_libdevmapper_writes_them() {
        // lvm2's defaults (zeroing, passdown): no feature words.
        let (meta, data) = ((253, 0), (253, 1));
        assert_eq!(
            line(&pool_table(&pool(true, "passdown", false), meta, data)),
            "0 204800 thin-pool 253:0 253:1 128 0 0"
        );
        assert_eq!(
            line(&pool_table(&pool(false, "nopassdown", true), meta, data)),
            "0 204800 thin-pool 253:0 253:1 128 0 3 skip_block_zeroing no_discard_passdown \
             error_if_no_space"
        );
        assert_eq!(
            line(&pool_table(&pool(true, "ignore", false), meta, data)),
            "0 204800 thin-pool 253:0 253:1 128 0 1 ignore_discard"
        );
        assert_eq!(
            line(&thin_table(1 << 30, (253, 2), 7)),
            "0 2097152 thin 253:2 7"
        );
        assert_eq!(line(&over(100 << 20, (253, 2))), "0 204800 linear 253:2 0");
        assert_eq!(dm_layer_name("my-vg", "pool", "tpool"), "my--vg-pool-tpool");
    }

    #[test]
    fn lvm2_gives_the_device_its_uuid_without_dashes() {
        use crate::edit::{self, LvSpec};
        use crate::testing::{session_with_vg, stamp};
        let s = session_with_vg(1);
        let stamp = stamp();
        s.update("vg", "lvcreate", |v, ctx| {
            edit::lv::create(v, ctx, &LvSpec::linear("a", 1, stamp)).map(|x| x.0)
        })
        .expect("lvcreate");
        let vg = s.vg("vg").expect("vg");
        let p = super::super::place(&vg, "a", &[Some("pv0".into())]).expect("place");
        let want = format!(
            "LVM-{}{}",
            vg.id.to_string().replace('-', ""),
            vg.lv("a").expect("a").id.to_string().replace('-', "")
        );
        assert_eq!(p.dm_uuid, want);
        assert_eq!(p.dm_uuid.len(), 4 + 64);
    }
}
