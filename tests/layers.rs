//! The module trees are DAGs: the core's and each provider's.
//!
//! For every directory of a crate's `src/`, its child modules (files and folders) are
//! the nodes; a child imports a sibling when code in its subtree names the sibling by
//! a `crate::` path or, from the child itself, by `super::`. Comments are ignored
//! (documentation links do not make a dependency). A cycle fails the test with the
//! modules on it and a file that makes each edge.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// A crate's modules: path (as `a::b`) -> the files under it.
struct Crate {
    files: Vec<(Vec<String>, String)>,
}

fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    let stem = last.trim_end_matches(".rs");
    if stem != "mod" && stem != "lib" && stem != "main" {
        parts.push(stem.to_string());
    }
    parts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The source without comments (line comments, doc comments, block comments); string
/// literals are kept, which at worst adds an edge.
fn strip_comments(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            i += 2;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

impl Crate {
    fn load(src: &Path) -> Crate {
        let mut paths = Vec::new();
        rust_files(src, &mut paths);
        let files = paths
            .iter()
            .map(|p| {
                let text = fs::read_to_string(p).unwrap();
                (module_path(src, p), strip_comments(&text))
            })
            .collect();
        Crate { files }
    }

    /// Every module path that exists.
    fn modules(&self) -> BTreeSet<Vec<String>> {
        self.files.iter().map(|(m, _)| m.clone()).collect()
    }

    /// Paths named in `text`, resolved to absolute module paths (longest existing
    /// prefix), from a file of module `at`.
    fn references(&self, at: &[String], text: &str) -> Vec<Vec<String>> {
        let mods = self.modules();
        let mut refs = Vec::new();
        for start in ["crate::", "super::", "self::"] {
            let mut from = 0;
            while let Some(k) = text[from..].find(start) {
                let pos = from + k;
                from = pos + start.len();
                // Only whole path starts (not `foo_crate::`).
                if pos > 0 {
                    let prev = text.as_bytes()[pos - 1];
                    if prev.is_ascii_alphanumeric() || prev == b'_' {
                        continue;
                    }
                }
                let base: Vec<String> = match start {
                    "crate::" => Vec::new(),
                    "super::" => at[..at.len().saturating_sub(1)].to_vec(),
                    _ => at.to_vec(),
                };
                for target in expand(&text[from..]) {
                    let mut path = base.clone();
                    for seg in target {
                        if seg == "super" {
                            path.pop();
                        } else {
                            path.push(seg);
                        }
                    }
                    // The longest prefix that is a module.
                    while !path.is_empty() && !mods.contains(&path) {
                        path.pop();
                    }
                    refs.push(path);
                }
            }
        }
        refs
    }
}

/// The paths after `crate::` / `super::`: `a::b::{c, d::{e}}` gives `a::b::c`,
/// `a::b::d::e`; identifiers only, so it stops at the first other character.
fn expand(s: &str) -> Vec<Vec<String>> {
    struct P<'a> {
        b: &'a [u8],
        i: usize,
    }
    impl P<'_> {
        fn ws(&mut self) {
            while self.i < self.b.len() && self.b[self.i].is_ascii_whitespace() {
                self.i += 1;
            }
        }
        fn eat(&mut self, t: &[u8]) -> bool {
            self.ws();
            if self.b[self.i..].starts_with(t) {
                self.i += t.len();
                true
            } else {
                false
            }
        }
        fn ident(&mut self) -> String {
            self.ws();
            let st = self.i;
            while self.i < self.b.len()
                && (self.b[self.i].is_ascii_alphanumeric() || self.b[self.i] == b'_')
            {
                self.i += 1;
            }
            String::from_utf8_lossy(&self.b[st..self.i]).into_owned()
        }
        /// One path (or group) under `prefix`.
        fn path(&mut self, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
            if self.eat(b"{") {
                loop {
                    if self.eat(b"}") {
                        return;
                    }
                    let before = self.i;
                    self.path(prefix.clone(), out);
                    if self.eat(b",") {
                        continue;
                    }
                    if !self.eat(b"}") && self.i == before {
                        return; // not a path: stop
                    }
                    if self.i == before {
                        return;
                    }
                    // After a closing brace the group is done.
                    if self.b[..self.i].ends_with(b"}") {
                        return;
                    }
                }
            }
            let id = self.ident();
            if id.is_empty() {
                if !prefix.is_empty() {
                    out.push(prefix);
                }
                return;
            }
            let mut p = prefix;
            p.push(id);
            if self.b[self.i..].starts_with(b"::") {
                self.i += 2;
                self.path(p, out);
            } else {
                // `as x` renames and the rest of the item do not matter.
                out.push(p);
                self.skip_rename();
            }
        }
        fn skip_rename(&mut self) {
            let save = self.i;
            if self.eat(b"as") && self.b.get(self.i).is_some_and(|c| c.is_ascii_whitespace()) {
                self.ident();
            } else {
                self.i = save;
            }
        }
    }
    let mut out = Vec::new();
    P {
        b: s.as_bytes(),
        i: 0,
    }
    .path(Vec::new(), &mut out);
    out
}

/// Sibling edges per directory: parent -> (child -> (sibling -> a file making it)).
type Edges = BTreeMap<Vec<String>, BTreeMap<String, BTreeMap<String, String>>>;

fn sibling_edges(c: &Crate, name: &str) -> Edges {
    let mut edges: Edges = BTreeMap::new();
    for (at, text) in &c.files {
        for target in c.references(at, text) {
            // The deepest common ancestor of `at` and `target`: both below it in
            // different children make a sibling edge between those children.
            let common = at.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common >= at.len() || common >= target.len() {
                continue; // an ancestor or descendant: not a sibling
            }
            let parent = at[..common].to_vec();
            let from = at[common].clone();
            let to = target[common].clone();
            edges
                .entry(parent)
                .or_default()
                .entry(from)
                .or_default()
                .entry(to)
                .or_insert_with(|| format!("{name}::{}", at.join("::")));
        }
    }
    edges
}

/// A cycle among the children of one directory, if any, as the modules on it.
fn find_cycle(g: &BTreeMap<String, BTreeMap<String, String>>) -> Option<Vec<String>> {
    fn dfs(
        v: &str,
        g: &BTreeMap<String, BTreeMap<String, String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(v.to_string(), 1);
        stack.push(v.to_string());
        for w in g
            .get(v)
            .map(|m| m.keys().cloned().collect::<Vec<_>>())
            .unwrap_or_default()
        {
            match state.get(&w).copied().unwrap_or(0) {
                1 => {
                    let i = stack.iter().position(|x| *x == w).unwrap();
                    let mut cyc = stack[i..].to_vec();
                    cyc.push(w);
                    return Some(cyc);
                }
                0 => {
                    if let Some(c) = dfs(&w, g, state, stack) {
                        return Some(c);
                    }
                }
                _ => {}
            }
        }
        stack.pop();
        state.insert(v.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for v in g.keys() {
        if state.get(v).copied().unwrap_or(0) == 0 {
            if let Some(c) = dfs(v, g, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

fn check(dir: &str, name: &str) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let c = Crate::load(&root);
    let mut problems = Vec::new();
    for (parent, g) in sibling_edges(&c, name) {
        if let Some(cyc) = find_cycle(&g) {
            let steps: Vec<String> = cyc
                .windows(2)
                .map(|w| format!("{} -> {} (in {})", w[0], w[1], g[&w[0]][&w[1]]))
                .collect();
            problems.push(format!(
                "{name}::{}: import cycle: {}",
                parent.join("::"),
                steps.join(", ")
            ));
        }
    }
    problems
}

#[test]
fn module_trees_are_acyclic() {
    let mut problems = Vec::new();
    for (dir, name) in [
        ("src", "fabric"),
        ("providers/loopback/src", "fabric_loopback"),
        ("providers/shm/src", "fabric_shm"),
        ("providers/tcp/src", "fabric_tcp"),
        ("providers/hybrid/src", "fabric_hybrid"),
        ("macros/src", "fabric_macros"),
        ("plugin/src", "fabric_ofi"),
    ] {
        problems.extend(check(dir, name));
    }
    assert!(problems.is_empty(), "\n{}", problems.join("\n"));
}

#[test]
fn the_checker_sees_a_cycle_and_resolves_groups() {
    assert_eq!(
        expand("a::{b, c::{d, e}}, x"),
        vec![
            vec!["a".to_string(), "b".into()],
            vec!["a".to_string(), "c".into(), "d".into()],
            vec!["a".to_string(), "c".into(), "e".into()],
        ]
    );
    let c = Crate {
        files: vec![
            (vec!["x".into()], "use crate::y::Thing;".into()),
            (vec!["y".into()], "fn f() { crate::z::g() }".into()),
            (vec!["z".into()], "use super::x;".into()),
            (vec!["z".into(), "w".into()], "use super::super::y;".into()),
        ],
    };
    let e = sibling_edges(&c, "t");
    let cyc = find_cycle(&e[&Vec::<String>::new()]).expect("x -> y -> z -> x");
    assert_eq!(cyc.len(), 4, "{cyc:?}");
    assert!(
        strip_comments("a // crate::b\n/* crate::c */ d").trim() == "a \n d",
        "comments are not dependencies"
    );
}
