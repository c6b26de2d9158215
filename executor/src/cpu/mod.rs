//! The CPU backend: one [`CpuWorker`] per pipeline device, each run on its own OS thread by the
//! runner, with real f32 math ([`model`], [`math`]) and `std::sync::mpsc` channels between
//! devices.
//!
//! Transfers: one channel per (stage boundary, direction). Boundary `s` (between stages `s` and
//! `s + 1`) carries activations forward from `s` to `s + 1` and gradients backward from `s + 1`
//! to `s`. A channel has exactly one sender (the producing stage's device) and one receiver;
//! messages carry their micro-batch index, and a receiver parks messages that arrive before the
//! schedule asks for them, so receives match by (stage, micro-batch) in whatever order the
//! schedule issues them. A send copies the tensor into a fresh buffer (the handoff a real link
//! would do) and never blocks (unbounded channel). When a worker fails or its thread ends, its
//! senders are dropped, so a peer waiting on it gets [`ExecError::Peer`] instead of hanging.
//!
//! Weight versions: synchronous schedules keep one version per stage and update it in
//! [`DeviceWorker::optimizer_step`]. PipeDream (`stash`) updates a stage after each of its
//! backwards and each in-flight micro-batch holds (an `Arc` of) the version its forward used;
//! its backward uses that version. `stash-vsync` uses, on every stage, the version number that
//! stage 0 used for the micro-batch. 2BW accumulates `microbatches_per_step` backwards per
//! update; forwards use the newest version and backwards their stashed one (two alive at most).

pub mod comm;
pub mod fp8;
pub mod linear;
pub mod math;
pub mod model;
pub mod moe;
pub mod quant;
pub mod ring;

use crate::backend::{BackwardPart, DeviceWorker, ExecError, RunOptions, Span, SpanStream};
use crate::spec::{self, Dims};
use comm::Comms;
use model::{Ctx, MicrobatchState, StageInput, StageWeights};
use pplan::plan::plan_file::Plan;
use pplan::schedule::ir::{Kind, WeightUpdate};
use quant::Fp8Recipe;
use std::collections::{HashMap, VecDeque};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;

/// One tensor in flight between two stages.
#[derive(Debug)]
struct Msg {
    microbatch: u32,
    /// The producing action's kind (F, or B/I for gradients), for the trace.
    kind: Kind,
    data: Vec<f32>,
    /// The transfer's interval on the run's clock (the sender's copy into the channel), which
    /// the receiver records as its receive span: the simulator's model, where one transfer
    /// occupies the sender's send stream and the receiver's receive stream at the same time.
    /// Time the receiver spends blocked before the data arrives is idle time, not transfer.
    sent_start_ns: u64,
    sent_end_ns: u64,
}

/// The receiving end of one boundary, with the messages that arrived early.
struct Inbox {
    rx: Receiver<Msg>,
    parked: HashMap<u32, Msg>,
    peer: u32,
}

struct Outbox {
    tx: Sender<Msg>,
    peer: u32,
}

/// One stage held by this device.
struct StageSlot {
    stage: u32,
    embedding: bool,
    output: bool,
    /// Weight versions, newest last, with their version numbers (updates applied so far).
    /// Only vertical sync keeps more than the newest here; in-flight micro-batches keep their
    /// own `Arc`s.
    versions: VecDeque<(u32, Arc<StageWeights>)>,
    grads: StageWeights,
    /// Micro-batches between F and W: the weights their forward used, and their activations.
    inflight: HashMap<u32, (Arc<StageWeights>, MicrobatchState)>,
    /// Weight-gradient completions since the last update (asynchronous schedules).
    accumulated: u32,
    /// Forwards run so far on this stage (all passes), for vertical-sync pruning.
    forwards: u64,
    fwd_in: Option<Inbox>,
    fwd_out: Option<Outbox>,
    bwd_in: Option<Inbox>,
    bwd_out: Option<Outbox>,
}

/// A CPU pipeline device: one rank of it, with data and context parallelism.
pub struct CpuWorker {
    device: u32,
    /// This rank's replica index `r = dp_rank · cp + cp_rank` (0 without replicas).
    replica: u32,
    comms: Comms,
    ctx: Ctx,
    lr: f32,
    seed: u64,
    weight_update: WeightUpdate,
    stash: bool,
    microbatches: u32,
    per_step: u32,
    /// For vertical sync: the version stage 0 used for micro-batch `k` within a pass.
    vsync_versions: Vec<u32>,
    /// Optimizer steps (passes) completed.
    pass: u32,
    stages: Vec<StageSlot>,
    loss: f64,
    origin: Instant,
}

/// Why the executor's model cannot express a plan, or None: the checks both backends make.
pub fn unsupported_model(plan: &Plan) -> Option<String> {
    let m = &plan.model;
    let par = &plan.parallelism;
    if m.gated_mlp {
        return Some("plan: field `model.gated_mlp` is true; the executor's model (executor/src/spec.rs) has a two-matrix GELU MLP".into());
    }
    if m.num_query_groups != m.num_attention_heads {
        return Some(format!("plan: field `model.num_query_groups` is {} but the executor's model has no grouped-query attention (it must equal num_attention_heads = {})", m.num_query_groups, m.num_attention_heads));
    }
    if m.mla.is_some() {
        return Some("plan: field `model.mla` is set; the executor's model has no multi-head latent attention".into());
    }
    if m.sliding_window.is_some() {
        return Some("plan: field `model.sliding_window` is set; the executor's attention sees every earlier position (no sliding window)".into());
    }
    if m.mtp_num_layers > 0 {
        return Some(format!("plan: field `model.mtp_num_layers` is {}; the executor has no multi-token prediction depths", m.mtp_num_layers));
    }
    if let Some(cf) = par.moe_expert_capacity_factor {
        return Some(format!("plan: field `parallelism.moe_expert_capacity_factor` is {cf}; the executor's experts are dropless (every routed token is computed)"));
    }
    if par.tp != 1 || par.etp != 1 {
        return Some(format!("plan: fields `parallelism.tp` = {} and `parallelism.etp` = {}: the executor has no tensor parallelism (both must be 1)", par.tp, par.etp));
    }
    if let Some(e) = &m.moe {
        if e.moe_router_topk == 0 || e.moe_router_topk > e.num_experts {
            return Some(format!(
                "plan: field `model.moe.moe_router_topk` is {}; it must be 1..=num_experts ({})",
                e.moe_router_topk, e.num_experts
            ));
        }
        if e.moe_router_num_groups > 1 {
            return Some("plan: field `model.moe.moe_router_num_groups` is set; the executor routes without group limits".into());
        }
        if e.moe_layer_pattern.len() != m.num_layers as usize {
            return Some(format!(
                "plan: field `model.moe.moe_layer_pattern` has {} entries for {} layers",
                e.moe_layer_pattern.len(),
                m.num_layers
            ));
        }
    }
    None
}

/// Why this backend cannot run a plan, or None.
pub fn unsupported(plan: &Plan, opts: &RunOptions) -> Option<String> {
    if let Some(why) = unsupported_model(plan) {
        return Some(why);
    }
    let m = &plan.model;
    let par = &plan.parallelism;
    let replicas = par.dp * par.cp;
    if replicas > 1 && plan.schedule.weight_update != "flush" {
        return Some(format!("plan: fields `parallelism.dp` = {} and `parallelism.cp` = {} with `schedule.weight_update` '{}': the CPU backend runs data and context parallelism with synchronous schedules (flush) only", par.dp, par.cp, plan.schedule.weight_update));
    }
    let experts = m.moe.as_ref().map_or(0, |e| e.num_experts);
    match comm::replica_mismatch(m.seq_length, experts, par.dp, par.cp, par.ep) {
        Some(comm::ReplicaMismatch::CpChunks) => {
            return Some(format!("plan: field `model.seq_length` = {} is not a multiple of 2 × parallelism.cp = {}: context parallelism cuts each sequence into 2·cp equal chunks", m.seq_length, 2 * par.cp));
        }
        Some(comm::ReplicaMismatch::Ep) => {
            return Some(format!("plan: field `parallelism.ep` = {}: expert parallelism needs a MoE model whose experts ({experts}) and data × context-parallel ranks ({replicas}) it divides", par.ep));
        }
        None => {}
    }
    if let Err(why) = Fp8Recipe::from_plan(&par.precision, &par.fp8_recipe) {
        return Some(why);
    }
    if let Some(dt) = &opts.dtype {
        if dt != "f32" && dt != "bf16" {
            return Some(format!("--dtype '{dt}' (valid: f32, bf16)"));
        }
    }
    if opts.threads_per_device == 0 {
        return Some("--threads-per-device must be at least 1".into());
    }
    if opts.steps == 0 {
        return Some("--steps must be at least 1".into());
    }
    None
}

/// Bytes the CPU run needs at most: every stage's weights and gradients (times the in-flight
/// versions for PipeDream) plus every micro-batch's activations on every layer at once (GPipe's
/// worst case), on every data- and context-parallel replica.
pub fn memory_needed_bytes(plan: &Plan) -> u128 {
    let d = Dims::from_plan(plan);
    let m = &plan.model;
    let (h, v) = (m.hidden_size as u128, m.vocab_size as u128);
    let par = &plan.parallelism;
    let replicas = (par.dp * par.cp).max(1) as u128;
    let pattern = m.moe.as_ref().map(|e| &e.moe_layer_pattern);
    let layers: u128 = (0..m.num_layers as usize)
        .map(|l| {
            let moe = pattern.is_some_and(|p| p.get(l) == Some(&1));
            model::layer_params(&d, moe, par.ep.max(1) as usize) as u128
        })
        .sum();
    let weights = (layers + 2 * v * h) * 4;
    let p = plan.parallelism.pp as u128;
    let versions = if plan.schedule.weight_update == "flush" {
        2
    } else {
        2 + p
    };
    let acts = plan.schedule.microbatches as u128
        * m.num_layers as u128
        * model::layer_activation_bytes(&d) as u128;
    let logits = plan.schedule.microbatches as u128 * d.tokens() as u128 * v * 4;
    replicas * (weights * versions + acts + logits)
}

fn available_memory_bytes() -> Option<u128> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u128 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// One worker per pipeline device, wired with channels, weights initialised per the spec.
pub fn workers(plan: &Plan, opts: &RunOptions) -> Result<Vec<Box<dyn DeviceWorker>>, ExecError> {
    if let Some(why) = unsupported(plan, opts) {
        return Err(ExecError::Plan(why));
    }
    let need = memory_needed_bytes(plan);
    if let Some(avail) = available_memory_bytes() {
        if need > avail {
            return Err(ExecError::Plan(format!(
                "plan needs about {:.2} GB of host memory on the CPU backend (weights, gradients, weight versions and every micro-batch's activations) but {:.2} GB is available; use a smaller model, micro-batch or fewer micro-batches",
                need as f64 / 1e9,
                avail as f64 / 1e9
            )));
        }
    }
    let schedule = plan
        .schedule_ir()
        .map_err(|e| ExecError::Plan(e.to_string()))?;
    let dims = Dims::from_plan(plan);
    let p = plan.parallelism.pp as u32;
    let origin = Instant::now();
    let vsync = matches!(
        schedule.weight_update,
        WeightUpdate::Stash {
            vertical_sync: true
        }
    );
    // Version stage 0 uses for micro-batch k: its backwards before 0Fk on its device (per pass;
    // stage 0 updates after each backward under stash).
    let mut vsync_versions = vec![0u32; schedule.num_microbatches as usize];
    if vsync {
        let mut done = 0u32;
        for a in &schedule.devices[schedule.device_of(0) as usize] {
            if a.stage != 0 {
                continue;
            }
            match a.kind {
                Kind::F => vsync_versions[a.microbatch as usize] = done,
                Kind::B | Kind::W => done += 1,
                Kind::I => {}
            }
        }
    }
    let par = &plan.parallelism;
    let (dp, cp, ep) = (
        par.dp.max(1) as usize,
        par.cp.max(1) as usize,
        par.ep.max(1) as usize,
    );
    let replicas = dp * cp;
    let fp8 = Fp8Recipe::from_plan(&par.precision, &par.fp8_recipe).map_err(ExecError::Plan)?;
    let experts = dims.moe.map_or(0, |m| m.experts) as u32;
    let pattern: Vec<u8> = plan
        .model
        .moe
        .as_ref()
        .map_or_else(Vec::new, |m| m.moe_layer_pattern.clone());
    // Each pipeline device's groups of replicas.
    let mut comms: Vec<Vec<Comms>> = (0..p).map(|_| comm::replica_comms(dp, cp, ep)).collect();
    let mut out: Vec<CpuWorker> = Vec::new();
    for r in 0..replicas {
        let held = {
            let per = experts / ep as u32;
            let q = (r % ep) as u32;
            q * per..(q + 1) * per
        };
        out.extend(pipeline(
            plan,
            opts,
            &schedule,
            &vsync_versions,
            origin,
            fp8,
            &pattern,
            held,
            r as u32,
            &mut comms,
        ));
    }
    Ok(out
        .into_iter()
        .map(|w| Box::new(w) as Box<dyn DeviceWorker>)
        .collect())
}

/// One replica's pipeline: a worker per device, wired with channels, weights initialised per
/// the spec; each worker takes its ends of `comms[device][replica]`.
#[allow(clippy::too_many_arguments)]
fn pipeline(
    plan: &Plan,
    opts: &RunOptions,
    schedule: &pplan::schedule::ir::Schedule,
    vsync_versions: &[u32],
    origin: Instant,
    fp8: Option<Fp8Recipe>,
    pattern: &[u8],
    held: std::ops::Range<u32>,
    replica: u32,
    comms: &mut [Vec<Comms>],
) -> Vec<CpuWorker> {
    let dims = Dims::from_plan(plan);
    let p = plan.parallelism.pp as u32;
    let n = plan.stages.len();
    // Per boundary: the two channel ends, taken by the stages that own them.
    type Ends = (Option<Sender<Msg>>, Option<Receiver<Msg>>);
    let mut fwd: Vec<Ends> = Vec::new();
    let mut bwd: Vec<Ends> = Vec::new();
    for _ in 0..n.saturating_sub(1) {
        let (t, r) = channel();
        fwd.push((Some(t), Some(r)));
        let (t, r) = channel();
        bwd.push((Some(t), Some(r)));
    }
    let mut out: Vec<CpuWorker> = (0..p)
        .map(|device| CpuWorker {
            device,
            replica,
            comms: std::mem::replace(&mut comms[device as usize][replica as usize], Comms::solo()),
            ctx: Ctx {
                dims,
                threads: opts.threads_per_device,
                fp8,
            },
            lr: opts.lr,
            seed: opts.seed,
            weight_update: schedule.weight_update,
            stash: !opts.disable_weight_stashing,
            microbatches: schedule.num_microbatches,
            per_step: schedule.microbatches_per_step.max(1),
            vsync_versions: vsync_versions.to_vec(),
            pass: 0,
            stages: Vec::new(),
            loss: 0.0,
            origin,
        })
        .collect();
    for st in &plan.stages {
        let s = st.stage as usize;
        let dev = st.device;
        let w = StageWeights::init_moe(
            opts.seed,
            st.first_layer,
            st.num_layers,
            st.embedding,
            st.output,
            &dims,
            pattern,
            held.clone(),
        );
        let device_of = |stage: usize| plan.stages[stage].device;
        let slot = StageSlot {
            stage: st.stage,
            embedding: st.embedding,
            output: st.output,
            grads: w.zeros_like(),
            versions: VecDeque::from([(0, Arc::new(w))]),
            inflight: HashMap::new(),
            accumulated: 0,
            forwards: 0,
            fwd_in: (s > 0).then(|| Inbox {
                rx: fwd[s - 1].1.take().expect("one receiver per boundary"),
                parked: HashMap::new(),
                peer: device_of(s - 1),
            }),
            fwd_out: (s + 1 < n).then(|| Outbox {
                tx: fwd[s].0.take().expect("one sender per boundary"),
                peer: device_of(s + 1),
            }),
            bwd_in: (s + 1 < n).then(|| Inbox {
                rx: bwd[s].1.take().expect("one receiver per boundary"),
                parked: HashMap::new(),
                peer: device_of(s + 1),
            }),
            bwd_out: (s > 0).then(|| Outbox {
                tx: bwd[s - 1].0.take().expect("one sender per boundary"),
                peer: device_of(s - 1),
            }),
        };
        out[dev as usize].stages.push(slot);
    }
    out
}

impl CpuWorker {
    fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    fn slot_index(&self, stage: u32) -> Result<usize, ExecError> {
        self.stages
            .iter()
            .position(|s| s.stage == stage)
            .ok_or_else(|| {
                ExecError::Plan(format!(
                    "device {}: stage {stage} is not placed on this device",
                    self.device
                ))
            })
    }

    #[allow(clippy::too_many_arguments)]
    fn span(
        &self,
        stream: SpanStream,
        name: String,
        stage: Option<u32>,
        microbatch: Option<u32>,
        kind: Option<Kind>,
        peer: Option<u32>,
        start_ns: u64,
    ) -> Span {
        Span {
            device: self.device,
            stream,
            name,
            stage,
            microbatch,
            kind,
            peer,
            start_ns,
            end_ns: self.now_ns(),
        }
    }

    /// Receive micro-batch `mb` on one of slot `i`'s inboxes, blocking until it arrives.
    fn receive(
        &mut self,
        i: usize,
        forward: bool,
        mb: u32,
        spans: &mut Vec<Span>,
    ) -> Result<Vec<f32>, ExecError> {
        let device = self.device;
        let stage = self.stages[i].stage;
        let inbox = if forward {
            self.stages[i].fwd_in.as_mut()
        } else {
            self.stages[i].bwd_in.as_mut()
        }
        .ok_or_else(|| {
            ExecError::Backend(format!(
                "device {device}: stage {stage} has no {} input",
                if forward { "forward" } else { "backward" }
            ))
        })?;
        let msg = loop {
            if let Some(m) = inbox.parked.remove(&mb) {
                break m;
            }
            match inbox.rx.recv() {
                Ok(m) if m.microbatch == mb => break m,
                Ok(m) => {
                    inbox.parked.insert(m.microbatch, m);
                }
                Err(_) => {
                    return Err(ExecError::Peer {
                        device,
                        what: format!(
                            "device {} (stage {}) hung up before sending the {} of micro-batch {mb} to stage {stage}",
                            inbox.peer,
                            if forward { stage - 1 } else { stage + 1 },
                            if forward { "activation" } else { "gradient" }
                        ),
                    })
                }
            }
        };
        let peer = inbox.peer;
        if peer != device {
            let (name, from) = if forward {
                (format!("{stage}RECV_F{mb}"), stage - 1)
            } else {
                (format!("{stage}RECV_B{mb}"), stage + 1)
            };
            spans.push(Span {
                device,
                stream: SpanStream::Recv,
                name,
                stage: Some(from),
                microbatch: Some(mb),
                kind: Some(msg.kind),
                peer: Some(peer),
                start_ns: msg.sent_start_ns,
                end_ns: msg.sent_end_ns,
            });
        }
        Ok(msg.data)
    }

    fn send(
        &mut self,
        i: usize,
        forward: bool,
        mb: u32,
        kind: Kind,
        data: &[f32],
        spans: &mut Vec<Span>,
    ) -> Result<(), ExecError> {
        let start = self.now_ns();
        let device = self.device;
        let stage = self.stages[i].stage;
        let outbox = if forward {
            self.stages[i].fwd_out.as_ref()
        } else {
            self.stages[i].bwd_out.as_ref()
        }
        .ok_or_else(|| {
            ExecError::Backend(format!("device {device}: stage {stage} has no output link"))
        })?;
        let peer = outbox.peer;
        // The copy is the transfer: the receiver gets its own buffer.
        let data = data.to_vec();
        let msg = Msg {
            microbatch: mb,
            kind,
            data,
            sent_start_ns: start,
            sent_end_ns: self.now_ns(),
        };
        outbox.tx.send(msg).map_err(|_| ExecError::Peer {
            device,
            what: format!(
                "device {peer} (stage {}) hung up; cannot send micro-batch {mb}",
                if forward { stage + 1 } else { stage - 1 }
            ),
        })?;
        if peer != device {
            let name = format!("{stage}SEND_{}{mb}", if forward { 'F' } else { 'B' });
            let s = self.span(
                SpanStream::Send,
                name,
                Some(stage),
                Some(mb),
                Some(kind),
                Some(peer),
                start,
            );
            spans.push(s);
        }
        Ok(())
    }

    fn is_async(&self) -> bool {
        !matches!(self.weight_update, WeightUpdate::Flush)
    }

    /// The weights a forward of `mb` on slot `i` uses.
    fn forward_weights(&mut self, i: usize, mb: u32) -> Result<Arc<StageWeights>, ExecError> {
        let slot = &mut self.stages[i];
        slot.forwards += 1;
        if let WeightUpdate::Stash {
            vertical_sync: true,
        } = self.weight_update
        {
            let per_pass = self.microbatches / self.per_step;
            let want = self.pass * per_pass + self.vsync_versions[mb as usize];
            // Stage s has applied at least as many updates as stage 0 had before 0F(mb), since
            // every micro-batch's backward reaches stage s before stage 0.
            let Some((_, w)) = slot.versions.iter().find(|(v, _)| *v == want) else {
                return Err(ExecError::Backend(format!(
                    "device {}: stage {} has no weight version {want} for micro-batch {mb} (vertical sync); it holds {:?}",
                    self.device,
                    slot.stage,
                    slot.versions.iter().map(|(v, _)| *v).collect::<Vec<_>>()
                )));
            };
            let w = w.clone();
            // Later forwards need versions >= want (stage 0's count only grows).
            while slot.versions.len() > 1 && slot.versions[0].0 < want {
                slot.versions.pop_front();
            }
            return Ok(w);
        }
        Ok(slot
            .versions
            .back()
            .expect("a stage has a version")
            .1
            .clone())
    }

    fn apply_update(&mut self, i: usize) {
        let lr = self.lr;
        let vsync = matches!(
            self.weight_update,
            WeightUpdate::Stash {
                vertical_sync: true
            }
        );
        let slot = &mut self.stages[i];
        let (ver, newest) = slot.versions.back_mut().expect("a stage has a version");
        if vsync {
            let mut w = (**newest).clone();
            w.sgd(lr, &slot.grads);
            let v = *ver + 1;
            slot.versions.push_back((v, Arc::new(w)));
        } else {
            // Copies only when an in-flight micro-batch still holds this version.
            Arc::make_mut(newest).sgd(lr, &slot.grads);
            *ver += 1;
        }
        slot.grads.zero();
    }

    /// The weight gradient of `mb` on slot `i` is complete: accumulate, and update when an
    /// asynchronous schedule says so.
    fn weight_gradient_done(&mut self, i: usize, mb: u32, spans: &mut Vec<Span>) {
        if !self.is_async() {
            return;
        }
        let slot = &mut self.stages[i];
        slot.accumulated += 1;
        if slot.accumulated % self.per_step == 0 {
            let start = self.now_ns();
            self.apply_update(i);
            let stage = self.stages[i].stage;
            let s = self.span(
                SpanStream::Optimizer,
                "OPTIMIZER_STEP".into(),
                Some(stage),
                Some(mb),
                None,
                None,
                start,
            );
            spans.push(s);
        }
    }
}

impl DeviceWorker for CpuWorker {
    fn device(&self) -> u32 {
        self.device
    }

    fn forward(&mut self, stage: u32, mb: u32, spans: &mut Vec<Span>) -> Result<(), ExecError> {
        let i = self.slot_index(stage)?;
        let (step, data_mb) = spec::data_index(self.pass, mb, self.microbatches, self.per_step);
        let d = self.ctx.dims;
        let data_mb = spec::replica_microbatch(self.replica / d.cp as u32, data_mb, self.per_step);
        let cp_rank = self.comms.cp.rank();
        let ids;
        let input = if self.stages[i].embedding {
            ids = model::cp_tokens(&spec::token_ids(self.seed, step, data_mb, &d), &d, cp_rank);
            StageInput::Tokens(&ids)
        } else {
            StageInput::Hidden(self.receive(i, true, mb, spans)?)
        };
        let labels = self.stages[i]
            .output
            .then(|| model::cp_tokens(&spec::labels(self.seed, step, data_mb, &d), &d, cp_rank));
        let start = self.now_ns();
        let w = self.forward_weights(i, mb)?;
        let scale = spec::loss_scale(&d, self.per_step);
        let device = self.device;
        let (y, loss, st) = model::stage_forward(
            &self.ctx,
            &w,
            input,
            labels.as_deref(),
            scale,
            &mut self.comms,
        )
        .map_err(|e| ExecError::Peer {
            device,
            what: format!("{stage}F{mb}: {e}"),
        })?;
        self.loss += loss;
        if self.stages[i].inflight.insert(mb, (w, st)).is_some() {
            return Err(ExecError::Backend(format!(
                "device {}: forward of stage {stage} micro-batch {mb} ran twice in one pass",
                self.device
            )));
        }
        let s = self.span(
            SpanStream::Compute,
            format!("{stage}F{mb}"),
            Some(stage),
            Some(mb),
            Some(Kind::F),
            None,
            start,
        );
        spans.push(s);
        if let Some(y) = y {
            self.send(i, true, mb, Kind::F, &y, spans)?;
        }
        Ok(())
    }

    fn backward(
        &mut self,
        stage: u32,
        mb: u32,
        part: BackwardPart,
        spans: &mut Vec<Span>,
    ) -> Result<(), ExecError> {
        let i = self.slot_index(stage)?;
        let kind = match part {
            BackwardPart::Full => Kind::B,
            BackwardPart::Input => Kind::I,
            BackwardPart::Weight => Kind::W,
        };
        let device = self.device;
        let missing = || {
            ExecError::Backend(format!(
                "device {device}: {stage}{kind}{mb} has no forward state (forward not run, or backward run twice)"
            ))
        };
        let mut dx = None;
        if part != BackwardPart::Weight {
            let dy = if self.stages[i].output {
                None
            } else {
                Some(self.receive(i, false, mb, spans)?)
            };
            let start = self.now_ns();
            let slot = &mut self.stages[i];
            let newest = slot
                .versions
                .back()
                .expect("a stage has a version")
                .1
                .clone();
            let (stashed, st) = slot.inflight.get_mut(&mb).ok_or_else(missing)?;
            let w = if self.stash { stashed.clone() } else { newest };
            dx = model::stage_backward_input(&self.ctx, &w, st, dy, &mut self.comms).map_err(
                |e| ExecError::Peer {
                    device,
                    what: format!("{stage}{kind}{mb}: {e}"),
                },
            )?;
            if part == BackwardPart::Input {
                let s = self.span(
                    SpanStream::Compute,
                    format!("{stage}I{mb}"),
                    Some(stage),
                    Some(mb),
                    Some(Kind::I),
                    None,
                    start,
                );
                spans.push(s);
            } else {
                // B: weight part follows in the same span.
                let slot = &mut self.stages[i];
                let (_, st) = slot.inflight.remove(&mb).ok_or_else(missing)?;
                model::stage_backward_weight(&self.ctx, &st, &mut slot.grads);
                let s = self.span(
                    SpanStream::Compute,
                    format!("{stage}B{mb}"),
                    Some(stage),
                    Some(mb),
                    Some(Kind::B),
                    None,
                    start,
                );
                spans.push(s);
                self.weight_gradient_done(i, mb, spans);
            }
        } else {
            let start = self.now_ns();
            let slot = &mut self.stages[i];
            let (_, st) = slot.inflight.remove(&mb).ok_or_else(missing)?;
            model::stage_backward_weight(&self.ctx, &st, &mut slot.grads);
            let s = self.span(
                SpanStream::Compute,
                format!("{stage}W{mb}"),
                Some(stage),
                Some(mb),
                Some(Kind::W),
                None,
                start,
            );
            spans.push(s);
            self.weight_gradient_done(i, mb, spans);
        }
        if let Some(dx) = dx {
            self.send(i, false, mb, kind, &dx, spans)?;
        }
        Ok(())
    }

    fn optimizer_step(&mut self, spans: &mut Vec<Span>) -> Result<(), ExecError> {
        if !self.is_async() {
            // Replicas first sum their gradients, a span per stage as the simulator's
            // data-parallel stream has them.
            if self.comms.dp.size() > 1 {
                for i in 0..self.stages.len() {
                    let (device, stage) = (self.device, self.stages[i].stage);
                    let start = self.now_ns();
                    self.stages[i]
                        .grads
                        .all_reduce(&mut self.comms)
                        .map_err(|e| ExecError::Peer {
                            device,
                            what: format!("gradient reduction: {e}"),
                        })?;
                    let s = self.span(
                        SpanStream::DataParallel,
                        format!("{stage}REDUCE_GRAD"),
                        Some(stage),
                        None,
                        None,
                        None,
                        start,
                    );
                    spans.push(s);
                }
            }
            let start = self.now_ns();
            for i in 0..self.stages.len() {
                self.apply_update(i);
            }
            let first = self.stages.first().map(|s| s.stage);
            let s = self.span(
                SpanStream::Optimizer,
                "OPTIMIZER_STEP".into(),
                first,
                None,
                None,
                None,
                start,
            );
            spans.push(s);
        }
        for s in &self.stages {
            if !s.inflight.is_empty() {
                return Err(ExecError::Backend(format!(
                    "device {}: stage {} still holds {} micro-batches at the end of the pass",
                    self.device,
                    s.stage,
                    s.inflight.len()
                )));
            }
        }
        self.pass += 1;
        Ok(())
    }

    fn synchronize(&mut self) -> Result<(), ExecError> {
        Ok(())
    }

    fn replica(&self) -> u32 {
        self.replica
    }

    fn weights(&mut self) -> Result<Vec<(u32, Vec<f32>)>, ExecError> {
        let device = self.device;
        self.stages
            .iter()
            .map(|s| {
                let w = &s.versions.back().expect("a version").1;
                let flat = w
                    .flat_gathered(&mut self.comms)
                    .map_err(|e| ExecError::Peer {
                        device,
                        what: format!("gathering the experts: {e}"),
                    })?;
                Ok((s.stage, flat))
            })
            .collect()
    }

    fn take_loss(&mut self) -> f64 {
        std::mem::take(&mut self.loss)
    }
}
