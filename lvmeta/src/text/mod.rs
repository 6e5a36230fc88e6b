//! lvm2's metadata text as a generic config tree (libdm-config), with no lvm meaning.
//!
//! [`parse`] turns text into a [`Tree`] that keeps every node in order (duplicates too) and
//! every value with its type; [`print`] writes trees and typed values back with lvm2's quoting
//! and escaping, in the raw layout of on-disk copies or the tab-indented layout of backups.
//!
//! A tree keeps all its nodes in one vector and all array elements in another; a section or
//! an array refers to a [`Span`] of them. Keys and strings are [`Str`]s: ranges of the parsed
//! text, or of the tree's own side buffer for strings that had escapes or were built in code.
//! A node is 24 bytes and owns nothing, so parsing a large VG allocates a handful of times
//! and dropping the tree is free.

mod parse;
mod print;

pub use parse::{parse, TextError, MAX_DEPTH};
pub use print::{print_tree, quote, Emitter, Style};

/// A run of consecutive entries in one of a tree's vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    start: u32,
    len: u32,
}

impl Span {
    fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.start as usize + self.len as usize
    }
}

/// A string of a tree (read it with [`Tree::str`]): a range of the parsed text, or of the
/// tree's side buffer when the top bit of `len` is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Str {
    start: u32,
    len: u32,
}

/// The flag in [`Str::len`] for strings in the side buffer.
const SIDE: u32 = 1 << 31;

/// Longest text (and side buffer) a tree can address.
pub const MAX_TEXT: usize = (SIDE - 1) as usize;

impl Str {
    /// Length in bytes.
    pub fn len(self) -> usize {
        (self.len & !SIDE) as usize
    }

    /// True for the empty string.
    pub fn is_empty(self) -> bool {
        self.len() == 0
    }
}

/// A value on the right of `=`.
#[derive(Debug, Clone, Copy)]
pub enum Value {
    /// A decimal (or, with a leading 0, octal) integer.
    Int(i64),
    /// A number with a `.`; kept as written (lvm2 metadata has none).
    Float(Str),
    /// A quoted string, unescaped.
    Str(Str),
    /// An unquoted word (vdo's `write_policy = auto`).
    Bare(Str),
    /// `[ v, v, ... ]`: elements in [`Tree::items`]; arrays do not nest.
    Array(Span),
}

/// The body of a node: a value or a section of further nodes.
#[derive(Debug, Clone, Copy)]
pub enum Body {
    /// `key = value`.
    Value(Value),
    /// `key { ... }`: children in [`Tree::children`].
    Section(Span),
}

/// One `key = value` or `key { ... }`.
#[derive(Debug, Clone, Copy)]
pub struct Node {
    /// The key or section name.
    pub key: Str,
    /// What follows it.
    pub body: Body,
}

/// A whole parsed text (or a part of one kept verbatim): the nodes, and the text their
/// strings point into.
#[derive(Debug, Clone, Default)]
pub struct Tree<'a> {
    src: &'a str,
    side: String,
    nodes: Vec<Node>,
    items: Vec<Value>,
    top: Span,
}

impl<'a> Tree<'a> {
    /// The top-level nodes.
    pub fn top(&self) -> &[Node] {
        self.nodes.get(self.top.range()).unwrap_or_default()
    }

    /// The nodes of a section.
    pub fn children(&self, span: Span) -> &[Node] {
        self.nodes.get(span.range()).unwrap_or_default()
    }

    /// The elements of an array.
    pub fn items(&self, span: Span) -> &[Value] {
        self.items.get(span.range()).unwrap_or_default()
    }

    /// The text of a string of this tree.
    pub fn str(&self, s: Str) -> &str {
        let start = s.start as usize;
        self.buf(s).get(start..start + s.len()).unwrap_or_default()
    }

    /// True when the string `s` of this tree is `other` (bytes compared inline: keys are
    /// short, a call to memcmp costs more than the comparison).
    pub fn str_is(&self, s: Str, other: &str) -> bool {
        let start = s.start as usize;
        s.len() == other.len()
            && self
                .buf(s)
                .as_bytes()
                .get(start..start + other.len())
                .is_some_and(|b| b.iter().zip(other.as_bytes()).all(|(x, y)| x == y))
    }

    /// The bytes of `s` (what key comparisons need, without `str`'s boundary checks).
    pub fn bytes(&self, s: Str) -> &[u8] {
        let start = s.start as usize;
        self.buf(s)
            .as_bytes()
            .get(start..start + s.len())
            .unwrap_or_default()
    }

    fn buf(&self, s: Str) -> &str {
        if s.len & SIDE != 0 {
            self.side.as_str()
        } else {
            self.src
        }
    }

    /// The key of a node of this tree.
    pub fn key(&self, n: &Node) -> &str {
        self.str(n.key)
    }

    /// The string of a `Str` or `Bare` value.
    pub fn value_str(&self, v: &Value) -> Option<&str> {
        match v {
            Value::Str(s) | Value::Bare(s) => Some(self.str(*s)),
            _ => None,
        }
    }

    /// A new tree holding copies of `nodes` (of this tree) and everything below them.
    pub fn subtree(&self, nodes: &[Node]) -> Tree<'static> {
        let mut b = Builder::default();
        self.replay(&mut b, nodes);
        b.finish()
    }

    fn replay(&self, b: &mut Builder<'static>, nodes: &[Node]) {
        for n in nodes {
            let key = b.text(self.key(n));
            match &n.body {
                Body::Value(v) => {
                    let v = self.copy_value(b, v);
                    b.value(key, v);
                }
                Body::Section(span) => {
                    b.open();
                    self.replay(b, self.children(*span));
                    b.close(key);
                }
            }
        }
    }

    fn copy_value(&self, b: &mut Builder<'static>, v: &Value) -> Value {
        match *v {
            Value::Int(i) => Value::Int(i),
            Value::Float(s) => Value::Float(b.text(self.str(s))),
            Value::Str(s) => Value::Str(b.text(self.str(s))),
            Value::Bare(s) => Value::Bare(b.text(self.str(s))),
            Value::Array(span) => {
                // Arrays do not nest: copy the scalars first, then store them as one run.
                let items: Vec<Value> = self
                    .items(span)
                    .iter()
                    .map(|x| self.copy_value(b, x))
                    .collect();
                b.array(items)
            }
        }
    }

    fn nodes_eq(&self, a: &[Node], other: &Tree<'_>, b: &[Node]) -> bool {
        a.len() == b.len()
            && a.iter().zip(b).all(|(x, y)| {
                self.key(x) == other.key(y)
                    && match (&x.body, &y.body) {
                        (Body::Value(v), Body::Value(w)) => self.value_eq(v, other, w),
                        (Body::Section(s), Body::Section(t)) => {
                            self.nodes_eq(self.children(*s), other, other.children(*t))
                        }
                        _ => false,
                    }
            })
    }

    fn value_eq(&self, v: &Value, other: &Tree<'_>, w: &Value) -> bool {
        match (v, w) {
            (Value::Int(a), Value::Int(b)) => a == b,
            (Value::Float(a), Value::Float(b))
            | (Value::Str(a), Value::Str(b))
            | (Value::Bare(a), Value::Bare(b)) => self.str(*a) == other.str(*b),
            (Value::Array(a), Value::Array(b)) => {
                let (x, y) = (self.items(*a), other.items(*b));
                x.len() == y.len() && x.iter().zip(y).all(|(p, q)| self.value_eq(p, other, q))
            }
            _ => false,
        }
    }
}

/// Trees are equal when they hold the same nodes and values, wherever their vectors and
/// buffers put them.
impl PartialEq for Tree<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.nodes_eq(self.top(), other, other.top())
    }
}

/// Builds a [`Tree`] bottom-up: values and finished sections wait on a scratch stack until
/// their section closes, then move into the tree as one contiguous span.
#[derive(Debug, Default)]
pub struct Builder<'a> {
    tree: Tree<'a>,
    scratch: Vec<Node>,
    marks: Vec<usize>,
}

impl<'a> Builder<'a> {
    /// A builder for a tree whose strings point into `src`, with room for about `nodes`
    /// nodes.
    fn over(src: &'a str, nodes: usize) -> Self {
        Self {
            tree: Tree {
                src,
                side: String::new(),
                nodes: Vec::with_capacity(nodes),
                items: Vec::with_capacity(nodes / 2),
                top: Span::default(),
            },
            scratch: Vec::with_capacity(64),
            marks: Vec::with_capacity(8),
        }
    }

    /// `len` bytes of the source text at `start` (the parser checked both fit in u32).
    fn src_str(start: usize, len: usize) -> Str {
        Str {
            start: start as u32,
            len: len as u32,
        }
    }

    /// A copy of `s` in the tree's side buffer (saturated to the empty string past
    /// [`MAX_TEXT`] bytes in all).
    pub fn text(&mut self, s: &str) -> Str {
        let start = self.tree.side.len();
        if start + s.len() > MAX_TEXT {
            return Str::default();
        }
        self.tree.side.push_str(s);
        Str {
            start: start as u32,
            len: s.len() as u32 | SIDE,
        }
    }

    /// Adds `key = value` to the innermost open section.
    pub fn value(&mut self, key: Str, value: Value) {
        self.scratch.push(Node {
            key,
            body: Body::Value(value),
        });
    }

    /// Stores array elements and returns the array value to pass to [`Builder::value`].
    pub fn array(&mut self, items: impl IntoIterator<Item = Value>) -> Value {
        let start = self.begin_array();
        self.tree.items.extend(items);
        self.end_array(start)
    }

    /// Starts an array whose elements follow with [`Builder::item`].
    pub fn begin_array(&mut self) -> usize {
        self.tree.items.len()
    }

    /// Adds an element to the array being built.
    pub fn item(&mut self, v: Value) {
        self.tree.items.push(v);
    }

    /// Ends the array begun at `start`.
    pub fn end_array(&mut self, start: usize) -> Value {
        Value::Array(span(start, self.tree.items.len()))
    }

    /// Starts a section; its nodes follow until [`Builder::close`].
    pub fn open(&mut self) {
        self.marks.push(self.scratch.len());
    }

    /// Ends the innermost section and adds it, named `key`, to its parent.
    pub fn close(&mut self, key: Str) {
        let mark = self.marks.pop().unwrap_or(0);
        let start = self.tree.nodes.len();
        self.tree.nodes.extend_from_slice(&self.scratch[mark..]);
        self.scratch.truncate(mark);
        let s = span(start, self.tree.nodes.len());
        self.scratch.push(Node {
            key,
            body: Body::Section(s),
        });
    }

    /// The tree; sections still open are closed as anonymous.
    pub fn finish(mut self) -> Tree<'a> {
        while !self.marks.is_empty() {
            self.close(Str::default());
        }
        let start = self.tree.nodes.len();
        self.tree.nodes.append(&mut self.scratch);
        self.tree.top = span(start, self.tree.nodes.len());
        self.tree
    }
}

fn span(start: usize, end: usize) -> Span {
    // Text is at most MAX_TEXT bytes and every node or item takes at least one byte of it
    // (or of the side buffer, bounded the same way), so the counts fit in u32.
    Span {
        start: start as u32,
        len: (end - start) as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_point_into_the_text_or_the_side_buffer() {
        let text = "plain = \"abc\"\nesc = \"a\\\"c\"\nsec {\nk = bare\n}\n";
        let tree = parse(text).expect("parses");
        let top = tree.top();
        assert_eq!(tree.key(&top[0]), "plain");
        let Body::Value(Value::Str(s)) = top[0].body else {
            panic!("not a string")
        };
        assert!(tree.str_is(s, "abc") && !tree.str_is(s, "abd") && !tree.str_is(s, "ab"));
        let Body::Value(Value::Str(e)) = top[1].body else {
            panic!("not a string")
        };
        assert_eq!(tree.str(e), "a\"c");
        assert!(tree.str_is(e, "a\"c"));
        // A subtree owns copies of every string.
        let owned: Tree<'static> = tree.subtree(top);
        drop(tree);
        let again = parse(text).expect("parses");
        assert_eq!(owned, again);
        let Body::Section(span) = owned.top()[2].body else {
            panic!("not a section")
        };
        let k = &owned.children(span)[0];
        assert_eq!(owned.key(k), "k");
        assert_eq!(
            owned.value_str(&match k.body {
                Body::Value(v) => v,
                Body::Section(_) => panic!("not a value"),
            }),
            Some("bare")
        );
    }

    #[test]
    fn nodes_are_small() {
        // The point of spans: a node owns nothing and takes 24 bytes.
        assert_eq!(std::mem::size_of::<Node>(), 24);
        assert_eq!(std::mem::size_of::<Value>(), 16);
    }
}
