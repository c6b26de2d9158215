//! Context parallelism (`--cp N`): the sequence split over N ranks, the K/V exchange (ring or
//! all-gather) against a hand count, the work and memory per rank, the gradient reduction over
//! the data- and context-parallel ranks, and the checks that refuse what Megatron-Core refuses.

use pplan::cost::{Attention, CostModel, CpComm, Layout, Recompute, Stack};
use pplan::inputs::{Hardware, Model};
use pplan::plan::predict::{predict, PredictError, PredictRequest};

fn llama8b(seq: u64) -> Model {
    let mut m = Model::preset("llama3-8b").unwrap();
    m.seq_len = seq;
    m
}

fn flash() -> Stack {
    Stack {
        attention: Attention::Flash,
        ..Stack::default()
    }
}

/// Flash attention with context parallelism by all-gather of K and V instead of the ring.
fn all_gather() -> Stack {
    Stack {
        cp_comm: CpComm::AllGather,
        ..flash()
    }
}

fn cost_model<'a>(m: &'a Model, hw: &'a Hardware, tp: u64, cp: u64, stack: Stack) -> CostModel<'a> {
    CostModel {
        model: m,
        hw,
        layout: Layout {
            tp,
            pp: 1,
            dp: 1,
            cp,
            dp_replicate: 1,
            micro_batch: 1,
            chunks: 1,
            sequence_parallel: tp > 1,
            recompute: Recompute::None,
            ep: 1,
            etp: 1,
        },
        stack,
    }
}

#[test]
fn kv_chunk_and_exchange_against_a_hand_count() {
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let m = llama8b(8192);
    // Llama 3 8B: 8 key/value heads of 128; cp = 2 holds 4096 tokens per rank, t = 1:
    // K and V, 2 bytes each: 2 x 2 x 4096 x 8 x 128 = 16 777 216 bytes.
    let c = cost_model(&m, &hw, 1, 2, flash());
    assert_eq!(c.cp_kv_chunk_bytes(), 16_777_216.0);
    // t = 2 halves the heads per rank, cp = 4 the tokens.
    let c4 = cost_model(&m, &hw, 2, 4, flash());
    assert_eq!(c4.cp_kv_chunk_bytes(), 16_777_216.0 / 4.0);

    // cp = 4, t = 2: eight ranks in one node, the ring on NVLink.
    let step = c4.cp_kv_chunk_bytes() / hw.nvlink_bytes_per_s() + hw.node.nvlink_latency_s;
    // Attention blocks much longer than a step hide every step; much shorter hide none.
    let (fe, fh, be, bh) = c4.cp_comm_s((1.0, 1.0));
    assert_eq!((fe, be), (0.0, 0.0));
    assert!((fh - 3.0 * step).abs() < 1e-15 && (bh - 6.0 * step).abs() < 1e-15);
    let (fe, fh, be, bh) = c4.cp_comm_s((0.0, 0.0));
    assert!((fe - 3.0 * step).abs() < 1e-15 && (be - 6.0 * step).abs() < 1e-15);
    assert_eq!((fh, bh), (0.0, 0.0));
    // All-gather: (cp - 1) chunks forward, gathered again and reduce-scattered backward, exposed.
    let ag = cost_model(&m, &hw, 2, 4, all_gather());
    let (fe, fh, be, bh) = ag.cp_comm_s((1.0, 1.0));
    assert!((fe - 3.0 * step).abs() < 1e-15 && (be - 6.0 * step).abs() < 1e-15);
    assert_eq!((fh, bh), (0.0, 0.0));
    // cp = 1: nothing.
    assert_eq!(
        cost_model(&m, &hw, 2, 1, flash()).cp_comm_s((1.0, 1.0)),
        (0.0, 0.0, 0.0, 0.0)
    );
}

#[test]
fn the_rings_merge_traffic_against_a_hand_count() {
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let m = llama8b(8192);
    // cp = 2, t = 1: 4096 query tokens of 32 heads of 128 per rank, q = 16 777 216 output
    // elements; K and V of 8 heads, kv = 8 388 608 elements. Forward: each of the 2 steps'
    // outputs merged into the running one, 6 bytes an element: 6 x 2 q = 201 326 592.
    // Backward: the second step re-reads Q, O, dO (6 q), both steps add dQ (6 x 2 q) and
    // dK/dV (6 x 2 kv): 100 663 296 + 201 326 592 + 100 663 296 = 402 653 184.
    let c = cost_model(&m, &hw, 1, 2, flash());
    assert_eq!(c.cp_ring_merge_bytes(), (201_326_592.0, 402_653_184.0));
    // It is part of the attention core's memory traffic.
    let base = cost_model(&m, &hw, 1, 2, flash());
    let all_gather = cost_model(&m, &hw, 1, 2, all_gather());
    assert_eq!(all_gather.cp_ring_merge_bytes(), (0.0, 0.0));
    let (with, without) = (base.layer_memory_bytes(), all_gather.layer_memory_bytes());
    assert_eq!(
        with.attention_forward_bytes - without.attention_forward_bytes,
        201_326_592.0
    );
    assert_eq!(
        with.attention_backward_bytes - without.attention_backward_bytes,
        402_653_184.0
    );
    // Nothing to merge without context parallelism.
    assert_eq!(
        cost_model(&m, &hw, 1, 1, flash()).cp_ring_merge_bytes(),
        (0.0, 0.0)
    );
}

#[test]
fn a_rank_does_one_cp_th_of_the_work_and_the_flops_counted_stay_the_same() {
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let m = llama8b(32768);
    let one = cost_model(&m, &hw, 1, 1, flash());
    let four = cost_model(&m, &hw, 1, 4, flash());
    assert!((four.layer_forward_flops() / one.layer_forward_flops() - 1.0).abs() < 1e-12);
    assert!((four.logit_forward_flops() / one.logit_forward_flops() - 1.0).abs() < 1e-12);
    // Linear GEMMs see s / cp tokens; the attention core s / cp queries against all s keys.
    let (g1, g4) = (one.layer_gemms(), four.layer_gemms());
    assert_eq!(g4[0].m * 4.0, g1[0].m);
    assert_eq!((g4[1].m * 4.0, g4[1].n), (g1[1].m, g1[1].n));
    let per_rank = |c: &CostModel| c.layer_gemms().iter().map(|g| g.flops()).sum::<f64>();
    assert!((per_rank(&four) * 4.0 / per_rank(&one) - 1.0).abs() < 1e-12);
}

/// A load-balanced ring's attention by hand (docs/cost-model.md, "Context parallelism"): of
/// a rank's `cp` equal steps the first is causal, at the causal law for its `s/cp` query
/// tokens, and the other `cp - 1` non-causal, at the profile's non-causal law; the all-gather
/// variant, cp = 1 and a profile without the non-causal law price all of it causally.
#[test]
fn a_rings_later_steps_run_at_the_noncausal_rate() {
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let m = llama8b(32768);
    let peak = hw.gpu.peak_flops_per_s;
    let heads = m.num_heads as f64;
    let causal_only = |c: &CostModel| {
        let (ef, eb) = hw.attention_efficiency_at(32768.0 / c.layout.cp as f64, heads);
        let (f, b) = c.attention_core_s();
        (f * peak * ef, b * peak * eb / 2.5)
    };
    // Without a ring: every FLOP at the causal law (the kernel's FLOPs come back).
    let one = cost_model(&m, &hw, 1, 1, flash());
    let gathered = cost_model(&m, &hw, 1, 4, all_gather());
    let (f1, _) = causal_only(&one);
    let (fg, bg) = causal_only(&gathered);
    assert!((fg * 4.0 / f1 - 1.0).abs() < 1e-12 && (bg / fg - 1.0).abs() < 1e-12);
    // The ring: 1/4 causal, 3/4 at A s/(s + s0) with s = 8192.
    let ring = cost_model(&m, &hw, 1, 4, flash());
    let (ef, eb) = hw.attention_efficiency_at(8192.0, heads);
    let nf = 0.687 * (8192.0 / (8192.0 + 300.0));
    let nb = 0.579 * (8192.0 / (8192.0 + 750.0));
    assert_eq!(hw.attention_noncausal_efficiency_at(8192.0), Some((nf, nb)));
    let (f, b) = ring.attention_core_s();
    let work = fg; // the rank's causal-counted forward FLOPs
    assert!((f - work * (0.25 / ef + 0.75 / nf) / peak).abs() < 1e-15);
    assert!((b - 2.5 * work * (0.25 / eb + 0.75 / nb) / peak).abs() < 1e-15);
    assert!(f < gathered.attention_core_s().0 && b < gathered.attention_core_s().1);
    // A profile without the law (the A100's) prices the ring causally.
    let a100 = Hardware::bundled("a100-80gb").unwrap();
    assert_eq!(a100.attention_noncausal_efficiency_at(8192.0), None);
}

fn request<'a>(m: &'a Model, hw: &'a Hardware, cp: u64) -> PredictRequest<'a> {
    let mut r = PredictRequest::new(m, hw);
    r.gpus = 8;
    r.tp = 1;
    r.cp = cp;
    r.global_batch = 8 / cp;
    r.recompute = Recompute::None;
    r.stack = Stack {
        zero: pplan::cost::Zero::Optimizer,
        ..flash()
    };
    r
}

#[test]
fn predict_splits_sequence_memory_and_state_over_the_context_ranks() {
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let m = llama8b(16384);
    let one = predict(&request(&m, &hw, 1)).unwrap();
    let two = predict(&request(&m, &hw, 2)).unwrap();
    assert_eq!((one.dp, two.dp), (8, 4));
    assert_eq!(two.cp, 2);
    // Half the tokens per rank: the activations halve (one micro-batch in flight, p = 1).
    let act = |p: &pplan::plan::predict::Prediction| p.memory_breakdown.activations as f64;
    assert!(
        (act(&two) / act(&one) - 0.5).abs() < 0.01,
        "{} {}",
        act(&one),
        act(&two)
    );
    // ZeRO-1 shards the optimizer over the data- and context-parallel ranks: 8 either way.
    assert_eq!(
        one.memory_breakdown.optimizer,
        two.memory_breakdown.optimizer
    );
    // The same tokens per step from the same 8 GPUs: FLOPs per token agree.
    let per_token = |p: &pplan::plan::predict::Prediction| {
        p.model_tflops_per_gpu * p.gpus as f64 / p.tokens_per_s
    };
    assert!((per_token(&one) / per_token(&two) - 1.0).abs() < 1e-9);
}

#[test]
fn the_gradient_reduction_spans_data_and_context_ranks() {
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let m = llama8b(8192);
    let params = 1e9;
    let mut c = cost_model(&m, &hw, 1, 2, flash());
    c.layout.dp = 1;
    // d = 1 but cp = 2: two ranks hold the same weights and reduce over NVLink.
    let nvl = hw.nvlink_bytes_per_s();
    let want = pplan::cost::all_reduce_s(2e9, 2, nvl, hw.node.nvlink_latency_s);
    assert!((c.grad_reduce_s(params) - want).abs() / want < 1e-9);
    // d = 8, cp = 2, t = 1: 16 ranks, 8 per node: reduce-scatter and all-gather on NVLink
    // among 8, the 1/8 shard all-reduced across the 2 nodes.
    c.layout.dp = 8;
    let nic = hw.nic_bytes_per_s_per_gpu(false);
    let want = pplan::cost::all_reduce_s(2e9, 8, nvl, hw.node.nvlink_latency_s)
        + pplan::cost::all_reduce_s(2e9 / 8.0, 2, nic, hw.node.nic_latency_s);
    assert!((c.grad_reduce_s(params) - want).abs() / want < 1e-9);
}

#[test]
fn context_parallelism_is_refused_where_megatron_refuses_it() {
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let m = llama8b(8192);
    let mut r = request(&m, &hw, 2);
    r.stack.attention = Attention::Unfused;
    let e = predict(&r).unwrap_err();
    assert!(
        matches!(e, PredictError::ContextParallel { cp: 2, .. }),
        "{e}"
    );
    assert!(e.to_string().contains("--attention flash"), "{e}");
    // 8190 tokens cannot be cut into 2 x cp = 4 chunks.
    let odd = llama8b(8190);
    let e = predict(&request(&odd, &hw, 2)).unwrap_err();
    assert!(e.to_string().contains("divisible by 2 x cp = 4"), "{e}");
    // GPUs not a multiple of t x cp x p.
    let mut r = request(&m, &hw, 3);
    r.global_batch = 2;
    let e = predict(&r).unwrap_err();
    assert!(e.to_string().contains("--tp x --cp x --pp"), "{e}");
}
