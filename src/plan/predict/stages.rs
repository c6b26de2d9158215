//! `pplan predict --per-stage`: each pipeline rank's share of the step, in the manner of
//! Megatron-LM's `report_theoretical_memory.py` (weights and optimizer state per rank, the
//! activations of the rank that stashes most) but for every rank and from the simulation: the
//! stages and layers a rank holds, one micro-batch's forward and backward through them, its
//! parameters (dense and, for mixture-of-experts models, routed-expert), and its memory at
//! its own simulated peak by kind.
//!
//! The fullest rank's row is exactly the prediction's `memory_breakdown` and
//! `peak_memory_bytes`: both come from [`device_breakdown`].

use super::request::PredictRequest;
pub use super::request::RankFigures;
use super::step::StepCosts;
use crate::cost::memory::{self, MemoryBreakdown};
use crate::cost::CostModel;
use crate::schedule::ir::Placement;
use crate::sim::SimResult;

/// Device `device`'s memory by kind at its simulated tensor peak `tensor_peak`: the model
/// state of its parameters (the routed experts' sharded over their own data-parallel group),
/// the rest of the peak as activations, and the stack's overheads.
pub fn device_breakdown(
    req: &PredictRequest,
    cm: &CostModel,
    step: &StepCosts,
    device: usize,
    tensor_peak: u64,
) -> MemoryBreakdown {
    let overheads = &req.stack.overheads;
    let per_param = req.stack.state_bytes(req.hardware);
    let total = step.device_params.get(device).copied().unwrap_or(0);
    let breakdown = MemoryBreakdown::new(
        total,
        cm.shard_ranks(),
        req.stack.zero,
        per_param,
        tensor_peak,
        overheads,
    );
    match step.device_expert_params.get(device) {
        Some(&expert) => {
            let parts = |params: u64, shard: u64| {
                memory::model_state_parts(params, shard, req.stack.zero, per_param)
            };
            let (dw, dg, dopt) = parts(total.saturating_sub(expert), cm.shard_ranks());
            let (ew, eg, eopt) = parts(expert, cm.expert_dp());
            let (weights, gradients, optimizer) = (dw + ew, dg + eg, dopt + eopt);
            MemoryBreakdown {
                weights,
                gradients,
                optimizer,
                activations: tensor_peak.saturating_sub(weights + gradients + optimizer),
                ..breakdown
            }
        }
        None => breakdown,
    }
}

/// Every pipeline rank's figures, rank 0 first.
pub fn rank_figures(
    req: &PredictRequest,
    cm: &CostModel,
    step: &StepCosts,
    result: &SimResult,
    placement: Placement,
) -> Vec<RankFigures> {
    let p = req.pp as u32;
    let num_stages = step.stage_layers.len() as u32;
    let last_stage = num_stages.saturating_sub(1);
    (0..p)
        .map(|device| {
            let stages: Vec<u32> = (0..num_stages)
                .filter(|&s| placement.device_of(s, p) == device)
                .collect();
            let cost = |s: u32, f: fn(&crate::sim::StageCost) -> u64| {
                step.costs.stages.get(s as usize).map_or(0, f)
            };
            let stage_forward_ns: Vec<u64> =
                stages.iter().map(|&s| cost(s, |c| c.forward_ns)).collect();
            let stage_backward_ns: Vec<u64> =
                stages.iter().map(|&s| cost(s, |c| c.backward_ns)).collect();
            let (forward_ns, backward_ns): (u64, u64) = (
                stage_forward_ns.iter().sum(),
                stage_backward_ns.iter().sum(),
            );
            let ms = |v: &[u64]| v.iter().map(|&ns| ns as f64 / 1e6).collect();
            let first = stages.contains(&0);
            let last = stages.contains(&last_stage);
            let role = match (first, last) {
                (true, true) => "first+last",
                (true, false) => "first",
                (false, true) => "last",
                (false, false) => "middle",
            };
            let tensor_peak = result
                .devices
                .get(device as usize)
                .map_or(0, |d| d.peak_memory_bytes);
            RankFigures {
                device,
                role: role.to_string(),
                layers: stages.iter().map(|&s| step.stage_layers[s as usize]).sum(),
                stage_layers: stages
                    .iter()
                    .map(|&s| step.stage_layers[s as usize])
                    .collect(),
                stage_forward_ms: ms(&stage_forward_ns),
                stage_backward_ms: ms(&stage_backward_ns),
                stages,
                forward_ms: forward_ns as f64 / 1e6,
                backward_ms: backward_ns as f64 / 1e6,
                params: step
                    .device_params
                    .get(device as usize)
                    .copied()
                    .unwrap_or(0),
                expert_params: step
                    .device_expert_params
                    .get(device as usize)
                    .copied()
                    .unwrap_or(0),
                memory_breakdown: device_breakdown(req, cm, step, device as usize, tensor_peak),
                peak_memory_bytes: req.stack.overheads.reserved_bytes(tensor_peak),
            }
        })
        .collect()
}
