//! The target names of `pplan emit --target` and the dispatch to each emitter.

use crate::plan::emit::common::{EmitError, Emitted};
use crate::plan::emit::megatron;
use crate::plan::emit::torchtitan;
use crate::plan::emit::torchtitan_toml;
use crate::plan::plan_file::Plan;
use crate::schedule::csv;

/// What to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    Executor,
    Megatron,
    /// Current torchtitan: a Python config function (`--module`/`--config`).
    Torchtitan,
    /// torchtitan 0.2.x: a TOML job config.
    TorchtitanV02,
    Csv,
}

impl std::str::FromStr for Target {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "executor" => Ok(Target::Executor),
            "megatron" => Ok(Target::Megatron),
            "torchtitan" => Ok(Target::Torchtitan),
            "torchtitan-v0.2" => Ok(Target::TorchtitanV02),
            "csv" => Ok(Target::Csv),
            _ => Err(format!(
                "unknown target '{s}' (valid: executor, megatron, torchtitan, torchtitan-v0.2, csv)"
            )),
        }
    }
}

/// Emit `plan` for `target`. `csv_path` is the path a torchtitan config should name for its
/// schedule CSV (only used when the plan's order needs one).
pub fn emit(plan: &Plan, target: Target, csv_path: Option<&str>) -> Result<Emitted, EmitError> {
    match target {
        Target::Executor => Ok(Emitted {
            text: plan.to_json(),
            notes: Vec::new(),
            schedule_csv: None,
        }),
        Target::Csv => Ok(Emitted {
            text: csv::write(&plan.schedule_ir()?),
            notes: Vec::new(),
            schedule_csv: None,
        }),
        Target::Megatron => Ok(megatron::megatron(plan)),
        Target::Torchtitan => torchtitan::torchtitan(plan, csv_path),
        Target::TorchtitanV02 => torchtitan_toml::torchtitan_toml(plan, csv_path),
    }
}
