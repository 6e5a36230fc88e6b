//! lvm2-style reports: `pvs`, `vgs` and `lvs` rows built from a [`Scan`], printed as aligned
//! columns or as lvm2's JSON (`--reportformat json`).

mod attr;
mod fields;
mod kernel;
mod layout;
mod roles;
mod select;
mod spec;
mod usage;

pub use attr::{lv_attr, LvUses};
pub use fields::{Cell, Field, Object, FIELDS};
pub use kernel::DmState;
pub use layout::Layout;
pub use roles::time as lv_time_text;
pub use select::{SelectError, Selection};
pub use spec::{field_help, find, parse_fields, parse_fields_with, FieldsError};

use fields::{lv_field, pv_field, vg_field, VgCtx};

use crate::scan::Scan;

/// `--units` and `--nosuffix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Units {
    /// `r` (human, `<` marking a rounded-up value: lvm2's default), `h` (human), `b`, `s`
    /// (sectors), `k m g t p e` (powers of 1024) or upper case (of 1000).
    pub unit: char,
    /// Print the unit letter after sizes.
    pub suffix: bool,
}

impl Default for Units {
    fn default() -> Self {
        Self {
            unit: 'r',
            suffix: true,
        }
    }
}

impl Units {
    /// Checks a `--units` letter.
    pub fn parse(s: &str, suffix: bool) -> Result<Self, String> {
        let mut it = s.chars();
        match (it.next(), it.next()) {
            (Some(c), None) if "rRhHbBsSkKmMgGtTpPeE".contains(c) => Ok(Self {
                unit: if c == 'B' { 'b' } else { c },
                suffix,
            }),
            _ => Err(format!(
                "invalid units {s:?}: use one of rRhHbBsSkKmMgGtTpPeE"
            )),
        }
    }

    /// Formats a size in bytes.
    /// - `--nosuffix` drops the letter of fixed units only: human sizes (`r`, `h`) keep it.
    /// - Zero is `0` and the letter in a fixed unit (`0g`), `0 ` in human units.
    pub fn format(&self, bytes: u64) -> String {
        let human = matches!(self.unit, 'h' | 'H' | 'r' | 'R');
        let units = Self {
            suffix: self.suffix || human,
            ..*self
        };
        units.format_as_asked(bytes)
    }

    fn format_as_asked(&self, bytes: u64) -> String {
        let (div, letter) = match self.unit {
            'b' => {
                return if self.suffix {
                    format!("{bytes}B")
                } else {
                    bytes.to_string()
                }
            }
            's' | 'S' => {
                let sectors = crate::units::Bytes(bytes).sectors_floor().0;
                return if self.suffix {
                    format!("{sectors}S")
                } else {
                    sectors.to_string()
                };
            }
            // lvm2 prints a zero size as "0 " (a blank where the letter would be).
            'h' | 'H' | 'r' | 'R' if bytes == 0 => {
                return if self.suffix { "0 ".into() } else { "0".into() }
            }
            'h' | 'H' | 'r' | 'R' => {
                let lower = matches!(self.unit, 'h' | 'r');
                let base: u64 = if lower { 1024 } else { 1000 };
                let letters = if lower { "bkmgtpe" } else { "BKMGTPE" };
                let mut div = 1u64;
                let mut i = 0;
                while i + 1 < letters.len() && bytes >= div * base {
                    div *= base;
                    i += 1;
                }
                let letter = letters.chars().nth(i).unwrap_or('b');
                if i == 0 {
                    return if self.suffix {
                        format!("{bytes}{}", 'B')
                    } else {
                        bytes.to_string()
                    };
                }
                (div, letter)
            }
            c if bytes == 0 => {
                return if self.suffix {
                    format!("0{c}")
                } else {
                    "0".into()
                }
            }
            c => {
                let base: u64 = if c.is_ascii_lowercase() { 1024 } else { 1000 };
                let pow = "kmgtpe".find(c.to_ascii_lowercase()).unwrap_or(0) as u32 + 1;
                (base.pow(pow), c)
            }
        };
        // Rounded to the nearest hundredth; with `r`/`R` only, `<` marks a shown value above
        // the real one, as lvm2 marks it (scripts asking for a unit get plain numbers).
        let (b, d) = (u128::from(bytes), u128::from(div));
        let hundredths = (b * 100 + d / 2) / d;
        let num = format!("{}.{:02}", hundredths / 100, hundredths % 100);
        let marked = matches!(self.unit, 'r' | 'R');
        let lt = if marked && hundredths * d > b * 100 {
            "<"
        } else {
            ""
        };
        if self.suffix {
            format!("{lt}{num}{letter}")
        } else {
            format!("{lt}{num}")
        }
    }
}

/// Which report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `pvs`.
    Pvs,
    /// `vgs`.
    Vgs,
    /// `lvs`.
    Lvs,
}

impl Kind {
    /// Fields shown without `-o`.
    pub fn default_fields(self) -> &'static [&'static str] {
        match self {
            Kind::Pvs => &[
                "pv_name", "vg_name", "pv_fmt", "pv_attr", "pv_size", "pv_free",
            ],
            Kind::Vgs => &[
                "vg_name",
                "pv_count",
                "lv_count",
                "snap_count",
                "vg_attr",
                "vg_size",
                "vg_free",
            ],
            Kind::Lvs => &[
                "lv_name",
                "vg_name",
                "lv_attr",
                "lv_size",
                "pool_lv",
                "origin",
                "data_percent",
                "metadata_percent",
                "move_pv",
                "mirror_log",
                "copy_percent",
                "convert_lv",
            ],
        }
    }

    /// Fields `lvs --segments` shows without `-o`.
    pub const SEGMENT_FIELDS: &'static [&'static str] = &[
        "lv_name", "vg_name", "lv_attr", "stripes", "segtype", "seg_size",
    ];

    /// The prefix a field name may leave out in this report (`name` = `lv_name` in lvs).
    pub fn prefix(self) -> &'static str {
        match self {
            Kind::Pvs => "pv_",
            Kind::Vgs => "vg_",
            Kind::Lvs => "lv_",
        }
    }
}

/// What to report.
#[derive(Debug, Clone)]
pub struct Request<'a> {
    /// The report.
    pub kind: Kind,
    /// Columns.
    pub fields: Vec<&'static Field>,
    /// `-a`: hidden LVs too (and, for pvs, nothing more: only PVs are scanned).
    pub all: bool,
    /// `--segments`: one row per segment, JSON key `seg`.
    pub segments: bool,
    /// Selections, empty meaning everything: PV devices (pvs), `VG` or `VG/LV`.
    pub select: &'a [String],
    /// LV rows by VG and LV name (lvs' default order); else by VG, then in the order of
    /// the metadata (vgs' order for LV fields, and lvm2's with `-O`).
    pub by_name: bool,
}

/// Rows of one report.
#[derive(Debug, Clone)]
pub struct Table {
    /// JSON key of the rows (`pv`, `vg`, `lv`, `seg`).
    pub key: &'static str,
    /// Columns.
    pub fields: Vec<&'static Field>,
    /// Cells, one row per object.
    pub rows: Vec<Vec<Cell>>,
}

fn selected(select: &[String], vg: &str, lv: Option<&str>) -> bool {
    select.is_empty()
        || select.iter().any(|s| match s.split_once('/') {
            Some((v, l)) => v == vg && Some(l) == lv,
            None => s == vg,
        })
}

/// Builds the rows of a report. Rows are sorted as lvm2 sorts them by default.
pub fn build(scan: &Scan, req: &Request<'_>, dm: &DmState) -> Table {
    let mut keyed: Vec<(Vec<String>, Vec<Cell>)> = Vec::new();
    let key;
    match req.kind {
        Kind::Pvs => {
            key = "pv";
            for i in 0..scan.pvs.len() {
                if !req.select.is_empty() && !req.select.contains(&scan.pvs[i].device) {
                    continue;
                }
                let row = req
                    .fields
                    .iter()
                    .map(|f| pv_field(scan, i, f.name).unwrap_or(Cell::Str(String::new())))
                    .collect();
                keyed.push((vec![scan.pvs[i].device.clone()], row));
            }
        }
        Kind::Vgs => {
            key = "vg";
            for svg in &scan.vgs {
                if !selected(req.select, &svg.vg.name, None) {
                    continue;
                }
                let c = VgCtx { scan, svg };
                let row = req
                    .fields
                    .iter()
                    .map(|f| vg_field(&c, f.name).unwrap_or(Cell::Str(String::new())))
                    .collect();
                keyed.push((vec![svg.vg.name.clone()], row));
            }
        }
        Kind::Lvs => {
            let per_seg = req.segments || req.fields.iter().any(|f| f.object == Object::Seg);
            key = if req.segments { "seg" } else { "lv" };
            for svg in &scan.vgs {
                let c = VgCtx { scan, svg };
                let uses = LvUses::of(&svg.vg);
                for (at, lv) in svg.vg.lvs.iter().enumerate() {
                    let hidden = !lv.is_visible();
                    let wanted = selected(req.select, &svg.vg.name, Some(&lv.name));
                    // A hidden LV shows with -a, or when named as VG/LV.
                    let named = req
                        .select
                        .iter()
                        .any(|s| s.split_once('/') == Some((&svg.vg.name, &lv.name)));
                    if (hidden && !req.all && !named) || !wanted {
                        continue;
                    }
                    let segs = if per_seg {
                        &lv.segments[..]
                    } else {
                        &lv.segments[..1]
                    };
                    // Read from the kernel once for every row of the LV.
                    let pct = usage::Percents::default();
                    for (n, seg) in segs.iter().enumerate() {
                        let row = req
                            .fields
                            .iter()
                            .map(|f| {
                                let cell = lv_field(&c, &uses, lv, seg, dm, &pct, f.name)
                                    .unwrap_or(Cell::Str(String::new()));
                                match cell {
                                    Cell::Str(s) if hidden && f.name == "lv_name" => {
                                        Cell::Str(format!("[{s}]"))
                                    }
                                    other => other,
                                }
                            })
                            .collect();
                        let second = match req.by_name {
                            true => lv.name.clone(),
                            false => format!("{at:010}"),
                        };
                        keyed.push((vec![svg.vg.name.clone(), second, format!("{n:010}")], row));
                    }
                }
            }
        }
    }
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    Table {
        key,
        fields: req.fields.clone(),
        rows: keyed.into_iter().map(|(_, r)| r).collect(),
    }
}

/// LV `lv` of `vg` as device-mapper has it here: `None` when not active, else its open count
/// (a thin pool's from its `-tpool` device when that is up), as `lvdisplay` shows them.
pub fn lv_opens(vg: &crate::model::Vg, lv: &crate::model::Lv, dm: &DmState) -> Option<i32> {
    let DmState::Known(devices) = dm else {
        return None;
    };
    let uuid = crate::activate::runs::dm_uuid(vg, lv);
    let pool = lv.pool().is_some();
    if !matches!(dm.columns(&uuid, pool).0, 'a' | 's') {
        return None;
    }
    let tpool = devices.get(&format!("{uuid}-tpool")).filter(|_| pool);
    Some(tpool.or(devices.get(&uuid)).map_or(0, |d| d.open))
}

pub(crate) fn cell_text(c: &Cell, units: Units) -> String {
    match c {
        Cell::Str(s) => s.clone(),
        Cell::Num(n) => n.to_string(),
        Cell::Int(n) => n.to_string(),
        Cell::Size(b) => units.format(*b),
    }
}

fn json_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

impl Table {
    /// lvm2's JSON layout (one report object holding one list).
    pub fn to_json(&self, units: Units) -> String {
        let mut out = String::from("  {\n      \"report\": [\n          {\n");
        out.push_str(&format!("              \"{}\": [\n", self.key));
        let rows: Vec<String> = self
            .rows
            .iter()
            .map(|r| {
                let cells: Vec<String> = self
                    .fields
                    .iter()
                    .zip(r)
                    .map(|(f, c)| {
                        format!("\"{}\":\"{}\"", f.json, json_escape(&cell_text(c, units)))
                    })
                    .collect();
                format!("                  {{{}}}", cells.join(", "))
            })
            .collect();
        out.push_str(&rows.join(",\n"));
        if !rows.is_empty() {
            out.push('\n');
        }
        out.push_str("              ]\n          }\n      ]\n  }\n");
        out
    }

    /// Aligned columns as lvm2 prints them by default (see [`Layout`]).
    pub fn to_columns(&self, units: Units, headings: bool) -> String {
        self.to_text(
            units,
            &Layout {
                headings,
                ..Layout::default()
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        let b = Units {
            unit: 'b',
            suffix: false,
        };
        assert_eq!(b.format(4194304), "4194304");
        let h = Units::default();
        assert_eq!(h.format(12 << 20), "12.00m");
        assert_eq!(h.format((60 << 30) - 1), "<60.00g");
        assert_eq!(h.format(512), "512B");
        assert_eq!(h.format(0), "0 ");
        assert_eq!(
            Units {
                unit: 'g',
                suffix: true
            }
            .format(1 << 29),
            "0.50g"
        );
        assert!(Units::parse("x", true).is_err());
        // An asked-for unit never carries lvm2's rounding marker: `lvs --units g`.
        let g = Units::parse("g", false).expect("g");
        assert_eq!(g.format(100 << 20), "0.10");
        let hh = Units::parse("h", true).expect("h");
        assert_eq!(hh.format((60 << 30) - 1), "60.00g");
        // --nosuffix drops fixed units' letters only; zero in a fixed unit is bare.
        let r = Units::parse("r", false).expect("r");
        assert_eq!(r.format(12 << 20), "12.00m");
        assert_eq!(g.format(0), "0");
        assert_eq!(Units::parse("g", true).expect("g").format(0), "0g");
    }
}
