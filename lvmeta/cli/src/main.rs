//! `lvmeta`: lvm2's admin verbs, done by reading and writing lvm2 metadata directly.
//!
//! One file per verb family, each verb a clap `Args` struct whose `run` parses what lvm2
//! parses, makes one library call and prints lvm2's message: `report.rs` (pvs, vgs, lvs,
//! dump, vgcfgbackup), `pv.rs`, `vg.rs`, `lvcreate.rs`, `lv.rs` (lvremove, lvrename,
//! lvchange, lvextend/lvreduce/lvresize), `repair.rs` (vgck, vgcfgrestore); `args.rs` holds
//! the options and parsing they share.

mod args;
mod lv;
mod lvcreate;
mod pv;
mod repair;
mod report;
mod vg;

/// mimalloc: the model of a large VG is many small allocations that glibc's allocator
/// serves (and returns to the kernel) more slowly; see docs/benchmarks.md, "Parse + model build".
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// lvm2's exit code for a failed command.
const ECMD_FAILED: u8 = 5;
/// lvm2's exit code for a bad command line.
const EINVALID_CMD_LINE: u8 = 3;

/// What a verb returns: nothing, or lvm2's exit code and the message.
type CmdResult = Result<(), (u8, String)>;

#[derive(Parser)]
#[command(
    name = "lvmeta",
    version,
    about = "lvm2 metadata tools that never run lvm"
)]
struct Cli {
    /// More detail on stderr (repeat for debug logs).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Report physical volumes.
    Pvs(report::ReportArgs),
    /// Report volume groups.
    Vgs(report::ReportArgs),
    /// Report logical volumes.
    Lvs(report::LvsArgs),
    /// Print the committed metadata text of a VG.
    Dump(report::DumpArgs),
    /// Write a VG's metadata to a backup file, as vgcfgbackup does.
    Vgcfgbackup(report::BackupArgs),
    /// Initialise devices as physical volumes.
    Pvcreate(pv::PvcreateArgs),
    /// Remove the PV label of orphan PVs.
    Pvremove(pv::PvremoveArgs),
    /// Create a volume group.
    Vgcreate(vg::VgcreateArgs),
    /// Add PVs to a VG.
    Vgextend(vg::VgextendArgs),
    /// Remove unused PVs from a VG.
    Vgreduce(vg::VgreduceArgs),
    /// Remove VGs.
    Vgremove(vg::VgremoveArgs),
    /// Change VG tags; start or stop a shared VG's lockspace on this host.
    Vgchange(vg::VgchangeArgs),
    /// Create an LV: linear, striped, thin pool, thin LV or thin snapshot.
    Lvcreate(Box<lvcreate::LvcreateArgs>),
    /// Remove LVs.
    Lvremove(lv::LvremoveArgs),
    /// Grow an LV.
    Lvextend(lv::ResizeArgs),
    /// Shrink an LV (needs -f: data past the new end is lost).
    Lvreduce(lv::ResizeArgs),
    /// Grow or shrink an LV.
    Lvresize(lv::ResizeArgs),
    /// Rename an LV: `VG/OLD NEW` or `VG OLD NEW`.
    Lvrename(lv::LvrenameArgs),
    /// Change LV tags, permission, activation skip; activate or deactivate LVs.
    Lvchange(lv::LvchangeArgs),
    /// Check a VG's metadata areas and copies; repair them with --updatemetadata.
    Vgck(repair::VgckArgs),
    /// Write a backup file, or an older copy still on disk, as the VG's next version.
    Vgcfgrestore(repair::VgcfgrestoreArgs),
}

fn main() -> ExitCode {
    // A bad command line is lvm2's 3 (clap's own is 2); help and version are 0.
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EINVALID_CMD_LINE } else { 0 });
        }
    };
    let level = match cli.verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    if !root() {
        eprintln!("  WARNING: Running as a non-root user. Functionality may be unavailable.");
    }
    let done = match cli.cmd {
        Cmd::Pvs(a) => a.run(lvmeta::report::Kind::Pvs, false),
        Cmd::Vgs(a) => a.run(lvmeta::report::Kind::Vgs, false),
        Cmd::Lvs(a) => a.run(),
        Cmd::Dump(a) => a.run(),
        Cmd::Vgcfgbackup(a) => a.run(),
        Cmd::Pvcreate(a) => a.run(),
        Cmd::Pvremove(a) => a.run(),
        Cmd::Vgcreate(a) => a.run(),
        Cmd::Vgextend(a) => a.run(),
        Cmd::Vgreduce(a) => a.run(),
        Cmd::Vgremove(a) => a.run(),
        Cmd::Vgchange(a) => a.run(),
        Cmd::Lvcreate(a) => a.run(),
        Cmd::Lvremove(a) => a.run(),
        Cmd::Lvextend(a) => a.run(Some(true)),
        Cmd::Lvreduce(a) => a.run(Some(false)),
        Cmd::Lvresize(a) => a.run(None),
        Cmd::Lvrename(a) => a.run(),
        Cmd::Lvchange(a) => a.run(),
        Cmd::Vgck(a) => a.run(),
        Cmd::Vgcfgrestore(a) => a.run(),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, msg)) => {
            eprintln!("  {msg}");
            ExitCode::from(code)
        }
    }
}

/// Whether the effective user is root (lvm2 warns every other user that devices and lock
/// files may be out of reach).
fn root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(true)
}
