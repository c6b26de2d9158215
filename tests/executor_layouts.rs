//! Plans with mixture-of-experts layers, FP8 GEMMs and expert, context and data parallelism
//! run in the CPU executor and validate against their prediction, as a user runs them:
//! `pplan-exec profile` at the layout -> `pplan predict --profile` -> `pplan-exec run` ->
//! `pplan validate` (issue 43). How close the prediction comes is measured by
//! `benches/cpu_validate_parallel.sh` (docs/executor.md has its figures); a shared CI machine's
//! timings are not asserted here. What is: every command exits 0, the plan carries the layout
//! the executor ran, and every measured action (compute, transfers, gradient reductions,
//! optimizer step) has its predicted counterpart and the reverse, with finite errors.
//!
//! The executor binary is the workspace's (`cargo test --workspace` builds it beside `pplan`);
//! when it is missing the test builds it first.

mod common;
use common::{json, pplan};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Two layers (one dense, one MoE of 4 experts, top 2, a shared expert), 16 tokens a sequence.
const MODEL: &str = r#"{
  "num_layers": 2, "hidden_size": 32, "num_attention_heads": 2, "ffn_hidden_size": 64,
  "seq_length": 16, "vocab_size": 64, "num_experts": 4, "moe_router_topk": 2,
  "moe_ffn_hidden_size": 32, "moe_shared_expert_intermediate_size": 16,
  "moe_layer_freq": [0, 1]
}"#;

fn exec_path() -> PathBuf {
    let exe = Path::new(env!("CARGO_BIN_EXE_pplan")).with_file_name("pplan-exec");
    if !exe.exists() {
        let release = exe.to_string_lossy().contains("/release/");
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["build", "-q", "-p", "pplan-exec"]);
        if release {
            cmd.arg("--release");
        }
        let st = cmd.status().expect("run cargo build -p pplan-exec");
        assert!(st.success(), "cargo build -p pplan-exec failed");
    }
    exe
}

fn run_exec(args: &[&str]) -> String {
    let out = Command::new(exec_path())
        .args(args)
        .output()
        .expect("run pplan-exec");
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "pplan-exec {args:?}: {se}");
    so
}

fn tmp(name: &str) -> String {
    let dir = std::env::temp_dir().join(format!("pplan-exec-layouts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name).to_string_lossy().into_owned()
}

/// One layout through the loop; returns the plan's `parallelism` and validate's JSON.
fn loop_once(
    name: &str,
    profile: &[&str],
    predict: &[&str],
) -> (serde_json::Value, serde_json::Value) {
    let model = tmp(&format!("{name}.model.json"));
    std::fs::write(&model, MODEL).unwrap();
    let (layers, hw) = (
        tmp(&format!("{name}.layers.json")),
        tmp(&format!("{name}.hw.json")),
    );
    let mut args = vec![
        "profile",
        "--model",
        &model,
        "--micro-batch",
        "1",
        "--repeats",
        "1",
        "--out-profile",
        &layers,
        "--out-hardware",
        &hw,
    ];
    args.extend(profile);
    run_exec(&args);
    let (plan, predicted) = (
        tmp(&format!("{name}.plan.json")),
        tmp(&format!("{name}.predicted.json")),
    );
    let mut args = vec![
        "predict",
        "--model",
        &model,
        "--hardware",
        &hw,
        "--profile",
        &layers,
        "--micro-batch",
        "1",
        "--schedule",
        "1f1b",
        "--output",
        &plan,
        "--trace",
        &predicted,
    ];
    args.extend(predict);
    let (code, _, err) = pplan(&args);
    assert_eq!(code, 0, "{name}: predict: {err}");
    let measured = tmp(&format!("{name}.measured.json"));
    let out = run_exec(&[
        "run",
        "--plan",
        &plan,
        "--backend",
        "cpu",
        "--steps",
        "3",
        "--trace",
        &measured,
        "--format",
        "json",
    ]);
    let summary = json(&out);
    assert!(
        summary["loss_per_step"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l.as_f64().unwrap().is_finite()),
        "{name}: {summary}"
    );
    let (code, out, err) = pplan(&[
        "validate",
        "--predicted",
        &predicted,
        "--measured",
        &measured,
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{name}: validate: {err}");
    let v = json(&out);
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    (plan["parallelism"].clone(), v)
}

fn check(name: &str, profile: &[&str], predict: &[&str], want: &[(&str, serde_json::Value)]) {
    let (par, v) = loop_once(name, profile, predict);
    for (field, value) in want {
        assert_eq!(
            &par[*field], value,
            "{name}: plan field parallelism.{field}"
        );
    }
    assert_eq!(
        (
            v["actions_unmatched"]["predicted_only"].as_u64(),
            v["actions_unmatched"]["measured_only"].as_u64()
        ),
        (Some(0), Some(0)),
        "{name}: {}",
        v["warnings"]
    );
    assert!(
        v["warnings"].as_array().unwrap().is_empty(),
        "{name}: {}",
        v["warnings"]
    );
    let matched = v["actions_matched"].as_u64().unwrap();
    assert!(matched >= 4, "{name}: {matched} actions matched");
    for k in ["step_time_error", "action_error_mean_abs"] {
        assert!(v[k].as_f64().unwrap().is_finite(), "{name}: {k} = {}", v[k]);
    }
}

const DP: [&str; 6] = [
    "--overlap-grad-reduce",
    "off",
    "--zero",
    "0",
    "--grad-reduce-dtype",
    "fp32",
];

#[test]
fn fp8_moe_pipeline_runs_and_validates() {
    check(
        "fp8",
        &[
            "--devices",
            "2",
            "--precision",
            "fp8",
            "--fp8-recipe",
            "blockwise",
        ],
        &[
            "--gpus",
            "2",
            "--pp",
            "2",
            "--global-batch",
            "4",
            "--precision",
            "fp8",
            "--fp8-recipe",
            "blockwise",
        ],
        &[
            ("precision", "fp8".into()),
            ("fp8_recipe", "blockwise".into()),
            ("pp", 2.into()),
        ],
    );
}

#[test]
fn expert_parallel_plan_runs_and_validates() {
    let mut predict = vec![
        "--gpus",
        "2",
        "--pp",
        "1",
        "--ep",
        "2",
        "--global-batch",
        "4",
    ];
    predict.extend(DP);
    check(
        "ep",
        &["--devices", "1", "--dp", "2", "--ep", "2"],
        &predict,
        &[("ep", 2.into()), ("dp", 2.into())],
    );
}

#[test]
fn context_parallel_plan_runs_and_validates() {
    let mut predict = vec![
        "--gpus",
        "2",
        "--pp",
        "1",
        "--cp",
        "2",
        "--attention",
        "flash",
        "--global-batch",
        "2",
    ];
    predict.extend(DP);
    check(
        "cp",
        &["--devices", "1", "--cp", "2"],
        &predict,
        &[("cp", 2.into()), ("attention", "flash".into())],
    );
}

/// Everything at once: two stages, experts over the context-parallel ranks, FP8.
#[test]
fn expert_and_context_parallel_fp8_pipeline_runs_and_validates() {
    let mut predict = vec![
        "--gpus",
        "4",
        "--pp",
        "2",
        "--cp",
        "2",
        "--ep",
        "2",
        "--attention",
        "flash",
        "--global-batch",
        "4",
        "--precision",
        "fp8",
        "--fp8-recipe",
        "tensorwise",
    ];
    predict.extend(DP);
    check(
        "all",
        &[
            "--devices",
            "2",
            "--cp",
            "2",
            "--ep",
            "2",
            "--precision",
            "fp8",
        ],
        &predict,
        &[
            ("cp", 2.into()),
            ("ep", 2.into()),
            ("pp", 2.into()),
            ("precision", "fp8".into()),
        ],
    );
}
