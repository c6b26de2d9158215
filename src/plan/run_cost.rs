//! A whole training run in the units a budget is written in: from a predicted step time, the
//! days, GPU-hours and (given a price) cost of training on a number of tokens.
//!
//! The run is whole optimizer steps: `ceil(tokens / tokens per step)` steps of the predicted
//! step time each, on every GPU of the job. No IO, no clock.

use serde::Serialize;

/// The run's length and cost; the JSON fields `predict` and `search` add with `--tokens`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunCost {
    /// Tokens asked for (`--tokens`).
    pub training_tokens: u64,
    /// Optimizer steps to see them: ceil(tokens / (global batch x sequence length)).
    pub training_steps: u64,
    /// Wall-clock days of those steps at the predicted step time.
    pub training_days: f64,
    /// GPUs x hours.
    pub gpu_hours: f64,
    /// GPU-hours x `--gpu-hour-price` (present only with a price).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
}

/// The run of `tokens` tokens at `tokens_per_step` tokens and `step_time_s` seconds per step
/// on `gpus` GPUs; `gpu_hour_price_usd` gives the cost.
pub fn run_cost(
    tokens: u64,
    tokens_per_step: u64,
    step_time_s: f64,
    gpus: u64,
    gpu_hour_price_usd: Option<f64>,
) -> RunCost {
    let training_steps = tokens.div_ceil(tokens_per_step.max(1));
    let seconds = training_steps as f64 * step_time_s;
    let gpu_hours = gpus as f64 * seconds / 3600.0;
    RunCost {
        training_tokens: tokens,
        training_steps,
        training_days: seconds / 86_400.0,
        gpu_hours,
        cost_usd: gpu_hour_price_usd.map(|p| gpu_hours * p),
    }
}

/// A token count: an integer (`15000000000000`), scientific notation (`15e12`, `1.5E13`) or a
/// suffix K, M, B (or G), T (thousand, million, billion, trillion; `15T`, `300B`, `2.5M`).
/// It must be a positive whole number of tokens of at most 2^63.
pub fn parse_token_count(s: &str) -> Result<u64, String> {
    let t = s.trim().replace('_', "");
    let expected =
        "a positive number of tokens: an integer, 15e12, or a suffix K, M, B, T (e.g. 15T, 300B)";
    let (num, scale) = match t.chars().last() {
        Some(c @ ('K' | 'k' | 'M' | 'm' | 'B' | 'b' | 'G' | 'g' | 'T' | 't')) => {
            let scale = match c.to_ascii_uppercase() {
                'K' => 1e3,
                'M' => 1e6,
                'B' | 'G' => 1e9,
                _ => 1e12,
            };
            (&t[..t.len() - 1], scale)
        }
        _ => (t.as_str(), 1.0),
    };
    if let (Ok(n), 1.0) = (num.parse::<u64>(), scale) {
        return if n > 0 {
            Ok(n)
        } else {
            Err(format!("'{s}' is not {expected}"))
        };
    }
    let x: f64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not {expected}"))?;
    let v = x * scale;
    if !v.is_finite() || !(1.0..=9.2e18).contains(&v) {
        return Err(format!("'{s}' is not {expected}"));
    }
    if (v - v.round()).abs() > 1e-6 * v.max(1.0) {
        return Err(format!("'{s}' is not a whole number of tokens"));
    }
    Ok(v.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_counts() {
        for (s, n) in [
            ("15000000000000", 15_000_000_000_000),
            ("15e12", 15_000_000_000_000),
            ("1.5E13", 15_000_000_000_000),
            ("15T", 15_000_000_000_000),
            ("300B", 300_000_000_000),
            ("2.5M", 2_500_000),
            ("1_000", 1000),
        ] {
            assert_eq!(parse_token_count(s), Ok(n), "{s}");
        }
        for s in ["0", "-5", "abc", "1.5", "1e30", "nan", "inf", "T", ""] {
            assert!(parse_token_count(s).is_err(), "{s}");
        }
    }

    #[test]
    fn a_run_is_whole_steps() {
        // 10 steps of 1000 tokens (the last one partly needed), 2 s each, 8 GPUs, $2/GPU-hour.
        let r = run_cost(9_500, 1_000, 2.0, 8, Some(2.0));
        assert_eq!(r.training_steps, 10);
        assert!((r.training_days - 20.0 / 86_400.0).abs() < 1e-15);
        assert!((r.gpu_hours - 8.0 * 20.0 / 3600.0).abs() < 1e-12);
        assert!((r.cost_usd.unwrap() - 2.0 * r.gpu_hours).abs() < 1e-12);
        assert_eq!(run_cost(1, 1, 1.0, 1, None).cost_usd, None);
    }
}
