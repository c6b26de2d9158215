//! HBM bytes per element of the memory-bound kernels the cost model counts outside the
//! layer formulas of `compute` (docs/cost-model.md, "Memory-bound kernels"), each with the
//! code it is read off.

/// HBM bytes per logit of Megatron's vocabulary-parallel cross-entropy forward, one PyTorch
/// kernel per step (Megatron-Core `tensor_parallel/cross_entropy.py`; Megatron-LM 2021's
/// `mpu/cross_entropy.py` has the same steps): cast the 16-bit logits to fp32 (read 2, write
/// 4), the max over the vocabulary (read 4), subtract it in place (read 4, write 4), `exp` in
/// place (read 4, write 4), the sum (read 4), divide in place to get the softmax kept for the
/// backward (read 4, write 4): 38.
pub const CROSS_ENTROPY_FORWARD_BYTES: f64 = 6.0 + 4.0 + 8.0 + 8.0 + 4.0 + 8.0;
/// Its backward: scale the saved fp32 softmax by the loss gradient in place (read 4, write 4;
/// the one-hot subtraction touches one element per row) and the cast's backward to the 16-bit
/// logit gradient (read 4, write 2): 14.
pub const CROSS_ENTROPY_BACKWARD_BYTES: f64 = 8.0 + 6.0;

/// How the vocabulary-parallel cross-entropy runs (Megatron-Core `--cross-entropy-loss-fusion`
/// and `--cross-entropy-fusion-impl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum CrossEntropyFusion {
    /// One PyTorch kernel per step (Megatron-Core's default): [`CROSS_ENTROPY_FORWARD_BYTES`],
    /// [`CROSS_ENTROPY_BACKWARD_BYTES`].
    #[default]
    Off,
    /// Megatron-Core's fused form (`--cross-entropy-fusion-impl native`,
    /// `core/fusions/fused_cross_entropy.py`): the same steps in three fused kernels forward,
    /// the cast to fp32 with the max (read 2, write 4), the subtraction, `exp` and sum (read
    /// 4, write 4), the division (read 4, write 4): 22; backward unchanged, 14.
    Native,
    /// Transformer Engine's Triton kernels (`--cross-entropy-fusion-impl te`,
    /// `transformer_engine/pytorch/triton/cross_entropy.py`, TE 2.1 of 2025-02 to the fp32
    /// gradient of 2026-07): forward, an online softmax that reads the 16-bit logits (2) and a
    /// second pass that reads them again and writes the logit gradient over them (2, 2): 6;
    /// backward, the gradient scaled by the loss gradient in place (read 2, write 2): 4.
    Te,
    /// torchtitan's loss under `torch.compile` (`build_cross_entropy_loss` compiles
    /// `cross_entropy_loss` when `training.compile` is on, torchtitan bbb1b61 of 2025-04 on;
    /// the December 2024 code had it turned off, e8977b0): Inductor fuses the fp32 cast,
    /// log-softmax and NLL into a reduction over the 16-bit logits (read 2, and again for the
    /// sum of exponentials: 4) and their gradient into one pointwise kernel (read 2, write
    /// 2: 4); it keeps the 16-bit logits for the backward, not an fp32 copy.
    Inductor,
    /// llm-foundry's MPT loss under Composer (llm-foundry 5e85bd62d): FlashAttention's CUDA
    /// cross-entropy for the loss (`xentropy_cuda_lib`, flash-attn 1.0.9's `CrossEntropyLoss`,
    /// llm-foundry's default `loss_fn: fused_crossentropy`), which keeps the 16-bit logits
    /// and the per-row log-sum-exp (read 2, twice: 4) and writes a new 16-bit gradient
    /// (`inplace_backward=False`: read 2, write 2: 4); and Composer's two training metrics
    /// (`use_train_metrics` default: `LanguageCrossEntropy`, `LanguagePerplexity`), each a
    /// `torch.nn.CrossEntropyLoss` over the same logits after the backward, under no_grad and
    /// autocast, which runs `log_softmax` in fp32: the cast (read 2, write 4), the max and the
    /// sum of exponentials (read 4, twice) and the output (read 4, write 4): 22 each. Forward
    /// 4 + 44 = 48, backward 4, at the rate of PyTorch's softmax kernels (from which the
    /// xentropy kernel is adapted).
    LlmFoundry,
}

impl CrossEntropyFusion {
    pub const EVERY: [CrossEntropyFusion; 5] = [
        Self::Off,
        Self::Native,
        Self::Te,
        Self::Inductor,
        Self::LlmFoundry,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Native => "native",
            Self::Te => "te",
            Self::Inductor => "inductor",
            Self::LlmFoundry => "llm-foundry",
        }
    }

    /// From Megatron-Core's two flags: `--cross-entropy-loss-fusion` (`fused`) and
    /// `--cross-entropy-fusion-impl` (`native` when absent; ignored without the fusion, as
    /// Megatron-Core ignores it). An unknown implementation is refused with the valid ones.
    pub fn from_megatron(fused: bool, implementation: Option<&str>) -> Result<Self, String> {
        let kernels = match implementation {
            None | Some("native") => Self::Native,
            Some("te") => Self::Te,
            Some(other) => {
                return Err(format!(
                    "unknown implementation '{other}' (valid: native, te)"
                ))
            }
        };
        Ok(if fused { kernels } else { Self::Off })
    }

    /// Bytes per logit the loss keeps for its backward: the fp32 softmax (PyTorch's steps and
    /// Megatron-Core's fused form: `exp_logits`, saved in fp32), or, with Transformer Engine's
    /// kernel, the 16-bit logit gradient it writes over the logits in the forward and saves
    /// (`CrossEntropyFunction`, TE 2.1-2.17; TE 2.18 of 2026-08 keeps an fp32 gradient instead,
    /// 4, commit 01bbe3e: no run here is known to have used it).
    /// Inductor's compiled loss and llm-foundry's FlashAttention kernel keep the 16-bit logits, 2.
    pub fn saved_bytes_per_logit(self) -> u64 {
        match self {
            Self::Off | Self::Native => 4,
            Self::Te | Self::Inductor | Self::LlmFoundry => 2,
        }
    }

    /// Bytes per logit the loss holds at its peak, what it keeps for the backward included
    /// (docs/cost-model.md, "Memory per GPU"). `functional`: the unfused loss is PyTorch's
    /// `F.cross_entropy` on an fp32 copy of the logits (torchtitan's `cross_entropy_loss`,
    /// eager kernels), not Megatron's in-place steps; `vocab_parallel`: its logits are split
    /// over tensor-parallel ranks (torchtitan's `loss_parallel`).
    /// - Megatron's steps, unfused or fused (`Off`, `Native`): the fp32 copy beside the
    ///   16-bit logits in the forward (4 + 2); in the backward the gradient is made in place
    ///   of the saved softmax and cast to 16 bits for the output layer (4 + 2): 6.
    /// - PyTorch's `F.cross_entropy(x.float())`: the backward's peak, in
    ///   `log_softmax_backward_data`, holds the saved fp32 log-softmax, NLL's dense fp32
    ///   gradient and the fp32 input gradient (4 + 4 + 4): 12 (the forward's, 16-bit logits,
    ///   fp32 copy and fp32 log-softmax, 2 + 4 + 4 = 10, is lower). Under `loss_parallel`
    ///   (torch/distributed/tensor/parallel/loss.py: `_nll_loss_and_log_softmax_backward`
    ///   computes `(grad_input + exp(x)) * grad_output`) the saved log-softmax, the zeroed
    ///   gradient, `exp(x)` and the sum are held at once: 16.
    /// - Transformer Engine: the gradient written over the logits, in place both ways: 2.
    /// - Inductor, llm-foundry's FlashAttention kernel: the saved 16-bit logits and the 16-bit
    ///   gradient: 4 (Composer's metrics run after the backward, when the layers' activations
    ///   are freed; their fp32 transients are not counted).
    pub fn peak_bytes_per_logit(self, functional: bool, vocab_parallel: bool) -> u64 {
        match self {
            Self::Off if functional && vocab_parallel => 16,
            Self::Off if functional => 12,
            Self::Off | Self::Native => 6,
            Self::Te => 2,
            Self::Inductor | Self::LlmFoundry => 4,
        }
    }

    /// Whether the loss is a PyTorch stack's (torchtitan's compiled loss, llm-foundry's), not
    /// one of Megatron-Core's: only `--stack torchtitan` takes it, and Megatron-LM's arguments
    /// cannot express it.
    pub fn pytorch_only(self) -> bool {
        matches!(self, Self::Inductor | Self::LlmFoundry)
    }

    /// Whether the loss's passes are PyTorch's softmax-family kernels (Megatron's unfused
    /// steps; llm-foundry's, whose FlashAttention kernel is adapted from PyTorch's softmax),
    /// which run at the profile's measured `gpu.cross_entropy_hbm_efficiency`, not a copy's.
    pub fn at_cross_entropy_rate(self) -> bool {
        matches!(self, Self::Off | Self::LlmFoundry)
    }

    /// HBM bytes per logit, (forward, backward).
    pub fn bytes_per_logit(self) -> (f64, f64) {
        match self {
            Self::Off => (CROSS_ENTROPY_FORWARD_BYTES, CROSS_ENTROPY_BACKWARD_BYTES),
            Self::Native => (6.0 + 8.0 + 8.0, CROSS_ENTROPY_BACKWARD_BYTES),
            Self::Te => (2.0 + 4.0, 4.0),
            Self::Inductor => (4.0, 4.0),
            Self::LlmFoundry => (4.0 + 2.0 * 22.0, 4.0),
        }
    }
}

impl std::str::FromStr for CrossEntropyFusion {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::EVERY
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| format!("unknown cross-entropy fusion '{s}' (valid: off, native, te, inductor, llm-foundry)"))
    }
}

/// Bytes per element of torchtitan's eager RMSNorm (`torchtitan/models/norms.py`, `norm_type =
/// "rmsnorm"` in its Llama configs: `(x.float() * rsqrt(x.float().pow(2).mean(-1) + eps))
/// .type_as(x) * weight`), one PyTorch kernel per operation: forward, cast to fp32 (read 2,
/// write 4), square (4, 4), mean (4), normalise (4, 4), cast back (4, 2), weight (2, 2) = 36;
/// backward, by autograd, weight (2, 2) and its gradient (2, 2), cast (2, 4), normalise
/// (4, 4) and its scale's gradient (4, 4), square (4, 4), the sum of the two input
/// gradients (4, 4, 4) and the cast back (4, 2) = 56. The per-row mean and rsqrt are
/// negligible.
pub const EAGER_RMSNORM_BYTES: (f64, f64) = (36.0, 56.0);

/// Bytes per element of one eager LayerNorm, (forward, backward):
/// `torch.nn.functional.layer_norm` in the activations' 16-bit dtype is one kernel forward
/// (read 2, write 2) and two backward (the input gradient reads the output gradient and the
/// input and writes 2; the weight and bias gradients read both again): (4, 10). This is
/// MPT's `low_precision_layernorm` (llm-foundry `LPLayerNorm`, which turns autocast off
/// around it); a LayerNorm left to autocast runs in fp32 and moves about twice as much.
pub const EAGER_LAYERNORM_BYTES: (f64, f64) = (4.0, 10.0);

/// Bytes per element of q and k of torchtitan's eager rotary embedding (`apply_rotary_emb`:
/// `view_as_complex(x.float()) * freqs_cis`, `view_as_real`, `type_as`), each way: cast (read
/// 2, write 4), complex multiply (4, 4), cast back (4, 2).
pub const EAGER_ROPE_BYTES: f64 = 20.0;

/// Bytes per element of q and k of Megatron-Core's eager rotary embedding
/// (`_apply_rotary_pos_emb_bshd`, rope_utils.py at core_v0.15.0-0.19.0), each way. Forward: `t *
/// cos` (read 2, write 2), the half rotation's `neg` on half the elements and `cat` (1 + 1, then
/// 2 + 2), `* sin` (2, 2), the sum (4, 2), the `cat` with the empty unrotated part (2, 2): 24;
/// backward, by autograd: the two products' gradients (2 + 2 each), the `neg`'s (1 + 1), the
/// rotation's `cat` (2 + 2) and the sum of the two paths (4 + 2): 20. The `[s, 1, 1, d]` cos
/// and sin tables are negligible. (Transformer Engine's fused kernel moves 4 each way, which
/// pplan does not count.)
pub const UNFUSED_ROPE_BYTES: (f64, f64) = (24.0, 20.0);

/// Bytes per element of the first expert GEMM's output (gate and up halves) of the eager
/// clamp in front of Megatron-Core's fused clamped activation (`weighted_bias_quick_geglu_impl`,
/// core_v0.15.0-0.19.0: `torch.cat((x_glu.clamp(max=c), x_linear.clamp(-c, c)))`). Forward:
/// each half's `clamp` (read 2, write 2) and the `cat` (2, 2): 8. Backward: the gate's
/// `where(x <= c, g, 0)` (the compare reads 2 and writes a 1-byte mask; the `where` reads the
/// mask and the gradient and writes 2: 8), the up half's `where(-c <= x <= c, g, 0)` (two
/// compares, the `and` of the masks, the `where`: 14), the halves' gradients re-assembled by
/// `chunk`'s backward, a `cat` (2, 2): (8 + 14) / 2 + 4 = 15.
pub const CLAMPED_GLU_BYTES: (f64, f64) = (8.0, 15.0);
