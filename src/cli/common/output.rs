//! Writing what the subcommands produce: files, Gantt charts (with `--gantt-window`), plan
//! files and one-line JSON on standard output.

use super::error::CliError;
use pplan::report::gantt::{GanttError, GanttOptions};
use pplan::schedule::generators::{self, GenParams, ScheduleName};
use std::path::Path;

pub(crate) fn write_output(path: &Path, flag: &str, contents: &[u8]) -> Result<(), CliError> {
    std::fs::write(path, contents)
        .map_err(|e| CliError::Input(format!("{flag}: cannot write '{}': {e}", path.display())))
}

/// Draw `tl` to `path` (.svg or .png) for `--gantt`, only `window_ns` of it when given
/// (`--gantt-window`).
pub(crate) fn write_gantt(
    tl: &pplan::sim::Timeline,
    title: String,
    unit_label: String,
    ns_per_unit: f64,
    path: &Path,
    window_ns: Option<(u64, u64)>,
) -> Result<(), CliError> {
    let opts = GanttOptions {
        title,
        unit_label,
        ns_per_unit,
        window_ns,
        ..GanttOptions::default()
    };
    write_gantt_with(tl, &opts, path)
}

/// Draw `tl` with `opts` to `path` for `--gantt`: a path or extension the user got wrong is
/// bad input, a failure to draw an internal error.
pub(crate) fn write_gantt_with(
    tl: &pplan::sim::Timeline,
    opts: &GanttOptions,
    path: &Path,
) -> Result<(), CliError> {
    pplan::report::gantt::write_file(tl, opts, path).map_err(|e| match e {
        GanttError::Draw(_) | GanttError::Png(_) | GanttError::Font => {
            CliError::Internal(format!("--gantt: {e}"))
        }
        e => CliError::Input(format!("--gantt: {e}")),
    })
}

/// `--gantt-window START:END`: milliseconds of simulated time, as nanoseconds.
pub(crate) fn parse_gantt_window(text: Option<&str>) -> Result<Option<(u64, u64)>, CliError> {
    let Some(text) = text else {
        return Ok(None);
    };
    let bad = |why: &str| {
        CliError::Input(format!(
            "--gantt-window '{text}': {why}; valid: START:END in milliseconds of simulated time with 0 <= START < END, e.g. 0:250 or 1200.5:1300"
        ))
    };
    let (a, b) = text
        .split_once(':')
        .ok_or_else(|| bad("expected two numbers separated by ':'"))?;
    let ms = |s: &str, what: &str| -> Result<f64, CliError> {
        match s.trim().parse::<f64>() {
            Ok(v) if v.is_finite() && (0.0..=1e12).contains(&v) => Ok(v),
            Ok(_) => Err(bad(&format!("{what} '{s}' is out of range"))),
            Err(_) => Err(bad(&format!("{what} '{s}' is not a number"))),
        }
    };
    let (a_ns, b_ns) = (
        (ms(a, "START")? * 1e6).round() as u64,
        (ms(b, "END")? * 1e6).round() as u64,
    );
    if b_ns <= a_ns {
        return Err(bad("END must be greater than START"));
    }
    Ok(Some((a_ns, b_ns)))
}

/// `pred` as a plan; the schedule is regenerated from its name, p, m and v. `stack` is what
/// the prediction assumed: its context-parallel exchange (recorded when cp > 1), dispatcher,
/// capacity and CUDA graphs. `profile` is the `--profile` layer profile the prediction read,
/// recorded as an absolute path so that the plan reads it from anywhere.
pub(crate) fn plan_of(
    model: &pplan::inputs::model::Model,
    hardware: &str,
    pred: &pplan::plan::predict::Prediction,
    stack: &pplan::cost::Stack,
    profile: Option<&Path>,
) -> Result<pplan::plan::plan_file::Plan, CliError> {
    let name: ScheduleName = pred
        .schedule
        .parse()
        .map_err(|e: String| CliError::Internal(e))?;
    let schedule = generators::generate(
        name,
        GenParams::new(pred.pp as u32, pred.microbatches as u32)
            .chunks(pred.chunks as u32)
            .group(pred.microbatch_group.map(|g| g.min(u32::MAX as u64) as u32)),
    )
    .map_err(|e| CliError::Internal(format!("--output: {e}")))?;
    let mut plan = pplan::plan::plan_file::plan_from_prediction(model, hardware, pred, &schedule);
    if pred.cp > 1 {
        plan.parallelism.cp_comm = stack.cp_comm.as_str().to_string();
    }
    plan.parallelism.set_recipe(stack);
    if let Some(path) = profile {
        let absolute = std::fs::canonicalize(path)
            .map_err(|e| CliError::Input(format!("--profile '{}': {e}", path.display())))?;
        plan.parallelism.profile = Some(absolute.to_string_lossy().into_owned());
    }
    Ok(plan)
}

/// Write `pred` as a plan file ([`plan_of`]).
pub(crate) fn write_plan(
    path: &Path,
    model: &pplan::inputs::model::Model,
    hardware: &str,
    pred: &pplan::plan::predict::Prediction,
    stack: &pplan::cost::Stack,
    profile: Option<&Path>,
) -> Result<(), CliError> {
    let plan = plan_of(model, hardware, pred, stack, profile)?;
    write_output(path, "--output", plan.to_json().as_bytes())
}

/// `--format json`: the value as one line of JSON on standard output.
pub(crate) fn print_json<T: serde::Serialize>(value: &T) -> Result<(), CliError> {
    let text = serde_json::to_string(value).map_err(|e| CliError::Internal(e.to_string()))?;
    println!("{}", crate::cli::schema::with_schema_version(text));
    Ok(())
}
