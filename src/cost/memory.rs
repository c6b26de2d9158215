//! The memory model: model state and activations per GPU.
//!
//! Model state for mixed-precision Adam (Rajbhandari et al. 2020, ZeRO, Sec. 3.1): 2 bytes of
//! 16-bit weights, 2 bytes of 16-bit gradients and 12 bytes of fp32 optimizer state (master
//! weights, momentum, variance) per parameter, 16 in all; ZeRO-1 divides the 12 by d.
//!
//! Activations per transformer layer and micro-batch, 16-bit, from Korthikanti et al. 2022,
//! "Reducing Activation Recomputation in Large Transformer Models", Table 2 (s sequence, b
//! micro-batch, h hidden, a heads, t tensor-parallel size):
//!
//! | recompute | no sequence parallelism         | sequence parallelism   |
//! |-----------|---------------------------------|------------------------|
//! | none      | sbh (10 + 24/t + 5as/(ht))      | sbh/t (34 + 5as/h)     |
//! | selective | sbh (10 + 24/t)                 | 34 sbh/t               |
//! | full      | 2 sbh                           | 2 sbh/t                |
//!
//! (Table 2 lists 2sbh for full recompute; with sequence parallelism the stored layer input is
//! itself split over the t ranks, hence 2sbh/t.) The simulator multiplies a stage's
//! activations by the micro-batches that stage holds at once, which the schedule decides.

use super::fp8_recipe::Fp8Recipe;
use super::stack::{Attention, CostModel, Overheads, Recompute, Stack, Zero};
use crate::inputs::hardware::{Hardware, Precision};
use crate::inputs::model::Model;

pub const WEIGHT_BYTES_PER_PARAM: u64 = 2;
pub const GRAD_BYTES_PER_PARAM: u64 = 2;
/// Plain mixed-precision Adam's state (`OptimizerState::FP32`).
pub const OPTIMIZER_BYTES_PER_PARAM: u64 = 12;

/// What one parameter holds besides its 16-bit weight and gradient: the low-precision weight
/// copies Transformer Engine keeps and the optimizer's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateBytes {
    /// The 16-bit weight: 2, or 0 where the weights live only in low precision
    /// (`--fp8-param-gather`).
    pub weight: u64,
    pub extra_weight: u64,
    pub optimizer: u64,
}

impl StateBytes {
    /// Plain mixed-precision Adam, no low-precision copies.
    pub const ADAM: StateBytes = StateBytes {
        weight: WEIGHT_BYTES_PER_PARAM,
        extra_weight: 0,
        optimizer: OPTIMIZER_BYTES_PER_PARAM,
    };
}

/// (weights, gradients, optimizer state) bytes for `params` parameters on one GPU whose state
/// is sharded `zero`-deep over `shard` ranks (ZeRO-1: the optimizer state; ZeRO-2: and the
/// gradients; ZeRO-3: and the weights, with the low-precision copies sharded alike).
pub fn model_state_parts(params: u64, shard: u64, zero: Zero, per: StateBytes) -> (u64, u64, u64) {
    let part = |bytes: u64, sharded: bool| {
        let total = bytes.saturating_mul(params);
        if sharded {
            total.div_ceil(shard.max(1))
        } else {
            total
        }
    };
    (
        part(per.weight + per.extra_weight, zero.shards_weights()),
        part(GRAD_BYTES_PER_PARAM, zero.shards_gradients()),
        part(per.optimizer, zero.shards_optimizer()),
    )
}

/// Bytes of weights, gradients and optimizer state for `params` parameters on one GPU.
pub fn model_state_bytes(params: u64, shard: u64, zero: Zero) -> u64 {
    let (w, g, o) = model_state_parts(params, shard, zero, StateBytes::ADAM);
    w.saturating_add(g).saturating_add(o)
}

/// Working memory of sharded data parallelism on a GPU with `params` parameters whose layers
/// hold `layer_params` each, `weight` bytes a parameter ([`StateBytes`]' weight and
/// low-precision copies): ZeRO-3 gathers a layer's parameters one layer ahead, two layers at a time, and holds one layer's
/// unsharded gradients until they are reduce-scattered; without resharding after the forward
/// every gathered parameter stays until the backward. ZeRO-2 holds one layer's unsharded
/// gradients. The sharded part already counted in the model state is not counted again.
pub fn sharded_working_bytes(
    params: u64,
    layer_params: u64,
    shard: u64,
    zero: Zero,
    reshard_after_forward: bool,
    weight: u64,
) -> u64 {
    let grads = GRAD_BYTES_PER_PARAM.saturating_mul(layer_params);
    match zero {
        Zero::Off | Zero::Optimizer => 0,
        Zero::Gradients => grads,
        Zero::Full if reshard_after_forward => (2 * weight)
            .saturating_mul(layer_params)
            .saturating_add(grads),
        Zero::Full => {
            let gathered = weight.saturating_mul(params);
            (gathered - gathered / shard.max(1)).saturating_add(grads)
        }
    }
}

/// Dimensions of the activation formulas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ActDims {
    pub s: u64,
    pub b: u64,
    pub h: u64,
    pub a: u64,
    pub t: u64,
    /// Width of the key (and of the value) projection: KV heads x head size.
    pub kv: u64,
    /// MLP width and whether the MLP is gated (SwiGLU: two input GEMMs).
    pub f: u64,
    pub gated: bool,
    /// Widths of the attention kernel's query, key, value and output tensors: heads x head
    /// size for Q and the output, KV heads x head size for K and V; with latent attention,
    /// heads x (nope + rope) for Q and K and heads x v_head_dim for V and the output.
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub o: u64,
    /// Latent attention's compressed query and key/value widths (q_lora_rank + kv_lora_rank
    /// + the rotary key), 0 without it.
    pub latent: u64,
    /// The layers train with dropout: each bias-dropout-add keeps a 1-byte mask
    /// (`Model::dropout`).
    pub dropout: bool,
    /// Bytes x 32 of one element of a linear layer's input as Transformer Engine saves it
    /// for the weight gradient: 64 (BF16), 32 (FP8), 33 (MXFP8: a shared 8-bit exponent per
    /// 32 elements), 18 (NVFP4: 4 bits plus an FP8 scale per 16).
    pub input_32ths: u64,
    /// Bytes x 32 of one element of the MLP activation's input as it is kept for the
    /// backward: 64 (16 bits), 32 with `--activation-func-fp8-input-store` (a cast to E4M3,
    /// no scale).
    pub act_input_32ths: u64,
}

impl ActDims {
    pub fn new(model: &Model, micro_batch: u64, tp: u64) -> ActDims {
        let a = model.num_heads;
        let kv = model.num_kv_heads * model.head_dim();
        let (q, k, v, o, latent) = match &model.mla {
            Some(m) => {
                let qk = a * (m.qk_nope_head_dim + m.qk_rope_head_dim);
                let latent = m.q_lora_rank + m.kv_lora_rank + m.qk_rope_head_dim;
                (qk, qk, a * m.v_head_dim, a * m.v_head_dim, latent)
            }
            None => (a * model.head_dim(), kv, kv, a * model.head_dim(), 0),
        };
        ActDims {
            s: model.seq_len,
            b: micro_batch,
            h: model.hidden_size,
            a,
            t: tp.max(1),
            kv,
            f: model.ffn_hidden_size,
            gated: model.gated_mlp,
            q,
            k,
            v,
            o,
            latent,
            dropout: model.dropout,
            input_32ths: 64,
            act_input_32ths: 64,
        }
    }

    /// The GPT layer of Korthikanti et al. 2022: multi-head attention, a 4h plain MLP.
    pub fn gpt(s: u64, b: u64, h: u64, a: u64, t: u64) -> ActDims {
        ActDims {
            s,
            b,
            h,
            a,
            t,
            kv: h,
            f: 4 * h,
            gated: false,
            q: h,
            k: h,
            v: h,
            o: h,
            latent: 0,
            dropout: true,
            input_32ths: 64,
            act_input_32ths: 64,
        }
    }

    /// The same with the linear layers' GEMMs in `precision`: Transformer Engine saves their
    /// inputs for the weight gradient in that format (the cast it fed the GEMM), not in BF16.
    pub fn precision(self, precision: Precision) -> ActDims {
        ActDims {
            input_32ths: match precision {
                Precision::Bf16 => 64,
                Precision::Fp8 => 32,
                Precision::Mxfp8 => 33,
                Precision::Nvfp4 => 18,
            },
            ..self
        }
    }

    /// The same with each sequence split over `cp` context-parallel ranks: every stored
    /// tensor holds `s / cp` tokens (flash attention only: no `s^2` term is stored).
    pub fn context_parallel(self, cp: u64) -> ActDims {
        ActDims {
            s: self.s / cp.max(1),
            ..self
        }
    }
}

/// Bytes of activations one transformer layer keeps for one micro-batch until its backward
/// (Korthikanti et al. 2022, Table 2). Computed as exact integers where the formula is integral.
pub fn layer_activation_bytes(d: ActDims, recompute: Recompute, sequence_parallel: bool) -> u64 {
    let ActDims { s, b, h, a, t, .. } = d;
    let sbh = s as u128 * b as u128 * h as u128;
    let as2b = 5 * a as u128 * s as u128 * s as u128 * b as u128;
    let bytes = match (recompute, sequence_parallel) {
        (Recompute::None, false) => 10 * sbh + (24 * sbh + as2b) / t as u128,
        (Recompute::None, true) => (34 * sbh + as2b) / t as u128,
        (Recompute::Selective, false) => 10 * sbh + 24 * sbh / t as u128,
        (Recompute::Selective, true) => 34 * sbh / t as u128,
        (Recompute::Full, false) => 2 * sbh,
        (Recompute::Full, true) => 2 * sbh / t as u128,
        // The two norms' outputs (the QKV and MLP-in GEMMs' inputs, 2 sbh each) are dropped;
        // the attention core is kept (Megatron-Core's modules list replaces `core_attn`).
        // With latent attention's `mla_up_proj` too (nothing more to drop in the 2021 table).
        (
            Recompute::NormAct
            | Recompute::NormMoe
            | Recompute::NormMlaUpProj
            | Recompute::NormActMlaUpProj,
            sp,
        ) => {
            if sp {
                (30 * sbh + as2b) / t as u128
            } else {
                6 * sbh + (24 * sbh + as2b) / t as u128
            }
        }
        (Recompute::SelectiveOp, _) => selective_op_bytes(d),
        // Latent attention runs with flash attention ([`layer_activation_bytes_for`]); the
        // 2021 table has no up-projection to drop.
        (Recompute::MlaUpProj, sp) => {
            return layer_activation_bytes(d, Recompute::None, sp);
        }
        // The MLP's intermediates are freed (its input, the norm output, stays); `mla_up_proj`
        // has nothing to drop here (above).
        (Recompute::Mlp | Recompute::MlaUpProjMlp, sp) => {
            return layer_activation_bytes(d, Recompute::None, sp)
                .saturating_sub(mlp_intermediate_bytes(d, Attention::Unfused));
        }
        (Recompute::SelectiveLayer, sp) => {
            (layer_activation_bytes(d, Recompute::None, sp) as u128
                + layer_activation_bytes(d, Recompute::Full, sp) as u128)
                / 2
        }
    };
    u64::try_from(bytes).unwrap_or(u64::MAX)
}

/// What torchtitan's per-op selective checkpointing keeps of one layer, in bytes (16-bit
/// tensors; torchtitan/distributed/activation_checkpoint.py, `_get_default_save_ops` and the
/// "every second mm" policy): the checkpointed layer input (s b h), the outputs of the saved
/// linear GEMMs — the 1st, 3rd, 5th and 7th of q, k, v, output projection, MLP gate, MLP up,
/// MLP down, i.e. q (s b h), v (s b kv), the gate (s b f) and, gated, the MLP output (s b h);
/// plain MLP: q, v, MLP in — and the attention output (s b h). Everything is split over the t
/// tensor-parallel ranks. Flash attention's log-sum-exp is added by
/// [`layer_activation_bytes_for`]; scores are recomputed, never kept.
fn selective_op_bytes(d: ActDims) -> u128 {
    let sb = d.s as u128 * d.b as u128;
    let (h, kv, f) = (d.h as u128, d.kv as u128, d.f as u128);
    let saved = if d.gated {
        h + h + kv + h + f + h
    } else {
        h + h + kv + h + f
    };
    2 * sb * saved / d.t as u128
}

/// [`layer_activation_bytes`] for an attention kernel. Unfused attention (the 2021 path) is
/// Korthikanti et al.'s GPT layer. With flash attention the scores, the softmax output and the
/// dropout mask over them are never stored, and the layer is counted tensor by tensor as
/// Megatron-Core with Transformer Engine keeps it ([`flash_layer_bytes`]); selective
/// recomputation then has nothing left to save and equals none (Dao 2023).
pub fn layer_activation_bytes_for(
    d: ActDims,
    recompute: Recompute,
    sequence_parallel: bool,
    attention: Attention,
) -> u64 {
    match (attention, recompute) {
        (Attention::Unfused, _) | (_, Recompute::Full) => {
            layer_activation_bytes(d, recompute, sequence_parallel)
        }
        (Attention::Flash, Recompute::SelectiveOp) => {
            layer_activation_bytes(d, recompute, sequence_parallel).saturating_add(lse_bytes(d))
        }
        (Attention::Flash, Recompute::SelectiveLayer) => {
            let none = flash_layer_bytes(d, sequence_parallel);
            let full = layer_activation_bytes(d, Recompute::Full, sequence_parallel);
            none / 2 + full / 2
        }
        (Attention::Flash, Recompute::NormAct | Recompute::NormMoe) => {
            flash_layer_bytes(d, sequence_parallel)
                .saturating_sub(norm_recompute_bytes(d, sequence_parallel))
        }
        (Attention::Flash, Recompute::None | Recompute::Selective) => {
            flash_layer_bytes(d, sequence_parallel)
        }
        (Attention::Flash, Recompute::MlaUpProj) => {
            flash_layer_bytes(d, sequence_parallel).saturating_sub(mla_up_proj_bytes(d))
        }
        (Attention::Flash, Recompute::Mlp) => {
            flash_layer_bytes(d, sequence_parallel).saturating_sub(flash_mlp_intermediate_bytes(d))
        }
        // The two modules free what each frees alone (`moe_act` frees only routed tensors:
        // `CostModel::moe_layer_activation_bytes`).
        (Attention::Flash, Recompute::NormMlaUpProj | Recompute::NormActMlaUpProj) => {
            flash_layer_bytes(d, sequence_parallel)
                .saturating_sub(norm_recompute_bytes(d, sequence_parallel))
                .saturating_sub(mla_up_proj_bytes(d))
        }
        (Attention::Flash, Recompute::MlaUpProjMlp) => flash_layer_bytes(d, sequence_parallel)
            .saturating_sub(mla_up_proj_bytes(d))
            .saturating_sub(flash_mlp_intermediate_bytes(d)),
    }
}

/// The queries, keys and values a latent-attention layer's up-projections and rotary
/// embedding produce, `2 (q + k + v)` bytes a token split over t: what `mla_up_proj`
/// recomputation frees after the attention kernel's forward and rebuilds one layer at a time
/// in the backward. 0 without latent attention.
pub fn mla_up_proj_bytes(d: ActDims) -> u64 {
    if d.latent == 0 {
        return 0;
    }
    let v = 2 * (d.q + d.k + d.v) as u128 * d.s as u128 * d.b as u128 / d.t as u128;
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// Flash attention's log-sum-exp per row, 4 bytes x a s b / t.
fn lse_bytes(d: ActDims) -> u64 {
    let v = 4 * d.a as u128 * d.s as u128 * d.b as u128 / d.t as u128;
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// Bytes one pre-norm layer keeps for its backward with flash attention, without
/// recomputation, as Megatron-Core (TE layer spec) and Transformer Engine save them. Per
/// token, `e` the bytes of a linear layer's input as TE saves it ([`ActDims::precision`]: 2
/// in BF16, 1 in FP8), the first three terms of each block and the masks split over t only
/// with sequence parallelism, the rest always:
///
/// - attention: the norm's input (2h) and output (`e h`: `LayerNormLinear` keeps the cast
///   it gathered from); Q, K, V (`2 (q + k + v)`); the kernel's output (`2 o`) and
///   log-sum-exp (`4 a`); in low precision the output projection's own cast of its input
///   (`e o`; in BF16 it is the kernel's output tensor); the dropout mask after the
///   projection (h, 1 byte, with dropout); with latent attention the compressed query and
///   key/value and their norms' outputs (`2 x 2 latent`);
/// - MLP: the norm's input and output (`2h + e h`); the activation's input, the first
///   GEMM's output (`2 f`, `2 x 2 f` gated: SwiGLU keeps the gate and the up projection);
///   the second GEMM's input (`e f`); the mask (h).
///
/// For GPT (`q = k = v = h`, `f = 4h`, BF16) this is Korthikanti et al.'s selective figure,
/// `34 sbh/t` with sequence parallelism and `sbh (10 + 24/t)` without, plus the log-sum-exp.
/// The masks only where the model trains with dropout (`Model::dropout`: GPT-style models
/// with Megatron-LM's default 0.1; not Llama-style ones).
pub fn flash_layer_bytes(d: ActDims, sequence_parallel: bool) -> u64 {
    let (n, t) = (d.s as u128 * d.b as u128, d.t as u128);
    let sp = if sequence_parallel { t } else { 1 };
    let e = d.input_32ths as u128;
    let (h, a, o) = (d.h as u128, d.a as u128, d.o as u128);
    let qkv = (d.q + d.k + d.v) as u128;
    let proj_in = if e < 64 { e * o } else { 0 };
    // In 32ths of a byte: the sequence-parallel region's tensors, then the head-split ones.
    let mask = if d.dropout { 32 * h } else { 0 };
    let per_sp = 2 * (64 * h + e * h + mask) + 2 * 64 * d.latent as u128;
    let per_tp = 64 * qkv + 64 * o + 32 * 4 * a + proj_in;
    let total = (per_sp * n).div_ceil(32 * sp)
        + (per_tp * n).div_ceil(32 * t)
        + flash_mlp_intermediate_bytes(d) as u128;
    u64::try_from(total).unwrap_or(u64::MAX)
}

/// The MLP's intermediates one layer keeps with flash attention ([`flash_layer_bytes`]): the
/// activation's input (`2 f`, or `2 x 2 f` gated; half with
/// `--activation-func-fp8-input-store`) and the second GEMM's input (`e f`), per token, split
/// over t. What a mixture-of-experts layer replaces by its routed rows.
pub fn flash_mlp_intermediate_bytes(d: ActDims) -> u64 {
    let f = d.f as u128;
    let up = if d.gated { 2 * f } else { f };
    let per_token = d.act_input_32ths as u128 * up + d.input_32ths as u128 * f;
    let v = (per_token * d.s as u128 * d.b as u128).div_ceil(32 * d.t as u128);
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// The MLP intermediates [`layer_activation_bytes_for`] counts for an attention kernel:
/// Korthikanti et al.'s `16 sbh/t` (a `4h` MLP, 2 bytes) for the unfused 2021 layer, else
/// [`flash_mlp_intermediate_bytes`].
pub fn mlp_intermediate_bytes(d: ActDims, attention: Attention) -> u64 {
    match attention {
        Attention::Unfused => {
            let v = 16 * d.s as u128 * d.b as u128 * d.h as u128 / d.t as u128;
            u64::try_from(v).unwrap_or(u64::MAX)
        }
        Attention::Flash => flash_mlp_intermediate_bytes(d),
    }
}

/// The two norms' outputs of one layer, `2 x 2 sbh` bytes (`/t` with sequence parallelism):
/// what Megatron-Core's `layernorm` recompute module drops after the GEMMs that read them and
/// rebuilds before their backward.
pub fn norm_output_bytes(d: ActDims, sequence_parallel: bool) -> u64 {
    let sbh = d.s as u128 * d.b as u128 * d.h as u128;
    let v = if sequence_parallel {
        4 * sbh / d.t as u128
    } else {
        4 * sbh
    };
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// What the `layernorm` recompute module saves with flash attention: the two BF16 norm
/// outputs ([`norm_output_bytes`]) in BF16; nothing in a low precision, where the linear
/// layer that reads the rebuilt norm output keeps its own cast of it for the weight gradient,
/// as the fused `LayerNormLinear` did.
pub fn norm_recompute_bytes(d: ActDims, sequence_parallel: bool) -> u64 {
    if d.input_32ths < 64 {
        0
    } else {
        norm_output_bytes(d, sequence_parallel)
    }
}

/// [`recompute_working_bytes`] for an attention kernel: with flash attention the recomputed
/// attention core is tiled on chip (nothing for selective); full recompute rebuilds the flash
/// layer's activations.
pub fn recompute_working_bytes_for(
    d: ActDims,
    recompute: Recompute,
    sequence_parallel: bool,
    attention: Attention,
) -> u64 {
    match (attention, recompute) {
        (Attention::Unfused, _) | (_, Recompute::None) => {
            recompute_working_bytes(d, recompute, sequence_parallel)
        }
        (Attention::Flash, Recompute::Selective) => 0,
        (Attention::Flash, Recompute::MlaUpProj) => mla_up_proj_bytes(d),
        (Attention::Flash, Recompute::Mlp) => flash_mlp_intermediate_bytes(d),
        (Attention::Flash, Recompute::NormAct | Recompute::NormMoe) => {
            norm_recompute_bytes(d, sequence_parallel)
        }
        // The rebuilt norm output (its recompute hook fires on the attention output's
        // gradient) is still held when the queries, keys and values are rebuilt: both at once.
        (Attention::Flash, Recompute::NormMlaUpProj | Recompute::NormActMlaUpProj) => {
            norm_recompute_bytes(d, sequence_parallel).saturating_add(mla_up_proj_bytes(d))
        }
        // The MLP's rebuilt intermediates are freed by its backward, before the attention
        // block's backward rebuilds the queries, keys and values: the larger of the two.
        (Attention::Flash, Recompute::MlaUpProjMlp) => {
            mla_up_proj_bytes(d).max(flash_mlp_intermediate_bytes(d))
        }
        (Attention::Flash, Recompute::Full | Recompute::SelectiveLayer) => {
            layer_activation_bytes_for(d, Recompute::None, sequence_parallel, attention)
        }
        // The recomputed tensors of one layer: what it would keep without checkpointing,
        // less what the policy saved.
        (Attention::Flash, Recompute::SelectiveOp) => {
            layer_activation_bytes_for(d, Recompute::None, sequence_parallel, attention)
                .saturating_sub(layer_activation_bytes_for(
                    d,
                    Recompute::SelectiveOp,
                    sequence_parallel,
                    attention,
                ))
        }
    }
}

/// Working memory of the backward of one layer beyond what is stored: with full recompute the
/// layer's activations are rebuilt for one micro-batch at a time (the no-recompute amount);
/// with selective recompute the attention core's 5as^2b/t.
pub fn recompute_working_bytes(d: ActDims, recompute: Recompute, sequence_parallel: bool) -> u64 {
    match recompute {
        Recompute::None => 0,
        Recompute::Selective => {
            let v = 5 * d.a as u128 * d.s as u128 * d.s as u128 * d.b as u128 / d.t as u128;
            u64::try_from(v).unwrap_or(u64::MAX)
        }
        Recompute::Full | Recompute::SelectiveLayer => {
            layer_activation_bytes(d, Recompute::None, sequence_parallel)
        }
        Recompute::SelectiveOp => layer_activation_bytes(d, Recompute::None, sequence_parallel)
            .saturating_sub(layer_activation_bytes(d, recompute, sequence_parallel)),
        Recompute::NormAct | Recompute::NormMoe => norm_output_bytes(d, sequence_parallel),
        Recompute::MlaUpProj => mla_up_proj_bytes(d),
        Recompute::Mlp => mlp_intermediate_bytes(d, Attention::Unfused),
        Recompute::NormMlaUpProj | Recompute::NormActMlaUpProj => {
            norm_output_bytes(d, sequence_parallel).saturating_add(mla_up_proj_bytes(d))
        }
        Recompute::MlaUpProjMlp => {
            mla_up_proj_bytes(d).max(mlp_intermediate_bytes(d, Attention::Unfused))
        }
    }
}

/// The dense word-embedding gradient the first stage's backward allocates every micro-batch:
/// PyTorch's lookup backward (`embedding_dense_backward`) returns a zero-filled `V/t x h`
/// gradient in the weight's 16-bit dtype ([`GRAD_BYTES_PER_PARAM`] an element), which lives until the data-parallel wrapper has added
/// it to the fp32 main gradient (Megatron-Core `param.main_grad.add_(param.grad.data)`, then
/// `param.grad = None`). It is working memory of the embedding's backward, when no layer of
/// that micro-batch recomputes, so it and the layers' recompute working memory are not held
/// at once.
pub fn embedding_grad_bytes(vocab: u64, hidden: u64, tp: u64) -> u64 {
    let v = GRAD_BYTES_PER_PARAM as u128 * vocab as u128 * hidden as u128 / tp.max(1) as u128;
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// Activations the first stage keeps per micro-batch besides its layers: the embedding
/// dropout mask, s b h bytes (/t with sequence parallelism) (Korthikanti et al. 2022, Sec. 4.3).
/// None for a model trained without dropout.
pub fn embedding_activation_bytes(d: ActDims, sequence_parallel: bool) -> u64 {
    let sbh = d.s * d.b * d.h;
    if !d.dropout {
        0
    } else if sequence_parallel {
        sbh / d.t
    } else {
        sbh
    }
}

/// Activations the last stage keeps per micro-batch: final layer norm and output layer, 4
/// sbh/t, and what the cross-entropy keeps of the `s b V/t` logits for its backward,
/// `bytes_per_logit` each ([`CrossEntropyFusion::saved_bytes_per_logit`]: 4, the fp32
/// softmax of Korthikanti et al. 2022, Sec. 4.3, or 2, the 16-bit gradient Transformer
/// Engine's fused kernel writes over the logits).
///
/// [`CrossEntropyFusion::saved_bytes_per_logit`]: crate::cost::CrossEntropyFusion::saved_bytes_per_logit
pub fn output_activation_bytes(d: ActDims, vocab: u64, bytes_per_logit: u64) -> u64 {
    let sb = d.s as u128 * d.b as u128;
    let v = (4 * sb * d.h as u128 + bytes_per_logit as u128 * sb * vocab as u128) / d.t as u128;
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// Working memory of the loss on the device that holds it: what its kernels hold at their
/// peak beyond what it keeps for the backward, `(peak - saved)` bytes per logit of the `s b
/// V/t` logits ([`CrossEntropyFusion::peak_bytes_per_logit`]). It is held while the
/// micro-batch's activations are all stashed, in place of the layers' recompute working
/// memory (whichever is larger).
///
/// [`CrossEntropyFusion::peak_bytes_per_logit`]: crate::cost::CrossEntropyFusion::peak_bytes_per_logit
pub fn loss_working_bytes(
    d: ActDims,
    vocab: u64,
    saved_per_logit: u64,
    peak_per_logit: u64,
) -> u64 {
    let logits = d.s as u128 * d.b as u128 * vocab as u128 / d.t as u128;
    let v = peak_per_logit.saturating_sub(saved_per_logit) as u128 * logits;
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// What Megatron-Core's deferred output-layer weight gradient keeps per micro-batch until the
/// pipeline flush (`--defer-embedding-wgrad-compute`): the layer's 16-bit input (the `1/t`
/// sequence shard with sequence parallelism, which the flush all-gathers again) and the 16-bit
/// gradient of its `s b V/t` logits.
pub fn deferred_wgrad_bytes(d: ActDims, vocab: u64, sequence_parallel: bool) -> u64 {
    let (s, b, t) = (d.s as u128, d.b as u128, d.t as u128);
    let input = 2 * s * b * d.h as u128 / if sequence_parallel { t } else { 1 };
    let logit_grad = 2 * s * b * vocab as u128 / t;
    u64::try_from(input + logit_grad).unwrap_or(u64::MAX)
}

/// Where a GPU's memory goes at its peak (`memory_breakdown` in `pplan predict --format json`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemoryBreakdown {
    pub weights: u64,
    pub gradients: u64,
    pub optimizer: u64,
    /// Stashed activations and the backward's working memory at the peak.
    pub activations: u64,
    /// CUDA context, NCCL, workspaces and the allocator's reserve.
    pub overheads: u64,
}

impl MemoryBreakdown {
    /// The breakdown of a device with `params` parameters whose simulated peak (model state
    /// plus activations) is `tensor_peak_bytes`.
    /// `per.extra_weight` counts low-precision weight copies with the weights.
    pub fn new(
        params: u64,
        shard: u64,
        zero: Zero,
        per: StateBytes,
        tensor_peak_bytes: u64,
        o: &Overheads,
    ) -> Self {
        let (weights, gradients, optimizer) = model_state_parts(params, shard, zero, per);
        let state = weights.saturating_add(gradients).saturating_add(optimizer);
        MemoryBreakdown {
            weights,
            gradients,
            optimizer,
            activations: tensor_peak_bytes.saturating_sub(state),
            overheads: o.reserved_bytes(tensor_peak_bytes) - tensor_peak_bytes,
        }
    }

    pub fn total(&self) -> u64 {
        self.weights
            .saturating_add(self.gradients)
            .saturating_add(self.optimizer)
            .saturating_add(self.activations)
            .saturating_add(self.overheads)
    }
}

// The stack's and the cost model's inputs to the formulas above. They live here, not in
// stack.rs, so that memory depends on stack and not the other way round.

impl Stack {
    /// Per parameter, the low-precision weight copies and the optimizer's state.
    pub fn state_bytes(&self, hw: &Hardware) -> StateBytes {
        StateBytes {
            weight: if self.low_precision_params() {
                0
            } else {
                WEIGHT_BYTES_PER_PARAM
            },
            extra_weight: self.low_precision_copy_bytes(hw),
            optimizer: self.optimizer_state.bytes_per_param(),
        }
    }
}

impl CostModel<'_> {
    /// [`loss_working_bytes`] of this stack's loss: PyTorch's `F.cross_entropy` where the
    /// stack runs eager PyTorch kernels (torchtitan), split over the tensor-parallel ranks
    /// when there are several (torchtitan's `loss_parallel`).
    pub fn loss_working_bytes(&self) -> u64 {
        let ce = self.stack.cross_entropy_fusion;
        loss_working_bytes(
            self.act_dims(),
            self.model.vocab_size,
            ce.saved_bytes_per_logit(),
            ce.peak_bytes_per_logit(!self.stack.fused_kernels, self.layout.tp > 1),
        )
    }

    /// The activation formulas' dimensions for this layout and stack: one micro-batch, the
    /// sequence split over the context-parallel ranks, the linear layers' saved inputs in the
    /// stack's precision. With FP8 block scales the saved column-wise cast carries an FP32
    /// scale per 128 elements, 33/32 bytes an element (as MXFP8's one byte per 32).
    pub fn act_dims(&self) -> ActDims {
        let d = ActDims::new(self.model, self.layout.micro_batch, self.layout.tp)
            .context_parallel(self.layout.cp)
            .precision(self.stack.precision);
        // Megatron-Core casts it inside its fused SwiGLU kernels only (`bias_swiglu_impl`,
        // `weighted_bias_swiglu_impl`); a plain MLP's GeLU and an eager stack keep 16 bits.
        let fp8_store = self.stack.activation_func_fp8_input_store
            && self.model.gated_mlp
            && self.stack.fused_kernels;
        let d = ActDims {
            act_input_32ths: if fp8_store { 32 } else { 64 },
            ..d
        };
        if self.stack.precision == Precision::Fp8 && self.stack.fp8_recipe == Fp8Recipe::Blockwise {
            ActDims {
                input_32ths: 33,
                ..d
            }
        } else {
            d
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The closed forms of Korthikanti et al. 2022 Table 2, evaluated in f64.
    fn table2(d: ActDims, r: Recompute, sp: bool) -> f64 {
        let (s, b, h, a, t) = (d.s as f64, d.b as f64, d.h as f64, d.a as f64, d.t as f64);
        let sbh = s * b * h;
        match (r, sp) {
            (Recompute::None, false) => sbh * (10.0 + 24.0 / t + 5.0 * a * s / (h * t)),
            (Recompute::None, true) => sbh / t * (34.0 + 5.0 * a * s / h),
            (Recompute::Selective, false) => sbh * (10.0 + 24.0 / t),
            (Recompute::Selective, true) => sbh / t * 34.0,
            (Recompute::Full, false) => 2.0 * sbh,
            (Recompute::Full, true) => 2.0 * sbh / t,
            (
                Recompute::SelectiveOp
                | Recompute::SelectiveLayer
                | Recompute::NormAct
                | Recompute::NormMoe
                | Recompute::MlaUpProj
                | Recompute::Mlp
                | Recompute::NormMlaUpProj
                | Recompute::MlaUpProjMlp
                | Recompute::NormActMlaUpProj,
                _,
            ) => {
                unreachable!("not in Table 2: the tests iterate over Recompute::ALL")
            }
        }
    }

    /// DeepSeek-V3's latent attention (128 heads, qk 128 + 64, v 128): `mla_up_proj` frees
    /// the queries, keys and values, 2 x 128 x (192 + 192 + 128) bytes a token over t.
    #[test]
    fn mla_up_proj_frees_the_queries_keys_and_values() {
        let mut m = Model::preset("deepseek-v3").unwrap();
        m.seq_len = 4096;
        let d = ActDims::new(&m, 1, 2);
        assert_eq!(mla_up_proj_bytes(d), 2 * 128 * (192 + 192 + 128) * 4096 / 2);
        assert_eq!(
            layer_activation_bytes_for(d, Recompute::None, true, Attention::Flash)
                - layer_activation_bytes_for(d, Recompute::MlaUpProj, true, Attention::Flash),
            mla_up_proj_bytes(d)
        );
        // No latent attention, nothing to free.
        let llama = ActDims::new(&Model::preset("llama3-8b").unwrap(), 1, 1);
        assert_eq!(mla_up_proj_bytes(llama), 0);
    }

    /// Megatron-Core's module sets free, per layer, what their modules free alone, in BF16
    /// and FP8 (where `layernorm` frees nothing); the norms' and the up-projections' rebuilt
    /// buffers are held together, the MLP's and the up-projections' one after the other.
    #[test]
    fn module_sets_free_what_their_modules_free() {
        let mut m = Model::preset("deepseek-v3").unwrap();
        m.seq_len = 4096;
        for precision in [Precision::Bf16, Precision::Fp8] {
            let d = ActDims::new(&m, 1, 2).precision(precision);
            let kept = |r| layer_activation_bytes_for(d, r, true, Attention::Flash);
            let freed = |r| kept(Recompute::None) - kept(r);
            let norms = freed(Recompute::NormAct);
            assert_eq!(norms, norm_recompute_bytes(d, true));
            assert_eq!(
                freed(Recompute::NormMlaUpProj),
                norms + freed(Recompute::MlaUpProj)
            );
            assert_eq!(
                freed(Recompute::MlaUpProjMlp),
                freed(Recompute::MlaUpProj) + freed(Recompute::Mlp)
            );
            let working = |r| recompute_working_bytes_for(d, r, true, Attention::Flash);
            assert_eq!(
                working(Recompute::NormMlaUpProj),
                working(Recompute::NormAct) + working(Recompute::MlaUpProj)
            );
            assert_eq!(
                working(Recompute::MlaUpProjMlp),
                working(Recompute::MlaUpProj).max(working(Recompute::Mlp))
            );
        }
    }

    #[test]
    fn korthikanti_table2_exactly() {
        // GPT-3 175B and the 1T model of the paper's Table 3 with t = 8; and t = 1.
        for (s, b, h, a) in [
            (2048, 1, 12288, 96),
            (2048, 1, 25600, 160),
            (2048, 4, 4096, 32),
        ] {
            for t in [1, 2, 8] {
                let d = ActDims::gpt(s, b, h, a, t);
                for r in Recompute::ALL {
                    for sp in [false, true] {
                        assert_eq!(
                            layer_activation_bytes(d, r, sp) as f64,
                            table2(d, r, sp),
                            "{d:?} {r} sp={sp}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn gpt3_175b_per_layer_numbers() {
        // Korthikanti et al. Sec. 4: 175B (s=2048, h=12288, a=96), t=8, b=1, no recompute, no
        // sequence parallelism: sbh (10 + 24/8 + 5*96*2048/(12288*8)) = sbh * 23 bytes.
        let d = ActDims::gpt(2048, 1, 12288, 96, 8);
        assert_eq!(
            layer_activation_bytes(d, Recompute::None, false),
            2048 * 12288 * 23
        );
        // Sequence parallelism and selective recompute: 34 sbh / t.
        assert_eq!(
            layer_activation_bytes(d, Recompute::Selective, true),
            34 * 2048 * 12288 / 8
        );
    }

    #[test]
    fn mixed_precision_adam_is_16_bytes_per_param() {
        assert_eq!(model_state_bytes(1_000, 8, Zero::Off), 16_000);
        assert_eq!(model_state_bytes(1_000, 8, Zero::Optimizer), 4_000 + 1_500);
        assert_eq!(
            model_state_bytes(1_000, 8, Zero::Gradients),
            2_000 + 250 + 1_500
        );
        assert_eq!(model_state_bytes(1_000, 8, Zero::Full), 250 + 250 + 1_500);
        // Low-precision weight copies are sharded with the weights under ZeRO-3 only.
        let fp8 = StateBytes {
            extra_weight: 2,
            ..StateBytes::ADAM
        };
        assert_eq!(model_state_parts(1_000, 8, Zero::Full, fp8).0, 500);
        assert_eq!(model_state_parts(1_000, 8, Zero::Gradients, fp8).0, 4_000);
        // Megatron-Core's precision-aware optimizer with its defaults: 10 bytes of state.
        let aware = StateBytes {
            optimizer: 10,
            ..fp8
        };
        assert_eq!(model_state_parts(1_000, 8, Zero::Optimizer, aware).2, 1_250);
    }

    #[test]
    fn overheads_budget_is_the_exact_inverse_of_reserved() {
        let o = Overheads::default();
        for cap in [0u64, 1 << 30, 80 << 30, 85_899_345_920, 141_000_000_000] {
            let b = o.tensor_budget_bytes(cap);
            if b > 0 {
                assert!(o.reserved_bytes(b) <= cap);
            }
            assert!(o.reserved_bytes(b + 1) > cap, "cap {cap}");
        }
        assert_eq!(Overheads::NONE.tensor_budget_bytes(1000), 1000);
        assert_eq!(Overheads::NONE.reserved_bytes(1000), 1000);
    }

    #[test]
    fn breakdown_adds_up_to_what_the_gpu_holds() {
        let o = Overheads::default();
        let b = MemoryBreakdown::new(
            1_000_000,
            4,
            Zero::Optimizer,
            StateBytes::ADAM,
            40_000_000,
            &o,
        );
        assert_eq!(b.weights, 2_000_000);
        assert_eq!(b.optimizer, 3_000_000);
        assert_eq!(
            b.activations,
            40_000_000 - 2_000_000 - 2_000_000 - 3_000_000
        );
        assert_eq!(b.total(), o.reserved_bytes(40_000_000));
    }

    #[test]
    fn flash_attention_stores_no_scores() {
        let d = ActDims::gpt(2048, 1, 12288, 96, 8);
        let lse = 4 * 96 * 2048 / 8;
        for sp in [false, true] {
            let sel = layer_activation_bytes(d, Recompute::Selective, sp);
            for r in [Recompute::None, Recompute::Selective] {
                assert_eq!(
                    layer_activation_bytes_for(d, r, sp, Attention::Flash),
                    sel + lse
                );
            }
            assert_eq!(
                layer_activation_bytes_for(d, Recompute::Full, sp, Attention::Flash),
                layer_activation_bytes(d, Recompute::Full, sp)
            );
            for r in Recompute::ALL {
                assert_eq!(
                    layer_activation_bytes_for(d, r, sp, Attention::Unfused),
                    layer_activation_bytes(d, r, sp)
                );
            }
        }
    }

    #[test]
    fn flash_layer_is_counted_tensor_by_tensor() {
        // Llama 3 8B (h 4096, 32 heads, 8 KV heads of 128, SwiGLU f 14336 = 3.5 h), t = 2 with
        // sequence parallelism, s = 8192, b = 1: per token / t, in units of h bytes,
        // norms' inputs 4, their outputs 4 (BF16) or 2 (FP8), masks 2, Q K V 2 (1 + 1/4 + 1/4)
        // = 3, the attention output 2, in FP8 the projection's cast 1, SwiGLU's input 4 x 3.5
        // = 14, the down projection's input 2 x 3.5 = 7 (BF16) or 3.5 (FP8); plus the
        // log-sum-exp, 4 bytes x 32 heads.
        let m = Model::preset("llama3-8b").unwrap();
        // Counted here with dropout masks (the preset, trained without dropout, keeps none:
        // below).
        let d = ActDims {
            s: 8192,
            dropout: true,
            ..ActDims::new(&m, 1, 2)
        };
        let sbh_t = 8192 * 4096 / 2;
        let lse = 4 * 32 * 8192 / 2;
        let bf16 = d;
        let fp8 = d.precision(Precision::Fp8);
        assert_eq!(flash_layer_bytes(bf16, true), 36 * sbh_t + lse);
        assert_eq!(flash_layer_bytes(fp8, true), 63 * sbh_t / 2 + lse);
        // Without sequence parallelism the norms' tensors and the masks are whole.
        assert_eq!(
            flash_layer_bytes(bf16, false),
            10 * 2 * sbh_t + 26 * sbh_t + lse
        );
        // Llama 3 as trained, without dropout: no masks, 2 sbh/t less, nor the embedding's.
        let no_dropout = ActDims {
            dropout: false,
            ..d
        };
        assert!(!ActDims::new(&m, 1, 2).dropout);
        assert_eq!(flash_layer_bytes(no_dropout, true), 34 * sbh_t + lse);
        assert_eq!(embedding_activation_bytes(no_dropout, true), 0);
        assert_eq!(embedding_activation_bytes(d, true), sbh_t);
        // GPT-3 in FP8: 34 - 2 (norm outputs) + 1 (projection cast) - 4 (fc2 input) = 29.
        let gpt = ActDims::gpt(2048, 1, 12288, 96, 8).precision(Precision::Fp8);
        assert_eq!(
            flash_layer_bytes(gpt, true),
            29 * 2048 * 12288 / 8 + 4 * 96 * 2048 / 8
        );
        // The layernorm recompute module saves the BF16 norm outputs, nothing in FP8.
        let kept = |d, r| layer_activation_bytes_for(d, r, true, Attention::Flash);
        assert_eq!(
            kept(bf16, Recompute::Selective) - kept(bf16, Recompute::NormAct),
            4 * sbh_t
        );
        assert_eq!(
            kept(fp8, Recompute::Selective),
            kept(fp8, Recompute::NormAct)
        );
        // The MLP intermediates a MoE layer replaces: SwiGLU's input and the down projection's.
        assert_eq!(mlp_intermediate_bytes(bf16, Attention::Flash), 21 * sbh_t);
        assert_eq!(mlp_intermediate_bytes(bf16, Attention::Unfused), 16 * sbh_t);
    }
}
