//! pplan: a discrete-event simulator and planner for pipeline-parallel training.
//!
//! The crate is a library first; `src/main.rs` and `src/cli/` are a thin command-line front
//! end over it. Its parts stand in layers, each importing only the ones below it
//! (docs/ARCHITECTURE.md draws the map; `tests/layering.rs` checks it):
//!
//! | layer | folder | owns |
//! |---|---|---|
//! | 4 | [`report`] | Gantt charts, Chrome traces, predicted-vs-measured comparison, published runs |
//! | 3 | [`plan`] | predict, configuration search, partitioner, schedule search, plan file, emit |
//! | 2 | [`sim`], [`cost`], [`measured`] | the discrete-event engine; compute, network and memory models; measured traces and logs read into pplan's terms |
//! | 1 | [`schedule`], [`inputs`] | the schedule as data; model, hardware and layer-profile inputs |
//!
//! The most used types are re-exported here.

pub mod cost;
pub mod inputs;
pub mod measured;
pub mod plan;
pub mod report;
pub mod runs;
pub mod schedule;
pub mod sim;

pub use schedule::generators::{generate, GenParams, ScheduleName};
pub use schedule::ir::{Action, Kind, Placement, Schedule, WeightUpdate};
pub use schedule::validate::validate;
pub use sim::{simulate, Costs, SimOptions, SimResult, StageCost, Timeline, UnitCosts};
