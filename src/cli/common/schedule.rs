//! The schedule flags (`--schedule`, `--pp`, `--microbatches`, ... or `--file`) and loading
//! the schedule they name.

use super::error::{input, CliError};
use super::flags::positive;
use clap::ValueEnum;
use pplan::schedule::generators::{self, GenParams, ScheduleName};
use pplan::schedule::ir::{Placement, Schedule, WeightUpdate};
use std::path::Path;

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
