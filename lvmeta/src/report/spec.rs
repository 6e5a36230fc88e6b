//! `-o`: field names matched as lvm2 matches them, `-o help`, and unknown names.
//!
//! lvm2's rules: case and underscores do not count, and the report's prefix (`lv_` in lvs)
//! may be left out or added (`-o name`, `lvname`, `lv_lockargs` for `lv_lock_args`).

use std::fmt;

use super::fields::{Field, Object, FIELDS};
use super::Kind;

/// Why `-o` was not a field list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldsError {
    /// `help` or `?` was asked for: print [`field_help`].
    Help,
    /// A name no field has.
    Unknown(String),
}

impl fmt::Display for FieldsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Help => write!(f, "field list asked for"),
            Self::Unknown(n) => write!(f, "Unrecognised field: {n}"),
        }
    }
}

/// `s` without underscores, in lower case.
fn squash(s: &str) -> String {
    s.chars()
        .filter(|&c| c != '_')
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// Looks a field up by name as lvm2 does: an exact name first, then by lvm2's rules
/// (`default_prefix`: the report's, e.g. `lv_`).
pub fn find(name: &str, default_prefix: &str) -> Option<&'static Field> {
    if let Some(f) = FIELDS.iter().find(|f| f.name == name) {
        return Some(f);
    }
    let want = squash(name);
    let prefix = squash(default_prefix);
    let with = format!("{prefix}{want}");
    FIELDS.iter().find(|f| {
        let have = squash(f.name);
        let json = squash(f.json);
        [&have, &json].iter().any(|h| **h == want || **h == with)
            || format!("{prefix}{have}") == want
    })
}

/// Resolves `-o` (`a,b`, or `+a,b` to add to the defaults) into fields.
pub fn parse_fields(kind: Kind, spec: Option<&str>) -> Result<Vec<&'static Field>, FieldsError> {
    parse_fields_with(kind, kind.default_fields(), spec.as_slice())
}

/// [`parse_fields`] with `defaults` (`lvs --segments` has its own) and every `-o` given,
/// taken left to right as lvm2 takes them:
/// - `a,b` replaces the defaults or the list so far;
/// - `+a,b` adds them to the defaults or the list so far;
/// - `-a,b` takes them out of the defaults or the list so far.
pub fn parse_fields_with(
    kind: Kind,
    defaults: &[&str],
    specs: &[&str],
) -> Result<Vec<&'static Field>, FieldsError> {
    let resolve = |names: &[&str]| -> Result<Vec<&'static Field>, FieldsError> {
        if names.iter().any(|n| matches!(*n, "help" | "?")) {
            return Err(FieldsError::Help);
        }
        let mut out = Vec::new();
        for n in names {
            match all_of(n, kind) {
                Some(object) => out.extend(FIELDS.iter().filter(|f| f.object == object)),
                None => out.push(
                    find(n, kind.prefix()).ok_or_else(|| FieldsError::Unknown((*n).to_owned()))?,
                ),
            }
        }
        Ok(out)
    };
    let mut list: Option<Vec<&'static Field>> = None;
    for spec in specs {
        let (op, rest) = match spec.chars().next() {
            Some(c @ ('+' | '-')) => (c, &spec[1..]),
            _ => (' ', *spec),
        };
        let names: Vec<&str> = rest
            .split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .collect();
        let fields = resolve(&names)?;
        if op == ' ' {
            list = Some(fields);
            continue;
        }
        let cur = match list.as_mut() {
            Some(l) => l,
            None => list.insert(resolve(defaults)?),
        };
        match op {
            '-' => cur.retain(|f| !fields.iter().any(|g| g.name == f.name)),
            _ => cur.extend(fields),
        }
    }
    match list {
        Some(l) => Ok(l),
        None => resolve(defaults),
    }
}

/// `lv_all`, `vg_all`, `pv_all`, `seg_all` (and `all` for the report's own object): every
/// field lvmeta reports of that object.
fn all_of(name: &str, kind: Kind) -> Option<Object> {
    match squash(name).as_str() {
        "lvall" => Some(Object::Lv),
        "vgall" => Some(Object::Vg),
        "pvall" => Some(Object::Pv),
        "segall" => Some(Object::Seg),
        "all" => Some(match kind {
            Kind::Lvs => Object::Lv,
            Kind::Vgs => Object::Vg,
            Kind::Pvs => Object::Pv,
        }),
        _ => None,
    }
}

/// The fields `-o help` lists for a report (another object's field switches the rows:
/// `vgs -o pv_name` lists PVs).
fn shown_in(kind: Kind, object: Object) -> bool {
    match kind {
        Kind::Lvs => object != Object::Pv,
        Kind::Vgs => object == Object::Vg,
        Kind::Pvs => true,
    }
}

/// The fields `kind` reports, by object, as lvm2's `-o help` lists them (name, then title).
pub fn field_help(kind: Kind) -> String {
    let mut out = String::new();
    let sections = [
        (Object::Lv, "Logical Volume Fields"),
        (Object::Seg, "Logical Volume Segment Fields"),
        (Object::Vg, "Volume Group Fields"),
        (Object::Pv, "Physical Volume Fields"),
    ];
    for (object, title) in sections.into_iter().filter(|(o, _)| shown_in(kind, *o)) {
        out.push_str(&format!("  {title}\n  {}\n", "-".repeat(title.len())));
        for f in FIELDS.iter().filter(|f| f.object == object) {
            out.push_str(&format!("    {:<28}- {}.\n", f.name, f.title));
        }
        out.push_str("  \n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_as_lvm2_matches_them() {
        let lvs = |s| parse_fields(Kind::Lvs, Some(s)).map(|f| f[0].name);
        assert_eq!(lvs("name"), Ok("lv_name"));
        assert_eq!(lvs("lv_name"), Ok("lv_name"));
        assert_eq!(lvs("LVNAME"), Ok("lv_name"));
        assert_eq!(lvs("lv_lockargs"), Ok("lv_lock_args"));
        assert_eq!(lvs("lvlock_args"), Ok("lv_lock_args"));
        let f = parse_fields(Kind::Lvs, Some("+lv_uuid")).expect("valid");
        assert_eq!(f.last().map(|f| f.name), Some("lv_uuid"));
        // Several -o, left to right: a list replaces, `+` adds, `-` takes fields out.
        let names = |specs: &[&str]| {
            parse_fields_with(Kind::Lvs, &["lv_name", "vg_name", "lv_size"], specs)
                .map(|f| f.iter().map(|f| f.name).collect::<Vec<_>>())
        };
        assert_eq!(names(&["name", "size"]), Ok(vec!["lv_size"]));
        assert_eq!(names(&["-vg_name"]), Ok(vec!["lv_name", "lv_size"]));
        assert_eq!(
            names(&["+lv_uuid", "-lv_size"]),
            Ok(vec!["lv_name", "vg_name", "lv_uuid"])
        );
        assert_eq!(names(&["name", "+size"]), Ok(vec!["lv_name", "lv_size"]));
        let all = names(&["lv_all"]).expect("lv_all");
        assert!(
            all.contains(&"lv_role") && !all.contains(&"vg_name"),
            "{all:?}"
        );
        assert_eq!(
            parse_fields(Kind::Lvs, Some("name,size")).expect("valid")[1].name,
            "lv_size"
        );
    }

    #[test]
    fn help_and_unknown_names() {
        assert_eq!(
            parse_fields(Kind::Vgs, Some("nonsense")).map(|_| ()),
            Err(FieldsError::Unknown("nonsense".into()))
        );
        assert_eq!(
            parse_fields(Kind::Lvs, Some("name,help")).map(|_| ()),
            Err(FieldsError::Help)
        );
        let help = field_help(Kind::Lvs);
        assert!(help.contains("Logical Volume Fields") && help.contains("lv_name"));
        assert!(!help.contains("Physical Volume Fields"), "{help}");
    }
}
