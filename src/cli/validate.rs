//! `pplan validate`: a predicted trace beside a measured one.

use super::common::*;
use pplan::report::gantt::GanttOptions;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub(crate) struct ValidateArgs {
    /// The predicted Chrome trace (pplan simulate/predict --trace).
    #[arg(long)]
    pub(crate) predicted: Option<PathBuf>,
    /// A plan (pplan predict/search --output): its predicted step time, bubble, TFLOP/s and
    /// memory, and its layout (to attribute collectives by group size and to map ranks to
    /// pipeline devices).
    #[arg(long)]
    pub(crate) plan: Option<PathBuf>,
    /// The measurement: a pplan trace (pplan-exec run --trace; events of several steps carry
    /// args.step), PyTorch profiler traces (one per rank, .json or .json.gz, or a directory of
    /// them), an Nsight Systems SQLite export, or a Megatron-LM / torchtitan log.
    #[arg(long, num_args = 1.., conflicts_with = "runs")]
    pub(crate) measured: Vec<PathBuf>,
    /// Runs files (DESIGN.md, "Runs files"; e.g. data/runs/*.json): predict every row as
    /// `pplan predict` would with its flags and compare it with its measured figure; errors
    /// per row, per group and overall, the worst rows and the runs predicted not to fit.
    #[arg(long, num_args = 1.., conflicts_with_all = ["predicted", "plan"])]
    pub(crate) runs: Vec<PathBuf>,
    /// With --runs: how the per-group errors group the rows: source (each runs file),
    /// hardware, model or kind (dense or mixture of experts).
    #[arg(long, default_value = "source", requires = "runs")]
    pub(crate) group_by: String,
    /// With --runs: predict every row on this hardware profile (a bundled name or a JSON
    /// file, e.g. one `pplan calibrate --runs --out-hardware` wrote) instead of its own.
    #[arg(long, requires = "runs")]
    pub(crate) hardware: Option<String>,
    /// Warm-up steps to discard from each trace (default: 1 when a trace has several steps).
    #[arg(long, value_parser = count::<usize>)]
    pub(crate) skip_steps: Option<usize>,
    /// Compare the common actions even when the two schedules' compute actions differ.
    #[arg(long)]
    pub(crate) allow_unmatched: bool,
    /// Draw predicted (upper lane) against measured (lower lane) per device, or the measured
    /// step per rank without an action-by-action prediction: FILE.svg or FILE.png.
    #[arg(long)]
    pub(crate) gantt: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub(crate) format: Format,
}

/// Is this a pplan trace (plain JSON without Kineto's `cat` fields)? Those keep the original
/// trace-against-trace comparison and its messages.
fn is_pplan_trace(path: &Path) -> bool {
    match std::fs::read(path) {
        Ok(b) => {
            let t = b.strip_prefix(b"\xEF\xBB\xBF".as_slice()).unwrap_or(&b);
            matches!(
                t.iter().find(|c| !c.is_ascii_whitespace()),
                Some(b'{' | b'[')
            ) && !t.windows(5).any(|w| w == b"\"cat\"")
        }
        Err(_) => true,
    }
}

pub(crate) fn cmd_validate(args: ValidateArgs) -> Result<(), CliError> {
    if !args.runs.is_empty() {
        return super::runs::cmd_validate_runs(&args);
    }
    if args.measured.is_empty() {
        return input(
            "validate needs --measured FILE... (a measured run, with --predicted or --plan to compare it with), or --runs FILE... (runs files)",
        );
    }
    let pplan_pair = args.plan.is_none()
        && args.measured.len() == 1
        && args.predicted.is_some()
        && !args.measured[0].is_dir()
        && is_pplan_trace(&args.measured[0]);
    if !pplan_pair {
        return super::validate_measured::cmd(args);
    }
    let predicted = args.predicted.clone().unwrap_or_default();
    let measured = args.measured[0].clone();
    use pplan::report::compare::{compare, CompareOptions};
    let pred = read_trace_events("--predicted", &predicted)?;
    let meas = read_trace_events("--measured", &measured)?;
    let c = compare(
        &pred,
        &predicted.display().to_string(),
        &meas,
        &measured.display().to_string(),
        CompareOptions {
            skip_steps: args.skip_steps,
            allow_unmatched: args.allow_unmatched,
        },
    )
    .map_err(|e| CliError::Input(e.to_string()))?;
    for w in &c.warnings {
        eprintln!("warning: {w}");
    }
    if let Some(path) = &args.gantt {
        overlay_gantt(&c, path)?;
    }
    match args.format {
        Format::Json => print_json(&c)?,
        Format::Table => print_comparison(&c),
    }
    Ok(())
}

/// The events of a pplan Chrome trace given with `flag`.
pub(crate) fn read_trace_events(
    flag: &str,
    path: &Path,
) -> Result<Vec<pplan::report::trace::TraceEvent>, CliError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Input(format!("cannot read {flag} file '{origin}': {e}")))?;
    pplan::report::compare::parse_events(&text, &origin)
        .map_err(|e| CliError::Input(format!("{flag}: {e}")))
}

/// The predicted-against-measured overlay chart of an action-by-action comparison.
pub(crate) fn overlay_gantt(
    c: &pplan::report::compare::Comparison,
    path: &Path,
) -> Result<(), CliError> {
    let longest = c.step_time_predicted_s.max(c.step_time_measured_s);
    let (unit, ns_per_unit) = if longest >= 1.0 {
        ("s", 1e9)
    } else if longest >= 1e-3 {
        ("ms", 1e6)
    } else {
        ("us", 1e3)
    };
    let opts = GanttOptions {
        title: format!(
            "predicted (upper) vs measured (lower): step {:.4} vs {:.4} {unit} ({:+.1}%)",
            c.step_time_predicted_s * 1e9 / ns_per_unit,
            c.step_time_measured_s * 1e9 / ns_per_unit,
            c.step_time_error * 100.0
        ),
        unit_label: unit.to_string(),
        ns_per_unit,
        show_summary: false,
        row_labels: c.overlay_labels.clone(),
        pipeline_devices: c.pipeline_devices,
        ..GanttOptions::default()
    };
    write_gantt_with(&c.overlay, &opts, path)
}

/// The action-by-action comparison as a table.
pub(crate) fn print_comparison(c: &pplan::report::compare::Comparison) {
    println!("predicted {} vs measured {}", c.predicted, c.measured);
    println!(
        "steps: predicted {} ({} skipped), measured {} ({} skipped as warm-up)",
        c.steps_predicted, c.steps_skipped_predicted, c.steps_measured, c.steps_skipped_measured
    );
    println!(
        "step time      predicted {:.6} s  measured {:.6} s  error {:+.2}%",
        c.step_time_predicted_s,
        c.step_time_measured_s,
        c.step_time_error * 100.0
    );
    println!(
        "bubble         predicted {:.4}  measured {:.4}",
        c.bubble_predicted, c.bubble_measured
    );
    println!(
        "actions        {} matched, {} only predicted, {} only measured",
        c.actions_matched, c.actions_unmatched.predicted_only, c.actions_unmatched.measured_only
    );
    println!(
        "duration error mean |e| {:.2}%  signed mean {:+.2}%",
        c.action_error_mean_abs * 100.0,
        c.action_error_mean * 100.0
    );
    println!(
        "start error    mean {:.4}  max {:.4} (fraction of the step)",
        c.start_error_mean_abs, c.start_error_max_abs
    );
    println!();
    println!("kind             count  predicted_ms   measured_ms     error");
    for (k, e) in &c.by_kind {
        let err = e
            .error
            .map(|x| format!("{:+.2}%", x * 100.0))
            .unwrap_or_else(|| "n/a".to_string());
        println!(
            "{:<15} {:>6} {:>13.4} {:>13.4} {:>9}",
            k, e.count, e.predicted_ms, e.measured_ms, err
        );
    }
    if !c.worst_actions.is_empty() {
        println!();
        println!("worst actions   device  predicted_ms   measured_ms     error");
        for a in &c.worst_actions {
            println!(
                "{:<15} {:>6} {:>13.4} {:>13.4} {:>+8.2}%",
                a.name,
                a.device,
                a.predicted_ms,
                a.measured_ms,
                a.error * 100.0
            );
        }
    }
}
