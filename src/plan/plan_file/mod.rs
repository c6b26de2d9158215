//! The plan file (`plan.json`): the contract between the planner (`pplan search --output`,
//! `pplan predict --output`), `pplan emit` and the executor crate (`pplan-exec run --plan`).
//!
//! A plan says everything needed to run one training configuration for real: the model's
//! dimensions, the parallel layout (t, p, d, micro-batch, chunks, recomputation), which layers
//! each pipeline stage holds and on which device it lives, and the schedule as per-device action
//! lists in the IR's text form. The format is versioned (`"format": "pplan-plan"`,
//! `"version": 1`); a reader refuses any other version with a message that says which it reads.
//!
//! [`Plan::from_json`] checks everything a consumer relies on (layers covered once and in order,
//! stage count and placement, every action parses, and the schedule passes the one validator)
//! so that the executor never starts a run that cannot finish. No IO here.

use crate::inputs::model::{megatron_rms_norm, megatron_rotary, Model};
use crate::inputs::profile::even_split;
use crate::schedule::ir::{Action, Placement, Schedule, WeightUpdate};
use crate::schedule::validate::validate;
use serde::{Deserialize, Serialize};

mod check;
mod parallelism;

pub use parallelism::Parallelism;
use parallelism::{default_cp_comm, default_fp8_recipe, is_false, is_true, is_zero_u32, yes};

/// The `format` field every plan carries.
pub const PLAN_FORMAT: &str = "pplan-plan";
/// The plan version this build reads and writes.
pub const PLAN_VERSION: u32 = 1;

/// A complete, runnable plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// Always `"pplan-plan"`.
    pub format: String,
    /// Always [`PLAN_VERSION`].
    pub version: u32,
    pub model: PlanModel,
    /// The hardware profile the plan was made for (a bundled name or a path).
    pub hardware: String,
    pub parallelism: Parallelism,
    /// Element type of weights and activations: `"bf16"` (GPU default) or `"f32"`.
    pub dtype: String,
    /// One entry per stage, in stage order; stage `s` holds layers
    /// `first_layer .. first_layer + num_layers`.
    pub stages: Vec<PlanStage>,
    pub schedule: PlanSchedule,
    /// What pplan predicted for this plan, when it came from `predict` or `search`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted: Option<PlanPrediction>,
}

/// The transformer dimensions a stage is built from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanModel {
    pub name: String,
    pub num_layers: u32,
    pub hidden_size: u64,
    pub num_attention_heads: u64,
    /// Key/value heads; equals `num_attention_heads` without grouped-query attention.
    pub num_query_groups: u64,
    pub ffn_hidden_size: u64,
    pub seq_length: u64,
    pub vocab_size: u64,
    /// SwiGLU-style MLP (gate, up, down) rather than two matrices.
    #[serde(default)]
    pub gated_mlp: bool,
    /// The output layer has its own weights instead of reusing the input embedding's (Llama;
    /// Megatron-LM's `--untie-embeddings-and-output-weights`). Omitted when false: GPT-style
    /// models, and plans written before the field existed, tie them.
    #[serde(default, skip_serializing_if = "is_false")]
    pub untie_embeddings_and_output_weights: bool,
    /// The layers train with dropout (Megatron-LM's default 0.1; omitted when true). False
    /// for Llama-style models: `--hidden-dropout 0 --attention-dropout 0`.
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub dropout: bool,
    /// Head dimension when it is not hidden_size / heads (Qwen3, Gemma 2; Megatron-LM's
    /// `--kv-channels`). Omitted otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_channels: Option<u64>,
    /// Mixture of experts, in Megatron-LM's argument names (omitted for dense models).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe: Option<PlanMoe>,
    /// Multi-head latent attention, in Megatron-LM's argument names (omitted otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mla: Option<PlanMla>,
    /// Megatron-LM's `--normalization` (`LayerNorm` or `RMSNorm`), written only where it
    /// differs from what `gated_mlp` implies (RMSNorm with a gated MLP, LayerNorm without),
    /// as in plans written before the field existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normalization: Option<String>,
    /// Megatron-LM's `--position-embedding-type` (`rope`, `learned_absolute`, ...), likewise
    /// (`rope` with a gated MLP, `learned_absolute` without).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position_embedding_type: Option<String>,
    /// Multi-token prediction depths (Megatron-LM's `--mtp-num-layers`; omitted when 0, as in
    /// plans written before the field existed). The stage that holds them says so
    /// ([`PlanStage::mtp_layers`]).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub mtp_num_layers: u32,
    /// Architecture facts that change what is built, not what is predicted (rotary base and
    /// scaling, QK norm, biases, activation, norm epsilon, router scoring and balancing), in
    /// Megatron-LM's argument names (`inputs::arch`); omitted when none is recorded.
    #[serde(default, skip_serializing_if = "crate::inputs::arch::Arch::is_default")]
    pub arch: crate::inputs::arch::Arch,
    /// Sliding-window attention (GPT-OSS): the window in tokens and one 0/1 entry per layer,
    /// 1 where the layer attends within it (Megatron-LM's `--window-size` and
    /// `--window-attn-skip-freq`); omitted without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sliding_window: Option<PlanSlidingWindow>,
}

/// A plan model's sliding-window layers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanSlidingWindow {
    pub window_size: u64,
    pub window_layer_pattern: Vec<u8>,
}

/// The experts of a mixture-of-experts plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanMoe {
    pub num_experts: u64,
    pub moe_router_topk: u64,
    pub moe_ffn_hidden_size: u64,
    /// 0: no shared experts.
    #[serde(default)]
    pub moe_shared_expert_intermediate_size: u64,
    /// One 0/1 entry per layer: 1 where the layer's MLP is a MoE block.
    pub moe_layer_pattern: Vec<u8>,
    /// Group-limited routing: expert groups, and groups per token (absent or 0: none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub moe_router_num_groups: u64,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub moe_router_group_topk: u64,
}

/// Multi-head latent attention dimensions (Megatron-LM's names: `qk_head_dim` is the
/// non-rotary part, `qk_pos_emb_head_dim` the rotary part; `q_lora_rank` 0 is none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanMla {
    pub q_lora_rank: u64,
    pub kv_lora_rank: u64,
    pub qk_head_dim: u64,
    pub qk_pos_emb_head_dim: u64,
    pub v_head_dim: u64,
}

fn is_zero(x: &u64) -> bool {
    *x == 0
}

/// One pipeline stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanStage {
    pub stage: u32,
    pub device: u32,
    pub first_layer: u32,
    pub num_layers: u32,
    /// Holds the input embedding (always stage 0).
    pub embedding: bool,
    /// Holds the output layer and the loss (always the last stage).
    pub output: bool,
    /// Multi-token prediction depths this stage holds ('m' in Megatron-Core's layout string):
    /// all of the model's on one stage, after every transformer layer (omitted when 0).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub mtp_layers: u32,
}

/// The schedule in the IR's text form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanSchedule {
    /// A built-in schedule name, or `custom` for a schedule read from a file.
    pub name: String,
    /// `loop` or `v`.
    pub placement: String,
    /// `flush`, `stash`, `stash-vsync` or `2bw`.
    pub weight_update: String,
    /// Micro-batches in the action lists (over all mini-batches for asynchronous schedules).
    pub microbatches: u32,
    /// Micro-batches per optimizer step.
    pub microbatches_per_step: u32,
    /// Interleaved 1F1B's micro-batch group per virtual stage, where it is not Megatron-Core's
    /// default p (`--microbatch-group-size-per-virtual-pipeline-stage`); omitted otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub microbatch_group: Option<u32>,
    /// `devices[r]`: device `r`'s actions in order, e.g. `["0F0", "0F1", "0B0", ...]`.
    pub devices: Vec<Vec<String>>,
}

/// The headline figures pplan predicted for the plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanPrediction {
    pub step_time_s: f64,
    pub tflops_per_gpu: f64,
    pub mfu: f64,
    pub bubble_fraction: f64,
    pub peak_memory_bytes: u64,
}

/// Why a plan was refused; every message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("{origin}: not a plan file: {reason}")]
    Json { origin: String, reason: String },
    #[error(
        "{origin}: field `format` is '{found}'; a plan file has \"format\": \"{PLAN_FORMAT}\""
    )]
    Format { origin: String, found: String },
    #[error(
        "{origin}: plan version {found} is not supported; this build reads version {PLAN_VERSION}"
    )]
    Version { origin: String, found: u32 },
    #[error("{origin}: field `{field}`: {reason}")]
    Field {
        origin: String,
        field: String,
        reason: String,
    },
    #[error("{origin}: the schedule in `schedule.devices` is not runnable: {reason}")]
    Schedule { origin: String, reason: String },
}

pub(super) fn field(
    origin: &str,
    field: impl Into<String>,
    reason: impl Into<String>,
) -> PlanError {
    PlanError::Field {
        origin: origin.to_string(),
        field: field.into(),
        reason: reason.into(),
    }
}

fn weight_update_str(w: WeightUpdate) -> &'static str {
    match w {
        WeightUpdate::Flush => "flush",
        WeightUpdate::Stash {
            vertical_sync: false,
        } => "stash",
        WeightUpdate::Stash {
            vertical_sync: true,
        } => "stash-vsync",
        WeightUpdate::DoubleBuffered => "2bw",
    }
}

fn placement_str(p: Placement) -> &'static str {
    match p {
        Placement::Loop => "loop",
        Placement::V => "v",
    }
}

impl PlanModel {
    pub fn from_model(m: &Model) -> PlanModel {
        PlanModel {
            name: m.name.clone(),
            num_layers: m.num_layers,
            hidden_size: m.hidden_size,
            num_attention_heads: m.num_heads,
            num_query_groups: m.num_kv_heads,
            ffn_hidden_size: m.ffn_hidden_size,
            seq_length: m.seq_len,
            vocab_size: m.vocab_size,
            gated_mlp: m.gated_mlp,
            untie_embeddings_and_output_weights: !m.tied_embeddings,
            dropout: m.dropout,
            kv_channels: m.attention_head_dim,
            moe: m.moe.as_ref().map(|x| PlanMoe {
                num_experts: x.num_experts,
                moe_router_topk: x.top_k,
                moe_ffn_hidden_size: x.expert_ffn,
                moe_shared_expert_intermediate_size: x.shared_ffn,
                moe_layer_pattern: x.layers.iter().map(|&b| b as u8).collect(),
                moe_router_num_groups: x.groups.map_or(0, |g| g.num_groups),
                moe_router_group_topk: x.groups.map_or(0, |g| g.topk),
            }),
            mla: m.mla.map(|a| PlanMla {
                q_lora_rank: a.q_lora_rank,
                kv_lora_rank: a.kv_lora_rank,
                qk_head_dim: a.qk_nope_head_dim,
                qk_pos_emb_head_dim: a.qk_rope_head_dim,
                v_head_dim: a.v_head_dim,
            }),
            normalization: (m.rms_norm != m.gated_mlp)
                .then(|| if m.rms_norm { "RMSNorm" } else { "LayerNorm" }.to_string()),
            position_embedding_type: (m.rotary != m.gated_mlp)
                .then(|| if m.rotary { "rope" } else { "learned_absolute" }.to_string()),
            mtp_num_layers: m.mtp_layers,
            arch: m.arch.clone(),
            sliding_window: m.sliding_window.as_ref().map(|w| PlanSlidingWindow {
                window_size: w.window,
                window_layer_pattern: w.layers.iter().map(|&b| b as u8).collect(),
            }),
        }
    }

    /// The model these dimensions describe (for its parameter count); the inverse of
    /// [`PlanModel::from_model`].
    pub fn to_model(&self) -> Model {
        Model {
            name: self.name.clone(),
            num_layers: self.num_layers,
            hidden_size: self.hidden_size,
            num_heads: self.num_attention_heads,
            num_kv_heads: self.num_query_groups,
            ffn_hidden_size: self.ffn_hidden_size,
            vocab_size: self.vocab_size,
            seq_len: self.seq_length,
            gated_mlp: self.gated_mlp,
            tied_embeddings: !self.untie_embeddings_and_output_weights,
            dropout: self.dropout,
            attention_head_dim: self.kv_channels,
            seq_len_defaulted: false,
            moe: self.moe.as_ref().map(|x| crate::inputs::moe::Moe {
                num_experts: x.num_experts,
                top_k: x.moe_router_topk,
                expert_ffn: x.moe_ffn_hidden_size,
                shared_ffn: x.moe_shared_expert_intermediate_size,
                layers: x.moe_layer_pattern.iter().map(|&b| b != 0).collect(),
                groups: crate::inputs::moe::router_groups(
                    Some(x.moe_router_num_groups),
                    Some(x.moe_router_group_topk),
                ),
            }),
            mla: self.mla.map(|a| crate::inputs::moe::Mla {
                q_lora_rank: a.q_lora_rank,
                kv_lora_rank: a.kv_lora_rank,
                qk_rope_head_dim: a.qk_pos_emb_head_dim,
                qk_nope_head_dim: a.qk_head_dim,
                v_head_dim: a.v_head_dim,
            }),
            // Checked when the plan is read (`Plan::check`).
            rms_norm: self.normalization.as_deref().map_or(self.gated_mlp, |v| {
                megatron_rms_norm(Some(v)).unwrap_or(self.gated_mlp)
            }),
            rotary: self
                .position_embedding_type
                .as_deref()
                .map_or(self.gated_mlp, |v| {
                    megatron_rotary(Some(v)).unwrap_or(self.gated_mlp)
                }),
            sliding_window: self.sliding_window.as_ref().map(|w| {
                crate::inputs::moe::SlidingWindow {
                    window: w.window_size,
                    layers: w.window_layer_pattern.iter().map(|&b| b != 0).collect(),
                }
            }),
            mtp_layers: self.mtp_num_layers,
            arch: self.arch.clone(),
        }
    }
}

impl PlanSchedule {
    pub fn from_schedule(name: &str, s: &Schedule) -> PlanSchedule {
        PlanSchedule {
            name: name.to_string(),
            placement: placement_str(s.placement).to_string(),
            weight_update: weight_update_str(s.weight_update).to_string(),
            microbatches: s.num_microbatches,
            microbatches_per_step: s.microbatches_per_step,
            microbatch_group: None,
            devices: s
                .devices
                .iter()
                .map(|d| d.iter().map(Action::to_string).collect())
                .collect(),
        }
    }
}

/// Stage table for `layer_counts[s]` layers in stage `s` (contiguous, in order), stages placed
/// by `placement` over `p` devices; embedding on stage 0 and output on the last stage.
pub fn stages_from_counts(layer_counts: &[u32], placement: Placement, p: u32) -> Vec<PlanStage> {
    let n = layer_counts.len() as u32;
    let mut first = 0u32;
    layer_counts
        .iter()
        .enumerate()
        .map(|(s, &c)| {
            let s = s as u32;
            let st = PlanStage {
                stage: s,
                device: placement.device_of(s, p),
                first_layer: first,
                num_layers: c,
                embedding: s == 0,
                output: s + 1 == n,
                mtp_layers: 0,
            };
            first += c;
            st
        })
        .collect()
}

/// The plan for a prediction (from `pplan predict` or `pplan search`): the model, the layout
/// the prediction was made for, its stages (`pred.stage_layers`, placed as the schedule
/// places them), the schedule's action lists and the predicted headline figures. `hardware`
/// is the name or path the user gave. `schedule` must be the schedule that was simulated.
pub fn plan_from_prediction(
    model: &Model,
    hardware: &str,
    pred: &crate::plan::predict::Prediction,
    schedule: &Schedule,
) -> Plan {
    let p = schedule.num_devices();
    let counts = if pred.stage_layers.len() == schedule.num_stages as usize {
        pred.stage_layers.clone()
    } else {
        even_split(model.num_layers, schedule.num_stages)
    };
    let mut stages = stages_from_counts(&counts, schedule.placement, p);
    if let Some(st) = pred.mtp_stage.and_then(|s| stages.get_mut(s as usize)) {
        st.mtp_layers = model.mtp_layers;
    }
    let mut plan = Plan {
        format: PLAN_FORMAT.to_string(),
        version: PLAN_VERSION,
        model: PlanModel::from_model(model),
        hardware: hardware.to_string(),
        parallelism: Parallelism {
            gpus: pred.gpus,
            tp: pred.tp,
            pp: pred.pp,
            dp: pred.dp,
            cp: pred.cp,
            // The prediction does not record the exchange; the caller sets it from the stack.
            cp_comm: default_cp_comm(),
            ep: pred.ep,
            etp: pred.etp,
            micro_batch: pred.micro_batch,
            global_batch: pred.global_batch,
            chunks: schedule.chunks() as u64,
            recompute: pred.recompute.clone(),
            sequence_parallel: pred.sequence_parallel,
            zero1: pred.zero1,
            zero: pred.zero,
            dp_replicate: pred.dp_replicate,
            precision: pred.precision.clone(),
            fp8_recipe: pred.fp8_recipe.clone().unwrap_or_else(default_fp8_recipe),
            attention: pred.attention.clone(),
            stack: pred.stack.clone(),
            tp_comm_overlap: pred.tp_comm_overlap,
            overlap_grad_reduce: pred.overlap_grad_reduce,
            overlap_param_gather: pred.overlap_param_gather,
            defer_embedding_wgrad_compute: pred.defer_embedding_wgrad_compute,
            wgrad_deferral_limit: pred.wgrad_deferral_limit,
            cross_entropy_fusion: pred.cross_entropy_fusion.clone(),
            fp8_param_gather: pred.fp8_param_gather,
            cpu_offloading_num_layers: pred.cpu_offloading_num_layers,
            use_precision_aware_optimizer: pred.use_precision_aware_optimizer,
            main_params_dtype: pred.main_params_dtype.clone(),
            exp_avg_dtype: pred.exp_avg_dtype.clone(),
            exp_avg_sq_dtype: pred.exp_avg_sq_dtype.clone(),
            shared_gpu: pred.shared_gpu,
            // The prediction does not record these; the caller sets them from the stack
            // (`Parallelism::set_recipe`).
            ..Parallelism::stack_defaults()
        },
        dtype: "bf16".to_string(),
        stages,
        schedule: PlanSchedule {
            microbatch_group: pred.microbatch_group.map(|g| g.min(u32::MAX as u64) as u32),
            ..PlanSchedule::from_schedule(&pred.schedule, schedule)
        },
        predicted: Some(PlanPrediction {
            step_time_s: pred.step_time_s,
            tflops_per_gpu: pred.tflops_per_gpu,
            mfu: pred.mfu,
            bubble_fraction: pred.bubble_fraction,
            peak_memory_bytes: pred.peak_memory_bytes,
        }),
    };
    plan.parallelism.set_switches(&pred.switches);
    plan
}

impl Plan {
    /// The schedule's IR, checked by the validator.
    /// The plan's parallel sizes, for reading a measurement of its run (collectives attributed
    /// by group size, ranks placed in the pipeline).
    pub fn layout_sizes(&self) -> crate::measured::classify::LayoutSizes {
        let p = &self.parallelism;
        crate::measured::classify::LayoutSizes {
            tp: p.tp as u32,
            cp: p.cp as u32,
            pp: p.pp as u32,
            dp: p.dp as u32,
            ep: p.ep as u32,
        }
    }

    /// The stage that holds the model's multi-token prediction depths: the one whose
    /// `mtp_layers` says so, else (Megatron-Core's place without a layout) the last; `None`
    /// without depths.
    pub fn mtp_stage(&self) -> Option<usize> {
        if self.model.mtp_num_layers == 0 {
            return None;
        }
        self.stages
            .iter()
            .position(|s| s.mtp_layers > 0)
            .or(self.stages.len().checked_sub(1))
    }

    pub fn schedule_ir(&self) -> Result<Schedule, PlanError> {
        self.schedule_ir_at("plan")
    }

    pub(super) fn schedule_ir_at(&self, origin: &str) -> Result<Schedule, PlanError> {
        let sch = &self.schedule;
        let placement: Placement = sch
            .placement
            .parse()
            .map_err(|e: String| field(origin, "schedule.placement", e))?;
        let weight_update: WeightUpdate = sch
            .weight_update
            .parse()
            .map_err(|e: String| field(origin, "schedule.weight_update", e))?;
        let mut devices = Vec::with_capacity(sch.devices.len());
        for (r, acts) in sch.devices.iter().enumerate() {
            let mut list = Vec::with_capacity(acts.len());
            for (i, a) in acts.iter().enumerate() {
                let act: Action =
                    a.parse()
                        .map_err(|e: crate::schedule::ir::ActionParseError| {
                            field(origin, format!("schedule.devices[{r}][{i}]"), e.to_string())
                        })?;
                list.push(act);
            }
            devices.push(list);
        }
        let schedule = Schedule {
            devices,
            num_stages: self.stages.len() as u32,
            num_microbatches: sch.microbatches,
            placement,
            weight_update,
            microbatches_per_step: sch.microbatches_per_step,
            compounds: Vec::new(),
        };
        validate(&schedule).map_err(|e| PlanError::Schedule {
            origin: origin.to_string(),
            reason: e.to_string(),
        })?;
        Ok(schedule)
    }

    /// Parse and check a plan; `origin` (usually the path) prefixes every message.
    pub fn from_json(text: &str, origin: &str) -> Result<Plan, PlanError> {
        // Check format and version first, so that a future version gets the right message
        // rather than a complaint about a field this build does not know.
        let text = crate::inputs::json_strict::prepare(text).map_err(|reason| PlanError::Json {
            origin: origin.to_string(),
            reason,
        })?;
        let value: serde_json::Value = serde_json::from_str(text).map_err(|e| PlanError::Json {
            origin: origin.to_string(),
            reason: e.to_string(),
        })?;
        match value.get("format").and_then(|f| f.as_str()) {
            Some(PLAN_FORMAT) => {}
            Some(other) => {
                return Err(PlanError::Format {
                    origin: origin.to_string(),
                    found: other.to_string(),
                })
            }
            None => {
                return Err(PlanError::Format {
                    origin: origin.to_string(),
                    found: "(missing)".to_string(),
                })
            }
        }
        match value.get("version").and_then(|v| v.as_u64()) {
            Some(v) if v == PLAN_VERSION as u64 => {}
            Some(v) => {
                return Err(PlanError::Version {
                    origin: origin.to_string(),
                    found: v.min(u32::MAX as u64) as u32,
                })
            }
            None => {
                return Err(field(
                    origin,
                    "version",
                    format!("missing or not a whole number; expected {PLAN_VERSION}"),
                ))
            }
        }
        // From the text rather than `value`: serde_json's position lets the error name the field.
        let plan: Plan = serde_json::from_str(text).map_err(|e| PlanError::Json {
            origin: origin.to_string(),
            reason: crate::inputs::json_path::describe(text, &e),
        })?;
        plan.check(origin)?;
        Ok(plan)
    }

    /// Pretty JSON with a trailing newline; field order is fixed, so output is byte-stable.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("a plan always serializes");
        s.push('\n');
        s
    }
}
