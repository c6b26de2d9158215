//! Validation against NVIDIA NeMo 24.07's published pre-training throughput on DGX-H100 in FP8
//! (NeMo's `docs/source/performance/performance_summary.md`, "Pretraining", as first published
//! for 24.07): twelve runs of GPT-3 5B/20B/175B, Llama 2 7B/13B/70B, Nemotron 8B/22B/340B and
//! Llama 3 8B/70B.
//!
//! The rows (`data/nemo-24.07-h100-fp8.json`, copied unchanged from the project's shared data)
//! and the architectures with the source of every value (`data/nemo-24.07-models.json`) are
//! compiled in; no IO. For each row, [`NemoCase::request`] builds a
//! [`PredictRequest`] with the row's exact layout (t, cp, p, d, b, B, schedule and chunks), the
//! recompute and sequence-parallel settings of NeMo's 24.07 training config for the model, and
//! the training [`Stack`] the caller passes: [`nemo_24_07_stack`] is today's (BF16, the
//! distributed optimizer as ZeRO-1, overlapped gradient reduction); a newer stack (FP8, flash
//! attention, communication overlap) is passed the same way. [`validate_nemo`] predicts every
//! such row and compares model TFLOP/s per GPU (recomputation not counted, NeMo's convention)
//! and tokens/s per GPU with the published figures.

use crate::cost::{
    CostModel, Layout, MasterWeights, OptimizerState, Recompute, Stack, StateDtype, Zero,
};
use crate::inputs::hardware::{Hardware, Precision};
use crate::inputs::model::{
    megatron_dropout, megatron_rms_norm, megatron_rotary, Model, ModelError,
};
use crate::plan::predict::{predict, PredictError, PredictRequest, Prediction};
use crate::report::{mean_abs, worst_by};
use crate::schedule::generators::ScheduleName;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// The published runs, bundled.
pub const NEMO_24_07_RUNS: &str = include_str!("../../data/nemo-24.07-h100-fp8.json");
/// The architectures, NeMo 24.07 recipe settings and sources, bundled.
pub const NEMO_24_07_MODELS: &str = include_str!("../../data/nemo-24.07-models.json");

/// One published run. Fields the harness does not read (nulls, provenance) are left out.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct NemoRow {
    pub id: String,
    pub model: String,
    pub seq_len: u64,
    pub gpus_total: u64,
    pub gpus_per_node: u64,
    pub t: u64,
    pub p: u64,
    pub d: u64,
    /// Context-parallel size.
    pub cp: u64,
    pub micro_batch: u64,
    pub global_batch: u64,
    /// `"none"` (p = 1) or `"interleaved 1F1B, VP=k"`.
    pub schedule: String,
    pub precision: String,
    /// Model TFLOP/s per GPU as NeMo reports it (model FLOPs, recomputation not counted).
    pub tflops_per_gpu: f64,
    pub tokens_per_s_per_gpu: f64,
}

impl NemoRow {
    /// FLOPs per token implied by the two published figures: NeMo's own model FLOPs per token.
    pub fn implied_flops_per_token(&self) -> f64 {
        self.tflops_per_gpu * 1e12 / self.tokens_per_s_per_gpu
    }

    /// The row's schedule in pplan's terms: `"none"` (only with p = 1) and `"1F1B"` are 1F1B
    /// with one chunk, `"interleaved 1F1B, VP=k"` is `interleaved-1f1b` with k chunks.
    pub fn schedule(&self) -> Result<(ScheduleName, u64), NemoError> {
        let bad = || NemoError::Schedule {
            row: self.id.clone(),
            schedule: self.schedule.clone(),
        };
        if self.schedule == "1F1B" {
            return Ok((ScheduleName::OneFOneB, 1));
        }
        if self.schedule == "none" {
            return if self.p == 1 {
                Ok((ScheduleName::OneFOneB, 1))
            } else {
                Err(bad())
            };
        }
        let v = self
            .schedule
            .strip_prefix("interleaved 1F1B, VP=")
            .and_then(|k| k.trim().parse::<u64>().ok())
            .filter(|&k| k >= 1)
            .ok_or_else(bad)?;
        Ok((ScheduleName::Interleaved1F1B, v))
    }
}

/// What NeMo 24.07's training config for a model sets besides the architecture.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct NemoRecipe {
    /// `none` or `selective` (`activations_checkpoint_granularity`).
    pub recompute: String,
    /// `sequence_parallel` (every config sets it exactly when t > 1 in the rows).
    pub sequence_parallel: bool,
    /// `optim.name: distributed_fused_adam`: optimizer state sharded over data parallelism.
    pub distributed_optimizer: bool,
    /// `optim.overlap_grad_sync`.
    pub overlap_grad_sync: bool,
    /// `overlap_p2p_comm` (interleaved schedules only): non-blocking pipeline sends.
    pub overlap_p2p_comm: bool,
    /// `ub_tp_comm_overlap` (tensor-parallel communication overlap).
    pub tp_comm_overlap: bool,
    /// `defer_embedding_wgrad_compute` (absent: off): the output layer's weight gradients at
    /// the last stage's pipeline flush.
    #[serde(default)]
    pub defer_embedding_wgrad_compute: bool,
    /// `wgrad_deferral_limit` (absent: 0, all deferred micro-batches).
    #[serde(default)]
    pub wgrad_deferral_limit: u32,
    /// `optim.dtype` of `distributed_fused_adam` (absent: fp32): the state's number format.
    #[serde(default = "fp32")]
    pub optimizer_dtype: String,
}

fn fp32() -> String {
    "fp32".into()
}

impl NemoRecipe {
    /// What Apex's `DistributedFusedAdam` keeps per parameter as NeMo 24.07 sets it up for
    /// BF16 parameters (`megatron_amp_O2`, every config here; NeMo r2.0.0rc1
    /// `megatron_base_model.setup_optimization`): fp32 state stores only the low 16 bits of
    /// the master weights (`store_param_remainders`), 10 bytes; state in BF16, the model's
    /// own format, keeps no master copy (`store_params=False`) and BF16 moments, 4 bytes.
    /// Without the distributed optimizer, plain mixed-precision Adam.
    pub fn optimizer_state(&self) -> Result<OptimizerState, String> {
        if !self.distributed_optimizer {
            return Ok(OptimizerState::FP32);
        }
        match self.optimizer_dtype.as_str() {
            "fp32" => Ok(OptimizerState {
                master: MasterWeights::Remainders,
                ..OptimizerState::FP32
            }),
            "bf16" => Ok(OptimizerState {
                master: MasterWeights::None,
                exp_avg: StateDtype::Bf16,
                exp_avg_sq: StateDtype::Bf16,
            }),
            other => Err(format!(
                "recipe optimizer_dtype '{other}' (valid: fp32, bf16)"
            )),
        }
    }
}

/// One model's architecture as NeMo 24.07 trained it. The dimension fields use Megatron-style
/// names, so each entry of the data file is also a model file `--model` reads.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct NemoModel {
    pub name: String,
    pub num_layers: u32,
    pub hidden_size: u64,
    pub ffn_hidden_size: u64,
    pub num_attention_heads: u64,
    pub num_query_groups: u64,
    /// The tokenizer's vocabulary, before padding.
    pub vocab_size: u64,
    pub make_vocab_size_divisible_by: u64,
    pub seq_length: u64,
    /// Gated MLP (SwiGLU): three matrices.
    pub swiglu: bool,
    pub untie_embeddings_and_output_weights: bool,
    pub activation: String,
    pub normalization: String,
    pub position_embedding_type: String,
    pub bias: bool,
    /// `model.hidden_dropout` and `model.attention_dropout` of the config.
    pub hidden_dropout: f64,
    pub attention_dropout: f64,
    /// The published parameter count (or nominal size, see `params_basis`).
    pub params_published: f64,
    /// `count` (a published count) or `nominal` (only the size in the model's name).
    pub params_basis: String,
    pub recipe: NemoRecipe,
    /// Field names -> source (short names refer to the file's `references`).
    pub sources: BTreeMap<String, String>,
}

impl NemoModel {
    /// The vocabulary NeMo runs with at tensor-parallel size `tp`: padded to a multiple of
    /// `make_vocab_size_divisible_by * tp` (NeMo's `_vocab_size_with_padding`).
    pub fn padded_vocab(&self, tp: u64) -> u64 {
        let m = self.make_vocab_size_divisible_by.max(1) * tp.max(1);
        self.vocab_size.div_ceil(m) * m
    }

    /// pplan's model of this architecture at sequence length `seq_len` and tensor-parallel
    /// size `tp` (which sets the padded vocabulary).
    pub fn model(&self, seq_len: u64, tp: u64) -> Result<Model, ModelError> {
        let m = Model {
            name: self.name.clone(),
            num_layers: self.num_layers,
            hidden_size: self.hidden_size,
            num_heads: self.num_attention_heads,
            num_kv_heads: self.num_query_groups,
            ffn_hidden_size: self.ffn_hidden_size,
            vocab_size: self.padded_vocab(tp),
            seq_len,
            gated_mlp: self.swiglu,
            tied_embeddings: !self.untie_embeddings_and_output_weights,
            dropout: megatron_dropout(Some(self.hidden_dropout), Some(self.attention_dropout)),
            attention_head_dim: None,
            seq_len_defaulted: false,
            moe: None,
            mla: None,
            sliding_window: None,
            // NeMo's `normalization` is `rmsnorm`, `layernorm` or `layernorm1p` (Nemotron);
            // `position_embedding_type` `rope` or `learned_absolute`.
            rms_norm: megatron_rms_norm(Some(&self.normalization)).unwrap_or(false),
            rotary: megatron_rotary(Some(&self.position_embedding_type)).unwrap_or(false),
        };
        m.check()?;
        Ok(m)
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum NemoError {
    #[error("bundled NeMo data: {0}")]
    Data(String),
    #[error("{row}: no architecture for model '{model}' in data/nemo-24.07-models.json")]
    UnknownModel { row: String, model: String },
    #[error("{row}: unknown schedule '{schedule}' (expected 'none' with p = 1 or 'interleaved 1F1B, VP=k')")]
    Schedule { row: String, schedule: String },
    #[error("{row}: unknown recompute '{recompute}' in the model's recipe")]
    Recompute { row: String, recompute: String },
    #[error("{row}: {source}")]
    Model { row: String, source: ModelError },
    #[error("{row}: {source}")]
    Predict { row: String, source: PredictError },
}

#[derive(Deserialize)]
struct RunsFile {
    rows: Vec<NemoRow>,
}

#[derive(Deserialize)]
struct ModelsFile {
    models: Vec<NemoModel>,
}

/// The twelve published runs, in the table's order.
pub fn nemo_rows() -> Result<Vec<NemoRow>, NemoError> {
    serde_json::from_str::<RunsFile>(NEMO_24_07_RUNS)
        .map(|f| f.rows)
        .map_err(|e| NemoError::Data(format!("data/nemo-24.07-h100-fp8.json: {e}")))
}

/// The architectures of the runs' models.
pub fn nemo_models() -> Result<Vec<NemoModel>, NemoError> {
    serde_json::from_str::<ModelsFile>(NEMO_24_07_MODELS)
        .map(|f| f.models)
        .map_err(|e| NemoError::Data(format!("data/nemo-24.07-models.json: {e}")))
}

/// The training stack of NeMo 24.07 (Megatron-Core with Transformer Engine): FP8 linear layers
/// (`fp8: hybrid`), fused attention (TE/cuDNN flash attention), the distributed optimizer
/// (`distributed_fused_adam`, optimizer state sharded over the data-parallel group: ZeRO-1),
/// the gradient reduction overlapped with the backward (`optim.overlap_grad_sync: True`), the
/// parameter all-gather overlapped with the next forward (`optim.overlap_param_sync: true`) and
/// weight-gradient GEMMs that accumulate into the fp32 main gradient
/// (`gradient_accumulation_fusion: True`): the last two are set in every model's 24.07 config
/// (launcher_scripts/conf/training/{gpt3,llama,nemotron}/*.yaml at the launcher commit in
/// data/nemo-24.07-models.json). The per-model switches (tensor-parallel overlap, overlapped pipeline sends, distributed
/// optimizer, overlapped gradient reduction) come from each model's recipe in
/// [`NemoCase::request`].
pub fn nemo_24_07_stack() -> Stack {
    Stack {
        zero: Zero::Optimizer,
        precision: Precision::Fp8,
        ..Stack::megatron_core()
    }
}

/// Model FLOPs per token in pplan's convention (what `Prediction::model_tflops_per_gpu`
/// counts): three times the forward GEMMs of every layer (QKV with grouped-query K/V, the full
/// `s x s` attention scores and values, output projection, two or three MLP matrices) plus the
/// logit layer; no recomputation, no embedding lookup, no element-wise work.
pub fn model_flops_per_token(model: &Model, hw: &Hardware) -> f64 {
    let cm = CostModel {
        model,
        hw,
        layout: Layout::tensor_parallel(1),
        stack: Stack::default(),
    };
    let per_sequence =
        3.0 * (model.num_layers as f64 * cm.layer_forward_flops() + cm.logit_forward_flops());
    per_sequence / model.seq_len as f64
}

/// One row with its architecture and pplan's model of it.
#[derive(Debug, Clone, PartialEq)]
pub struct NemoCase {
    pub row: NemoRow,
    pub spec: NemoModel,
    /// The row's sequence length and the vocabulary padded for the row's t.
    pub model: Model,
}

impl NemoCase {
    /// The recomputation of the model's NeMo 24.07 config.
    pub fn recompute(&self) -> Result<Recompute, NemoError> {
        match self.spec.recipe.recompute.as_str() {
            "none" => Ok(Recompute::None),
            "selective" => Ok(Recompute::Selective),
            other => Err(NemoError::Recompute {
                row: self.row.id.clone(),
                recompute: other.to_string(),
            }),
        }
    }

    /// The prediction request for this row on `hw` with the training stack `stack`: the row's
    /// GPUs, t, p, d, micro-batch, global batch, schedule and chunks; the config's recompute;
    /// sequence parallelism when the config sets it and t > 1; the row's context parallelism.
    pub fn request<'a>(
        &'a self,
        hw: &'a Hardware,
        stack: Stack,
    ) -> Result<PredictRequest<'a>, NemoError> {
        let (schedule, chunks) = self.row.schedule()?;
        let mut req = PredictRequest::new(&self.model, hw);
        req.gpus = self.row.gpus_total;
        req.tp = self.row.t;
        req.pp = self.row.p;
        req.dp = Some(self.row.d);
        req.cp = self.row.cp;
        req.micro_batch = self.row.micro_batch;
        req.global_batch = self.row.global_batch;
        req.schedule = Some(schedule);
        req.chunks = chunks;
        req.recompute = self.recompute()?;
        req.sequence_parallel = self.spec.recipe.sequence_parallel && self.row.t > 1;
        // The model's recipe decides the parallel-runtime switches; the stack passed in the
        // kernels and the number format.
        let r = &self.spec.recipe;
        req.stack = Stack {
            zero: if r.distributed_optimizer {
                Zero::Optimizer
            } else {
                Zero::Off
            },
            overlap_grad_reduce: r.overlap_grad_sync,
            tp_comm_overlap: r.tp_comm_overlap,
            blocking_p2p: !r.overlap_p2p_comm,
            defer_embedding_wgrad: r.defer_embedding_wgrad_compute,
            wgrad_deferral_limit: r.wgrad_deferral_limit,
            optimizer_state: r
                .optimizer_state()
                .map_err(|e| NemoError::Data(format!("{}: {e}", self.spec.name)))?,
            ..stack
        };
        Ok(req)
    }
}

/// Every row with its model, in the table's order.
pub fn nemo_cases() -> Result<Vec<NemoCase>, NemoError> {
    let models = nemo_models()?;
    nemo_rows()?
        .into_iter()
        .map(|row| {
            let spec = models
                .iter()
                .find(|m| m.name == row.model)
                .cloned()
                .ok_or_else(|| NemoError::UnknownModel {
                    row: row.id.clone(),
                    model: row.model.clone(),
                })?;
            let model = spec
                .model(row.seq_len, row.t)
                .map_err(|source| NemoError::Model {
                    row: row.id.clone(),
                    source,
                })?;
            Ok(NemoCase { row, spec, model })
        })
        .collect()
}

/// A predicted row against its published figures.
#[derive(Debug, Clone, PartialEq)]
pub struct NemoComparison {
    pub row: NemoRow,
    pub model: String,
    pub prediction: Prediction,
    /// Predicted tokens/s per GPU.
    pub tokens_per_s_per_gpu: f64,
    /// Predicted / published model TFLOP/s per GPU - 1.
    pub tflops_error: f64,
    /// Predicted / published tokens/s per GPU - 1.
    pub tokens_error: f64,
}

/// The comparison over all rows.
#[derive(Debug, Clone, PartialEq)]
pub struct NemoReport {
    pub hardware: String,
    pub compared: Vec<NemoComparison>,
}

impl NemoReport {
    /// Mean absolute error of model TFLOP/s per GPU over the predicted rows.
    pub fn tflops_mae(&self) -> f64 {
        mean_abs(self.compared.iter().map(|c| c.tflops_error))
    }

    /// Mean absolute error of tokens/s per GPU over the predicted rows.
    pub fn tokens_mae(&self) -> f64 {
        mean_abs(self.compared.iter().map(|c| c.tokens_error))
    }

    /// The predicted row with the largest absolute TFLOP/s error (the first of equals).
    pub fn worst(&self) -> Option<&NemoComparison> {
        worst_by(&self.compared, |c| c.tflops_error)
    }

    /// The Markdown table of docs/validation.md, then the error summary.
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        s += "| row | model | GPUs | t/p/d/cp | b | B | schedule | published TFLOP/s | predicted TFLOP/s | error | published tokens/s/GPU | predicted tokens/s/GPU | error | peak memory (GB) |\n";
        s += "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
        for c in &self.compared {
            let r = &c.row;
            let p = &c.prediction;
            let sched = if p.chunks > 1 {
                format!("{} v={}", p.schedule, p.chunks)
            } else {
                p.schedule.clone()
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {}/{}/{}/{} | {} | {} | {} | {:.0} | {:.1} | {:+.1}% | {:.0} | {:.0} | {:+.1}% | {:.1}{} |",
                r.id,
                r.model,
                r.gpus_total,
                r.t,
                r.p,
                r.d,
                r.cp,
                r.micro_batch,
                r.global_batch,
                sched,
                r.tflops_per_gpu,
                p.model_tflops_per_gpu,
                100.0 * c.tflops_error,
                r.tokens_per_s_per_gpu,
                c.tokens_per_s_per_gpu,
                100.0 * c.tokens_error,
                p.peak_memory_bytes as f64 / 1e9,
                if p.fits { "" } else { " (does not fit)" },
            );
        }
        s += "\n";
        if let Some(w) = self.worst() {
            let _ = writeln!(
                s,
                "{} rows predicted on {}: model TFLOP/s mean absolute error {:.2}%, worst {} ({}) {:+.2}%; tokens/s/GPU mean absolute error {:.2}%",
                self.compared.len(),
                self.hardware,
                100.0 * self.tflops_mae(),
                w.row.id,
                w.row.model,
                100.0 * w.tflops_error,
                100.0 * self.tokens_mae(),
            );
        }
        s
    }
}

/// Predict every row on `hw` with the training stack `stack` and compare with the published
/// figures.
pub fn validate_nemo(hw: &Hardware, stack: Stack) -> Result<NemoReport, NemoError> {
    let mut compared = Vec::new();
    for case in nemo_cases()? {
        let req = case.request(hw, stack)?;
        let prediction = predict(&req).map_err(|source| NemoError::Predict {
            row: case.row.id.clone(),
            source,
        })?;
        let tokens_per_s_per_gpu = prediction.tokens_per_s_per_gpu;
        compared.push(NemoComparison {
            tflops_error: prediction.model_tflops_per_gpu / case.row.tflops_per_gpu - 1.0,
            tokens_error: tokens_per_s_per_gpu / case.row.tokens_per_s_per_gpu - 1.0,
            tokens_per_s_per_gpu,
            model: case.model.name.clone(),
            row: case.row,
            prediction,
        });
    }
    Ok(NemoReport {
        hardware: hw.name.clone(),
        compared,
    })
}

/// The FLOPs-per-token check as a Markdown table: NeMo's implied FLOPs per token (published
/// TFLOP/s x 1e12 / tokens/s) against [`model_flops_per_token`] for every row.
pub fn flops_per_token_markdown(hw: &Hardware) -> Result<String, NemoError> {
    let mut s = String::new();
    s += "| row | model | seq | vocab (padded) | NeMo implied FLOP/token | pplan model FLOP/token | difference |\n";
    s += "|---|---|---|---|---|---|---|\n";
    for c in nemo_cases()? {
        let implied = c.row.implied_flops_per_token();
        let ours = model_flops_per_token(&c.model, hw);
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {:.4e} | {:.4e} | {:+.2}% |",
            c.row.id,
            c.row.model,
            c.row.seq_len,
            c.model.vocab_size,
            implied,
            ours,
            100.0 * (ours / implied - 1.0)
        );
    }
    Ok(s)
}
