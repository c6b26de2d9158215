//! The architecture's rules, checked on the source (docs/ARCHITECTURE.md, "Layers"):
//! - no import circle between files, nor between folders, in `src/` and in `executor/src/`
//!   (each crate its own graph; [`ALLOWED_CIRCLES`] lists the known exceptions, each with why);
//! - each folder of `src/` imports only the layers it may (schedule and inputs nothing else, sim
//!   only schedule, cost only inputs, plan never report, nothing in the library the CLI);
//! - no source file over 1,000 lines, in either crate; `src/main.rs` under 200.
//!
//! A file's imports are the paths it names, in `use` items and anywhere in code (function
//! bodies included; comments, strings and char literals are skipped): `crate::…`, the library's
//! name (`pplan::…`, `pplan_exec::…`) in a binary's files, `super::…` (any number of `super`s,
//! counted from the inline `mod` the line sits in, so `use super::*` in `mod tests` is the file
//! itself), and `use child::…` in a folder's root. Each path resolves to the file of its longest
//! module prefix.

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

/// Code without comments, string or char literals (so that `crate::` in text is not an import),
/// line by line: strings and block comments may span lines; each literal becomes `""`.
fn code_lines(text: &str) -> Vec<String> {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    // Copies the newlines inside a skipped span, so that lines keep their numbers.
    let keep_newlines = |span: &[char], out: &mut String| {
        out.extend(span.iter().filter(|&&ch| ch == '\n'));
    };
    while i < c.len() {
        let at = |k: usize| c.get(i + k).copied();
        if c[i] == '/' && at(1) == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && at(1) == Some('*') {
            let (from, mut depth) = (i, 0);
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            keep_newlines(&c[from..i.min(c.len())], &mut out);
        } else if (c[i] == 'r' || (c[i] == 'b' && at(1) == Some('r')))
            && (i == 0 || !is_ident(c[i - 1]))
            && {
                let r = if c[i] == 'b' { i + 2 } else { i + 1 };
                let hashes = c[r..].iter().take_while(|&&ch| ch == '#').count();
                c.get(r + hashes) == Some(&'"')
            }
        {
            // A raw string: r"…", r#"…"#, br"…".
            let r = if c[i] == 'b' { i + 2 } else { i + 1 };
            let hashes = c[r..].iter().take_while(|&&ch| ch == '#').count();
            let from = i;
            i = r + hashes + 1;
            while i < c.len() {
                if c[i] == '"' && c[i + 1..].iter().take_while(|&&ch| ch == '#').count() >= hashes {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
            out.push_str("\"\"");
            keep_newlines(&c[from..i.min(c.len())], &mut out);
        } else if c[i] == '"' {
            let from = i;
            i += 1;
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
            keep_newlines(&c[from..i.min(c.len())], &mut out);
        } else if c[i] == '\'' && at(1) == Some('\\') {
            // An escaped char literal: '\n', '\'', '\u{7f}'.
            i += 2;
            while i < c.len() && c[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else if c[i] == '\'' && at(2) == Some('\'') {
            i += 3;
            out.push_str("' '");
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out.lines().map(str::to_string).collect()
}

/// For each code line, how many inline `mod name {` blocks it sits in (0 at a file's top).
fn inline_mod_depths(lines: &[String]) -> Vec<usize> {
    let mut depth = 0usize;
    let mut opened: Vec<usize> = Vec::new();
    let mut out = Vec::with_capacity(lines.len());
    for line in lines {
        let t = line.trim_start();
        let t = t.strip_prefix("pub ").or_else(|| {
            t.strip_prefix("pub(")
                .and_then(|r| r.find(')').map(|e| r[e + 1..].trim_start()))
        });
        let t = t.unwrap_or(line.trim_start());
        if let Some(rest) = t.strip_prefix("mod ") {
            let name_end = rest.find(|ch: char| !is_ident(ch)).unwrap_or(rest.len());
            if name_end > 0 && rest[name_end..].trim_start().starts_with('{') {
                opened.push(depth);
            }
        }
        out.push(opened.len());
        for ch in line.chars() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if opened.last() == Some(&depth) {
                        opened.pop();
                    }
                }
                _ => {}
            }
        }
    }
    out
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

/// The import graph of one crate: for each file, the files it names. `lib` is the crate's
/// library name, as its binary's files write it (`pplan`, `pplan_exec`).
fn graph(files: &[(PathBuf, String)], lib: &str) -> BTreeMap<Module, BTreeSet<Module>> {
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
    let lib_prefix = format!("{lib}::");
    let mut g = BTreeMap::new();
    for (rel, text) in files {
        let me = Module::of(rel);
        let mut deps = BTreeSet::new();
        let is_folder_root =
            rel.ends_with("mod.rs") || rel.ends_with("lib.rs") || rel.ends_with("main.rs");
        let lines = code_lines(text);
        let inline = inline_mod_depths(&lines);
        for (line, &inline) in lines.iter().zip(&inline) {
            let mut targets: Vec<(bool, Vec<String>)> = paths_after(line, "crate::")
                .into_iter()
                .map(|p| (me.bin, p))
                .collect();
            if me.bin {
                targets.extend(
                    paths_after(line, &lib_prefix)
                        .into_iter()
                        .map(|p| (false, p)),
                );
            }
            // `super::…` anywhere: each `super` one module up, the first `inline` of them
            // leaving the inline `mod` blocks the line sits in (those stay in this file).
            for p in paths_after(line, "super::") {
                let ups = 1 + p.iter().take_while(|s| *s == "super").count();
                let rest: Vec<String> = p.into_iter().skip_while(|s| s == "super").collect();
                if ups <= inline || ups - inline > me.path.len() {
                    continue;
                }
                let base = &me.path[..me.path.len() - (ups - inline)];
                targets.push((me.bin, base.iter().cloned().chain(rest).collect()));
            }
            // `use child::x` (a re-export) in a folder's root names the child's file.
            if is_folder_root {
                let t = line.trim_start();
                let t = t.strip_prefix("pub ").unwrap_or(t);
                let t = t
                    .strip_prefix("pub(crate) ")
                    .or_else(|| t.strip_prefix("pub(super) "))
                    .unwrap_or(t);
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

/// Known circles the scan finds, as the file names of their nodes (`crate::a::b`, `bin::cli::x`),
/// each with why it stays. A circle is allowed only when all its files are in one entry, so a
/// new circle still fails, and an entry whose circle is gone fails too (delete it then).
const ALLOWED_CIRCLES: &[(&str, &[&str], &str)] = &[
    // Empty: the circles the wider scan first found (cost memory/stack, cli validate with
    // validate_measured and runs, cli calibrate/runs, gantt draw/render in tests, measured
    // checks/timeline, plan::predict's request/stages) were all broken. Add an entry only with
    // its reason, as ("src" or "executor/src", [the circle's files], why).
];

/// The files of every circle in `g`: each strongly connected component with more than one
/// file, as its sorted names.
fn circles<N: Ord + Clone>(g: &BTreeMap<N, BTreeSet<N>>) -> Vec<Vec<N>> {
    // Two nodes share a circle when each reaches the other.
    let reach = |from: &N| -> BTreeSet<N> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for d in g.get(&n).into_iter().flatten() {
                if seen.insert(d.clone()) {
                    todo.push(d.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<N, BTreeSet<N>> = g.keys().map(|n| (n.clone(), reach(n))).collect();
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for n in g.keys() {
        if done.contains(n) || !reached[n].contains(n) {
            continue;
        }
        let comp: Vec<N> = reached[n]
            .iter()
            .filter(|m| reached.get(*m).is_some_and(|r| r.contains(n)))
            .cloned()
            .collect();
        done.extend(comp.iter().cloned());
        out.push(comp);
    }
    out
}

/// The circles of one crate's file and folder graphs, less the allowed ones; `crate_dir` names
/// the crate in messages (`src`, `executor/src`).
fn circle_violations(
    g: &BTreeMap<Module, BTreeSet<Module>>,
    crate_dir: &str,
    allowed: &[(&str, &[&str], &str)],
) -> Vec<String> {
    let mut out = Vec::new();
    let mut used = BTreeSet::new();
    for comp in circles(g) {
        let names: BTreeSet<String> = comp.iter().map(Module::name).collect();
        let entry = allowed.iter().find(|(dir, files, _)| {
            *dir == crate_dir && names.iter().all(|n| files.contains(&n.as_str()))
        });
        if let Some(e) = entry {
            used.insert(e.1);
            continue;
        }
        // Name one circle through the component's files, for the message.
        let sub: BTreeMap<Module, BTreeSet<Module>> = comp
            .iter()
            .map(|m| {
                let d = g[m].iter().filter(|d| comp.contains(d)).cloned().collect();
                (m.clone(), d)
            })
            .collect();
        let c = find_cycle(&sub).unwrap_or_else(|| comp.clone());
        let c: Vec<String> = c.iter().map(Module::name).collect();
        out.push(format!(
            "{crate_dir}: import circle between files: {} -> {} (all in the circle: {})",
            c.join(" -> "),
            c[0],
            names.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    for (dir, files, _) in allowed {
        if *dir == crate_dir && !used.contains(files) {
            out.push(format!(
                "{crate_dir}: allowed circle {files:?} is gone: delete it from ALLOWED_CIRCLES"
            ));
        }
    }
    let mut folders: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, deps) in g {
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
            "{crate_dir}: import circle between folders: {} -> {}",
            c.join(" -> "),
            c[0]
        ));
    }
    out
}

/// Files over [`MAX_FILE_LINES`], named from the repository root through `crate_dir`.
fn size_violations(files: &[(PathBuf, String)], crate_dir: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (rel, text) in files {
        let n = text.lines().count();
        if n > MAX_FILE_LINES {
            out.push(format!(
                "{crate_dir}/{}: {n} lines (at most {MAX_FILE_LINES})",
                rel.display()
            ));
        }
    }
    out
}

/// Every rule the architecture states for `src/`, as a list of violations (empty: all hold),
/// allowing no circle (the checker's own tests, on made-up files).
fn violations(files: &[(PathBuf, String)]) -> Vec<String> {
    violations_with(files, &[])
}

fn violations_with(
    files: &[(PathBuf, String)],
    allowed_circles: &[(&str, &[&str], &str)],
) -> Vec<String> {
    let g = graph(files, "pplan");
    let mut out = circle_violations(&g, "src", allowed_circles);
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
    out.extend(size_violations(files, "src"));
    for (rel, text) in files {
        let n = text.lines().count();
        if rel == Path::new("main.rs") && n >= MAX_MAIN_LINES {
            out.push(format!(
                "src/main.rs: {n} lines (under {MAX_MAIN_LINES}: it only parses and dispatches)"
            ));
        }
    }
    out
}

/// The rules that hold for the executor crate (`executor/src/`): no circle, no long file. Its
/// folders (cpu, cuda) are backends, not layers, so it has no layer map.
fn executor_violations(files: &[(PathBuf, String)]) -> Vec<String> {
    let g = graph(files, "pplan_exec");
    let mut out = circle_violations(&g, "executor/src", ALLOWED_CIRCLES);
    out.extend(size_violations(files, "executor/src"));
    out
}

fn source_files_in(dir: &str) -> Vec<(PathBuf, String)> {
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
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut out = Vec::new();
    walk(&root, &root, &mut out);
    out
}

fn source_files() -> Vec<(PathBuf, String)> {
    source_files_in("src")
}

#[test]
fn the_source_keeps_the_architectures_rules() {
    let files = source_files();
    assert!(files.len() > 20, "found only {} source files", files.len());
    let v = violations_with(&files, ALLOWED_CIRCLES);
    assert!(v.is_empty(), "architecture rules broken:\n{}", v.join("\n"));
}

#[test]
fn the_executor_keeps_the_architectures_rules() {
    let files = source_files_in("executor/src");
    assert!(files.len() > 10, "found only {} source files", files.len());
    let v = executor_violations(&files);
    assert!(v.is_empty(), "executor rules broken:\n{}", v.join("\n"));
    // The scan sees the executor's edges, inline ones included.
    let g = graph(&files, "pplan_exec");
    let m = |s: &str| Module::of(Path::new(s));
    let deps = |s: &str| g.get(&m(s)).cloned().unwrap_or_default();
    assert!(deps("cuda/device/steps.rs").contains(&m("cuda/device/mod.rs")));
    assert!(deps("cuda/calibrate.rs").contains(&m("cuda/device/mod.rs")));
    assert!(deps("main.rs").contains(&m("run.rs")));
}

#[test]
fn the_checker_resolves_the_real_layers() {
    // The map the checker builds from the real source has the edges the architecture draws,
    // so a checker that saw nothing could not pass the test above.
    let g = graph(&source_files(), "pplan");
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

#[test]
fn inline_super_and_crate_paths_in_bodies_are_imports() {
    // The circles that hid in function bodies: `super::x::` two ways, and `crate::a::b::`.
    let v = violations(&fake(&[
        ("lib.rs", "pub mod cost;\n"),
        ("cost/mod.rs", "pub mod memory;\npub mod stack;\npub mod net;\n"),
        ("cost/memory.rs", "use super::stack::Zero;\n"),
        (
            "cost/stack.rs",
            "pub fn f() -> super::memory::StateBytes {\n    super::memory::StateBytes {}\n}\n",
        ),
        (
            "cost/net.rs",
            "fn g() {\n    let x = crate::cost::memory::y();\n}\n\
             #[cfg(test)]\nmod tests {\n    use super::*;\n    fn t() { super::super::stack::f(); }\n}\n",
        ),
    ]));
    assert!(
        v.iter()
            .any(|s| s.contains("crate::cost::memory -> crate::cost::stack -> crate::cost::memory")),
        "{v:?}"
    );
    let g = graph(
        &fake(&[
            ("lib.rs", "pub mod cost;\n"),
            ("cost/mod.rs", "pub mod memory;\npub mod stack;\npub mod net;\n"),
            ("cost/memory.rs", ""),
            ("cost/stack.rs", ""),
            (
                "cost/net.rs",
                "fn g() {\n    let x = crate::cost::memory::y();\n    let c = '{';\n}\n\
                 /* super::nope::x\n   crate::nope */\nconst S: &str = r#\"crate::nope \"{\"#;\n\
                 #[cfg(test)]\nmod tests {\n    use super::*;\n    fn t() { super::super::stack::f(); }\n}\n",
            ),
        ]),
        "pplan",
    );
    let m = |s: &str| Module::of(Path::new(s));
    let net = &g[&m("cost/net.rs")];
    // `use super::*` in `mod tests` is the file itself; `super::super::` there is its folder's
    // sibling; comments, strings and a '{' char literal name nothing and open no block.
    let want: BTreeSet<Module> = [m("cost/memory.rs"), m("cost/stack.rs")].into();
    assert_eq!(net, &want);
}

#[test]
fn an_allowed_circle_passes_a_new_one_fails_and_a_gone_one_is_named() {
    let files = fake(&[
        ("lib.rs", "pub mod plan;\n"),
        ("plan/mod.rs", "pub mod a;\npub mod b;\npub mod c;\n"),
        ("plan/a.rs", "use crate::plan::b::X;\n"),
        ("plan/b.rs", "fn f() { super::a::g() }\n"),
    ]);
    let allow: &[(&str, &[&str], &str)] =
        &[("src", &["crate::plan::a", "crate::plan::b"], "a test")];
    assert!(violations_with(&files, allow).is_empty());
    let mut more = files.clone();
    more.push(("plan/c.rs".into(), "use super::b::Y;\n".into()));
    more[3].1 = "fn f() { super::a::g(); super::c::h() }\n".into();
    let v = violations_with(&more, allow);
    assert!(
        v.iter().any(|s| s.contains("import circle between files")),
        "{v:?}"
    );
    let v = violations_with(&files[..3], allow);
    assert!(v.iter().any(|s| s.contains("is gone")), "{v:?}");
}
