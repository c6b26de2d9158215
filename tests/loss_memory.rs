//! What the loss holds at its peak, and what FSDP2 holds under PyTorch's pipelining
//! (docs/cost-model.md, "Memory per GPU"): each loss implementation's bytes per logit read
//! off its code, the working memory they add on the device of the last stage, and the
//! published peak memory of torchtitan's runs they account for (held out: nothing fitted).

mod common;

use common::{json, pplan, validated_rows};
use pplan::cost::memory::{loss_working_bytes, ActDims};
use pplan::cost::{CostModel, CrossEntropyFusion, Layout, Stack};
use pplan::inputs::{Hardware, Model};

#[test]
fn each_loss_holds_what_its_code_allocates() {
    use CrossEntropyFusion::*;
    // (implementation, PyTorch's F.cross_entropy, vocabulary-parallel) -> (saved, peak)
    let cases = [
        // Megatron's steps: fp32 copy beside the 16-bit logits; in-place gradient + cast.
        (Off, false, true, 4, 6),
        (Native, false, true, 4, 6),
        // torchtitan's eager loss: saved log-softmax, NLL's gradient, the input gradient.
        (Off, true, false, 4, 12),
        // ... under loss_parallel: also exp(x) and the sum, at once.
        (Off, true, true, 4, 16),
        // Transformer Engine: the gradient written over the logits.
        (Te, false, true, 2, 2),
        // Inductor and llm-foundry's FlashAttention kernel: 16-bit logits, a new 16-bit gradient.
        (Inductor, true, false, 2, 4),
        (LlmFoundry, true, false, 2, 4),
    ];
    for (ce, functional, vocab_parallel, saved, peak) in cases {
        assert_eq!(ce.saved_bytes_per_logit(), saved, "{ce:?}");
        assert_eq!(
            ce.peak_bytes_per_logit(functional, vocab_parallel),
            peak,
            "{ce:?} functional {functional} vocab-parallel {vocab_parallel}"
        );
    }
}

#[test]
fn torchtitans_eager_loss_at_32k_tokens_needs_33_gb_beyond_its_saved_softmax() {
    // Llama 3.1 8B at 32,768 tokens a GPU (torchtitan's CP rows): 8 bytes a logit over
    // 32,768 x 128,256 logits beyond the 4 saved.
    let mut m = Model::preset("llama3-8b").unwrap();
    m.seq_len = 32768;
    let hw = Hardware::bundled("h100-96gb-500w").unwrap();
    let cm = CostModel {
        model: &m,
        hw: &hw,
        layout: Layout::tensor_parallel(1),
        stack: Stack::torchtitan(),
    };
    let want = 8 * 32768 * 128_256u64;
    assert_eq!(cm.loss_working_bytes(), want);
    assert_eq!(
        loss_working_bytes(ActDims::new(&m, 1, 1), m.vocab_size, 4, 12),
        want
    );
    // Compiled (2025-04 on), the 16-bit gradient beside the kept 16-bit logits: 2 bytes.
    let compiled = CostModel {
        stack: Stack {
            cross_entropy_fusion: CrossEntropyFusion::Inductor,
            ..Stack::torchtitan()
        },
        ..cm
    };
    assert_eq!(compiled.loss_working_bytes(), want / 4);
}

fn peak_errors(file: &str) -> Vec<(String, f64)> {
    validated_rows(file)
        .iter()
        .map(|r| {
            let p = r["peak_memory_gb"].as_f64().expect("peak");
            let m = r["measured_peak_memory_gb"]
                .as_f64()
                .expect("published peak");
            (r["id"].as_str().unwrap().to_string(), p / m - 1.0)
        })
        .collect()
}

/// torchtitan's December 2024 H100 page publishes the allocator's maximum reserved memory of
/// every row. With the eager loss's peak and, under PP, FSDP2's gathered stage and FP32
/// gradients accumulated unsharded, 14 of the 18 rows are within 10 % (all were 19-58 % under
/// without them); the other four (70B 2D without AsyncTP, 405B 1F1B, 405B CP 4 and 8) within
/// 20 %, under.
#[test]
fn torchtitan_h100_peak_memory_within_10_percent_where_docs_say() {
    let errors = peak_errors("data/runs/torchtitan-llama3-h100-500w.json");
    assert_eq!(errors.len(), 18);
    let loose = [
        "tt-h100-70b-256-2d",
        "tt-h100-405b-512-1f1b",
        "tt-h100-405b-cp4",
        "tt-h100-405b-cp8",
    ];
    for (id, e) in &errors {
        let bound = if loose.contains(&id.as_str()) {
            0.20
        } else {
            0.10
        };
        assert!(e.abs() < bound, "{id}: {:+.1} %", 100.0 * e);
    }
    let mean = errors.iter().map(|(_, e)| e.abs()).sum::<f64>() / errors.len() as f64;
    assert!(mean < 0.08, "mean {:.1} %", 100.0 * mean);
}

/// The June 2025 H200 rows ran torchtitan's compiled loss: within 5 % of their published peak.
#[test]
fn torchtitan_h200_compiled_loss_peak_memory_within_5_percent() {
    for (id, e) in peak_errors("data/runs/torchtitan-llama3-h200-fp8.json") {
        assert!(e.abs() < 0.05, "{id}: {:+.1} %", 100.0 * e);
    }
}

#[test]
fn a_pytorch_loss_on_a_megatron_stack_is_refused_by_name() {
    let (code, _, err) = pplan(&[
        "predict",
        "--model",
        "llama3-8b",
        "--gpus",
        "8",
        "--global-batch",
        "16",
        "--cross-entropy-loss-fusion",
        "on",
        "--cross-entropy-fusion-impl",
        "inductor",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--cross-entropy-fusion-impl inductor") && err.contains("--stack torchtitan"),
        "{err}"
    );
}

/// A plan predicted with torchtitan's compiled loss predicts again the same from its file,
/// is refused by name on another stack, and is not written as Megatron-LM's fusion flags.
#[test]
fn a_compiled_loss_plan_round_trips_and_is_not_emitted_as_megatrons() {
    let dir = std::env::temp_dir().join(format!("pplan-loss-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("plan.json");
    let plan_s = plan.to_str().unwrap();
    let args = [
        "predict",
        "--model",
        "llama3-8b",
        "--hardware",
        "h200",
        "--gpus",
        "8",
        "--global-batch",
        "16",
        "--micro-batch",
        "2",
        "--stack",
        "torchtitan",
        "--cross-entropy-loss-fusion",
        "on",
        "--cross-entropy-fusion-impl",
        "inductor",
        "--format",
        "json",
    ];
    let (code, direct, err) = pplan(&[&args[..], &["--output", plan_s]].concat());
    assert_eq!(code, 0, "{err}");
    let (code, again, err) = pplan(&["predict", "--plan", plan_s, "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        json(&direct)["peak_memory_bytes"],
        json(&again)["peak_memory_bytes"]
    );
    let (code, out, err) = pplan(&["emit", "--plan", plan_s, "--target", "megatron"]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("--cross-entropy-fusion-impl"), "{out}");
    assert!(err.contains("a PyTorch stack's (inductor)"), "{err}");
    let text = std::fs::read_to_string(&plan).unwrap();
    let other = dir.join("megatron.json");
    std::fs::write(
        &other,
        text.replace("\"stack\": \"torchtitan\"", "\"stack\": \"megatron-core\""),
    )
    .unwrap();
    let (code, _, err) = pplan(&["predict", "--plan", other.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("parallelism.cross_entropy_fusion") && err.contains("stack torchtitan"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
