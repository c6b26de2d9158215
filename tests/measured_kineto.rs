//! PyTorch profiler (Kineto) traces through `pplan validate --measured`: real traces from
//! HolisticTraceAnalysis' test data (tests/data/measured/kineto/SOURCES.md), a Kineto-shaped
//! pipeline run made from a simulated schedule, and bad inputs. The expected figures for the
//! real traces were computed independently with a short Python script over the same files
//! (steps = ProfilerStep windows, a kernel in the step its runtime launch is in, unions of
//! intervals), quoted beside each assertion.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
mod common;
use common::pplan;

fn data(name: &str) -> String {
    format!(
        "{}/tests/data/measured/kineto/{name}",
        env!("CARGO_MANIFEST_DIR")
    )
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pplan-kineto-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

#[test]
fn two_real_ranks_are_broken_down() {
    let (r0, r1) = (
        data("hta-sampled-rank-0.json.gz"),
        data("hta-sampled-rank-1.json.gz"),
    );
    let (code, out, err) = pplan(&["validate", "--measured", &r0, &r1, "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["source"], "kineto");
    let b = &v["breakdown"];
    assert_eq!(b["ranks"], 2);
    // Two ProfilerStep windows (#551, #552); the first is warm-up.
    assert_eq!(
        (b["steps"].as_u64(), b["steps_skipped"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(b["bubble_basis"], "kernels");
    let rank = |i: usize| &b["per_rank"][i][1];
    // Python: rank 0 step #552 = 0.622928 s, NCCL union 0.200872 s, idle 0.353952 s;
    // rank 1: 0.630639 s, 0.211026 s, 0.322592 s.
    assert!(close(
        rank(0)["step_time_s"].as_f64().unwrap(),
        0.622928,
        1e-9
    ));
    assert!(close(rank(0)["comm_s"].as_f64().unwrap(), 0.200872, 1e-9));
    assert!(close(rank(0)["idle_s"].as_f64().unwrap(), 0.353952, 1e-9));
    assert!(close(
        rank(1)["step_time_s"].as_f64().unwrap(),
        0.630639,
        1e-9
    ));
    assert!(close(rank(1)["comm_s"].as_f64().unwrap(), 0.211026, 1e-9));
    assert!(close(rank(1)["idle_s"].as_f64().unwrap(), 0.322592, 1e-9));
    // No group names and no plan: the collectives' dimension is not guessed.
    assert!(
        b["mean"]["comm"]["unattributed"]["total_s"]
            .as_f64()
            .unwrap()
            > 0.2
    );
    assert!(v["metrics"].as_array().unwrap().is_empty());

    // The table and the measured chart.
    let svg = tmp("two-ranks.svg");
    let (code, out, err) = pplan(&[
        "validate",
        "--measured",
        &r0,
        &r1,
        "--gantt",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("ranks 2; steps 2 (1 skipped as warm-up); bubble from kernels"),
        "{out}"
    );
    assert!(out.contains("unattributed"), "{out}");
    let chart = std::fs::read_to_string(&svg).unwrap();
    assert!(chart.contains("rank 0") && chart.contains("rank 1"));
    assert!(chart.contains("GPU compute kernels (measured, merged)"));
    // The legend lists the communication the trace has, and only that.
    assert!(chart.contains("other communication (pipeline, context, expert, unattributed)"));
    assert!(!chart.contains("tensor-parallel collectives") && !chart.contains("data-parallel"));
}

#[test]
fn steps_and_medians_of_a_real_three_step_trace() {
    let f = data("hta-nccl-data-rank-0.json.gz");
    let (code, out, err) = pplan(&["validate", "--measured", &f, "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let m = &v["breakdown"]["mean"];
    // Python: steps #5 and #6 are used: 0.2197269 and 0.2249362 s, median 0.2223316 s;
    // NCCL unions 0.0123000 and 0.0225874 s, median 0.0174437 s.
    assert!(close(m["step_time_s"].as_f64().unwrap(), 0.2223316, 1e-6));
    assert!(close(m["comm_s"].as_f64().unwrap(), 0.0174437, 1e-6));
    // Each step used, numbered as the trace numbers it.
    let steps: Vec<(u64, f64)> = v["breakdown"]["per_step"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x[1].as_u64().unwrap(),
                x[2]["step_time_s"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(steps.len(), 2);
    assert_eq!((steps[0].0, steps[1].0), (5, 6));
    assert!(close(steps[0].1, 0.2197269, 1e-6) && close(steps[1].1, 0.2249362, 1e-6));
    // --skip-steps 0 uses all three (median 0.2224422 s: step #4).
    let (_, out, _) = pplan(&[
        "validate",
        "--measured",
        &f,
        "--skip-steps",
        "0",
        "--format",
        "json",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!(close(
        v["breakdown"]["mean"]["step_time_s"].as_f64().unwrap(),
        0.2224422,
        1e-6
    ));
    let (code, _, err) = pplan(&["validate", "--measured", &f, "--skip-steps", "3"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--skip-steps 3 leaves none of its 3 steps"),
        "{err}"
    );
}

/// Write `events` as a Kineto-shaped trace of `rank` (one step, no ProfilerStep): each pplan compute action becomes a
/// CPU-side `PP:<action>` annotation launching one GPU kernel (a cuda_runtime event sharing its
/// correlation id) that runs `scale` times as long, 1 µs after the launch.
fn kineto_from_pplan(
    events: &[Value],
    rank: u32,
    scale: f64,
    path: &Path,
    label: fn(&str) -> String,
) {
    let mut out = Vec::new();
    let mut corr = 0;
    for e in events
        .iter()
        .filter(|e| e["ph"] == "X" && e["pid"] == rank && e["tid"] == 0)
    {
        let name = e["name"].as_str().unwrap();
        let (ts, dur) = (
            e["ts"].as_f64().unwrap() * scale + 10.0,
            e["dur"].as_f64().unwrap() * scale,
        );
        corr += 1;
        out.push(
            json!({"ph": "X", "cat": "user_annotation", "name": label(name),
            "ts": ts - 1.0, "dur": 0.5, "pid": 1, "tid": 1}),
        );
        out.push(
            json!({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
            "ts": ts - 0.9, "dur": 0.2, "pid": 1, "tid": 1, "args": {"correlation": corr}}),
        );
        out.push(
            json!({"ph": "X", "cat": "kernel", "name": "nvjet_hsh_128x256_64x4_2x1_v_bz_coopB_TNN",
            "ts": ts, "dur": dur, "pid": 0, "tid": 7, "args": {"correlation": corr}}),
        );
    }
    let doc = json!({"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2},
        "traceEvents": out});
    std::fs::write(path, serde_json::to_vec(&doc).unwrap()).unwrap();
}

/// Simulate a 2-stage `schedule` of 4 micro-batches (F 1 ms, B 2 ms, free transfers) and
/// write it as two ranks' profiler traces, each action `scale` times as long, named by `label`.
/// Returns the prediction's trace and the directory of rank traces.
fn profiled_pipeline(
    schedule: &str,
    scale: f64,
    label: fn(&str) -> String,
    name: &str,
) -> (PathBuf, PathBuf) {
    let pred = tmp(&format!("{name}.pred.json"));
    let (code, _, err) = pplan(&[
        "simulate",
        "--schedule",
        schedule,
        "--stages",
        "2",
        "--microbatches",
        "4",
        "--forward",
        "1",
        "--backward",
        "2",
        "--p2p",
        "0",
        "--trace",
        pred.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let t: Value = serde_json::from_slice(&std::fs::read(&pred).unwrap()).unwrap();
    let events = t["traceEvents"].as_array().unwrap();
    let dir = tmp(name);
    std::fs::create_dir_all(&dir).unwrap();
    for r in 0..2 {
        kineto_from_pplan(events, r, scale, &dir.join(format!("rank-{r}.json")), label);
    }
    (pred, dir)
}

#[test]
fn a_pipeline_traced_by_the_profiler_is_compared_action_by_action() {
    let (pred, dir) = profiled_pipeline("1f1b", 1.25, |a| format!("PP:{a}"), "ranks");
    let svg = tmp("overlay.svg");
    let (code, out, err) = pplan(&[
        "validate",
        "--predicted",
        pred.to_str().unwrap(),
        "--measured",
        dir.to_str().unwrap(),
        "--format",
        "json",
        "--gantt",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    // Every measured action lasts 1.25 × its prediction, so each is predicted 20 % short.
    let a = &v["actions"];
    assert_eq!(a["actions_matched"], 16);
    assert!(
        close(a["action_error_mean"].as_f64().unwrap(), -0.2, 1e-9),
        "{a}"
    );
    assert!(
        close(a["step_time_error"].as_f64().unwrap(), -0.2, 1e-9),
        "{a}"
    );
    let step = v["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "step_time")
        .unwrap();
    assert!(close(step["error"].as_f64().unwrap(), -0.2, 1e-6), "{step}");
    // Per stage: F 1 ms predicted, 1.25 ms measured.
    let s = &v["stages"][0];
    assert!(close(
        s["forward_ms_predicted"].as_f64().unwrap(),
        1.0,
        1e-9
    ));
    assert!(close(
        s["forward_ms_measured"].as_f64().unwrap(),
        1.25,
        1e-9
    ));
    assert!(close(s["error"].as_f64().unwrap(), -0.2, 1e-9));
    assert!(std::fs::read_to_string(&svg)
        .unwrap()
        .contains("predicted (upper) vs measured (lower)"));
    // Every action is off by the same factor: the worst ten all show -20 %.
    let worst = a["worst_actions"].as_array().unwrap();
    assert_eq!(worst.len(), 10);
    assert!(worst
        .iter()
        .all(|w| close(w["error"].as_f64().unwrap(), -0.2, 1e-9)));
}

#[test]
fn bad_traces_exit_2_naming_the_problem() {
    let good = data("hta-sampled-rank-0.json.gz");
    let text = r#"{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2, "pid": 0, "tid": 7}"#;
    let truncated = tmp("truncated.json");
    std::fs::write(&truncated, text).unwrap();
    let schema = tmp("schema.json");
    std::fs::write(&schema, r#"{"events": []}"#).unwrap();
    let empty = tmp("empty.json");
    std::fs::write(&empty, r#"{"traceEvents": []}"#).unwrap();
    let zero = tmp("zero.json");
    std::fs::write(&zero, "").unwrap();
    let notes = tmp("notes.txt");
    std::fs::write(&notes, "hello\n").unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec![truncated.to_str().unwrap()], "truncated?"),
        (vec![schema.to_str().unwrap()], "no `traceEvents` field"),
        (vec![empty.to_str().unwrap()], "empty trace"),
        (vec![zero.to_str().unwrap()], "empty file"),
        (
            vec![notes.to_str().unwrap()],
            "not a trace or log pplan reads",
        ),
        (vec![&good, &good], "mismatched ranks: rank 0 is also in"),
        (vec!["/nonexistent/rank-0.json"], "cannot open"),
    ];
    for (files, want) in cases {
        let mut args = vec!["validate", "--measured"];
        args.extend(files.iter().copied());
        let (code, _, err) = pplan(&args);
        assert_eq!(code, 2, "{files:?}: {err}");
        assert!(err.contains(want), "{files:?}: {err}");
        assert!(err.contains("--measured"), "{err}");
    }
    // A Kineto trace given as the prediction.
    let (code, _, err) = pplan(&["validate", "--predicted", &good, "--measured", &good]);
    assert_eq!(code, 2);
    assert!(err.contains("the prediction is a pplan trace"), "{err}");
}

/// PyTorch's single-stage schedules (ScheduleGPipe, Schedule1F1B) name their ranges
/// `Forward 3` / `Backward 3`: the stage is the rank's pipeline position.
#[test]
fn single_stage_schedule_ranges_take_the_ranks_stage() {
    let (pred, dir) = profiled_pipeline(
        "gpipe",
        1.0,
        |a| {
            let (kind, mb) = a.split_at(a.find(['F', 'B']).unwrap() + 1);
            let word = if kind.ends_with('F') {
                "Forward"
            } else {
                "Backward"
            };
            format!("{word} {mb}")
        },
        "single-stage",
    );
    let (code, out, err) = pplan(&[
        "validate",
        "--predicted",
        pred.to_str().unwrap(),
        "--measured",
        dir.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    // Every action found on its stage, at exactly its predicted length.
    assert_eq!(v["actions"]["actions_matched"], 16, "{}", v["actions"]);
    assert!(close(
        v["actions"]["action_error_mean_abs"].as_f64().unwrap(),
        0.0,
        1e-9
    ));
    let stages: Vec<u64> = v["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stage"].as_u64().unwrap())
        .collect();
    assert_eq!(stages.len(), 2);
    assert!(stages.contains(&0) && stages.contains(&1));
}
