//! Placeholder for the CUDA backend, which is built on another branch against the same
//! interface; it is replaced at merge.

use crate::backend::{DeviceWorker, ExecError, RunOptions};
use pplan::plan::Plan;

/// The CUDA workers of a plan.
pub fn workers(_plan: &Plan, _opts: &RunOptions) -> Result<Vec<Box<dyn DeviceWorker>>, ExecError> {
    Err(ExecError::Unavailable(
        "CUDA backend not compiled into this branch".into(),
    ))
}

/// Whether CUDA can run here, and on what.
pub fn availability() -> Result<String, ExecError> {
    Err(ExecError::Unavailable(
        "CUDA backend not compiled into this branch".into(),
    ))
}
