//! README.md as a user reads it: its first code block is the two setup commands (the main job
//! on bundled defaults, then the test command `.ci/run` runs), and every `$ pplan ...` command
//! of its `console` blocks is run with this build's binary and must print the lines shown, in
//! order (a `…` line stands for lines left out). Files a command writes go to a temporary
//! directory and must be byte-identical to the committed file the README names and shows.

mod common;
use std::path::Path;

struct Example {
    command: String,
    shown: Vec<String>,
}

fn readme() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap()
}

fn examples(text: &str) -> Vec<Example> {
    let mut out: Vec<Example> = Vec::new();
    let mut in_console = false;
    for line in text.lines() {
        if line.starts_with("```") {
            in_console = !in_console && line.trim() == "```console";
            continue;
        }
        if !in_console {
            continue;
        }
        if let Some(cmd) = line.strip_prefix("$ pplan ") {
            out.push(Example {
                command: cmd.to_string(),
                shown: Vec::new(),
            });
        } else if let Some(e) = out.last_mut() {
            e.shown.push(line.to_string());
        }
    }
    out
}

/// Flags whose value is a file the command writes.
const OUTPUT_FLAGS: &[&str] = &["--gantt", "--trace", "--output", "-o"];

#[test]
fn first_block_is_the_two_setup_commands() {
    let text = readme();
    let block: Vec<&str> = text
        .split("```sh\n")
        .nth(1)
        .expect("a sh block")
        .split("```")
        .next()
        .unwrap()
        .lines()
        .collect();
    assert_eq!(
        block,
        [
            "cargo run --release -- search --gpus 3072",
            "cargo test --workspace"
        ]
    );
    let ci =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/run")).unwrap();
    assert!(
        ci.lines().any(|l| l.trim() == block[1]),
        ".ci/run must run the README's test command"
    );
    assert!(text.lines().count() <= 150, "README.md is over 150 lines");
}

#[test]
fn every_command_prints_what_the_readme_shows() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = std::env::temp_dir().join(format!("pplan-readme-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let all = examples(&readme());
    assert!(all.len() >= 3, "the README's three worked examples");
    for e in &all {
        let mut args: Vec<String> = e.command.split_whitespace().map(String::from).collect();
        let mut written = Vec::new();
        for i in 1..args.len() {
            if OUTPUT_FLAGS.contains(&args[i - 1].as_str()) {
                let committed = args[i].clone();
                let file = Path::new(&committed).file_name().unwrap().to_owned();
                args[i] = tmp.join(file).display().to_string();
                written.push((committed, args[i].clone()));
            }
        }
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, err) = common::pplan(&refs);
        assert_eq!(code, 0, "pplan {}: {err}", e.command);
        let mut lines = out.lines().map(str::trim_end);
        for shown in e.shown.iter().map(|s| s.trim_end()) {
            if shown == "…" {
                continue;
            }
            assert!(
                lines.any(|l| l == shown),
                "README: `pplan {}` no longer prints (in this order)\n{shown}\n--- it prints:\n{out}",
                e.command
            );
        }
        for (committed, tmp_path) in written {
            let want = std::fs::read(root.join(&committed))
                .unwrap_or_else(|e| panic!("README shows {committed}: {e}"));
            let got = std::fs::read(&tmp_path).unwrap();
            assert!(
                want == got,
                "{committed} is not what `pplan {}` draws now (bash docs/make-figures.sh)",
                e.command
            );
        }
    }
    std::fs::remove_dir_all(&tmp).ok();
}
