//! The zero-bubble schedules and `pplan schedule-search` through the binary.

mod common;
use common::{json, pplan};

#[test]
fn new_schedules_simulate_by_name_and_match_their_bundled_files() {
    let cases: [(&str, &str, &[&str]); 5] = [
        ("zb-h1", "schedules/zb-h1-p4-m8.csv", &[]),
        ("zb-h2", "schedules/zb-h2-p4-m8.csv", &[]),
        ("zbv", "schedules/zbv-p4-m8.csv", &["--placement", "v"]),
        (
            "dualpipev",
            "schedules/dualpipev-p4-m8.csv",
            &["--placement", "v"],
        ),
        (
            "looped-bfs",
            "schedules/looped-bfs-p4-m8-v2.csv",
            &["--chunks", "2"],
        ),
    ];
    let costs = [
        "--forward",
        "1",
        "--backward",
        "2",
        "--backward-input",
        "1",
        "--backward-weight",
        "1",
        "--format",
        "json",
    ];
    for (name, file, extra) in cases {
        let mut by_name = vec!["simulate", "--schedule", name, "--stages", "4"];
        by_name.extend(["--microbatches", "8"]);
        if name == "looped-bfs" {
            by_name.extend(["--chunks", "2"]);
        }
        by_name.extend(costs);
        let (code, out, err) = pplan(&by_name);
        assert_eq!(code, 0, "{name}: {err}");
        let a = json(&out);
        let mut by_file = vec!["simulate", "--schedule", file];
        by_file.extend(extra.iter().filter(|f| **f != "--chunks" && **f != "2"));
        by_file.extend(costs);
        let (code, out, err) = pplan(&by_file);
        assert_eq!(code, 0, "{file}: {err}");
        let b = json(&out);
        assert_eq!(a["makespan"], b["makespan"], "{name}");
        assert_eq!(a["devices"], b["devices"], "{name}");
    }
    // ZB-H1 at p=4, m=8 with F = I = W = 1: 3m + p - 1 = 27.
    let (_, out, _) = pplan(&[
        "simulate",
        "--schedule",
        "zb-h1",
        "--stages",
        "4",
        "--microbatches",
        "8",
        "--backward-input",
        "1",
        "--backward-weight",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(json(&out)["makespan"], 27.0);
}

#[test]
fn v_placed_files_need_placement_v_and_chunk_rules_name_the_flag() {
    let (code, _, err) = pplan(&["simulate", "--schedule", "schedules/zbv-p4-m8.csv"]);
    assert_eq!(code, 2);
    assert!(err.contains("wrong device"), "{err}");
    let (code, _, err) = pplan(&[
        "simulate",
        "--schedule",
        "zbv",
        "--stages",
        "4",
        "--microbatches",
        "8",
        "--chunks",
        "3",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("--chunks must be 2"), "{err}");
    let (code, _, err) = pplan(&[
        "simulate",
        "--schedule",
        "dualpipev",
        "--stages",
        "4",
        "--microbatches",
        "7",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("m >= 2p"), "{err}");
    let (code, out, err) = pplan(&[
        "generate",
        "--schedule",
        "zbv",
        "--stages",
        "2",
        "--microbatches",
        "2",
        "--crlf",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("--placement v"), "{err}");
    let fixture = std::fs::read_to_string(format!(
        "{}/tests/data/torch-zbv-p2-m2.csv",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    // Same rows as PyTorch's file once its idle slots (empty fields) are dropped.
    let squeezed: String = fixture
        .split("\r\n")
        .filter(|l| !l.is_empty())
        .map(|l| {
            l.split(',')
                .filter(|f| !f.is_empty())
                .collect::<Vec<_>>()
                .join(",")
                + "\r\n"
        })
        .collect();
    assert_eq!(out, squeezed);
}

#[test]
fn schedule_search_reports_json_and_writes_a_schedule() {
    let dir = std::env::temp_dir().join(format!("pplan-zb-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("found.csv");
    let path_s = path.to_str().unwrap();
    let (code, out, err) = pplan(&[
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
        "--p2p",
        "0.2",
        "--memory-limit",
        "4",
        "--iterations",
        "300",
        "--output",
        path_s,
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let r = json(&out);
    assert!(r["makespan"].as_f64().unwrap() <= r["zb_h1_makespan"].as_f64().unwrap());
    assert!(r["peak_inflight_microbatches"].as_u64().unwrap() <= 4);
    // The file it wrote simulates to the same makespan.
    let (code, out, err) = pplan(&[
        "simulate",
        "--schedule",
        path_s,
        "--forward",
        "1",
        "--backward-input",
        "1",
        "--backward-weight",
        "1",
        "--p2p",
        "0.2",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["makespan"], r["makespan"]);
    for (flag, value) in [
        ("--memory-limit", "0"),
        ("--forward", "-1"),
        ("--stages", "0"),
        ("--p2p", "nan"),
        ("--iterations", "4000000000"),
    ] {
        let mut full = vec!["schedule-search"];
        for (f, v) in [
            ("--stages", "4"),
            ("--microbatches", "8"),
            ("--forward", "1"),
            ("--backward-input", "1"),
            ("--backward-weight", "1"),
        ] {
            if f != flag {
                full.extend([f, v]);
            }
        }
        full.extend([flag, value]);
        let (code, _, err) = pplan(&full);
        assert_eq!(code, 2, "{flag}: {err}");
        assert!(err.contains(flag), "{flag}: {err}");
        assert!(!err.contains("cannot be used multiple times"), "{err}");
    }
}

/// A PyTorch DualPipeV dump with OVERLAP_F_B compounds: 26 steps as PyTorch times it (the
/// default, `--overlap-f-b together`), 25 with every sub-action timed on its own.
#[test]
fn overlap_f_b_compounds_together_or_apart() {
    let file = format!(
        "{}/tests/data/pytorch/DualPipeV-p2-m4-v2.csv",
        env!("CARGO_MANIFEST_DIR")
    );
    let makespan = |extra: &[&str]| {
        let mut args = vec!["simulate", "--schedule", &file, "--placement", "v"];
        args.extend(["--forward", "2", "--backward", "4", "--format", "json"]);
        args.extend(extra);
        let (code, out, err) = pplan(&args);
        assert_eq!(code, 0, "{err}");
        json(&out)["makespan"].as_f64().unwrap()
    };
    assert_eq!(makespan(&[]), 26.0);
    assert_eq!(makespan(&["--overlap-f-b", "together"]), 26.0);
    assert_eq!(makespan(&["--overlap-f-b", "apart"]), 25.0);
    // The dualpipev generator writes the same compounds as PyTorch's ScheduleDualPipeV.
    let built_in = |extra: &[&str]| {
        let mut args = vec!["simulate", "--schedule", "dualpipev", "--stages", "2"];
        args.extend(["--microbatches", "4", "--forward", "2", "--backward", "4"]);
        args.extend(["--format", "json"]);
        args.extend(extra);
        let (code, out, err) = pplan(&args);
        assert_eq!(code, 0, "{err}");
        json(&out)["makespan"].as_f64().unwrap()
    };
    assert_eq!(built_in(&[]), 26.0);
    assert_eq!(built_in(&["--overlap-f-b", "apart"]), 25.0);
    let (code, _, err) = pplan(&[
        "simulate",
        "--schedule",
        "1f1b",
        "--stages",
        "2",
        "--microbatches",
        "4",
        "--overlap-f-b",
        "apart",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--overlap-f-b applies to schedules with OVERLAP_F_B compounds"),
        "{err}"
    );
}
