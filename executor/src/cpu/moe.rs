//! A mixture-of-experts block on the CPU: router, top-k gates, permutation, the experts'
//! GEMMs on contiguous rows, un-permutation and a shared expert, with expert parallelism as an
//! all-to-all over the expert-parallel group ([`crate::spec`] has the math).
//!
//! Dispatch order: a token's `j`-th choice is assignment `a = t·k + j`; assignments are sorted
//! by (expert, a), which puts each destination rank's rows in one run and each expert's rows in
//! token order. A rank sends rank `q` a header of `E/ep` row counts (one per expert of `q`)
//! followed by the rows; an expert's rows are those from every source rank, in rank order. The
//! combine sends each expert's outputs back in the order they came, so the source reads its
//! rows back in its own dispatch order. The backward moves the output gradients the same way
//! (the counts are known by then) and the input gradients back.

use super::comm::{CommError, Comms, Group};
use super::linear::{gelu_mlp, gelu_mlp_dgrad, gelu_mlp_wgrad, Ctx};
use super::math::gemm;
use super::quant::q_act;
use crate::spec::{init_matrix, Dims, Matrix};
use std::ops::Range;

/// One expert's two MLP matrices, `[h, f]` and `[f, h]`.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpertWeights {
    pub w1: Vec<f32>,
    pub w2: Vec<f32>,
}

/// A MoE layer's weights on one rank: the router, the routed experts it holds
/// (`first..first + experts.len()`) and the shared expert.
#[derive(Debug, Clone, PartialEq)]
pub struct MoeWeights {
    pub router: Vec<f32>,
    pub first: u32,
    pub experts: Vec<ExpertWeights>,
    pub shared: Option<ExpertWeights>,
}

impl MoeWeights {
    /// The spec's initial weights of layer `layer`'s MoE block, holding experts `held`.
    pub fn init(seed: u64, layer: u32, d: &Dims, held: Range<u32>) -> MoeWeights {
        let m = d.moe.expect("a MoE layer in a model with experts");
        MoeWeights {
            router: init_matrix(seed, layer, Matrix::Router, d),
            first: held.start,
            experts: held
                .map(|e| ExpertWeights {
                    w1: init_matrix(seed, layer, Matrix::Expert1(e), d),
                    w2: init_matrix(seed, layer, Matrix::Expert2(e), d),
                })
                .collect(),
            shared: (m.shared_ffn > 0).then(|| ExpertWeights {
                w1: init_matrix(seed, layer, Matrix::Shared1, d),
                w2: init_matrix(seed, layer, Matrix::Shared2, d),
            }),
        }
    }

    pub fn zeros_like(&self) -> MoeWeights {
        let z = |e: &ExpertWeights| ExpertWeights {
            w1: vec![0.0; e.w1.len()],
            w2: vec![0.0; e.w2.len()],
        };
        MoeWeights {
            router: vec![0.0; self.router.len()],
            first: self.first,
            experts: self.experts.iter().map(z).collect(),
            shared: self.shared.as_ref().map(z),
        }
    }

    /// Router, held experts (marked `true`: routed-expert weights), shared expert.
    pub fn tensors(&self) -> Vec<(&Vec<f32>, bool)> {
        let mut v = vec![(&self.router, false)];
        for e in &self.experts {
            v.extend([(&e.w1, true), (&e.w2, true)]);
        }
        if let Some(s) = &self.shared {
            v.extend([(&s.w1, false), (&s.w2, false)]);
        }
        v
    }

    pub fn tensors_mut(&mut self) -> Vec<(&mut Vec<f32>, bool)> {
        let mut v = vec![(&mut self.router, false)];
        for e in &mut self.experts {
            v.extend([(&mut e.w1, true), (&mut e.w2, true)]);
        }
        if let Some(s) = &mut self.shared {
            v.extend([(&mut s.w1, false), (&mut s.w2, false)]);
        }
        v
    }

    /// Router, every expert of the model (gathered over `ep`, rank order), shared expert.
    pub fn flat_gathered(&self, ep: &mut Group) -> Result<Vec<f32>, CommError> {
        let mine: Vec<f32> = self
            .experts
            .iter()
            .flat_map(|e| e.w1.iter().chain(&e.w2))
            .copied()
            .collect();
        let mut out = self.router.clone();
        for part in ep.all_gather(&mine)? {
            out.extend(part);
        }
        if let Some(s) = &self.shared {
            out.extend(s.w1.iter().chain(&s.w2));
        }
        Ok(out)
    }
}

/// What the forward keeps: the routing (source side) and each held expert's operands (owner
/// side).
#[derive(Debug, Clone, Default)]
pub struct MoeActs {
    /// Expert of each assignment `t·k + j`, and its gate.
    sel: Vec<u32>,
    gates: Vec<f32>,
    /// Assignments in dispatch order.
    order: Vec<u32>,
    /// Each assignment's expert output before its gate, `[T·k, h]`.
    expert_out: Vec<f32>,
    /// Owner side: rows received from each source rank for each held expert.
    counts: Vec<Vec<usize>>,
    /// Per held expert: its input rows, `u` and `gelu(u)` (quantised operands under FP8).
    xin: Vec<Vec<f32>>,
    u: Vec<Vec<f32>>,
    g: Vec<Vec<f32>>,
    /// The shared expert's input, `u` and `gelu(u)`.
    shared: Option<[Vec<f32>; 3]>,
}

/// What `I` keeps for `W`.
#[derive(Debug, Clone, Default)]
pub struct MoeGrads {
    /// `[T, E]`: the router logits' gradient (0 off the chosen experts).
    dlogits: Vec<f32>,
    /// Per held expert: the gradients at its two GEMMs' outputs.
    dout: Vec<Vec<f32>>,
    du: Vec<Vec<f32>>,
    /// The shared expert's: at its output and at `u`.
    shared: Option<[Vec<f32>; 2]>,
}

/// The `k` largest of `logits` (ties to the lower index), in that order.
fn top_k(logits: &[f32], k: usize) -> Vec<u32> {
    let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
    idx.sort_by(|&a, &b| {
        logits[b as usize]
            .total_cmp(&logits[a as usize])
            .then(a.cmp(&b))
    });
    idx.truncate(k);
    idx
}

/// Sends each assignment's row (`row(a)`, `h` wide) to the rank of its expert, in dispatch
/// order, with the header of row counts when `header`; returns what each source rank sent.
fn dispatch<'a>(
    ep: &mut Group,
    a: &MoeActs,
    per_rank: usize,
    header: bool,
    row: impl Fn(usize) -> &'a [f32],
) -> Result<Vec<Vec<f32>>, CommError> {
    let mut parts: Vec<Vec<f32>> = vec![Vec::new(); ep.size()];
    if header {
        let mut rows = vec![0usize; ep.size() * per_rank];
        for &e in &a.sel {
            rows[e as usize] += 1;
        }
        for (p, counts) in parts.iter_mut().zip(rows.chunks(per_rank.max(1))) {
            p.extend(counts.iter().map(|&n| n as f32));
        }
    }
    for &asg in &a.order {
        let q = a.sel[asg as usize] as usize / per_rank;
        parts[q].extend_from_slice(row(asg as usize));
    }
    ep.all_to_all(parts)
}

/// Owner side: from what each source sent (rows after `skip` header values), each held
/// expert's rows, sources in rank order.
fn gather_rows(recv: &[Vec<f32>], counts: &[Vec<usize>], skip: usize, h: usize) -> Vec<Vec<f32>> {
    let held = counts.first().map_or(0, |c| c.len());
    let mut out = vec![Vec::new(); held];
    for (src, part) in recv.iter().enumerate() {
        let mut off = skip;
        for (le, rows) in out.iter_mut().enumerate() {
            let n = counts[src][le] * h;
            rows.extend_from_slice(&part[off..off + n]);
            off += n;
        }
    }
    out
}

/// The inverse of [`gather_rows`]: each held expert's output rows back to their sources.
fn scatter_rows(per_expert: &[Vec<f32>], counts: &[Vec<usize>], h: usize) -> Vec<Vec<f32>> {
    let mut out = vec![Vec::new(); counts.len()];
    let mut off = vec![0usize; per_expert.len()];
    for (src, part) in out.iter_mut().enumerate() {
        for (le, rows) in per_expert.iter().enumerate() {
            let n = counts[src][le] * h;
            part.extend_from_slice(&rows[off[le]..off[le] + n]);
            off[le] += n;
        }
    }
    out
}

/// Source side: the rows each rank sent back, in dispatch order, into `[T·k, h]` by assignment.
fn combine(a: &MoeActs, back: &[Vec<f32>], per_rank: usize, h: usize) -> Vec<f32> {
    let mut out = vec![0.0; a.sel.len() * h];
    let mut off = vec![0usize; back.len()];
    for &asg in &a.order {
        let q = a.sel[asg as usize] as usize / per_rank;
        out[asg as usize * h..][..h].copy_from_slice(&back[q][off[q]..off[q] + h]);
        off[q] += h;
    }
    out
}

/// Forward of the MoE block on `x1 [T, h]`: returns the routed and shared experts' sum `[T, h]`
/// (the caller adds the residual).
pub fn forward(
    c: &Ctx,
    w: &MoeWeights,
    x1: &[f32],
    comms: &mut Comms,
) -> Result<(Vec<f32>, MoeActs), CommError> {
    let d = &c.dims;
    let m = d.moe.expect("a MoE layer in a model with experts");
    let (t, h, k, e) = (d.tokens(), d.hidden, m.topk, m.experts);
    let per_rank = w.experts.len();
    let mut logits = vec![0.0; t * e];
    gemm(
        t,
        h,
        e,
        x1,
        false,
        &w.router,
        false,
        &mut logits,
        0.0,
        c.threads,
    );
    let mut a = MoeActs::default();
    for row in logits.chunks(e) {
        let sel = top_k(row, k);
        let max = sel
            .iter()
            .map(|&i| row[i as usize])
            .fold(f32::NEG_INFINITY, f32::max);
        let ex: Vec<f32> = sel.iter().map(|&i| (row[i as usize] - max).exp()).collect();
        let sum: f32 = ex.iter().sum();
        a.gates.extend(ex.iter().map(|v| v / sum));
        a.sel.extend(sel);
    }
    a.order = (0..(t * k) as u32).collect();
    a.order.sort_by_key(|&asg| (a.sel[asg as usize], asg));
    let recv = dispatch(&mut comms.ep, &a, per_rank, true, |asg| {
        &x1[asg / k * h..][..h]
    })?;
    a.counts = recv
        .iter()
        .map(|p| p[..per_rank].iter().map(|&n| n as usize).collect())
        .collect();
    let xin = gather_rows(&recv, &a.counts, per_rank, h);
    let mut outs = Vec::with_capacity(per_rank);
    for (ew, x) in w.experts.iter().zip(xin) {
        let rows = x.len() / h;
        let xq = q_act(c.fp8, &x, rows, h);
        let mut o = vec![0.0; rows * h];
        let (u, gq) = gelu_mlp(c, rows, h, m.ffn, &xq, &ew.w1, &ew.w2, &mut o, 0.0);
        outs.push(o);
        a.xin.push(xq);
        a.u.push(u);
        a.g.push(gq);
    }
    let back = comms.ep.all_to_all(scatter_rows(&outs, &a.counts, h))?;
    a.expert_out = combine(&a, &back, per_rank, h);
    let mut y = vec![0.0; t * h];
    for (asg, gate) in a.gates.iter().enumerate() {
        let o = &a.expert_out[asg * h..][..h];
        for (dst, v) in y[asg / k * h..][..h].iter_mut().zip(o) {
            *dst += gate * v;
        }
    }
    if let Some(s) = &w.shared {
        let xq = q_act(c.fp8, x1, t, h);
        let (u, gq) = gelu_mlp(c, t, h, m.shared_ffn, &xq, &s.w1, &s.w2, &mut y, 1.0);
        a.shared = Some([xq, u, gq]);
    }
    Ok((y, a))
}

/// Backward for inputs: the gradient at `x1` through the block from `dy`, the gradient at its
/// output; keeps what [`backward_weight`] needs.
pub fn backward_input(
    c: &Ctx,
    w: &MoeWeights,
    a: &MoeActs,
    dy: &[f32],
    comms: &mut Comms,
) -> Result<(Vec<f32>, MoeGrads), CommError> {
    let d = &c.dims;
    let m = d.moe.expect("a MoE layer in a model with experts");
    let (t, h, k, e) = (d.tokens(), d.hidden, m.topk, m.experts);
    let per_rank = w.experts.len();
    // moe[t] = Σ_j p_j o_j: do_j = p_j dy[t], dp_j = dy[t] · o_j.
    let mut dout_rows = vec![0.0; t * k * h];
    let mut dgate = vec![0.0; t * k];
    for (asg, gate) in a.gates.iter().enumerate() {
        let dyt = &dy[asg / k * h..][..h];
        let o = &a.expert_out[asg * h..][..h];
        dgate[asg] = dyt.iter().zip(o).map(|(x, y)| x * y).sum();
        for (dst, v) in dout_rows[asg * h..][..h].iter_mut().zip(dyt) {
            *dst = gate * v;
        }
    }
    let recv = dispatch(&mut comms.ep, a, per_rank, false, |asg| {
        &dout_rows[asg * h..][..h]
    })?;
    let douts = gather_rows(&recv, &a.counts, 0, h);
    let mut g = MoeGrads::default();
    let mut dxs = Vec::with_capacity(per_rank);
    for (le, (ew, dout)) in w.experts.iter().zip(douts).enumerate() {
        let rows = dout.len() / h;
        let mut dx = vec![0.0; rows * h];
        let (w1, w2) = (&ew.w1, &ew.w2);
        let (dq, duq) = gelu_mlp_dgrad(c, rows, h, m.ffn, &dout, &a.u[le], w1, w2, &mut dx, 0.0);
        dxs.push(dx);
        g.dout.push(dq);
        g.du.push(duq);
    }
    let back = comms.ep.all_to_all(scatter_rows(&dxs, &a.counts, h))?;
    let dx_rows = combine(a, &back, per_rank, h);
    let mut dx = vec![0.0; t * h];
    for (asg, row) in dx_rows.chunks(h).enumerate() {
        for (dst, v) in dx[asg / k * h..][..h].iter_mut().zip(row) {
            *dst += v;
        }
    }
    // Gates p = softmax(chosen logits): dl_j = p_j (dp_j − Σ_i p_i dp_i).
    g.dlogits = vec![0.0; t * e];
    for tok in 0..t {
        let r = tok * k..(tok + 1) * k;
        let s: f32 = a.gates[r.clone()]
            .iter()
            .zip(&dgate[r.clone()])
            .map(|(p, q)| p * q)
            .sum();
        for asg in r {
            g.dlogits[tok * e + a.sel[asg] as usize] = a.gates[asg] * (dgate[asg] - s);
        }
    }
    gemm(
        t, e, h, &g.dlogits, false, &w.router, true, &mut dx, 1.0, c.threads,
    );
    if let (Some(s), Some([_, u, _])) = (&w.shared, &a.shared) {
        let f = m.shared_ffn;
        let (dyq, duq) = gelu_mlp_dgrad(c, t, h, f, dy, u, &s.w1, &s.w2, &mut dx, 1.0);
        g.shared = Some([dyq, duq]);
    }
    Ok((dx, g))
}

/// Backward for weights: the router's from `x1`, each held expert's and the shared expert's.
pub fn backward_weight(c: &Ctx, a: &MoeActs, g: &MoeGrads, x1: &[f32], acc: &mut MoeWeights) {
    let d = &c.dims;
    let m = d.moe.expect("a MoE layer in a model with experts");
    let (t, h, e) = (d.tokens(), d.hidden, m.experts);
    gemm(
        h,
        t,
        e,
        x1,
        true,
        &g.dlogits,
        false,
        &mut acc.router,
        1.0,
        c.threads,
    );
    for (le, ew) in acc.experts.iter_mut().enumerate() {
        let rows = a.xin[le].len() / h;
        let (x, gq, dout, du) = (&a.xin[le], &a.g[le], &g.dout[le], &g.du[le]);
        gelu_mlp_wgrad(
            c,
            rows,
            h,
            m.ffn,
            (x, gq),
            (dout, du),
            &mut ew.w1,
            &mut ew.w2,
        );
    }
    if let (Some(s), Some([xq, _, gq]), Some([dyq, duq])) = (&mut acc.shared, &a.shared, &g.shared)
    {
        let f = m.shared_ffn;
        gelu_mlp_wgrad(c, t, h, f, (xq, gq), (dyq, duq), &mut s.w1, &mut s.w2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_takes_the_largest_and_breaks_ties_by_index() {
        assert_eq!(top_k(&[0.1, 0.5, 0.5, -1.0, 0.7], 3), vec![4, 1, 2]);
        assert_eq!(top_k(&[2.0, 2.0], 1), vec![0]);
    }

    #[test]
    fn rows_gathered_per_expert_scatter_back_in_place() {
        // Two sources, two held experts, h = 1: source 0 sent [e0: 1 row, e1: 2 rows],
        // source 1 [e0: 2 rows, e1: 0 rows] after 2 header values.
        let counts = vec![vec![1, 2], vec![2, 0]];
        let recv = vec![vec![9.0, 9.0, 1.0, 2.0, 3.0], vec![9.0, 9.0, 4.0, 5.0]];
        let per = gather_rows(&recv, &counts, 2, 1);
        assert_eq!(per, vec![vec![1.0, 4.0, 5.0], vec![2.0, 3.0]]);
        let back = scatter_rows(&per, &counts, 1);
        assert_eq!(back, vec![vec![1.0, 2.0, 3.0], vec![4.0, 5.0]]);
    }
}
