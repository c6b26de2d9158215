//! Held-out validation: the long-context table of NVIDIA's Megatron-MoE-ModelZoo Qwen3 page
//! (`best_practice/qwen3/readme.md`, "Long Context", yanring/Megatron-MoE-ModelZoo at e865051):
//! Qwen3-235B-A22B on 32 H100 nodes, TP 4, PP 8, VPP 4, EP 8, global batch 256, sequence
//! 16k-128k with CP 1-8, DeepEP, BF16, `--recompute-granularity selective --recompute-modules
//! layernorm moe`, no all-to-all overlap (the page's command), each run with
//! `--moe-router-force-load-balancing` and dropless. None of these runs is in the project's
//! shared data. Compiled in; no IO.
//!
//! The page gives TFLOP/s only, in Megatron-LM's own count ([`megatron_flops_per_token`]),
//! which counts the attention core causally; the harness turns each figure into the step time
//! it implies (`FLOPs per step / (TFLOP/s x GPUs)`) and compares pplan's step with it.

use crate::cost::{CrossEntropyFusion, Recompute, Stack};
use crate::inputs::hardware::Hardware;
use crate::inputs::model::Model;
use crate::plan::predict::{
    predict, PipelineSplit, PredictError, PredictRequest, Prediction, Split,
};
use crate::report::moe_modelzoo::benchmarking_stack;
use crate::report::{mean_abs, worst_by};
use std::fmt::Write as _;

/// One published run of the table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LongContextRow {
    pub seq_len: u64,
    pub cp: u64,
    /// Routed with `--moe-router-force-load-balancing`; else dropless.
    pub forced: bool,
    pub tflops_per_gpu: f64,
}

/// The table: (sequence, CP, TFLOP/s forced balance, TFLOP/s dropless).
pub const LONG_CONTEXT_TABLE: [(u64, u64, f64, f64); 4] = [
    (16384, 1, 295.0, 237.0),
    (32768, 2, 335.0, 277.0),
    (65536, 4, 368.0, 320.0),
    (131072, 8, 389.0, 357.0),
];

/// GPUs of every run (32 nodes of 8).
pub const LONG_CONTEXT_GPUS: u64 = 256;

/// `--moe-imbalance` for the dropless runs: the one value that reproduces all four
/// forced/dropless ratios of the table (docs/validation.md; `tests/moe_modelzoo.rs`). The
/// forced runs (imbalance 1) are the held-out ones.
pub const DROPLESS_IMBALANCE: f64 = 1.48;

/// Every run of the table, forced then dropless for each sequence.
pub fn long_context_rows() -> Vec<LongContextRow> {
    LONG_CONTEXT_TABLE
        .iter()
        .flat_map(|&(seq_len, cp, forced, dropless)| {
            [(true, forced), (false, dropless)].map(|(f, tflops)| LongContextRow {
                seq_len,
                cp,
                forced: f,
                tflops_per_gpu: tflops,
            })
        })
        .collect()
}

/// Training FLOPs per token as Megatron-LM counts them for a GQA model with (or without)
/// routed experts (`num_floating_point_operations` in `megatron/training/training.py`): 3
/// passes x 2 FLOPs a multiply-add x, for each layer, the QKV projection `h (q + 2 g d_h)`,
/// the attention core `q s` (scores and values, causal: `q (s / 2) x 2`), the output
/// projection `q h`, and the MLP `(3 | 2) h f` dense or `k (3 | 2) h f_e + (3 | 2) h f_s` for a
/// MoE block (top-k routed experts and the shared ones; the router's `h E` is not counted);
/// plus the logits `h V`. `q = a d_h`.
pub fn megatron_flops_per_token(model: &Model) -> f64 {
    let h = model.hidden_size as f64;
    let d = model.head_dim() as f64;
    let q = model.num_heads as f64 * d;
    let kv = 2.0 * model.num_kv_heads as f64 * d;
    let s = model.seq_len as f64;
    let mats = if model.gated_mlp { 3.0 } else { 2.0 };
    let attention = h * (q + kv) + q * s + q * h;
    let layers: f64 = (0..model.num_layers as usize)
        .map(|i| {
            let mlp = match &model.moe {
                Some(m) if model.is_moe_layer(i) => {
                    mats * h * (m.top_k as f64 * m.expert_ffn as f64 + m.shared_ffn as f64)
                }
                _ => mats * h * model.ffn_hidden_size as f64,
            };
            attention + mlp
        })
        .sum();
    6.0 * (layers + h * model.vocab_size as f64)
}

/// One run predicted.
#[derive(Debug, Clone)]
pub struct LongContextComparison {
    pub row: LongContextRow,
    pub prediction: Prediction,
    /// The step the published TFLOP/s implies, in seconds.
    pub published_step_s: f64,
    /// Megatron-LM's FLOPs per step over the predicted step, per GPU, in TFLOP/s.
    pub predicted_tflops_per_gpu: f64,
    /// predicted / published - 1.
    pub error: f64,
}

/// The request of one run: the page's layout and command.
pub fn long_context_request<'a>(
    model: &'a Model,
    hw: &'a Hardware,
    row: &LongContextRow,
) -> PredictRequest<'a> {
    let mut req = PredictRequest::new(model, hw);
    req.gpus = LONG_CONTEXT_GPUS;
    req.tp = 4;
    req.cp = row.cp;
    req.pp = 8;
    req.chunks = 4;
    req.ep = 8;
    req.global_batch = 256;
    req.micro_batch = 1;
    req.recompute = Recompute::NormMoe;
    req.sequence_parallel = true;
    // The benchmarking config counts the embedding and the loss as pipeline layers, as for
    // the page's other table (`report::moe_modelzoo`).
    req.partition = Split::Megatron(PipelineSplit::EMBEDDING_AND_LOSS);
    // The page's command, without the tensor-parallel overlap: the benchmarking script passed
    // `--tp-comm-overlap` for BF16 only from 2025-12-16 (b09773a), after the table was added
    // (b0b92ff, 2025-11-04).
    req.stack = Stack {
        moe_imbalance: if row.forced { 1.0 } else { DROPLESS_IMBALANCE },
        // The benchmarking config when this table was published (2025-11-04, b0b92ff) had
        // `--cross-entropy-loss-fusion: true` and `--cross-entropy-fusion-impl: te` (added to
        // `model_configs/benchmarking/Qwen3-235B-A22B.yaml` in 274316a, 2025-08-20); the main
        // table's runs (2025-05-27) predate them.
        cross_entropy_fusion: CrossEntropyFusion::Te,
        ..benchmarking_stack()
    };
    req
}

/// Predict every run on `hw` (the bundled `h100-80gb`).
pub fn validate_long_context(hw: &Hardware) -> Result<Vec<LongContextComparison>, PredictError> {
    let base = Model::preset("qwen3-235b-a22b").expect("bundled qwen3-235b-a22b");
    long_context_rows()
        .into_iter()
        .map(|row| {
            let model = Model {
                seq_len: row.seq_len,
                ..base.clone()
            };
            let prediction = predict(&long_context_request(&model, hw, &row))?;
            let step_flops = 256.0 * row.seq_len as f64 * megatron_flops_per_token(&model);
            let gpus = LONG_CONTEXT_GPUS as f64;
            let published_step_s = step_flops / (row.tflops_per_gpu * 1e12 * gpus);
            let predicted = step_flops / (prediction.step_time_s * gpus) / 1e12;
            Ok(LongContextComparison {
                row,
                published_step_s,
                predicted_tflops_per_gpu: predicted,
                error: predicted / row.tflops_per_gpu - 1.0,
                prediction,
            })
        })
        .collect()
}

/// The table of docs/validation.md, with the held-out (forced) runs' mean absolute error.
pub fn long_context_markdown(rows: &[LongContextComparison]) -> String {
    let mut s = String::from(
        "| seq | cp | routing | published TFLOP/s | predicted TFLOP/s | error | step (s) published / predicted | peak memory (GB) |\n|---|---|---|---|---|---|---|---|\n",
    );
    for c in rows {
        let r = &c.row;
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.0} | {:.1} | {:+.1}% | {:.2} / {:.2} | {:.1}{} |",
            r.seq_len,
            r.cp,
            if r.forced {
                "forced balance".to_string()
            } else {
                format!("dropless ({DROPLESS_IMBALANCE})")
            },
            r.tflops_per_gpu,
            c.predicted_tflops_per_gpu,
            100.0 * c.error,
            c.published_step_s,
            c.prediction.step_time_s,
            c.prediction.peak_memory_bytes as f64 / 1e9,
            if c.prediction.fits {
                ""
            } else {
                " (does not fit)"
            },
        );
    }
    let mae = |forced: bool| {
        mean_abs(
            rows.iter()
                .filter(|c| c.row.forced == forced)
                .map(|c| c.error),
        )
    };
    let worst =
        worst_by(rows.iter().filter(|c| c.row.forced), |c| c.error).map_or(0.0, |c| c.error.abs());
    let _ = writeln!(
        s,
        "\nForced balance (held out): MAE {:.1}%, worst {:.1}%. Dropless (imbalance fitted to \
         the forced/dropless ratios): MAE {:.1}%.",
        100.0 * mae(true),
        100.0 * worst,
        100.0 * mae(false)
    );
    s
}
