//! What the user sees of a simulation or a measurement: Gantt charts, Chrome traces, the
//! predicted-vs-measured comparison behind `pplan validate`, and the comparison with
//! published runs.
//!
//! May import every other part of the library; nothing imports it but the CLI.

pub mod bridge_blackwell;
pub mod bridge_h100;
pub mod compare;
pub mod gantt;
pub mod llama3_405b;
pub mod llm_foundry;
pub mod measured;
pub mod moe_long_context;
pub mod moe_modelzoo;
pub mod nemo;
pub mod nemo_long_context;
pub mod torchtitan;
pub mod trace;
pub mod validation;

/// The mean of the absolute values of `errors` (0 when there are none): a validation table's
/// mean absolute error.
pub(crate) fn mean_abs(errors: impl IntoIterator<Item = f64>) -> f64 {
    let (sum, n) = errors
        .into_iter()
        .fold((0.0, 0usize), |(s, n), e| (s + e.abs(), n + 1));
    if n == 0 {
        0.0
    } else {
        sum / n as f64
    }
}

/// `errors` (fractions) as a table's summary: "-11.3%, -8.2% (MAE 9.7%)".
pub(crate) fn error_list(errors: &[f64]) -> String {
    let list: Vec<String> = errors
        .iter()
        .map(|x| format!("{:+.1}%", 100.0 * x))
        .collect();
    format!(
        "{} (MAE {:.1}%)",
        list.join(", "),
        100.0 * mean_abs(errors.iter().copied())
    )
}

/// A prediction's peak memory in GB for a table cell, marked when it does not fit.
pub(crate) fn memory_cell(p: &crate::plan::predict::Prediction) -> String {
    format!(
        "{:.1}{}",
        p.peak_memory_bytes as f64 / 1e9,
        if p.fits { "" } else { " (does not fit)" }
    )
}

/// The item whose `error` is largest in absolute value (the first of equals), if any.
pub(crate) fn worst_by<T>(
    items: impl IntoIterator<Item = T>,
    error: impl Fn(&T) -> f64,
) -> Option<T> {
    items.into_iter().fold(None, |w, c| match w {
        Some(x) if error(&x).abs() >= error(&c).abs() => Some(x),
        _ => Some(c),
    })
}
