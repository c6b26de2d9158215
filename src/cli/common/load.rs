//! Reading the input files the subcommands name: `--plan`, `--model` with `--hardware`, and
//! `--profile`; errors name the file and the field.

use super::error::CliError;
use std::path::Path;

/// Read and check a plan file given with `--plan`.
pub(crate) fn load_plan(path: &Path) -> Result<pplan::plan::plan_file::Plan, CliError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Input(format!("cannot read --plan file '{origin}': {e}")))?;
    pplan::plan::plan_file::Plan::from_json(&text, &origin)
        .map_err(|e| CliError::Input(format!("--plan: {e}")))
}

/// A plan to predict again (`predict --plan`, `simulate --plan`, `pplan report`): as
/// [`load_plan`], with `parallelism.profile` (a relative path read against the plan file's
/// folder) resolved and present, else bad input naming the field.
pub(crate) fn load_plan_to_predict(path: &Path) -> Result<pplan::plan::plan_file::Plan, CliError> {
    let mut plan = load_plan(path)?;
    if let Some(profile) = &plan.parallelism.profile {
        let given = Path::new(profile);
        let resolved = if given.is_relative() {
            path.parent().unwrap_or(Path::new("")).join(given)
        } else {
            given.to_path_buf()
        };
        if !resolved.is_file() {
            return Err(CliError::Input(format!(
                "--plan: {}: field `parallelism.profile`: the layer profile '{}' is not there{}; valid: the path of the measured layer profile the plan was predicted with (absolute, or relative to the plan file's folder), or no field to predict with the cost model's own layer costs",
                path.display(),
                profile,
                if given.is_relative() {
                    format!(" (read as '{}')", resolved.display())
                } else {
                    String::new()
                }
            )));
        }
        plan.parallelism.profile = Some(resolved.to_string_lossy().into_owned());
    }
    Ok(plan)
}

/// `--model` (with an optional `--seq-len` override) and `--hardware`, as predict and search read them.
pub(crate) fn load_model_and_hardware(
    model: &str,
    seq_len: Option<u64>,
    hardware: &str,
) -> Result<
    (
        pplan::inputs::model::Model,
        pplan::inputs::hardware::Hardware,
    ),
    CliError,
> {
    let name = model;
    let mut model =
        pplan::inputs::model::Model::load(model).map_err(|e| CliError::Input(e.to_string()))?;
    if seq_len.is_none() && model.seq_len_defaulted {
        eprintln!(
            "note: --model '{name}' gives no training sequence length (max_position_embeddings is the context limit); using {} tokens, pplan's default ({} or max_position_embeddings when shorter); set --seq-len to change it",
            model.seq_len,
            pplan::inputs::model::DEFAULT_SEQ_LEN
        );
    }
    if let Some(len) = seq_len {
        model.seq_len = len;
        model
            .check()
            .map_err(|e| CliError::Input(format!("--seq-len {len}: {e}")))?;
    }
    let hw = pplan::inputs::hardware::Hardware::load(hardware)
        .map_err(|e| CliError::Input(e.to_string()))?;
    Ok((model, hw))
}

/// Read a `--profile` file; errors name the file and the field.
pub(crate) fn load_profile(path: &Path) -> Result<pplan::inputs::profile::LayerProfile, CliError> {
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::Input(format!("cannot read --profile file '{origin}': {e}")))?;
    pplan::inputs::profile::LayerProfile::from_json(&text, &origin)
        .map_err(|e| CliError::Input(format!("--profile: {e}")))
}
