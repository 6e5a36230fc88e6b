//! `lvmeta`: lvm2's admin verbs, done by reading and writing lvm2 metadata directly.
//!
//! One file per verb family, each verb a clap `Args` struct whose `run` parses what lvm2
//! parses, makes one library call and prints lvm2's message: `report.rs` (pvs, vgs, lvs,
//! dump, vgcfgbackup), `pv.rs`, `vg.rs`, `lvcreate.rs`, `lv.rs` (lvremove, lvrename,
//! lvchange, lvextend/lvreduce/lvresize), `repair.rs` (vgck, vgcfgrestore); `args.rs` holds
//! the options and parsing they share.

mod args;
mod display;
mod lv;
mod lvcreate;
mod pv;
mod repair;
mod report;
mod resizefs;
mod vg;

/// mimalloc: the model of a large VG is many small allocations that glibc's allocator
/// serves (and returns to the kernel) more slowly; see docs/benchmarks.md, "Parse + model build".
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::process::ExitCode;

use clap::{ArgMatches, Args, Command, FromArgMatches};

/// lvm2's exit code for a failed command.
const ECMD_FAILED: u8 = 5;
/// lvm2's exit code for a bad command line.
const EINVALID_CMD_LINE: u8 = 3;

/// What a verb returns: nothing, or lvm2's exit code and the message.
type CmdResult = Result<(), (u8, String)>;

/// One verb: its name, its one-line help, its options and what runs it.
struct Verb {
    name: &'static str,
    about: &'static str,
    /// Adds the verb's options (its clap `Args`) to its command.
    options: fn(Command) -> Command,
    /// Reads the options back and runs the verb.
    run: fn(&ArgMatches) -> CmdResult,
}

/// A [`Verb`] whose options are `$args` and which runs `$run` on them.
macro_rules! verb {
    ($name:literal, $about:literal, $args:ty, $run:expr) => {
        Verb {
            name: $name,
            about: $about,
            options: <$args as Args>::augment_args,
            run: |m| {
                let a =
                    <$args>::from_arg_matches(m).map_err(|e| (EINVALID_CMD_LINE, e.to_string()))?;
                let run: fn($args) -> CmdResult = $run;
                run(a)
            },
        }
    };
}

/// Every verb, in `lvmeta --help` order.
const VERBS: &[Verb] = &[
    verb!("pvs", "Report physical volumes.", report::ReportArgs, |a| a
        .run(lvmeta::report::Kind::Pvs, false)),
    verb!("vgs", "Report volume groups.", report::ReportArgs, |a| a
        .run(lvmeta::report::Kind::Vgs, false)),
    verb!("lvs", "Report logical volumes.", report::LvsArgs, |a| a
        .run()),
    verb!(
        "pvdisplay",
        "Display physical volumes.",
        display::DisplayArgs,
        |a| a.pvdisplay()
    ),
    verb!(
        "vgdisplay",
        "Display volume groups.",
        display::DisplayArgs,
        |a| a.vgdisplay()
    ),
    verb!(
        "lvdisplay",
        "Display logical volumes.",
        display::DisplayArgs,
        |a| a.lvdisplay()
    ),
    verb!(
        "dump",
        "Print the committed metadata text of a VG.",
        report::DumpArgs,
        |a| a.run()
    ),
    verb!(
        "vgcfgbackup",
        "Write a VG's metadata to a backup file, as vgcfgbackup does.",
        report::BackupArgs,
        |a| a.run()
    ),
    verb!(
        "pvcreate",
        "Initialise devices as physical volumes.",
        pv::PvcreateArgs,
        |a| a.run()
    ),
    verb!(
        "pvremove",
        "Remove the PV label of orphan PVs.",
        pv::PvremoveArgs,
        |a| a.run()
    ),
    verb!(
        "vgcreate",
        "Create a volume group.",
        vg::VgcreateArgs,
        |a| a.run()
    ),
    verb!("vgextend", "Add PVs to a VG.", vg::VgextendArgs, |a| a
        .run()),
    verb!(
        "vgreduce",
        "Remove unused PVs from a VG.",
        vg::VgreduceArgs,
        |a| a.run()
    ),
    verb!("vgremove", "Remove VGs.", vg::VgremoveArgs, |a| a.run()),
    verb!(
        "vgchange",
        "Change VG tags; start or stop a shared VG's lockspace on this host.",
        vg::VgchangeArgs,
        |a| a.run()
    ),
    verb!(
        "lvcreate",
        "Create an LV: linear, striped, thin pool, thin LV or thin snapshot.",
        lvcreate::LvcreateArgs,
        |a| a.run()
    ),
    verb!("lvremove", "Remove LVs.", lv::LvremoveArgs, |a| a.run()),
    verb!("lvextend", "Grow an LV.", lv::ResizeArgs, |a| a
        .run(Some(true))),
    verb!(
        "lvreduce",
        "Shrink an LV (needs -f: data past the new end is lost).",
        lv::ResizeArgs,
        |a| a.run(Some(false))
    ),
    verb!("lvresize", "Grow or shrink an LV.", lv::ResizeArgs, |a| a
        .run(None)),
    verb!(
        "lvrename",
        "Rename an LV: `VG/OLD NEW` or `VG OLD NEW`.",
        lv::LvrenameArgs,
        |a| a.run()
    ),
    verb!(
        "lvchange",
        "Change LV tags, permission, activation skip; activate or deactivate LVs.",
        lv::LvchangeArgs,
        |a| a.run()
    ),
    verb!(
        "vgck",
        "Check a VG's metadata areas and copies; repair them with --updatemetadata.",
        repair::VgckArgs,
        |a| a.run()
    ),
    verb!(
        "vgcfgrestore",
        "Write a backup file, or an older copy still on disk, as the VG's next version.",
        repair::VgcfgrestoreArgs,
        |a| a.run()
    ),
];

/// The command line's parser: with only the named verb's options when the first argument
/// names one (building all twenty-one verbs' options is most of a short command's start-up),
/// else with every verb (`--help`, a misspelt verb).
fn parser(first: Option<&str>) -> Command {
    let top = Command::new("lvmeta")
        .version(env!("CARGO_PKG_VERSION"))
        .about("lvm2 metadata tools that never run lvm")
        .subcommand_required(true)
        .arg(
            clap::Arg::new("verbose")
                .short('v')
                .long("verbose")
                .action(clap::ArgAction::Count)
                .global(true)
                .help("More detail on stderr (repeat for debug logs)"),
        );
    let verb = |v: &Verb| (v.options)(Command::new(v.name)).about(v.about);
    match VERBS.iter().find(|v| Some(v.name) == first) {
        Some(v) => top.subcommand(verb(v)),
        None => top.subcommands(VERBS.iter().map(verb)),
    }
}

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let first = args.get(1).and_then(|a| a.to_str());
    // A bad command line is lvm2's 3 (clap's own is 2); help and version are 0.
    let matches = match parser(first).try_get_matches_from(&args) {
        Ok(m) => m,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { EINVALID_CMD_LINE } else { 0 });
        }
    };
    logging(matches.get_count("verbose"));
    if !root() {
        eprintln!("  WARNING: Running as a non-root user. Functionality may be unavailable.");
    }
    let done = match matches.subcommand() {
        Some((name, m)) => match VERBS.iter().find(|v| v.name == name) {
            Some(v) => (v.run)(m),
            None => Err((EINVALID_CMD_LINE, format!("unknown verb {name}"))),
        },
        None => Err((EINVALID_CMD_LINE, "a verb is needed".into())),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, msg)) => {
            eprintln!("  {msg}");
            ExitCode::from(code)
        }
    }
}

/// Logs to stderr: warnings, `-v` info, `-vv` debug; `RUST_LOG` directives when set. A
/// plain level filter unless `RUST_LOG` asks for more (parsing directives is a tenth of a
/// short command's start-up).
fn logging(verbose: u8) {
    use tracing_subscriber::filter::LevelFilter;
    let level = match verbose {
        0 => LevelFilter::WARN,
        1 => LevelFilter::INFO,
        _ => LevelFilter::DEBUG,
    };
    let fmt = tracing_subscriber::fmt().with_writer(std::io::stderr);
    match std::env::var_os("RUST_LOG") {
        Some(_) => fmt
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .init(),
        None => fmt.with_max_level(level).init(),
    }
}

/// Whether the effective user is root (lvm2 warns every other user that devices and lock
/// files may be out of reach): `/proc/self` belongs to the process's effective user.
fn root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map_or(true, |m| m.uid() == 0)
}
