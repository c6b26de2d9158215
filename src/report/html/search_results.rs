//! A search's results (`pplan search --format json`, docs/output.md) read back for the
//! report: each ranked configuration's layout, step time and memory, why it lost to the best
//! (its time and memory against the best's), and the constraints that rejected candidates.
//! Errors name the field. No IO.

use serde::Serialize;
use serde_json::Value;

/// A search file that is not `pplan search --format json` output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{origin}: {field}: {reason}")]
pub struct SearchFileError {
    pub origin: String,
    pub field: String,
    pub reason: String,
}

/// One ranked configuration and how it compares with the best.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Alternative {
    pub rank: u64,
    /// `t=4 p=64 d=6 cp=2 b=1 zb-h1 v=1 recompute none SP off ZeRO 1`.
    pub layout: String,
    pub step_time_s: f64,
    pub mfu: f64,
    pub peak_memory_gb: f64,
    pub headroom_gb: f64,
    /// Step time over the best's, minus 1 (0 for the best).
    pub slower: f64,
    /// Why it ranks below the best, in words (empty for the best).
    pub why: String,
}

/// A constraint and how many candidates it rejected.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Rejection {
    pub constraint: String,
    pub count: u64,
}

/// What the report shows of a search.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchSummary {
    pub evaluated: u64,
    pub feasible: u64,
    pub alternatives: Vec<Alternative>,
    pub rejected: Vec<Rejection>,
}

/// The alternatives shown at most.
pub const MAX_ALTERNATIVES: usize = 10;

/// Read `text` (from `origin`, for messages) as `pplan search --format json` output.
pub fn read_search(text: &str, origin: &str) -> Result<SearchSummary, SearchFileError> {
    let bad = |field: &str, reason: &str| SearchFileError {
        origin: origin.to_string(),
        field: field.to_string(),
        reason: reason.to_string(),
    };
    let v: Value = serde_json::from_str(text).map_err(|e| {
        bad(
            "(file)",
            &format!("not JSON ({e}); expected `pplan search --format json` output"),
        )
    })?;
    let u = |obj: &Value, key: &str, at: &str| {
        obj.get(key)
            .and_then(Value::as_u64)
            .ok_or_else(|| bad(&format!("{at}{key}"), "missing or not a whole number"))
    };
    let f = |obj: &Value, key: &str, at: &str| {
        obj.get(key)
            .and_then(Value::as_f64)
            .filter(|x| x.is_finite())
            .ok_or_else(|| bad(&format!("{at}{key}"), "missing or not a number"))
    };
    let s = |obj: &Value, key: &str, at: &str| {
        obj.get(key)
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| bad(&format!("{at}{key}"), "missing or not a string"))
    };
    let b = |obj: &Value, key: &str, at: &str| {
        obj.get(key)
            .and_then(Value::as_bool)
            .ok_or_else(|| bad(&format!("{at}{key}"), "missing or not true/false"))
    };
    let results = v
        .get("results")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("results", "missing or not a list"))?;
    let mut alternatives = Vec::new();
    let mut best: Option<(f64, f64)> = None;
    for (i, r) in results.iter().take(MAX_ALTERNATIVES).enumerate() {
        let at = format!("results[{i}].");
        let step = f(r, "step_time_s", &at)?;
        if step <= 0.0 {
            return Err(bad(&format!("{at}step_time_s"), "must be above 0"));
        }
        let peak = u(r, "peak_memory_bytes", &at)? as f64 / 1e9;
        let limit = u(r, "memory_limit_bytes", &at)? as f64 / 1e9;
        let (best_step, best_peak) = *best.get_or_insert((step, peak));
        let slower = step / best_step - 1.0;
        let cp = r.get("cp").and_then(Value::as_u64).unwrap_or(1);
        let layout = format!(
            "t={} p={} d={}{} b={} {} v={}, recompute {}, SP {}, ZeRO {}",
            u(r, "tp", &at)?,
            u(r, "pp", &at)?,
            u(r, "dp", &at)?,
            if cp > 1 {
                format!(" cp={cp}")
            } else {
                String::new()
            },
            u(r, "micro_batch", &at)?,
            s(r, "schedule", &at)?,
            u(r, "chunks", &at)?,
            s(r, "recompute", &at)?,
            if b(r, "sequence_parallel", &at)? {
                "on"
            } else {
                "off"
            },
            r.get("zero").and_then(Value::as_u64).unwrap_or(0),
        );
        let why = if i == 0 {
            String::new()
        } else {
            let mem = peak - best_peak;
            format!(
                "{:+.2}% step time ({:+.3} s); {}",
                slower * 100.0,
                step - best_step,
                if mem.abs() < 0.05 {
                    "same peak memory".to_string()
                } else {
                    format!(
                        "{:.1} GB {} memory",
                        mem.abs(),
                        if mem > 0.0 { "more" } else { "less" }
                    )
                }
            )
        };
        alternatives.push(Alternative {
            rank: r
                .get("rank")
                .and_then(Value::as_u64)
                .unwrap_or(i as u64 + 1),
            layout,
            step_time_s: step,
            mfu: f(r, "mfu", &at)?,
            peak_memory_gb: peak,
            headroom_gb: limit - peak,
            slower,
            why,
        });
    }
    let mut rejected = Vec::new();
    if let Some(list) = v.get("rejected").and_then(Value::as_array) {
        for (i, r) in list.iter().enumerate() {
            let at = format!("rejected[{i}].");
            rejected.push(Rejection {
                constraint: s(r, "constraint", &at)?,
                count: u(r, "count", &at)?,
            });
        }
    }
    Ok(SearchSummary {
        evaluated: u(&v, "evaluated", "")?,
        feasible: u(&v, "feasible", "")?,
        alternatives,
        rejected,
    })
}
