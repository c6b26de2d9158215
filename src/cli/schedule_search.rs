//! `pplan schedule-search`: the zero-bubble schedule search.

use super::common::*;
use pplan::schedule::generators::{self};
use pplan::sim::{self, SimOptions};
use serde::Serialize;
use std::path::PathBuf;

#[derive(clap::Args)]
pub(crate) struct SearchArgs {
    /// Pipeline devices (ranks) P, one stage each.
    #[arg(long)]
    pub(crate) stages: u32,
    /// Micro-batches M.
    #[arg(long)]
    pub(crate) microbatches: u32,
    /// Forward time of one micro-batch through one stage (1 unit is 1 ms).
    #[arg(long, allow_negative_numbers = true)]
    pub(crate) forward: f64,
    /// Input-gradient backward (I) time.
    #[arg(long, allow_negative_numbers = true)]
    pub(crate) backward_input: f64,
    /// Weight-gradient backward (W) time.
    #[arg(long, allow_negative_numbers = true)]
    pub(crate) backward_weight: f64,
    /// Point-to-point transfer time between neighbouring devices.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub(crate) p2p: f64,
    /// Most micro-batches in flight (activations stashed from F until W ends) on any device;
    /// default P, the peak of 1F1B and ZB-H1.
    #[arg(long)]
    pub(crate) memory_limit: Option<u32>,
    /// Seed of the local-improvement moves (same seed, same result).
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Local-improvement moves to try (default 4000, fewer for large schedules: at most
    /// 100,000,000 action simulations, about 7 s).
    #[arg(long)]
    pub(crate) iterations: Option<u32>,
    /// Write the schedule found here (PyTorch compute_only CSV).
    #[arg(long, short)]
    pub(crate) output: Option<PathBuf>,
    /// Output format of the report.
    #[arg(long, value_enum, default_value_t)]
    pub(crate) format: Format,
    /// Show progress with an estimate of the time left on standard error even when it is not a
    /// terminal (on a terminal it appears by itself after a second).
    #[arg(long)]
    pub(crate) progress: bool,
}

#[derive(Serialize)]
pub(crate) struct SearchReport {
    pub(crate) stages: u32,
    pub(crate) microbatches: u32,
    pub(crate) memory_limit: u32,
    pub(crate) seed: u64,
    pub(crate) makespan: f64,
    pub(crate) constructed_makespan: f64,
    pub(crate) zb_h1_makespan: f64,
    pub(crate) bubble_fraction: f64,
    pub(crate) peak_inflight_microbatches: u32,
    pub(crate) constructions: u32,
    pub(crate) moves_tried: u32,
    pub(crate) moves_kept: u32,
    pub(crate) moves_improving: u32,
}

pub(crate) fn cmd_schedule_search(args: SearchArgs) -> Result<(), CliError> {
    use pplan::plan::schedule_search::{search_with_progress, SearchError, SearchParams};
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
        iterations: args.iterations.unwrap_or_else(|| {
            pplan::plan::schedule_search::default_iterations(args.stages, args.microbatches)
        }),
    };
    let progress = Progress::new("schedule-search", args.progress);
    let found = search_with_progress(&params, Some(&|done, total| progress.update(done, total)));
    progress.finish();
    let found = found.map_err(|e| match e {
        SearchError::Zero { .. }
        | SearchError::TooLarge { .. }
        | SearchError::TooManyIterations { .. }
        | SearchError::TooMuchWork { .. } => CliError::Input(e.to_string()),
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
            pplan::schedule::csv::write(&found.schedule).as_bytes(),
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
        Format::Json => print_json(&rep)?,
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
