//! Where Megatron-Core falls back from its fused kernels to eager PyTorch for a model's own
//! features, and what that moves (docs/cost-model.md, "Eager fallbacks"):
//!
//! - YaRN's rotary embedding: Transformer Engine's fused RoPE takes no attention scale, so a
//!   YaRN model whose concentration factor is not 1 (GPT-OSS: 0.1 ln 32 + 1 = 1.35) runs
//!   Megatron-Core's eager `_apply_rotary_pos_emb_bshd` on its queries and keys
//!   (`apply_rotary_pos_emb`, rope_utils.py at core_v0.15.0-0.19.0: "mscale ... is not supported
//!   by TE's fused RoPE. Using unfused implementation."), and Megatron-Bridge turns the fusion
//!   off for every position embedding but plain `rope` (`validate_rope_fusion_compatibility`);
//! - a clamped gated activation: GPT-OSS's gate and up projections are clamped to ±7
//!   (`activation_func_clamp_value`) by two eager `clamp`s and a `cat` in front of the fused
//!   weighted activation (`weighted_bias_quick_geglu_impl`, fused_bias_geglu.py at
//!   core_v0.15.0-0.19.0), unless Transformer Engine's op fuser runs the experts (its
//!   `ClampedSwiGLU` is one kernel).
//!
//! Each is costed as bytes of HBM traffic (the kernels are elementwise), kernels launched, and,
//! for the clamp, the tensor autograd keeps.

use super::stack::{CostModel, Recompute};
use crate::cost::kernel_bytes::{CLAMPED_GLU_BYTES, UNFUSED_ROPE_BYTES};

/// Kernels of Megatron-Core's eager rotary embedding on one of q or k, (forward, backward):
/// forward `t * cos`, the half rotation's `neg` and `cat`, `* sin`, the sum, and the final
/// `cat` with the (empty) unrotated part; backward the two products' gradients, the `neg`'s,
/// the rotation's re-assembly (`cat`) and the sum of the two paths.
pub const UNFUSED_ROPE_KERNELS: (f64, f64) = (6.0, 5.0);

/// Kernels of the eager clamp in front of the fused activation, (forward, backward): forward
/// two `clamp`s and the `cat`; backward the gate's `where(x <= 7)` (a compare and a `where`),
/// the up projection's `where(-7 <= x <= 7)` (two compares, an `and`, a `where`), and the
/// `cat` that re-assembles the two halves' gradients (`chunk`'s backward).
pub const CLAMPED_GLU_KERNELS: (f64, f64) = (3.0, 7.0);

impl<'a> CostModel<'a> {
    /// Whether the layer's rotary embedding runs eagerly: a rotary model with YaRN scaling
    /// (not latent attention, whose rotary part has its own path) on a stack with fused
    /// kernels (Megatron-Core's; torchtitan's is eager anyway, [`EAGER_ROPE_BYTES`]).
    ///
    /// [`EAGER_ROPE_BYTES`]: crate::cost::kernel_bytes::EAGER_ROPE_BYTES
    pub fn unfused_rope(&self) -> bool {
        self.stack.fused_kernels
            && self.model.rotary
            && self.model.mla.is_none()
            && self
                .model
                .arch
                .rope_scaling
                .as_ref()
                .is_some_and(|r| r.rope_type == "yarn" && yarn_concentration(r) != 1.0)
    }

    /// HBM traffic (forward, backward) of the eager rotary embedding on one rank's queries and
    /// keys for one micro-batch ([`UNFUSED_ROPE_BYTES`] an element); zero where it is fused.
    pub fn unfused_rope_bytes(&self) -> (f64, f64) {
        if !self.unfused_rope() {
            return (0.0, 0.0);
        }
        let (b, s, _, a, _, t, d) = self.dims();
        let qk = s * b * (a + self.model.num_kv_heads as f64) * d / t;
        (UNFUSED_ROPE_BYTES.0 * qk, UNFUSED_ROPE_BYTES.1 * qk)
    }

    /// Kernels (forward, backward) of the eager rotary embedding, queries and keys.
    pub fn unfused_rope_kernels(&self) -> (f64, f64) {
        if !self.unfused_rope() {
            return (0.0, 0.0);
        }
        (2.0 * UNFUSED_ROPE_KERNELS.0, 2.0 * UNFUSED_ROPE_KERNELS.1)
    }

    /// Whether the routed experts' activation is clamped eagerly in front of the fused one:
    /// a clamp value ([`Arch::activation_func_clamp_value`]), Megatron-Core's fused activation,
    /// and no op fuser.
    ///
    /// [`Arch::activation_func_clamp_value`]: crate::inputs::arch::Arch::activation_func_clamp_value
    pub fn moe_eager_clamp(&self) -> bool {
        self.model.moe.is_some()
            && self.model.arch.activation_func_clamp_value.is_some()
            && self.stack.fused_kernels
            && !self.stack.te_op_fuser
    }

    /// HBM traffic (forward, backward) of the eager clamp on the busiest rank's routed rows
    /// ([`CLAMPED_GLU_BYTES`] an element of the first expert GEMM's output, `2 f_e / etp` a
    /// row). The `moe_act` module's recomputation runs the forward again
    /// ([`CostModel::moe_layer`](super::CostModel::moe_layer)).
    pub fn moe_clamp_bytes(&self) -> (f64, f64) {
        if !self.moe_eager_clamp() {
            return (0.0, 0.0);
        }
        let elements = self.moe_clamp_elements();
        (
            CLAMPED_GLU_BYTES.0 * elements,
            CLAMPED_GLU_BYTES.1 * elements,
        )
    }

    /// Elements the eager clamp reads on the busiest rank: the first expert GEMM's output,
    /// `2 f_e / etp` a routed row.
    fn moe_clamp_elements(&self) -> f64 {
        let [up, _] = self.moe_expert_gemms();
        self.moe_rank_rows() * up.n
    }

    /// Kernels (forward, backward) of the eager clamp.
    pub fn moe_clamp_kernels(&self) -> (f64, f64) {
        if !self.moe_eager_clamp() {
            return (0.0, 0.0);
        }
        CLAMPED_GLU_KERNELS
    }

    /// Bytes the eager clamp keeps beside what the fused activation keeps, per micro-batch on
    /// the busiest rank: the `clamp`s keep their input, the first expert GEMM's 16-bit output,
    /// while the fused activation keeps the clamped copy (`2 x 2 f_e / etp` bytes a row). None
    /// where the `moe_act` module's checkpoint keeps only its input (`selective-norm-act`) or
    /// the routed part is recomputed whole.
    pub fn moe_clamp_saved_bytes(&self) -> f64 {
        let r = self.layout.recompute;
        if !self.moe_eager_clamp()
            || r.recomputes_moe_act()
            || matches!(r, Recompute::NormMoe | Recompute::Full)
        {
            return 0.0;
        }
        2.0 * self.moe_clamp_elements()
    }
}

/// YaRN's attention scale, Megatron-Core's `_yarn_get_concentration_factor`:
/// `1 + 0.1 ln(factor)` when `mscale` or `mscale_all_dim` is not given, else the ratio of
/// that form at each (DeepSeek-V3: 1.0 / 1.0 = 1); 1 for a factor of 1 or less.
pub fn yarn_concentration(r: &crate::inputs::arch::RopeScaling) -> f64 {
    let m = |scale: f64| {
        if r.factor <= 1.0 {
            1.0
        } else {
            0.1 * scale * r.factor.ln() + 1.0
        }
    };
    match (r.mscale, r.mscale_all_dim) {
        (Some(a), Some(b)) => m(a) / m(b),
        _ => m(1.0),
    }
}
