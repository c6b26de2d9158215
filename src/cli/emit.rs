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
    /// Re-split the plan's stages by this layout (Megatron-Core's
    /// --pipeline-model-parallel-layout syntax: `E` embedding, `t` transformer layer, `m`
    /// multi-token prediction layer, `L` loss, `|` between stages, `*n` repeats) before
    /// writing it: the same p x v stages, the layers where the layout puts them. The plan's prediction was for its own split, so it
    /// is dropped (predict the layout with `pplan predict ... --pipeline-layout`).
    #[arg(long, value_name = "LAYOUT")]
    pub(crate) pipeline_layout: Option<String>,
}

pub(crate) fn cmd_emit(args: EmitArgs) -> Result<(), CliError> {
    use pplan::plan::emit::{emit, EmitError, Target};
    let target: Target = args
        .target
        .parse()
        .map_err(|e: String| CliError::Input(format!("--target: {e}")))?;
    let mut plan = load_plan(&args.plan)?;
    if let Some(text) = &args.pipeline_layout {
        resplit(&mut plan, text)?;
    }
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

/// `--pipeline-layout`: the plan's stages re-split as the layout says, checked against the
/// plan's model and its p x v stages.
fn resplit(plan: &mut pplan::plan::plan_file::Plan, text: &str) -> Result<(), CliError> {
    use pplan::schedule::ir::Placement;
    let layout = pplan::plan::predict::parse_layout(text)
        .map_err(|e| CliError::Input(format!("--pipeline-layout '{text}': {e}")))?;
    let par = &plan.parallelism;
    layout
        .check(
            plan.model.num_layers,
            plan.model.mtp_num_layers,
            par.pp,
            par.chunks,
        )
        .map_err(|e| CliError::Input(format!("{e} (plan '{}'; '{text}')", plan.model.name)))?;
    let placement = match plan.schedule.placement.as_str() {
        "v" => Placement::V,
        _ => Placement::Loop,
    };
    let changed = layout.layers != plan.stages.iter().map(|s| s.num_layers).collect::<Vec<_>>()
        || layout.mtp_stage() != plan.mtp_stage();
    plan.stages =
        pplan::plan::plan_file::stages_from_counts(&layout.layers, placement, par.pp as u32);
    if let Some(s) = layout.mtp_stage() {
        plan.stages[s].mtp_layers = plan.model.mtp_num_layers;
    }
    if changed && plan.predicted.take().is_some() {
        eprintln!(
            "note: --pipeline-layout moves layers between stages: the plan's prediction (for its own split) is dropped; pplan predict with --pipeline-layout '{text}' predicts this one"
        );
    }
    Ok(())
}
