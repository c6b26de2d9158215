//! What every backend computes: the model, its deterministic weights and data, the loss and the
//! optimizer. The CPU and CUDA backends implement exactly this; tests compare them against a
//! run of the micro-batches one after another on one device.
//!
//! # The model (a GPT-like decoder without normalisation or biases)
//!
//! Notation: `T = micro_batch * seq` tokens per micro-batch, hidden `h`, `n` attention heads of
//! size `d = h / n`, MLP width `f`, vocabulary `V`. Matrices are row-major; `X · W` with `X` of
//! `[T, h]` tokens-by-features.
//!
//! * **Embedding** (stage 0 only): token ids `ids[t]` (see [`token_ids`]) select rows of the
//!   table `E [V, h]`: `x0[t] = E[ids[t]]`.
//! * **Transformer layer** `l`, input `x [T, h]`:
//!   - `qkv = x · Wqkv` with `Wqkv [h, 3h]`; columns `0..h` are q, `h..2h` k, `2h..3h` v; head
//!     `j` uses columns `j*d .. (j+1)*d` of each;
//!   - per sequence of the micro-batch and per head: `S = q kᵀ / sqrt(d)` with a causal mask
//!     (position `i` sees `0..=i`), `P = softmax(S)` row-wise, `ctx = P v`;
//!   - `x1 = x + ctx · Wo` with `Wo [h, h]`;
//!   - `u = x1 · W1` with `W1 [h, f]`; `g = gelu(u)` (tanh form:
//!     `0.5 u (1 + tanh(sqrt(2/π) (u + 0.044715 u³)))`);
//!   - `y = x1 + g · W2` with `W2 [f, h]`.
//! * **Mixture-of-experts layer** (where the plan's `moe_layer_pattern` has a 1; `E` experts of
//!   width `f_e`, top-`k`; Megatron-Core's default router): the MLP above is replaced by
//!   - router logits `r = x1 · Wr` with `Wr [h, E]` (f32 even under FP8, as Megatron-Core keeps
//!     the router); each token's `k` largest logits (ties to the lower expert index) and their
//!     gates `p = softmax` over those `k` logits (`moe_router_pre_softmax` off);
//!   - each routed expert `e` an MLP `gelu(x W1_e) W2_e` (`W1_e [h, f_e]`, `W2_e [f_e, h]`) on
//!     the tokens routed to it (dropless: no capacity), tokens permuted so each expert's rows
//!     are contiguous (in token order), and un-permuted back: `moe[t] = Σ_j p[t,j] · MLP_e(t,j)(x1[t])`;
//!   - a shared expert `gelu(x1 Ws1) Ws2` on every token when its width is above 0;
//!   - `y = x1 + moe + shared`. No auxiliary loss (Megatron-Core's default coefficient is 0).
//!
//!   With expert parallelism `ep`, rank `q` of an expert-parallel group holds experts
//!   `q·E/ep .. (q+1)·E/ep`; each rank sends every routed row to its expert's rank
//!   (all-to-all), the experts run on what they received (rows by source rank, then token
//!   order), and the outputs go back the same way.
//! * **Context parallelism** `cp`: each sequence is cut into `2·cp` chunks and rank `c` holds
//!   chunks `c` and `2cp−1−c` (Megatron-Core's load-balanced split); every matrix product is
//!   per token and runs on the rank's own tokens; attention runs as a ring: the keys and values
//!   travel round the `cp` ranks and each rank folds every block into its queries' online
//!   softmax (position `i` sees position `t ≤ i` of any block); the backward sends the blocks
//!   round again with their gradients, which arrive back at their owner after `cp` steps.
//! * **Data parallelism** `dp`: data-parallel rank `q` runs micro-batches `q · per_step + k`
//!   of the step ([`replica_microbatch`]); gradients are summed over the data- and
//!   context-parallel replicas before the optimizer step, expert gradients over the replicas
//!   that hold the same experts.
//! * **FP8** (`precision` `fp8`; CPU emulation): every GEMM of a transformer layer (not the
//!   router, embedding or output layer) runs on its operands rounded to FP8 and back
//!   (`crate::cpu::fp8`): `tensorwise` (current scaling, one scale per tensor from its
//!   amax; E4M3 forward, E5M2 gradients, Transformer Engine's hybrid format), `blockwise`
//!   (E4M3 everywhere; 1x128 blocks for activations and gradients, 128x128 for weights). The
//!   weight gradient uses the operands as the forward and backward GEMMs quantised them.
//! * **Output and loss** (last stage only): `logits = y · Wout` with `Wout [h, V]`; the loss of
//!   a micro-batch is the mean over its `T` tokens of the softmax cross-entropy against
//!   [`labels`], divided by the micro-batches per optimizer step and the data-parallel
//!   replicas ([`loss_scale`]; a context-parallel rank adds its own tokens' share), so that
//!   accumulated gradients are those of the mean loss over the mini-batch.
//!
//! # Backward split (zero-bubble schedules)
//! `I` (backward for inputs) computes the gradient with respect to the stage's input and keeps
//! what `W` needs; `W` (backward for weights) computes the weight gradients (`dW = Xᵀ · dY` for
//! every GEMM, the scatter-add into `E` for the embedding) and accumulates them. `B` is `I` then
//! `W`. Recomputation is not modelled by the executor: activations are kept from F to I/W.
//!
//! # Weights and data
//! Every weight is a function of (`seed`, global layer index, matrix) only, never of the
//! partition, so any split of the layers into stages starts from the same model (see
//! [`init_matrix`]). Token ids and labels are functions of (`seed`, micro-batch index within
//! the step, step).
//!
//! # Optimizer
//! Plain SGD, `w -= lr * g`, with `g` the gradient accumulated over the step's micro-batches
//! (synchronous schedules) or over one micro-batch (PipeDream, which updates after every
//! backward). SGD keeps the comparison between pipelined and sequential runs free of the
//! division by small second moments that would amplify rounding differences under Adam.

/// Learning rate used unless the run says otherwise.
pub const DEFAULT_LR: f32 = 1e-2;
/// Seed used unless the run says otherwise.
pub const DEFAULT_SEED: u64 = 0x5EED;

/// The dimensions one stage needs, from the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims {
    pub hidden: usize,
    pub heads: usize,
    pub ffn: usize,
    pub seq: usize,
    pub micro_batch: usize,
    pub vocab: usize,
    /// The experts of the MoE layers (which layers: the plan's `moe_layer_pattern`).
    pub moe: Option<MoeDims>,
    /// Context-parallel ranks a sequence is split over (1: none).
    pub cp: usize,
    /// Data-parallel replicas (1: none); the loss is the mean over all of them.
    pub dp: usize,
}

/// A mixture-of-experts layer's sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeDims {
    pub experts: usize,
    pub topk: usize,
    /// Each routed expert's MLP width.
    pub ffn: usize,
    /// The shared expert's MLP width (0: none).
    pub shared_ffn: usize,
}

impl Dims {
    /// A dense model on one rank (no experts, no context or data parallelism).
    pub fn dense(
        hidden: usize,
        heads: usize,
        ffn: usize,
        seq: usize,
        micro_batch: usize,
        vocab: usize,
    ) -> Dims {
        Dims {
            hidden,
            heads,
            ffn,
            seq,
            micro_batch,
            vocab,
            moe: None,
            cp: 1,
            dp: 1,
        }
    }

    pub fn from_plan(plan: &pplan::plan::plan_file::Plan) -> Dims {
        let m = &plan.model;
        let par = &plan.parallelism;
        Dims {
            hidden: m.hidden_size as usize,
            heads: m.num_attention_heads as usize,
            ffn: m.ffn_hidden_size as usize,
            seq: m.seq_length as usize,
            micro_batch: par.micro_batch as usize,
            vocab: m.vocab_size as usize,
            moe: m.moe.as_ref().map(|e| MoeDims {
                experts: e.num_experts as usize,
                topk: e.moe_router_topk as usize,
                ffn: e.moe_ffn_hidden_size as usize,
                shared_ffn: e.moe_shared_expert_intermediate_size as usize,
            }),
            cp: par.cp.max(1) as usize,
            dp: par.dp.max(1) as usize,
        }
    }
    /// Tokens per micro-batch on one rank: `micro_batch · seq / cp`.
    pub fn tokens(&self) -> usize {
        self.micro_batch * self.local_seq()
    }
    /// Tokens of a whole micro-batch, over its context-parallel ranks: `micro_batch · seq`.
    pub fn full_tokens(&self) -> usize {
        self.micro_batch * self.seq
    }
    /// Positions of a sequence one context-parallel rank holds: `seq / cp`.
    pub fn local_seq(&self) -> usize {
        self.seq / self.cp.max(1)
    }
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }
    /// The same model on one rank: what the sequential reference runs.
    pub fn single_rank(&self) -> Dims {
        Dims {
            cp: 1,
            dp: 1,
            ..*self
        }
    }
}

/// The matrices of the model, for [`init_matrix`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matrix {
    Embedding,
    Qkv,
    Out,
    Mlp1,
    Mlp2,
    Output,
    /// A MoE layer's router `[h, E]`.
    Router,
    /// Routed expert `e`'s first and second MLP matrices `[h, f_e]`, `[f_e, h]`.
    Expert1(u32),
    Expert2(u32),
    /// The shared expert's `[h, f_s]`, `[f_s, h]`.
    Shared1,
    Shared2,
}

impl Matrix {
    fn tag(self) -> u64 {
        match self {
            Matrix::Embedding => 1,
            Matrix::Qkv => 2,
            Matrix::Out => 3,
            Matrix::Mlp1 => 4,
            Matrix::Mlp2 => 5,
            Matrix::Output => 6,
            Matrix::Router => 7,
            Matrix::Shared1 => 8,
            Matrix::Shared2 => 9,
            Matrix::Expert1(e) => 16 + 2 * e as u64,
            Matrix::Expert2(e) => 17 + 2 * e as u64,
        }
    }
    /// (rows, cols) of the matrix; the MoE matrices are empty in a dense model.
    pub fn shape(self, d: &Dims) -> (usize, usize) {
        let moe = d.moe.unwrap_or(MoeDims {
            experts: 0,
            topk: 0,
            ffn: 0,
            shared_ffn: 0,
        });
        match self {
            Matrix::Embedding => (d.vocab, d.hidden),
            Matrix::Qkv => (d.hidden, 3 * d.hidden),
            Matrix::Out => (d.hidden, d.hidden),
            Matrix::Mlp1 => (d.hidden, d.ffn),
            Matrix::Mlp2 => (d.ffn, d.hidden),
            Matrix::Output => (d.hidden, d.vocab),
            Matrix::Router => (d.hidden, moe.experts),
            Matrix::Expert1(_) => (d.hidden, moe.ffn),
            Matrix::Expert2(_) => (moe.ffn, d.hidden),
            Matrix::Shared1 => (d.hidden, moe.shared_ffn),
            Matrix::Shared2 => (moe.shared_ffn, d.hidden),
        }
    }
}

/// SplitMix64: a tiny, well-known generator; good enough for weights and token ids.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [-1, 1).
    pub fn next_signed_unit(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

fn mix(a: u64, b: u64) -> u64 {
    SplitMix64::new(a ^ b.wrapping_mul(0xD6E8_FEB8_6659_FD93)).next_u64()
}

/// Deterministic weights of one matrix, row-major, uniform in `±sqrt(3)/sqrt(rows)·0.5` (a
/// variance of `0.25/rows`, small enough that activations stay bounded without normalisation).
/// `layer` is the global layer index (ignored for the embedding and output matrices).
pub fn init_matrix(seed: u64, layer: u32, m: Matrix, d: &Dims) -> Vec<f32> {
    let (rows, cols) = m.shape(d);
    let mut rng = SplitMix64::new(mix(mix(seed, layer as u64 + 1), m.tag()));
    let scale = 0.5 * (3.0f32).sqrt() / (rows as f32).sqrt();
    (0..rows * cols)
        .map(|_| rng.next_signed_unit() * scale)
        .collect()
}

/// Token ids of micro-batch `mb` of optimizer step `step`, `micro_batch · seq` of them (the
/// whole micro-batch, over its context-parallel ranks), each in `0..V`. With `dp` data-parallel
/// replicas a step has `dp · per_step` micro-batches: replica `r`'s `k`-th is `r · per_step + k`
/// ([`replica_microbatch`]).
pub fn token_ids(seed: u64, step: u32, mb: u32, d: &Dims) -> Vec<u32> {
    let mut rng = SplitMix64::new(mix(mix(seed ^ 0xDA7A, step as u64), mb as u64));
    (0..d.full_tokens())
        .map(|_| (rng.next_u64() % d.vocab as u64) as u32)
        .collect()
}

/// Labels (next-token targets) of micro-batch `mb` of step `step`: the token ids shifted by one
/// within each sequence, the last position wrapping to the first.
pub fn labels(seed: u64, step: u32, mb: u32, d: &Dims) -> Vec<u32> {
    let ids = token_ids(seed, step, mb, d);
    let mut out = vec![0; ids.len()];
    for s in 0..d.micro_batch {
        let row = &ids[s * d.seq..(s + 1) * d.seq];
        for i in 0..d.seq {
            out[s * d.seq + i] = row[(i + 1) % d.seq];
        }
    }
    out
}

/// Which data a micro-batch of the plan's action lists trains on. The runner walks the action
/// lists once per pass (`pass` counts the optimizer_step calls before it); micro-batch `k` of
/// pass `i` is global micro-batch `g = i * microbatches + k`, which is micro-batch
/// `g % per_step` of optimizer step `g / per_step`. For synchronous schedules `per_step ==
/// microbatches`, so this is (step `i`, micro-batch `k`); for PipeDream (`per_step = 1`) and
/// 2BW (`per_step = m`) the lists span several mini-batches. Returns (step, micro-batch) for
/// [`token_ids`] and [`labels`].
pub fn data_index(pass: u32, microbatch: u32, microbatches: u32, per_step: u32) -> (u32, u32) {
    let g = pass as u64 * microbatches as u64 + microbatch as u64;
    let per = per_step.max(1) as u64;
    ((g / per) as u32, (g % per) as u32)
}

/// The micro-batch of a step that data-parallel replica `replica`'s `k`-th micro-batch trains
/// on: `replica · per_step + k`.
pub fn replica_microbatch(replica: u32, k: u32, per_step: u32) -> u32 {
    replica * per_step.max(1) + k
}

/// The factor every token's cross-entropy is multiplied by: `1 / (b · seq · per_step · dp)`,
/// so that the gradients summed over micro-batches and replicas are the mean loss's.
pub fn loss_scale(d: &Dims, per_step: u32) -> f32 {
    1.0 / (d.full_tokens() as f32 * per_step.max(1) as f32 * d.dp.max(1) as f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_depend_on_layer_not_on_partition_and_are_small() {
        let d = Dims::dense(8, 2, 16, 4, 2, 11);
        let a = init_matrix(1, 3, Matrix::Qkv, &d);
        assert_eq!(a, init_matrix(1, 3, Matrix::Qkv, &d));
        assert_ne!(a, init_matrix(1, 4, Matrix::Qkv, &d));
        assert_ne!(a[..8], init_matrix(1, 3, Matrix::Out, &d)[..8]);
        assert_eq!(a.len(), 8 * 24);
        let bound = 0.5 * 3f32.sqrt() / 8f32.sqrt();
        assert!(a.iter().all(|x| x.abs() <= bound));
        let ids = token_ids(1, 0, 5, &d);
        assert!(ids.iter().all(|&t| t < 11));
        let l = labels(1, 0, 5, &d);
        assert_eq!(l[0], ids[1]);
        assert_eq!(l[3], ids[0]);
    }
}
