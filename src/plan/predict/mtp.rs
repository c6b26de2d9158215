//! The multi-token prediction block in a step: which stage holds it (the `--pipeline-layout`'s
//! 'm', else the last stage, as Megatron-Core's `mtp_on_this_rank` places it without a
//! layout). What its depths cost and the parameters they add are the cost layer's
//! ([`CostModel::mtp_depths`](crate::cost::CostModel::mtp_depths),
//! [`CostModel::mtp_stage_params`](crate::cost::CostModel::mtp_stage_params), used by
//! [`crate::cost::step`]). Formulas: docs/cost-model.md, "Multi-token prediction".

use super::request::PredictRequest;

/// The stage of `num_stages` that holds `req`'s multi-token prediction depths; `None` without
/// them.
pub fn mtp_stage(req: &PredictRequest, num_stages: usize) -> Option<usize> {
    if req.model.mtp_layers == 0 || num_stages == 0 {
        return None;
    }
    let last = num_stages - 1;
    Some(req.mtp_stage.map_or(last, |s| (s as usize).min(last)))
}
