//! What a stage holds before it runs anything: its layer count (the planner's choice), and
//! the model state (weights, gradients, optimizer state) each device keeps for its stages'
//! parameters, asked of the cost layer ([`crate::cost::step::stage_params`],
//! [`crate::cost::step::model_state_floor`]). [`step_costs`](super::step_costs) builds its
//! stages from these; the search uses [`model_state_floor`] to reject a candidate whose model
//! state alone cannot fit before it costs any of its stages (exact: a device's static bytes
//! are its model state plus working buffers, never less).

use super::balance::balanced_split;
use super::request::{PredictError, PredictRequest, Split};
use crate::cost::step;
use crate::schedule::ir::Placement;

/// The transformer layers of each of `num_stages` stages: the request's own counts, its
/// Megatron-Core split rule, the balanced split, or the even split (the first
/// `layers mod stages` stages a layer more).
pub fn stage_layers_for(
    req: &PredictRequest,
    dp: u64,
    num_stages: u32,
    placement: Placement,
) -> Result<Vec<u32>, PredictError> {
    let model = req.model;
    Ok(match (&req.stage_layers, req.partition) {
        (Some(c), _) if c.len() == num_stages as usize => c.clone(),
        (_, Split::Megatron(rule)) => rule
            .stage_layers(
                model.num_layers,
                req.pp as u32,
                req.chunks as u32,
                placement == Placement::V,
            )
            .map_err(PredictError::StageLayers)?,
        (_, Split::Balanced) => balanced_split(req, dp, num_stages, placement)?,
        _ => crate::inputs::profile::even_split(model.num_layers, num_stages),
    })
}

/// Each device's model state in bytes for `req` over `num_stages` stages placed by
/// `placement` ([`crate::cost::step::model_state_floor`]): a floor of `Costs::static_bytes`,
/// which adds the working buffers.
pub fn model_state_floor(
    req: &PredictRequest,
    dp: u64,
    num_stages: u32,
    placement: Placement,
) -> Result<Vec<u64>, PredictError> {
    let cm = req.cost_model(dp);
    let layers = stage_layers_for(req, dp, num_stages, placement)?;
    let p = req.pp as u32;
    let mtp = super::mtp::mtp_stage(req, layers.len());
    Ok(step::model_state_floor(&cm, &layers, mtp, |s| {
        placement.device_of(s as u32, p) as usize
    }))
}
