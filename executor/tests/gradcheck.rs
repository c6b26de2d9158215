//! Finite-difference check of the CPU layer math: the gradients from F → I → W equal central
//! differences of the loss, for every matrix (embedding, Wqkv, Wo, W1, W2 of each layer,
//! output), on a tiny shape. The loss is computed in f64 from f32 math, so the check uses a
//! step of 1e-2 and compares each sampled entry with a relative tolerance of 5% plus an
//! absolute 2e-4 (f32 rounding of a loss near ln(V) ≈ 2.4 is ~1e-7; divided by 2·1e-2 that is
//! ~1e-5, and the truncation error of a central difference at this step is below 1e-4 here).

use pplan_exec::cpu::model::{self, Ctx, StageInput, StageWeights};
use pplan_exec::spec::{self, Dims};

fn dims() -> Dims {
    Dims {
        hidden: 8,
        heads: 2,
        ffn: 16,
        seq: 4,
        micro_batch: 2,
        vocab: 11,
    }
}

fn loss(c: &Ctx, w: &StageWeights, ids: &[u32], labels: &[u32]) -> f64 {
    let scale = spec::loss_scale(&c.dims, 1);
    model::stage_forward(c, w, StageInput::Tokens(ids), Some(labels), scale).1
}

/// Pointers to every tensor of `w` in flat order, by index, for perturbation.
fn tensor_mut(w: &mut StageWeights, i: usize) -> &mut Vec<f32> {
    let mut all: Vec<&mut Vec<f32>> = Vec::new();
    all.extend(w.embedding.iter_mut());
    for l in &mut w.layers {
        all.extend([&mut l.qkv, &mut l.out, &mut l.mlp1, &mut l.mlp2]);
    }
    all.extend(w.output.iter_mut());
    all.swap_remove(i)
}

#[test]
fn every_weight_gradient_matches_central_differences() {
    let d = dims();
    let c = Ctx {
        dims: d,
        threads: 1,
    };
    // Larger weights than the spec's init so that attention and GELU are far from linear.
    let mut w = StageWeights::init(9, 0, 2, true, true, &d);
    let n_tensors = 2 + 4 * 2;
    for i in 0..n_tensors {
        for x in tensor_mut(&mut w, i).iter_mut() {
            *x *= 3.0;
        }
    }
    let ids = spec::token_ids(9, 0, 0, &d);
    let labels = spec::labels(9, 0, 0, &d);
    let (_, _, mut st) = model::stage_forward(
        &c,
        &w,
        StageInput::Tokens(&ids),
        Some(&labels),
        spec::loss_scale(&d, 1),
    );
    assert!(model::stage_backward_input(&c, &w, &mut st, None).is_none());
    let mut grads = w.zeros_like();
    model::stage_backward_weight(&c, &st, &mut grads);
    let eps = 1e-2f32;
    let mut checked = 0;
    let mut rng = spec::SplitMix64::new(1);
    for i in 0..n_tensors {
        let len = tensor_mut(&mut w, i).len();
        let analytic = tensor_mut(&mut grads, i).clone();
        // Every entry of small tensors, a sample of large ones, always including the largest
        // gradient entry.
        let largest = (0..len)
            .max_by(|&a, &b| analytic[a].abs().total_cmp(&analytic[b].abs()))
            .unwrap();
        let mut idx: Vec<usize> = (0..24)
            .map(|_| (rng.next_u64() % len as u64) as usize)
            .collect();
        idx.push(largest);
        for j in idx {
            let orig = tensor_mut(&mut w, i)[j];
            tensor_mut(&mut w, i)[j] = orig + eps;
            let up = loss(&c, &w, &ids, &labels);
            tensor_mut(&mut w, i)[j] = orig - eps;
            let down = loss(&c, &w, &ids, &labels);
            tensor_mut(&mut w, i)[j] = orig;
            let fd = (up - down) / (2.0 * eps as f64);
            let an = analytic[j] as f64;
            assert!(
                (fd - an).abs() <= 2e-4 + 0.05 * an.abs(),
                "tensor {i} entry {j}: finite difference {fd} vs analytic {an}"
            );
            checked += 1;
        }
        assert!(
            analytic[largest].abs() > 1e-3,
            "tensor {i}: gradients too small to test anything"
        );
    }
    assert_eq!(checked, n_tensors * 25);
}

/// The input gradient of a middle stage (I alone) against central differences of a linear
/// functional of its output.
#[test]
fn input_gradient_matches_central_differences() {
    let d = dims();
    let c = Ctx {
        dims: d,
        threads: 1,
    };
    let w = StageWeights::init(4, 1, 2, false, false, &d);
    let mut rng = spec::SplitMix64::new(2);
    let t = d.tokens() * d.hidden;
    let x: Vec<f32> = (0..t).map(|_| rng.next_signed_unit()).collect();
    let probe: Vec<f32> = (0..t).map(|_| rng.next_signed_unit()).collect();
    let f = |x: &[f32]| -> f64 {
        let (y, _, _) = model::stage_forward(&c, &w, StageInput::Hidden(x.to_vec()), None, 1.0);
        y.unwrap()
            .iter()
            .zip(&probe)
            .map(|(a, b)| *a as f64 * *b as f64)
            .sum()
    };
    let (_, _, mut st) = model::stage_forward(&c, &w, StageInput::Hidden(x.clone()), None, 1.0);
    let dx = model::stage_backward_input(&c, &w, &mut st, Some(probe.clone())).unwrap();
    let eps = 1e-2f32;
    for j in (0..t).step_by(7) {
        let mut xp = x.clone();
        xp[j] += eps;
        let mut xm = x.clone();
        xm[j] -= eps;
        let fd = (f(&xp) - f(&xm)) / (2.0 * eps as f64);
        assert!(
            (fd - dx[j] as f64).abs() <= 5e-4 + 0.02 * fd.abs(),
            "entry {j}: {fd} vs {}",
            dx[j]
        );
    }
}
