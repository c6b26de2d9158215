//! `pplan generate`: write a built-in schedule as a PyTorch CSV.

use super::common::*;
use pplan::schedule::ir::Placement;
use std::path::PathBuf;

#[derive(clap::Args)]
pub(crate) struct GenerateArgs {
    #[command(flatten)]
    pub(crate) schedule: ScheduleArgs,
    /// Output file (default: standard output).
    #[arg(long, short)]
    pub(crate) output: Option<PathBuf>,
    /// Write CRLF line ends, byte for byte what PyTorch's _dump_csv writes.
    #[arg(long)]
    pub(crate) crlf: bool,
}

pub(crate) fn cmd_generate(args: GenerateArgs) -> Result<(), CliError> {
    let loaded = load_schedule(&args.schedule)?;
    let text = if args.crlf {
        pplan::schedule::csv::write_torch(&loaded.schedule)
    } else {
        pplan::schedule::csv::write(&loaded.schedule)
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
