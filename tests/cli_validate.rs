//! `pplan validate`: a simulated trace against itself (zero error, the simulator's bubble),
//! against perturbed copies whose errors are known exactly, different pipelines and bad files.

mod common;
use common::{json, pplan};
use serde_json::Value;
use std::path::PathBuf;

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pplan-validate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Simulate `schedule` on p devices, m micro-batches (F 1 ms, B 2 ms, p2p 0.1 ms); returns the
/// trace path and the simulate report.
fn simulate(name: &str, schedule: &str, p: &str, m: &str) -> (String, Value) {
    let path = tmp(name);
    let (code, out, err) = pplan(&[
        "simulate",
        "--schedule",
        schedule,
        "--stages",
        p,
        "--microbatches",
        m,
        "--p2p",
        "0.1",
        "--trace",
        path.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    (path.display().to_string(), json(&out))
}

fn validate(pred: &str, meas: &str, extra: &[&str]) -> (i32, Value, String) {
    let mut args = vec![
        "validate",
        "--predicted",
        pred,
        "--measured",
        meas,
        "--format",
        "json",
    ];
    args.extend_from_slice(extra);
    let (code, out, err) = pplan(&args);
    let v = if code == 0 { json(&out) } else { Value::Null };
    (code, v, err)
}

fn f(v: &Value, path: &str) -> f64 {
    let mut cur = v;
    for part in path.split('.') {
        cur = &cur[part];
    }
    cur.as_f64()
        .unwrap_or_else(|| panic!("{path} is not a number in {v}"))
}

fn close(a: f64, b: f64, what: &str) {
    assert!((a - b).abs() < 1e-9, "{what}: {a} != {b}");
}

fn events(path: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn write(name: &str, v: &Value) -> String {
    let path = tmp(name);
    std::fs::write(&path, serde_json::to_string(v).unwrap()).unwrap();
    path.display().to_string()
}

#[test]
fn a_trace_against_itself_has_zero_error_and_the_simulators_bubble() {
    let (trace, sim) = simulate("self.json", "1f1b", "4", "8");
    let (code, v, err) = validate(&trace, &trace, &[]);
    assert_eq!(code, 0, "{err}");
    for field in [
        "step_time_error",
        "action_error_mean_abs",
        "action_error_mean",
        "start_error_mean_abs",
        "start_error_max_abs",
        "by_kind.F.error",
        "by_kind.B.error",
    ] {
        close(f(&v, field), 0.0, field);
    }
    close(f(&v, "step_time_predicted_s"), 0.0346, "step time");
    // 4 x 8 F, 4 x 8 B and 2 x 3 x 8 x 2 = 96 send/recv spans.
    assert_eq!(v["actions_matched"], 160);
    assert_eq!(v["by_kind"]["send/recv"]["count"], 96);
    assert_eq!(v["actions_unmatched"]["predicted_only"], 0);
    assert_eq!(v["steps_skipped_measured"], 0);
    let bubble = f(&sim, "bubble_fraction");
    close(f(&v, "bubble_predicted"), bubble, "bubble_predicted");
    close(f(&v, "bubble_measured"), bubble, "bubble_measured");
    assert_eq!(v["warnings"].as_array().unwrap().len(), 0);
}

#[test]
fn slower_forwards_on_device_0_give_the_exact_per_kind_error() {
    let (trace, _) = simulate("fwd.json", "1f1b", "4", "8");
    let mut t = events(&trace);
    for e in t["traceEvents"].as_array_mut().unwrap() {
        let name = e["name"].as_str().unwrap_or("");
        if e["ph"] == "X" && e["pid"] == 0 && name.starts_with("0F") {
            let d = e["dur"].as_f64().unwrap();
            e["dur"] = Value::from(d * 1.5);
        }
    }
    let meas = write("fwd-measured.json", &t);
    let (code, v, err) = validate(&trace, &meas, &[]);
    assert_eq!(code, 0, "{err}");
    // Σ predicted F = 32 ms, Σ measured = 24 + 8 x 1.5 = 36 ms.
    close(f(&v, "by_kind.F.error"), (32.0 - 36.0) / 36.0, "F error");
    close(f(&v, "by_kind.F.measured_ms"), 36.0 / 32.0, "F mean");
    // 8 of 32 forwards off by (1 - 1.5) / 1.5 = -1/3.
    close(f(&v, "by_kind.F.mean_abs_error"), 8.0 / 3.0 / 32.0, "F |e|");
    close(f(&v, "by_kind.B.error"), 0.0, "B error");
    // Over the 64 matched compute actions (transfers are left out of the headline mean).
    close(f(&v, "action_error_mean_abs"), 8.0 / 3.0 / 64.0, "mean |e|");
    close(f(&v, "action_error_mean"), -8.0 / 3.0 / 64.0, "signed mean");
    // Starts were not moved, and the last action (a backward) still ends at 34.6 ms.
    close(f(&v, "step_time_error"), 0.0, "step error");
    close(f(&v, "start_error_max_abs"), 0.0, "start error");
    assert!(f(&v, "bubble_measured") < f(&v, "bubble_predicted"));
}

/// Three measured steps: a slow warm-up (x3), then steps 1.1 and 1.3 times the prediction.
fn three_steps(trace: &str) -> String {
    let t = events(trace);
    let mut out = Vec::new();
    let mut offset = 0.0;
    for (step, scale) in [(0u32, 3.0), (1, 1.1), (2, 1.3)] {
        for e in t["traceEvents"].as_array().unwrap() {
            if e["ph"] != "X" {
                continue;
            }
            let mut e = e.clone();
            e["ts"] = Value::from(offset + e["ts"].as_f64().unwrap() * scale);
            e["dur"] = Value::from(e["dur"].as_f64().unwrap() * scale);
            e["args"]["step"] = Value::from(step);
            out.push(e);
        }
        offset += 34_600.0 * scale + 500.0;
    }
    write(
        "three-steps.json",
        &serde_json::json!({ "traceEvents": out }),
    )
}

#[test]
fn warm_up_steps_are_skipped_and_the_median_step_is_compared() {
    let (trace, sim) = simulate("steps.json", "zb-h1", "4", "8");
    let meas = three_steps(&trace);
    let (code, v, err) = validate(&trace, &meas, &[]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(v["steps_measured"], 3);
    assert_eq!(v["steps_skipped_measured"], 1);
    assert_eq!(v["steps_skipped_predicted"], 0);
    let pred = f(&v, "step_time_predicted_s");
    close(pred, f(&sim, "makespan") / 1e3, "predicted step");
    // Median of 1.1 T and 1.3 T is 1.2 T.
    close(f(&v, "step_time_measured_s"), 1.2 * pred, "measured step");
    close(f(&v, "step_time_error"), 1.0 / 1.2 - 1.0, "step error");
    // Every action's median duration is 1.2 d.
    close(f(&v, "action_error_mean"), 1.0 / 1.2 - 1.0, "signed");
    close(f(&v, "action_error_mean_abs"), 1.0 - 1.0 / 1.2, "abs");
    for kind in ["F", "I", "W"] {
        close(
            f(&v, &format!("by_kind.{kind}.error")),
            1.0 / 1.2 - 1.0,
            kind,
        );
    }
    // Scaling keeps every start at the same fraction of its step, and the bubble.
    assert!(f(&v, "start_error_max_abs") < 1e-9);
    close(
        f(&v, "bubble_measured"),
        f(&sim, "bubble_fraction"),
        "bubble",
    );

    // Keep the warm-up: the median of (3, 1.1, 1.3) x T is 1.3 T.
    let (code, v, err) = validate(&trace, &meas, &["--skip-steps", "0"]);
    assert_eq!(code, 0, "{err}");
    close(f(&v, "step_time_error"), 1.0 / 1.3 - 1.0, "no skip");

    let (code, _, err) = validate(&trace, &meas, &["--skip-steps", "3"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--skip-steps 3") && err.contains("three-steps.json"),
        "{err}"
    );
}

#[test]
fn different_pipelines_are_refused_with_a_clear_message() {
    let (p4, _) = simulate("p4.json", "1f1b", "4", "8");
    let (p2, _) = simulate("p2.json", "1f1b", "2", "8");
    let (code, _, err) = validate(&p4, &p2, &[]);
    assert_eq!(code, 2);
    assert!(err.contains("different pipelines"), "{err}");

    // Same devices, different schedule: B against I + W.
    let (zb, _) = simulate("zb.json", "zb-h1", "4", "8");
    let (code, _, err) = validate(&p4, &zb, &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("different schedules") && err.contains("--allow-unmatched"),
        "{err}"
    );
    let (code, v, err) = validate(&p4, &zb, &["--allow-unmatched"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("warning: the schedules differ"), "{err}");
    assert_eq!(v["by_kind"]["F"]["count"], 32);
    assert!(v["by_kind"].get("B").is_none());
    assert!(v["actions_unmatched"]["predicted_only"].as_u64().unwrap() >= 32);
}

#[test]
fn bad_files_exit_2_naming_them() {
    let (trace, _) = simulate("good.json", "1f1b", "2", "4");
    let (code, _, err) = validate(&trace, "no/such/measured.json", &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--measured") && err.contains("no/such/measured.json"),
        "{err}"
    );

    let garbage = tmp("garbage.json");
    std::fs::write(&garbage, "{\"traceEvents\": 7}").unwrap();
    let (code, _, err) = validate(garbage.to_str().unwrap(), &trace, &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--predicted") && err.contains("garbage.json"),
        "{err}"
    );

    // One event of a multi-step trace without its step.
    let mut t = events(&trace);
    let list = t["traceEvents"].as_array_mut().unwrap();
    let mut first = true;
    for e in list.iter_mut().filter(|e| e["ph"] == "X") {
        if first {
            first = false;
            continue;
        }
        e["args"]["step"] = Value::from(0);
    }
    let path = write("nostep.json", &t);
    let (code, _, err) = validate(&trace, &path, &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("nostep.json") && err.contains("args.step"),
        "{err}"
    );

    // A negative duration.
    let mut t = events(&trace);
    for e in t["traceEvents"].as_array_mut().unwrap() {
        if e["ph"] == "X" {
            e["dur"] = Value::from(-1.0);
            break;
        }
    }
    let path = write("negative.json", &t);
    let (code, _, err) = validate(&trace, &path, &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("negative.json") && err.contains("dur"),
        "{err}"
    );
}

#[test]
fn overlay_chart_has_two_lanes_per_device() {
    let trace = tmp("chart.json").display().to_string();
    let (code, _, err) = pplan(&[
        "simulate",
        "--schedule",
        "interleaved-1f1b",
        "--stages",
        "2",
        "--microbatches",
        "4",
        "--chunks",
        "2",
        "--trace",
        &trace,
    ]);
    assert_eq!(code, 0, "{err}");
    let svg = tmp("overlay.svg");
    let (code, _, err) = pplan(&[
        "validate",
        "--predicted",
        &trace,
        "--measured",
        &trace,
        "--gantt",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&svg).unwrap();
    for label in [
        "device 0 pred",
        "device 0 meas",
        "device 1 pred",
        "device 1 meas",
        "chunk = stage / 2",
    ] {
        assert!(text.contains(label), "missing {label}");
    }
    let (code, _, err) = pplan(&[
        "validate",
        "--predicted",
        &trace,
        "--measured",
        &trace,
        "--gantt",
        tmp("overlay.gif").to_str().unwrap(),
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("--gantt") && err.contains(".svg"), "{err}");
}
