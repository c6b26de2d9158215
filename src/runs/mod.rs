//! Runs as data (DESIGN.md, "Runs files"): published or measured training runs, each the
//! `pplan predict` flags it ran with and the figure it reached; `pplan validate --runs`
//! predicts them and `pplan calibrate --runs` fits hardware-profile parameters to them.
//!
//! - [`file`] reads and checks a runs file (a bad row is kept in its place with its error);
//! - [`metric`] is what a measured figure is (tokens/s per GPU, step time, TFLOP/s in a
//!   named FLOP convention) and the error's sign convention;
//! - [`predict`] parses a row's flags with `predict`'s own parser and reads the model,
//!   hardware and layer profile it names;
//! - [`validate`] predicts the rows and summarises the errors per group;
//! - [`against_search`] puts each row's own layout beside an unpinned search's best
//!   (`validate --runs --against-search`);
//! - [`fit`] fits named profile parameters by least squares, with leave-one-group-out
//!   cross-validation.
//!
//! Reads the runs files and the model, hardware and profile files they name; writes nothing.
//! May import every other part of the library; nothing imports it but the CLI.

pub mod against_search;
pub mod file;
pub mod fit;
pub mod metric;
pub mod predict;
pub mod validate;
