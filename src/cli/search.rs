//! `pplan search`: the fastest configuration that fits.

use super::common::*;
use pplan::schedule::generators::ScheduleName;
use std::path::PathBuf;

#[derive(clap::Args)]
pub(crate) struct PlanSearchArgs {
    /// Total GPUs n; every layout has t x p x d = n.
    #[arg(long, value_parser = positive::<u64>)]
    pub(crate) gpus: u64,
    /// A bundled model or a Hugging Face / Megatron-style JSON file (default: the Megatron-LM
    /// paper's 1T model).
    #[arg(long, default_value = "gpt-1t")]
    pub(crate) model: String,
    /// A bundled hardware profile (a100-80gb, h100-80gb, h100-96gb-500w, h200, h800, b200, b300, gb200-nvl72, gb300-nvl72) or
    /// a JSON profile.
    #[arg(long, default_value = "a100-80gb")]
    pub(crate) hardware: String,
    /// Global batch size B in sequences.
    #[arg(long, default_value_t = 3072, value_parser = positive::<u64>)]
    pub(crate) global_batch: u64,
    /// Training sequence length in tokens. Default: the model's (a bundled model's, or a
    /// Megatron-style file's seq_length); a Hugging Face config.json has none, so 4096, or its
    /// max_position_embeddings when shorter (never the whole context window).
    #[arg(long, value_parser = positive::<u64>)]
    pub(crate) seq_len: Option<u64>,
    /// How many ranked configurations to show.
    #[arg(long, default_value_t = 10, value_parser = positive::<usize>)]
    pub(crate) top: usize,
    /// Pin the tensor-parallel size t (unpinned: t divides a node's GPUs and the heads).
    #[arg(long, value_parser = positive::<u64>)]
    pub(crate) tp: Option<u64>,
    /// Pin the pipeline-parallel size p.
    #[arg(long, value_parser = positive::<u64>)]
    pub(crate) pp: Option<u64>,
    /// Pin the data-parallel size d.
    #[arg(long, value_parser = positive::<u64>)]
    pub(crate) dp: Option<u64>,
    /// Pin the context-parallel size (unpinned: 1, and with --attention flash every size
    /// that keeps t x cp inside an NVLink domain and splits the sequence evenly).
    #[arg(long, value_parser = positive::<u64>)]
    pub(crate) cp: Option<u64>,
    /// Pin the expert-parallel size (mixture-of-experts models; unpinned: every size that
    /// divides the expert count and tp x cp x dp / etp).
    #[arg(long, value_parser = positive::<u64>)]
    pub(crate) ep: Option<u64>,
    /// Pin the expert tensor-parallel size (MoE models; unpinned: 1 and tp).
    #[arg(long, value_parser = positive::<u64>)]
    pub(crate) etp: Option<u64>,
    /// Pin the micro-batch size b.
    #[arg(long, value_parser = positive::<u64>)]
    pub(crate) micro_batch: Option<u64>,
    /// Pin the schedule (unpinned: gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-h2, zbv,
    /// dualpipev, looped-bfs; pipedream and pipedream-2bw only when pinned).
    #[arg(long)]
    pub(crate) schedule: Option<String>,
    /// Pin the chunks per device v.
    #[arg(long, value_parser = positive::<u64>)]
    pub(crate) chunks: Option<u64>,
    /// Pin interleaved 1F1B's micro-batch group per virtual stage (Megatron-Core's
    /// --microbatch-group-size-per-virtual-pipeline-stage; searches interleaved-1f1b only).
    /// Unpinned: p where p divides the micro-batches m, else the smallest group Megatron-Core
    /// accepts.
    #[arg(long, value_parser = positive::<u64>)]
    pub(crate) microbatch_group_size_per_virtual_pipeline_stage: Option<u64>,
    /// Pin every stage's layers, in Megatron-Core's --pipeline-model-parallel-layout syntax
    /// (`E` embedding, `t` transformer layer, `m` multi-token prediction layer, `L` loss, `|`
    /// between stages, `*n` repeats): only candidates with p x v equal to its stage count
    /// (and, with `m`, the MTP stage in a rank's last virtual stage) are searched.
    #[arg(long, value_name = "LAYOUT")]
    pub(crate) pipeline_layout: Option<String>,
    /// Multi-token prediction depths of the model (Megatron-LM --mtp-num-layers; DeepSeek-V3
    /// trains 1), on the last stage unless --pipeline-layout's `m` places them. Default: the
    /// model's; 0 turns them off.
    #[arg(long, value_parser = count::<u32>, value_name = "N")]
    pub(crate) mtp_num_layers: Option<u32>,
    /// Pin recomputation: none, selective or full (searched), torchtitan's selective-op or
    /// selective-layer, or Megatron-Core's selective-norm-act, selective-norm-moe,
    /// selective-mla-up-proj, selective-mlp, selective-norm-mla-up-proj,
    /// selective-mla-up-proj-mlp or selective-norm-act-mla-up-proj.
    #[arg(long)]
    pub(crate) recompute: Option<String>,
    /// Pin sequence parallelism.
    #[arg(long, value_enum)]
    pub(crate) sequence_parallel: Option<OnOff>,
    /// Pin ZeRO-1 (optimizer state sharded over the data-parallel group): --zero 1 / 0.
    #[arg(long, value_enum)]
    pub(crate) zero1: Option<OnOff>,
    /// Pin the ZeRO stage 0-3 (unpinned: all four when more than one rank holds the weights).
    #[arg(long)]
    pub(crate) zero: Option<String>,
    /// HSDP replicas of the sharded state, for candidates with ZeRO >= 1 whose d it divides.
    #[arg(long, value_parser = positive::<u64>)]
    pub(crate) dp_replicate: Option<u64>,
    /// Overlap every candidate's data-parallel gradient reduction with its backward.
    /// Default: on with --stack megatron-core, off with megatron-2021.
    #[arg(long, value_enum)]
    pub(crate) overlap_grad_reduce: Option<OnOff>,
    #[command(flatten)]
    pub(crate) stack: StackFlags,
    #[command(flatten)]
    pub(crate) run: RunArgs,
    /// Simulate every feasible candidate (no pruning by the lower bound).
    #[arg(long)]
    pub(crate) exhaustive: bool,
    /// Layer splits to search: even, balanced (the partitioner's), or both (a balanced split
    /// that differs from the even one is an extra candidate).
    #[arg(long, default_value = "even")]
    pub(crate) partition: String,
    #[command(flatten)]
    pub(crate) split_rule: SplitRuleFlags,
    /// Write the best configuration as a plan file (plan.json).
    #[arg(long)]
    pub(crate) output: Option<PathBuf>,
    /// Draw the best configuration's step as a Gantt chart (FILE.svg or FILE.png), as
    /// `pplan predict --plan` draws the plan `--output` writes.
    #[arg(long, value_name = "FILE")]
    pub(crate) gantt: Option<PathBuf>,
    /// Write the best configuration's step as a Chrome trace (open in Perfetto).
    #[arg(long, value_name = "FILE")]
    pub(crate) trace: Option<PathBuf>,
    /// Output format: table, json, or csv (one row a ranked result, the JSON result fields as
    /// columns with their units in the header; RFC 4180).
    #[arg(long, value_enum, default_value_t)]
    pub(crate) format: SearchFormat,
    /// Show progress with an estimate of the time left on standard error even when it is not a
    /// terminal (on a terminal it appears by itself after a second).
    #[arg(long)]
    pub(crate) progress: bool,
}

/// `search`'s formats: the shared two and CSV.
#[derive(Clone, Copy, clap::ValueEnum, Default, PartialEq, Eq)]
pub(crate) enum SearchFormat {
    #[default]
    Table,
    Json,
    Csv,
}

pub(crate) fn cmd_search(args: PlanSearchArgs) -> Result<(), CliError> {
    use pplan::plan::search::{search, Pins, SearchError, SearchRequest};
    let started = std::time::Instant::now();
    let (mut model, hw) = load_model_and_hardware(&args.model, args.seq_len, &args.hardware)?;
    pplan::plan::flags::set_mtp_layers(args.mtp_num_layers, &mut model)?;
    let run_request = args.run.parse()?;
    let pins = Pins {
        tp: args.tp,
        pp: args.pp,
        dp: args.dp,
        cp: args.cp,
        ep: args.ep,
        etp: args.etp,
        micro_batch: args.micro_batch,
        schedule: args
            .schedule
            .as_deref()
            .map(|s| s.parse::<ScheduleName>())
            .transpose()
            .map_err(|e| CliError::Input(format!("--schedule: {e}")))?,
        chunks: args.chunks,
        recompute: args
            .recompute
            .as_deref()
            .map(|s| s.parse())
            .transpose()
            .map_err(|e: String| CliError::Input(format!("--recompute: {e}")))?,
        sequence_parallel: args.sequence_parallel.map(|x| x == OnOff::On),
        zero: zero_stage(args.zero.as_deref(), args.zero1)?,
        dp_replicate: args.dp_replicate,
        microbatch_group: args.microbatch_group_size_per_virtual_pipeline_stage,
    };
    let mut req = SearchRequest::new(&model, &hw, args.gpus, args.global_batch);
    req.top = args.top;
    req.pins = pins;
    req.exhaustive = args.exhaustive;
    req.stack = args.stack.apply(
        req.stack.zero,
        req.stack.scatter_gather,
        args.overlap_grad_reduce,
        &hw,
    )?;
    pplan::plan::flags::check_recipe(&req.stack, &model, req.pins.recompute)?;
    req.partition = args
        .partition
        .parse()
        .map_err(|e: String| CliError::Input(format!("--partition: {e}")))?;
    req.split_rule = args.split_rule.rule(&args.partition)?;
    if let Some(text) = &args.pipeline_layout {
        let layout = pplan::plan::predict::parse_layout(text)
            .map_err(|e| CliError::Input(format!("--pipeline-layout '{text}': {e}")))?;
        // The stage count is the layout's; the checks that need p and v run per candidate.
        let stages = layout.layers.len() as u64;
        layout
            .check(model.num_layers, model.mtp_layers, stages, 1)
            .map_err(|e| CliError::Input(format!("{e} ('{text}')")))?;
        req.layout_mtp_stage = layout.mtp_stage().map(|s| s as u32);
        req.layout = Some(layout.layers);
    }
    // Progress with an estimate of the time left: on a terminal after the first second, or
    // with --progress.
    let progress = Progress::new("search (simulating feasible candidates)", args.progress);
    let outcome = search(&req, Some(&|done, total| progress.update(done, total)));
    progress.finish();
    let outcome = outcome.map_err(|e| match e {
        SearchError::Internal(m) => CliError::Internal(m),
        other => CliError::Input(other.to_string()),
    })?;
    let elapsed_s = started.elapsed().as_secs_f64();
    if let Some(best) = outcome.results.first() {
        if let Some(path) = &args.output {
            write_plan(
                path,
                &model,
                &args.hardware,
                &best.prediction,
                &req.stack,
                None,
            )?;
        }
        if args.gantt.is_some() || args.trace.is_some() {
            // The best as its plan, predicted again with its timeline: what `predict --plan`
            // would draw.
            let plan = plan_of(&model, &args.hardware, &best.prediction, &req.stack, None)?;
            let flags = plan_predict_flags(&plan, &[], "the best configuration")?;
            let step = super::predict::predict_flags(&flags, Some(&plan), true)?;
            if let (Some(path), Some(tl)) = (&args.trace, &step.pred.timeline) {
                write_output(
                    path,
                    "--trace",
                    pplan::report::trace::to_json(tl).as_bytes(),
                )?;
            }
            if let (Some(path), Some(tl)) = (&args.gantt, &step.pred.timeline) {
                let title = super::predict::gantt_title(&step.pred);
                write_gantt(tl, title, "s".to_string(), 1e9, path, None)?;
            }
        }
    }
    // The run each result implies (--tokens), in result order.
    let runs: Vec<pplan::plan::run_cost::RunCost> = match run_request {
        None => Vec::new(),
        Some((tokens, price)) => outcome
            .results
            .iter()
            .map(|r| {
                let p = &r.prediction;
                pplan::plan::run_cost::run_cost(
                    tokens,
                    p.global_batch * model.seq_len,
                    p.step_time_s,
                    p.gpus,
                    price,
                )
            })
            .collect(),
    };
    match args.format {
        SearchFormat::Csv => print!("{}", super::search_csv::to_csv(&outcome, &runs)),
        SearchFormat::Json => {
            let mut v =
                serde_json::to_value(&outcome).map_err(|e| CliError::Internal(e.to_string()))?;
            v["elapsed_s"] = serde_json::json!(elapsed_s);
            if let Some(results) = v["results"].as_array_mut() {
                for (r, run) in results.iter_mut().zip(&runs) {
                    let fields =
                        serde_json::to_value(run).map_err(|e| CliError::Internal(e.to_string()))?;
                    if let (Some(obj), Some(add)) = (r.as_object_mut(), fields.as_object()) {
                        obj.extend(add.clone());
                    }
                }
            }
            print_json(&v)?;
        }
        SearchFormat::Table => {
            print_search_table(&outcome, elapsed_s);
            print_run_table(&outcome, &runs);
        }
    }
    Ok(())
}

pub(crate) fn print_search_table(o: &pplan::plan::search::SearchOutcome, elapsed_s: f64) {
    println!(
        "{} on {} x {}, global batch {}: {} candidates checked in {} (t, p, d) layouts, {} feasible, {} simulated, {} pruned by the lower bound",
        o.model, o.gpus, o.hardware, o.global_batch, o.evaluated, o.layouts, o.feasible, o.simulated, o.pruned
    );
    println!();
    // The context-parallel column only where some result splits its sequences.
    let show_cp = o.results.iter().any(|r| r.prediction.cp > 1);
    let cp_col = |v: &dyn std::fmt::Display| {
        if show_cp {
            format!(" {v:>3}")
        } else {
            String::new()
        }
    };
    // Expert-parallel columns only for a mixture-of-experts model.
    let show_ep = o
        .results
        .iter()
        .any(|r| r.prediction.active_params < r.prediction.params || r.prediction.ep > 1);
    let ep_col = |ep: &dyn std::fmt::Display, etp: &dyn std::fmt::Display| {
        if show_ep {
            format!(" {ep:>4} {etp:>3}")
        } else {
            String::new()
        }
    };
    // The recompute column as wide as its longest value (pinned modes have long names).
    let rw = o
        .results
        .iter()
        .map(|r| r.prediction.recompute.len())
        .fold(9, usize::max);
    println!(
        "{:>4} {:>4} {:>3} {:>5}{}{} {:>4} {:>5} {:<16} {:>2} {:<rw$} {:<3} {:<6} {:<8} {:>9} {:>8} {:>6} {:>6} {:>8} {:>8}",
        "rank", "p", "t", "d", cp_col(&"cp"), ep_col(&"ep", &"etp"), "b", "m", "schedule", "v", "recompute", "SP", "ZeRO", "split", "step (s)", "TFLOP/s", "MFU", "bubble", "peak GB", "headroom"
    );
    for r in &o.results {
        let p = &r.prediction;
        let on = |b: bool| if b { "on" } else { "off" };
        // The ZeRO stage, with the HSDP replicas when there are any (e.g. 3x2).
        let zero_col = |p: &pplan::plan::predict::Prediction| {
            if p.dp_replicate > 1 {
                format!("{}x{}", p.zero, p.dp_replicate)
            } else {
                p.zero.to_string()
            }
        };
        println!(
            "{:>4} {:>4} {:>3} {:>5}{}{} {:>4} {:>5} {:<16} {:>2} {:<rw$} {:<3} {:<6} {:<8} {:>9.3} {:>8.1} {:>6.3} {:>6.3} {:>8.1} {:>8.1}",
            r.rank,
            p.pp,
            p.tp,
            p.dp,
            cp_col(&p.cp),
            ep_col(&r.candidate.ep, &r.candidate.etp),
            p.micro_batch,
            p.microbatches,
            p.schedule,
            r.candidate.chunks,
            p.recompute,
            on(p.sequence_parallel),
            zero_col(p),
            p.split,
            p.step_time_s,
            p.tflops_per_gpu,
            p.mfu,
            p.bubble_fraction,
            p.peak_memory_bytes as f64 / 1e9,
            (p.memory_limit_bytes as f64 - p.peak_memory_bytes as f64) / 1e9
        );
    }
    println!();
    println!("rejected:");
    for r in &o.rejected {
        println!(
            "  {:>9} {}{} [{}]: {}",
            r.count,
            r.level,
            if r.count == 1 { "" } else { "s" },
            r.reason.code(),
            r.constraint
        );
    }
    println!(
        "searched in {elapsed_s:.2} s ({} schedules summarised for the memory check)",
        o.schedules_summarised
    );
}

/// With `--tokens`: each result's run in days, GPU-hours and cost.
fn print_run_table(
    o: &pplan::plan::search::SearchOutcome,
    runs: &[pplan::plan::run_cost::RunCost],
) {
    let Some(first) = runs.first() else {
        return;
    };
    println!();
    println!(
        "training run of {} tokens ({} steps at global batch {}):",
        first.training_tokens, first.training_steps, o.global_batch
    );
    println!(
        "{:>4} {:>10} {:>14} {:>14}",
        "rank", "days", "GPU-hours", "cost (USD)"
    );
    for (r, run) in o.results.iter().zip(runs) {
        let cost = run
            .cost_usd
            .map(|c| format!("{c:.0}"))
            .unwrap_or_else(|| "-".into());
        println!(
            "{:>4} {:>10.2} {:>14.0} {:>14}",
            r.rank, run.training_days, run.gpu_hours, cost
        );
    }
}
