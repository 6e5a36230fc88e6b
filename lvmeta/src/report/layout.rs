//! How a report's table prints, as lvm2 prints it: aligned columns by default, or
//! `--separator`, `--aligned`, `--nameprefixes`, `--unquoted`, `--rows`, `--noheadings`;
//! and `-O` (sorting by fields).
//!
//! - Every line starts with two spaces; nothing at all is printed without rows.
//! - Aligned: titles left-aligned, numbers and sizes right-aligned, every column (the last
//!   too) padded, at least as wide as its title (headings shown or not) or lvm2's own
//!   minimum (see `least_width`).
//! - A separator without `--aligned`, name prefixes and `--rows` print cells unpadded.

use std::cmp::Ordering;

use super::fields::{Cell, Field};
use super::{cell_text, Table, Units};

/// Report output options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// A heading line (titles), or the title first on each line with `rows`.
    pub headings: bool,
    /// `--separator`: between cells instead of a space; columns unpadded unless `aligned`.
    pub separator: Option<String>,
    /// `--aligned`: pad columns even with a separator.
    pub aligned: bool,
    /// `--nameprefixes`: each cell as `LVM2_FIELD='value'`.
    pub prefixes: bool,
    /// Quote values with name prefixes (`--unquoted` turns it off).
    pub quoted: bool,
    /// `--rows`: one line per field.
    pub rows: bool,
}

impl Default for Layout {
    fn default() -> Self {
        Self {
            headings: true,
            separator: None,
            aligned: false,
            prefixes: false,
            quoted: true,
            rows: false,
        }
    }
}

/// The narrowest a column is, headings shown or not: its title, or lvm2's own minimum
/// where that is wider (room for "100.00" in percent columns, 10 for a PV's name, ...).
fn least_width(f: &Field) -> usize {
    let least = match f.name {
        "lv_uuid" | "pv_uuid" | "vg_uuid" | "origin_uuid" | "pool_lv_uuid" | "data_lv_uuid"
        | "metadata_lv_uuid" => 38,
        "lv_time" => 26,
        "lv_when_full" | "lv_health_status" => 15,
        "pv_name" | "lv_layout" | "lv_role" | "lv_host" | "vg_permissions" => 10,
        "pv_mda_size" | "pv_mda_free" | "vg_mda_size" | "vg_mda_free" => 9,
        "pe_start" => 7,
        "data_percent" | "snap_percent" | "metadata_percent" => 6,
        "vg_attr" => 5,
        "lv_name" | "lv_full_name" => 4,
        "pv_pe_count" => 3,
        _ => 0,
    };
    f.title.len().max(least)
}

/// Orders two cells of one column: numbers and sizes by value, text by bytes.
fn compare(a: &Cell, b: &Cell) -> Ordering {
    match (a, b) {
        (Cell::Num(x), Cell::Num(y)) | (Cell::Size(x), Cell::Size(y)) => x.cmp(y),
        (Cell::Int(x), Cell::Int(y)) => x.cmp(y),
        (Cell::Str(x), Cell::Str(y)) => x.cmp(y),
        _ => Ordering::Equal,
    }
}

impl Table {
    /// Sorts the rows by `keys` (column, descending), the first key first; rows that tie
    /// keep their order (`-O`).
    pub fn sort(&mut self, keys: &[(usize, bool)]) {
        self.rows.sort_by(|a, b| {
            keys.iter()
                .map(|&(i, desc)| match (a.get(i), b.get(i)) {
                    (Some(x), Some(y)) if desc => compare(y, x),
                    (Some(x), Some(y)) => compare(x, y),
                    _ => Ordering::Equal,
                })
                .find(|o| *o != Ordering::Equal)
                .unwrap_or(Ordering::Equal)
        });
    }

    /// Drops every column from `n` on (fields added only to sort by).
    pub fn keep_columns(&mut self, n: usize) {
        self.fields.truncate(n);
        for r in &mut self.rows {
            r.truncate(n);
        }
    }

    /// The table as text laid out as `layout` says.
    pub fn to_text(&self, units: Units, layout: &Layout) -> String {
        let mut out = String::new();
        if self.rows.is_empty() {
            return out;
        }
        let texts: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|r| r.iter().map(|c| cell_text(c, units)).collect())
            .collect();
        let sep = layout.separator.as_deref().unwrap_or(" ");
        let mut line = |cells: Vec<String>| {
            out.push_str("  ");
            out.push_str(&cells.join(sep));
            out.push('\n');
        };
        if layout.rows {
            for (i, f) in self.fields.iter().enumerate() {
                let title = layout.headings.then(|| f.title.to_owned());
                line(
                    title
                        .into_iter()
                        .chain(texts.iter().map(|r| r[i].clone()))
                        .collect(),
                );
            }
            return out;
        }
        let titles = || self.fields.iter().map(|f| f.title.to_owned()).collect();
        if layout.prefixes {
            if layout.headings {
                line(titles());
            }
            let q = if layout.quoted { "'" } else { "" };
            for r in &texts {
                let cells = self.fields.iter().zip(r);
                line(
                    cells
                        .map(|(f, v)| format!("LVM2_{}={q}{v}{q}", f.json.to_uppercase()))
                        .collect(),
                );
            }
            return out;
        }
        if layout.separator.is_some() && !layout.aligned {
            if layout.headings {
                line(titles());
            }
            for r in texts {
                line(r);
            }
            return out;
        }
        let widths: Vec<usize> = self
            .fields
            .iter()
            .enumerate()
            .map(|(i, f)| {
                texts
                    .iter()
                    .map(|r| r[i].len())
                    .max()
                    .unwrap_or(0)
                    .max(least_width(f))
            })
            .collect();
        let right: Vec<bool> = self.rows[0]
            .iter()
            .map(|c| !matches!(c, Cell::Str(_)))
            .collect();
        let pad = |cells: &[String], title: bool| -> Vec<String> {
            cells
                .iter()
                .enumerate()
                .map(|(i, s)| match !title && right[i] {
                    true => format!("{s:>w$}", w = widths[i]),
                    false => format!("{s:<w$}", w = widths[i]),
                })
                .collect()
        };
        if layout.headings {
            line(pad(&titles(), true));
        }
        for r in &texts {
            line(pad(r, false));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::FIELDS;

    /// The table lvm2 printed these layouts of (`lvs -o lv_name,lv_size,lv_attr`).
    fn table() -> Table {
        let field = |n: &str| FIELDS.iter().find(|f| f.name == n).expect("field");
        let row = |n: &str, mib: u64| {
            vec![
                Cell::Str(n.into()),
                Cell::Size(mib << 20),
                Cell::Str("-wi-XX----".into()),
            ]
        };
        Table {
            key: "lv",
            fields: vec![field("lv_name"), field("lv_size"), field("lv_attr")],
            rows: vec![row("lin", 8), row("lin2", 12)],
        }
    }

    fn text(layout: Layout) -> String {
        table().to_text(Units::default(), &layout)
    }

    #[test]
    fn layouts_are_lvm2s() {
        assert_eq!(
            text(Layout::default()),
            "  LV   LSize  Attr      \n  lin   8.00m -wi-XX----\n  lin2 12.00m -wi-XX----\n"
        );
        let sep = |aligned| Layout {
            separator: Some(",".into()),
            aligned,
            ..Layout::default()
        };
        assert_eq!(
            text(sep(false)),
            "  LV,LSize,Attr\n  lin,8.00m,-wi-XX----\n  lin2,12.00m,-wi-XX----\n"
        );
        assert_eq!(
            text(sep(true)),
            "  LV  ,LSize ,Attr      \n  lin , 8.00m,-wi-XX----\n  lin2,12.00m,-wi-XX----\n"
        );
        assert_eq!(
            text(Layout {
                prefixes: true,
                headings: false,
                ..Layout::default()
            }),
            "  LVM2_LV_NAME='lin' LVM2_LV_SIZE='8.00m' LVM2_LV_ATTR='-wi-XX----'\n  \
             LVM2_LV_NAME='lin2' LVM2_LV_SIZE='12.00m' LVM2_LV_ATTR='-wi-XX----'\n"
        );
        assert_eq!(
            text(Layout {
                rows: true,
                ..Layout::default()
            }),
            "  LV lin lin2\n  LSize 8.00m 12.00m\n  Attr -wi-XX---- -wi-XX----\n"
        );
    }

    #[test]
    fn sorting_by_value_and_descending() {
        let mut t = table();
        t.sort(&[(0, true)]);
        assert_eq!(t.rows[0][0], Cell::Str("lin2".into()));
        t.sort(&[(1, false)]);
        assert_eq!(t.rows[0][0], Cell::Str("lin".into()));
        t.keep_columns(1);
        assert_eq!((t.fields.len(), t.rows[1].len()), (1, 1));
    }
}
