//! What every emitter returns, its errors, and the helpers the framework targets share.

use crate::plan::plan_file::{Plan, PlanError, PlanModel};
use std::fmt::Write as _;

/// The emitted text and what it could not say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emitted {
    pub text: String,
    /// One line per thing the target cannot express (also written into `text` as comments,
    /// except for the executor and csv targets, whose formats have no comments).
    pub notes: Vec<String>,
    /// torchtitan only: the schedule CSV to write at the path the config names.
    pub schedule_csv: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EmitError {
    #[error("{0}")]
    Plan(#[from] PlanError),
    #[error("the torchtitan config needs a schedule CSV for schedule '{schedule}' (no PyTorch schedule class runs this order): give --schedule-csv FILE or --output FILE")]
    NeedsCsvPath { schedule: String },
}

pub(crate) fn all_equal(v: &[u32]) -> bool {
    v.windows(2).all(|w| w[0] == w[1])
}

/// Micro-batches per step that the batch sizes imply, for a consistency note.
fn implied_microbatches(plan: &Plan) -> u64 {
    let par = &plan.parallelism;
    par.global_batch / par.dp.max(1) / par.micro_batch.max(1)
}

/// Notes shared by the framework targets.
pub(crate) fn common_notes(plan: &Plan, notes: &mut Vec<String>) {
    let par = &plan.parallelism;
    if par.global_batch % (par.dp * par.micro_batch) != 0 {
        notes.push(format!(
            "global batch {} is not a multiple of dp x micro-batch = {} x {}",
            par.global_batch, par.dp, par.micro_batch
        ));
    } else if implied_microbatches(plan) != plan.schedule.microbatches_per_step as u64 {
        notes.push(format!(
            "the schedule has {} micro-batches per step but global batch / (dp x micro-batch) = {}; the framework runs the latter",
            plan.schedule.microbatches_per_step,
            implied_microbatches(plan)
        ));
    }
}

/// Notes for the switches the prediction assumed that no framework sets (they describe the
/// run, not the framework): the routing imbalance, the framework's MoE host time, devices
/// sharing one GPU, a measured layer profile. `framework` names the target in the notes.
pub(crate) fn prediction_input_notes(plan: &Plan, framework: &str, notes: &mut Vec<String>) {
    let par = &plan.parallelism;
    if !crate::cost::switches::is_default_moe_imbalance(&par.moe_imbalance) {
        notes.push(format!(
            "the prediction assumed {}x the mean tokens on the busiest expert-parallel rank (pplan --moe-imbalance): an outcome of the router, not a {framework} setting",
            par.moe_imbalance
        ));
    }
    if let Some(ms) = par.moe_layer_host_ms {
        notes.push(format!(
            "the prediction assumed {ms} ms of host time per MoE layer and micro-batch (pplan --moe-layer-host-ms): a property of the run, not a {framework} setting"
        ));
    }
    if par.shared_gpu {
        notes.push(format!(
            "the prediction ran every pipeline device on one shared GPU (pplan --shared-gpu, as pplan-exec with PPLAN_CUDA_SHARE=serialize); {framework} runs one rank per GPU"
        ));
    }
    if let Some(path) = &par.profile {
        notes.push(format!(
            "the prediction's layer costs came from the measured layer profile '{path}' (pplan --profile), not from {framework}'s settings"
        ));
    }
}

/// The PyTorch schedule class (`get_schedule_class` name) that runs exactly the plan's order,
/// if one does.
pub(crate) fn torch_class(plan: &Plan) -> Option<&'static str> {
    let p = plan.parallelism.pp as u32;
    let m = plan.schedule.microbatches_per_step;
    match plan.schedule.name.as_str() {
        "gpipe" => Some("GPipe"),
        "1f1b" => Some("1F1B"),
        // PyTorch's rounds equal pplan's only when p divides m (docs/schedules.md).
        "interleaved-1f1b" if p > 0 && m % p == 0 && plan.schedule.microbatch_group.is_none() => {
            Some("Interleaved1F1B")
        }
        "looped-bfs" => Some("LoopedBFS"),
        "zbv" => Some("ZBVZeroBubble"),
        "dualpipev" => Some("DualPipeV"),
        _ => None,
    }
}

/// A double-quoted string with `"`, `\` and control characters escaped: valid in TOML and in
/// Python source alike.
pub(crate) fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// torchtitan's module names for each stage (`tok_embeddings`, `layers.i`, `norm`, then the
/// output layer, `output` in 0.2.x and `lm_head` on main: its `generate_llm_fqn_per_model_part`),
/// quoted.
pub(crate) fn torchtitan_fqns(plan: &Plan, output_module: &str) -> Vec<Vec<String>> {
    plan.stages
        .iter()
        .map(|st| {
            let mut names = Vec::new();
            if st.embedding {
                names.push(quoted("tok_embeddings"));
            }
            for l in st.first_layer..st.first_layer + st.num_layers {
                names.push(quoted(&format!("layers.{l}")));
            }
            if st.output {
                names.push(quoted("norm"));
                names.push(quoted(output_module));
            }
            names
        })
        .collect()
}

/// A torchtitan model and flavor with exactly a plan's dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Flavor {
    /// The model directory (`torchtitan/models/llama3`) and `[model] name` in 0.2.x.
    pub module: &'static str,
    /// The flavor (`model_registry("8B")`, `[model] flavor` in 0.2.x).
    pub flavor: &'static str,
    /// The config function of `torchtitan/models/MODULE/config_registry.py` on main whose
    /// tokenizer, data, loss and optimizer the emitted config starts from.
    pub registry_fn: &'static str,
}

/// torchtitan's Llama 3 flavors (`torchtitan/models/llama3/__init__.py`, the same in 0.2.2 and
/// on main): (layers, hidden, heads, kv heads, ffn, vocabulary), the ffn being torchtitan's
/// `compute_ffn_hidden_dim` of each flavor's multiplier. All have a SwiGLU MLP and untied
/// output weights.
const FLAVORS: [(u32, u64, u64, u64, u64, u64, Flavor); 3] = [
    (
        32,
        4096,
        32,
        8,
        14336,
        128256,
        Flavor {
            module: "llama3",
            flavor: "8B",
            registry_fn: "llama3_8b",
        },
    ),
    (
        80,
        8192,
        64,
        8,
        28672,
        128256,
        Flavor {
            module: "llama3",
            flavor: "70B",
            registry_fn: "llama3_70b",
        },
    ),
    (
        126,
        16384,
        128,
        8,
        53248,
        128256,
        Flavor {
            module: "llama3",
            flavor: "405B",
            registry_fn: "llama3_405b",
        },
    ),
];

/// The torchtitan flavor with exactly `m`'s dimensions, matched on the dimensions (not the
/// name), so a Hugging Face config of the same network maps to it too.
pub(crate) fn torchtitan_flavor(m: &PlanModel) -> Option<Flavor> {
    FLAVORS
        .iter()
        .find(|(l, h, a, g, f, v, _)| {
            m.num_layers == *l
                && m.hidden_size == *h
                && m.num_attention_heads == *a
                && m.num_query_groups == *g
                && m.ffn_hidden_size == *f
                && m.vocab_size == *v
                && m.gated_mlp
                && m.untie_embeddings_and_output_weights
        })
        .map(|x| x.6)
}

/// The model's dimensions in words, for a comment when no flavor matches.
pub(crate) fn model_dims(m: &PlanModel) -> String {
    format!(
        "{} layers, hidden size {}, {} heads ({} key/value heads), FFN {}{}, vocabulary {}",
        m.num_layers,
        m.hidden_size,
        m.num_attention_heads,
        m.num_query_groups,
        m.ffn_hidden_size,
        if m.gated_mlp { " (gated)" } else { "" },
        m.vocab_size
    )
}

/// torchtitan's (`data_parallel_replicate_degree`, `data_parallel_shard_degree`): DDP for a
/// replicated plan; FSDP (with HSDP replicas) for a sharded one, noting that FSDP shards
/// parameters and gradients too when the plan shards less.
pub(crate) fn torchtitan_dp_degrees(plan: &Plan, notes: &mut Vec<String>) -> (u64, u64) {
    let par = &plan.parallelism;
    if !(par.zero1 && par.dp > 1) {
        return (par.dp, 1);
    }
    if par.zero < 3 {
        notes.push(format!(
            "ZeRO-{} maps to FSDP (data_parallel_shard_degree), which shards parameters and gradients too (ZeRO-3)",
            par.zero.max(1)
        ));
    }
    (par.dp_replicate, par.dp / par.dp_replicate.max(1))
}

/// Notes for the stack settings a torchtitan config does not set; `async_tp_key` names
/// torchtitan's async tensor-parallel switch in that config form.
pub(crate) fn torchtitan_stack_notes(plan: &Plan, async_tp_key: &str, notes: &mut Vec<String>) {
    let par = &plan.parallelism;
    if plan.model.mtp_num_layers > 0 {
        notes.push(format!(
            "{} multi-token prediction layer(s) (Megatron-LM --mtp-num-layers) are not expressible: torchtitan has no multi-token prediction module, so this config trains the model without them and runs less work than predicted (drop them with pplan predict --mtp-num-layers 0 to predict this run)",
            plan.model.mtp_num_layers
        ));
    }
    if par.precision != "bf16" {
        notes.push(format!(
            "precision '{}' is not set here: torchtitan's float8/mx/nvfp4 converters differ from Transformer Engine's recipes the prediction assumed",
            par.precision
        ));
    }
    if par.tp_comm_overlap {
        notes.push(format!(
            "tensor-parallel communication overlap is not set here: torchtitan's counterpart is async tensor parallelism ({async_tp_key}, with torch.compile)"
        ));
    }
    if par.use_transformer_engine_op_fuser {
        notes.push(
            "Transformer Engine's fused grouped experts (--use-transformer-engine-op-fuser) are Megatron-Core's; torchtitan's grouped experts add their biases in PyTorch".into(),
        );
    }
    if par.activation_func_fp8_input_store {
        notes.push(
            "the MLP activation's input kept in FP8 (--activation-func-fp8-input-store) is Megatron-Core's; torchtitan keeps it in its own precision, so the plan's activation memory is short of torchtitan's".into(),
        );
    }
    if par.defer_embedding_wgrad_compute {
        notes.push(
            "the deferred output-layer weight gradient is Megatron-Core's (--defer-embedding-wgrad-compute); torchtitan computes it in each micro-batch's backward".into(),
        );
    }
    if par.attention == "flash" && par.attention_kernel == "triton" {
        notes.push(
            "FlashAttention's Triton kernel (--attention-kernel triton) is llm-foundry's (attn_impl: triton); torchtitan's attention is PyTorch's SDPA".into(),
        );
    }
    if par.attention == "flash" && par.attention_kernel == "fa2" {
        notes.push(
            "FlashAttention-2's kernels (--attention-kernel fa2) are not set here: torchtitan's ScaledDotProductAttention asks PyTorch's SDPA for cuDNN first (since 2025-03); set its sdpa_backends to FLASH_ATTENTION to run what was predicted".into(),
        );
    }
    if par.cross_entropy_fusion == "inductor" {
        notes.push(
            "the loss was predicted compiled (--cross-entropy-fusion-impl inductor): it is not set here; torchtitan compiles it with compile.enable and \"loss\" in compile.components".into(),
        );
    } else if par.cross_entropy_fusion == "llm-foundry" {
        notes.push(
            "the loss was predicted as llm-foundry's (--cross-entropy-fusion-impl llm-foundry: FlashAttention's CUDA cross-entropy and Composer's training metrics); torchtitan's loss is PyTorch's cross_entropy".into(),
        );
    } else if par.cross_entropy_fusion != "off" {
        notes.push(format!(
            "the fused cross-entropy ({}) is Megatron-Core's (--cross-entropy-loss-fusion); torchtitan's loss is PyTorch's cross_entropy",
            par.cross_entropy_fusion
        ));
    }
    if par.use_precision_aware_optimizer {
        notes.push(format!(
            "Adam's state formats are Megatron-Core's precision-aware optimizer (main params {}, exp_avg {}, exp_avg_sq {}); torchtitan's AdamW keeps fp32 state",
            par.main_params_dtype, par.exp_avg_dtype, par.exp_avg_sq_dtype
        ));
    }
    if par.overlap_p2p_comm == Some(false) {
        notes.push(
            "blocking pipeline sends (pplan --overlap-p2p-comm off) are not set here: torch.distributed.pipelining's sends are asynchronous".into(),
        );
    }
    if par.gradient_accumulation_fusion == Some(true) {
        notes.push(
            "the fused weight-gradient accumulation (pplan --gradient-accumulation-fusion on) is Megatron-Core's; torchtitan accumulates gradients in a separate kernel".into(),
        );
    }
    if par.fsdp_copies == Some(false) {
        notes.push(
            "sharded parameters as views of flat buffers (pplan --fsdp-copies off: FSDP1, Megatron) are not set here: torchtitan's FSDP2 copies in and out of its collectives".into(),
        );
    }
    if par.moe_comm_overlap {
        notes.push(
            "the MoE all-to-alls overlapped with another micro-batch's compute (pplan --moe-comm-overlap on, Megatron-Core --overlap-moe-expert-parallel-comm) are not set here".into(),
        );
    }
    if par.no_scatter_gather {
        notes.push(
            "pipeline activations sent whole from every tensor-parallel rank (pplan --no-scatter-gather) are not a torchtitan setting".into(),
        );
    }
    prediction_input_notes(plan, "torchtitan", notes);
    // FSDP2 always reduces gradients under the backward, which is what the plan says when
    // the reduction is overlapped; an in-line reduction it cannot run.
    if !par.overlap_grad_reduce {
        notes.push(
            "the gradient reduction in line after the backward is not set here: FSDP2 always overlaps it with the backward".into(),
        );
    }
}

/// The pipeline schedule torchtitan runs for `plan` (p > 1): PyTorch's class for the plan's
/// order where one exists, else the order as a schedule CSV (returned, to be written at
/// `csv_path`) run by the single- or multi-stage runtime class.
pub(crate) fn torchtitan_pipeline(
    plan: &Plan,
    csv_path: Option<&str>,
    notes: &mut Vec<String>,
) -> Result<(&'static str, Option<String>), EmitError> {
    if let Some(class) = torch_class(plan) {
        return Ok((class, None));
    }
    let sch = plan.schedule.name.as_str();
    if matches!(sch, "pipedream" | "pipedream-2bw") {
        notes.push(format!(
            "schedule '{sch}' (asynchronous weight updates) is not expressible: torchtitan flushes every step; the CSV keeps the order of one step's micro-batches only"
        ));
    }
    if csv_path.is_none() {
        return Err(EmitError::NeedsCsvPath {
            schedule: sch.to_string(),
        });
    }
    if plan.schedule.placement != "loop" {
        notes.push(
            "V placement of a custom order is not expressible with a CSV: torchtitan places stages in a loop unless the schedule class is ZBVZeroBubble or DualPipeV".into(),
        );
    }
    let csv = crate::schedule::csv::write(&plan.schedule_ir()?);
    // torchtitan reads a CSV with _PipelineScheduleRuntime; the class name then only says how
    // many stages each rank holds.
    let class = if plan.parallelism.chunks > 1 {
        "PipelineScheduleMulti"
    } else {
        "PipelineScheduleSingle"
    };
    Ok((class, Some(csv)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_and_flavors() {
        assert_eq!(quoted("a\"b\\c"), "\"a\\\"b\\\\c\"");
        let llama = crate::inputs::model::Model::preset("llama3-70b").unwrap();
        let f = torchtitan_flavor(&PlanModel::from_model(&llama)).unwrap();
        assert_eq!(
            (f.module, f.flavor, f.registry_fn),
            ("llama3", "70B", "llama3_70b")
        );
        let gpt = crate::inputs::model::Model::preset("gpt-1.7b").unwrap();
        assert_eq!(torchtitan_flavor(&PlanModel::from_model(&gpt)), None);
    }
}
