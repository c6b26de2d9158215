//! `pplan predict`: one training step of a model on a cluster.

use super::common::*;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub(crate) struct PredictArgs {
    /// Predict a plan file (`pplan search --output`, `predict --output`): its model, hardware,
    /// layout, schedule and stack, as if each were typed as a flag; flags given on top replace
    /// the plan's values (each replacement is said on standard error).
    #[arg(long, value_name = "FILE")]
    pub(crate) plan: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) flags: PredictFlags,
    #[command(flatten)]
    pub(crate) run: RunArgs,
    /// Draw the simulated step as a Gantt chart (FILE.svg or FILE.png): compute, transfers,
    /// and a lane for tensor-parallel collectives, the gradient reduction and the optimizer.
    #[arg(long)]
    pub(crate) gantt: Option<PathBuf>,
    /// With --gantt: draw only START:END, in milliseconds from the step's start (the axis is
    /// in seconds), e.g. 0:250. Actions overlapping it are drawn, cut at its edges.
    #[arg(
        long,
        requires = "gantt",
        value_name = "START:END",
        allow_hyphen_values = true
    )]
    pub(crate) gantt_window: Option<String>,
    /// Write the simulated step as a Chrome trace (open in Perfetto).
    #[arg(long)]
    pub(crate) trace: Option<PathBuf>,
    /// Write the configuration as a plan file (plan.json) for `pplan emit` and the executor.
    #[arg(long)]
    pub(crate) output: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub(crate) format: Format,
    /// Add each pipeline rank's stages, layers, forward and backward time per micro-batch and
    /// memory by kind at its own peak (a table, or a `stages` array in JSON).
    #[arg(long)]
    pub(crate) per_stage: bool,
    /// Show the phases (inputs, costs and simulation, trace, chart, plan) and the time so far
    /// on standard error even when it is not a terminal (on a terminal they appear by
    /// themselves).
    #[arg(long)]
    pub(crate) progress: bool,
}

pub(crate) fn cmd_predict(args: PredictArgs) -> Result<(), CliError> {
    // The prediction (costs, then one simulation) has no progress points of its own: report
    // the phases, with no guessed time left.
    let progress = Progress::new("predict", args.progress);
    let r = predict_with_progress(args, &progress);
    progress.end(r.is_ok());
    r
}

/// A prediction from flags, with what it was made of: the model (the plan's, with `--plan`,
/// unless `--model` names another) and the stack it ran on.
pub(crate) struct Predicted {
    pub(crate) model: pplan::inputs::model::Model,
    pub(crate) pred: pplan::plan::predict::Prediction,
    pub(crate) stack: pplan::cost::Stack,
}

/// `--model` and `--hardware` as `flags` name them; with a plan whose model `--model` still
/// names (the plan's own flags), the plan's model dimensions instead of a bundled model.
pub(crate) fn load_flag_inputs(
    flags: &PredictFlags,
    plan: Option<&pplan::plan::plan_file::Plan>,
) -> Result<
    (
        pplan::inputs::model::Model,
        pplan::inputs::hardware::Hardware,
    ),
    CliError,
> {
    let Some(plan) = plan.filter(|p| p.model.name == flags.model) else {
        return load_model_and_hardware(&flags.model, flags.seq_len, &flags.hardware);
    };
    let mut model = plan.model.to_model();
    if let Some(len) = flags.seq_len {
        model.seq_len = len;
    }
    model
        .check()
        .map_err(|e| CliError::Input(format!("--plan: model: {e}")))?;
    let hw = pplan::inputs::hardware::Hardware::load(&flags.hardware)
        .map_err(|e| CliError::Input(e.to_string()))?;
    Ok((model, hw))
}

/// Predict what `flags` describe (`plan`: the plan they came from, for its model), keeping
/// the timeline when `record_timeline`; shared by `predict`, `search --gantt` and `report`.
pub(crate) fn predict_flags(
    flags: &PredictFlags,
    plan: Option<&pplan::plan::plan_file::Plan>,
    record_timeline: bool,
) -> Result<Predicted, CliError> {
    use pplan::plan::flags::FlagsPredictError;
    use pplan::plan::predict::PredictError;
    let (mut model, hw) = load_flag_inputs(flags, plan)?;
    flags.apply_to_model(&mut model)?;
    let profile = flags.profile.as_deref().map(load_profile).transpose()?;
    let mut req = flags.request(&model, &hw, profile.as_ref())?;
    if let (None, pplan::plan::predict::Split::Megatron(rule)) =
        (flags.split_rule.rule("even")?, req.partition)
    {
        eprintln!(
            "note: --pp {} x --chunks {} = {} stages for {} transformer layers: split as Megatron-Core must split them, with {}",
            flags.pp,
            req.chunks,
            flags.pp * req.chunks,
            model.num_layers,
            rule.flags().join(" ")
        );
    }
    req.record_timeline = record_timeline;
    let pred = flags.predict(&req).map_err(|e| match e {
        FlagsPredictError::Predict(PredictError::Internal(m)) => CliError::Internal(m),
        FlagsPredictError::Predict(PredictError::Profile(m)) => CliError::Input(format!(
            "--profile '{}': {m}",
            flags.profile.as_deref().unwrap_or(Path::new("")).display()
        )),
        other => CliError::Input(other.to_string()),
    })?;
    let stack = req.stack;
    Ok(Predicted { model, pred, stack })
}

fn predict_with_progress(args: PredictArgs, progress: &Progress) -> Result<(), CliError> {
    let flags = &args.flags;
    let plan = args.plan.as_deref().map(load_plan).transpose()?;
    let window = parse_gantt_window(args.gantt_window.as_deref())?;
    let run_request = args.run.parse()?;
    let phases = 1
        + u64::from(args.trace.is_some())
        + u64::from(args.gantt.is_some())
        + u64::from(args.output.is_some());
    let mut phase = 1;
    progress.phase(phase, phases, "building the costs and simulating the step");
    let Predicted { model, pred, stack } = predict_flags(
        flags,
        plan.as_ref(),
        args.trace.is_some() || args.gantt.is_some(),
    )?;
    if let (Some(path), Some(tl)) = (&args.trace, &pred.timeline) {
        phase += 1;
        progress.phase(phase, phases, "writing the Chrome trace");
        write_output(
            path,
            "--trace",
            pplan::report::trace::to_json(tl).as_bytes(),
        )?;
    }
    if let (Some(path), Some(tl)) = (&args.gantt, &pred.timeline) {
        phase += 1;
        progress.phase(
            phase,
            phases,
            &format!("drawing the Gantt chart ({} spans)", tl.spans.len()),
        );
        write_gantt(tl, gantt_title(&pred), "s".to_string(), 1e9, path, window)?;
    }
    if let Some(path) = &args.output {
        phase += 1;
        progress.phase(phase, phases, "writing the plan");
        write_plan(
            path,
            &model,
            &flags.hardware,
            &pred,
            &stack,
            flags.profile.as_deref(),
        )?;
    }
    let run = run_request.map(|(tokens, price)| {
        pplan::plan::run_cost::run_cost(
            tokens,
            pred.global_batch * model.seq_len,
            pred.step_time_s,
            pred.gpus,
            price,
        )
    });
    // Standard output starts here: the progress line must be gone first.
    progress.finish();
    match args.format {
        Format::Json => {
            // The prediction's fields, then the run's (--tokens), then the ranks
            // (--per-stage): without the flags the bytes are the prediction's alone.
            #[derive(serde::Serialize)]
            struct Out<'a> {
                #[serde(flatten)]
                pred: &'a pplan::plan::predict::Prediction,
                #[serde(flatten, skip_serializing_if = "Option::is_none")]
                run: Option<&'a pplan::plan::run_cost::RunCost>,
                #[serde(skip_serializing_if = "Option::is_none")]
                stages: Option<&'a [pplan::plan::predict::stages::RankFigures]>,
            }
            print_json(&Out {
                pred: &pred,
                run: run.as_ref(),
                stages: args.per_stage.then_some(&pred.ranks[..]),
            })?
        }
        Format::Table => {
            println!(
                "{} (seq={}) on {} x {}: t={} p={} d={}{} b={} m={} {} v={} recompute={} sp={}",
                pred.model,
                model.seq_len,
                pred.gpus,
                pred.hardware,
                pred.tp,
                pred.pp,
                pred.dp,
                if pred.cp > 1 {
                    format!(" cp={}", pred.cp)
                } else {
                    String::new()
                },
                pred.micro_batch,
                pred.microbatches,
                pred.schedule,
                pred.chunks,
                pred.recompute,
                if pred.sequence_parallel { "on" } else { "off" }
            );
            println!("step_time_s          {:.4}", pred.step_time_s);
            println!("tflops_per_gpu       {:.1}", pred.tflops_per_gpu);
            println!("model_tflops_per_gpu {:.1}", pred.model_tflops_per_gpu);
            println!("mfu                  {:.3}", pred.mfu);
            // Beside the BF16 MFU, the MFU against the peak of the precision the GEMMs run
            // in (FP8's is twice BF16's on Hopper): BF16 runs keep their lines as they were.
            if pred.precision != "bf16" {
                println!(
                    "mfu_precision_peak   {:.3} (against the dense {} peak)",
                    pred.mfu_precision_peak, pred.precision
                );
            }
            println!("tokens_per_s         {:.0}", pred.tokens_per_s);
            if pred.active_params < pred.params {
                let (ep, etp) = (pred.ep, pred.etp);
                println!(
                    "experts              ep={ep} etp={etp}; params {:.2}B total, {:.2}B active (MFU counts active)",
                    pred.params as f64 / 1e9,
                    pred.active_params as f64 / 1e9
                );
            }
            if let Some(stage) = pred.mtp_stage {
                println!(
                    "mtp                  {} multi-token prediction layer(s) on stage {stage} (counted in params and MFU)",
                    pred.mtp_num_layers
                );
            }
            println!("bubble_fraction      {:.4}", pred.bubble_fraction);
            println!(
                "peak_memory_bytes    {} ({:.1} GB of {:.1} GB)",
                pred.peak_memory_bytes,
                pred.peak_memory_bytes as f64 / 1e9,
                pred.memory_limit_bytes as f64 / 1e9
            );
            let m = &pred.memory_breakdown;
            let gb = |b: u64| b as f64 / 1e9;
            println!(
                "memory (GB)          weights {:.1}, gradients {:.1}, optimizer {:.1}, activations {:.1}, overheads {:.1}",
                gb(m.weights),
                gb(m.gradients),
                gb(m.optimizer),
                gb(m.activations),
                gb(m.overheads)
            );
            println!("fits                 {}", pred.fits);
            println!(
                "split                {} {:?}",
                pred.split, pred.stage_layers
            );
            if let Some(r) = &run {
                print_run_cost(r);
            }
            if args.per_stage {
                super::predict_stages::print_rank_table(
                    &pred.ranks,
                    pred.active_params < pred.params,
                );
            }
        }
    }
    Ok(())
}

/// The title of a prediction's Gantt chart.
pub(crate) fn gantt_title(pred: &pplan::plan::predict::Prediction) -> String {
    format!(
        "{}: t={} p={} d={} b={} m={} {} v={}",
        pred.model,
        pred.tp,
        pred.pp,
        pred.dp,
        pred.micro_batch,
        pred.microbatches,
        pred.schedule,
        pred.chunks
    )
}

/// The run's lines of the table (`--tokens`).
pub(crate) fn print_run_cost(r: &pplan::plan::run_cost::RunCost) {
    println!(
        "training_tokens      {} ({} steps)",
        r.training_tokens, r.training_steps
    );
    println!("training_days        {:.2}", r.training_days);
    println!("gpu_hours            {:.0}", r.gpu_hours);
    if let Some(c) = r.cost_usd {
        println!("cost_usd             {c:.0}");
    }
}
