//! The step: the planner's side of a step's costs. It chooses the stage split
//! ([`stage_layers_for`], the multi-token prediction stage), checks a measured layer profile
//! against the request, asks the cost layer for every action's duration and bytes in one call
//! ([`crate::cost::step::costs`]) and converts the answer into the simulator's [`Costs`]
//! (nanoseconds, activations clamped); [`super::figures`] simulates them and reports the
//! figures.

use super::request::*;
use super::state::stage_layers_for;
use crate::cost::step::{self as cost_step, Actions, StageActions, StageSplit};
use crate::schedule::ir::Placement;
use crate::sim::{Costs, StageCost, TpCommNs};

/// Everything the simulator needs for one step of a checked request, and what the
/// prediction reports besides the simulation.
#[derive(Debug, Clone)]
pub struct StepCosts {
    pub costs: Costs,
    pub dp: u64,
    pub microbatches: u64,
    /// Some stage's activations exceed the clamp: the configuration never fits.
    pub too_big: bool,
    /// Weights, gradients and optimizer state on the fullest GPU.
    pub model_state_max_bytes: u64,
    pub stage_layers: Vec<u32>,
    /// Parameters held by each pipeline device (rounded up).
    pub device_params: Vec<u64>,
    /// Of those, routed-expert parameters (mixture of experts; empty for dense models), whose
    /// optimizer state ZeRO-1 shards over the expert data-parallel group.
    pub device_expert_params: Vec<u64>,
    /// Per device: the overlapped parameter gather's wait, which `costs.optimizer_ns`
    /// includes after the optimizer step itself.
    pub param_gather_wait_ns: Vec<u64>,
}

/// Build the per-stage costs of `req` for a schedule of `num_stages` stages placed by
/// `placement` over `req.pp` devices. The request must have passed [`check`] (which gives `dp`).
/// Shared by [`predict`] and the planner's search, so both see exactly the same costs.
pub fn step_costs(
    req: &PredictRequest,
    dp: u64,
    num_stages: u32,
    placement: Placement,
) -> Result<StepCosts, PredictError> {
    let cm = req.cost_model(dp);
    let stage_layers = stage_layers_for(req, dp, num_stages, placement)?;
    // The one place a measured profile replaces the cost model (docs/cost-model.md): checked
    // here, costed by the cost layer.
    let profile = match req.profile {
        None => None,
        Some(p) => {
            if let Some(b) = p.micro_batch.filter(|&b| b != req.micro_batch) {
                return Err(PredictError::Profile(format!(
                    "measured at micro-batch {b}, but --micro-batch is {}",
                    req.micro_batch
                )));
            }
            Some(
                p.for_model(req.model.num_layers)
                    .map_err(PredictError::Profile)?,
            )
        }
    };
    let microbatches = req.global_batch / dp / req.micro_batch;
    let p = req.pp as u32;
    let step = cost_step::costs(
        &cm,
        &StageSplit {
            layers: &stage_layers,
            mtp_stage: super::mtp::mtp_stage(req, num_stages as usize),
            microbatches,
            profile,
        },
        |s| placement.device_of(s as u32, p) as usize,
    );
    // Far above any GPU's memory, and small enough that the simulator's sums over up to
    // MAX_SIMULATED_ACTIONS in-flight micro-batches cannot overflow.
    let too_big = step
        .stages
        .iter()
        .any(|a| a.activation_bytes > MEMORY_CLAMP_BYTES);
    let n = step.stages.len();
    let (mut stages, mut tensor_parallel) = (Vec::with_capacity(n), Vec::with_capacity(n));
    let mut unpaired_extra = Vec::new();
    // Equal stages (the middle ones, mostly, consecutive) convert once.
    let mut last: Option<(&StageActions, StageCost, TpCommNs, Option<StageCost>)> = None;
    for a in &step.stages {
        let (stage, tp, unpaired) = match last {
            Some((b, stage, tp, unpaired)) if b == a => (stage, tp, unpaired),
            _ => {
                let stage = StageCost {
                    activation_bytes: a.activation_bytes.min(MEMORY_CLAMP_BYTES),
                    weight_grad_bytes: a.weight_grad_bytes,
                    ..actions_ns(&a.time)
                };
                let tp = TpCommNs {
                    forward_ns: ns(a.tp_comm.forward_s),
                    backward_ns: ns(a.tp_comm.backward_s),
                    overlapped: a.tp_comm.overlapped,
                };
                let unpaired = a.unpaired_extra.as_ref().map(actions_ns);
                last = Some((a, stage, tp, unpaired));
                (stage, tp, unpaired)
            }
        };
        stages.push(stage);
        tensor_parallel.push(tp);
        unpaired_extra.extend(unpaired);
    }
    let sync_ns = ns(step.send_sync_s);
    let mut send_ns = ns_repeated();
    let send: Vec<u64> = step
        .sends
        .iter()
        .map(|x| send_ns(x.tensor_s) * x.tensors + sync_ns)
        .collect();
    let to_ns = |v: Vec<f64>| -> Vec<u64> { v.into_iter().map(ns_repeated()).collect() };
    let costs = Costs {
        stages,
        send_forward_ns: send.clone(),
        send_backward_ns: send,
        static_bytes: step.devices.static_bytes,
        tensor_parallel,
        blocking_sends: req.stack.blocking_p2p,
        grad_reduce_ns: to_ns(step.devices.grad_reduce_s),
        overlap_grad_reduce: req.stack.overlap_grad_reduce,
        grad_reduce_buckets: step.grad_reduce_buckets,
        optimizer_ns: to_ns(
            step.devices
                .optimizer_s
                .iter()
                .zip(&step.devices.param_gather_wait_s)
                .map(|(o, w)| o + w)
                .collect(),
        ),
        deferred_weight_grad_ns: to_ns(step.devices.deferred_weight_grad_s),
        shared_gpu: req.shared_gpu,
        unpaired_extra,
    };
    Ok(StepCosts {
        costs,
        dp,
        microbatches,
        too_big,
        model_state_max_bytes: step.devices.model_state_max_bytes,
        stage_layers,
        device_params: step.devices.device_params,
        device_expert_params: step.devices.device_expert_params,
        param_gather_wait_ns: to_ns(step.devices.param_gather_wait_s),
    })
}

/// [`ns`], remembering its last argument: a run of equal values (equal stages' sends and
/// reductions) rounds once.
fn ns_repeated() -> impl FnMut(f64) -> u64 {
    let mut last = (f64::NAN, 0);
    move |x| {
        if x != last.0 {
            last = (x, ns(x));
        }
        last.1
    }
}

/// A stage's three actions in the simulator's nanoseconds (B = I + W, each rounded first).
fn actions_ns(a: &Actions) -> StageCost {
    let (i, w) = (ns(a.backward_input_s), ns(a.backward_weight_s));
    StageCost {
        forward_ns: ns(a.forward_s),
        backward_ns: i + w,
        backward_input_ns: i,
        backward_weight_ns: w,
        ..StageCost::default()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::cost::{memory, Recompute};
    use crate::inputs::{Hardware, Model};
    use crate::plan::predict::balance::{balance_problem, balanced_split};

    /// A 64-GPU request (t 8, p 4, batch 64, micro-batch 1) the predict tests start from.
    pub(crate) fn base<'a>(m: &'a Model, hw: &'a Hardware) -> PredictRequest<'a> {
        let mut r = PredictRequest::new(m, hw);
        r.gpus = 64;
        r.tp = 8;
        r.pp = 4;
        r.global_batch = 64;
        r.micro_batch = 1;
        r
    }

    /// Deferring the output layer's weight gradients: the last stage's backward loses the
    /// deferred share of the output layer's weight-gradient time, which reappears whole as
    /// the stage's flush work; the last device keeps each deferred micro-batch's 16-bit
    /// input shard and logit gradient (memory::deferred_wgrad_bytes) for the step.
    #[test]
    fn deferred_embedding_wgrad_moves_time_and_keeps_tensors() {
        let hw = Hardware::bundled("h100-80gb").unwrap();
        let m = Model::preset("llama3-8b").unwrap();
        let mut r = base(&m, &hw);
        r.sequence_parallel = true;
        let dp = r.gpus / (r.tp * r.pp);
        let costs = |r: &PredictRequest| step_costs(r, dp, 4, Placement::Loop).unwrap();
        let off = costs(&r);
        r.stack.defer_embedding_wgrad = true;
        r.stack.wgrad_deferral_limit = 4;
        let on = costs(&r);
        let m_b = off.microbatches;
        assert_eq!(m_b, 32);
        let cm = r.cost_model(dp);
        let w = cm.output_layer().backward_weight.total_s();
        let last = |c: &StepCosts| c.costs.stages[3].backward_weight_ns as f64;
        // 4 of 32 deferred: an eighth of each micro-batch's output-layer weight gradient goes.
        assert!((last(&off) - last(&on) - w / 8.0 * 1e9).abs() <= 2.0);
        assert_eq!(on.costs.stages[..3], off.costs.stages[..3]);
        assert_eq!(on.costs.deferred_weight_grad_ns, vec![0, 0, 0, ns(4.0 * w)]);
        assert!(off.costs.deferred_weight_grad_ns.is_empty());
        let dims = memory::ActDims::new(&m, 1, 8);
        let kept = 4 * memory::deferred_wgrad_bytes(dims, m.vocab_size, true);
        assert_eq!(
            kept,
            4 * (2 * 8192 * 4096 / 8 + 2 * 8192 * m.vocab_size / 8)
        );
        assert_eq!(on.costs.static_bytes[3], off.costs.static_bytes[3] + kept);
        assert_eq!(on.costs.static_bytes[..3], off.costs.static_bytes[..3]);
    }

    /// The first stage's dense embedding gradient (`2 V h / t` bytes, memory::
    /// embedding_grad_bytes) is working memory of the first device only, and only where it
    /// exceeds the layers' recompute working memory. Growing the vocabulary adds as many
    /// parameters to the first stage (the embedding) as to the last (the untied output
    /// layer), so the two devices' model state grows alike and the difference is the gradient.
    #[test]
    fn the_dense_embedding_gradient_is_first_stage_working_memory() {
        let hw = Hardware::bundled("h100-80gb").unwrap();
        let m = Model::preset("llama3-8b").unwrap();
        let mut big = m.clone();
        big.vocab_size += 64 * 1024;
        assert_eq!(
            memory::embedding_grad_bytes(128_256, 4096, 8),
            2 * 128_256 * 4096 / 8
        );
        let growth = |recompute: Recompute| {
            let static_of = |model: &Model| {
                let mut r = base(model, &hw);
                r.recompute = recompute;
                step_costs(&r, 2, 4, Placement::Loop)
                    .unwrap()
                    .costs
                    .static_bytes
            };
            let (a, b) = (static_of(&m), static_of(&big));
            let first = b[0] as i64 - a[0] as i64;
            let last = b[3] as i64 - a[3] as i64;
            assert_eq!(a[1], b[1], "a middle stage does not change");
            first - last
        };
        // No recomputation: no layer working memory, the gradient counts whole (to a few
        // bytes of the state's rounding), less what the last device's loss working memory
        // grows by (memory::loss_working_bytes: 2 bytes a logit, 8,192 x 64 Ki / 8 more).
        let loss = |model: &Model| base(model, &hw).cost_model(2).loss_working_bytes() as i64;
        assert_eq!(loss(&big) - loss(&m), 2 * 8192 * 64 * 1024 / 8);
        let whole = 2 * 64 * 1024 * 4096 / 8 - (loss(&big) - loss(&m));
        assert!(
            (growth(Recompute::None) - whole).abs() <= 64,
            "{}",
            growth(Recompute::None)
        );
        // Full recomputation rebuilds a layer (8192 tokens x 4096 / 8 x 34 bytes and more,
        // above the larger vocabulary's 164 MB gradient): nothing is added.
        assert!(
            growth(Recompute::Full).abs() <= 64,
            "{}",
            growth(Recompute::Full)
        );
    }

    #[test]
    fn divisors_are_sorted() {
        assert_eq!(divisors(12), vec![1, 2, 3, 4, 6, 12]);
        assert_eq!(divisors(1), vec![1]);
    }

    #[test]
    fn gpt_1t_p64_even_split_is_already_optimal() {
        // 128 layers over 64 stages: 2 each. The output layer costs less than one transformer
        // layer, so moving a layer off the last stage makes some other stage 3 layers deep:
        // the even split is optimal and balancing keeps it.
        let hw = Hardware::bundled("a100-80gb").unwrap();
        let m = Model::preset("gpt-1t").unwrap();
        let mut r = PredictRequest::new(&m, &hw);
        r.gpus = 512;
        r.tp = 8;
        r.pp = 64;
        r.global_batch = 64;
        let dp = check(&r).unwrap();
        let pb = balance_problem(&r, dp, 64).unwrap();
        let layer = pb.layers[1].compute_ns;
        let output = pb.layers[127].compute_ns - layer;
        assert!(output < layer, "output {output} ns vs layer {layer} ns");
        assert_eq!(
            balanced_split(&r, dp, 64, Placement::Loop).unwrap(),
            vec![2; 64]
        );
    }
}
