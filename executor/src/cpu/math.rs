//! Dense f32 kernels of the CPU backend: GEMM (through `matrixmultiply`), the tanh GELU and its
//! derivative, causal attention forward/backward and softmax cross-entropy. Row-major
//! everywhere. No IO, no clock.

/// `C = op(A) · op(B) + beta · C` with `op(A)` of shape `[m, k]`, `op(B)` of `[k, n]` and `C`
/// `[m, n]`, all row-major. `ta` means `A` is stored as `[k, m]` (so `op(A) = Aᵀ`), likewise
/// `tb` for `B` stored `[n, k]`. With `threads > 1` the rows of `C` are split over scoped
/// threads, each running a single-threaded GEMM on its slice (same result bit for bit: every
/// element of C is computed by the same kernel on the same data).
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    m: usize,
    k: usize,
    n: usize,
    a: &[f32],
    ta: bool,
    b: &[f32],
    tb: bool,
    c: &mut [f32],
    beta: f32,
    threads: usize,
) {
    assert_eq!(
        a.len(),
        m * k,
        "gemm: A has {} elements, want {m}x{k}",
        a.len()
    );
    assert_eq!(
        b.len(),
        k * n,
        "gemm: B has {} elements, want {k}x{n}",
        b.len()
    );
    assert_eq!(
        c.len(),
        m * n,
        "gemm: C has {} elements, want {m}x{n}",
        c.len()
    );
    if m == 0 || n == 0 {
        return;
    }
    // Strides of op(A) [m, k] and op(B) [k, n] as stored.
    let (rsa, csa) = if ta { (1, m as isize) } else { (k as isize, 1) };
    let (rsb, csb) = if tb { (1, k as isize) } else { (n as isize, 1) };
    // Below a few MFLOP the thread start-up costs more than it saves.
    let threads = if 2 * m * n * k < 4_000_000 {
        1
    } else {
        threads.clamp(1, m)
    };
    let run = |row0: usize, rows: usize, c: &mut [f32]| {
        // Row `row0` of op(A) starts at element row0 * rsa.
        let a_off = row0 as isize * rsa;
        // SAFETY: the asserts above bound every index matrixmultiply touches: op(A) rows
        // row0..row0+rows with k columns lie in `a` (stored m*k), op(B) is k x n inside `b`,
        // and `c` is exactly rows x n with row stride n.
        unsafe {
            matrixmultiply::sgemm(
                rows,
                k,
                n,
                1.0,
                a.as_ptr().offset(a_off),
                rsa,
                csa,
                b.as_ptr(),
                rsb,
                csb,
                beta,
                c.as_mut_ptr(),
                n as isize,
                1,
            );
        }
    };
    if threads == 1 {
        run(0, m, c);
        return;
    }
    let per = m.div_ceil(threads);
    std::thread::scope(|s| {
        for (i, chunk) in c.chunks_mut(per * n).enumerate() {
            let rows = chunk.len() / n;
            let run = &run;
            s.spawn(move || run(i * per, rows, chunk));
        }
    });
}

const GELU_A: f32 = 0.797_884_6; // sqrt(2/pi)
const GELU_B: f32 = 0.044_715;

/// tanh-form GELU: `0.5 u (1 + tanh(sqrt(2/π) (u + 0.044715 u³)))`.
pub fn gelu(u: f32) -> f32 {
    0.5 * u * (1.0 + (GELU_A * (u + GELU_B * u * u * u)).tanh())
}

/// d gelu / du = 0.5 (1 + t) + 0.5 u (1 - t²) sqrt(2/π) (1 + 3·0.044715 u²), t the tanh above.
pub fn gelu_grad(u: f32) -> f32 {
    let t = (GELU_A * (u + GELU_B * u * u * u)).tanh();
    0.5 * (1.0 + t) + 0.5 * u * (1.0 - t * t) * GELU_A * (1.0 + 3.0 * GELU_B * u * u)
}

/// Shape of the attention kernels: `b` sequences of `seq` tokens, `heads` heads of `d`
/// features, hidden `h = heads * d`.
#[derive(Debug, Clone, Copy)]
pub struct AttnShape {
    pub b: usize,
    pub seq: usize,
    pub heads: usize,
    pub d: usize,
}

impl AttnShape {
    fn h(&self) -> usize {
        self.heads * self.d
    }
    /// Elements of the saved probabilities: one `seq x seq` matrix per sequence and head.
    pub fn probs_len(&self) -> usize {
        self.b * self.heads * self.seq * self.seq
    }
}

/// Causal attention forward. `qkv [T, 3h]` (q, k, v column blocks) → `ctx [T, h]` and the
/// softmax probabilities `p [b, heads, seq, seq]` (zeros above the diagonal).
pub fn attention_forward(sh: AttnShape, qkv: &[f32], ctx: &mut [f32], p: &mut [f32]) {
    let h = sh.h();
    let w = 3 * h;
    let scale = 1.0 / (sh.d as f32).sqrt();
    ctx.fill(0.0);
    p.fill(0.0);
    for s in 0..sh.b {
        for j in 0..sh.heads {
            let pm = &mut p[(s * sh.heads + j) * sh.seq * sh.seq..][..sh.seq * sh.seq];
            for i in 0..sh.seq {
                let qi = &qkv[(s * sh.seq + i) * w + j * sh.d..][..sh.d];
                let row = &mut pm[i * sh.seq..][..sh.seq];
                let mut max = f32::NEG_INFINITY;
                for (t, r) in row.iter_mut().enumerate().take(i + 1) {
                    let kt = &qkv[(s * sh.seq + t) * w + h + j * sh.d..][..sh.d];
                    let dot: f32 = qi.iter().zip(kt).map(|(a, b)| a * b).sum();
                    *r = dot * scale;
                    max = max.max(*r);
                }
                let mut sum = 0.0;
                for r in row.iter_mut().take(i + 1) {
                    *r = (*r - max).exp();
                    sum += *r;
                }
                let out = &mut ctx[(s * sh.seq + i) * h + j * sh.d..][..sh.d];
                for (t, r) in row.iter_mut().enumerate().take(i + 1) {
                    *r /= sum;
                    let vt = &qkv[(s * sh.seq + t) * w + 2 * h + j * sh.d..][..sh.d];
                    for (o, v) in out.iter_mut().zip(vt) {
                        *o += *r * v;
                    }
                }
            }
        }
    }
}

/// Causal attention backward: from `dctx [T, h]`, the saved `qkv` and `p`, the gradient
/// `dqkv [T, 3h]`. With `S = q kᵀ/√d`, `P = softmax(S)`, `ctx = P v`:
/// `dP = dctx vᵀ`, `dS = P ⊙ (dP − rowsum(dP ⊙ P))`, `dq = dS k/√d`, `dk = dSᵀ q/√d`,
/// `dv = Pᵀ dctx`.
pub fn attention_backward(sh: AttnShape, qkv: &[f32], p: &[f32], dctx: &[f32], dqkv: &mut [f32]) {
    let h = sh.h();
    let w = 3 * h;
    let scale = 1.0 / (sh.d as f32).sqrt();
    dqkv.fill(0.0);
    let mut ds = vec![0f32; sh.seq];
    for s in 0..sh.b {
        for j in 0..sh.heads {
            let pm = &p[(s * sh.heads + j) * sh.seq * sh.seq..][..sh.seq * sh.seq];
            for i in 0..sh.seq {
                let row = &pm[i * sh.seq..][..sh.seq];
                let dci = &dctx[(s * sh.seq + i) * h + j * sh.d..][..sh.d];
                let mut dot_sum = 0.0;
                for t in 0..=i {
                    let vt = &qkv[(s * sh.seq + t) * w + 2 * h + j * sh.d..][..sh.d];
                    let dp: f32 = dci.iter().zip(vt).map(|(a, b)| a * b).sum();
                    ds[t] = dp;
                    dot_sum += dp * row[t];
                }
                for t in 0..=i {
                    ds[t] = row[t] * (ds[t] - dot_sum) * scale;
                }
                let qi_off = (s * sh.seq + i) * w + j * sh.d;
                for t in 0..=i {
                    let kt_off = (s * sh.seq + t) * w + h + j * sh.d;
                    let vt_off = (s * sh.seq + t) * w + 2 * h + j * sh.d;
                    for e in 0..sh.d {
                        // dq_i += dS[i,t] k_t ; dk_t += dS[i,t] q_i ; dv_t += P[i,t] dctx_i
                        dqkv[qi_off + e] += ds[t] * qkv[kt_off + e];
                        dqkv[kt_off + e] += ds[t] * qkv[qi_off + e];
                        dqkv[vt_off + e] += row[t] * dci[e];
                    }
                }
            }
        }
    }
}

/// Softmax cross-entropy over rows of `logits [T, V]` against `labels`, scaled by `scale`
/// (`1 / (T · micro-batches per step)`): returns the scaled loss sum and overwrites `logits`
/// with its gradient `scale · (softmax − onehot)`.
pub fn cross_entropy(logits: &mut [f32], labels: &[u32], vocab: usize, scale: f32) -> f64 {
    let mut loss = 0.0f64;
    for (row, &label) in logits.chunks_mut(vocab).zip(labels) {
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0f32;
        for x in row.iter_mut() {
            *x = (*x - max).exp();
            sum += *x;
        }
        let p_label = row[label as usize] / sum;
        loss -= (p_label.max(f32::MIN_POSITIVE) as f64).ln();
        for x in row.iter_mut() {
            *x = *x / sum * scale;
        }
        row[label as usize] -= scale;
    }
    loss * scale as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(m: usize, k: usize, n: usize, a: &[f32], b: &[f32]) -> Vec<f32> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|l| a[i * k + l] * b[l * n + j]).sum();
            }
        }
        c
    }

    fn transpose(r: usize, c: usize, x: &[f32]) -> Vec<f32> {
        let mut t = vec![0.0; r * c];
        for i in 0..r {
            for j in 0..c {
                t[j * r + i] = x[i * c + j];
            }
        }
        t
    }

    #[test]
    fn gemm_matches_naive_in_every_transpose_and_thread_split() {
        let (m, k, n) = (37, 29, 41);
        let mut rng = crate::spec::SplitMix64::new(3);
        let a: Vec<f32> = (0..m * k).map(|_| rng.next_signed_unit()).collect();
        let b: Vec<f32> = (0..k * n).map(|_| rng.next_signed_unit()).collect();
        let want = naive(m, k, n, &a, &b);
        let at = transpose(m, k, &a);
        let bt = transpose(k, n, &b);
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let aa = if ta { &at } else { &a };
            let bb = if tb { &bt } else { &b };
            let mut c = vec![1.0; m * n];
            gemm(m, k, n, aa, ta, bb, tb, &mut c, 1.0, 1);
            for (x, y) in c.iter().zip(&want) {
                assert!(
                    (x - (y + 1.0)).abs() < 1e-4,
                    "{ta} {tb}: {x} vs {}",
                    y + 1.0
                );
            }
        }
        // Thread split on a shape large enough to use it: bitwise equal to one thread.
        let (m, k, n) = (130, 120, 140);
        let a: Vec<f32> = (0..m * k).map(|_| rng.next_signed_unit()).collect();
        let b: Vec<f32> = (0..k * n).map(|_| rng.next_signed_unit()).collect();
        let mut c1 = vec![0.0; m * n];
        let mut c3 = vec![0.0; m * n];
        gemm(m, k, n, &a, false, &b, false, &mut c1, 0.0, 1);
        gemm(m, k, n, &a, false, &b, false, &mut c3, 0.0, 3);
        assert_eq!(c1, c3);
    }

    #[test]
    fn gelu_grad_matches_central_difference() {
        for i in -40..40 {
            let u = i as f32 * 0.1;
            let e = 1e-2f32;
            let fd = (gelu(u + e) as f64 - gelu(u - e) as f64) / (2.0 * e as f64);
            assert!((fd - gelu_grad(u) as f64).abs() < 2e-3, "u={u}");
        }
        assert!((gelu(1.0) - 0.841_192).abs() < 1e-5); // published tanh-GELU(1)
    }
}
