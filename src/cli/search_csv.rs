//! `pplan search --format csv`: one row a ranked result, the JSON result fields as columns.
//!
//! The header names each column after its JSON field, with the unit in brackets where it has
//! one (`step_s [s]`), so that a spreadsheet reads it and a script can map it back to the JSON.
//! Quoting follows RFC 4180: a field holding a comma, a quote or a line break is quoted, quotes
//! doubled; rows end with CRLF as the RFC says.

use pplan::plan::run_cost::RunCost;
use pplan::plan::search::{Ranked, SearchOutcome};

/// One column: its header (JSON field, then unit) and how to read it off a result.
struct Column {
    header: &'static str,
    value: fn(&Ranked) -> String,
}

fn gb(bytes: f64) -> String {
    format!("{:.3}", bytes / 1e9)
}

/// The columns, in the search table's order, then the throughput and memory fields.
const COLUMNS: &[Column] = &[
    Column {
        header: "rank",
        value: |r| r.rank.to_string(),
    },
    Column {
        header: "pp",
        value: |r| r.prediction.pp.to_string(),
    },
    Column {
        header: "tp",
        value: |r| r.prediction.tp.to_string(),
    },
    Column {
        header: "dp",
        value: |r| r.prediction.dp.to_string(),
    },
    Column {
        header: "cp",
        value: |r| r.prediction.cp.to_string(),
    },
    Column {
        header: "ep",
        value: |r| r.prediction.ep.to_string(),
    },
    Column {
        header: "etp",
        value: |r| r.prediction.etp.to_string(),
    },
    Column {
        header: "micro_batch [sequences]",
        value: |r| r.prediction.micro_batch.to_string(),
    },
    Column {
        header: "microbatches",
        value: |r| r.prediction.microbatches.to_string(),
    },
    Column {
        header: "schedule",
        value: |r| r.prediction.schedule.clone(),
    },
    Column {
        header: "chunks",
        value: |r| r.prediction.chunks.to_string(),
    },
    Column {
        header: "recompute",
        value: |r| r.prediction.recompute.clone(),
    },
    Column {
        header: "sequence_parallel",
        value: |r| r.prediction.sequence_parallel.to_string(),
    },
    Column {
        header: "zero",
        value: |r| r.prediction.zero.to_string(),
    },
    Column {
        header: "dp_replicate",
        value: |r| r.prediction.dp_replicate.to_string(),
    },
    Column {
        header: "split",
        value: |r| r.prediction.split.clone(),
    },
    Column {
        header: "stage_layers",
        value: |r| {
            let l: Vec<String> = r
                .prediction
                .stage_layers
                .iter()
                .map(|n| n.to_string())
                .collect();
            l.join(",")
        },
    },
    Column {
        header: "precision",
        value: |r| r.prediction.precision.clone(),
    },
    Column {
        header: "step_time_s [s]",
        value: |r| r.prediction.step_time_s.to_string(),
    },
    Column {
        header: "tflops_per_gpu [TFLOP/s]",
        value: |r| r.prediction.tflops_per_gpu.to_string(),
    },
    Column {
        header: "model_tflops_per_gpu [TFLOP/s]",
        value: |r| r.prediction.model_tflops_per_gpu.to_string(),
    },
    Column {
        header: "mfu [fraction]",
        value: |r| r.prediction.mfu.to_string(),
    },
    Column {
        header: "mfu_precision_peak [fraction]",
        value: |r| r.prediction.mfu_precision_peak.to_string(),
    },
    Column {
        header: "bubble_fraction [fraction]",
        value: |r| r.prediction.bubble_fraction.to_string(),
    },
    Column {
        header: "tokens_per_s [tokens/s]",
        value: |r| r.prediction.tokens_per_s.to_string(),
    },
    Column {
        header: "tokens_per_s_per_gpu [tokens/s]",
        value: |r| r.prediction.tokens_per_s_per_gpu.to_string(),
    },
    Column {
        header: "peak_memory_bytes [B]",
        value: |r| r.prediction.peak_memory_bytes.to_string(),
    },
    Column {
        header: "memory_limit_bytes [B]",
        value: |r| r.prediction.memory_limit_bytes.to_string(),
    },
    Column {
        header: "headroom_gb [GB]",
        value: |r| {
            gb(r.prediction.memory_limit_bytes as f64 - r.prediction.peak_memory_bytes as f64)
        },
    },
    Column {
        header: "fits",
        value: |r| r.prediction.fits.to_string(),
    },
    Column {
        header: "lower_bound_s [s]",
        value: |r| r.lower_bound_s.to_string(),
    },
];

/// RFC 4180: quote a field that holds a comma, a quote, CR or LF; double its quotes.
pub(crate) fn quote(field: &str) -> String {
    if field.contains([',', '"', '\r', '\n']) {
        format!("\"{}\"", field.replace('"', "\"\""))
    } else {
        field.to_string()
    }
}

/// The whole CSV text: the header, then a row per ranked result; with `--tokens` (`runs`, in
/// result order) the run's columns after the others, as the JSON adds its fields.
pub(crate) fn to_csv(o: &SearchOutcome, runs: &[RunCost]) -> String {
    let mut header: Vec<String> = COLUMNS.iter().map(|c| quote(c.header)).collect();
    let priced = runs.iter().any(|r| r.cost_usd.is_some());
    if !runs.is_empty() {
        header.extend(
            [
                "training_tokens [tokens]",
                "training_steps",
                "training_days [days]",
                "gpu_hours [GPU-hours]",
            ]
            .map(String::from),
        );
    }
    if priced {
        header.push("cost_usd [USD]".into());
    }
    let mut out = header.join(",");
    out.push_str("\r\n");
    for (i, r) in o.results.iter().enumerate() {
        let mut row: Vec<String> = COLUMNS.iter().map(|c| quote(&(c.value)(r))).collect();
        if let Some(run) = runs.get(i) {
            row.push(run.training_tokens.to_string());
            row.push(run.training_steps.to_string());
            row.push(run.training_days.to_string());
            row.push(run.gpu_hours.to_string());
            if priced {
                row.push(run.cost_usd.map(|c| c.to_string()).unwrap_or_default());
            }
        }
        out.push_str(&row.join(","));
        out.push_str("\r\n");
    }
    out
}
