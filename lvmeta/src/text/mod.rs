//! lvm2's metadata text as a generic config tree (libdm-config), with no lvm meaning.
//!
//! [`parse`] turns text into a [`Tree`] that keeps every node in order (duplicates too) and
//! every value with its type; [`print`] writes trees and typed values back with lvm2's quoting
//! and escaping, in the raw layout of on-disk copies or the tab-indented layout of backups.
//!
//! A tree keeps all its nodes in one vector and all array elements in another; a section or
//! an array refers to a [`Span`] of them. Parsing a large VG therefore allocates a handful of
//! times instead of once per node, and dropping the tree is nearly free.

mod parse;
mod print;

use std::borrow::Cow;

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
        self.start as usize..(self.start + self.len) as usize
    }
}

/// A value on the right of `=`.
#[derive(Debug, Clone)]
pub enum Value<'a> {
    /// A decimal (or, with a leading 0, octal) integer.
    Int(i64),
    /// A number with a `.`; kept as written (lvm2 metadata has none).
    Float(Cow<'a, str>),
    /// A quoted string, unescaped.
    Str(Cow<'a, str>),
    /// An unquoted word (vdo's `write_policy = auto`).
    Bare(Cow<'a, str>),
    /// `[ v, v, ... ]`: elements in [`Tree::items`]; arrays do not nest.
    Array(Span),
}

/// The body of a node: a value or a section of further nodes.
#[derive(Debug, Clone)]
pub enum Body<'a> {
    /// `key = value`.
    Value(Value<'a>),
    /// `key { ... }`: children in [`Tree::children`].
    Section(Span),
}

/// One `key = value` or `key { ... }`.
#[derive(Debug, Clone)]
pub struct Node<'a> {
    /// The key or section name.
    pub key: Cow<'a, str>,
    /// What follows it.
    pub body: Body<'a>,
}

/// A whole parsed text (or a part of one kept verbatim).
#[derive(Debug, Clone, Default)]
pub struct Tree<'a> {
    nodes: Vec<Node<'a>>,
    items: Vec<Value<'a>>,
    top: Span,
}

impl<'a> Value<'a> {
    /// The string of a `Str` or `Bare` value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) | Value::Bare(s) => Some(s),
            _ => None,
        }
    }
}

impl<'a> Tree<'a> {
    /// The top-level nodes.
    pub fn top(&self) -> &[Node<'a>] {
        &self.nodes[self.top.range()]
    }

    /// The nodes of a section.
    pub fn children(&self, span: Span) -> &[Node<'a>] {
        &self.nodes[span.range()]
    }

    /// The elements of an array.
    pub fn items(&self, span: Span) -> &[Value<'a>] {
        &self.items[span.range()]
    }

    /// A new tree holding copies of `nodes` (of this tree) and everything below them.
    pub fn subtree(&self, nodes: &[Node<'_>]) -> Tree<'static> {
        let mut b = Builder::default();
        self.replay(&mut b, nodes);
        b.finish()
    }

    fn replay(&self, b: &mut Builder<'static>, nodes: &[Node<'_>]) {
        for n in nodes {
            let key = Cow::Owned(n.key.to_string());
            match &n.body {
                Body::Value(v) => {
                    let v = self.own_value(b, v);
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

    fn own_value(&self, b: &mut Builder<'static>, v: &Value<'_>) -> Value<'static> {
        let own = |s: &Cow<'_, str>| Cow::Owned(s.to_string());
        match v {
            Value::Int(i) => Value::Int(*i),
            Value::Float(s) => Value::Float(own(s)),
            Value::Str(s) => Value::Str(own(s)),
            Value::Bare(s) => Value::Bare(own(s)),
            Value::Array(span) => {
                let items: Vec<Value<'static>> = self
                    .items(*span)
                    .iter()
                    .map(|x| self.own_value(b, x))
                    .collect();
                b.array(items)
            }
        }
    }

    fn nodes_eq(&self, a: &[Node<'_>], other: &Tree<'_>, b: &[Node<'_>]) -> bool {
        a.len() == b.len()
            && a.iter().zip(b).all(|(x, y)| {
                x.key == y.key
                    && match (&x.body, &y.body) {
                        (Body::Value(v), Body::Value(w)) => self.value_eq(v, other, w),
                        (Body::Section(s), Body::Section(t)) => {
                            self.nodes_eq(self.children(*s), other, other.children(*t))
                        }
                        _ => false,
                    }
            })
    }

    fn value_eq(&self, v: &Value<'_>, other: &Tree<'_>, w: &Value<'_>) -> bool {
        match (v, w) {
            (Value::Int(a), Value::Int(b)) => a == b,
            (Value::Float(a), Value::Float(b))
            | (Value::Str(a), Value::Str(b))
            | (Value::Bare(a), Value::Bare(b)) => a == b,
            (Value::Array(a), Value::Array(b)) => {
                let (x, y) = (self.items(*a), other.items(*b));
                x.len() == y.len() && x.iter().zip(y).all(|(p, q)| self.value_eq(p, other, q))
            }
            _ => false,
        }
    }
}

/// Trees are equal when they hold the same nodes and values, wherever their vectors put them.
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
    scratch: Vec<Node<'a>>,
    marks: Vec<usize>,
}

impl<'a> Builder<'a> {
    /// A builder with room for about `nodes` nodes.
    pub fn with_capacity(nodes: usize) -> Self {
        Self {
            tree: Tree {
                nodes: Vec::with_capacity(nodes),
                items: Vec::with_capacity(nodes / 2),
                top: Span::default(),
            },
            scratch: Vec::with_capacity(64),
            marks: Vec::with_capacity(8),
        }
    }

    /// Adds `key = value` to the innermost open section.
    pub fn value(&mut self, key: Cow<'a, str>, value: Value<'a>) {
        self.scratch.push(Node {
            key,
            body: Body::Value(value),
        });
    }

    /// Stores array elements and returns the array value to pass to [`Builder::value`].
    pub fn array(&mut self, items: impl IntoIterator<Item = Value<'a>>) -> Value<'a> {
        let start = self.begin_array();
        self.tree.items.extend(items);
        self.end_array(start)
    }

    /// Starts an array whose elements follow with [`Builder::item`].
    pub fn begin_array(&mut self) -> usize {
        self.tree.items.len()
    }

    /// Adds an element to the array being built.
    pub fn item(&mut self, v: Value<'a>) {
        self.tree.items.push(v);
    }

    /// Ends the array begun at `start`.
    pub fn end_array(&mut self, start: usize) -> Value<'a> {
        Value::Array(span(start, self.tree.items.len()))
    }

    /// Starts a section; its nodes follow until [`Builder::close`].
    pub fn open(&mut self) {
        self.marks.push(self.scratch.len());
    }

    /// Ends the innermost section and adds it, named `key`, to its parent.
    pub fn close(&mut self, key: Cow<'a, str>) {
        let mark = self.marks.pop().unwrap_or(0);
        let start = self.tree.nodes.len();
        self.tree.nodes.extend(self.scratch.drain(mark..));
        let s = span(start, self.tree.nodes.len());
        self.scratch.push(Node {
            key,
            body: Body::Section(s),
        });
    }

    /// The tree; sections still open are closed as anonymous.
    pub fn finish(mut self) -> Tree<'a> {
        while !self.marks.is_empty() {
            self.close(Cow::Borrowed(""));
        }
        let start = self.tree.nodes.len();
        self.tree.nodes.append(&mut self.scratch);
        self.tree.top = span(start, self.tree.nodes.len());
        self.tree
    }
}

fn span(start: usize, end: usize) -> Span {
    // Text is bounded by the metadata area (at most 4 GiB), and every node or item takes at
    // least one byte of it, so the counts fit in u32.
    Span {
        start: start as u32,
        len: (end - start) as u32,
    }
}
