//! `pplan emit`: a plan written for the system that runs it.

use super::common::*;
use std::path::PathBuf;

#[derive(clap::Args)]
pub(crate) struct EmitArgs {
    /// The plan file (plan.json from `pplan predict/search --output`).
    #[arg(long)]
    pub(crate) plan: PathBuf,
    /// executor (plan JSON), megatron (Megatron-LM arguments, a bash array), torchtitan (a
    /// Python config function for current torchtitan), torchtitan-v0.2 (TOML for torchtitan
    /// 0.2.x) or csv (PyTorch compute_only schedule).
    #[arg(long)]
    pub(crate) target: String,
    /// Output file (default: standard output).
    #[arg(long, short)]
    pub(crate) output: Option<PathBuf>,
    /// torchtitan: where to write the schedule CSV when no PyTorch schedule class runs the
    /// plan's order (default: beside --output, named OUTPUT_STEM.schedule.csv).
    #[arg(long)]
    pub(crate) schedule_csv: Option<PathBuf>,
}

pub(crate) fn cmd_emit(args: EmitArgs) -> Result<(), CliError> {
    use pplan::plan::emit::{emit, EmitError, Target};
    let target: Target = args
        .target
        .parse()
        .map_err(|e: String| CliError::Input(format!("--target: {e}")))?;
    let plan = load_plan(&args.plan)?;
    let csv_path = args.schedule_csv.clone().or_else(|| {
        args.output
            .as_ref()
            .map(|o| o.with_extension("schedule.csv"))
    });
    let csv_str = csv_path.as_ref().map(|p| p.display().to_string());
    let out = emit(&plan, target, csv_str.as_deref()).map_err(|e| match e {
        EmitError::Plan(e) => CliError::Input(format!("--plan: {e}")),
        e => CliError::Input(e.to_string()),
    })?;
    for n in &out.notes {
        eprintln!(
            "warning: --target {} cannot express exactly: {n}",
            args.target
        );
    }
    if let (Some(csv), Some(path)) = (&out.schedule_csv, &csv_path) {
        write_output(path, "--schedule-csv", csv.as_bytes())?;
        eprintln!("note: wrote the schedule CSV to '{}'", path.display());
    }
    match &args.output {
        Some(path) => write_output(path, "--output", out.text.as_bytes()),
        None => {
            print!("{}", out.text);
            Ok(())
        }
    }
}
