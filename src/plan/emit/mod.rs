//! `pplan emit`: a checked [`Plan`](crate::plan::plan_file::Plan) written for the systems that
//! run it.
//!
//! Five targets (docs/emit.md has the mapping of every field and the upstream file and commit
//! each flag or key was checked against):
//! - `executor`: the normalised plan JSON the executor crate reads (`Plan::to_json`);
//! - `megatron` ([`megatron`]): a bash array of Megatron-LM arguments, one flag per line, with
//!   the model's architecture, the layout and the stack the prediction assumed; read back by
//!   [`crate::plan::megatron_args`];
//! - `torchtitan` ([`torchtitan`]): a Python config function for current torchtitan (its
//!   `--module`/`--config` form), model name and flavor included;
//! - `torchtitan-v0.2` ([`torchtitan_toml`]): a TOML job config for torchtitan 0.2.x;
//! - `csv`: the schedule in PyTorch's `compute_only` CSV with LF line ends (`csv::write`), as
//!   `pplan generate` writes it.
//!
//! What a target cannot express is never dropped silently: it is written as a comment line in
//! the output and returned in [`Emitted::notes`]. Pure functions of the plan: no IO,
//! byte-stable output.
//!
//! Files: [`common`] (the result, errors, notes shared by the frameworks), [`target`] (the
//! target names and the dispatch), one file per framework.

pub mod common;
pub mod megatron;
pub mod megatron_arch;
pub mod target;
pub mod torchtitan;
pub mod torchtitan_toml;

pub use common::{EmitError, Emitted};
pub use target::{emit, Target};
