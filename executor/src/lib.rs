//! pplan-exec: runs a pplan plan for real and writes a measured Chrome trace.
//!
//! - [`spec`]: the model, weights, data, loss and optimizer every backend computes;
//! - [`backend`]: the interface between the runner and a backend;
//! - [`run`]: the backend-independent runner (a thread per device) and the measured trace;
//! - [`kineto`]: the measured run as PyTorch-profiler (Kineto) traces, one per device;
//! - [`cpu`]: the CPU backend (f32 math, channels between device threads);
//! - [`cuda`]: the CUDA backend (GPUs, through cudarc; builds without CUDA);
//! - [`profile`]: measures layer and hardware profiles on a backend ([`profile_layers`]: the
//!   CPU's dense and MoE layers on their replicas).

pub mod backend;
pub mod cpu;
pub mod cuda;
pub mod kineto;
pub mod profile;
pub mod profile_layers;
pub mod run;
pub mod spec;
