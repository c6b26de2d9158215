//! Progress lines: on stderr only, only when asked (`--progress`; tests' stderr is not a
//! terminal), and standard output byte-identical with and without them.

mod common;
use common::pplan;

fn with_and_without(args: &[&str]) -> (String, String) {
    let (code, plain, err) = pplan(args);
    assert_eq!(code, 0, "{err}");
    assert!(err.is_empty(), "no progress unless asked: {err}");
    let mut forced = args.to_vec();
    forced.push("--progress");
    let (code, out, err) = pplan(&forced);
    assert_eq!(code, 0, "{err}");
    // Byte-identical except `search`'s `elapsed_s`, the one timing the contract asks for.
    let strip = |s: &str| -> String {
        match s.find("\"elapsed_s\":") {
            Some(i) => {
                let end = s[i..].find(',').map_or(s.len(), |j| i + j);
                format!("{}{}", &s[..i], &s[end..])
            }
            None => s.to_string(),
        }
    };
    assert_eq!(
        strip(&out),
        strip(&plain),
        "stdout must not change with --progress"
    );
    (out, err)
}

#[test]
fn schedule_search_shows_progress_with_eta() {
    let (_, err) = with_and_without(&[
        "schedule-search",
        "--stages",
        "4",
        "--microbatches",
        "8",
        "--forward",
        "1",
        "--backward-input",
        "1",
        "--backward-weight",
        "1",
        "--iterations",
        "500",
    ]);
    let lines: Vec<&str> = err.lines().collect();
    assert!(lines.len() >= 2, "{err}");
    assert!(
        lines.iter().all(|l| l.starts_with("schedule-search: ")),
        "{err}"
    );
    // 10 constructions + 500 moves; the last update is the whole.
    assert!(err.contains("510/510 (100%)"), "{err}");
    assert!(err.contains("ETA "), "{err}");
    assert!(lines.last().unwrap().contains("done in"), "{err}");
}

#[test]
fn search_shows_progress_with_eta() {
    let (_, err) = with_and_without(&[
        "search",
        "--gpus",
        "8",
        "--model",
        "llama3-8b",
        "--hardware",
        "h100-80gb",
        "--global-batch",
        "64",
        "--top",
        "3",
        "--format",
        "json",
    ]);
    assert!(
        err.contains("search (simulating feasible candidates): "),
        "{err}"
    );
    assert!(err.contains("ETA"), "{err}");
    assert!(err.lines().last().unwrap().contains("done in"), "{err}");
}
