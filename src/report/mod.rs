//! What the user sees of a simulation or a measurement: Gantt charts, Chrome traces, the
//! predicted-vs-measured comparison behind `pplan validate`, and the comparison with
//! published runs.
//!
//! May import every other part of the library; nothing imports it but the CLI.

pub mod bridge_h100;
pub mod compare;
pub mod gantt;
pub mod llama3_405b;
pub mod measured;
pub mod moe_long_context;
pub mod moe_modelzoo;
pub mod nemo;
pub mod nemo_long_context;
pub mod torchtitan;
pub mod trace;
pub mod validation;
