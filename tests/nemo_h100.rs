//! NVIDIA NeMo 24.07 on DGX-H100 in FP8 (`data/nemo-24.07-h100-fp8.json`, architectures in
//! `data/nemo-24.07-models.json`): the data, the models, the FLOP convention and the harness.
//!
//! The ten cp = 1 rows are H100's calibration set (docs/cost-model.md, "What was fitted"):
//! their mean absolute error is within the 5 % and every row within its 10 %
//! (docs/validation.md). `examples/validate_nemo.rs` prints the table.

use pplan::cost::{Attention, Recompute, Stack, Zero};
use pplan::inputs::hardware::Hardware;
use pplan::inputs::model::Model;
use pplan::report::nemo::{
    model_flops_per_token, nemo_24_07_stack, nemo_cases, nemo_models, nemo_rows, validate_nemo,
    NemoRow, NEMO_24_07_MODELS,
};
use pplan::schedule::generators::ScheduleName;
use std::collections::BTreeSet;

fn h100() -> Hardware {
    Hardware::bundled("h100-80gb").unwrap()
}

#[test]
fn twelve_rows_load_and_their_layouts_add_up() {
    let rows = nemo_rows().unwrap();
    assert_eq!(rows.len(), 12);
    let ids: BTreeSet<&str> = rows.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids.len(), 12, "row ids are unique");
    for r in &rows {
        assert_eq!(
            r.gpus_total,
            r.t * r.p * r.d * r.cp,
            "{}: GPUs = t p d cp",
            r.id
        );
        assert_eq!(r.gpus_per_node, 8, "{}", r.id);
        assert_eq!(r.precision, "FP8", "{}", r.id);
        assert!(
            r.tflops_per_gpu > 0.0 && r.tokens_per_s_per_gpu > 0.0,
            "{}",
            r.id
        );
    }
    let cp1 = rows.iter().filter(|r| r.cp == 1).count();
    assert_eq!(cp1, 10, "ten rows without context parallelism");
    // The data's own example, GPT3-175B: 782e12 / 726 = 1.077e12 FLOP/token.
    let r083 = rows.iter().find(|r| r.id == "r083").unwrap();
    assert!((r083.implied_flops_per_token() / 1.0771e12 - 1.0).abs() < 1e-3);
}

#[test]
fn every_model_resolves_and_each_entry_is_a_megatron_style_model_file() {
    let models = nemo_models().unwrap();
    assert_eq!(models.len(), 11);
    let cases = nemo_cases().unwrap();
    assert_eq!(cases.len(), 12);
    let used: BTreeSet<&str> = cases.iter().map(|c| c.spec.name.as_str()).collect();
    assert_eq!(used.len(), 11, "every model is used by a row");
    for c in &cases {
        assert_eq!(c.model.seq_len, c.row.seq_len, "{}", c.row.id);
        assert_eq!(
            c.spec.seq_length, c.row.seq_len,
            "{}: config seq = row seq",
            c.row.id
        );
        let m = c.model.vocab_size;
        assert!(
            m >= c.spec.vocab_size && m % (128 * c.row.t) == 0,
            "{}",
            c.row.id
        );
    }
    // Every entry read as a `--model` file gives the same dimensions (vocabulary unpadded).
    let v: serde_json::Value = serde_json::from_str(NEMO_24_07_MODELS).unwrap();
    for (entry, spec) in v["models"].as_array().unwrap().iter().zip(&models) {
        let from_file = Model::from_json(&entry.to_string(), "model.json").unwrap();
        let mut ours = spec.model(spec.seq_length, 1).unwrap();
        ours.name = "model".into();
        ours.vocab_size = spec.vocab_size;
        assert_eq!(from_file, ours, "{}", spec.name);
        assert!(
            spec.sources.keys().any(|k| k.contains("num_layers"))
                && spec.sources.contains_key("vocab_size")
                && spec.sources.contains_key("params_published")
                && spec.sources.contains_key("recipe"),
            "{}: every value has a source",
            spec.name
        );
    }
}

/// pplan's parameter count against the published one: within 3% for every published count.
/// Three models have only a nominal size (the number in their name); GPT3-5B and GPT3-20B are
/// within 3% of it, Nemotron-8B (8.54e9: the untied 256k-vocabulary embeddings alone are 2.1e9)
/// and Nemotron-22B (21.3e9) are not, and are held to 10%. NeMo's own FLOP counts confirm their
/// dimensions (`flop_convention_is_nemos`).
#[test]
fn parameter_counts_match_the_published_sizes() {
    let mut report = String::new();
    let mut worst_count: f64 = 0.0;
    for c in nemo_cases().unwrap() {
        let ours = c.model.total_params() as f64;
        let err = ours / c.spec.params_published - 1.0;
        report += &format!(
            "{} {}: pplan {:.3e}, published {:.3e} ({}) {:+.2}%\n",
            c.row.id,
            c.spec.name,
            ours,
            c.spec.params_published,
            c.spec.params_basis,
            100.0 * err
        );
        match c.spec.params_basis.as_str() {
            "count" => worst_count = worst_count.max(err.abs()),
            "nominal" => assert!(err.abs() <= 0.10, "{report}"),
            other => panic!("{}: params_basis '{other}'", c.spec.name),
        }
    }
    assert!(worst_count <= 0.03, "{report}");
    for (name, billions) in [
        ("GPT3-5B", 5.04),
        ("GPT3-175B", 174.6),
        ("LLAMA2-7B", 6.74),
        ("LLAMA2-70B", 68.98),
        ("Nemotron-8B", 8.54),
        ("Nemotron-22B", 21.27),
        ("Nemotron-340B", 341.0),
        ("LLAMA3-8B", 8.03),
        ("LLAMA3-70B", 70.55),
    ] {
        let spec = nemo_models()
            .unwrap()
            .into_iter()
            .find(|m| m.name == name)
            .unwrap();
        let got = spec.model(spec.seq_length, 1).unwrap().total_params() as f64 / 1e9;
        assert!((got / billions - 1.0).abs() < 0.002, "{name}: {got:.3}B");
    }
}

/// The FLOPs per token NeMo's two published figures imply (TFLOP/s x 1e12 / tokens/s) equal
/// pplan's model FLOPs per token at the row's sequence length: the same convention (full
/// s x s attention scores and values, grouped-query K/V, 2 or 3 MLP matrices, logits, no
/// recomputation, no embedding). The published figures have 3-5 significant digits, so the
/// difference is rounding (under 0.15%); 0.5% is stricter than the 3% asked for, so that a
/// change of convention (e.g. halving attention for the causal mask: 1.3% for GPT3-175B,
/// 11% for Llama 3 8B) fails here.
#[test]
fn flop_convention_is_nemos() {
    let hw = h100();
    let mut report = String::new();
    let mut worst: f64 = 0.0;
    for c in nemo_cases().unwrap() {
        let implied = c.row.implied_flops_per_token();
        let ours = model_flops_per_token(&c.model, &hw);
        let err = ours / implied - 1.0;
        worst = worst.max(err.abs());
        report += &format!(
            "{} {} s={}: NeMo {:.4e}, pplan {:.4e} ({:+.3}%)\n",
            c.row.id,
            c.row.model,
            c.row.seq_len,
            implied,
            ours,
            100.0 * err
        );
    }
    assert!(worst <= 0.005, "{report}");
}

#[test]
fn requests_carry_the_rows_layout_and_the_given_stack() {
    let hw = h100();
    let stack = nemo_24_07_stack();
    assert!(stack.zero == Zero::Optimizer && stack.overlap_grad_reduce);
    // Set in every model's 24.07 config: optim.overlap_param_sync, gradient_accumulation_fusion.
    assert!(stack.overlap_param_gather && stack.grad_accumulation_fusion);
    for c in nemo_cases().unwrap() {
        let req = c.request(&hw, stack).unwrap();
        assert_eq!(req.cp, c.row.cp, "{}", c.row.id);
        let r = &c.row;
        assert_eq!(
            (
                req.gpus,
                req.tp,
                req.pp,
                req.dp,
                req.micro_batch,
                req.global_batch
            ),
            (
                r.gpus_total,
                r.t,
                r.p,
                Some(r.d),
                r.micro_batch,
                r.global_batch
            ),
            "{}",
            r.id
        );
        let want = if r.p == 1 {
            (ScheduleName::OneFOneB, 1)
        } else {
            (ScheduleName::Interleaved1F1B, req.chunks)
        };
        assert_eq!((req.schedule.unwrap(), req.chunks), want, "{}", r.id);
        assert_eq!(req.sequence_parallel, r.t > 1, "{}", r.id);
        let recompute = if r.model == "Nemotron-340B" {
            Recompute::Selective
        } else {
            Recompute::None
        };
        assert_eq!(req.recompute, recompute, "{}", r.id);
        // The recipe sets the runtime switches; the stack passed in everything else.
        let recipe = &c.spec.recipe;
        let want_stack = Stack {
            zero: if recipe.distributed_optimizer {
                Zero::Optimizer
            } else {
                Zero::Off
            },
            overlap_grad_reduce: recipe.overlap_grad_sync,
            tp_comm_overlap: recipe.tp_comm_overlap,
            blocking_p2p: !recipe.overlap_p2p_comm,
            defer_embedding_wgrad: recipe.defer_embedding_wgrad_compute,
            wgrad_deferral_limit: recipe.wgrad_deferral_limit,
            optimizer_state: recipe.optimizer_state().unwrap(),
            ..stack
        };
        // Apex's distributed Adam keeps the remainders of fp32 master weights (10 bytes a
        // parameter); Nemotron-340B's optim.dtype bf16 keeps no master copy (4).
        let want_bytes = if r.model == "Nemotron-340B" { 4 } else { 10 };
        assert_eq!(
            req.stack.optimizer_state.bytes_per_param(),
            want_bytes,
            "{}",
            r.id
        );
        // Only Nemotron-340B's recipe (dgxc-benchmarking's) defers the output layer's weight
        // gradients.
        assert_eq!(
            req.stack.defer_embedding_wgrad,
            r.model == "Nemotron-340B",
            "{}",
            r.id
        );
        assert_eq!(req.stack, want_stack, "{}", r.id);
    }
    // VP=k is k chunks.
    let c = nemo_cases().unwrap();
    let r087 = c.iter().find(|c| c.row.id == "r087").unwrap();
    assert_eq!(r087.request(&hw, stack).unwrap().chunks, 20);
}

#[test]
fn schedules_outside_the_two_forms_are_refused() {
    let mut row: NemoRow = nemo_rows().unwrap().remove(0);
    for (p, s, ok) in [
        (1, "none", Some((ScheduleName::OneFOneB, 1))),
        (4, "none", None),
        (4, "1F1B", Some((ScheduleName::OneFOneB, 1))),
        (
            4,
            "interleaved 1F1B, VP=10",
            Some((ScheduleName::Interleaved1F1B, 10)),
        ),
        (4, "interleaved 1F1B, VP=0", None),
        (4, "interleaved 1F1B, VP=x", None),
        (4, "zero bubble", None),
    ] {
        row.p = p;
        row.schedule = s.to_string();
        match (row.schedule(), ok) {
            (Ok(got), Some(want)) => assert_eq!(got, want, "{s}"),
            (Err(e), None) => assert!(e.to_string().contains(s), "{e}"),
            (got, want) => panic!("{s} with p = {p}: got {got:?}, want {want:?}"),
        }
    }
}

/// Every cp = 1 row is predicted (no error, positive throughput, one comparison each), the two
/// Every row, the two with context parallelism 2 included, is predicted; the harness output
/// is the same twice, and pplan's throughput FLOPs are the convention checked above (context
/// parallelism splits the work, not the FLOPs counted).
#[test]
fn every_row_is_predicted_and_the_output_is_deterministic() {
    let hw = h100();
    let a = validate_nemo(&hw, nemo_24_07_stack()).unwrap();
    assert_eq!(a.compared.len(), 12);
    assert_eq!(
        a.compared.iter().filter(|c| c.prediction.cp == 2).count(),
        2
    );
    for c in &a.compared {
        let p = &c.prediction;
        assert!(
            p.step_time_s > 0.0 && p.model_tflops_per_gpu > 0.0,
            "{}",
            c.row.id
        );
        assert!(p.zero1, "{}", c.row.id);
        let ours = model_flops_per_token(
            &nemo_cases()
                .unwrap()
                .into_iter()
                .find(|k| k.row.id == c.row.id)
                .unwrap()
                .model,
            &hw,
        );
        let from_prediction = p.model_tflops_per_gpu * 1e12 * p.gpus as f64 / p.tokens_per_s;
        assert!((from_prediction / ours - 1.0).abs() < 1e-9, "{}", c.row.id);
        // Same step time, same FLOPs per token: the two errors agree up to the rounding of the
        // published figures.
        assert!(
            (c.tflops_error - c.tokens_error).abs() < 0.005,
            "{}",
            c.row.id
        );
    }
    let text = a.markdown();
    let b = validate_nemo(&hw, nemo_24_07_stack()).unwrap();
    assert_eq!(a, b);
    assert_eq!(text, b.markdown());
    assert!(
        text.contains("mean absolute error")
            && text.contains("| r092 | LLAMA3-70B | 64 | 4/4/2/2 |")
    );
    assert!(a.tflops_mae() > 0.0 && a.worst().is_some());
}

#[test]
fn the_stack_parameter_reaches_the_prediction() {
    let hw = h100();
    // The 2021 stack with flash attention (context parallelism needs it).
    let plain = Stack {
        attention: Attention::Flash,
        ..Stack::default()
    };
    let r = validate_nemo(&hw, plain).unwrap();
    assert!(r.compared.iter().all(|c| c.prediction.precision == "bf16"));
    // Every recipe uses the distributed optimizer (ZeRO-1), whatever the stack passed.
    assert!(r.compared.iter().all(|c| c.prediction.zero1));
    let nemo = validate_nemo(&hw, nemo_24_07_stack()).unwrap();
    assert!(nemo
        .compared
        .iter()
        .all(|c| c.prediction.precision == "fp8"));
    // FP8 linear layers, fused accumulation and overlaps: every row is faster than in BF16.
    assert!(nemo
        .compared
        .iter()
        .zip(&r.compared)
        .all(|(n, p)| n.prediction.step_time_s < p.prediction.step_time_s));
}

/// Every row ran, so every row should fit in 80 GB. Eleven do; r082 (GPT-3 20B, p = 1, its
/// 20 B parameters over t = 2 with BF16 weights, FP8 copies and BF16 gradients whole on every
/// rank) is predicted 2 GB over (docs/validation.md, "What the rows say"): the test names it
/// so that a change that fixes or breaks another row shows.
#[test]
fn every_row_but_r082_fits() {
    let r = validate_nemo(&h100(), nemo_24_07_stack()).unwrap();
    let over: Vec<String> = r
        .compared
        .iter()
        .filter(|c| !c.prediction.fits)
        .map(|c| {
            format!(
                "{} {:.1} GB",
                c.row.id,
                c.prediction.peak_memory_bytes as f64 / 1e9
            )
        })
        .collect();
    assert!(
        over.len() == 1 && over[0].starts_with("r082 "),
        "do not fit: {over:?}"
    );
}

/// The bar on the twelve rows (docs/validation.md): mean absolute error at most 5 %
/// over the ten cp = 1 rows (the calibration set; 3.9 %), every row within 10 %, the two
/// cp = 2 rows (held out) included.
#[test]
fn fp8_model_error_on_the_calibration_set() {
    let r = validate_nemo(&h100(), nemo_24_07_stack()).unwrap();
    assert_eq!(r.compared.len(), 12);
    let cp1: Vec<f64> = r
        .compared
        .iter()
        .filter(|c| c.row.cp == 1)
        .map(|c| c.tflops_error)
        .collect();
    let mae = cp1.iter().map(|e| e.abs()).sum::<f64>() / cp1.len() as f64;
    assert!(mae <= 0.05, "cp = 1 mean absolute error {mae}");
    for c in &r.compared {
        assert!(
            c.tflops_error.abs() < 0.10,
            "{} {}",
            c.row.id,
            c.tflops_error
        );
    }
}
