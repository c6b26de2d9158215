//! A measured layer profile (`--profile`, [`crate::inputs::profile`]) in place of the cost
//! model: a run of profiled layers as a [`BlockCost`], and the embedding's and output layer's
//! costs, measured where the profile has them (docs/cost-model.md, the one place a
//! measurement replaces the formulas). Used by [`super::step`] and by the planner's balanced
//! split.

use super::compute::{BlockCost, Part};
use super::stack::CostModel;
use crate::inputs::profile::{sum_layers, ModelProfile, ProfiledLayer};

/// A run of profiled layers as a [`BlockCost`]: measured times, no tensor-parallel part shown
/// separately (the measurement includes whatever collectives ran).
pub fn profiled_block(layers: &[ProfiledLayer]) -> BlockCost {
    let s = sum_layers(layers);
    let part = |ms: f64| Part {
        gemm_s: ms / 1e3,
        ..Part::default()
    };
    BlockCost {
        forward: part(s.forward_ms),
        backward_input: part(s.backward_input_ms),
        backward_weight: part(s.backward_weight_ms),
    }
}

/// The embedding's and the output layer's costs: measured where the profile has them, else the
/// cost model's.
pub fn end_blocks(cm: &CostModel, prof: Option<ModelProfile>) -> (BlockCost, BlockCost) {
    let profiled = |l: Option<&ProfiledLayer>| l.map(|l| profiled_block(std::slice::from_ref(l)));
    let embedding = prof
        .and_then(|mp| profiled(mp.embedding))
        .unwrap_or(cm.embedding());
    let output = prof
        .and_then(|mp| profiled(mp.output))
        .unwrap_or(cm.output_layer());
    (embedding, output)
}
