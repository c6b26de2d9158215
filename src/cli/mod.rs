//! The subcommands, one file each: its arguments, the library calls it makes and what it prints.
//! Shared loading and printing helpers are in [`common`].

pub mod calibrate;
pub mod common;
pub mod emit;
pub mod generate;
pub mod partition;
pub mod predict;
pub mod predict_stages;
pub mod report;
pub mod runs;
pub mod schedule_search;
pub mod schema;
pub mod search;
pub mod search_csv;
pub mod simulate;
pub mod validate;
