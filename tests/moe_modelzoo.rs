//! The Megatron-MoE-ModelZoo validation harness (src/report/moe_modelzoo.rs,
//! docs/validation.md): the bundled data, which rows are predicted and why the others are
//! not, the layout each request takes from its row, and the comparison it reports.

use pplan::cost::Recompute;
use pplan::inputs::hardware::Hardware;
use pplan::plan::predict::{PipelineSplit, Split};
use pplan::report::moe_modelzoo::{moe_cases, moe_rows, validate_moe_modelzoo};

#[test]
fn six_published_rows_five_predicted_one_explained() {
    let rows = moe_rows().unwrap();
    assert_eq!(rows.len(), 6);
    let (cases, skipped) = moe_cases().unwrap();
    let ids: Vec<&str> = cases.iter().map(|c| c.row.id.as_str()).collect();
    assert_eq!(ids, ["m286", "m287", "m288", "m289", "m290"]);
    let skipped: Vec<(&str, &str)> = skipped
        .iter()
        .map(|(r, why)| (r.id.as_str(), why.as_str()))
        .collect();
    assert_eq!(skipped.len(), 1);
    assert!(skipped[0].0 == "m291" && skipped[0].1.contains("linear-attention"));
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
        // Every row's published command forces balanced routing; the Megatron-FSDP row's
        // turns off the fused gradient accumulation.
        assert_eq!(r.stack.moe_imbalance, 1.0, "{}", row.id);
        assert_eq!(
            r.stack.grad_accumulation_fusion,
            row.id != "m288",
            "{}",
            row.id
        );
        // Megatron-LM overlaps the interleaved schedule's sends by default.
        assert_eq!(r.stack.blocking_p2p, row.vp == 1, "{}", row.id);
        assert_eq!(r.model.total_params(), c.model.total_params());
        // The benchmarking config counts the embedding and the loss as pipeline layers.
        assert_eq!(
            r.partition,
            Split::Megatron(PipelineSplit::EMBEDDING_AND_LOSS),
            "{}",
            row.id
        );
    }
    // m289: PP 32 x VPP 3 = 96 stages for 94 layers, the first embedding only, the last
    // the loss only.
    let m289 = pplan::plan::predict::predict(&cases[3].request(&hw)).unwrap();
    assert_eq!(m289.stage_layers.len(), 96);
    assert_eq!((m289.stage_layers[0], m289.stage_layers[95]), (0, 0));
    assert_eq!(m289.split, "megatron");
    // `norm, act` is Megatron-Core's `--recompute-modules layernorm moe_act`.
    assert_eq!(cases[0].recompute(), Recompute::NormAct);
    assert_eq!(cases[2].recompute(), Recompute::Full);
    assert_eq!(cases[4].recompute(), Recompute::None);
}

#[test]
fn the_comparison_is_the_same_flop_count_over_the_predicted_step() {
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let report = validate_moe_modelzoo(&hw).unwrap();
    assert_eq!(report.rows.len(), 5);
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

#[test]
fn dropless_routing_costs_what_modelzoo_measured_at_an_imbalance_of_1_48() {
    // The long-context table (`report::moe_long_context`) gives each run with forced
    // balanced routing and dropless. What real (dropless) routing costs against forced
    // balance is, in pplan, the step at `--moe-imbalance r` over the step at 1. One r, 1.48,
    // gives all four measured ratios (24, 21, 15 and 9 %) within 0.4 per cent: the model's
    // split of the step between the experts and the sequence-length-bound attention scales
    // as the runs did. (The default stays 1.25: DeepSeek-V3's balanced routing is within
    // 10 % of its report with it; docs/validation.md.)
    use pplan::inputs::Model;
    use pplan::plan::predict::predict;
    use pplan::report::moe_long_context::{
        long_context_request, LongContextRow, DROPLESS_IMBALANCE, LONG_CONTEXT_TABLE,
    };
    assert_eq!(DROPLESS_IMBALANCE, 1.48);
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let mut model = Model::preset("qwen3-235b-a22b").unwrap();
    for (seq, cp, forced, dropless) in LONG_CONTEXT_TABLE {
        model.seq_len = seq;
        let step = |forced: bool| {
            let row = LongContextRow {
                seq_len: seq,
                cp,
                forced,
                tflops_per_gpu: 0.0,
            };
            let req = long_context_request(&model, &hw, &row);
            assert_eq!(req.stack.moe_imbalance, if forced { 1.0 } else { 1.48 });
            let p = predict(&req).unwrap();
            assert!(p.fits, "{seq}: {} GB", p.peak_memory_bytes as f64 / 1e9);
            p.step_time_s
        };
        let ratio = step(false) / step(true);
        let measured = forced / dropless;
        assert!(
            (ratio / measured - 1.0).abs() < 0.01,
            "sequence {seq}: {ratio} against {measured}"
        );
    }
}

#[test]
fn megatrons_flop_count_is_the_one_the_modelzoo_reports() {
    // Every Qwen3-235B-A22B row: published TFLOP/s x step x 256 GPUs over the 2048 x 4096
    // tokens of a step is Megatron-LM's causal count per token within 1 %; counting the
    // attention core whole would be 13 % more.
    use pplan::report::moe_long_context::megatron_flops_per_token;
    let (cases, _) = moe_cases().unwrap();
    for c in &cases {
        let r = &c.row;
        let per_token = r.tflops_per_gpu * 1e12 * r.iteration_time_s * r.gpus_total as f64
            / (r.global_batch * r.seq_len) as f64;
        let counted = megatron_flops_per_token(&c.model);
        assert!(
            (per_token / counted - 1.0).abs() < 0.01,
            "{}: {per_token} against {counted}",
            r.id
        );
    }
    // By hand for Qwen3-235B-A22B at 4096 tokens: per layer h (q + 2 g d_h) = 4096 x 9216,
    // core q s = 8192 x 4096, output q h = 8192 x 4096, experts 8 x 3 x 4096 x 1536; 94
    // layers, logits 4096 x 151936; x 6.
    let m = &cases[0].model;
    let layer = 4096.0 * 9216.0 + 8192.0 * 4096.0 * 2.0 + 8.0 * 3.0 * 4096.0 * 1536.0;
    let by_hand = 6.0 * (94.0 * layer + 4096.0 * 151936.0);
    assert!((megatron_flops_per_token(m) / by_hand - 1.0).abs() < 1e-12);
}

#[test]
fn the_long_context_runs_held_out() {
    // The forced-balance runs of the long-context table (TP 4, PP 8, VPP 4, EP 8, CP 1-8,
    // 16k-128k tokens), none fitted to, within 5 % on average and 7 % each; the dropless
    // ones (imbalance 1.48 from the ratios above) too. docs/validation.md shows the table.
    use pplan::report::moe_long_context::{long_context_markdown, validate_long_context};
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let rows = validate_long_context(&hw).unwrap();
    assert_eq!(rows.len(), 8);
    for c in &rows {
        assert!(c.prediction.fits, "{}", c.row.seq_len);
        assert_eq!(c.prediction.cp, c.row.cp);
        assert!(
            c.error.abs() < 0.07,
            "{} forced {}: {}",
            c.row.seq_len,
            c.row.forced,
            c.error
        );
        // The same FLOPs per step on both sides.
        let flops = c.row.tflops_per_gpu * c.published_step_s;
        assert!(
            (c.predicted_tflops_per_gpu * c.prediction.step_time_s / flops - 1.0).abs() < 1e-12
        );
    }
    for forced in [true, false] {
        let e: Vec<f64> = rows
            .iter()
            .filter(|c| c.row.forced == forced)
            .map(|c| c.error.abs())
            .collect();
        assert!(
            e.iter().sum::<f64>() / (e.len() as f64) < 0.05,
            "forced {forced}"
        );
    }
    assert!(long_context_markdown(&rows).contains("held out"));
}
