//! The verbs that change metadata: argument parsing in lvm2's style, then one `session` call.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use lvmeta::dev::{BlockDevice, FileDevice};
use lvmeta::edit::thin::PoolOptions;
use lvmeta::edit::{
    self, LvChange, LvSpec, Permission, PoolSpec, SharedVg, Stamp, ThinSpec, VgSpec,
};
use lvmeta::layout::PvOptions;
use lvmeta::model::Vg;
use lvmeta::session::Session;

use super::{failed, system_block_devices, CmdResult, DeviceArgs, EINVALID_CMD_LINE};

/// How this host takes leases in shared VGs (writing verbs and reports).
#[derive(Args, Clone)]
pub struct LockArgs {
    /// This host's id in shared VGs' lockspaces (default: lvmlocal.conf `local/host_id`).
    #[arg(long = "host-id", env = "LVMETA_HOST_ID")]
    host_id: Option<u64>,
    /// Seconds to wait for a lease held by another host.
    #[arg(long = "lock-wait", default_value_t = 60)]
    lock_wait: u64,
    /// io_timeout of lockspaces this host creates or joins (sanlock's default: 10).
    #[arg(long = "io-timeout", default_value_t = 10)]
    io_timeout: u32,
}

impl LockArgs {
    /// This host's lease manager, when a host id is given (or in lvmlocal.conf).
    pub fn host(&self) -> Result<Option<lvmeta::lease::Host>, (u8, String)> {
        self.host_id
            .or_else(lvmeta::lease::lvmlocal_host_id)
            .map(|id| lease_host(id, self))
            .transpose()
    }
}

/// Options every writing verb shares.
#[derive(Args, Clone)]
pub struct WriteArgs {
    #[command(flatten)]
    dev: DeviceArgs,
    /// Directory of lvm2's lock files (lvm.conf `global/locking_dir`).
    #[arg(long = "lockingdir", env = "LVMETA_LOCKING_DIR", default_value = lvmeta::lockfile::DEFAULT_LOCK_DIR)]
    locking_dir: PathBuf,
    /// lvm2's run directory, where `newhints` tells lvm2 to rescan for PVs.
    #[arg(long = "rundir", env = "LVMETA_RUN_DIR", default_value = "/run/lvm")]
    run_dir: PathBuf,
    #[command(flatten)]
    lock: LockArgs,
    /// Change shared VGs without taking leases (only safe when no other host uses them).
    #[arg(long = "nolocking")]
    nolocking: bool,
    /// Answer yes to every question (lvmeta never asks; accepted for lvm2 compatibility).
    #[arg(short = 'y', long = "yes")]
    yes: bool,
}

/// The writing verbs.
#[derive(Subcommand)]
pub enum WriteCmd {
    /// Initialise devices as physical volumes.
    Pvcreate {
        #[command(flatten)]
        w: WriteArgs,
        /// Re-initialise a device that is already an orphan PV.
        #[arg(short = 'f', long = "force", action = clap::ArgAction::Count)]
        force: u8,
        /// Number of metadata areas: 0, 1 or 2.
        #[arg(long = "pvmetadatacopies", default_value_t = 1)]
        copies: u8,
        /// Size of each metadata area.
        #[arg(long = "metadatasize")]
        metadata_size: Option<String>,
        /// Alignment of the first extent.
        #[arg(long = "dataalignment")]
        data_alignment: Option<String>,
        /// Shift of the alignment.
        #[arg(long = "dataalignmentoffset")]
        data_alignment_offset: Option<String>,
        /// Bootloader area after the first metadata area.
        #[arg(long = "bootloaderareasize")]
        bootloader: Option<String>,
        /// The devices.
        #[arg(required = true)]
        pvs: Vec<PathBuf>,
    },
    /// Remove the PV label of orphan PVs.
    Pvremove {
        #[command(flatten)]
        w: WriteArgs,
        /// Accepted for lvm2 compatibility.
        #[arg(short = 'f', long = "force", action = clap::ArgAction::Count)]
        force: u8,
        /// The devices.
        #[arg(required = true)]
        pvs: Vec<PathBuf>,
    },
    /// Create a volume group.
    Vgcreate {
        #[command(flatten)]
        w: WriteArgs,
        /// Extent size (default 4 MiB).
        #[arg(short = 's', long = "physicalextentsize")]
        extent_size: Option<String>,
        /// Tags.
        #[arg(long = "addtag")]
        tags: Vec<String>,
        /// A shared (lvmlockd, sanlock) VG.
        #[arg(long = "shared")]
        shared: bool,
        /// Accepted for lvm2 compatibility.
        #[arg(short = 'f', long = "force")]
        force: bool,
        /// VG name.
        vg: String,
        /// Devices (labelled as PVs if they are not yet).
        #[arg(required = true)]
        pvs: Vec<PathBuf>,
    },
    /// Add PVs to a VG.
    Vgextend {
        #[command(flatten)]
        w: WriteArgs,
        /// VG name.
        vg: String,
        /// Devices.
        #[arg(required = true)]
        pvs: Vec<PathBuf>,
    },
    /// Remove unused PVs from a VG.
    Vgreduce {
        #[command(flatten)]
        w: WriteArgs,
        /// VG name.
        vg: String,
        /// Devices.
        #[arg(required = true)]
        pvs: Vec<PathBuf>,
    },
    /// Remove VGs.
    Vgremove {
        #[command(flatten)]
        w: WriteArgs,
        /// Also when LVs remain.
        #[arg(short = 'f', long = "force", action = clap::ArgAction::Count)]
        force: u8,
        /// VG names.
        #[arg(required = true)]
        vgs: Vec<String>,
    },
    /// Change VG tags; start or stop a shared VG's lockspace on this host.
    Vgchange {
        #[command(flatten)]
        w: WriteArgs,
        /// Join the VG's sanlock lockspace (needs --host-id or lvmlocal.conf host_id).
        #[arg(long = "lockstart")]
        lockstart: bool,
        /// Leave the VG's sanlock lockspace.
        #[arg(long = "lockstop")]
        lockstop: bool,
        /// Tags to add.
        #[arg(long = "addtag")]
        add: Vec<String>,
        /// Tags to remove.
        #[arg(long = "deltag")]
        del: Vec<String>,
        /// VG names.
        #[arg(required = true)]
        vgs: Vec<String>,
    },
    /// Create an LV: linear, striped, thin pool, thin LV or thin snapshot.
    Lvcreate(Box<LvcreateArgs>),
    /// Remove LVs.
    Lvremove {
        #[command(flatten)]
        w: WriteArgs,
        /// Remove a thin pool with its thin LVs.
        #[arg(short = 'f', long = "force", action = clap::ArgAction::Count)]
        force: u8,
        /// VG/LV names.
        #[arg(required = true)]
        lvs: Vec<String>,
    },
    /// Grow an LV.
    Lvextend(ResizeArgs),
    /// Shrink an LV (needs -f: data past the new end is lost).
    Lvreduce(ResizeArgs),
    /// Grow or shrink an LV.
    Lvresize(ResizeArgs),
    /// Rename an LV: `VG/OLD NEW` or `VG OLD NEW`.
    Lvrename {
        #[command(flatten)]
        w: WriteArgs,
        /// Names.
        #[arg(num_args = 2..=3, required = true)]
        names: Vec<String>,
    },
    /// Change LV tags, permission, activation skip; activate or deactivate LVs.
    Lvchange {
        #[command(flatten)]
        w: WriteArgs,
        /// y or ey (exclusive), sy (shared), n (deactivate). In a shared VG the LV's lease
        /// stays held by this host (as a sanlock orphan) while the LV is active.
        #[arg(short = 'a', long = "activate")]
        activate: Option<String>,
        /// Tags to add.
        #[arg(long = "addtag")]
        add: Vec<String>,
        /// Tags to remove.
        #[arg(long = "deltag")]
        del: Vec<String>,
        /// r or rw.
        #[arg(short = 'p', long = "permission")]
        permission: Option<String>,
        /// y or n.
        #[arg(short = 'k', long = "setactivationskip")]
        skip: Option<String>,
        /// y or n: a thin pool zeroes new chunks before their first use.
        #[arg(short = 'Z', long = "zero")]
        zero: Option<String>,
        /// passdown, nopassdown or ignore: what a thin pool does with discards. To or from
        /// ignore only while the pool is inactive.
        #[arg(long = "discards")]
        discards: Option<String>,
        /// VG/LV names.
        #[arg(required = true)]
        lvs: Vec<String>,
    },
    /// Check a VG's metadata areas and copies; repair them with --updatemetadata.
    Vgck {
        #[command(flatten)]
        w: WriteArgs,
        /// Write the newest version again, as a new seqno, to every area.
        #[arg(long = "updatemetadata")]
        update: bool,
        /// VG name.
        vg: String,
    },
    /// Write a backup file, or an older copy still on disk, as the VG's next version.
    Vgcfgrestore {
        #[command(flatten)]
        w: WriteArgs,
        /// The backup file.
        #[arg(short = 'f', long = "file", conflicts_with_all = ["seqno", "list"])]
        file: Option<PathBuf>,
        /// Restore the copy with this seqno from the metadata areas.
        #[arg(long = "seqno")]
        seqno: Option<u32>,
        /// List the versions still in the metadata areas.
        #[arg(short = 'l', long = "list")]
        list: bool,
        /// Accepted for lvm2 compatibility (needed there for thin pools).
        #[arg(long = "force")]
        force: bool,
        /// VG name.
        vg: String,
    },
}

/// `lvcreate`'s options.
#[derive(Args, Clone)]
pub struct LvcreateArgs {
    #[command(flatten)]
    w: WriteArgs,
    /// LV name.
    #[arg(short = 'n', long = "name")]
    name: Option<String>,
    /// Size (default unit MiB; suffixes b s k m g t p e).
    #[arg(short = 'L', long = "size")]
    size: Option<String>,
    /// Size in extents, or N%FREE, N%VG.
    #[arg(short = 'l', long = "extents")]
    extents: Option<String>,
    /// Stripes.
    #[arg(short = 'i', long = "stripes")]
    stripes: Option<u32>,
    /// Stripe size.
    #[arg(short = 'I', long = "stripesize")]
    stripe_size: Option<String>,
    /// linear, striped, thin-pool, thin, snapshot.
    #[arg(long = "type")]
    segtype: Option<String>,
    /// Virtual size of a thin LV.
    #[arg(short = 'V', long = "virtualsize")]
    virtual_size: Option<String>,
    /// The pool of a thin LV (`POOL` or `VG/POOL`).
    #[arg(long = "thinpool")]
    thinpool: Option<String>,
    /// Thin LV or pool (`-T VG/POOL`).
    #[arg(short = 'T', long = "thin")]
    thin: bool,
    /// Snapshot (of a thin LV).
    #[arg(short = 's', long = "snapshot")]
    snapshot: bool,
    /// Tags.
    #[arg(long = "addtag")]
    tags: Vec<String>,
    /// r or rw.
    #[arg(short = 'p', long = "permission")]
    permission: Option<String>,
    /// Skip activation: y or n.
    #[arg(short = 'k', long = "setactivationskip")]
    skip: Option<String>,
    /// Pool chunk size.
    #[arg(short = 'c', long = "chunksize")]
    chunk_size: Option<String>,
    /// Pool metadata size.
    #[arg(long = "poolmetadatasize")]
    pool_metadata_size: Option<String>,
    /// passdown, nopassdown, ignore.
    #[arg(long = "discards")]
    discards: Option<String>,
    /// y or n: zero new pool blocks (thin pools); other LVs are never zeroed here.
    #[arg(short = 'Z', long = "zero")]
    zero: Option<String>,
    /// Only n: lvcreate does not activate (lvchange -ay does).
    #[arg(short = 'a', long = "activate")]
    activate: Option<String>,
    /// VG, VG/POOL or VG/ORIGIN, then PVs to allocate from.
    #[arg(required = true)]
    args: Vec<String>,
}

/// `lvextend`/`lvreduce`/`lvresize` options.
#[derive(Args, Clone)]
pub struct ResizeArgs {
    #[command(flatten)]
    w: WriteArgs,
    /// New size or `+SIZE`/`-SIZE`.
    #[arg(short = 'L', long = "size", allow_hyphen_values = true)]
    size: Option<String>,
    /// New size in extents (`+N`, `-N`, `N%FREE`, `N%VG`).
    #[arg(short = 'l', long = "extents", allow_hyphen_values = true)]
    extents: Option<String>,
    /// Allow shrinking.
    #[arg(short = 'f', long = "force", action = clap::ArgAction::Count)]
    force: u8,
    /// VG/LV, then PVs to allocate from.
    #[arg(required = true)]
    args: Vec<String>,
}

fn usage(msg: impl Into<String>) -> (u8, String) {
    (EINVALID_CMD_LINE, msg.into())
}

/// Parses a size with lvm2's suffixes (binary multiples whatever the case) into bytes;
/// `default_unit` applies to bare numbers.
pub fn parse_size(s: &str, default_unit: char) -> Result<u64, String> {
    let s = s.trim();
    let (num, unit) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => (&s[..i], &s[i..]),
        None => (s, ""),
    };
    let unit = unit
        .chars()
        .next()
        .unwrap_or(default_unit)
        .to_ascii_lowercase();
    let mult: u64 = match unit {
        'b' => 1,
        's' => 512,
        'k' => 1 << 10,
        'm' => 1 << 20,
        'g' => 1 << 30,
        't' => 1 << 40,
        'p' => 1 << 50,
        'e' => 1 << 60,
        _ => return Err(format!("invalid size {s:?}: unknown unit")),
    };
    let v: f64 = num.parse().map_err(|_| format!("invalid size {s:?}"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("invalid size {s:?}"));
    }
    let bytes = (v * mult as f64).ceil();
    if bytes > u64::MAX as f64 {
        return Err(format!("size {s:?} is too large"));
    }
    Ok(bytes as u64)
}

fn size_arg(s: &Option<String>, opt: &str, unit: char) -> Result<Option<u64>, (u8, String)> {
    s.as_deref()
        .map(|v| parse_size(v, unit).map_err(|e| usage(format!("{opt}: {e}"))))
        .transpose()
}

fn yes_no(v: &Option<String>, opt: &str) -> Result<Option<bool>, (u8, String)> {
    match v.as_deref() {
        None => Ok(None),
        Some("y" | "yes") => Ok(Some(true)),
        Some("n" | "no") => Ok(Some(false)),
        Some(o) => Err(usage(format!("{opt}: {o:?} is not y or n"))),
    }
}

fn permission(v: &Option<String>) -> Result<Option<Permission>, (u8, String)> {
    match v.as_deref() {
        None => Ok(None),
        Some("rw") => Ok(Some(Permission::ReadWrite)),
        Some("r") => Ok(Some(Permission::ReadOnly)),
        Some(o) => Err(usage(format!("-p: {o:?} is not r or rw"))),
    }
}

/// Opens the session: `--devices` (plus any device named on the command line), or every
/// block device that opens read-write.
fn session(w: &WriteArgs, extra: &[PathBuf]) -> Result<Session, (u8, String)> {
    let explicit = !w.dev.devices.is_empty();
    let mut paths = if explicit {
        w.dev.devices.clone()
    } else {
        system_block_devices()
    };
    for p in extra {
        if !paths.contains(p) {
            paths.push(p.clone());
        }
    }
    let mut devs: Vec<Box<dyn BlockDevice>> = Vec::new();
    for p in &paths {
        match FileDevice::open_rw(p) {
            Ok(d) if d.size() > 0 => devs.push(Box::new(d)),
            Ok(_) => {}
            Err(e) if explicit || extra.contains(p) => return Err(failed(e)),
            Err(e) => tracing::debug!(device = %p.display(), error = %e, "skipping device"),
        }
    }
    let mut s = Session::new(devs)
        .with_lock_dir(w.locking_dir.clone())
        .with_run_dir(w.run_dir.clone());
    if w.nolocking {
        s = s.without_locking();
    }
    if let Some(host) = w.lock.host()? {
        s = s.with_host(host);
    }
    for warn in &s.scan().warnings {
        eprintln!("  WARNING: {warn}");
    }
    Ok(s)
}

#[cfg(feature = "sanlock")]
fn lease_host(host_id: u64, w: &LockArgs) -> Result<lvmeta::lease::Host, (u8, String)> {
    if !(1..=2000).contains(&host_id) {
        return Err(usage(format!("--host-id {host_id}: must be 1..2000")));
    }
    Ok(lvmeta::lease::Host::new(
        std::sync::Arc::new(lvmeta::lease::sanlock::SanlockLeases::new()),
        host_id,
        w.io_timeout,
        std::time::Duration::from_secs(w.lock_wait),
    ))
}

#[cfg(not(feature = "sanlock"))]
fn lease_host(_host_id: u64, _w: &LockArgs) -> Result<lvmeta::lease::Host, (u8, String)> {
    Err(usage(
        "this lvmeta was built without the sanlock feature: shared VGs need --nolocking",
    ))
}

fn names(paths: &[PathBuf]) -> Vec<String> {
    paths.iter().map(|p| p.display().to_string()).collect()
}

fn refs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// `VG/LV` into its parts.
fn vg_lv(s: &str) -> Result<(&str, &str), (u8, String)> {
    s.split_once('/')
        .map(|(v, l)| (v.trim_start_matches("/dev/"), l))
        .ok_or_else(|| usage(format!("{s:?}: expected VG/LV")))
}

/// Extents for `-L`/`-l`: sizes round up to whole extents.
fn extents_of(vg: &Vg, size: Option<u64>, extents: Option<&str>) -> Result<u32, (u8, String)> {
    let ext_bytes = vg.extent_bytes();
    let n = match (size, extents) {
        (Some(b), None) => b.div_ceil(ext_bytes),
        (None, Some(e)) => {
            let (num, pct) = match e.split_once('%') {
                Some((n, p)) => (n, Some(p)),
                None => (e, None),
            };
            let n: u64 = num
                .parse()
                .map_err(|_| usage(format!("-l: invalid {e:?}")))?;
            match pct.map(str::to_ascii_uppercase).as_deref() {
                None => n,
                Some("FREE") => vg.free_count() * n.min(100) / 100,
                Some("VG") => vg.extent_count() * n.min(100) / 100,
                Some(p) => return Err(usage(format!("-l: unknown %{p}"))),
            }
        }
        _ => return Err(usage("exactly one of -L and -l is needed")),
    };
    u32::try_from(n).map_err(|_| usage("size is too large"))
}

/// PV indices of the VG for device names given after the LV.
fn pv_list(vg: &Vg, s: &Session, devs: &[String]) -> Result<Option<Vec<usize>>, (u8, String)> {
    if devs.is_empty() {
        return Ok(None);
    }
    let scan = s.scan();
    devs.iter()
        .map(|d| {
            let label = scan
                .pvs
                .iter()
                .find(|p| p.device == *d)
                .ok_or_else(|| failed(format!("{d}: not a PV")))?;
            vg.pvs
                .iter()
                .position(|p| p.id == label.label.pv_uuid)
                .ok_or_else(|| failed(format!("{d}: not a PV of volume group \"{}\"", vg.name)))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Some)
}

fn current(s: &Session, vg: &str) -> Result<Vg, (u8, String)> {
    s.scan().vg(vg).map(|v| v.vg.clone()).map_err(failed)
}

/// Lease alignment of the VG's lvmlock device: 1 MiB for 512-byte sectors, else 8 MiB.
fn lease_align(s: &Session, vg: &Vg) -> u64 {
    let scan = s.scan();
    let big = vg.pvs.iter().any(|p| {
        scan.pvs
            .iter()
            .any(|d| d.label.pv_uuid == p.id && d.sector_size > 512)
    });
    if big {
        8 << 20
    } else {
        1 << 20
    }
}

/// Runs a writing verb.
pub fn run(cmd: WriteCmd) -> CmdResult {
    match cmd {
        WriteCmd::Pvcreate {
            w,
            force,
            copies,
            metadata_size,
            data_alignment,
            data_alignment_offset,
            bootloader,
            pvs,
        } => {
            let opts = PvOptions {
                metadata_copies: copies,
                metadata_size: size_arg(&metadata_size, "--metadatasize", 'm')?,
                data_alignment: size_arg(&data_alignment, "--dataalignment", 'k')?,
                data_alignment_offset: size_arg(
                    &data_alignment_offset,
                    "--dataalignmentoffset",
                    'k',
                )?
                .unwrap_or(0),
                bootloader_area_size: size_arg(&bootloader, "--bootloaderareasize", 'm')?
                    .unwrap_or(0),
            };
            let s = session(&w, &pvs)?;
            for d in names(&pvs) {
                s.pvcreate(&d, &opts, force > 0).map_err(failed)?;
                println!("  Physical volume \"{d}\" successfully created.");
            }
            Ok(())
        }
        WriteCmd::Pvremove { w, force: _, pvs } => {
            let s = session(&w, &pvs)?;
            for d in names(&pvs) {
                s.pvremove(&d).map_err(failed)?;
                println!("  Labels on physical volume \"{d}\" successfully wiped.");
            }
            Ok(())
        }
        WriteCmd::Vgcreate {
            w,
            extent_size,
            tags,
            shared,
            force: _,
            vg,
            pvs,
        } => {
            let ext = size_arg(&extent_size, "-s", 'm')?
                .map_or(Ok(edit::vg::DEFAULT_EXTENT_SIZE), |b| {
                    u32::try_from(b / 512).map_err(|_| usage("-s: too large"))
                })?;
            let s = session(&w, &pvs)?;
            let sector = s
                .devices()
                .iter()
                .filter(|d| pvs.iter().any(|p| p.display().to_string() == d.name()))
                .map(|d| d.logical_sector_size())
                .max()
                .unwrap_or(512);
            let spec = VgSpec {
                name: vg.clone(),
                extent_size: ext,
                tags,
                shared: shared.then(|| SharedVg::for_sector(sector)),
            };
            s.vgcreate(&spec, &refs(&names(&pvs))).map_err(failed)?;
            println!("  Volume group \"{vg}\" successfully created");
            Ok(())
        }
        WriteCmd::Vgextend { w, vg, pvs } => {
            let s = session(&w, &pvs)?;
            s.vgextend(&vg, &refs(&names(&pvs))).map_err(failed)?;
            println!("  Volume group \"{vg}\" successfully extended");
            Ok(())
        }
        WriteCmd::Vgreduce { w, vg, pvs } => {
            let s = session(&w, &pvs)?;
            s.vgreduce(&vg, &refs(&names(&pvs))).map_err(failed)?;
            for p in names(&pvs) {
                println!("  Removed \"{p}\" from volume group \"{vg}\"");
            }
            Ok(())
        }
        WriteCmd::Vgremove { w, force, vgs } => {
            let s = session(&w, &[])?;
            for vg in vgs {
                s.vgremove(&vg, force > 0).map_err(failed)?;
                println!("  Volume group \"{vg}\" successfully removed");
            }
            Ok(())
        }
        WriteCmd::Vgchange {
            w,
            lockstart,
            lockstop,
            add,
            del,
            vgs,
        } => {
            let s = session(&w, &[])?;
            for vg in vgs {
                if lockstart {
                    s.lockstart(&vg).map_err(failed)?;
                    println!("  VG {vg} lockspace started");
                }
                if !add.is_empty() || !del.is_empty() {
                    s.update(&vg, "vgchange", |v, ctx| {
                        edit::vg::change_tags(v, ctx, &add, &del)
                    })
                    .map_err(failed)?;
                    println!("  Volume group \"{vg}\" successfully changed");
                }
                if lockstop {
                    s.lockstop(&vg).map_err(failed)?;
                    println!("  VG {vg} lockspace stopped");
                }
            }
            Ok(())
        }
        WriteCmd::Lvcreate(a) => lvcreate(&a),
        WriteCmd::Lvremove { w, force, lvs } => {
            let s = session(&w, &[])?;
            for name in lvs {
                let (vg, lv) = vg_lv(&name)?;
                let pool = s
                    .vg(vg)
                    .ok()
                    .and_then(|v| v.lv(lv).and_then(|l| l.thin_pool().map(str::to_owned)));
                s.update(vg, "lvremove", |v, ctx| {
                    edit::lv::remove(v, ctx, lv, force > 0)
                })
                .map_err(failed)?;
                println!("  Logical volume \"{lv}\" successfully removed.");
                if let Some(pool) = pool {
                    deliver_if_active(&s, vg, &pool);
                }
            }
            Ok(())
        }
        WriteCmd::Lvextend(a) => resize(&a, Some(true)),
        WriteCmd::Lvreduce(a) => resize(&a, Some(false)),
        WriteCmd::Lvresize(a) => resize(&a, None),
        WriteCmd::Lvrename { w, names } => {
            let (vg, from, to) = match names.as_slice() {
                [a, b] => {
                    let (vg, from) = vg_lv(a)?;
                    let to = b.rsplit('/').next().unwrap_or(b);
                    (vg.to_owned(), from.to_owned(), to.to_owned())
                }
                [v, a, b] => (v.clone(), a.clone(), b.clone()),
                _ => return Err(usage("lvrename VG/OLD NEW or VG OLD NEW")),
            };
            let s = session(&w, &[])?;
            s.update(&vg, "lvrename", |v, ctx| {
                edit::lv::rename(v, ctx, &from, &to)
            })
            .map_err(failed)?;
            println!("  Renamed \"{from}\" to \"{to}\" in volume group \"{vg}\"");
            Ok(())
        }
        WriteCmd::Lvchange {
            w,
            activate,
            add,
            del,
            permission: p,
            skip,
            zero,
            discards,
            lvs,
        } => {
            let change = LvChange {
                add_tags: add,
                del_tags: del,
                permission: permission(&p)?,
                activation_skip: yes_no(&skip, "--setactivationskip")?,
            };
            let pool = PoolOptions {
                zero: yes_no(&zero, "-Z")?,
                discards,
            };
            let shared = match activate.as_deref() {
                None | Some("n") => false,
                Some("y" | "ey") => false,
                Some("sy") => true,
                Some(other) => return Err(usage(format!("-a {other}: y, ey, sy or n"))),
            };
            let s = session(&w, &[])?;
            if change != LvChange::default() || !pool.is_empty() || activate.is_none() {
                for name in &lvs {
                    let (vg, lv) = vg_lv(name)?;
                    if !pool.is_empty() {
                        refuse_live_discard_switch(&s, vg, lv, &pool)?;
                    }
                    s.update(vg, "lvchange", |v, ctx| {
                        let v = edit::lv::change(v, ctx, lv, &change)?;
                        if pool.is_empty() {
                            return Ok(v);
                        }
                        edit::thin::change_pool(v, ctx, lv, &pool)
                    })
                    .map_err(failed)?;
                    println!("  Logical volume {vg}/{lv} changed.");
                    if !pool.is_empty() {
                        // The pool's table carries these settings: reload it where it is up.
                        deliver_if_active(&s, vg, lv);
                    }
                }
            }
            let Some(act) = activate else {
                return Ok(());
            };
            let backend = lvmeta::activate::best().ok_or_else(|| {
                failed("no activation backend: neither /dev/mapper/control nor /dev/loop-control")
            })?;
            for name in &lvs {
                let (vg, lv) = vg_lv(name)?;
                if act == "n" {
                    s.deactivate(vg, lv, backend.as_ref()).map_err(failed)?;
                    continue;
                }
                let a = s
                    .activate(vg, lv, shared, false, backend.as_ref())
                    .map_err(failed)?;
                println!(
                    "  Logical volume {vg}/{lv} is active at {}.",
                    a.device.display()
                );
                // The LV stays active after this process: so does its lease.
                a.keep_lease();
            }
            Ok(())
        }
        WriteCmd::Vgck { w, update, vg } => {
            let s = session(&w, &[])?;
            if update {
                let out = s.repair(&vg).map_err(failed)?;
                println!(
                    "  Volume group \"{vg}\" metadata updated (seqno {}).",
                    out.seqno
                );
                return Ok(());
            }
            let problems = s.check(&vg).map_err(failed)?;
            if problems.is_empty() {
                return Ok(());
            }
            Err(failed(format!(
                "{}\n  See lvmeta vgck --updatemetadata to correct them.",
                problems.join("\n  ")
            )))
        }
        WriteCmd::Vgcfgrestore {
            w,
            file,
            seqno,
            list,
            force: _,
            vg,
        } => {
            let s = session(&w, &[])?;
            if list {
                for v in s.history(&vg).map_err(failed)? {
                    println!(
                        "  seqno {:>6}  {} LVs  {}",
                        v.seqno,
                        v.lvs.len(),
                        v.header.description.as_deref().unwrap_or("")
                    );
                }
                return Ok(());
            }
            let from = match (file, seqno) {
                (Some(f), None) => {
                    let text = std::fs::read_to_string(&f)
                        .map_err(|e| failed(format!("{}: {e}", f.display())))?;
                    Vg::from_text(&text).map_err(failed)?.vg
                }
                (None, Some(n)) => s
                    .history(&vg)
                    .map_err(failed)?
                    .into_iter()
                    .find(|v| v.seqno == n)
                    .ok_or_else(|| {
                        failed(format!(
                            "no copy with seqno {n} left in the metadata areas of {vg}"
                        ))
                    })?,
                _ => return Err(usage("vgcfgrestore needs -f FILE, --seqno N or --list")),
            };
            let out = s.restore(&vg, &from).map_err(failed)?;
            println!("  Restored volume group {vg} (seqno {}).", out.seqno);
            Ok(())
        }
    }
}

fn lvcreate(a: &LvcreateArgs) -> CmdResult {
    if let Some(act) = a.activate.as_deref() {
        if !matches!(act, "n" | "no") {
            return Err(usage(
                "-a: lvcreate does not activate; create with -an, then lvchange -ay",
            ));
        }
    }
    let (target, pv_names) = a.args.split_first().ok_or_else(|| usage("VG needed"))?;
    let s = session(&a.w, &[])?;
    let stamp = Stamp::now();
    let segtype = a.segtype.as_deref();
    let thin_like = a.virtual_size.is_some() || a.thinpool.is_some() || segtype == Some("thin");
    let perm = permission(&a.permission)?.unwrap_or_default();
    let skip = yes_no(&a.skip, "--setactivationskip")?;
    // Thin snapshot: lvcreate -s VG/ORIGIN [-n NAME].
    if a.snapshot || segtype == Some("snapshot") {
        let (vg, origin) = vg_lv(target)?;
        let cur = current(&s, vg)?;
        let pool = match cur
            .lv(origin)
            .and_then(|l| l.segments.first())
            .map(|s| &s.kind)
        {
            Some(lvmeta::model::SegKind::Thin(t)) => t.thin_pool.clone(),
            _ => {
                return Err(failed(format!(
                    "{vg}/{origin}: lvmeta makes snapshots of thin LVs only"
                )))
            }
        };
        let spec = ThinSpec {
            name: a.name.clone(),
            pool,
            extents: 0,
            origin: Some(origin.to_owned()),
            tags: a.tags.clone(),
            activation_skip: skip,
            stamp,
        };
        return create_thin(&s, vg, &spec);
    }
    let (vg, in_target) = match target.split_once('/') {
        Some((v, l)) => (v, Some(l)),
        None => (target.as_str(), None),
    };
    let cur = current(&s, vg)?;
    let pvs = pv_list(&cur, &s, pv_names)?;
    if thin_like && segtype != Some("thin-pool") {
        let pool = match (&a.thinpool, in_target) {
            (Some(p), _) => p.rsplit('/').next().unwrap_or(p).to_owned(),
            (None, Some(p)) if a.thin => p.to_owned(),
            _ => return Err(usage("a thin LV needs --thinpool POOL (or -T VG/POOL)")),
        };
        let bytes =
            size_arg(&a.virtual_size, "-V", 'm')?.ok_or_else(|| usage("-V SIZE is needed"))?;
        let spec = ThinSpec {
            name: a.name.clone(),
            pool,
            extents: extents_of(&cur, Some(bytes), None)?,
            origin: None,
            tags: a.tags.clone(),
            activation_skip: skip,
            stamp,
        };
        return create_thin(&s, vg, &spec);
    }
    let stripes = a.stripes.unwrap_or(1);
    let mut extents = extents_of(&cur, size_arg(&a.size, "-L", 'm')?, a.extents.as_deref())?;
    if extents % stripes != 0 {
        extents += stripes - extents % stripes;
    }
    let stripe_size = size_arg(&a.stripe_size, "-I", 'k')?
        .map(|b| u32::try_from(b / 512).map_err(|_| usage("-I: too large")))
        .transpose()?;
    let name = if segtype == Some("thin-pool") || (a.thin && in_target.is_some()) {
        a.name.clone().or(in_target.map(str::to_owned))
    } else {
        a.name.clone()
    };
    let spec = LvSpec {
        name,
        extents,
        stripes,
        stripe_size,
        pvs,
        tags: a.tags.clone(),
        permission: perm,
        activation_skip: skip.unwrap_or(false),
        stamp,
        lease_align: lease_align(&s, &cur),
        internal: false,
    };
    let made = match segtype {
        Some("thin-pool") => {
            let pool = PoolSpec {
                data: spec,
                chunk_size: size_arg(&a.chunk_size, "--chunksize", 'k')?
                    .map(|b| u32::try_from(b / 512).map_err(|_| usage("--chunksize: too large")))
                    .transpose()?,
                metadata_extents: size_arg(&a.pool_metadata_size, "--poolmetadatasize", 'm')?
                    .map(|b| extents_of(&cur, Some(b), None))
                    .transpose()?,
                discards: a.discards.clone().unwrap_or_else(|| "passdown".into()),
                zero: yes_no(&a.zero, "-Z")?.unwrap_or(true),
            };
            s.update(vg, "lvcreate", |v, ctx| {
                edit::thin::create_pool(v, ctx, &pool)
            })
            .map_err(failed)?
        }
        None | Some("linear" | "striped") => {
            if segtype == Some("linear") && stripes > 1 {
                return Err(usage("--type linear with -i > 1"));
            }
            s.update(vg, "lvcreate", |v, ctx| edit::lv::create(v, ctx, &spec))
                .map_err(failed)?
        }
        Some(t) => {
            return Err(usage(format!(
                "--type {t}: lvmeta creates linear, striped, thin-pool and thin LVs"
            )))
        }
    };
    if stripes > 1 && a.stripe_size.is_none() {
        println!("  Using default stripesize 64.00 KiB.");
    }
    println!("  Logical volume \"{made}\" created.");
    Ok(())
}

/// Creates a thin LV or thin snapshot and says so as lvm2 does.
fn create_thin(s: &Session, vg: &str, spec: &ThinSpec) -> CmdResult {
    let made = s
        .update(vg, "lvcreate", |v, ctx| {
            edit::thin::create_thin(v, ctx, spec)
        })
        .map_err(failed)?;
    println!("  Logical volume \"{made}\" created.");
    deliver_if_active(s, vg, &spec.pool);
    Ok(())
}

/// The kernel turns a thin pool's discard support on or off (to or from `ignore`) only while
/// the pool is inactive, so lvm2 refuses that for a pool active here, and so does this. (A
/// pool active on another host is refused by its lease.)
fn refuse_live_discard_switch(s: &Session, vg: &str, lv: &str, opts: &PoolOptions) -> CmdResult {
    let v = s.vg(vg).map_err(failed)?;
    let Some(p) = v.lv(lv).and_then(|l| l.pool()) else {
        return Ok(());
    };
    if !opts.switches_discard_support(p) {
        return Ok(());
    }
    let Some(backend) = lvmeta::activate::best() else {
        return Ok(());
    };
    match s.live(vg, lv, backend.as_ref()) {
        Ok(false) => Ok(()),
        Ok(true) => Err(failed(format!(
            "Cannot change support for discards while pool volume {vg}/{lv} is active."
        ))),
        Err(e) => Err(failed(format!(
            "cannot tell whether thin pool {vg}/{lv} is active: {e}"
        ))),
    }
}

/// After a change to thin pool `pool` (its thin LVs or its settings): when the pool is active
/// on this host (a VG without leases, or its lease free), reloads its table and sends it the
/// queued messages now, as lvm2 does; otherwise they wait for the pool's next activation. A
/// failure is a warning: the change is committed, and the next activation delivers it.
fn deliver_if_active(s: &Session, vg: &str, pool: &str) {
    let Some(backend) = lvmeta::activate::best() else {
        return;
    };
    if let Err(e) = s.refresh(vg, pool, backend.as_ref()) {
        eprintln!("  WARNING: thin pool {vg}/{pool} did not take its messages now: {e}");
    }
}

fn resize(a: &ResizeArgs, grow: Option<bool>) -> CmdResult {
    let (target, pv_names) = a.args.split_first().ok_or_else(|| usage("VG/LV needed"))?;
    let (vg, lv) = vg_lv(target)?;
    let s = session(&a.w, &[])?;
    let cur = current(&s, vg)?;
    let now = cur
        .lv(lv)
        .map(|l| u32::try_from(l.extents()).unwrap_or(u32::MAX))
        .ok_or_else(|| {
            failed(lvmeta::Error::LvNotFound {
                vg: vg.into(),
                lv: lv.into(),
            })
        })?;
    let (sign, size, ext) = match (&a.size, &a.extents) {
        (Some(sz), None) => {
            let (sign, rest) = split_sign(sz);
            (
                sign,
                Some(parse_size(rest, 'm').map_err(|e| usage(format!("-L: {e}")))?),
                None,
            )
        }
        (None, Some(e)) => {
            let (sign, rest) = split_sign(e);
            (sign, None, Some(rest))
        }
        _ => return Err(usage("exactly one of -L and -l is needed")),
    };
    let n = extents_of(&cur, size, ext)?;
    let target_extents = match sign {
        Some('+') => now
            .checked_add(n)
            .ok_or_else(|| usage("size is too large"))?,
        Some(_) => now
            .checked_sub(n)
            .ok_or_else(|| usage("cannot shrink below 0"))?,
        None => n,
    };
    match grow {
        Some(true) if target_extents < now => {
            return Err(usage("lvextend cannot shrink; use lvreduce"))
        }
        Some(false) if target_extents > now => {
            return Err(usage("lvreduce cannot grow; use lvextend"))
        }
        _ => {}
    }
    let pvs = pv_list(&cur, &s, pv_names)?;
    s.update(vg, "lvresize", |v, ctx| {
        edit::lv::resize(v, ctx, lv, target_extents, pvs.as_deref(), a.force > 0)
    })
    .map_err(failed)?;
    println!("  Logical volume {vg}/{lv} successfully resized.");
    Ok(())
}

fn split_sign(s: &str) -> (Option<char>, &str) {
    match s.chars().next() {
        Some(c @ ('+' | '-')) => (Some(c), &s[1..]),
        _ => (None, s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("10", 'm'), Ok(10 << 20));
        assert_eq!(parse_size("1G", 'm'), Ok(1 << 30));
        assert_eq!(parse_size("1.5k", 'm'), Ok(1536));
        assert_eq!(parse_size("8s", 'm'), Ok(4096));
        assert!(parse_size("x", 'm').is_err());
        assert!(parse_size("-1", 'm').is_err());
        assert!(parse_size("1q", 'm').is_err());
    }
}
