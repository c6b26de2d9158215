//! Validation against torchtitan's published FSDP2 runs (`docs/performance.md` of
//! pytorch/torchtitan): Llama 2 13B and 70B on 64 A100 80GB GPUs, data parallelism only,
//! parameters, gradients and optimizer state sharded over all 64 ranks (FSDP2 = ZeRO-3).
//!
//! The rows (`data/torchtitan-a100-fsdp.json`, copied unchanged from the project's shared
//! data) are compiled in; the Llama 2 architectures are the ones of
//! `data/nemo-24.07-models.json` (the same public Hugging Face configs). The stack is
//! torchtitan's default for these runs ([`Stack::torchtitan`]: FSDP2 over all 64 ranks, FP32
//! gradient reduction, SDPA flash attention, eager kernels, FSDP2's copies). torchtitan's selective
//! activation checkpointing runs as pplan's `selective-op` (every second linear GEMM and the
//! elementwise kernels recomputed) and `selective-layer` (every second layer whole), not as
//! Megatron's selective recomputation (the attention core).

use super::mean_abs;
use super::nemo::nemo_models;
use crate::cost::{Recompute, Stack};
use crate::inputs::hardware::Hardware;
use crate::inputs::model::Model;
use crate::plan::predict::{predict, PredictError, PredictRequest, Prediction};
use serde::Deserialize;
use std::fmt::Write as _;

/// The published runs, bundled.
pub const TORCHTITAN_A100_FSDP_RUNS: &str = include_str!("../../data/torchtitan-a100-fsdp.json");

/// One published run (the fields the harness reads).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct TorchtitanRow {
    pub id: String,
    pub model: String,
    pub seq_len: u64,
    pub gpus_total: u64,
    pub d: u64,
    pub micro_batch: u64,
    pub global_batch: u64,
    /// `none`, `full`, `selective op` or `selective layer`.
    pub recompute: String,
    pub tokens_per_s_per_gpu: f64,
    /// Model FLOP utilisation as torchtitan reports it.
    pub mfu: f64,
}

#[derive(Deserialize)]
struct RunsFile {
    rows: Vec<TorchtitanRow>,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TorchtitanError {
    #[error("bundled torchtitan data: {0}")]
    Data(String),
    #[error("{row}: no architecture for '{model}' (expected Llama 2 13B or 70B)")]
    UnknownModel { row: String, model: String },
    #[error("{row}: {source}")]
    Predict { row: String, source: PredictError },
}

/// The rows, in the file's order.
pub fn torchtitan_rows() -> Result<Vec<TorchtitanRow>, TorchtitanError> {
    serde_json::from_str::<RunsFile>(TORCHTITAN_A100_FSDP_RUNS)
        .map(|f| f.rows)
        .map_err(|e| TorchtitanError::Data(format!("data/torchtitan-a100-fsdp.json: {e}")))
}

/// pplan's recomputation for a row, or why the row's is not one pplan models.
pub fn recompute_of(row: &TorchtitanRow) -> Result<Recompute, String> {
    match row.recompute.as_str() {
        "none" => Ok(Recompute::None),
        "full" => Ok(Recompute::Full),
        "selective op" => Ok(Recompute::SelectiveOp),
        "selective layer" => Ok(Recompute::SelectiveLayer),
        other => Err(format!(
            "'{other}' is not a torchtitan activation-checkpointing mode pplan models (none, full, selective op, selective layer)"
        )),
    }
}

/// A row predicted, or left out with the reason.
#[derive(Debug, Clone, PartialEq)]
pub struct TorchtitanComparison {
    pub row: TorchtitanRow,
    pub outcome: Result<(Prediction, f64), String>,
}

/// Predict one row of `model` on `hw` with `stack` and compare tokens/s per GPU.
fn compare(
    row: TorchtitanRow,
    model: &Model,
    hw: &Hardware,
    stack: Stack,
) -> Result<TorchtitanComparison, TorchtitanError> {
    let outcome = match recompute_of(&row) {
        Err(reason) => Err(reason),
        Ok(recompute) => {
            let mut req = PredictRequest::new(model, hw);
            req.gpus = row.gpus_total;
            req.dp = Some(row.d);
            req.global_batch = row.global_batch;
            req.micro_batch = row.micro_batch;
            req.recompute = recompute;
            req.stack = stack;
            let p = predict(&req).map_err(|source| TorchtitanError::Predict {
                row: row.id.clone(),
                source,
            })?;
            let err = p.tokens_per_s_per_gpu / row.tokens_per_s_per_gpu - 1.0;
            Ok((p, err))
        }
    };
    Ok(TorchtitanComparison { row, outcome })
}

/// Predict every row on `hw` (the published runs are on `a100-80gb`) and compare tokens/s per
/// GPU: `outcome` is the prediction and its error (predicted / published - 1), or the reason
/// the row's setting is not modelled.
pub fn validate_torchtitan(
    hw: &Hardware,
    stack: Stack,
) -> Result<Vec<TorchtitanComparison>, TorchtitanError> {
    let models = nemo_models().map_err(|e| TorchtitanError::Data(e.to_string()))?;
    let mut out = Vec::new();
    for row in torchtitan_rows()? {
        let name = match row.model.as_str() {
            "Llama 2 13B" => "LLAMA2-13B",
            "Llama 2 70B" => "LLAMA2-70B",
            _ => "",
        };
        let spec = models.iter().find(|m| m.name == name).ok_or_else(|| {
            TorchtitanError::UnknownModel {
                row: row.id.clone(),
                model: row.model.clone(),
            }
        })?;
        // torchtitan does not pad the vocabulary.
        let mut model = spec
            .model(row.seq_len, 1)
            .map_err(|e| TorchtitanError::Data(e.to_string()))?;
        model.vocab_size = spec.vocab_size;
        out.push(compare(row, &model, hw, stack)?);
    }
    Ok(out)
}

/// Held out (not in the calibration data, not used to build the model): the Llama 3 table of
/// the same page, pytorch/torchtitan `docs/performance.md`, "Llama 3 performance numbers":
/// FSDP2 on the same 64 A100 80GB, local batch 1 (global 64), sequence 8192 (the
/// `llama3_8b.toml` / `llama3_70b.toml` configs). (model, checkpointing, tokens/s per GPU,
/// MFU) as the page's latest revision gives them (an earlier revision had 2876 and 323 for
/// the first and the last row).
pub const LLAMA3_HELD_OUT: [(&str, &str, f64, f64); 3] = [
    ("llama3-8b", "selective layer", 2904.0, 0.568),
    ("llama3-8b", "selective op", 2973.0, 0.582),
    ("llama3-70b", "full", 331.0, 0.517),
];

/// [`LLAMA3_HELD_OUT`] predicted on `hw` with the bundled Llama 3 models (their public
/// configs), as [`validate_torchtitan`] predicts the calibration rows.
pub fn validate_torchtitan_llama3(
    hw: &Hardware,
    stack: Stack,
) -> Result<Vec<TorchtitanComparison>, TorchtitanError> {
    LLAMA3_HELD_OUT
        .iter()
        .enumerate()
        .map(|(k, &(name, recompute, tokens, mfu))| {
            let row = TorchtitanRow {
                id: format!("t3-{}", k + 1),
                model: name.to_string(),
                seq_len: 8192,
                gpus_total: 64,
                d: 64,
                micro_batch: 1,
                global_batch: 64,
                recompute: recompute.to_string(),
                tokens_per_s_per_gpu: tokens,
                mfu,
            };
            let mut model = Model::preset(name).ok_or_else(|| TorchtitanError::UnknownModel {
                row: row.id.clone(),
                model: row.model.clone(),
            })?;
            model.seq_len = row.seq_len;
            compare(row, &model, hw, stack)
        })
        .collect()
}

/// The table of docs/validation.md and the error summary.
pub fn torchtitan_markdown(rows: &[TorchtitanComparison], hw: &str) -> String {
    let mut s = String::new();
    s += "| row | model | GPUs | d | b | B | recompute | published tokens/s/GPU | predicted tokens/s/GPU | error | published MFU | predicted MFU | peak memory (GB) |\n";
    s += "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    let mut errors = Vec::new();
    for c in rows {
        let r = &c.row;
        let _ = write!(
            s,
            "| {} | {} | {} | {} | {} | {} | {} | {:.0} | ",
            r.id,
            r.model,
            r.gpus_total,
            r.d,
            r.micro_batch,
            r.global_batch,
            r.recompute,
            r.tokens_per_s_per_gpu
        );
        match &c.outcome {
            Ok((p, err)) => {
                errors.push(err.abs());
                let _ = writeln!(
                    s,
                    "{:.0} | {:+.1}% | {:.3} | {:.3} | {:.1}{} |",
                    p.tokens_per_s_per_gpu,
                    100.0 * err,
                    r.mfu,
                    p.mfu,
                    p.peak_memory_bytes as f64 / 1e9,
                    if p.fits { "" } else { " (does not fit)" }
                );
            }
            Err(_) => {
                let _ = writeln!(s, "– | – | {:.3} | – | – |", r.mfu);
            }
        }
    }
    s += "\n";
    if !errors.is_empty() {
        let mae = mean_abs(errors.iter().copied());
        let worst = errors.iter().cloned().fold(0.0, f64::max);
        let _ = writeln!(
            s,
            "{} rows predicted on {hw}: tokens/s/GPU mean absolute error {:.2}%, worst {:.2}%",
            errors.len(),
            100.0 * mae,
            100.0 * worst
        );
    }
    for c in rows {
        if let Err(reason) = &c.outcome {
            let _ = writeln!(
                s,
                "{} ({}, {}) not predicted: {reason}",
                c.row.id, c.row.model, c.row.recompute
            );
        }
    }
    s
}
