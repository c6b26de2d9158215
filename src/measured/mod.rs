//! What a measured run gives, whatever file it came from: PyTorch profiler (Kineto) traces,
//! Nsight Systems SQLite exports, Megatron-LM and torchtitan logs, and pplan's own traces
//! (executor or simulator), read into one model ([`timeline::Measured`]) and broken down in
//! pplan's terms ([`breakdown`]). docs/validate.md has every rule and formula.
//!
//! Imports only `schedule` (for the action syntax `0F1`).

pub mod breakdown;
pub mod checks;
pub mod classify;
pub mod json_stream;
pub mod kernels;
pub mod kineto;
pub mod load;
pub mod logs;
pub mod nsys;
pub mod pplan_trace;
pub mod timeline;
