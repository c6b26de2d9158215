//! The `pplan` command line: parses flags and dispatches to the subcommand's file in `cli/`, which
//! calls the library and prints; maps errors to exit codes (0 success, 2 bad input or infeasible
//! request, 1 internal error).

mod cli;

use clap::{Parser, Subcommand};
use cli::calibrate::{cmd_calibrate, CalibrateArgs};
use cli::common::CliError;
use cli::emit::{cmd_emit, EmitArgs};
use cli::generate::{cmd_generate, GenerateArgs};
use cli::partition::{cmd_partition, PartitionArgs};
use cli::predict::{cmd_predict, PredictArgs};
use cli::report::{cmd_report, ReportArgs};
use cli::schedule_search::{cmd_schedule_search, SearchArgs};
use cli::search::{cmd_search, PlanSearchArgs};
use cli::simulate::{cmd_simulate, SimulateArgs};
use cli::validate::{cmd_validate, ValidateArgs};
use std::process::ExitCode;

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
    /// Replay a schedule (built-in or a CSV file) with unit costs, a layer profile's or a plan
    /// file's predicted costs (--plan) and report makespan, bubble, per-device busy/idle time
    /// and memory; optionally draw a Gantt chart and write a trace.
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
    /// Break a measured run down (the executor's trace, PyTorch profiler traces, an Nsight
    /// export, a Megatron-LM or torchtitan log) and compare it with a prediction or a plan:
    /// step time, compute, communication, bubble, worst stages and actions, overlay chart.
    Validate(ValidateArgs),
    /// Find the fastest configuration that fits: every (t, p, d), micro-batch, schedule,
    /// chunk count, recomputation, sequence parallelism and ZeRO-1 setting is checked against
    /// the memory model, and the feasible ones are simulated best-first (docs/search.md).
    Search(PlanSearchArgs),
    /// Split a layer profile into pipeline stages minimising the slowest stage (compute over
    /// replicas + weight all-reduce + transfer), under a per-stage memory limit; exact DP or ILP
    /// (docs/partition.md).
    Partition(PartitionArgs),
    /// Fit a layer profile (and the hardware profile's link, memory and compute terms) to a
    /// measured run of a plan, so that predict reproduces it (docs/validate.md).
    Calibrate(CalibrateArgs),
    /// Write one self-contained HTML page about a plan: step time, throughput, MFU, run cost,
    /// the step's Gantt chart, memory per pipeline rank, a search's alternatives, the emitted
    /// Megatron-LM and torchtitan commands, and a measured run beside the prediction
    /// (docs/report.md).
    Report(ReportArgs),
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
    // `predict --plan FILE`, `simulate --plan FILE`: the plan's flags in front of the typed
    // ones, before clap checks that the required ones are there.
    let argv = cli::common::join_negative_values(std::env::args_os().collect());
    let argv = match cli::common::expand_plan(argv) {
        Ok(argv) => argv,
        Err(e) => return exit_code(Err(e)),
    };
    let cli = match Cli::try_parse_from(argv) {
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
        Command::Calibrate(args) => cmd_calibrate(args),
        Command::Report(args) => cmd_report(args),
    };
    exit_code(result)
}

/// The exit code of a command's result, its error on standard error.
fn exit_code(result: Result<(), CliError>) -> ExitCode {
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
