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
//! * **Output and loss** (last stage only): `logits = y · Wout` with `Wout [h, V]`; the loss of
//!   a micro-batch is the mean over its `T` tokens of the softmax cross-entropy against
//!   [`labels`], divided by the micro-batches per optimizer step, so that accumulated gradients
//!   are those of the mean loss over the mini-batch.
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
}

impl Dims {
    pub fn from_plan(plan: &pplan::plan::plan_file::Plan) -> Dims {
        let m = &plan.model;
        Dims {
            hidden: m.hidden_size as usize,
            heads: m.num_attention_heads as usize,
            ffn: m.ffn_hidden_size as usize,
            seq: m.seq_length as usize,
            micro_batch: plan.parallelism.micro_batch as usize,
            vocab: m.vocab_size as usize,
        }
    }
    /// Tokens per micro-batch.
    pub fn tokens(&self) -> usize {
        self.micro_batch * self.seq
    }
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
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
        }
    }
    /// (rows, cols) of the matrix.
    pub fn shape(self, d: &Dims) -> (usize, usize) {
        match self {
            Matrix::Embedding => (d.vocab, d.hidden),
            Matrix::Qkv => (d.hidden, 3 * d.hidden),
            Matrix::Out => (d.hidden, d.hidden),
            Matrix::Mlp1 => (d.hidden, d.ffn),
            Matrix::Mlp2 => (d.ffn, d.hidden),
            Matrix::Output => (d.hidden, d.vocab),
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

/// Token ids of micro-batch `mb` of optimizer step `step`, `T` of them, each in `0..V`.
pub fn token_ids(seed: u64, step: u32, mb: u32, d: &Dims) -> Vec<u32> {
    let mut rng = SplitMix64::new(mix(mix(seed ^ 0xDA7A, step as u64), mb as u64));
    (0..d.tokens())
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

/// The factor every token's cross-entropy is multiplied by: `1 / (T * per_step)`.
pub fn loss_scale(d: &Dims, per_step: u32) -> f32 {
    1.0 / (d.tokens() as f32 * per_step.max(1) as f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_depend_on_layer_not_on_partition_and_are_small() {
        let d = Dims {
            hidden: 8,
            heads: 2,
            ffn: 16,
            seq: 4,
            micro_batch: 2,
            vocab: 11,
        };
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
