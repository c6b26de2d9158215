//! The multi-token prediction block in a step: which stage holds it (the `--pipeline-layout`'s
//! 'm', else the last stage, as Megatron-Core's `mtp_on_this_rank` places it without a
//! layout), what its depths add to that stage (their lookup, projection and transformer
//! layer: [`CostModel::mtp_depth`]) and to the last stage (one more output layer and loss per
//! depth: Megatron-Core's `process_mtp_loss` runs on the post-process stage), and the
//! parameters the MTP stage holds. Formulas: docs/cost-model.md, "Multi-token prediction".

use super::request::PredictRequest;
use crate::cost::{BlockCost, CostModel};

/// The stage of `num_stages` that holds `req`'s multi-token prediction depths; `None` without
/// them.
pub fn mtp_stage(req: &PredictRequest, num_stages: usize) -> Option<usize> {
    if req.model.mtp_layers == 0 || num_stages == 0 {
        return None;
    }
    let last = num_stages - 1;
    Some(req.mtp_stage.map_or(last, |s| (s as usize).min(last)))
}

/// What the depths add to the stage that holds them, for one micro-batch on one rank, given
/// the decoder's last layer as the step costs it (`last_layer`, its activation bytes
/// `last_layer_bytes`): `mtp_layers` x ([`CostModel::mtp_depth`], the layer's activations and
/// [`CostModel::mtp_projection_activation_bytes`]).
pub fn depths(cm: &CostModel, last_layer: BlockCost, last_layer_bytes: u64) -> (BlockCost, u64) {
    let n = cm.model.mtp_layers;
    let cost = cm.mtp_depth(last_layer).scale(n as f64);
    let bytes = last_layer_bytes
        .saturating_add(cm.mtp_projection_activation_bytes())
        .saturating_mul(n as u64);
    (cost, bytes)
}

/// Parameters the stage holding the depths adds on one rank: `(dense, expert)`. Dense: each
/// depth's transformer layer of the last layer's kind (its dense part over t), its projection
/// and norms over t, and, on any stage but the first, the word embedding Megatron-Core builds
/// there again for the depths' lookups (`GPTModel.__init__`: `if self.pre_process or
/// self.mtp_process`, its gradient all-reduced with the first stage's as a tied output
/// layer's is): `V h / t`. Expert: each depth's routed experts on this rank when the last
/// layer is a MoE layer. The output layer is the last stage's own, not counted again.
pub fn stage_params(cm: &CostModel, stage: usize) -> (f64, f64) {
    let model = cm.model;
    let n = model.mtp_layers as u64;
    if n == 0 {
        return (0.0, 0.0);
    }
    let moe = u64::from(model.is_moe_layer(model.last_layer()));
    let layer = cm.layer_params_per_kind().rank(n * (1 - moe), n * moe);
    let projection = (n * model.mtp_projection_params()) as f64 / cm.layout.tp as f64;
    let embedding = if stage == 0 {
        0.0
    } else {
        cm.embedding_shard_params()
    };
    (layer.dense + projection + embedding, layer.expert)
}
