//! Writing config text with lvm2's quoting, escaping and layouts.

use super::{Body, Node, Tree, Value};

/// Layout of the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// On-disk copies: no indentation.
    Raw,
    /// Backup files: one tab per nesting level.
    File,
}

/// `s` in double quotes, with `"` and `\` escaped (libdm's `dm_escape_double_quotes`).
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    push_quoted(&mut out, s);
    out
}

fn push_quoted(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    // Short strings (most of them) are checked without branching; memchr pays off on long ones.
    let clean = s.len() < 64
        && s.bytes()
            .fold(true, |ok, b| ok & (b != b'"') & (b != b'\\'));
    if clean {
        out.push_str(s);
        out.push('"');
        return;
    }
    let mut rest = s;
    // Copy runs without a quote or backslash whole; both are ASCII, so every cut is on a
    // character boundary.
    while let Some(i) = memchr::memchr2(b'"', b'\\', rest.as_bytes()) {
        out.push_str(&rest[..i]);
        out.push('\\');
        out.push_str(&rest[i..=i]);
        rest = &rest[i + 1..];
    }
    out.push_str(rest);
    out.push('"');
}

/// Bytes that may appear in a bare key: all but white space, `#`, `=`, `{`, `}` and NUL.
static KEY_SAFE: [bool; 256] = {
    let mut t = [true; 256];
    let bad = b" \t\n\r\x0b\x0c#={}\0";
    let mut i = 0;
    while i < bad.len() {
        t[bad[i] as usize] = false;
        i += 1;
    }
    t
};

/// A key as written: bare when the parser reads it back as one word, quoted otherwise (empty,
/// starting with a quote, or holding white space, `#`, `=`, `{`, `}`).
fn push_key(out: &mut String, key: &str) {
    let bytes = key.as_bytes();
    let plain = !matches!(bytes.first(), None | Some(b'"' | b'\''))
        && bytes
            .iter()
            .fold(true, |ok, &b| ok & KEY_SAFE[usize::from(b)]);
    if plain {
        out.push_str(key);
    } else {
        push_quoted(out, key);
    }
}

/// Appends the decimal form of `v` (itoa: no formatting machinery).
fn push_int(out: &mut String, v: i64) {
    out.push_str(itoa::Buffer::new().format(v));
}

/// Builds config text line by line, keeping track of the indentation.
#[derive(Debug)]
pub struct Emitter {
    out: String,
    depth: usize,
    style: Style,
}

impl Emitter {
    /// An empty text in the given layout.
    pub fn new(style: Style) -> Self {
        Self::with_capacity(style, 4096)
    }

    /// Like [`Emitter::new`], reserving `cap` bytes.
    pub fn with_capacity(style: Style, cap: usize) -> Self {
        Self {
            out: String::with_capacity(cap),
            depth: 0,
            style,
        }
    }

    /// An empty text in the given layout, written into `buf` (cleared; its allocation kept).
    pub fn reusing(style: Style, mut buf: String) -> Self {
        buf.clear();
        Self {
            out: buf,
            depth: 0,
            style,
        }
    }

    /// An empty text in the given layout, appended to what `buf` holds.
    pub fn appending(style: Style, buf: String) -> Self {
        Self {
            out: buf,
            depth: 0,
            style,
        }
    }

    /// The layout.
    pub fn style(&self) -> Style {
        self.style
    }

    fn indent(&mut self) {
        if self.style == Style::File {
            for _ in 0..self.depth {
                self.out.push('\t');
            }
        }
    }

    /// `name {`, then one level deeper.
    pub fn open(&mut self, name: &str) {
        self.indent();
        push_key(&mut self.out, name);
        self.out.push_str(" {\n");
        self.depth += 1;
    }

    /// `<prefix><n> {` (`segment1`, `message2`), then one level deeper.
    pub fn open_numbered(&mut self, prefix: &str, n: usize) {
        self.indent();
        push_key(&mut self.out, prefix);
        push_int(&mut self.out, i64::try_from(n).unwrap_or(i64::MAX));
        self.out.push_str(" {\n");
        self.depth += 1;
    }

    /// One level up, then `}`.
    pub fn close(&mut self) {
        self.depth = self.depth.saturating_sub(1);
        self.indent();
        self.out.push_str("}\n");
    }

    /// An empty line.
    pub fn blank(&mut self) {
        self.out.push('\n');
    }

    /// A line written as given (after the indentation).
    pub fn line(&mut self, text: &str) {
        self.indent();
        self.out.push_str(text);
        self.out.push('\n');
    }

    /// `key = <int>`.
    pub fn int(&mut self, key: &str, v: i64) {
        self.indent();
        push_key(&mut self.out, key);
        self.out.push_str(" = ");
        push_int(&mut self.out, v);
        self.out.push('\n');
    }

    /// `key = "<escaped>"`.
    pub fn str(&mut self, key: &str, v: &str) {
        self.indent();
        push_key(&mut self.out, key);
        self.out.push_str(" = ");
        push_quoted(&mut self.out, v);
        self.out.push('\n');
    }

    /// `key = ["a", "b"]`.
    pub fn str_list<S: AsRef<str>>(&mut self, key: &str, items: &[S]) {
        self.str_iter(key, items.iter().map(AsRef::as_ref));
    }

    /// `key = ["a", "b"]` from any sequence of strings.
    pub fn str_iter<'s>(&mut self, key: &str, items: impl IntoIterator<Item = &'s str>) {
        self.indent();
        push_key(&mut self.out, key);
        self.out.push_str(" = [");
        for (i, s) in items.into_iter().enumerate() {
            if i > 0 {
                self.out.push_str(", ");
            }
            push_quoted(&mut self.out, s);
        }
        self.out.push_str("]\n");
    }

    /// `key = <value>` for any value of `tree`.
    pub fn value(&mut self, tree: &Tree<'_>, key: &str, v: &Value) {
        self.indent();
        push_key(&mut self.out, key);
        self.out.push_str(" = ");
        push_value(&mut self.out, tree, v);
        self.out.push('\n');
    }

    /// Every node of `nodes` (of `tree`), recursively.
    pub fn nodes(&mut self, tree: &Tree<'_>, nodes: &[Node]) {
        for n in nodes {
            match &n.body {
                Body::Value(v) => self.value(tree, tree.key(n), v),
                Body::Section(s) => {
                    self.open(tree.key(n));
                    self.nodes(tree, tree.children(*s));
                    self.close();
                }
            }
        }
    }

    /// The text so far.
    pub fn finish(self) -> String {
        self.out
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.out.len()
    }

    /// Whether nothing was written yet.
    pub fn is_empty(&self) -> bool {
        self.out.is_empty()
    }

    /// What was written since byte `from` (a [`Emitter::len`]).
    pub fn since(&self, from: usize) -> &str {
        self.out.get(from..).unwrap_or_default()
    }

    /// Appends `text`, printed earlier by an emitter of the same style at the same depth.
    pub fn verbatim(&mut self, text: &str) {
        self.out.push_str(text);
    }
}

fn push_value(out: &mut String, tree: &Tree<'_>, v: &Value) {
    match v {
        Value::Int(i) => push_int(out, *i),
        Value::Float(s) | Value::Bare(s) => out.push_str(tree.str(*s)),
        Value::Str(s) => push_quoted(out, tree.str(*s)),
        Value::Array(items) => {
            out.push('[');
            for (i, it) in tree.items(*items).iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                push_value(out, tree, it);
            }
            out.push(']');
        }
    }
}

/// A whole tree as text.
pub fn print_tree(tree: &Tree<'_>, style: Style) -> String {
    let mut e = Emitter::new(style);
    e.nodes(tree, tree.top());
    e.finish()
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;

    #[test]
    fn quoting() {
        assert_eq!(quote(r#"a"b\c"#), r#""a\"b\\c""#);
    }

    #[test]
    fn round_trip_both_styles() {
        let t = parse(
            "vg {\nid = \"a\\\"b\"\nl = [\"x\", 1, y]\nsub {\nk = -3\nf = 1.5\n}\n}\nv = 1\n",
        )
        .expect("parses");
        for style in [Style::Raw, Style::File] {
            let text = print_tree(&t, style);
            assert_eq!(parse(&text).expect("re-parses"), t, "{text}");
        }
        assert_eq!(
            print_tree(&t, Style::File),
            "vg {\n\tid = \"a\\\"b\"\n\tl = [\"x\", 1, y]\n\tsub {\n\t\tk = -3\n\t\tf = 1.5\n\t}\n}\nv = 1\n"
        );
    }
}
