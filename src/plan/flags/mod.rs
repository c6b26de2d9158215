//! The command-line flags that describe a prediction (`pplan predict`, and `pplan search`'s
//! stack pins), as clap argument groups the binary flattens into its subcommands, and the
//! [`crate::plan::predict::PredictRequest`] they build. A runs file row
//! (`pplan validate --runs`) is parsed through the same definitions.
//!
//! Parses and checks; no IO (the caller reads `--model`, `--hardware` and `--profile`).

mod predict;
mod stack;
mod values;

pub use predict::{set_mtp_layers, FlagsPredictError, PredictFlags, SplitRuleFlags};
pub use stack::{check_recipe, precision_and_recipe, zero_stage, StackFlags, StackPreset};
pub use values::{
    count, join_negative_values, positive, positive_or_auto, AttentionArg, Auto, FlagError, OnOff,
};
