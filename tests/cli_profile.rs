//! `--profile` for `pplan predict` and `pplan simulate`: a profile holding the cost model's own
//! per-layer figures reproduces the cost-model prediction; a uniform profile reproduces unit
//! costs; uneven boundaries match the 1F1B closed form; bad profiles exit 2 naming the counts.

mod common;
use common::{json, pplan};
use pplan::cost::memory::{self, ActDims};
use pplan::cost::{BlockCost, CostModel, Layout, Recompute, Stack};
use pplan::inputs::hardware::Hardware;
use pplan::inputs::model::Model;
use pplan::inputs::profile::{LayerProfile, ProfiledLayer};
use std::path::PathBuf;

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pplan-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn entry(name: &str, c: BlockCost, activation_bytes: u64, output_bytes: u64) -> ProfiledLayer {
    let (i, w) = (
        c.backward_input.total_s() * 1e3,
        c.backward_weight.total_s() * 1e3,
    );
    ProfiledLayer {
        name: name.into(),
        forward_ms: c.forward.total_s() * 1e3,
        backward_ms: i + w,
        backward_input_ms: Some(i),
        backward_weight_ms: Some(w),
        weight_bytes: 0,
        activation_bytes,
        output_bytes,
    }
}

/// gpt-1.7b on 8 A100s (one node), t=1, p=4, d=2, b=1, no recomputation: the cost model's own
/// per-layer figures, optionally with the embedding and output layer.
fn cost_model_profile(with_ends: bool) -> (String, Vec<&'static str>) {
    let model = Model::preset("gpt-1.7b").unwrap();
    let hw = Hardware::bundled("a100-80gb").unwrap();
    let layout = Layout {
        pp: 4,
        dp: 2,
        ..Layout::tensor_parallel(1)
    };
    let cm = CostModel {
        model: &model,
        hw: &hw,
        layout,
        stack: Stack::default(),
    };
    let dims = ActDims::new(&model, 1, 1);
    let act = memory::layer_activation_bytes(dims, Recompute::None, false);
    // What the cost model sends between stages: 2 b s h bytes (bf16).
    let out = 2 * model.seq_len * model.hidden_size;
    let mut layers: Vec<ProfiledLayer> = (0..model.num_layers)
        .map(|i| entry(&format!("layer{i}"), cm.layer(), act, out))
        .collect();
    if with_ends {
        layers.insert(
            0,
            entry(
                "embedding",
                cm.embedding(),
                memory::embedding_activation_bytes(dims, false),
                out,
            ),
        );
        layers.push(entry(
            "output",
            cm.output_layer(),
            memory::output_activation_bytes(
                dims,
                model.vocab_size,
                cm.stack.cross_entropy_fusion.saved_bytes_per_logit(),
            ),
            0,
        ));
    }
    let p = LayerProfile {
        source: Some("pplan's cost model (a consistency fixture, not a measurement)".into()),
        micro_batch: Some(1),
        layers,
    };
    // One file per call: tests run in parallel and several build this profile.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = tmp(&format!(
        "cm-{}-{n}.json",
        if with_ends { "ends" } else { "layers" }
    ));
    std::fs::write(&path, p.to_json()).unwrap();
    (
        path.display().to_string(),
        vec![
            "predict",
            "--model",
            "gpt-1.7b",
            "--gpus",
            "8",
            "--pp",
            "4",
            "--global-batch",
            "16",
            "--recompute",
            "none",
            // The profile is the 2021 stack's cost model (`Stack::default`).
            "--stack",
            "megatron-2021",
            "--format",
            "json",
        ],
    )
}

#[test]
fn predict_with_the_cost_models_own_profile_matches_the_cost_model() {
    for with_ends in [false, true] {
        let (profile, args) = cost_model_profile(with_ends);
        let (code, out, err) = pplan(&args);
        assert_eq!(code, 0, "{err}");
        let base = json(&out);
        let mut with = args.clone();
        with.extend(["--profile", &profile]);
        let (code, out, err) = pplan(&with);
        assert_eq!(code, 0, "{err}");
        let prof = json(&out);
        for field in ["step_time_s", "bubble_fraction", "tflops_per_gpu"] {
            let (a, b) = (base[field].as_f64().unwrap(), prof[field].as_f64().unwrap());
            assert!(
                ((a - b) / a).abs() < 1e-6,
                "with_ends={with_ends} {field}: {a} vs {b}"
            );
        }
        assert_eq!(base["peak_memory_bytes"], prof["peak_memory_bytes"]);
    }
}

#[test]
fn predict_uses_the_profile_times() {
    // Doubling every layer's time makes the step slower, but less than twice as slow (the
    // embedding, output layer, transfers, reduction and optimizer stay).
    let (profile, args) = cost_model_profile(false);
    let mut p = LayerProfile::from_json(&std::fs::read_to_string(&profile).unwrap(), "p").unwrap();
    for l in &mut p.layers {
        l.forward_ms *= 2.0;
        l.backward_ms *= 2.0;
        l.backward_input_ms = l.backward_input_ms.map(|x| x * 2.0);
        l.backward_weight_ms = l.backward_weight_ms.map(|x| x * 2.0);
    }
    let slow = tmp("slow.json");
    std::fs::write(&slow, p.to_json()).unwrap();
    let step = |extra: &[&str]| {
        let mut a = args.clone();
        a.extend_from_slice(extra);
        let (code, out, err) = pplan(&a);
        assert_eq!(code, 0, "{err}");
        json(&out)["step_time_s"].as_f64().unwrap()
    };
    let (base, doubled) = (
        step(&["--profile", &profile]),
        step(&["--profile", slow.to_str().unwrap()]),
    );
    assert!(
        doubled > 1.5 * base && doubled < 2.0 * base,
        "{base} {doubled}"
    );
}

#[test]
fn predict_refuses_profiles_that_do_not_fit_the_model() {
    let (profile, args) = cost_model_profile(false);
    let mut p = LayerProfile::from_json(&std::fs::read_to_string(&profile).unwrap(), "p").unwrap();
    p.layers.pop();
    let short = tmp("short.json");
    std::fs::write(&short, p.to_json()).unwrap();
    let mut a = args.clone();
    a.extend(["--profile", short.to_str().unwrap()]);
    let (code, _, err) = pplan(&a);
    assert_eq!(code, 2);
    assert!(
        err.contains("short.json")
            && err.contains("23 layers")
            && err.contains("24 transformer layers")
            && err.contains("26"),
        "{err}"
    );
    // Measured at another micro-batch size.
    let mut a = args.clone();
    a.extend(["--profile", &profile, "--micro-batch", "2"]);
    let (code, _, err) = pplan(&a);
    assert_eq!(code, 2);
    assert!(
        err.contains("micro-batch 1") && err.contains("--micro-batch is 2"),
        "{err}"
    );
}

fn uniform_profile(name: &str, layers: usize, f_ms: f64, out_bytes: u64) -> String {
    let p = LayerProfile {
        source: None,
        micro_batch: None,
        layers: (0..layers)
            .map(|i| ProfiledLayer {
                name: format!("l{i}"),
                forward_ms: f_ms,
                backward_ms: 2.0 * f_ms,
                backward_input_ms: None,
                backward_weight_ms: None,
                weight_bytes: 1000,
                activation_bytes: 100,
                output_bytes: out_bytes,
            })
            .collect(),
    };
    let path = tmp(name);
    std::fs::write(&path, p.to_json()).unwrap();
    path.display().to_string()
}

fn sim(args: &[&str]) -> serde_json::Value {
    let mut a = vec!["simulate"];
    a.extend_from_slice(args);
    a.extend(["--format", "json"]);
    let (code, out, err) = pplan(&a);
    assert_eq!(code, 0, "{err}");
    json(&out)
}

#[test]
fn simulate_with_a_uniform_profile_equals_unit_costs() {
    let prof = uniform_profile("uniform.json", 8, 0.25, 1);
    for (schedule, chunks) in [("1f1b", "1"), ("interleaved-1f1b", "2"), ("zb-h1", "1")] {
        let common = [
            "--schedule",
            schedule,
            "--stages",
            "4",
            "--microbatches",
            "8",
            "--chunks",
            chunks,
        ];
        let mut a = common.to_vec();
        a.extend(["--profile", &prof]);
        let p = sim(&a);
        // 8 layers over 4 devices: 0.5 ms forward, 1 ms backward per device.
        let mut u = common.to_vec();
        u.extend(["--forward", "0.5", "--backward", "1"]);
        let unit = sim(&u);
        assert_eq!(p["makespan"], unit["makespan"], "{schedule}");
        assert_eq!(p["bubble_fraction"], unit["bubble_fraction"], "{schedule}");
        // Memory is known with a profile: weights of the device's layers plus activations.
        assert!(p["devices"][0]["peak_memory_bytes"].as_u64().unwrap() >= 2000);
    }
}

#[test]
fn simulate_with_boundaries_matches_the_1f1b_closed_form() {
    let prof = uniform_profile("bounds.json", 8, 0.25, 1);
    let v = sim(&[
        "--schedule",
        "1f1b",
        "--stages",
        "4",
        "--microbatches",
        "8",
        "--profile",
        &prof,
        "--boundaries",
        "0,1,2,3",
    ]);
    // Stages of 1, 1, 1, 5 layers; the last is the bottleneck: sum over stages of (F + B)
    // plus (m - 1) x (F + B) of the slowest stage.
    let expected = 3.0 * 0.75 + 3.75 + 7.0 * 3.75;
    assert!(
        (v["makespan"].as_f64().unwrap() - expected).abs() < 1e-9,
        "{v}"
    );

    // With hardware, a transfer of the last layer's output_bytes takes bytes / NVLink + latency.
    let mb = 50_000_000u64;
    let prof = uniform_profile("bytes.json", 8, 0.25, mb);
    let trace = tmp("bytes-trace.json");
    sim(&[
        "--schedule",
        "1f1b",
        "--stages",
        "4",
        "--microbatches",
        "8",
        "--profile",
        &prof,
        "--hardware",
        "h100-80gb",
        "--trace",
        trace.to_str().unwrap(),
    ]);
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let want_us = pplan::cost::p2p_link_s(&hw, mb as f64, true) * 1e6;
    let t: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let send = t["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "0SEND_F0")
        .expect("a send span");
    assert!(
        (send["dur"].as_f64().unwrap() - want_us).abs() < 1e-3,
        "{send} vs {want_us}"
    );
}

#[test]
fn simulate_profile_errors_exit_2() {
    let prof = uniform_profile("err.json", 8, 0.25, 1);
    let base = [
        "simulate",
        "--schedule",
        "1f1b",
        "--stages",
        "4",
        "--microbatches",
        "8",
    ];
    let cases: &[(&[&str], &str)] = &[
        (&["--profile", &prof, "--forward", "2"], "--forward"),
        (&["--profile", &prof, "--boundaries", "0,2,4"], "4 stages"),
        (&["--profile", &prof, "--boundaries", "0,2,2,5"], "increase"),
        (&["--profile", &prof, "--boundaries", "0,a"], "--boundaries"),
        (&["--boundaries", "0,2,4,6"], "--profile"),
        (&["--profile", &prof, "--hardware", "tpu-v9"], "--hardware"),
        (
            &["--profile", "no/such/profile.json"],
            "no/such/profile.json",
        ),
    ];
    for (extra, needle) in cases {
        let mut a = base.to_vec();
        a.extend_from_slice(extra);
        let (code, _, err) = pplan(&a);
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert!(err.contains(needle), "{extra:?}: {err}");
    }
    let small = uniform_profile("small.json", 3, 0.25, 1);
    let mut a = base.to_vec();
    a.extend(["--profile", &small]);
    let (code, _, err) = pplan(&a);
    assert_eq!(code, 2);
    assert!(
        err.contains("3 layers") && err.contains("4 stages"),
        "{err}"
    );
}

/// `--attention flash` needs the hardware's attention law only where the cost model times the
/// layers: a measured layer profile's times include the attention (the CPU executor's profile
/// has no law, and its context-parallel plans need flash attention).
#[test]
fn flash_attention_needs_a_law_or_a_profile() {
    let base = [
        "predict",
        "--model",
        "examples/models/tiny-gpt-cpu.json",
        "--hardware",
        "tests/data/measured/cpu-exec/hw.json",
        "--gpus",
        "2",
        "--pp",
        "2",
        "--micro-batch",
        "1",
        "--global-batch",
        "8",
        "--attention",
        "flash",
    ];
    let (code, _, err) = pplan(&base);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--attention flash") && err.contains("--profile"),
        "{err}"
    );
    let mut with = base.to_vec();
    with.extend(["--profile", "tests/data/measured/cpu-exec/layers.json"]);
    let (code, out, err) = pplan(&with);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("step_time_s"), "{out}");
}
