//! What the user sees of a simulation or a measurement: Gantt charts, Chrome traces and the
//! predicted-vs-measured comparison behind `pplan validate` (published runs are data:
//! `crate::runs`).
//!
//! May import every other part of the library; nothing imports it but the CLI.

pub mod compare;
pub mod gantt;
pub mod measured;
pub mod trace;
