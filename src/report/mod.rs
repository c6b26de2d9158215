//! What the user sees of a simulation or a measurement: Gantt charts, Chrome traces, the
//! predicted-vs-measured comparison behind `pplan validate` and the HTML page of `pplan report` (published runs are data:
//! `crate::runs`).
//!
//! May import every other part of the library; nothing imports it but the CLI.

pub mod compare;
pub mod gantt;
pub mod html;
pub mod measured;
pub mod trace;
