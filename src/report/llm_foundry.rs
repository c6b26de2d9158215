//! Held out: MosaicML llm-foundry's published MPT throughput on 128-512 H100 with PyTorch FSDP
//! (mosaicml/llm-foundry `scripts/train/benchmarking/README.md` at 5e85bd62d, 2024-01-06,
//! "H100 80GB BF16 (Large Scale, >= 128 GPUs)", lines 72-93). Nothing in pplan was fitted
//! to these runs. Compiled in; no IO.
//!
//! Every run is data parallelism only over all its GPUs (no tensor or pipeline parallelism),
//! sequence 2048, BF16 autocast, with the sharding the row states: `FULL_SHARD` (ZeRO-3:
//! parameters all-gathered layer by layer in the forward and again in the backward,
//! gradients reduce-scattered) or `SHARD_GRAD_OP` (ZeRO-2: parameters gathered once and kept
//! through the backward). The stack is the benchmark's ([`foundry_stack`]): PyTorch 2.1's
//! FSDP (the sweep's image `mosaicml/pytorch:2.1.0_cu121-python3.10-ubuntu20.04`), whose flat
//! parameters are views (no FSDP2 copies), with Composer's `mixed_precision: DEFAULT`
//! (parameters gathered in BF16, gradients reduced in FP32: composer 0.17.2+, which the
//! commit pins, `get_mixed_precision` after d745fcb1b), eager PyTorch for the norms, GeLU and
//! residuals, a fused (flash) attention kernel (`attn_impl: triton`) and full activation
//! checkpointing where the row says `True`. The MPT architectures are the commit's
//! `scripts/train/yamls/pretrain/mpt-*.yaml` ([`mpt_model`]). Compared in tokens/s per GPU.

use super::{mean_abs, worst_by};
use crate::cost::{Recompute, Stack, Zero};
use crate::inputs::hardware::Hardware;
use crate::inputs::model::Model;
use crate::plan::predict::{predict, PredictError, PredictRequest, Prediction};
use std::fmt::Write as _;

/// One published run of the table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FoundryRow {
    /// `mpt-1b` ... `mpt-70b` ([`mpt_model`]).
    pub model: &'static str,
    pub gpus: u64,
    pub micro_batch: u64,
    pub global_batch: u64,
    /// Zero::Full (`FULL_SHARD`) or Zero::Gradients (`SHARD_GRAD_OP`).
    pub sharding: Zero,
    /// Activation checkpointing of every block (full recomputation).
    pub checkpointing: bool,
    /// The table's "Throughput (T/s/GPU)".
    pub tokens_per_s_per_gpu: f64,
    /// The table's MFU (%), the attention counted whole.
    pub mfu_percent: f64,
    /// The table's "NumParams" (with the learned position embedding, 2048 x d_model).
    pub num_params: u64,
}

/// (model, GPUs, micro-batch, global batch, sharding, checkpointing, tokens/s per GPU, MFU %,
/// parameters): one row of the table as printed.
type Printed = (&'static str, u64, u64, u64, Zero, bool, f64, f64, u64);

const FULL: Zero = Zero::Full;
const GRAD: Zero = Zero::Gradients;

/// The table's 18 rows, in its order (every one with gradient accumulation 1: the global
/// batch is micro-batch x GPUs).
const PRINTED: [Printed; 18] = [
    (
        "mpt-70b",
        512,
        8,
        4096,
        FULL,
        true,
        1007.0,
        41.25,
        64862437376,
    ),
    (
        "mpt-70b",
        256,
        8,
        2048,
        FULL,
        true,
        1035.0,
        42.42,
        64862437376,
    ),
    (
        "mpt-70b",
        128,
        8,
        1024,
        FULL,
        true,
        1058.0,
        43.36,
        64862437376,
    ),
    (
        "mpt-30b",
        512,
        8,
        4096,
        FULL,
        true,
        2115.0,
        40.27,
        29975214080,
    ),
    (
        "mpt-30b",
        256,
        8,
        2048,
        FULL,
        true,
        2148.0,
        40.89,
        29975214080,
    ),
    (
        "mpt-30b",
        128,
        8,
        1024,
        FULL,
        true,
        2199.0,
        41.85,
        29975214080,
    ),
    (
        "mpt-13b",
        512,
        16,
        8192,
        FULL,
        true,
        4952.0,
        41.12,
        12853954560,
    ),
    (
        "mpt-13b",
        256,
        16,
        4096,
        FULL,
        true,
        4989.0,
        41.42,
        12853954560,
    ),
    (
        "mpt-13b",
        128,
        16,
        2048,
        FULL,
        true,
        5080.0,
        42.18,
        12853954560,
    ),
    (
        "mpt-7b", 512, 6, 3072, FULL, false, 9670.0, 42.2, 6658859008,
    ),
    (
        "mpt-7b", 256, 6, 1536, FULL, false, 10119.0, 44.15, 6658859008,
    ),
    (
        "mpt-7b", 128, 6, 768, FULL, false, 10475.0, 45.71, 6658859008,
    ),
    (
        "mpt-3b", 512, 8, 4096, GRAD, false, 21664.0, 39.24, 2651837440,
    ),
    (
        "mpt-3b", 256, 8, 2048, GRAD, false, 22772.0, 41.25, 2651837440,
    ),
    (
        "mpt-3b", 128, 8, 1024, GRAD, false, 23422.0, 42.43, 2651837440,
    ),
    (
        "mpt-1b", 512, 12, 6144, GRAD, false, 39837.0, 36.65, 1315950592,
    ),
    (
        "mpt-1b", 256, 12, 3072, GRAD, false, 42555.0, 39.15, 1315950592,
    ),
    (
        "mpt-1b", 128, 12, 1536, GRAD, false, 44123.0, 40.6, 1315950592,
    ),
];

/// The table's rows, in its order.
pub fn llm_foundry_rows() -> Vec<FoundryRow> {
    PRINTED
        .iter()
        .map(
            |&(
                model,
                gpus,
                micro_batch,
                global_batch,
                sharding,
                checkpointing,
                tps,
                mfu,
                params,
            )| {
                FoundryRow {
                    model,
                    gpus,
                    micro_batch,
                    global_batch,
                    sharding,
                    checkpointing,
                    tokens_per_s_per_gpu: tps,
                    mfu_percent: mfu,
                    num_params: params,
                }
            },
        )
        .collect()
}

/// Sequence length of every row.
pub const LLM_FOUNDRY_SEQ_LEN: u64 = 2048;

/// An MPT model of llm-foundry's pretraining configs (`mpt-{1b,3b,7b,13b,30b,70b}.yaml`):
/// (layers, d_model, heads); `expansion_ratio` 4 (a GeLU MLP of 4 d_model, not gated),
/// vocabulary 50,368, input and output embeddings tied (MPT's output layer is the token
/// embedding), no dropout (MPT's `resid_pdrop`, `attn_pdrop` and `emb_pdrop` default to 0).
/// `None` for another name.
pub fn mpt_model(name: &str) -> Option<Model> {
    let (layers, d, heads) = match name {
        "mpt-1b" => (24, 2048, 16),
        "mpt-3b" => (32, 2560, 20),
        "mpt-7b" => (32, 4096, 32),
        "mpt-13b" => (40, 5120, 40),
        "mpt-30b" => (48, 7168, 56),
        "mpt-70b" => (80, 8192, 64),
        _ => return None,
    };
    let mut m = Model::preset("gpt-1.7b")?;
    m.name = name.to_string();
    m.num_layers = layers;
    m.hidden_size = d;
    m.num_heads = heads;
    m.num_kv_heads = heads;
    m.ffn_hidden_size = 4 * d;
    m.vocab_size = 50368;
    m.seq_len = LLM_FOUNDRY_SEQ_LEN;
    m.gated_mlp = false;
    m.tied_embeddings = true;
    m.dropout = false;
    Some(m)
}

/// The benchmark's stack (module docs): torchtitan's eager kernels and FP32 gradient
/// reduction, but PyTorch FSDP1 (flat parameters, no FSDP2 copies) with the row's sharding,
/// parameters resharded after the forward only under `FULL_SHARD`.
pub fn foundry_stack(sharding: Zero) -> Stack {
    Stack {
        zero: sharding,
        reshard_after_forward: sharding == Zero::Full,
        fsdp2: false,
        ..Stack::torchtitan()
    }
}

/// The request for one row on `hw`.
pub fn foundry_request<'a>(
    row: &FoundryRow,
    model: &'a Model,
    hw: &'a Hardware,
) -> PredictRequest<'a> {
    let mut req = PredictRequest::new(model, hw);
    req.gpus = row.gpus;
    req.dp = Some(row.gpus);
    req.global_batch = row.global_batch;
    req.micro_batch = row.micro_batch;
    req.recompute = if row.checkpointing {
        Recompute::Full
    } else {
        Recompute::None
    };
    req.stack = foundry_stack(row.sharding);
    req
}

/// One row predicted.
#[derive(Debug, Clone)]
pub struct FoundryComparison {
    pub row: FoundryRow,
    pub prediction: Prediction,
    /// Predicted tokens/s per GPU over the published, minus 1.
    pub error: f64,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FoundryError {
    #[error("llm-foundry row {model} on {gpus} GPUs: {what}")]
    Row {
        model: String,
        gpus: u64,
        what: String,
    },
    #[error("llm-foundry row {model} on {gpus} GPUs: {source}")]
    Predict {
        model: String,
        gpus: u64,
        source: PredictError,
    },
}

/// Predict every row on `hw` (the runs are on `h100-80gb`).
pub fn validate_llm_foundry(hw: &Hardware) -> Result<Vec<FoundryComparison>, FoundryError> {
    let mut out = Vec::new();
    for row in llm_foundry_rows() {
        let model = mpt_model(row.model).ok_or_else(|| FoundryError::Row {
            model: row.model.into(),
            gpus: row.gpus,
            what: "not an MPT model of the table".into(),
        })?;
        let prediction = predict(&foundry_request(&row, &model, hw)).map_err(|source| {
            FoundryError::Predict {
                model: row.model.into(),
                gpus: row.gpus,
                source,
            }
        })?;
        let error = prediction.tokens_per_s_per_gpu / row.tokens_per_s_per_gpu - 1.0;
        out.push(FoundryComparison {
            row,
            prediction,
            error,
        });
    }
    Ok(out)
}

/// Mean absolute error of the rows.
pub fn foundry_mae(rows: &[FoundryComparison]) -> f64 {
    mean_abs(rows.iter().map(|c| c.error))
}

/// The table of docs/validation.md.
pub fn foundry_markdown(rows: &[FoundryComparison]) -> String {
    let mut s = String::from(
        "| model | GPUs | b | global batch | sharding | checkpointing | published tokens/s/GPU | predicted | error | published MFU | predicted MFU | peak memory (GB) |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for c in rows {
        let r = &c.row;
        let _ =
            writeln!(
            s,
            "| {} | {} | {} | {} | {} | {} | {:.0} | {:.0} | {:+.1}% | {:.3} | {:.3} | {:.1}{} |",
            r.model,
            r.gpus,
            r.micro_batch,
            r.global_batch,
            if r.sharding == Zero::Full {
                "FULL_SHARD"
            } else {
                "SHARD_GRAD_OP"
            },
            if r.checkpointing { "full" } else { "none" },
            r.tokens_per_s_per_gpu,
            c.prediction.tokens_per_s_per_gpu,
            100.0 * c.error,
            r.mfu_percent / 100.0,
            c.prediction.mfu,
            c.prediction.peak_memory_bytes as f64 / 1e9,
            if c.prediction.fits { "" } else { " (does not fit)" },
        );
    }
    let worst = worst_by(rows, |c| c.error);
    let _ = writeln!(
        s,
        "\n{} rows on h100-80gb (held out): tokens/s/GPU mean absolute error {:.1}%, worst {} on {} GPUs ({:+.1}%).",
        rows.len(),
        100.0 * foundry_mae(rows),
        worst.map_or("-", |w| w.row.model),
        worst.map_or(0, |w| w.row.gpus),
        100.0 * worst.map_or(0.0, |w| w.error),
    );
    s
}
