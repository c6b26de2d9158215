//! A small, independent f32 host implementation of `spec.rs` (forward, backward, SGD), written
//! straight from the formulas with plain loops. It is the oracle of the GPU correctness test
//! (the CUDA run must end with the same weights) and is itself checked against finite
//! differences here, so the backward formulas both share are known to be right.

use crate::spec::{init_matrix, labels, token_ids, Dims, Matrix};

fn mm(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut c = vec![0.0f32; m * n];
    for i in 0..m {
        for p in 0..k {
            let av = a[i * k + p];
            for j in 0..n {
                c[i * n + j] += av * b[p * n + j];
            }
        }
    }
    c
}

/// `a[m,k] · bᵀ` with `b` stored `[n,k]`.
fn mm_nt(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut c = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[j * k + p]).sum();
        }
    }
    c
}

/// `acc[k,n] += aᵀ · b` with `a` stored `[m,k]`, `b` `[m,n]`.
fn acc_tn(acc: &mut [f32], a: &[f32], b: &[f32], m: usize, k: usize, n: usize) {
    for i in 0..m {
        for p in 0..k {
            let av = a[i * k + p];
            for j in 0..n {
                acc[p * n + j] += av * b[i * n + j];
            }
        }
    }
}

fn gelu(u: f32) -> f32 {
    let a = (2.0f32 / std::f32::consts::PI).sqrt() * (u + 0.044715 * u * u * u);
    0.5 * u * (1.0 + a.tanh())
}

fn gelu_grad(u: f32) -> f32 {
    let c = (2.0f32 / std::f32::consts::PI).sqrt();
    let t = (c * (u + 0.044715 * u * u * u)).tanh();
    0.5 * (1.0 + t) + 0.5 * u * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * u * u)
}

/// The whole model's weights (or gradients, same shapes).
#[derive(Debug, Clone, PartialEq)]
pub struct HostModel {
    pub d: Dims,
    pub embedding: Vec<f32>,
    /// Per global layer: Qkv, Out, Mlp1, Mlp2.
    pub layers: Vec<[Vec<f32>; 4]>,
    pub output: Vec<f32>,
}

const LAYER_MATRICES: [Matrix; 4] = [Matrix::Qkv, Matrix::Out, Matrix::Mlp1, Matrix::Mlp2];

struct LayerCache {
    x: Vec<f32>,
    qkv: Vec<f32>,
    p: Vec<f32>,
    ctx: Vec<f32>,
    x1: Vec<f32>,
    u: Vec<f32>,
    g: Vec<f32>,
}

impl HostModel {
    pub fn new(seed: u64, d: Dims, num_layers: u32) -> HostModel {
        HostModel {
            d,
            embedding: init_matrix(seed, 0, Matrix::Embedding, &d),
            layers: (0..num_layers)
                .map(|l| LAYER_MATRICES.map(|m| init_matrix(seed, l, m, &d)))
                .collect(),
            output: init_matrix(seed, 0, Matrix::Output, &d),
        }
    }

    fn zeros_like(&self) -> HostModel {
        let z = |v: &Vec<f32>| vec![0.0; v.len()];
        HostModel {
            d: self.d,
            embedding: z(&self.embedding),
            layers: self
                .layers
                .iter()
                .map(|l| [z(&l[0]), z(&l[1]), z(&l[2]), z(&l[3])])
                .collect(),
            output: z(&self.output),
        }
    }

    fn layer_forward(&self, l: usize, x: Vec<f32>) -> (Vec<f32>, LayerCache) {
        let d = &self.d;
        let (t, h, f, n, hd, s) = (d.tokens(), d.hidden, d.ffn, d.heads, d.head_dim(), d.seq);
        let w = &self.layers[l];
        let qkv = mm(&x, &w[0], t, h, 3 * h);
        let scale = 1.0 / (hd as f32).sqrt();
        let mut p = vec![0.0f32; d.micro_batch * n * s * s];
        let mut ctx = vec![0.0f32; t * h];
        for b in 0..d.micro_batch {
            for j in 0..n {
                let base = (b * n + j) * s * s;
                for i in 0..s {
                    let qi = &qkv[(b * s + i) * 3 * h + j * hd..][..hd];
                    let scores: Vec<f32> = (0..=i)
                        .map(|i2| {
                            let k = &qkv[(b * s + i2) * 3 * h + h + j * hd..][..hd];
                            qi.iter().zip(k).map(|(a, c)| a * c).sum::<f32>() * scale
                        })
                        .collect();
                    let m = scores.iter().cloned().fold(f32::MIN, f32::max);
                    let z: f32 = scores.iter().map(|v| (v - m).exp()).sum();
                    for (i2, sc) in scores.iter().enumerate() {
                        let pv = (sc - m).exp() / z;
                        p[base + i * s + i2] = pv;
                        for c in 0..hd {
                            ctx[(b * s + i) * h + j * hd + c] +=
                                pv * qkv[(b * s + i2) * 3 * h + 2 * h + j * hd + c];
                        }
                    }
                }
            }
        }
        let mut x1 = mm(&ctx, &w[1], t, h, h);
        x1.iter_mut().zip(&x).for_each(|(a, b)| *a += b);
        let u = mm(&x1, &w[2], t, h, f);
        let g: Vec<f32> = u.iter().map(|&v| gelu(v)).collect();
        let mut y = mm(&g, &w[3], t, f, h);
        y.iter_mut().zip(&x1).for_each(|(a, b)| *a += b);
        (
            y,
            LayerCache {
                x,
                qkv,
                p,
                ctx,
                x1,
                u,
                g,
            },
        )
    }

    /// Returns dx and accumulates the layer's weight gradients into `grads`.
    fn layer_backward(
        &self,
        l: usize,
        c: &LayerCache,
        dy: &[f32],
        grads: &mut HostModel,
    ) -> Vec<f32> {
        let d = &self.d;
        let (t, h, f, n, hd, s) = (d.tokens(), d.hidden, d.ffn, d.heads, d.head_dim(), d.seq);
        let w = &self.layers[l];
        let gw = &mut grads.layers[l];
        acc_tn(&mut gw[3], &c.g, dy, t, f, h);
        let dg = mm_nt(dy, &w[3], t, h, f);
        let du: Vec<f32> = dg
            .iter()
            .zip(&c.u)
            .map(|(a, &u)| a * gelu_grad(u))
            .collect();
        acc_tn(&mut gw[2], &c.x1, &du, t, h, f);
        let mut dx1 = mm_nt(&du, &w[2], t, f, h);
        dx1.iter_mut().zip(dy).for_each(|(a, b)| *a += b);
        acc_tn(&mut gw[1], &c.ctx, &dx1, t, h, h);
        let dctx = mm_nt(&dx1, &w[1], t, h, h);
        let scale = 1.0 / (hd as f32).sqrt();
        let mut dqkv = vec![0.0f32; t * 3 * h];
        for b in 0..d.micro_batch {
            for j in 0..n {
                let base = (b * n + j) * s * s;
                for i in 0..s {
                    let row = |i2: usize| (b * s + i2) * 3 * h + j * hd;
                    // dP[i][i2] = dctx_i · v_i2; dv_i2 += P[i][i2] dctx_i
                    let dp: Vec<f32> = (0..=i)
                        .map(|i2| {
                            (0..hd)
                                .map(|cc| {
                                    dctx[(b * s + i) * h + j * hd + cc]
                                        * c.qkv[row(i2) + 2 * h + cc]
                                })
                                .sum()
                        })
                        .collect();
                    let dot: f32 = (0..=i).map(|i2| dp[i2] * c.p[base + i * s + i2]).sum();
                    for i2 in 0..=i {
                        let pv = c.p[base + i * s + i2];
                        let ds = pv * (dp[i2] - dot) * scale;
                        for cc in 0..hd {
                            dqkv[row(i) + cc] += ds * c.qkv[row(i2) + h + cc];
                            dqkv[row(i2) + h + cc] += ds * c.qkv[row(i) + cc];
                            dqkv[row(i2) + 2 * h + cc] += pv * dctx[(b * s + i) * h + j * hd + cc];
                        }
                    }
                }
            }
        }
        acc_tn(&mut gw[0], &c.x, &dqkv, t, h, 3 * h);
        let mut dx = mm_nt(&dqkv, &w[0], t, 3 * h, h);
        dx.iter_mut().zip(&dx1).for_each(|(a, b)| *a += b);
        dx
    }

    /// Loss (already multiplied by `scale`) of one micro-batch; gradients of `scale × mean
    /// cross-entropy` are accumulated into `grads`.
    pub fn forward_backward(
        &self,
        ids: &[u32],
        lab: &[u32],
        scale: f32,
        grads: &mut HostModel,
    ) -> f64 {
        let d = self.d;
        let (t, h, v) = (d.tokens(), d.hidden, d.vocab);
        let mut x = vec![0.0f32; t * h];
        for (ti, &id) in ids.iter().enumerate() {
            x[ti * h..(ti + 1) * h].copy_from_slice(&self.embedding[id as usize * h..][..h]);
        }
        let mut caches = Vec::new();
        for l in 0..self.layers.len() {
            let (y, c) = self.layer_forward(l, x);
            caches.push(c);
            x = y;
        }
        let mut logits = mm(&x, &self.output, t, h, v);
        let tok_scale = scale / t as f32;
        let mut loss = 0.0f64;
        for ti in 0..t {
            let row = &mut logits[ti * v..(ti + 1) * v];
            let m = row.iter().cloned().fold(f32::MIN, f32::max);
            let z: f32 = row.iter().map(|a| (a - m).exp()).sum();
            loss += ((z.ln() + m - row[lab[ti] as usize]) * tok_scale) as f64;
            for (j, a) in row.iter_mut().enumerate() {
                let p = (*a - m).exp() / z;
                *a = (p - if j == lab[ti] as usize { 1.0 } else { 0.0 }) * tok_scale;
            }
        }
        acc_tn(&mut grads.output, &x, &logits, t, h, v);
        let mut dy = mm_nt(&logits, &self.output, t, v, h);
        for l in (0..self.layers.len()).rev() {
            dy = self.layer_backward(l, &caches[l], &dy, grads);
        }
        for (ti, &id) in ids.iter().enumerate() {
            for c in 0..h {
                grads.embedding[id as usize * h + c] += dy[ti * h + c];
            }
        }
        loss
    }

    fn sgd(&mut self, g: &HostModel, lr: f32) {
        let upd =
            |w: &mut Vec<f32>, g: &Vec<f32>| w.iter_mut().zip(g).for_each(|(a, b)| *a -= lr * b);
        upd(&mut self.embedding, &g.embedding);
        upd(&mut self.output, &g.output);
        for (l, gl) in self.layers.iter_mut().zip(&g.layers) {
            for (w, gg) in l.iter_mut().zip(gl) {
                upd(w, gg);
            }
        }
    }

    /// One synchronous training step over `microbatches` micro-batches of step `step`.
    pub fn train_step(&mut self, seed: u64, step: u32, microbatches: u32, lr: f32) -> f64 {
        let mut grads = self.zeros_like();
        let scale = 1.0 / microbatches as f32;
        let mut loss = 0.0;
        for mb in 0..microbatches {
            let ids = token_ids(seed, step, mb, &self.d);
            let lab = labels(seed, step, mb, &self.d);
            loss += self.forward_backward(&ids, &lab, scale, &mut grads);
        }
        self.sgd(&grads, lr);
        loss
    }

    /// The weights of each stage of `plan`, in [`crate::backend::DeviceWorker::weights`] order.
    pub fn stage_weights(&self, plan: &pplan::plan::plan_file::Plan) -> Vec<(u32, Vec<f32>)> {
        plan.stages
            .iter()
            .map(|st| {
                let mut v = Vec::new();
                if st.embedding {
                    v.extend_from_slice(&self.embedding);
                }
                for l in st.first_layer..st.first_layer + st.num_layers {
                    for m in &self.layers[l as usize] {
                        v.extend_from_slice(m);
                    }
                }
                if st.output {
                    v.extend_from_slice(&self.output);
                }
                (st.stage, v)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> Dims {
        Dims::dense(8, 2, 12, 4, 2, 7)
    }

    /// Central differences in f64 would be nicer, but the model is f32; with eps = 1e-2 and
    /// weights of order 0.3 the truncation and rounding errors are both ~1e-4 relative.
    #[test]
    fn backward_matches_finite_differences() {
        let d = tiny();
        let model = HostModel::new(7, d, 2);
        let ids = token_ids(7, 0, 0, &d);
        let lab = labels(7, 0, 0, &d);
        let mut grads = model.zeros_like();
        model.forward_backward(&ids, &lab, 1.0, &mut grads);
        let loss_at = |m: &HostModel| {
            let mut scratch = m.zeros_like();
            m.forward_backward(&ids, &lab, 1.0, &mut scratch)
        };
        let eps = 1e-2f32;
        let mut checked = 0;
        // A few entries of every matrix, including an embedding row that is used.
        let probes: Vec<(usize, usize)> = vec![
            (0, ids[0] as usize * 8 + 3),
            (1, 5),
            (2, 17),
            (3, 2),
            (4, 40),
            (5, 9),
            (6, 11),
            (7, 30),
            (8, 1),
        ];
        for (which, idx) in probes {
            let get = |m: &mut HostModel| -> *mut f32 {
                match which {
                    0 => &mut m.embedding[idx],
                    7 => &mut m.output[idx],
                    8 => &mut m.layers[1][0][idx],
                    k => &mut m.layers[0][(k - 1) % 4][idx],
                }
            };
            let mut plus = model.clone();
            unsafe { *get(&mut plus) += eps };
            let mut minus = model.clone();
            unsafe { *get(&mut minus) -= eps };
            let numeric = ((loss_at(&plus) - loss_at(&minus)) / (2.0 * eps as f64)) as f32;
            let mut g = grads.clone();
            let analytic = unsafe { *get(&mut g) };
            assert!(
                (numeric - analytic).abs() <= 2e-3 + 2e-2 * analytic.abs(),
                "matrix {which} entry {idx}: numeric {numeric} analytic {analytic}"
            );
            checked += 1;
        }
        assert_eq!(checked, 9);
    }

    #[test]
    fn training_lowers_the_loss_and_stage_weights_partition_the_model() {
        let d = tiny();
        let mut model = HostModel::new(3, d, 2);
        let first = model.train_step(3, 0, 2, 0.5);
        // Same data every step: the loss on step 0's data must go down.
        let mut again = model.clone();
        let second = again.train_step(3, 0, 2, 0.5);
        assert!(second < first, "{second} !< {first}");
        let p = crate::cuda::layout::tests_support::tiny_plan();
        let m = HostModel::new(3, Dims::from_plan(&p), p.model.num_layers);
        let w = m.stage_weights(&p);
        let total: usize = w.iter().map(|(_, v)| v.len()).sum();
        let dd = Dims::from_plan(&p);
        let per_layer = 3 * dd.hidden * dd.hidden + dd.hidden * dd.hidden + 2 * dd.hidden * dd.ffn;
        assert_eq!(
            total,
            2 * dd.vocab * dd.hidden + p.model.num_layers as usize * per_layer
        );
    }
}
