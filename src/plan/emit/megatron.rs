//! `--target megatron`: Megatron-LM arguments that build and train the model and layout pplan
//! predicted.
//!
//! The output is a bash file defining one array, `MEGATRON_ARGS`, one flag (and its value) per
//! line, so values with shell metacharacters (the layout string's `*` and `|`) are quoted once
//! and reach Megatron-LM unchanged: `source FILE && torchrun ... pretrain_gpt.py
//! "${MEGATRON_ARGS[@]}" <data and optimizer flags>`. Every flag is one of Megatron-LM's
//! (`tests/data/megatron_args.txt`, read from `megatron/training/arguments.py` at the commit
//! named there); [`crate::plan::megatron_args`] reads the file back.
//!
//! pplan's model records the dimensions, the gated MLP and whether the embeddings are tied, not
//! the normalisation, position embedding, rotary base or biases: a gated-MLP model is written as
//! the Llama family (RMSNorm, RoPE, no linear biases), any other as the GPT family (LayerNorm,
//! learned absolute positions, biases), and the output says so in a comment.

use crate::cost::CrossEntropyFusion;
use crate::plan::emit::common::{all_equal, common_notes, Emitted};
use crate::plan::megatron_args::RECOMPUTE_MODULES;
use crate::plan::plan_file::Plan;
use crate::plan::predict::PipelineSplit;
use std::fmt::Write as _;

/// The Megatron-LM commit the flags were checked against (`tests/data/megatron_args.txt`).
pub const MEGATRON_COMMIT: &str = "d98e8a64ddf34856e74b24714e3bedb2f5a39553";

/// The bash array the file defines.
pub const ARRAY_NAME: &str = "MEGATRON_ARGS";

/// Megatron-LM's layout string (`--pipeline-model-parallel-layout`): stages split by `|`,
/// `E` embedding, `t` a transformer layer (`t*n` for n of them), `m` a multi-token prediction
/// layer (`m*n`; on the plan's MTP stage, [`Plan::mtp_stage`]), `L` the loss.
pub fn megatron_layout(plan: &Plan) -> String {
    let mut out = String::new();
    let mtp = plan.mtp_stage();
    for (i, st) in plan.stages.iter().enumerate() {
        if i > 0 {
            out.push('|');
        }
        if st.embedding {
            out.push('E');
        }
        match st.num_layers {
            0 => {}
            1 => out.push('t'),
            n => {
                let _ = write!(out, "t*{n}");
            }
        }
        if mtp == Some(i) {
            match plan.model.mtp_num_layers {
                1 => out.push('m'),
                n => {
                    let _ = write!(out, "m*{n}");
                }
            }
        }
        if st.output {
            out.push('L');
        }
    }
    out
}

/// The Megatron-Core split rule that gives the plan's stage `counts`, if one does: the
/// embedding and/or the loss counted as layers, or the first and/or last pipeline rank's
/// layer counts (each at least 1: Megatron-LM's flags take positive counts), tried in that
/// order.
fn split_rule(plan: &Plan, counts: &[u32]) -> Option<PipelineSplit> {
    let (pp, v) = (plan.parallelism.pp as u32, plan.parallelism.chunks as u32);
    let layers = plan.model.num_layers;
    let v_placed = plan.schedule.placement != "loop";
    let rank_sum = |r: u32| -> u32 { (0..v).map(|c| counts[(c * pp + r) as usize]).sum() };
    let (first, last) = (rank_sum(0), rank_sum(pp.saturating_sub(1)));
    let mut tries = vec![
        PipelineSplit {
            embedding: true,
            loss: true,
            ..Default::default()
        },
        PipelineSplit {
            embedding: true,
            ..Default::default()
        },
        PipelineSplit {
            loss: true,
            ..Default::default()
        },
    ];
    if first > 0 && last > 0 {
        for (f, l) in [
            (Some(first), Some(last)),
            (Some(first), None),
            (None, Some(last)),
        ] {
            tries.push(PipelineSplit {
                first: f,
                last: l,
                ..Default::default()
            });
        }
    }
    tries
        .into_iter()
        .find(|r| r.stage_layers(layers, pp, v, v_placed).as_deref() == Ok(counts))
}

/// `s` as one shell word: unchanged when it has only characters no shell treats specially,
/// else in single quotes (a `'` inside written as `'\''`).
pub fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.,:/=+@%".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// Bundled hardware of compute capability 10 or later (Blackwell), where Megatron-LM no longer
/// needs `CUDA_DEVICE_MAX_CONNECTIONS=1` for tensor or context parallelism.
const BLACKWELL: [&str; 4] = ["b200", "b300", "gb200-nvl72", "gb300-nvl72"];

/// The environment Megatron-LM's `validate_args` checks at start (megatron/training/
/// arguments.py at d98e8a64): Megatron-FSDP asserts `CUDA_DEVICE_MAX_CONNECTIONS` is not 1
/// (line 1166); otherwise, with tp or cp above 1 before Blackwell, it asserts 1 (lines
/// 1452-1479; line 1455: "no longer exists since the Blackwell architecture"). Written as
/// `export`/`unset` lines between two marker comments, so sourcing the file sets them.
pub fn environment(plan: &Plan, text: &mut String) {
    let par = &plan.parallelism;
    let line = if par.zero >= 2 {
        Some((
            "unset CUDA_DEVICE_MAX_CONNECTIONS",
            "Megatron-FSDP asserts it is not 1 (arguments.py:1166)",
        ))
    } else if (par.tp > 1 || par.cp > 1) && !BLACKWELL.contains(&plan.hardware.as_str()) {
        Some((
            "export CUDA_DEVICE_MAX_CONNECTIONS=1",
            "tp or cp above 1 before Blackwell: validate_args asserts 1 (arguments.py:1477)",
        ))
    } else {
        None
    };
    if let Some((cmd, why)) = line {
        let _ = writeln!(text, "{ENV_BEGIN}");
        let _ = writeln!(text, "# {why}");
        let _ = writeln!(text, "{cmd}");
        let _ = writeln!(text, "{ENV_END}");
    }
}

/// The marker comments around the environment block.
pub const ENV_BEGIN: &str = "# >>> environment (pplan emit; source this file before launch)";
pub const ENV_END: &str = "# <<< environment";

pub fn megatron(plan: &Plan) -> Emitted {
    let par = &plan.parallelism;
    let m = &plan.model;
    let sch = plan.schedule.name.as_str();
    let mut notes = Vec::new();
    let mut assumed = Vec::new();
    let mut flags: Vec<(&str, Option<String>)> = Vec::new();
    let mut flag = |name: &'static str, value: Option<String>| flags.push((name, value));
    let val = |v: u64| Some(v.to_string());

    // Layout.
    flag("--tensor-model-parallel-size", val(par.tp));
    flag("--pipeline-model-parallel-size", val(par.pp));
    if par.cp > 1 {
        flag("--context-parallel-size", val(par.cp));
        // Megatron-Core's default exchange is p2p (the ring pplan models by default).
        if par.cp_comm == "all-gather" {
            flag("--cp-comm-type", Some("allgather".into()));
        }
    }
    // Mixture of experts: expert parallelism carved from tp x cp x dp, as pplan costs it.
    if m.moe.is_some() {
        flag("--expert-model-parallel-size", val(par.ep));
        flag("--expert-tensor-parallel-size", val(par.etp));
    }
    let counts: Vec<u32> = plan.stages.iter().map(|s| s.num_layers).collect();
    // Without a layout string Megatron-Core builds the multi-token prediction layers on the
    // last stage (`mtp_on_this_rank`); anywhere else only the layout string says so.
    let mtp_elsewhere = plan.mtp_stage().is_some_and(|s| s + 1 != plan.stages.len());
    if plan.schedule.placement != "loop" {
        notes.push(format!(
            "V placement (device r holds stages r and 2p-1-r, schedule '{sch}') is not expressible: Megatron-LM places virtual stage s on rank s mod p"
        ));
    }
    if all_equal(&counts) && !mtp_elsewhere {
        if par.chunks > 1 {
            flag(
                "--num-layers-per-virtual-pipeline-stage",
                val(counts[0] as u64),
            );
        }
    } else if let Some(rule) = split_rule(plan, &counts).filter(|_| !mtp_elsewhere) {
        // One of Megatron-Core's split rules gives these counts: its flags, which older
        // Megatron-Core versions than the layout string's take.
        if rule.embedding {
            flag("--account-for-embedding-in-pipeline-split", None);
        }
        if rule.loss {
            flag("--account-for-loss-in-pipeline-split", None);
        }
        if let Some(f) = rule.first {
            flag("--decoder-first-pipeline-num-layers", val(f as u64));
        }
        if let Some(l) = rule.last {
            flag("--decoder-last-pipeline-num-layers", val(l as u64));
        }
        if par.chunks > 1 {
            flag("--num-virtual-stages-per-pipeline-rank", val(par.chunks));
        }
    } else {
        // Megatron-LM's default split is even; anything else needs the layout string.
        flag(
            "--pipeline-model-parallel-layout",
            Some(megatron_layout(plan)),
        );
        let why = if mtp_elsewhere {
            format!(
                "the multi-token prediction layers on stage {} (not the last)",
                plan.mtp_stage().unwrap_or(0)
            )
        } else {
            format!(
                "uneven stages ({})",
                counts
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        notes.push(format!(
            "{why} use --pipeline-model-parallel-layout, which needs Megatron-Core 0.13 or later"
        ));
    }
    if let Some(n) = plan.schedule.microbatch_group {
        flag(
            "--microbatch-group-size-per-virtual-pipeline-stage",
            val(n as u64),
        );
    }
    match sch {
        "1f1b" | "interleaved-1f1b" => {}
        "gpipe" => notes.push(
            "schedule 'gpipe' is not in Megatron-LM core: it runs 1F1B (same bubble, fewer activations in flight)".into(),
        ),
        "looped-bfs" => notes.push(
            "schedule 'looped-bfs' is not in Megatron-LM core: it runs interleaved 1F1B over the same chunks".into(),
        ),
        "zb-h1" | "zb-h2" | "zbv" | "dualpipev" => notes.push(format!(
            "schedule '{sch}' (zero-bubble, split I/W backward) is not in Megatron-LM core: it runs {} with a full backward",
            if par.chunks > 1 { "interleaved 1F1B" } else { "1F1B" }
        )),
        "pipedream" | "pipedream-2bw" => notes.push(format!(
            "schedule '{sch}' (PipeDream asynchronous weight updates) is not expressible: Megatron-LM flushes the pipeline every step (1F1B)"
        )),
        other => notes.push(format!(
            "schedule '{other}' (a custom order) is not expressible: Megatron-LM runs its own {} order",
            if par.chunks > 1 { "interleaved 1F1B" } else { "1F1B" }
        )),
    }
    flag("--micro-batch-size", val(par.micro_batch));
    flag("--global-batch-size", val(par.global_batch));

    // Architecture.
    flag("--num-layers", val(m.num_layers as u64));
    flag("--hidden-size", val(m.hidden_size));
    flag("--num-attention-heads", val(m.num_attention_heads));
    if m.num_query_groups != m.num_attention_heads {
        flag("--group-query-attention", None);
        flag("--num-query-groups", val(m.num_query_groups));
    }
    if let Some(d) = m.kv_channels {
        flag("--kv-channels", val(d));
    }
    flag("--ffn-hidden-size", val(m.ffn_hidden_size));
    flag("--seq-length", val(m.seq_length));
    flag("--max-position-embeddings", val(m.seq_length));
    // Positions, normalisation, activation, biases, rotary base and scaling, QK norm, norm
    // epsilon, router scoring and balancing, sliding window: the plan's where it records them,
    // else the family's (a gated MLP: Llama; else Megatron-LM's GPT).
    super::megatron_arch::arch_flags(m, &mut flag, &mut notes, &mut assumed);
    if m.gated_mlp {
        assumed.push(
            "a gated MLP is taken as the Llama family unless the plan records otherwise: SwiGLU, no linear biases, RoPE and RMSNorm (pplan's parameter count includes LayerNorm and linear biases this network does not have)",
        );
    } else {
        assumed.push(
            "an ungated MLP is taken as the GPT family unless the plan records otherwise: GELU, linear biases, learned absolute positions and LayerNorm (pplan's parameter count omits the seq-length x hidden position embedding)",
        );
    }
    if m.untie_embeddings_and_output_weights {
        flag("--untie-embeddings-and-output-weights", None);
    }
    if !m.dropout {
        flag("--hidden-dropout", Some("0".into()));
        flag("--attention-dropout", Some("0".into()));
    }
    if let Some(moe) = &m.moe {
        flag("--num-experts", val(moe.num_experts));
        flag("--moe-router-topk", val(moe.moe_router_topk));
        flag("--moe-ffn-hidden-size", val(moe.moe_ffn_hidden_size));
        if moe.moe_shared_expert_intermediate_size > 0 {
            flag(
                "--moe-shared-expert-intermediate-size",
                val(moe.moe_shared_expert_intermediate_size),
            );
        }
        let pattern = crate::inputs::moe::Moe {
            num_experts: moe.num_experts,
            top_k: moe.moe_router_topk,
            expert_ffn: moe.moe_ffn_hidden_size,
            shared_ffn: moe.moe_shared_expert_intermediate_size,
            layers: moe.moe_layer_pattern.iter().map(|&b| b != 0).collect(),
            groups: None,
        };
        flag("--moe-layer-freq", Some(pattern.megatron_layer_freq()));
        if moe.moe_router_num_groups > 1 {
            flag("--moe-router-num-groups", val(moe.moe_router_num_groups));
            flag("--moe-router-group-topk", val(moe.moe_router_group_topk));
        }
        flag("--moe-grouped-gemm", None);
        match par.moe_dispatcher.as_str() {
            "alltoall" => flag("--moe-token-dispatcher-type", Some("alltoall".into())),
            backend => {
                flag("--moe-token-dispatcher-type", Some("flex".into()));
                flag("--moe-flex-dispatcher-backend", Some(backend.into()));
            }
        }
        if let Some(c) = par.moe_expert_capacity_factor {
            flag("--moe-expert-capacity-factor", Some(format!("{c}")));
            if par.moe_pad_expert_input_to_capacity {
                flag("--moe-pad-expert-input-to-capacity", None);
            }
        }
        assumed.push(
            "the experts run as grouped GEMMs (pplan's cost model); router scoring, balancing and aux-loss coefficient are the plan's where it records them, else Megatron-LM's defaults",
        );
    }
    if m.mtp_num_layers > 0 {
        // Each depth one more layer of the last layer's kind; the loss scale (default 0.1)
        // changes no cost, so Megatron-LM's default is left.
        flag("--mtp-num-layers", val(m.mtp_num_layers as u64));
    }
    if let Some(a) = &m.mla {
        flag("--multi-latent-attention", None);
        if a.q_lora_rank > 0 {
            flag("--q-lora-rank", val(a.q_lora_rank));
        }
        flag("--kv-lora-rank", val(a.kv_lora_rank));
        flag("--qk-head-dim", val(a.qk_head_dim));
        flag("--qk-pos-emb-head-dim", val(a.qk_pos_emb_head_dim));
        flag("--v-head-dim", val(a.v_head_dim));
    }
    // The model's vocabulary exactly, whatever the tokenizer's (which must not be larger):
    // without it Megatron-LM pads the tokenizer's size to a multiple of 128 x tp.
    flag("--padded-vocab-size", val(m.vocab_size));
    if par.tp > 0 && m.vocab_size % par.tp != 0 {
        notes.push(format!(
            "vocabulary {} is not divisible by tp {}: Megatron-LM's vocabulary-parallel embedding needs it to be",
            m.vocab_size, par.tp
        ));
    }

    // Training stack the prediction assumed.
    let modules = RECOMPUTE_MODULES
        .iter()
        .find(|(recompute, _)| *recompute == par.recompute);
    match (par.recompute.as_str(), modules) {
        // Megatron-Core's recompute modules; `--recompute-modules` takes its modules as
        // separate words, so each after the first is an array element of its own.
        (_, Some((_, modules))) => {
            flag("--recompute-granularity", Some("selective".into()));
            flag("--recompute-modules", Some(modules[0].into()));
            for m in &modules[1..] {
                flag(m, None);
            }
        }
        ("selective", None) => flag("--recompute-granularity", Some("selective".into())),
        ("full", None) => {
            flag("--recompute-granularity", Some("full".into()));
            flag("--recompute-method", Some("uniform".into()));
            flag("--recompute-num-layers", val(1));
        }
        (other @ ("selective-op" | "selective-layer"), None) => notes.push(format!(
            "recompute {other} is torchtitan's selective activation checkpointing; Megatron-LM has no such mode, so no recompute flag is written"
        )),
        _ => {}
    }
    if par.sequence_parallel {
        flag("--sequence-parallel", None);
    }
    match par.zero {
        // ZeRO-2/3: Megatron-Core's FSDP, sharding gradients (and parameters) too.
        2 | 3 => {
            flag("--use-megatron-fsdp", None);
            // validate_args: "Megatron-FSDP requires the `fsdp_dtensor` checkpointing format"
            // (megatron/training/arguments.py:1169 at d98e8a64).
            flag("--ckpt-format", Some("fsdp_dtensor".into()));
            flag(
                "--data-parallel-sharding-strategy",
                Some(
                    if par.zero == 3 {
                        "optim_grads_params"
                    } else {
                        "optim_grads"
                    }
                    .into(),
                ),
            );
        }
        _ if par.zero1 => flag("--use-distributed-optimizer", None),
        _ => {}
    }
    if par.dp_replicate > 1 {
        // The state sharded within each of R instances and replicated across them.
        flag(
            "--num-distributed-optimizer-instances",
            val(par.dp_replicate),
        );
    }
    match par.precision.as_str() {
        "fp8" => {
            // E4M3 forward, E5M2 gradients; the recipe as predicted (delayed: Megatron-LM's
            // default, with Transformer Engine's history of 1024 steps and its max).
            flag("--fp8-format", Some("hybrid".into()));
            flag("--fp8-recipe", Some(par.fp8_recipe.clone()));
            if par.fp8_recipe == "delayed" {
                flag("--fp8-amax-history-len", val(1024));
                flag("--fp8-amax-compute-algo", Some("max".into()));
            }
        }
        "mxfp8" => {
            flag("--fp8-format", Some("e4m3".into()));
            flag("--fp8-recipe", Some("mxfp8".into()));
        }
        "nvfp4" => {
            flag("--fp4-format", Some("e2m1".into()));
            flag("--fp4-recipe", Some("nvfp4".into()));
        }
        _ => {}
    }
    if par.attention == "flash" {
        flag("--attention-backend", Some("flash".into()));
        if par.attention_kernel == "fa2" {
            notes.push(
                "FlashAttention-2's kernels (--attention-kernel fa2): Megatron-Core's --attention-backend flash runs the flash-attn package installed (FlashAttention-3 on Hopper where it is), and reading these arguments back gives cuDNN's rates".into(),
            );
        }
        if par.attention_kernel == "triton" {
            notes.push(
                "FlashAttention's Triton kernel (--attention-kernel triton) is llm-foundry's; Megatron-Core has no backend for it, and reading these arguments back gives cuDNN's rates".into(),
            );
        }
    }
    if par.tp_comm_overlap {
        flag("--tp-comm-overlap", None);
        if !par.sequence_parallel {
            notes.push(
                "tensor-parallel communication overlap without sequence parallelism: Megatron-LM requires --sequence-parallel with --tp-comm-overlap".into(),
            );
        }
    }
    if par.overlap_grad_reduce {
        flag("--overlap-grad-reduce", None);
    }
    if par.overlap_param_gather {
        flag("--overlap-param-gather", None);
        if !par.zero1 {
            notes.push(
                "parameter-gather overlap without ZeRO-1: Megatron-LM's --overlap-param-gather needs --use-distributed-optimizer".into(),
            );
        }
    }
    if par.use_transformer_engine_op_fuser {
        flag("--use-transformer-engine-op-fuser", None);
    }
    if par.activation_func_fp8_input_store {
        notes.push(format!(
            "the MLP activation's input kept in FP8 is TransformerConfig.activation_func_fp8_input_store, which Megatron-LM at {MEGATRON_COMMIT} has no flag for: set it in the model's config"
        ));
    }
    if par.defer_embedding_wgrad_compute {
        flag("--defer-embedding-wgrad-compute", None);
        if par.wgrad_deferral_limit > 0 {
            flag(
                "--wgrad-deferral-limit",
                Some(par.wgrad_deferral_limit.to_string()),
            );
        }
    }
    let loss = par.cross_entropy_fusion.as_str();
    match loss.parse::<CrossEntropyFusion>() {
        Ok(CrossEntropyFusion::Off) => {}
        Ok(c) if c.pytorch_only() => notes.push(format!(
            "the loss was predicted as a PyTorch stack's ({loss}); Megatron-LM's is its own vocabulary-parallel cross-entropy, so no fusion flag is written"
        )),
        _ => {
            flag("--cross-entropy-loss-fusion", None);
            flag("--cross-entropy-fusion-impl", Some(loss.to_string()));
        }
    }
    if par.cuda_graph_impl != "none" {
        flag("--cuda-graph-impl", Some(par.cuda_graph_impl.clone()));
        if !par.cuda_graph_modules.is_empty() {
            flag(
                "--cuda-graph-modules",
                Some(par.cuda_graph_modules.join(" ")),
            );
        }
    }
    if par.fp8_param_gather {
        flag("--fp8-param-gather", None);
    }
    if par.cpu_offloading_num_layers > 0 {
        flag(
            "--cpu-offloading-num-layers",
            Some(par.cpu_offloading_num_layers.to_string()),
        );
    }
    // Recorded only where they differ from the plan's stack; Megatron-LM's defaults (at
    // MEGATRON_COMMIT) are overlapped sends and fused accumulation, so only "off" is a flag.
    if par.overlap_p2p_comm == Some(false) {
        flag("--no-overlap-p2p-communication", None);
    }
    if par.gradient_accumulation_fusion == Some(false) {
        flag("--no-gradient-accumulation-fusion", None);
    }
    match par.grad_reduce_dtype.as_deref() {
        Some("fp32") => flag("--accumulate-allreduce-grads-in-fp32", None),
        Some(_) => flag("--grad-reduce-in-bf16", None),
        None => {}
    }
    if par.moe_comm_overlap {
        flag("--overlap-moe-expert-parallel-comm", None);
    }
    if par.fsdp_copies == Some(true) {
        notes.push(
            "FSDP2's copies in and out of the sharded collectives (pplan --fsdp-copies on) are not Megatron-LM's: its parameters and gradients are views of flat buffers".into(),
        );
    }
    if !par.reshard_after_forward && par.zero >= 3 {
        notes.push(
            "keeping the gathered parameters from the forward to the backward (pplan --reshard-after-forward off) is not set here: Megatron-FSDP's optim_grads_params reshards them".into(),
        );
    }
    if par.no_scatter_gather {
        notes.push(
            "pipeline activations sent whole from every tensor-parallel rank (pplan --no-scatter-gather) have no flag in this Megatron-LM (its --no-scatter-gather-tensors-in-pipeline is gone)".into(),
        );
    }
    super::common::prediction_input_notes(plan, "Megatron-LM", &mut notes);
    if par.use_precision_aware_optimizer {
        flag("--use-precision-aware-optimizer", None);
        if !par.zero1 {
            notes.push(
                "precision-aware optimizer without ZeRO-1: Megatron-LM's --use-precision-aware-optimizer needs --use-distributed-optimizer".into(),
            );
        }
    }
    match par.main_params_dtype.as_str() {
        "fp32" => {}
        "none" => notes.push(
            "no master weights (NeMo/Apex optim.dtype bf16, store_params=False): Megatron-Core has no such setting; --main-params-dtype is left at fp32".into(),
        ),
        other => flag("--main-params-dtype", Some(other.into())),
    }
    for (name, v) in [
        ("--exp-avg-dtype", &par.exp_avg_dtype),
        ("--exp-avg-sq-dtype", &par.exp_avg_sq_dtype),
    ] {
        if v != "fp32" {
            flag(name, Some(v.clone()));
        }
    }
    if plan.dtype == "bf16" {
        flag("--bf16", None);
    }
    common_notes(plan, &mut notes);

    let mut text = String::new();
    let _ = writeln!(
        text,
        "# Megatron-LM arguments for model '{}' with schedule '{sch}' (pplan emit --target megatron).",
        m.name
    );
    let _ = writeln!(
        text,
        "# Flags as in Megatron-LM megatron/training/arguments.py at commit {}.",
        &MEGATRON_COMMIT[..12]
    );
    let cp = if par.cp > 1 {
        format!(" x cp {}", par.cp)
    } else {
        String::new()
    };
    let _ = writeln!(
        text,
        "# Launch on {} GPUs: tp {}{cp} x pp {} x dp {}; Megatron-LM derives dp from the world size.",
        par.gpus, par.tp, par.pp, par.dp
    );
    let _ = writeln!(
        text,
        "# Vocabulary: {} (--padded-vocab-size); the tokenizer's must not be larger. Add data, tokenizer and optimizer flags.",
        m.vocab_size
    );
    let _ = writeln!(
        text,
        "# Use: source THIS_FILE && torchrun ... pretrain_gpt.py \"${{{ARRAY_NAME}[@]}}\" ..."
    );
    for a in &assumed {
        let _ = writeln!(text, "# assumed: {a}");
    }
    for n in &notes {
        let _ = writeln!(text, "# cannot express exactly: {n}");
    }
    environment(plan, &mut text);
    let _ = writeln!(text, "{ARRAY_NAME}=(");
    for (name, value) in flags {
        match value {
            // Megatron-LM reads the modules as separate words (`nargs='+'`).
            Some(v) if name == "--cuda-graph-modules" => {
                let words: Vec<String> = v.split_whitespace().map(shell_word).collect();
                let _ = writeln!(text, "  {name} {}", words.join(" "));
            }
            Some(v) => {
                let _ = writeln!(text, "  {name} {}", shell_word(&v));
            }
            None => {
                let _ = writeln!(text, "  {name}");
            }
        }
    }
    text.push_str(")\n");
    Emitted {
        text,
        notes,
        schedule_csv: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_strings_and_shell_words() {
        use crate::inputs::model::Model;
        use crate::plan::plan_file::*;
        use crate::schedule::generators::{generate, GenParams, ScheduleName};
        use crate::schedule::ir::Placement;
        let model = Model::preset("gpt-1.7b").unwrap();
        let sch = generate(ScheduleName::OneFOneB, GenParams::new(3, 3)).unwrap();
        let plan = Plan {
            format: PLAN_FORMAT.into(),
            version: PLAN_VERSION,
            model: PlanModel::from_model(&model),
            hardware: "a100-80gb".into(),
            parallelism: Parallelism {
                gpus: 3,
                tp: 1,
                pp: 3,
                dp: 1,
                cp: 1,
                cp_comm: "p2p".into(),
                ep: 1,
                etp: 1,
                micro_batch: 1,
                global_batch: 3,
                chunks: 1,
                recompute: "none".into(),
                sequence_parallel: false,
                zero1: false,
                zero: 0,
                dp_replicate: 1,
                ..Parallelism::stack_defaults()
            },
            dtype: "bf16".into(),
            stages: stages_from_counts(&[1, 22, 1], Placement::Loop, 3),
            schedule: PlanSchedule::from_schedule("1f1b", &sch),
            predicted: None,
        };
        assert_eq!(megatron_layout(&plan), "Et|t*22|tL");
        assert_eq!(shell_word("Et|t*22|tL"), "'Et|t*22|tL'");
        assert_eq!(shell_word("RMSNorm"), "RMSNorm");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
