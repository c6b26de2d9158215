//! The step: per-stage costs of a checked request from the cost model (or a layer profile)
//! for the simulator; [`super::figures`] simulates them and reports the figures.

use super::balance::{end_blocks, profiled_block};
use super::request::*;
use super::state::{stage_layers_for, stage_params, StageParams};
use crate::cost::compute::sharded_exposure;
use crate::cost::memory;
use crate::cost::moe::LayerKinds;
use crate::cost::{BlockCost, CostModel, Part, Stack};
use crate::inputs::profile::sum_layers;
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
}

/// What makes two stages cost the same: their layers of each kind, and whether they hold the
/// embedding, the output layer and the multi-token prediction depths.
type StageKey = ([u64; 4], bool, bool, bool);

/// One stage's costs, kept for the stages equal to it.
#[derive(Clone, Copy)]
struct Memo {
    stage: StageCost,
    tp_comm: TpCommNs,
    unpaired_extra: Option<StageCost>,
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
    let model = req.model;
    let p = req.pp;
    let cm = req.cost_model(dp);
    let num_stages = num_stages as u64;
    let stage_layers = stage_layers_for(req, dp, num_stages as u32, placement)?;
    let mtp_stage = super::mtp::mtp_stage(req, num_stages as usize);
    let rank_params = stage_params(&cm, &stage_layers, mtp_stage);
    // Every output layer and loss on the last stage: the model's and one per multi-token
    // prediction depth.
    let outputs = 1 + model.mtp_layers as u64;
    let layers_of = |s: u64| stage_layers[s as usize] as u64;
    let layer = cm.layer();
    let dims = cm.act_dims();
    let layer_act = memory::layer_activation_bytes_for(
        dims,
        req.recompute,
        req.sequence_parallel,
        req.stack.attention,
    );
    // The one place a measured profile replaces the cost model (docs/cost-model.md).
    let prof = match req.profile {
        None => None,
        Some(p) => {
            if let Some(b) = p.micro_batch.filter(|&b| b != req.micro_batch) {
                return Err(PredictError::Profile(format!(
                    "measured at micro-batch {b}, but --micro-batch is {}",
                    req.micro_batch
                )));
            }
            Some(
                p.for_model(model.num_layers)
                    .map_err(PredictError::Profile)?,
            )
        }
    };
    let (embedding, output) = end_blocks(&cm, prof);
    let embedding_act = match prof.and_then(|mp| mp.embedding) {
        Some(l) => l.activation_bytes,
        None => memory::embedding_activation_bytes(dims, req.sequence_parallel),
    };
    let output_act = match prof.and_then(|mp| mp.output) {
        Some(l) => l.activation_bytes,
        None => memory::output_activation_bytes(dims, model.vocab_size),
    }
    .saturating_mul(outputs);
    let microbatches = req.global_batch / dp / req.micro_batch;
    let deferred_mb = req.stack.deferred_wgrad_microbatches(microbatches);
    let mut first_layer = 0usize;
    let mut stage_output_bytes = Vec::with_capacity(num_stages as usize);
    let params_layer = model.params_per_layer() as f64 / req.tp as f64;

    // Mixture of experts and sliding-window layers: each kind of layer's costs, computed
    // once, and a MoE layer's activations.
    let (kinds, moe_layer_act) = if model.moe.is_some() || model.sliding_window.is_some() {
        (cm.layer_kinds(), cm.moe_layer_activation_bytes(layer_act))
    } else {
        (Default::default(), 0)
    };
    // With the expert all-to-all overlapped: what a stage's layers take in an action without a
    // partner to hide it under (`Costs::unpaired_extra`), the same layers costed without it.
    let lone_kinds =
        (req.stack.moe_comm_overlap && model.moe.is_some() && prof.is_none()).then(|| {
            let stack = Stack {
                moe_comm_overlap: false,
                ..cm.stack
            };
            CostModel { stack, ..cm }.layer_kinds()
        });
    // The multi-token prediction depths on their stage: each repeats the decoder's last layer
    // as this step costs it (measured, or its kind's), with its activations.
    let last = model.last_layer();
    let (mtp_cost, mtp_act) = match mtp_stage {
        None => (BlockCost::default(), 0),
        Some(_) => {
            let (layer_cost, layer_bytes) = match prof {
                Some(mp) => (
                    profiled_block(&mp.layers[last..last + 1]),
                    mp.layers[last].activation_bytes,
                ),
                None if model.moe.is_some() || model.sliding_window.is_some() => (
                    kinds.of(model, last),
                    if model.is_moe_layer(last) {
                        moe_layer_act
                    } else {
                        layer_act
                    },
                ),
                None => (layer, layer_act),
            };
            super::mtp::depths(&cm, layer_cost, layer_bytes)
        }
    };
    let mut unpaired_extra = Vec::new();
    let mut too_big = false;
    let mut stages = Vec::with_capacity(num_stages as usize);
    let mut tp_comm = Vec::with_capacity(num_stages as usize);
    // From the cost model a stage's costs depend only on how many layers of each kind it
    // holds (`LayerKinds::kind_counts`: dense or MoE, full or sliding-window attention) and
    // whether it holds the embedding or the output layer, so equal stages are costed once.
    let memoizable = prof.is_none();
    let mut memo: Vec<(StageKey, Memo)> = Vec::new();
    for s in 0..num_stages {
        let key = (
            LayerKinds::kind_counts(model, first_layer, layers_of(s) as usize),
            s == 0,
            s + 1 == num_stages,
            mtp_stage == Some(s as usize),
        );
        if let Some((_, m)) = memo.iter().find(|(k, _)| memoizable && *k == key) {
            stages.push(m.stage);
            tp_comm.push(m.tp_comm);
            if let Some(u) = m.unpaired_extra {
                unpaired_extra.push(u);
            }
            first_layer += layers_of(s) as usize;
            continue;
        }
        let n = layers_of(s) as f64;
        let (mut c, mut act): (BlockCost, u64) = match prof {
            // Mixture of experts: MoE and dense layers cost differently (cost::moe).
            None if model.moe.is_some() || model.sliding_window.is_some() => {
                let k = model
                    .moe
                    .as_ref()
                    .map_or(0, |m| m.count_in(first_layer, layers_of(s) as usize));
                (
                    kinds.block(model, first_layer, layers_of(s) as usize),
                    layer_act
                        .saturating_mul(layers_of(s) - k)
                        .saturating_add(moe_layer_act.saturating_mul(k)),
                )
            }
            None => (layer.scale(n), layer_act.saturating_mul(layers_of(s))),
            Some(mp) => {
                let run = &mp.layers[first_layer..first_layer + layers_of(s) as usize];
                let sum = sum_layers(run);
                // A stage of no transformer layer (the embedding alone) sends the hidden
                // states: the embedding's output, or any layer's (the same shape).
                stage_output_bytes.push(match run.last() {
                    Some(_) => sum.output_bytes,
                    None => mp.embedding.unwrap_or(&mp.layers[0]).output_bytes,
                });
                (profiled_block(run), sum.activation_bytes)
            }
        };
        let is_mtp = mtp_stage == Some(s as usize);
        if is_mtp {
            c = c.plus(mtp_cost);
            act = act.saturating_add(mtp_act);
        }
        let mut unpaired = None;
        if let Some(k) = &lone_kinds {
            let mut lone = k.block(model, first_layer, layers_of(s) as usize);
            if is_mtp {
                // The depths' layers without a partner too (their other work is the same).
                lone = lone.plus(mtp_cost).plus(
                    k.of(model, last)
                        .plus(kinds.of(model, last).scale(-1.0))
                        .scale(model.mtp_layers as f64),
                );
            }
            let more = |a: &Part, b: &Part| ns((a.total_s() - b.total_s()).max(0.0));
            let (f, i, w) = (
                more(&lone.forward, &c.forward),
                more(&lone.backward_input, &c.backward_input),
                more(&lone.backward_weight, &c.backward_weight),
            );
            unpaired.replace(StageCost {
                forward_ns: f,
                backward_ns: i + w,
                backward_input_ns: i,
                backward_weight_ns: w,
                ..StageCost::default()
            });
        }
        // Activation offloading (pp 1: this stage holds every layer): the first N layers'
        // activations leave the GPU, and the compute waits where their copies lag
        // (cost::offload).
        let offloaded = u64::from(req.stack.cpu_offload_layers).min(layers_of(s));
        if offloaded > 0 {
            let bytes: u64 = (first_layer..first_layer + offloaded as usize)
                .map(|l| match prof {
                    Some(mp) => mp.layers[l].activation_bytes,
                    None if model.is_moe_layer(l) => moe_layer_act,
                    None => layer_act,
                })
                .sum();
            let link = req
                .hardware
                .node
                .host_link_bytes_per_s
                .unwrap_or(f64::INFINITY);
            let (fwd, bwd) = crate::cost::offload::stall_s(
                offloaded,
                layers_of(s),
                c.forward.total_s() / n,
                (c.backward_input.total_s() + c.backward_weight.total_s()) / n,
                bytes as f64 / offloaded as f64 / link,
            );
            c.forward.memory_s += fwd;
            c.backward_input.memory_s += bwd;
            act = act.saturating_sub(bytes);
        }
        let StageParams {
            dense: params,
            expert,
        } = rank_params[s as usize];
        // A layer's expert parameters on this rank, averaged over the stage's layers.
        let expert_per_layer = expert / n.max(1.0);
        first_layer += layers_of(s) as usize;
        if s == 0 {
            c = c.plus(embedding);
            act = act.saturating_add(embedding_act);
        }
        if s + 1 == num_stages {
            // Deferred output-layer weight gradients leave the micro-batches' backward (the
            // average share when only the first k of m are deferred) for the flush.
            let inline = (microbatches - deferred_mb) as f64 / microbatches.max(1) as f64;
            let outs = output.scale(outputs as f64);
            c = c.plus(BlockCost {
                backward_weight: outs.backward_weight.scale(inline),
                ..outs
            });
            act = act.saturating_add(output_act);
        }
        // Sharded data parallelism (ZeRO-2/3): the stage's per-layer gathers and
        // reduce-scatters beside its compute, every micro-batch; a MoE layer's experts over
        // their own group, after its dense part on the same stream.
        let (dense_ag, dense_rs) = cm.sharded_layer_comm_s(params / n.max(1.0));
        let (expert_ag, expert_rs) = cm.expert_sharded_layer_comm_s(expert_per_layer);
        // FSDP2: its copies out of each all-gather and into each reduce-scatter run on (or
        // hold) the compute stream, before the layer's forward and input gradients and after
        // its weight gradients.
        let (out_f, out_b, copy_in) = cm.fsdp2_copies_s(params / n.max(1.0) + expert_per_layer);
        c.forward.memory_s += n * out_f;
        c.backward_input.memory_s += n * out_b;
        c.backward_weight.memory_s += n * copy_in;
        let sharded = sharded_exposure(
            req.stack.zero,
            req.stack.reshard_after_forward,
            n,
            (
                c.forward.total_s(),
                c.backward_input.total_s(),
                c.backward_weight.total_s(),
            ),
            (dense_ag + expert_ag, dense_rs + expert_rs),
        );
        let (f, i, w) = (
            c.forward.total_s() + sharded.forward_exposed_s,
            c.backward_input.total_s() + sharded.backward_input_exposed_s,
            c.backward_weight.total_s() + sharded.backward_weight_exposed_s,
        );
        let weight_share = if act == 0 {
            0
        } else {
            // W keeps the stored inputs of the weight GEMMs; a third is a fair share.
            act / 3
        };
        // Far above any GPU's memory, and small enough that the simulator's sums over up to
        // MAX_SIMULATED_ACTIONS in-flight micro-batches cannot overflow.
        too_big |= act > MEMORY_CLAMP_BYTES;
        let act = act.min(MEMORY_CLAMP_BYTES);
        let stage = StageCost {
            forward_ns: ns(f),
            backward_ns: ns(i) + ns(w),
            backward_input_ns: ns(i),
            backward_weight_ns: ns(w),
            activation_bytes: act,
            weight_grad_bytes: weight_share,
        };
        let stage_tp_comm = TpCommNs {
            forward_ns: ns(c.forward.tp_comm_s
                + c.forward.tp_hidden_s
                + c.forward.cp_comm_s
                + c.forward.cp_hidden_s
                + sharded.forward_exposed_s
                + sharded.forward_hidden_s),
            backward_ns: ns(c.backward_input.tp_comm_s
                + c.backward_input.tp_hidden_s
                + c.backward_input.cp_comm_s
                + c.backward_input.cp_hidden_s
                + sharded.backward_input_exposed_s
                + sharded.backward_weight_exposed_s
                + sharded.backward_hidden_s),
            overlapped: c.forward.tp_hidden_s
                + c.forward.cp_hidden_s
                + sharded.forward_hidden_s
                + sharded.backward_hidden_s
                > 0.0,
        };
        let m = Memo {
            stage,
            tp_comm: stage_tp_comm,
            unpaired_extra: unpaired,
        };
        if memoizable {
            memo.push((key, m));
        }
        stages.push(m.stage);
        tp_comm.push(m.tp_comm);
        unpaired_extra.extend(m.unpaired_extra);
    }
    let stage_params: Vec<f64> = rank_params.iter().map(|r| r.dense).collect();
    // Routed-expert parameters of each stage on one rank (mixture of experts only).
    let stage_expert_params: Vec<f64> = match model.moe {
        Some(_) => rank_params.iter().map(|r| r.expert).collect(),
        None => Vec::new(),
    };
    // Without a profile a boundary's transfer depends only on its devices: the first p
    // boundaries give every pair, later ones repeat them.
    let pair_send: Vec<u64> = (0..num_stages.saturating_sub(1).min(p))
        .map(|s| ns(cm.p2p_s(s % p, (s + 1) % p)))
        .collect();
    // A blocking send ends in a device synchronisation (Megatron-Core
    // `p2p_communication._communicate`: `torch.cuda.synchronize()` after the batched
    // send/receive, `batch_p2p_sync`), after which the GPU waits one kernel launch for its
    // next kernel: a fixed cost per transfer (docs/cost-model.md, "Kernel launches").
    let sync_ns = if req.stack.blocking_p2p {
        ns(req.hardware.kernel_launch_s())
    } else {
        0
    };
    // A multi-token prediction stage before the last sends the decoder's hidden states and
    // each depth's, concatenated, on to the loss (Megatron-Core's `mtp_standalone` sends
    // tensors of variable shape, `p2p_communication`).
    let scale_after_mtp = |s: u64| match mtp_stage {
        Some(m) if s >= m as u64 => outputs,
        _ => 1,
    };
    let send: Vec<u64> = (0..num_stages.saturating_sub(1))
        .map(|s| match prof {
            None => pair_send[(s % p) as usize] * scale_after_mtp(s),
            Some(_) => {
                ns(cm.p2p_bytes_s(s % p, (s + 1) % p, stage_output_bytes[s as usize] as f64))
            }
        } + sync_ns)
        .collect();
    let device_of = |s: u64| placement.device_of(s as u32, p as u32) as usize;
    let mut device_params = vec![0.0f64; p as usize];
    for (s, &prm) in stage_params.iter().enumerate() {
        device_params[device_of(s as u64)] += prm;
    }
    let working = memory::recompute_working_bytes_for(
        dims,
        req.recompute,
        req.sequence_parallel,
        req.stack.attention,
    )
    .saturating_add(cm.moe_recompute_working_bytes());
    let per_param = req.stack.state_bytes(req.hardware);
    let weight = per_param.weight + per_param.extra_weight;
    let shard = cm.shard_ranks();
    let state = |prm: f64| {
        let (w, g, o) =
            memory::model_state_parts(prm.ceil() as u64, shard, req.stack.zero, per_param);
        w.saturating_add(g).saturating_add(o)
    };
    let sharded_working = |prm: f64| {
        memory::sharded_working_bytes(
            prm.ceil() as u64,
            params_layer.ceil() as u64,
            shard,
            req.stack.zero,
            req.stack.reshard_after_forward,
            weight,
        )
    };
    let static_bytes: Vec<u64> = device_params
        .iter()
        .map(|&prm| {
            state(prm)
                .saturating_add(working)
                .saturating_add(sharded_working(prm))
                .min(1 << 60)
        })
        .collect();
    // The first stage's dense embedding gradient: working memory in place of the layers'
    // (whichever is larger), on the device that holds the embedding.
    let mut static_bytes = static_bytes;
    let emb_grad = memory::embedding_grad_bytes(model.vocab_size, model.hidden_size, req.tp);
    // The multi-token prediction stage's own embedding has the same gradient (once on a
    // device that holds both).
    let mut emb_devices = vec![device_of(0)];
    emb_devices.extend(mtp_stage.map(|s| device_of(s as u64)));
    emb_devices.dedup();
    for d in emb_devices {
        static_bytes[d] = static_bytes[d]
            .saturating_add(emb_grad.saturating_sub(working))
            .min(1 << 60);
    }
    let model_state_max_bytes = device_params
        .iter()
        .map(|&prm| state(prm))
        .max()
        .unwrap_or(0);
    // Mixture of experts: the experts' weights, gradients and optimizer state (sharded over
    // the expert data-parallel group), their own gradient reduction and optimizer step.
    let mut model_state_max_bytes = model_state_max_bytes;
    // Deferred output-layer weight gradients: run at the last stage's flush; what each
    // deferred micro-batch keeps is counted for the whole step (it peaks at the flush).
    let mut deferred_weight_grad_ns = Vec::new();
    if deferred_mb > 0 {
        let last = num_stages - 1;
        deferred_weight_grad_ns = vec![0; num_stages as usize];
        deferred_weight_grad_ns[last as usize] =
            ns((deferred_mb * outputs) as f64 * output.backward_weight.total_s());
        let kept = memory::deferred_wgrad_bytes(dims, model.vocab_size, req.sequence_parallel)
            .saturating_mul(outputs);
        let d = device_of(last);
        static_bytes[d] = static_bytes[d]
            .saturating_add(kept.saturating_mul(deferred_mb))
            .min(1 << 60);
    }
    // Stages with equal parameter counts (all but the first and last, mostly) reduce alike.
    let mut reduced: Vec<(f64, u64)> = Vec::new();
    let mut grad_reduce_ns: Vec<u64> = stage_params
        .iter()
        .map(|&prm| match reduced.iter().find(|(x, _)| *x == prm) {
            Some(&(_, t)) => t,
            None => {
                let t = ns(cm.step_grad_reduce_s(prm));
                reduced.push((prm, t));
                t
            }
        })
        .collect();
    let mut optimizer_ns: Vec<u64> = device_params
        .iter()
        .map(|&prm| ns(cm.optimizer_s(prm)))
        .collect();
    let mut device_expert = Vec::new();
    if !stage_expert_params.is_empty() {
        device_expert = vec![0.0f64; p as usize];
        for (s, &e) in stage_expert_params.iter().enumerate() {
            device_expert[device_of(s as u64)] += e;
            grad_reduce_ns[s] =
                ns(cm.step_grad_reduce_s(stage_params[s]) + cm.expert_grad_reduce_s(e));
        }
        let mut state_max = 0u64;
        for (d, &e) in device_expert.iter().enumerate() {
            let state_bytes = cm.expert_state_bytes(e);
            // ZeRO-2/3: a MoE layer's gathered experts and unsharded expert gradients, as
            // for the dense part, over the expert data-parallel group.
            let working = memory::sharded_working_bytes(
                e.ceil() as u64,
                cm.moe_rank_expert_params_per_layer().ceil() as u64,
                cm.expert_dp(),
                req.stack.zero,
                req.stack.reshard_after_forward,
                weight,
            );
            static_bytes[d] = static_bytes[d]
                .saturating_add(state_bytes)
                .saturating_add(working)
                .min(1 << 60);
            optimizer_ns[d] = ns(cm.optimizer_s(device_params[d]) + cm.expert_optimizer_s(e));
            let dense_state = state(device_params[d]);
            state_max = state_max.max(dense_state.saturating_add(state_bytes));
            device_params[d] += e;
        }
        model_state_max_bytes = state_max;
    }
    let costs = Costs {
        stages,
        send_forward_ns: send.clone(),
        send_backward_ns: send,
        static_bytes,
        tensor_parallel: tp_comm,
        blocking_sends: req.stack.blocking_p2p,
        grad_reduce_ns,
        overlap_grad_reduce: req.stack.overlap_grad_reduce,
        grad_reduce_buckets: stage_params
            .iter()
            .map(|&prm| grad_reduce_buckets(prm, dp * req.cp))
            .collect(),
        optimizer_ns,
        deferred_weight_grad_ns,
        shared_gpu: req.shared_gpu,
        unpaired_extra,
    };
    Ok(StepCosts {
        costs,
        dp,
        microbatches,
        too_big,
        model_state_max_bytes,
        stage_layers,
        device_params: device_params.iter().map(|&p| p.ceil() as u64).collect(),
        device_expert_params: device_expert.iter().map(|&p| p.ceil() as u64).collect(),
    })
}

/// Gradient buckets of a stage with `params` parameters on one rank: Megatron-Core's
/// distributed data parallelism reduces gradients in buckets of `max(40M, 1M x d)` parameters
/// (`DistributedDataParallel.__init__`, `bucket_size` when `--ddp-bucket-size` is unset).
pub fn grad_reduce_buckets(params: f64, dp: u64) -> u32 {
    let bucket = (40e6f64).max(1e6 * dp as f64);
    (params / bucket).ceil().clamp(1.0, 1e6) as u32
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::cost::Recompute;
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
        // No recomputation: no working memory, the gradient counts whole (to a few bytes of
        // the state's rounding).
        let whole = 2 * 64 * 1024 * 4096 / 8;
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
