//! The reports: `pvs`, `vgs`, `lvs` as lvm2 prints them, `dump` (the committed text) and
//! `vgcfgbackup`.

use std::path::PathBuf;

use clap::Args;

use lvmeta::report::{self, DmState, Kind, Object, Request, SelectError, Selection, Units};
use lvmeta::text::Style;

use crate::args::{failed, read_for_report, scan_devices, DeviceArgs, LockArgs};
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
    /// Fields to show; `+f1,f2` adds to the default ones, `-f1,f2` takes them out; taken
    /// left to right when repeated (a list without `+`/`-` replaces what came before).
    #[arg(short = 'o', long = "options", allow_hyphen_values = true)]
    options: Vec<String>,
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
    /// 1 and 0 (-1 unknown) for fields of two values, instead of their words.
    #[arg(long = "binary")]
    binary: bool,
    /// Only the rows this selection picks (lvm2's grammar: `lv_size>8m && lv_name=~^db`);
    /// `help` lists the fields.
    #[arg(short = 'S', long = "select")]
    select: Option<String>,
    /// Sort by these fields (`-f` descending), shown or not (the last -O counts).
    #[arg(short = 'O', long = "sort", allow_hyphen_values = true)]
    sort: Vec<String>,
    /// pvs: PV device paths; vgs: VG names; lvs: VG, VG/LV or /dev/VG/LV names; `@tag`:
    /// the objects with that tag (lvs: or whose VG has it).
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
        let specs: Vec<&str> = a.options.iter().map(String::as_str).collect();
        let fields = match report::parse_fields_with(kind, defaults, &specs) {
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
        // lvm2 takes the last -O; without one, its default order.
        let sort = sort_keys(kind, &mut fields, a.sort.last().map_or("", String::as_str))?;
        let selection = match a
            .select
            .as_deref()
            .map(|t| Selection::parse(kind, t))
            .transpose()
        {
            Ok(s) => s,
            Err(e) => {
                if !matches!(e, SelectError::Syntax(_)) {
                    eprint!("{}", report::field_help(kind));
                }
                return match e {
                    SelectError::Help => Ok(()),
                    e => Err(failed(e)),
                };
            }
        };
        // The selection's fields are read from columns, shown or not.
        for f in selection.iter().flat_map(Selection::fields) {
            if !fields.iter().any(|g| g.name == f.name) {
                fields.push(f);
            }
        }
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
        // lvs names LVs as VG/LV or /dev/VG/LV; pvs names devices.
        let names: Vec<String> = match kind {
            Kind::Lvs => a
                .names
                .iter()
                .map(|n| n.strip_prefix("/dev/").unwrap_or(n).to_owned())
                .collect(),
            _ => a.names.clone(),
        };
        // `@tag` names objects by tag: every VG is read to find them.
        let tagged = names.iter().any(|n| n.starts_with('@'));
        let selected: Vec<&str> = match kind {
            _ if tagged => Vec::new(),
            Kind::Pvs => Vec::new(),
            _ => names
                .iter()
                .map(|n| n.split('/').next().unwrap_or(n))
                .collect(),
        };
        let (scan, _locks) = read_for_report(&a.dev, &a.lock, &selected)?;
        check_names(&scan, kind, &names)?;
        let Some(names) = with_tags(&scan, kind, names) else {
            return Ok(());
        };
        let req_kind = kind;
        let Some((kind, names)) = rows_of(&scan, kind, &fields, names)? else {
            return Ok(());
        };
        let req = Request {
            kind,
            fields,
            all: a.all,
            segments,
            select: &names,
            by_name: a.sort.is_empty() && req_kind == Kind::Lvs,
        };
        let mut table = report::build(&scan, &req, &DmState::probe());
        if let Some(sel) = &selection {
            table.select(sel);
        }
        table.sort(&sort);
        if a.binary {
            binary(&mut table);
        }
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

/// Fails as lvm2 does for a name that is not there: a VG, an LV, or (pvs) a device.
fn check_names(scan: &lvmeta::scan::Scan, kind: Kind, names: &[String]) -> CmdResult {
    for name in names.iter().filter(|n| !n.starts_with('@')) {
        if kind == Kind::Pvs {
            if !scan.pvs.iter().any(|p| &p.device == name) {
                return Err(failed(format!(
                    "Failed to find physical volume \"{name}\"."
                )));
            }
            continue;
        }
        let vg = name.split('/').next().unwrap_or(name);
        let found = scan.vg(vg).map_err(failed)?;
        if let Some((vg, lv)) = name.split_once('/') {
            if found.vg.lv(lv).is_none() {
                return Err(failed(lvmeta::Error::LvNotFound {
                    vg: vg.into(),
                    lv: lv.into(),
                }));
            }
        }
    }
    Ok(())
}

/// `names` with each `@tag` replaced by the objects carrying the tag, as lvm2 reads it: PVs
/// by their tags, VGs by theirs, LVs by theirs or their VG's (then hidden LVs too, as lvm2
/// lists them). `None`: only tags were named
/// and nothing carries them (nothing to show).
fn with_tags(scan: &lvmeta::scan::Scan, kind: Kind, names: Vec<String>) -> Option<Vec<String>> {
    let tags: Vec<&str> = names.iter().filter_map(|n| n.strip_prefix('@')).collect();
    if tags.is_empty() {
        return Some(names);
    }
    let has = |t: &[String]| t.iter().any(|x| tags.contains(&x.as_str()));
    let mut out: Vec<String> = names
        .iter()
        .filter(|n| !n.starts_with('@'))
        .cloned()
        .collect();
    for svg in &scan.vgs {
        let vg = &svg.vg;
        match kind {
            Kind::Vgs if has(&vg.tags) => out.push(vg.name.clone()),
            Kind::Lvs => out.extend(
                vg.lvs
                    .iter()
                    .filter(|l| has(&vg.tags) || (l.is_visible() && has(&l.tags)))
                    .map(|l| format!("{}/{}", vg.name, l.name)),
            ),
            Kind::Pvs => out.extend(
                svg.pv_devices
                    .iter()
                    .zip(&vg.pvs)
                    .filter(|(_, pv)| has(&pv.tags))
                    .filter_map(|(d, _)| d.map(|i| scan.pvs[i].device.clone())),
            ),
            _ => {}
        }
    }
    (!out.is_empty()).then_some(out)
}

/// `--binary`: lvm2's two-valued fields (`zero`) as 1 and 0, and -1 when unknown.
fn binary(table: &mut report::Table) {
    let cols: Vec<usize> = (0..table.fields.len())
        .filter(|&i| table.fields[i].name == "zero")
        .collect();
    for row in &mut table.rows {
        for &i in &cols {
            if let Some(c) = row.get_mut(i) {
                if let report::Cell::Str(v) = c {
                    *c = report::Cell::Int(match v.as_str() {
                        "" => 0,
                        "unknown" => -1,
                        _ => 1,
                    });
                }
            }
        }
    }
}

/// A report and its selection.
type Rows = (Kind, Vec<String>);

/// Which objects the rows are, as lvm2 picks them: another object's field in vgs makes one
/// row per PV (`vgs -o pv_name`) or per LV (`vgs -o lv_name`); lvs cannot show PV fields.
/// Returns the report and its selection (for PV rows, the devices of the selected VGs), or
/// `None` when there is no row to show.
fn rows_of(
    scan: &lvmeta::scan::Scan,
    kind: Kind,
    fields: &[&'static report::Field],
    names: Vec<String>,
) -> Result<Option<Rows>, (u8, String)> {
    let has = |o: Object| fields.iter().any(|f| f.object == o);
    match kind {
        Kind::Lvs if has(Object::Pv) => {
            Err(failed("Can't report LV and PV fields at the same time"))
        }
        Kind::Vgs if has(Object::Pv) => {
            let devices = scan
                .pvs
                .iter()
                .enumerate()
                .filter(|(i, _)| {
                    scan.vg_of_pv(*i)
                        .is_some_and(|(v, _)| names.is_empty() || names.contains(&v.vg.name))
                })
                .map(|(_, p)| p.device.clone())
                .collect::<Vec<_>>();
            Ok((!devices.is_empty()).then_some((Kind::Pvs, devices)))
        }
        Kind::Vgs if has(Object::Lv) || has(Object::Seg) => Ok(Some((Kind::Lvs, names))),
        k => Ok(Some((k, names))),
    }
}

/// `-O`: the columns to sort by (descending for `-name`), adding fields not shown to the
/// end of `fields`.
fn sort_keys(
    kind: Kind,
    fields: &mut Vec<&'static report::Field>,
    spec: &str,
) -> Result<Vec<(usize, bool)>, (u8, String)> {
    let mut keys = Vec::new();
    for key in spec.split(',').map(str::trim).filter(|k| !k.is_empty()) {
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
