//! Helpers shared by the subcommands, one file per concern, re-exported here so a subcommand
//! needs only `use super::common::*`: [`error`] (the error type and exit codes), [`flags`]
//! (shared flag values, formats, units, run cost), [`schedule`] (the schedule flags and loading),
//! [`load`] (plan, model, hardware and profile files), [`output`] (files, charts, plans, JSON), [`plan_args`] (`--plan FILE` as flags)
//! and [`progress`] (the progress line).

pub(crate) mod error;
pub(crate) mod flags;
pub(crate) mod load;
pub(crate) mod output;
pub(crate) mod plan_args;
pub(crate) mod progress;
pub(crate) mod schedule;

pub(crate) use error::*;
pub(crate) use flags::*;
pub(crate) use load::*;
pub(crate) use output::*;
pub(crate) use plan_args::*;
pub(crate) use progress::*;
pub(crate) use schedule::*;
