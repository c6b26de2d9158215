//! One configuration predicted: its schedule generated, its step costed ([`step_costs`])
//! and simulated, and the figures reported from the simulation (step time, FLOP/s and MFU
//! with the multi-token prediction depths counted as Megatron-LM counts them, memory).

use super::balance::split_label;
use super::request::*;
use super::step::{step_costs, StepCosts};
use crate::cost::Recompute;
use crate::schedule::generators::{generate, GenParams, ScheduleName};
use crate::sim::{simulate, SimOptions, SimResult};

/// Predict one configuration.
pub fn predict(req: &PredictRequest) -> Result<Prediction, PredictError> {
    // ZB-V and DualPipeV always hold two chunks per device: the request (and so the reported
    // `chunks`, the layout and the plan) says so even when --chunks was left at 1.
    let fixed;
    let req = match schedule_name(req).fixed_chunks() {
        Some(v) if req.chunks == 1 || req.chunks == v as u64 => {
            fixed = PredictRequest {
                chunks: v as u64,
                ..req.clone()
            };
            &fixed
        }
        Some(v) => {
            return Err(PredictError::Schedule(format!(
                "{} always uses {v} chunks per device (V placement), got --chunks {}; valid: --chunks {v}, or leave --chunks out",
                schedule_name(req),
                req.chunks
            )))
        }
        None => req,
    };
    let dp = check(req)?;
    let microbatches = req.global_batch / dp / req.micro_batch;
    let name = schedule_name(req);
    let interleaved = name == ScheduleName::Interleaved1F1B && req.chunks > 1;
    if req.microbatch_group.is_some() && !interleaved {
        return Err(PredictError::Schedule(
            "--microbatch-group-size-per-virtual-pipeline-stage applies to interleaved-1f1b with --chunks > 1".into(),
        ));
    }
    if interleaved && req.microbatch_group.is_none() && microbatches % req.pp != 0 {
        // Megatron-Core's default group is p, which needs p to divide m ("number of
        // microbatches is not divisible by pipeline-model-parallel-size"); a larger group
        // runs any m >= p.
        let larger =
            crate::schedule::generators::smallest_group(req.pp as u32, microbatches as u32);
        return Err(PredictError::Schedule(format!(
            "interleaved-1f1b with --chunks {} needs the micro-batch count m = --global-batch / (d x --micro-batch) = {microbatches} divisible by --pp {} with Megatron-Core's default micro-batch group; valid: a global batch or micro-batch that makes m a multiple of {}, {}or --chunks 1",
            req.chunks,
            req.pp,
            req.pp,
            match larger {
                Some(n) => format!("--microbatch-group-size-per-virtual-pipeline-stage {n} (the smallest group Megatron-Core accepts for m = {microbatches}), "),
                None => String::new(),
            }
        )));
    }
    let group = match req.microbatch_group {
        Some(n) if n > u32::MAX as u64 => {
            return Err(PredictError::Schedule(format!(
                "--microbatch-group-size-per-virtual-pipeline-stage {n}: must be at most the micro-batch count m = {microbatches}"
            )))
        }
        other => other.map(|n| n as u32),
    };
    let schedule = generate(
        name,
        GenParams::new(req.pp as u32, microbatches as u32)
            .chunks(req.chunks as u32)
            .group(group),
    )
    .map_err(|e| PredictError::Schedule(e.to_string()))?;
    let step = step_costs(req, dp, schedule.num_stages, schedule.placement)?;
    let result = simulate(
        &schedule,
        &step.costs,
        SimOptions {
            record_timeline: req.record_timeline,
            max_events: None,
        },
    )
    .map_err(|e| PredictError::Internal(e.to_string()))?;
    Ok(prediction_from(req, name, step, result))
}

/// The prediction for `req` from its step costs and the simulation of its schedule.
pub fn prediction_from(
    req: &PredictRequest,
    name: ScheduleName,
    step: StepCosts,
    result: SimResult,
) -> Prediction {
    let model = req.model;
    let hw = req.hardware;
    let layers = model.num_layers as u64;
    let cm = req.cost_model(step.dp);
    let step_time_s = result.makespan_ns as f64 / 1e9;
    let samples = req.global_batch as f64;
    let layer_fwd = cm.layer_forward_flops() / req.micro_batch as f64;
    let logit_fwd = cm.logit_forward_flops() / req.micro_batch as f64;
    // Megatron-Core's `mla_up_proj` and `mlp` modules, each alone or in a set: the
    // up-projections of every layer, the dense MLP's two GEMMs of dense layers only.
    let mla_per_layer = if req.recompute.recomputes_mla_up_proj() {
        cm.mla_up_proj_flops() / req.micro_batch as f64
    } else {
        0.0
    };
    let mlp_per_layer = if req.recompute.recomputes_mlp() {
        let g = cm.layer_gemms();
        (g[4].flops() + g[5].flops()) / req.micro_batch as f64
    } else {
        0.0
    };
    let recompute_per_layer = match req.recompute {
        Recompute::None => 0.0,
        Recompute::Selective => cm.attention_core_flops() / req.micro_batch as f64,
        Recompute::Full => layer_fwd,
        Recompute::SelectiveOp => cm.selective_op_recompute_flops() / req.micro_batch as f64,
        Recompute::SelectiveLayer => layer_fwd / 2.0,
        // No GEMM is recomputed by the norms or the expert activation; the MoE block's
        // recompute is counted below.
        Recompute::NormAct | Recompute::NormMoe => 0.0,
        // The up-projections and the dense MLP's two GEMMs (MoE layers recompute no MLP:
        // below).
        Recompute::MlaUpProj
        | Recompute::Mlp
        | Recompute::NormMlaUpProj
        | Recompute::NormActMlaUpProj
        | Recompute::MlaUpProjMlp => mla_per_layer + mlp_per_layer,
    };
    let layers_fwd = match &model.moe {
        None => layers as f64 * layer_fwd,
        Some(_) => cm.all_layers_forward_flops() / req.micro_batch as f64,
    };
    // The multi-token prediction depths, as Megatron-LM's and Megatron-Bridge's FLOP counts
    // include them: each one more layer of the last layer's kind, its projection and logits.
    let depths = model.mtp_layers as f64;
    let mtp_fwd = cm.mtp_forward_flops() / req.micro_batch as f64;
    let model_flops = samples * 3.0 * (layers_fwd + logit_fwd + mtp_fwd);
    let recomputed = match (&model.moe, req.recompute) {
        (Some(_), Recompute::Full) => layers_fwd,
        // The router and routed experts of every MoE layer again.
        (Some(_), Recompute::NormMoe) => cm.moe_blocks_forward_flops() / req.micro_batch as f64,
        // Only the dense layers' MLPs (and every layer's up-projections).
        (Some(m), r) if r.recomputes_mlp() => {
            layers as f64 * mla_per_layer
                + layers.saturating_sub(m.num_moe_layers()) as f64 * mlp_per_layer
        }
        _ => layers as f64 * recompute_per_layer,
    };
    // What the depths recompute: under full recomputation Megatron-Core checkpoints each
    // depth's projection and layer together; otherwise as a layer of their kind does.
    let last = model.last_layer();
    let mtp_recomputed = depths
        * match (&model.moe, req.recompute) {
            (_, Recompute::Full) => {
                (cm.layer_forward_flops_of(last) + cm.mtp_projection_forward_flops())
                    / req.micro_batch as f64
            }
            (Some(m), Recompute::NormMoe) if model.is_moe_layer(last) => {
                cm.moe_blocks_forward_flops()
                    / m.num_moe_layers().max(1) as f64
                    / req.micro_batch as f64
            }
            (Some(_), Recompute::NormMoe) => 0.0,
            (Some(_), r) if r.recomputes_mlp() && model.is_moe_layer(last) => mla_per_layer,
            _ => recompute_per_layer,
        };
    let recomputed = recomputed + mtp_recomputed;
    let hardware_flops = model_flops + samples * recomputed;
    let per_gpu = |flops: f64| flops / step_time_s / req.gpus as f64 / 1e12;
    // The fullest device: its simulated tensor peak, then what the GPU holds around it.
    let overheads = &req.stack.overheads;
    let (fullest, tensor_peak) = result
        .devices
        .iter()
        .enumerate()
        .map(|(d, r)| (d, r.peak_memory_bytes))
        .max_by_key(|&(d, b)| (b, std::cmp::Reverse(d)))
        .unwrap_or((0, 0));
    let peak_memory_bytes = overheads.reserved_bytes(tensor_peak);
    let memory_breakdown = super::stages::device_breakdown(req, &cm, &step, fullest, tensor_peak);
    let ranks = super::stages::rank_figures(req, &cm, &step, &result, name.placement());
    let limit = hw.gpu.memory_bytes;
    let mtp_stage = super::mtp::mtp_stage(req, step.stage_layers.len()).map(|s| s as u32);
    Prediction {
        step_time_s,
        tflops_per_gpu: per_gpu(hardware_flops),
        model_tflops_per_gpu: per_gpu(model_flops),
        mfu: per_gpu(model_flops) * 1e12 / hw.gpu.peak_flops_per_s,
        mfu_precision_peak: per_gpu(model_flops) * 1e12
            / hw.peak_flops_per_s_for(req.stack.precision)
                .unwrap_or(hw.gpu.peak_flops_per_s),
        precision: req.stack.precision.as_str().to_string(),
        fp8_recipe: crate::cost::fp8_recipe::recorded(req.stack.precision, req.stack.fp8_recipe)
            .map(|r| r.as_str().to_string()),
        attention: req.stack.attention.as_str().to_string(),
        stack: req.stack.preset_name().to_string(),
        // The switches in effect: the tensor-parallel overlap needs sequence parallelism and
        // t > 1, the parameter-gather overlap a sharded optimizer that gathers after its step.
        tp_comm_overlap: cm.tp_overlap(),
        overlap_grad_reduce: req.stack.overlap_grad_reduce,
        overlap_param_gather: req.stack.overlap_param_gather
            && req.stack.zero.shards_optimizer()
            && !req.stack.zero.shards_weights(),
        defer_embedding_wgrad_compute: req.stack.defer_embedding_wgrad,
        cross_entropy_fusion: req.stack.cross_entropy_fusion.as_str().to_string(),
        wgrad_deferral_limit: req.stack.wgrad_deferral_limit,
        fp8_param_gather: req.stack.low_precision_params(),
        cpu_offloading_num_layers: req.stack.cpu_offload_layers,
        use_precision_aware_optimizer: req.stack.optimizer_state.precision_aware(),
        main_params_dtype: req.stack.optimizer_state.master.main_params_dtype().into(),
        exp_avg_dtype: req.stack.optimizer_state.exp_avg.as_str().into(),
        exp_avg_sq_dtype: req.stack.optimizer_state.exp_avg_sq.as_str().into(),
        switches: req.stack.recorded_switches(),
        shared_gpu: req.shared_gpu,
        tokens_per_s: samples * model.seq_len as f64 / step_time_s,
        tokens_per_s_per_gpu: samples * model.seq_len as f64 / step_time_s / req.gpus as f64,
        params: model.total_params(),
        active_params: model.active_params(),
        bubble_fraction: result.bubble_fraction,
        peak_memory_bytes,
        fits: !step.too_big && tensor_peak <= overheads.tensor_budget_bytes(limit),
        memory_breakdown,
        memory_limit_bytes: limit,
        model: model.name.clone(),
        hardware: hw.name.clone(),
        gpus: req.gpus,
        tp: req.tp,
        pp: req.pp,
        dp: step.dp,
        micro_batch: req.micro_batch,
        microbatches: step.microbatches,
        schedule: name.as_str().to_string(),
        chunks: req.chunks,
        microbatch_group: req
            .microbatch_group
            .filter(|_| schedule_name(req) == ScheduleName::Interleaved1F1B && req.chunks > 1),
        recompute: req.recompute.as_str().to_string(),
        sequence_parallel: req.sequence_parallel,
        cp: req.cp,
        zero1: req.stack.zero.shards_optimizer(),
        zero: req.stack.zero.stage(),
        dp_replicate: req.dp_replicate,
        global_batch: req.global_batch,
        model_state_bytes: step.model_state_max_bytes,
        split: split_label(req, &step.stage_layers).to_string(),
        stage_layers: step.stage_layers,
        ep: req.ep,
        etp: req.etp,
        mtp_num_layers: model.mtp_layers,
        mtp_stage,
        ranks,
        timeline: result.timeline,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::{Hardware, Model};

    use crate::plan::predict::step::tests::base;

    #[test]
    fn bad_inputs_name_their_flag() {
        let hw = Hardware::bundled("a100-80gb").unwrap();
        let m = Model::preset("gpt-18.4b").unwrap();
        let mut r = base(&m, &hw);
        r.tp = 5;
        r.gpus = 5 * 4 * 2;
        let e = predict(&r).unwrap_err().to_string();
        assert!(e.contains("--tp 5") && e.contains("48"), "{e}");
        let mut r = base(&m, &hw);
        r.dp = Some(3);
        let e = predict(&r).unwrap_err().to_string();
        assert!(e.contains("--gpus"), "{e}");
        let mut r = base(&m, &hw);
        r.micro_batch = 3;
        let e = predict(&r).unwrap_err().to_string();
        assert!(
            e.contains("--micro-batch 3") && e.contains("1, 2, 4, 8, 16, 32"),
            "{e}"
        );
        let mut r = base(&m, &hw);
        r.gpus = 0;
        assert!(predict(&r).unwrap_err().to_string().contains("--gpus"));
    }

    #[test]
    fn weights_over_80gb_do_not_fit() {
        let hw = Hardware::bundled("a100-80gb").unwrap();
        let m = Model::preset("gpt3-175b").unwrap();
        let mut r = PredictRequest::new(&m, &hw);
        r.gpus = 8;
        r.tp = 8;
        r.global_batch = 8;
        // 175e9 / 8 params x 2 bytes of weights alone = 44 GB; with gradients and Adam 350 GB.
        let pred = predict(&r).unwrap();
        assert!(!pred.fits);
        assert!(pred.model_state_bytes > 300_000_000_000);
    }

    #[test]
    fn more_chunks_shrink_the_bubble() {
        let hw = Hardware::bundled("a100-80gb").unwrap();
        let m = Model::preset("gpt-39.1b").unwrap();
        let mut r = base(&m, &hw);
        r.gpus = 8 * 4 * 2;
        let one = predict(&r).unwrap();
        r.chunks = 3;
        let three = predict(&r).unwrap();
        assert!(three.bubble_fraction < one.bubble_fraction);
        assert!(one.fits && one.tflops_per_gpu > 50.0 && one.tflops_per_gpu < 312.0);
    }

    #[test]
    fn deterministic() {
        let hw = Hardware::bundled("a100-80gb").unwrap();
        let m = Model::preset("llama3-8b").unwrap();
        let mut r = base(&m, &hw);
        r.sequence_parallel = true;
        r.recompute = Recompute::Selective;
        assert_eq!(predict(&r).unwrap(), predict(&r).unwrap());
    }

    #[test]
    fn stage_layers_override_the_even_split() {
        let hw = Hardware::bundled("a100-80gb").unwrap();
        let m = Model::preset("gpt-18.4b").unwrap();
        let even = predict(&base(&m, &hw)).unwrap();
        assert_eq!(even.stage_layers, vec![10, 10, 10, 10]);
        let mut r = base(&m, &hw);
        r.stage_layers = Some(vec![10, 10, 10, 10]);
        assert_eq!(predict(&r).unwrap(), even);
        r.stage_layers = Some(vec![7, 11, 11, 11]);
        let uneven = predict(&r).unwrap();
        assert_eq!(uneven.stage_layers, vec![7, 11, 11, 11]);
        assert!(
            uneven.step_time_s > even.step_time_s,
            "a heavier stage bounds the pipeline"
        );
        r.stage_layers = Some(vec![10, 10, 20]);
        let e = predict(&r).unwrap_err().to_string();
        assert!(
            e.contains("need 4 counts") && e.contains("40 layers"),
            "{e}"
        );
    }

    #[test]
    fn balanced_split_is_never_slower_and_sometimes_faster() {
        let hw = Hardware::bundled("a100-80gb").unwrap();
        let mut strictly_faster = 0;
        for name in ["gpt-1.7b", "gpt-18.4b"] {
            let m = Model::preset(name).unwrap();
            for pp in [2, 4, 8] {
                for (recompute, b) in [(Recompute::Full, 1), (Recompute::None, 4)] {
                    let mut r = PredictRequest::new(&m, &hw);
                    r.gpus = 8 * pp;
                    r.tp = 8;
                    r.pp = pp;
                    r.global_batch = 64;
                    r.micro_batch = b;
                    r.recompute = recompute;
                    if name == "gpt-1.7b" {
                        r.tp = 1;
                        r.gpus = pp;
                    }
                    let even = predict(&r).unwrap();
                    r.partition = Split::Balanced;
                    let bal = predict(&r).unwrap();
                    assert!(
                        bal.step_time_s <= even.step_time_s,
                        "{name} p={pp}: balanced {:?} {} s > even {} s",
                        bal.stage_layers,
                        bal.step_time_s,
                        even.step_time_s
                    );
                    assert_eq!(bal.stage_layers.iter().sum::<u32>(), m.num_layers);
                    assert!(bal.stage_layers.iter().all(|&c| c >= 1));
                    if bal.step_time_s < even.step_time_s {
                        assert_eq!(bal.split, "balanced");
                        strictly_faster += 1;
                    } else {
                        assert_eq!(bal.stage_layers, even.stage_layers);
                        assert_eq!(bal.split, "even");
                    }
                }
            }
        }
        // gpt-1.7b without recomputation: the output layer (vocabulary 51200, hidden 2304)
        // costs more than a transformer layer, so the last stage sheds layers.
        assert!(strictly_faster >= 1, "balancing never helped");
    }
}
