//! The mechanisms that let the published runs fit: FP8 weights (`--fp8-param-gather`),
//! activation offloading (`--cpu-offloading-num-layers`), and `--stack megatron-core`'s
//! defaults where a command is silent (Megatron-Bridge's recipes: no recomputation, sequence
//! parallelism with t > 1, the distributed optimizer). Each reaches the prediction, the plan
//! file and the emitted Megatron-LM arguments, and Megatron-Core's rules exit 2 by name.

mod common;
use common::{json, pplan, with};

fn predict(args: &[&str]) -> (i32, serde_json::Value, String) {
    let mut all = vec!["predict"];
    all.extend_from_slice(args);
    all.extend(["--format", "json"]);
    let (code, out, err) = pplan(&all);
    let v = if code == 0 {
        json(&out)
    } else {
        serde_json::Value::Null
    };
    (code, v, err)
}

fn ok(args: &[&str]) -> serde_json::Value {
    let (code, v, err) = predict(args);
    assert_eq!(code, 0, "{err}");
    v
}

fn gb(v: &serde_json::Value, part: &str) -> f64 {
    v["memory_breakdown"][part].as_u64().unwrap() as f64 / 1e9
}

/// Megatron-Bridge's Llama 3 70B FP8 recipe on 64 GB200 (`llama3_70b_pretrain_64gpu_gb200_
/// fp8cs_config`): FSDP, micro-batch 2, 8,192 tokens, 40 of 80 layers offloaded.
const LLAMA3_70B_FSDP: [&str; 22] = [
    "--model",
    "llama3-70b",
    "--hardware",
    "gb200-nvl72",
    "--gpus",
    "64",
    "--tp",
    "1",
    "--pp",
    "1",
    "--global-batch",
    "256",
    "--micro-batch",
    "2",
    "--seq-len",
    "8192",
    "--zero",
    "3",
    "--precision",
    "fp8",
    "--recompute",
    "none",
];

/// Llama 3 8B on one 8-GPU H100 node, t 1, p 1, 64 sequences, ending in `--recompute` (its
/// value appended by `common::with`).
const LLAMA3_8B_ONE_NODE: [&str; 13] = [
    "--model",
    "llama3-8b",
    "--hardware",
    "h100-80gb",
    "--gpus",
    "8",
    "--tp",
    "1",
    "--pp",
    "1",
    "--global-batch",
    "64",
    "--recompute",
];

#[test]
fn offloading_takes_the_first_layers_activations_off_the_gpu() {
    let none = ok(&LLAMA3_70B_FSDP);
    let mut args = LLAMA3_70B_FSDP.to_vec();
    args.extend(["--cpu-offloading-num-layers", "40"]);
    let half = ok(&args);
    assert_eq!(half["cpu_offloading_num_layers"], 40);
    // 40 layers' activations leave (about 2.8 GB a layer at b 2, s 8,192 in FP8).
    let freed = gb(&none, "activations") - gb(&half, "activations");
    assert!((100.0..130.0).contains(&freed), "{freed}");
    // On NVLink-C2C (225 GB/s a direction) a layer's copy hides under the next layers.
    let (t0, t1) = (
        none["step_time_s"].as_f64().unwrap(),
        half["step_time_s"].as_f64().unwrap(),
    );
    assert!((t1 / t0 - 1.0).abs() < 1e-3, "{t0} {t1}");
    // On a B200's PCIe (64 GB/s) the same copies outlast the compute: the step waits.
    let mut pcie = args.clone();
    pcie[3] = "b200";
    let mut pcie_none = LLAMA3_70B_FSDP.to_vec();
    pcie_none[3] = "b200";
    let slow = ok(&pcie)["step_time_s"].as_f64().unwrap();
    let base = ok(&pcie_none)["step_time_s"].as_f64().unwrap();
    assert!(slow > base * 1.05, "{base} {slow}");
}

/// The loss keeps 2 bytes a logit with Transformer Engine's fused cross-entropy (the 16-bit
/// gradient it writes over the logits, TE 2.1-2.17's `CrossEntropyFunction`), 4 with
/// Megatron-Core's fused or unfused one (the fp32 softmax), which peaks at 6: on Llama 3 70B
/// at b 2, s 8,192, t 1 that is 2-4 x 16,384 x 128,256 bytes; with it the five runs of this
/// recipe fit, as they ran (m067, m116, m160, m196, m243).
#[test]
fn the_fused_cross_entropy_keeps_a_16_bit_gradient_of_the_logits() {
    let mut args = LLAMA3_70B_FSDP.to_vec();
    args.extend([
        "--cpu-offloading-num-layers",
        "40",
        "--cross-entropy-loss-fusion",
        "on",
    ]);
    let impl_ = |i: &'static str| ok(&with(&args, &["--cross-entropy-fusion-impl", i]));
    let (te, native) = (impl_("te"), impl_("native"));
    let freed = native["memory_breakdown"]["activations"].as_u64().unwrap()
        - te["memory_breakdown"]["activations"].as_u64().unwrap();
    // 2 bytes a logit kept, and up to 2 more of working memory: Megatron-Core's loss holds
    // its 16-bit gradient cast beside the fp32 softmax at its peak (6 bytes a logit), where
    // that exceeds the layers' recompute working memory; TE's holds nothing more.
    let logits = 16_384 * 128_256u64;
    assert!((2 * logits..=4 * logits).contains(&freed), "{freed}");
    assert_eq!(te["fits"], true, "{te}");
    assert_eq!(native["fits"], false, "{native}");
    // Unfused (Megatron-Core's default) keeps the fp32 softmax too.
    let mut off = args.clone();
    let last = off.len() - 1;
    off[last] = "off";
    assert_eq!(
        ok(&off)["memory_breakdown"]["activations"],
        native["memory_breakdown"]["activations"]
    );
}

#[test]
fn offloading_follows_megatron_cores_rules() {
    for (extra, says) in [
        (
            &["--cpu-offloading-num-layers", "80"][..],
            "fewer than the model's 80 layers",
        ),
        (
            &["--cpu-offloading-num-layers", "8", "--recompute", "full"][..],
            "--recompute none",
        ),
    ] {
        let mut args: Vec<&str> = LLAMA3_70B_FSDP.to_vec();
        // Later flags win only for values clap takes once: drop the base --recompute.
        if extra.contains(&"--recompute") {
            args.truncate(args.len() - 2);
        }
        args.extend_from_slice(extra);
        let (code, _, err) = predict(&args);
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert!(err.contains(says), "{extra:?}: {err}");
    }
    let (code, _, err) = predict(&[
        "--model",
        "llama3-8b",
        "--hardware",
        "h100-80gb",
        "--gpus",
        "16",
        "--tp",
        "1",
        "--pp",
        "2",
        "--global-batch",
        "64",
        "--cpu-offloading-num-layers",
        "4",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--pp 1"), "{err}");
}

#[test]
fn fp8_weights_drop_the_bf16_copy_and_are_refused_in_bf16() {
    let fp8 = ok(&LLAMA3_70B_FSDP);
    assert_eq!(fp8["fp8_param_gather"], true, "the FP8 recipes' default");
    let mut kept = LLAMA3_70B_FSDP.to_vec();
    kept.extend(["--fp8-param-gather", "off"]);
    let kept = ok(&kept);
    assert_eq!(kept["fp8_param_gather"], false);
    // ZeRO-3 over 64 ranks: 70.6 B parameters, 2 bytes of BF16 each no longer held.
    let saved = gb(&kept, "weights") - gb(&fp8, "weights");
    assert!((saved - 70.55 * 2.0 / 64.0).abs() < 0.05, "{saved}");
    let mut bf16: Vec<&str> = LLAMA3_70B_FSDP.to_vec();
    bf16[19] = "bf16";
    assert_eq!(ok(&bf16)["fp8_param_gather"], false);
    bf16.extend(["--fp8-param-gather", "on"]);
    let (code, _, err) = predict(&bf16);
    assert_eq!(code, 2);
    assert!(
        err.contains("--fp8-param-gather on") && err.contains("--precision fp8|mxfp8"),
        "{err}"
    );
}

/// With `--stack megatron-core` and nothing else, predict runs what Megatron-Bridge's recipes
/// run; `--stack megatron-2021` keeps the 2021 defaults.
#[test]
fn megatron_core_defaults_are_the_recipes() {
    let base = [
        "--model",
        "llama3-70b",
        "--hardware",
        "h100-80gb",
        "--gpus",
        "64",
        "--tp",
        "4",
        "--pp",
        "4",
        "--global-batch",
        "128",
    ];
    let v = ok(&base);
    assert_eq!(v["recompute"], "none");
    assert_eq!(v["sequence_parallel"], true);
    assert_eq!(v["zero"], 1);
    let mut old = base.to_vec();
    old.extend(["--stack", "megatron-2021"]);
    let v = ok(&old);
    assert_eq!(v["recompute"], "full");
    assert_eq!(v["sequence_parallel"], false);
    assert_eq!(v["zero"], 0);
    // t = 1: nothing to run in sequence-parallel.
    let mut t1 = base.to_vec();
    t1[7] = "1";
    t1[9] = "8";
    assert_eq!(ok(&t1)["sequence_parallel"], false);
}

#[test]
fn both_switches_are_written_to_the_plan_emitted_and_read_back() {
    let dir = std::env::temp_dir().join(format!("pplan-memmech-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("plan.json");
    let mut args = vec!["predict"];
    args.extend(LLAMA3_70B_FSDP);
    args.extend([
        "--cpu-offloading-num-layers",
        "40",
        "--output",
        plan.to_str().unwrap(),
    ]);
    let (code, _, err) = pplan(&args);
    assert_eq!(code, 0, "{err}");
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    assert_eq!(p["parallelism"]["fp8_param_gather"], true);
    assert_eq!(p["parallelism"]["cpu_offloading_num_layers"], 40);
    // The plan predicts again as it was predicted (`predict --plan`).
    let (code, again, err) = pplan(&[
        "predict",
        "--plan",
        plan.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let again = json(&again);
    let mut direct = LLAMA3_70B_FSDP.to_vec();
    direct.extend(["--cpu-offloading-num-layers", "40"]);
    let direct = ok(&direct);
    for k in [
        "step_time_s",
        "peak_memory_bytes",
        "fp8_param_gather",
        "cpu_offloading_num_layers",
    ] {
        assert_eq!(again[k], direct[k], "{k}");
    }
    let (code, out, err) = pplan(&[
        "emit",
        "--plan",
        plan.to_str().unwrap(),
        "--target",
        "megatron",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("--fp8-param-gather"), "{out}");
    assert!(out.contains("--cpu-offloading-num-layers 40"), "{out}");
    let back = pplan::plan::megatron_args::parse_megatron_args(&out, "megatron.sh").unwrap();
    assert!(back.fp8_param_gather);
    assert_eq!(back.cpu_offloading_num_layers, 40);
    std::fs::remove_dir_all(&dir).ok();
}

/// DeepSeek-V3 on 1,024 H100 (t 2, p 8, EP 64, FP8, 4,096 tokens), ending in `--recompute`
/// (its value follows).
const DEEPSEEK_V3_1024_H100: [&str; 19] = [
    "--model",
    "deepseek-v3",
    "--hardware",
    "h100-80gb",
    "--gpus",
    "1024",
    "--tp",
    "2",
    "--pp",
    "8",
    "--ep",
    "64",
    "--global-batch",
    "8192",
    "--seq-len",
    "4096",
    "--precision",
    "fp8",
    "--recompute",
];

/// `--recompute selective-mla-up-proj` (Megatron-Core `--recompute-modules mla_up_proj`, the
/// DeepSeek-V3 recipes'): the queries, keys and values of latent attention are rebuilt in the
/// backward, `2 (q + k + v)` bytes a token and layer less held, the up-projections' FLOPs run
/// again; written and read back as Megatron-LM's modules; refused without latent attention.
#[test]
fn mla_up_projections_are_recomputed_instead_of_kept() {
    let base = DEEPSEEK_V3_1024_H100;
    let recompute = |r: &'static str| ok(&with(&base, &[r, "--per-stage"]));
    let (none, mla) = (recompute("none"), recompute("selective-mla-up-proj"));
    assert_eq!(mla["recompute"], "selective-mla-up-proj");
    // DeepSeek-V3: 128 heads x (128 + 64) for queries and keys, x 128 for values; 4,096
    // tokens a micro-batch over t = 2: 2 x 65,536 x 4,096 / 2 bytes a layer. Compared on one
    // GPU, a middle stage's (the fullest GPU is another one with the module than without).
    let per_layer = 2.0 * 65_536.0 * 4_096.0 / 2.0 / 1e9;
    let device_gb = |v: &serde_json::Value| {
        v["stages"][1]["memory_breakdown"]["activations"]
            .as_u64()
            .unwrap() as f64
            / 1e9
    };
    let freed = device_gb(&none) - device_gb(&mla);
    let layers = freed / per_layer;
    assert!(layers > 8.0, "{freed} GB: {layers} layer-micro-batches");
    assert!(
        (layers - layers.round()).abs() < 0.05,
        "a whole number of layer-micro-batches: {layers}"
    );
    let t = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap();
    assert!(t(&mla, "step_time_s") > t(&none, "step_time_s"));
    // The recomputed FLOPs count in the hardware FLOP/s, not in the model's.
    assert!(t(&mla, "tflops_per_gpu") > t(&mla, "model_tflops_per_gpu"));
    assert_eq!(t(&none, "tflops_per_gpu"), t(&none, "model_tflops_per_gpu"));

    emitted_and_read_back(
        &with(&base, &["selective-mla-up-proj"]),
        "mla_up_proj",
        "selective-mla-up-proj",
    );

    let (code, _, err) = predict(&with(&LLAMA3_8B_ONE_NODE, &["selective-mla-up-proj"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("multi_latent_attention"), "{err}");
}

/// `--recompute selective-mlp` (Megatron-Core `--recompute-modules mlp`, the DeepSeek-V3
/// recipes of m079 and m125): the dense layers' MLP intermediates are freed and the MLP runs
/// again; MoE layers are untouched, so on DeepSeek-V3 only its three dense layers change, in
/// the two runs that ran with it, which fit; written and read back as Megatron-LM's module;
/// refused on a model of MoE layers only.
#[test]
fn dense_mlps_are_recomputed_and_moe_layers_are_not() {
    // Llama 3 8B on one rank: every layer's MLP intermediates go.
    let dense = |r: &'static str| ok(&with(&LLAMA3_8B_ONE_NODE, &[r]));
    let (none, mlp) = (dense("none"), dense("selective-mlp"));
    assert_eq!(mlp["recompute"], "selective-mlp");
    let t = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap();
    // Llama 3 8B: f = 14,336, gated, BF16: 2 x 2f (the activation's input) + 2f (the second
    // GEMM's input) bytes a token, 8,192 tokens, 32 layers (b 1: one micro-batch in flight).
    let per_layer = (4.0 + 2.0) * 14_336.0 * 8_192.0 / 1e9;
    let freed = gb(&none, "activations") - gb(&mlp, "activations");
    assert!(
        (freed / (32.0 * per_layer) - 1.0).abs() < 0.01,
        "{freed} GB freed, {} expected",
        32.0 * per_layer
    );
    assert!(t(&mlp, "step_time_s") > t(&none, "step_time_s"));
    assert!(t(&mlp, "tflops_per_gpu") > t(&mlp, "model_tflops_per_gpu"));

    // The two DeepSeek-V3 runs on 256 GB200 that recompute `mlp` fit as they ran.
    let runs: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("data/runs/megatron-bridge-2025-26.json"),
        )
        .unwrap(),
    )
    .unwrap();
    for id in ["m079", "m125"] {
        let row = runs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .unwrap();
        let gpus = row["gpus"].to_string();
        let batch = row["global_batch"].to_string();
        let seq = row["seq_len"].to_string();
        let mut args = vec![
            "--model",
            row["model"].as_str().unwrap(),
            "--hardware",
            row["hardware"].as_str().unwrap(),
            "--gpus",
            &gpus,
            "--global-batch",
            &batch,
            "--seq-len",
            &seq,
        ];
        let flags: Vec<&str> = row["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert!(flags
            .windows(2)
            .any(|w| w == ["--recompute", "selective-mlp"]));
        args.extend(flags);
        let with_mlp = ok(&args);
        assert_eq!(with_mlp["fits"], true, "{id}: {with_mlp}");
        // Without it the same layout holds more.
        let i = args.iter().position(|a| *a == "selective-mlp").unwrap();
        args[i] = "none";
        let without = ok(&args);
        assert!(gb(&without, "activations") > gb(&with_mlp, "activations"));
    }

    emitted_and_read_back(
        &with(&LLAMA3_8B_ONE_NODE, &["selective-mlp"]),
        "mlp",
        "selective-mlp",
    );

    let (code, _, err) = predict(&[
        "--model",
        "qwen3-30b-a3b",
        "--hardware",
        "h100-80gb",
        "--gpus",
        "8",
        "--ep",
        "8",
        "--global-batch",
        "64",
        "--recompute",
        "selective-mlp",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("recomputes dense MLPs only"), "{err}");
}

/// Emitted Megatron-LM arguments `text` with its two `--recompute-modules` (one a line, as
/// emitted) in the other order read back as the same `--recompute` value.
fn read_back_swapped(text: &str, [a, b]: [&str; 2], recompute: &str) {
    let swapped = text.replace(
        &format!("--recompute-modules {a}\n  {b}\n"),
        &format!("--recompute-modules {b}\n  {a}\n"),
    );
    assert_ne!(swapped, text);
    let back = pplan::plan::megatron_args::parse_megatron_args(&swapped, "megatron.sh");
    assert_eq!(back.unwrap().recompute, recompute);
}

/// `predict ARGS --output plan.json`, then `emit --target megatron`: the plan's recomputation is
/// written as `--recompute-granularity selective --recompute-modules MODULES` and Megatron-LM's
/// arguments read back as `recompute`.
/// The emitted Megatron-LM arguments, once read back as `recompute`.
fn emitted_and_read_back(predict_args: &[&str], modules: &str, recompute: &str) -> String {
    let (_, out) = planned_and_emitted(predict_args, recompute);
    // Each module after the first is an array element (a line) of its own.
    let words: Vec<&str> = out.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "--recompute-modules");
    let listed: Vec<&str> = modules.split_whitespace().collect();
    assert!(
        out.contains("--recompute-granularity selective")
            && at.is_some_and(|at| words[at + 1..].starts_with(&listed)),
        "{out}"
    );
    let back = pplan::plan::megatron_args::parse_megatron_args(&out, "megatron.sh").unwrap();
    assert_eq!(back.recompute, recompute);
    out
}

/// `predict ARGS --output plan.json` and `emit --plan plan.json --target megatron`: the plan
/// file (its JSON) and the emitted Megatron-LM arguments; `name` keeps the temporary folder
/// apart from other tests'.
fn planned_and_emitted(predict_args: &[&str], name: &str) -> (serde_json::Value, String) {
    let dir = std::env::temp_dir().join(format!("pplan-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("plan.json");
    let mut args = vec!["predict"];
    args.extend(predict_args);
    args.extend(["--output", plan.to_str().unwrap()]);
    let (code, _, err) = pplan(&args);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = pplan(&[
        "emit",
        "--plan",
        plan.to_str().unwrap(),
        "--target",
        "megatron",
    ]);
    assert_eq!(code, 0, "{err}");
    let written = json(&std::fs::read_to_string(&plan).unwrap());
    std::fs::remove_dir_all(&dir).ok();
    (written, out)
}

/// A pipeline rank's activation bytes in a `--per-stage` prediction.
fn stage_activations(v: &serde_json::Value, stage: usize) -> i64 {
    v["stages"][stage]["memory_breakdown"]["activations"]
        .as_u64()
        .unwrap() as i64
}

/// A number field of a prediction.
fn t(v: &serde_json::Value, k: &str) -> f64 {
    v[k].as_f64().unwrap()
}

/// Recomputed FLOPs a step and GPU, in TFLOP: hardware less model FLOP/s, times the step.
fn recomputed(v: &serde_json::Value) -> f64 {
    (t(v, "tflops_per_gpu") - t(v, "model_tflops_per_gpu")) * t(v, "step_time_s")
}

/// Megatron-Core's `--recompute-modules` is a list; the two sets the DeepSeek-V3 runs use
/// (`layernorm mla_up_proj`, its report's Sec. 3.3; `mla_up_proj mlp`, Megatron-Bridge's
/// B200 and H100 recipes) free, cost and recompute what their modules do alone, added up.
#[test]
fn recompute_module_sets_add_up_their_modules() {
    let base = DEEPSEEK_V3_1024_H100;
    let run = |r: &'static str| ok(&with(&base, &[r, "--per-stage"]));
    let none = run("none");
    let act = stage_activations;
    let freed = |v: &serde_json::Value, stage: usize| act(&none, stage) - act(v, stage);
    let (mla, mlp) = (run("selective-mla-up-proj"), run("selective-mlp"));

    // `mla_up_proj mlp`. Stage 0 holds the three dense layers: the sum to the byte. Stage 1
    // holds MoE layers only, where `mlp` keeps no byte less and only adds its working memory
    // (negative freeing); in the set that working memory is freed before the attention
    // block's backward rebuilds the queries, keys and values, and is hidden under their
    // larger buffer: the set frees exactly what `mla_up_proj` alone frees there.
    let set = run("selective-mla-up-proj-mlp");
    assert_eq!(set["recompute"], "selective-mla-up-proj-mlp");
    assert!(freed(&mlp, 0) > 0 && freed(&mla, 0) > 0);
    assert_eq!(freed(&set, 0), freed(&mla, 0) + freed(&mlp, 0));
    assert!(freed(&mlp, 1) < 0, "{}", freed(&mlp, 1));
    assert_eq!(freed(&set, 1), freed(&mla, 1));
    assert_eq!(
        freed(&set, 1),
        freed(&mla, 1) + freed(&mlp, 1) + (-freed(&mlp, 1))
    );
    for part in [&mla, &mlp] {
        assert!(t(&set, "step_time_s") >= t(part, "step_time_s"));
    }
    let added = t(&mla, "step_time_s") + t(&mlp, "step_time_s") - t(&none, "step_time_s");
    assert!(
        (t(&set, "step_time_s") - added).abs() < 1e-3 * added,
        "{added}"
    );
    let (sum, got) = (recomputed(&mla) + recomputed(&mlp), recomputed(&set));
    assert!(
        recomputed(&mlp) > 0.0 && (got - sum).abs() < 1e-6 * sum,
        "{got} {sum}"
    );
    let text = emitted_and_read_back(
        &with(&base, &["selective-mla-up-proj-mlp"]),
        "mla_up_proj mlp",
        "selective-mla-up-proj-mlp",
    );
    // Megatron-Core takes the modules in any order.
    read_back_swapped(&text, ["mla_up_proj", "mlp"], "selective-mla-up-proj-mlp");

    // `layernorm mla_up_proj`. In FP8 the `layernorm` module frees nothing (the linear layer
    // that reads the rebuilt norm output keeps its own FP8 cast of it, as the fused
    // LayerNormLinear did) and recomputes no GEMM: the set frees and recomputes what
    // `mla_up_proj` does, and adds the norms' forward kernels to the step.
    let set = run("selective-norm-mla-up-proj");
    assert_eq!(set["recompute"], "selective-norm-mla-up-proj");
    for stage in 0..8 {
        assert_eq!(freed(&set, stage), freed(&mla, stage), "stage {stage}");
    }
    let norm_act = run("selective-norm-act");
    for part in [&mla, &norm_act] {
        assert!(t(&set, "step_time_s") >= t(part, "step_time_s"));
    }
    assert!(t(&set, "step_time_s") > t(&mla, "step_time_s"));
    let (sum, got) = (recomputed(&mla), recomputed(&set));
    assert!((got - sum).abs() < 1e-6 * sum, "{got} {sum}");
    let text = emitted_and_read_back(
        &with(&base, &["selective-norm-mla-up-proj"]),
        "layernorm mla_up_proj",
        "selective-norm-mla-up-proj",
    );
    read_back_swapped(
        &text,
        ["layernorm", "mla_up_proj"],
        "selective-norm-mla-up-proj",
    );
    // In BF16 the rebuilt norm outputs are freed too: more than `mla_up_proj` alone.
    let bf16 = |r: &'static str| {
        let mut args = with(&base, &[r, "--per-stage"]);
        let at = args.iter().position(|a| *a == "fp8").unwrap();
        args[at] = "bf16";
        ok(&args)
    };
    let (mla16, set16) = (
        bf16("selective-mla-up-proj"),
        bf16("selective-norm-mla-up-proj"),
    );
    assert!(act(&set16, 1) < act(&mla16, 1));
}

/// DeepSeek-V3's report (Sec. 3.3.1-3.3.2) recomputes RMSNorm, the MLA up-projections and
/// the MoE SwiGLU's output: Megatron-Core's `layernorm mla_up_proj moe_act`. On every stage
/// it frees what `layernorm mla_up_proj` frees and what `moe_act` frees (in FP8 `layernorm`
/// frees nothing, so `selective-norm-act` frees `moe_act`'s routed activation outputs alone),
/// recomputes no more GEMM FLOPs than the up-projections, and is written and read back as the
/// three modules.
#[test]
fn deepseeks_recompute_set_adds_moe_act_to_the_norms_and_up_projections() {
    let base = DEEPSEEK_V3_1024_H100;
    let run = |r: &'static str| ok(&with(&base, &[r, "--per-stage"]));
    let none = run("none");
    let freed = |v: &serde_json::Value, stage: usize| {
        stage_activations(&none, stage) - stage_activations(v, stage)
    };
    let (norm_mla, norm_act) = (run("selective-norm-mla-up-proj"), run("selective-norm-act"));
    let set = run("selective-norm-act-mla-up-proj");
    assert_eq!(set["recompute"], "selective-norm-act-mla-up-proj");
    for stage in 0..8 {
        assert!(freed(&norm_act, stage) > 0, "stage {stage}");
        assert_eq!(
            freed(&set, stage),
            freed(&norm_mla, stage) + freed(&norm_act, stage),
            "stage {stage}"
        );
    }
    assert!(t(&set, "step_time_s") > t(&norm_mla, "step_time_s"));
    let (sum, got) = (recomputed(&norm_mla), recomputed(&set));
    assert!((got - sum).abs() < 1e-6 * sum, "{got} {sum}");
    let text = emitted_and_read_back(
        &with(&base, &["selective-norm-act-mla-up-proj"]),
        "layernorm mla_up_proj moe_act",
        "selective-norm-act-mla-up-proj",
    );
    read_back_swapped(
        &text,
        ["layernorm", "mla_up_proj"],
        "selective-norm-act-mla-up-proj",
    );
}

/// `--activation-func-fp8-input-store on` (Megatron-Core's `activation_func_fp8_input_store`:
/// the activation's input cast to E4M3 for the backward, no scale) keeps 1 byte an element of
/// the first MLP GEMM's output instead of 2: for Llama 3 8B on one GPU without a pipeline
/// (one micro-batch's activations held), 32 layers x 8,192 tokens x 2 x 14,336 bytes fewer;
/// no time; a plain GeLU MLP keeps its 16 bits. Written to the plan and read back from it;
/// Megatron-LM's emitted arguments carry a note instead of a flag (none at the checked
/// commit).
#[test]
fn the_activation_input_is_kept_in_fp8() {
    let with_store = with(
        &LLAMA3_8B_ONE_NODE,
        &["none", "--activation-func-fp8-input-store", "on"],
    );
    let (off, on) = (ok(&with(&LLAMA3_8B_ONE_NODE, &["none"])), ok(&with_store));
    let act = |v: &serde_json::Value| v["memory_breakdown"]["activations"].as_u64().unwrap();
    assert_eq!(act(&off) - act(&on), 32 * 8_192 * 2 * 14_336);
    assert_eq!(off["step_time_s"], on["step_time_s"]);
    // Megatron-Core casts in its fused SwiGLU kernels only: a GPT's GeLU MLP keeps 16 bits.
    let gpt = ["--model", "gpt-1.7b", "--gpus", "8", "--global-batch", "64"];
    let store = ["--activation-func-fp8-input-store", "on"];
    assert_eq!(act(&ok(&gpt)), act(&ok(&with(&gpt, &store))));

    let (written, out) = planned_and_emitted(&with_store, "fp8-act");
    assert_eq!(
        written["parallelism"]["activation_func_fp8_input_store"],
        true
    );
    assert!(
        out.contains("activation_func_fp8_input_store") && !out.contains("--activation-func-fp8"),
        "{out}"
    );
    // The plan file predicts what the flags did.
    let dir = std::env::temp_dir().join(format!("pplan-fp8-act-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("plan.json");
    std::fs::write(&plan, written.to_string()).unwrap();
    let again = ok(&["--plan", plan.to_str().unwrap()]);
    assert_eq!(act(&again), act(&on));
    std::fs::remove_dir_all(&dir).ok();
}

/// DeepSeek-V3's pre-training ran on 80 GB H800s (its report, Table 1 and Sec. 3.3). With
/// the memory-saving measures the report states, written as flags in its runs row (RMSNorm,
/// MLA up-projection and SwiGLU-output recomputation, the SwiGLU input in FP8, BF16 AdamW
/// moments, the MTP module's embedding shared on DualPipe's first rank), pplan predicts that
/// it fits; with the recomputation of RMSNorm and the MLA up-projections alone, it did not
/// (101.5 GB).
#[test]
fn deepseek_v3_on_h800_fits_with_its_reports_measures() {
    let (code, out, err) = pplan(&[
        "validate",
        "--runs",
        &format!(
            "{}/data/runs/deepseek-v3-h800.json",
            env!("CARGO_MANIFEST_DIR")
        ),
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    let row = &v["runs"][0];
    assert_eq!(row["id"], "deepseek-v3-h800");
    assert_eq!(row["fits"], true, "{row}");
    assert!(row["peak_memory_gb"].as_f64().unwrap() < 85.5, "{row}");
}

/// The sets hold `mla_up_proj`: Megatron-Core refuses them without latent attention.
#[test]
fn recompute_module_sets_need_latent_attention() {
    for r in [
        "selective-norm-mla-up-proj",
        "selective-mla-up-proj-mlp",
        "selective-norm-act-mla-up-proj",
    ] {
        let (code, _, err) = predict(&with(&LLAMA3_8B_ONE_NODE, &[r]));
        assert_eq!(code, 2, "{r}: {err}");
        assert!(err.contains("multi_latent_attention"), "{r}: {err}");
    }
}
