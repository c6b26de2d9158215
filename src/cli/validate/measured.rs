//! `pplan validate` on measurements pplan did not write (PyTorch profiler traces, Nsight Systems
//! exports, Megatron-LM / torchtitan logs), or with a plan: the breakdown, per-metric errors,
//! worst stages, action-by-action when the trace names actions, and the chart.

use super::args::ValidateArgs;
use super::trace::{overlay_gantt, print_comparison, read_trace_events};
use crate::cli::common::*;
use pplan::measured::breakdown::{breakdown, log_summary, Figures};
use pplan::measured::timeline::{Measured, Source};
use pplan::plan::plan_file::Plan;
use pplan::report::measured::{validate_measured, Prediction, ValidateReport};
use std::path::Path;

/// A measured run read from `paths` (ranks placed by `plan` when given) and broken down: a
/// log's iterations, or a trace's figures (`skip_steps` warm-up steps).
pub(crate) type MeasuredRun = (
    Measured,
    Option<pplan::measured::breakdown::Breakdown>,
    Option<pplan::measured::breakdown::LogSummary>,
);

/// Read and break down the measured run of `paths` (`--measured`), beside `plan`.
pub(crate) fn load_measured(
    paths: &[std::path::PathBuf],
    plan: Option<&Plan>,
    skip_steps: Option<usize>,
) -> Result<MeasuredRun, CliError> {
    let measured = pplan::measured::load::load(paths, plan.map(Plan::layout_sizes))
        .map_err(|e| CliError::Input(format!("--measured: {e}")))?;
    let is_log = matches!(measured.source, Source::MegatronLog | Source::TorchtitanLog);
    Ok(if is_log {
        let l = log_summary(&measured, skip_steps)
            .map_err(|e| CliError::Input(format!("--measured: {e}")))?;
        (measured, None, Some(l))
    } else {
        let b = breakdown(&measured, skip_steps)
            .map_err(|e| CliError::Input(format!("--measured: {e}")))?;
        (measured, Some(b), None)
    })
}

pub(crate) fn cmd(args: ValidateArgs) -> Result<(), CliError> {
    let plan = args.plan.as_deref().map(load_plan).transpose()?;
    let (measured, mb, log) = load_measured(&args.measured, plan.as_ref(), args.skip_steps)?;
    let events;
    let prediction = if let Some(path) = &args.predicted {
        let file = path.display().to_string();
        let pm = pplan::measured::load::load(std::slice::from_ref(path), None)
            .map_err(|e| CliError::Input(format!("--predicted: {e}")))?;
        if pm.source != Source::Pplan {
            return input(format!(
                "--predicted: {file} is a {}; the prediction is a pplan trace (pplan simulate/predict --trace)",
                pm.source.as_str()
            ));
        }
        events = read_trace_events("--predicted", path)?;
        let pb = breakdown(&pm, None).map_err(|e| CliError::Input(format!("--predicted: {e}")))?;
        Some(Prediction::Trace {
            file,
            breakdown: Box::new(pb),
            events: &events,
            plan: plan.as_ref(),
        })
    } else {
        plan.as_ref().map(|p| Prediction::Plan {
            file: args
                .plan
                .as_ref()
                .map(|x| x.display().to_string())
                .unwrap_or_default(),
            plan: p,
        })
    };
    let report = validate_measured(
        &measured,
        mb,
        log,
        prediction,
        args.skip_steps,
        args.allow_unmatched,
    )
    .map_err(|e| CliError::Input(e.to_string()))?;
    for w in &report.warnings {
        eprintln!("warning: {w}");
    }
    if let Some(path) = &args.gantt {
        match &report.actions {
            Some(c) => overlay_gantt(c, path)?,
            None => measured_gantt(&measured, &report, path)?,
        }
    }
    match args.format {
        Format::Json => print_json(&report)?,
        Format::Table => print_report(&report),
    }
    Ok(())
}

/// The measured timeline alone (no action-by-action prediction to overlay).
fn measured_gantt(m: &Measured, r: &ValidateReport, path: &Path) -> Result<(), CliError> {
    use pplan::report::gantt::GanttOptions;
    let step = r.breakdown.as_ref().map_or(0, |b| b.steps_skipped as u32);
    let (timeline, labels, kernel_view) = pplan::report::measured::measured_timeline(m, step)
        .ok_or_else(|| {
            CliError::Input(format!(
                "--gantt: {} has no GPU activity to draw (a log, or an empty step)",
                m.files.join(", ")
            ))
        })?;
    let ms = timeline.makespan_ns as f64 / 1e6;
    let (unit, ns_per_unit) = if ms >= 1000.0 {
        ("s", 1e9)
    } else {
        ("ms", 1e6)
    };
    let opts = GanttOptions {
        title: format!(
            "measured: {}, step {} of each rank{}",
            m.source.as_str(),
            step,
            if kernel_view { " (GPU kernels)" } else { "" }
        ),
        unit_label: unit.to_string(),
        ns_per_unit,
        show_summary: false,
        row_labels: labels,
        kernel_view,
        ..GanttOptions::default()
    };
    write_gantt_with(&timeline, &opts, path)
}

fn fmt_opt(v: Option<f64>, scale: f64, prec: usize) -> String {
    v.map(|x| format!("{:.prec$}", x * scale))
        .unwrap_or_else(|| "-".to_string())
}

fn print_figures_row(label: &str, f: &Figures) {
    println!(
        "{label:<8} {:>10.6} {:>10.6} {:>10.6} {:>10.6} {:>10.6} {:>10.6} {:>10.6} {:>10.6} {:>10.6} {:>10.6} {:>10.6} {:>7.4}",
        f.step_time_s,
        f.compute_s,
        f.gemm_s,
        f.attention_s,
        f.norm_s,
        f.elementwise_s,
        f.embedding_s,
        f.other_compute_s,
        f.comm_s,
        f.comm_exposed_s,
        f.idle_s,
        f.bubble
    );
}

fn print_report(r: &ValidateReport) {
    println!(
        "measured: {} ({})",
        r.source.as_str(),
        r.measured_files.join(", ")
    );
    if let Some(p) = &r.predicted {
        println!("predicted: {p}");
    }
    if let Some(b) = &r.breakdown {
        println!(
            "ranks {}; steps {} ({} skipped as warm-up); bubble from {}",
            b.ranks, b.steps, b.steps_skipped, b.bubble_basis
        );
        println!();
        println!(
            "{:<8} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7}",
            "rank",
            "step_s",
            "compute_s",
            "gemm_s",
            "attn_s",
            "norm_s",
            "elemwise_s",
            "embed_s",
            "other_s",
            "comm_s",
            "exposed_s",
            "idle_s",
            "bubble"
        );
        for (rank, f) in &b.per_rank {
            print_figures_row(&rank.to_string(), f);
        }
        if b.per_rank.len() > 1 {
            print_figures_row("mean", &b.mean);
        }
        if b.source != Source::Pplan {
            println!(
                "kernels of no known family (other_s): {:.1}% of compute kernel time (mean rank); docs/validate.md lists the families",
                b.mean.other_compute_share * 100.0
            );
        }
        if !b.mean.comm.is_empty() {
            println!();
            println!("communication (mean rank)   total_s  exposed_s");
            for (d, c) in &b.mean.comm {
                println!("  {d:<24} {:>9.6} {:>10.6}", c.total_s, c.exposed_s);
            }
        }
    }
    if let Some(l) = &r.log {
        println!(
            "iterations {} ({} skipped as warm-up); medians: step {} s, {} TFLOP/s per GPU, {} tokens/s per GPU, MFU {}, peak memory {} GiB",
            l.iterations,
            l.iterations_skipped,
            fmt_opt(l.step_time_s, 1.0, 4),
            fmt_opt(l.tflops_per_gpu, 1.0, 1),
            fmt_opt(l.tokens_per_s_per_gpu, 1.0, 0),
            l.mfu.map(|m| format!("{:.2}%", m * 100.0)).unwrap_or_else(|| "-".into()),
            fmt_opt(l.memory_bytes.map(|b| b as f64), 1.0 / (1u64 << 30) as f64, 2),
        );
    }
    if !r.metrics.is_empty() {
        println!();
        println!(
            "{:<26} {:>14} {:>14} {:>10}",
            "metric", "predicted", "measured", "error"
        );
        for m in &r.metrics {
            let err = match (m.error, m.error_kind) {
                (Some(e), "difference") => format!("{:+.4}", e),
                (Some(e), _) => format!("{:+.2}%", e * 100.0),
                (None, _) => "-".to_string(),
            };
            println!(
                "{:<26} {:>14} {:>14} {:>10}",
                format!("{} ({})", m.name, m.unit),
                fmt_opt(m.predicted, 1.0, 6),
                fmt_opt(m.measured, 1.0, 6),
                err
            );
        }
    }
    if !r.stages.is_empty() {
        println!();
        println!("stages, worst first   F_pred_ms  F_meas_ms  B_pred_ms  B_meas_ms   error");
        for s in &r.stages {
            println!(
                "  stage {:<13} {:>10.4} {:>10.4} {:>10.4} {:>10.4} {:>8}",
                s.stage,
                s.forward_ms_predicted,
                s.forward_ms_measured,
                s.backward_ms_predicted,
                s.backward_ms_measured,
                s.error
                    .map(|e| format!("{:+.2}%", e * 100.0))
                    .unwrap_or_else(|| "-".into())
            );
        }
    }
    if let Some(c) = &r.actions {
        println!();
        print_comparison(c);
    }
}
