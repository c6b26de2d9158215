//! pplan: a discrete-event simulator and planner for pipeline-parallel training.
//!
//! The crate is a library first; `src/main.rs` is a thin CLI over it. The map of modules and
//! the invariants each keeps are in `docs/ARCHITECTURE.md`.

pub mod compare;
pub mod cost;
pub mod csv;
pub mod emit;
pub mod gantt;
pub mod generators;
pub mod hardware;
pub mod ir;
pub mod memory;
pub mod model;
pub mod partition;
pub mod plan;
pub mod predict;
pub mod profile;
pub mod schedule_search;
pub mod search;
pub mod sim;
pub mod trace;
pub mod validate;
pub mod validation;

pub use generators::{generate, GenParams, ScheduleName};
pub use ir::{Action, Kind, Placement, Schedule, WeightUpdate};
pub use sim::{simulate, Costs, SimOptions, SimResult, StageCost, Timeline, UnitCosts};
pub use validate::validate;
