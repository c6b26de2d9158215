//! `pplan predict`: one training step of a model on a cluster.

use super::common::*;
use pplan::schedule::generators::ScheduleName;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub(crate) struct PredictArgs {
    /// A bundled model (gpt-1.7b ... gpt-1t, gpt3-175b, llama3-8b, llama3-70b, llama3-405b,
    /// mixtral-8x7b, mixtral-8x22b, qwen3-30b-a3b, qwen3-235b-a22b, deepseek-v3) or a Hugging
    /// Face config.json / Megatron-style JSON file.
    #[arg(long)]
    pub(crate) model: String,
    /// A bundled hardware profile (a100-80gb, h100-80gb, h200, h800, b200, b300, gb200-nvl72, gb300-nvl72) or
    /// a JSON profile.
    #[arg(long, default_value = "a100-80gb")]
    pub(crate) hardware: String,
    /// Total GPUs; must equal tp x cp x pp x dp.
    #[arg(long, value_parser = positive::<u64>)]
    pub(crate) gpus: u64,
    /// Tensor-parallel size t.
    #[arg(long, default_value_t = 1, value_parser = positive::<u64>)]
    pub(crate) tp: u64,
    /// Pipeline-parallel size p.
    #[arg(long, default_value_t = 1, value_parser = positive::<u64>)]
    pub(crate) pp: u64,
    /// Data-parallel size d (default gpus / (tp x cp x pp)).
    #[arg(long, value_parser = positive::<u64>)]
    pub(crate) dp: Option<u64>,
    /// Context-parallel size: each sequence split over this many ranks (Megatron-Core
    /// --context-parallel-size; needs --attention flash).
    #[arg(long, default_value_t = 1, value_parser = positive::<u64>)]
    pub(crate) cp: u64,
    /// Expert-parallel size (mixture-of-experts models): the routed experts split over this
    /// many ranks carved from tp x cp x dp (Megatron-Core --expert-model-parallel-size).
    #[arg(long, default_value_t = 1, value_parser = positive::<u64>)]
    pub(crate) ep: u64,
    /// Expert tensor-parallel size: 1 or --tp (Megatron-Core --expert-tensor-parallel-size).
    #[arg(long, default_value_t = 1, value_parser = positive::<u64>)]
    pub(crate) etp: u64,
    /// Global batch size B in sequences.
    #[arg(long, value_parser = positive::<u64>)]
    pub(crate) global_batch: u64,
    /// Micro-batch size b in sequences; must divide B / d.
    #[arg(long, default_value_t = 1, value_parser = positive::<u64>)]
    pub(crate) micro_batch: u64,
    /// Pipeline schedule (default: interleaved-1f1b when --chunks > 1, else 1f1b).
    #[arg(long)]
    pub(crate) schedule: Option<String>,
    /// Model chunks per pipeline device v (interleaving).
    #[arg(long, default_value_t = 1, value_parser = positive::<u64>)]
    pub(crate) chunks: u64,
    /// Activation recomputation: none, selective (Megatron: the attention core), full,
    /// torchtitan's selective-op (every second linear GEMM and the elementwise kernels) and
    /// selective-layer (every second layer whole), or Megatron-Core's recompute modules
    /// selective-norm-act (--recompute-modules layernorm moe_act) and selective-norm-moe
    /// (layernorm moe).
    #[arg(long, default_value = "full")]
    pub(crate) recompute: String,
    /// Sequence parallelism (Korthikanti et al. 2022).
    #[arg(long, value_enum, default_value = "off")]
    pub(crate) sequence_parallel: OnOff,
    /// Training sequence length in tokens. Default: the model's (a bundled model's, or a
    /// Megatron-style file's seq_length); a Hugging Face config.json has none, so 4096, or its
    /// max_position_embeddings when shorter (never the whole context window).
    #[arg(long, value_parser = positive::<u64>)]
    pub(crate) seq_len: Option<u64>,
    /// Start each stage's data-parallel gradient reduction when its last backward finishes
    /// (`on|off`; the bare flag means on).
    /// Default: on with --stack megatron-core, off with megatron-2021.
    #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "on")]
    pub(crate) overlap_grad_reduce: Option<OnOff>,
    /// Shard the optimizer state over the data-parallel group (ZeRO-1; `on|off`, the bare
    /// flag means on): a spelling of --zero 1 / --zero 0.
    #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "on")]
    pub(crate) zero1: Option<OnOff>,
    /// ZeRO stage: 0 replicated (DDP), 1 optimizer state sharded (distributed optimizer),
    /// 2 gradients too (reduce-scattered every micro-batch), 3 parameters too (FSDP: gathered
    /// layer by layer) [default: 0].
    #[arg(long)]
    pub(crate) zero: Option<String>,
    /// HSDP: replicas of the sharded state; the state is sharded over d x cp / R ranks and
    /// replicated R times (torchtitan data_parallel_replicate_degree); needs --zero 1, 2 or 3.
    #[arg(long, default_value_t = 1, value_parser = positive::<u64>)]
    pub(crate) dp_replicate: u64,
    /// Send pipeline activations whole from every tensor-parallel rank instead of with the
    /// scatter/gather optimisation.
    #[arg(long)]
    pub(crate) no_scatter_gather: bool,
    #[command(flatten)]
    pub(crate) stack: StackArgs,
    #[command(flatten)]
    pub(crate) run: RunArgs,
    /// A measured layer profile (JSON): transformer layers' forward/backward times and
    /// activation bytes come from it instead of the cost model (num_layers entries, or
    /// num_layers + 2 with the embedding first and the output layer last).
    #[arg(long)]
    pub(crate) profile: Option<PathBuf>,
    /// The pipeline devices share one GPU that runs one device's work at a time (as
    /// `pplan-exec run` does with PPLAN_CUDA_SHARE=serialize on a single GPU): compute actions
    /// and optimizer steps of all devices take the GPU in turn.
    #[arg(long)]
    pub(crate) shared_gpu: bool,
    /// How layers are split over the stages: even, or balanced (the partitioner's DP on the
    /// per-layer costs; kept only where it beats the even split).
    #[arg(long, default_value = "even")]
    pub(crate) partition: String,
    #[command(flatten)]
    pub(crate) split_rule: SplitRuleArgs,
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

fn predict_with_progress(args: PredictArgs, progress: &Progress) -> Result<(), CliError> {
    use pplan::cost::Recompute;
    use pplan::plan::predict::{predict, PredictError, PredictRequest};
    let (model, hw) = load_model_and_hardware(&args.model, args.seq_len, &args.hardware)?;
    let window = parse_gantt_window(args.gantt_window.as_deref())?;
    let run_request = args.run.parse()?;
    let recompute: Recompute = args
        .recompute
        .parse()
        .map_err(|e: String| CliError::Input(format!("--recompute: {e}")))?;
    let schedule = match &args.schedule {
        None => None,
        Some(s) => Some(
            s.parse::<ScheduleName>()
                .map_err(|e| CliError::Input(format!("--schedule: {e}")))?,
        ),
    };
    let mut req = PredictRequest::new(&model, &hw);
    req.gpus = args.gpus;
    req.tp = args.tp;
    req.pp = args.pp;
    req.dp = args.dp;
    req.cp = args.cp;
    req.ep = args.ep;
    req.etp = args.etp;
    req.global_batch = args.global_batch;
    req.micro_batch = args.micro_batch;
    req.schedule = schedule;
    req.chunks = args.chunks;
    req.recompute = recompute;
    req.sequence_parallel = args.sequence_parallel == OnOff::On;
    let zero =
        zero_stage(args.zero.as_deref(), args.zero1)?.unwrap_or(args.stack.preset.stack().zero);
    if args.stack.overlap_param_gather == Some(OnOff::On)
        && (!zero.shards_optimizer() || zero.shards_weights())
    {
        return input(
            "--overlap-param-gather on needs a sharded optimizer that gathers parameters after its step (--zero1, --zero 1 or 2); valid: add --zero1, or --overlap-param-gather off",
        );
    }
    req.dp_replicate = args.dp_replicate;
    if args.stack.tp_comm_overlap == Some(OnOff::On) && !req.sequence_parallel && args.tp > 1 {
        return input(
            "--tp-comm-overlap on needs --sequence-parallel on (Megatron-Core overlaps the reduce-scatter and all-gather that sequence parallelism uses); valid: add --sequence-parallel on, or --tp-comm-overlap off",
        );
    }
    req.stack = args
        .stack
        .apply(zero, !args.no_scatter_gather, args.overlap_grad_reduce, &hw)?;
    req.record_timeline = args.trace.is_some() || args.gantt.is_some();
    let profile = args.profile.as_deref().map(load_profile).transpose()?;
    req.profile = profile.as_ref();
    req.shared_gpu = args.shared_gpu;
    req.partition = args
        .partition
        .parse()
        .map_err(|e: String| CliError::Input(format!("--partition: {e}")))?;
    if let Some(rule) = args.split_rule.rule(&args.partition)? {
        req.partition = pplan::plan::predict::Split::Megatron(rule);
    }
    let phases = 1
        + u64::from(args.trace.is_some())
        + u64::from(args.gantt.is_some())
        + u64::from(args.output.is_some());
    let mut phase = 1;
    progress.phase(phase, phases, "building the costs and simulating the step");
    let pred = predict(&req).map_err(|e| match e {
        PredictError::Internal(m) => CliError::Internal(m),
        PredictError::Profile(m) => CliError::Input(format!(
            "--profile '{}': {m}",
            args.profile.as_deref().unwrap_or(Path::new("")).display()
        )),
        other => CliError::Input(other.to_string()),
    })?;
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
        let title = format!(
            "{}: t={} p={} d={} b={} m={} {} v={}",
            pred.model,
            pred.tp,
            pred.pp,
            pred.dp,
            pred.micro_batch,
            pred.microbatches,
            pred.schedule,
            pred.chunks
        );
        write_gantt(tl, title, "s".to_string(), 1e9, path, window)?;
    }
    if let Some(path) = &args.output {
        phase += 1;
        progress.phase(phase, phases, "writing the plan");
        write_plan(path, &model, &args.hardware, &pred, req.stack.cp_comm)?;
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
        Format::Json => match &run {
            None => print_json(&pred)?,
            Some(run) => {
                #[derive(serde::Serialize)]
                struct WithRun<'a> {
                    #[serde(flatten)]
                    pred: &'a pplan::plan::predict::Prediction,
                    #[serde(flatten)]
                    run: &'a pplan::plan::run_cost::RunCost,
                }
                print_json(&WithRun { pred: &pred, run })?
            }
        },
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
            println!("tokens_per_s         {:.0}", pred.tokens_per_s);
            if pred.active_params < pred.params {
                let (ep, etp) = (pred.ep, pred.etp);
                println!(
                    "experts              ep={ep} etp={etp}; params {:.2}B total, {:.2}B active (MFU counts active)",
                    pred.params as f64 / 1e9,
                    pred.active_params as f64 / 1e9
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
        }
    }
    Ok(())
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
