//! The command-line flags that describe a prediction (`pplan predict`, and `pplan search`'s
//! stack pins), as clap argument groups the binary flattens into its subcommands, and the
//! [`crate::plan::predict::PredictRequest`] they build. A runs file row
//! (`pplan validate --runs`) is parsed through the same definitions.
//!
//! A plan file is read back as the same flags ([`plan_args`]: `predict --plan`).
//!
//! Parses and checks; no IO (the caller reads `--model`, `--hardware` and `--profile`).

mod from_plan;
mod predict;
mod stack;
mod values;

pub use from_plan::{plan_args, PlanArg};
pub use predict::{set_mtp_layers, FlagsPredictError, PredictFlags, SplitRuleFlags};
pub use stack::{check_recipe, precision_and_recipe, zero_stage, StackFlags, StackPreset};
pub use values::{
    count, join_negative_values, positive, positive_or_auto, AttentionArg, Auto, FlagError, OnOff,
};
