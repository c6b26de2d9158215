//! Helpers shared by the subcommands: the error type and its exit codes, output formats, reading
//! schedules, models, hardware and profiles, and writing files, charts and plans.

use clap::ValueEnum;
use pplan::report::gantt::{GanttError, GanttOptions};
use pplan::schedule::generators::{self, GenParams, ScheduleName};
use pplan::schedule::ir::{Placement, Schedule, WeightUpdate};
use std::path::Path;

pub(crate) use pplan::plan::flags::{
    count, join_negative_values, positive, zero_stage, OnOff, PredictFlags, SplitRuleFlags,
    StackFlags,
};

impl From<pplan::plan::flags::FlagError> for CliError {
    fn from(e: pplan::plan::flags::FlagError) -> Self {
        CliError::Input(e.0)
    }
}

/// Nanoseconds per unit of the unit-cost flags: `--forward 1` is 1 ms in traces and charts,
/// unless the chunk count V does not divide 10^6; then a unit is V/gcd(V, 10^6) ms so that
/// every chunk's share is a whole number of nanoseconds and closed forms come out exact.
pub(crate) fn ns_per_unit(chunks: u32) -> u64 {
    const MS: u64 = 1_000_000;
    let (mut a, mut b) = (MS, chunks.max(1) as u64);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    MS * (chunks.max(1) as u64 / a)
}

#[derive(Clone, Copy, ValueEnum, Default)]
pub(crate) enum Format {
    #[default]
    Table,
    Json,
}

/// Value parser of a time or size flag that must be a finite number >= 0.
pub(crate) fn non_negative_f64(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(format!("must be a finite number >= 0, got {text}")),
    }
}

/// An error with its exit code.
pub(crate) enum CliError {
    /// Bad input or infeasible request: exit code 2.
    Input(String),
    /// A failure of pplan itself: exit code 1.
    Internal(String),
}

pub(crate) fn input<T>(msg: impl Into<String>) -> Result<T, CliError> {
    Err(CliError::Input(msg.into()))
}

pub(crate) fn write_output(path: &Path, flag: &str, contents: &[u8]) -> Result<(), CliError> {
    std::fs::write(path, contents)
        .map_err(|e| CliError::Input(format!("{flag}: cannot write '{}': {e}", path.display())))
}

/// Convert a unit-cost flag to integer nanoseconds, rejecting what is not a finite,
/// non-negative time below a billion units.
pub(crate) fn units_to_ns(flag: &str, value: f64, ns_per_unit: u64) -> Result<u64, CliError> {
    if !value.is_finite() || !(0.0..=1e9).contains(&value) {
        return input(format!(
            "{flag} {value}: expected a finite time between 0 and 1e9 units"
        ));
    }
    Ok((value * ns_per_unit as f64).round() as u64)
}

#[derive(clap::Args)]
pub(crate) struct ScheduleArgs {
    /// A schedule name (gpipe, 1f1b, interleaved-1f1b, pipedream, pipedream-2bw, zb-h1, zb-h2,
    /// zbv, dualpipev, looped-bfs) or a .csv file.
    #[arg(long)]
    pub(crate) schedule: String,
    /// Pipeline devices (ranks) P. Required for a built-in schedule; checked against a file.
    #[arg(long, value_parser = positive::<u32>)]
    pub(crate) stages: Option<u32>,
    /// Micro-batches M (per mini-batch for pipedream/pipedream-2bw). Required for a built-in
    /// schedule; checked against a file.
    #[arg(long, value_parser = positive::<u32>)]
    pub(crate) microbatches: Option<u32>,
    /// Model chunks per device V (the model is cut into P·V stages): interleaved-1f1b and
    /// looped-bfs take any V; zbv and dualpipev always use 2 (V placement).
    #[arg(long, value_parser = positive::<u32>)]
    pub(crate) chunks: Option<u32>,
    /// Mini-batches run back to back without a flush by pipedream and pipedream-2bw (for a
    /// file with --weight-update 2bw: how many mini-batches the file holds).
    #[arg(long, default_value_t = 1, value_parser = positive::<u32>)]
    pub(crate) steps: u32,
    /// PipeDream vertical sync: every stage uses the weight version stage 0 used.
    #[arg(long)]
    pub(crate) vertical_sync: bool,
    /// Stage-to-device mapping of a schedule file: loop (stage s on device s mod P) or v
    /// (device r holds stages r and 2P-1-r, as zbv and dualpipev files need).
    #[arg(long, default_value = "loop")]
    pub(crate) placement: String,
    /// Weight-update policy of a schedule file: flush, stash, stash-vsync or 2bw.
    #[arg(long)]
    pub(crate) weight_update: Option<String>,
    /// Timing of PyTorch's `(F;B)OVERLAP_F_B` compounds (schedule files, and dualpipev, whose
    /// generator writes them as PyTorch's ScheduleDualPipeV does): together (default; the
    /// compound starts when the inputs of all its sub-actions are present, as PyTorch's schedule
    /// lowering and simulator treat it) or apart (each sub-action starts on its own input, as
    /// PyTorch's runtime runs them when no OVERLAP_F_B function is registered).
    #[arg(long, value_enum)]
    pub(crate) overlap_f_b: Option<OverlapFB>,
    /// Interleaved 1F1B: micro-batches a virtual stage runs in a row (Megatron-Core
    /// --microbatch-group-size-per-virtual-pipeline-stage; default --stages, which needs
    /// --microbatches divisible by --stages; between --stages and --microbatches, the last
    /// group empty or at least --stages).
    #[arg(long, value_parser = positive::<u32>, value_name = "N")]
    pub(crate) microbatch_group_size_per_virtual_pipeline_stage: Option<u32>,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub(crate) enum OverlapFB {
    Together,
    Apart,
}

/// A schedule and where it came from (for error messages).
pub(crate) struct Loaded {
    pub(crate) schedule: Schedule,
    pub(crate) label: String,
}

pub(crate) fn load_schedule(args: &ScheduleArgs) -> Result<Loaded, CliError> {
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
    let chunks = args.chunks.unwrap_or(1);
    let group = args.microbatch_group_size_per_virtual_pipeline_stage;
    let interleaved = name == ScheduleName::Interleaved1F1B && chunks > 1;
    if group.is_some() && !interleaved {
        return input(
            "--microbatch-group-size-per-virtual-pipeline-stage applies to --schedule interleaved-1f1b with --chunks > 1",
        );
    }
    if interleaved && group.is_none() && p > 0 && m % p != 0 {
        // Megatron-Core's default group is p, which needs p to divide m; a larger group runs
        // any m >= p (the generator checks the group; pplan search and predict agree).
        return input(format!(
            "--schedule interleaved-1f1b with --chunks {chunks} needs --microbatches divisible by --stages (p = {p}) with Megatron-Core's default micro-batch group, got --microbatches {m}; valid: --microbatches {}, {}, ..., {}or --chunks 1",
            p * (m / p).max(1),
            p * ((m / p).max(1) + 1),
            match generators::smallest_group(p, m) {
                Some(n) => format!("--microbatch-group-size-per-virtual-pipeline-stage {n} (the smallest group Megatron-Core accepts here), "),
                None => String::new(),
            }
        ));
    }
    let params = GenParams {
        devices: p,
        microbatches: m,
        chunks,
        steps: args.steps,
        vertical_sync: args.vertical_sync,
        group,
    };
    let mut schedule =
        generators::generate(name, params).map_err(|e| CliError::Input(e.to_string()))?;
    match args.overlap_f_b {
        Some(_) if schedule.compounds.is_empty() => {
            return input(format!(
                "--overlap-f-b applies to schedules with OVERLAP_F_B compounds (dualpipev, or a schedule file); '{name}' has none"
            ));
        }
        Some(OverlapFB::Apart) => schedule.compounds.clear(),
        _ => {}
    }
    Ok(Loaded {
        schedule,
        label: name.to_string(),
    })
}

pub(crate) fn load_file(args: &ScheduleArgs) -> Result<Loaded, CliError> {
    let path = &args.schedule;
    let placement: Placement = args
        .placement
        .parse()
        .map_err(|e: String| CliError::Input(format!("--placement: {e}")))?;
    let bytes = std::fs::read(path)
        .map_err(|e| CliError::Input(format!("cannot read --schedule file '{path}': {e}")))?;
    let mut schedule = pplan::schedule::csv::parse_bytes(&bytes, placement)
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

/// Draw `tl` to `path` (.svg or .png) for `--gantt`, only `window_ns` of it when given
/// (`--gantt-window`).
pub(crate) fn write_gantt(
    tl: &pplan::sim::Timeline,
    title: String,
    unit_label: String,
    ns_per_unit: f64,
    path: &Path,
    window_ns: Option<(u64, u64)>,
) -> Result<(), CliError> {
    let opts = GanttOptions {
        title,
        unit_label,
        ns_per_unit,
        window_ns,
        ..GanttOptions::default()
    };
    write_gantt_with(tl, &opts, path)
}

/// Draw `tl` with `opts` to `path` for `--gantt`: a path or extension the user got wrong is
/// bad input, a failure to draw an internal error.
pub(crate) fn write_gantt_with(
    tl: &pplan::sim::Timeline,
    opts: &GanttOptions,
    path: &Path,
) -> Result<(), CliError> {
    pplan::report::gantt::write_file(tl, opts, path).map_err(|e| match e {
        GanttError::Draw(_) | GanttError::Png(_) | GanttError::Font => {
            CliError::Internal(format!("--gantt: {e}"))
        }
        e => CliError::Input(format!("--gantt: {e}")),
    })
}

/// Read and check a plan file given with `--plan`.
pub(crate) fn load_plan(path: &Path) -> Result<pplan::plan::plan_file::Plan, CliError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Input(format!("cannot read --plan file '{origin}': {e}")))?;
    pplan::plan::plan_file::Plan::from_json(&text, &origin)
        .map_err(|e| CliError::Input(format!("--plan: {e}")))
}

/// `--gantt-window START:END`: milliseconds of simulated time, as nanoseconds.
pub(crate) fn parse_gantt_window(text: Option<&str>) -> Result<Option<(u64, u64)>, CliError> {
    let Some(text) = text else {
        return Ok(None);
    };
    let bad = |why: &str| {
        CliError::Input(format!(
            "--gantt-window '{text}': {why}; valid: START:END in milliseconds of simulated time with 0 <= START < END, e.g. 0:250 or 1200.5:1300"
        ))
    };
    let (a, b) = text
        .split_once(':')
        .ok_or_else(|| bad("expected two numbers separated by ':'"))?;
    let ms = |s: &str, what: &str| -> Result<f64, CliError> {
        match s.trim().parse::<f64>() {
            Ok(v) if v.is_finite() && (0.0..=1e12).contains(&v) => Ok(v),
            Ok(_) => Err(bad(&format!("{what} '{s}' is out of range"))),
            Err(_) => Err(bad(&format!("{what} '{s}' is not a number"))),
        }
    };
    let (a_ns, b_ns) = (
        (ms(a, "START")? * 1e6).round() as u64,
        (ms(b, "END")? * 1e6).round() as u64,
    );
    if b_ns <= a_ns {
        return Err(bad("END must be greater than START"));
    }
    Ok(Some((a_ns, b_ns)))
}

/// `--model` (with an optional `--seq-len` override) and `--hardware`, as predict and search read them.
pub(crate) fn load_model_and_hardware(
    model: &str,
    seq_len: Option<u64>,
    hardware: &str,
) -> Result<
    (
        pplan::inputs::model::Model,
        pplan::inputs::hardware::Hardware,
    ),
    CliError,
> {
    let name = model;
    let mut model =
        pplan::inputs::model::Model::load(model).map_err(|e| CliError::Input(e.to_string()))?;
    if seq_len.is_none() && model.seq_len_defaulted {
        eprintln!(
            "note: --model '{name}' gives no training sequence length (max_position_embeddings is the context limit); using {} tokens, pplan's default ({} or max_position_embeddings when shorter); set --seq-len to change it",
            model.seq_len,
            pplan::inputs::model::DEFAULT_SEQ_LEN
        );
    }
    if let Some(len) = seq_len {
        model.seq_len = len;
        model
            .check()
            .map_err(|e| CliError::Input(format!("--seq-len {len}: {e}")))?;
    }
    let hw = pplan::inputs::hardware::Hardware::load(hardware)
        .map_err(|e| CliError::Input(e.to_string()))?;
    Ok((model, hw))
}

/// Read a `--profile` file; errors name the file and the field.
pub(crate) fn load_profile(path: &Path) -> Result<pplan::inputs::profile::LayerProfile, CliError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Input(format!("cannot read --profile file '{origin}': {e}")))?;
    pplan::inputs::profile::LayerProfile::from_json(&text, &origin)
        .map_err(|e| CliError::Input(format!("--profile: {e}")))
}

/// Write `pred` as a plan file; the schedule is regenerated from its name, p, m and v.
/// `stack` is what the prediction assumed: its context-parallel exchange (recorded when
/// cp > 1), dispatcher, capacity and CUDA graphs.
pub(crate) fn write_plan(
    path: &Path,
    model: &pplan::inputs::model::Model,
    hardware: &str,
    pred: &pplan::plan::predict::Prediction,
    stack: &pplan::cost::Stack,
) -> Result<(), CliError> {
    let name: ScheduleName = pred
        .schedule
        .parse()
        .map_err(|e: String| CliError::Internal(e))?;
    let schedule = generators::generate(
        name,
        GenParams::new(pred.pp as u32, pred.microbatches as u32)
            .chunks(pred.chunks as u32)
            .group(pred.microbatch_group.map(|g| g.min(u32::MAX as u64) as u32)),
    )
    .map_err(|e| CliError::Internal(format!("--output: {e}")))?;
    let mut plan = pplan::plan::plan_file::plan_from_prediction(model, hardware, pred, &schedule);
    if pred.cp > 1 {
        plan.parallelism.cp_comm = stack.cp_comm.as_str().to_string();
    }
    plan.parallelism.set_recipe(stack);
    write_output(path, "--output", plan.to_json().as_bytes())
}

/// `--format json`: the value as one line of JSON on standard output.
pub(crate) fn print_json<T: serde::Serialize>(value: &T) -> Result<(), CliError> {
    let text = serde_json::to_string(value).map_err(|e| CliError::Internal(e.to_string()))?;
    println!("{}", super::schema::with_schema_version(text));
    Ok(())
}

/// `--tokens` and `--gpu-hour-price` (predict and search): the whole run's days, GPU-hours and
/// cost from the predicted step time (`plan::run_cost`).
#[derive(clap::Args)]
pub(crate) struct RunArgs {
    /// Tokens to train on (15000000000000, 15e12 or 15T; K, M, B, T suffixes): adds the run's
    /// steps, days and GPU-hours to the output.
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) tokens: Option<String>,
    /// Price of one GPU-hour in US dollars (with --tokens): adds the run's cost.
    #[arg(long, allow_hyphen_values = true)]
    pub(crate) gpu_hour_price: Option<String>,
}

impl RunArgs {
    /// The token count and price asked for, checked; `None` without `--tokens`.
    pub(crate) fn parse(&self) -> Result<Option<(u64, Option<f64>)>, CliError> {
        let price = match &self.gpu_hour_price {
            None => None,
            Some(s) => match s.trim().parse::<f64>() {
                Ok(p) if p.is_finite() && p >= 0.0 => Some(p),
                _ => {
                    return input(format!(
                    "--gpu-hour-price '{s}': valid: a price in US dollars, 0 or more (e.g. 2.50)"
                ))
                }
            },
        };
        match &self.tokens {
            None if price.is_some() => {
                input("--gpu-hour-price needs --tokens N (the run it prices)")
            }
            None => Ok(None),
            Some(t) => {
                let n = pplan::plan::run_cost::parse_token_count(t)
                    .map_err(|e| CliError::Input(format!("--tokens: {e}")))?;
                Ok(Some((n, price)))
            }
        }
    }
}

/// A progress line with an estimate of the time left, on standard error only: drawn in place
/// when standard error is a terminal (after the first second, so quick commands stay quiet),
/// or, with `--progress`, from the start (as plain lines at most once a second when standard
/// error is not a terminal). It reads the clock, and nothing it does reaches standard output
/// or a file, so outputs stay byte-identical with or without it.
pub(crate) struct Progress {
    label: &'static str,
    forced: bool,
    terminal: bool,
    started: std::time::Instant,
    /// When the line was last drawn, and whether anything was drawn.
    state: std::sync::Mutex<(Option<std::time::Instant>, bool)>,
    /// Set by the first [`Progress::finish`] or [`Progress::end`]; later calls do nothing.
    ended: std::sync::atomic::AtomicBool,
}

impl Progress {
    pub(crate) fn new(label: &'static str, forced: bool) -> Progress {
        use std::io::IsTerminal;
        Progress {
            label,
            forced,
            terminal: std::io::stderr().is_terminal(),
            started: std::time::Instant::now(),
            state: std::sync::Mutex::new((None, false)),
            ended: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn line(&self, done: u64, total: u64) -> String {
        let elapsed_s = self.started.elapsed().as_secs_f64();
        let pct = if total == 0 {
            100.0
        } else {
            100.0 * done as f64 / total as f64
        };
        let eta = if done == 0 {
            "ETA unknown".to_string()
        } else {
            let left_s = elapsed_s * (total.saturating_sub(done)) as f64 / done as f64;
            format!("ETA {left_s:.0} s")
        };
        format!(
            "{}: {done}/{total} ({pct:.0}%), {elapsed_s:.0} s elapsed, {eta}",
            self.label
        )
    }

    /// `done` of `total` units finished.
    pub(crate) fn update(&self, done: u64, total: u64) {
        if !(self.forced || self.terminal) {
            return;
        }
        let now = std::time::Instant::now();
        if !self.forced && now.duration_since(self.started).as_secs_f64() < 1.0 {
            return;
        }
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        let every_s = if self.terminal { 0.1 } else { 1.0 };
        if state
            .0
            .is_some_and(|t| now.duration_since(t).as_secs_f64() < every_s)
            && done < total
        {
            return;
        }
        state.0 = Some(now);
        state.1 = true;
        if self.terminal {
            eprint!("\r\x1b[2K{}", self.line(done, total));
        } else {
            eprintln!("{}", self.line(done, total));
        }
    }

    /// Phase `k` of `n` begins (1-based), for commands without finer progress points (the
    /// simulator reports none): the phase's name and the time so far, never a guessed time
    /// left. On a terminal it replaces the line in place (cleared by [`Progress::finish`]);
    /// with `--progress` elsewhere it is a line of its own.
    pub(crate) fn phase(&self, k: u64, n: u64, what: &str) {
        if !(self.forced || self.terminal) {
            return;
        }
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        state.0 = Some(std::time::Instant::now());
        state.1 = true;
        let line = format!(
            "{}: phase {k}/{n}: {what} ({:.1} s elapsed)",
            self.label,
            self.started.elapsed().as_secs_f64()
        );
        if self.terminal {
            eprint!("\r\x1b[2K{line}");
        } else {
            eprintln!("{line}");
        }
    }

    /// [`Progress::finish`] after success; after a failure only clear the terminal's line, so
    /// that the error message starts a line of its own and no "done" is claimed.
    pub(crate) fn end(&self, ok: bool) {
        if ok {
            self.finish();
        } else if !self.ended.swap(true, std::sync::atomic::Ordering::Relaxed)
            && self.terminal
            && self.state.lock().map(|s| s.1).unwrap_or(false)
        {
            eprint!("\r\x1b[2K");
        }
    }

    /// Clear the line (terminal) or write the last one (`--progress` to a file or pipe).
    pub(crate) fn finish(&self) {
        if self.ended.swap(true, std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let drawn = self.state.lock().map(|s| s.1).unwrap_or(false);
        if self.terminal && drawn {
            eprint!("\r\x1b[2K");
        } else if self.forced && !self.terminal {
            eprintln!(
                "{}: done in {:.1} s",
                self.label,
                self.started.elapsed().as_secs_f64()
            );
        }
    }
}
