//! The Megatron-MoE-ModelZoo validation harness (src/report/moe_modelzoo.rs,
//! docs/validation.md): the bundled data, which rows are predicted and why the others are
//! not, the layout each request takes from its row, and the comparison it reports.

use pplan::cost::Recompute;
use pplan::inputs::hardware::Hardware;
use pplan::report::moe_modelzoo::{moe_cases, moe_rows, validate_moe_modelzoo};

#[test]
fn six_published_rows_four_predicted_two_explained() {
    let rows = moe_rows().unwrap();
    assert_eq!(rows.len(), 6);
    let (cases, skipped) = moe_cases().unwrap();
    let ids: Vec<&str> = cases.iter().map(|c| c.row.id.as_str()).collect();
    assert_eq!(ids, ["m286", "m287", "m288", "m290"]);
    let skipped: Vec<(&str, &str)> = skipped
        .iter()
        .map(|(r, why)| (r.id.as_str(), why.as_str()))
        .collect();
    assert_eq!(skipped.len(), 2);
    assert!(skipped[0].0 == "m289" && skipped[0].1.contains("96 virtual stages"));
    assert!(skipped[1].0 == "m291" && skipped[1].1.contains("linear-attention"));
}

#[test]
fn each_request_takes_the_rows_layout_and_stated_stack() {
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let (cases, _) = moe_cases().unwrap();
    for c in &cases {
        let r = c.request(&hw);
        let row = &c.row;
        assert_eq!(
            (r.gpus, r.tp, r.pp, r.dp, r.cp, r.ep, r.etp, r.chunks),
            (
                row.gpus_total,
                row.t,
                row.p,
                Some(row.d),
                row.cp,
                row.ep,
                row.etp,
                row.vp
            ),
            "{}",
            row.id
        );
        assert_eq!(
            (r.micro_batch, r.global_batch),
            (row.micro_batch, row.global_batch)
        );
        assert_eq!(r.sequence_parallel, row.t > 1);
        assert_eq!(r.stack.moe_comm_overlap, row.id == "m287", "{}", row.id);
        assert_eq!(r.stack.moe_node_dedup, row.notes.contains("DeepEP"));
        // Megatron-LM overlaps the interleaved schedule's sends by default.
        assert_eq!(r.stack.blocking_p2p, row.vp == 1, "{}", row.id);
        assert_eq!(r.model.total_params(), c.model.total_params());
    }
    // `norm, act` is Megatron-Core's `--recompute-modules layernorm moe_act`.
    assert_eq!(cases[0].recompute(), Recompute::NormAct);
    assert_eq!(cases[2].recompute(), Recompute::Full);
    assert_eq!(cases[3].recompute(), Recompute::None);
}

#[test]
fn the_comparison_is_the_same_flop_count_over_the_predicted_step() {
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let report = validate_moe_modelzoo(&hw).unwrap();
    assert_eq!(report.rows.len(), 4);
    for c in &report.rows {
        let flops_published = c.row.tflops_per_gpu * c.row.iteration_time_s;
        let flops_predicted = c.predicted_tflops_per_gpu * c.prediction.step_time_s;
        assert!((flops_predicted / flops_published - 1.0).abs() < 1e-12);
        assert!(
            (c.error - (c.predicted_tflops_per_gpu / c.row.tflops_per_gpu - 1.0)).abs() < 1e-12
        );
        assert_eq!(c.prediction.ep, c.row.ep);
    }
    // Deterministic: the table is the same on every run.
    assert_eq!(
        validate_moe_modelzoo(&hw).unwrap().markdown(),
        report.markdown()
    );
    assert!(report.markdown().contains("MAE"));
}
