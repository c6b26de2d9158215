//! `pplan validate`'s flags, on their own so that the subcommand's parts (and `pplan validate
//! --runs` in runs.rs) read them without importing the dispatcher.

use crate::cli::common::{count, Format};
use std::path::PathBuf;

#[derive(clap::Args)]
pub(crate) struct ValidateArgs {
    /// The predicted Chrome trace (pplan simulate/predict --trace).
    #[arg(long)]
    pub(crate) predicted: Option<PathBuf>,
    /// A plan (pplan predict/search --output): its predicted step time, bubble, TFLOP/s and
    /// memory, and its layout (to attribute collectives by group size and to map ranks to
    /// pipeline devices).
    #[arg(long)]
    pub(crate) plan: Option<PathBuf>,
    /// The measurement: a pplan trace (pplan-exec run --trace; events of several steps carry
    /// args.step), PyTorch profiler traces (one per rank, .json or .json.gz, or a directory of
    /// them), an Nsight Systems SQLite export, or a Megatron-LM / torchtitan log.
    #[arg(long, num_args = 1.., conflicts_with = "runs")]
    pub(crate) measured: Vec<PathBuf>,
    /// Runs files (DESIGN.md, "Runs files"; e.g. data/runs/*.json): predict every row as
    /// `pplan predict` would with its flags and compare it with its measured figure; errors
    /// per row, per group and overall, the worst rows and the runs predicted not to fit.
    #[arg(long, num_args = 1.., conflicts_with_all = ["predicted", "plan"])]
    pub(crate) runs: Vec<PathBuf>,
    /// With --runs: how the per-group errors group the rows: source (each runs file),
    /// hardware, model or kind (dense or mixture of experts).
    #[arg(long, default_value = "source", requires = "runs")]
    pub(crate) group_by: String,
    /// With --runs: predict every row on this hardware profile (a bundled name or a JSON
    /// file, e.g. one `pplan calibrate --runs --out-hardware` wrote) instead of its own.
    #[arg(long, requires = "runs")]
    pub(crate) hardware: Option<String>,
    /// With --runs: beside each row's own layout, the best layout an unpinned `pplan search`
    /// finds for the same model, GPUs, global batch, sequence length, hardware and stack
    /// switches (the row's flags less its layout), how much faster pplan predicts it ("search
    /// claims") and where the row's layout ranks among the search's feasible candidates.
    #[arg(long, requires = "runs")]
    pub(crate) against_search: bool,
    /// Warm-up steps to discard from each trace (default: 1 when a trace has several steps).
    #[arg(long, value_parser = count::<usize>)]
    pub(crate) skip_steps: Option<usize>,
    /// Compare the common actions even when the two schedules' compute actions differ.
    #[arg(long)]
    pub(crate) allow_unmatched: bool,
    /// Draw predicted (upper lane) against measured (lower lane) per device, or the measured
    /// step per rank without an action-by-action prediction: FILE.svg or FILE.png.
    #[arg(long)]
    pub(crate) gantt: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t)]
    pub(crate) format: Format,
}
