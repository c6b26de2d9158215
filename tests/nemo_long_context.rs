//! Held out: NeMo's long-sequence runs of Llama 2 7B in FP8 on H100 (4k-1,024k tokens, CP
//! 1-32; `report::nemo_long_context`, docs/validation.md). Nothing is fitted to them; these
//! tests check the transcription, that each run is predicted with its own layout, and what
//! the table says about memory.

use pplan::inputs::hardware::Hardware;
use pplan::report::nemo_long_context::{
    long_sequence_markdown, long_sequence_rows, validate_long_sequence,
};

fn h100() -> Hardware {
    Hardware::bundled("h100-80gb").unwrap()
}

#[test]
fn the_table_adds_up() {
    let rows = long_sequence_rows();
    assert_eq!(rows.len(), 9);
    for r in &rows {
        let k = r.seq_len / 1024;
        // The page's "# of GPUs" (t x p x d x cp) equals the sequence in k tokens.
        assert_eq!(r.gpus, k, "{k}k");
        // Every step is 4 Mi tokens (1,024 sequences of 4k).
        assert_eq!(r.global_batch * r.seq_len, 4 << 20, "{k}k");
        // Whole micro-batches for every data-parallel rank.
        assert_eq!(r.global_batch % r.dp, 0, "{k}k");
    }
}

#[test]
fn every_run_is_predicted_with_its_layout_and_fits() {
    let hw = h100();
    let got = validate_long_sequence(&hw).unwrap();
    assert_eq!(got.len(), 9);
    for c in &got {
        let p = &c.prediction;
        let r = &c.row;
        // The run's throughput in NeMo's count: predicted model TFLOP/s over published.
        assert!(
            (c.error - (p.model_tflops_per_gpu / r.tflops_per_gpu - 1.0)).abs() < 1e-12,
            "{}k",
            r.seq_len / 1024
        );
        // Every run ran on 80 GB; pplan agrees without recomputation.
        assert!(
            p.fits,
            "{}k: {} bytes",
            r.seq_len / 1024,
            p.peak_memory_bytes
        );
        // Tokens per second per GPU and model FLOPs tie out with the step time.
        let tokens = (r.global_batch * r.seq_len) as f64;
        let per_gpu = tokens / p.step_time_s / r.gpus as f64;
        assert!((per_gpu / p.tokens_per_s_per_gpu - 1.0).abs() < 1e-9);
    }
    // The 4k run has the calibration rows' layout family (Llama 2 7B, t = 1, no context
    // parallelism; r085 is 8 GPUs of it): within the 5 %.
    assert!(got[0].error.abs() < 0.05, "4k: {:+.3}", got[0].error);
    // The context-parallel split divides the activations: 1,024k tokens over 32 x 8 ranks
    // need less memory a GPU than 4k tokens on one.
    assert!(got[8].prediction.peak_memory_bytes < got[0].prediction.peak_memory_bytes);
}

#[test]
fn the_report_is_deterministic_and_names_the_worst_run() {
    let hw = h100();
    let a = long_sequence_markdown(&validate_long_sequence(&hw).unwrap());
    let b = long_sequence_markdown(&validate_long_sequence(&hw).unwrap());
    assert_eq!(a, b);
    assert_eq!(
        a.lines()
            .filter(|l| l.starts_with("| ") && l.contains("k |"))
            .count(),
        9
    );
    assert!(
        a.contains("9 runs (held out), attention counted whole: MAE"),
        "{a}"
    );
    assert!(
        a.contains("9 runs (held out), attention counted causally: MAE"),
        "{a}"
    );
}
