//! `pplan validate`: a predicted trace beside a measured one.

use super::common::*;
use pplan::report::gantt::{GanttError, GanttOptions};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub(crate) struct ValidateArgs {
    /// The predicted Chrome trace (pplan simulate/predict --trace).
    #[arg(long)]
    pub(crate) predicted: PathBuf,
    /// The measured Chrome trace (events of several steps carry args.step).
    #[arg(long)]
    pub(crate) measured: PathBuf,
    /// Warm-up steps to discard from each trace (default: 1 when a trace has several steps).
    #[arg(long, value_parser = count::<usize>)]
    pub(crate) skip_steps: Option<usize>,
    /// Compare the common actions even when the two schedules' compute actions differ.
    #[arg(long)]
    pub(crate) allow_unmatched: bool,
    /// Draw predicted (upper lane) against measured (lower lane) per device: FILE.svg or FILE.png.
    #[arg(long)]
    pub(crate) gantt: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub(crate) format: Format,
}

pub(crate) fn cmd_validate(args: ValidateArgs) -> Result<(), CliError> {
    use pplan::report::compare::{compare, parse_events, CompareOptions};
    let read =
        |flag: &str, path: &Path| -> Result<Vec<pplan::report::trace::TraceEvent>, CliError> {
            let origin = path.display().to_string();
            let text = std::fs::read_to_string(path)
                .map_err(|e| CliError::Input(format!("cannot read {flag} file '{origin}': {e}")))?;
            parse_events(&text, &origin).map_err(|e| CliError::Input(format!("{flag}: {e}")))
        };
    let pred = read("--predicted", &args.predicted)?;
    let meas = read("--measured", &args.measured)?;
    let c = compare(
        &pred,
        &args.predicted.display().to_string(),
        &meas,
        &args.measured.display().to_string(),
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
        pplan::report::gantt::write_file(&c.overlay, &opts, path).map_err(|e| match e {
            GanttError::Draw(_) | GanttError::Png(_) | GanttError::Font => {
                CliError::Internal(format!("--gantt: {e}"))
            }
            e => CliError::Input(format!("--gantt: {e}")),
        })?;
    }
    match args.format {
        Format::Json => print_json(&c)?,
        Format::Table => {
            println!("predicted {} vs measured {}", c.predicted, c.measured);
            println!(
                "steps: predicted {} ({} skipped), measured {} ({} skipped as warm-up)",
                c.steps_predicted,
                c.steps_skipped_predicted,
                c.steps_measured,
                c.steps_skipped_measured
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
                c.actions_matched,
                c.actions_unmatched.predicted_only,
                c.actions_unmatched.measured_only
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
        }
    }
    Ok(())
}
