//! `pplan predict`: the JSON contract, exit code 2 with the flag named on bad input, no panics.

mod common;
use common::pplan;

/// `pplan` with `base` and `extra` arguments, which must succeed with JSON on stdout.
fn predict_json(base: &[&str], extra: &[&str]) -> serde_json::Value {
    let mut args = base.to_vec();
    args.extend(extra);
    let (code, out, err) = pplan(&args);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(out.trim()).unwrap()
}

/// Llama 3 70B on 64 H100 as t = 8, p = 8: a last stage carrying a 128k vocabulary.
const LLAMA3_70B_PP8: [&str; 17] = [
    "predict",
    "--model",
    "llama3-70b",
    "--hardware",
    "h100-80gb",
    "--gpus",
    "64",
    "--tp",
    "8",
    "--pp",
    "8",
    "--global-batch",
    "16",
    "--sequence-parallel",
    "on",
    "--format",
    "json",
];

const GPT_1T: [&str; 14] = [
    "predict",
    "--model",
    "gpt-1t",
    "--hardware",
    "a100-80gb",
    "--gpus",
    "3072",
    "--tp",
    "8",
    "--pp",
    "64",
    "--global-batch",
    "3072",
    "--chunks",
];

#[test]
fn json_has_the_contract_fields() {
    let mut args = GPT_1T.to_vec();
    args.extend(["2", "--format", "json"]);
    let (code, out, err) = pplan(&args);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    for field in [
        "step_time_s",
        "tflops_per_gpu",
        "model_tflops_per_gpu",
        "mfu",
        "tokens_per_s",
        "bubble_fraction",
        "peak_memory_bytes",
        "fits",
        "tokens_per_s_per_gpu",
        "params",
        "active_params",
        "memory_breakdown",
        "mfu_precision_peak",
        "precision",
    ] {
        assert!(v.get(field).is_some(), "missing {field}: {out}");
    }
    assert_eq!(out.trim().lines().count(), 1);
    let f = |k: &str| v[k].as_f64().unwrap();
    assert!((f("tokens_per_s_per_gpu") * 3072.0 / f("tokens_per_s") - 1.0).abs() < 1e-12);
    // Narayanan et al. 2021, Table 1: the 1T model has 1008 billion parameters.
    assert!((f("params") / 1008e9 - 1.0).abs() < 0.01, "{out}");
    assert_eq!(v["params"], v["active_params"], "a dense model");
}

#[test]
fn model_files_in_both_formats() {
    for (file, gpus, tp) in [
        ("examples/models/gpt-1.7b-megatron.json", "8", "1"),
        ("examples/models/llama3-8b-config.json", "8", "8"),
    ] {
        let (code, out, err) = pplan(&[
            "predict",
            "--model",
            file,
            "--gpus",
            gpus,
            "--tp",
            tp,
            "--global-batch",
            "64",
            "--format",
            "json",
            "--sequence-parallel",
            "on",
            "--recompute",
            "selective",
        ]);
        assert_eq!(code, 0, "{file}: {err}");
        assert!(out.contains("\"fits\":true"), "{file}: {out}");
    }
}

#[test]
fn bad_input_exits_2_naming_the_flag() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--model", "gpt-9t", "--gpus", "8", "--global-batch", "8"],
            "--model",
        ),
        (
            &[
                "--model",
                "gpt-1.7b",
                "--gpus",
                "10",
                "--tp",
                "5",
                "--global-batch",
                "10",
            ],
            "--tp 5",
        ),
        (
            &[
                "--model",
                "gpt-1.7b",
                "--gpus",
                "8",
                "--tp",
                "2",
                "--dp",
                "2",
                "--global-batch",
                "8",
            ],
            "--gpus",
        ),
        (
            &[
                "--model",
                "gpt-1.7b",
                "--gpus",
                "8",
                "--global-batch",
                "16",
                "--micro-batch",
                "3",
            ],
            "--micro-batch 3",
        ),
        (
            &[
                "--model",
                "gpt-1.7b",
                "--gpus",
                "8",
                "--global-batch",
                "8",
                "--hardware",
                "tpu",
            ],
            "--hardware",
        ),
        (
            &[
                "--model",
                "gpt-1.7b",
                "--gpus",
                "8",
                "--global-batch",
                "8",
                "--recompute",
                "some",
            ],
            "--recompute",
        ),
        (
            &[
                "--model",
                "gpt-1.7b",
                "--gpus",
                "8",
                "--global-batch",
                "8",
                "--pp",
                "2",
                "--chunks",
                "14",
            ],
            "--chunks",
        ),
        (
            &[
                "--model",
                "tests/does-not-exist.json",
                "--gpus",
                "8",
                "--global-batch",
                "8",
            ],
            "--model",
        ),
    ];
    for (args, needle) in cases {
        let mut full = vec!["predict"];
        full.extend_from_slice(args);
        let (code, _, err) = pplan(&full);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn hostile_numbers_never_panic() {
    let max = u64::MAX.to_string();
    for args in [
        vec![
            "--gpus",
            max.as_str(),
            "--tp",
            max.as_str(),
            "--global-batch",
            "8",
        ],
        vec![
            "--gpus",
            max.as_str(),
            "--pp",
            max.as_str(),
            "--tp",
            "2",
            "--global-batch",
            "8",
        ],
        vec!["--gpus", "8", "--global-batch", max.as_str()],
        vec![
            "--gpus",
            "1",
            "--global-batch",
            max.as_str(),
            "--micro-batch",
            max.as_str(),
        ],
        vec![
            "--gpus",
            "8",
            "--global-batch",
            "8",
            "--seq-len",
            max.as_str(),
        ],
        vec!["--gpus", "0", "--global-batch", "8"],
        vec![
            "--gpus",
            "8",
            "--global-batch",
            "8",
            "--seq-len",
            "16777216",
        ],
    ] {
        let mut full = vec!["predict", "--model", "gpt-1.7b"];
        full.extend(args.iter().copied());
        let (code, out, err) = pplan(&full);
        assert!(
            code == 0 || code == 2,
            "{full:?}: code {code}\n{out}\n{err}"
        );
        assert!(!err.contains("panicked"), "{full:?}: {err}");
    }
}

#[test]
fn weights_alone_over_80gb_do_not_fit() {
    // GPT-3 175B on one GPU: 350 GB of 16-bit weights.
    let (code, out, err) = pplan(&[
        "predict",
        "--model",
        "gpt3-175b",
        "--gpus",
        "1",
        "--global-batch",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"fits\":false"), "{out}");
}

#[test]
fn predict_draws_a_gantt_chart_with_the_collectives_lane() {
    let path = std::env::temp_dir().join(format!("pplan-predict-{}.svg", std::process::id()));
    let (code, _, err) = pplan(&[
        "predict",
        "--model",
        "gpt-1.7b",
        "--gpus",
        "16",
        "--tp",
        "4",
        "--pp",
        "2",
        "--global-batch",
        "16",
        "--micro-batch",
        "1",
        "--gantt",
        path.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let svg = std::fs::read_to_string(&path).unwrap();
    for needle in [
        "tensor-parallel collectives",
        "data-parallel gradient reduction",
        "optimizer step",
        ">\ncoll\n<",
    ] {
        assert!(svg.contains(needle), "chart lacks {needle:?}");
    }
}

/// `memory_breakdown` (weights, gradients, optimizer, activations, overheads) adds up to
/// `peak_memory_bytes`, and `fits` agrees with it and the GPU's memory.
#[test]
fn memory_breakdown_adds_up_to_the_peak() {
    let mut args = GPT_1T.to_vec();
    args.extend(["2", "--format", "json"]);
    let (code, out, err) = pplan(&args);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let b = &v["memory_breakdown"];
    let parts = [
        "weights",
        "gradients",
        "optimizer",
        "activations",
        "overheads",
    ];
    let sum: u64 = parts.iter().map(|k| b[*k].as_u64().unwrap()).sum();
    assert_eq!(sum, v["peak_memory_bytes"].as_u64().unwrap(), "{out}");
    assert!(b["overheads"].as_u64().unwrap() > 2 << 30, "{out}");
    assert_eq!(
        v["fits"].as_bool().unwrap(),
        sum <= v["memory_limit_bytes"].as_u64().unwrap()
    );
}

/// `--attention flash` on a profile with measured attention efficiencies is faster and holds
/// fewer activations than the unfused path; on a profile without them it is exit 2, naming the
/// profile and the fields.
#[test]
fn flash_attention_needs_a_measured_kernel_and_saves_time_and_memory() {
    let run = |attention: &str, hardware: &str| {
        let (code, out, err) = pplan(&[
            "predict",
            "--model",
            "gpt3-175b",
            "--hardware",
            hardware,
            "--gpus",
            "1024",
            "--tp",
            "8",
            "--pp",
            "16",
            "--global-batch",
            "1536",
            "--micro-batch",
            "1",
            "--recompute",
            "none",
            "--sequence-parallel",
            "on",
            "--attention",
            attention,
            "--format",
            "json",
        ]);
        (code, out, err)
    };
    let parse = |out: &str| serde_json::from_str::<serde_json::Value>(out.trim()).unwrap();
    let (code, unfused, err) = run("unfused", "a100-80gb");
    assert_eq!(code, 0, "{err}");
    let (code, flash, err) = run("flash", "a100-80gb");
    assert_eq!(code, 0, "{err}");
    let (u, f) = (parse(&unfused), parse(&flash));
    assert!(
        f["step_time_s"].as_f64() < u["step_time_s"].as_f64(),
        "{flash}"
    );
    let act = |v: &serde_json::Value| v["memory_breakdown"]["activations"].as_u64().unwrap();
    assert!(act(&f) < act(&u), "{flash}");

    let dir = std::env::temp_dir().join(format!("pplan-flash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut hw: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/hardware/a100-80gb.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let gpu = hw["gpu"].as_object_mut().unwrap();
    gpu.remove("attention_efficiency_forward");
    gpu.remove("attention_efficiency_backward");
    hw["name"] = "no-flash".into();
    let path = dir.join("no-flash.json");
    std::fs::write(&path, hw.to_string()).unwrap();
    let (code, _, err) = run("flash", path.to_str().unwrap());
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--attention flash") && err.contains("no-flash"),
        "{err}"
    );
    assert!(err.contains("attention_efficiency_forward"), "{err}");
    let (code, _, err) = run("unfused", path.to_str().unwrap());
    assert_eq!(code, 0, "{err}");
}

/// `--precision fp8` on H100 runs the linear layers on the FP8 peak (faster, with FP8 weight
/// copies in memory) and reports MFU against both peaks; a format the GPU lacks is exit 2
/// naming the valid ones.
#[test]
fn precision_uses_its_peak_and_is_checked_against_the_gpu() {
    let run = |precision: &str| {
        let mut args = vec![
            "predict",
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
            "--micro-batch",
            "1",
            "--chunks",
            "5",
            "--recompute",
            "none",
            "--sequence-parallel",
            "on",
            "--attention",
            "flash",
            "--format",
            "json",
            "--precision",
        ];
        args.extend(precision.split_whitespace());
        pplan(&args)
    };
    let parse = |out: &str| serde_json::from_str::<serde_json::Value>(out.trim()).unwrap();
    let (code, bf16, err) = run("bf16");
    assert_eq!(code, 0, "{err}");
    let (code, fp8, err) = run("fp8");
    assert_eq!(code, 0, "{err}");
    let (b, f) = (parse(&bf16), parse(&fp8));
    assert!(
        f["step_time_s"].as_f64() < b["step_time_s"].as_f64(),
        "{fp8}"
    );
    assert_eq!(f["precision"], "fp8");
    let w = |v: &serde_json::Value| v["memory_breakdown"]["weights"].as_u64().unwrap();
    // Megatron-Core's FP8 recipes keep the weights in FP8 only (--fp8-param-gather, on by
    // default): the cast and its transpose on Hopper, 2 bytes, in place of the BF16 weight.
    assert_eq!(f["fp8_param_gather"], true, "{fp8}");
    assert_eq!(w(&f), w(&b), "FP8 weight and transpose, no BF16 copy");
    let (code, kept, err) = run("fp8 --fp8-param-gather off");
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        w(&parse(&kept)),
        2 * w(&b),
        "BF16 weights kept: FP8 copy and transpose, 2 more bytes per 2-byte weight"
    );
    let (mfu, mfu_fp8) = (
        f["mfu"].as_f64().unwrap(),
        f["mfu_precision_peak"].as_f64().unwrap(),
    );
    assert!((mfu / mfu_fp8 - 1978.9 / 989.4).abs() < 1e-6, "{fp8}");
    assert_eq!(b["mfu"], b["mfu_precision_peak"]);
    let (code, _, err) = run("nvfp4");
    assert_eq!(code, 2);
    assert!(
        err.contains("--precision") && err.contains("valid: bf16, fp8"),
        "{err}"
    );
    let (code, _, err) = run("fp16");
    assert_eq!(code, 2);
    assert!(err.contains("unknown precision 'fp16'"), "{err}");
}

/// `--overlap-param-gather on` leaves only the reduce-scatter of the distributed optimizer in
/// the step (faster with d > 1); it needs `--zero1`, exit 2 otherwise.
#[test]
fn overlap_param_gather_needs_the_distributed_optimizer() {
    let run = |extra: &[&str]| {
        let mut args = vec![
            "predict",
            "--model",
            "gpt-18.4b",
            "--hardware",
            "a100-80gb",
            "--gpus",
            "256",
            "--tp",
            "8",
            "--pp",
            "1",
            "--global-batch",
            "256",
            "--micro-batch",
            "1",
            "--format",
            "json",
        ];
        args.extend(extra);
        pplan(&args)
    };
    let step = |out: &str| {
        serde_json::from_str::<serde_json::Value>(out.trim()).unwrap()["step_time_s"]
            .as_f64()
            .unwrap()
    };
    let (code, off, err) = run(&["--zero1", "--overlap-param-gather", "off"]);
    assert_eq!(code, 0, "{err}");
    let (code, on, err) = run(&["--zero1", "--overlap-param-gather", "on"]);
    assert_eq!(code, 0, "{err}");
    assert!(step(&on) < step(&off), "{on}\n{off}");
    let (code, _, err) = run(&["--zero", "0", "--overlap-param-gather", "on"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--overlap-param-gather on needs") && err.contains("--zero1"),
        "{err}"
    );
}

/// `--stack` picks the framework whose switches the other flags start from: today's by default
/// (flash attention where the profile has its rates, every overlap that applies), the 2021
/// paper's with `megatron-2021`; an explicit flag overrides either.
#[test]
fn stack_presets_and_their_overrides() {
    let run = |extra: &[&str]| {
        let mut args = vec![
            "predict",
            "--model",
            "gpt-18.4b",
            "--gpus",
            "64",
            "--tp",
            "8",
            "--global-batch",
            "64",
            "--sequence-parallel",
            "on",
            "--zero",
            "1",
            "--format",
            "json",
        ];
        args.extend(extra);
        let (code, out, err) = pplan(&args);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<serde_json::Value>(out.trim()).unwrap()
    };
    let switches = |v: &serde_json::Value| {
        (
            v["stack"].as_str().unwrap().to_string(),
            v["attention"].as_str().unwrap().to_string(),
            v["tp_comm_overlap"].as_bool().unwrap(),
            v["overlap_grad_reduce"].as_bool().unwrap(),
            v["overlap_param_gather"].as_bool().unwrap(),
        )
    };
    let core = run(&[]);
    assert_eq!(
        switches(&core),
        ("megatron-core".into(), "flash".into(), true, true, true)
    );
    let old = run(&["--stack", "megatron-2021"]);
    assert_eq!(
        switches(&old),
        (
            "megatron-2021".into(),
            "unfused".into(),
            false,
            false,
            false
        )
    );
    assert!(core["step_time_s"].as_f64() < old["step_time_s"].as_f64());
    let mixed = run(&[
        "--stack",
        "megatron-2021",
        "--attention",
        "flash",
        "--tp-comm-overlap",
        "on",
    ]);
    assert_eq!(
        switches(&mixed),
        ("megatron-2021".into(), "flash".into(), true, false, false)
    );
    // Blackwell profiles carry the fused kernel's published rates, so flash by default; a
    // profile without them (b200's with its attention fields taken out) falls back to unfused.
    let b200 = run(&["--hardware", "b200"]);
    assert_eq!(b200["attention"], "flash");
    let mut bare: serde_json::Value =
        serde_json::from_str(include_str!("../hardware/b200.json")).unwrap();
    let gpu = bare["gpu"].as_object_mut().unwrap();
    gpu.retain(|k, _| !k.starts_with("attention_"));
    bare["sources"]
        .as_object_mut()
        .unwrap()
        .retain(|k, _| !k.starts_with("gpu.attention_"));
    let dir = std::env::temp_dir().join(format!("pplan-bare-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("b200-no-attention.json");
    std::fs::write(&path, bare.to_string()).unwrap();
    let fallback = run(&["--hardware", path.to_str().unwrap()]);
    assert_eq!(fallback["attention"], "unfused");
    assert_eq!(fallback["stack"], "megatron-core");
}

/// `--defer-embedding-wgrad-compute on` (Megatron-Core's): the last stage's output-layer
/// weight gradients move to its flush, so a pipeline whose last stage carries a 128k
/// vocabulary gets faster (with every micro-batch deferred, or the first 4), the prediction
/// says so, and the peak memory does not fall; a bad limit exits 2 naming the flag.
#[test]
fn deferred_embedding_wgrad_shortens_the_step_and_keeps_its_tensors() {
    let mut base = LLAMA3_70B_PP8.to_vec();
    base.extend(["--recompute", "selective"]);
    let run = |extra: &[&str]| predict_json(&base, extra);
    let off = run(&[]);
    let on = run(&["--defer-embedding-wgrad-compute", "on"]);
    let limited = run(&[
        "--defer-embedding-wgrad-compute",
        "on",
        "--wgrad-deferral-limit",
        "4",
    ]);
    assert_eq!(off["defer_embedding_wgrad_compute"], false);
    assert_eq!(on["defer_embedding_wgrad_compute"], true);
    assert_eq!(limited["wgrad_deferral_limit"], 4);
    let step = |v: &serde_json::Value| v["step_time_s"].as_f64().unwrap();
    assert!(step(&on) < step(&off), "{} {}", step(&on), step(&off));
    assert!(step(&limited) < step(&off));
    // The deferred tensors sit on the last device, here not the fullest (the first holds
    // more in-flight activations): the peak does not fall (their bytes are checked in
    // plan::predict::step's tests).
    let mem = |v: &serde_json::Value| v["peak_memory_bytes"].as_u64().unwrap();
    assert!(mem(&on) >= mem(&off));
    // A limit that is not a number is refused, naming the flag.
    let mut bad = base.to_vec();
    bad.extend(["--wgrad-deferral-limit", "-1"]);
    let (code, _, err) = pplan(&bad);
    assert_eq!(code, 2);
    assert!(err.contains("--wgrad-deferral-limit"), "{err}");
}

/// `--cross-entropy-loss-fusion on` (Megatron-Core's): the last stage's cross-entropy moves
/// 22 (native) or 6 (Transformer Engine) bytes per logit forward instead of 38, so a pipeline
/// whose last stage carries a 128k vocabulary gets faster, TE's the most; the JSON says which.
/// An implementation without the fusion, or an unknown one, exits 2 naming the flag.
#[test]
fn fused_cross_entropy_shortens_the_last_stage() {
    let base = LLAMA3_70B_PP8;
    let run = |extra: &[&str]| predict_json(&base, extra);
    let off = run(&[]);
    let native = run(&["--cross-entropy-loss-fusion", "on"]);
    let te = run(&[
        "--cross-entropy-loss-fusion",
        "on",
        "--cross-entropy-fusion-impl",
        "te",
    ]);
    assert_eq!(off["cross_entropy_fusion"], "off");
    assert_eq!(native["cross_entropy_fusion"], "native");
    assert_eq!(te["cross_entropy_fusion"], "te");
    let step = |v: &serde_json::Value| v["step_time_s"].as_f64().unwrap();
    assert!(step(&te) < step(&native), "{} {}", step(&te), step(&native));
    assert!(
        step(&native) < step(&off),
        "{} {}",
        step(&native),
        step(&off)
    );
    for (extra, want) in [
        (
            vec!["--cross-entropy-fusion-impl", "te"],
            "needs --cross-entropy-loss-fusion on",
        ),
        (
            vec![
                "--cross-entropy-loss-fusion",
                "on",
                "--cross-entropy-fusion-impl",
                "liger",
            ],
            "valid: native, te",
        ),
    ] {
        let mut bad = base.to_vec();
        bad.extend(extra);
        let (code, _, err) = pplan(&bad);
        assert_eq!(code, 2, "{err}");
        assert!(
            err.contains("--cross-entropy-fusion-impl") && err.contains(want),
            "{err}"
        );
    }
}

/// Megatron-Core's precision-aware optimizer: with its defaults Adam's state is 10 bytes a
/// parameter (fp32 master weights kept as the 16-bit remainders of the BF16 weights), with
/// BF16 moments 6; the step is unchanged and the JSON says which formats. Formats other than
/// fp32 without the flag, and unknown formats, exit 2 naming the flag.
#[test]
fn precision_aware_optimizer_shrinks_the_optimizer_state() {
    let base = [
        "predict",
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
        "--zero",
        "1",
        "--format",
        "json",
    ];
    let run = |extra: &[&str]| predict_json(&base, extra);
    let off = run(&[]);
    let on = run(&["--use-precision-aware-optimizer", "on"]);
    let bf16 = run(&[
        "--use-precision-aware-optimizer",
        "on",
        "--exp-avg-dtype",
        "bf16",
        "--exp-avg-sq-dtype",
        "bf16",
    ]);
    let opt = |v: &serde_json::Value| v["memory_breakdown"]["optimizer"].as_u64().unwrap();
    // 12 : 10 : 6 bytes a parameter, over the same shard.
    assert_eq!(opt(&off) % 6, 0);
    assert_eq!(opt(&on), opt(&off) / 6 * 5);
    assert_eq!(opt(&bf16), opt(&off) / 2);
    assert_eq!(off["use_precision_aware_optimizer"], false);
    assert_eq!(on["use_precision_aware_optimizer"], true);
    assert_eq!(on["main_params_dtype"], "fp32");
    assert_eq!(bf16["exp_avg_dtype"], "bf16");
    assert_eq!(bf16["exp_avg_sq_dtype"], "bf16");
    assert_eq!(off["step_time_s"], on["step_time_s"]);
    let mem = |v: &serde_json::Value| v["peak_memory_bytes"].as_u64().unwrap();
    assert!(mem(&bf16) < mem(&on) && mem(&on) < mem(&off));
    for (extra, want) in [
        (
            &["--exp-avg-dtype", "bf16"][..],
            "--exp-avg-dtype: bf16 needs --use-precision-aware-optimizer on",
        ),
        (
            &[
                "--use-precision-aware-optimizer",
                "on",
                "--main-params-dtype",
                "bf16",
            ][..],
            "--main-params-dtype: unknown dtype 'bf16' (valid: fp32, fp16",
        ),
        (
            &["--exp-avg-sq-dtype", "int4"][..],
            "--exp-avg-sq-dtype: unknown dtype 'int4' (valid: fp32, fp16, bf16, fp8)",
        ),
    ] {
        let mut args = base.to_vec();
        args.extend(extra);
        let (code, _, err) = pplan(&args);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(want), "{err}");
    }
}
