//! The spec's model on the CPU: one stage's weights, and its forward, backward-for-inputs (`I`)
//! and backward-for-weights (`W`) on one micro-batch. Pure functions of their arguments (no
//! channels, no clock), so the pipelined worker, the sequential reference and the gradient
//! check all run exactly this code.

use super::math::{self, gemm, AttnShape};
use crate::spec::{init_matrix, Dims, Matrix};

/// The four matrices of one transformer layer.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerWeights {
    pub qkv: Vec<f32>,
    pub out: Vec<f32>,
    pub mlp1: Vec<f32>,
    pub mlp2: Vec<f32>,
}

/// Everything one stage owns: the embedding (stage 0), its layers, the output matrix (last
/// stage). Also used, zero-initialised, as the stage's gradient accumulator.
#[derive(Debug, Clone, PartialEq)]
pub struct StageWeights {
    pub embedding: Option<Vec<f32>>,
    pub layers: Vec<LayerWeights>,
    pub output: Option<Vec<f32>>,
}

impl StageWeights {
    /// The spec's deterministic initial weights for layers `first..first + n`.
    pub fn init(seed: u64, first: u32, n: u32, embedding: bool, output: bool, d: &Dims) -> Self {
        StageWeights {
            embedding: embedding.then(|| init_matrix(seed, 0, Matrix::Embedding, d)),
            layers: (first..first + n)
                .map(|l| LayerWeights {
                    qkv: init_matrix(seed, l, Matrix::Qkv, d),
                    out: init_matrix(seed, l, Matrix::Out, d),
                    mlp1: init_matrix(seed, l, Matrix::Mlp1, d),
                    mlp2: init_matrix(seed, l, Matrix::Mlp2, d),
                })
                .collect(),
            output: output.then(|| init_matrix(seed, 0, Matrix::Output, d)),
        }
    }

    /// Same shapes, all zeros.
    pub fn zeros_like(&self) -> Self {
        let z = |v: &Vec<f32>| vec![0.0; v.len()];
        StageWeights {
            embedding: self.embedding.as_ref().map(z),
            layers: self
                .layers
                .iter()
                .map(|l| LayerWeights {
                    qkv: z(&l.qkv),
                    out: z(&l.out),
                    mlp1: z(&l.mlp1),
                    mlp2: z(&l.mlp2),
                })
                .collect(),
            output: self.output.as_ref().map(z),
        }
    }

    fn tensors(&self) -> Vec<&Vec<f32>> {
        let mut v: Vec<&Vec<f32>> = Vec::new();
        v.extend(self.embedding.iter());
        for l in &self.layers {
            v.extend([&l.qkv, &l.out, &l.mlp1, &l.mlp2]);
        }
        v.extend(self.output.iter());
        v
    }

    fn tensors_mut(&mut self) -> Vec<&mut Vec<f32>> {
        let mut v: Vec<&mut Vec<f32>> = Vec::new();
        v.extend(self.embedding.iter_mut());
        for l in &mut self.layers {
            v.extend([&mut l.qkv, &mut l.out, &mut l.mlp1, &mut l.mlp2]);
        }
        v.extend(self.output.iter_mut());
        v
    }

    /// All matrices flattened in [`crate::backend::DeviceWorker::weights`] order: embedding,
    /// then (Qkv, Out, Mlp1, Mlp2) per layer, then output.
    pub fn flat(&self) -> Vec<f32> {
        self.tensors().into_iter().flatten().copied().collect()
    }

    /// Number of f32 parameters.
    pub fn len(&self) -> usize {
        self.tensors().iter().map(|t| t.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// SGD: `self -= lr * grads`.
    pub fn sgd(&mut self, lr: f32, grads: &StageWeights) {
        for (w, g) in self.tensors_mut().into_iter().zip(grads.tensors()) {
            for (x, y) in w.iter_mut().zip(g) {
                *x -= lr * y;
            }
        }
    }

    pub fn zero(&mut self) {
        for t in self.tensors_mut() {
            t.fill(0.0);
        }
    }
}

/// What a layer's forward keeps for its backward.
#[derive(Debug, Clone, Default)]
struct LayerActs {
    x: Vec<f32>,
    qkv: Vec<f32>,
    probs: Vec<f32>,
    ctx: Vec<f32>,
    x1: Vec<f32>,
    u: Vec<f32>,
    g: Vec<f32>,
}

/// What a layer's `I` keeps for its `W`: the gradients at each GEMM's output.
#[derive(Debug, Clone, Default)]
struct LayerGrads {
    dy: Vec<f32>,
    du: Vec<f32>,
    dx1: Vec<f32>,
    dqkv: Vec<f32>,
}

/// One micro-batch's state in one stage between F and W.
#[derive(Debug, Default)]
pub struct MicrobatchState {
    ids: Vec<u32>,
    layers: Vec<LayerActs>,
    /// Last stage: the stage's output `y` and `dlogits`, computed in F with the loss.
    out_y: Vec<f32>,
    dlogits: Vec<f32>,
    /// After I: per-layer gradients for W, and (stage 0) the gradient at the embedding output.
    grads: Vec<LayerGrads>,
    d_embedded: Vec<f32>,
    input_done: bool,
}

/// The input of a stage's forward.
pub enum StageInput<'a> {
    /// Stage 0: token ids.
    Tokens(&'a [u32]),
    /// Any other stage: the previous stage's output `[T, h]`.
    Hidden(Vec<f32>),
}

/// Shapes and threads shared by every call.
#[derive(Debug, Clone, Copy)]
pub struct Ctx {
    pub dims: Dims,
    pub threads: usize,
}

impl Ctx {
    fn attn(&self) -> AttnShape {
        AttnShape {
            b: self.dims.micro_batch,
            seq: self.dims.seq,
            heads: self.dims.heads,
            d: self.dims.head_dim(),
        }
    }
}

/// Forward of one layer; returns `y` and what the backward needs.
fn layer_forward(c: &Ctx, w: &LayerWeights, x: Vec<f32>) -> (Vec<f32>, LayerActs) {
    let d = &c.dims;
    let (t, h, f) = (d.tokens(), d.hidden, d.ffn);
    let mut qkv = vec![0.0; t * 3 * h];
    gemm(
        t,
        h,
        3 * h,
        &x,
        false,
        &w.qkv,
        false,
        &mut qkv,
        0.0,
        c.threads,
    );
    let sh = c.attn();
    let mut ctx = vec![0.0; t * h];
    let mut probs = vec![0.0; sh.probs_len()];
    math::attention_forward(sh, &qkv, &mut ctx, &mut probs);
    let mut x1 = x.clone();
    gemm(t, h, h, &ctx, false, &w.out, false, &mut x1, 1.0, c.threads);
    let mut u = vec![0.0; t * f];
    gemm(t, h, f, &x1, false, &w.mlp1, false, &mut u, 0.0, c.threads);
    let g: Vec<f32> = u.iter().map(|&v| math::gelu(v)).collect();
    let mut y = x1.clone();
    gemm(t, f, h, &g, false, &w.mlp2, false, &mut y, 1.0, c.threads);
    let acts = LayerActs {
        x,
        qkv,
        probs,
        ctx,
        x1,
        u,
        g,
    };
    (y, acts)
}

/// Backward for inputs of one layer: `dx` from `dy`; keeps the GEMM-output gradients for W.
fn layer_backward_input(
    c: &Ctx,
    w: &LayerWeights,
    a: &LayerActs,
    dy: Vec<f32>,
) -> (Vec<f32>, LayerGrads) {
    let d = &c.dims;
    let (t, h, f) = (d.tokens(), d.hidden, d.ffn);
    // y = x1 + g W2: dg = dy W2ᵀ; du = dg ⊙ gelu'(u)
    let mut du = vec![0.0; t * f];
    gemm(t, h, f, &dy, false, &w.mlp2, true, &mut du, 0.0, c.threads);
    for (g, &u) in du.iter_mut().zip(&a.u) {
        *g *= math::gelu_grad(u);
    }
    // u = x1 W1: dx1 = dy + du W1ᵀ
    let mut dx1 = dy.clone();
    gemm(t, f, h, &du, false, &w.mlp1, true, &mut dx1, 1.0, c.threads);
    // x1 = x + ctx Wo: dctx = dx1 Woᵀ
    let mut dctx = vec![0.0; t * h];
    gemm(
        t, h, h, &dx1, false, &w.out, true, &mut dctx, 0.0, c.threads,
    );
    let mut dqkv = vec![0.0; t * 3 * h];
    math::attention_backward(c.attn(), &a.qkv, &a.probs, &dctx, &mut dqkv);
    // qkv = x Wqkv: dx = dx1 + dqkv Wqkvᵀ
    let mut dx = dx1.clone();
    gemm(
        t,
        3 * h,
        h,
        &dqkv,
        false,
        &w.qkv,
        true,
        &mut dx,
        1.0,
        c.threads,
    );
    (dx, LayerGrads { dy, du, dx1, dqkv })
}

/// Backward for weights of one layer: `dW += Xᵀ dY` for its four GEMMs.
fn layer_backward_weight(c: &Ctx, a: &LayerActs, g: &LayerGrads, acc: &mut LayerWeights) {
    let d = &c.dims;
    let (t, h, f) = (d.tokens(), d.hidden, d.ffn);
    gemm(
        h,
        t,
        3 * h,
        &a.x,
        true,
        &g.dqkv,
        false,
        &mut acc.qkv,
        1.0,
        c.threads,
    );
    gemm(
        h,
        t,
        h,
        &a.ctx,
        true,
        &g.dx1,
        false,
        &mut acc.out,
        1.0,
        c.threads,
    );
    gemm(
        h,
        t,
        f,
        &a.x1,
        true,
        &g.du,
        false,
        &mut acc.mlp1,
        1.0,
        c.threads,
    );
    gemm(
        f,
        t,
        h,
        &a.g,
        true,
        &g.dy,
        false,
        &mut acc.mlp2,
        1.0,
        c.threads,
    );
}

/// Forward of a stage. Returns the output `[T, h]` (None on the last stage) and the scaled
/// loss (last stage; `labels` given) and the state for the backward.
/// `loss_scale` is `1 / (T · micro-batches per step)` (see [`crate::spec`]).
pub fn stage_forward(
    c: &Ctx,
    w: &StageWeights,
    input: StageInput<'_>,
    labels: Option<&[u32]>,
    loss_scale: f32,
) -> (Option<Vec<f32>>, f64, MicrobatchState) {
    let d = &c.dims;
    let (t, h) = (d.tokens(), d.hidden);
    let mut st = MicrobatchState::default();
    let mut x = match input {
        StageInput::Tokens(ids) => {
            let e = w
                .embedding
                .as_ref()
                .expect("token input only on the embedding stage");
            st.ids = ids.to_vec();
            let mut x = vec![0.0; t * h];
            for (row, &id) in x.chunks_mut(h).zip(ids) {
                row.copy_from_slice(&e[id as usize * h..][..h]);
            }
            x
        }
        StageInput::Hidden(x) => x,
    };
    for lw in &w.layers {
        let (y, acts) = layer_forward(c, lw, x);
        st.layers.push(acts);
        x = y;
    }
    match (&w.output, labels) {
        (Some(wout), Some(labels)) => {
            let v = d.vocab;
            let mut logits = vec![0.0; t * v];
            gemm(t, h, v, &x, false, wout, false, &mut logits, 0.0, c.threads);
            let loss = math::cross_entropy(&mut logits, labels, v, loss_scale);
            st.out_y = x;
            st.dlogits = logits;
            (None, loss, st)
        }
        _ => (Some(x), 0.0, st),
    }
}

/// Backward for inputs of a stage: `dy` is the gradient at the stage's output (None on the
/// last stage, which starts from its loss). Returns the gradient at the stage's input (None on
/// stage 0, whose input is token ids).
pub fn stage_backward_input(
    c: &Ctx,
    w: &StageWeights,
    st: &mut MicrobatchState,
    dy: Option<Vec<f32>>,
) -> Option<Vec<f32>> {
    let d = &c.dims;
    let (t, h) = (d.tokens(), d.hidden);
    let mut g = match (&w.output, dy) {
        (Some(wout), _) => {
            let mut g = vec![0.0; t * h];
            gemm(
                t,
                d.vocab,
                h,
                &st.dlogits,
                false,
                wout,
                true,
                &mut g,
                0.0,
                c.threads,
            );
            g
        }
        (None, Some(dy)) => dy,
        (None, None) => panic!("a stage without the output layer needs the output gradient"),
    };
    let mut grads = Vec::with_capacity(w.layers.len());
    for (lw, acts) in w.layers.iter().zip(&mut st.layers).rev() {
        let (dx, lg) = layer_backward_input(c, lw, acts, g);
        // Only W's inputs stay alive: the attention scores and the MLP pre-activation go.
        acts.qkv = Vec::new();
        acts.probs = Vec::new();
        acts.u = Vec::new();
        grads.push(lg);
        g = dx;
    }
    grads.reverse();
    st.grads = grads;
    st.input_done = true;
    if w.embedding.is_some() {
        st.d_embedded = g;
        None
    } else {
        Some(g)
    }
}

/// Backward for weights of a stage: accumulates into `acc` (same shapes as the weights).
pub fn stage_backward_weight(c: &Ctx, st: &MicrobatchState, acc: &mut StageWeights) {
    assert!(st.input_done, "W before I");
    let d = &c.dims;
    let (t, h) = (d.tokens(), d.hidden);
    if let Some(de) = acc.embedding.as_mut() {
        for (row, &id) in st.d_embedded.chunks(h).zip(&st.ids) {
            for (a, b) in de[id as usize * h..][..h].iter_mut().zip(row) {
                *a += b;
            }
        }
    }
    for ((acts, lg), la) in st.layers.iter().zip(&st.grads).zip(&mut acc.layers) {
        layer_backward_weight(c, acts, lg, la);
    }
    if let Some(dout) = acc.output.as_mut() {
        gemm(
            h,
            t,
            d.vocab,
            &st.out_y,
            true,
            &st.dlogits,
            false,
            dout,
            1.0,
            c.threads,
        );
    }
}

/// Bytes a stage sends downstream per micro-batch: `T · h · 4` (f32).
pub fn activation_message_bytes(d: &Dims) -> u64 {
    (d.tokens() * d.hidden * 4) as u64
}

/// Bytes one layer keeps alive from F to its backward on the CPU backend (f32):
/// `x, ctx, x1 [T,h]` + `qkv [T,3h]` + `u, g [T,f]` + probabilities `[b, n, s, s]`, all 4 bytes.
pub fn layer_activation_bytes(d: &Dims) -> u64 {
    let (t, h, f) = (d.tokens(), d.hidden, d.ffn);
    let probs = d.micro_batch * d.heads * d.seq * d.seq;
    ((3 * t * h + 3 * t * h + 2 * t * f + probs) * 4) as u64
}
