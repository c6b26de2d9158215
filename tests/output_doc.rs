//! docs/output.md against the real outputs: every command the page shows is run, and every
//! field of its JSON (top level, and `parent[].child` in arrays of objects) must be listed in
//! its section; every listed field not marked "only ..." must appear in one of the section's
//! outputs. A field added without its line on the page, or renamed, fails here. Commands in a
//! ```` ```sh setup ```` block only write the files the section's commands read.

mod common;
use common::{json, pplan};
use std::collections::{BTreeMap, BTreeSet};

struct Section {
    name: String,
    /// Commands that only write the files the section's commands read (```sh setup).
    setup: Vec<String>,
    commands: Vec<String>,
    /// field -> optional ("only when ...")
    fields: BTreeMap<String, bool>,
}

fn sections(text: &str) -> Vec<Section> {
    let mut out: Vec<Section> = Vec::new();
    let (mut in_code, mut setup) = (false, false);
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("## ") {
            out.push(Section {
                name: name.to_string(),
                setup: Vec::new(),
                commands: Vec::new(),
                fields: BTreeMap::new(),
            });
        } else if let Some(info) = line.strip_prefix("```") {
            in_code = !in_code;
            setup = in_code && info.trim() == "sh setup";
        } else if let Some(s) = out.last_mut() {
            if in_code {
                if let Some(cmd) = line.strip_prefix("pplan ") {
                    if setup {
                        s.setup.push(cmd.to_string());
                    } else {
                        s.commands.push(cmd.to_string());
                    }
                }
            } else if let Some(rest) = line.strip_prefix("| `") {
                let (field, rest) = rest.split_once('`').unwrap();
                let meaning = rest.rsplit('|').nth(1).unwrap_or("").trim();
                s.fields
                    .insert(field.to_string(), meaning.starts_with("only "));
            }
        }
    }
    out
}

/// The top-level fields, and `parent[].child` for the objects of an array.
fn field_paths(v: &serde_json::Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (k, x) in v.as_object().expect("one JSON object") {
        out.insert(k.clone());
        if let Some(items) = x.as_array() {
            for item in items.iter().filter_map(|i| i.as_object()) {
                out.extend(item.keys().map(|c| format!("{k}[].{c}")));
            }
        }
    }
    out
}

#[test]
fn every_json_field_of_every_subcommand_is_documented() {
    let root = env!("CARGO_MANIFEST_DIR");
    std::fs::create_dir_all(format!("{root}/target/output-md")).unwrap();
    let text = std::fs::read_to_string(format!("{root}/docs/output.md")).unwrap();
    let mut secs = sections(&text);
    // `results[].*`: every predict field (what a search result flattens).
    let predict: Vec<String> = secs
        .iter()
        .find(|s| s.name == "predict")
        .expect("a predict section")
        .fields
        .iter()
        .filter(|(f, _)| !f.contains('[') && *f != "stages" && *f != "schema_version")
        .map(|(f, _)| f.clone())
        .collect();
    for s in &mut secs {
        if s.fields.remove("results[].*").is_some() {
            for f in &predict {
                s.fields.insert(format!("results[].{f}"), true);
            }
        }
    }
    let mut checked = 0;
    for s in secs.iter().filter(|s| !s.commands.is_empty()) {
        for cmd in &s.setup {
            let args: Vec<&str> = cmd.split_whitespace().collect();
            let (code, _, err) = pplan(&args);
            assert_eq!(code, 0, "setup: pplan {cmd}: {err}");
        }
        let mut seen = BTreeSet::new();
        for cmd in &s.commands {
            let args: Vec<&str> = cmd.split_whitespace().collect();
            let (code, out, err) = pplan(&args);
            assert_eq!(code, 0, "pplan {cmd}: {err}");
            let v = json(&out);
            assert_eq!(v["schema_version"], 1, "pplan {cmd}");
            for f in field_paths(&v) {
                assert!(
                    s.fields.contains_key(&f),
                    "docs/output.md, section '{}': field `{f}` of `pplan {cmd}` is not listed",
                    s.name
                );
                seen.insert(f);
            }
            checked += 1;
        }
        for (f, optional) in &s.fields {
            assert!(
                *optional || seen.contains(f),
                "docs/output.md, section '{}': `{f}` is listed but no command of the section prints it (mark it 'only when ...' if it is conditional)",
                s.name
            );
        }
    }
    assert!(checked >= 10, "only {checked} commands found on the page");
}
