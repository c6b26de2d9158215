//! pplan-exec: runs a pplan plan for real and writes a measured Chrome trace.
//!
//! - [`spec`]: the model, weights, data, loss and optimizer every backend computes;
//! - [`backend`]: the interface between the runner and a backend;
//! - [`cuda`]: the CUDA backend (GPUs, through cudarc; builds without CUDA).

pub mod backend;
pub mod cuda;
pub mod spec;
