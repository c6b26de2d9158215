//! `pplan validate --predicted A --measured B` on two pplan traces: the action-by-action
//! comparison, its table and its overlay chart (the last two shared with [`super::measured`]).

use super::args::ValidateArgs;
use crate::cli::common::*;
use pplan::report::gantt::GanttOptions;
use std::path::Path;

/// Compares the predicted and measured pplan traces of `args` action by action.
pub(crate) fn cmd(args: ValidateArgs) -> Result<(), CliError> {
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
    let (unit, ns_per_unit) = pplan::report::gantt::time_unit_for(longest);
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
