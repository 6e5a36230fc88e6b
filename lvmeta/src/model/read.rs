//! Typed lookups in a config section, with errors that name the path and the field.

use crate::text::{Body, Node, Tree, Value};

use super::ModelError;

/// Where a section sits (`vg/logical_volumes/lv0/segment1`), built into a string only when a
/// message needs it.
#[derive(Clone, Copy)]
pub(crate) struct Path<'p> {
    name: &'p str,
    parent: Option<&'p Path<'p>>,
}

impl std::fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(p) = self
            .parent
            .filter(|p| p.parent.is_some() || !p.name.is_empty())
        {
            write!(f, "{p}/")?;
        }
        f.write_str(self.name)
    }
}

/// A section being read, with its path for messages.
pub(crate) struct Section<'t, 'a> {
    pub tree: &'t Tree<'a>,
    pub nodes: &'t [Node],
    pub path: Path<'t>,
}

impl<'t, 'a> Section<'t, 'a> {
    /// The top-level section.
    pub fn root(tree: &'t Tree<'a>, nodes: &'t [Node], name: &'t str) -> Self {
        Self {
            tree,
            nodes,
            path: Path { name, parent: None },
        }
    }

    /// The subsection `node` (a node of this section).
    pub fn child<'s>(&'s self, node: &'s Node) -> Option<Section<'s, 'a>> {
        match &node.body {
            Body::Section(span) => Some(Section {
                tree: self.tree,
                nodes: self.tree.children(*span),
                path: Path {
                    name: self.tree.key(node),
                    parent: Some(&self.path),
                },
            }),
            Body::Value(_) => None,
        }
    }

    /// The subsections, in order.
    pub fn sections<'s>(&'s self) -> impl Iterator<Item = (&'s Node, Section<'s, 'a>)> {
        self.nodes
            .iter()
            .filter_map(move |n| self.child(n).map(|c| (n, c)))
    }

    /// The elements of the array `key`, if it is one.
    pub fn array(&self, key: &str) -> Option<&'t [Value]> {
        match self.value(key) {
            Some(Value::Array(span)) => Some(self.tree.items(*span)),
            _ => None,
        }
    }

    pub fn err(&self, field: &str, why: impl Into<String>) -> ModelError {
        ModelError {
            path: self.path.to_string(),
            field: field.to_owned(),
            why: why.into(),
        }
    }

    /// The first node named `key` (lvm2 uses the first of duplicates).
    pub fn node(&self, key: &str) -> Option<&'t Node> {
        self.nodes.iter().find(|n| self.tree.str_is(n.key, key))
    }

    pub fn value(&self, key: &str) -> Option<&'t Value> {
        match self.node(key).map(|n| &n.body) {
            Some(Body::Value(v)) => Some(v),
            _ => None,
        }
    }

    pub fn sub<'s>(&'s self, key: &str) -> Option<Section<'s, 'a>> {
        self.child(self.node(key)?)
    }

    /// A string field, borrowed from the text.
    pub fn opt_ref(&self, key: &str) -> Result<Option<&'t str>, ModelError> {
        match self.value(key) {
            None => Ok(None),
            Some(v) => self
                .tree
                .value_str(v)
                .map(Some)
                .ok_or_else(|| self.err(key, "must be a string")),
        }
    }

    pub fn req_ref(&self, key: &str) -> Result<&'t str, ModelError> {
        self.opt_ref(key)?.ok_or_else(|| self.err(key, "missing"))
    }

    pub fn opt_str(&self, key: &str) -> Result<Option<String>, ModelError> {
        Ok(self.opt_ref(key)?.map(str::to_owned))
    }

    pub fn req_str(&self, key: &str) -> Result<String, ModelError> {
        self.opt_str(key)?.ok_or_else(|| self.err(key, "missing"))
    }

    pub fn opt_int(&self, key: &str) -> Result<Option<i64>, ModelError> {
        match self.value(key) {
            None => Ok(None),
            Some(Value::Int(i)) => Ok(Some(*i)),
            Some(_) => Err(self.err(key, "must be an integer")),
        }
    }

    pub fn req_int(&self, key: &str) -> Result<i64, ModelError> {
        self.opt_int(key)?.ok_or_else(|| self.err(key, "missing"))
    }

    fn ranged<T: TryFrom<i64>>(&self, key: &str, v: i64) -> Result<T, ModelError> {
        T::try_from(v).map_err(|_| self.err(key, format!("{v} is out of range")))
    }

    pub fn opt_u32(&self, key: &str) -> Result<Option<u32>, ModelError> {
        self.opt_int(key)?.map(|v| self.ranged(key, v)).transpose()
    }

    pub fn req_u32(&self, key: &str) -> Result<u32, ModelError> {
        let v = self.req_int(key)?;
        self.ranged(key, v)
    }

    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>, ModelError> {
        self.opt_int(key)?.map(|v| self.ranged(key, v)).transpose()
    }

    pub fn req_u64(&self, key: &str) -> Result<u64, ModelError> {
        let v = self.req_int(key)?;
        self.ranged(key, v)
    }

    /// A list of strings, each converted by `f`; absent is an empty list, a lone string is a
    /// list of one.
    fn list<T>(&self, key: &str, f: impl Fn(&str) -> T) -> Result<Vec<T>, ModelError> {
        match self.value(key) {
            None => Ok(Vec::new()),
            Some(Value::Array(span)) => self
                .tree
                .items(*span)
                .iter()
                .map(|v| {
                    self.tree
                        .value_str(v)
                        .map(&f)
                        .ok_or_else(|| self.err(key, "must hold only strings"))
                })
                .collect(),
            Some(Value::Str(s)) => Ok(vec![f(self.tree.str(*s))]),
            Some(_) => Err(self.err(key, "must be a list of strings")),
        }
    }

    /// A list of strings; absent is an empty list.
    pub fn str_list(&self, key: &str) -> Result<Vec<String>, ModelError> {
        self.list(key, str::to_owned)
    }

    /// A list of status or flag words; absent is an empty list.
    pub fn words(&self, key: &str) -> Result<Vec<super::Word>, ModelError> {
        self.list(key, super::word)
    }

    pub fn req_words(&self, key: &str) -> Result<Vec<super::Word>, ModelError> {
        if self.value(key).is_none() {
            return Err(self.err(key, "missing"));
        }
        self.words(key)
    }

    pub fn req_str_list(&self, key: &str) -> Result<Vec<String>, ModelError> {
        if self.value(key).is_none() {
            return Err(self.err(key, "missing"));
        }
        self.str_list(key)
    }

    /// Keys that appear more than once among the values of this section.
    pub fn duplicate_keys(&self) -> Vec<String> {
        let is_value = |n: &&Node| matches!(n.body, Body::Value(_));
        let key = |n: &Node| self.tree.key(n);
        let mut dups = Vec::new();
        if self.nodes.len() <= 64 {
            // One bit per (length, first byte, last byte) of each key: when no bit is hit
            // twice no key can repeat, and the usual section is done in one pass.
            let mut seen = 0u64;
            let mut clash = false;
            for n in self.nodes.iter().filter(is_value) {
                let k = key(n).as_bytes();
                let (first, last) = (k.first().copied(), k.last().copied());
                let h = k.len()
                    ^ (usize::from(first.unwrap_or(0)) * 7)
                    ^ (usize::from(last.unwrap_or(0)) * 13);
                let bit = 1u64 << (h % 64);
                clash |= seen & bit != 0;
                seen |= bit;
            }
            if !clash {
                return dups;
            }
            // Sections are small: a quadratic scan without allocating beats hashing, and
            // lengths differ for most pairs.
            for (i, n) in self.nodes.iter().enumerate().filter(|(_, n)| is_value(n)) {
                if self.nodes[..i]
                    .iter()
                    .filter(is_value)
                    .any(|m| self.tree.str_is(m.key, key(n)))
                {
                    dups.push(key(n).to_owned());
                }
            }
        } else {
            let mut seen = std::collections::HashSet::new();
            for n in self.nodes.iter().filter(is_value) {
                if !seen.insert(key(n)) {
                    dups.push(key(n).to_owned());
                }
            }
        }
        dups
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::parse;

    fn dups(text: &str) -> Vec<String> {
        let tree = parse(text).expect("parses");
        Section::root(&tree, tree.top(), "").duplicate_keys()
    }

    #[test]
    fn duplicate_keys_found_whatever_the_signature() {
        assert!(dups("id = 1\nstatus = 2\nflags = 3\nsub {\n}\nsub {\n}\n").is_empty());
        assert_eq!(dups("id = 1\nstatus = 2\nid = 3\n"), ["id"]);
        // Same length, first and last byte: the quick check passes them to the exact one.
        assert!(dups("axb = 1\nayb = 2\n").is_empty());
        assert_eq!(dups("axb = 1\nayb = 2\naxb = 3\n"), ["axb"]);
        // Escaped keys live in the side buffer and compare by their text.
        assert_eq!(dups("\"a\\\"b\" = 1\n'a\"b' = 2\n"), ["a\"b"]);
        // Large sections go through the hash set.
        let many: String = (0..70).map(|i| format!("k{i} = {i}\n")).collect();
        assert!(dups(&many).is_empty());
        assert_eq!(dups(&(many + "k7 = 1\n")), ["k7"]);
    }

    #[test]
    fn lookups_use_the_first_of_duplicates() {
        let tree = parse("a = 1\nb = \"x\\\"y\"\na = 2\nc = [\"p\", 'q']\n").expect("parses");
        let s = Section::root(&tree, tree.top(), "");
        assert_eq!(s.req_int("a"), Ok(1));
        assert_eq!(s.req_ref("b"), Ok("x\"y"));
        assert_eq!(s.str_list("c"), Ok(vec!["p".to_owned(), "q".to_owned()]));
        assert!(s.opt_int("d").expect("absent is fine").is_none());
        assert!(s.req_int("b").is_err());
    }
}
