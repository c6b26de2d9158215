//! Planning: everything that turns (model, hardware, parallel layout) into a simulated
//! training step and chooses among layouts.
//!
//! - [`predict`] builds the step (per-stage costs from [`crate::cost`], the schedule from
//!   [`crate::schedule`]) and simulates it; [`profiled`] does the same from a layer profile;
//! - [`search`] enumerates layouts and ranks the feasible ones, with the schedule's memory
//!   summary in [`search::ScheduleSummary`];
//! - [`partition`] splits layers into stages (exact DP, DP-seeded ILP in `partition::ilp`);
//! - [`schedule_search`] searches zero-bubble F/I/W orders; [`run_cost`] turns a step time
//!   into a training run's days, GPU-hours and cost;
//! - [`plan_file`] is the versioned plan file, [`emit`] writes it for other systems and
//!   [`megatron_args`] reads a Megatron-LM command line back into a model and layout.
//!
//! - [`calibrate`] fits a layer profile and hardware terms to a measured run of a plan;
//!   [`flags`] is `predict`'s flags (and `search`'s stack flags) and the request they build.
//!
//! May import `schedule`, `inputs`, `sim`, `cost` and `measured`; never `report`.

pub mod calibrate;
pub mod emit;
pub mod flags;
pub mod megatron_args;
pub mod partition;
pub mod plan_check;
pub mod plan_file;
pub mod predict;
pub mod profiled;
pub mod run_cost;

pub mod schedule_search;
pub mod search;
