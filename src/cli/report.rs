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
    let plan = load_plan(&args.plan)?;
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
    let measured = if args.measured.is_empty() {
        None
    } else {
        let (m, b, log) = load_measured(&args.measured, Some(&plan), args.skip_steps)?;
        let report = validate_measured(
            &m,
            b,
            log,
            Some(Beside::Plan {
                file: plan_file.clone(),
                plan: &plan,
            }),
            args.skip_steps,
            false,
        )
        .map_err(|e| CliError::Input(format!("--measured: {e}")))?;
        Some(report)
    };
    let flags = plan_predict_flags(&plan, &[], &plan_file)?;
    let step = super::predict::predict_flags(&flags, Some(&plan), true)?;
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
