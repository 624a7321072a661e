//! The module import graph of `src/`: no cycles between files (a file pair importing each other
//! included), and the runtime reaches nothing above it (`src/ops`, `src/nn`, `src/optim`,
//! `src/autograd`). A file's imports are the `crate::` / `super::` / `self::` paths it names
//! outside its test module, each resolved to the longest module prefix that is a file of `src/` (a name
//! re-exported by a parent counts as the parent's; a parent's `mod` items and its relative
//! paths into its own children are not imports).
#![cfg(not(target_arch = "wasm32"))]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// `src/ops/conv/mod.rs` -> `["ops", "conv"]`, `src/lib.rs` -> `[]`.
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts
}

/// The code of a file without comments and without its `#[cfg(test)]` module.
fn code(text: &str) -> String {
    let cut = text.find("#[cfg(test)]\nmod ").unwrap_or(text.len());
    text[..cut]
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every path starting at a `crate`, `super` or `self` keyword, as segments; a brace group
/// (`use crate::{a, b::c}`) gives one path per item.
fn paths(code: &str) -> Vec<Vec<String>> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts = ["crate::", "super::", "self::"]
            .iter()
            .find(|k| code_at(&chars, i, k) && (i == 0 || !is_ident(chars[i - 1])));
        let Some(_) = starts else {
            i += 1;
            continue;
        };
        let mut segs = Vec::new();
        let mut j = i;
        loop {
            let start = j;
            while j < chars.len() && is_ident(chars[j]) {
                j += 1;
            }
            segs.push(chars[start..j].iter().collect::<String>());
            if code_at(&chars, j, "::") {
                j += 2;
                if j < chars.len() && chars[j] == '{' {
                    let end = chars[j..]
                        .iter()
                        .position(|&c| c == '}')
                        .map_or(chars.len(), |e| j + e);
                    let group: String = chars[j + 1..end].iter().collect();
                    for item in group.split(',') {
                        let first = item
                            .trim()
                            .split("::")
                            .next()
                            .unwrap_or("")
                            .trim_matches('{');
                        let first = first.split_whitespace().next().unwrap_or("");
                        if !first.is_empty() {
                            let mut p = segs.clone();
                            p.push(first.to_string());
                            out.push(p);
                        }
                    }
                    segs.clear();
                    j = end;
                    break;
                }
                continue;
            }
            break;
        }
        if !segs.is_empty() {
            out.push(segs);
        }
        i = j.max(i + 1);
    }
    out
}

fn code_at(chars: &[char], i: usize, s: &str) -> bool {
    s.chars()
        .enumerate()
        .all(|(k, c)| chars.get(i + k) == Some(&c))
}

struct Graph {
    edges: BTreeMap<String, BTreeSet<String>>,
}

fn graph() -> Graph {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeMap<Vec<String>, String> = files
        .iter()
        .map(|f| {
            let name = f.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
            (module_of(&src, f), name)
        })
        .collect();
    let mut edges = BTreeMap::new();
    for f in &files {
        let me = module_of(&src, f);
        let name = f.strip_prefix(&src).unwrap().to_string_lossy().into_owned();
        // `super` of foo.rs is its directory's module; of foo/mod.rs, the parent's.
        let mut deps = BTreeSet::new();
        for p in paths(&code(&std::fs::read_to_string(f).unwrap())) {
            let (mut base, mut rest) = (Vec::new(), &p[..]);
            match p[0].as_str() {
                "crate" => rest = &p[1..],
                "self" => {
                    base = me.clone();
                    rest = &p[1..];
                }
                _ => {
                    base = me.clone();
                    while rest.first().map(String::as_str) == Some("super") {
                        base.pop();
                        rest = &rest[1..];
                    }
                }
            }
            let full: Vec<String> = base.iter().chain(rest).cloned().collect();
            if let Some(target) = (0..=full.len()).rev().find_map(|k| modules.get(&full[..k])) {
                if *target != name {
                    deps.insert(target.clone());
                }
            }
        }
        edges.insert(name, deps);
    }
    Graph { edges }
}

/// A cycle through the graph, if any (depth-first search with colours).
fn find_cycle(g: &Graph) -> Option<Vec<String>> {
    fn visit(
        g: &Graph,
        v: &str,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(v.to_string(), 1);
        stack.push(v.to_string());
        for w in g.edges.get(v).into_iter().flatten() {
            match state.get(w.as_str()) {
                Some(1) => {
                    let at = stack.iter().position(|s| s == w).unwrap();
                    let mut c = stack[at..].to_vec();
                    c.push(w.clone());
                    return Some(c);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(g, w, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(v.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for v in g.edges.keys() {
        if !state.contains_key(v) {
            if let Some(c) = visit(g, v, &mut state, &mut Vec::new()) {
                return Some(c);
            }
        }
    }
    None
}

#[test]
fn no_import_cycles_between_files() {
    let g = graph();
    assert!(g.edges.len() > 50, "scanned {} files", g.edges.len());
    if let Some(c) = find_cycle(&g) {
        panic!("import cycle: {}", c.join(" -> "));
    }
}

#[test]
fn the_runtime_imports_nothing_above_it() {
    let g = graph();
    for (from, deps) in &g.edges {
        if from.starts_with("runtime/") {
            for d in deps {
                assert!(
                    !["ops/", "nn/", "optim/", "autograd/"]
                        .iter()
                        .any(|up| d.starts_with(up)),
                    "{from} imports {d}"
                );
            }
        }
    }
}

/// The scanner sees plain paths, brace groups and `super` chains, and the cycle finder finds a
/// planted cycle (so the two tests above can fail).
#[test]
fn the_scanner_and_cycle_finder_work() {
    let p =
        paths("use crate::ops::{gemm::run, conv};\nlet x = super::super::layout::Layout::new();");
    assert!(
        p.contains(&vec!["crate".into(), "ops".into(), "gemm".into()]),
        "{p:?}"
    );
    assert!(
        p.contains(&vec!["crate".into(), "ops".into(), "conv".into()]),
        "{p:?}"
    );
    assert!(p.iter().any(|s| s[..2] == ["super", "super"]), "{p:?}");
    let mut edges = BTreeMap::new();
    edges.insert("a.rs".to_string(), BTreeSet::from(["b.rs".to_string()]));
    edges.insert("b.rs".to_string(), BTreeSet::from(["a.rs".to_string()]));
    assert!(find_cycle(&Graph { edges }).is_some());
    let g = graph();
    let kernel = &g.edges["ops/attention/kernel.rs"];
    assert!(kernel.contains("ops/attention/mod.rs"), "{kernel:?}");
    assert!(kernel.contains("autograd/mod.rs"), "{kernel:?}");
}
