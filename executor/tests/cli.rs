//! `pplan-exec` as a user runs it: outputs, files, exit codes and messages.

mod common;

use common::*;
use pplan::schedule::generators::ScheduleName;
use std::path::PathBuf;
use std::process::{Command, Output};

fn exe() -> Command {
    Command::new(env!("CARGO_BIN_EXE_pplan-exec"))
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pplan-exec-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn write_plan(name: &str, plan: &pplan::plan::plan_file::Plan) -> PathBuf {
    let p = tmp(name);
    std::fs::write(&p, plan.to_json()).unwrap();
    p
}

#[test]
fn run_writes_a_measured_trace_and_json_summary() {
    let plan_path = write_plan("ok.json", &plan(ScheduleName::OneFOneB, 2, 4, 1));
    let trace_path = tmp("measured.json");
    let o = exe()
        .args([
            "run",
            "--backend",
            "cpu",
            "--steps",
            "2",
            "--format",
            "json",
            "--plan",
        ])
        .arg(&plan_path)
        .arg("--trace")
        .arg(&trace_path)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["steps"], 2);
    assert_eq!(v["step_times_s"].as_array().unwrap().len(), 2);
    let losses = v["loss_per_step"].as_array().unwrap();
    // Random tokens over a vocabulary of 32: the loss starts near ln 32.
    let l0 = losses[0].as_f64().unwrap();
    assert!((l0 - 32f64.ln()).abs() < 0.5, "{l0}");
    assert!(v["mean_step_time_s"].as_f64().unwrap() > 0.0);

    let t: pplan::report::trace::Trace =
        serde_json::from_str(&std::fs::read_to_string(&trace_path).unwrap()).unwrap();
    let xs: Vec<_> = t.trace_events.iter().filter(|e| e.ph == "X").collect();
    // 16 compute actions per step, 2 steps; every event carries its step.
    let compute: Vec<_> = xs.iter().filter(|e| e.tid == 0).collect();
    assert_eq!(compute.len(), 32);
    assert!(xs.iter().all(|e| e.args.as_ref().unwrap().step.is_some()));
    assert!(compute.iter().any(|e| e.name == "1B3" && e.pid == 1));
    assert!(xs
        .iter()
        .any(|e| e.name == "1RECV_F0" && e.pid == 1 && e.tid == 2));
    assert!(xs.iter().any(|e| e.name == "OPTIMIZER_STEP" && e.tid == 5));
    assert!(xs
        .iter()
        .all(|e| e.ts.unwrap() >= 0.0 && e.dur.unwrap() >= 0.0));
}

#[test]
fn table_output_by_default() {
    let plan_path = write_plan("table.json", &plan(ScheduleName::GPipe, 2, 2, 1));
    let o = exe()
        .args(["run", "--plan"])
        .arg(&plan_path)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains("gpipe on cpu") && out.contains("mean step time"),
        "{out}"
    );
}

#[test]
fn bad_plans_exit_2_naming_the_field() {
    let mut bad = plan(ScheduleName::OneFOneB, 2, 4, 1);
    bad.stages[1].first_layer += 1;
    let p = write_plan("bad-field.json", &bad);
    let o = exe().args(["run", "--plan"]).arg(&p).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).1.contains("stages[1].first_layer"),
        "{}",
        text(&o).1
    );

    let p = tmp("not-json.json");
    std::fs::write(&p, "{ nope").unwrap();
    let o = exe().args(["run", "--plan"]).arg(&p).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("not a plan file"), "{}", text(&o).1);

    let o = exe()
        .args(["run", "--plan", "/nonexistent/plan.json"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("--plan: cannot read"), "{}", text(&o).1);

    // Valid plan, but a model the executor's spec does not have.
    let mut gqa = plan(ScheduleName::OneFOneB, 2, 4, 1);
    gqa.model.num_query_groups = 1;
    let p = write_plan("gqa.json", &gqa);
    let o = exe().args(["run", "--plan"]).arg(&p).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(
        text(&o).1.contains("model.num_query_groups"),
        "{}",
        text(&o).1
    );

    let p = write_plan("steps.json", &plan(ScheduleName::OneFOneB, 2, 2, 1));
    let o = exe()
        .args(["run", "--steps", "0", "--plan"])
        .arg(&p)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("--steps"), "{}", text(&o).1);
}

/// Layouts and formats the CPU backend runs are checked against the model before anything
/// starts; what neither backend runs, or only the CPU, exits 2 naming the field or flag.
#[test]
fn replica_and_fp8_plans_the_backends_cannot_run_exit_2_naming_the_field() {
    let mut delayed = plan(ScheduleName::OneFOneB, 2, 2, 1);
    delayed.parallelism.precision = "fp8".into();
    let p = write_plan("fp8-delayed.json", &delayed);
    let o = exe().args(["run", "--plan"]).arg(&p).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o).1);
    assert!(
        text(&o).1.contains("parallelism.fp8_recipe"),
        "{}",
        text(&o).1
    );

    let mut dp = plan(ScheduleName::OneFOneB, 2, 2, 1);
    dp.parallelism.dp = 2;
    dp.parallelism.gpus = 4;
    let p = write_plan("dp2.json", &dp);
    // The CPU runs it; the CUDA backend refuses it by field before looking for a GPU.
    let o = exe().args(["run", "--plan"]).arg(&p).output().unwrap();
    assert!(o.status.success(), "{}", text(&o).1);
    let o = exe()
        .args(["run", "--backend", "cuda", "--plan"])
        .arg(&p)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o).1);
    assert!(
        text(&o).1.contains("parallelism.dp") && text(&o).1.contains("--backend cpu"),
        "{}",
        text(&o).1
    );

    let model = tmp("tiny-profile-model.json");
    std::fs::write(
        &model,
        r#"{"num_layers": 2, "hidden_size": 16, "num_attention_heads": 2, "ffn_hidden_size": 32, "seq_length": 8, "vocab_size": 32}"#,
    )
    .unwrap();
    for (extra, want) in [
        (vec!["--cp", "3"], "--cp 3"),
        (vec!["--ep", "2", "--dp", "2"], "--ep 2"),
        (
            vec!["--precision", "fp8", "--fp8-recipe", "delayed"],
            "--fp8-recipe",
        ),
        (vec!["--backend", "cuda", "--dp", "2"], "--backend cpu"),
    ] {
        let o = exe()
            .args(["profile", "--micro-batch", "1", "--repeats", "1", "--model"])
            .arg(&model)
            .arg("--out-profile")
            .arg(tmp("never-l.json"))
            .arg("--out-hardware")
            .arg(tmp("never-h.json"))
            .args(&extra)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", text(&o).1);
        assert!(text(&o).1.contains(want), "{extra:?}: {}", text(&o).1);
    }
}

#[test]
fn cuda_without_a_gpu_exits_2_with_a_reason() {
    let p = write_plan("cuda.json", &plan(ScheduleName::OneFOneB, 2, 2, 1));
    let o = exe()
        .args(["run", "--backend", "cuda", "--plan"])
        .arg(&p)
        .output()
        .unwrap();
    if o.status.success() {
        return; // a machine with a GPU and the real backend
    }
    assert_eq!(o.status.code(), Some(2), "{}", text(&o).1);
    let err = text(&o).1;
    assert!(
        err.contains("--backend cuda") && err.to_lowercase().contains("cuda"),
        "{err}"
    );
}

/// `pplan-exec profile --format json` on a model file written from `model_json`, with `args`;
/// its summary and the layer and hardware profiles it wrote, read back with pplan's readers.
fn profile(
    tag: &str,
    model_json: &str,
    args: &[&str],
) -> (
    serde_json::Value,
    pplan::inputs::profile::LayerProfile,
    pplan::inputs::hardware::Hardware,
) {
    let model = tmp(&format!("{tag}-model.json"));
    std::fs::write(&model, model_json).unwrap();
    let (lp, hp) = (
        tmp(&format!("{tag}-layers.json")),
        tmp(&format!("{tag}-hw.json")),
    );
    let o = exe()
        .args(["profile", "--repeats", "1", "--format", "json"])
        .args(args)
        .arg("--model")
        .arg(&model)
        .arg("--out-profile")
        .arg(&lp)
        .arg("--out-hardware")
        .arg(&hp)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let read = |p: &PathBuf| std::fs::read_to_string(p).unwrap();
    (
        serde_json::from_str(&out).unwrap(),
        pplan::inputs::profile::LayerProfile::from_json(&read(&lp), "layers.json").unwrap(),
        pplan::inputs::hardware::Hardware::from_json(&read(&hp), "hw.json").unwrap(),
    )
}

/// A MoE model profiled at a layout: each layer's entry is its kind's (times, this rank's
/// parameters), the summary says the MoE layer's times, and an FP8 profile states its FP8 peak.
#[test]
fn profile_of_a_moe_model_at_a_layout_writes_each_layer_kind() {
    let (v, prof, hw) = profile(
        "moe",
        r#"{"num_layers": 3, "hidden_size": 16, "num_attention_heads": 2, "ffn_hidden_size": 32,
            "seq_length": 8, "vocab_size": 32, "num_experts": 4, "moe_router_topk": 2,
            "moe_ffn_hidden_size": 8, "moe_shared_expert_intermediate_size": 4,
            "moe_layer_freq": [0, 1, 1]}"#,
        &[
            "--micro-batch",
            "1",
            "--devices",
            "1",
            "--dp",
            "2",
            "--ep",
            "2",
            "--precision",
            "fp8",
        ],
    );
    let moe: Vec<f64> = v["moe_layer_ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert!(moe.len() == 3 && moe.iter().all(|&t| t > 0.0), "{moe:?}");
    let l = &prof.layers;
    assert_eq!(l.len(), 3 + 2);
    assert_eq!((l[2].forward_ms, l[3].forward_ms), (moe[0], moe[0]));
    assert_ne!(l[1].forward_ms, l[2].forward_ms);
    // Dense: 4h² + 2hf; MoE on one of 2 expert ranks: 4h² + hE + 2 of 4 experts' 2h·f_e + 2h·f_s.
    assert_eq!(l[1].weight_bytes, 4 * (4 * 256 + 2 * 16 * 32));
    assert_eq!(
        l[2].weight_bytes,
        4 * (4 * 256 + 16 * 4 + 2 * 2 * 16 * 8 + 2 * 16 * 4)
    );
    assert_eq!(hw.gpu.peak_fp8_flops_per_s, hw.gpu.peak_flops_per_s);
}

#[test]
fn profile_writes_files_the_planner_reads() {
    let (v, prof, hw) = profile(
        "dense",
        r#"{"num_layers": 3, "hidden_size": 16, "num_attention_heads": 2, "ffn_hidden_size": 32, "seq_length": 8, "vocab_size": 32}"#,
        &["--backend", "cpu", "--micro-batch", "2"],
    );
    assert!(v["peak_flops_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(prof.layers.len(), 3 + 2);
    assert_eq!(prof.layers[0].name, "embedding");
    assert_eq!(prof.layers[4].name, "output");
    // T = 2 * 8 tokens, h = 16, f = 32, 2 heads: 4 (6Th + 2Tf + b n s^2) bytes.
    assert_eq!(
        prof.layers[1].activation_bytes,
        4 * (6 * 16 * 16 + 2 * 16 * 32 + 2 * 2 * 8 * 8)
    );
    assert_eq!(prof.layers[1].output_bytes, 4 * 16 * 16);
    assert_eq!(prof.layers[1].weight_bytes, 4 * (4 * 16 * 16 + 2 * 16 * 32));
    assert_eq!(hw.node.gpus_per_node, 2);
    assert!(hw.gpu.peak_flops_per_s > 0.0 && hw.node.nvlink_bandwidth_bytes_per_s > 0.0);

    let o = exe()
        .args([
            "profile",
            "--micro-batch",
            "0",
            "--model",
            "gpt-1.7b",
            "--out-profile",
            "/tmp/x",
            "--out-hardware",
            "/tmp/y",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("--micro-batch"));
}

#[test]
fn profile_cuda_without_a_gpu_exits_2_with_the_reason() {
    let (lp, hp) = (tmp("cuda-layers.json"), tmp("cuda-hw.json"));
    let o = exe()
        .args([
            "profile",
            "--backend",
            "cuda",
            "--model",
            "gpt-1.7b",
            "--micro-batch",
            "1",
            "--seq-len",
            "64",
            "--repeats",
            "1",
            "--out-profile",
        ])
        .arg(&lp)
        .arg("--out-hardware")
        .arg(&hp)
        .output()
        .unwrap();
    if o.status.success() {
        // A GPU machine: the files must read back.
        pplan::inputs::hardware::Hardware::from_json(&std::fs::read_to_string(&hp).unwrap(), "hw")
            .unwrap();
        return;
    }
    let err = text(&o).1;
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--backend cuda") && err.contains("CUDA") && !err.contains("own profiler"),
        "{err}"
    );
}
