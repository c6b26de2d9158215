//! `pplan calibrate`: a layer profile (and a hardware profile) fitted to a measured run of a
//! plan, so that `pplan predict` reproduces that run (docs/validate.md, "pplan calibrate").
//!
//! - Layer times: per stage, the measured mean forward and backward (B, or I and W) time of one
//!   micro-batch ([`crate::measured::breakdown`]) is spread over the stage's units (its
//!   transformer layers, plus the embedding on the first stage and the output layer on the
//!   last) in proportion to the prior profile's times of those units, or evenly over the
//!   transformer layers (embedding and output layer 0) without a prior. Every stage's sums are
//!   then exactly the measured times.
//! - Bytes: the prior's, or without one the cost model's activation bytes and the plan's
//!   element size for weights and the `b·s·h` tensor sent downstream.
//! - Hardware: the point-to-point link from the measured pipeline transfers, the memory
//!   bandwidth term from the measured optimizer steps, the GEMM efficiency from the compute
//!   scale measured / prior; everything else copied.
//!
//! No IO: the caller reads the files.

use super::plan_file::Plan;
use super::predict::{check, step_costs, PredictRequest, Split};
use crate::cost::{memory, Attention, CrossEntropyFusion, Recompute, Stack, Zero};
use crate::inputs::hardware::Hardware;
use crate::inputs::profile::{LayerProfile, ProfiledLayer};
use crate::measured::breakdown::{median, Breakdown};
use crate::measured::timeline::{Collective, Dim, KernelClass, Measured};
use crate::schedule::ir::Kind;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// What calibrate is given.
#[derive(Debug, Clone, Copy)]
pub struct CalibrateInput<'a> {
    pub plan: &'a Plan,
    /// The plan's file, for messages.
    pub plan_origin: &'a str,
    pub measured: &'a Measured,
    pub breakdown: &'a Breakdown,
    /// The prior layer profile and its file.
    pub prior: Option<(&'a LayerProfile, &'a str)>,
    /// The hardware profile to start from (fitted terms replace its values).
    pub hardware: Option<&'a Hardware>,
}

/// One stage: measured against the prior prediction.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageFit {
    pub stage: u32,
    pub device: u32,
    pub first_layer: u32,
    pub num_layers: u32,
    pub measured_forward_ms: f64,
    /// B, or I + W, per micro-batch.
    pub measured_backward_ms: f64,
    /// I and W, when the trace splits the backward.
    pub measured_backward_input_ms: Option<f64>,
    pub measured_backward_weight_ms: Option<f64>,
    /// What the prior (profile, else cost model with the hardware) predicted; absent when
    /// there is neither.
    pub prior_forward_ms: Option<f64>,
    pub prior_backward_ms: Option<f64>,
    pub forward_count: usize,
    pub backward_count: usize,
}

/// A hardware term fitted to the trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FittedTerm {
    /// Field path in the hardware JSON.
    pub field: String,
    pub prior: f64,
    pub fitted: f64,
    /// What it was fitted from, with the numbers.
    pub from: String,
}

/// The result: the fitted profiles and what they came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Calibration {
    pub stages: Vec<StageFit>,
    /// Σ measured (F + B) / Σ prior (F + B) over stages, when there is a prior.
    pub compute_scale: Option<f64>,
    /// Median measured pipeline transfer (s) and the bytes the plan implies for it.
    pub p2p_measured_s: Option<f64>,
    pub p2p_bytes: Option<u64>,
    /// Median measured optimizer step per device (s) against the prior's.
    pub optimizer_measured_s: Option<f64>,
    pub optimizer_prior_s: Option<f64>,
    pub hardware_terms: Vec<FittedTerm>,
    /// Hardware fields copied unchanged (the trace cannot inform them).
    pub hardware_copied: Vec<&'static str>,
    pub steps: usize,
    pub steps_skipped: usize,
    /// The measured step time (median over the steps used, mean over ranks).
    pub step_time_measured_s: f64,
    /// The plan's own prediction, when it carries one.
    pub step_time_plan_predicted_s: Option<f64>,
    #[serde(skip)]
    pub profile: LayerProfile,
    #[serde(skip)]
    pub hardware: Option<Hardware>,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CalibrateError {
    #[error("{files}: the trace names no pipeline actions (0F1 / PP:0F1): calibrate needs per-stage forward/backward times")]
    NoActions { files: String },
    #[error("{files}: stages {trace_only} are in the trace but not in --plan '{plan}' (stages 0 to {last})")]
    TraceOnly {
        files: String,
        plan: String,
        trace_only: String,
        last: u32,
    },
    #[error("{files}: stages {plan_only} of --plan '{plan}' have no forward or backward action in the trace")]
    PlanOnly {
        files: String,
        plan: String,
        plan_only: String,
    },
    #[error("--profile '{profile}': {reason}")]
    Profile { profile: String, reason: String },
    #[error("--plan '{plan}': {reason}")]
    Plan { plan: String, reason: String },
    #[error("{files}: stage {stage}'s {what} actions last 0 ms in the trace: a layer profile of 0 ms would predict a free stage; the actions must span their kernels")]
    ZeroTime {
        files: String,
        stage: u32,
        what: &'static str,
    },
    #[error("{files}: the fitted hardware profile is out of range: {reason} (fitted from {from}); the trace's measurements do not describe the plan's hardware (transfers that include waiting, another run's trace)")]
    Fit {
        files: String,
        reason: String,
        from: String,
    },
}

fn list(v: &[u32]) -> String {
    v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Per stage, mean I and mean W (ms) over the steps used, when the trace splits the backward.
fn split_backward(m: &Measured, skipped: usize) -> BTreeMap<u32, (f64, f64)> {
    let mut acc: BTreeMap<u32, (u32, Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for r in &m.ranks {
        for a in r.actions.iter().filter(|a| a.step as usize >= skipped) {
            let e = acc
                .entry(a.action.stage)
                .or_insert_with(|| (r.rank, Vec::new(), Vec::new()));
            if e.0 != r.rank {
                continue;
            }
            let ms = (a.end_ns - a.start_ns) as f64 * 1e-6;
            match a.action.kind {
                Kind::I => e.1.push(ms),
                Kind::W => e.2.push(ms),
                _ => {}
            }
        }
    }
    acc.into_iter()
        .filter_map(|(s, (_, i, w))| Some((s, (mean(&i)?, mean(&w)?))))
        .collect()
}

/// Element size of the plan's dtype.
fn element_bytes(plan: &Plan) -> u64 {
    if plan.dtype == "f32" {
        4
    } else {
        2
    }
}

/// The request `pplan predict` would build for the plan, with `profile`.
fn request<'a>(
    plan: &Plan,
    model: &'a crate::inputs::model::Model,
    hw: &'a Hardware,
    profile: Option<&'a LayerProfile>,
) -> Result<PredictRequest<'a>, String> {
    let p = &plan.parallelism;
    let mut req = PredictRequest::new(model, hw);
    req.gpus = p.gpus;
    req.tp = p.tp;
    req.pp = p.pp;
    req.dp = Some(p.dp);
    req.cp = p.cp;
    req.global_batch = p.global_batch;
    req.micro_batch = p.micro_batch;
    req.chunks = p.chunks;
    req.schedule = plan.schedule.name.parse().ok();
    req.recompute = p.recompute.parse::<Recompute>()?;
    req.sequence_parallel = p.sequence_parallel;
    // The plan file's reader has checked the name.
    let framework = p
        .switches()
        .apply(Stack::preset(&p.stack).unwrap_or_default());
    req.shared_gpu = p.shared_gpu;
    req.stack = Stack {
        attention: if p.attention == "flash" {
            Attention::Flash
        } else {
            Attention::Unfused
        },
        tp_comm_overlap: p.tp_comm_overlap,
        overlap_grad_reduce: p.overlap_grad_reduce,
        overlap_param_gather: p.overlap_param_gather,
        defer_embedding_wgrad: p.defer_embedding_wgrad_compute,
        te_op_fuser: p.use_transformer_engine_op_fuser,
        activation_func_fp8_input_store: p.activation_func_fp8_input_store,
        wgrad_deferral_limit: p.wgrad_deferral_limit,
        fp8_param_gather: p.fp8_param_gather,
        cpu_offload_layers: p.cpu_offloading_num_layers,
        cross_entropy_fusion: p.cross_entropy_fusion.parse().unwrap_or_default(),
        // The plan file's reader has checked the fields.
        optimizer_state: p.optimizer_state().unwrap_or_default(),
        zero: Zero::from_stage(if p.zero1 { p.zero.max(1) } else { 0 }).unwrap_or(Zero::Off),
        ..framework
    };
    req.profile = profile;
    req.stage_layers = Some(plan.stages.iter().map(|s| s.num_layers).collect());
    req.mtp_stage = plan.mtp_stage().map(|s| s as u32);
    req.partition = Split::Even;
    Ok(req)
}

/// Per-stage (F, B) ms and per-device optimizer s that `predict` gives for the plan with
/// `profile` on `hw`.
type PriorCosts = (Vec<(f64, f64)>, Vec<f64>);

fn prior_costs(
    plan: &Plan,
    hw: &Hardware,
    profile: Option<&LayerProfile>,
) -> Result<PriorCosts, String> {
    let model = plan.model.to_model();
    let req = request(plan, &model, hw, profile)?;
    let dp = check(&req).map_err(|e| e.to_string())?;
    let ir = plan.schedule_ir().map_err(|e| e.to_string())?;
    let step = step_costs(&req, dp, ir.num_stages, ir.placement).map_err(|e| e.to_string())?;
    let stages = step
        .costs
        .stages
        .iter()
        .map(|s| (s.forward_ns as f64 * 1e-6, s.backward_ns as f64 * 1e-6))
        .collect();
    // The optimizer step alone, as a trace's OPTIMIZER_STEP times it (without the next
    // step's wait for an overlapped parameter gather).
    let opt = step
        .costs
        .optimizer_ns
        .iter()
        .zip(&step.param_gather_wait_ns)
        .map(|(&n, &w)| n.saturating_sub(w) as f64 * 1e-9)
        .collect();
    Ok((stages, opt))
}

/// Profile entries with the bytes of a model without a prior: the cost model's activations,
/// the plan's element size for weights and the `b·s·h` tensor sent on.
fn computed_layers(plan: &Plan) -> Result<Vec<ProfiledLayer>, String> {
    let model = plan.model.to_model();
    let p = &plan.parallelism;
    let e = element_bytes(plan);
    let recompute = p.recompute.parse::<Recompute>()?;
    let cross_entropy = p.cross_entropy_fusion.parse::<CrossEntropyFusion>()?;
    let attention = if p.attention == "flash" {
        Attention::Flash
    } else {
        Attention::Unfused
    };
    let dims = memory::ActDims::new(&model, p.micro_batch, p.tp).context_parallel(p.cp);
    let act = memory::layer_activation_bytes_for(dims, recompute, p.sequence_parallel, attention);
    let send = e * p.micro_batch * model.seq_len * model.hidden_size / (p.tp * p.cp);
    let layer_w = e * model.params_per_layer() / p.tp;
    let emb_w = e * model.vocab_size * model.hidden_size / p.tp;
    let entry = |name: String, w: u64, a: u64, o: u64| ProfiledLayer {
        name,
        forward_ms: 0.0,
        backward_ms: 0.0,
        backward_input_ms: None,
        backward_weight_ms: None,
        weight_bytes: w,
        activation_bytes: a,
        output_bytes: o,
    };
    let mut v = vec![entry(
        "embedding".into(),
        emb_w,
        memory::embedding_activation_bytes(dims, p.sequence_parallel),
        send,
    )];
    for i in 0..model.num_layers {
        v.push(entry(format!("layer{i}"), layer_w, act, send));
    }
    v.push(entry(
        "output".into(),
        if model.tied_embeddings { 0 } else { emb_w },
        memory::output_activation_bytes(
            dims,
            model.vocab_size,
            cross_entropy.saved_bytes_per_logit(),
        ),
        0,
    ));
    Ok(v)
}

/// Scale the achieved rate `bandwidth × efficiency` by `k`: the efficiency when the result
/// stays in (0, 1], else efficiency 1 and the bandwidth takes the rest.
fn scale_rate(bw: &mut f64, eff: &mut f64, k: f64) {
    let rate = *bw * *eff * k;
    if rate <= *bw {
        *eff = rate / *bw;
    } else {
        *eff = 1.0;
        *bw = rate;
    }
}

/// Fit a layer profile and, with a hardware profile, its hardware terms to a measured run.
pub fn calibrate(input: CalibrateInput) -> Result<Calibration, CalibrateError> {
    let plan = input.plan;
    let files = input.measured.files.join(", ");
    let bd = input.breakdown;
    if bd.stages.is_empty() {
        return Err(CalibrateError::NoActions { files });
    }
    let plan_err = |reason: String| CalibrateError::Plan {
        plan: input.plan_origin.to_string(),
        reason,
    };
    // Stages on both sides.
    let plan_stages: BTreeSet<u32> = plan.stages.iter().map(|s| s.stage).collect();
    let trace_stages: BTreeSet<u32> = bd.stages.iter().map(|s| s.stage).collect();
    let trace_only: Vec<u32> = trace_stages.difference(&plan_stages).copied().collect();
    if !trace_only.is_empty() {
        return Err(CalibrateError::TraceOnly {
            files,
            plan: input.plan_origin.to_string(),
            trace_only: list(&trace_only),
            last: plan.stages.len().saturating_sub(1) as u32,
        });
    }
    let incomplete: Vec<u32> = plan_stages
        .iter()
        .copied()
        .filter(|s| {
            bd.stages
                .iter()
                .find(|x| x.stage == *s)
                .is_none_or(|x| x.forward_count == 0 || x.backward_count == 0)
        })
        .collect();
    if !incomplete.is_empty() {
        return Err(CalibrateError::PlanOnly {
            files,
            plan: input.plan_origin.to_string(),
            plan_only: list(&incomplete),
        });
    }
    let layers = plan.model.num_layers;
    // The prior lined up with the model: L + 2 entries (embedding, layers, output).
    let prof_err = |reason: String| CalibrateError::Profile {
        profile: input.prior.map_or(String::new(), |p| p.1.to_string()),
        reason,
    };
    let mut notes = Vec::new();
    let computed = computed_layers(plan).map_err(plan_err)?;
    let mut out: Vec<ProfiledLayer> = computed.clone();
    let mut weight_f = vec![0.0; out.len()];
    let mut weight_b = vec![0.0; out.len()];
    let mut weight_i = vec![0.0; out.len()];
    if let Some((prior, _)) = input.prior {
        if let Some(b) = prior
            .micro_batch
            .filter(|&b| b != plan.parallelism.micro_batch)
        {
            return Err(prof_err(format!(
                "measured at micro-batch {b}, but the plan's micro_batch is {}",
                plan.parallelism.micro_batch
            )));
        }
        let mp = prior.for_model(layers).map_err(prof_err)?;
        let mut put = |i: usize, l: &ProfiledLayer| {
            out[i] = l.clone();
            weight_f[i] = l.forward_ms;
            weight_b[i] = l.backward_ms;
            weight_i[i] = l.backward_split_ms().0;
        };
        if let Some(l) = mp.embedding {
            put(0, l);
        }
        for (i, l) in mp.layers.iter().enumerate() {
            put(i + 1, l);
        }
        if let Some(l) = mp.output {
            put(layers as usize + 1, l);
        }
        if mp.embedding.is_none() {
            notes.push(format!(
                "the prior has {layers} entries (no embedding and output layer): they are written with the cost model's bytes and their time goes into the first and last stage's layers"
            ));
        }
    }
    let split = split_backward(input.measured, bd.steps_skipped);
    let mut stages = Vec::new();
    for s in &plan.stages {
        let st = bd
            .stages
            .iter()
            .find(|x| x.stage == s.stage)
            .expect("checked above");
        for (what, ms) in [("forward", st.forward_ms), ("backward", st.backward_ms)] {
            if ms.is_nan() || ms <= 0.0 {
                return Err(CalibrateError::ZeroTime {
                    files,
                    stage: s.stage,
                    what,
                });
            }
        }
        // Units: entry indices in `out` (embedding 0, layer i at i + 1, output L + 1).
        let mut units: Vec<usize> = Vec::new();
        if s.embedding {
            units.push(0);
        }
        units.extend((s.first_layer..s.first_layer + s.num_layers).map(|l| l as usize + 1));
        if s.output {
            units.push(layers as usize + 1);
        }
        if units.iter().any(|&u| u >= out.len()) {
            return Err(plan_err(format!(
                "stage {} holds layers {}..{} but the model has {layers}",
                s.stage,
                s.first_layer,
                s.first_layer + s.num_layers
            )));
        }
        let even: Vec<f64> = units
            .iter()
            .map(|&u| {
                if u == 0 || u == layers as usize + 1 {
                    0.0
                } else {
                    1.0
                }
            })
            .collect();
        let shares = |w: &[f64]| -> Vec<f64> {
            let ws: Vec<f64> = units.iter().map(|&u| w[u]).collect();
            let total: f64 = ws.iter().sum();
            let base = if total > 0.0 { ws } else { even.clone() };
            let t: f64 = base.iter().sum::<f64>().max(f64::MIN_POSITIVE);
            base.iter().map(|x| x / t).collect()
        };
        let weight_w: Vec<f64> = weight_b
            .iter()
            .zip(&weight_i)
            .map(|(b, i)| (b - i).max(0.0))
            .collect();
        let (sf, sb, si, sw) = (
            shares(&weight_f),
            shares(&weight_b),
            shares(&weight_i),
            shares(&weight_w),
        );
        let iw = split.get(&s.stage).copied();
        for (k, &u) in units.iter().enumerate() {
            let l = &mut out[u];
            l.forward_ms = st.forward_ms * sf[k];
            l.backward_ms = st.backward_ms * sb[k];
            match iw {
                Some((i, w)) => {
                    // I and W each spread by the prior's I and W (B − I) times.
                    let bi = i * si[k];
                    let bw = w * sw[k];
                    l.backward_input_ms = Some(bi);
                    l.backward_weight_ms = Some(bw);
                    l.backward_ms = bi + bw;
                }
                None => {
                    // Keep the prior's I:W ratio, if it has one.
                    if let (Some(pi), Some(_)) = (l.backward_input_ms, l.backward_weight_ms) {
                        let b0 = weight_b[u];
                        let r = if b0 > 0.0 { pi / b0 } else { 0.5 };
                        l.backward_input_ms = Some(l.backward_ms * r);
                        l.backward_weight_ms = Some(l.backward_ms * (1.0 - r));
                    }
                }
            }
        }
        stages.push(StageFit {
            stage: s.stage,
            device: s.device,
            first_layer: s.first_layer,
            num_layers: s.num_layers,
            measured_forward_ms: st.forward_ms,
            measured_backward_ms: st.backward_ms,
            measured_backward_input_ms: iw.map(|x| x.0),
            measured_backward_weight_ms: iw.map(|x| x.1),
            prior_forward_ms: None,
            prior_backward_ms: None,
            forward_count: st.forward_count,
            backward_count: st.backward_count,
        });
    }
    let profile = LayerProfile {
        source: Some(format!(
            "pplan calibrate: per-stage forward/backward times of {files} ({} steps, {} skipped as warm-up) over plan {}",
            bd.steps, bd.steps_skipped, input.plan_origin
        )),
        micro_batch: Some(plan.parallelism.micro_batch),
        layers: out,
    };

    // The prior per stage: predict's own costs when there is hardware, else the prior's sums.
    let prior_profile = input.prior.map(|p| p.0);
    let prior = match input.hardware {
        Some(hw) => match prior_costs(plan, hw, prior_profile) {
            Ok(c) => Some(c),
            Err(e) => {
                notes.push(format!("no prior prediction per stage: {e}"));
                None
            }
        },
        None => None,
    };
    if let Some((per_stage, _)) = &prior {
        for (fit, &(f, b)) in stages.iter_mut().zip(per_stage) {
            fit.prior_forward_ms = Some(f);
            fit.prior_backward_ms = Some(b);
        }
    } else if let Some(p) = prior_profile {
        if let Ok(mp) = p.for_model(layers) {
            for (fit, s) in stages.iter_mut().zip(&plan.stages) {
                let mut run: Vec<&ProfiledLayer> = Vec::new();
                if s.embedding {
                    run.extend(mp.embedding);
                }
                let a = s.first_layer as usize;
                run.extend(&mp.layers[a..a + s.num_layers as usize]);
                if s.output {
                    run.extend(mp.output);
                }
                fit.prior_forward_ms = Some(run.iter().map(|l| l.forward_ms).sum());
                fit.prior_backward_ms = Some(run.iter().map(|l| l.backward_ms).sum());
            }
        }
    }
    let compute_scale = {
        let meas: f64 = stages
            .iter()
            .map(|s| s.measured_forward_ms + s.measured_backward_ms)
            .sum();
        let pri: Option<f64> = stages
            .iter()
            .map(|s| Some(s.prior_forward_ms? + s.prior_backward_ms?))
            .sum();
        pri.filter(|&p| p > 0.0).map(|p| meas / p)
    };

    // Pipeline transfers and optimizer steps, over the steps used.
    let used = |step: u32| step as usize >= bd.steps_skipped;
    let mut p2p = Vec::new();
    let mut opt_per_rank: Vec<f64> = Vec::new();
    for r in &input.measured.ranks {
        let mut opt = Vec::new();
        for k in r.kernels.iter().filter(|k| used(k.step)) {
            if k.class == KernelClass::Comm(Collective::SendRecv, Dim::Pp) {
                let name = &r.names[k.name as usize];
                // pplan traces have both ends of a transfer; the receive span is the transfer.
                if input.measured.source != crate::measured::timeline::Source::Pplan
                    || name.contains("RECV")
                {
                    p2p.push(k.dur_ns() as f64 * 1e-9);
                }
            } else if r.names[k.name as usize] == "OPTIMIZER_STEP" {
                opt.push(k.dur_ns() as f64 * 1e-9);
            }
        }
        opt_per_rank.extend(median(opt));
    }
    let p2p_measured_s = median(p2p);
    let p2p_bytes = plan
        .stages
        .iter()
        .find(|s| !s.output)
        .map(|s| profile.layers[(s.first_layer + s.num_layers) as usize].output_bytes);
    let optimizer_measured_s = mean(&opt_per_rank);
    let optimizer_prior_s = prior
        .as_ref()
        .and_then(|(_, o)| mean(o))
        .filter(|&x| x > 0.0);

    // Hardware terms.
    let mut terms = Vec::new();
    let mut copied = Vec::new();
    let hardware = input.hardware.map(|hw| {
        let mut h = hw.clone();
        // All of the plan's GPUs in one NVLink domain: the transfers go over NVLink.
        let same_domain = plan.parallelism.gpus <= hw.nvlink_domain_gpus().max(1) as u64;
        let mut fit_p2p = false;
        if let (Some(t), Some(bytes)) = (p2p_measured_s, p2p_bytes.filter(|&b| b > 0)) {
            fit_p2p = true;
            let b = bytes as f64;
            let (bw, eff, lat, names) = if same_domain {
                (
                    &mut h.node.nvlink_bandwidth_bytes_per_s,
                    &mut h.node.nvlink_efficiency,
                    &mut h.node.nvlink_latency_s,
                    [
                        "node.nvlink_bandwidth_bytes_per_s",
                        "node.nvlink_efficiency",
                        "node.nvlink_latency_s",
                    ],
                )
            } else {
                (
                    &mut h.node.nic_bandwidth_bytes_per_s,
                    &mut h.node.nic_efficiency,
                    &mut h.node.nic_latency_s,
                    [
                        "node.nic_bandwidth_bytes_per_s",
                        "node.nic_efficiency",
                        "node.nic_latency_s",
                    ],
                )
            };
            let (bw0, eff0, lat0) = (*bw, *eff, *lat);
            let from = format!("median pipeline transfer {:.3} us for {bytes} B", t * 1e6);
            if t > lat0 {
                // t = bytes / (bw · eff) + latency, latency kept.
                let k = b / (t - lat0) / (bw0 * eff0);
                scale_rate(bw, eff, k);
            } else {
                *lat = (t - b / (bw0 * eff0)).max(0.0);
            }
            let changes = [
                (names[0], bw0, *bw),
                (names[1], eff0, *eff),
                (names[2], lat0, *lat),
            ];
            record_changes(&mut terms, &from, changes);
        }
        if let (Some(m), Some(p)) = (optimizer_measured_s, optimizer_prior_s) {
            let (bw0, eff0) = (h.gpu.hbm_bandwidth_bytes_per_s, h.gpu.hbm_efficiency);
            scale_rate(
                &mut h.gpu.hbm_bandwidth_bytes_per_s,
                &mut h.gpu.hbm_efficiency,
                p / m,
            );
            let from = format!(
                "optimizer step measured {:.3} ms, prior {:.3} ms per device",
                m * 1e3,
                p * 1e3
            );
            record_changes(
                &mut terms,
                &from,
                [
                    (
                        "gpu.hbm_bandwidth_bytes_per_s",
                        bw0,
                        h.gpu.hbm_bandwidth_bytes_per_s,
                    ),
                    ("gpu.hbm_efficiency", eff0, h.gpu.hbm_efficiency),
                ],
            );
        } else {
            copied.extend(["gpu.hbm_bandwidth_bytes_per_s", "gpu.hbm_efficiency"]);
        }
        if let Some(s) = compute_scale {
            let (pk0, e0) = (h.gpu.peak_flops_per_s, h.gpu.gemm_efficiency_max);
            scale_rate(
                &mut h.gpu.peak_flops_per_s,
                &mut h.gpu.gemm_efficiency_max,
                1.0 / s,
            );
            let from = format!("compute scale measured / prior = {s:.4}");
            record_changes(
                &mut terms,
                &from,
                [
                    ("gpu.peak_flops_per_s", pk0, h.gpu.peak_flops_per_s),
                    ("gpu.gemm_efficiency_max", e0, h.gpu.gemm_efficiency_max),
                ],
            );
        } else {
            copied.extend(["gpu.peak_flops_per_s", "gpu.gemm_efficiency_max"]);
        }
        let nvlink = [
            "node.nvlink_bandwidth_bytes_per_s",
            "node.nvlink_efficiency",
            "node.nvlink_latency_s",
        ];
        let nic = [
            "node.nic_bandwidth_bytes_per_s",
            "node.nic_efficiency",
            "node.nic_latency_s",
        ];
        if !fit_p2p || !same_domain {
            copied.extend(nvlink);
        }
        if !fit_p2p || same_domain {
            copied.extend(nic);
        }
        copied.extend([
            "gpu.gemm_half_dim",
            "gpu.peak_fp8_flops_per_s",
            "gpu.peak_fp4_flops_per_s",
            "gpu.attention_efficiency_forward",
            "gpu.attention_efficiency_backward",
            "gpu.fp8_split_accumulator_slowdown",
            "gpu.fp8_block_scaling_slowdown",
            "gpu.memory_bytes",
            "node (counts, nvlink_domain_gpus)",
            "network",
        ]);
        for t in &terms {
            h.sources.insert(
                t.field.clone(),
                format!("pplan calibrate: {} (was {})", t.from, t.prior),
            );
            if !h.fitted.contains(&t.field) {
                h.fitted.push(t.field.clone());
            }
        }
        h.name = format!("{}-calibrated", hw.name);
        h
    });
    // The written profile is read back by predict: it must pass the same checks as any
    // profile (an efficiency of 3.5e-8 from a transfer that includes waiting is refused here,
    // naming the measurement, rather than written).
    if let Some(h) = &hardware {
        if let Err(e) = h.check(&h.name) {
            let field = match &e {
                crate::inputs::hardware::HardwareError::Invalid { field, .. } => *field,
                _ => "",
            };
            let from = terms
                .iter()
                .find(|t| t.field == field)
                .map_or_else(|| "the prior profile".to_string(), |t| t.from.clone());
            return Err(CalibrateError::Fit {
                files,
                reason: e.to_string(),
                from,
            });
        }
    }
    if input.hardware.is_none() {
        notes.push(
            "no hardware profile (--hardware, or the plan's `hardware`): hardware terms not fitted"
                .into(),
        );
    }
    Ok(Calibration {
        stages,
        compute_scale,
        p2p_measured_s,
        p2p_bytes,
        optimizer_measured_s,
        optimizer_prior_s,
        hardware_terms: terms,
        hardware_copied: copied,
        steps: bd.steps,
        steps_skipped: bd.steps_skipped,
        step_time_measured_s: bd.mean.step_time_s,
        step_time_plan_predicted_s: plan.predicted.as_ref().map(|p| p.step_time_s),
        profile,
        hardware,
        notes,
    })
}

/// Record each `(field, prior, fitted)` whose value the fit changed.
fn record_changes<const N: usize>(
    terms: &mut Vec<FittedTerm>,
    from: &str,
    changes: [(&str, f64, f64); N],
) {
    for (field, prior, fitted) in changes {
        if prior != fitted {
            terms.push(FittedTerm {
                field: field.to_string(),
                prior,
                fitted,
                from: from.to_string(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_a_rate_keeps_efficiencies_in_range() {
        let (mut bw, mut eff) = (100.0, 0.8);
        scale_rate(&mut bw, &mut eff, 0.5);
        assert_eq!((bw, eff), (100.0, 0.4));
        scale_rate(&mut bw, &mut eff, 5.0);
        assert_eq!((bw, eff), (200.0, 1.0));
    }

    #[test]
    fn means_and_lists() {
        assert_eq!(mean(&[1.0, 2.0]), Some(1.5));
        assert_eq!(list(&[2, 3]), "2, 3");
    }
}
