//! The `pplan predict` flags the published recipes set and runs files use: each reaches the
//! prediction the way its mechanism says (`--overlap-p2p-comm`, `--gradient-accumulation-fusion`,
//! `--grad-reduce-dtype`, `--fsdp-copies`, `--make-vocab-size-divisible-by`) and
//! `--micro-batch auto` / `--chunks auto` pick the fastest fitting configuration among the ones
//! they name; bad values exit 2 naming the flag.

mod common;
use common::{json, pplan};

fn predict(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["predict"];
    all.extend_from_slice(args);
    all.extend(["--format", "json"]);
    let (code, out, err) = pplan(&all);
    assert_eq!(code, 0, "{err}");
    json(&out)
}

fn step(v: &serde_json::Value) -> f64 {
    v["step_time_s"].as_f64().unwrap()
}

/// GPT-3 175B on 128 H100 in a 1F1B pipeline: the sends sit between the stages' compute.
const PIPELINE: [&str; 16] = [
    "--model",
    "gpt3-175b",
    "--hardware",
    "h100-80gb",
    "--gpus",
    "128",
    "--tp",
    "8",
    "--pp",
    "8",
    "--global-batch",
    "64",
    "--recompute",
    "none",
    "--sequence-parallel",
    "on",
];

#[test]
fn blocking_sends_lengthen_a_pipelined_step() {
    let overlapped = predict(&[&PIPELINE[..], &["--overlap-p2p-comm", "on"]].concat());
    let blocking = predict(&[&PIPELINE[..], &["--overlap-p2p-comm", "off"]].concat());
    // megatron-core overlaps them by default.
    assert_eq!(step(&predict(&PIPELINE)), step(&overlapped));
    assert!(
        step(&blocking) > step(&overlapped),
        "{} vs {}",
        step(&blocking),
        step(&overlapped)
    );
    // megatron-2021 blocks by default; the flag turns that off.
    let old = predict(&[&PIPELINE[..], &["--stack", "megatron-2021"]].concat());
    let old_overlapped = predict(
        &[
            &PIPELINE[..],
            &["--stack", "megatron-2021", "--overlap-p2p-comm", "on"],
        ]
        .concat(),
    );
    assert!(step(&old_overlapped) < step(&old));
}

#[test]
fn a_separate_gradient_accumulation_costs_memory_traffic() {
    let fused = predict(&[&PIPELINE[..], &["--gradient-accumulation-fusion", "on"]].concat());
    let separate = predict(&[&PIPELINE[..], &["--gradient-accumulation-fusion", "off"]].concat());
    assert!(step(&separate) > step(&fused));
}

/// llm-foundry's FSDP1 runs: flat parameters (no FSDP2 copies) and an FP32 or BF16 reduction.
#[test]
fn fsdp_copies_and_the_reduction_format() {
    let base = [
        "--model",
        "llama3-8b",
        "--hardware",
        "a100-80gb",
        "--gpus",
        "64",
        "--global-batch",
        "64",
        "--stack",
        "torchtitan",
        "--recompute",
        "selective-op",
    ];
    let fsdp2 = predict(&base);
    let fsdp1 = predict(&[&base[..], &["--fsdp-copies", "off"]].concat());
    assert!(step(&fsdp1) < step(&fsdp2));
    assert_eq!(
        step(&fsdp2),
        step(&predict(
            &[
                &base[..],
                &["--fsdp-copies", "on", "--grad-reduce-dtype", "fp32"]
            ]
            .concat()
        ))
    );
    let bf16 = predict(&[&base[..], &["--grad-reduce-dtype", "bf16"]].concat());
    assert!(step(&bf16) <= step(&fsdp2));
    let (code, _, err) = pplan(&[
        "predict",
        "--model",
        "llama3-8b",
        "--gpus",
        "8",
        "--global-batch",
        "8",
        "--grad-reduce-dtype",
        "fp16",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--grad-reduce-dtype") && err.contains("bf16"),
        "{err}"
    );
}

/// Megatron-LM pads the vocabulary to a multiple of N x t: Llama 2 7B's 32,000 words at t = 4
/// with N = 128 become 32,256, 256 more rows in the embedding and the output layer.
#[test]
fn the_vocabulary_is_padded_to_a_multiple_of_n_times_t() {
    let model = "data/runs/models/nemo-llama2-7b.json";
    let base = [
        "--model",
        model,
        "--hardware",
        "h100-80gb",
        "--gpus",
        "8",
        "--tp",
        "4",
        "--global-batch",
        "8",
        "--recompute",
        "none",
        "--sequence-parallel",
        "on",
    ];
    let plain = predict(&base);
    let padded = predict(&[&base[..], &["--make-vocab-size-divisible-by", "128"]].concat());
    let extra = padded["params"].as_u64().unwrap() - plain["params"].as_u64().unwrap();
    assert_eq!(extra, 2 * 256 * 4096);
    let (code, _, err) = pplan(
        &[
            &["predict"][..],
            &base[..],
            &["--make-vocab-size-divisible-by", "0"],
        ]
        .concat(),
    );
    assert_eq!(code, 2);
    assert!(err.contains("--make-vocab-size-divisible-by"), "{err}");
}

/// `--micro-batch auto --chunks auto` is the fastest fitting (b, v) of those it tries: the
/// same figures as predicting the chosen pair, and at least as fast as every other pair.
#[test]
fn auto_micro_batch_and_chunks_pick_the_fastest_that_fits() {
    let base = [
        "--model",
        "gpt-39.1b",
        "--gpus",
        "512",
        "--tp",
        "8",
        "--pp",
        "2",
        "--dp",
        "32",
        "--global-batch",
        "1536",
        "--stack",
        "megatron-2021",
    ];
    let auto = predict(&[&base[..], &["--micro-batch", "auto", "--chunks", "auto"]].concat());
    let (b, v) = (auto["micro_batch"].to_string(), auto["chunks"].to_string());
    let chosen = predict(&[&base[..], &["--micro-batch", &b, "--chunks", &v]].concat());
    assert_eq!(step(&auto), step(&chosen));
    for (b, v) in [("1", "1"), ("4", "2"), ("8", "1"), ("2", "4")] {
        let other = predict(&[&base[..], &["--micro-batch", b, "--chunks", v]].concat());
        if other["fits"].as_bool().unwrap() {
            assert!(
                auto["tflops_per_gpu"].as_f64() >= other["tflops_per_gpu"].as_f64(),
                "b {b} v {v}"
            );
        }
    }
    // Only the micro-batch searched: the chunks stay as given.
    let b_only = predict(&[&base[..], &["--micro-batch", "auto", "--chunks", "2"]].concat());
    assert_eq!(b_only["chunks"], 2);
    // Chunks choose between 1F1B and interleaving only.
    let (code, _, err) = pplan(
        &[
            &["predict"][..],
            &base[..],
            &["--chunks", "auto", "--schedule", "zbv"],
        ]
        .concat(),
    );
    assert_eq!(code, 2);
    assert!(err.contains("--chunks auto"), "{err}");
    let (code, _, err) = pplan(&[&["predict"][..], &base[..], &["--micro-batch", "most"]].concat());
    assert_eq!(code, 2);
    assert!(
        err.contains("--micro-batch") && err.contains("auto"),
        "{err}"
    );
}

/// Qwen3-30B-A3B on 8 B200 with EP 8, as Megatron-Bridge's recipes run it.
const MOE: [&str; 22] = [
    "--model",
    "qwen3-30b-a3b",
    "--hardware",
    "b200",
    "--gpus",
    "8",
    "--tp",
    "1",
    "--pp",
    "1",
    "--ep",
    "8",
    "--global-batch",
    "64",
    "--micro-batch",
    "1",
    "--seq-len",
    "4096",
    "--recompute",
    "none",
    "--precision",
    "mxfp8",
];

/// The dispatcher, capacity and CUDA-graph switches reach the prediction, the plan file and
/// the emitted Megatron-LM flags, and Megatron-LM's flags read back to the same switches.
#[test]
fn moe_recipe_switches_are_predicted_written_and_read_back() {
    let base = step(&predict(&MOE));
    let mut padded = MOE.to_vec();
    padded.extend([
        "--moe-expert-capacity-factor",
        "1.0",
        "--moe-pad-expert-input-to-capacity",
    ]);
    let pad = step(&predict(&padded));
    let mut graphed = padded.clone();
    graphed.extend(["--cuda-graph-impl", "local", "--moe-dispatcher", "hybridep"]);
    let graph = step(&predict(&graphed));
    // Padding removes the wait for the token counts; a whole-layer graph the host time.
    assert!(pad < base && graph < pad, "{base} {pad} {graph}");

    let dir = std::env::temp_dir().join(format!("pplan-recipe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("plan.json");
    let mut args = vec!["predict"];
    args.extend(&graphed);
    args.extend(["--output", plan.to_str().unwrap()]);
    let (code, _, err) = pplan(&args);
    assert_eq!(code, 0, "{err}");
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    let par = &p["parallelism"];
    assert_eq!(par["moe_dispatcher"], "hybridep");
    assert_eq!(par["moe_expert_capacity_factor"], 1.0);
    assert_eq!(par["moe_pad_expert_input_to_capacity"], true);
    assert_eq!(par["cuda_graph_impl"], "local");
    let (code, out, err) = pplan(&[
        "emit",
        "--plan",
        plan.to_str().unwrap(),
        "--target",
        "megatron",
    ]);
    assert_eq!(code, 0, "{err}");
    for f in [
        "--moe-token-dispatcher-type flex",
        "--moe-flex-dispatcher-backend hybridep",
        "--moe-expert-capacity-factor 1",
        "--moe-pad-expert-input-to-capacity",
        "--cuda-graph-impl local",
    ] {
        assert!(out.contains(f), "{f}\n{out}");
    }
    let back = pplan::plan::megatron_args::parse_megatron_args(&out, "megatron.sh").unwrap();
    assert_eq!(back.moe_dispatcher, "hybridep");
    assert_eq!(back.moe_expert_capacity_factor, Some(1.0));
    assert!(back.moe_pad_expert_input_to_capacity);
    assert_eq!(back.cuda_graph_impl, "local");
    assert!(back.cuda_graph_modules.is_empty());

    // Partial graphs are written as separate words and read back.
    let mut partial = MOE.to_vec();
    partial.extend([
        "--cuda-graph-impl",
        "transformer_engine",
        "--cuda-graph-modules",
        "attn",
        "moe_router",
        "moe_preprocess",
        "--output",
        plan.to_str().unwrap(),
    ]);
    let mut args = vec!["predict"];
    args.extend(&partial);
    let (code, _, err) = pplan(&args);
    assert_eq!(code, 0, "{err}");
    let (_, out, _) = pplan(&[
        "emit",
        "--plan",
        plan.to_str().unwrap(),
        "--target",
        "megatron",
    ]);
    assert!(
        out.contains("--cuda-graph-modules attn moe_router moe_preprocess"),
        "{out}"
    );
    let back = pplan::plan::megatron_args::parse_megatron_args(&out, "megatron.sh").unwrap();
    assert_eq!(
        back.cuda_graph_modules,
        ["attn", "moe_router", "moe_preprocess"]
    );
}

/// Megatron-Core's rules for these switches, each refused with the flag and what would run.
#[test]
fn moe_recipe_switches_megatron_core_refuses_exit_2() {
    for (extra, want) in [
        (
            &["--cuda-graph-impl", "local"][..],
            "--moe-pad-expert-input-to-capacity",
        ),
        (&["--cuda-graph-impl", "full_iteration"][..], "hybridep"),
        (
            &["--moe-pad-expert-input-to-capacity"][..],
            "--moe-expert-capacity-factor",
        ),
        (
            &[
                "--moe-dispatcher",
                "deepep",
                "--moe-expert-capacity-factor",
                "1",
                "--moe-pad-expert-input-to-capacity",
            ][..],
            "DeepEP",
        ),
        (&["--moe-expert-capacity-factor", "0"][..], "positive"),
        (&["--moe-dispatcher", "allgather"][..], "hybridep"),
        (&["--cuda-graph-modules", "attn"][..], "--cuda-graph-impl"),
        (
            &["--cuda-graph-impl", "local", "--cuda-graph-modules", "mlp"][..],
            "no dense MLP",
        ),
        (
            &[
                "--cuda-graph-impl",
                "local",
                "--cuda-graph-modules",
                "bogus",
            ][..],
            "moe_router",
        ),
        (&["--moe-token-drop-policy", "random"][..], "position"),
    ] {
        let mut args = vec!["predict"];
        args.extend(MOE);
        args.extend(extra);
        let (code, _, err) = pplan(&args);
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert!(err.contains(want), "{extra:?}: want '{want}' in {err}");
    }
    // Per-layer graphs with full recomputation (dense model).
    let (code, _, err) = pplan(&[
        "predict",
        "--model",
        "gpt-1.7b",
        "--gpus",
        "8",
        "--global-batch",
        "16",
        "--recompute",
        "full",
        "--cuda-graph-impl",
        "local",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("full_iteration"), "{err}");
}
