//! `pplan-exec`: run a plan for real (`run`) or measure this machine (`profile`). Parses flags,
//! calls the library, prints, maps errors to exit codes: 0 success, 2 bad input / backend
//! unavailable / plan that does not fit, 1 internal error.

use clap::{Parser, Subcommand, ValueEnum};
use pplan_exec::backend::{ExecError, RunOptions};
use pplan_exec::run::{self, Backend, Summary};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "pplan-exec",
    version,
    about = "Run a pplan plan on CPU threads or CUDA GPUs and write a measured Chrome trace"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a plan (plan.json from `pplan predict/search --output`) for --steps optimizer steps.
    Run(RunArgs),
    /// Measure this machine on a backend: write a layer profile and a hardware profile.
    Profile(ProfileArgs),
    /// Measure one CUDA GPU's kernels over a layer's shapes (GEMMs at each tensor-parallel
    /// size and micro-batch, HBM bandwidth, copies, launch overhead); writes JSON.
    Sweep(SweepArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum BackendArg {
    Cpu,
    Cuda,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum DtypeArg {
    Bf16,
    F32,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum TraceFormat {
    Pplan,
    Kineto,
}

#[derive(Clone, Copy, Default, ValueEnum)]
enum Format {
    #[default]
    Table,
    Json,
}

#[derive(clap::Args)]
struct RunArgs {
    /// The plan file.
    #[arg(long)]
    plan: PathBuf,
    #[arg(long, value_enum, default_value = "cpu")]
    backend: BackendArg,
    /// Steps: passes over the plan's action lists (one optimizer step each for synchronous
    /// schedules; the whole multi-mini-batch list for PipeDream/2BW).
    #[arg(long, default_value_t = 1)]
    steps: u32,
    /// Where to write the measured Chrome trace (with `--trace-format kineto`: a directory,
    /// one `rank-<device>.json` per device).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// `pplan`: one Chrome trace in the simulator's layout; `kineto`: PyTorch-profiler
    /// shaped traces, one per device (docs/executor.md).
    #[arg(long, value_enum, default_value = "pplan")]
    trace_format: TraceFormat,
    /// SGD learning rate.
    #[arg(long, default_value_t = pplan_exec::spec::DEFAULT_LR)]
    lr: f32,
    /// Seed of weights and data.
    #[arg(long, default_value_t = pplan_exec::spec::DEFAULT_SEED)]
    seed: u64,
    /// Compute threads per pipeline device.
    #[arg(long, default_value_t = 1)]
    threads_per_device: usize,
    /// Override the plan's dtype (f32, bf16). The CPU backend computes in f32 either way.
    #[arg(long)]
    dtype: Option<String>,
    /// Give up after this many seconds (0: no limit).
    #[arg(long, default_value_t = 3600)]
    timeout_s: u64,
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

#[derive(clap::Args)]
struct SweepArgs {
    /// Model whose layer shapes are swept: a bundled name or a model JSON file.
    #[arg(long)]
    model: String,
    /// Override the model's sequence length.
    #[arg(long)]
    seq_len: Option<u64>,
    /// Tensor-parallel sizes (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    tp: Vec<u32>,
    /// Micro-batch sizes (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
    micro_batch: Vec<u32>,
    /// Samples per measurement; the median is reported.
    #[arg(long, default_value_t = 3)]
    repeats: u32,
    /// GEMM input type (as the plan's `dtype`).
    #[arg(long, value_enum, default_value = "bf16")]
    dtype: DtypeArg,
    /// Where to write the measurements (JSON).
    #[arg(long)]
    out: PathBuf,
}

#[derive(clap::Args)]
struct ProfileArgs {
    /// Model: a bundled name or a Megatron-style / Hugging Face JSON file.
    #[arg(long)]
    model: String,
    /// Sequences per micro-batch.
    #[arg(long)]
    micro_batch: u64,
    /// Override the model's sequence length.
    #[arg(long)]
    seq_len: Option<u64>,
    #[arg(long, value_enum, default_value = "cpu")]
    backend: BackendArg,
    /// Where to write the layer profile (embedding, one entry per layer, output).
    #[arg(long)]
    out_profile: PathBuf,
    /// Where to write the hardware profile.
    #[arg(long)]
    out_hardware: PathBuf,
    /// Repetitions of each measurement; the median is reported.
    #[arg(long, default_value_t = 5)]
    repeats: u32,
    /// Pipeline devices the hardware profile describes (`node.gpus_per_node`); default 2 on
    /// the CPU, the number of visible GPUs on CUDA.
    #[arg(long)]
    devices: Option<u32>,
    /// GEMM input type of the CUDA profile (as the plan's `dtype`): bf16 or f32. The CPU
    /// always computes f32.
    #[arg(long, value_enum, default_value = "bf16")]
    dtype: DtypeArg,
    /// Compute threads per device (as `run --threads-per-device`).
    #[arg(long, default_value_t = 1)]
    threads_per_device: usize,
    /// CPU: data-parallel replicas of each device the layers are timed on (as the plan's
    /// `parallelism.dp`).
    #[arg(long, default_value_t = 1)]
    dp: usize,
    /// CPU: context-parallel ranks of each device, timed with their attention ring.
    #[arg(long, default_value_t = 1)]
    cp: usize,
    /// CPU: expert-parallel size (divides dp x cp), timed with its all-to-all.
    #[arg(long, default_value_t = 1)]
    ep: usize,
    /// CPU: the layers' GEMM format (as the plan's `parallelism.precision`): bf16 (computed in
    /// f32) or fp8 (emulated, with --fp8-recipe).
    #[arg(long, default_value = "bf16")]
    precision: String,
    /// CPU, with --precision fp8: tensorwise or blockwise.
    #[arg(long, default_value = "tensorwise")]
    fp8_recipe: String,
    #[arg(long, value_enum, default_value_t)]
    format: Format,
}

enum CliError {
    Input(String),
    Internal(String),
}

fn exec_error(e: &ExecError, msg: String) -> CliError {
    match e {
        ExecError::Unavailable(_) | ExecError::Plan(_) => CliError::Input(msg),
        ExecError::Peer { .. } | ExecError::Backend(_) => CliError::Internal(msg),
    }
}

fn write(path: &PathBuf, flag: &str, text: &str) -> Result<(), CliError> {
    std::fs::write(path, text)
        .map_err(|e| CliError::Input(format!("{flag}: cannot write '{}': {e}", path.display())))
}

fn backend(b: BackendArg) -> Backend {
    match b {
        BackendArg::Cpu => Backend::Cpu,
        BackendArg::Cuda => Backend::Cuda,
    }
}

fn cmd_run(a: RunArgs) -> Result<(), CliError> {
    let origin = a.plan.display().to_string();
    let text = std::fs::read_to_string(&a.plan)
        .map_err(|e| CliError::Input(format!("--plan: cannot read '{origin}': {e}")))?;
    let plan = pplan::plan::plan_file::Plan::from_json(&text, &origin)
        .map_err(|e| CliError::Input(format!("--plan: {e}")))?;
    if plan.parallelism.recompute != "none" {
        eprintln!(
            "note: {origin}: parallelism.recompute is '{}', but the executor keeps activations from F to B (no recomputation), so its backward does less work than the plan's; predict with --recompute none to compare like with like",
            plan.parallelism.recompute
        );
    }
    if a.steps == 0 {
        return Err(CliError::Input("--steps must be at least 1".into()));
    }
    if a.threads_per_device == 0 {
        return Err(CliError::Input(
            "--threads-per-device must be at least 1".into(),
        ));
    }
    if !(a.lr.is_finite() && a.lr >= 0.0) {
        return Err(CliError::Input(format!(
            "--lr {} must be a finite number >= 0",
            a.lr
        )));
    }
    let be = backend(a.backend);
    if be == Backend::Cuda {
        if let Some(why) = pplan_exec::cuda::refusal(&plan) {
            return Err(CliError::Input(why));
        }
        pplan_exec::cuda::availability()
            .map_err(|e| exec_error(&e, format!("--backend cuda: {e}")))?;
    }
    let opts = RunOptions {
        steps: a.steps,
        lr: a.lr,
        seed: a.seed,
        threads_per_device: a.threads_per_device,
        dtype: a.dtype.clone(),
        disable_weight_stashing: false,
    };
    let timeout = (a.timeout_s > 0).then(|| Duration::from_secs(a.timeout_s));
    let r = run::run_plan(&plan, be, &opts, timeout)
        .map_err(|e| exec_error(e.exec_error(), format!("--backend {}: {e}", be.as_str())))?;
    match (&a.trace, a.trace_format) {
        (Some(path), TraceFormat::Pplan) => {
            let t = serde_json::to_string(&run::trace(&r))
                .map_err(|e| CliError::Internal(format!("trace serialisation: {e}")))?;
            write(path, "--trace", &t)?;
        }
        (Some(dir), TraceFormat::Kineto) => {
            std::fs::create_dir_all(dir).map_err(|e| {
                CliError::Input(format!(
                    "--trace {} with --trace-format kineto names a directory: cannot create it: {e}",
                    dir.display()
                ))
            })?;
            for (d, t) in pplan_exec::kineto::rank_traces(&r) {
                let text = serde_json::to_string(&t)
                    .map_err(|e| CliError::Internal(format!("trace serialisation: {e}")))?;
                write(&dir.join(format!("rank-{d}.json")), "--trace", &text)?;
            }
        }
        (None, _) => {}
    }
    let dtype = a.dtype.clone().unwrap_or_else(|| plan.dtype.clone());
    let dtype = if be == Backend::Cpu {
        format!("f32 (plan: {dtype})")
    } else {
        dtype
    };
    let s = Summary::new(be.as_str(), &plan, &dtype, &r);
    match a.format {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&s).map_err(|e| CliError::Internal(e.to_string()))?
        ),
        Format::Table => {
            println!(
                "{} on {} ({} devices, {} stages, {} micro-batches), {} step(s), dtype {}",
                s.schedule, s.backend, s.devices, s.stages, s.microbatches, s.steps, s.dtype
            );
            println!("step  time_s      loss");
            for (i, (t, l)) in s.step_times_s.iter().zip(&s.loss_per_step).enumerate() {
                println!("{i:<5} {t:<11.6} {l:.6}");
            }
            println!("mean step time  {:.6} s", s.mean_step_time_s);
            println!("compute busy    {:.3}", s.compute_busy_fraction);
        }
    }
    Ok(())
}

fn cmd_profile(a: ProfileArgs) -> Result<(), CliError> {
    let model =
        pplan::inputs::model::Model::load(&a.model).map_err(|e| CliError::Input(e.to_string()))?;
    for (flag, v) in [
        ("--micro-batch", a.micro_batch),
        ("--repeats", a.repeats as u64),
        ("--devices", a.devices.unwrap_or(1) as u64),
        ("--threads-per-device", a.threads_per_device as u64),
    ] {
        if v == 0 {
            return Err(CliError::Input(format!("{flag} must be at least 1")));
        }
    }
    if a.seq_len == Some(0) {
        return Err(CliError::Input("--seq-len must be at least 1".into()));
    }
    let req = pplan_exec::profile::ProfileRequest {
        model,
        micro_batch: a.micro_batch,
        seq_len: a.seq_len,
        repeats: a.repeats,
        devices: a.devices.unwrap_or(2),
        devices_explicit: a.devices.is_some(),
        threads_per_device: a.threads_per_device,
        parallel: pplan_exec::profile_layers::Parallel {
            dp: a.dp,
            cp: a.cp,
            ep: a.ep,
            fp8: pplan_exec::cpu::quant::Fp8Recipe::parse(
                &a.precision,
                &a.fp8_recipe,
                ["--precision", "--fp8-recipe"],
            )
            .map_err(CliError::Input)?,
        },
    };
    if let BackendArg::Cuda = a.backend {
        if req.parallel != Default::default() || req.model.moe.is_some() {
            return Err(CliError::Input(
                "--dp, --cp, --ep, --precision fp8 and mixture-of-experts models (--model) are measured by the CPU backend; the CUDA profile times one dense BF16/f32 pipeline (use --backend cpu)".into(),
            ));
        }
        pplan_exec::cuda::availability()
            .map_err(|e| exec_error(&e, format!("--backend cuda: {e}")))?;
    }
    let out = match a.backend {
        BackendArg::Cpu => pplan_exec::profile::profile_cpu(&req).map_err(CliError::Input)?,
        BackendArg::Cuda => {
            pplan_exec::cuda::calibrate::profile_cuda(&req, a.dtype == DtypeArg::Bf16)
                .map_err(|e| exec_error(&e, format!("--backend cuda: {e}")))?
        }
    };
    write(&a.out_profile, "--out-profile", &out.layers.to_json())?;
    let hw = serde_json::to_string_pretty(&out.hardware)
        .map_err(|e| CliError::Internal(e.to_string()))?;
    write(&a.out_hardware, "--out-hardware", &(hw + "\n"))?;
    match a.format {
        Format::Json => println!(
            "{}",
            serde_json::to_string_pretty(&out.summary)
                .map_err(|e| CliError::Internal(e.to_string()))?
        ),
        Format::Table => print!("{}", out.summary.table()),
    }
    Ok(())
}

fn cmd_sweep(a: SweepArgs) -> Result<(), CliError> {
    let model =
        pplan::inputs::model::Model::load(&a.model).map_err(|e| CliError::Input(e.to_string()))?;
    for (flag, v) in [("--tp", &a.tp), ("--micro-batch", &a.micro_batch)] {
        if v.is_empty() || v.contains(&0) {
            return Err(CliError::Input(format!(
                "{flag} must list whole numbers of at least 1, e.g. 1,2,4,8"
            )));
        }
    }
    if a.repeats == 0 || a.seq_len == Some(0) {
        return Err(CliError::Input(
            "--repeats and --seq-len must be at least 1".into(),
        ));
    }
    let req = pplan_exec::cuda::sweep::SweepRequest {
        seq: a.seq_len.unwrap_or(model.seq_len),
        model,
        tps: a.tp,
        micro_batches: a.micro_batch,
        repeats: a.repeats,
        bf16: a.dtype == DtypeArg::Bf16,
    };
    let out = pplan_exec::cuda::sweep::sweep_cuda(&req)
        .map_err(|e| exec_error(&e, format!("sweep: {e}")))?;
    let text = serde_json::to_string_pretty(&out).map_err(|e| CliError::Internal(e.to_string()))?;
    write(&a.out, "--out", &(text + "\n"))?;
    println!(
        "{}: {} GEMMs, best {:.1} TFLOP/s; HBM {:.0} GB/s; launch {:.2} us host",
        out.gpu,
        out.gemm.len(),
        out.gemm.iter().map(|g| g.flops_per_s).fold(0.0, f64::max) / 1e12,
        out.hbm_axpy
            .iter()
            .map(|b| b.bytes_per_s)
            .fold(0.0, f64::max)
            / 1e9,
        out.launch.iter().map(|l| l.host_s_per_launch).sum::<f64>() / out.launch.len() as f64 * 1e6
    );
    Ok(())
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
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Run(a) => cmd_run(a),
        Command::Profile(a) => cmd_profile(a),
        Command::Sweep(a) => cmd_sweep(a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError::Input(m)) => {
            eprintln!("pplan-exec: {m}");
            ExitCode::from(2)
        }
        Err(CliError::Internal(m)) => {
            eprintln!("pplan-exec: internal error: {m}");
            ExitCode::from(1)
        }
    }
}
