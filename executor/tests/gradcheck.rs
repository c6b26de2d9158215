//! Finite-difference check of the CPU layer math: the gradients from F → I → W equal central
//! differences of the loss, for every matrix (embedding, Wqkv, Wo, W1, W2 of each layer,
//! output), on a tiny shape. The loss is computed in f64 from f32 math, so the check uses a
//! step of 1e-2 and compares each sampled entry with a relative tolerance of 5% plus an
//! absolute 2e-4 (f32 rounding of a loss near ln(V) ≈ 2.4 is ~1e-7; divided by 2·1e-2 that is
//! ~1e-5, and the truncation error of a central difference at this step is below 1e-4 here).

use pplan_exec::cpu::comm::Comms;
use pplan_exec::cpu::model::{self, Ctx, StageInput, StageWeights};
use pplan_exec::spec::{self, Dims, MoeDims};

fn dims() -> Dims {
    Dims::dense(8, 2, 16, 4, 2, 11)
}

fn loss(c: &Ctx, w: &StageWeights, ids: &[u32], labels: &[u32]) -> f64 {
    let scale = spec::loss_scale(&c.dims, 1);
    model::stage_forward(
        c,
        w,
        StageInput::Tokens(ids),
        Some(labels),
        scale,
        &mut Comms::solo(),
    )
    .unwrap()
    .1
}

/// Every tensor of `w` in flat order, by index, for perturbation.
fn tensor_mut(w: &mut StageWeights, i: usize) -> &mut Vec<f32> {
    w.tensors_mut().swap_remove(i).0
}

/// Checks every non-empty matrix of `w` (all of its entries when small, 24 random ones and the
/// largest gradient's otherwise) against central differences; returns the entries checked
/// and those skipped where a MoE router's choice flips within the step.
fn check_every_matrix(d: Dims, mut w: StageWeights, seed: u64, eps: f32) -> (usize, usize) {
    let c = Ctx::new(d, 1);
    let moe = d.moe.is_some();
    let mut skipped = 0;
    let n_tensors = w.tensors_mut().len();
    // Larger weights than the spec's init so that attention and GELU are far from linear.
    for i in 0..n_tensors {
        for x in tensor_mut(&mut w, i).iter_mut() {
            *x *= 3.0;
        }
    }
    let ids = spec::token_ids(seed, 0, 0, &d);
    let labels = spec::labels(seed, 0, 0, &d);
    let mut solo = Comms::solo();
    let (_, _, mut st) = model::stage_forward(
        &c,
        &w,
        StageInput::Tokens(&ids),
        Some(&labels),
        spec::loss_scale(&d, 1),
        &mut solo,
    )
    .unwrap();
    assert!(
        model::stage_backward_input(&c, &w, &mut st, None, &mut solo)
            .unwrap()
            .is_none()
    );
    let mut grads = w.zeros_like();
    model::stage_backward_weight(&c, &st, &mut grads);
    let mut checked = 0;
    let mut rng = spec::SplitMix64::new(1);
    for i in 0..n_tensors {
        let len = tensor_mut(&mut w, i).len();
        if len == 0 {
            continue;
        }
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
            let mut central = |eps: f32| {
                let orig = tensor_mut(&mut w, i)[j];
                tensor_mut(&mut w, i)[j] = orig + eps;
                let up = loss(&c, &w, &ids, &labels);
                tensor_mut(&mut w, i)[j] = orig - eps;
                let down = loss(&c, &w, &ids, &labels);
                tensor_mut(&mut w, i)[j] = orig;
                (up - down) / (2.0 * eps as f64)
            };
            let fd = central(eps);
            let an = analytic[j] as f64;
            if moe {
                // A token whose top-k choice flips inside [-eps, eps] makes the loss jump: the
                // difference then scales as 1/eps. Such entries are skipped, and counted.
                let half = central(eps / 2.0);
                if (fd - half).abs() > 2e-4 + 0.05 * fd.abs().max(half.abs()) {
                    skipped += 1;
                    continue;
                }
            }
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
    (checked, skipped)
}

#[test]
fn every_weight_gradient_matches_central_differences() {
    let d = dims();
    let w = StageWeights::init(9, 0, 2, true, true, &d);
    // Embedding, 4 matrices in each of 2 layers, output.
    assert_eq!(check_every_matrix(d, w, 9, 1e-2), ((2 + 4 * 2) * 25, 0));
}

/// A dense layer then a MoE layer (4 experts, top-2, a shared expert): the router, every
/// expert's and the shared expert's gradients against central differences. The gates are a
/// softmax over the chosen logits; where a token's choice flips within the step the loss jumps,
/// and those entries (at most a tenth) are skipped.
#[test]
fn moe_layer_gradients_match_central_differences() {
    let d = Dims {
        moe: Some(MoeDims {
            experts: 4,
            topk: 2,
            ffn: 6,
            shared_ffn: 4,
        }),
        ..dims()
    };
    let w = StageWeights::init_moe(9, 0, 2, true, true, &d, &[0, 1], 0..4);
    assert!(w.layers[1].moe.is_some() && w.layers[0].moe.is_none());
    // Embedding; layer 0: 4; layer 1: qkv, out, router, 4 experts x 2, shared x 2; output.
    let (checked, skipped) = check_every_matrix(d, w, 9, 3e-3);
    assert_eq!(checked + skipped, (2 + 4 + 2 + 1 + 8 + 2) * 25);
    assert!(
        skipped * 10 <= checked,
        "{skipped} of {} entries skipped",
        checked + skipped
    );
}

/// The input gradient of a middle stage (I alone) against central differences of a linear
/// functional of its output.
#[test]
fn input_gradient_matches_central_differences() {
    let d = dims();
    let c = Ctx::new(d, 1);
    let w = StageWeights::init(4, 1, 2, false, false, &d);
    let mut rng = spec::SplitMix64::new(2);
    let t = d.tokens() * d.hidden;
    let x: Vec<f32> = (0..t).map(|_| rng.next_signed_unit()).collect();
    let probe: Vec<f32> = (0..t).map(|_| rng.next_signed_unit()).collect();
    let f = |x: &[f32]| -> f64 {
        let (y, _, _) = model::stage_forward(
            &c,
            &w,
            StageInput::Hidden(x.to_vec()),
            None,
            1.0,
            &mut Comms::solo(),
        )
        .unwrap();
        y.unwrap()
            .iter()
            .zip(&probe)
            .map(|(a, b)| *a as f64 * *b as f64)
            .sum()
    };
    let mut solo = Comms::solo();
    let (_, _, mut st) =
        model::stage_forward(&c, &w, StageInput::Hidden(x.clone()), None, 1.0, &mut solo).unwrap();
    let dx = model::stage_backward_input(&c, &w, &mut st, Some(probe.clone()), &mut solo)
        .unwrap()
        .unwrap();
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
