//! The reports: `pvs`, `vgs`, `lvs` as lvm2 prints them, `dump` (the committed text) and
//! `vgcfgbackup`.

use std::path::PathBuf;

use clap::Args;

use lvmeta::report::{self, DmState, Kind, Request, Units};
use lvmeta::text::Style;

use crate::args::{failed, open_devices, print_warnings, scan_devices, DeviceArgs, LockArgs};
use crate::{CmdResult, EINVALID_CMD_LINE};

/// The options of `pvs`, `vgs` and `lvs`.
#[derive(Args, Clone)]
pub struct ReportArgs {
    #[command(flatten)]
    dev: DeviceArgs,
    #[command(flatten)]
    lock: LockArgs,
    /// Show hidden LVs too.
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// Fields to show; `+f1,f2` adds to the default ones.
    #[arg(short = 'o', long = "options")]
    options: Option<String>,
    /// `basic` (columns) or `json`.
    #[arg(long = "reportformat", default_value = "basic")]
    reportformat: String,
    /// Size units: r (human, `<` marking a rounded value), h, b, s, k, m, g, t, p, e (upper
    /// case: powers of 1000).
    #[arg(long = "units", default_value = "r")]
    units: String,
    /// No unit letter after sizes.
    #[arg(long = "nosuffix")]
    nosuffix: bool,
    /// No heading line in column output.
    #[arg(long = "noheadings")]
    noheadings: bool,
    /// Between columns instead of spaces (columns then unpadded unless --aligned).
    #[arg(long = "separator")]
    separator: Option<String>,
    /// Pad columns even with --separator.
    #[arg(long = "aligned")]
    aligned: bool,
    /// Each value as LVM2_FIELD='value'.
    #[arg(long = "nameprefixes")]
    nameprefixes: bool,
    /// No quotes around values with --nameprefixes.
    #[arg(long = "unquoted")]
    unquoted: bool,
    /// One line per field.
    #[arg(long = "rows")]
    rows: bool,
    /// Sort by these fields (`-f` descending), shown or not.
    #[arg(short = 'O', long = "sort", allow_hyphen_values = true)]
    sort: Option<String>,
    /// VG or VG/LV names.
    names: Vec<String>,
}

/// `lvs`: the report's options and `--segments`.
#[derive(Args, Clone)]
pub struct LvsArgs {
    #[command(flatten)]
    args: ReportArgs,
    /// One row per segment.
    #[arg(long = "segments")]
    segments: bool,
}

impl LvsArgs {
    /// Reports the LVs.
    pub fn run(&self) -> CmdResult {
        self.args.run(Kind::Lvs, self.segments)
    }
}

/// `dump`: a VG's committed metadata text.
#[derive(Args, Clone)]
pub struct DumpArgs {
    #[command(flatten)]
    dev: DeviceArgs,
    /// The VG.
    vg: String,
}

impl DumpArgs {
    /// Prints the text as it is on disk.
    pub fn run(&self) -> CmdResult {
        let scan = scan_devices(&self.dev);
        let svg = scan.vg(&self.vg).map_err(failed)?;
        print!("{}", svg.text);
        Ok(())
    }
}

/// `vgcfgbackup -f FILE VG`.
#[derive(Args, Clone)]
pub struct BackupArgs {
    #[command(flatten)]
    dev: DeviceArgs,
    /// The backup file.
    #[arg(short = 'f', long = "file")]
    file: PathBuf,
    /// The VG.
    vg: String,
}

impl BackupArgs {
    /// Writes the VG's metadata to the file in lvm2's backup format.
    pub fn run(&self) -> CmdResult {
        let (file, vg) = (&self.file, &self.vg);
        let scan = scan_devices(&self.dev);
        let svg = scan.vg(vg).map_err(failed)?;
        let mut v = svg.vg.clone();
        v.header.description = Some(format!("lvmeta vgcfgbackup -f {} {vg}", file.display()));
        v.header.creation_host = Some(hostname());
        v.header.creation_time = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()
            .map(|d| d.as_secs() as i64);
        let version = env!("CARGO_PKG_VERSION");
        let text = v.to_text(Style::File, &format!("lvmeta version {version}"));
        std::fs::write(file, text).map_err(|e| failed(format!("{}: {e}", file.display())))?;
        Ok(())
    }
}

impl ReportArgs {
    /// Reports `kind` (one row per segment with `segments`), as lvm2 prints it.
    pub fn run(&self, kind: Kind, segments: bool) -> CmdResult {
        let a = self;
        // lvm2 lists the fields on stderr: `-o help` exits 0, an unknown name 5.
        let defaults = match segments {
            true => Kind::SEGMENT_FIELDS,
            false => kind.default_fields(),
        };
        let fields = match report::parse_fields_with(kind, defaults, a.options.as_deref()) {
            Ok(f) => f,
            Err(e) => {
                eprint!("{}", report::field_help(kind));
                return match e {
                    report::FieldsError::Help => Ok(()),
                    report::FieldsError::Unknown(_) => Err(failed(e.to_string())),
                };
            }
        };
        let mut fields = fields;
        let shown = fields.len();
        let sort = sort_keys(kind, &mut fields, a.sort.as_deref())?;
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
        let mut table = report::build(&scan, &req, &DmState::probe());
        table.sort(&sort);
        table.keep_columns(shown);
        if json {
            print!("{}", table.to_json(units));
        } else {
            let layout = report::Layout {
                headings: !a.noheadings,
                separator: a.separator.clone(),
                aligned: a.aligned,
                prefixes: a.nameprefixes,
                quoted: !a.unquoted,
                rows: a.rows,
            };
            print!("{}", table.to_text(units, &layout));
        }
        Ok(())
    }
}

/// `-O`: the columns to sort by (descending for `-name`), adding fields not shown to the
/// end of `fields`.
fn sort_keys(
    kind: Kind,
    fields: &mut Vec<&'static report::Field>,
    spec: Option<&str>,
) -> Result<Vec<(usize, bool)>, (u8, String)> {
    let mut keys = Vec::new();
    for key in spec
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
    {
        let (desc, name) = match key.strip_prefix('-') {
            Some(n) => (true, n),
            None => (false, key.strip_prefix('+').unwrap_or(key)),
        };
        let f = report::find(name, kind.prefix())
            .ok_or_else(|| failed(format!("Unrecognised field: {name}")))?;
        let i = match fields.iter().position(|g| g.name == f.name) {
            Some(i) => i,
            None => {
                fields.push(f);
                fields.len() - 1
            }
        };
        keys.push((i, desc));
    }
    Ok(keys)
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into())
}
