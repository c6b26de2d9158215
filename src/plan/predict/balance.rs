//! The balanced split: the partitioner's problem for a request and the split it gives.

use super::request::*;
use crate::cost::profiled::{end_blocks, profiled_block};
use crate::cost::BlockCost;
use crate::schedule::ir::Placement;

/// `megatron` (a Megatron-Core split rule), `even`, `balanced` or `custom` for the stage layer counts of `req` (see
/// [`Prediction::split`]).
pub fn split_label(req: &PredictRequest, counts: &[u32]) -> &'static str {
    if matches!(req.partition, Split::Megatron(_)) && req.stage_layers.is_none() {
        "megatron"
    } else if counts
        == crate::inputs::profile::even_split(req.model.num_layers, counts.len() as u32)
    {
        "even"
    } else if req.partition == Split::Balanced {
        "balanced"
    } else {
        "custom"
    }
}

/// The partitioner's problem for a checked request over `num_stages` stages
/// (docs/partition.md, "Used by the search"): one partitioner layer per transformer layer
/// with the forward + backward time `step_costs` gives it (recomputation included; from the
/// profile when there is one); the embedding's time added to layer 0 and the output layer's
/// to the last layer, so they stay on the first and last stage. With blocking sends every
/// boundary costs the largest point-to-point transfer `x` of the schedule's boundaries, once
/// forward and once backward; the partitioner charges `2x` to every stage but the last, the
/// simulator `x` to each end stage and `2x` to the others, so `x` moves from layer 0 to the
/// last layer. One device per stage; no memory limit (the caller checks memory exactly).
pub fn balance_problem(
    req: &PredictRequest,
    dp: u64,
    num_stages: u32,
) -> Result<crate::plan::partition::Problem, PredictError> {
    use crate::plan::partition::{Layer, Link, Problem};
    let model = req.model;
    let p = req.pp;
    let cm = req.cost_model(dp);
    let prof = match req.profile {
        None => None,
        Some(pr) => Some(
            pr.for_model(model.num_layers)
                .map_err(PredictError::Profile)?,
        ),
    };
    let fb_ns = |c: BlockCost| {
        ns(c.forward.total_s()) + ns(c.backward_input.total_s()) + ns(c.backward_weight.total_s())
    };
    let n = model.num_layers as usize;
    let blocks: Vec<BlockCost> = match prof {
        None if model.moe.is_some() || model.sliding_window.is_some() => {
            let kinds = cm.layer_kinds();
            (0..n).map(|i| kinds.of(model, i)).collect()
        }
        None => vec![cm.layer(); n],
        Some(mp) => mp
            .layers
            .iter()
            .map(|l| profiled_block(std::slice::from_ref(l)))
            .collect(),
    };
    let mut compute: Vec<u64> = blocks.iter().map(|&b| fb_ns(b)).collect();
    let (embedding, output) = end_blocks(&cm, prof);
    compute[0] += fb_ns(embedding);
    // The last stage's output layers (the model's and one per multi-token prediction depth)
    // and, without a layout (the balanced split has none), the depths themselves.
    let depths = model.mtp_layers as f64;
    compute[n - 1] += fb_ns(output.scale(1.0 + depths));
    if depths > 0.0 {
        compute[n - 1] += fb_ns(cm.mtp_depth(blocks[n - 1]).scale(depths));
    }
    let stages = num_stages as u64;
    let mut x_ns = 0u64;
    if req.stack.blocking_p2p && stages > 1 {
        let max_bytes = prof.map(|mp| mp.layers.iter().map(|l| l.output_bytes).max().unwrap_or(0));
        for s in 0..stages - 1 {
            let t = match max_bytes {
                None => cm.p2p_s(s % p, (s + 1) % p),
                Some(b) => cm.p2p_bytes_s(s % p, (s + 1) % p, b as f64),
            };
            x_ns = x_ns.max(ns(t));
        }
        compute[0] = compute[0].saturating_sub(x_ns);
        compute[n - 1] += x_ns;
    }
    let layers = compute
        .into_iter()
        .enumerate()
        .map(|(i, c)| Layer {
            name: format!("layer{i}"),
            compute_ns: c,
            weight_bytes: 0,
            activation_bytes: 0,
            output_bytes: 0,
        })
        .collect();
    let link = Link {
        bandwidth_bytes_per_s: f64::INFINITY,
        latency_s: x_ns as f64 / 1e9,
    };
    Ok(Problem {
        layers,
        stages: num_stages as usize,
        devices: num_stages as usize,
        device_speeds: Vec::new(),
        memory_limit_bytes: None,
        weight_memory_factor: crate::plan::partition::DEFAULT_WEIGHT_MEMORY_FACTOR,
        in_flight: crate::plan::partition::InFlight::OneFOneB,
        microbatches: req.global_batch / dp / req.micro_batch,
        gpus_per_node: 1,
        intra_node: link,
        inter_node: link,
    })
}

/// The balanced split of a checked request over the schedule's `num_stages` stages placed by
/// `placement`: `partition::dp` on [`balance_problem`] (every stage at least one transformer
/// layer), kept only when it is strictly better than the even split by (slowest device's
/// summed stage time, slowest stage), both evaluated on the same problem; otherwise the even
/// split. With `v > 1` chunks the DP minimises the slowest of the `p v` stages, not the
/// slowest device (an approximation; the device comparison only guards against a worse
/// result).
pub fn balanced_split(
    req: &PredictRequest,
    dp: u64,
    num_stages: u32,
    placement: Placement,
) -> Result<Vec<u32>, PredictError> {
    let layers = req.model.num_layers;
    let even = crate::inputs::profile::even_split(layers, num_stages);
    if num_stages <= 1 || num_stages >= layers {
        return Ok(even);
    }
    let pb = balance_problem(req, dp, num_stages)?;
    let part =
        crate::plan::partition::dp(&pb).map_err(|e| PredictError::Internal(e.to_string()))?;
    let bounds = |counts: &[u32]| -> Vec<usize> {
        let mut b = Vec::with_capacity(counts.len());
        let mut at = 0usize;
        for &c in counts {
            b.push(at);
            at += c as usize;
        }
        b
    };
    let ones = vec![1usize; num_stages as usize];
    let even_eval = crate::plan::partition::evaluate(&pb, &bounds(&even), &ones)
        .map_err(|e| PredictError::Internal(e.to_string()))?;
    let p = req.pp as u32;
    let score = |times: &[f64]| {
        let mut dev = vec![0.0f64; p as usize];
        for (s, t) in times.iter().enumerate() {
            dev[placement.device_of(s as u32, p) as usize] += t;
        }
        let d = dev.iter().copied().fold(0.0, f64::max);
        let st = times.iter().copied().fold(0.0, f64::max);
        (d, st)
    };
    let (de, se) = score(&even_eval.stage_times_ms);
    let (db, sb) = score(&part.stage_times_ms);
    if db < de || (db == de && sb < se) {
        let mut counts = Vec::with_capacity(num_stages as usize);
        for (s, &b) in part.boundaries.iter().enumerate() {
            let end = part
                .boundaries
                .get(s + 1)
                .copied()
                .unwrap_or(layers as usize);
            counts.push((end - b) as u32);
        }
        Ok(counts)
    } else {
        Ok(even)
    }
}
