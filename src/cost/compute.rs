//! Compute: how long one transformer layer (and the embedding and output layers) takes on one
//! GPU for one micro-batch: GEMMs with a shape-dependent efficiency, memory-bound kernels from
//! their HBM traffic, the tensor-parallel collectives inside the layer (from
//! [`super::network`]), recomputation, and the optimizer step. Formulas and sources:
//! docs/cost-model.md.

use super::kernel_bytes::{EAGER_LAYERNORM_BYTES, EAGER_RMSNORM_BYTES, EAGER_ROPE_BYTES};
use super::stack::{
    Attention, CostModel, Recompute, Zero, FUSED_GRAD_ACCUMULATION_BYTES_PER_PARAM,
};
use crate::inputs::hardware::{Hardware, Precision};
use crate::inputs::model::Model;

/// Query rows per tile of the fused attention kernels (FlashAttention-2/-3 and cuDNN use
/// 128-row tiles for head dimension 128): the diagonal tiles are computed whole.
const FLASH_BLOCK_ROWS: f64 = 128.0;

/// One GEMM (or a batch of equal GEMMs): `batch` products of (m x k) by (k x n).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gemm {
    pub m: f64,
    pub n: f64,
    pub k: f64,
    pub batch: f64,
}

impl Gemm {
    pub fn flops(&self) -> f64 {
        2.0 * self.m * self.n * self.k * self.batch
    }
    /// The input-gradient GEMM of `Y = X W`: `dX = dY W^T` is (m x n) by (n x k).
    pub fn input_grad(&self) -> Gemm {
        Gemm {
            m: self.m,
            n: self.k,
            k: self.n,
            batch: self.batch,
        }
    }
    /// Split into `parts` equal GEMMs along the rows (the tokens): the same FLOPs at the
    /// efficiency of `m / parts` rows.
    pub fn chunked(&self, parts: f64) -> Gemm {
        Gemm {
            m: self.m / parts,
            batch: self.batch * parts,
            ..*self
        }
    }
    /// The weight-gradient GEMM: `dW = X^T dY` is (k x m) by (m x n).
    pub fn weight_grad(&self) -> Gemm {
        Gemm {
            m: self.k,
            n: self.n,
            k: self.m,
            batch: self.batch,
        }
    }
}

/// Achievable fraction of peak for a GEMM of this shape in a training step:
/// `max * factor * (m/(m+d0)) * (n/(n+d0)) * (k/(k+d0))` with `d0 = gemm_half_dim` and
/// `factor = gemm_training_factor` (the kernel's curve is `max * ...`, measured on its own).
/// Small dimensions leave tensor cores idle (partial tiles, too few tiles to fill the SMs, short
/// K loops that cannot hide the loads); the form is saturating in each dimension.
pub fn gemm_efficiency(hw: &Hardware, g: &Gemm) -> f64 {
    let f = shape_term(hw);
    hw.gpu.gemm_efficiency_max * hw.gemm_training_factor() * f(g.m) * f(g.n) * f(g.k)
}

/// The GEMM kernel's own efficiency, as an isolated benchmark measures it (no training
/// factor): `max * (m/(m+d0)) * (n/(n+d0)) * (k/(k+d0))`.
pub fn gemm_kernel_efficiency(hw: &Hardware, g: &Gemm) -> f64 {
    let f = shape_term(hw);
    hw.gpu.gemm_efficiency_max * f(g.m) * f(g.n) * f(g.k)
}

/// `d -> d/(d + d0)`, the saturating term of one GEMM dimension.
fn shape_term(hw: &Hardware) -> impl Fn(f64) -> f64 {
    let d0 = hw.gpu.gemm_half_dim;
    move |d: f64| d / (d + d0)
}

/// A BF16 GEMM: [`gemm_time_in_s`] on the BF16 peak.
pub fn gemm_time_s(hw: &Hardware, g: &Gemm) -> f64 {
    gemm_time_in_s(hw, g, Precision::Bf16)
}

/// A GEMM in `precision` on that precision's tensor-core peak, with the same shape-dependent
/// efficiency as BF16 (the fraction of peak a GEMM of a given shape reaches is about the same
/// in FP8 and BF16 on Hopper: 81% of the FP8 peak at 8192^3 against 80% of the BF16 peak at
/// the best BF16 shape, docs/cost-model.md). A GPU without that precision runs it in BF16
/// (callers check [`Hardware::peak_flops_per_s_for`] first); never below [`gemm_floor_s`].
pub fn gemm_time_in_s(hw: &Hardware, g: &Gemm, precision: Precision) -> f64 {
    if g.flops() <= 0.0 {
        return 0.0;
    }
    let peak = hw
        .peak_flops_per_s_for(precision)
        .unwrap_or(hw.gpu.peak_flops_per_s)
        * hw.sustained_clock_fraction();
    (g.flops() / (peak * gemm_efficiency(hw, g))).max(gemm_floor_s(hw, g, precision))
}

/// The least time a GEMM takes however few its rows: its operands (in `precision`) read and
/// its BF16 output written once at the HBM rate, plus `gpu.gemm_latency_s` (the prologue and
/// epilogue no other tile overlaps) for each of its `batch` GEMMs; 0 without a latency.
pub fn gemm_floor_s(hw: &Hardware, g: &Gemm, precision: Precision) -> f64 {
    let Some(latency) = hw.gpu.gemm_latency_s else {
        return 0.0;
    };
    let bytes = precision.operand_bytes() * (g.m * g.k + g.k * g.n) + 2.0 * g.m * g.n;
    g.batch * (bytes / hw.hbm_bytes_per_s() + latency)
}

/// Time of one piece of work, split by what bounds it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Part {
    pub gemm_s: f64,
    pub memory_s: f64,
    /// Tensor-parallel communication on the critical path.
    pub tp_comm_s: f64,
    /// Tensor-parallel communication hidden under the GEMMs (`--tp-comm-overlap`): it runs,
    /// but adds no time.
    pub tp_hidden_s: f64,
    /// Context-parallel K/V exchange on the critical path.
    pub cp_comm_s: f64,
    /// Context-parallel exchange hidden under the attention blocks.
    pub cp_hidden_s: f64,
    /// The GPU idle between the part's kernels (`cost::launch`): the gap before each kernel
    /// or, where the host launches them slower, what the launches take beyond the rest.
    pub launch_s: f64,
}

impl Part {
    pub fn total_s(&self) -> f64 {
        self.gemm_s + self.memory_s + self.tp_comm_s + self.cp_comm_s + self.launch_s
    }
    fn add(self, o: Part) -> Part {
        Part {
            gemm_s: self.gemm_s + o.gemm_s,
            memory_s: self.memory_s + o.memory_s,
            tp_comm_s: self.tp_comm_s + o.tp_comm_s,
            tp_hidden_s: self.tp_hidden_s + o.tp_hidden_s,
            cp_comm_s: self.cp_comm_s + o.cp_comm_s,
            cp_hidden_s: self.cp_hidden_s + o.cp_hidden_s,
            launch_s: self.launch_s + o.launch_s,
        }
    }
    /// The two parts run one after the other.
    pub fn plus(self, o: Part) -> Part {
        self.add(o)
    }
    pub fn scale(self, x: f64) -> Part {
        Part {
            gemm_s: self.gemm_s * x,
            memory_s: self.memory_s * x,
            tp_comm_s: self.tp_comm_s * x,
            tp_hidden_s: self.tp_hidden_s * x,
            cp_comm_s: self.cp_comm_s * x,
            cp_hidden_s: self.cp_hidden_s * x,
            launch_s: self.launch_s * x,
        }
    }
}

/// Costs of one block (a transformer layer, or the embedding / output layer) for one
/// micro-batch on one tensor-parallel rank.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BlockCost {
    pub forward: Part,
    /// Input gradients, including any recomputation that precedes them.
    pub backward_input: Part,
    pub backward_weight: Part,
}

impl BlockCost {
    fn add(self, o: BlockCost) -> BlockCost {
        BlockCost {
            forward: self.forward.add(o.forward),
            backward_input: self.backward_input.add(o.backward_input),
            backward_weight: self.backward_weight.add(o.backward_weight),
        }
    }
    pub fn scale(self, x: f64) -> BlockCost {
        BlockCost {
            forward: self.forward.scale(x),
            backward_input: self.backward_input.scale(x),
            backward_weight: self.backward_weight.scale(x),
        }
    }
    pub fn plus(self, o: BlockCost) -> BlockCost {
        self.add(o)
    }
}

/// `(fan_in, fan_out)` of a dense layer's four linear layers on one of `t` tensor-parallel
/// ranks, as Megatron shards them: QKV (queries `heads x head_dim` wide, keys and values
/// `kv_heads x head_dim` each) and the MLP's up projection (twice as wide when gated) by
/// output columns, the attention output and the MLP's down projection by input rows. The one
/// formula [`CostModel::layer_gemms`] and the executor's GEMM sweep both use.
pub fn linear_fans(model: &Model, t: f64) -> [(f64, f64); 4] {
    let h = model.hidden_size as f64;
    let dh = model.head_dim() as f64;
    // Queries are a x d_h wide: h, except where a config sets `head_dim` (Qwen3, Gemma 2).
    let q = model.num_heads as f64 * dh;
    let kv = model.num_kv_heads as f64 * dh;
    let f = model.ffn_hidden_size as f64;
    let up = if model.gated_mlp { 2.0 * f } else { f };
    [(h, (q + 2.0 * kv) / t), (q / t, h), (h, up / t), (f / t, h)]
}

impl CostModel<'_> {
    /// The GEMMs of one layer's forward on one tensor-parallel rank:
    /// QKV, attention scores, attention over values, output projection, MLP in, MLP out.
    pub fn layer_gemms(&self) -> [Gemm; 6] {
        let (b, s, _, a, f, t, dh) = self.dims();
        if let Some(mla) = &self.model.mla {
            return self.mla_layer_gemms(mla, f);
        }
        // With context parallelism a rank's s / cp queries attend to the whole sequence.
        let s_kv = self.model.seq_len as f64;
        let linear = |(k, n): (f64, f64)| Gemm {
            m: b * s,
            n,
            k,
            batch: 1.0,
        };
        let [qkv, proj, up, down] = linear_fans(self.model, t);
        [
            linear(qkv),
            Gemm {
                m: s,
                n: s_kv,
                k: dh,
                batch: b * a / t,
            },
            Gemm {
                m: s,
                n: dh,
                k: s_kv,
                batch: b * a / t,
            },
            linear(proj),
            linear(up),
            linear(down),
        ]
    }

    /// Tensor- times context-parallel ranks: the ranks one micro-batch's layer is spread over.
    pub(super) fn ranks_per_layer(&self) -> f64 {
        (self.layout.tp * self.layout.cp.max(1)) as f64
    }

    /// Forward FLOPs of one layer for the whole micro-batch (all tensor- and
    /// context-parallel ranks).
    pub fn layer_forward_flops(&self) -> f64 {
        self.layer_gemms().iter().map(Gemm::flops).sum::<f64>() * self.ranks_per_layer()
    }

    /// The share of each of [`CostModel::layer_gemms`] that torchtitan's per-op selective
    /// checkpointing recomputes. Its policy counts the layer's linear GEMMs in execution order
    /// — q, k, v, output projection, MLP gate, MLP up (gated MLPs), MLP down — and recomputes
    /// every second one: k (its share of the fused QKV GEMM), the output projection, and the
    /// MLP up projection (half of the fused gate/up GEMM) or, for a plain MLP, the MLP down
    /// projection. Attention is saved.
    pub fn selective_op_shares(&self) -> [f64; 6] {
        let (.., dh) = self.dims();
        let q = self.model.num_heads as f64 * dh;
        let kv = self.model.num_kv_heads as f64 * dh;
        let k_share = kv / (q + 2.0 * kv);
        if self.model.gated_mlp {
            [k_share, 0.0, 0.0, 1.0, 0.5, 0.0]
        } else {
            [k_share, 0.0, 0.0, 1.0, 0.0, 1.0]
        }
    }

    /// Forward FLOPs torchtitan's per-op selective checkpointing recomputes in one layer, all
    /// ranks ([`CostModel::selective_op_shares`]).
    pub fn selective_op_recompute_flops(&self) -> f64 {
        self.selective_op_shares()
            .iter()
            .zip(self.layer_gemms())
            .map(|(share, g)| share * g.flops())
            .sum::<f64>()
            * self.ranks_per_layer()
    }

    /// Forward FLOPs of the attention core (scores and values) of one layer, all ranks.
    pub fn attention_core_flops(&self) -> f64 {
        let g = self.layer_gemms();
        (g[1].flops() + g[2].flops()) * self.ranks_per_layer()
    }

    /// Forward FLOPs of the output (logit) layer for one micro-batch, all ranks.
    pub fn logit_forward_flops(&self) -> f64 {
        let (b, s, h, ..) = self.dims();
        2.0 * b * s * h * self.model.vocab_size as f64 * self.layout.cp.max(1) as f64
    }

    /// Elements of one layer's `s b h` activations on one rank (`/t` with sequence
    /// parallelism): what the norms, residual adds and bias-dropout-adds touch.
    pub(super) fn sbh_per_rank(&self) -> f64 {
        let (b, s, h, _, _, t, _) = self.dims();
        s * b * h
            / if self.layout.sequence_parallel {
                t
            } else {
                1.0
            }
    }

    /// Bytes per element of one norm, (forward, backward): fused, read and write 2 (the
    /// backward also reads the input, 6); eager, [`EAGER_RMSNORM_BYTES`] for RMSNorm and
    /// [`EAGER_LAYERNORM_BYTES`] for LayerNorm ([`Model::rms_norm`]).
    pub(super) fn norm_bytes(&self) -> (f64, f64) {
        if self.stack.fused_kernels {
            (4.0, 6.0)
        } else if self.model.rms_norm {
            EAGER_RMSNORM_BYTES
        } else {
            EAGER_LAYERNORM_BYTES
        }
    }

    /// HBM traffic of one layer's two norm forwards on one rank, as in
    /// [`CostModel::layer_memory_bytes`].
    pub fn norm_forward_bytes(&self) -> f64 {
        2.0 * self.norm_bytes().0 * self.sbh_per_rank()
    }

    /// HBM traffic of the memory-bound kernels of one layer on one rank, (forward, backward),
    /// split into the attention-core part (scales with a s^2 b / t) and the rest.
    /// Fused (Megatron-LM 2021): per layer forward two layer norms (read + write 2 bytes:
    /// 4 sbh each), scale+mask+softmax (4 as^2b/t), attention dropout (read 2, write 2, mask 1:
    /// 5 as^2b/t), two bias+dropout+add (read input and residual, write output and mask:
    /// 7 sbh each; 6 without dropout, no mask), bias+GeLU (4 sbf/t; SwiGLU 6 sbf/t). Backward:
    /// layer norms 6 sbh each, softmax 6 and dropout 5 as^2b/t, bias+dropout+add and the
    /// residual-gradient add 11 sbh each (10 without dropout), GeLU 6 sbf/t (SwiGLU 10 sbf/t). With sequence parallelism the sbh terms are per
    /// rank (/t). Unfused kernels add round trips (docs/cost-model.md).
    pub fn layer_memory_bytes(&self) -> MemoryTraffic {
        let (b, s, h, a, f, t, _) = self.dims();
        let sbh = self.sbh_per_rank();
        let (norm_f, norm_b) = self.norm_bytes();
        let sbf = s * b * f / t;
        let as2b = a * s * s * b / t;
        let gated = self.model.gated_mlp;
        let (attn_f, attn_b) = if self.stack.attention == Attention::Flash {
            // The fused kernel reads Q, K, V and writes O (and the 4-byte log-sum-exp per row);
            // its backward reads Q, K, V, O, dO and writes dQ, dK, dV. No s^2 traffic.
            // With context parallelism the K/V of every rank's chunk pass through.
            let q = 2.0 * s * b * h / t;
            let kv = 2.0
                * s
                * self.layout.cp.max(1) as f64
                * b
                * self.model.num_kv_heads as f64
                * self.model.head_dim() as f64
                / t;
            let lse = 4.0 * s * b * a / t;
            let (ring_f, ring_b) = self.cp_ring_merge_bytes();
            (
                2.0 * q + 2.0 * kv + lse + ring_f,
                3.0 * q + 4.0 * kv + lse + ring_b,
            )
        } else if self.stack.fused_kernels {
            (9.0 * as2b, 11.0 * as2b)
        } else {
            (17.0 * as2b, 19.0 * as2b)
        };
        // A model trained without dropout (`Model::dropout` false) writes and reads no mask:
        // bias+add is 6 sbh forward and 10 backward.
        let mask = if self.model.dropout { 1.0 } else { 0.0 };
        let (rest_f, rest_b) = if self.stack.fused_kernels {
            // YaRN's rotary embedding where it cannot be fused (`cost::eager`).
            let (rope_f, rope_b) = self.unfused_rope_bytes();
            (
                (2.0 * norm_f + 2.0 * (6.0 + mask)) * sbh
                    + if gated { 6.0 } else { 4.0 } * sbf
                    + rope_f,
                (2.0 * norm_b + 2.0 * (10.0 + mask)) * sbh
                    + if gated { 10.0 } else { 6.0 } * sbf
                    + rope_b,
            )
        } else {
            // Eager PyTorch, as torchtitan's Llama code runs it (no biases, no dropout; the
            // unfused attention core is the 17 and 19 as^2b above): per element, the eager
            // RMSNorm EAGER_RMSNORM_BYTES (LayerNorm EAGER_LAYERNORM_BYTES), a rotary
            // embedding on q and k EAGER_ROPE_BYTES each way (none with learned or ALiBi
            // positions), the residual adds 6 (their gradient adds 6), the MLP activation
            // SwiGLU 10 / 18 (GeLU 4 / 6) bytes per element of f.
            let qk = if self.model.rotary {
                s * b * (a + self.model.num_kv_heads as f64) * self.model.head_dim() as f64 / t
            } else {
                0.0
            };
            (
                (2.0 * norm_f + 2.0 * 6.0) * sbh
                    + EAGER_ROPE_BYTES * qk
                    + if gated { 10.0 } else { 4.0 } * sbf,
                (2.0 * norm_b + 2.0 * 6.0) * sbh
                    + EAGER_ROPE_BYTES * qk
                    + if gated { 18.0 } else { 6.0 } * sbf,
            )
        };
        let (cast_f, cast_b) = self.low_precision_cast_bytes();
        MemoryTraffic {
            attention_forward_bytes: attn_f,
            attention_backward_bytes: attn_b,
            other_forward_bytes: rest_f + cast_f,
            other_backward_bytes: rest_b + cast_b,
        }
    }

    /// Forward and backward time of the attention core (scores and values) on one rank.
    /// Unfused: its four forward and backward GEMMs at the shape-dependent GEMM efficiency.
    /// Flash: the kernel does the non-masked part of the `4 b s^2 a d / t` forward FLOPs
    /// (causal: the blocks on and below the diagonal, `(1 + B/s)/2` of them for B = 128-row
    /// blocks) and 2.5 times that backward (the four backward GEMMs plus the recomputed
    /// scores, Dao 2023, Sec. 3.1.2), at the profile's attention efficiencies for this
    /// kernel's work ([`Hardware::attention_efficiency_at`]: query tokens per sequence on the
    /// rank and micro-batch x query heads per rank), a context-parallel ring's non-causal
    /// blocks at theirs ([`CostModel::attention_s_per_flop`]).
    pub fn attention_core_s(&self) -> (f64, f64) {
        let g = self.layer_gemms();
        match self.stack.attention {
            Attention::Unfused => {
                let fwd = gemm_time_s(self.hw, &g[1]) + gemm_time_s(self.hw, &g[2]);
                let bwd: f64 = [g[1], g[2]]
                    .iter()
                    .map(|x| {
                        gemm_time_s(self.hw, &x.input_grad())
                            + gemm_time_s(self.hw, &x.weight_grad())
                    })
                    .sum();
                (fwd, bwd)
            }
            Attention::Flash => {
                let s = self.model.seq_len as f64;
                let mut causal = ((1.0 + FLASH_BLOCK_ROWS / s) / 2.0).min(1.0);
                // A sliding-window layer (GPT-OSS): only the tiles of the band of w keys
                // behind each query, `(w + B) / s` of them.
                if let Some(w) = self.model.uniform_window() {
                    causal = causal.min((w as f64 + FLASH_BLOCK_ROWS) / s);
                }
                let flops = (g[1].flops() + g[2].flops()) * causal;
                // The kernel's work: the rank's query tokens of a sequence (its s / cp with
                // context parallelism) and micro-batch x its query heads.
                let cp = self.layout.cp.max(1) as f64;
                let heads = (self.layout.micro_batch * self.model.num_heads) as f64
                    / self.layout.tp.max(1) as f64;
                let (pf, pb) =
                    self.attention_s_per_flop(self.attention_kernel_efficiency_at(s / cp, heads));
                (flops * pf, 2.5 * flops * pb)
            }
        }
    }

    /// One transformer layer for one micro-batch on one rank.
    pub fn layer(&self) -> BlockCost {
        let hbm = self.hw.hbm_bytes_per_s();
        let gemms = self.layer_gemms();
        let flash = self.stack.attention == Attention::Flash;
        let (attn_gemm, attn_bwd) = self.attention_core_s();
        // The four linear GEMMs run in the stack's precision; the attention core in BF16.
        // Transformer Engine runs FP8 GEMMs with the split accumulator where the recipe asks
        // for it (`CostModel::fp8_gemm_slowdowns`: the input- and weight-gradient GEMMs with
        // per-tensor scales, all three with block scales on Hopper).
        let (fprop_slowdown, grad_slowdown) = self.fp8_gemm_slowdowns();
        let lin_in = |g: &Gemm| gemm_time_in_s(self.hw, g, self.stack.precision);
        let lin = |g: &Gemm| lin_in(g) * fprop_slowdown;
        let lin_grad = |g: &Gemm| lin_in(g) * grad_slowdown;
        // The four linear layers (QKV, projection, MLP-in, MLP-out): forward, input- and
        // weight-gradient GEMM times, as the tensor-parallel overlap runs them.
        let weight_gemms = [gemms[0], gemms[3], gemms[4], gemms[5]];
        let (lin_fwd, lin_dgrad) = self.tp_overlap_gemm_s(
            weight_gemms.map(|g| lin(&g)),
            weight_gemms.map(|g| lin_grad(&g.input_grad())),
            |i, parts| {
                let g = weight_gemms[i].chunked(parts);
                (lin(&g), lin_grad(&g.input_grad()))
            },
        );
        let lin_wgrad = weight_gemms.map(|g| lin_grad(&g.weight_grad()));
        // The attention core (scores and values) in BF16, or the flash kernel.
        let core_fwd: f64 = if flash {
            attn_gemm
        } else {
            gemm_time_s(self.hw, &gemms[1]) + gemm_time_s(self.hw, &gemms[2])
        };
        let fwd_gemm = lin_fwd.iter().sum::<f64>() + core_fwd;
        // In the attention core both operands are activations: all its backward GEMMs are
        // input gradients.
        let core_bwd: f64 = if flash {
            attn_bwd
        } else {
            [1, 2]
                .iter()
                .map(|&i| {
                    gemm_time_s(self.hw, &gemms[i].input_grad())
                        + gemm_time_s(self.hw, &gemms[i].weight_grad())
                })
                .sum()
        };
        let bwd_input_gemm = lin_dgrad.iter().sum::<f64>() + core_bwd;
        let bwd_weight_gemm: f64 = lin_wgrad.iter().sum();
        let mem = self.layer_memory_bytes();
        let ((tp_fwd, tp_fwd_hidden), (tp_bwd, tp_bwd_hidden)) =
            self.tp_comm_s(lin_fwd, lin_dgrad, lin_wgrad);
        // Current scaling's amax all-reduces over the tensor-parallel group, in line.
        let (amax_fwd, amax_bwd) = self.amax_reduction_s();
        let (tp_fwd, tp_bwd) = (tp_fwd + amax_fwd, tp_bwd + amax_bwd);
        let (cp_fwd, cp_fwd_hidden, cp_bwd, cp_bwd_hidden) = self.cp_comm_s((attn_gemm, attn_bwd));
        let forward = Part {
            gemm_s: fwd_gemm,
            memory_s: (mem.attention_forward_bytes + mem.other_forward_bytes) / hbm,
            tp_comm_s: tp_fwd,
            tp_hidden_s: tp_fwd_hidden,
            cp_comm_s: cp_fwd,
            cp_hidden_s: cp_fwd_hidden,
            launch_s: 0.0,
        };
        // Megatron-Core's `layernorm` module: the two norms' forward kernels again.
        let norm_part = || Part {
            memory_s: self.norm_forward_bytes() / hbm,
            ..Part::default()
        };
        // Its `mla_up_proj`: the latent attention's up-projections again (their rotary
        // embedding is an elementwise pass over the queries and keys, left in the GEMMs'
        // shadow).
        let mla_part = || Part {
            gemm_s: self.mla_up_proj_gemms().iter().map(lin).sum(),
            ..Part::default()
        };
        // Its `mlp`: the dense MLP again: its two GEMMs, its activation's forward and, with
        // tensor parallelism, its share of the layer's forward collectives (half of them).
        let mlp_part = || {
            let (b, s, _, _, f, t, _) = self.dims();
            let act = if self.model.gated_mlp { 6.0 } else { 4.0 };
            Part {
                gemm_s: lin(&gemms[4]) + lin(&gemms[5]),
                memory_s: act * s * b * f / t / hbm,
                tp_comm_s: forward.tp_comm_s / 2.0,
                tp_hidden_s: forward.tp_hidden_s / 2.0,
                ..Part::default()
            }
        };
        let recompute = match self.layout.recompute {
            Recompute::None => Part::default(),
            // The attention core again, with its K/V exchange.
            Recompute::Selective => Part {
                gemm_s: attn_gemm,
                memory_s: mem.attention_forward_bytes / hbm,
                tp_comm_s: 0.0,
                tp_hidden_s: 0.0,
                cp_comm_s: cp_fwd,
                cp_hidden_s: cp_fwd_hidden,
                launch_s: 0.0,
            },
            Recompute::Full => forward,
            // torchtitan's per-op policy: the recomputed GEMMs (every second linear one) and
            // every elementwise kernel; attention and tensor-parallel collectives are saved.
            Recompute::SelectiveOp => Part {
                gemm_s: self
                    .selective_op_shares()
                    .iter()
                    .zip(&gemms)
                    .map(|(share, g)| share * lin(g))
                    .sum(),
                memory_s: mem.other_forward_bytes / hbm,
                ..Part::default()
            },
            // Megatron-Core's `layernorm` module: the two norms' forward kernels again (the
            // MoE modules add theirs in `moe_layer`).
            Recompute::NormAct | Recompute::NormMoe => norm_part(),
            Recompute::MlaUpProj => mla_part(),
            Recompute::Mlp => mlp_part(),
            // Two modules: each one's recompute, one after the other.
            // `moe_act` touches only the routed experts (`CostModel::moe_layer`).
            Recompute::NormMlaUpProj | Recompute::NormActMlaUpProj => norm_part().plus(mla_part()),
            Recompute::MlaUpProjMlp => mla_part().plus(mlp_part()),
            // Every second layer recomputed whole: half a forward per layer on average.
            Recompute::SelectiveLayer => Part {
                gemm_s: forward.gemm_s / 2.0,
                memory_s: forward.memory_s / 2.0,
                tp_comm_s: forward.tp_comm_s / 2.0,
                tp_hidden_s: forward.tp_hidden_s / 2.0,
                cp_comm_s: forward.cp_comm_s / 2.0,
                cp_hidden_s: forward.cp_hidden_s / 2.0,
                launch_s: 0.0,
            },
        };
        let params = self.model.params_per_layer() as f64 / self.layout.tp as f64;
        let backward_input = Part {
            gemm_s: bwd_input_gemm,
            memory_s: (mem.attention_backward_bytes + mem.other_backward_bytes) / hbm,
            tp_comm_s: tp_bwd,
            tp_hidden_s: tp_bwd_hidden,
            cp_comm_s: cp_bwd,
            cp_hidden_s: cp_bwd_hidden,
            launch_s: 0.0,
        }
        .add(recompute);
        // Accumulating into the fp32 main gradient.
        let kernels = self.layer_kernels();
        let backward_weight = Part {
            gemm_s: bwd_weight_gemm,
            memory_s: self.weight_grad_accumulation_s(params, bwd_weight_gemm),
            ..Part::default()
        };
        BlockCost {
            forward,
            backward_input,
            backward_weight,
        }
        .floored_launching(kernels, self.layer_captured_kernels(kernels), self.hw)
    }

    /// Accumulating `params` weight gradients of one micro-batch into their fp32 main
    /// gradients after weight-gradient GEMMs that take `gemm_s`: unfused, a kernel of its own
    /// ([`Stack::grad_accumulation_bytes_per_param`](crate::cost::Stack) at
    /// [`Hardware::hbm_bytes_per_s`](crate::inputs::hardware::Hardware)); fused
    /// (`gradient_accumulation_fusion`), the GEMMs' epilogue reads and writes the fp32
    /// gradient ([`FUSED_GRAD_ACCUMULATION_BYTES_PER_PARAM`]), which overlaps their main loops
    /// (the roofline: only what that traffic outlasts the GEMMs shows).
    pub fn weight_grad_accumulation_s(&self, params: f64, gemm_s: f64) -> f64 {
        let hbm = self.hw.hbm_bytes_per_s();
        if self.stack.grad_accumulation_fusion {
            (params * FUSED_GRAD_ACCUMULATION_BYTES_PER_PARAM / hbm - gemm_s).max(0.0)
        } else {
            params * self.stack.grad_accumulation_bytes_per_param / hbm
        }
    }

    /// The input embedding on the first stage: a vocabulary-parallel lookup (read the rows,
    /// write 2 sbh), the all-reduce that combines the t partial lookups, and the embedding
    /// dropout (5 sbh; none without dropout); backward: the dropout's backward (5 sbh), the
    /// scatter-add of the gradient into the embedding rows (read 2 sbh, read-modify-write the
    /// rows 4 sbh), and, every micro-batch, the dense weight gradient of the whole shard
    /// accumulated into the main gradient: PyTorch's lookup backward zero-fills a V/t x h
    /// gradient and the data-parallel wrapper adds it to the fp32 main gradient
    /// ([`Stack::grad_accumulation_bytes_per_param`](crate::cost::Stack) an element; no GEMM
    /// epilogue to fuse it into). The position embedding is an elementwise add (6 sbh).
    pub fn embedding(&self) -> BlockCost {
        let (b, s, h, ..) = self.dims();
        let hbm = self.hw.hbm_bytes_per_s();
        let sbh = s * b * h;
        let tp = self.tp_all_reduce_s(2.0 * sbh);
        // No dropout kernel for a model trained without dropout.
        let dropout = if self.model.dropout { 5.0 } else { 0.0 };
        BlockCost {
            forward: Part {
                gemm_s: 0.0,
                memory_s: (4.0 + 6.0 + dropout) * sbh / hbm,
                tp_comm_s: tp,
                tp_hidden_s: 0.0,
                cp_comm_s: 0.0,
                cp_hidden_s: 0.0,
                launch_s: 0.0,
            },
            backward_input: Part {
                gemm_s: 0.0,
                memory_s: dropout * sbh / hbm,
                tp_comm_s: 0.0,
                tp_hidden_s: 0.0,
                cp_comm_s: 0.0,
                cp_hidden_s: 0.0,
                launch_s: 0.0,
            },
            backward_weight: Part {
                gemm_s: 0.0,
                memory_s: (6.0 * sbh
                    + self.stack.grad_accumulation_bytes_per_param * self.embedding_shard_params())
                    / hbm,
                tp_comm_s: 0.0,
                tp_hidden_s: 0.0,
                cp_comm_s: 0.0,
                cp_hidden_s: 0.0,
                launch_s: 0.0,
            },
        }
    }

    /// Word-embedding parameters one rank of the first stage holds: `V/t x h`.
    pub fn embedding_shard_params(&self) -> f64 {
        self.model.vocab_size as f64 * self.model.hidden_size as f64 / self.layout.tp as f64
    }

    /// The final layer norm, the vocabulary-parallel logit GEMM (b s x V/t x h) and the
    /// cross-entropy on the last stage, whose HBM traffic per logit the stack's
    /// [`CrossEntropyFusion`](super::CrossEntropyFusion) gives; PyTorch's softmax kernels at
    /// [`Hardware::cross_entropy_hbm_bytes_per_s`]. Not recomputed.
    pub fn output_layer(&self) -> BlockCost {
        let (b, s, h, _, _, t, _) = self.dims();
        let hbm = self.hw.hbm_bytes_per_s();
        let v = self.model.vocab_size as f64;
        let logits = Gemm {
            m: b * s,
            n: v / t,
            k: h,
            batch: 1.0,
        };
        let sbh = s * b * h;
        let n_logits = b * s * v / t;
        let (ce_f, ce_b) = self.stack.cross_entropy_fusion.bytes_per_logit();
        let ce_bw = if self.stack.cross_entropy_fusion.at_cross_entropy_rate() {
            self.hw.cross_entropy_hbm_bytes_per_s()
        } else {
            hbm
        };
        BlockCost {
            forward: Part {
                gemm_s: gemm_time_s(self.hw, &logits),
                memory_s: 4.0 * sbh / hbm + ce_f * n_logits / ce_bw,
                tp_comm_s: 0.0,
                tp_hidden_s: 0.0,
                cp_comm_s: 0.0,
                cp_hidden_s: 0.0,
                launch_s: 0.0,
            },
            backward_input: Part {
                gemm_s: gemm_time_s(self.hw, &logits.input_grad()),
                memory_s: 6.0 * sbh / hbm + ce_b * n_logits / ce_bw,
                // The output layer's input is copied into the tensor-parallel region: its
                // gradient is all-reduced.
                tp_comm_s: self.tp_all_reduce_s(2.0 * sbh),
                tp_hidden_s: 0.0,
                cp_comm_s: 0.0,
                cp_hidden_s: 0.0,
                launch_s: 0.0,
            },
            backward_weight: Part {
                gemm_s: gemm_time_s(self.hw, &logits.weight_grad()),
                memory_s: 0.0,
                tp_comm_s: 0.0,
                tp_hidden_s: 0.0,
                cp_comm_s: 0.0,
                cp_hidden_s: 0.0,
                launch_s: 0.0,
            },
        }
    }

    /// The optimizer step over `params` parameters of one rank (memory-bound); ZeRO shards it
    /// over the shard group ([`CostModel::shard_ranks`]).
    pub fn optimizer_s(&self, params: f64) -> f64 {
        let shard = if self.stack.zero.shards_optimizer() {
            self.shard_ranks() as f64
        } else {
            1.0
        };
        params * self.stack.optimizer_bytes_per_param / shard / self.hw.hbm_bytes_per_s()
    }
}

/// What sharded data parallelism (ZeRO-2/3) adds to one stage's actions for one micro-batch:
/// the exposed parts go on the critical path, the hidden parts run on the data-parallel
/// stream under the layers' compute.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ShardedExposure {
    pub forward_exposed_s: f64,
    pub forward_hidden_s: f64,
    /// Before and between the input-gradient computations (all-gathers, stalls).
    pub backward_input_exposed_s: f64,
    /// The last layer's gradient reduce-scatter, after the weight gradients.
    pub backward_weight_exposed_s: f64,
    pub backward_hidden_s: f64,
}

/// Two-stage flow shop of `n` equal layers, communication `c` per layer on its own stream
/// ahead of (or, for `after`, behind) compute `g` per layer, the stream running at most one
/// layer ahead (FSDP2's prefetch): makespan `c + (n - 1) max(c, g) + g`. Returns (exposed,
/// hidden) communication.
pub(crate) fn flow_shop(n: f64, c: f64, g: f64) -> (f64, f64) {
    if n <= 0.0 || c <= 0.0 {
        return (0.0, 0.0);
    }
    let makespan = c + (n - 1.0) * c.max(g) + g;
    let exposed = (makespan - n * g).max(0.0);
    (exposed, (n * c - exposed).max(0.0))
}

/// [`ShardedExposure`] of a stage of `n` layers whose forward, input- and weight-gradient
/// compute per micro-batch are `f`, `i`, `w`, with per-layer all-gather `ag` and
/// reduce-scatter `rs` ([`CostModel::sharded_layer_comm_s`]):
/// - ZeRO-3 forward: each layer's parameters gathered one layer ahead of its compute;
/// - ZeRO-3 backward: gathered again (when `reshard` after forward) before each layer's
///   gradients, and the gradients reduce-scattered after them, `ag + rs` per layer on the
///   stream beside `(i + w) / n`; without resharding only `rs`;
/// - ZeRO-2: the reduce-scatter only.
///
/// The first gather waits in full, the last reduce-scatter is exposed after the last weight
/// gradient; between them the stream hides what the compute covers.
pub fn sharded_exposure(
    zero: Zero,
    reshard: bool,
    n: f64,
    (f, i, w): (f64, f64, f64),
    (ag, rs): (f64, f64),
) -> ShardedExposure {
    if !zero.shards_gradients() || n <= 0.0 {
        return ShardedExposure::default();
    }
    let (forward_exposed_s, forward_hidden_s) = if zero == Zero::Full {
        flow_shop(n, ag, f / n)
    } else {
        (0.0, 0.0)
    };
    let gather = if zero == Zero::Full && reshard {
        ag
    } else {
        0.0
    };
    let (exposed, hidden) = flow_shop(n, gather + rs, (i + w) / n);
    // The last layer's reduce-scatter trails the last weight gradient; the rest stalls the
    // input gradients.
    let trailing = rs.min(exposed);
    ShardedExposure {
        forward_exposed_s,
        forward_hidden_s,
        backward_input_exposed_s: exposed - trailing,
        backward_weight_exposed_s: trailing,
        backward_hidden_s: hidden,
    }
}

/// HBM traffic of one layer's memory-bound kernels on one rank.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryTraffic {
    pub attention_forward_bytes: f64,
    pub attention_backward_bytes: f64,
    pub other_forward_bytes: f64,
    pub other_backward_bytes: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::stack::{Layout, Stack};
    use crate::inputs::model::Model;

    fn cm<'a>(m: &'a Model, hw: &'a Hardware, tp: u64) -> CostModel<'a> {
        CostModel {
            model: m,
            hw,
            layout: Layout {
                recompute: Recompute::Full,
                ..Layout::tensor_parallel(tp)
            },
            stack: Stack::default(),
        }
    }

    #[test]
    fn layer_flops_are_megatrons_24bsh2_plus_4bs2h() {
        let hw = Hardware::bundled("a100-80gb").unwrap();
        for name in ["gpt-1.7b", "gpt-1t"] {
            let m = Model::preset(name).unwrap();
            for t in [1, 8] {
                let c = cm(&m, &hw, t);
                let (s, h) = (m.seq_len as f64, m.hidden_size as f64);
                let want = 24.0 * s * h * h + 4.0 * s * s * h;
                assert!((c.layer_forward_flops() / want - 1.0).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn efficiency_grows_with_shape_and_stays_below_max() {
        let hw = Hardware::bundled("a100-80gb").unwrap();
        let small = Gemm {
            m: 512.0,
            n: 512.0,
            k: 512.0,
            batch: 1.0,
        };
        let big = Gemm {
            m: 8192.0,
            n: 8192.0,
            k: 8192.0,
            batch: 1.0,
        };
        let (es, eb) = (gemm_efficiency(&hw, &small), gemm_efficiency(&hw, &big));
        assert!(es < eb && eb < hw.gpu.gemm_efficiency_max);
    }

    fn with_stack<'a>(
        m: &'a Model,
        hw: &'a Hardware,
        tp: u64,
        b: u64,
        stack: Stack,
    ) -> CostModel<'a> {
        let mut c = cm(m, hw, tp);
        c.layout.micro_batch = b;
        c.layout.recompute = Recompute::None;
        c.stack = stack;
        c
    }

    #[test]
    fn eager_kernels_move_what_torchtitans_llama_code_moves() {
        // Llama 3 8B, t 2, b 1, no sequence parallelism, BF16: per token h 4096, q and k
        // 32 + 8 heads of 128, f 14336 / 2 per rank.
        let hw = Hardware::bundled("a100-80gb").unwrap();
        let m = Model::preset("llama3-8b").unwrap();
        let eager = Stack {
            fused_kernels: false,
            attention: Attention::Flash,
            ..Stack::default()
        };
        let c = with_stack(&m, &hw, 2, 1, eager);
        let s = m.seq_len as f64;
        let (sbh, qk, sbf) = (s * 4096.0, s * 40.0 * 128.0 / 2.0, s * 14336.0 / 2.0);
        // Two RMSNorms 36 each, two residual adds 6, RoPE 20 on q and k, SwiGLU 10.
        let fwd = (2.0 * 36.0 + 12.0) * sbh + 20.0 * qk + 10.0 * sbf;
        // Their backwards: 56 per norm, 6 per gradient add, 20, 18.
        let bwd = (2.0 * 56.0 + 12.0) * sbh + 20.0 * qk + 18.0 * sbf;
        let t = c.layer_memory_bytes();
        assert!((t.other_forward_bytes / fwd - 1.0).abs() < 1e-12);
        assert!((t.other_backward_bytes / bwd - 1.0).abs() < 1e-12);
        // The same dimensions with LayerNorm and learned positions (MPT, GPT-2): one
        // LayerNorm kernel 4 / 10 bytes, no rotary embedding.
        let mut mpt = m.clone();
        mpt.rms_norm = false;
        mpt.rotary = false;
        let t = with_stack(&mpt, &hw, 2, 1, eager).layer_memory_bytes();
        let fwd = (2.0 * 4.0 + 12.0) * sbh + 10.0 * sbf;
        let bwd = (2.0 * 10.0 + 12.0) * sbh + 18.0 * sbf;
        assert!((t.other_forward_bytes / fwd - 1.0).abs() < 1e-12);
        assert!((t.other_backward_bytes / bwd - 1.0).abs() < 1e-12);
    }

    #[test]
    fn cross_entropy_moves_38_bytes_forward_and_14_backward_per_logit() {
        let hw = Hardware::bundled("h100-80gb").unwrap();
        let m = Model::preset("llama3-8b").unwrap();
        let c = with_stack(&m, &hw, 2, 1, Stack::default());
        let o = c.output_layer();
        let (s, h, v) = (m.seq_len as f64, m.hidden_size as f64, m.vocab_size as f64);
        let logits = s * v / 2.0;
        // The norm's bytes at the memory-bound rate, the loss's at its kernels' measured one.
        let (hbm, ce) = (hw.hbm_bytes_per_s(), hw.cross_entropy_hbm_bytes_per_s());
        assert!(ce < hbm);
        let time = |norm: f64, loss: f64| norm * s * h / hbm + loss * logits / ce;
        assert!((o.forward.memory_s / time(4.0, 38.0) - 1.0).abs() < 1e-12);
        assert!((o.backward_input.memory_s / time(6.0, 14.0) - 1.0).abs() < 1e-12);
    }

    #[test]
    fn fused_gradient_accumulation_costs_only_where_its_traffic_outlasts_the_gemms() {
        let hw = Hardware::bundled("h100-80gb").unwrap();
        let m = Model::preset("gpt3-175b").unwrap();
        let fused = Stack {
            grad_accumulation_fusion: true,
            ..Stack::default()
        };
        let params = m.params_per_layer() as f64 / 8.0;
        let hbm = hw.hbm_bytes_per_s();
        // 2048 tokens: the GEMMs' 2 x 2048 FLOPs per fp32 element read and written beat HBM
        // (BF16 ridge about 330 FLOP/byte), so the epilogue is hidden.
        let big = with_stack(&m, &hw, 8, 1, fused).layer().backward_weight;
        assert_eq!(big.memory_s, 0.0);
        let unfused = with_stack(&m, &hw, 8, 1, Stack::default())
            .layer()
            .backward_weight;
        assert!((unfused.memory_s * hbm / params - 12.0).abs() < 1e-9);
        assert_eq!(big.gemm_s, unfused.gemm_s);
        // 16 tokens: the 8 bytes per parameter bound the kernel.
        let mut tiny_model = m.clone();
        tiny_model.seq_len = 16;
        let tiny = with_stack(&tiny_model, &hw, 8, 1, fused)
            .layer()
            .backward_weight;
        assert!((tiny.gemm_s + tiny.memory_s - 8.0 * params / hbm).abs() < 1e-12);
    }

    #[test]
    fn fp8_gradient_gemms_pay_the_split_accumulator_on_hopper_only() {
        let m = Model::preset("llama3-70b").unwrap();
        let fp8 = Stack {
            precision: Precision::Fp8,
            ..Stack::default()
        };
        for (name, slowdown) in [("h200", 1.01), ("b200", 1.0)] {
            let hw = Hardware::bundled(name).unwrap();
            let c = with_stack(&m, &hw, 8, 1, fp8);
            let l = c.layer();
            let lin: f64 = [0, 3, 4, 5]
                .iter()
                .map(|&i| gemm_time_in_s(&hw, &c.layer_gemms()[i].weight_grad(), Precision::Fp8))
                .sum();
            assert!(
                (l.backward_weight.gemm_s / lin - slowdown).abs() < 1e-9,
                "{name}"
            );
        }
    }
}
