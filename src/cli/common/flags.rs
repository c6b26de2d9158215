//! Flag values shared by the subcommands: the library's flag types, output formats, time
//! units, and `--tokens` / `--gpu-hour-price` (run cost).

use super::error::{input, CliError};
use clap::ValueEnum;

pub(crate) use pplan::plan::flags::{
    count, join_negative_values, positive, zero_stage, OnOff, PredictFlags, SplitRuleFlags,
    StackFlags,
};

/// Nanoseconds per unit of the unit-cost flags: `--forward 1` is 1 ms in traces and charts,
/// unless the chunk count V does not divide 10^6; then a unit is V/gcd(V, 10^6) ms so that
/// every chunk's share is a whole number of nanoseconds and closed forms come out exact.
pub(crate) fn ns_per_unit(chunks: u32) -> u64 {
    const MS: u64 = 1_000_000;
    let (mut a, mut b) = (MS, chunks.max(1) as u64);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    MS * (chunks.max(1) as u64 / a)
}

#[derive(Clone, Copy, ValueEnum, Default)]
pub(crate) enum Format {
    #[default]
    Table,
    Json,
}

/// Value parser of a time or size flag that must be a finite number >= 0.
pub(crate) fn non_negative_f64(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("must be a finite number >= 0, got {text}")),
    }
}

/// Convert a unit-cost flag to integer nanoseconds, rejecting what is not a finite,
/// non-negative time below a billion units.
pub(crate) fn units_to_ns(flag: &str, value: f64, ns_per_unit: u64) -> Result<u64, CliError> {
    if !value.is_finite() || !(0.0..=1e9).contains(&value) {
        return input(format!(
            "{flag} {value}: expected a finite time between 0 and 1e9 units"
        ));
    }
    Ok((value * ns_per_unit as f64).round() as u64)
}

/// `--tokens` and `--gpu-hour-price` (predict and search): the whole run's days, GPU-hours and
/// cost from the predicted step time (`plan::run_cost`).
#[derive(clap::Args)]
pub(crate) struct RunArgs {
    /// Tokens to train on (15000000000000, 15e12 or 15T; K, M, B, T suffixes): adds the run's
    /// steps, days and GPU-hours to the output.
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) tokens: Option<String>,
    /// Price of one GPU-hour in US dollars (with --tokens): adds the run's cost.
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) gpu_hour_price: Option<String>,
}

impl RunArgs {
    /// The token count and price asked for, checked; `None` without `--tokens`.
    pub(crate) fn parse(&self) -> Result<Option<(u64, Option<f64>)>, CliError> {
        let price = match &self.gpu_hour_price {
            None => None,
            Some(s) => match s.trim().parse::<f64>() {
                Ok(p) if p.is_finite() && p >= 0.0 => Some(p),
                _ => {
                    return input(format!(
                    "--gpu-hour-price '{s}': valid: a price in US dollars, 0 or more (e.g. 2.50)"
                ))
                }
            },
        };
        match &self.tokens {
            None if price.is_some() => {
                input("--gpu-hour-price needs --tokens N (the run it prices)")
            }
            None => Ok(None),
            Some(t) => {
                let n = pplan::plan::run_cost::parse_token_count(t)
                    .map_err(|e| CliError::Input(format!("--tokens: {e}")))?;
                Ok(Some((n, price)))
            }
        }
    }
}
