//! `pplan validate`: a measured run beside a prediction. This file only dispatches: runs files
//! to runs.rs, a pair of pplan traces to [`trace`] (action by action), anything else to
//! [`measured`] (profiler traces, Nsight exports, training logs, or a plan). The flags are in
//! [`args`].

pub(crate) mod args;
pub(crate) mod measured;
pub(crate) mod trace;

pub(crate) use args::ValidateArgs;

use super::common::*;
use std::path::Path;

/// Is this a pplan trace (plain JSON without Kineto's `cat` fields)? Those keep the original
/// trace-against-trace comparison and its messages.
fn is_pplan_trace(path: &Path) -> bool {
    match std::fs::read(path) {
        Ok(b) => {
            let t = b.strip_prefix(b"\xEF\xBB\xBF".as_slice()).unwrap_or(&b);
            matches!(
                t.iter().find(|c| !c.is_ascii_whitespace()),
                Some(b'{' | b'[')
            ) && !t.windows(5).any(|w| w == b"\"cat\"")
        }
        Err(_) => true,
    }
}

pub(crate) fn cmd_validate(args: ValidateArgs) -> Result<(), CliError> {
    if !args.runs.is_empty() {
        return super::runs::cmd_validate_runs(&args);
    }
    if args.measured.is_empty() {
        return input(
            "validate needs --measured FILE... (a measured run, with --predicted or --plan to compare it with), or --runs FILE... (runs files)",
        );
    }
    let pplan_pair = args.plan.is_none()
        && args.measured.len() == 1
        && args.predicted.is_some()
        && !args.measured[0].is_dir()
        && is_pplan_trace(&args.measured[0]);
    if !pplan_pair {
        return measured::cmd(args);
    }
    trace::cmd(args)
}
