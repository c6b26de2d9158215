//! `pplan partition`: layers into pipeline stages.

use super::common::*;
use clap::ValueEnum;
use serde::Serialize;
use std::path::PathBuf;

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub(crate) enum PartitionMethod {
    Dp,
    Ilp,
}

#[derive(Clone, Copy, ValueEnum, PartialEq, Eq)]
pub(crate) enum IlpBackendArg {
    Microlp,
    Highs,
}

#[derive(clap::Args)]
pub(crate) struct PartitionArgs {
    /// Layer profile (JSON: {"layers":[{"name","forward_ms","backward_ms","weight_bytes",
    /// "activation_bytes","output_bytes"}]}).
    #[arg(long)]
    pub(crate) profile: PathBuf,
    /// Pipeline stages P.
    #[arg(long, value_parser = positive::<usize>)]
    pub(crate) stages: usize,
    /// dp (exact dynamic program) or ilp (integer program seeded with the DP; proves the optimum
    /// or reports the gap).
    #[arg(long, value_enum, default_value = "dp")]
    pub(crate) method: PartitionMethod,
    /// Per-device memory limit in bytes: weights x --weight-memory-factor + activations x
    /// micro-batches in flight.
    #[arg(long, value_parser = positive::<u64>)]
    pub(crate) memory_limit: Option<u64>,
    /// Static bytes per byte of weight_bytes (8 = 16-bit weights with mixed-precision Adam:
    /// 2 weight + 2 gradient + 12 optimizer bytes per parameter); 1 when weight_bytes already is
    /// the whole static footprint.
    #[arg(long, default_value_t = pplan::plan::partition::DEFAULT_WEIGHT_MEMORY_FACTOR, value_parser = positive::<u64>)]
    pub(crate) weight_memory_factor: u64,
    /// Micro-batches in flight per stage: 1f1b (stage s holds min(P-s, M)), gpipe (M), or a number.
    #[arg(long, default_value = "1f1b")]
    pub(crate) in_flight: String,
    /// Micro-batches per step M (default P).
    #[arg(long, value_parser = positive::<u64>)]
    pub(crate) microbatches: Option<u64>,
    /// Devices N >= P; stages are replicated (data parallelism inside a stage, PipeDream's
    /// "15-1" configurations) to use all of them. Default P.
    #[arg(long, value_parser = positive::<usize>)]
    pub(crate) devices: Option<usize>,
    /// Relative speed of each device in pipeline order, comma-separated (1 = the profile's speed).
    #[arg(long, value_delimiter = ',')]
    pub(crate) device_speeds: Option<Vec<f64>>,
    /// Link numbers from a hardware profile (a100-80gb, h100-80gb, h100-96gb-500w, h200, h800, b200, b300, gb200-nvl72, gb300-nvl72, or a JSON
    /// file): NVLink inside an NVLink domain (a node, or an NVL72 rack), NICs across domains.
    #[arg(long)]
    pub(crate) hardware: Option<String>,
    /// Devices per fast-link group for the two link levels (default: the hardware's NVLink
    /// domain, the GPUs of a node or of an NVL72 rack).
    #[arg(long, value_parser = positive::<usize>)]
    pub(crate) gpus_per_node: Option<usize>,
    /// One link for every transfer instead: bandwidth in GB/s (10^9 bytes/s).
    #[arg(long, conflicts_with = "hardware", value_parser = non_negative_f64)]
    pub(crate) p2p_gb_per_s: Option<f64>,
    /// Latency of that link in microseconds.
    #[arg(long, default_value_t = 0.0, requires = "p2p_gb_per_s", value_parser = non_negative_f64)]
    pub(crate) p2p_latency_us: f64,
    /// ILP: stop after this many seconds and report the incumbent, the bound and the gap.
    #[arg(long, default_value_t = 60.0, value_parser = non_negative_f64)]
    pub(crate) time_limit: f64,
    /// ILP backend (highs needs a build with --features highs).
    #[arg(long, value_enum, default_value = "microlp")]
    pub(crate) solver: IlpBackendArg,
    /// ILP without the DP's bound, warm start and windows (for experiments).
    #[arg(long)]
    pub(crate) no_seed: bool,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub(crate) format: Format,
}

#[derive(Serialize)]
pub(crate) struct PartitionReport {
    pub(crate) method: &'static str,
    pub(crate) solver: Option<&'static str>,
    pub(crate) layers: usize,
    pub(crate) stages: usize,
    pub(crate) devices: usize,
    pub(crate) boundaries: Vec<usize>,
    pub(crate) replicas: Vec<usize>,
    pub(crate) config: String,
    pub(crate) stage_times_ms: Vec<f64>,
    pub(crate) bottleneck_ms: f64,
    pub(crate) stage_memory_bytes: Vec<u128>,
    pub(crate) memory_limit_bytes: Option<u64>,
    pub(crate) optimal: bool,
    pub(crate) gap: f64,
    pub(crate) best_bound_ms: f64,
    pub(crate) status: String,
}

pub(crate) fn cmd_partition(args: PartitionArgs) -> Result<(), CliError> {
    use pplan::plan::partition::{
        self, Backend, IlpOptions, InFlight, Link, PartitionError, Problem,
    };
    let origin = args.profile.display().to_string();
    let text = std::fs::read_to_string(&args.profile)
        .map_err(|e| CliError::Input(format!("cannot read --profile '{origin}': {e}")))?;
    let profile = pplan::inputs::profile::LayerProfile::from_json(&text, &origin)
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
        let hw = pplan::inputs::hardware::Hardware::load(hw)
            .map_err(|e| CliError::Input(e.to_string()))?;
        // The fast link level is the NVLink domain (a node, or an NVL72 rack).
        pb.gpus_per_node = hw.nvlink_domain_gpus() as usize;
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
        Format::Json => print_json(&rep)?,
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

pub(crate) fn partition_report(
    pb: &pplan::plan::partition::Problem,
    part: pplan::plan::partition::Partition,
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
