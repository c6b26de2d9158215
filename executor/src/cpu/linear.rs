//! What every layer's math shares on the CPU: the call's shapes, threads and number format
//! ([`Ctx`]), the three GEMMs of a linear layer with their operands as the FP8 recipe feeds
//! them (forward, input gradient, weight gradient), and the GELU MLP built of two of them (a
//! dense layer's, each routed expert's and the shared expert's).

use super::math::{gelu, gelu_grad, gemm, AttnShape};
use super::quant::{q_act, q_grad, q_weight, Fp8Recipe};
use super::ring::RingShape;
use crate::spec::Dims;

/// Shapes, threads and number format shared by every call.
#[derive(Debug, Clone, Copy)]
pub struct Ctx {
    pub dims: Dims,
    pub threads: usize,
    /// FP8 GEMMs (emulated), or f32.
    pub fp8: Option<Fp8Recipe>,
}

impl Ctx {
    /// f32 math.
    pub fn new(dims: Dims, threads: usize) -> Ctx {
        Ctx {
            dims,
            threads,
            fp8: None,
        }
    }

    pub fn attn(&self) -> AttnShape {
        AttnShape {
            b: self.dims.micro_batch,
            seq: self.dims.seq,
            heads: self.dims.heads,
            d: self.dims.head_dim(),
        }
    }

    pub fn ring(&self) -> RingShape {
        RingShape {
            b: self.dims.micro_batch,
            heads: self.dims.heads,
            d: self.dims.head_dim(),
            causal: true,
        }
    }
}

/// `out = x · w + beta · out` on `x [rows, k]`, `w [k, n]`, with the operands as the number
/// format has them (`x` already quantised by the caller; `w` quantised here).
#[allow(clippy::too_many_arguments)]
pub fn linear(
    c: &Ctx,
    rows: usize,
    k: usize,
    n: usize,
    x: &[f32],
    w: &[f32],
    out: &mut [f32],
    beta: f32,
) {
    let wq = q_weight(c.fp8, w, k, n);
    gemm(rows, k, n, x, false, &wq, false, out, beta, c.threads);
}

/// `out = dy · wᵀ + beta · out` (the input gradient of [`linear`]), `dy` already quantised.
#[allow(clippy::too_many_arguments)]
pub fn linear_dgrad(
    c: &Ctx,
    rows: usize,
    k: usize,
    n: usize,
    dy: &[f32],
    w: &[f32],
    out: &mut [f32],
    beta: f32,
) {
    let wq = q_weight(c.fp8, w, k, n);
    gemm(rows, n, k, dy, false, &wq, true, out, beta, c.threads);
}

/// `acc += xᵀ · dy` (the weight gradient of [`linear`]) on the saved operands.
pub fn linear_wgrad(
    c: &Ctx,
    rows: usize,
    k: usize,
    n: usize,
    x: &[f32],
    dy: &[f32],
    acc: &mut [f32],
) {
    gemm(k, rows, n, x, true, dy, false, acc, 1.0, c.threads);
}

/// A GELU MLP, `out = gelu(xq · W1) · W2 + beta · out`, on `xq [rows, h]` (as the recipe feeds
/// it), `W1 [h, f]`, `W2 [f, h]`. Returns what its backward keeps: `u = xq · W1` and
/// `g = gelu(u)` as the second GEMM took it.
#[allow(clippy::too_many_arguments)]
pub fn gelu_mlp(
    c: &Ctx,
    rows: usize,
    h: usize,
    f: usize,
    xq: &[f32],
    w1: &[f32],
    w2: &[f32],
    out: &mut [f32],
    beta: f32,
) -> (Vec<f32>, Vec<f32>) {
    let mut u = vec![0.0; rows * f];
    linear(c, rows, h, f, xq, w1, &mut u, 0.0);
    let g: Vec<f32> = u.iter().map(|&v| gelu(v)).collect();
    let gq = q_act(c.fp8, &g, rows, f);
    linear(c, rows, f, h, &gq, w2, out, beta);
    (u, gq)
}

/// The input gradient of [`gelu_mlp`] from `dy`, the gradient at its output:
/// `dg = dy · W2ᵀ`, `du = dg ⊙ gelu'(u)`, `dx = du · W1ᵀ + beta · dx`. Returns the two
/// gradients as the GEMMs took them (`dy`, `du`), which its weight gradient needs.
#[allow(clippy::too_many_arguments)]
pub fn gelu_mlp_dgrad(
    c: &Ctx,
    rows: usize,
    h: usize,
    f: usize,
    dy: &[f32],
    u: &[f32],
    w1: &[f32],
    w2: &[f32],
    dx: &mut [f32],
    beta: f32,
) -> (Vec<f32>, Vec<f32>) {
    let dyq = q_grad(c.fp8, dy, rows, h);
    let mut du = vec![0.0; rows * f];
    linear_dgrad(c, rows, f, h, &dyq, w2, &mut du, 0.0);
    for (g, &u) in du.iter_mut().zip(u) {
        *g *= gelu_grad(u);
    }
    let duq = q_grad(c.fp8, &du, rows, f);
    linear_dgrad(c, rows, h, f, &duq, w1, dx, beta);
    (dyq, duq)
}

/// The weight gradients of [`gelu_mlp`]: `dW1 += xqᵀ · du`, `dW2 += gᵀ · dy` on the saved
/// operands.
#[allow(clippy::too_many_arguments)]
pub fn gelu_mlp_wgrad(
    c: &Ctx,
    rows: usize,
    h: usize,
    f: usize,
    (xq, g): (&[f32], &[f32]),
    (dyq, duq): (&[f32], &[f32]),
    acc1: &mut [f32],
    acc2: &mut [f32],
) {
    linear_wgrad(c, rows, h, f, xq, duq, acc1);
    linear_wgrad(c, rows, f, h, g, dyq, acc2);
}
