//! Docs that cannot drift: every repository path README.md and docs/*.md name exists, and
//! every kernel family (a shader in shaders/) is named in docs/ARCHITECTURE.md. No GPU needed.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown files checked: README.md and docs/*.md.
fn docs() -> Vec<PathBuf> {
    let mut v = vec![root().join("README.md")];
    for e in std::fs::read_dir(root().join("docs")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            v.push(p);
        }
    }
    v
}

/// Tokens of `text` that look like repository paths: a top-level directory of the repository
/// followed by `/` and a path. Placeholders of the "add a kernel family" steps (`x.rs`,
/// `x_ref.rs`), globs and templates are skipped.
fn paths_in(text: &str) -> Vec<String> {
    const TOP: [&str; 9] = [
        "src/",
        "tests/",
        "shaders/",
        "docs/",
        "scripts/",
        "examples/",
        "benches/",
        "web/",
        ".ci/",
    ];
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    for top in TOP {
        let mut from = 0;
        while let Some(i) = text[from..].find(top) {
            let start = from + i;
            from = start + top.len();
            // A path starts a token: not in the middle of another path or word.
            if start > 0 {
                let prev = bytes[start - 1] as char;
                if prev.is_alphanumeric()
                    || prev == '/'
                    || prev == '_'
                    || prev == '.'
                    || prev == '-'
                {
                    continue;
                }
            }
            let end = text[start..]
                .find(|c: char| !(c.is_alphanumeric() || "/_.-".contains(c)))
                .map_or(text.len(), |e| start + e);
            let mut p = text[start..end].to_string();
            while p.ends_with('.') || p.ends_with('/') && p.len() > top.len() {
                if p.ends_with('/') {
                    break;
                }
                p.pop();
            }
            let name = p.rsplit('/').next().unwrap_or("");
            let placeholder = name.starts_with("x.")
                || name.starts_with("x_")
                || p.contains("/x/")
                || text[end..].starts_with('*')
                || text[end..].starts_with('<')
                || text[end..].starts_with('{');
            if !placeholder && p.len() > top.len() {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn every_path_the_docs_name_exists() {
    let mut missing = Vec::new();
    for doc in docs() {
        let text = std::fs::read_to_string(&doc).unwrap();
        for p in paths_in(&text) {
            if !root().join(&p).exists() {
                missing.push(format!(
                    "{}: {p}",
                    doc.file_name().unwrap().to_string_lossy()
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "paths named in the docs that do not exist:\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_kernel_family_is_named_in_the_architecture_doc() {
    let arch = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let mut unnamed = Vec::new();
    for e in std::fs::read_dir(root().join("shaders")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "wgsl") {
            let file = p.file_name().unwrap().to_string_lossy().into_owned();
            if !arch.contains(&file) {
                unnamed.push(file);
            }
        }
    }
    assert!(
        unnamed.is_empty(),
        "shaders not named in docs/ARCHITECTURE.md: {unnamed:?}"
    );
}

#[test]
fn the_path_scanner_finds_paths_and_skips_placeholders() {
    let found = paths_in("see `src/ops/softmax.rs`, shaders/x.wgsl and tests/common/x_ref.rs.");
    assert_eq!(found, vec!["src/ops/softmax.rs".to_string()]);
    assert!(Path::new(&root().join("src/lib.rs")).exists());
}

/// The crate never mutates the process environment (undefined behaviour while other threads
/// read it; `set_var` is `unsafe` in Rust 2024), and neither do the tests: settings travel in
/// `DeviceOptions`, and tests of environment variables re-run their binary in a child process.
#[test]
fn nothing_mutates_the_process_environment() {
    let mut hits = Vec::new();
    for dir in ["src", "tests", "examples", "benches", "web"] {
        let mut stack = vec![root().join(dir)];
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    let text = std::fs::read_to_string(&p).unwrap();
                    // This file names the calls it looks for.
                    if p.ends_with("tests/docs.rs") {
                        continue;
                    }
                    for call in ["env::set_var(", "env::remove_var("] {
                        if text.contains(call) {
                            hits.push(format!("{}: {call}", p.display()));
                        }
                    }
                }
            }
        }
    }
    assert!(hits.is_empty(), "{hits:?}");
}
