//! Held out: Megatron-Bridge's DGX-H100 pre-training rows of the bundled models
//! (`report::bridge_h100`, docs/validation.md). Nothing is fitted to them; these tests check
//! the transcription, that each row runs with its layout and its recipe's switches, and the
//! report.

use pplan::cost::{Attention, Recompute, Zero};
use pplan::inputs::hardware::{Hardware, Precision};
use pplan::inputs::model::Model;
use pplan::plan::predict::{PipelineSplit, Split};
use pplan::report::bridge_h100::{
    bridge_markdown, bridge_request, validate_bridge_h100, Dispatcher, BRIDGE_H100_ROWS,
};

fn h100() -> Hardware {
    Hardware::bundled("h100-80gb").unwrap()
}

#[test]
fn rows_add_up() {
    for r in &BRIDGE_H100_ROWS {
        let model = Model::preset(r.model).unwrap();
        // Whole data-parallel groups, whole micro-batches, expert groups that divide them.
        let mp = r.tp * r.pp * r.cp;
        assert_eq!(r.gpus % mp, 0, "{}", r.model);
        let d = r.gpus / mp;
        assert_eq!(r.global_batch % d, 0, "{}", r.model);
        assert_eq!((d * r.cp * r.tp) % r.ep, 0, "{}", r.model);
        assert_eq!(model.moe.is_some(), r.ep > 1, "{}", r.model);
        assert_eq!(r.dispatcher == Dispatcher::None, r.ep == 1, "{}", r.model);
        // Megatron-Bridge counts fewer FLOPs per token than a whole-attention count would.
        let bridge_flops_per_token = r.tflops_per_gpu * 1e12 / r.tokens_per_s_per_gpu;
        assert!(bridge_flops_per_token > 0.0);
    }
}

#[test]
fn requests_carry_the_layout_and_the_recipe() {
    let hw = h100();
    for r in &BRIDGE_H100_ROWS {
        let model = Model::preset(r.model).unwrap();
        let req = bridge_request(r, &model, &hw);
        assert_eq!(
            (
                req.gpus,
                req.tp,
                req.pp,
                req.cp,
                req.ep,
                req.global_batch,
                req.micro_batch
            ),
            (r.gpus, r.tp, r.pp, r.cp, r.ep, r.global_batch, 1)
        );
        assert_eq!(req.chunks, r.vp.max(1));
        assert_eq!(req.recompute, Recompute::None);
        assert_eq!(req.sequence_parallel, r.tp > 1);
        let s = req.stack;
        assert_eq!(s.precision, Precision::Fp8);
        assert_eq!(s.attention, Attention::Flash);
        assert_eq!(s.zero, Zero::Optimizer);
        assert_eq!(s.grad_reduce_bytes_per_param, 2.0);
        assert_eq!(s.moe_imbalance, 1.0, "forced balance");
        assert_eq!(s.tp_comm_overlap, r.ep == 1);
        assert_eq!(s.moe_node_dedup, r.dispatcher == Dispatcher::PerNode);
        assert_eq!(
            s.moe_comm_overlap,
            r.dispatcher == Dispatcher::AllToAllOverlapped
        );
    }
    // 126 and 94 layers do not divide 64 and 32 stages: the embedding and the loss count.
    for (name, split) in [
        ("llama3-70b", Split::default()),
        (
            "llama3-405b",
            Split::Megatron(PipelineSplit::EMBEDDING_AND_LOSS),
        ),
        (
            "qwen3-235b-a22b",
            Split::Megatron(PipelineSplit::EMBEDDING_AND_LOSS),
        ),
    ] {
        let r = BRIDGE_H100_ROWS.iter().find(|r| r.model == name).unwrap();
        let model = Model::preset(name).unwrap();
        assert_eq!(bridge_request(r, &model, &hw).partition, split, "{name}");
    }
}

#[test]
fn every_row_is_predicted_and_the_report_is_deterministic() {
    let hw = h100();
    let got = validate_bridge_h100(&hw).unwrap();
    assert_eq!(got.len(), BRIDGE_H100_ROWS.len());
    for c in &got {
        let want = c.prediction.tokens_per_s_per_gpu / c.row.tokens_per_s_per_gpu - 1.0;
        assert!((c.error - want).abs() < 1e-12, "{}", c.row.model);
    }
    // The dense rows, the regime the H100 fit covers, within 15 % (docs/validation.md says
    // which way and why).
    for c in got.iter().filter(|c| c.row.ep == 1) {
        assert!(c.error.abs() < 0.15, "{}: {:+.3}", c.row.model, c.error);
    }
    let a = bridge_markdown(&got);
    assert_eq!(a, bridge_markdown(&validate_bridge_h100(&hw).unwrap()));
    assert!(a.contains("dense rows (held out):") && a.contains("MoE rows (held out):"));
}
