//! The mixture-of-experts cost model (src/cost/moe.rs, docs/cost-model.md "Mixture of
//! experts") against hand counts for small cases: all-to-all bytes and time, rows per expert,
//! expert data-parallel size, expert parameters per rank, FLOPs, memory, and the refusals.

mod common;

use pplan::cost::recipe::{
    CudaGraphImpl, CudaGraphModules, CudaGraphs, MoeCapacity, MoeDispatcher,
};
use pplan::cost::{CostModel, Layout, Recompute, Stack};
use pplan::inputs::moe::RouterGroups;
use pplan::inputs::{Hardware, Model};
use pplan::plan::predict::{predict, PredictError, PredictRequest};

/// 4 layers, h = 1024, 8 experts of 512, top-2, sequence 1024.
fn small() -> Model {
    common::small_moe()
}

fn cm<'a>(
    m: &'a Model,
    hw: &'a Hardware,
    tp: u64,
    dp: u64,
    ep: u64,
    stack: Stack,
) -> CostModel<'a> {
    CostModel {
        model: m,
        hw,
        layout: Layout {
            tp,
            pp: 1,
            dp,
            cp: 1,
            dp_replicate: 1,
            micro_batch: 1,
            chunks: 1,
            sequence_parallel: tp > 1,
            recompute: Recompute::None,
            ep,
            etp: 1,
        },
        stack,
    }
}

fn balanced() -> Stack {
    Stack {
        moe_imbalance: 1.0,
        ..Stack::default()
    }
}

#[test]
fn all_to_all_bytes_are_tokens_times_top_k_times_hidden_times_two() {
    let (m, hw) = (small(), Hardware::bundled("h100-80gb").unwrap());
    // 1024 tokens x top-2 x 1024 x 2 bytes, 3/4 of them to the other 3 ranks.
    let c = cm(&m, &hw, 1, 4, 4, balanced());
    assert_eq!(c.moe_a2a_bytes(), 1024.0 * 2.0 * 1024.0 * 2.0 * 3.0 / 4.0);
    // With t = 2 (sequence parallel) each rank routes half the tokens.
    let c2 = cm(&m, &hw, 2, 2, 4, balanced());
    assert_eq!(c2.moe_a2a_bytes(), 512.0 * 2.0 * 1024.0 * 2.0 * 3.0 / 4.0);
    // No expert parallelism: nothing leaves the rank.
    assert_eq!(cm(&m, &hw, 1, 4, 1, balanced()).moe_a2a_bytes(), 0.0);
}

#[test]
fn all_to_all_time_on_nvlink_and_across_nodes() {
    let (m, hw) = (small(), Hardware::bundled("h100-80gb").unwrap());
    let per_peer = 1024.0 * 2.0 * 1024.0 * 2.0 / 4.0;
    // ep = 4 inside the 8-GPU node: three peers' bytes over NVLink.
    let c = cm(&m, &hw, 1, 4, 4, balanced());
    let want = 3.0 * per_peer / hw.nvlink_bytes_per_s() + hw.node.nvlink_latency_s;
    assert!(
        (c.moe_a2a_s() - want).abs() < 1e-12,
        "{} vs {want}",
        c.moe_a2a_s()
    );
    // ep = 8 over 8 experts of 16 ranks: peers 1..8 share the node, 8 are across the NICs;
    // the two parts run at once.
    let mut m16 = small();
    m16.moe.as_mut().unwrap().num_experts = 16;
    let c = cm(&m16, &hw, 1, 16, 16, balanced());
    let per_peer = 1024.0 * 2.0 * 1024.0 * 2.0 / 16.0;
    let nvl = 7.0 * per_peer / hw.nvlink_bytes_per_s();
    let nic = 8.0 * per_peer / hw.nic_bytes_per_s_per_gpu(false);
    let want = nvl.max(nic) + hw.node.nic_latency_s;
    assert!((c.moe_a2a_s() - want).abs() < 1e-12);
    // The imbalance factor scales the busiest rank's all-to-all.
    let skew = cm(&m16, &hw, 1, 16, 16, Stack::default());
    let want = (nvl.max(nic)) * 1.25 + hw.node.nic_latency_s;
    assert!((skew.moe_a2a_s() - want).abs() < 1e-12);
}

#[test]
fn rows_per_expert_expert_dp_and_parameters_per_rank() {
    let (m, hw) = (small(), Hardware::bundled("h100-80gb").unwrap());
    // t = 2, d = 4: 8 ranks per stage; ep = 4 leaves an expert data-parallel group of 2.
    let c = cm(&m, &hw, 2, 4, 4, balanced());
    assert_eq!(c.expert_dp(), 2);
    // The 4 ranks of a group route 512 tokens x top-2 each: 4096 rows over 8 experts, 512 for
    // each of a rank's 2 local experts.
    assert_eq!(c.moe_rows_per_expert(), 512.0);
    let [up, down] = c.moe_expert_gemms();
    assert_eq!((up.m, up.n, up.k, up.batch), (512.0, 1024.0, 1024.0, 2.0));
    assert_eq!(
        (down.m, down.n, down.k, down.batch),
        (512.0, 1024.0, 512.0, 2.0)
    );
    // 2 experts x 3 x 1024 x 512 parameters per layer on each rank.
    assert_eq!(
        c.moe_rank_expert_params_per_layer(),
        2.0 * 3.0 * 1024.0 * 512.0
    );
    let p = c.layers_rank_params(0, 4);
    assert_eq!(p.expert, 4.0 * 2.0 * 3.0 * 1024.0 * 512.0);
    // Dense part: attention, router and norms, split over t.
    let dense = m.attention_params() + 1024 * 8 + 4 * 1024;
    assert_eq!(p.dense, (4 * dense) as f64 / 2.0);
    // ZeRO-1 shards the expert optimizer state over the expert data-parallel group (2).
    let z = cm(
        &m,
        &hw,
        2,
        4,
        4,
        Stack {
            zero: pplan::cost::Zero::Optimizer,
            ..balanced()
        },
    );
    let params = 1e6;
    assert_eq!(
        z.expert_state_bytes(params),
        (4.0 * params + 12.0 * params / 2.0) as u64
    );
    // ZeRO-3 shards weights (with their FP8 copies, 2 bytes) and gradients too.
    let z3 = cm(
        &m,
        &hw,
        2,
        4,
        4,
        Stack {
            zero: pplan::cost::Zero::Full,
            precision: pplan::inputs::hardware::Precision::Fp8,
            ..balanced()
        },
    );
    assert_eq!(
        z3.expert_state_bytes(params),
        ((2.0 + 2.0 + 2.0 + 12.0) * params / 2.0) as u64
    );
}

#[test]
fn flops_count_the_top_k_experts_per_token() {
    let (m, hw) = (small(), Hardware::bundled("h100-80gb").unwrap());
    let c = cm(&m, &hw, 1, 1, 1, balanced());
    let mut dense = m.clone();
    dense.moe = None;
    dense.ffn_hidden_size = 2 * 512; // two experts' worth of MLP per token
    let d = cm(&dense, &hw, 1, 1, 1, balanced());
    // Same as a dense MLP twice the expert width, plus the router's 2 s h E.
    let router = 2.0 * 1024.0 * 1024.0 * 8.0;
    let want = 4.0 * (d.layer_forward_flops() + router);
    assert!((c.all_layers_forward_flops() / want - 1.0).abs() < 1e-12);
}

#[test]
fn expert_gradients_reduce_over_their_own_group() {
    let (m, hw) = (small(), Hardware::bundled("h100-80gb").unwrap());
    // ep x etp = all 8 ranks: no expert data parallelism, no reduction.
    assert_eq!(
        cm(&m, &hw, 2, 4, 4, balanced()).expert_grad_reduce_s(0.0),
        0.0
    );
    let c = cm(&m, &hw, 1, 8, 8, balanced());
    assert_eq!(c.expert_dp(), 1);
    assert_eq!(c.expert_grad_reduce_s(1e9), 0.0);
    // ep = 2 of 8 ranks in one node: 4 members, all on NVLink.
    let c = cm(&m, &hw, 1, 8, 2, balanced());
    assert_eq!(c.expert_dp(), 4);
    let bytes = 1e9 * 2.0;
    let want = 2.0
        * pplan::cost::all_gather_s(bytes, 4, hw.nvlink_bytes_per_s(), hw.node.nvlink_latency_s);
    assert!((c.expert_grad_reduce_s(1e9) - want).abs() < 1e-12);
}

#[test]
fn predict_refuses_bad_expert_layouts_naming_the_flag() {
    let (m, hw) = (small(), Hardware::bundled("h100-80gb").unwrap());
    let mut req = PredictRequest::new(&m, &hw);
    req.gpus = 8;
    req.global_batch = 16;
    req.ep = 3;
    match predict(&req) {
        Err(e @ PredictError::ExpertParallel { .. }) => {
            let s = e.to_string();
            assert!(s.contains("--ep 3") && s.contains("1, 2, 4, 8"), "{s}");
        }
        other => panic!("{other:?}"),
    }
    req.ep = 8;
    req.etp = 2;
    assert!(predict(&req).unwrap_err().to_string().contains("--etp 2"));
    let dense = Model::preset("llama3-8b").unwrap();
    let mut req = PredictRequest::new(&dense, &hw);
    req.gpus = 8;
    req.global_batch = 16;
    req.ep = 2;
    assert!(predict(&req)
        .unwrap_err()
        .to_string()
        .contains("dense model"));
}

#[test]
fn moe_prediction_reports_active_parameters_and_its_layout() {
    let (m, hw) = (small(), Hardware::bundled("h100-80gb").unwrap());
    let mut req = PredictRequest::new(&m, &hw);
    req.gpus = 8;
    req.global_batch = 16;
    req.ep = 8;
    let p = predict(&req).unwrap();
    assert_eq!((p.ep, p.etp), (8, 1));
    assert_eq!(p.params, m.total_params());
    assert_eq!(p.active_params, m.active_params());
    assert!(p.active_params < p.params);
    // With ZeRO-1 the breakdown shards the experts' optimizer state over their own group (1
    // here: ep = 8 of 8 ranks) and still adds up to the peak.
    let mut z = req.clone();
    z.stack.zero = pplan::cost::Zero::Optimizer;
    let pz = predict(&z).unwrap();
    assert_eq!(pz.memory_breakdown.total(), pz.peak_memory_bytes);
    assert!(pz.memory_breakdown.optimizer > p.memory_breakdown.optimizer / 8);
    // More expert parallelism: fewer expert weights per GPU.
    req.ep = 1;
    let p1 = predict(&req).unwrap();
    assert!(p1.model_state_bytes > p.model_state_bytes);
    // A dense prediction carries no ep/etp.
    let dense = Model::preset("llama3-8b").unwrap();
    let mut req = PredictRequest::new(&dense, &hw);
    req.gpus = 8;
    req.global_batch = 16;
    let d = predict(&req).unwrap();
    assert_eq!((d.ep, d.etp, d.active_params), (1, 1, d.params));
}

#[test]
fn deepep_dispatch_crosses_the_fabric_once_per_remote_node() {
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let mut m = small();
    m.moe.as_mut().unwrap().num_experts = 16;
    let stack = Stack {
        moe_dispatcher: MoeDispatcher::DeepEp,
        ..balanced()
    };
    // ep = 16 over 2 nodes: a token's 2 experts miss the other node with probability
    // C(8, 2) / C(16, 2) = 28 / 120, so it crosses the fabric 92/120 times on average.
    let c = cm(&m, &hw, 1, 16, 16, stack);
    let remote = 1.0 - 28.0 / 120.0;
    assert!((c.moe_remote_domains_per_token(2) - remote).abs() < 1e-12);
    let nic = 1024.0 * 2.0 * 1024.0 * remote / hw.nic_bytes_per_s_per_gpu(false);
    // Every GPU the token's experts are on gets it once over NVLink (directly or forwarded):
    // with one expert a GPU, one copy per remote expert.
    let nvl = 1024.0 * 2.0 * 1024.0 * 2.0 * 15.0 / 16.0 / hw.nvlink_bytes_per_s();
    let want = nvl.max(nic) + hw.node.nic_latency_s;
    assert!((c.moe_a2a_s() - want).abs() < 1e-12);
    // Fewer fabric bytes than one copy per expert: 2 x 8/16 copies leave the node.
    let plain = cm(&m, &hw, 1, 16, 16, balanced());
    assert!(c.moe_a2a_s() < plain.moe_a2a_s());
}

/// Group-limited routing (DeepSeek-V3's node-limited routing) against hand counts: the
/// remote domains a token's experts reach, and the fabric time that follows.
#[test]
fn group_limited_routing_reaches_fewer_remote_nodes() {
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let stack = Stack {
        moe_dispatcher: MoeDispatcher::DeepEp,
        ..balanced()
    };
    let with_groups = |experts: u64, top_k: u64, groups: Option<RouterGroups>| {
        let mut m = small();
        let moe = m.moe.as_mut().unwrap();
        moe.num_experts = experts;
        moe.top_k = top_k;
        moe.groups = groups;
        m
    };
    let g = |num_groups, topk| Some(RouterGroups { num_groups, topk });
    // 16 experts, top-2, 2 nodes: uniform routing reaches the other node with probability
    // 1 - C(8, 2) / C(16, 2) = 92/120; with 2 groups (a node each) and 1 chosen, a token's
    // experts are all on one node, the other one half the time.
    let cases = [
        (16, 2, None, 2, 92.0 / 120.0),
        (16, 2, g(2, 1), 2, 0.5),
        // 4 groups over 2 nodes (two a node), 2 chosen: the other node holds neither with
        // probability C(2, 2) / C(4, 2) = 1/6.
        (16, 2, g(4, 2), 2, 5.0 / 6.0),
        // 2 groups over 4 nodes (a group spans two nodes), 1 chosen: each of the 3 other
        // nodes is in the chosen group with probability 1/2, then hit by one of 2 experts
        // among that group's 8 unless both fall on the own half: 1 - C(4, 2) / C(8, 2) =
        // 22/28. 3 x 1/2 x 22/28.
        (16, 2, g(2, 1), 4, 3.0 * 0.5 * 22.0 / 28.0),
        // DeepSeek-V3: 256 experts, top-8, 8 groups of which 4, 8 nodes: 7 x (1 - C(7, 4) /
        // C(8, 4)) = 3.5, against 7 x (1 - C(224, 8) / C(256, 8)) = 4.633 uniform.
        (256, 8, g(8, 4), 8, 3.5),
        (256, 8, None, 8, 4.63282),
    ];
    for (experts, top_k, groups, domains, want) in cases {
        let m = with_groups(experts, top_k, groups);
        let c = cm(&m, &hw, 1, 16, 16, stack);
        let got = c.moe_remote_domains_per_token(domains);
        assert!(
            (got - want).abs() < 1e-4,
            "{groups:?} over {domains}: {got} vs {want}"
        );
    }
    // ep = 16 over 2 nodes: the fabric carries a token once per remote node reached.
    let m = with_groups(16, 2, g(2, 1));
    let c = cm(&m, &hw, 1, 16, 16, stack);
    let nic = 1024.0 * 2.0 * 1024.0 * 0.5 / hw.nic_bytes_per_s_per_gpu(false);
    let nvl = 1024.0 * 2.0 * 1024.0 * 2.0 * 15.0 / 16.0 / hw.nvlink_bytes_per_s();
    assert!((c.moe_a2a_s() - (nvl.max(nic) + hw.node.nic_latency_s)).abs() < 1e-12);
    // Megatron-Core's rule: the groups divide the experts, the chosen ones the top-k.
    let mut bad = with_groups(16, 2, g(3, 1));
    assert!(bad.moe.as_ref().unwrap().check(4).is_err());
    bad.moe.as_mut().unwrap().groups = g(4, 3);
    assert!(bad.moe.as_ref().unwrap().check(4).is_err());
}

#[test]
fn each_layer_dispatches_and_combines_forward_and_backward() {
    let (m, hw) = (small(), Hardware::bundled("h100-80gb").unwrap());
    // t = 1: the dense part has no tensor-parallel collectives, so the layer's in-layer
    // communication is the MoE block's: one dispatch and one combine each way.
    let c = cm(&m, &hw, 1, 8, 8, balanced());
    let l = c.moe_layer();
    let a2a = c.moe_a2a_s();
    assert!(a2a > 0.0);
    assert!((l.forward.tp_comm_s - 2.0 * a2a).abs() < 1e-15);
    assert!((l.backward_input.tp_comm_s - 2.0 * a2a).abs() < 1e-15);
    // Full recompute repeats the forward's two.
    let mut full = c;
    full.layout.recompute = Recompute::Full;
    assert!((full.moe_layer().backward_input.tp_comm_s - 4.0 * a2a).abs() < 1e-15);
    // With overlap, the all-to-alls hide under the layer's compute.
    let mut ov = c;
    ov.stack.moe_comm_overlap = true;
    let lo = ov.moe_layer();
    assert!(lo.forward.tp_comm_s < l.forward.tp_comm_s);
    assert!((lo.forward.tp_comm_s + lo.forward.tp_hidden_s - 2.0 * a2a).abs() < 1e-15);
}

#[test]
fn expert_tensor_parallelism_gathers_the_routed_tokens() {
    let (m, hw) = (small(), Hardware::bundled("h100-80gb").unwrap());
    let mut c = cm(&m, &hw, 2, 4, 4, balanced());
    assert_eq!(c.moe_etp_collective_s(), 0.0);
    c.layout.etp = 2;
    // 512 tokens x top-2 x 1024 x 2 bytes from each of the 2 etp ranks, all-gathered on
    // NVLink: half of the 4 MiB gathered crosses the link.
    let bytes = 512.0 * 2.0 * 1024.0 * 2.0 * 2.0;
    let want = bytes / 2.0 / hw.nvlink_bytes_per_s() + hw.node.nvlink_latency_s;
    assert!((c.moe_etp_collective_s() - want).abs() < 1e-12);
    // Each rank holds half of every local expert, whose GEMMs see twice the rows.
    assert_eq!(c.expert_dp(), 1);
    let [up, _] = c.moe_expert_gemms();
    assert_eq!((up.m, up.n, up.batch), (1024.0, 512.0, 2.0));
}

#[test]
fn sliding_window_layers_compute_only_their_band() {
    let path = format!(
        "{}/tests/data/hf/gpt-oss-120b.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let m = Model::load(&path).unwrap();
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let flash = Stack {
        attention: pplan::cost::Attention::Flash,
        ..balanced()
    };
    let full = cm(&m, &hw, 1, 8, 8, flash);
    assert_eq!(m.uniform_window(), None);
    let mut sliding = m.clone();
    sliding
        .sliding_window
        .as_mut()
        .unwrap()
        .layers
        .iter_mut()
        .for_each(|x| *x = true);
    assert_eq!(sliding.uniform_window(), Some(128));
    let sw = cm(&sliding, &hw, 1, 8, 8, flash);
    // Causal full attention computes (1 + 128/4096)/2 of the s^2 tiles; a 128-token window
    // (128 + 128)/4096 of them.
    let want = (256.0 / 4096.0) / ((1.0 + 128.0 / 4096.0) / 2.0);
    let (f_full, b_full) = full.attention_core_s();
    let (f_sw, b_sw) = sw.attention_core_s();
    assert!((f_sw / f_full - want).abs() < 1e-12);
    assert!((b_sw / b_full - want).abs() < 1e-12);
    // A stage of 2 layers (one sliding, one full) costs one of each kind.
    let kinds = full.layer_kinds();
    let two = full.layers_block(0, 2);
    let sum = kinds.moe_sliding.plus(kinds.moe);
    assert!((two.forward.total_s() - sum.forward.total_s()).abs() < 1e-15);
    assert!(kinds.moe_sliding.forward.total_s() < kinds.moe.forward.total_s());
}

/// ZeRO-2/3 for experts: per MoE layer and micro-batch, the all-gather of a rank's 16-bit
/// expert weights and the reduce-scatter of their gradients over the expert data-parallel group,
/// counted by hand for ep = 2 of 8 ranks in one node (4 members on NVLink); what stays in the
/// step follows the ZeRO stage.
#[test]
fn sharded_expert_state_gathers_and_scatters_over_the_expert_group() {
    use pplan::cost::{all_gather_s, Zero};
    let (m, hw) = (small(), Hardware::bundled("h100-80gb").unwrap());
    let with = |zero: Zero, overlap_param_gather: bool| {
        cm(
            &m,
            &hw,
            1,
            8,
            2,
            Stack {
                zero,
                overlap_param_gather,
                ..balanced()
            },
        )
    };
    let params = 3.0e8;
    let ring =
        |bytes: f64| all_gather_s(bytes, 4, hw.nvlink_bytes_per_s(), hw.node.nvlink_latency_s);
    let c = with(Zero::Full, false);
    assert_eq!(c.expert_dp(), 4);
    let (ag, rs) = c.expert_sharded_layer_comm_s(params);
    // 2 bytes a weight gathered, 2 bytes a gradient (BF16) scattered.
    assert!((ag - ring(2.0 * params)).abs() < 1e-12, "{ag}");
    assert!((rs - ring(2.0 * params)).abs() < 1e-12, "{rs}");
    // Below ZeRO-2 nothing per layer.
    assert_eq!(
        with(Zero::Optimizer, false).expert_sharded_layer_comm_s(params),
        (0.0, 0.0)
    );
    // In the step: ZeRO-3 nothing; ZeRO-2 the parameter all-gather unless overlapped;
    // ZeRO-1 the reduce-scatter and the all-gather.
    let half = ring(2.0 * params);
    assert_eq!(c.expert_grad_reduce_s(params), 0.0);
    assert!((with(Zero::Gradients, false).expert_grad_reduce_s(params) - half).abs() < 1e-12);
    assert_eq!(
        with(Zero::Gradients, true).expert_grad_reduce_s(params),
        0.0
    );
    assert!((with(Zero::Optimizer, false).expert_grad_reduce_s(params) - 2.0 * half).abs() < 1e-12);
    assert!((with(Zero::Optimizer, true).expert_grad_reduce_s(params) - half).abs() < 1e-12);
}

/// `predict` with ZeRO-2 and 3 for a MoE model: each stage holds less than the one before,
/// and ZeRO-3's per-layer gathers cost time over ZeRO-2.
#[test]
fn predict_shards_expert_state_deeper_with_each_zero_stage() {
    use pplan::cost::Zero;
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let m = Model::preset("mixtral-8x7b").unwrap();
    let run = |zero: Zero| {
        let mut req = PredictRequest::new(&m, &hw);
        req.gpus = 64;
        req.tp = 2;
        req.ep = 8;
        req.global_batch = 128;
        req.sequence_parallel = true;
        req.recompute = Recompute::Full;
        req.stack = Stack {
            zero,
            ..Stack::megatron_core()
        };
        predict(&req).unwrap()
    };
    let [z1, z2, z3] = [Zero::Optimizer, Zero::Gradients, Zero::Full].map(run);
    assert!(z2.peak_memory_bytes < z1.peak_memory_bytes);
    assert!(z3.peak_memory_bytes < z2.peak_memory_bytes);
    assert!(z3.memory_breakdown.weights < z2.memory_breakdown.weights);
    assert!(z2.memory_breakdown.gradients < z1.memory_breakdown.gradients);
    assert!(z3.step_time_s > z2.step_time_s);
}

#[test]
fn megatron_core_recompute_modules_drop_and_rebuild_what_they_name() {
    use pplan::cost::memory::{layer_activation_bytes_for, norm_output_bytes, ActDims};
    use pplan::cost::Attention;
    let (m, hw) = (small(), Hardware::bundled("h100-80gb").unwrap());
    let flash = Stack {
        attention: Attention::Flash,
        ..balanced()
    };
    let mut c = cm(&m, &hw, 2, 8, 8, flash);
    fn with<'a>(c: &CostModel<'a>, r: Recompute) -> CostModel<'a> {
        let mut c = *c;
        c.layout.recompute = r;
        c
    }
    // Hand counts, t = 2 with sequence parallelism, b = 1, s = 1024, h = 1024: the two norm
    // outputs are 2 x 2 s h / t bytes.
    let d = ActDims::new(&m, 1, 2);
    assert_eq!(norm_output_bytes(d, true), 4 * 1024 * 1024 / 2);
    let dense = |r| layer_activation_bytes_for(d, r, true, Attention::Flash);
    assert_eq!(
        dense(Recompute::Selective) - dense(Recompute::NormAct),
        4 * 1024 * 1024 / 2
    );
    assert_eq!(dense(Recompute::NormAct), dense(Recompute::NormMoe));
    // MoE activations: the routed rows (s/t tokens x top-2, balanced: 1024 rows over the 8
    // ranks' 8 experts, one expert each here) keep the dispatched input (2h), the
    // up-projection output (2 x 2 f_e for SwiGLU), the fp32 probability (4) and, unless
    // moe_act is recomputed, the activation output (2 f_e). With `moe` none of them.
    c.layout.recompute = Recompute::None;
    let rows = c.moe_rows_per_expert();
    assert_eq!(rows, 1024.0 / 2.0 * 2.0 * 8.0 / 8.0);
    let base = 1_000_000_000u64;
    let keep = |r| with(&c, r).moe_layer_activation_bytes(base) as f64;
    assert_eq!(
        keep(Recompute::Selective) - keep(Recompute::NormAct),
        rows * 2.0 * 512.0
    );
    // (`moe` keeps the checkpoint's input, the pre-MLP norm output, 2 s h / t.)
    assert_eq!(
        keep(Recompute::Selective) - keep(Recompute::NormMoe),
        rows * (2.0 * 1024.0 + 4.0 * 512.0 + 4.0 + 2.0 * 512.0) - 2.0 * 1024.0 * 1024.0 / 2.0
    );
    // ... and rebuilds them one layer at a time.
    assert_eq!(
        with(&c, Recompute::NormMoe).moe_recompute_working_bytes() as f64,
        rows * (2.0 * 1024.0 + 4.0 * 512.0 + 4.0 + 2.0 * 512.0)
    );
    assert_eq!(
        with(&c, Recompute::NormAct).moe_recompute_working_bytes(),
        0
    );
    // Time: `moe` runs the block's forward again, all-to-alls included; `moe_act` only the
    // activation; both run the two norms again.
    let none = with(&c, Recompute::None).moe_layer();
    let moe = with(&c, Recompute::NormMoe).moe_layer();
    let act = with(&c, Recompute::NormAct).moe_layer();
    let a2a = c.moe_a2a_s();
    assert!(
        (moe.backward_input.tp_comm_s - none.backward_input.tp_comm_s - 2.0 * a2a).abs() < 1e-12
    );
    assert!(moe.backward_input.gemm_s > none.backward_input.gemm_s);
    assert_eq!(act.backward_input.gemm_s, none.backward_input.gemm_s);
    assert!(act.backward_input.memory_s > none.backward_input.memory_s);
    assert!(moe.backward_input.total_s() > act.backward_input.total_s());
}

/// The host time (docs/cost-model.md, "Host time of a MoE layer"): a small MoE layer takes the
/// framework's host time `H`, shared between forward and backward by their kernels, plus the
/// forward's loss at the dispatcher's wait, `c` of its GPU time; a long one takes its GPU time
/// plus `c` of the forward's host time; recomputation scales `H` with the kernels it re-runs;
/// 0 turns it off.
#[test]
fn small_moe_layers_wait_for_the_host() {
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let m = small();
    let total = |b: pplan::cost::BlockCost| {
        b.forward.total_s() + b.backward_input.total_s() + b.backward_weight.total_s()
    };
    let c = pplan::cost::MOE_FORWARD_SYNC_LOSS;
    assert_eq!(c, 0.20);
    let off = cm(&m, &hw, 1, 8, 8, balanced()).moe_layer();
    let host = 8.9e-3;
    let on_stack = Stack {
        moe_layer_host_s: host,
        ..balanced()
    };
    let on = cm(&m, &hw, 1, 8, 8, on_stack).moe_layer();
    // This layer's GPU work is far under 8.9 ms: it takes the host time and the forward's loss.
    // 8.9 ms is the host time of the kernels launched one by one in the run it was read off,
    // which graphed the router (3 kernels forward, 3 backward, 1 weight gradient): with
    // nothing graphed, this layer's host time is 8.9 ms x all its kernels / the others.
    assert!(total(off) < 1e-3, "{}", total(off));
    let layer_host = |k: f64| host * k / (k - 7.0);
    let want_total = |all: f64| layer_host(all) + c * off.forward.total_s();
    // The GPU's own work is unchanged; the wait is launch time, split by kernels.
    assert_eq!(on.forward.gemm_s, off.forward.gemm_s);
    let kernels = {
        let dense = Model {
            ffn_hidden_size: 0,
            moe: None,
            ..m.clone()
        };
        let d = cm(&dense, &hw, 1, 8, 8, balanced()).layer_kernels();
        d.plus(cm(&m, &hw, 1, 8, 8, balanced()).moe_kernels(1.0))
    };
    let wait = |p: pplan::cost::Part, q: pplan::cost::Part| p.launch_s - q.launch_s;
    let all = kernels.forward + kernels.backward_input + kernels.backward_weight;
    let want = want_total(all);
    assert!((total(on) - want).abs() < 1e-12, "{} {want}", total(on));
    let host = layer_host(all);
    let host_f = host * kernels.forward / all;
    let gpu_f = off.forward.total_s();
    assert!((wait(on.forward, off.forward) - (host_f - gpu_f + c * gpu_f)).abs() < 1e-12);
    let host_b = host - host_f;
    let gpu_b = off.backward_input.total_s() + off.backward_weight.total_s();
    let kb = kernels.backward_input + kernels.backward_weight;
    assert!(
        (wait(on.backward_weight, off.backward_weight)
            - (host_b - gpu_b) * kernels.backward_weight / kb)
            .abs()
            < 1e-12
    );
    // Full recomputation re-runs the forward's kernels: the host time grows by as many.
    let mut full = cm(&m, &hw, 1, 8, 8, on_stack);
    full.layout.recompute = Recompute::Full;
    let mut full_off = full;
    full_off.stack = balanced();
    let want = host * (all + kernels.forward) / all + c * full_off.moe_layer().forward.total_s();
    // (the same per-kernel host time: `host` is already this layer's, all kernels)
    assert!((total(full.moe_layer()) - want).abs() < 1e-12);
    // A layer whose GPU work outlasts the host time both ways: the forward loses c of its host
    // time, the backward nothing.
    let long = Model {
        seq_len: 65536,
        ..m.clone()
    };
    let a = cm(&long, &hw, 1, 8, 8, on_stack).moe_layer();
    let b = cm(&long, &hw, 1, 8, 8, balanced()).moe_layer();
    assert!(b.forward.total_s() > host_f && b.backward_input.total_s() > host_b);
    assert!((a.forward.total_s() - b.forward.total_s() - c * host_f).abs() < 1e-12);
    assert_eq!(
        (a.backward_input, a.backward_weight),
        (b.backward_input, b.backward_weight)
    );
    // Megatron-Core's preset carries the measured host time; the 2021 stack and torchtitan none.
    assert_eq!(Stack::megatron_core().moe_layer_host_s, 8.85e-3);
    assert_eq!(Stack::default().moe_layer_host_s, 0.0);
    assert_eq!(Stack::torchtitan().moe_layer_host_s, 0.0);
}

/// The routed rows' saved activations by hand (docs/cost-model.md, "Mixture of experts",
/// Memory): per row the first expert GEMM's input `e h`, the up projection `2 x 2 f_e`
/// (gated) and the fp32 probability `4`, which the fused weighted activation keeps, and the
/// second GEMM's input `e f_e`, with `e` = 2 bytes in BF16 and 1 in FP8 (Transformer Engine
/// keeps the cast it fed the GEMM); nothing of the second GEMM's output (Megatron-Core since
/// core_v0.13.0 multiplies the probabilities in the activation, not in the un-permutation).
/// Read through the selective-norm-moe working set, which is exactly those bytes.
#[test]
fn routed_activations_keep_the_expert_gemm_inputs_in_the_gemm_format() {
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let m = small();
    // 1024 tokens x top-2 over ep 8 of 8 experts: 2048 rows on a rank, 1 local expert.
    let rows = 2048.0;
    let (h, f) = (1024.0, 512.0);
    for (precision, e) in [
        (pplan::inputs::hardware::Precision::Bf16, 2.0),
        (pplan::inputs::hardware::Precision::Fp8, 1.0),
    ] {
        let mut c = cm(
            &m,
            &hw,
            1,
            8,
            8,
            Stack {
                precision,
                ..balanced()
            },
        );
        c.layout.recompute = Recompute::NormMoe;
        let want = rows * (e * h + 2.0 * 2.0 * f + 4.0 + e * f);
        assert_eq!(
            c.moe_recompute_working_bytes(),
            want as u64,
            "{precision:?}"
        );
    }
}

/// The overlapped all-to-all (`--moe-comm-overlap`) hides only under a partner: each stage's
/// lone-action extra is the layers' exposed time over their overlapped time (the same layers
/// costed without the overlap), and the step lands between every action paired and none.
#[test]
fn overlapped_all_to_all_is_exposed_on_lone_actions() {
    use pplan::plan::predict::{check, step_costs};
    use pplan::schedule::generators::{generate, GenParams, ScheduleName};
    use pplan::sim::{simulate, SimOptions};
    let mut m = small();
    m.num_layers = 8;
    m.moe.as_mut().unwrap().layers = vec![true; 8];
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let mut req = PredictRequest::new(&m, &hw);
    req.gpus = 16;
    req.pp = 2;
    req.ep = 8;
    req.global_batch = 64;
    req.stack = Stack {
        moe_comm_overlap: true,
        ..balanced()
    };
    let dp = check(&req).unwrap();
    let s = generate(ScheduleName::OneFOneB, GenParams::new(2, 8)).unwrap();
    let on = step_costs(&req, dp, 2, s.placement).unwrap();
    let exposed_req = PredictRequest {
        stack: Stack {
            moe_comm_overlap: false,
            ..req.stack
        },
        ..req.clone()
    };
    let off = step_costs(&exposed_req, dp, 2, s.placement).unwrap();
    assert!(off.costs.unpaired_extra.is_empty());
    for st in 0..2 {
        let (a, b, e) = (
            on.costs.stages[st],
            off.costs.stages[st],
            on.costs.unpaired_extra[st],
        );
        assert!(e.forward_ns > 0, "stage {st}: {e:?}");
        // Rounded to whole nanoseconds each.
        assert!(
            (a.forward_ns + e.forward_ns).abs_diff(b.forward_ns) < 2,
            "{a:?} {e:?} {b:?}"
        );
        assert!(
            (a.backward_input_ns + e.backward_input_ns).abs_diff(b.backward_input_ns) < 2,
            "{a:?} {e:?} {b:?}"
        );
    }
    let span = |c: &pplan::sim::Costs| simulate(&s, c, SimOptions::default()).unwrap().makespan_ns;
    let mut all_paired = on.costs.clone();
    all_paired.unpaired_extra.clear();
    let (paired, some, none) = (span(&all_paired), span(&on.costs), span(&off.costs));
    assert!(paired < some && some < none, "{paired} {some} {none}");
    // predict runs exactly these costs on this schedule.
    let p = predict(&req).unwrap();
    assert!(
        (p.step_time_s - some as f64 * 1e-9).abs() < 1e-9,
        "{} {some}",
        p.step_time_s
    );
}

/// Hand count: the all-to-all dispatcher sorts the received rows by local expert and back
/// (Megatron-Core's "Permutation 2"), one more read and write of 2 bytes per element each
/// way than DeepEP: with 4 local experts (ep 2 of 8) and 1,024 tokens of top-2 on a rank,
/// 2,048 rows of 1,024 = 8 x 2,048 x 1,024 bytes more forward and backward; with one local
/// expert (ep 8) none.
#[test]
fn all_to_all_dispatcher_sorts_by_local_expert() {
    let (m, hw) = (small(), Hardware::bundled("h100-80gb").unwrap());
    for (ep, want_bytes) in [(2, 8.0 * 2048.0 * 1024.0), (8, 0.0)] {
        let layer = |deepep: bool| {
            let stack = Stack {
                moe_dispatcher: if deepep {
                    MoeDispatcher::DeepEp
                } else {
                    MoeDispatcher::AllToAll
                },
                ..balanced()
            };
            cm(&m, &hw, 1, 8, ep, stack).moe_layer()
        };
        let (a2a, deepep) = (layer(false), layer(true));
        let hbm = hw.hbm_bytes_per_s();
        let more = |x: f64, y: f64| (x - y) * hbm;
        assert!((more(a2a.forward.memory_s, deepep.forward.memory_s) - want_bytes).abs() < 1.0);
        assert!(
            (more(a2a.backward_input.memory_s, deepep.backward_input.memory_s) - want_bytes).abs()
                < 1.0
        );
        assert_eq!(a2a.forward.gemm_s, deepep.forward.gemm_s);
    }
}

/// Hand count: a deduplicating dispatcher sends a token once per GPU holding one of its
/// experts. 8 experts on ep 2 (4 a GPU), top-2: the token misses the other GPU with
/// probability C(4, 2) / C(8, 2) = 6 / 28, so it goes there 22/28 times, against 2 x 1/2
/// copies with the all-to-all dispatcher. HybridEP also fuses the permutation (no HBM pass).
#[test]
fn flex_dispatchers_send_a_token_once_per_gpu() {
    let (m, hw) = (small(), Hardware::bundled("h100-80gb").unwrap());
    let with = |d: MoeDispatcher| {
        let stack = Stack {
            moe_dispatcher: d,
            ..balanced()
        };
        cm(&m, &hw, 1, 2, 2, stack)
    };
    let (a2a, deepep, hybrid) = (
        with(MoeDispatcher::AllToAll),
        with(MoeDispatcher::DeepEp),
        with(MoeDispatcher::HybridEp),
    );
    let token = 2.0 * 1024.0;
    let lat = hw.node.nvlink_latency_s;
    let want_a2a = 1024.0 * token * 2.0 * 0.5 / hw.nvlink_bytes_per_s() + lat;
    let want_dedup = 1024.0 * token * (22.0 / 28.0) / hw.nvlink_bytes_per_s() + lat;
    assert!((a2a.moe_a2a_s() - want_a2a).abs() < 1e-12);
    assert!((deepep.moe_a2a_s() - want_dedup).abs() < 1e-12);
    assert_eq!(hybrid.moe_a2a_s(), deepep.moe_a2a_s());
    // Permutation: DeepEP one pass over the 2,048 x 1,024 routed rows (permute and
    // un-permute, each a read and a write of 2 bytes: 8 bytes an element), HybridEP none.
    let hbm = hw.hbm_bytes_per_s();
    let diff = (deepep.moe_layer().forward.memory_s - hybrid.moe_layer().forward.memory_s) * hbm;
    assert!((diff - 8.0 * 2048.0 * 1024.0).abs() < 1.0, "{diff}");
}

/// Token dropping caps the busiest expert at the capacity factor; padding makes every expert
/// take exactly its capacity (`get_capacity`: C x tokens x top-k / experts).
#[test]
fn capacity_factor_caps_or_pads_the_busiest_expert() {
    let (m, hw) = (small(), Hardware::bundled("h100-80gb").unwrap());
    let rows = |imbalance: f64, capacity: Option<MoeCapacity>| {
        let stack = Stack {
            moe_imbalance: imbalance,
            moe_capacity: capacity,
            ..balanced()
        };
        cm(&m, &hw, 1, 8, 8, stack).moe_rows_per_expert()
    };
    // 1,024 tokens a rank, top-2, ep 8 of 8 experts: 2,048 rows a local expert on average.
    let mean = 1024.0 * 2.0 * 8.0 / 8.0;
    assert_eq!(rows(1.48, None), mean * 1.48);
    let drop = MoeCapacity {
        factor: 1.25,
        pad: false,
    };
    assert_eq!(rows(1.48, Some(drop)), mean * 1.25);
    assert_eq!(rows(1.1, Some(drop)), mean * 1.1);
    assert_eq!(
        rows(1.1, Some(MoeCapacity { pad: true, ..drop })),
        mean * 1.25
    );
}

/// CUDA graphs take the launches and the host time of what they capture: on a host-bound MoE
/// layer (Qwen3-30B-A3B's shapes on one B200, micro-batch 1, Megatron-Core's host time), a
/// padded layer captured whole is faster than the same layer launched kernel by kernel, and
/// capturing only the attention and router is between the two.
#[test]
fn cuda_graphs_remove_the_host_time_they_capture() {
    let hw = Hardware::bundled("b200").unwrap();
    let mut m = Model::preset("qwen3-30b-a3b").unwrap();
    m.seq_len = 4096;
    let padded = MoeCapacity {
        factor: 1.0,
        pad: true,
    };
    let layer = |graphs: CudaGraphs| {
        let stack = Stack {
            moe_capacity: Some(padded),
            cuda_graphs: graphs,
            ..Stack::megatron_core()
        };
        let b = cm(&m, &hw, 1, 8, 8, stack).moe_layer();
        b.forward.total_s() + b.backward_input.total_s() + b.backward_weight.total_s()
    };
    let none = layer(CudaGraphs::default());
    let partial = layer(CudaGraphs {
        implementation: CudaGraphImpl::TransformerEngine,
        modules: CudaGraphModules::parse(["attn", "moe_router", "moe_preprocess"]).unwrap(),
    });
    let whole = layer(CudaGraphs {
        implementation: CudaGraphImpl::Local,
        modules: CudaGraphModules::default(),
    });
    assert!(
        whole < partial && partial < none,
        "{whole} {partial} {none}"
    );
    // Without graphs the host time (8.85 ms) binds the layer.
    assert!(
        none >= pplan::cost::MEGATRON_CORE_MOE_LAYER_HOST_S,
        "{none}"
    );
}
