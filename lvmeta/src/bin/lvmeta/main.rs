//! `lvmeta`: lvm2's admin verbs, done by reading and writing lvm2 metadata directly.

mod write;

/// mimalloc: the model of a large VG is many small allocations that glibc's allocator
/// serves (and returns to the kernel) more slowly; see docs/benchmarks.md, "Parse + model build".
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use lvmeta::dev::{BlockDevice, FileDevice};
use lvmeta::report::{self, DmState, Kind, Request, Units};
use lvmeta::scan::{self, Scan};
use lvmeta::text::Style;

/// lvm2's exit code for a failed command.
const ECMD_FAILED: u8 = 5;
/// lvm2's exit code for a bad command line.
const EINVALID_CMD_LINE: u8 = 3;

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

#[derive(Args, Clone)]
struct DeviceArgs {
    /// Only these devices or image files (comma separated or repeated); default: every block
    /// device of this machine.
    #[arg(long = "devices", value_delimiter = ',')]
    devices: Vec<PathBuf>,
}

#[derive(Args, Clone)]
struct ReportArgs {
    #[command(flatten)]
    dev: DeviceArgs,
    #[command(flatten)]
    lock: write::LockArgs,
    /// Show hidden LVs too.
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// Fields to show; `+f1,f2` adds to the default ones.
    #[arg(short = 'o', long = "options")]
    options: Option<String>,
    /// `basic` (columns) or `json`.
    #[arg(long = "reportformat", default_value = "basic")]
    reportformat: String,
    /// Size units: h, b, s, k, m, g, t, p, e (upper case: powers of 1000).
    #[arg(long = "units", default_value = "h")]
    units: String,
    /// No unit letter after sizes.
    #[arg(long = "nosuffix")]
    nosuffix: bool,
    /// No heading line in column output.
    #[arg(long = "noheadings")]
    noheadings: bool,
    /// VG or VG/LV names.
    names: Vec<String>,
}

#[derive(Subcommand)]
enum Cmd {
    #[command(flatten)]
    Write(write::WriteCmd),
    /// Report physical volumes.
    Pvs(ReportArgs),
    /// Report volume groups.
    Vgs(ReportArgs),
    /// Report logical volumes.
    Lvs {
        #[command(flatten)]
        args: ReportArgs,
        /// One row per segment.
        #[arg(long = "segments")]
        segments: bool,
    },
    /// Print the committed metadata text of a VG.
    Dump {
        #[command(flatten)]
        dev: DeviceArgs,
        /// The VG.
        vg: String,
    },
    /// Write a VG's metadata to a backup file, as vgcfgbackup does.
    Vgcfgbackup {
        #[command(flatten)]
        dev: DeviceArgs,
        /// The backup file.
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// The VG.
        vg: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
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
    match run(cli.cmd) {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, msg)) => {
            eprintln!("  {msg}");
            ExitCode::from(code)
        }
    }
}

type CmdResult = Result<(), (u8, String)>;

fn failed(e: impl std::fmt::Display) -> (u8, String) {
    (ECMD_FAILED, e.to_string())
}

fn run(cmd: Cmd) -> CmdResult {
    match cmd {
        Cmd::Write(w) => write::run(w),
        Cmd::Pvs(a) => report_cmd(Kind::Pvs, &a, false),
        Cmd::Vgs(a) => report_cmd(Kind::Vgs, &a, false),
        Cmd::Lvs { args, segments } => report_cmd(Kind::Lvs, &args, segments),
        Cmd::Dump { dev, vg } => {
            let scan = scan_devices(&dev);
            let svg = scan.vg(&vg).map_err(failed)?;
            print!("{}", svg.text);
            Ok(())
        }
        Cmd::Vgcfgbackup { dev, file, vg } => {
            let scan = scan_devices(&dev);
            let svg = scan.vg(&vg).map_err(failed)?;
            let mut v = svg.vg.clone();
            v.header.description = Some(format!("lvmeta vgcfgbackup -f {} {vg}", file.display()));
            v.header.creation_host = Some(hostname());
            v.header.creation_time = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()
                .map(|d| d.as_secs() as i64);
            let version = env!("CARGO_PKG_VERSION");
            let text = v.to_text(Style::File, &format!("lvmeta version {version}"));
            std::fs::write(&file, text).map_err(|e| failed(format!("{}: {e}", file.display())))?;
            Ok(())
        }
    }
}

fn report_cmd(kind: Kind, a: &ReportArgs, segments: bool) -> CmdResult {
    let fields =
        report::parse_fields(kind, a.options.as_deref()).map_err(|e| (EINVALID_CMD_LINE, e))?;
    let units = Units::parse(&a.units, !a.nosuffix).map_err(|e| (EINVALID_CMD_LINE, e))?;
    let json = match a.reportformat.as_str() {
        "json" => true,
        "basic" => false,
        other => {
            return Err((
                EINVALID_CMD_LINE,
                format!("unknown report format {other:?}: use basic or json"),
            ))
        }
    };
    let selected: Vec<&str> = a
        .names
        .iter()
        .map(|n| n.split('/').next().unwrap_or(n))
        .collect();
    let mut session = lvmeta::session::Session::new(open_devices(&a.dev));
    if let Some(h) = a.lock.host()? {
        session = session.with_host(h);
    }
    // Without a host id nothing is locked, and every shared VG read is named below.
    let (scan, locks) = session.read_locked(&selected).map_err(failed)?;
    print_warnings(&scan);
    for name in &a.names {
        let vg = name.split('/').next().unwrap_or(name);
        scan.vg(vg).map_err(failed)?;
        if let Some((vg, lv)) = name.split_once('/') {
            if scan.vg(vg).map_err(failed)?.vg.lv(lv).is_none() {
                return Err(failed(lvmeta::Error::LvNotFound {
                    vg: vg.into(),
                    lv: lv.into(),
                }));
            }
        }
    }
    for vg in &locks.unlocked {
        eprintln!("  WARNING: Reading VG {vg} without a lock; the view may be stale.");
    }
    let req = Request {
        kind,
        fields,
        all: a.all,
        segments,
        select: &a.names,
    };
    let table = report::build(&scan, &req, &DmState::probe());
    if json {
        print!("{}", table.to_json(units));
    } else {
        print!("{}", table.to_columns(units, !a.noheadings));
    }
    Ok(())
}

/// Opens the given devices (or every block device) read-only, saying why one that was named
/// does not open.
fn open_devices(args: &DeviceArgs) -> Vec<Box<dyn BlockDevice>> {
    let explicit = !args.devices.is_empty();
    let paths = if explicit {
        args.devices.clone()
    } else {
        system_block_devices()
    };
    let mut devs: Vec<Box<dyn BlockDevice>> = Vec::new();
    for p in &paths {
        match FileDevice::open(p) {
            Ok(d) if d.size() > 0 => devs.push(Box::new(d)),
            Ok(_) => {}
            Err(e) if explicit => eprintln!("  WARNING: {e}"),
            Err(e) => tracing::debug!(device = %p.display(), error = %e, "skipping device"),
        }
    }
    devs
}

/// Opens and scans the given devices (or every block device), prints the warnings.
fn scan_devices(args: &DeviceArgs) -> Scan {
    let devs = open_devices(args);
    let refs: Vec<&dyn BlockDevice> = devs.iter().map(|d| d.as_ref()).collect();
    let scan = scan::scan(&refs);
    print_warnings(&scan);
    scan
}

fn print_warnings(scan: &Scan) {
    for w in &scan.warnings {
        eprintln!("  WARNING: {w}");
    }
}

/// `/dev/<name>` for every block device the kernel lists.
fn system_block_devices() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir("/sys/class/block")
        .map(|d| {
            d.flatten()
                .map(|e| Path::new("/dev").join(e.file_name()))
                .filter(|p| p.exists())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}
