//! What running the linear layers in a low precision costs beside their GEMMs, recipe by
//! recipe ([`Fp8Recipe`]): the HBM traffic and kernels of casting their operands, the GEMMs'
//! accumulator, and current scaling's amax all-reduces. Sources and figures: docs/cost-model.md,
//! "Low precision" and "FP8 recipes" (Transformer Engine and Megatron-LM at the commits cited
//! there).

use super::fp8_recipe::Fp8Recipe;
use super::stack::CostModel;
use crate::inputs::hardware::Precision;

/// Bytes per element the amax pass of current scaling reads: the BF16 tensor
/// (`nvte_compute_amax`, a kernel of its own before the cast).
pub const AMAX_PASS_BYTES_PER_ELEMENT: f64 = 2.0;

/// Elements one FP32 scale covers with block scaling (`Float8BlockQuantizer`: `kBlockLen`
/// 128, one scale per 1x128 tile of an activation or gradient).
pub const BLOCK_LEN: f64 = 128.0;

/// Bytes of one block scale (FP32).
pub const BLOCK_SCALE_BYTES: f64 = 4.0;

/// Bytes of one amax all-reduce of current scaling (one FP32 value).
pub const AMAX_BYTES: f64 = 4.0;

/// Kernels of one current-scaling cast beyond the cast itself: zeroing the amax, the amax
/// pass and the scale from the amax (`compute_amax_impl`: `zero_amax_kernel` and the amax
/// kernel; `compute_scale_from_amax_kernel`). A norm-fed cast zeroes its amax buffer
/// (`at::zeros`), the norm writes the amax, and the scale and the cast follow: 3 as well,
/// counting the cast the fused norm saved.
const TENSORWISE_EXTRA_KERNELS_PER_CAST: f64 = 3.0;

/// Bytes per element of an NVFP4 cast of an activation or a gradient (`NVFP4BlockScaling`'s
/// default: random Hadamard transform on the column-wise copy; Transformer Engine v2.10
/// `NVFP4Quantizer::quantize_impl`): the amax pass (`nvte_hadamard_transform_amax`, the
/// row-wise amax and the column-wise one after the transform) reads the BF16 tensor, the
/// row-wise cast (`nvte_quantize_v2`) reads it again and writes 4 bits and an E4M3 scale per
/// 16 elements, the column-wise cast fused with the transform
/// (`nvte_hadamard_transform_cast_fusion_columnwise`) the same: `3 x 2 + 2 (1/2 + 1/16)`.
pub const NVFP4_CAST_BYTES_PER_ELEMENT: f64 = 3.0 * 2.0 + 2.0 * (0.5 + 1.0 / 16.0);

/// Kernels of one NVFP4 cast: the amax buffer zeroed, the amax pass, the row-wise cast and the
/// column-wise transform and cast.
const NVFP4_KERNELS_PER_CAST: f64 = 4.0;

impl CostModel<'_> {
    /// Whether the linear layers run FP8 with `recipe` (precision `fp8`).
    fn fp8_with(&self, recipe: Fp8Recipe) -> bool {
        self.stack.precision == Precision::Fp8 && self.stack.fp8_recipe == recipe
    }

    /// Elements one rank casts per layer and micro-batch, (forward beside the norms, forward
    /// out of the norms, backward): forward the inputs of the attention projection
    /// (`s b a d / t`) and of MLP-out (`s b f / t`); the inputs of QKV and MLP-in are the two
    /// norms' outputs (`s b h`, `/t` with sequence parallelism); backward the output gradients
    /// of all four linear layers.
    pub fn cast_elements(&self) -> (f64, f64, f64) {
        let (b, s, h, a, f, t, dh) = self.dims();
        let kv = self.model.num_kv_heads as f64;
        let mlp_in = if self.model.gated_mlp { 2.0 * f } else { f };
        let sb = s * b;
        let forward = sb * (a * dh / t + f / t);
        let backward = sb * ((a * dh + 2.0 * kv * dh) / t + h + mlp_in / t + h);
        (forward, 2.0 * self.sbh_per_rank(), backward)
    }

    /// HBM traffic (forward, backward) of casting a layer's GEMM operands to the stack's low
    /// precision, on one rank. Every element cast is read in BF16 (2 bytes) and written in the
    /// format as its copies ([`crate::cost::Stack::low_precision_copy_bytes`]: row- and
    /// column-wise for the input- and weight-gradient GEMMs): 4 bytes for FP8/MXFP8, 3 for
    /// NVFP4 and for per-tensor FP8 on a GPU whose FP8 GEMMs take every layout, written once.
    /// The FP8 weights are cast once per step and cached (not counted per micro-batch). Zero
    /// for BF16. By recipe (Transformer Engine's quantizers, docs/cost-model.md):
    /// - delayed (and MXFP8, NVFP4 as pplan costs them): the cast, amax and transpose in one
    ///   kernel; QKV's and MLP-in's inputs come cast out of the fused norm
    ///   (`normalization.cpp`: `FULLY_FUSED` for `Float8Quantizer`);
    /// - tensorwise: each cast beside the norms reads its input once more, 2 bytes, for the
    ///   amax; the norms write BF16 and the amax (`FUSED_NORM_AMAX_FP8`), and their outputs
    ///   are cast by a kernel of their own (no amax pass);
    /// - blockwise: both copies on every GPU, each with an FP32 scale per 128 elements
    ///   (`2 x 4 / 128` bytes an element), and the norms' outputs cast by a kernel of their
    ///   own (`UNFUSED`);
    /// - NVFP4: [`NVFP4_CAST_BYTES_PER_ELEMENT`] for every cast, the norms' outputs included:
    ///   the norms write BF16 and the whole quantization follows (`normalization.cpp`:
    ///   `UNFUSED` for an NVFP4 quantizer with the post-transform amax).
    pub fn low_precision_cast_bytes(&self) -> (f64, f64) {
        if self.stack.precision == Precision::Bf16 {
            return (0.0, 0.0);
        }
        let (forward, norm_fed, backward) = self.cast_elements();
        if self.stack.precision == Precision::Nvfp4 {
            let e = NVFP4_CAST_BYTES_PER_ELEMENT;
            return (e * (forward + norm_fed), e * backward);
        }
        let per_element = self.cast_bytes_per_element();
        if self.fp8_with(Fp8Recipe::Tensorwise) {
            let amax = AMAX_PASS_BYTES_PER_ELEMENT;
            return (
                per_element * forward + amax * forward + per_element * norm_fed,
                per_element * backward + amax * backward,
            );
        }
        if self.fp8_with(Fp8Recipe::Blockwise) {
            return (per_element * (forward + norm_fed), per_element * backward);
        }
        (per_element * forward, per_element * backward)
    }

    /// Bytes one element's cast moves beside any amax pass: read in BF16 (2), written as the
    /// format's copies ([`crate::cost::Stack::low_precision_copy_bytes`]), with block scaling
    /// their FP32 scales (`2 x 4 / 128`).
    fn cast_bytes_per_element(&self) -> f64 {
        let per_element = 2.0 + self.stack.low_precision_copy_bytes(self.hw) as f64;
        if self.fp8_with(Fp8Recipe::Blockwise) {
            per_element + 2.0 * BLOCK_SCALE_BYTES / BLOCK_LEN
        } else {
            per_element
        }
    }

    /// Elements one rank casts per MoE layer and micro-batch for its routed experts' grouped
    /// GEMMs, (forward, backward), on the busiest rank: forward the inputs of the first expert
    /// GEMM (`R h`, `R` the rank's routed rows) and of the second (`R f_e/etp`), backward the
    /// output gradients of the second (`R h`) and of the first (`R (2) f_e/etp`). Transformer
    /// Engine's grouped linear layer quantizes each expert's rows (`tex.split_quantize` of its
    /// inputs in the forward and of its output gradients in the backward, `grouped_linear.py`
    /// at v2.10), the dense layers' casts none of these (a MoE layer's dense part has no MLP).
    pub fn moe_cast_elements(&self) -> (f64, f64) {
        if self.model.moe.is_none() {
            return (0.0, 0.0);
        }
        // The expert GEMMs' widths: the first writes `up.n`, the second reads `down.k`.
        let [up, down] = self.moe_expert_gemms();
        let rows = self.moe_rank_rows();
        let h = self.model.hidden_size as f64;
        (rows * (h + down.k), rows * (h + up.n))
    }

    /// HBM traffic (forward, backward) of casting the routed experts' GEMM operands
    /// ([`CostModel::moe_cast_elements`]) to the stack's low precision, per element as for a
    /// dense layer's casts ([`CostModel::low_precision_cast_bytes`]): read in BF16, written as
    /// the format's copies; current scaling reads each input once more for its amax (none is
    /// fed by a norm), block scaling writes its scales. Zero for BF16.
    pub fn moe_low_precision_cast_bytes(&self) -> (f64, f64) {
        if self.stack.precision == Precision::Bf16 {
            return (0.0, 0.0);
        }
        let per_element = if self.stack.precision == Precision::Nvfp4 {
            NVFP4_CAST_BYTES_PER_ELEMENT
        } else if self.fp8_with(Fp8Recipe::Tensorwise) {
            self.cast_bytes_per_element() + AMAX_PASS_BYTES_PER_ELEMENT
        } else {
            self.cast_bytes_per_element()
        };
        let (forward, backward) = self.moe_cast_elements();
        (per_element * forward, per_element * backward)
    }

    /// Kernels of the routed experts' casts, (forward, input-gradient backward), with
    /// `local_experts` experts on the rank: 2 casts each way. Transformer Engine fuses one
    /// operand's per-expert casts into one kernel for delayed scaling only
    /// (`multi_tensor_quantize_impl`, `nvte_multi_cast_transpose`, `cast.cpp` at v2.10); every
    /// other recipe quantizes expert by expert, current scaling with its 3 more kernels per
    /// cast ([`CostModel::cast_kernels`]). Zero for BF16.
    pub fn moe_cast_kernels(&self, local_experts: f64) -> (f64, f64) {
        if self.stack.precision == Precision::Bf16 {
            return (0.0, 0.0);
        }
        let per_operand = if self.fp8_with(Fp8Recipe::Delayed) {
            1.0
        } else if self.fp8_with(Fp8Recipe::Tensorwise) {
            local_experts * (1.0 + TENSORWISE_EXTRA_KERNELS_PER_CAST)
        } else if self.stack.precision == Precision::Nvfp4 {
            local_experts * NVFP4_KERNELS_PER_CAST
        } else {
            local_experts
        };
        (2.0 * per_operand, 2.0 * per_operand)
    }

    /// How much longer the linear layers' (forward, input- and weight-gradient) GEMMs take for
    /// their accumulator: FP8 GEMMs with the split accumulator (partial sums promoted to FP32
    /// periodically) take `gpu.fp8_split_accumulator_slowdown` (Hopper; absent: 1) times as
    /// long. Per-tensor scales (delayed, tensorwise) run the input- and weight-gradient GEMMs
    /// with it and the forward without (`Float8CurrentScaling`: `fp8_gemm_fprop`
    /// `use_split_accumulator=False`, dgrad and wgrad True; TE 1.x `_2X_ACC_*` for delayed);
    /// block scales run all three with it and their scales applied block by block
    /// (`Float8BlockScaling` asserts the split accumulator for fprop, dgrad and wgrad;
    /// DeepSeek-V3, Sec. 3.3.2: partial sums promoted to FP32 every 128 elements of K):
    /// `gpu.fp8_block_scaling_slowdown` (absent: the split accumulator's) for all three, except
    /// where the GPU's block-scaled tensor cores run them as MXFP8 (Blackwell), which apply
    /// the scales themselves. Other precisions: 1.
    pub fn fp8_gemm_slowdowns(&self) -> (f64, f64) {
        if self.stack.precision != Precision::Fp8 {
            return (1.0, 1.0);
        }
        let split = self.hw.gpu.fp8_split_accumulator_slowdown.unwrap_or(1.0);
        match self.stack.fp8_recipe {
            r @ Fp8Recipe::Blockwise if r.emulated_as_mxfp8(self.hw) => (1.0, 1.0),
            Fp8Recipe::Blockwise => {
                let block = self.hw.gpu.fp8_block_scaling_slowdown.unwrap_or(split);
                (block, block)
            }
            _ => (1.0, split),
        }
    }

    /// Current scaling's amax all-reduces over the tensor-parallel group for one layer and
    /// micro-batch, in line on the compute stream, (forward, backward): with sequence
    /// parallelism every rank must cast with the same scale before the all-gather, so the
    /// column-parallel layers' input quantizers (QKV, MLP-in) reduce their amax in the
    /// forward and the row-parallel layers' output-gradient quantizers (projection,
    /// MLP-out) in the backward (`set_quantizer_amax_reduction_group` in TE's `linear.py`,
    /// `layernorm_linear.py`, `layernorm_mlp.py`; `Float8CurrentScalingQuantizer::quantize_impl`
    /// all-reduces and waits), one FP32 value each; NVFP4 the same
    /// (`_customize_quantizers_nvfp4` in `linear.py` at v2.10). Zero for other recipes,
    /// without sequence parallelism or with t = 1.
    pub fn amax_reduction_s(&self) -> (f64, f64) {
        if !(self.fp8_with(Fp8Recipe::Tensorwise) || self.stack.precision == Precision::Nvfp4)
            || !self.layout.sequence_parallel
            || self.layout.tp <= 1
        {
            return (0.0, 0.0);
        }
        let one = self.tp_all_reduce_s(AMAX_BYTES);
        (2.0 * one, 2.0 * one)
    }

    /// Kernels of one layer's casts, (forward, input-gradient backward): delayed scaling (and
    /// MXFP8) one kernel per cast, 2 forward and 4 backward; current scaling 3 more per cast
    /// (amax zeroed, amax, scale), the norms' 2 outputs cast too, and with sequence
    /// parallelism its 2 amax all-reduces each way; block scaling the norms' 2 casts more;
    /// NVFP4 [`NVFP4_KERNELS_PER_CAST`] for each of 4 casts each way (the norms' outputs
    /// included) and the all-reduces of current scaling.
    pub fn cast_kernels(&self) -> (f64, f64) {
        if self.stack.precision == Precision::Bf16 {
            return (0.0, 0.0);
        }
        let extra = TENSORWISE_EXTRA_KERNELS_PER_CAST;
        let reduce = if self.layout.sequence_parallel && self.layout.tp > 1 {
            2.0
        } else {
            0.0
        };
        if self.stack.precision == Precision::Nvfp4 {
            let k = 4.0 * NVFP4_KERNELS_PER_CAST + reduce;
            return (k, k);
        }
        if self.fp8_with(Fp8Recipe::Tensorwise) {
            return (
                2.0 * (1.0 + extra) + 2.0 * extra + reduce,
                4.0 * (1.0 + extra) + reduce,
            );
        }
        if self.fp8_with(Fp8Recipe::Blockwise) {
            return (4.0, 4.0);
        }
        (2.0, 4.0)
    }
}

#[cfg(test)]
mod tests {
    use crate::cost::fp8_recipe::Fp8Recipe;
    use crate::cost::{CostModel, Layout, Recompute, Stack};
    use crate::inputs::hardware::{Hardware, Precision};
    use crate::inputs::model::Model;

    fn model(m: &Model, hw: &Hardware, recipe: Fp8Recipe, sp: bool) -> (f64, f64, f64, f64) {
        let layout = Layout {
            sequence_parallel: sp,
            recompute: Recompute::None,
            ..Layout::tensor_parallel(4)
        };
        let stack = Stack {
            precision: recipe.precision(),
            fp8_recipe: recipe,
            ..Stack::megatron_core()
        };
        let c = CostModel {
            model: m,
            hw,
            layout,
            stack,
        };
        let (f, b) = c.low_precision_cast_bytes();
        let (af, ab) = c.amax_reduction_s();
        (f, b, af, ab)
    }

    /// Each recipe's cast bytes against a hand count for Llama 3 70B at t = 4, s = 8192.
    #[test]
    fn cast_bytes_by_recipe_against_a_hand_count() {
        let m = Model::preset("llama3-70b").unwrap();
        let h100 = Hardware::bundled("h100-80gb").unwrap();
        let (s, h, f, t) = (8192.0, 8192.0, 28672.0, 4.0);
        let (q, kv) = (8192.0, 1024.0);
        let forward = s * (q / t + f / t);
        let backward = s * ((q + 2.0 * kv) / t + h + 2.0 * f / t + h);
        let norm_fed = 2.0 * s * h / t;
        let (df, db, ..) = model(&m, &h100, Fp8Recipe::Delayed, true);
        assert_eq!((df, db), (4.0 * forward, 4.0 * backward));
        let (tf, tb, af, ab) = model(&m, &h100, Fp8Recipe::Tensorwise, true);
        assert!(
            (tf - df - 2.0 * forward - 4.0 * norm_fed).abs() < 1.0,
            "{tf} {df}"
        );
        assert!((tb - db - 2.0 * backward).abs() < 1.0);
        assert!(af > 0.0 && af == ab);
        let (bf, bb, baf, _) = model(&m, &h100, Fp8Recipe::Blockwise, true);
        let e = 4.0 + 2.0 * 4.0 / 128.0;
        assert!((bf - e * (forward + norm_fed)).abs() < 1.0);
        assert!((bb - e * backward).abs() < 1.0);
        assert_eq!(baf, 0.0);
        // Without sequence parallelism current scaling reduces nothing.
        assert_eq!(model(&m, &h100, Fp8Recipe::Tensorwise, false).2, 0.0);
        // On Blackwell per-tensor casts are written once; block scales keep both copies.
        let b200 = Hardware::bundled("b200").unwrap();
        assert_eq!(model(&m, &b200, Fp8Recipe::Delayed, true).0, 3.0 * forward);
        assert!((model(&m, &b200, Fp8Recipe::Blockwise, true).0 - bf).abs() < 1.0);
    }

    #[test]
    fn split_accumulator_by_recipe_and_gpu() {
        let m = Model::preset("llama3-8b").unwrap();
        let slow = |hw: &Hardware, recipe: Fp8Recipe| {
            CostModel {
                model: &m,
                hw,
                layout: Layout::tensor_parallel(1),
                stack: Stack {
                    precision: recipe.precision(),
                    fp8_recipe: recipe,
                    ..Stack::megatron_core()
                },
            }
            .fp8_gemm_slowdowns()
        };
        let h100 = Hardware::bundled("h100-80gb").unwrap();
        let h200 = Hardware::bundled("h200").unwrap();
        let b200 = Hardware::bundled("b200").unwrap();
        assert_eq!(slow(&h100, Fp8Recipe::Delayed), (1.0, 1.0));
        assert_eq!(slow(&h200, Fp8Recipe::Delayed), (1.0, 1.01));
        assert_eq!(slow(&h200, Fp8Recipe::Tensorwise), (1.0, 1.01));
        // Block scales: their own measured slowdown on all three GEMMs, or the split
        // accumulator's where a profile has none.
        assert_eq!(slow(&h200, Fp8Recipe::Blockwise), (1.2, 1.2));
        let mut h = h200.clone();
        h.gpu.fp8_block_scaling_slowdown = None;
        assert_eq!(slow(&h, Fp8Recipe::Blockwise), (1.01, 1.01));
        assert_eq!(slow(&h100, Fp8Recipe::Mxfp8), (1.0, 1.0));
        // Blackwell runs block scales as MXFP8 even where a profile sets the split
        // accumulator.
        let mut b = b200.clone();
        b.gpu.fp8_split_accumulator_slowdown = Some(1.15);
        assert_eq!(slow(&b, Fp8Recipe::Blockwise), (1.0, 1.0));
        assert_eq!(slow(&b200, Fp8Recipe::Blockwise), (1.0, 1.0));
        let bf16 = CostModel {
            model: &m,
            hw: &h100,
            layout: Layout::tensor_parallel(1),
            stack: Stack {
                precision: Precision::Bf16,
                fp8_recipe: Fp8Recipe::Blockwise,
                ..Stack::megatron_core()
            },
        };
        assert_eq!(bf16.fp8_gemm_slowdowns(), (1.0, 1.0));
        assert_eq!(bf16.low_precision_cast_bytes(), (0.0, 0.0));
        assert_eq!(bf16.cast_kernels(), (0.0, 0.0));
    }
}
