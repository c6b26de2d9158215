//! `pplan report`: one self-contained HTML page about a plan (docs/report.md).

use super::common::*;
use super::validate::measured::load_measured;
use pplan::report::html::{read_search, render, ReportError, ReportInput};
use pplan::report::measured::{validate_measured, Prediction as Beside};
use std::path::PathBuf;

#[derive(clap::Args)]
pub(crate) struct ReportArgs {
    /// The plan file (`pplan search --output`, `predict --output`); it is predicted as
    /// `pplan predict --plan FILE` predicts it.
    #[arg(long, value_name = "FILE")]
    pub(crate) plan: PathBuf,
    /// The search's results (`pplan search --format json` output): its best configurations
    /// and why each lost to the first, and what the search rejected.
    #[arg(long, value_name = "RESULTS.json")]
    pub(crate) search: Option<PathBuf>,
    /// A measured run of the plan, as `pplan validate --measured` reads it (pplan/executor
    /// Chrome traces, PyTorch profiler traces one per rank, an Nsight Systems export, a
    /// Megatron-LM or torchtitan log): its figures beside the prediction, with errors.
    #[arg(long, value_name = "TRACE", num_args = 1..)]
    pub(crate) measured: Vec<PathBuf>,
    /// With --measured: warm-up steps to skip (default: as `pplan validate`).
    #[arg(long, requires = "measured")]
    pub(crate) skip_steps: Option<usize>,
    #[command(flatten)]
    pub(crate) run: RunArgs,
    /// The page to write (FILE.html): one file, nothing loaded when it is opened.
    #[arg(long, value_name = "FILE.html")]
    pub(crate) output: PathBuf,
}

pub(crate) fn cmd_report(args: ReportArgs) -> Result<(), CliError> {
    let plan_file = args.plan.display().to_string();
    let plan = load_plan_to_predict(&args.plan)?;
    let run_request = args.run.parse()?;
    let search = match &args.search {
        None => None,
        Some(path) => {
            let origin = path.display().to_string();
            let text = std::fs::read_to_string(path).map_err(|e| {
                CliError::Input(format!("cannot read --search file '{origin}': {e}"))
            })?;
            let s = read_search(&text, &origin)
                .map_err(|e| CliError::Input(format!("--search: {e}")))?;
            Some((origin, s))
        }
    };
    let flags = plan_predict_flags(&plan, &[], &plan_file)?;
    let step = super::predict::predict_flags(&flags, Some(&plan), true)?;
    let measured = if args.measured.is_empty() {
        None
    } else {
        Some(measured_beside(&args, &plan, &plan_file, &step.pred)?)
    };
    let run = run_request.map(|(tokens, price)| {
        pplan::plan::run_cost::run_cost(
            tokens,
            step.pred.global_batch * step.model.seq_len,
            step.pred.step_time_s,
            step.pred.gpus,
            price,
        )
    });
    let page = render(&ReportInput {
        plan_file: &plan_file,
        plan: &plan,
        prediction: &step.pred,
        run: run.as_ref(),
        search: search.as_ref().map(|(f, s)| (f.as_str(), s)),
        measured: measured.as_ref(),
    })
    .map_err(|e| match e {
        ReportError::Chart(e) => CliError::Internal(format!("--output: {e}")),
        e => CliError::Internal(e.to_string()),
    })?;
    write_output(&args.output, "--output", page.as_bytes())?;
    eprintln!(
        "pplan: wrote {} ({} KB)",
        args.output.display(),
        page.len().div_ceil(1024)
    );
    Ok(())
}

/// The measured run of `--measured` beside this page's prediction `pred` of `plan`: the
/// headline figures (the plan's recorded prediction replaced by `pred`'s, so the page agrees
/// with itself), and for a pplan/executor trace the action-by-action comparison with the
/// predicted step (its overlay chart and per-kind errors), as `pplan validate` makes them.
fn measured_beside(
    args: &ReportArgs,
    plan: &pplan::plan::plan_file::Plan,
    plan_file: &str,
    pred: &pplan::plan::predict::Prediction,
) -> Result<pplan::report::measured::ValidateReport, CliError> {
    let mut plan = plan.clone();
    plan.predicted = Some(pplan::plan::plan_file::PlanPrediction {
        step_time_s: pred.step_time_s,
        tflops_per_gpu: pred.tflops_per_gpu,
        mfu: pred.mfu,
        bubble_fraction: pred.bubble_fraction,
        peak_memory_bytes: pred.peak_memory_bytes,
    });
    let (m, b, log) = load_measured(&args.measured, Some(&plan), args.skip_steps)?;
    let source = m.source;
    let mut report = validate_measured(
        &m,
        b,
        log,
        Some(Beside::Plan {
            file: plan_file.to_string(),
            plan: &plan,
        }),
        args.skip_steps,
        false,
    )
    .map_err(|e| CliError::Input(format!("--measured: {e}")))?;
    if let (pplan::measured::timeline::Source::Pplan, [path], Some(tl)) =
        (source, args.measured.as_slice(), &pred.timeline)
    {
        let measured_events = super::validate::trace::read_trace_events("--measured", path)?;
        let predicted_events = pplan::report::trace::from_timeline(tl).trace_events;
        match pplan::report::compare::compare(
            &predicted_events,
            &format!("pplan predict --plan {plan_file}"),
            &measured_events,
            &path.display().to_string(),
            pplan::report::compare::CompareOptions {
                skip_steps: args.skip_steps,
                allow_unmatched: true,
            },
        ) {
            Ok(c) => report.actions = Some(c),
            Err(e) => report
                .warnings
                .push(format!("no action-by-action comparison: {e}")),
        }
    }
    Ok(report)
}
