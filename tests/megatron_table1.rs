//! Acceptance: `pplan predict` on `a100-80gb` reproduces Narayanan et al. 2021 Table 1.
//! For every row, with the best micro-batch size and chunk count pplan finds, the predicted
//! hardware TFLOP/s per GPU is within 6% of the published value, and the mean absolute error
//! over the ten rows is at most 3%.

use pplan::inputs::hardware::Hardware;
use pplan::report::validation::validate_megatron;

#[test]
fn megatron_2021_table1_within_6_percent_mae_3_percent() {
    let hw = Hardware::bundled("a100-80gb").unwrap();
    let rows = validate_megatron(&hw).unwrap();
    assert_eq!(rows.len(), 10);
    let mut report = String::new();
    for c in &rows {
        report += &format!(
            "{} {}: published {:.0}, predicted {:.1} ({:+.1}%) b={} v={}\n",
            c.row.id,
            c.model,
            c.row.tflops_per_gpu,
            c.prediction.tflops_per_gpu,
            100.0 * c.error,
            c.prediction.micro_batch,
            c.prediction.chunks
        );
    }
    let mae = rows.iter().map(|c| c.error.abs()).sum::<f64>() / rows.len() as f64;
    for c in &rows {
        assert!(
            c.error.abs() <= 0.06,
            "{} off by more than 6%:\n{report}",
            c.row.id
        );
        assert!(
            c.prediction.fits,
            "{}: best configuration must fit",
            c.row.id
        );
    }
    assert!(
        mae <= 0.03,
        "mean absolute error {:.2}% > 3%:\n{report}",
        100.0 * mae
    );
}
