//! The cross-entropy's kernels (`--cross-entropy-loss-fusion`, `--cross-entropy-fusion-impl`):
//! the output layer's HBM traffic per logit against a hand count.

use pplan::cost::{CostModel, CrossEntropyFusion, Layout, Stack};
use pplan::inputs::hardware::Hardware;
use pplan::inputs::model::Model;

/// Hand count: Llama 3 8B (vocabulary 128,256, sequence 8,192) at t = 2, micro-batch 1:
/// 8,192 x 64,128 = 525,336,576 logits a rank. The output layer's memory-bound time
/// differs from the unfused form's by exactly its 38 and 14 bytes per logit at the unfused
/// kernels' measured bandwidth less the fused form's b and b' at HBM's memory-bound one; the
/// GEMMs do not change.
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
        let (hbm, ce) = (hw.hbm_bytes_per_s(), hw.cross_entropy_hbm_bytes_per_s());
        let saved = |unfused: f64, fused: f64| (unfused / ce - fused / hbm) * logits;
        let rel = |a: f64, b: f64| (a / b - 1.0).abs() < 1e-9;
        assert!(rel(
            off.forward.memory_s - on.forward.memory_s,
            saved(38.0, fwd)
        ));
        assert!(rel(
            off.backward_input.memory_s - on.backward_input.memory_s,
            saved(14.0, bwd)
        ));
        assert_eq!(on.forward.gemm_s, off.forward.gemm_s);
        assert_eq!(c.as_str().parse::<CrossEntropyFusion>(), Ok(c));
    }
    assert!("fused"
        .parse::<CrossEntropyFusion>()
        .unwrap_err()
        .contains("valid: off, native, te"));
}
