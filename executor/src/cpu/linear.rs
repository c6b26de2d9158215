//! What every layer's math shares on the CPU: the call's shapes, threads and number format
//! ([`Ctx`]) and the three GEMMs of a linear layer with their operands as the FP8 recipe feeds
//! them (forward, input gradient, weight gradient).

use super::math::{gemm, AttnShape};
use super::quant::{q_weight, Fp8Recipe};
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
