//! The cross-entropy's kernels (`--cross-entropy-loss-fusion`, `--cross-entropy-fusion-impl`):
//! the output layer's HBM traffic per logit against a hand count.

use pplan::cost::{CostModel, CrossEntropyFusion, Layout, Stack};
use pplan::inputs::hardware::Hardware;
use pplan::inputs::model::Model;

/// Hand count: Llama 3 8B (vocabulary 128,256, sequence 8,192) at t = 2, micro-batch 1:
/// 8,192 x 64,128 = 525,336,576 logits a rank. The output layer's memory-bound time
/// differs from the unfused form's by exactly (38 - b) and (14 - b') bytes per logit
/// over HBM's bandwidth; the GEMMs do not change.
#[test]
fn fused_cross_entropy_moves_its_bytes_per_logit() {
    let m = Model::preset("llama3-8b").unwrap();
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let logits = 8192.0 * 64128.0;
    assert_eq!(m.seq_len as f64 * (m.vocab_size / 2) as f64, logits);
    let layer = |c: CrossEntropyFusion| {
        CostModel {
            model: &m,
            hw: &hw,
            layout: Layout::tensor_parallel(2),
            stack: Stack {
                cross_entropy_fusion: c,
                ..Stack::megatron_core()
            },
        }
        .output_layer()
    };
    let off = layer(CrossEntropyFusion::Off);
    for (c, fwd, bwd) in [
        (CrossEntropyFusion::Native, 22.0, 14.0),
        (CrossEntropyFusion::Te, 6.0, 4.0),
    ] {
        let on = layer(c);
        let saved = |a: f64, b: f64| (a - b) * hw.hbm_bytes_per_s() / logits;
        assert!((saved(off.forward.memory_s, on.forward.memory_s) - (38.0 - fwd)).abs() < 1e-6);
        assert!(
            (saved(off.backward_input.memory_s, on.backward_input.memory_s) - (14.0 - bwd)).abs()
                < 1e-6
        );
        assert_eq!(on.forward.gemm_s, off.forward.gemm_s);
        assert_eq!(c.as_str().parse::<CrossEntropyFusion>(), Ok(c));
    }
    assert!("fused"
        .parse::<CrossEntropyFusion>()
        .unwrap_err()
        .contains("valid: off, native, te"));
}
