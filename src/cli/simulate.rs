//! `pplan simulate`: replay a schedule with unit costs or a layer profile.

use super::common::*;
use pplan::plan::predict::MAX_SIMULATED_ACTIONS;
use pplan::schedule::generators::ScheduleName;
use pplan::schedule::ir::Schedule;
use pplan::sim::{self, Costs, SimOptions, SimResult, UnitCosts};
use serde::Serialize;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub(crate) struct SimulateArgs {
    #[command(flatten)]
    pub(crate) schedule: ScheduleArgs,
    /// Stage costs from a measured layer profile (JSON) instead of unit costs: each stage's
    /// F/I/W times are sums over its layers (ms); excludes --forward/--backward/--p2p.
    #[arg(long, conflicts_with_all = ["forward", "backward", "backward_input", "backward_weight", "p2p"])]
    pub(crate) profile: Option<PathBuf>,
    /// With --profile: first layer of each of the P·V stages, e.g. 0,5,9 (default: even split).
    #[arg(long, requires = "profile")]
    pub(crate) boundaries: Option<String>,
    /// With --profile: a hardware profile (a100-80gb, h100-80gb, h100-96gb-500w, h200, h800, b200, b300, gb200-nvl72, gb300-nvl72
    /// or a JSON file) whose
    /// links time each transfer (last layer's output_bytes / bandwidth + latency); default: free.
    /// With --plan: the hardware the plan's costs are computed for instead of the plan's.
    #[arg(long)]
    pub(crate) hardware: Option<String>,
    /// Simulate a plan file's step (`pplan search --output`, `predict --output`): its schedule
    /// (the plan's --schedule, --stages, --chunks and micro-batches, unless given) with the
    /// costs `pplan predict --plan FILE` computes (model, hardware, layout, stack); times in
    /// milliseconds. Flags given on top replace the plan's (said on standard error).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["profile", "forward", "backward", "backward_input", "backward_weight", "p2p"])]
    pub(crate) plan: Option<PathBuf>,
    /// Time of one micro-batch's forward through one device's whole share of the model
    /// (a chunk takes T/V). Unit-less; 1 unit is drawn as 1 ms.
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub(crate) forward: f64,
    /// Time of one micro-batch's full backward through one device's share (default 2, or
    /// --backward-input + --backward-weight when both are given; it must equal their sum).
    #[arg(long, allow_negative_numbers = true)]
    pub(crate) backward: Option<f64>,
    /// Input-gradient part of the backward (zero-bubble I); default half of --backward, or
    /// --backward minus --backward-weight.
    #[arg(long, allow_negative_numbers = true)]
    pub(crate) backward_input: Option<f64>,
    /// Weight-gradient part of the backward (zero-bubble W); default the rest of --backward.
    #[arg(long, allow_negative_numbers = true)]
    pub(crate) backward_weight: Option<f64>,
    /// Time of one point-to-point activation or gradient transfer between devices.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub(crate) p2p: f64,
    /// Draw a Gantt chart: FILE.svg or FILE.png.
    #[arg(long)]
    pub(crate) gantt: Option<PathBuf>,
    /// With --gantt: draw only START:END, in the milliseconds of the chart's time axis, e.g.
    /// 0:250. Actions overlapping the window are drawn, cut at its edges.
    #[arg(
        long,
        requires = "gantt",
        value_name = "START:END",
        allow_hyphen_values = true
    )]
    pub(crate) gantt_window: Option<String>,
    /// Write a Chrome trace (open in Perfetto).
    #[arg(long)]
    pub(crate) trace: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub(crate) format: Format,
    /// Show the phases (costs, simulation, trace, chart) and the time so far on standard
    /// error even when it is not a terminal (on a terminal they appear by themselves).
    #[arg(long)]
    pub(crate) progress: bool,
}

#[derive(Serialize)]
pub(crate) struct DeviceReport {
    pub(crate) device: u32,
    pub(crate) busy: f64,
    pub(crate) idle: f64,
    pub(crate) peak_inflight_microbatches: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) peak_memory_bytes: Option<u64>,
    pub(crate) peak_weight_versions: u32,
}

#[derive(Serialize)]
pub(crate) struct SimulateReport {
    pub(crate) schedule: String,
    pub(crate) stages: u32,
    pub(crate) microbatches: u32,
    pub(crate) chunks: u32,
    pub(crate) actions: u64,
    pub(crate) makespan: f64,
    pub(crate) bubble_fraction: f64,
    pub(crate) devices: Vec<DeviceReport>,
}

pub(crate) fn report(
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

pub(crate) fn print_table(rep: &SimulateReport) {
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

pub(crate) fn cmd_simulate(args: SimulateArgs) -> Result<(), CliError> {
    // The simulator has no progress points of its own: report the phases, honestly, with no
    // guessed time left.
    let progress = Progress::new("simulate", args.progress);
    let r = simulate_with_progress(&args, &progress);
    progress.end(r.is_ok());
    r
}

fn simulate_with_progress(args: &SimulateArgs, progress: &Progress) -> Result<(), CliError> {
    let phases = Phases::new(args);
    progress.phase(
        1,
        phases.total,
        "reading the schedule and building the costs",
    );
    check_size(&args.schedule)?;
    let loaded = load_schedule(&args.schedule)?;
    let s = &loaded.schedule;
    let actions: u64 = s.devices.iter().map(|d| d.len() as u64).sum();
    if actions > MAX_SIMULATED_ACTIONS {
        return input(format!(
            "--schedule '{}' is too large to simulate: {actions} actions, more than the {MAX_SIMULATED_ACTIONS} pplan simulates (predict's limit: memory and time stay bounded); valid: a schedule of at most {MAX_SIMULATED_ACTIONS} actions",
            args.schedule.schedule
        ));
    }
    if let Some(path) = &args.plan {
        let costs = simulate_plan_costs(args, path, s)?;
        return run_simulation(args, &loaded, &costs, 1_000_000, true, progress, &phases);
    }
    if args.hardware.is_some() && args.profile.is_none() {
        return input(
            "--hardware times the transfers of a --profile, or the costs of a --plan; valid: add --profile FILE or --plan FILE, or drop --hardware",
        );
    }
    if let Some(path) = &args.profile {
        let profile = load_profile(path)?;
        let costs = simulate_profile_costs(args, &profile, s)?;
        return run_simulation(args, &loaded, &costs, 1_000_000, true, progress, &phases);
    }
    let scale = ns_per_unit(s.chunks());
    let (backward_ns, backward_input_ns, backward_weight_ns) = backward_split(args, scale)?;
    let unit = UnitCosts {
        forward_ns: units_to_ns("--forward", args.forward, scale)?,
        backward_ns,
        backward_input_ns,
        backward_weight_ns,
        p2p_ns: units_to_ns("--p2p", args.p2p, scale)?,
    };
    let costs = Costs::uniform(s.num_stages, s.num_devices(), unit);
    run_simulation(args, &loaded, &costs, scale, false, progress, &phases)
}

/// Refuse a built-in schedule larger than predict simulates before generating it: its actions
/// are (2, or 3 with a split backward) x micro-batches (x mini-batches for PipeDream) x stages
/// x chunks, and `--stages 1000 --microbatches 100000` took 65 s and 4.1 GB.
fn check_size(args: &ScheduleArgs) -> Result<(), CliError> {
    let (Ok(name), Some(p), Some(m)) = (
        args.schedule.parse::<ScheduleName>(),
        args.stages,
        args.microbatches,
    ) else {
        return Ok(());
    };
    let v = name.fixed_chunks().unwrap_or(args.chunks.unwrap_or(1));
    let steps = if name.is_asynchronous() {
        args.steps
    } else {
        1
    };
    let per_pair: u128 = if name.splits_backward() { 3 } else { 2 };
    let actions = per_pair * u128::from(m) * u128::from(steps) * u128::from(p) * u128::from(v);
    if actions > u128::from(MAX_SIMULATED_ACTIONS) {
        let max_m = u128::from(MAX_SIMULATED_ACTIONS)
            / (per_pair * u128::from(steps) * u128::from(p) * u128::from(v));
        return input(format!(
            "--microbatches {m} --stages {p}: {name} is too large to simulate: {actions} actions, more than the {MAX_SIMULATED_ACTIONS} pplan simulates (predict's limit: memory and time stay bounded); valid: --microbatches at most {max_m} with --stages {p}",
        ));
    }
    Ok(())
}

/// The phases `simulate` reports: costs, simulation, then the trace and the chart if asked.
pub(crate) struct Phases {
    total: u64,
}

impl Phases {
    fn new(args: &SimulateArgs) -> Phases {
        Phases {
            total: 2 + u64::from(args.trace.is_some()) + u64::from(args.gantt.is_some()),
        }
    }
}

/// The full backward and its I/W parts in nanoseconds, refusing parts that contradict the
/// whole: I + W must equal B when all three are given, and a part given alone cannot exceed B
/// (the other part is the rest).
fn backward_split(
    args: &SimulateArgs,
    scale: u64,
) -> Result<(u64, Option<u64>, Option<u64>), CliError> {
    let ns = |flag: &str, v: Option<f64>| v.map(|v| units_to_ns(flag, v, scale)).transpose();
    let b = ns("--backward", args.backward)?;
    let i = ns("--backward-input", args.backward_input)?;
    let w = ns("--backward-weight", args.backward_weight)?;
    let b = match (b, i, w) {
        (Some(b), _, _) => b,
        (None, Some(i), Some(w)) => i + w,
        _ => units_to_ns("--backward", 2.0, scale)?,
    };
    let units = |v: u64| v as f64 / scale as f64;
    let b_text = match args.backward {
        Some(v) => format!("--backward {v}"),
        None => "--backward 2 (the default)".to_string(),
    };
    if let (Some(i), Some(w)) = (i, w) {
        if b != i + w {
            return input(format!(
                "{b_text} contradicts --backward-input {} + --backward-weight {} = {}; valid: --backward equal to their sum, or leave --backward out",
                units(i),
                units(w),
                units(i + w)
            ));
        }
    }
    for (flag, part) in [("--backward-input", i), ("--backward-weight", w)] {
        if let Some(part) = part.filter(|&x| x > b) {
            return input(format!(
                "{flag} {} exceeds {b_text}, of which it is a part; valid: at most {}, or give both --backward-input and --backward-weight without --backward",
                units(part),
                units(b)
            ));
        }
    }
    Ok(match (i, w) {
        (Some(i), None) => (b, Some(i), Some(b - i)),
        (None, Some(w)) => (b, Some(b - w), Some(w)),
        (i, w) => (b, i, w),
    })
}

/// `simulate --plan`: the costs `predict --plan` computes for the plan (with the typed
/// `--hardware`, `--schedule`, `--stages`, `--chunks` on top), for the schedule `s`.
fn simulate_plan_costs(args: &SimulateArgs, path: &Path, s: &Schedule) -> Result<Costs, CliError> {
    use pplan::plan::predict::{check, step_costs, PredictError};
    let plan = load_plan_to_predict(path)?;
    let origin = path.display().to_string();
    let sch = &args.schedule;
    let typed = simulate_plan_flags(
        &plan,
        args.hardware.as_deref(),
        &sch.schedule,
        sch.stages,
        sch.chunks,
        sch.microbatch_group_size_per_virtual_pipeline_stage,
    );
    let flags = plan_predict_flags(&plan, &typed, &origin)?;
    let (mut model, hw) = super::predict::load_flag_inputs(&flags, Some(&plan))?;
    flags.apply_to_model(&mut model)?;
    let mut req = flags.request(&model, &hw, None)?;
    req.chunks = u64::from(s.chunks());
    let err = |e: PredictError| match e {
        PredictError::Internal(m) => CliError::Internal(m),
        e => CliError::Input(format!("--plan '{origin}': {e}")),
    };
    let dp = check(&req).map_err(err)?;
    if u64::from(s.num_microbatches) != req.global_batch / dp / req.micro_batch {
        return input(format!(
            "--plan '{origin}': the schedule has {} micro-batches, the plan's batch gives {}",
            s.num_microbatches,
            req.global_batch / dp / req.micro_batch
        ));
    }
    Ok(step_costs(&req, dp, s.num_stages, s.placement)
        .map_err(err)?
        .costs)
}

/// `simulate --profile`: stage costs from the profile's layers, cut evenly or at --boundaries.
pub(crate) fn simulate_profile_costs(
    args: &SimulateArgs,
    profile: &pplan::inputs::profile::LayerProfile,
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
            pplan::inputs::profile::even_boundaries(layers, s.num_stages)
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
            pplan::inputs::profile::check_boundaries(&b, layers, s.num_stages)
                .map_err(|e| CliError::Input(format!("--boundaries '{text}': {e}")))?;
            b
        }
    };
    let hw = args
        .hardware
        .as_deref()
        .map(pplan::inputs::hardware::Hardware::load)
        .transpose()
        .map_err(|e| CliError::Input(format!("--hardware: {e}")))?;
    Ok(pplan::plan::profiled::stage_costs(
        profile,
        &boundaries,
        s.num_devices(),
        |st| s.device_of(st),
        hw.as_ref(),
    ))
}

/// Simulate `loaded` with `costs` (`scale` ns per reported unit) and print or write the results.
pub(crate) fn run_simulation(
    args: &SimulateArgs,
    loaded: &Loaded,
    costs: &Costs,
    scale: u64,
    memory_known: bool,
    progress: &Progress,
    phases: &Phases,
) -> Result<(), CliError> {
    let s = &loaded.schedule;
    let window = parse_gantt_window(args.gantt_window.as_deref())?;
    let record = args.trace.is_some() || args.gantt.is_some();
    let actions = s.num_actions();
    progress.phase(
        2,
        phases.total,
        &format!(
            "simulating {actions} actions on {} devices",
            s.num_devices()
        ),
    );
    let mut phase = 2;
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
        phase += 1;
        progress.phase(phase, phases.total, "writing the Chrome trace");
        write_output(
            path,
            "--trace",
            pplan::report::trace::to_json(tl).as_bytes(),
        )?;
    }
    if let (Some(path), Some(tl)) = (&args.gantt, &r.timeline) {
        phase += 1;
        progress.phase(
            phase,
            phases.total,
            &format!("drawing the Gantt chart ({} spans)", tl.spans.len()),
        );
        let unit_label = if args.plan.is_some() {
            "ms".to_string()
        } else if scale == 1_000_000 {
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
        write_gantt(tl, title, unit_label, 1e6, path, window)?;
    }
    let rep = report(&loaded.label, s, &r, scale, memory_known);
    // Standard output starts here: the progress line must be gone first.
    progress.finish();
    match args.format {
        Format::Json => print_json(&rep)?,
        Format::Table => print_table(&rep),
    }
    Ok(())
}
