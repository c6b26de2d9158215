//! Meta's Llama 3 405B BF16 runs on H100 (Llama 3 paper, Table 4), held out from the H100
//! calibration (docs/validation.md), on the paper's pipeline layout (Sec. 3.3.2: 16 stages of 8
//! one-layer chunks, the first chunk only the embedding, the last only the loss). The two
//! 8k-sequence rows are over-predicted by about 10 % (pinned below 12 %: pplan's pipeline has
//! the paper's bubble, (p - 1)/(v m), and no source says where Meta's other tenth went); the
//! 128k row with 16-way context parallelism by about two fifths, pinned so that a change to the
//! context-parallel model shows here.

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
            assert!(c.error.abs() < 0.12, "{} GPUs: {}", r.gpus, c.error);
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
    }
}
