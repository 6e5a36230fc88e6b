//! The device-mapper backend: an LV becomes `/dev/mapper/<vg>-<lv>`, lvm2's name for it, with
//! lvm2's device uuid (`LVM-<vg id><lv id>`), so that stock lvm2 on the same host sees it
//! active. Its table is built here from the LV's [`Placement`] (pure: [`dm_name`],
//! [`linear_table`]) and loaded with the devicemapper crate through `/dev/mapper/control`.
//! There is no udev: the device node is made here, as libdevmapper does without udev.
//!
//! Linear LVs of any number of pieces and striped LVs are built, and thin LVs and thin
//! pools the way lvm2 stacks them: `<vg>-<pool>_tmeta` (linear) and `<vg>-<pool>_tdata`
//! (linear or striped), `<vg>-<pool>-tpool`
//! (the `thin-pool` target, uuid suffix `-tpool`), `<vg>-<pool>` (read-only linear over the
//! tpool) and `<vg>-<thin>` (`thin <tpool> <device id>`). When the pool comes up, the
//! messages queued in the metadata are sent by lvm2's transaction rule
//! ([`super::thin::deliveries`]). Striped LVs get one `striped` target per segment. Other
//! segment types (raid, cache, ...) are refused with [`ActivateError::Unsupported`] naming
//! the target they need.

use std::path::{Path, PathBuf};

use devicemapper::{DevId, DmError, DmFlags, DmName, DmOptions, DmUuid, DM};

use super::thin::{deliveries, parse_pool_status, PoolMessage, PoolPlan};
use super::{ActivateError, Backend, Layout, Piece, Placement, Stripe};

/// One line of a device-mapper table: start and length in sectors, target, parameters.
pub type TableLine = (u64, u64, String, String);

/// Where device nodes go.
const MAPPER_DIR: &str = "/dev/mapper";

/// lvm2's device-mapper name of LV `lv` of VG `vg`: both names with every `-` doubled,
/// joined by one `-` (so the name splits back unambiguously).
pub fn dm_name(vg: &str, lv: &str) -> String {
    format!("{}-{}", vg.replace('-', "--"), lv.replace('-', "--"))
}

/// lvm2's device-mapper name of layer `layer` of an LV (`tpool` of a thin pool):
/// [`dm_name`] then `-` and the layer.
pub fn dm_layer_name(vg: &str, lv: &str, layer: &str) -> String {
    format!("{}-{}", dm_name(vg, lv), layer.replace('-', "--"))
}

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

    /// Makes the node of `p` for `devnum` unless it is there.
    fn make_node(p: &Placement, devnum: (u32, u32)) -> Result<PathBuf, ActivateError> {
        let node = Self::node(p);
        if !node.exists() {
            std::fs::create_dir_all(MAPPER_DIR).map_err(|e| ActivateError::Io {
                device: MAPPER_DIR.into(),
                why: e.to_string(),
            })?;
            crate::ioctl::mknod_block(&node, devnum.0, devnum.1).map_err(|e| {
                ActivateError::Io {
                    device: node.display().to_string(),
                    why: format!("mknod: {e}"),
                }
            })?;
        }
        Ok(node)
    }

    /// The device `d`, made (created, loaded, resumed) unless device-mapper has it already;
    /// a failure removes a half-made device again.
    fn ensure(&self, d: &Dev) -> Result<(u32, u32), ActivateError> {
        if let Some(devnum) = self.find(&d.name)? {
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

    /// Removes device `name` when device-mapper has it.
    fn remove(&self, name: &str) -> Result<(), ActivateError> {
        if self.find(name)?.is_none() {
            return Ok(());
        }
        let n = dm_name_of(name)?;
        self.dm
            .device_remove(&DevId::Name(n), DmOptions::default())
            .map_err(|e| dm_err(&format!("remove {name} (in use?)"), e))?;
        Ok(())
    }

    /// Loads `table` into device `name` and makes it live: suspending first flushes what is
    /// in flight, the new table goes live at resume.
    fn reload(&self, name: &str, table: &[TableLine]) -> Result<(), ActivateError> {
        let n = dm_name_of(name)?;
        let id = DevId::Name(n);
        self.dm
            .table_load(&id, table, DmOptions::default())
            .and_then(|_| {
                self.dm
                    .device_suspend(&id, DmOptions::default().set_flags(DmFlags::DM_SUSPEND))
            })
            .and_then(|_| self.dm.device_suspend(&id, DmOptions::default()))
            .map_err(|e| dm_err(&format!("reload {name}"), e))?;
        Ok(())
    }

    /// The device of a linear or striped LV.
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

    /// Brings pool `pool` up (its sub-LVs, the tpool, the read-only pool device), delivers the
    /// messages queued for it, and returns the tpool's device number.
    fn ensure_pool(&self, pool: &PoolPlan) -> Result<(u32, u32), ActivateError> {
        let meta = self.ensure(&Self::mapped_dev(&pool.metadata)?)?;
        let data = self.ensure(&Self::mapped_dev(&pool.data)?)?;
        let tpool_name = Self::tpool_name(pool);
        let tpool = self.ensure(&Dev {
            name: tpool_name.clone(),
            uuid: format!("{}-tpool", pool.dm_uuid),
            table: vec![pool_table(pool, meta, data)],
            read_only: false,
        })?;
        self.deliver(pool, &tpool_name)?;
        self.ensure(&Dev {
            name: dm_name(&pool.metadata.vg, &pool.name),
            uuid: pool.dm_uuid.clone(),
            table: vec![over(pool.bytes, tpool)],
            read_only: true,
        })?;
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

    /// Suspends (flushing what is in flight) or resumes device `name`.
    fn set_suspended(&self, name: &str, suspend: bool) -> Result<(), ActivateError> {
        let n = dm_name_of(name)?;
        let flags = if suspend {
            DmFlags::DM_SUSPEND
        } else {
            DmFlags::empty()
        };
        self.dm
            .device_suspend(&DevId::Name(n), DmOptions::default().set_flags(flags))
            .map_err(|e| {
                dm_err(
                    &format!("{} {name}", if suspend { "suspend" } else { "resume" }),
                    e,
                )
            })?;
        Ok(())
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

    /// Takes pool `pool` down when no thin LV uses its tpool any more (the read-only pool
    /// device holds it open once).
    fn release_pool(&self, pool: &PoolPlan) -> Result<(), ActivateError> {
        let tpool = Self::tpool_name(pool);
        if self.find(&tpool)?.is_some() {
            let n = dm_name_of(&tpool)?;
            let info = self
                .dm
                .device_info(&DevId::Name(n))
                .map_err(|e| dm_err(&format!("info of {tpool}"), e))?;
            if info.open_count() > 1 {
                return Ok(());
            }
        }
        let vg = &pool.metadata.vg;
        self.remove(&dm_name(vg, &pool.name))?;
        self.remove(&tpool)?;
        self.remove(&dm_name(vg, &pool.data.lv))?;
        self.remove(&dm_name(vg, &pool.metadata.lv))
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
        match self.find(&dm_name(&p.vg, &p.lv))? {
            Some(devnum) => Self::make_node(p, devnum).map(Some),
            None => Ok(None),
        }
    }

    fn activate(&self, p: &Placement, read_only: bool) -> Result<PathBuf, ActivateError> {
        if let Some(node) = self.active(p)? {
            return Ok(node);
        }
        let name = dm_name(&p.vg, &p.lv);
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
                        if let Err(e2) = self.release_pool(pool) {
                            tracing::warn!(pool = %pool.name, error = %e2, "could not take the pool down again");
                        }
                        return Err(e);
                    }
                }
            }
            Layout::Pool(pool) => {
                self.ensure_pool(pool)?;
                self.find(&name)?.ok_or_else(|| ActivateError::Io {
                    device: name.clone(),
                    why: "the pool device vanished".into(),
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
                self.remove(&dm_name(&p.vg, &p.lv))?;
                self.release_pool(pool)?;
            }
            Layout::Pool(pool) => self.release_pool(pool)?,
            _ => self.remove(&dm_name(&p.vg, &p.lv))?,
        }
        match std::fs::remove_file(Self::node(p)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(ActivateError::Io {
                device: Self::node(p).display().to_string(),
                why: e.to_string(),
            }),
            _ => Ok(()),
        }
    }

    fn refresh(&self, p: &Placement) -> Result<(), ActivateError> {
        let name = dm_name(&p.vg, &p.lv);
        if self.find(&name)?.is_none() {
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
        self.reload(&dm_name(vg, &pool.name), &[over(pool.bytes, tpool)])?;
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
        s.update("vg", "lvcreate", |v| {
            edit::lv::create(v, &LvSpec::linear("a", 1, stamp)).map(|x| x.0)
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
