//! The schedule as data: the action IR, the generators of every schedule family, PyTorch's
//! CSV format and the one validator.
//!
//! Pure: no costs, no clock, no IO beyond parsing text handed to it. Imports nothing else of
//! the crate.

pub mod csv;
pub mod generators;
pub mod ir;
pub mod list_scheduler;
pub mod validate;

pub use generators::{generate, GenParams, ScheduleName};
pub use ir::{Action, Kind, Placement, Schedule, Token, WeightUpdate};
pub use validate::validate;
