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

/// `simulate` and `predict` have no progress points inside the simulation: with --progress
/// they name each phase and the time so far (no guessed time left), on stderr only; stdout
/// and the files they write are the same bytes with and without it.
#[test]
fn simulate_and_predict_report_their_phases() {
    let dir = std::env::temp_dir().join(format!("pplan-progress-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("g.svg");
    let trace = dir.join("t.json");
    let (svg_s, trace_s) = (svg.to_str().unwrap(), trace.to_str().unwrap());
    let sim = [
        "simulate",
        "--schedule",
        "1f1b",
        "--stages",
        "8",
        "--microbatches",
        "32",
        "--gantt",
        svg_s,
        "--trace",
        trace_s,
        "--format",
        "json",
    ];
    let predict = [
        "predict",
        "--model",
        "gpt-1.7b",
        "--gpus",
        "8",
        "--tp",
        "1",
        "--pp",
        "4",
        "--global-batch",
        "16",
        "--micro-batch",
        "1",
        "--gantt",
        svg_s,
    ];
    for (args, label, phases) in [(&sim[..], "simulate", 4), (&predict[..], "predict", 2)] {
        let (code, _, err) = pplan(args);
        assert_eq!(code, 0, "{err}");
        let files = |paths: &[&std::path::Path]| -> Vec<Vec<u8>> {
            paths.iter().filter_map(|p| std::fs::read(p).ok()).collect()
        };
        let before = files(&[&svg, &trace]);
        let (_, err) = with_and_without(args);
        assert_eq!(files(&[&svg, &trace]), before, "{label}: files changed");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), phases + 1, "{err}");
        for (i, l) in lines[..phases].iter().enumerate() {
            assert!(
                l.starts_with(&format!("{label}: phase {}/{phases}: ", i + 1)),
                "{err}"
            );
            assert!(l.ends_with(" s elapsed)"), "{err}");
        }
        assert!(err.contains("drawing the Gantt chart"), "{err}");
        assert!(!err.contains("ETA"), "no guessed time left: {err}");
        assert!(
            lines[phases].starts_with(&format!("{label}: done in ")),
            "{err}"
        );
    }
    // A failure is not reported as done.
    let (code, _, err) = pplan(&[
        "simulate",
        "--schedule",
        "1f1b",
        "--stages",
        "0",
        "--microbatches",
        "4",
        "--progress",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(!err.contains("done in"), "{err}");
}
