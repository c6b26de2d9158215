//! Meta's Llama 3 405B BF16 runs on H100 (Llama 3 paper, Table 4), held out from the H100
//! calibration (docs/validation.md), on the paper's pipeline layout (Sec. 3.3.2: 16 stages of 8
//! one-layer chunks, the first chunk only the embedding, the last only the loss). The two
//! 8k-sequence rows are over-predicted by 11-12 % (pinned below 13 %: pplan's pipeline has
//! the paper's bubble, (p - 1)/(v m), and no source says where Meta's other tenth went); the
//! 128k row with 16-way context parallelism by about two fifths, pinned so that a change to the
//! context-parallel model shows here. With the attention's FLOPs counted causally (a
//! convention the paper does not state) all three are within 8 %.

use pplan::inputs::hardware::Hardware;
use pplan::report::llama3_405b::{validate_llama3_405b, LLAMA3_405B_ROWS};

#[test]
fn held_out_h100_bf16_rows() {
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let rows = validate_llama3_405b(&hw).unwrap();
    assert_eq!(rows.len(), LLAMA3_405B_ROWS.len());
    for c in &rows {
        let r = &c.row;
        assert_eq!(r.gpus, r.tp * r.cp * r.pp * r.dp);
        // 16M tokens a step in every row of the table.
        assert_eq!(r.seq_len * r.batch_per_dp * r.dp, 16 * 1024 * 1024);
        assert_eq!(c.prediction.global_batch, r.batch_per_dp * r.dp);
        let layers = &c.prediction.stage_layers;
        assert_eq!(layers.len(), 128);
        assert_eq!((layers[0], layers[127]), (0, 0));
        assert!(layers[1..127].iter().all(|&l| l == 1));
        if r.cp == 1 {
            assert!(c.error.abs() < 0.13, "{} GPUs: {}", r.gpus, c.error);
            // The pipeline's bubble is the paper's (PP - 1) / (V M) plus the two sends a
            // chunk boundary costs, within a few points.
            let m = r.batch_per_dp as f64;
            let formula = (r.pp as f64 - 1.0) / (8.0 * m);
            let bubble = c.prediction.bubble_fraction;
            assert!(
                bubble > formula && bubble < formula + 0.03,
                "{bubble} vs {formula}"
            );
        } else {
            assert!(c.error > 0.30 && c.error < 0.45, "cp {}: {}", r.cp, c.error);
        }
        // The same step's FLOP/s with the attention core counted causally, by hand: per
        // token, 126 layers of linear GEMMs (QKV 16384 x (16384 + 2 x 1024), output 16384^2,
        // SwiGLU MLP 3 x 16384 x 53248: 2 FLOPs a multiply-add) and of attention `4 s h`
        // (scores and values, all keys), plus the logits `2 h V`; causal keeps half the
        // attention.
        let (h, s, layers, vocab) = (16384.0, r.seq_len as f64, 126.0, 128256.0);
        let linear = 2.0 * (h * (h + 2048.0) + h * h + 3.0 * h * 53248.0);
        let attention = 4.0 * s * h;
        let logits = 2.0 * h * vocab;
        let full = layers * (linear + attention) + logits;
        let causal = layers * (linear + attention / 2.0) + logits;
        let ratio = c.causal_tflops_per_gpu / c.prediction.model_tflops_per_gpu;
        assert!((ratio / (causal / full) - 1.0).abs() < 1e-9, "{ratio}");
        // Counted that way, every row is within 7 % of the paper (docs/validation.md).
        let causal_error = c.causal_tflops_per_gpu / r.tflops_per_gpu - 1.0;
        assert!(causal_error.abs() < 0.08, "{} GPUs: {causal_error}", r.gpus);
    }
}
