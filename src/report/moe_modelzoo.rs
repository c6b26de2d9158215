//! Validation against NVIDIA's Megatron-MoE-ModelZoo best-practice tables: measured
//! Megatron-Core MoE training throughput of Qwen3 on H100 in BF16, with the expert, pipeline
//! and context layouts stated (`data/moe-modelzoo-h100.json`, copied unchanged from the
//! project's shared data; each row names its source). Compiled in; no IO.
//!
//! For each row whose architecture pplan models, [`MoeCase::request`] builds a
//! [`PredictRequest`] with the row's exact layout (t, p, d, cp, ep, etp, v, b, B) and the stack
//! the row states: BF16, flash attention (Transformer Engine's fused attention), sequence
//! parallelism with t > 1 (Megatron-Core requires it with MoE), the distributed optimizer
//! (ZeRO-1; ZeRO-3 where the row runs Megatron-FSDP, `FSDP=On`) with overlapped gradient
//! reduction and parameter gather, the all-to-all overlap where the row says so (`+1f1b
//! overlap (EP A2A overlap)`), and forced balanced routing as the commands published with
//! the table ran every row ([`MoeCase::stack`]). The table reports TFLOP/s per GPU
//! as Megatron-Core counts FLOPs; the harness compares step times, so the predicted figure is
//! `published TFLOP/s x published step time / predicted step time` (the same FLOPs per step).

use crate::cost::{Attention, Recompute, Stack, Zero, MEGATRON_CORE_MOE_LAYER_HOST_S};
use crate::inputs::hardware::Hardware;
use crate::inputs::model::{Model, ModelError};
use crate::plan::predict::{
    predict, PipelineSplit, PredictError, PredictRequest, Prediction, Split,
};
use crate::report::{mean_abs, worst_by};
use serde::Deserialize;
use std::fmt::Write as _;

/// The published runs, bundled.
pub const MOE_MODELZOO_RUNS: &str = include_str!("../../data/moe-modelzoo-h100.json");

/// One published run (fields the harness does not read are left out).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct MoeRow {
    pub id: String,
    pub model: String,
    pub layers: Option<u32>,
    pub hidden: Option<u64>,
    pub moe_ffn_hidden: Option<u64>,
    pub num_experts: Option<u64>,
    pub top_k: Option<u64>,
    pub seq_len: u64,
    pub gpus_total: u64,
    pub t: u64,
    pub p: u64,
    pub d: u64,
    pub cp: u64,
    pub ep: u64,
    pub etp: u64,
    pub vp: u64,
    pub micro_batch: u64,
    pub global_batch: u64,
    pub recompute: Option<String>,
    pub tflops_per_gpu: f64,
    pub iteration_time_s: f64,
    pub notes: String,
}

#[derive(Debug, Deserialize)]
struct File {
    rows: Vec<MoeRow>,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MoeModelzooError {
    #[error("data/moe-modelzoo-h100.json: {0}")]
    Data(String),
    #[error("row {row}: {source}")]
    Model { row: String, source: ModelError },
    #[error("row {row}: {source}")]
    Predict { row: String, source: PredictError },
}

/// Every published row.
pub fn moe_rows() -> Result<Vec<MoeRow>, MoeModelzooError> {
    serde_json::from_str::<File>(MOE_MODELZOO_RUNS)
        .map(|f| f.rows)
        .map_err(|e| MoeModelzooError::Data(e.to_string()))
}

/// The bundled model of a row, checked against the architecture the row states; `None` for a
/// model pplan does not bundle or model (Qwen3-Next: hybrid linear attention, refused).
pub fn row_model(row: &MoeRow) -> Result<Option<Model>, MoeModelzooError> {
    let name = match row.model.as_str() {
        "Qwen3-235B-A22B" => "qwen3-235b-a22b",
        "Qwen3-30B-A3B" => "qwen3-30b-a3b",
        _ => return Ok(None),
    };
    let Some(mut m) = Model::preset(name) else {
        return Ok(None);
    };
    m.seq_len = row.seq_len;
    let moe = m
        .moe
        .as_ref()
        .map(|x| (x.num_experts, x.top_k, x.expert_ffn));
    let stated = (row.num_experts, row.top_k, row.moe_ffn_hidden);
    if (Some(m.num_layers), Some(m.hidden_size)) != (row.layers, row.hidden)
        || moe
            != stated
                .0
                .zip(stated.1)
                .zip(stated.2)
                .map(|((e, k), f)| (e, k, f))
    {
        return Err(MoeModelzooError::Data(format!(
            "row {}: the stated architecture differs from the bundled {name}",
            row.id
        )));
    }
    Ok(Some(m))
}

/// The ModelZoo's benchmarking stack (`model_configs/benchmarking/Qwen3-235B-A22B.yaml` and
/// `sbatch_benchmarking.sh`): BF16, fused attention, the distributed optimizer (ZeRO-1) with
/// overlapped gradient reduction and parameter gather, fused weight-gradient accumulation,
/// asynchronous tensor-parallel backward without the userbuffers overlap, non-blocking
/// pipeline sends, the DeepEP dispatcher, Megatron-Core's unfused cross-entropy (the config had
/// no `--cross-entropy-loss-fusion` until 274316a, 2025-08-20), and forced balanced routing
/// (imbalance 1): the
/// commit that published the H100 table (yanring/Megatron-MoE-ModelZoo 8017e11, 2025-05-27,
/// "Update perf results") has beside it the command of each of its five layouts in
/// `examples/qwen3/run_235b.sh` ("Add --moe-router-force-load-balancing for stable
/// benchmarking"), every one with that flag. Rows and runs that differ say so
/// ([`MoeCase::stack`], `report::moe_long_context`).
pub fn benchmarking_stack() -> Stack {
    Stack {
        attention: Attention::Flash,
        zero: Zero::Optimizer,
        overlap_grad_reduce: true,
        overlap_param_gather: true,
        grad_accumulation_fusion: true,
        tp_async_backward: true,
        blocking_p2p: false,
        moe_node_dedup: true,
        moe_imbalance: 1.0,
        moe_layer_host_s: MEGATRON_CORE_MOE_LAYER_HOST_S,
        ..Stack::default()
    }
}

/// A row pplan predicts, with its model.
#[derive(Debug, Clone)]
pub struct MoeCase {
    pub row: MoeRow,
    pub model: Model,
}

impl MoeCase {
    /// The recomputation the row states: `full`, none, or Megatron-Core's selective modules:
    /// `norm, act` (`--recompute-modules layernorm moe_act`, the recipe's) is
    /// `selective-norm-act`; other module lists (only m291's, which is not predicted) fall
    /// back to `selective`.
    pub fn recompute(&self) -> Recompute {
        match self.row.recompute.as_deref() {
            Some("full") => Recompute::Full,
            Some("selective: norm, act") => Recompute::NormAct,
            Some(_) => Recompute::Selective,
            None => Recompute::None,
        }
    }

    /// Whether the row's weight gradients accumulate in the GEMM epilogue. The Megatron-FSDP
    /// row's command (`examples/qwen3/run_235b.sh` at 8017e11, "Intra-node EP + FSDP
    /// solution") passes `--no-gradient-accumulation-fusion`; the others keep Megatron-Core's
    /// default (fused).
    pub fn grad_accumulation_fusion(&self) -> bool {
        !self.row.notes.contains("FSDP=On")
    }

    /// The stack the row states (module docs): the benchmarking stack with the row's
    /// sharding, accumulation, dispatcher, overlap and pipeline sends.
    pub fn stack(&self) -> Stack {
        Stack {
            // Megatron-FSDP's default sharding (`optim_grads_params`) is ZeRO-3; otherwise the
            // distributed optimizer.
            zero: if self.row.notes.contains("FSDP=On") {
                Zero::Full
            } else {
                Zero::Optimizer
            },
            grad_accumulation_fusion: self.grad_accumulation_fusion(),
            moe_comm_overlap: self.row.notes.contains("EP A2A overlap"),
            moe_node_dedup: self.row.notes.contains("dispatcher DeepEP"),
            // Megatron-LM's training loop overlaps the interleaved schedule's pipeline sends
            // unless told not to (`--no-overlap-p2p-communication`, `store_false` into
            // `overlap_p2p_comm`); the 1F1B schedule's sends block.
            blocking_p2p: self.row.vp <= 1,
            ..benchmarking_stack()
        }
    }

    pub fn request<'a>(&'a self, hw: &'a Hardware) -> PredictRequest<'a> {
        let r = &self.row;
        let mut req = PredictRequest::new(&self.model, hw);
        req.gpus = r.gpus_total;
        req.tp = r.t;
        req.pp = r.p;
        req.dp = Some(r.d);
        req.cp = r.cp;
        req.ep = r.ep;
        req.etp = r.etp;
        req.chunks = r.vp;
        req.micro_batch = r.micro_batch;
        req.global_batch = r.global_batch;
        req.recompute = self.recompute();
        req.sequence_parallel = r.t > 1;
        req.stack = self.stack();
        // The ModelZoo's Qwen3-235B-A22B benchmarking config counts the embedding and the loss
        // as pipeline layers (`model_configs/benchmarking/Qwen3-235B-A22B.yaml` at 1ed4179f:
        // `--account-for-embedding-in-pipeline-split`, `--account-for-loss-in-pipeline-split`):
        // 94 + 2 = 96 layers split evenly.
        req.partition = Split::Megatron(PipelineSplit::EMBEDDING_AND_LOSS);
        req
    }
}

/// Rows left out, with why.
pub type Skipped = Vec<(MoeRow, String)>;

/// The rows pplan predicts and the ones it leaves out, with why.
pub fn moe_cases() -> Result<(Vec<MoeCase>, Skipped), MoeModelzooError> {
    let mut cases = Vec::new();
    let mut skipped = Vec::new();
    for row in moe_rows()? {
        match row_model(&row)? {
            Some(model) => cases.push(MoeCase { row, model }),
            None => {
                let why = format!(
                    "{}: architecture not stated in the data and not bundled (Qwen3-Next mixes linear-attention layers, which pplan does not model)",
                    row.model
                );
                skipped.push((row, why));
            }
        }
    }
    Ok((cases, skipped))
}

/// One row predicted.
#[derive(Debug, Clone)]
pub struct MoeComparison {
    pub row: MoeRow,
    pub prediction: Prediction,
    /// Published TFLOP/s x published step time / predicted step time.
    pub predicted_tflops_per_gpu: f64,
    /// predicted / published - 1.
    pub error: f64,
}

#[derive(Debug, Clone)]
pub struct MoeReport {
    pub rows: Vec<MoeComparison>,
    pub skipped: Vec<(MoeRow, String)>,
}

impl MoeReport {
    pub fn mae(&self) -> f64 {
        mean_abs(self.rows.iter().map(|c| c.error))
    }

    /// The row with the largest absolute error (the first of equals).
    pub fn worst(&self) -> Option<&MoeComparison> {
        worst_by(&self.rows, |c| c.error)
    }

    /// The table of docs/validation.md.
    pub fn markdown(&self) -> String {
        let mut s = String::from(
            "| row | t | p | d | ep | v | b | recompute | published TFLOP/s | predicted TFLOP/s | error | step (s) published / predicted | peak memory (GB) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for c in &self.rows {
            let r = &c.row;
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {:.0} | {:.1} | {:+.1}% | {:.1} / {:.2} | {:.1}{} |",
                r.id,
                r.t,
                r.p,
                r.d,
                r.ep,
                r.vp,
                r.micro_batch,
                r.recompute.as_deref().unwrap_or("none"),
                r.tflops_per_gpu,
                c.predicted_tflops_per_gpu,
                100.0 * c.error,
                r.iteration_time_s,
                c.prediction.step_time_s,
                c.prediction.peak_memory_bytes as f64 / 1e9,
                if c.prediction.fits { "" } else { " (does not fit)" },
            );
        }
        let _ = writeln!(
            s,
            "\nMAE {:.1}% over {} rows; worst {} ({:+.1}%).",
            100.0 * self.mae(),
            self.rows.len(),
            self.worst().map_or("-", |w| w.row.id.as_str()),
            100.0 * self.worst().map_or(0.0, |w| w.error)
        );
        for (r, why) in &self.skipped {
            let _ = writeln!(s, "Not predicted: {} ({why}).", r.id);
        }
        s
    }
}

/// Predict every row pplan models on `hw` (the bundled `h100-80gb`).
pub fn validate_moe_modelzoo(hw: &Hardware) -> Result<MoeReport, MoeModelzooError> {
    let (cases, skipped) = moe_cases()?;
    let mut rows = Vec::new();
    for c in &cases {
        let prediction = predict(&c.request(hw)).map_err(|source| MoeModelzooError::Predict {
            row: c.row.id.clone(),
            source,
        })?;
        let predicted = c.row.tflops_per_gpu * c.row.iteration_time_s / prediction.step_time_s;
        rows.push(MoeComparison {
            row: c.row.clone(),
            error: predicted / c.row.tflops_per_gpu - 1.0,
            predicted_tflops_per_gpu: predicted,
            prediction,
        });
    }
    Ok(MoeReport { rows, skipped })
}
