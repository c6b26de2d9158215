//! What a prediction is asked and what it answers: [`PredictRequest`], the split choice, the
//! [`Prediction`] fields, the typed errors naming the flag, and the checks every request passes
//! before anything is costed.

use super::pipeline_split::PipelineSplit;
use crate::cost::memory::MemoryBreakdown;
use crate::cost::{Attention, CostModel, Layout, Recompute, Stack};
use crate::inputs::hardware::Hardware;
use crate::inputs::model::Model;
use crate::inputs::profile::LayerProfile;
use crate::schedule::generators::ScheduleName;
use crate::schedule::Placement;
use crate::sim::Timeline;
use serde::Serialize;

/// One configuration to predict.
#[derive(Debug, Clone)]
pub struct PredictRequest<'a> {
    pub model: &'a Model,
    pub hardware: &'a Hardware,
    pub gpus: u64,
    pub tp: u64,
    pub pp: u64,
    /// `None`: gpus / (tp * cp * pp).
    pub dp: Option<u64>,
    /// Context-parallel size (1: none): each sequence split over `cp` ranks.
    pub cp: u64,
    /// HSDP replicas of the sharded state (1: none; needs ZeRO >= 1 and d divisible by it).
    pub dp_replicate: u64,
    pub global_batch: u64,
    pub micro_batch: u64,
    /// `None`: `interleaved-1f1b` when `chunks > 1`, else `1f1b`.
    pub schedule: Option<ScheduleName>,
    pub chunks: u64,
    /// Interleaved 1F1B: Megatron-Core's micro-batch group per virtual stage
    /// (`--microbatch-group-size-per-virtual-pipeline-stage`); `None`: its default, p, which
    /// needs p to divide the micro-batch count.
    pub microbatch_group: Option<u64>,
    pub recompute: Recompute,
    pub sequence_parallel: bool,
    pub stack: Stack,
    /// Keep the simulator's timeline (for Gantt charts and traces).
    pub record_timeline: bool,
    /// Measured per-layer costs: when given, transformer layers' F/I/W times and activation
    /// bytes (and the embedding's and output layer's, if the profile has them) come from it,
    /// and p2p transfers carry the stage's last layer's `output_bytes`.
    pub profile: Option<&'a LayerProfile>,
    /// Layers of each of the `pp x chunks` stages, in stage order (`None`: the even split,
    /// the first `layers % stages` stages one layer more). Lets a partitioner plug in an
    /// uneven split.
    pub stage_layers: Option<Vec<u32>>,
    /// The stage that holds the model's multi-token prediction depths (`--pipeline-layout`'s
    /// 'm'); `None`: the last stage, Megatron-Core's place for them without a layout.
    pub mtp_stage: Option<u32>,
    /// How layers are split when `stage_layers` is `None`: the even split, or the
    /// partitioner's balanced split ([`balanced_split`](super::balance::balanced_split)).
    pub partition: Split,
    /// Expert-parallel size (`--ep`; 1 for dense models).
    pub ep: u64,
    /// Expert tensor-parallel size (`--etp`; 1 for dense models).
    pub etp: u64,
    /// The pipeline devices share one GPU, one device's work at a time (`--shared-gpu`, the
    /// executor's `PPLAN_CUDA_SHARE=serialize`): see [`crate::sim::Costs::shared_gpu`].
    pub shared_gpu: bool,
}

/// How the layers are spread over the stages (`--partition`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Split {
    /// `inputs::profile::even_split`: the first `layers % stages` stages one layer more.
    #[default]
    Even,
    /// `partition::dp` over the per-layer costs of [`balance_problem`](super::balance::balance_problem), kept only when it is
    /// strictly better than the even split ([`balanced_split`](super::balance::balanced_split)).
    Balanced,
    /// One of Megatron-Core's split rules ([`PipelineSplit`]): the embedding and the loss
    /// counted as layers, or the first and last ranks' layer counts.
    Megatron(PipelineSplit),
}

impl Split {
    pub fn as_str(self) -> &'static str {
        match self {
            Split::Even => "even",
            Split::Balanced => "balanced",
            Split::Megatron(_) => "megatron",
        }
    }
}

impl std::str::FromStr for Split {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "even" => Ok(Split::Even),
            "balanced" => Ok(Split::Balanced),
            _ => Err(format!("unknown partition '{s}' (valid: even, balanced)")),
        }
    }
}

impl<'a> PredictRequest<'a> {
    /// Megatron-LM 2021 defaults: full recompute, no sequence parallelism, one chunk.
    pub fn new(model: &'a Model, hardware: &'a Hardware) -> Self {
        PredictRequest {
            model,
            hardware,
            gpus: 1,
            tp: 1,
            pp: 1,
            dp: None,
            cp: 1,
            dp_replicate: 1,
            global_batch: 1,
            micro_batch: 1,
            schedule: None,
            chunks: 1,
            recompute: Recompute::Full,
            sequence_parallel: false,
            stack: Stack::default(),
            record_timeline: false,
            profile: None,
            stage_layers: None,
            mtp_stage: None,
            partition: Split::Even,
            ep: 1,
            etp: 1,
            shared_gpu: false,
            microbatch_group: None,
        }
    }
}

impl<'a> PredictRequest<'a> {
    /// The cost model of this request (its model, hardware and stack) with data-parallel size
    /// `dp`: what every stage cost of the prediction is computed with.
    pub fn cost_model(&self, dp: u64) -> CostModel<'a> {
        CostModel {
            model: self.model,
            hw: self.hardware,
            layout: self.layout(dp),
            stack: self.stack,
        }
    }

    /// The parallel layout of this request with data-parallel size `dp` (from [`check`]).
    pub fn layout(&self, dp: u64) -> Layout {
        Layout {
            tp: self.tp,
            pp: self.pp,
            dp,
            cp: self.cp,
            dp_replicate: self.dp_replicate,
            micro_batch: self.micro_batch,
            chunks: self.chunks,
            sequence_parallel: self.sequence_parallel,
            recompute: self.recompute,
            ep: self.ep,
            etp: self.etp,
        }
    }
}

/// The prediction; the first eight fields are the `pplan predict --format json` contract.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prediction {
    pub step_time_s: f64,
    /// Hardware FLOP/s per GPU with recomputation counted (Narayanan et al. 2021 convention).
    pub tflops_per_gpu: f64,
    /// Model FLOP/s per GPU (3 x forward, recomputation not counted).
    pub model_tflops_per_gpu: f64,
    /// Model FLOP/s over the GPU's dense BF16 peak (whatever the precision).
    pub mfu: f64,
    /// Model FLOP/s over the dense peak of the precision the linear layers run in (equals
    /// `mfu` for BF16).
    pub mfu_precision_peak: f64,
    /// `bf16`, `fp8`, `mxfp8` or `nvfp4`: the linear layers' GEMMs.
    pub precision: String,
    /// With `fp8`, the FP8 recipe when not Megatron-LM's default `delayed`: `tensorwise` or
    /// `blockwise` (`--fp8-recipe`; absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fp8_recipe: Option<String>,
    /// `unfused` or `flash`.
    pub attention: String,
    /// `megatron-core` or `megatron-2021`: the framework the step runs on (`--stack`).
    pub stack: String,
    /// Tensor-parallel collectives pipelined with the GEMMs: set and in effect (sequence
    /// parallelism, t > 1).
    pub tp_comm_overlap: bool,
    /// Gradient reduction overlapped with the backward.
    pub overlap_grad_reduce: bool,
    /// Parameter all-gather overlapped with the next step's forward: set and in effect (ZeRO-1
    /// or 2).
    pub overlap_param_gather: bool,
    /// The last stage's output-layer weight gradients run at its pipeline flush
    /// (`--defer-embedding-wgrad-compute`).
    pub defer_embedding_wgrad_compute: bool,
    /// With it, how many micro-batches' are deferred, the first ones (0: all;
    /// `--wgrad-deferral-limit`).
    pub wgrad_deferral_limit: u32,
    /// The cross-entropy's kernels: `off`, `native` or `te` (`--cross-entropy-loss-fusion`,
    /// `--cross-entropy-fusion-impl`).
    pub cross_entropy_fusion: String,
    /// The linear layers' weights kept only in FP8/MXFP8 (`--fp8-param-gather`, in effect).
    pub fp8_param_gather: bool,
    /// Layers whose activations are offloaded to host memory (`--cpu-offloading-num-layers`).
    pub cpu_offloading_num_layers: u32,
    /// Adam's state in the formats below (`--use-precision-aware-optimizer`).
    pub use_precision_aware_optimizer: bool,
    /// The master weights' format: `fp32` (with the precision-aware optimizer, stored as the
    /// 16-bit remainders of the BF16 weights), `fp16`, or `none` (NeMo/Apex `optim.dtype:
    /// bf16`: no master copy).
    pub main_params_dtype: String,
    pub exp_avg_dtype: String,
    pub exp_avg_sq_dtype: String,
    /// The stack switches a flag sets beside those above (`overlap_p2p_comm`,
    /// `gradient_accumulation_fusion`, `grad_reduce_dtype`, `fsdp_copies`,
    /// `moe_layer_host_ms`, `reshard_after_forward`, `moe_imbalance`, `moe_comm_overlap`,
    /// `no_scatter_gather`), each present only where it differs from its default (the
    /// preset's, for the first five).
    #[serde(flatten)]
    pub switches: crate::cost::switches::RecordedSwitches,
    /// The pipeline devices share one GPU (`--shared-gpu`; omitted when not).
    #[serde(skip_serializing_if = "is_false")]
    pub shared_gpu: bool,
    pub tokens_per_s: f64,
    /// `tokens_per_s` over the GPUs.
    pub tokens_per_s_per_gpu: f64,
    /// Parameters of the model (all of them).
    pub params: u64,
    /// Parameters one token passes through: equal to `params` for dense models (MFU counts
    /// these).
    pub active_params: u64,
    pub bubble_fraction: f64,
    /// What the fullest GPU holds at its peak, as `nvidia-smi` shows it: weights, gradients,
    /// optimizer state and activations as simulated, plus the stack's overheads.
    pub peak_memory_bytes: u64,
    /// `peak_memory_bytes` by kind, for the fullest GPU.
    pub memory_breakdown: MemoryBreakdown,
    pub fits: bool,
    pub memory_limit_bytes: u64,
    pub model: String,
    pub hardware: String,
    pub gpus: u64,
    pub tp: u64,
    pub pp: u64,
    pub dp: u64,
    pub micro_batch: u64,
    pub microbatches: u64,
    pub schedule: String,
    pub chunks: u64,
    /// Interleaved 1F1B's micro-batch group per virtual stage, when not the default p.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub microbatch_group: Option<u64>,
    pub recompute: String,
    pub sequence_parallel: bool,
    /// Context-parallel size.
    pub cp: u64,
    /// Optimizer state sharded over the data-parallel group (ZeRO stage >= 1).
    pub zero1: bool,
    /// ZeRO stage: 0 replicated, 1 optimizer state, 2 and gradients, 3 and weights sharded.
    pub zero: u8,
    /// HSDP replicas of the sharded state (1: none).
    pub dp_replicate: u64,
    pub global_batch: u64,
    /// Bytes of weights, gradients and optimizer state on the fullest GPU.
    pub model_state_bytes: u64,
    /// Layers of each stage, in stage order.
    pub stage_layers: Vec<u32>,
    /// `megatron` under one of Megatron-Core's split rules, `even` when `stage_layers` is the
    /// even split, `balanced` when the partitioner's split differs from it, `custom` for any
    /// other given split.
    pub split: String,
    /// Expert-parallel size (1 for dense models).
    pub ep: u64,
    /// Expert tensor-parallel size (1 for dense models).
    pub etp: u64,
    /// Multi-token prediction depths (omitted when 0), counted in `params`, the FLOP/s and
    /// the MFU, and the stage that holds them.
    #[serde(skip_serializing_if = "is_zero_u32")]
    pub mtp_num_layers: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mtp_stage: Option<u32>,
    /// Each pipeline rank's layers, times and memory (`predict --per-stage` prints them as
    /// `stages`; not part of the default JSON).
    #[serde(skip)]
    pub ranks: Vec<RankFigures>,
    #[serde(skip)]
    pub timeline: Option<Timeline>,
}

/// One pipeline rank (device) of the simulated pipeline (`predict --per-stage`; stages.rs computes
/// it, here beside the [`Prediction`] that carries it); every tensor- and data-parallel
/// rank of the same pipeline position holds the same.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RankFigures {
    /// Pipeline rank, 0 first.
    pub device: u32,
    /// `first`, `last`, `first+last` (p = 1, or the V placement's device 0) or `middle`:
    /// the first holds the embedding, the last the output layer and loss.
    pub role: String,
    /// The global stage indices this rank holds (v of them with --chunks v).
    pub stages: Vec<u32>,
    /// Transformer layers over those stages.
    pub layers: u32,
    /// Each of those stages' layers, in the order of `stages`.
    pub stage_layers: Vec<u32>,
    /// Each stage's forward of one micro-batch, milliseconds (their sum is `forward_ms`).
    pub stage_forward_ms: Vec<f64>,
    /// Each stage's full backward of one micro-batch, milliseconds.
    pub stage_backward_ms: Vec<f64>,
    /// One micro-batch's forward through all of the rank's stages, milliseconds.
    pub forward_ms: f64,
    /// One micro-batch's full backward through them, milliseconds.
    pub backward_ms: f64,
    /// Parameters on one GPU of this rank (all kinds).
    pub params: u64,
    /// Of those, routed-expert parameters (0 for a dense model).
    pub expert_params: u64,
    /// Memory at this rank's own peak by kind, bytes (as `memory_breakdown`).
    pub memory_breakdown: MemoryBreakdown,
    /// This rank's peak as `nvidia-smi` shows it, bytes (the prediction's
    /// `peak_memory_bytes` is the largest of these).
    pub peak_memory_bytes: u64,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero_u32(x: &u32) -> bool {
    *x == 0
}

/// Bad input, naming the flag and what would be valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PredictError {
    #[error("{flag} must be at least 1 (got {value})")]
    Zero { flag: &'static str, value: u64 },
    #[error("--tp x --cp x --pp x --dp must equal --gpus: {tp} x {cp} x {pp} x {dp} = {} but --gpus is {gpus}", (*tp as u128) * (*cp as u128) * (*pp as u128) * (*dp as u128))]
    GpuCount {
        gpus: u64,
        tp: u64,
        cp: u64,
        pp: u64,
        dp: u64,
    },
    #[error("--gpus {gpus} is not divisible by --tp x --cp x --pp = {}; valid --gpus are multiples of {}", (*tp as u128) * (*cp as u128) * (*pp as u128), (*tp as u128) * (*cp as u128) * (*pp as u128))]
    GpusNotDivisible {
        gpus: u64,
        tp: u64,
        cp: u64,
        pp: u64,
    },
    #[error("--dp-replicate {replicas}: {reason}")]
    Replicate { replicas: u64, reason: String },
    #[error("--cp {cp}: {reason}")]
    ContextParallel { cp: u64, reason: String },
    /// Expert parallelism that the model or layout cannot take.
    #[error("{flag} {value}: {reason}")]
    ExpertParallel {
        flag: &'static str,
        value: u64,
        reason: String,
    },
    #[error(
        "--tp {tp} must divide the model's {what} ({count}); valid --tp: {}",
        list(valid)
    )]
    TensorParallel {
        tp: u64,
        what: &'static str,
        count: u64,
        valid: Vec<u64>,
    },
    #[error("--global-batch {global_batch} must be divisible by --dp {dp}; valid --global-batch values are multiples of {dp}")]
    BatchNotDivisible { global_batch: u64, dp: u64 },
    #[error("--micro-batch {micro_batch} must divide the per-replica batch --global-batch / --dp = {per_replica}; valid --micro-batch: {}", list(valid))]
    MicroBatch {
        micro_batch: u64,
        per_replica: u64,
        valid: Vec<u64>,
    },
    #[error("--pp {pp} x --chunks {chunks} = {} stages exceeds the model's {layers} layers; valid: --pp x --chunks <= {layers}, or <= {} with --account-for-embedding-in-pipeline-split --account-for-loss-in-pipeline-split (the embedding and the loss each count as a layer)", (*pp as u128) * (*chunks as u128), layers + 2)]
    TooManyStages { pp: u64, chunks: u64, layers: u64 },
    #[error("--schedule/--chunks: {0}")]
    Schedule(String),
    #[error("stage layer counts: {0}")]
    StageLayers(String),
    #[error("--recompute {recompute}: {reason}")]
    Recompute { recompute: String, reason: String },
    #[error("--gpus {gpus}: this configuration is too large to simulate ({what})")]
    TooLarge { gpus: u64, what: String },
    #[error("--global-batch {global_batch}: {what}")]
    TooManyMicrobatches { global_batch: u64, what: String },
    #[error("--attention flash: hardware profile '{hardware}' has no measured attention efficiency (gpu.attention_efficiency_forward/backward); valid: --attention unfused, a profile that has them (e.g. a100-80gb, h100-80gb), or --profile (measured layer times include the attention)")]
    NoAttentionEfficiency { hardware: String },
    #[error("--precision: {0}")]
    Precision(String),
    #[error("--profile: {0}")]
    Profile(String),
    #[error("internal error while simulating: {0}")]
    Internal(String),
}

pub(super) fn list(v: &[u64]) -> String {
    let s: Vec<String> = v.iter().map(u64::to_string).collect();
    s.join(", ")
}

/// Divisors of `n` in increasing order.
pub fn divisors(n: u64) -> Vec<u64> {
    let mut small = Vec::new();
    let mut large = Vec::new();
    let mut i = 1;
    while i * i <= n {
        if n % i == 0 {
            small.push(i);
            if i != n / i {
                large.push(n / i);
            }
        }
        i += 1;
    }
    small.extend(large.into_iter().rev());
    small
}

/// Per-stage activation bytes above this are clamped (and never fit).
pub(super) const MEMORY_CLAMP_BYTES: u64 = 1 << 38;

/// Largest number of (stage, micro-batch) actions `predict` will simulate.
pub const MAX_SIMULATED_ACTIONS: u64 = 20_000_000;

pub(super) fn ns(seconds: f64) -> u64 {
    if seconds.is_finite() && seconds > 0.0 {
        (seconds * 1e9).round().min(1e18) as u64
    } else {
        0
    }
}

/// Check the request and return the data-parallel size.
pub fn check(req: &PredictRequest) -> Result<u64, PredictError> {
    for (flag, value) in [
        ("--gpus", req.gpus),
        ("--tp", req.tp),
        ("--pp", req.pp),
        ("--global-batch", req.global_batch),
        ("--micro-batch", req.micro_batch),
        ("--chunks", req.chunks),
        ("--cp", req.cp),
        ("--dp-replicate", req.dp_replicate),
        ("--ep", req.ep),
        ("--etp", req.etp),
    ] {
        if value == 0 {
            return Err(PredictError::Zero { flag, value });
        }
    }
    req.hardware
        .peak_flops_per_s_for(req.stack.precision)
        .map_err(|e| PredictError::Precision(e.to_string()))?;
    if req.stack.precision == crate::inputs::hardware::Precision::Fp8
        && req.stack.fp8_recipe == crate::cost::Fp8Recipe::Mxfp8
    {
        return Err(PredictError::Precision(
            "fp8 with the mxfp8 recipe: that recipe runs the block-scaled tensor cores; valid: --precision mxfp8, or --fp8-recipe delayed, tensorwise or blockwise".into(),
        ));
    }
    // A measured layer profile's times include its attention kernel: no law needed then.
    if req.stack.attention == Attention::Flash
        && req.profile.is_none()
        && req.hardware.attention_efficiencies().is_none()
    {
        return Err(PredictError::NoAttentionEfficiency {
            hardware: req.hardware.name.clone(),
        });
    }
    let dp = match req.dp {
        Some(0) => {
            return Err(PredictError::Zero {
                flag: "--dp",
                value: 0,
            })
        }
        Some(dp) => dp,
        None => {
            let group = req
                .tp
                .checked_mul(req.cp)
                .and_then(|x| x.checked_mul(req.pp));
            match group {
                Some(g) if req.gpus % g == 0 => req.gpus / g,
                _ => {
                    return Err(PredictError::GpusNotDivisible {
                        gpus: req.gpus,
                        tp: req.tp,
                        cp: req.cp,
                        pp: req.pp,
                    })
                }
            }
        }
    };
    if req
        .tp
        .checked_mul(req.cp)
        .and_then(|x| x.checked_mul(req.pp))
        .and_then(|x| x.checked_mul(dp))
        != Some(req.gpus)
    {
        return Err(PredictError::GpuCount {
            gpus: req.gpus,
            tp: req.tp,
            cp: req.cp,
            pp: req.pp,
            dp,
        });
    }
    if req.dp_replicate > 1 {
        let reason = if !req.stack.zero.shards_optimizer() {
            Some("replicas of a sharded state need --zero 1, 2 or 3 (with --zero 0 every rank is a replica already)".to_string())
        } else if dp % req.dp_replicate != 0 {
            Some(format!(
                "must divide the data-parallel size {dp} (d = replicas x shard group); valid: {}",
                list(&divisors(dp))
            ))
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(PredictError::Replicate {
                replicas: req.dp_replicate,
                reason,
            });
        }
    }
    check_expert_parallel(req, dp)?;
    if req.recompute.recomputes_mla_up_proj() && req.model.mla.is_none() {
        return Err(PredictError::Recompute {
            recompute: req.recompute.to_string(),
            reason: format!(
                "Megatron-Core recomputes the up-projections of multi-head latent attention only ('mla_up_proj in recompute_modules is only supported with multi_latent_attention'), and {} has none; valid: none, selective, full",
                req.model.name
            ),
        });
    }
    if req.recompute.recomputes_mlp()
        && req
            .model
            .moe
            .as_ref()
            .is_some_and(|m| m.num_moe_layers() >= req.model.num_layers as u64)
    {
        return Err(PredictError::Recompute {
            recompute: req.recompute.to_string(),
            reason: format!(
                "Megatron-Core's 'mlp' module recomputes dense MLPs only, and every layer of {} is a MoE layer; valid: none, selective, full, selective-norm-act, selective-norm-moe",
                req.model.name
            ),
        });
    }
    if matches!(
        req.recompute,
        Recompute::SelectiveOp | Recompute::SelectiveLayer
    ) && (req.model.moe.is_some() || req.model.mla.is_some())
    {
        return Err(PredictError::Recompute {
            recompute: req.recompute.to_string(),
            reason: "torchtitan's selective checkpointing is modelled for dense layers with standard attention (its policy over a mixture-of-experts or latent-attention layer's GEMMs is not); valid: none, selective, full".into(),
        });
    }
    if req.cp > 1 {
        // Megatron-Core runs context parallelism inside Transformer Engine's fused attention,
        // and splits each sequence into 2 cp chunks for the causal load balance.
        if req.stack.attention != Attention::Flash {
            return Err(PredictError::ContextParallel {
                cp: req.cp,
                reason: "context parallelism needs --attention flash (Megatron-Core runs it inside Transformer Engine's fused attention); valid: --attention flash, or --cp 1".into(),
            });
        }
        let s = req.model.seq_len;
        if s % (2 * req.cp) != 0 {
            return Err(PredictError::ContextParallel {
                cp: req.cp,
                reason: format!(
                    "the sequence length {s} must be divisible by 2 x cp = {} (each rank takes two of 2 cp chunks for the causal load balance); valid --cp: {}",
                    2 * req.cp,
                    list(&divisors(s).into_iter().filter(|c| s % (2 * c) == 0).collect::<Vec<_>>())
                ),
            });
        }
    }
    let m = req.model;
    for (what, count) in [
        ("attention heads", m.num_heads),
        ("key/value heads", m.num_kv_heads),
    ] {
        if count % req.tp != 0 {
            return Err(PredictError::TensorParallel {
                tp: req.tp,
                what,
                count,
                valid: divisors(count),
            });
        }
    }
    if req.global_batch % dp != 0 {
        return Err(PredictError::BatchNotDivisible {
            global_batch: req.global_batch,
            dp,
        });
    }
    let per_replica = req.global_batch / dp;
    if per_replica % req.micro_batch != 0 {
        return Err(PredictError::MicroBatch {
            micro_batch: req.micro_batch,
            per_replica,
            valid: if per_replica <= 1 << 24 {
                divisors(per_replica)
            } else {
                vec![1]
            },
        });
    }
    let stages = req.pp.saturating_mul(req.chunks);
    let megatron = match req.partition {
        Split::Megatron(rule) if req.stage_layers.is_none() => Some(rule),
        _ => None,
    };
    if stages > m.num_layers as u64 && megatron.is_none() && req.stage_layers.is_none() {
        return Err(PredictError::TooManyStages {
            pp: req.pp,
            chunks: req.chunks,
            layers: m.num_layers as u64,
        });
    }
    let microbatches = per_replica / req.micro_batch;
    let actions = 2u128 * microbatches as u128 * stages as u128;
    if actions > MAX_SIMULATED_ACTIONS as u128 || req.pp > u32::MAX as u64 {
        // The micro-batch count is --global-batch / (d x --micro-batch): name the batch that
        // made it, with the largest one that fits at this micro-batch and layout.
        let max_mb = MAX_SIMULATED_ACTIONS / 2 / stages.max(1);
        let max_batch =
            (max_mb as u128 * dp as u128 * req.micro_batch as u128).min(u64::MAX as u128);
        return Err(PredictError::TooManyMicrobatches {
            global_batch: req.global_batch,
            what: format!(
                "{microbatches} micro-batches (--global-batch / (dp {dp} x --micro-batch {})) x {stages} stages is more than the {MAX_SIMULATED_ACTIONS} actions pplan simulates; valid: --global-batch at most {max_batch} at this --micro-batch and layout, or a larger --micro-batch",
                req.micro_batch
            ),
        });
    }
    if req.micro_batch > 1 << 20 {
        return Err(PredictError::TooLarge {
            gpus: req.gpus,
            what: "--micro-batch above 2^20".to_string(),
        });
    }
    let counts = match (megatron, &req.stage_layers) {
        (Some(rule), _) => Some(
            rule.stage_layers(
                m.num_layers,
                req.pp as u32,
                req.chunks as u32,
                schedule_name(req).placement() == Placement::V,
            )
            .map_err(PredictError::StageLayers)?,
        ),
        (None, Some(c)) => Some(c.clone()),
        (None, None) => None,
    };
    if let Some(counts) = &counts {
        let total: u64 = counts.iter().map(|&c| c as u64).sum();
        // A stage may hold no transformer layer only where it holds the embedding (the first)
        // or the output layer (the last), as Megatron-Core's split rules allow.
        let inner_empty = counts.len() > 2 && counts[1..counts.len() - 1].contains(&0);
        if counts.len() as u64 != stages || total != m.num_layers as u64 || inner_empty {
            return Err(PredictError::StageLayers(format!(
                "{} counts summing to {total}; need {stages} counts (pp x chunks) summing to the model's {} layers, each at least 1 except the first and the last stage's (which hold the embedding and the output layer)",
                counts.len(),
                m.num_layers
            )));
        }
    }
    Ok(dp)
}

/// The schedule `req` asks for: `interleaved-1f1b` when `chunks > 1`, else `1f1b`, unless named.
pub fn schedule_name(req: &PredictRequest) -> ScheduleName {
    req.schedule.unwrap_or(if req.chunks > 1 {
        ScheduleName::Interleaved1F1B
    } else {
        ScheduleName::OneFOneB
    })
}

/// Expert parallelism as Megatron-Core allows it: `ep` divides the expert count, `etp` is 1 or
/// t (pplan's choices), and `ep x etp` divides the `t x cp x d` ranks of a pipeline stage; a
/// dense model takes only 1.
fn check_expert_parallel(req: &PredictRequest, dp: u64) -> Result<(), PredictError> {
    let err = |flag, value, reason: String| PredictError::ExpertParallel {
        flag,
        value,
        reason,
    };
    let Some(moe) = &req.model.moe else {
        if req.ep > 1 || req.etp > 1 {
            let (flag, value) = if req.ep > 1 {
                ("--ep", req.ep)
            } else {
                ("--etp", req.etp)
            };
            return Err(err(
                flag,
                value,
                format!(
                    "{} is a dense model (no experts); valid: {flag} 1",
                    req.model.name
                ),
            ));
        }
        return Ok(());
    };
    if moe.num_experts % req.ep != 0 {
        let valid: Vec<u64> = (1..=moe.num_experts)
            .filter(|e| moe.num_experts % e == 0)
            .collect();
        return Err(err(
            "--ep",
            req.ep,
            format!(
                "must divide the model's {} experts; valid --ep: {}",
                moe.num_experts,
                list(&valid)
            ),
        ));
    }
    if req.etp != 1 && req.etp != req.tp {
        return Err(err(
            "--etp",
            req.etp,
            format!("valid --etp: 1 or the tensor-parallel size {}", req.tp),
        ));
    }
    if req.stack.te_op_fuser && req.etp > 1 {
        return Err(err(
            "--etp",
            req.etp,
            "--use-transformer-engine-op-fuser on runs the grouped experts without expert tensor parallelism (Megatron-Core: 'Fused GroupedMLP is not supported for this configuration'); valid: --etp 1, or --use-transformer-engine-op-fuser off".to_string(),
        ));
    }
    let ranks = req.tp * req.cp * dp;
    if ranks % (req.ep * req.etp) != 0 {
        return Err(err(
            "--ep",
            req.ep,
            format!(
                "--ep x --etp = {} must divide --tp x --cp x --dp = {ranks} (expert-parallel ranks are carved from the tensor-, context- and data-parallel ranks, as in Megatron-Core)",
                req.ep * req.etp
            ),
        ));
    }
    Ok(())
}
