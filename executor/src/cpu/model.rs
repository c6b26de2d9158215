//! The spec's model on the CPU: one stage's weights, and its forward, backward-for-inputs (`I`)
//! and backward-for-weights (`W`) on one micro-batch. Pure functions of their arguments (no
//! channels, no clock), so the pipelined worker, the sequential reference and the gradient
//! check all run exactly this code. The collectives of expert and context parallelism go
//! through the [`Comms`] a call is given ([`Comms::solo`] for one rank).

use super::comm::{CommError, Comms};
pub use super::linear::Ctx;
use super::linear::{gelu_mlp, gelu_mlp_dgrad, gelu_mlp_wgrad, linear, linear_dgrad, linear_wgrad};
use super::math::{self, gemm};
use super::moe::{self, MoeActs, MoeGrads, MoeWeights};
use super::quant::{q_act, q_grad};
use super::ring::{self, RingForward};
use crate::spec::{init_matrix, Dims, Matrix};

/// The matrices of one transformer layer: attention, then a dense MLP (`mlp1`, `mlp2`) or,
/// in a MoE layer, the router and this rank's experts (`mlp1`, `mlp2` empty).
#[derive(Debug, Clone, PartialEq)]
pub struct LayerWeights {
    pub qkv: Vec<f32>,
    pub out: Vec<f32>,
    pub mlp1: Vec<f32>,
    pub mlp2: Vec<f32>,
    pub moe: Option<MoeWeights>,
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
    /// The spec's deterministic initial weights for layers `first..first + n` of a dense model.
    pub fn init(seed: u64, first: u32, n: u32, embedding: bool, output: bool, d: &Dims) -> Self {
        Self::init_moe(seed, first, n, embedding, output, d, &[], 0..0)
    }

    /// The same with MoE layers where `moe_pattern[layer]` is 1, holding the routed experts
    /// `experts` (this rank's share under expert parallelism).
    #[allow(clippy::too_many_arguments)]
    pub fn init_moe(
        seed: u64,
        first: u32,
        n: u32,
        embedding: bool,
        output: bool,
        d: &Dims,
        moe_pattern: &[u8],
        experts: std::ops::Range<u32>,
    ) -> Self {
        StageWeights {
            embedding: embedding.then(|| init_matrix(seed, 0, Matrix::Embedding, d)),
            layers: (first..first + n)
                .map(|l| {
                    let is_moe = moe_pattern.get(l as usize) == Some(&1) && d.moe.is_some();
                    let dense = |m| {
                        if is_moe {
                            Vec::new()
                        } else {
                            init_matrix(seed, l, m, d)
                        }
                    };
                    LayerWeights {
                        qkv: init_matrix(seed, l, Matrix::Qkv, d),
                        out: init_matrix(seed, l, Matrix::Out, d),
                        mlp1: dense(Matrix::Mlp1),
                        mlp2: dense(Matrix::Mlp2),
                        moe: is_moe.then(|| MoeWeights::init(seed, l, d, experts.clone())),
                    }
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
                    moe: l.moe.as_ref().map(MoeWeights::zeros_like),
                })
                .collect(),
            output: self.output.as_ref().map(z),
        }
    }

    /// Every matrix with whether it belongs to a routed expert, in flat order.
    fn tensors(&self) -> Vec<(&Vec<f32>, bool)> {
        let mut v: Vec<(&Vec<f32>, bool)> = Vec::new();
        v.extend(self.embedding.iter().map(|t| (t, false)));
        for l in &self.layers {
            v.extend([&l.qkv, &l.out, &l.mlp1, &l.mlp2].map(|t| (t, false)));
            if let Some(m) = &l.moe {
                v.extend(m.tensors());
            }
        }
        v.extend(self.output.iter().map(|t| (t, false)));
        v
    }

    /// Every matrix with whether it belongs to a routed expert, in flat order.
    pub fn tensors_mut(&mut self) -> Vec<(&mut Vec<f32>, bool)> {
        let mut v: Vec<(&mut Vec<f32>, bool)> = Vec::new();
        v.extend(self.embedding.iter_mut().map(|t| (t, false)));
        for l in &mut self.layers {
            v.extend([&mut l.qkv, &mut l.out, &mut l.mlp1, &mut l.mlp2].map(|t| (t, false)));
            if let Some(m) = &mut l.moe {
                v.extend(m.tensors_mut());
            }
        }
        v.extend(self.output.iter_mut().map(|t| (t, false)));
        v
    }

    /// All matrices flattened in [`crate::backend::DeviceWorker::weights`] order: embedding,
    /// then per layer Qkv, Out, Mlp1, Mlp2 (empty in a MoE layer) and, in a MoE layer, the
    /// router, each held expert's two matrices in expert order and the shared expert's; then
    /// the output matrix.
    pub fn flat(&self) -> Vec<f32> {
        self.tensors()
            .into_iter()
            .flat_map(|(t, _)| t)
            .copied()
            .collect()
    }

    /// The same with every routed expert of the model, gathered from the expert-parallel
    /// group (each rank's share in rank order): what one rank holding the whole model would
    /// flatten. A collective: every rank of the group calls it.
    pub fn flat_gathered(&self, comms: &mut Comms) -> Result<Vec<f32>, CommError> {
        let mut out = Vec::new();
        out.extend(self.embedding.iter().flatten());
        for l in &self.layers {
            for t in [&l.qkv, &l.out, &l.mlp1, &l.mlp2] {
                out.extend(t);
            }
            if let Some(m) = &l.moe {
                out.extend(m.flat_gathered(&mut comms.ep)?);
            }
        }
        out.extend(self.output.iter().flatten());
        Ok(out)
    }

    /// Number of f32 parameters.
    pub fn len(&self) -> usize {
        self.tensors().iter().map(|(t, _)| t.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// SGD: `self -= lr * grads`.
    pub fn sgd(&mut self, lr: f32, grads: &StageWeights) {
        for ((w, _), (g, _)) in self.tensors_mut().into_iter().zip(grads.tensors()) {
            for (x, y) in w.iter_mut().zip(g) {
                *x -= lr * y;
            }
        }
    }

    pub fn zero(&mut self) {
        for (t, _) in self.tensors_mut() {
            t.fill(0.0);
        }
    }

    /// Sums these gradients over the ranks that hold the same weights: the routed experts'
    /// over the expert-data-parallel group, everything else over the data-parallel group
    /// (data × context-parallel replicas). A collective.
    pub fn all_reduce(&mut self, comms: &mut Comms) -> Result<(), CommError> {
        for (t, expert) in self.tensors_mut() {
            if expert {
                comms.edp.all_reduce_sum(t)?;
            } else {
                comms.dp.all_reduce_sum(t)?;
            }
        }
        Ok(())
    }
}

/// What a layer's forward keeps for its backward. Under FP8 the saved GEMM inputs (`x`, `ctx`,
/// `x1` of a dense layer, `g`) are the quantised operands the forward GEMMs used.
#[derive(Debug, Clone, Default)]
struct LayerActs {
    x: Vec<f32>,
    qkv: Vec<f32>,
    /// One rank: the softmax probabilities. Context parallelism: empty (the ring keeps `ring`).
    probs: Vec<f32>,
    ring: Option<RingActs>,
    ctx: Vec<f32>,
    x1: Vec<f32>,
    u: Vec<f32>,
    g: Vec<f32>,
    moe: Option<MoeActs>,
}

/// What ring attention keeps: this rank's q, k, v, its output and log-sum-exp.
#[derive(Debug, Clone, Default)]
struct RingActs {
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    out: Vec<f32>,
    lse: Vec<f32>,
}

/// What a layer's `I` keeps for its `W`: the gradients at each GEMM's output (quantised as
/// the backward GEMMs used them under FP8).
#[derive(Debug, Clone, Default)]
struct LayerGrads {
    dy: Vec<f32>,
    du: Vec<f32>,
    dx1: Vec<f32>,
    dqkv: Vec<f32>,
    moe: Option<MoeGrads>,
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
    /// Stage 0: this rank's token ids ([`cp_tokens`] of the micro-batch's).
    Tokens(&'a [u32]),
    /// Any other stage: the previous stage's output `[T, h]`.
    Hidden(Vec<f32>),
}

/// The tokens (ids or labels) one context-parallel rank holds, from the whole micro-batch's
/// `micro_batch · seq`: per sequence, the positions [`ring::cp_positions`] gives the rank.
pub fn cp_tokens(all: &[u32], d: &Dims, cp_rank: usize) -> Vec<u32> {
    if d.cp <= 1 {
        return all.to_vec();
    }
    let pos = ring::cp_positions(d.seq, d.cp, cp_rank);
    (0..d.micro_batch)
        .flat_map(|s| pos.iter().map(move |&p| all[s * d.seq + p]))
        .collect()
}

/// An attention's output `[T, h]` and what its backward keeps: the probabilities (one rank) or
/// the ring's tensors (context parallelism).
type Attention = (Vec<f32>, Vec<f32>, Option<RingActs>);

/// Attention of this rank's tokens: on one rank the whole causal softmax (probabilities kept),
/// under context parallelism the ring over the `cp` ranks' key/value blocks.
fn attention_forward(c: &Ctx, qkv: &[f32], comms: &mut Comms) -> Result<Attention, CommError> {
    let d = &c.dims;
    let (t, h) = (d.tokens(), d.hidden);
    if d.cp <= 1 {
        let sh = c.attn();
        let mut ctx = vec![0.0; t * h];
        let mut probs = vec![0.0; sh.probs_len()];
        math::attention_forward(sh, qkv, &mut ctx, &mut probs);
        return Ok((ctx, probs, None));
    }
    let (cp, me) = (d.cp, comms.cp.rank());
    let (q, k, v) = ring::split_qkv(t, h, qkv);
    let qpos = ring::cp_positions(d.seq, cp, me);
    let mut st = RingForward::new(c.ring(), d.local_seq());
    let mut kv: Vec<f32> = k.iter().chain(&v).copied().collect();
    let mut src = me;
    for step in 0..cp {
        let kpos = ring::cp_positions(d.seq, cp, src);
        st.block(&q, &qpos, &kv[..t * h], &kv[t * h..], &kpos);
        if step + 1 < cp {
            kv = comms.cp.shift(kv)?;
            src = (src + cp - 1) % cp;
        }
    }
    let (out, lse) = st.finish();
    let ring = RingActs {
        q,
        k,
        v,
        out: out.clone(),
        lse,
    };
    Ok((out, Vec::new(), Some(ring)))
}

/// The gradient `dqkv` of [`attention_forward`] from `dctx`.
fn attention_backward(
    c: &Ctx,
    a: &LayerActs,
    dctx: &[f32],
    comms: &mut Comms,
) -> Result<Vec<f32>, CommError> {
    let d = &c.dims;
    let (t, h) = (d.tokens(), d.hidden);
    let mut dqkv = vec![0.0; t * 3 * h];
    let Some(r) = &a.ring else {
        math::attention_backward(c.attn(), &a.qkv, &a.probs, dctx, &mut dqkv);
        return Ok(dqkv);
    };
    let (cp, me) = (d.cp, comms.cp.rank());
    let sh = c.ring();
    let sl = d.local_seq();
    let qpos = ring::cp_positions(d.seq, cp, me);
    let delta = ring::delta(sh, sl, &r.out, dctx);
    let mut dq = vec![0.0; t * h];
    // The travelling block: k, v and their gradients so far, [k | v | dk | dv].
    let n = t * h;
    let mut buf: Vec<f32> = r.k.iter().chain(&r.v).copied().collect();
    buf.resize(4 * n, 0.0);
    let mut src = me;
    for _ in 0..cp {
        let kpos = ring::cp_positions(d.seq, cp, src);
        let (kv, grads) = buf.split_at_mut(2 * n);
        let (dk, dv) = grads.split_at_mut(n);
        ring::block_backward(
            sh,
            &r.q,
            &qpos,
            &kv[..n],
            &kv[n..],
            &kpos,
            &r.lse,
            &delta,
            dctx,
            &mut dq,
            dk,
            dv,
        );
        // After cp steps the block and its gradients are back at their owner.
        buf = comms.cp.shift(buf)?;
        src = (src + cp - 1) % cp;
    }
    Ok(ring::join_qkv(t, h, &dq, &buf[2 * n..3 * n], &buf[3 * n..]))
}

/// Forward of one layer; returns `y` and what the backward needs.
fn layer_forward(
    c: &Ctx,
    w: &LayerWeights,
    x: Vec<f32>,
    comms: &mut Comms,
) -> Result<(Vec<f32>, LayerActs), CommError> {
    let d = &c.dims;
    let (t, h, f) = (d.tokens(), d.hidden, d.ffn);
    let xq = q_act(c.fp8, &x, t, h);
    let mut qkv = vec![0.0; t * 3 * h];
    linear(c, t, h, 3 * h, &xq, &w.qkv, &mut qkv, 0.0);
    let (ctx, probs, ring) = attention_forward(c, &qkv, comms)?;
    let ctxq = q_act(c.fp8, &ctx, t, h);
    let mut x1 = x;
    linear(c, t, h, h, &ctxq, &w.out, &mut x1, 1.0);
    let mut acts = LayerActs {
        x: xq,
        qkv,
        probs,
        ring,
        ctx: ctxq,
        ..LayerActs::default()
    };
    let mut y = x1.clone();
    if let Some(mw) = &w.moe {
        let (out, ma) = moe::forward(c, mw, &x1, comms)?;
        for (a, b) in y.iter_mut().zip(&out) {
            *a += b;
        }
        acts.moe = Some(ma);
        acts.x1 = x1;
    } else {
        let x1q = q_act(c.fp8, &x1, t, h);
        let (u, gq) = gelu_mlp(c, t, h, f, &x1q, &w.mlp1, &w.mlp2, &mut y, 1.0);
        acts.x1 = x1q;
        acts.u = u;
        acts.g = gq;
    }
    Ok((y, acts))
}

/// Backward for inputs of one layer: `dx` from `dy`; keeps the GEMM-output gradients for W.
fn layer_backward_input(
    c: &Ctx,
    w: &LayerWeights,
    a: &LayerActs,
    dy: Vec<f32>,
    comms: &mut Comms,
) -> Result<(Vec<f32>, LayerGrads), CommError> {
    let d = &c.dims;
    let (t, h, f) = (d.tokens(), d.hidden, d.ffn);
    let mut lg = LayerGrads::default();
    // y = x1 + mlp(x1): dx1 = dy + the MLP's (or MoE block's) input gradient
    let mut dx1 = dy.clone();
    if let (Some(mw), Some(ma)) = (&w.moe, &a.moe) {
        let (dx, mg) = moe::backward_input(c, mw, ma, &dy, comms)?;
        for (s, v) in dx1.iter_mut().zip(&dx) {
            *s += v;
        }
        lg.moe = Some(mg);
        lg.dy = dy;
    } else {
        // y = x1 + mlp(x1): dx1 += the MLP's input gradient
        let (dyq, duq) = gelu_mlp_dgrad(c, t, h, f, &dy, &a.u, &w.mlp1, &w.mlp2, &mut dx1, 1.0);
        lg.dy = dyq;
        lg.du = duq;
    }
    // x1 = x + ctx Wo: dctx = dx1 Woᵀ
    let dx1q = q_grad(c.fp8, &dx1, t, h);
    let mut dctx = vec![0.0; t * h];
    linear_dgrad(c, t, h, h, &dx1q, &w.out, &mut dctx, 0.0);
    let dqkv = attention_backward(c, a, &dctx, comms)?;
    // qkv = x Wqkv: dx = dx1 + dqkv Wqkvᵀ
    let dqkvq = q_grad(c.fp8, &dqkv, t, 3 * h);
    let mut dx = dx1;
    linear_dgrad(c, t, h, 3 * h, &dqkvq, &w.qkv, &mut dx, 1.0);
    lg.dx1 = dx1q;
    lg.dqkv = dqkvq;
    Ok((dx, lg))
}

/// Backward for weights of one layer: `dW += Xᵀ dY` for its GEMMs.
fn layer_backward_weight(c: &Ctx, a: &LayerActs, g: &LayerGrads, acc: &mut LayerWeights) {
    let d = &c.dims;
    let (t, h, f) = (d.tokens(), d.hidden, d.ffn);
    linear_wgrad(c, t, h, 3 * h, &a.x, &g.dqkv, &mut acc.qkv);
    linear_wgrad(c, t, h, h, &a.ctx, &g.dx1, &mut acc.out);
    match (&a.moe, &g.moe, &mut acc.moe) {
        (Some(ma), Some(mg), Some(macc)) => moe::backward_weight(c, ma, mg, &a.x1, macc),
        _ => {
            let (w1, w2) = (&mut acc.mlp1, &mut acc.mlp2);
            gelu_mlp_wgrad(c, t, h, f, (&a.x1, &a.g), (&g.dy, &g.du), w1, w2);
        }
    }
}

/// Forward of a stage. Returns the output `[T, h]` (None on the last stage) and the scaled
/// loss (last stage; `labels` given) and the state for the backward.
/// `loss_scale` is `1 / (b · seq · micro-batches per step · dp)` (see [`crate::spec`]).
pub fn stage_forward(
    c: &Ctx,
    w: &StageWeights,
    input: StageInput<'_>,
    labels: Option<&[u32]>,
    loss_scale: f32,
    comms: &mut Comms,
) -> Result<(Option<Vec<f32>>, f64, MicrobatchState), CommError> {
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
        let (y, acts) = layer_forward(c, lw, x, comms)?;
        st.layers.push(acts);
        x = y;
    }
    Ok(match (&w.output, labels) {
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
    })
}

/// Backward for inputs of a stage: `dy` is the gradient at the stage's output (None on the
/// last stage, which starts from its loss). Returns the gradient at the stage's input (None on
/// stage 0, whose input is token ids).
pub fn stage_backward_input(
    c: &Ctx,
    w: &StageWeights,
    st: &mut MicrobatchState,
    dy: Option<Vec<f32>>,
    comms: &mut Comms,
) -> Result<Option<Vec<f32>>, CommError> {
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
        let (dx, lg) = layer_backward_input(c, lw, acts, g, comms)?;
        // Only W's inputs stay alive: the attention scores and the MLP pre-activation go.
        acts.qkv = Vec::new();
        acts.probs = Vec::new();
        acts.ring = None;
        acts.u = Vec::new();
        grads.push(lg);
        g = dx;
    }
    grads.reverse();
    st.grads = grads;
    st.input_done = true;
    Ok(if w.embedding.is_some() {
        st.d_embedded = g;
        None
    } else {
        Some(g)
    })
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

/// Parameters of one layer on one rank: attention `4h²`, and a dense MLP `2hf` or a MoE block's
/// router `hE`, this rank's `E/ep` experts `2h·f_e` each and the shared expert `2h·f_s`.
pub fn layer_params(d: &Dims, moe: bool, ep: usize) -> u64 {
    let h = d.hidden;
    let mlp = match (moe, d.moe) {
        (true, Some(m)) => {
            h * m.experts + 2 * h * m.ffn * m.experts / ep.max(1) + 2 * h * m.shared_ffn
        }
        _ => 2 * h * d.ffn,
    };
    (4 * h * h + mlp) as u64
}

/// Bytes a stage sends downstream per micro-batch: `T · h · 4` (f32).
pub fn activation_message_bytes(d: &Dims) -> u64 {
    (d.tokens() * d.hidden * 4) as u64
}

/// Bytes one layer keeps alive from F to its backward on the CPU backend (f32), on one rank:
/// `x, ctx, x1 [T,h]` + `qkv [T,3h]` + `u, g [T,f]` + probabilities `[b, n, s, s]` (one rank)
/// or q, k, v, output and log-sum-exp (context parallelism), all 4 bytes. A MoE layer keeps,
/// in place of `u, g`, each routed row's input, `u`, `g` and output (`T·k` rows, assuming
/// balanced routing) and the shared expert's `u, g`.
pub fn layer_activation_bytes(d: &Dims) -> u64 {
    let (t, h) = (d.tokens(), d.hidden);
    let attn = if d.cp <= 1 {
        d.micro_batch * d.heads * d.seq * d.seq
    } else {
        4 * t * h + d.micro_batch * d.heads * d.local_seq()
    };
    let mlp = match d.moe {
        None => 2 * t * d.ffn,
        Some(m) => t * m.topk * (2 * h + 2 * m.ffn) + 2 * t * m.shared_ffn + t * m.experts,
    };
    ((3 * t * h + 3 * t * h + mlp + attn) * 4) as u64
}
