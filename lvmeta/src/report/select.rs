//! `-S`/`--select`: lvm2's selection criteria, parsed once and matched against each row.
//!
//! The grammar (lvmreport(7)):
//! - `FIELD OP VALUE`, OP one of `=~ !~ = != >= > <= <`; field names as `-o` takes them;
//! - `&&` or `,` (and), `||` or `#` (or; and binds tighter), `!` (not), `( )`;
//! - values: bare words, `"..."` or `'...'`; sizes with lvm2's units (MiB when bare);
//! - list fields (tags): a bare value is an item the list holds, `[a && b]` the whole list,
//!   `{a && b}` items it holds (`||` inside a list: any of them).
//!
//! Invariants: a parsed selection names only known fields and holds compiled regexes, so
//! matching a row cannot fail; a cell that is not there never matches.

use std::fmt;

use regex::Regex;

use super::fields::{Cell, Field};
use super::spec::find;
use super::{Kind, Table};

/// Why a selection did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SelectError {
    /// `help` or `?`: print the fields.
    Help,
    /// A name no field has.
    Field(String),
    /// Not lvm2's grammar, from this point of the text on.
    Syntax(String),
}

impl fmt::Display for SelectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Help => write!(f, "selection fields asked for"),
            Self::Field(n) => write!(f, "Unrecognised selection field: {n}"),
            Self::Syntax(at) => write!(f, "Selection syntax error at '{at}'."),
        }
    }
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Match,
    NoMatch,
    Ge,
    Gt,
    Le,
    Lt,
}

/// The right side of a comparison.
#[derive(Debug, Clone)]
enum Value {
    /// A word or quoted string (sizes and numbers are read from it when compared).
    Text(String),
    /// A compiled regular expression (`=~`, `!~`).
    Regex(Regex),
    /// A list: items, all of them (`&&`) or any (`||`), strict (`[ ]`) or a subset (`{ }`).
    List {
        items: Vec<String>,
        all: bool,
        strict: bool,
    },
}

/// A parsed selection.
#[derive(Debug, Clone)]
pub struct Selection(Expr);

/// A selection's expression.
#[derive(Debug, Clone)]
enum Expr {
    /// `FIELD OP VALUE`.
    Cmp(&'static Field, Op, Value),
    /// Every one holds.
    And(Vec<Expr>),
    /// Any one holds.
    Or(Vec<Expr>),
    /// It does not hold.
    Not(Box<Expr>),
}

/// The fields whose cells are lists (comma-joined in the cell).
fn is_list(f: &Field) -> bool {
    f.name.ends_with("_tags") || matches!(f.name, "lv_layout" | "lv_role")
}

/// How deep `!` and `( )` may nest: a hostile selection cannot exhaust the stack.
const MAX_DEPTH: usize = 128;

/// A cursor over the selection text.
struct Parser<'a> {
    text: &'a str,
    pos: usize,
    kind: Kind,
    /// `!` and `(` open now.
    depth: usize,
}

impl Parser<'_> {
    fn rest(&self) -> &str {
        &self.text[self.pos..]
    }

    fn skip_space(&mut self) {
        let r = self.rest();
        self.pos += r.len() - r.trim_start().len();
    }

    /// Takes `tok` if the text continues with it.
    fn eat(&mut self, tok: &str) -> bool {
        self.skip_space();
        if self.rest().starts_with(tok) {
            self.pos += tok.len();
            return true;
        }
        false
    }

    fn error(&self) -> SelectError {
        SelectError::Syntax(self.rest().to_owned())
    }

    fn or(&mut self) -> Result<Expr, SelectError> {
        let mut parts = vec![self.and()?];
        while self.eat("||") || self.eat("#") {
            parts.push(self.and()?);
        }
        Ok(if parts.len() == 1 {
            parts.remove(0)
        } else {
            Expr::Or(parts)
        })
    }

    fn and(&mut self) -> Result<Expr, SelectError> {
        let mut parts = vec![self.unary()?];
        while self.eat("&&") || self.eat(",") {
            parts.push(self.unary()?);
        }
        Ok(if parts.len() == 1 {
            parts.remove(0)
        } else {
            Expr::And(parts)
        })
    }

    fn unary(&mut self) -> Result<Expr, SelectError> {
        if self.depth >= MAX_DEPTH {
            return Err(self.error());
        }
        if self.eat("!") {
            self.depth += 1;
            let inner = self.unary();
            self.depth -= 1;
            return Ok(Expr::Not(Box::new(inner?)));
        }
        if self.eat("(") {
            self.depth += 1;
            let inner = self.or();
            self.depth -= 1;
            let inner = inner?;
            if !self.eat(")") {
                return Err(self.error());
            }
            return Ok(inner);
        }
        self.comparison()
    }

    fn comparison(&mut self) -> Result<Expr, SelectError> {
        self.skip_space();
        let name_len = self
            .rest()
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(self.rest().len());
        let name = &self.rest()[..name_len];
        if name.is_empty() {
            return Err(self.error());
        }
        if matches!(name, "help") {
            return Err(SelectError::Help);
        }
        let field =
            find(name, self.kind.prefix()).ok_or_else(|| SelectError::Field(name.to_owned()))?;
        self.pos += name_len;
        let ops = [
            ("=~", Op::Match),
            ("!~", Op::NoMatch),
            ("!=", Op::Ne),
            (">=", Op::Ge),
            ("<=", Op::Le),
            ("=", Op::Eq),
            (">", Op::Gt),
            ("<", Op::Lt),
        ];
        let op = ops
            .iter()
            .find(|(t, _)| self.eat(t))
            .map(|(_, o)| *o)
            .ok_or_else(|| self.error())?;
        let value = match op {
            Op::Match | Op::NoMatch => {
                let re = self.regex_word()?;
                Value::Regex(Regex::new(&re).map_err(|_| self.error())?)
            }
            _ if self.eat("[") => self.list("]", true)?,
            _ if self.eat("{") => self.list("}", false)?,
            _ => Value::Text(self.word()?),
        };
        Ok(Expr::Cmp(field, op, value))
    }

    /// A quoted string, or a bare word up to a space, `,`, `#`, `&`, `|`, `)`, or (in a
    /// list) its closing bracket.
    fn word(&mut self) -> Result<String, SelectError> {
        self.skip_space();
        let r = self.rest();
        if let Some(q) = r.chars().next().filter(|c| matches!(c, '"' | '\'')) {
            let end = r[1..].find(q).ok_or_else(|| self.error())?;
            let w = r[1..=end].to_owned();
            self.pos += end + 2;
            return Ok(w);
        }
        let end = r
            .find(|c: char| c.is_whitespace() || "&|#,)]}".contains(c))
            .unwrap_or(r.len());
        let w = r[..end].to_owned();
        self.pos += end;
        Ok(w)
    }

    /// A regular expression: quoted, or bare up to a space, `&&`, `||`, or a `,`, `#` or `)`
    /// outside its own brackets.
    fn regex_word(&mut self) -> Result<String, SelectError> {
        self.skip_space();
        let r = self.rest();
        if r.starts_with(['"', '\'']) {
            return self.word();
        }
        let mut depth = 0usize;
        let mut end = r.len();
        for (i, c) in r.char_indices() {
            let rest = &r[i..];
            let closes = matches!(c, ')' | ']' | '}');
            if c.is_whitespace()
                || rest.starts_with("&&")
                || rest.starts_with("||")
                || (depth == 0 && (closes || matches!(c, ',' | '#')))
            {
                end = i;
                break;
            }
            match c {
                '(' | '[' | '{' => depth += 1,
                _ if closes => depth -= 1,
                _ => {}
            }
        }
        let w = r[..end].to_owned();
        self.pos += end;
        Ok(w)
    }

    /// The items of a list up to `close`, joined all by `&&`/`,` or all by `||`.
    fn list(&mut self, close: &str, strict: bool) -> Result<Value, SelectError> {
        let mut items = Vec::new();
        let (mut and, mut or) = (false, false);
        while !self.eat(close) {
            if !items.is_empty() {
                if self.eat("&&") || self.eat(",") {
                    and = true;
                } else if self.eat("||") || self.eat("#") {
                    or = true;
                } else {
                    return Err(self.error());
                }
            }
            let w = self.word()?;
            if w.is_empty() {
                return Err(self.error());
            }
            items.push(w);
        }
        if and && or {
            return Err(self.error());
        }
        Ok(Value::List {
            items,
            all: !or,
            strict,
        })
    }
}

impl Selection {
    /// Parses `text` for report `kind`.
    pub fn parse(kind: Kind, text: &str) -> Result<Self, SelectError> {
        if matches!(text.trim(), "help" | "?") {
            return Err(SelectError::Help);
        }
        let mut p = Parser {
            text,
            pos: 0,
            kind,
            depth: 0,
        };
        let e = p.or()?;
        p.skip_space();
        if !p.rest().is_empty() {
            return Err(p.error());
        }
        Ok(Self(e))
    }

    /// The fields the selection reads.
    pub fn fields(&self) -> Vec<&'static Field> {
        let mut out: Vec<&'static Field> = Vec::new();
        self.0.each_field(&mut |f| {
            if !out.iter().any(|g| g.name == f.name) {
                out.push(f);
            }
        });
        out
    }

    /// Whether a row holds, `cell` giving the row's value of a field.
    pub fn matches<'c>(&self, cell: &impl Fn(&Field) -> Option<&'c Cell>) -> bool {
        self.0.matches(cell)
    }
}

impl Expr {
    fn each_field(&self, f: &mut impl FnMut(&'static Field)) {
        match self {
            Self::Cmp(field, _, _) => f(field),
            Self::And(v) | Self::Or(v) => v.iter().for_each(|s| s.each_field(f)),
            Self::Not(s) => s.each_field(f),
        }
    }

    fn matches<'c>(&self, cell: &impl Fn(&Field) -> Option<&'c Cell>) -> bool {
        match self {
            Self::Cmp(field, op, value) => {
                cell(field).is_some_and(|c| compare(field, c, *op, value))
            }
            Self::And(v) => v.iter().all(|s| s.matches(cell)),
            Self::Or(v) => v.iter().any(|s| s.matches(cell)),
            Self::Not(s) => !s.matches(cell),
        }
    }
}

/// A size as selections write it: lvm2's unit letters (powers of 1024, upper case of 1000),
/// MiB when bare; `None` when it is not a number.
fn size_of(s: &str) -> Option<f64> {
    let s = s.trim();
    let (num, unit) = match s.char_indices().find(|(_, c)| c.is_ascii_alphabetic()) {
        Some((i, _)) => (&s[..i], &s[i..]),
        None => (s, "m"),
    };
    let mult = match unit {
        "b" | "B" => 1.0,
        "s" | "S" => 512.0,
        u if u.len() == 1 => {
            let c = u.chars().next()?;
            let pow = "kmgtpe".find(c.to_ascii_lowercase())? as i32 + 1;
            let base: f64 = if c.is_ascii_lowercase() {
                1024.0
            } else {
                1000.0
            };
            base.powi(pow)
        }
        _ => return None,
    };
    num.parse::<f64>().ok().map(|n| n * mult)
}

fn order<T: PartialOrd>(a: T, b: T, op: Op) -> bool {
    match op {
        Op::Eq => a == b,
        Op::Ne => a != b,
        Op::Ge => a >= b,
        Op::Gt => a > b,
        Op::Le => a <= b,
        Op::Lt => a < b,
        Op::Match | Op::NoMatch => false,
    }
}

fn compare(field: &Field, cell: &Cell, op: Op, value: &Value) -> bool {
    let text = match cell {
        // A hidden LV's name is selected without the brackets it is shown in.
        Cell::Str(s) if field.name == "lv_name" => s
            .strip_prefix('[')
            .and_then(|n| n.strip_suffix(']'))
            .unwrap_or(s)
            .to_owned(),
        Cell::Str(s) => s.clone(),
        Cell::Num(n) => n.to_string(),
        Cell::Int(n) => n.to_string(),
        Cell::Size(b) => b.to_string(),
    };
    match (value, op) {
        (Value::Regex(re), Op::Match) => return re.is_match(&text),
        (Value::Regex(re), _) => return !re.is_match(&text),
        _ => {}
    }
    if is_list(field) {
        let have: Vec<&str> = text.split(',').filter(|t| !t.is_empty()).collect();
        let held = match value {
            Value::Text(t) if t.is_empty() => have.is_empty(),
            Value::Text(t) => have.contains(&t.as_str()),
            Value::List { items, .. } if items.is_empty() => have.is_empty(),
            Value::List {
                items, all: false, ..
            } => items.iter().any(|i| have.contains(&i.as_str())),
            Value::List {
                items,
                strict: true,
                ..
            } => items.len() == have.len() && items.iter().all(|i| have.contains(&i.as_str())),
            Value::List { items, .. } => items.iter().all(|i| have.contains(&i.as_str())),
            Value::Regex(_) => false,
        };
        return match op {
            Op::Eq => held,
            Op::Ne => !held,
            _ => false,
        };
    }
    let Value::Text(want) = value else {
        return false;
    };
    match cell {
        Cell::Size(b) => size_of(want).is_some_and(|w| order(*b as f64, w, op)),
        Cell::Num(n) => want.parse::<f64>().is_ok_and(|w| order(*n as f64, w, op)),
        Cell::Int(n) => want.parse::<f64>().is_ok_and(|w| order(*n as f64, w, op)),
        // Percent fields compare as numbers (`data_percent>80`, `100%`); blank never matches.
        Cell::Str(_) if field.name.ends_with("_percent") => {
            let num = |t: &str| t.trim_end_matches('%').parse::<f64>().ok();
            match (num(&text), num(want)) {
                (Some(a), Some(b)) => order(a, b, op),
                _ => false,
            }
        }
        Cell::Str(_) => matches!(op, Op::Eq | Op::Ne) && order(text.as_str(), want.as_str(), op),
    }
}

impl Table {
    /// Keeps the rows `sel` selects (its fields must be among the columns).
    pub fn select(&mut self, sel: &Selection) {
        let fields = &self.fields;
        self.rows.retain(|row| {
            sel.matches(&|f: &Field| {
                fields
                    .iter()
                    .position(|g| g.name == f.name)
                    .and_then(|i| row.get(i))
            })
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::FIELDS;

    /// A row: name, size in MiB, tags.
    fn row(name: &str, mib: u64, tags: &str) -> Vec<Cell> {
        vec![
            Cell::Str(name.into()),
            Cell::Size(mib << 20),
            Cell::Str(tags.into()),
        ]
    }

    /// Which of lvm2's test LVs `text` selects.
    fn picks(text: &str) -> Vec<&'static str> {
        let sel = Selection::parse(Kind::Lvs, text).expect(text);
        let cols = ["lv_name", "lv_size", "lv_tags"];
        let rows = [
            ("vol1", row("vol1", 8, "lv_tag1,lv_tag2")),
            ("vol2", row("vol2", 4, "lv_tag1")),
            ("abc", row("abc", 16, "lv_tag1")),
            ("xyz", row("xyz", 4, "")),
        ];
        rows.iter()
            .filter(|(_, r)| {
                sel.matches(&|f: &Field| cols.iter().position(|c| *c == f.name).map(|i| &r[i]))
            })
            .map(|(n, _)| *n)
            .collect()
    }

    /// What lvm2's own selection tests expect (test/shell/select-report.sh), on LVs like
    /// theirs.
    #[test]
    fn selections_pick_what_lvm2_picks() {
        assert_eq!(picks("lv_name=\"vol1\""), ["vol1"]);
        assert_eq!(picks("name='vol1'"), ["vol1"]);
        assert_eq!(picks("lv_name!=vol1"), ["vol2", "abc", "xyz"]);
        assert_eq!(picks("tags=lv_tag2"), ["vol1"]);
        assert_eq!(picks("tags=[lv_tag1]"), ["vol2", "abc"]);
        assert_eq!(picks("tags={lv_tag1}"), ["vol1", "vol2", "abc"]);
        assert_eq!(picks("tags=[\"lv_tag2\" && \"lv_tag1\"]"), ["vol1"]);
        assert_eq!(picks("tags=[\"lv_tag2\" || \"nope\"]"), ["vol1"]);
        assert_eq!(picks("tags=\"\""), ["xyz"]);
        assert_eq!(picks("tags=[]"), ["xyz"]);
        assert_eq!(picks("size=8388608b"), ["vol1"]);
        assert_eq!(picks("size=0.0078125g"), ["vol1"]);
        assert_eq!(picks("lv_size=8"), ["vol1"]);
        assert_eq!(picks("size>=8m"), ["vol1", "abc"]);
        assert_eq!(picks("size<8m"), ["vol2", "xyz"]);
        assert_eq!(picks("lv_name=~^vol[12]"), ["vol1", "vol2"]);
        assert_eq!(picks("(lv_name=~^v(o)l[1] || name=abc)"), ["vol1", "abc"]);
        assert_eq!(picks("lv_name!~\"^vol[12]\""), ["abc", "xyz"]);
        assert_eq!(picks("lv_tags=lv_tag1 && lv_size=4m"), ["vol2"]);
        assert_eq!(picks("lv_name=vol1 || lv_name=vol2"), ["vol1", "vol2"]);
        assert_eq!(picks("name=vol1 # name=abc, size=16"), ["vol1", "abc"]);
        assert_eq!(picks("!(lv_name=vol1 || lv_name=vol2)"), ["abc", "xyz"]);
        assert_eq!(picks("(name=vol1 || name=vol2) && size < 8m"), ["vol2"]);
    }

    #[test]
    fn bad_selections_are_typed_errors() {
        let err = |t: &str| Selection::parse(Kind::Lvs, t).map(|_| ()).expect_err(t);
        assert_eq!(err("help"), SelectError::Help);
        assert_eq!(err("bogus=1"), SelectError::Field("bogus".into()));
        assert!(matches!(err("name"), SelectError::Syntax(_)));
        assert!(matches!(err("(name=a"), SelectError::Syntax(_)));
        // lvm2 takes an opening bracket in a bare value as a character of it.
        assert!(Selection::parse(Kind::Lvs, "name=(").is_ok());
        assert!(matches!(err("name=a )"), SelectError::Syntax(_)));
        assert!(matches!(err("tags=[a && b || c]"), SelectError::Syntax(_)));
        assert!(matches!(err("name=~\"(\""), SelectError::Syntax(_)));
        assert!(matches!(err("name=\"open"), SelectError::Syntax(_)));
        // Nesting is bounded: no stack overflow, a syntax error.
        assert!(matches!(err(&"(".repeat(100_000)), SelectError::Syntax(_)));
        assert!(matches!(err(&"!".repeat(100_000)), SelectError::Syntax(_)));
        assert!(Selection::parse(
            Kind::Lvs,
            &format!("{}name=a{}", "(".repeat(50), ")".repeat(50))
        )
        .is_ok());
        assert!(FIELDS.iter().any(is_list));
    }
}
