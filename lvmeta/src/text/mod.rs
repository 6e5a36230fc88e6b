//! lvm2's metadata text as a generic config tree (libdm-config), with no lvm meaning.
//!
//! [`parse`] turns text into a [`Tree`] that keeps every node in order (duplicates too) and
//! every value with its type; [`print`] writes trees and typed values back with lvm2's quoting
//! and escaping, in the raw layout of on-disk copies or the tab-indented layout of backups.

mod parse;
mod print;

use std::borrow::Cow;

pub use parse::{parse, TextError, MAX_DEPTH};
pub use print::{print_tree, quote, Emitter, Style};

/// A value on the right of `=`.
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    /// A decimal (or, with a leading 0, octal) integer.
    Int(i64),
    /// A number with a `.`; kept as written (lvm2 metadata has none).
    Float(Cow<'a, str>),
    /// A quoted string, unescaped.
    Str(Cow<'a, str>),
    /// An unquoted word (vdo's `write_policy = auto`).
    Bare(Cow<'a, str>),
    /// `[ v, v, ... ]`; arrays do not nest.
    Array(Vec<Value<'a>>),
}

/// The body of a node: a value or a section of further nodes.
#[derive(Debug, Clone, PartialEq)]
pub enum Body<'a> {
    /// `key = value`.
    Value(Value<'a>),
    /// `key { ... }`.
    Section(Vec<Node<'a>>),
}

/// One `key = value` or `key { ... }`.
#[derive(Debug, Clone, PartialEq)]
pub struct Node<'a> {
    /// The key or section name.
    pub key: Cow<'a, str>,
    /// What follows it.
    pub body: Body<'a>,
}

/// A whole parsed text: the top-level nodes in order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Tree<'a> {
    /// Top-level nodes.
    pub nodes: Vec<Node<'a>>,
}

impl Value<'_> {
    /// An owned copy that no longer borrows the text.
    pub fn into_owned(self) -> Value<'static> {
        match self {
            Value::Int(i) => Value::Int(i),
            Value::Float(s) => Value::Float(Cow::Owned(s.into_owned())),
            Value::Str(s) => Value::Str(Cow::Owned(s.into_owned())),
            Value::Bare(s) => Value::Bare(Cow::Owned(s.into_owned())),
            Value::Array(v) => Value::Array(v.into_iter().map(Value::into_owned).collect()),
        }
    }

    /// The string of a `Str` or `Bare` value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) | Value::Bare(s) => Some(s),
            _ => None,
        }
    }
}

impl Node<'_> {
    /// An owned copy that no longer borrows the text.
    pub fn into_owned(self) -> Node<'static> {
        Node {
            key: Cow::Owned(self.key.into_owned()),
            body: match self.body {
                Body::Value(v) => Body::Value(v.into_owned()),
                Body::Section(s) => Body::Section(s.into_iter().map(Node::into_owned).collect()),
            },
        }
    }

    /// The nodes of a section, or `None` for a value.
    pub fn section(&self) -> Option<&[Node<'_>]> {
        match &self.body {
            Body::Section(s) => Some(s),
            Body::Value(_) => None,
        }
    }
}
