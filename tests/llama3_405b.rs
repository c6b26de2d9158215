//! Meta's Llama 3 405B BF16 runs on H100 (Llama 3 paper, Table 4), held out from the H100
//! calibration (docs/validation.md): the two 8k-sequence rows within 10 %; the 128k row with
//! 16-way context parallelism is over-predicted by about a fifth, which the test pins so that a
//! change to the context-parallel model shows here.

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
        if r.cp == 1 {
            assert!(c.error.abs() < 0.10, "{} GPUs: {}", r.gpus, c.error);
        } else {
            assert!(c.error > 0.10 && c.error < 0.30, "cp {}: {}", r.cp, c.error);
        }
    }
}
