//! torchtitan's stack (ZeRO-3, FP32 gradient reduction, eager kernels, FSDP2's copies) and its
//! selective activation checkpointing, in the cost model, the emitters and the CLI. Its
//! published runs are data (`data/runs/torchtitan-*.json`, `tests/published_runs.rs`).

mod common;

use common::pplan;
use pplan::cost::{Stack, Zero};

#[test]
fn the_stack_is_torchtitans() {
    let s = Stack::torchtitan();
    assert_eq!(s.zero, Zero::Full);
    assert_eq!(s.grad_reduce_bytes_per_param, 4.0);
    assert!(s.fsdp2 && s.reshard_after_forward);
}

#[test]
fn selective_op_recomputes_every_second_linear_gemm_and_keeps_what_it_saves() {
    use pplan::cost::memory::{layer_activation_bytes, layer_activation_bytes_for, ActDims};
    use pplan::cost::{Attention, CostModel, Recompute, Stack};
    use pplan::plan::predict::PredictRequest;
    // Llama 2 13B at s 4096, b 2, t 1: h 5120, 40 heads (multi-head: kv 5120), f 13824, SwiGLU.
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/data/runs/models/nemo-llama2-13b.json"
    );
    let mut model = pplan::inputs::Model::load(path).unwrap();
    model.seq_len = 4096;
    let hw = pplan::inputs::Hardware::bundled("a100-80gb").unwrap();
    let mut req = PredictRequest::new(&model, &hw);
    req.micro_batch = 2;
    let cm = CostModel {
        model: &model,
        hw: &hw,
        layout: req.layout(1),
        stack: Stack::default(),
    };
    let (s, b, h, f) = (4096.0, 2.0, 5120.0, 13824.0);
    // Recomputed: k (h x kv), the output projection (h x h), the MLP up projection (h x f).
    let hand = 2.0 * s * b * (h * h + h * h + h * f);
    let got = cm.selective_op_recompute_flops();
    assert!((got - hand).abs() / hand < 1e-12, "{got} vs {hand}");

    // Kept: the layer input, q, v, the attention output, the MLP gate and the MLP output,
    // 2 bytes each; flash attention adds its log-sum-exp (4 bytes x heads x s x b).
    let d = ActDims::new(&model, 2, 1);
    let saved = 2 * 4096 * 2 * (4 * 5120 + 5120 + 13824);
    assert_eq!(
        layer_activation_bytes(d, Recompute::SelectiveOp, false),
        saved
    );
    let lse = 4 * 40 * 4096 * 2;
    assert_eq!(
        layer_activation_bytes_for(d, Recompute::SelectiveOp, false, Attention::Flash),
        saved + lse
    );
    // Every second layer whole: the mean of keeping everything and keeping the input.
    let none = layer_activation_bytes_for(d, Recompute::None, false, Attention::Flash);
    let full = layer_activation_bytes(d, Recompute::Full, false);
    assert_eq!(
        layer_activation_bytes_for(d, Recompute::SelectiveLayer, false, Attention::Flash),
        none / 2 + full / 2
    );
}

#[test]
fn torchtitan_checkpointing_is_emitted_as_torchtitan_spells_it() {
    let dir = std::env::temp_dir().join(format!("pplan-ttac-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (recompute, option) in [("selective-op", "op"), ("selective-layer", "2")] {
        let plan = dir.join(format!("{recompute}.json"));
        let (code, _, err) = pplan(&[
            "predict",
            "--model",
            "llama3-8b",
            "--hardware",
            "h100-80gb",
            "--gpus",
            "8",
            "--global-batch",
            "16",
            "--micro-batch",
            "2",
            "--zero",
            "3",
            "--attention",
            "flash",
            "--recompute",
            recompute,
            "--output",
            plan.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{err}");
        let (code, toml, err) = pplan(&[
            "emit",
            "--plan",
            plan.to_str().unwrap(),
            "--target",
            "torchtitan-v0.2",
        ]);
        assert_eq!(code, 0, "{err}");
        assert!(
            toml.contains("mode = \"selective\"")
                && toml.contains(&format!("selective_ac_option = \"{option}\"")),
            "{toml}"
        );
        assert!(!err.contains("cannot express"), "{err}");
        let (code, _, err) = pplan(&[
            "emit",
            "--plan",
            plan.to_str().unwrap(),
            "--target",
            "megatron",
        ]);
        assert_eq!(code, 0);
        assert!(err.contains("Megatron-LM has no such mode"), "{err}");
    }
    // Not modelled for mixture-of-experts layers: refused, naming the flag.
    let (code, _, err) = pplan(&[
        "predict",
        "--model",
        "mixtral-8x7b",
        "--hardware",
        "h100-80gb",
        "--gpus",
        "64",
        "--ep",
        "8",
        "--global-batch",
        "64",
        "--recompute",
        "selective-op",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("--recompute selective-op"), "{err}");
}

#[test]
fn the_torchtitan_stack_from_the_cli() {
    // --stack torchtitan runs FSDP2 (ZeRO-3) unless --zero says otherwise, and says so.
    let base = [
        "predict",
        "--model",
        "llama3-8b",
        "--gpus",
        "64",
        "--global-batch",
        "64",
        "--seq-len",
        "8192",
        "--recompute",
        "selective-op",
        "--stack",
        "torchtitan",
        "--format",
        "json",
    ];
    let (code, out, err) = pplan(&base);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["stack"], "torchtitan");
    assert_eq!(v["zero"], 3);
    assert_eq!(v["attention"], "flash");
    let zero3_tokens = v["tokens_per_s_per_gpu"].as_f64().unwrap();
    let mut args = base.to_vec();
    args.extend(["--zero", "0"]);
    let (code, out, err) = pplan(&args);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["stack"].as_str(), v["zero"].as_u64()),
        (Some("torchtitan"), Some(0))
    );
    assert_ne!(v["tokens_per_s_per_gpu"].as_f64().unwrap(), zero3_tokens);

    // Search enumerates the two data-parallel modes torchtitan has: DDP and FSDP2.
    let (code, out, err) = pplan(&[
        "search",
        "--model",
        "llama3-8b",
        "--gpus",
        "16",
        "--global-batch",
        "16",
        "--stack",
        "torchtitan",
        "--top",
        "50",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 50);
    let zeros: std::collections::BTreeSet<u64> = results
        .iter()
        .map(|r| r["zero"].as_u64().unwrap())
        .collect();
    assert_eq!(zeros, [0, 3].into_iter().collect());
    assert!(results.iter().all(|r| r["stack"] == "torchtitan"));

    // A plan names its stack; one pplan does not know is refused, naming the field.
    let dir = std::env::temp_dir().join(format!("pplan-ttstack-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("plan.json");
    let mut args = base.to_vec();
    args.extend(["--output", plan.to_str().unwrap()]);
    let (code, _, err) = pplan(&args);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&plan).unwrap();
    assert!(text.contains("\"stack\": \"torchtitan\""), "{text}");
    std::fs::write(&plan, text.replace("\"torchtitan\"", "\"deepspeed\"")).unwrap();
    let (code, _, err) = pplan(&[
        "emit",
        "--plan",
        plan.to_str().unwrap(),
        "--target",
        "megatron",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("parallelism.stack")
            && err.contains("valid: megatron-core, megatron-2021, torchtitan"),
        "{err}"
    );
}
