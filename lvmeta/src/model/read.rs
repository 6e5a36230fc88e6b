//! Typed lookups in a config section, with errors that name the path and the field.

use crate::text::{Body, Node, Tree, Value};

use super::{ModelError, ModelWarning};

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

/// A key's bucket in [`Keys`]: its length, first and last byte folded into 0..64.
const fn bucket(k: &[u8]) -> usize {
    match k {
        [] => 0,
        [first, .., last] => (k.len() ^ (*first as usize * 7) ^ (*last as usize * 13)) % 64,
        [only] => (1 ^ (*only as usize * 7) ^ (*only as usize * 13)) % 64,
    }
}

/// The keys a reader wants from one kind of section, bucketed at compile time, so that
/// [`Section::fields`] compares each node's key with one candidate, rarely two.
pub(crate) struct Keys<const N: usize> {
    keys: [&'static str; N],
    /// For each bucket, the keys in it (bit i stands for `keys[i]`).
    buckets: [u64; 64],
}

impl<const N: usize> Keys<N> {
    /// The set of `keys` (at most 64).
    pub const fn new(keys: [&'static str; N]) -> Self {
        assert!(N <= 64, "one bit per key");
        let mut buckets = [0u64; 64];
        let mut i = 0;
        while i < N {
            buckets[bucket(keys[i].as_bytes())] |= 1 << i;
            i += 1;
        }
        Self { keys, buckets }
    }

    /// The index of key `k`.
    fn find(&self, k: &[u8]) -> Option<usize> {
        let mut candidates = self.buckets[bucket(k)];
        while candidates != 0 {
            let i = candidates.trailing_zeros() as usize;
            if self.keys[i].as_bytes() == k {
                return Some(i);
            }
            candidates &= candidates - 1;
        }
        None
    }
}

/// Binds each variable to the [`Field`] of its key, all found in one pass by
/// [`Section::fields`]: `fields!(sec, warnings, { id = "id", lv_flags = "flags" });`. Names
/// and keys stand side by side, so they cannot drift apart.
macro_rules! fields {
    ($sec:expr, $warnings:expr, { $($name:ident = $key:literal),+ $(,)? }) => {
        let [$($name),+] = {
            static KEYS: $crate::model::read::Keys<{ [$($key),+].len() }> =
                $crate::model::read::Keys::new([$($key),+]);
            $sec.fields(&KEYS, $warnings)
        };
    };
}
pub(crate) use fields;

/// A field of a section: its key and the value of the first node with that key, if that
/// node is a value.
#[derive(Clone, Copy)]
pub(crate) struct Field<'t> {
    /// The key.
    pub key: &'static str,
    /// The value.
    pub value: Option<&'t Value>,
}

/// What the typed getters of a [`Section`] read: a key, looked up when asked, or a [`Field`]
/// that [`Section::fields`] already found.
pub(crate) trait Lookup<'t>: Copy {
    /// The field in `sec`.
    fn find(self, sec: &Section<'t, '_>) -> Field<'t>;
}

impl<'t> Lookup<'t> for &'static str {
    fn find(self, sec: &Section<'t, '_>) -> Field<'t> {
        sec.field(self)
    }
}

impl<'t> Lookup<'t> for Field<'t> {
    fn find(self, _: &Section<'t, '_>) -> Field<'t> {
        self
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

    /// A model error naming this section's path and `field`.
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

    /// The value of `key` (first occurrence), if it is a value.
    pub fn value(&self, key: &str) -> Option<&'t Value> {
        match self.node(key).map(|n| &n.body) {
            Some(Body::Value(v)) => Some(v),
            _ => None,
        }
    }

    /// The field `key`, looked up.
    pub fn field(&self, key: &'static str) -> Field<'t> {
        Field {
            key,
            value: self.value(key),
        }
    }

    /// The sub-section `key`, if there is one.
    pub fn sub<'s>(&'s self, key: &str) -> Option<Section<'s, 'a>> {
        self.child(self.node(key)?)
    }

    /// The fields of `keys`, found in one pass over the section (the first of duplicates, as
    /// everywhere). Duplicate keys are noted in `warnings` on the way: for the usual section,
    /// whose every key is among `keys`, that costs nothing more.
    pub fn fields<const N: usize>(
        &self,
        keys: &Keys<N>,
        warnings: &mut Vec<ModelWarning>,
    ) -> [Field<'t>; N] {
        let mut out = keys.keys.map(|key| Field { key, value: None });
        let mut seen = 0u64;
        let (mut repeated, mut unknown) = (false, 0usize);
        for n in self.nodes {
            match keys.find(self.tree.bytes(n.key)) {
                Some(i) => {
                    let bit = 1u64 << i;
                    if seen & bit == 0 {
                        // The first node named so decides, as lvm2's lookups do, even when it
                        // is a section and so has no value.
                        if let Body::Value(v) = &n.body {
                            out[i].value = Some(v);
                        }
                    }
                    repeated |= seen & bit != 0;
                    seen |= bit;
                }
                None => unknown += usize::from(matches!(n.body, Body::Value(_))),
            }
        }
        if repeated || unknown > 1 {
            self.note_duplicates(warnings);
        }
        out
    }

    /// Warns about every key that appears more than once among the values (lvm2 uses the
    /// first).
    pub fn note_duplicates(&self, warnings: &mut Vec<ModelWarning>) {
        for key in self.duplicate_keys() {
            tracing::warn!(path = %self.path, %key, "duplicate key; using the first");
            warnings.push(ModelWarning::DuplicateKey {
                path: self.path.to_string(),
                key,
            });
        }
    }

    /// A string field, borrowed from the text.
    pub fn opt_ref(&self, k: impl Lookup<'t>) -> Result<Option<&'t str>, ModelError> {
        let f = k.find(self);
        match f.value {
            None => Ok(None),
            Some(v) => self
                .tree
                .value_str(v)
                .map(Some)
                .ok_or_else(|| self.err(f.key, "must be a string")),
        }
    }

    /// A required string, borrowed from the text.
    pub fn req_ref(&self, k: impl Lookup<'t>) -> Result<&'t str, ModelError> {
        let f = k.find(self);
        self.opt_ref(f)?.ok_or_else(|| self.err(f.key, "missing"))
    }

    /// An optional string, owned.
    pub fn opt_str(&self, k: impl Lookup<'t>) -> Result<Option<String>, ModelError> {
        Ok(self.opt_ref(k)?.map(str::to_owned))
    }

    /// A required string, owned.
    pub fn req_str(&self, k: impl Lookup<'t>) -> Result<String, ModelError> {
        Ok(self.req_ref(k)?.to_owned())
    }

    /// An optional integer.
    pub fn opt_int(&self, k: impl Lookup<'t>) -> Result<Option<i64>, ModelError> {
        let f = k.find(self);
        match f.value {
            None => Ok(None),
            Some(Value::Int(i)) => Ok(Some(*i)),
            Some(_) => Err(self.err(f.key, "must be an integer")),
        }
    }

    /// A required integer.
    pub fn req_int(&self, k: impl Lookup<'t>) -> Result<i64, ModelError> {
        let f = k.find(self);
        self.opt_int(f)?.ok_or_else(|| self.err(f.key, "missing"))
    }

    fn ranged<T: TryFrom<i64>>(&self, key: &str, v: i64) -> Result<T, ModelError> {
        T::try_from(v).map_err(|_| self.err(key, format!("{v} is out of range")))
    }

    /// An optional integer that must fit `T`.
    fn opt_num<T: TryFrom<i64>>(&self, k: impl Lookup<'t>) -> Result<Option<T>, ModelError> {
        let f = k.find(self);
        self.opt_int(f)?.map(|v| self.ranged(f.key, v)).transpose()
    }

    /// A required integer that must fit `T`.
    fn req_num<T: TryFrom<i64>>(&self, k: impl Lookup<'t>) -> Result<T, ModelError> {
        let f = k.find(self);
        let v = self.req_int(f)?;
        self.ranged(f.key, v)
    }

    /// An optional integer that fits 32 bits.
    pub fn opt_u32(&self, k: impl Lookup<'t>) -> Result<Option<u32>, ModelError> {
        self.opt_num(k)
    }

    /// A required integer that fits 32 bits.
    pub fn req_u32(&self, k: impl Lookup<'t>) -> Result<u32, ModelError> {
        self.req_num(k)
    }

    /// An optional non-negative integer.
    pub fn opt_u64(&self, k: impl Lookup<'t>) -> Result<Option<u64>, ModelError> {
        self.opt_num(k)
    }

    /// A required non-negative integer.
    pub fn req_u64(&self, k: impl Lookup<'t>) -> Result<u64, ModelError> {
        self.req_num(k)
    }

    /// A list of strings, each converted by `conv`; absent is an empty list, a lone string is
    /// a list of one.
    fn list<T>(&self, f: Field<'t>, conv: impl Fn(&str) -> T) -> Result<Vec<T>, ModelError> {
        match f.value {
            None => Ok(Vec::new()),
            Some(Value::Array(span)) => {
                let items = self.tree.items(*span);
                let mut out = Vec::with_capacity(items.len());
                for v in items {
                    match self.tree.value_str(v) {
                        Some(s) => out.push(conv(s)),
                        None => return Err(self.err(f.key, "must hold only strings")),
                    }
                }
                Ok(out)
            }
            Some(Value::Str(s)) => Ok(vec![conv(self.tree.str(*s))]),
            Some(_) => Err(self.err(f.key, "must be a list of strings")),
        }
    }

    /// A list of strings; absent is an empty list.
    pub fn str_list(&self, k: impl Lookup<'t>) -> Result<Vec<String>, ModelError> {
        self.list(k.find(self), str::to_owned)
    }

    /// A list of status or flag words; absent is an empty list.
    pub fn words(&self, k: impl Lookup<'t>) -> Result<Vec<super::Word>, ModelError> {
        self.list(k.find(self), super::word)
    }

    /// A required list of flag words.
    pub fn req_words(&self, k: impl Lookup<'t>) -> Result<Vec<super::Word>, ModelError> {
        let f = k.find(self);
        if f.value.is_none() {
            return Err(self.err(f.key, "missing"));
        }
        self.words(f)
    }

    /// A required list of strings.
    pub fn req_str_list(&self, k: impl Lookup<'t>) -> Result<Vec<String>, ModelError> {
        let f = k.find(self);
        if f.value.is_none() {
            return Err(self.err(f.key, "missing"));
        }
        self.str_list(f)
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
        // Same length, first and last byte: the quick signature check passes them on to the
        // exact one.
        assert!(dups("axb = 1\nayb = 2\n").is_empty());
        assert_eq!(dups("axb = 1\nayb = 2\naxb = 3\n"), ["axb"]);
        // Escaped keys live in the side buffer and compare by their text.
        assert_eq!(dups("\"a\\\"b\" = 1\n'a\"b' = 2\n"), ["a\"b"]);
        // Large sections go through the hash set.
        let many: String = (0..70).map(|i| format!("k{i} = {i}\n")).collect();
        assert!(dups(&many).is_empty());
        assert_eq!(dups(&(many + "k7 = 1\n")), ["k7"]);
    }

    /// The warned keys and the values (as integers) that `fields` finds for `keys` in `text`.
    fn fields_of<const N: usize>(text: &str, keys: &Keys<N>) -> (Vec<String>, [Option<i64>; N]) {
        let tree = parse(text).expect("parses");
        let s = Section::root(&tree, tree.top(), "");
        let mut warnings = Vec::new();
        let found = s.fields(keys, &mut warnings);
        let warned = warnings
            .into_iter()
            .map(|w| match w {
                ModelWarning::DuplicateKey { key, .. } => key,
            })
            .collect();
        let values = found.map(|f| s.opt_int(f).expect("integers"));
        (warned, values)
    }

    #[test]
    fn fields_take_the_first_and_warn_about_any_repeat() {
        static AB: Keys<2> = Keys::new(["a", "b"]);
        // Every key known, none repeated.
        assert_eq!(
            fields_of("b = 2\na = 1\n", &AB),
            (vec![], [Some(1), Some(2)])
        );
        // A known key repeated: warned, the first value wins; absent keys have no value.
        assert_eq!(
            fields_of("a = 1\na = 9\n", &AB),
            (vec!["a".to_owned()], [Some(1), None])
        );
        // Keys outside the set: several distinct ones are fine, a repeated one is warned.
        assert_eq!(
            fields_of("x = 1\ny = 2\na = 3\n", &AB),
            (vec![], [Some(3), None])
        );
        assert_eq!(
            fields_of("x = 1\nx = 2\nb = 3\n", &AB),
            (vec!["x".to_owned()], [None, Some(3)])
        );
        // The first node named `a` is a section: no value (lvm2 finds the section first),
        // and a section beside a value is no duplicate.
        assert_eq!(fields_of("a {\n}\na = 1\n", &AB), (vec![], [None, None]));
    }

    #[test]
    fn keys_in_one_bucket_are_all_found() {
        // Same length, first and last byte: one bucket, two candidates.
        static SAME: Keys<3> = Keys::new(["axb", "ayb", "b"]);
        assert_eq!(bucket(b"axb"), bucket(b"ayb"));
        assert_eq!(SAME.find(b"axb"), Some(0));
        assert_eq!(SAME.find(b"ayb"), Some(1));
        assert_eq!(SAME.find(b"b"), Some(2));
        assert_eq!(SAME.find(b"azb"), None);
        assert_eq!(SAME.find(b""), None);
        assert_eq!(
            fields_of("ayb = 2\nazb = 5\naxb = 1\n", &SAME),
            (vec![], [Some(1), Some(2), None])
        );
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
