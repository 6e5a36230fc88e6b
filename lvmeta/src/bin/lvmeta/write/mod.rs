//! The verbs that change metadata: argument parsing in lvm2's style, then one `session` call.

//!
//! Files: this one (the options and `run`, one arm per verb), `common.rs` (what the
//! verbs share: sizes, names, the session), `lv.rs` (lvcreate, lvextend, lvreduce, lvresize).

use std::path::PathBuf;

use clap::{Args, Subcommand};

use lvmeta::edit::thin::PoolOptions;
use lvmeta::edit::{self, LvChange, SharedVg, VgSpec};
use lvmeta::layout::PvOptions;
use lvmeta::model::Vg;

use super::{failed, CmdResult, DeviceArgs};

mod common;
mod lv;

use common::*;
use lv::*;

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
                .unwrap_or_default(),
                bootloader_area_size: size_arg(&bootloader, "--bootloaderareasize", 'm')?
                    .unwrap_or_default(),
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
            let ext =
                sectors_arg(&extent_size, "-s", 'm')?.unwrap_or(edit::vg::DEFAULT_EXTENT_SIZE);
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
                    .activate_devices(vg, lv, shared, false, backend.as_ref())
                    .map_err(failed)?;
                // lvm2's update_pool_lv: a thin pool's delivered queue is cleared, a commit.
                s.clear_delivered(&a.placement, "lvchange -ay")
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
