//! Context-parallel (ring) attention on the CPU, in f32.
//!
//! Context parallelism splits each sequence's `seq` tokens over `cp` ranks ([`cp_positions`]).
//! Each rank keeps its queries and its own keys/values; the K/V blocks travel around a ring and
//! each rank folds every block it sees into a running online-softmax state ([`RingForward`]),
//! as FlashAttention and Megatron-Core's ring attention do. The backward
//! ([`block_backward`]) is FlashAttention-2's: it recomputes the probabilities of one
//! (query block, key block) pair from the saved log-sum-exp and accumulates dQ into the query
//! rank and dK, dV into the buffers that travel back to the key block's owner.
//!
//! Layout (row-major, as in [`crate::cpu::math`]): a rank's q, k, v, ctx are `[b·n, h]` with
//! `h = heads·d`, sequence `s` in rows `s·n..(s+1)·n` (`n` = that rank's tokens per sequence),
//! head `j` in columns `j·d..(j+1)·d`. Scores are `S = q kᵀ/√d`. Per-row statistics (running
//! max, running sum, log-sum-exp, delta) are indexed `(s·heads + j)·n + i`.

/// Megatron-Core's load-balanced split: each sequence of `seq` tokens is cut into `2·cp` equal
/// chunks of `c = seq/(2·cp)` tokens; rank `r` holds chunks `r` and `2·cp − 1 − r`, in that
/// order, i.e. positions `r·c..(r+1)·c` then `(2cp−1−r)·c..(2cp−r)·c`, ascending within each
/// chunk. Under a causal mask this gives every rank the same amount of work. `cp = 1` gives
/// `0..seq`. Requires `seq % (2·cp) == 0` and `rank < cp` (asserted).
pub fn cp_positions(seq: usize, cp: usize, rank: usize) -> Vec<usize> {
    assert!(cp >= 1, "cp_positions: cp must be at least 1");
    assert!(
        rank < cp,
        "cp_positions: rank {rank} out of range for cp {cp}"
    );
    assert!(
        seq % (2 * cp) == 0,
        "cp_positions: seq {seq} is not a multiple of 2·cp = {}",
        2 * cp
    );
    let c = seq / (2 * cp);
    let first = rank * c..(rank + 1) * c;
    let second = (2 * cp - 1 - rank) * c..(2 * cp - rank) * c;
    first.chain(second).collect()
}

/// Shape of the ring-attention kernels: `b` sequences, `heads` heads of `d` features (hidden
/// `h = heads·d`), and whether the mask is causal (query at position `p` sees keys at
/// positions `≤ p`) or full.
#[derive(Debug, Clone, Copy)]
pub struct RingShape {
    /// Sequences.
    pub b: usize,
    /// Attention heads.
    pub heads: usize,
    /// Head dimension.
    pub d: usize,
    /// Causal mask (true) or attention over every key (false).
    pub causal: bool,
}

impl RingShape {
    /// Hidden size `h = heads·d`.
    fn h(&self) -> usize {
        self.heads * self.d
    }
    /// Softmax scale `1/√d`.
    fn scale(&self) -> f32 {
        1.0 / (self.d as f32).sqrt()
    }
    /// Whether a query at position `qp` sees a key at position `kp`: `!causal || kp ≤ qp`.
    fn visible(&self, qp: usize, kp: usize) -> bool {
        !self.causal || kp <= qp
    }
}

/// Dot product of two equal-length slices.
fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// One rank's running forward state over `sq` query tokens per sequence: the unnormalised
/// output accumulator `o [b·sq, h]`, the running max `m` and running sum `l` per
/// (sequence, head, query row), indexed `(s·heads + j)·sq + i`. Invariant after folding key
/// blocks `K₁..K_n`: `m = max S`, `l = Σ e^(S−m)`, `o = Σ e^(S−m) v` over every visible key seen.
#[derive(Debug, Clone)]
pub struct RingForward {
    shape: RingShape,
    sq: usize,
    o: Vec<f32>,
    m: Vec<f32>,
    l: Vec<f32>,
}

impl RingForward {
    /// An empty state: `o = 0`, `m = −∞`, `l = 0` (no key seen yet).
    pub fn new(shape: RingShape, sq: usize) -> Self {
        let rows = shape.b * shape.heads * sq;
        RingForward {
            shape,
            sq,
            o: vec![0.0; shape.b * sq * shape.h()],
            m: vec![f32::NEG_INFINITY; rows],
            l: vec![0.0; rows],
        }
    }

    /// Fold one K/V block into the state. `q [b·sq, h]` with positions `qpos` (len `sq`, the
    /// same for every sequence); `k`, `v [b·sk, h]` with positions `kpos` (len `sk`). Query `i`
    /// sees key `t` iff `!causal || kpos[t] ≤ qpos[i]`. Rows with no visible key in this block
    /// are left unchanged (bit for bit). Otherwise, with `S_t = q_i·k_t/√d` over the visible
    /// keys and `rowmax = max_t S_t`, the online softmax update is
    /// `m' = max(m, rowmax)`, `l' = l·e^(m−m') + Σ_t e^(S_t−m')`,
    /// `o' = o·e^(m−m') + Σ_t e^(S_t−m') v_t`.
    pub fn block(&mut self, q: &[f32], qpos: &[usize], k: &[f32], v: &[f32], kpos: &[usize]) {
        let sh = self.shape;
        let (h, d, sq, sk) = (sh.h(), sh.d, self.sq, kpos.len());
        assert_eq!(qpos.len(), sq, "RingForward::block: qpos length != sq");
        assert_eq!(
            q.len(),
            sh.b * sq * h,
            "RingForward::block: q is not [b·sq, h]"
        );
        assert_eq!(
            k.len(),
            sh.b * sk * h,
            "RingForward::block: k is not [b·sk, h]"
        );
        assert_eq!(
            v.len(),
            sh.b * sk * h,
            "RingForward::block: v is not [b·sk, h]"
        );
        let scale = sh.scale();
        // Scores of one row; NEG_INFINITY marks invisible keys.
        let mut sc = vec![0f32; sk];
        for s in 0..sh.b {
            for j in 0..sh.heads {
                for (i, &qp) in qpos.iter().enumerate() {
                    let qi = &q[(s * sq + i) * h + j * d..][..d];
                    let mut rowmax = f32::NEG_INFINITY;
                    let mut any = false;
                    for (t, (&kp, st)) in kpos.iter().zip(sc.iter_mut()).enumerate() {
                        if sh.visible(qp, kp) {
                            let kt = &k[(s * sk + t) * h + j * d..][..d];
                            *st = dot(qi, kt) * scale;
                            rowmax = rowmax.max(*st);
                            any = true;
                        } else {
                            *st = f32::NEG_INFINITY;
                        }
                    }
                    if !any {
                        continue;
                    }
                    let r = (s * sh.heads + j) * sq + i;
                    let m_new = self.m[r].max(rowmax);
                    // e^(m−m'); m = −∞ on the first visible block gives 0.
                    let alpha = (self.m[r] - m_new).exp();
                    let out = &mut self.o[(s * sq + i) * h + j * d..][..d];
                    out.iter_mut().for_each(|x| *x *= alpha);
                    let mut sum = 0f32;
                    for (t, &st) in sc.iter().enumerate() {
                        if st == f32::NEG_INFINITY {
                            continue;
                        }
                        let p = (st - m_new).exp();
                        sum += p;
                        let vt = &v[(s * sk + t) * h + j * d..][..d];
                        for (x, y) in out.iter_mut().zip(vt) {
                            *x += p * y;
                        }
                    }
                    self.l[r] = self.l[r] * alpha + sum;
                    self.m[r] = m_new;
                }
            }
        }
    }

    /// Normalise: `ctx [b·sq, h] = o / l` per (row, head), and the log-sum-exp per row,
    /// `lse [b·heads·sq]` (index `(s·heads + j)·sq + i`) `= m + ln l`. Every query sees at
    /// least its own key in a causal run (and every key in a full one), so `l > 0`; asserted.
    pub fn finish(self) -> (Vec<f32>, Vec<f32>) {
        let sh = self.shape;
        let (h, d, sq) = (sh.h(), sh.d, self.sq);
        let mut ctx = self.o;
        let mut lse = vec![0f32; self.m.len()];
        for s in 0..sh.b {
            for j in 0..sh.heads {
                for i in 0..sq {
                    let r = (s * sh.heads + j) * sq + i;
                    let l = self.l[r];
                    assert!(
                        l > 0.0,
                        "RingForward::finish: sequence {s} head {j} row {i} saw no visible key"
                    );
                    let inv = 1.0 / l;
                    ctx[(s * sq + i) * h + j * d..][..d]
                        .iter_mut()
                        .for_each(|x| *x *= inv);
                    lse[r] = self.m[r] + l.ln();
                }
            }
        }
        (ctx, lse)
    }
}

/// `delta [b·heads·sq]` (index `(s·heads + j)·sq + i`) `= Σ_e dout[i,e]·ctx[i,e]` over head
/// `j`'s columns of row `s·sq + i`: the backward's D term, equal to `rowsum(dP ∘ P)`.
/// `ctx`, `dout [b·sq, h]`.
pub fn delta(shape: RingShape, sq: usize, ctx: &[f32], dout: &[f32]) -> Vec<f32> {
    let (h, d) = (shape.h(), shape.d);
    assert_eq!(ctx.len(), shape.b * sq * h, "delta: ctx is not [b·sq, h]");
    assert_eq!(
        dout.len(),
        ctx.len(),
        "delta: dout and ctx differ in length"
    );
    let mut out = vec![0f32; shape.b * shape.heads * sq];
    for s in 0..shape.b {
        for j in 0..shape.heads {
            for i in 0..sq {
                let off = (s * sq + i) * h + j * d;
                out[(s * shape.heads + j) * sq + i] = dot(&ctx[off..][..d], &dout[off..][..d]);
            }
        }
    }
    out
}

/// Backward of one (query block, key block) pair, exact (FlashAttention-2's backward). With
/// `S = q kᵀ/√d` and, on visible pairs only (0 elsewhere), `P = e^(S − lse)`:
/// `dV += Pᵀ dout`, `dP = dout Vᵀ`, `dS = P ∘ (dP − delta)`, `dQ += dS K/√d`,
/// `dK += dSᵀ Q/√d`. `q`, `dout`, `dq [b·sq, h]` with positions `qpos` (len `sq`); `k`, `v`,
/// `dk`, `dv [b·sk, h]` with positions `kpos` (len `sk`); `lse`, `delta [b·heads·sq]` from
/// [`RingForward::finish`] and [`delta`]. Adds into `dq`, `dk`, `dv`, never overwrites.
#[allow(clippy::too_many_arguments)]
pub fn block_backward(
    shape: RingShape,
    q: &[f32],
    qpos: &[usize],
    k: &[f32],
    v: &[f32],
    kpos: &[usize],
    lse: &[f32],
    delta: &[f32],
    dout: &[f32],
    dq: &mut [f32],
    dk: &mut [f32],
    dv: &mut [f32],
) {
    let (h, d, sq, sk) = (shape.h(), shape.d, qpos.len(), kpos.len());
    let rows = shape.b * shape.heads * sq;
    assert_eq!(
        q.len(),
        shape.b * sq * h,
        "block_backward: q is not [b·sq, h]"
    );
    assert_eq!(
        k.len(),
        shape.b * sk * h,
        "block_backward: k is not [b·sk, h]"
    );
    assert_eq!(v.len(), k.len(), "block_backward: v and k differ in length");
    assert_eq!(lse.len(), rows, "block_backward: lse is not [b·heads·sq]");
    assert_eq!(
        delta.len(),
        rows,
        "block_backward: delta is not [b·heads·sq]"
    );
    assert_eq!(
        dout.len(),
        q.len(),
        "block_backward: dout and q differ in length"
    );
    assert_eq!(
        dq.len(),
        q.len(),
        "block_backward: dq and q differ in length"
    );
    assert_eq!(
        dk.len(),
        k.len(),
        "block_backward: dk and k differ in length"
    );
    assert_eq!(
        dv.len(),
        k.len(),
        "block_backward: dv and k differ in length"
    );
    let scale = shape.scale();
    for s in 0..shape.b {
        for j in 0..shape.heads {
            for (i, &qp) in qpos.iter().enumerate() {
                let r = (s * shape.heads + j) * sq + i;
                let qoff = (s * sq + i) * h + j * d;
                let qi = &q[qoff..][..d];
                let di = &dout[qoff..][..d];
                let dqi = &mut dq[qoff..][..d];
                for (t, &kp) in kpos.iter().enumerate() {
                    if !shape.visible(qp, kp) {
                        continue;
                    }
                    let koff = (s * sk + t) * h + j * d;
                    let kt = &k[koff..][..d];
                    let p = (dot(qi, kt) * scale - lse[r]).exp();
                    let dp = dot(di, &v[koff..][..d]);
                    // dS/√d, folded once.
                    let ds = p * (dp - delta[r]) * scale;
                    for e in 0..d {
                        dqi[e] += ds * kt[e];
                        dk[koff + e] += ds * qi[e];
                        dv[koff + e] += p * di[e];
                    }
                }
            }
        }
    }
}

/// Split `qkv [T, 3h]` ([`crate::cpu::math`]'s layout: q, k, v column blocks) into separate
/// `q`, `k`, `v [T, h]`.
pub fn split_qkv(tokens: usize, h: usize, qkv: &[f32]) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    assert_eq!(qkv.len(), tokens * 3 * h, "split_qkv: qkv is not [T, 3h]");
    let mut q = Vec::with_capacity(tokens * h);
    let mut k = Vec::with_capacity(tokens * h);
    let mut v = Vec::with_capacity(tokens * h);
    for row in qkv.chunks_exact(3 * h) {
        q.extend_from_slice(&row[..h]);
        k.extend_from_slice(&row[h..2 * h]);
        v.extend_from_slice(&row[2 * h..]);
    }
    (q, k, v)
}

/// The inverse of [`split_qkv`] for gradients: `dq`, `dk`, `dv [T, h]` into `dqkv [T, 3h]`.
pub fn join_qkv(tokens: usize, h: usize, dq: &[f32], dk: &[f32], dv: &[f32]) -> Vec<f32> {
    for (name, x) in [("dq", dq), ("dk", dk), ("dv", dv)] {
        assert_eq!(x.len(), tokens * h, "join_qkv: {name} is not [T, h]");
    }
    let mut out = Vec::with_capacity(tokens * 3 * h);
    for t in 0..tokens {
        for x in [dq, dk, dv] {
            out.extend_from_slice(&x[t * h..][..h]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::math::{attention_backward, attention_forward, AttnShape};
    use crate::spec::SplitMix64;

    const B: usize = 2;
    const HEADS: usize = 2;
    const D: usize = 4;
    const SEQ: usize = 16;
    const H: usize = HEADS * D;

    fn random(seed: u64, n: usize, amp: f32) -> Vec<f32> {
        let mut rng = SplitMix64::new(seed);
        (0..n).map(|_| rng.next_signed_unit() * amp).collect()
    }

    /// Rows of `x [b·seq, h]` at `pos` within each sequence: `[b·pos.len(), h]`.
    fn gather(x: &[f32], pos: &[usize]) -> Vec<f32> {
        let mut out = Vec::new();
        for s in 0..B {
            for &p in pos {
                out.extend_from_slice(&x[(s * SEQ + p) * H..][..H]);
            }
        }
        out
    }

    /// The inverse of `gather`: rows of `x [b·pos.len(), h]` into `full [b·seq, h]`.
    fn scatter(x: &[f32], pos: &[usize], full: &mut [f32]) {
        for s in 0..B {
            for (i, &p) in pos.iter().enumerate() {
                full[(s * SEQ + p) * H..][..H].copy_from_slice(&x[(s * pos.len() + i) * H..][..H]);
            }
        }
    }

    fn assert_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: lengths differ");
        for (n, (a, b)) in got.iter().zip(want).enumerate() {
            assert!((a - b).abs() <= tol, "{what}[{n}]: {a} vs {b}");
        }
    }

    /// Ring attention over `cp` ranks, forward and backward, on full `qkv [b·seq, 3h]` and
    /// `dout [b·seq, h]`: returns (ctx [b·seq, h], dqkv [b·seq, 3h]). Rank `r` folds K/V
    /// blocks in ring order `r, r−1, …` (mod cp); dK, dV accumulate into the owner's buffers.
    fn ring(cp: usize, causal: bool, qkv: &[f32], dout: &[f32]) -> (Vec<f32>, Vec<f32>) {
        let shape = RingShape {
            b: B,
            heads: HEADS,
            d: D,
            causal,
        };
        let t = B * SEQ;
        let (q, k, v) = split_qkv(t, H, qkv);
        let pos: Vec<Vec<usize>> = (0..cp).map(|r| cp_positions(SEQ, cp, r)).collect();
        let lq: Vec<Vec<f32>> = pos.iter().map(|p| gather(&q, p)).collect();
        let lk: Vec<Vec<f32>> = pos.iter().map(|p| gather(&k, p)).collect();
        let lv: Vec<Vec<f32>> = pos.iter().map(|p| gather(&v, p)).collect();
        let order = |r: usize| (0..cp).map(move |step| (r + cp - step) % cp);
        let mut ctx = vec![f32::NAN; t * H];
        let (mut dq, mut dk, mut dv) = (vec![0.0; t * H], vec![0.0; t * H], vec![0.0; t * H]);
        let mut ldk: Vec<Vec<f32>> = lk.iter().map(|x| vec![0.0; x.len()]).collect();
        let mut ldv = ldk.clone();
        for r in 0..cp {
            let sq = pos[r].len();
            let mut st = RingForward::new(shape, sq);
            for src in order(r) {
                st.block(&lq[r], &pos[r], &lk[src], &lv[src], &pos[src]);
            }
            let (c, lse) = st.finish();
            scatter(&c, &pos[r], &mut ctx);
            let ldout = gather(dout, &pos[r]);
            let dl = delta(shape, sq, &c, &ldout);
            let mut ldq = vec![0.0; sq * B * H];
            for src in order(r) {
                let (dks, dvs) = (&mut ldk[src], &mut ldv[src]);
                block_backward(
                    shape, &lq[r], &pos[r], &lk[src], &lv[src], &pos[src], &lse, &dl, &ldout,
                    &mut ldq, dks, dvs,
                );
            }
            scatter(&ldq, &pos[r], &mut dq);
        }
        for r in 0..cp {
            scatter(&ldk[r], &pos[r], &mut dk);
            scatter(&ldv[r], &pos[r], &mut dv);
        }
        (ctx, join_qkv(t, H, &dq, &dk, &dv))
    }

    /// Naive full (non-causal) attention in f64: (ctx [b·seq, h], dqkv [b·seq, 3h]) from
    /// `P = softmax(q kᵀ/√d)`, `dP = dout vᵀ`, `dS = P ∘ (dP − rowsum(dP ∘ P))`.
    fn naive_full(qkv: &[f32], dout: &[f32]) -> (Vec<f32>, Vec<f32>) {
        let w = 3 * H;
        let scale = 1.0 / (D as f64).sqrt();
        let at = |row: usize, col: usize| qkv[row * w + col] as f64;
        let mut ctx = vec![0f64; B * SEQ * H];
        let mut dqkv = vec![0f64; B * SEQ * w];
        for s in 0..B {
            for j in 0..HEADS {
                let (qc, kc, vc) = (j * D, H + j * D, 2 * H + j * D);
                let mut p = vec![vec![0f64; SEQ]; SEQ];
                for (i, pi) in p.iter_mut().enumerate() {
                    for (t, x) in pi.iter_mut().enumerate() {
                        *x = (0..D)
                            .map(|e| at(s * SEQ + i, qc + e) * at(s * SEQ + t, kc + e))
                            .sum::<f64>()
                            * scale;
                    }
                    let mx = pi.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    pi.iter_mut().for_each(|x| *x = (*x - mx).exp());
                    let sum: f64 = pi.iter().sum();
                    pi.iter_mut().for_each(|x| *x /= sum);
                }
                for (i, pi) in p.iter().enumerate() {
                    let ri = s * SEQ + i;
                    let dp: Vec<f64> = (0..SEQ)
                        .map(|t| {
                            (0..D)
                                .map(|e| dout[ri * H + j * D + e] as f64 * at(s * SEQ + t, vc + e))
                                .sum()
                        })
                        .collect();
                    let dsum: f64 = dp.iter().zip(pi).map(|(a, b)| a * b).sum();
                    for (t, &pt) in pi.iter().enumerate() {
                        let rt = s * SEQ + t;
                        let ds = pt * (dp[t] - dsum) * scale;
                        for e in 0..D {
                            ctx[ri * H + j * D + e] += pt * at(rt, vc + e);
                            dqkv[ri * w + qc + e] += ds * at(rt, kc + e);
                            dqkv[rt * w + kc + e] += ds * at(ri, qc + e);
                            dqkv[rt * w + vc + e] += pt * dout[ri * H + j * D + e] as f64;
                        }
                    }
                }
            }
        }
        let f = |x: Vec<f64>| x.into_iter().map(|y| y as f32).collect();
        (f(ctx), f(dqkv))
    }

    #[test]
    fn cp_positions_balance_and_cover_every_position_once() {
        assert_eq!(cp_positions(8, 2, 0), vec![0, 1, 6, 7]);
        assert_eq!(cp_positions(8, 2, 1), vec![2, 3, 4, 5]);
        assert_eq!(cp_positions(8, 1, 0), (0..8).collect::<Vec<_>>());
        for cp in [1, 2, 4] {
            let mut seen = vec![0u32; 16];
            for r in 0..cp {
                let p = cp_positions(16, cp, r);
                assert_eq!(p.len(), 16 / cp, "cp {cp} rank {r}");
                p.iter().for_each(|&x| seen[x] += 1);
            }
            assert!(seen.iter().all(|&c| c == 1), "cp {cp}: {seen:?}");
        }
    }

    #[test]
    fn split_and_join_qkv_are_inverse() {
        let qkv = random(9, 5 * 3 * H, 1.0);
        let (q, k, v) = split_qkv(5, H, &qkv);
        assert_eq!(q[H..2 * H], qkv[3 * H..4 * H]);
        assert_eq!(k[..H], qkv[H..2 * H]);
        assert_eq!(v[..H], qkv[2 * H..3 * H]);
        assert_eq!(join_qkv(5, H, &q, &k, &v), qkv);
    }

    #[test]
    fn ring_forward_and_backward_equal_full_causal_attention() {
        let sh = AttnShape {
            b: B,
            seq: SEQ,
            heads: HEADS,
            d: D,
        };
        let t = B * SEQ;
        let qkv = random(11, t * 3 * H, 2.0);
        let dout = random(12, t * H, 1.0);
        let mut want_ctx = vec![0.0; t * H];
        let mut p = vec![0.0; sh.probs_len()];
        attention_forward(sh, &qkv, &mut want_ctx, &mut p);
        // Far from uniform: some row's largest probability is big.
        assert!(p.iter().any(|&x| x > 0.9), "softmax too flat for the test");
        let mut want_dqkv = vec![0.0; t * 3 * H];
        attention_backward(sh, &qkv, &p, &dout, &mut want_dqkv);
        for cp in [1, 2, 4] {
            let (ctx, dqkv) = ring(cp, true, &qkv, &dout);
            assert_close(&ctx, &want_ctx, 1e-5, &format!("ctx cp={cp}"));
            assert_close(&dqkv, &want_dqkv, 1e-4, &format!("dqkv cp={cp}"));
        }
    }

    #[test]
    fn ring_non_causal_equals_naive_full_attention() {
        let t = B * SEQ;
        let qkv = random(21, t * 3 * H, 2.0);
        let dout = random(22, t * H, 1.0);
        let (want_ctx, want_dqkv) = naive_full(&qkv, &dout);
        let (ctx, dqkv) = ring(2, false, &qkv, &dout);
        assert_close(&ctx, &want_ctx, 1e-5, "ctx");
        assert_close(&dqkv, &want_dqkv, 1e-4, "dqkv");
        // And it differs from the causal result (the mask is really off).
        let (causal_ctx, _) = ring(2, true, &qkv, &dout);
        assert!(ctx
            .iter()
            .zip(&causal_ctx)
            .any(|(a, b)| (a - b).abs() > 1e-3));
    }

    #[test]
    fn a_block_entirely_in_the_future_leaves_the_state_unchanged() {
        let shape = RingShape {
            b: B,
            heads: HEADS,
            d: D,
            causal: true,
        };
        let (qpos, kpos): (Vec<usize>, Vec<usize>) = ((0..4).collect(), (4..8).collect());
        let q = random(31, B * 4 * H, 2.0);
        let k = random(32, B * 4 * H, 2.0);
        let v = random(33, B * 4 * H, 2.0);
        let bits = |st: &RingForward| {
            let f = |x: &[f32]| x.iter().map(|y| y.to_bits()).collect::<Vec<_>>();
            (f(&st.o), f(&st.m), f(&st.l))
        };
        // From the empty state and from a state holding the rank's own block.
        let mut st = RingForward::new(shape, 4);
        let before = bits(&st);
        st.block(&q, &qpos, &k, &v, &kpos);
        assert_eq!(bits(&st), before, "empty state changed");
        st.block(&q, &qpos, &k, &v, &qpos);
        let before = bits(&st);
        assert!(st.l.iter().all(|&l| l > 0.0));
        st.block(&q, &qpos, &k, &v, &kpos);
        assert_eq!(bits(&st), before, "state changed by a future block");
        // A block backward of the same pair adds nothing.
        let rows = B * HEADS * 4;
        let (mut dq, mut dk, mut dv) = (vec![0.0; q.len()], vec![0.0; k.len()], vec![0.0; v.len()]);
        let (lse, dl) = (vec![0.0; rows], vec![0.0; rows]);
        block_backward(
            shape, &q, &qpos, &k, &v, &kpos, &lse, &dl, &q, &mut dq, &mut dk, &mut dv,
        );
        assert!(dq.iter().chain(&dk).chain(&dv).all(|&x| x == 0.0));
    }
}
