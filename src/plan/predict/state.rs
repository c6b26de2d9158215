//! What a stage holds before it runs anything: its layer count, its parameters on one rank,
//! and the model state (weights, gradients, optimizer state) each device keeps for them.
//! [`step_costs`](super::step_costs) builds its stages from these; the search uses
//! [`model_state_floor`] to reject a candidate whose model state alone cannot fit before it
//! costs any of its stages (exact: a device's static bytes are its model state plus working
//! buffers, never less).

use super::balance::balanced_split;
use super::request::{PredictError, PredictRequest, Split};
use crate::cost::memory;
use crate::cost::CostModel;
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

/// One stage's parameters on one rank: `dense` (attention, dense and shared MLPs, routers,
/// norms, split over t; the embedding shard on the first stage, the output layer's on the
/// last, the multi-token prediction depths' on theirs: [`super::mtp::stage_params`]) and the
/// routed experts' `expert` (split over ep x etp; 0 for a dense model).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StageParams {
    pub dense: f64,
    pub expert: f64,
}

/// Each stage's parameters on one rank, for the stages' layer counts `stage_layers`, the
/// multi-token prediction depths on stage `mtp_stage` ([`super::mtp::mtp_stage`]).
pub fn stage_params(
    cm: &CostModel,
    stage_layers: &[u32],
    mtp_stage: Option<usize>,
) -> Vec<StageParams> {
    let model = cm.model;
    let params_embedding = cm.embedding_shard_params();
    let last = stage_layers.len().saturating_sub(1);
    // Every stage holds some dense and some MoE layers: each kind's parameters once.
    let per_kind = cm.layer_params_per_kind();
    let mut first_layer = 0usize;
    stage_layers
        .iter()
        .enumerate()
        .map(|(s, &n)| {
            let n = n as usize;
            let k = model.moe.as_ref().map_or(0, |m| m.count_in(first_layer, n));
            let rp = per_kind.rank(n as u64 - k, k);
            let (mut dense, mut expert) = (rp.dense, rp.expert);
            if mtp_stage == Some(s) {
                let (d, e) = super::mtp::stage_params(cm, s);
                dense += d;
                expert += e;
            }
            first_layer += n;
            if s == 0 {
                dense += params_embedding;
            }
            // Untied output weights, or the tied copy Megatron keeps on the last stage when
            // the first and last stages differ.
            if s == last && (!model.tied_embeddings || stage_layers.len() > 1) {
                dense += params_embedding;
            }
            StageParams { dense, expert }
        })
        .collect()
}

/// Each device's model state in bytes: the weights, gradients and optimizer state of its
/// stages' dense parameters (sharded over the data-parallel ranks as deep as the ZeRO stage
/// says) and of its routed experts (over the expert data-parallel group). A floor of
/// `Costs::static_bytes`, which adds the working buffers.
pub fn model_state_floor(
    req: &PredictRequest,
    dp: u64,
    num_stages: u32,
    placement: Placement,
) -> Result<Vec<u64>, PredictError> {
    let cm = req.cost_model(dp);
    let layers = stage_layers_for(req, dp, num_stages, placement)?;
    let p = req.pp as u32;
    let mut dense = vec![0.0f64; p as usize];
    let mut expert = vec![0.0f64; p as usize];
    let mtp = super::mtp::mtp_stage(req, layers.len());
    for (s, sp) in stage_params(&cm, &layers, mtp).iter().enumerate() {
        let d = placement.device_of(s as u32, p) as usize;
        dense[d] += sp.dense;
        expert[d] += sp.expert;
    }
    let per_param = req.stack.state_bytes(req.hardware);
    let shard = cm.shard_ranks();
    Ok(dense
        .iter()
        .zip(&expert)
        .map(|(&prm, &e)| {
            let (w, g, o) =
                memory::model_state_parts(prm.ceil() as u64, shard, req.stack.zero, per_param);
            let experts = if req.model.moe.is_some() {
                cm.expert_state_bytes(e)
            } else {
                0
            };
            w.saturating_add(g)
                .saturating_add(o)
                .saturating_add(experts)
        })
        .collect())
}
