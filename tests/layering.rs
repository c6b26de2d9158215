//! The architecture's rules, checked on the source (docs/ARCHITECTURE.md, "Layers"):
//! - no import circle between files, nor between folders;
//! - each folder imports only the layers it may (schedule and inputs nothing else, sim only
//!   schedule, cost only inputs, plan never report, nothing in the library the CLI);
//! - no source file over 1,000 lines; `main.rs` under 200.
//!
//! A file's imports are the `crate::…` paths it names (in `use` items and in code; comments are
//! skipped), `pplan::…` paths in the binary's files, and `use child::…` / top-level
//! `use super::…` inside a folder. Each path resolves to the file of its longest module prefix.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Which folders each folder may import (besides itself). `lib` is `src/lib.rs` (root
/// re-exports only), `bin` is `src/main.rs` with `src/cli/`.
const ALLOWED: &[(&str, &[&str])] = &[
    ("schedule", &[]),
    ("inputs", &[]),
    ("sim", &["schedule"]),
    ("cost", &["inputs"]),
    ("measured", &["schedule"]),
    ("plan", &["schedule", "inputs", "sim", "cost", "measured"]),
    (
        "report",
        &["schedule", "inputs", "sim", "cost", "plan", "measured"],
    ),
    (
        "runs",
        &[
            "schedule", "inputs", "sim", "cost", "plan", "measured", "report",
        ],
    ),
    (
        "lib",
        &[
            "schedule", "inputs", "sim", "cost", "measured", "plan", "report", "runs",
        ],
    ),
    (
        "bin",
        &[
            "schedule", "inputs", "sim", "cost", "measured", "plan", "report", "runs", "lib",
        ],
    ),
];

const MAX_FILE_LINES: usize = 1000;
const MAX_MAIN_LINES: usize = 200;

/// A source file: its module path from its crate's root and whether it belongs to the binary.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Module {
    bin: bool,
    path: Vec<String>,
}

impl Module {
    fn of(rel: &Path) -> Module {
        let parts: Vec<String> = rel
            .iter()
            .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
            .collect();
        let bin = parts[0] == "main" || parts[0] == "cli";
        let mut path: Vec<String> = parts
            .into_iter()
            .filter(|p| p != "mod" && p != "lib" && p != "main")
            .collect();
        if path.is_empty() {
            path = vec![];
        }
        Module { bin, path }
    }

    /// The layer folder: the first path segment, `lib` for the library root, `bin` for the CLI.
    fn folder(&self) -> String {
        match (self.bin, self.path.first()) {
            (true, _) => "bin".into(),
            (false, None) => "lib".into(),
            (false, Some(f)) => f.clone(),
        }
    }

    fn name(&self) -> String {
        let root = if self.bin { "bin" } else { "crate" };
        std::iter::once(root.to_string())
            .chain(self.path.iter().cloned())
            .collect::<Vec<_>>()
            .join("::")
    }
}

/// Code without comments or string literals (so that `crate::` in text is not an import).
fn code_lines(text: &str) -> Vec<String> {
    text.lines()
        .map(|line| {
            let mut out = String::new();
            let mut in_str = false;
            let mut chars = line.chars().peekable();
            while let Some(c) = chars.next() {
                if in_str {
                    if c == '\\' {
                        chars.next();
                    } else if c == '"' {
                        in_str = false;
                    }
                    continue;
                }
                if c == '"' {
                    in_str = true;
                    out.push_str("\"\"");
                    continue;
                }
                if c == '/' && chars.peek() == Some(&'/') {
                    break;
                }
                out.push(c);
            }
            out
        })
        .collect()
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Every path that follows `prefix` (`crate::`, `pplan::`, ...) in `line`, with one level of
/// `{a, b::c}` groups expanded.
fn paths_after(line: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(i) = rest.find(prefix) {
        let before_ok = rest[..i]
            .chars()
            .last()
            .is_none_or(|c| !is_ident(c) && c != ':');
        let after = &rest[i + prefix.len()..];
        rest = after;
        if !before_ok {
            continue;
        }
        let mut segs = Vec::new();
        let mut s = after;
        loop {
            let end = s.find(|c: char| !is_ident(c)).unwrap_or(s.len());
            if end == 0 {
                break;
            }
            segs.push(s[..end].to_string());
            s = &s[end..];
            if let Some(t) = s.strip_prefix("::") {
                s = t;
            } else {
                break;
            }
        }
        if let Some(group) = s.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                let first: String = item.trim().chars().take_while(|&c| is_ident(c)).collect();
                if !first.is_empty() && first != "self" {
                    let mut p = segs.clone();
                    p.push(first);
                    out.push(p);
                }
            }
        }
        out.push(segs);
    }
    out
}

/// The import graph: for each file, the files it names.
fn graph(files: &[(PathBuf, String)]) -> BTreeMap<Module, BTreeSet<Module>> {
    let modules: BTreeSet<Module> = files.iter().map(|(p, _)| Module::of(p)).collect();
    // The file a path names: its longest prefix that is a module of that crate.
    let resolve = |bin: bool, path: &[String]| -> Option<Module> {
        (0..=path.len()).rev().find_map(|n| {
            let m = Module {
                bin,
                path: path[..n].to_vec(),
            };
            modules.contains(&m).then_some(m)
        })
    };
    let mut g = BTreeMap::new();
    for (rel, text) in files {
        let me = Module::of(rel);
        let mut deps = BTreeSet::new();
        let is_folder_root =
            rel.ends_with("mod.rs") || rel.ends_with("lib.rs") || rel.ends_with("main.rs");
        for line in code_lines(text) {
            let mut targets: Vec<(bool, Vec<String>)> = paths_after(&line, "crate::")
                .into_iter()
                .map(|p| (me.bin, p))
                .collect();
            if me.bin {
                targets.extend(
                    paths_after(&line, "pplan::")
                        .into_iter()
                        .map(|p| (false, p)),
                );
            }
            // A top-level `use super::x` in a folder's file names a sibling (or the folder).
            if !line.starts_with(char::is_whitespace) && !me.path.is_empty() {
                let parent = &me.path[..me.path.len() - 1];
                for p in paths_after(&line, "super::") {
                    targets.push((me.bin, parent.iter().cloned().chain(p).collect()));
                }
            }
            // `use child::x` (a re-export) in a folder's root names the child's file.
            if is_folder_root {
                let t = line.trim_start();
                let t = t.strip_prefix("pub ").unwrap_or(t);
                if let Some(u) = t.strip_prefix("use ") {
                    for p in paths_after(&format!(" {u}"), " ") {
                        targets.push((me.bin, me.path.iter().cloned().chain(p).collect()));
                    }
                }
            }
            for (bin, p) in targets {
                if let Some(m) = resolve(bin, &p) {
                    if m != me {
                        deps.insert(m);
                    }
                }
            }
        }
        g.insert(me, deps);
    }
    g
}

/// A cycle in `g`, if there is one, as the list of its nodes.
fn find_cycle<N: Ord + Clone>(g: &BTreeMap<N, BTreeSet<N>>) -> Option<Vec<N>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    fn visit<N: Ord + Clone>(
        n: &N,
        g: &BTreeMap<N, BTreeSet<N>>,
        mark: &mut BTreeMap<N, Mark>,
        stack: &mut Vec<N>,
    ) -> Option<Vec<N>> {
        match mark.get(n).copied().unwrap_or(Mark::New) {
            Mark::Done => return None,
            Mark::Open => {
                let at = stack.iter().position(|s| s == n).unwrap_or(0);
                return Some(stack[at..].to_vec());
            }
            Mark::New => {}
        }
        mark.insert(n.clone(), Mark::Open);
        stack.push(n.clone());
        for d in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(d, g, mark, stack) {
                return Some(c);
            }
        }
        stack.pop();
        mark.insert(n.clone(), Mark::Done);
        None
    }
    let mut mark = BTreeMap::new();
    g.keys()
        .find_map(|n| visit(n, g, &mut mark, &mut Vec::new()))
}

/// Every rule the architecture states, as a list of violations (empty: all hold).
fn violations(files: &[(PathBuf, String)]) -> Vec<String> {
    let mut out = Vec::new();
    let g = graph(files);
    if let Some(c) = find_cycle(&g) {
        let names: Vec<String> = c.iter().map(Module::name).collect();
        out.push(format!(
            "import circle between files: {} -> {}",
            names.join(" -> "),
            names[0]
        ));
    }
    let mut folders: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, deps) in &g {
        let f = m.folder();
        let entry = folders.entry(f.clone()).or_default();
        for d in deps {
            if d.folder() != f {
                entry.insert(d.folder());
            }
        }
    }
    if let Some(c) = find_cycle(&folders) {
        out.push(format!(
            "import circle between folders: {} -> {}",
            c.join(" -> "),
            c[0]
        ));
    }
    let allowed: BTreeMap<&str, &[&str]> = ALLOWED.iter().copied().collect();
    for (m, deps) in &g {
        let f = m.folder();
        let Some(ok) = allowed.get(f.as_str()) else {
            out.push(format!("{}: folder '{f}' is not on the map (tests/layering.rs ALLOWED, docs/ARCHITECTURE.md)", m.name()));
            continue;
        };
        for d in deps {
            let df = d.folder();
            if df != f && !ok.contains(&df.as_str()) {
                out.push(format!(
                    "{} imports {}: '{f}' may import only {ok:?}",
                    m.name(),
                    d.name()
                ));
            }
        }
    }
    for (rel, text) in files {
        let n = text.lines().count();
        if n > MAX_FILE_LINES {
            out.push(format!(
                "src/{}: {n} lines (at most {MAX_FILE_LINES})",
                rel.display()
            ));
        }
        if rel == Path::new("main.rs") && n >= MAX_MAIN_LINES {
            out.push(format!(
                "src/main.rs: {n} lines (under {MAX_MAIN_LINES}: it only parses and dispatches)"
            ));
        }
    }
    out
}

fn source_files() -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, root: &Path, out: &mut Vec<(PathBuf, String)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, root, out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                out.push((p.strip_prefix(root).unwrap().to_path_buf(), text));
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    out
}

#[test]
fn the_source_keeps_the_architectures_rules() {
    let files = source_files();
    assert!(files.len() > 20, "found only {} source files", files.len());
    let v = violations(&files);
    assert!(v.is_empty(), "architecture rules broken:\n{}", v.join("\n"));
}

#[test]
fn the_checker_resolves_the_real_layers() {
    // The map the checker builds from the real source has the edges the architecture draws,
    // so a checker that saw nothing could not pass the test above.
    let g = graph(&source_files());
    let m = |s: &str| Module::of(Path::new(s));
    let deps = |s: &str| g.get(&m(s)).cloned().unwrap_or_default();
    assert!(deps("sim.rs").contains(&m("schedule/ir.rs")));
    assert!(deps("plan/predict/step.rs").contains(&m("cost/mod.rs")));
    assert!(deps("cost/mod.rs").contains(&m("cost/stack.rs")));
    assert!(deps("cli/predict.rs").contains(&m("plan/predict/mod.rs")));
    assert!(deps("cli/predict.rs").contains(&m("cli/common/mod.rs")));
}

fn fake(files: &[(&str, &str)]) -> Vec<(PathBuf, String)> {
    files
        .iter()
        .map(|(p, t)| (PathBuf::from(p), t.to_string()))
        .collect()
}

#[test]
fn a_circle_between_files_is_found_and_named() {
    let v = violations(&fake(&[
        ("lib.rs", "pub mod plan;\n"),
        ("plan/mod.rs", "pub mod a;\npub mod b;\n"),
        ("plan/a.rs", "use crate::plan::b::X;\n"),
        (
            "plan/b.rs",
            "// crate::plan::c in a comment is not an import\nfn f() { crate::plan::a::g() }\n",
        ),
    ]));
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].contains("crate::plan::a -> crate::plan::b -> crate::plan::a"),
        "{v:?}"
    );
}

#[test]
fn a_wrong_way_import_and_a_long_file_are_found() {
    let long = format!(
        "use crate::schedule::Action;\n{}",
        "fn f() {}\n".repeat(MAX_FILE_LINES)
    );
    let v = violations(&fake(&[
        ("lib.rs", "pub mod schedule;\npub mod plan;\n"),
        ("schedule/mod.rs", "use crate::plan::{predict, Plan};\n"),
        ("plan/mod.rs", &long),
    ]));
    assert!(
        v.iter()
            .any(|s| s.contains("crate::schedule imports crate::plan")),
        "{v:?}"
    );
    assert!(
        v.iter()
            .any(|s| s.contains("import circle between folders")),
        "{v:?}"
    );
    assert!(
        v.iter().any(|s| s.contains("src/plan/mod.rs: 1001 lines")),
        "{v:?}"
    );
}
