//! `pplan calibrate` on real CPU-executor runs committed under tests/data/measured/cpu-exec/
//! (tiny-gpt-cpu, p = 2, 8 micro-batches, 5 steps; made with the README's commands, see
//! docs/validate.md): the calibrated profile's stage sums are the trace's per-stage means, and
//! predict with the calibrated profile and hardware reproduces the measured step time within
//! 5 % (`pplan validate`'s step-time error). Error cases exit 2 naming what is wrong.
//!
//! The `#[ignore]`d test runs the whole loop live on this machine: profile → predict → run →
//! calibrate → predict. It needs the executor built first:
//! `cargo build --release -p pplan-exec && cargo test --release --test calibrate -- --ignored`
//! (`PPLAN_EXEC` overrides the executor's path).

mod common;
use common::{json, pplan};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const DATA: &str = "tests/data/measured/cpu-exec";
const MODEL: &str = "examples/models/tiny-gpt-cpu.json";

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pplan-calibrate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// A committed test file's text.
fn data_text(name: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(DATA).join(name)).unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Per stage, the mean duration (ms) of its F actions and of its backward (B, or I + W summed
/// per micro-batch) over steps 1.., read straight from the trace.
fn trace_means(trace: &str) -> BTreeMap<u64, (f64, f64)> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(trace)).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let mut f: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    let mut b: BTreeMap<u64, BTreeMap<(u64, u64), f64>> = BTreeMap::new();
    for e in v["traceEvents"].as_array().unwrap() {
        let name = e["name"].as_str().unwrap_or("");
        if e["ph"] != "X" || name.contains("SEND") || name.contains("RECV") {
            continue;
        }
        let a = &e["args"];
        let (Some(stage), Some(kind), Some(step)) =
            (a["stage"].as_u64(), a["kind"].as_str(), a["step"].as_u64())
        else {
            continue;
        };
        if step == 0 {
            continue;
        }
        let ms = e["dur"].as_f64().unwrap() / 1e3;
        let mb = a["microbatch"].as_u64().unwrap();
        match kind {
            "F" => f.entry(stage).or_default().push(ms),
            _ => *b.entry(stage).or_default().entry((step, mb)).or_default() += ms,
        }
    }
    let mean = |v: Vec<f64>| v.iter().sum::<f64>() / v.len() as f64;
    f.into_iter()
        .map(|(st, fs)| (st, (mean(fs), mean(b[&st].values().copied().collect()))))
        .collect()
}

/// Calibrate `schedule`'s committed run; returns (report, profile path, hardware path).
fn calibrate(schedule: &str, with_prior: bool) -> (Value, PathBuf, PathBuf) {
    let tag = format!("{schedule}-{with_prior}");
    let prof = tmp(&format!("{tag}.profile.json"));
    let hw = tmp(&format!("{tag}.hw.json"));
    let trace = format!("{DATA}/{schedule}.measured.json");
    let plan = format!("{DATA}/{schedule}.plan.json");
    let prior = format!("{DATA}/layers.json");
    let mut args = vec!["calibrate", "--trace", &trace, "--plan", &plan];
    if with_prior {
        args.extend(["--profile", &prior]);
    }
    args.extend([
        "--out-profile",
        s(&prof),
        "--out-hardware",
        s(&hw),
        "--format",
        "json",
    ]);
    let (code, out, err) = pplan(&args);
    assert_eq!(code, 0, "{err}");
    (json(&out), prof, hw)
}

/// `pplan predict` of the tiny CPU model on 2 pipeline devices, global batch 8, micro-batch 1,
/// no recomputation, with `hardware` and `profile`; `extra` adds the schedule and outputs.
fn predict_tiny(hardware: &Path, profile: &Path, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec![
        "predict",
        "--model",
        MODEL,
        "--hardware",
        s(hardware),
        "--profile",
        s(profile),
        "--gpus",
        "2",
        "--pp",
        "2",
        "--global-batch",
        "8",
        "--micro-batch",
        "1",
        "--recompute",
        "none",
    ];
    args.extend_from_slice(extra);
    pplan(&args)
}

/// Predict the plan's layout with `profile` and `hardware`, write its trace and validate it
/// against the measured run; returns `pplan validate`'s JSON.
fn predict_and_validate(schedule: &str, profile: &Path, hardware: &Path) -> Value {
    let chunks = if schedule == "interleaved-1f1b" {
        "2"
    } else {
        "1"
    };
    let pred = tmp(&format!(
        "{schedule}-{}.pred.json",
        profile.display().to_string().len()
    ));
    let (code, out, err) = predict_tiny(
        hardware,
        profile,
        &[
            "--schedule",
            schedule,
            "--chunks",
            chunks,
            "--trace",
            s(&pred),
            "--format",
            "json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let predicted = json(&out)["step_time_s"].as_f64().unwrap();
    let trace = format!("{DATA}/{schedule}.measured.json");
    let (code, out, err) = pplan(&[
        "validate",
        "--predicted",
        s(&pred),
        "--measured",
        &trace,
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert!((v["step_time_predicted_s"].as_f64().unwrap() - predicted).abs() < 1e-6);
    v
}

fn check_schedule(schedule: &str, with_prior: bool) -> f64 {
    let (rep, prof, hw) = calibrate(schedule, with_prior);
    // The stage rows are the trace's own per-stage means.
    let means = trace_means(&format!("{DATA}/{schedule}.measured.json"));
    let stages = rep["stages"].as_array().unwrap();
    assert_eq!(stages.len(), means.len());
    let profile: Value = serde_json::from_str(&std::fs::read_to_string(&prof).unwrap()).unwrap();
    let layers = profile["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 8 + 2, "embedding, 8 layers, output");
    for st in stages {
        let k = st["stage"].as_u64().unwrap();
        let (f, b) = means[&k];
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6 * b.max(1.0);
        assert!(
            close(st["measured_forward_ms"].as_f64().unwrap(), f),
            "{st}"
        );
        assert!(
            close(st["measured_backward_ms"].as_f64().unwrap(), b),
            "{st}"
        );
        // The profile's entries of the stage sum to the measured times.
        let first = st["first_layer"].as_u64().unwrap() as usize;
        let n = st["num_layers"].as_u64().unwrap() as usize;
        let mut idx: Vec<usize> = (first + 1..first + 1 + n).collect();
        if first == 0 {
            idx.push(0);
        }
        if first + n == 8 {
            idx.push(9);
        }
        let sum = |field: &str| -> f64 {
            idx.iter()
                .map(|&i| layers[i][field].as_f64().unwrap())
                .sum()
        };
        assert!(
            close(sum("forward_ms"), f),
            "stage {k}: {}",
            sum("forward_ms")
        );
        assert!(
            close(sum("backward_ms"), b),
            "stage {k}: {}",
            sum("backward_ms")
        );
        assert!(st["prior_forward_ms"].as_f64().unwrap() > 0.0);
    }
    let v = predict_and_validate(schedule, &prof, &hw);
    let err = v["step_time_error"].as_f64().unwrap();
    assert!(
        err.abs() < 0.05,
        "{schedule}: calibrated prediction {} s vs measured {} s: {:+.2} %",
        v["step_time_predicted_s"],
        v["step_time_measured_s"],
        err * 100.0
    );
    // The report's measured step is the same median validate computes.
    let m = v["step_time_measured_s"].as_f64().unwrap();
    assert!((rep["step_time_measured_s"].as_f64().unwrap() - m).abs() < 1e-6 * m);
    err
}

#[test]
fn calibrated_1f1b_predicts_its_run_within_5_percent() {
    check_schedule("1f1b", true);
}

#[test]
fn calibrated_zb_h1_predicts_its_run_within_5_percent_with_split_backward() {
    check_schedule("zb-h1", true);
    let (rep, prof, _) = calibrate("zb-h1", true);
    // ZB-H1 runs I and W: the profile's split is the measured one.
    let profile: Value = serde_json::from_str(&std::fs::read_to_string(prof).unwrap()).unwrap();
    let layers = profile["layers"].as_array().unwrap();
    for st in rep["stages"].as_array().unwrap() {
        let i = st["measured_backward_input_ms"].as_f64().unwrap();
        let w = st["measured_backward_weight_ms"].as_f64().unwrap();
        let first = st["first_layer"].as_u64().unwrap() as usize;
        let range: Vec<usize> = if first == 0 {
            (0..5).collect()
        } else {
            (5..10).collect()
        };
        let si: f64 = range
            .iter()
            .map(|&k| layers[k]["backward_input_ms"].as_f64().unwrap())
            .sum();
        let sw: f64 = range
            .iter()
            .map(|&k| layers[k]["backward_weight_ms"].as_f64().unwrap())
            .sum();
        assert!((si - i).abs() < 1e-6 && (sw - w).abs() < 1e-6, "{st}");
    }
}

#[test]
fn calibrated_interleaved_predicts_its_run_within_5_percent() {
    check_schedule("interleaved-1f1b", true);
}

#[test]
fn without_a_prior_the_stage_time_is_spread_evenly() {
    check_schedule("1f1b", false);
    let (rep, prof, hw) = calibrate("1f1b", false);
    let profile: Value = serde_json::from_str(&std::fs::read_to_string(prof).unwrap()).unwrap();
    let layers = profile["layers"].as_array().unwrap();
    assert_eq!(layers[0]["forward_ms"], 0.0);
    assert_eq!(layers[9]["forward_ms"], 0.0);
    let f0 = rep["stages"][0]["measured_forward_ms"].as_f64().unwrap();
    for l in &layers[1..5] {
        assert!((l["forward_ms"].as_f64().unwrap() - f0 / 4.0).abs() < 1e-9);
    }
    // The plan says bf16 (the CPU executor computes f32 whatever it says): b·s·h·2 bytes go
    // downstream, the element size the plan names.
    assert_eq!(layers[4]["output_bytes"], 128 * 256 * 2);
    assert_eq!(profile["micro_batch"], 1);
    // The hardware came from the plan's `hardware` and its fitted terms are marked.
    let h: Value = serde_json::from_str(&std::fs::read_to_string(hw).unwrap()).unwrap();
    assert_eq!(h["name"], "cpu-measured-calibrated");
    let fitted: Vec<&str> = h["fitted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    for t in rep["hardware_terms"].as_array().unwrap() {
        assert!(fitted.contains(&t["field"].as_str().unwrap()), "{t}");
    }
}

#[test]
fn fitted_hardware_terms_follow_their_formulas() {
    let (rep, _, hw) = calibrate("1f1b", true);
    let h: Value = serde_json::from_str(&std::fs::read_to_string(hw).unwrap()).unwrap();
    let prior: Value = serde_json::from_str(&data_text("hw.json")).unwrap();
    let f = |v: &Value, a: &str, b: &str| v[a][b].as_f64().unwrap();
    // Transfer: t = bytes / (bw · eff) + latency, latency kept.
    let t = rep["p2p_measured_s"].as_f64().unwrap();
    let bytes = rep["p2p_bytes"].as_f64().unwrap();
    assert_eq!(bytes, 131072.0);
    let rate = f(&h, "node", "nvlink_bandwidth_bytes_per_s") * f(&h, "node", "nvlink_efficiency");
    let lat = f(&h, "node", "nvlink_latency_s");
    assert_eq!(lat, f(&prior, "node", "nvlink_latency_s"));
    assert!(
        (bytes / rate + lat - t).abs() < 1e-9 * t.max(1.0) + 1e-12,
        "{t}"
    );
    // Memory bandwidth: rate scaled by prior / measured optimizer time.
    let (om, op) = (
        rep["optimizer_measured_s"].as_f64().unwrap(),
        rep["optimizer_prior_s"].as_f64().unwrap(),
    );
    let hbm = |v: &Value| f(v, "gpu", "hbm_bandwidth_bytes_per_s") * f(v, "gpu", "hbm_efficiency");
    assert!((hbm(&h) / hbm(&prior) - op / om).abs() < 1e-9);
    // Compute: GEMM rate divided by the compute scale.
    let sc = rep["compute_scale"].as_f64().unwrap();
    let gemm = |v: &Value| f(v, "gpu", "peak_flops_per_s") * f(v, "gpu", "gemm_efficiency_max");
    assert!((gemm(&h) * sc / gemm(&prior) - 1.0).abs() < 1e-9);
    let copied: Vec<&str> = rep["hardware_copied"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap())
        .collect();
    assert!(
        copied.contains(&"node.nic_bandwidth_bytes_per_s") && copied.contains(&"gpu.gemm_half_dim")
    );
}

#[test]
fn the_table_names_stages_terms_and_files() {
    let prof = tmp("table.profile.json");
    let (code, out, err) = pplan(&[
        "calibrate",
        "--trace",
        &format!("{DATA}/1f1b.measured.json"),
        "--plan",
        &format!("{DATA}/1f1b.plan.json"),
        "--out-profile",
        s(&prof),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("F_meas_ms") && out.contains("B_prior_ms"),
        "{out}"
    );
    assert!(
        out.contains("fitted hardware term") && out.contains("gpu.hbm_efficiency"),
        "{out}"
    );
    assert!(out.contains(&format!("wrote {}", prof.display())), "{out}");
    // The written profile is a valid --profile for simulate too.
    let (code, _, err) = pplan(&[
        "simulate",
        "--schedule",
        "1f1b",
        "--stages",
        "2",
        "--microbatches",
        "8",
        "--profile",
        s(&prof),
        "--boundaries",
        "0,5",
    ]);
    assert_eq!(code, 0, "{err}");
}

fn calibrate_err(args: &[&str]) -> String {
    let prof = tmp("err.profile.json");
    let mut a = vec!["calibrate"];
    a.extend_from_slice(args);
    a.extend(["--out-profile", s(&prof)]);
    let (code, out, err) = pplan(&a);
    assert_eq!(code, 2, "stdout {out}\nstderr {err}");
    err
}

#[test]
fn a_trace_without_pipeline_actions_is_refused() {
    let t = tmp("no-actions.json");
    std::fs::write(
        &t,
        r#"{"traceEvents":[{"name":"OPTIMIZER_STEP","ph":"X","ts":0,"dur":5,"pid":0,"tid":5,"args":{}}]}"#,
    )
    .unwrap();
    let err = calibrate_err(&[
        "--trace",
        s(&t),
        "--plan",
        &format!("{DATA}/1f1b.plan.json"),
    ]);
    assert!(
        err.contains("the trace names no pipeline actions (0F1 / PP:0F1): calibrate needs per-stage forward/backward times"),
        "{err}"
    );
    assert!(err.contains("no-actions.json"), "{err}");
}

#[test]
fn stages_on_one_side_only_are_named() {
    // Interleaved run (stages 0..3) against the 1F1B plan (stages 0, 1).
    let err = calibrate_err(&[
        "--trace",
        &format!("{DATA}/interleaved-1f1b.measured.json"),
        "--plan",
        &format!("{DATA}/1f1b.plan.json"),
    ]);
    assert!(
        err.contains("stages 2, 3 are in the trace but not in --plan"),
        "{err}"
    );
    // And the other way round.
    let err = calibrate_err(&[
        "--trace",
        &format!("{DATA}/1f1b.measured.json"),
        "--plan",
        &format!("{DATA}/interleaved-1f1b.plan.json"),
    ]);
    assert!(
        err.contains("stages 2, 3 of --plan") && err.contains("have no forward or backward action"),
        "{err}"
    );
}

#[test]
fn a_profile_of_another_layer_count_is_refused() {
    let text = data_text("layers.json");
    let mut v: Value = serde_json::from_str(&text).unwrap();
    v["layers"].as_array_mut().unwrap().truncate(5);
    let p = tmp("short-profile.json");
    std::fs::write(&p, v.to_string()).unwrap();
    let err = calibrate_err(&[
        "--trace",
        &format!("{DATA}/1f1b.measured.json"),
        "--plan",
        &format!("{DATA}/1f1b.plan.json"),
        "--profile",
        s(&p),
    ]);
    assert!(
        err.contains("short-profile.json")
            && err.contains("the profile has 5 layers but the model has 8 transformer layers"),
        "{err}"
    );
}

#[test]
fn out_hardware_without_a_hardware_profile_is_refused() {
    let text = data_text("1f1b.plan.json");
    let mut v: Value = serde_json::from_str(&text).unwrap();
    v["hardware"] = Value::from("no-such-hardware.json");
    let plan = tmp("plan-no-hw.json");
    std::fs::write(&plan, v.to_string()).unwrap();
    let hw = tmp("never.hw.json");
    let err = calibrate_err(&[
        "--trace",
        &format!("{DATA}/1f1b.measured.json"),
        "--plan",
        s(&plan),
        "--out-hardware",
        s(&hw),
    ]);
    assert!(
        err.contains("--out-hardware")
            && err.contains("no-such-hardware.json")
            && err.contains("give --hardware"),
        "{err}"
    );
    assert!(!hw.exists());
}

/// The whole loop live on this machine (CPU executor, 2 devices, 1F1B): profile, predict, run,
/// calibrate on the run's trace, predict again. Prints the errors before and after; asserts
/// the calibrated one is within 5 %. Needs 2 idle cores and `target/release/pplan-exec`.
#[test]
#[ignore = "runs the CPU executor for real (about a minute); needs target/release/pplan-exec"]
fn live_cpu_loop() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exec = std::env::var("PPLAN_EXEC")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target/release/pplan-exec"));
    assert!(
        exec.exists(),
        "build it first: cargo build --release -p pplan-exec"
    );
    let run = |args: &[&str]| {
        let out = std::process::Command::new(&exec)
            .args(args)
            .current_dir(root)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let layers = tmp("live.layers.json");
    let hw = tmp("live.hw.json");
    let plan = tmp("live.plan.json");
    let measured = tmp("live.measured.json");
    run(&[
        "profile",
        "--model",
        MODEL,
        "--micro-batch",
        "1",
        "--backend",
        "cpu",
        "--out-profile",
        s(&layers),
        "--out-hardware",
        s(&hw),
        "--devices",
        "2",
    ]);
    let (code, _, err) = predict_tiny(&hw, &layers, &["--schedule", "1f1b", "--output", s(&plan)]);
    assert_eq!(code, 0, "{err}");
    run(&[
        "run",
        "--plan",
        s(&plan),
        "--backend",
        "cpu",
        "--steps",
        "5",
        "--trace",
        s(&measured),
    ]);
    let cal = tmp("live.cal.json");
    let cal_hw = tmp("live.cal-hw.json");
    let (code, out, err) = pplan(&[
        "calibrate",
        "--trace",
        s(&measured),
        "--plan",
        s(&plan),
        "--profile",
        s(&layers),
        "--hardware",
        s(&hw),
        "--out-profile",
        s(&cal),
        "--out-hardware",
        s(&cal_hw),
    ]);
    assert_eq!(code, 0, "{err}");
    println!("{out}");
    for (label, prof, h) in [("prior", &layers, &hw), ("calibrated", &cal, &cal_hw)] {
        let pred = tmp(&format!("live.{label}.pred.json"));
        let (code, _, err) = predict_tiny(h, prof, &["--schedule", "1f1b", "--trace", s(&pred)]);
        assert_eq!(code, 0, "{err}");
        let (code, out, err) = pplan(&[
            "validate",
            "--predicted",
            s(&pred),
            "--measured",
            s(&measured),
            "--format",
            "json",
        ]);
        assert_eq!(code, 0, "{err}");
        let v = json(&out);
        let e = v["step_time_error"].as_f64().unwrap();
        println!(
            "{label}: predicted {} s, measured {} s, error {:+.2} %",
            v["step_time_predicted_s"],
            v["step_time_measured_s"],
            e * 100.0
        );
        if label == "calibrated" {
            assert!(e.abs() < 0.05, "calibrated error {:+.2} %", e * 100.0);
        }
    }
}

/// A run written as PyTorch-profiler traces (`pplan-exec run --trace-format kineto`, gzipped,
/// one per device): calibrate reads the directory, and the calibrated prediction is within 5 %
/// of the measured step (mean over ranks of each rank's median `ProfilerStep`).
#[test]
fn calibrated_from_kineto_traces_predicts_within_5_percent() {
    let prof = tmp("kineto.profile.json");
    let hw = tmp("kineto.hw.json");
    let (code, out, err) = pplan(&[
        "calibrate",
        "--trace",
        &format!("{DATA}/1f1b-kineto"),
        "--plan",
        &format!("{DATA}/1f1b.plan.json"),
        "--profile",
        &format!("{DATA}/layers.json"),
        "--hardware",
        &format!("{DATA}/hw.json"),
        "--out-profile",
        s(&prof),
        "--out-hardware",
        s(&hw),
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let rep = json(&out);
    assert_eq!(rep["stages"].as_array().unwrap().len(), 2);
    assert_eq!(rep["stages"][0]["forward_count"], 32);
    // No OPTIMIZER_STEP in a Kineto trace: the memory terms are copied.
    assert!(rep["optimizer_measured_s"].is_null());
    let copied = rep["hardware_copied"].to_string();
    assert!(copied.contains("gpu.hbm_efficiency"), "{copied}");
    let (code, out, err) = pplan(&[
        "predict",
        "--model",
        MODEL,
        "--hardware",
        s(&hw),
        "--profile",
        s(&prof),
        "--gpus",
        "2",
        "--pp",
        "2",
        "--global-batch",
        "8",
        "--micro-batch",
        "1",
        "--schedule",
        "1f1b",
        "--recompute",
        "none",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let p = json(&out)["step_time_s"].as_f64().unwrap();
    let m = rep["step_time_measured_s"].as_f64().unwrap();
    assert!(
        ((p - m) / m).abs() < 0.05,
        "calibrated {p} s vs measured {m} s"
    );
}

/// Issue #42: a fit is checked like any profile before it is written. Transfers 10^6 times
/// longer (a trace whose receives include waiting) gave an NVLink efficiency of 3.5e-8;
/// forward actions of 0 ms gave a layer profile of 0 ms.
#[test]
fn implausible_fits_are_refused_naming_the_measurement() {
    let text = data_text("1f1b.measured.json");
    let edit = |f: &dyn Fn(&mut Value)| {
        let mut v: Value = serde_json::from_str(&text).unwrap();
        for e in v["traceEvents"].as_array_mut().unwrap() {
            f(e);
        }
        v.to_string()
    };
    let slow = tmp("slow-recv.json");
    std::fs::write(
        &slow,
        edit(&|e| {
            if e["name"].as_str().unwrap().contains("RECV") {
                e["dur"] = Value::from(e["dur"].as_f64().unwrap() * 1e6);
            }
        }),
    )
    .unwrap();
    let hw = tmp("slow.hw.json");
    let err = calibrate_err(&[
        "--trace",
        s(&slow),
        "--plan",
        &format!("{DATA}/1f1b.plan.json"),
        "--out-hardware",
        s(&hw),
    ]);
    assert!(
        err.contains("the fitted hardware profile is out of range")
            && err.contains("node.nvlink_efficiency")
            && err.contains("valid 0.01 to 1")
            && err.contains("median pipeline transfer"),
        "{err}"
    );
    assert!(!hw.exists());
    let zero = tmp("zero-forward.json");
    std::fs::write(
        &zero,
        edit(&|e| {
            let n = e["name"].as_str().unwrap().to_string();
            if n.starts_with("0F") {
                e["dur"] = Value::from(0.0);
            }
        }),
    )
    .unwrap();
    let err = calibrate_err(&[
        "--trace",
        s(&zero),
        "--plan",
        &format!("{DATA}/1f1b.plan.json"),
    ]);
    assert!(
        err.contains("stage 0's forward actions last 0 ms in the trace"),
        "{err}"
    );
}
