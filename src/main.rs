//! The `pplan` command line: parses flags, calls the library, prints, maps errors to exit codes
//! (0 success, 2 bad input or infeasible request, 1 internal error).

use clap::{Parser, Subcommand, ValueEnum};
use pplan::gantt::{GanttError, GanttOptions};
use pplan::generators::{self, GenParams, ScheduleName};
use pplan::ir::{Placement, Schedule, WeightUpdate};
use pplan::sim::{self, Costs, SimOptions, SimResult, UnitCosts};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Nanoseconds per unit of the unit-cost flags: `--forward 1` is 1 ms in traces and charts,
/// unless the chunk count V does not divide 10^6; then a unit is V/gcd(V, 10^6) ms so that
/// every chunk's share is a whole number of nanoseconds and closed forms come out exact.
fn ns_per_unit(chunks: u32) -> u64 {
    const MS: u64 = 1_000_000;
    let (mut a, mut b) = (MS, chunks.max(1) as u64);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    MS * (chunks.max(1) as u64 / a)
}

#[derive(Parser)]
#[command(
    name = "pplan",
    version,
    about = "Simulate and plan pipeline-parallel training"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Replay a schedule (built-in or a CSV file) with unit costs and report makespan, bubble,
    /// per-device busy/idle time and memory; optionally draw a Gantt chart and write a trace.
    Simulate(SimulateArgs),
    /// Write a built-in schedule as a CSV file in PyTorch's compute_only format.
    Generate(GenerateArgs),
    /// Search for the fastest zero-bubble schedule (F, I, W passes, one stage per device) within
    /// a per-device limit on micro-batches in flight; the simulator judges every candidate.
    /// The report goes to standard output; the schedule to --output.
    ScheduleSearch(SearchArgs),
    /// Predict one training step of a model on a cluster: step time, TFLOP/s per GPU, MFU,
    /// bubble and peak memory, by simulating the whole step with the cost model's durations.
    Predict(PredictArgs),
    /// Write a plan file for the system that runs it: the executor's plan JSON, Megatron-LM
    /// arguments, a torchtitan TOML config, or the schedule as a PyTorch CSV.
    Emit(EmitArgs),
    /// Compare a predicted trace (pplan simulate/predict --trace) with a measured one (the
    /// executor's): step time, per-action and per-kind errors, bubble, start-time error.
    Validate(ValidateArgs),
    /// Find the fastest configuration that fits: every (t, p, d), micro-batch, schedule,
    /// chunk count, recomputation, sequence parallelism and ZeRO-1 setting is checked against
    /// the memory model, and the feasible ones are simulated best-first (docs/search.md).
    Search(PlanSearchArgs),
    /// Split a layer profile into pipeline stages minimising the slowest stage (compute over
    /// replicas + weight all-reduce + transfer), under a per-stage memory limit; exact DP or ILP
    /// (docs/partition.md).
    Partition(PartitionArgs),
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum OnOff {
    On,
    Off,
}

#[derive(clap::Args)]
struct PredictArgs {
    /// A bundled model (gpt-1.7b ... gpt-1t, gpt3-175b, llama3-8b, llama3-70b, llama3-405b) or a
    /// Hugging Face config.json / Megatron-style JSON file.
    #[arg(long)]
    model: String,
    /// A bundled hardware profile (a100-80gb, h100-80gb, h200) or a JSON profile.
    #[arg(long, default_value = "a100-80gb")]
    hardware: String,
    /// Total GPUs; must equal tp x pp x dp.
    #[arg(long)]
    gpus: u64,
    /// Tensor-parallel size t.
    #[arg(long, default_value_t = 1)]
    tp: u64,
    /// Pipeline-parallel size p.
    #[arg(long, default_value_t = 1)]
    pp: u64,
    /// Data-parallel size d (default gpus / (tp x pp)).
    #[arg(long)]
    dp: Option<u64>,
    /// Global batch size B in sequences.
    #[arg(long)]
    global_batch: u64,
    /// Micro-batch size b in sequences; must divide B / d.
    #[arg(long, default_value_t = 1)]
    micro_batch: u64,
    /// Pipeline schedule (default: interleaved-1f1b when --chunks > 1, else 1f1b).
    #[arg(long)]
    schedule: Option<String>,
    /// Model chunks per pipeline device v (interleaving).
    #[arg(long, default_value_t = 1)]
    chunks: u64,
    /// Activation recomputation: none, selective or full.
    #[arg(long, default_value = "full")]
    recompute: String,
    /// Sequence parallelism (Korthikanti et al. 2022).
    #[arg(long, value_enum, default_value = "off")]
    sequence_parallel: OnOff,
    /// Override the model's sequence length.
    #[arg(long)]
    seq_len: Option<u64>,
    /// Start each stage's data-parallel gradient reduction when its last backward finishes.
    #[arg(long)]
    overlap_grad_reduce: bool,
    /// Shard the optimizer state over the data-parallel group (ZeRO-1).
    #[arg(long)]
    zero1: bool,
    /// Send pipeline activations whole from every tensor-parallel rank instead of with the
    /// scatter/gather optimisation.
    #[arg(long)]
    no_scatter_gather: bool,
    /// A measured layer profile (JSON): transformer layers' forward/backward times and
    /// activation bytes come from it instead of the cost model (num_layers entries, or
    /// num_layers + 2 with the embedding first and the output layer last).
    #[arg(long)]
    profile: Option<PathBuf>,
    /// How layers are split over the stages: even, or balanced (the partitioner's DP on the
    /// per-layer costs; kept only where it beats the even split).
    #[arg(long, default_value = "even")]
    partition: String,
    /// Draw the simulated step as a Gantt chart (FILE.svg or FILE.png): compute, transfers,
    /// and a lane for tensor-parallel collectives, the gradient reduction and the optimizer.
    #[arg(long)]
    gantt: Option<PathBuf>,
    /// Write the simulated step as a Chrome trace (open in Perfetto).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Write the configuration as a plan file (plan.json) for `pplan emit` and the executor.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

#[derive(clap::Args)]
struct PlanSearchArgs {
    /// Total GPUs n; every layout has t x p x d = n.
    #[arg(long)]
    gpus: u64,
    /// A bundled model or a Hugging Face / Megatron-style JSON file (default: the Megatron-LM
    /// paper's 1T model).
    #[arg(long, default_value = "gpt-1t")]
    model: String,
    /// A bundled hardware profile or a JSON profile.
    #[arg(long, default_value = "a100-80gb")]
    hardware: String,
    /// Global batch size B in sequences.
    #[arg(long, default_value_t = 3072)]
    global_batch: u64,
    /// Override the model's sequence length.
    #[arg(long)]
    seq_len: Option<u64>,
    /// How many ranked configurations to show.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// Pin the tensor-parallel size t (unpinned: t divides a node's GPUs and the heads).
    #[arg(long)]
    tp: Option<u64>,
    /// Pin the pipeline-parallel size p.
    #[arg(long)]
    pp: Option<u64>,
    /// Pin the data-parallel size d.
    #[arg(long)]
    dp: Option<u64>,
    /// Pin the micro-batch size b.
    #[arg(long)]
    micro_batch: Option<u64>,
    /// Pin the schedule (unpinned: gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-h2, zbv,
    /// dualpipev, looped-bfs; pipedream and pipedream-2bw only when pinned).
    #[arg(long)]
    schedule: Option<String>,
    /// Pin the chunks per device v.
    #[arg(long)]
    chunks: Option<u64>,
    /// Pin recomputation: none, selective or full.
    #[arg(long)]
    recompute: Option<String>,
    /// Pin sequence parallelism.
    #[arg(long, value_enum)]
    sequence_parallel: Option<OnOff>,
    /// Pin ZeRO-1 (optimizer state sharded over the data-parallel group).
    #[arg(long, value_enum)]
    zero1: Option<OnOff>,
    /// Simulate every feasible candidate (no pruning by the lower bound).
    #[arg(long)]
    exhaustive: bool,
    /// Layer splits to search: even, balanced (the partitioner's), or both (a balanced split
    /// that differs from the even one is an extra candidate).
    #[arg(long, default_value = "even")]
    partition: String,
    /// Write the best configuration as a plan file (plan.json).
    #[arg(long)]
    output: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

#[derive(Clone, Copy, ValueEnum, Default)]
enum Format {
    #[default]
    Table,
    Json,
}

#[derive(clap::Args)]
struct ScheduleArgs {
    /// A schedule name (gpipe, 1f1b, interleaved-1f1b, pipedream, pipedream-2bw, zb-h1, zb-h2,
    /// zbv, dualpipev, looped-bfs) or a .csv file.
    #[arg(long)]
    schedule: String,
    /// Pipeline devices (ranks) P. Required for a built-in schedule; checked against a file.
    #[arg(long)]
    stages: Option<u32>,
    /// Micro-batches M (per mini-batch for pipedream/pipedream-2bw). Required for a built-in
    /// schedule; checked against a file.
    #[arg(long)]
    microbatches: Option<u32>,
    /// Model chunks per device V (the model is cut into P·V stages): interleaved-1f1b and
    /// looped-bfs take any V; zbv and dualpipev always use 2 (V placement).
    #[arg(long)]
    chunks: Option<u32>,
    /// Mini-batches run back to back without a flush by pipedream and pipedream-2bw (for a
    /// file with --weight-update 2bw: how many mini-batches the file holds).
    #[arg(long, default_value_t = 1)]
    steps: u32,
    /// PipeDream vertical sync: every stage uses the weight version stage 0 used.
    #[arg(long)]
    vertical_sync: bool,
    /// Stage-to-device mapping of a schedule file: loop (stage s on device s mod P) or v
    /// (device r holds stages r and 2P-1-r, as zbv and dualpipev files need).
    #[arg(long, default_value = "loop")]
    placement: String,
    /// Weight-update policy of a schedule file: flush, stash, stash-vsync or 2bw.
    #[arg(long)]
    weight_update: Option<String>,
    /// Timing of a schedule file's PyTorch `(F;B)OVERLAP_F_B` compounds: together (default; the
    /// compound starts when the inputs of all its sub-actions are present, as PyTorch's schedule
    /// lowering and simulator treat it) or apart (each sub-action starts on its own input, as
    /// PyTorch's runtime runs them when no OVERLAP_F_B function is registered).
    #[arg(long, value_enum)]
    overlap_f_b: Option<OverlapFB>,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum OverlapFB {
    Together,
    Apart,
}

#[derive(clap::Args)]
struct SimulateArgs {
    #[command(flatten)]
    schedule: ScheduleArgs,
    /// Stage costs from a measured layer profile (JSON) instead of unit costs: each stage's
    /// F/I/W times are sums over its layers (ms); excludes --forward/--backward/--p2p.
    #[arg(long, conflicts_with_all = ["forward", "backward", "backward_input", "backward_weight", "p2p"])]
    profile: Option<PathBuf>,
    /// With --profile: first layer of each of the P·V stages, e.g. 0,5,9 (default: even split).
    #[arg(long, requires = "profile")]
    boundaries: Option<String>,
    /// With --profile: a hardware profile (a100-80gb, h100-80gb, h200 or a JSON file) whose
    /// links time each transfer (last layer's output_bytes / bandwidth + latency); default: free.
    #[arg(long, requires = "profile")]
    hardware: Option<String>,
    /// Time of one micro-batch's forward through one device's whole share of the model
    /// (a chunk takes T/V). Unit-less; 1 unit is drawn as 1 ms.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    forward: f64,
    /// Time of one micro-batch's full backward through one device's share.
    #[arg(long, default_value_t = 2.0, allow_negative_numbers = true)]
    backward: f64,
    /// Input-gradient part of the backward (zero-bubble I); default half of --backward.
    #[arg(long, allow_negative_numbers = true)]
    backward_input: Option<f64>,
    /// Weight-gradient part of the backward (zero-bubble W); default the other half.
    #[arg(long, allow_negative_numbers = true)]
    backward_weight: Option<f64>,
    /// Time of one point-to-point activation or gradient transfer between devices.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    p2p: f64,
    /// Draw a Gantt chart: FILE.svg or FILE.png.
    #[arg(long)]
    gantt: Option<PathBuf>,
    /// Write a Chrome trace (open in Perfetto).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

#[derive(clap::Args)]
struct GenerateArgs {
    #[command(flatten)]
    schedule: ScheduleArgs,
    /// Output file (default: standard output).
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// Write CRLF line ends, byte for byte what PyTorch's _dump_csv writes.
    #[arg(long)]
    crlf: bool,
}

#[derive(clap::Args)]
struct SearchArgs {
    /// Pipeline devices (ranks) P, one stage each.
    #[arg(long)]
    stages: u32,
    /// Micro-batches M.
    #[arg(long)]
    microbatches: u32,
    /// Forward time of one micro-batch through one stage (1 unit is 1 ms).
    #[arg(long, allow_negative_numbers = true)]
    forward: f64,
    /// Input-gradient backward (I) time.
    #[arg(long, allow_negative_numbers = true)]
    backward_input: f64,
    /// Weight-gradient backward (W) time.
    #[arg(long, allow_negative_numbers = true)]
    backward_weight: f64,
    /// Point-to-point transfer time between neighbouring devices.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    p2p: f64,
    /// Most micro-batches in flight (activations stashed from F until W ends) on any device;
    /// default P, the peak of 1F1B and ZB-H1.
    #[arg(long)]
    memory_limit: Option<u32>,
    /// Seed of the local-improvement moves (same seed, same result).
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Local-improvement moves to try.
    #[arg(long, default_value_t = 4000)]
    iterations: u32,
    /// Write the schedule found here (PyTorch compute_only CSV).
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// Output format of the report.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

/// An error with its exit code.
enum CliError {
    /// Bad input or infeasible request: exit code 2.
    Input(String),
    /// A failure of pplan itself: exit code 1.
    Internal(String),
}

fn input<T>(msg: impl Into<String>) -> Result<T, CliError> {
    Err(CliError::Input(msg.into()))
}

/// Writing to a closed pipe (`pplan ... | head`) ends the process quietly, as other Unix tools
/// do, instead of panicking inside `println!` (Rust ignores SIGPIPE by default).
fn restore_default_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called first thing in `main`, before any other thread exists; setting a signal's
    // disposition to its default has no memory-safety preconditions.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    restore_default_sigpipe();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    let result = match cli.command {
        Command::Simulate(args) => cmd_simulate(args),
        Command::Generate(args) => cmd_generate(args),
        Command::ScheduleSearch(args) => cmd_schedule_search(args),
        Command::Predict(args) => cmd_predict(args),
        Command::Emit(args) => cmd_emit(args),
        Command::Validate(args) => cmd_validate(args),
        Command::Search(args) => cmd_search(args),
        Command::Partition(args) => cmd_partition(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Input(msg)) => {
            eprintln!("error: {msg}");
            ExitCode::from(2)
        }
        Err(CliError::Internal(msg)) => {
            eprintln!("internal error: {msg}");
            ExitCode::from(1)
        }
    }
}

/// A schedule and where it came from (for error messages).
struct Loaded {
    schedule: Schedule,
    label: String,
}

fn load_schedule(args: &ScheduleArgs) -> Result<Loaded, CliError> {
    let looks_like_file = args.schedule.ends_with(".csv") || Path::new(&args.schedule).is_file();
    if looks_like_file {
        return load_file(args);
    }
    let name: ScheduleName = args
        .schedule
        .parse()
        .map_err(|e: String| CliError::Input(format!("--schedule: {e}")))?;
    let Some(p) = args.stages else {
        return input(format!(
            "--stages is required with the built-in schedule '{name}'"
        ));
    };
    let Some(m) = args.microbatches else {
        return input(format!(
            "--microbatches is required with the built-in schedule '{name}'"
        ));
    };
    if args.weight_update.is_some() {
        return input(format!(
            "--weight-update applies to schedule files; '{name}' fixes its own policy"
        ));
    }
    if args.overlap_f_b.is_some() {
        return input(format!(
            "--overlap-f-b applies to schedule files; '{name}' has no OVERLAP_F_B compounds"
        ));
    }
    let params = GenParams {
        devices: p,
        microbatches: m,
        chunks: args.chunks.unwrap_or(1),
        steps: args.steps,
        vertical_sync: args.vertical_sync,
    };
    let schedule =
        generators::generate(name, params).map_err(|e| CliError::Input(e.to_string()))?;
    Ok(Loaded {
        schedule,
        label: name.to_string(),
    })
}

fn load_file(args: &ScheduleArgs) -> Result<Loaded, CliError> {
    let path = &args.schedule;
    let placement: Placement = args
        .placement
        .parse()
        .map_err(|e: String| CliError::Input(format!("--placement: {e}")))?;
    let bytes = std::fs::read(path)
        .map_err(|e| CliError::Input(format!("cannot read --schedule file '{path}': {e}")))?;
    let mut schedule = pplan::csv::parse_bytes(&bytes, placement)
        .map_err(|e| CliError::Input(format!("--schedule file '{path}': {e}")))?;
    if args.overlap_f_b == Some(OverlapFB::Apart) {
        schedule.compounds.clear();
    }
    let p = schedule.num_devices();
    let checks = [
        ("--stages", args.stages, p, "rows (devices)"),
        (
            "--microbatches",
            args.microbatches,
            schedule.num_microbatches,
            "micro-batches",
        ),
        (
            "--chunks",
            args.chunks,
            schedule.chunks(),
            "chunks per device",
        ),
    ];
    for (flag, given, found, what) in checks {
        if let Some(given) = given {
            if given != found {
                return input(format!(
                    "{flag} {given} does not match --schedule file '{path}', which has {found} {what}"
                ));
            }
        }
    }
    if let Some(policy) = &args.weight_update {
        schedule.weight_update = policy
            .parse::<WeightUpdate>()
            .map_err(|e| CliError::Input(format!("--weight-update: {e}")))?;
        schedule.microbatches_per_step = match schedule.weight_update {
            WeightUpdate::Flush => schedule.num_microbatches,
            WeightUpdate::Stash { .. } => 1,
            WeightUpdate::DoubleBuffered => {
                let m = schedule.num_microbatches;
                if args.steps == 0 || m % args.steps != 0 {
                    return input(format!(
                        "--steps {} must divide the {m} micro-batches of --schedule file '{path}' (2bw updates once per mini-batch of m/steps micro-batches)",
                        args.steps
                    ));
                }
                m / args.steps
            }
        };
    }
    pplan::validate(&schedule)
        .map_err(|e| CliError::Input(format!("--schedule file '{path}': {e}")))?;
    Ok(Loaded {
        schedule,
        label: path.clone(),
    })
}

/// Convert a unit-cost flag to integer nanoseconds, rejecting what is not a finite,
/// non-negative time below a billion units.
fn units_to_ns(flag: &str, value: f64, ns_per_unit: u64) -> Result<u64, CliError> {
    if !value.is_finite() || !(0.0..=1e9).contains(&value) {
        return input(format!(
            "{flag} {value}: expected a finite time between 0 and 1e9 units"
        ));
    }
    Ok((value * ns_per_unit as f64).round() as u64)
}

#[derive(Serialize)]
struct DeviceReport {
    device: u32,
    busy: f64,
    idle: f64,
    peak_inflight_microbatches: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    peak_memory_bytes: Option<u64>,
    peak_weight_versions: u32,
}

#[derive(Serialize)]
struct SimulateReport {
    schedule: String,
    stages: u32,
    microbatches: u32,
    chunks: u32,
    actions: u64,
    makespan: f64,
    bubble_fraction: f64,
    devices: Vec<DeviceReport>,
}

fn report(
    label: &str,
    s: &Schedule,
    r: &SimResult,
    scale: u64,
    memory_known: bool,
) -> SimulateReport {
    let units = |ns: u64| ns as f64 / scale as f64;
    SimulateReport {
        schedule: label.to_string(),
        stages: s.num_devices(),
        microbatches: s.num_microbatches,
        chunks: s.chunks(),
        actions: r.actions,
        makespan: units(r.makespan_ns),
        bubble_fraction: r.bubble_fraction,
        devices: r
            .devices
            .iter()
            .enumerate()
            .map(|(i, d)| DeviceReport {
                device: i as u32,
                busy: units(d.busy_ns),
                idle: units(d.idle_ns),
                peak_inflight_microbatches: d.peak_inflight_microbatches,
                peak_memory_bytes: memory_known.then_some(d.peak_memory_bytes),
                peak_weight_versions: d.peak_weight_versions,
            })
            .collect(),
    }
}

fn print_table(rep: &SimulateReport) {
    println!(
        "schedule {}: {} devices, {} micro-batches, {} chunk(s) per device, {} actions",
        rep.schedule, rep.stages, rep.microbatches, rep.chunks, rep.actions
    );
    println!("makespan        {}", rep.makespan);
    println!("bubble_fraction {:.6}", rep.bubble_fraction);
    println!();
    println!("device       busy       idle  peak_inflight  weight_versions");
    for d in &rep.devices {
        println!(
            "{:>6} {:>10} {:>10} {:>14} {:>16}",
            d.device, d.busy, d.idle, d.peak_inflight_microbatches, d.peak_weight_versions
        );
    }
}

fn write_output(path: &Path, flag: &str, contents: &[u8]) -> Result<(), CliError> {
    std::fs::write(path, contents)
        .map_err(|e| CliError::Input(format!("{flag}: cannot write '{}': {e}", path.display())))
}

fn cmd_simulate(args: SimulateArgs) -> Result<(), CliError> {
    let loaded = load_schedule(&args.schedule)?;
    let s = &loaded.schedule;
    if let Some(path) = &args.profile {
        let profile = load_profile(path)?;
        let costs = simulate_profile_costs(&args, &profile, s)?;
        return run_simulation(&args, &loaded, &costs, 1_000_000, true);
    }
    let scale = ns_per_unit(s.chunks());
    let unit = UnitCosts {
        forward_ns: units_to_ns("--forward", args.forward, scale)?,
        backward_ns: units_to_ns("--backward", args.backward, scale)?,
        backward_input_ns: args
            .backward_input
            .map(|v| units_to_ns("--backward-input", v, scale))
            .transpose()?,
        backward_weight_ns: args
            .backward_weight
            .map(|v| units_to_ns("--backward-weight", v, scale))
            .transpose()?,
        p2p_ns: units_to_ns("--p2p", args.p2p, scale)?,
    };
    let costs = Costs::uniform(s.num_stages, s.num_devices(), unit);
    run_simulation(&args, &loaded, &costs, scale, false)
}

/// `simulate --profile`: stage costs from the profile's layers, cut evenly or at --boundaries.
fn simulate_profile_costs(
    args: &SimulateArgs,
    profile: &pplan::profile::LayerProfile,
    s: &Schedule,
) -> Result<Costs, CliError> {
    let layers = profile.layers.len().min(u32::MAX as usize) as u32;
    let boundaries = match &args.boundaries {
        None => {
            if layers < s.num_stages {
                return input(format!(
                    "--profile has {layers} layers, fewer than the schedule's {} stages; every stage needs a layer",
                    s.num_stages
                ));
            }
            pplan::profile::even_boundaries(layers, s.num_stages)
        }
        Some(text) => {
            let b = text
                .split(',')
                .map(|x| x.trim().parse::<u32>())
                .collect::<Result<Vec<u32>, _>>()
                .map_err(|e| {
                    CliError::Input(format!(
                        "--boundaries '{text}': {e}; expected comma-separated layer indices, e.g. 0,5,9"
                    ))
                })?;
            pplan::profile::check_boundaries(&b, layers, s.num_stages)
                .map_err(|e| CliError::Input(format!("--boundaries '{text}': {e}")))?;
            b
        }
    };
    let hw = args
        .hardware
        .as_deref()
        .map(pplan::hardware::Hardware::load)
        .transpose()
        .map_err(|e| CliError::Input(format!("--hardware: {e}")))?;
    Ok(pplan::profile::stage_costs(
        profile,
        &boundaries,
        s.num_devices(),
        |st| s.device_of(st),
        hw.as_ref(),
    ))
}

/// Simulate `loaded` with `costs` (`scale` ns per reported unit) and print or write the results.
fn run_simulation(
    args: &SimulateArgs,
    loaded: &Loaded,
    costs: &Costs,
    scale: u64,
    memory_known: bool,
) -> Result<(), CliError> {
    let s = &loaded.schedule;
    let record = args.trace.is_some() || args.gantt.is_some();
    let r = sim::simulate(
        s,
        costs,
        SimOptions {
            record_timeline: record,
            max_events: None,
        },
    )
    .map_err(|e| match e {
        sim::SimError::EventLimit { .. } => CliError::Internal(e.to_string()),
        e => CliError::Input(format!("{}: {e}", loaded.label)),
    })?;
    if let (Some(path), Some(tl)) = (&args.trace, &r.timeline) {
        write_output(path, "--trace", pplan::trace::to_json(tl).as_bytes())?;
    }
    if let (Some(path), Some(tl)) = (&args.gantt, &r.timeline) {
        let unit_label = if scale == 1_000_000 {
            "ms (1 unit)".to_string()
        } else {
            format!("units ({} ms each)", scale / 1_000_000)
        };
        let title = format!(
            "{}: p={}, m={}, v={}",
            loaded.label,
            s.num_devices(),
            s.num_microbatches,
            s.chunks()
        );
        write_gantt(tl, title, unit_label, 1e6, path)?;
    }
    let rep = report(&loaded.label, s, &r, scale, memory_known);
    match args.format {
        Format::Json => println!(
            "{}",
            serde_json::to_string(&rep).map_err(|e| CliError::Internal(e.to_string()))?
        ),
        Format::Table => print_table(&rep),
    }
    Ok(())
}

/// Draw `tl` to `path` (.svg or .png) for `--gantt`.
fn write_gantt(
    tl: &pplan::sim::Timeline,
    title: String,
    unit_label: String,
    ns_per_unit: f64,
    path: &Path,
) -> Result<(), CliError> {
    let opts = GanttOptions {
        title,
        unit_label,
        ns_per_unit,
        ..GanttOptions::default()
    };
    pplan::gantt::write_file(tl, &opts, path).map_err(|e| match e {
        GanttError::Draw(_) | GanttError::Png(_) | GanttError::Font => {
            CliError::Internal(format!("--gantt: {e}"))
        }
        e => CliError::Input(format!("--gantt: {e}")),
    })
}

fn cmd_generate(args: GenerateArgs) -> Result<(), CliError> {
    let loaded = load_schedule(&args.schedule)?;
    let text = if args.crlf {
        pplan::csv::write_torch(&loaded.schedule)
    } else {
        pplan::csv::write(&loaded.schedule)
    };
    if loaded.schedule.placement == Placement::V {
        eprintln!(
            "note: {} uses V placement (device r holds stages r and 2P-1-r); read the file back with --placement v",
            loaded.label
        );
    }
    match &args.output {
        Some(path) => write_output(path, "--output", text.as_bytes()),
        None => {
            print!("{text}");
            Ok(())
        }
    }
}

#[derive(Serialize)]
struct SearchReport {
    stages: u32,
    microbatches: u32,
    memory_limit: u32,
    seed: u64,
    makespan: f64,
    constructed_makespan: f64,
    zb_h1_makespan: f64,
    bubble_fraction: f64,
    peak_inflight_microbatches: u32,
    constructions: u32,
    moves_tried: u32,
    moves_kept: u32,
    moves_improving: u32,
}

fn cmd_schedule_search(args: SearchArgs) -> Result<(), CliError> {
    use pplan::schedule_search::{search, SearchError, SearchParams};
    let scale = ns_per_unit(1);
    let limit = args.memory_limit.unwrap_or(args.stages);
    let params = SearchParams {
        devices: args.stages,
        microbatches: args.microbatches,
        forward_ns: units_to_ns("--forward", args.forward, scale)?,
        backward_input_ns: units_to_ns("--backward-input", args.backward_input, scale)?,
        backward_weight_ns: units_to_ns("--backward-weight", args.backward_weight, scale)?,
        p2p_ns: units_to_ns("--p2p", args.p2p, scale)?,
        memory_limit: limit,
        seed: args.seed,
        iterations: args.iterations,
    };
    let found = search(&params).map_err(|e| match e {
        SearchError::Zero { .. }
        | SearchError::TooLarge { .. }
        | SearchError::TooManyIterations { .. } => CliError::Input(e.to_string()),
        e => CliError::Internal(e.to_string()),
    })?;
    let zb = generators::zb_h1(args.stages, args.microbatches);
    let zb_r = sim::simulate(
        &zb,
        &params.costs(),
        SimOptions {
            record_timeline: false,
            max_events: None,
        },
    )
    .map_err(|e| CliError::Internal(format!("zb-h1: {e}")))?;
    if let Some(path) = &args.output {
        write_output(
            path,
            "--output",
            pplan::csv::write(&found.schedule).as_bytes(),
        )?;
    }
    let units = |ns: u64| ns as f64 / scale as f64;
    let rep = SearchReport {
        stages: args.stages,
        microbatches: args.microbatches,
        memory_limit: limit,
        seed: args.seed,
        makespan: units(found.makespan_ns),
        constructed_makespan: units(found.constructed_makespan_ns),
        zb_h1_makespan: units(zb_r.makespan_ns),
        bubble_fraction: found.bubble_fraction,
        peak_inflight_microbatches: found.peak_inflight_microbatches,
        constructions: found.constructions,
        moves_tried: found.moves_tried,
        moves_kept: found.moves_kept,
        moves_improving: found.moves_improving,
    };
    match args.format {
        Format::Json => println!(
            "{}",
            serde_json::to_string(&rep).map_err(|e| CliError::Internal(e.to_string()))?
        ),
        Format::Table => {
            println!(
                "schedule-search: {} devices, {} micro-batches, memory limit {} micro-batches in flight, seed {}",
                rep.stages, rep.microbatches, rep.memory_limit, rep.seed
            );
            println!("makespan              {}", rep.makespan);
            println!("constructed makespan  {}", rep.constructed_makespan);
            println!("zb-h1 makespan        {} (same costs)", rep.zb_h1_makespan);
            println!("bubble_fraction       {:.6}", rep.bubble_fraction);
            println!("peak_inflight         {}", rep.peak_inflight_microbatches);
            println!(
                "moves                 {} tried, {} kept, {} improving",
                rep.moves_tried, rep.moves_kept, rep.moves_improving
            );
        }
    }
    Ok(())
}

/// `--model` (with an optional `--seq-len` override) and `--hardware`, as predict and search read them.
fn load_model_and_hardware(
    model: &str,
    seq_len: Option<u64>,
    hardware: &str,
) -> Result<(pplan::model::Model, pplan::hardware::Hardware), CliError> {
    let mut model = pplan::model::Model::load(model).map_err(|e| CliError::Input(e.to_string()))?;
    if let Some(len) = seq_len {
        model.seq_len = len;
        model
            .check()
            .map_err(|e| CliError::Input(format!("--seq-len {len}: {e}")))?;
    }
    let hw =
        pplan::hardware::Hardware::load(hardware).map_err(|e| CliError::Input(e.to_string()))?;
    Ok((model, hw))
}

fn cmd_predict(args: PredictArgs) -> Result<(), CliError> {
    use pplan::cost::{CostOptions, Recompute};
    use pplan::predict::{predict, PredictError, PredictRequest};
    let (model, hw) = load_model_and_hardware(&args.model, args.seq_len, &args.hardware)?;
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
    req.global_batch = args.global_batch;
    req.micro_batch = args.micro_batch;
    req.schedule = schedule;
    req.chunks = args.chunks;
    req.recompute = recompute;
    req.sequence_parallel = args.sequence_parallel == OnOff::On;
    req.options = CostOptions {
        overlap_grad_reduce: args.overlap_grad_reduce,
        zero1: args.zero1,
        scatter_gather: !args.no_scatter_gather,
        ..CostOptions::default()
    };
    req.record_timeline = args.trace.is_some() || args.gantt.is_some();
    let profile = args.profile.as_deref().map(load_profile).transpose()?;
    req.profile = profile.as_ref();
    req.partition = args
        .partition
        .parse()
        .map_err(|e: String| CliError::Input(format!("--partition: {e}")))?;
    let pred = predict(&req).map_err(|e| match e {
        PredictError::Internal(m) => CliError::Internal(m),
        PredictError::Profile(m) => CliError::Input(format!(
            "--profile '{}': {m}",
            args.profile.as_deref().unwrap_or(Path::new("")).display()
        )),
        other => CliError::Input(other.to_string()),
    })?;
    if let (Some(path), Some(tl)) = (&args.trace, &pred.timeline) {
        write_output(path, "--trace", pplan::trace::to_json(tl).as_bytes())?;
    }
    if let (Some(path), Some(tl)) = (&args.gantt, &pred.timeline) {
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
        write_gantt(tl, title, "s".to_string(), 1e9, path)?;
    }
    if let Some(path) = &args.output {
        write_plan(path, &model, &args.hardware, &pred)?;
    }
    match args.format {
        Format::Json => println!(
            "{}",
            serde_json::to_string(&pred).map_err(|e| CliError::Internal(e.to_string()))?
        ),
        Format::Table => {
            println!(
                "{} on {} x {}: t={} p={} d={} b={} m={} {} v={} recompute={} sp={}",
                pred.model,
                pred.gpus,
                pred.hardware,
                pred.tp,
                pred.pp,
                pred.dp,
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
            println!("bubble_fraction      {:.4}", pred.bubble_fraction);
            println!(
                "peak_memory_bytes    {} ({:.1} GB of {:.1} GB)",
                pred.peak_memory_bytes,
                pred.peak_memory_bytes as f64 / 1e9,
                pred.memory_limit_bytes as f64 / 1e9
            );
            println!("fits                 {}", pred.fits);
            println!(
                "split                {} {:?}",
                pred.split, pred.stage_layers
            );
        }
    }
    Ok(())
}

#[derive(clap::Args)]
struct EmitArgs {
    /// The plan file (plan.json from `pplan predict/search --output`).
    #[arg(long)]
    plan: PathBuf,
    /// executor (plan JSON), megatron (Megatron-LM arguments), torchtitan (TOML) or csv
    /// (PyTorch compute_only schedule).
    #[arg(long)]
    target: String,
    /// Output file (default: standard output).
    #[arg(long, short)]
    output: Option<PathBuf>,
    /// torchtitan: where to write the schedule CSV when no PyTorch schedule class runs the
    /// plan's order (default: beside --output, named OUTPUT_STEM.schedule.csv).
    #[arg(long)]
    schedule_csv: Option<PathBuf>,
}

fn cmd_emit(args: EmitArgs) -> Result<(), CliError> {
    use pplan::emit::{emit, EmitError, Target};
    let target: Target = args
        .target
        .parse()
        .map_err(|e: String| CliError::Input(format!("--target: {e}")))?;
    let origin = args.plan.display().to_string();
    let text = std::fs::read_to_string(&args.plan)
        .map_err(|e| CliError::Input(format!("cannot read --plan file '{origin}': {e}")))?;
    let plan = pplan::plan::Plan::from_json(&text, &origin)
        .map_err(|e| CliError::Input(format!("--plan: {e}")))?;
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

#[derive(clap::Args)]
struct ValidateArgs {
    /// The predicted Chrome trace (pplan simulate/predict --trace).
    #[arg(long)]
    predicted: PathBuf,
    /// The measured Chrome trace (events of several steps carry args.step).
    #[arg(long)]
    measured: PathBuf,
    /// Warm-up steps to discard from each trace (default: 1 when a trace has several steps).
    #[arg(long)]
    skip_steps: Option<usize>,
    /// Compare the common actions even when the two schedules' compute actions differ.
    #[arg(long)]
    allow_unmatched: bool,
    /// Draw predicted (upper lane) against measured (lower lane) per device: FILE.svg or FILE.png.
    #[arg(long)]
    gantt: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

fn cmd_validate(args: ValidateArgs) -> Result<(), CliError> {
    use pplan::compare::{compare, parse_events, CompareOptions};
    let read = |flag: &str, path: &Path| -> Result<Vec<pplan::trace::TraceEvent>, CliError> {
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
        pplan::gantt::write_file(&c.overlay, &opts, path).map_err(|e| match e {
            GanttError::Draw(_) | GanttError::Png(_) | GanttError::Font => {
                CliError::Internal(format!("--gantt: {e}"))
            }
            e => CliError::Input(format!("--gantt: {e}")),
        })?;
    }
    match args.format {
        Format::Json => println!(
            "{}",
            serde_json::to_string(&c).map_err(|e| CliError::Internal(e.to_string()))?
        ),
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

/// Write `pred` as a plan file; the schedule is regenerated from its name, p, m and v.
fn write_plan(
    path: &Path,
    model: &pplan::model::Model,
    hardware: &str,
    pred: &pplan::predict::Prediction,
) -> Result<(), CliError> {
    let name: ScheduleName = pred
        .schedule
        .parse()
        .map_err(|e: String| CliError::Internal(e))?;
    let schedule = generators::generate(
        name,
        GenParams::new(pred.pp as u32, pred.microbatches as u32).chunks(pred.chunks as u32),
    )
    .map_err(|e| CliError::Internal(format!("--output: {e}")))?;
    let plan = pplan::plan::plan_from_prediction(model, hardware, pred, &schedule);
    write_output(path, "--output", plan.to_json().as_bytes())
}

fn cmd_search(args: PlanSearchArgs) -> Result<(), CliError> {
    use pplan::search::{search, Pins, SearchError, SearchRequest};
    use std::io::IsTerminal;
    use std::sync::OnceLock;
    let started = std::time::Instant::now();
    let (model, hw) = load_model_and_hardware(&args.model, args.seq_len, &args.hardware)?;
    let pins = Pins {
        tp: args.tp,
        pp: args.pp,
        dp: args.dp,
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
        zero1: args.zero1.map(|x| x == OnOff::On),
    };
    let mut req = SearchRequest::new(&model, &hw, args.gpus, args.global_batch);
    req.top = args.top;
    req.pins = pins;
    req.exhaustive = args.exhaustive;
    req.partition = args
        .partition
        .parse()
        .map_err(|e: String| CliError::Input(format!("--partition: {e}")))?;
    // A progress bar only for searches that outlast a second, and only on a terminal.
    let bar: OnceLock<indicatif::ProgressBar> = OnceLock::new();
    let terminal = std::io::stderr().is_terminal();
    let progress = |done: u64, total: u64| {
        if terminal && started.elapsed().as_secs_f64() > 1.0 {
            let b = bar.get_or_init(|| {
                let b = indicatif::ProgressBar::with_draw_target(
                    Some(total),
                    indicatif::ProgressDrawTarget::stderr(),
                );
                b.set_message("simulating feasible candidates (best lower bound first)");
                b
            });
            b.set_position(done);
        }
    };
    let outcome = search(&req, Some(&progress)).map_err(|e| match e {
        SearchError::Internal(m) => CliError::Internal(m),
        other => CliError::Input(other.to_string()),
    })?;
    if let Some(b) = bar.get() {
        b.finish_and_clear();
    }
    let elapsed_s = started.elapsed().as_secs_f64();
    if let (Some(path), Some(best)) = (&args.output, outcome.results.first()) {
        write_plan(path, &model, &args.hardware, &best.prediction)?;
    }
    match args.format {
        Format::Json => {
            let mut v =
                serde_json::to_value(&outcome).map_err(|e| CliError::Internal(e.to_string()))?;
            v["elapsed_s"] = serde_json::json!(elapsed_s);
            println!(
                "{}",
                serde_json::to_string(&v).map_err(|e| CliError::Internal(e.to_string()))?
            );
        }
        Format::Table => print_search_table(&outcome, elapsed_s),
    }
    Ok(())
}

/// Read a `--profile` file; errors name the file and the field.
fn load_profile(path: &Path) -> Result<pplan::profile::LayerProfile, CliError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Input(format!("cannot read --profile file '{origin}': {e}")))?;
    pplan::profile::LayerProfile::from_json(&text, &origin)
        .map_err(|e| CliError::Input(format!("--profile: {e}")))
}

fn print_search_table(o: &pplan::search::SearchOutcome, elapsed_s: f64) {
    println!(
        "{} on {} x {}, global batch {}: {} candidates checked in {} (t, p, d) layouts, {} feasible, {} simulated, {} pruned by the lower bound",
        o.model, o.gpus, o.hardware, o.global_batch, o.evaluated, o.layouts, o.feasible, o.simulated, o.pruned
    );
    println!();
    println!(
        "{:>4} {:>4} {:>3} {:>5} {:>4} {:>5} {:<16} {:>2} {:<9} {:<3} {:<6} {:<8} {:>9} {:>8} {:>6} {:>6} {:>8} {:>8}",
        "rank", "p", "t", "d", "b", "m", "schedule", "v", "recompute", "SP", "ZeRO-1", "split", "step (s)", "TFLOP/s", "MFU", "bubble", "peak GB", "headroom"
    );
    for r in &o.results {
        let p = &r.prediction;
        let on = |b: bool| if b { "on" } else { "off" };
        println!(
            "{:>4} {:>4} {:>3} {:>5} {:>4} {:>5} {:<16} {:>2} {:<9} {:<3} {:<6} {:<8} {:>9.3} {:>8.1} {:>6.3} {:>6.3} {:>8.1} {:>8.1}",
            r.rank,
            p.pp,
            p.tp,
            p.dp,
            p.micro_batch,
            p.microbatches,
            p.schedule,
            r.candidate.chunks,
            p.recompute,
            on(p.sequence_parallel),
            on(p.zero1),
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

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum PartitionMethod {
    Dp,
    Ilp,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
enum IlpBackendArg {
    Microlp,
    Highs,
}

#[derive(clap::Args)]
struct PartitionArgs {
    /// Layer profile (JSON: {"layers":[{"name","forward_ms","backward_ms","weight_bytes",
    /// "activation_bytes","output_bytes"}]}).
    #[arg(long)]
    profile: PathBuf,
    /// Pipeline stages P.
    #[arg(long)]
    stages: usize,
    /// dp (exact dynamic program) or ilp (integer program seeded with the DP; proves the optimum
    /// or reports the gap).
    #[arg(long, value_enum, default_value = "dp")]
    method: PartitionMethod,
    /// Per-device memory limit in bytes: weights x --weight-memory-factor + activations x
    /// micro-batches in flight.
    #[arg(long)]
    memory_limit: Option<u64>,
    /// Static bytes per byte of weight_bytes (8 = 16-bit weights with mixed-precision Adam:
    /// 2 weight + 2 gradient + 12 optimizer bytes per parameter); 1 when weight_bytes already is
    /// the whole static footprint.
    #[arg(long, default_value_t = pplan::partition::DEFAULT_WEIGHT_MEMORY_FACTOR)]
    weight_memory_factor: u64,
    /// Micro-batches in flight per stage: 1f1b (stage s holds min(P-s, M)), gpipe (M), or a number.
    #[arg(long, default_value = "1f1b")]
    in_flight: String,
    /// Micro-batches per step M (default P).
    #[arg(long)]
    microbatches: Option<u64>,
    /// Devices N >= P; stages are replicated (data parallelism inside a stage, PipeDream's
    /// "15-1" configurations) to use all of them. Default P.
    #[arg(long)]
    devices: Option<usize>,
    /// Relative speed of each device in pipeline order, comma-separated (1 = the profile's speed).
    #[arg(long, value_delimiter = ',')]
    device_speeds: Option<Vec<f64>>,
    /// Link numbers from a hardware profile (a100-80gb, h100-80gb, h200, or a JSON file): NVLink
    /// inside a node, NICs across nodes.
    #[arg(long)]
    hardware: Option<String>,
    /// Devices per node for the two link levels (default: the hardware's GPUs per node).
    #[arg(long)]
    gpus_per_node: Option<usize>,
    /// One link for every transfer instead: bandwidth in GB/s (10^9 bytes/s).
    #[arg(long, conflicts_with = "hardware")]
    p2p_gb_per_s: Option<f64>,
    /// Latency of that link in microseconds.
    #[arg(long, default_value_t = 0.0, requires = "p2p_gb_per_s")]
    p2p_latency_us: f64,
    /// ILP: stop after this many seconds and report the incumbent, the bound and the gap.
    #[arg(long, default_value_t = 60.0)]
    time_limit: f64,
    /// ILP backend (highs needs a build with --features highs).
    #[arg(long, value_enum, default_value = "microlp")]
    solver: IlpBackendArg,
    /// ILP without the DP's bound, warm start and windows (for experiments).
    #[arg(long)]
    no_seed: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

#[derive(Serialize)]
struct PartitionReport {
    method: &'static str,
    solver: Option<&'static str>,
    layers: usize,
    stages: usize,
    devices: usize,
    boundaries: Vec<usize>,
    replicas: Vec<usize>,
    config: String,
    stage_times_ms: Vec<f64>,
    bottleneck_ms: f64,
    stage_memory_bytes: Vec<u128>,
    memory_limit_bytes: Option<u64>,
    optimal: bool,
    gap: f64,
    best_bound_ms: f64,
    status: String,
}

fn cmd_partition(args: PartitionArgs) -> Result<(), CliError> {
    use pplan::partition::{self, Backend, IlpOptions, InFlight, Link, PartitionError, Problem};
    let origin = args.profile.display().to_string();
    let text = std::fs::read_to_string(&args.profile)
        .map_err(|e| CliError::Input(format!("cannot read --profile '{origin}': {e}")))?;
    let profile = pplan::profile::LayerProfile::from_json(&text, &origin)
        .map_err(|e| CliError::Input(format!("--profile {e}")))?;
    if args.stages == 0 {
        return input("--stages 0: valid: at least 1");
    }
    let mut pb = Problem::from_profile(&profile, args.stages);
    pb.memory_limit_bytes = args.memory_limit;
    pb.weight_memory_factor = args.weight_memory_factor;
    pb.in_flight = args
        .in_flight
        .parse::<InFlight>()
        .map_err(|e| CliError::Input(format!("--in-flight: {e}")))?;
    if let Some(m) = args.microbatches {
        if m == 0 {
            return input("--microbatches 0: valid: at least 1");
        }
        pb.microbatches = m;
    }
    pb.devices = args.devices.unwrap_or(args.stages);
    if let Some(speeds) = args.device_speeds {
        pb.device_speeds = speeds;
    }
    if let Some(hw) = &args.hardware {
        let hw = pplan::hardware::Hardware::load(hw).map_err(|e| CliError::Input(e.to_string()))?;
        pb.gpus_per_node = hw.node.gpus_per_node as usize;
        pb.intra_node = Link {
            bandwidth_bytes_per_s: hw.nvlink_bytes_per_s(),
            latency_s: hw.node.nvlink_latency_s,
        };
        pb.inter_node = Link {
            bandwidth_bytes_per_s: hw.nic_bytes_per_s_per_gpu(false),
            latency_s: hw.node.nic_latency_s,
        };
    }
    if let Some(gbps) = args.p2p_gb_per_s {
        if !gbps.is_finite() || gbps <= 0.0 {
            return input(format!("--p2p-gb-per-s {gbps}: valid: a finite number > 0"));
        }
        let lat = args.p2p_latency_us;
        if !lat.is_finite() || lat < 0.0 {
            return input(format!(
                "--p2p-latency-us {lat}: valid: a finite number >= 0"
            ));
        }
        let link = Link {
            bandwidth_bytes_per_s: gbps * 1e9,
            latency_s: lat * 1e-6,
        };
        pb.intra_node = link;
        pb.inter_node = link;
    }
    if let Some(g) = args.gpus_per_node {
        if g == 0 {
            return input("--gpus-per-node 0: valid: at least 1");
        }
        pb.gpus_per_node = g;
    }
    let flag_of = |field: &str| match field {
        "device_speeds" => "--device-speeds",
        "microbatches" => "--microbatches",
        "gpus_per_node" => "--gpus-per-node",
        "stages" => "--stages",
        "time_limit_s" => "--time-limit",
        "backend" => "--solver",
        "layers" => "--profile",
        _ => "--hardware",
    };
    let map_err = |e: PartitionError| {
        match e {
        PartitionError::Solver(m) => CliError::Internal(format!("partition: {m}")),
        PartitionError::Invalid { field, reason } => {
            CliError::Input(format!("{}: {reason}", flag_of(field)))
        }
        PartitionError::MoreStagesThanLayers { .. } => {
            CliError::Input(format!("--stages {}: {e}", args.stages))
        }
        PartitionError::FewerDevicesThanStages { .. } => {
            CliError::Input(format!("--devices {}: {e}", pb.devices))
        }
        PartitionError::LayerExceedsMemory { .. } | PartitionError::NoSplitFitsMemory { .. } => {
            CliError::Input(format!("--memory-limit: {e}"))
        }
        PartitionError::NoIncumbent { .. } => CliError::Input(format!(
            "--time-limit: {e}; raise --time-limit or drop --no-seed (the DP's warm start is always feasible)"
        )),
        e => CliError::Input(e.to_string()),
    }
    };
    let rep = match args.method {
        PartitionMethod::Dp => {
            let part = partition::dp(&pb).map_err(map_err)?;
            PartitionReport {
                method: "dp",
                solver: None,
                optimal: true,
                gap: 0.0,
                best_bound_ms: part.bottleneck_ms,
                status: "optimal".into(),
                ..partition_report(&pb, part)
            }
        }
        PartitionMethod::Ilp => {
            let opts = IlpOptions {
                time_limit_s: args.time_limit,
                seed_with_dp: !args.no_seed,
                backend: match args.solver {
                    IlpBackendArg::Microlp => Backend::Microlp,
                    IlpBackendArg::Highs => Backend::Highs,
                },
            };
            let out = partition::ilp(&pb, &opts).map_err(map_err)?;
            PartitionReport {
                method: "ilp",
                solver: Some(out.solver),
                optimal: out.optimal,
                gap: out.gap,
                best_bound_ms: out.best_bound_ms,
                status: out.status.clone(),
                ..partition_report(&pb, out.partition)
            }
        }
    };
    match args.format {
        Format::Json => println!(
            "{}",
            serde_json::to_string(&rep).map_err(|e| CliError::Internal(e.to_string()))?
        ),
        Format::Table => {
            println!(
                "{} layers into {} stages on {} devices ({}{}): config {}",
                rep.layers,
                rep.stages,
                rep.devices,
                rep.method,
                rep.solver.map(|s| format!(", {s}")).unwrap_or_default(),
                rep.config
            );
            println!(
                "bottleneck_ms {:.6}  status {}  gap {:.3e}  bound {:.6} ms",
                rep.bottleneck_ms, rep.status, rep.gap, rep.best_bound_ms
            );
            println!("stage  first_layer  layers  replicas      time_ms      memory_bytes");
            for s in 0..rep.stages {
                let end = rep.boundaries.get(s + 1).copied().unwrap_or(rep.layers);
                println!(
                    "{:>5} {:>12} {:>7} {:>9} {:>12.6} {:>17}",
                    s,
                    rep.boundaries[s],
                    end - rep.boundaries[s],
                    rep.replicas[s],
                    rep.stage_times_ms[s],
                    rep.stage_memory_bytes[s]
                );
            }
        }
    }
    Ok(())
}

fn partition_report(
    pb: &pplan::partition::Problem,
    part: pplan::partition::Partition,
) -> PartitionReport {
    PartitionReport {
        method: "",
        solver: None,
        layers: pb.layers.len(),
        stages: pb.stages,
        devices: pb.devices,
        config: part.config(),
        boundaries: part.boundaries,
        replicas: part.replicas,
        stage_times_ms: part.stage_times_ms,
        bottleneck_ms: part.bottleneck_ms,
        stage_memory_bytes: part.stage_memory_bytes,
        memory_limit_bytes: pb.memory_limit_bytes,
        optimal: false,
        gap: 0.0,
        best_bound_ms: 0.0,
        status: String::new(),
    }
}
