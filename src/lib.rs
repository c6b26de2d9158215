//! pplan: a discrete-event simulator and planner for pipeline-parallel training.
//!
//! The crate is a library first; `src/main.rs` is a thin CLI over it. The map of modules and
//! the invariants each keeps are in `docs/ARCHITECTURE.md`.

pub mod csv;
pub mod gantt;
pub mod generators;
pub mod ir;
pub mod schedule_search;
pub mod sim;
pub mod trace;
pub mod validate;

pub use generators::{generate, GenParams, ScheduleName};
pub use ir::{Action, Kind, Placement, Schedule, WeightUpdate};
pub use sim::{simulate, Costs, SimOptions, SimResult, StageCost, Timeline, UnitCosts};
pub use validate::validate;
