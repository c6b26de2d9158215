//! `pplan validate --runs`: every row predicted as `pplan predict` would with its flags,
//! put beside its measured figure; mean absolute errors per group and overall, the worst
//! rows, the runs predicted not to fit; as a Markdown report or one JSON object.

use super::file::{Entry, Row, RunsFile};
use super::metric::Metric;
use super::predict::{prepare, Prepared, RowPrediction};
use rayon::prelude::*;
use serde::Serialize;
use std::fmt::Write as _;

/// How rows are grouped for the per-group errors (`--group-by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GroupBy {
    /// The runs file (its name without `.json`): one published source a file.
    #[default]
    Source,
    /// The row's hardware profile.
    Hardware,
    /// The row's model.
    Model,
    /// Dense or mixture-of-experts.
    Kind,
}

impl GroupBy {
    pub const NAMES: [&'static str; 4] = ["source", "hardware", "model", "kind"];
    pub fn as_str(self) -> &'static str {
        match self {
            GroupBy::Source => "source",
            GroupBy::Hardware => "hardware",
            GroupBy::Model => "model",
            GroupBy::Kind => "kind",
        }
    }
}

impl std::str::FromStr for GroupBy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "source" => Ok(GroupBy::Source),
            "hardware" => Ok(GroupBy::Hardware),
            "model" => Ok(GroupBy::Model),
            "kind" => Ok(GroupBy::Kind),
            other => Err(format!(
                "unknown grouping '{other}' (valid: {})",
                GroupBy::NAMES.join(", ")
            )),
        }
    }
}

/// One row of one file, prepared or not.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The file's group (its name without `.json`) and the file as named.
    pub source: String,
    pub file: String,
    pub id: String,
    /// The row as read, when it could be.
    pub row: Option<Row>,
    /// The row ready to predict, or why it cannot be.
    pub prepared: Result<Box<Prepared>, String>,
}

/// Read every row of `files`, in order, and prepare each (models, profiles and flags).
/// Rows are prepared in parallel; the order is the files' and the rows'.
pub fn load_rows(files: &[RunsFile]) -> Vec<Loaded> {
    let todo: Vec<(&RunsFile, &Entry)> = files
        .iter()
        .flat_map(|f| f.entries.iter().map(move |e| (f, e)))
        .collect();
    todo.par_iter()
        .map(|(f, e)| {
            let base = std::path::Path::new(&f.origin)
                .parent()
                .map(|p| p.to_path_buf())
                .unwrap_or_default();
            Loaded {
                source: f.group.clone(),
                file: f.origin.clone(),
                id: e.id().to_string(),
                row: match e {
                    Entry::Ok(row) => Some((**row).clone()),
                    Entry::Bad { .. } => None,
                },
                prepared: match e {
                    Entry::Ok(row) => prepare(row, &base).map(Box::new),
                    Entry::Bad { error, .. } => Err(error.clone()),
                },
            }
        })
        .collect()
}

/// A row's result.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub source: String,
    pub file: String,
    pub id: String,
    pub model: String,
    pub hardware: String,
    pub gpus: u64,
    pub moe: Option<bool>,
    /// The metric and the measured value (absent for a row that could not be read).
    pub measured: Option<(Metric, f64)>,
    pub measured_peak_memory_gb: Option<f64>,
    pub exclude: Option<String>,
    pub outcome: Result<RowPrediction, String>,
}

impl RunResult {
    /// Where the row publishes its peak memory and was predicted: the published peak (GB) and
    /// pplan's signed error on it (excluded rows too, as their tables show them).
    pub fn memory_error(&self) -> Option<(f64, f64)> {
        let m = self.measured_peak_memory_gb?;
        let p = self.outcome.as_ref().ok()?.prediction.peak_memory_bytes as f64 / 1e9;
        Some((m, p / m - 1.0))
    }

    /// The signed error, when predicted and not excluded.
    pub fn counted_error(&self) -> Option<f64> {
        match (&self.outcome, &self.exclude) {
            (Ok(p), None) => Some(p.error),
            _ => None,
        }
    }

    /// The group this row falls in under `by`.
    pub fn group(&self, by: GroupBy) -> String {
        match by {
            GroupBy::Source => self.source.clone(),
            GroupBy::Hardware => self.hardware.clone(),
            GroupBy::Model => self.model.clone(),
            GroupBy::Kind => match self.moe {
                Some(true) => "moe".into(),
                Some(false) => "dense".into(),
                None => "unknown".into(),
            },
        }
    }

    /// A problem that makes the whole command fail: a row that could not be read or
    /// predicted and is not excluded.
    pub fn problem(&self) -> Option<&str> {
        match (&self.outcome, &self.exclude) {
            (Err(e), None) => Some(e),
            _ => None,
        }
    }
}

/// Predict every loaded row on its own profile (in parallel; results in row order).
pub fn predict_rows(rows: &[Loaded]) -> Vec<RunResult> {
    rows.par_iter()
        .map(|l| {
            let outcome = l
                .prepared
                .as_ref()
                .map_err(Clone::clone)
                .and_then(|p| p.predict());
            result_of(l, outcome)
        })
        .collect()
}

/// `l`'s result with `outcome`.
pub fn result_of(l: &Loaded, outcome: Result<RowPrediction, String>) -> RunResult {
    let p = l.prepared.as_ref().ok();
    let row = l.row.as_ref();
    RunResult {
        source: l.source.clone(),
        file: l.file.clone(),
        id: l.id.clone(),
        model: p.map_or_else(
            || row.map_or_else(String::new, |r| r.model.label()),
            |p| p.model.name.clone(),
        ),
        hardware: p.map_or_else(
            || row.map_or_else(String::new, |r| r.hardware.label()),
            |p| p.hardware.name.clone(),
        ),
        gpus: row.map_or(0, |r| r.gpus),
        moe: p.map(|p| p.model.moe.is_some()),
        measured: row.map(|r| (r.measured.metric, r.measured.value)),
        measured_peak_memory_gb: row.and_then(|r| r.measured.peak_memory_gb),
        exclude: row.and_then(|r| r.exclude.clone()),
        outcome,
    }
}

/// Mean absolute error of a group of rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupError {
    pub name: String,
    /// Rows counted: predicted and not excluded.
    pub count: usize,
    /// Mean absolute error (a fraction).
    pub mape: f64,
    /// The row with the largest absolute error.
    pub worst_id: Option<String>,
    pub worst_error: Option<f64>,
}

/// The per-group errors, groups in order of their first row.
pub fn group_errors(results: &[RunResult], by: GroupBy) -> Vec<GroupError> {
    let mut names: Vec<String> = Vec::new();
    for r in results {
        let g = r.group(by);
        if !names.contains(&g) {
            names.push(g);
        }
    }
    names
        .into_iter()
        .map(|name| {
            let rows: Vec<&RunResult> = results.iter().filter(|r| r.group(by) == name).collect();
            summarise(
                name,
                rows.iter()
                    .filter_map(|r| r.counted_error().map(|e| (r.id.as_str(), e))),
            )
        })
        .collect()
}

/// The count, mean absolute error and worst of `(id, error)` pairs.
pub fn summarise<'a>(name: String, errors: impl Iterator<Item = (&'a str, f64)>) -> GroupError {
    let mut count = 0;
    let mut sum = 0.0;
    let mut worst: Option<(&str, f64)> = None;
    for (id, e) in errors {
        count += 1;
        sum += e.abs();
        if worst.is_none_or(|(_, w)| e.abs() > w.abs()) {
            worst = Some((id, e));
        }
    }
    GroupError {
        name,
        count,
        mape: if count == 0 { 0.0 } else { sum / count as f64 },
        worst_id: worst.map(|(id, _)| id.to_string()),
        worst_error: worst.map(|(_, e)| e),
    }
}

/// A row of the JSON output.
#[derive(Debug, Clone, Serialize)]
pub struct RunJson {
    pub source: String,
    pub file: String,
    pub id: String,
    pub model: String,
    pub hardware: String,
    pub gpus: u64,
    pub metric: Option<&'static str>,
    pub flop_convention: Option<&'static str>,
    pub predicted: Option<f64>,
    pub measured: Option<f64>,
    /// Predicted over measured throughput minus 1.
    pub error: Option<f64>,
    pub fits: Option<bool>,
    pub excluded: bool,
    pub exclude_reason: Option<String>,
    /// Why the row could not be read or predicted.
    pub problem: Option<String>,
    pub step_time_s: Option<f64>,
    pub tokens_per_s_per_gpu: Option<f64>,
    pub model_tflops_per_gpu: Option<f64>,
    pub tflops_per_gpu: Option<f64>,
    pub mfu: Option<f64>,
    pub bubble_fraction: Option<f64>,
    pub peak_memory_gb: Option<f64>,
    pub measured_peak_memory_gb: Option<f64>,
    pub layout: Option<String>,
}

/// The whole JSON object of `pplan validate --runs --format json`.
#[derive(Debug, Clone, Serialize)]
pub struct ValidateJson {
    pub schema_version: u32,
    pub group_by: &'static str,
    pub runs: Vec<RunJson>,
    pub groups: Vec<GroupError>,
    /// Rows counted over all groups.
    pub count: usize,
    /// Mean absolute error over all counted rows (a fraction).
    pub mape: f64,
    /// Rows that could not be read or predicted (not excluded).
    pub problems: usize,
}

/// The compact layout of a prediction: `t4 p8 d4 b1 interleaved-1f1b v6`.
pub fn layout_label(p: &crate::plan::predict::Prediction) -> String {
    let mut s = format!("t{}", p.tp);
    if p.cp > 1 {
        let _ = write!(s, " cp{}", p.cp);
    }
    let _ = write!(s, " p{} d{}", p.pp, p.dp);
    if p.ep > 1 {
        let _ = write!(s, " ep{}", p.ep);
    }
    if p.etp > 1 {
        let _ = write!(s, " etp{}", p.etp);
    }
    let _ = write!(s, " b{} {}", p.micro_batch, p.schedule);
    if p.chunks > 1 {
        let _ = write!(s, " v{}", p.chunks);
    }
    s
}

impl RunJson {
    pub fn of(r: &RunResult) -> RunJson {
        let p = r.outcome.as_ref().ok();
        let pred = p.map(|p| &p.prediction);
        RunJson {
            source: r.source.clone(),
            file: r.file.clone(),
            id: r.id.clone(),
            model: r.model.clone(),
            hardware: r.hardware.clone(),
            gpus: r.gpus,
            metric: r.measured.map(|(m, _)| m.key()),
            flop_convention: match r.measured {
                Some((Metric::ModelTflopsPerGpu(c), _)) => Some(c.as_str()),
                _ => None,
            },
            predicted: p.map(|p| p.predicted),
            measured: r.measured.map(|(_, v)| v),
            error: p.map(|p| p.error),
            fits: pred.map(|x| x.fits),
            excluded: r.exclude.is_some(),
            exclude_reason: r.exclude.clone(),
            problem: r.outcome.as_ref().err().cloned(),
            step_time_s: pred.map(|x| x.step_time_s),
            tokens_per_s_per_gpu: pred.map(|x| x.tokens_per_s_per_gpu),
            model_tflops_per_gpu: pred.map(|x| x.model_tflops_per_gpu),
            tflops_per_gpu: pred.map(|x| x.tflops_per_gpu),
            mfu: pred.map(|x| x.mfu),
            bubble_fraction: pred.map(|x| x.bubble_fraction),
            peak_memory_gb: pred.map(|x| x.peak_memory_bytes as f64 / 1e9),
            measured_peak_memory_gb: r.measured_peak_memory_gb,
            layout: pred.map(layout_label),
        }
    }
}

/// The JSON object of the results.
pub fn to_json(results: &[RunResult], by: GroupBy) -> ValidateJson {
    let all = summarise(
        "all".into(),
        results
            .iter()
            .filter_map(|r| r.counted_error().map(|e| (r.id.as_str(), e))),
    );
    ValidateJson {
        schema_version: 1,
        group_by: by.as_str(),
        runs: results.iter().map(RunJson::of).collect(),
        groups: group_errors(results, by),
        count: all.count,
        mape: all.mape,
        problems: results.iter().filter(|r| r.problem().is_some()).count(),
    }
}

fn pct(x: f64) -> String {
    format!("{:+.1}%", 100.0 * x)
}

/// A table cell: `|` would end it.
fn cell(s: &str) -> String {
    s.replace('|', "/").replace('\n', " ")
}

/// The Markdown report: a table per runs file, then the per-group errors, the worst rows and
/// the runs predicted not to fit. docs/validation.md quotes it.
pub fn markdown(files: &[RunsFile], results: &[RunResult], by: GroupBy) -> String {
    let mut s = String::new();
    for f in files {
        let rows: Vec<&RunResult> = results.iter().filter(|r| r.file == f.origin).collect();
        let _ = writeln!(
            s,
            "Runs of {} ({} {}):\n",
            f.origin,
            rows.len(),
            if rows.len() == 1 { "row" } else { "rows" }
        );
        s += "| id | model | hardware | GPUs | layout | metric | measured | predicted | error | peak memory (GB) |\n";
        s += "|---|---|---|---|---|---|---|---|---|---|\n";
        for r in rows {
            let (metric, measured) = match r.measured {
                Some((m, v)) => (m.label(), m.format(v)),
                None => ("–".into(), "–".into()),
            };
            match &r.outcome {
                Ok(p) => {
                    let x = &p.prediction;
                    let m = r
                        .measured
                        .map(|(m, _)| m)
                        .unwrap_or(Metric::TokensPerSPerGpu);
                    let error = match &r.exclude {
                        None => pct(p.error),
                        Some(_) => format!("({}, excluded)", pct(p.error)),
                    };
                    // Beside a published peak, the published figure and pplan's error on it.
                    let published = match r.memory_error() {
                        Some((m, e)) => format!(" (published {m:.1}, {})", pct(e)),
                        None => String::new(),
                    };
                    let _ = writeln!(
                        s,
                        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {:.1}{}{} |",
                        cell(&r.id),
                        cell(&r.model),
                        cell(&r.hardware),
                        r.gpus,
                        layout_label(x),
                        metric,
                        measured,
                        m.format(p.predicted),
                        error,
                        x.peak_memory_bytes as f64 / 1e9,
                        if x.fits { "" } else { " (does not fit)" },
                        published,
                    );
                }
                Err(e) => {
                    let what = match &r.exclude {
                        Some(_) => "excluded".to_string(),
                        None => format!("error: {}", cell(e)),
                    };
                    let _ = writeln!(
                        s,
                        "| {} | {} | {} | {} | – | {} | {} | – | {} | – |",
                        cell(&r.id),
                        cell(&r.model),
                        cell(&r.hardware),
                        if r.gpus > 0 {
                            r.gpus.to_string()
                        } else {
                            "–".into()
                        },
                        metric,
                        measured,
                        what
                    );
                }
            }
        }
        s += "\n";
        // Each reason for leaving rows out, once, with the rows it covers.
        let mut reasons: Vec<(&str, Vec<&str>)> = Vec::new();
        for r in results.iter().filter(|r| r.file == f.origin) {
            if let Some(why) = &r.exclude {
                match reasons.iter_mut().find(|(w, _)| w == why) {
                    Some((_, ids)) => ids.push(&r.id),
                    None => reasons.push((why, vec![&r.id])),
                }
            }
        }
        for (why, ids) in reasons {
            let _ = writeln!(s, "Not counted: {}: {why}.", ids.join(", "));
        }
        if s.ends_with(".\n") {
            s += "\n";
        }
    }
    let several = files.len() > 1;
    for g in group_errors(results, by) {
        let _ = writeln!(s, "{}", group_line(&g));
    }
    let all = summarise(
        "all".into(),
        results
            .iter()
            .filter_map(|r| r.counted_error().map(|e| (r.id.as_str(), e))),
    );
    let groups = group_errors(results, by).len();
    if groups > 1 {
        let _ = writeln!(
            s,
            "all {} runs in {groups} groups (by {}): mean absolute error {:.2}%",
            all.count,
            by.as_str(),
            100.0 * all.mape
        );
    }
    let mut worst: Vec<&RunResult> = results
        .iter()
        .filter(|r| r.counted_error().is_some())
        .collect();
    worst.sort_by(|a, b| {
        let (x, y) = (
            a.counted_error().unwrap_or(0.0),
            b.counted_error().unwrap_or(0.0),
        );
        y.abs().total_cmp(&x.abs())
    });
    if worst.len() > 1 {
        let list: Vec<String> = worst
            .iter()
            .take(5)
            .map(|r| {
                let e = pct(r.counted_error().unwrap_or(0.0));
                if several {
                    format!("{} ({}) {e}", r.id, r.source)
                } else {
                    format!("{} {e}", r.id)
                }
            })
            .collect();
        let _ = writeln!(s, "worst: {}", list.join(", "));
    }
    // Peak memory against the rows that publish it (counted rows only).
    let memory: Vec<(&str, f64)> = results
        .iter()
        .filter(|r| r.exclude.is_none())
        .filter_map(|r| r.memory_error().map(|(_, e)| (r.id.as_str(), e)))
        .collect();
    if !memory.is_empty() {
        let mean = memory.iter().map(|(_, e)| e.abs()).sum::<f64>() / memory.len() as f64;
        let (id, e) = memory
            .iter()
            .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
            .copied()
            .unwrap_or(("", 0.0));
        let _ = writeln!(
            s,
            "peak memory against the {} that publish{} it: mean absolute error {:.2}%, worst {id} {}",
            if memory.len() == 1 {
                "1 run".to_string()
            } else {
                format!("{} runs", memory.len())
            },
            if memory.len() == 1 { "es" } else { "" },
            100.0 * mean,
            pct(e)
        );
    }
    let tight: Vec<String> = results
        .iter()
        .filter(|r| r.exclude.is_none())
        .filter_map(|r| {
            let p = r.outcome.as_ref().ok()?;
            (!p.prediction.fits).then(|| {
                format!(
                    "{}{} {:.1} of {:.1} GB",
                    r.id,
                    if several {
                        format!(" ({})", r.source)
                    } else {
                        String::new()
                    },
                    p.prediction.peak_memory_bytes as f64 / 1e9,
                    p.prediction.memory_limit_bytes as f64 / 1e9
                )
            })
        })
        .collect();
    if !tight.is_empty() {
        let _ = writeln!(
            s,
            "predicted not to fit ({} {}): {}",
            tight.len(),
            if tight.len() == 1 { "run" } else { "runs" },
            tight.join(", ")
        );
    }
    let problems = results.iter().filter(|r| r.problem().is_some()).count();
    if problems > 0 {
        let _ = writeln!(
            s,
            "{problems} {} could not be predicted (above, `error:`)",
            if problems == 1 { "row" } else { "rows" }
        );
    }
    s
}

/// `name: N runs, mean absolute error X%, worst ID +Y%`.
pub fn group_line(g: &GroupError) -> String {
    let mut line = format!(
        "{}: {} {}, mean absolute error {:.2}%",
        g.name,
        g.count,
        if g.count == 1 { "run" } else { "runs" },
        100.0 * g.mape
    );
    if let (Some(id), Some(e)) = (&g.worst_id, g.worst_error) {
        let _ = write!(line, ", worst {id} {}", pct(e));
    }
    line
}
