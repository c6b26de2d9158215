//! `pplan calibrate`'s flags, on their own so that runs.rs (`calibrate --runs`) reads them
//! without importing the subcommand that dispatches to it.

use crate::cli::common::{count, Format};
use std::path::PathBuf;

#[derive(clap::Args)]
pub(crate) struct CalibrateArgs {
    /// The measured run: pplan-exec's trace, PyTorch-profiler traces (one per rank, or a
    /// directory of them) or an Nsight Systems SQLite export.
    #[arg(long, num_args = 1.., conflicts_with = "runs")]
    pub(crate) trace: Vec<PathBuf>,
    /// The plan that was run (pplan predict/search --output).
    #[arg(long, conflicts_with = "runs")]
    pub(crate) plan: Option<PathBuf>,
    /// Runs files (DESIGN.md, "Runs files"; e.g. data/runs/*.json): fit the --fit parameters
    /// of the hardware profile to their measured figures by least squares, instead of a
    /// layer profile to one trace.
    #[arg(long, num_args = 1..)]
    pub(crate) runs: Vec<PathBuf>,
    /// With --runs: the parameters to fit, comma-separated (docs/cost-model.md, "What can
    /// be fitted", e.g. gpu.gemm_training_factor). Each value is shared by every row's
    /// profile; stack.moe_layer_host_s, Megatron-Core's host time for a MoE layer, by every
    /// row that takes its default.
    #[arg(long, value_delimiter = ',', requires = "runs")]
    pub(crate) fit: Vec<String>,
    /// With --runs: leave each group out in turn, fit to the others and report the left-out
    /// error: none, source (each runs file) or hardware (each profile).
    #[arg(long, default_value = "none", requires = "runs")]
    pub(crate) cv: String,
    /// A prior layer profile: the fitted times keep its per-layer proportions and its bytes.
    #[arg(long)]
    pub(crate) profile: Option<PathBuf>,
    /// The hardware profile to fit (default: the plan's `hardware`). With --runs: only the
    /// rows on this profile (its `name`) are fitted, and --out-hardware writes it; several
    /// names, comma-separated, fit one value shared by their rows (profiles of one GPU die).
    #[arg(long)]
    pub(crate) hardware: Option<String>,
    /// With --runs: only the rows of this kind are fitted: dense or moe (mixture of experts),
    /// for a parameter that stands for a mechanism of that kind of model.
    #[arg(long, requires = "runs", value_parser = ["dense", "moe"])]
    pub(crate) kind: Option<String>,
    /// Where to write the calibrated layer profile.
    #[arg(long, conflicts_with = "runs")]
    pub(crate) out_profile: Option<PathBuf>,
    /// Where to write the calibrated hardware profile.
    #[arg(long)]
    pub(crate) out_hardware: Option<PathBuf>,
    /// Warm-up steps to drop (default: 1 when the trace has several steps).
    #[arg(long, value_parser = count::<usize>)]
    pub(crate) skip_steps: Option<usize>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub(crate) format: Format,
}
