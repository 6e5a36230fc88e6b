//! The house rules of the code, checked on the tree as it is (no root, no I/O but reading
//! the sources):
//! - no product source file over 600 lines (its tests, from the first `#[cfg(test)]`, not
//!   counted);
//! - no `thread_local!` in product code;
//! - no import cycle between the modules of a crate (`use crate::..`, `crate::a::b` paths and
//!   `super::` between siblings; a module using its own parent is its facade, not a cycle);
//! - every pointer to a section of a document (`README, "Heading"`, `docs/x.md, "Heading"`)
//!   in the sources, the manifests and CI names a file and a heading that exist.
//!
//! `ALLOWED` lists what still breaks a rule; a listed exception that no longer occurs fails
//! too, so the list only shrinks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Exceptions still to be removed, by rule and place.
const ALLOWED: &[&str] = &[];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace")
        .to_owned()
}

/// The product `.rs` files of a crate's `src/` (generated code left out).
fn sources(krate: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![root().join(krate).join("src")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("src dir").flatten() {
            let p = e.path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n != "gen") {
                    dirs.push(p);
                }
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// A file's product part: up to its first `#[cfg(test)]`.
fn product(text: &str) -> &str {
    match text.find("\n#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    }
}

fn rel(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

const CRATES: &[&str] = &["lvmeta", "lvmeta/cli", "csi-shim", "sanlock-sys"];

fn sizes(found: &mut BTreeSet<String>) {
    for k in CRATES {
        for f in sources(k) {
            let text = std::fs::read_to_string(&f).expect("source");
            if product(&text).lines().count() > 600 {
                found.insert(format!("size {}", rel(&f)));
            }
        }
    }
}

fn thread_locals(found: &mut BTreeSet<String>) {
    for k in CRATES {
        for f in sources(k) {
            let text = std::fs::read_to_string(&f).expect("source");
            if product(&text).contains("thread_local!") {
                found.insert(format!("thread_local {}", rel(&f)));
            }
        }
    }
}

/// A module's path inside its crate (`["edit", "lv"]`), from its file.
fn module_of(src: &Path, f: &Path) -> Vec<String> {
    let mut parts: Vec<String> = f
        .strip_prefix(src)
        .expect("under src")
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts
        .last()
        .is_some_and(|l| l == "mod" || l == "lib" || l == "main")
    {
        parts.pop();
    }
    parts
}

/// The paths a module names: `crate::a::b`, `super::a`, and the members of `{..}` groups.
fn named_paths(text: &str, me: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let code: String = text
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let (head, skip) = if rest.starts_with("crate::") {
            (Some(Vec::new()), "crate::".len())
        } else if rest.starts_with("super::") {
            let mut n = 0;
            let mut r = rest;
            while let Some(t) = r.strip_prefix("super::") {
                n += 1;
                r = t;
            }
            let base = me[..me.len().saturating_sub(n)].to_vec();
            (Some(base), rest.len() - r.len())
        } else {
            (None, 1)
        };
        let boundary = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        match head {
            Some(base) if boundary => {
                let tail = &code[i + skip..];
                let end = tail
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                    .unwrap_or(tail.len());
                let path: Vec<String> = tail[..end]
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect();
                let mut p = base.clone();
                p.extend(path.iter().cloned());
                out.push(p.clone());
                if tail[end..].starts_with('{') {
                    let group_end = tail[end..].find('}').map_or(tail.len(), |g| end + g);
                    for m in tail[end + 1..group_end].split(',') {
                        let m = m.split(" as ").next().unwrap_or("").trim();
                        let m = m.split('{').next().unwrap_or("").trim();
                        if !m.is_empty() && m != "self" {
                            let mut q = p.clone();
                            q.extend(m.split("::").filter(|s| !s.is_empty()).map(str::to_owned));
                            out.push(q);
                        }
                    }
                }
                i += skip + end;
            }
            _ => i += skip,
        }
    }
    out
}

fn cycles(found: &mut BTreeSet<String>) {
    for k in CRATES {
        let src = root().join(k).join("src");
        let files: BTreeMap<Vec<String>, PathBuf> = sources(k)
            .into_iter()
            .filter(|f| !f.starts_with(src.join("bin")))
            .map(|f| (module_of(&src, &f), f))
            .collect();
        let resolve = |p: &[String]| -> Option<Vec<String>> {
            (1..=p.len())
                .rev()
                .map(|n| p[..n].to_vec())
                .find(|m| files.contains_key(m))
        };
        let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
        for (m, f) in &files {
            let text = std::fs::read_to_string(f).expect("source");
            for p in named_paths(product(&text), m) {
                if let Some(t) = resolve(&p) {
                    // Not itself, not the crate root, not one of its ancestors (its facade).
                    if &t != m && !t.is_empty() && !m.starts_with(&t) {
                        edges.entry(m.clone()).or_default().insert(t);
                    }
                }
            }
        }
        for comp in strongly_connected(&edges) {
            let names: Vec<String> = comp.iter().map(|m| m.join("/")).collect();
            found.insert(format!("cycle {k}: {}", names.join(" ")));
        }
    }
}

/// Tarjan's strongly connected components of more than one module, each sorted.
fn strongly_connected(
    edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
) -> Vec<BTreeSet<Vec<String>>> {
    struct State<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<Vec<String>, usize>,
        low: BTreeMap<Vec<String>, usize>,
        stack: Vec<Vec<String>>,
        on: BTreeSet<Vec<String>>,
        out: Vec<BTreeSet<Vec<String>>>,
    }
    fn visit(s: &mut State<'_>, v: &Vec<String>) {
        let n = s.index.len();
        s.index.insert(v.clone(), n);
        s.low.insert(v.clone(), n);
        s.stack.push(v.clone());
        s.on.insert(v.clone());
        let next: Vec<Vec<String>> = s
            .edges
            .get(v)
            .map(|e| e.iter().cloned().collect())
            .unwrap_or_default();
        for w in next {
            if !s.index.contains_key(&w) {
                visit(s, &w);
                let lw = s.low[&w];
                let lv = s.low[v];
                s.low.insert(v.clone(), lv.min(lw));
            } else if s.on.contains(&w) {
                let iw = s.index[&w];
                let lv = s.low[v];
                s.low.insert(v.clone(), lv.min(iw));
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = BTreeSet::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(&w);
                let done = &w == v;
                comp.insert(w);
                if done {
                    break;
                }
            }
            if comp.len() > 1 {
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.out
}

/// The headings of a markdown file, as written after their `#`s.
fn headings(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| l.trim_start_matches('#').trim().to_owned())
        .collect()
}

/// Every `FILE, "Heading"` pointer (FILE: README, README.md, docs/x.md, deploy/README.md)
/// in the sources, manifests and CI, with where it is.
fn pointers(found: &mut BTreeSet<String>) {
    let mut files: Vec<PathBuf> = CRATES.iter().flat_map(|k| sources(k)).collect();
    files.extend(sources("tests"));
    let mut dirs = vec![root().join("deploy")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).expect("deploy").flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "yaml") {
                files.push(p);
            }
        }
    }
    files.push(root().join(".ci/run"));
    files.push(root().join("Containerfile"));
    for f in files {
        let text = std::fs::read_to_string(&f)
            .unwrap_or_default()
            .replace("\\\"", "\"");
        for (at, _) in text.match_indices(", \"") {
            let before = &text[..at];
            let doc = before
                .rsplit(|c: char| c.is_whitespace() || c == '(')
                .next()
                .unwrap_or("");
            let target = match doc {
                "README" | "README.md" => root().join("README.md"),
                d if d.ends_with(".md") => root().join(d),
                _ => continue,
            };
            let rest = &text[at + 3..];
            let Some(end) = rest.find('"') else { continue };
            // A heading wrapped over comment lines is read as one line.
            let heading = rest[..end]
                .lines()
                .map(|l| l.trim().trim_start_matches("//!").trim_start_matches("//"))
                .map(|l| l.trim_start_matches('#').trim())
                .collect::<Vec<_>>()
                .join(" ");
            if !target.exists() || !headings(&target).contains(&heading) {
                found.insert(format!("pointer {} -> {doc}, \"{heading}\"", rel(&f)));
            }
        }
    }
}

#[test]
fn the_tree_keeps_the_house_rules() {
    let mut found = BTreeSet::new();
    sizes(&mut found);
    thread_locals(&mut found);
    cycles(&mut found);
    pointers(&mut found);
    let allowed: BTreeSet<String> = ALLOWED.iter().map(|s| (*s).to_owned()).collect();
    let new: Vec<&String> = found.iter().filter(|f| !allowed.contains(*f)).collect();
    let gone: Vec<&String> = allowed.iter().filter(|a| !found.contains(*a)).collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "house rules broken (not in ALLOWED): {new:#?}\nin ALLOWED but no longer so (remove them): {gone:#?}"
    );
}
