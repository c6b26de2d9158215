//! Context parallelism (`cp` > 1): each sequence split over `cp` ranks, the ranks' K/V
//! chunks passed around a ring (Megatron-Core/Transformer Engine `p2p`, the default) or
//! all-gathered, and what merging a ring's per-step results costs. Formulas and sources:
//! docs/cost-model.md, "Context parallelism".

use super::stack::{AttentionKernel, CostModel, CpComm};
use crate::inputs::Hardware;

impl AttentionKernel {
    /// The kernel's causal (forward, backward) efficiency on `hw` for `seq` query tokens per
    /// sequence and `heads` = micro-batch × query heads on the rank: cuDNN's law
    /// ([`Hardware::attention_efficiency_at`]), FlashAttention-2's
    /// ([`Hardware::attention_fa2_efficiency_at`]) or the Triton kernel's
    /// ([`Hardware::attention_triton_efficiency_at`]); `None` where the profile has no rates for
    /// the kernel.
    pub fn efficiency_at(self, hw: &Hardware, seq: f64, heads: f64) -> Option<(f64, f64)> {
        match self {
            AttentionKernel::Cudnn => Some(hw.attention_efficiency_at(seq, heads)),
            AttentionKernel::Fa2 => hw.attention_fa2_efficiency_at(seq, heads),
            AttentionKernel::Triton => hw.attention_triton_efficiency_at(seq, heads),
        }
    }
}

impl CostModel<'_> {
    /// HBM traffic (forward, backward) of merging the steps of Transformer Engine's ring
    /// attention (`cp_comm` p2p, cp > 1) on one rank, beyond the kernels' own: the ring runs
    /// one attention kernel per step, so forward each of the `cp` steps' outputs is rescaled
    /// into the running output (`flash_attn_fwd_out_correction`: read the step's output and
    /// the running output, write the running output, 16-bit: 6 bytes per output element);
    /// backward each step past the first reads Q, O and dO again (6 bytes per element), and
    /// every step adds its dQ into the running dQ and its dK/dV into the running dK/dV
    /// (6 bytes per element each). Zero for cp = 1 and for the all-gather variant (one
    /// kernel per query chunk over the gathered K/V, nothing to merge).
    pub fn cp_ring_merge_bytes(&self) -> (f64, f64) {
        let cp = self.layout.cp.max(1);
        if cp <= 1 || self.stack.cp_comm != CpComm::P2p {
            return (0.0, 0.0);
        }
        let (b, s, _, a, _, t, dh) = self.dims();
        let q = s * b * a * dh / t;
        let kv = 2.0 * s * b * self.model.num_kv_heads as f64 * dh / t;
        let cp = cp as f64;
        (
            6.0 * cp * q,
            6.0 * (cp - 1.0) * q + 6.0 * cp * q + 6.0 * cp * kv,
        )
    }

    /// Seconds per FLOP (forward, backward) of a rank's attention core, given the causal
    /// kernel's efficiencies at the rank's work. A load-balanced ring (`p2p`, cp > 1; Transformer
    /// Engine's, as Megatron-Core and NeMo run it) does equal work in each of its `cp` steps:
    /// the first causal over the rank's own two chunks, the others non-causal blocks (its
    /// queries against a remote rank's first chunk, or its second chunk against a remote
    /// rank's two), which run at the profile's non-causal efficiencies
    /// ([`Hardware::attention_noncausal_efficiency_at`]) where it has them; otherwise, and
    /// for the all-gather variant and sliding windows, all of it at the causal ones.
    /// FlashAttention-2's ring ([`AttentionKernel::Fa2`]) runs its non-causal blocks at its
    /// causal law: no non-causal FlashAttention-2 law was fitted (the measured ones are 4-11 %
    /// faster, `hardware/measured/h100/torch-kernels-moe.json`). Both times the kernel's softmax
    /// floor at this model's head dimension ([`CostModel::attention_head_dim_factor`]).
    ///
    /// [`Hardware::attention_noncausal_efficiency_at`]: crate::inputs::Hardware::attention_noncausal_efficiency_at
    pub fn attention_s_per_flop(&self, causal: (f64, f64)) -> (f64, f64) {
        let peak = self.hw.gpu.peak_flops_per_s * self.hw.sustained_clock_fraction();
        let cp = self.layout.cp.max(1) as f64;
        let ring = cp > 1.0
            && self.stack.cp_comm == CpComm::P2p
            && self.stack.attention_kernel == AttentionKernel::Cudnn
            && self.model.uniform_window().is_none();
        let seq = self.model.seq_len as f64 / cp;
        let (nf, nb) = match self.hw.attention_noncausal_efficiency_at(seq) {
            Some(n) if ring => n,
            _ => causal,
        };
        let per = |c: f64, n: f64| (1.0 / c + (cp - 1.0) / n) / (cp * peak);
        let (hf, hb) = self.attention_head_dim_factor();
        (per(causal.0, nf) * hf, per(causal.1, nb) * hb)
    }

    /// How much longer the stack's attention kernel takes per FLOP at this model's head
    /// dimension than at the one its laws are fitted at, (forward, backward): cuDNN's per-score
    /// floor ([`Hardware::attention_head_dim_factor`]) at the mean of the query-key and value
    /// head dimensions (multi-head latent attention: 192 and 128); 1 for FlashAttention-2's
    /// and the Triton kernel's laws, which carry no floor.
    ///
    /// [`Hardware::attention_head_dim_factor`]: crate::inputs::Hardware::attention_head_dim_factor
    pub fn attention_head_dim_factor(&self) -> (f64, f64) {
        if self.stack.attention_kernel != AttentionKernel::Cudnn {
            return (1.0, 1.0);
        }
        let d = match &self.model.mla {
            Some(mla) => (mla.qk_head_dim() + mla.v_head_dim) as f64 / 2.0,
            None => self.model.head_dim() as f64,
        };
        self.hw.attention_head_dim_factor(d)
    }

    /// The causal (forward, backward) efficiency of the stack's fused attention kernels for
    /// `seq` query tokens per sequence and `heads` = micro-batch × query heads on the rank
    /// ([`AttentionKernel::efficiency_at`]; the stack flags refuse a kernel on a profile
    /// without its rates, so cuDNN's law stands in only for library callers that build such a
    /// stack).
    pub fn attention_kernel_efficiency_at(&self, seq: f64, heads: f64) -> (f64, f64) {
        self.stack
            .attention_kernel
            .efficiency_at(self.hw, seq, heads)
            .unwrap_or_else(|| self.hw.attention_efficiency_at(seq, heads))
    }

    /// Bytes of one rank's K/V chunk for one layer and micro-batch: K and V of its `s / cp`
    /// tokens for its `g / t` key/value heads, 16-bit.
    pub fn cp_kv_chunk_bytes(&self) -> f64 {
        let (b, s, _, _, _, t, dh) = self.dims();
        2.0 * 2.0 * b * s * self.model.num_kv_heads as f64 * dh / t
    }

    /// Whether the context-parallel ring's K/V exchange hides under the attention blocks it
    /// overlaps, forward and backward (no exposed time in [`CostModel::cp_comm_s`]): where it
    /// cannot, a ring across NVLink domains only adds time to what a smaller cp runs.
    pub fn cp_ring_hidden(&self) -> bool {
        let (fwd, _, bwd, _) = self.cp_comm_s(self.attention_core_s());
        fwd == 0.0 && bwd == 0.0
    }

    /// Context-parallel K/V exchange of one layer and micro-batch on one rank, as
    /// (forward exposed, forward hidden, backward exposed, backward hidden), given the
    /// attention core's forward and backward times `attn` on this rank. Ring (`p2p`,
    /// Megatron-Core/Transformer Engine's default): cp - 1 steps, each passing one K/V chunk
    /// `c` to the next rank while the attention block of the chunk in hand runs (`attn / cp`);
    /// backward passes K/V and their gradients (`2 c`) per step. A step hides `min(comm,
    /// block)`. All-gather: the K/V of the other cp - 1 ranks gathered before the attention
    /// (`(cp - 1) c`, exposed), backward gathered again and the K/V gradients
    /// reduce-scattered. Zero for cp = 1.
    pub fn cp_comm_s(&self, attn: (f64, f64)) -> (f64, f64, f64, f64) {
        let cp = self.layout.cp.max(1);
        if cp <= 1 {
            return (0.0, 0.0, 0.0, 0.0);
        }
        let (bw, lat) = self.cp_link();
        let c = self.cp_kv_chunk_bytes() / bw + lat;
        let steps = (cp - 1) as f64;
        match self.stack.cp_comm {
            CpComm::P2p => {
                let (bf, bb) = (attn.0 / cp as f64, attn.1 / cp as f64);
                let hide = |comm: f64, block: f64| comm.min(block);
                (
                    steps * (c - hide(c, bf)),
                    steps * hide(c, bf),
                    steps * (2.0 * c - hide(2.0 * c, bb)),
                    steps * hide(2.0 * c, bb),
                )
            }
            CpComm::AllGather => (steps * c, 0.0, 2.0 * steps * c, 0.0),
        }
    }
}
