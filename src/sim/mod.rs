//! The discrete-event simulator.
//!
//! Invariants (see docs/ARCHITECTURE.md): no IO, never reads the clock, single-threaded,
//! integer-nanosecond time, events ordered by `(time, sequence number)` so that equal times
//! pop in FIFO order, a hard bound on the number of events. Same inputs, same outputs.
//!
//! Resources per device: one compute stream that runs the device's action list in order, one
//! send stream and one receive stream. A compound action ([`crate::schedule::ir::Compound`], PyTorch's
//! `OVERLAP_F_B`) starts when the inputs of all its sub-actions are present and then runs them
//! back to back; each sub-action's output leaves when that sub-action ends. A point-to-point transfer occupies the sender's send
//! stream and the receiver's receive stream for its whole duration (latency + bytes/bandwidth,
//! computed by the caller) and overlaps compute. Transfers between stages on the same device
//! are free. Transfers start in the order they are requested (FIFO per stream).
//!
//! Optional step-level work (all off with [`Costs::default`] fields):
//! - tensor-parallel collectives that sit inside compute actions ([`Costs::tensor_parallel`]):
//!   they are part of the action's duration (Megatron runs them synchronously between GEMMs) and
//!   are shown on the device's [`Stream::TensorParallel`] at the end of the action, or from
//!   its start when they are pipelined with its GEMMs ([`TpCommNs::overlapped`]);
//! - blocking point-to-point sends ([`Costs::blocking_sends`]): the sender's compute stream waits
//!   until its send has finished, as Megatron-LM 2021's batched isend/irecv + synchronize did;
//! - the data-parallel gradient all-reduce of each stage ([`Costs::grad_reduce_ns`]) on the
//!   device's [`Stream::DataParallel`]: with [`Costs::overlap_grad_reduce`] a stage's reduction
//!   runs in its [`Costs::grad_reduce_buckets`], each reduced once the stage's last backward has
//!   produced it, otherwise all of a device's reductions start when its last compute action has
//!   finished; reductions on one device run one after another (FIFO);
//! - deferred weight gradients of a stage ([`Costs::deferred_weight_grad_ns`], Megatron-Core's
//!   `--defer-embedding-wgrad-compute`): compute on the stage's device after its last action
//!   (shown as the stage's `W`, micro-batch 0), before that stage's reduction may start;
//! - the optimizer step of each device ([`Costs::optimizer_ns`]) on [`Stream::Optimizer`], after
//!   the device's compute and all its reductions. It counts as busy compute time.
//!
//! With [`Costs::shared_gpu`] the devices are pipeline devices on one GPU that runs one
//! device's work at a time: compute actions, deferred weight gradients and optimizer steps
//! of all devices take the GPU in turn (first ready, first served; a device that finishes
//! hands the GPU to the devices already waiting before it takes it again).

use crate::schedule::ir::{Action, CompoundStarts, Kind, Schedule, WeightUpdate};
use crate::schedule::validate::{self, Stuck, ValidationError};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

mod costs;
pub use costs::{lone_actions, Costs, StageCost, TpCommNs, UnitCosts};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stream {
    Compute,
    Send,
    Recv,
    /// Tensor-parallel collectives (all-reduce, or reduce-scatter/all-gather with sequence
    /// parallelism) inside compute actions.
    TensorParallel,
    /// Data-parallel gradient reduction of one stage.
    DataParallel,
    /// The optimizer step.
    Optimizer,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Compute => "compute",
            Stream::Send => "send",
            Stream::Recv => "recv",
            Stream::TensorParallel => "tensor-parallel",
            Stream::DataParallel => "data-parallel",
            Stream::Optimizer => "optimizer",
        }
    }
}

/// One interval of activity on one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub device: u32,
    pub stream: Stream,
    /// For compute, the action run. For a transfer, the action that produced the data
    /// (`sFk` for an activation sent to stage s+1, `sBk`/`sIk` for a gradient sent to s-1).
    /// For tensor-parallel spans, the action they belong to; for a data-parallel reduction,
    /// stage `s` (kind `W`, micro-batch 0); for the optimizer, the device's first stage.
    pub action: Action,
    /// The other end of a transfer.
    pub peer: Option<u32>,
    pub start_ns: u64,
    pub end_ns: u64,
}

impl Span {
    /// The name used in traces: the action's text form, or PyTorch's lowered names for
    /// transfers (`0SEND_F3` on the sender, `1RECV_F3` on the receiver).
    pub fn name(&self) -> String {
        let a = self.action;
        let forward = a.kind == Kind::F;
        match self.stream {
            Stream::Compute => a.to_string(),
            Stream::Send => {
                format!(
                    "{}SEND_{}{}",
                    a.stage,
                    if forward { 'F' } else { 'B' },
                    a.microbatch
                )
            }
            Stream::Recv => {
                let stage = if forward { a.stage + 1 } else { a.stage - 1 };
                format!(
                    "{}RECV_{}{}",
                    stage,
                    if forward { 'F' } else { 'B' },
                    a.microbatch
                )
            }
            Stream::TensorParallel => format!("{}TP_{}{}", a.stage, a.kind, a.microbatch),
            Stream::DataParallel => format!("{}REDUCE_GRAD", a.stage),
            Stream::Optimizer => "OPTIMIZER_STEP".to_string(),
        }
    }
}

/// All spans of one simulation, in the order they were scheduled.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Timeline {
    pub num_devices: u32,
    pub makespan_ns: u64,
    pub spans: Vec<Span>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceMetrics {
    pub busy_ns: u64,
    pub idle_ns: u64,
    /// Peak number of (stage, micro-batch) activations stashed at once (counted from the start of
    /// `F` to the end of the backward, `W` for split backwards). With `v` chunks a unit is one chunk.
    pub peak_inflight_microbatches: u32,
    /// Peak bytes: static plus stashed activations (zero when the costs carry no sizes).
    pub peak_memory_bytes: u64,
    /// Peak weight versions any one stage of this device keeps alive.
    pub peak_weight_versions: u32,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct SimResult {
    pub makespan_ns: u64,
    /// idle / (devices × makespan) over compute streams.
    pub bubble_fraction: f64,
    pub devices: Vec<DeviceMetrics>,
    pub actions: u64,
    pub events: u64,
    pub timeline: Option<Timeline>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimOptions {
    /// Keep every span (needed for Gantt charts and traces; costs memory and time).
    pub record_timeline: bool,
    /// Upper bound on processed events; `None` means 4 × actions + 64.
    pub max_events: Option<u64>,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            record_timeline: true,
            max_events: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    #[error("invalid schedule: {0}")]
    Invalid(#[from] ValidationError),
    #[error("costs do not match the schedule: {0}")]
    CostsMismatch(String),
    #[error("{devices} devices exceed the simulator's limit of {MAX_DEVICES}")]
    TooManyDevices { devices: usize },
    #[error("simulation stopped after {limit} events without finishing (raise the event bound)")]
    EventLimit { limit: u64 },
}

const F_DONE: u8 = 1;
const B_DONE: u8 = 2;
const I_DONE: u8 = 4;
const W_DONE: u8 = 8;
/// `act_at`/`grad_at` value of data not yet produced.
const NOT_YET: u64 = u64::MAX;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    /// The compute stream of this device finished its current action.
    ComputeDone(u32),
    /// The device's next action was waiting for data in transit that has now arrived, or a
    /// blocking send of the device has finished.
    Wake(u32),
    /// One gradient reduction of this device finished.
    ReduceDone(u32),
}

/// Events live in the heap as one `u128`: time (64 bits) | sequence number (39 bits) |
/// device (23 bits) | kind (2 bits). Ordering by the integer is ordering by (time, sequence),
/// i.e. FIFO among equal times, and comparisons are a single integer compare.
const SEQ_BITS: u32 = 39;
const DEVICE_BITS: u32 = 23;
/// Largest number of devices the event encoding can address.
pub const MAX_DEVICES: usize = 1 << DEVICE_BITS;

fn encode(t: u64, seq: u64, ev: Event) -> u128 {
    let (device, kind) = match ev {
        Event::ComputeDone(d) => (d, 0u128),
        Event::Wake(d) => (d, 1u128),
        Event::ReduceDone(d) => (d, 2u128),
    };
    ((t as u128) << 64) | ((seq as u128) << (DEVICE_BITS + 2)) | ((device as u128) << 2) | kind
}

fn decode(key: u128) -> (u64, Event) {
    let device = ((key >> 2) & ((1 << DEVICE_BITS) - 1)) as u32;
    let ev = match key & 3 {
        0 => Event::ComputeDone(device),
        1 => Event::Wake(device),
        _ => Event::ReduceDone(device),
    };
    ((key >> 64) as u64, ev)
}

struct Device {
    pc: usize,
    busy: bool,
    /// A `Wake` event is pending for this device.
    waking: bool,
    start_ns: u64,
    busy_ns: u64,
    send_free_ns: u64,
    recv_free_ns: u64,
    inflight: u32,
    peak_inflight: u32,
    mem_bytes: u64,
    peak_mem_bytes: u64,
    peak_versions: u32,
    /// Free time of the data-parallel stream.
    dp_free_ns: u64,
    /// Reductions started but not finished.
    reduces_running: u32,
    /// Reductions of this device not yet started.
    reduces_waiting: u32,
    /// The optimizer step has started (or there is none and the step is over).
    step_ending: bool,
    /// The deferred weight gradients of the device's stages.
    flush: Flush,
}

/// Where a device is with its deferred weight gradients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flush {
    Waiting,
    /// Running since the given time.
    Running(u64),
    Done,
}

/// Per-stage weight-version bookkeeping, used only for non-flush schedules.
struct Versions {
    current: Vec<u32>,
    backwards: Vec<u32>,
    used: Vec<u32>,
    /// Live versions per stage: version -> number of in-flight micro-batches using it.
    live: Vec<BTreeMap<u32, u32>>,
}

struct Sim<'a> {
    sched: &'a Schedule,
    costs: &'a Costs,
    m: usize,
    stages: u32,
    flags: Vec<u8>,
    /// When the input activation of (stage, micro-batch) is on its device (`NOT_YET` before it
    /// is sent). Stage 0 needs none.
    act_at: Vec<u64>,
    /// When the output gradient of (stage, micro-batch) is on its device. The last stage needs none.
    grad_at: Vec<u64>,
    dev: Vec<Device>,
    heap: BinaryHeap<Reverse<u128>>,
    seq: u64,
    spans: Option<Vec<Span>>,
    versions: Option<Versions>,
    device_of: Vec<u32>,
    /// Per stage: backwards (`B` or `W`) still to finish before its gradients are complete.
    grads_left: Vec<u32>,
    /// [`Schedule::start_lengths`]: where compound actions start (empty: none).
    start_len: CompoundStarts,
    /// Per device, the first of its compounds not yet behind its program counter.
    compound_cursor: Vec<usize>,
    /// [`costs::lone_actions`] when [`Costs::unpaired_extra`] is given (empty otherwise).
    lone: Vec<Vec<bool>>,
    /// [`Costs::shared_gpu`]: the device whose work holds the GPU, and the devices waiting
    /// for it in arrival order (each at most once).
    gpu_owner: Option<usize>,
    gpu_waiting: VecDeque<usize>,
}

/// Simulate `schedule` with `costs`. The schedule is validated first (shape and completeness);
/// an order that deadlocks is reported as [`ValidationError::Deadlock`], naming the same stuck
/// devices as [`validate::validate`].
pub fn simulate(
    schedule: &Schedule,
    costs: &Costs,
    options: SimOptions,
) -> Result<SimResult, SimError> {
    validate::validate_structure(schedule)?;
    check_costs(schedule, costs)?;
    if schedule.devices.len() > MAX_DEVICES {
        return Err(SimError::TooManyDevices {
            devices: schedule.devices.len(),
        });
    }
    let p = schedule.devices.len();
    let m = schedule.num_microbatches as usize;
    let stages = schedule.num_stages;
    let n_actions = schedule.num_actions() as u64;
    let versions = (schedule.weight_update != WeightUpdate::Flush).then(|| Versions {
        current: vec![0; stages as usize],
        backwards: vec![0; stages as usize],
        used: vec![0; stages as usize * m],
        live: vec![BTreeMap::new(); stages as usize],
    });
    let mut sim = Sim {
        sched: schedule,
        costs,
        m,
        stages,
        flags: vec![0; stages as usize * m],
        act_at: vec![NOT_YET; stages as usize * m],
        grad_at: vec![NOT_YET; stages as usize * m],
        dev: (0..p)
            .map(|d| Device {
                pc: 0,
                busy: false,
                waking: false,
                start_ns: 0,
                busy_ns: 0,
                send_free_ns: 0,
                recv_free_ns: 0,
                inflight: 0,
                peak_inflight: 0,
                mem_bytes: costs.static_bytes[d],
                peak_mem_bytes: costs.static_bytes[d],
                peak_versions: 1,
                dp_free_ns: 0,
                reduces_running: 0,
                reduces_waiting: 0,
                step_ending: false,
                flush: Flush::Waiting,
            })
            .collect(),
        heap: BinaryHeap::with_capacity(2 * p + 16),
        seq: 0,
        spans: options
            .record_timeline
            .then(|| Vec::with_capacity(3 * n_actions as usize)),
        versions,
        device_of: (0..stages).map(|s| schedule.device_of(s)).collect(),
        grads_left: vec![0; stages as usize],
        start_len: schedule.start_lengths(),
        compound_cursor: vec![0; p],
        lone: if costs.unpaired_extra.is_empty() {
            Vec::new()
        } else {
            costs::lone_actions(schedule)
        },
        gpu_owner: None,
        gpu_waiting: VecDeque::new(),
    };
    for a in schedule.devices.iter().flatten() {
        if matches!(a.kind, Kind::B | Kind::W) {
            sim.grads_left[a.stage as usize] += 1;
        }
    }
    if !costs.grad_reduce_ns.is_empty() {
        for s in 0..stages {
            sim.dev[sim.device_of[s as usize] as usize].reduces_waiting += 1;
        }
    }
    // Every event gets a sequence number below 2^SEQ_BITS: pushes never exceed the events
    // popped plus the at most one pending event per device.
    let limit = options
        .max_events
        .unwrap_or(4 * n_actions + 4 * stages as u64 + 4 * p as u64 + 64)
        .min((1 << SEQ_BITS) - 1 - MAX_DEVICES as u64);
    for d in 0..p {
        sim.try_start(d, 0);
        sim.program_progress(d, 0);
    }
    let mut now = 0;
    let mut events = 0u64;
    while let Some(Reverse(key)) = sim.heap.pop() {
        let (t, ev) = decode(key);
        events += 1;
        if events > limit {
            return Err(SimError::EventLimit { limit });
        }
        now = t;
        match ev {
            Event::ComputeDone(d)
                if sim.dev[d as usize].pc >= schedule.devices[d as usize].len()
                    && matches!(sim.dev[d as usize].flush, Flush::Running(_)) =>
            {
                sim.flush_done(d as usize, t);
            }
            Event::ComputeDone(d)
                if sim.dev[d as usize].pc >= schedule.devices[d as usize].len() =>
            {
                // Only the optimizer step runs after the last action.
                let dev = &mut sim.dev[d as usize];
                dev.busy = false;
                dev.busy_ns += t - dev.start_ns;
                sim.release_gpu(d as usize, t);
            }
            Event::ComputeDone(d) => sim.finish(d as usize, t),
            Event::Wake(d) => {
                sim.dev[d as usize].waking = false;
                sim.try_start(d as usize, t);
                sim.program_progress(d as usize, t);
            }
            Event::ReduceDone(d) => {
                sim.dev[d as usize].reduces_running -= 1;
                sim.program_progress(d as usize, t);
            }
        }
    }
    let stuck = sim.stuck();
    if !stuck.is_empty() {
        return Err(SimError::Invalid(ValidationError::Deadlock { stuck }));
    }
    let makespan_ns = now;
    let devices: Vec<DeviceMetrics> = sim
        .dev
        .iter()
        .map(|d| DeviceMetrics {
            busy_ns: d.busy_ns,
            idle_ns: makespan_ns - d.busy_ns,
            peak_inflight_microbatches: d.peak_inflight,
            peak_memory_bytes: d.peak_mem_bytes,
            peak_weight_versions: d.peak_versions,
        })
        .collect();
    let idle: u64 = devices.iter().map(|d| d.idle_ns).sum();
    let bubble_fraction = if makespan_ns == 0 {
        0.0
    } else {
        idle as f64 / (p as f64 * makespan_ns as f64)
    };
    Ok(SimResult {
        makespan_ns,
        bubble_fraction,
        devices,
        actions: n_actions,
        events,
        timeline: sim.spans.map(|spans| Timeline {
            num_devices: p as u32,
            makespan_ns,
            spans,
        }),
    })
}

fn check_costs(schedule: &Schedule, costs: &Costs) -> Result<(), SimError> {
    let s = schedule.num_stages as usize;
    let checks = [
        ("stages", costs.stages.len(), s),
        ("send_forward_ns", costs.send_forward_ns.len(), s - 1),
        ("send_backward_ns", costs.send_backward_ns.len(), s - 1),
        (
            "static_bytes",
            costs.static_bytes.len(),
            schedule.devices.len(),
        ),
        ("tensor_parallel", costs.tensor_parallel.len(), s),
        ("grad_reduce_ns", costs.grad_reduce_ns.len(), s),
        ("grad_reduce_buckets", costs.grad_reduce_buckets.len(), s),
        (
            "optimizer_ns",
            costs.optimizer_ns.len(),
            schedule.devices.len(),
        ),
        (
            "deferred_weight_grad_ns",
            costs.deferred_weight_grad_ns.len(),
            s,
        ),
    ];
    for (i, (field, got, want)) in checks.into_iter().enumerate() {
        // The optional step-level vectors may be empty.
        if i >= 4 && got == 0 {
            continue;
        }
        if got != want {
            return Err(SimError::CostsMismatch(format!(
                "{field} has {got} entries, the schedule needs {want}"
            )));
        }
    }
    Ok(())
}

impl Sim<'_> {
    fn slot(&self, a: Action) -> usize {
        a.stage as usize * self.m + a.microbatch as usize
    }

    fn push(&mut self, t: u64, ev: Event) {
        debug_assert!(self.seq < 1 << SEQ_BITS);
        self.heap.push(Reverse(encode(t, self.seq, ev)));
        self.seq += 1;
    }

    /// When all inputs of `a` are on its device, or `None` if one has not been produced yet.
    fn ready_at(&self, a: Action) -> Option<u64> {
        let slot = self.slot(a);
        let f = self.flags[slot];
        let t = match a.kind {
            Kind::F if a.stage == 0 => 0,
            Kind::F => self.act_at[slot],
            Kind::B | Kind::I if f & F_DONE == 0 => NOT_YET,
            Kind::B | Kind::I if a.stage + 1 == self.stages => 0,
            Kind::B | Kind::I => self.grad_at[slot],
            Kind::W if f & I_DONE == 0 => NOT_YET,
            Kind::W => 0,
        };
        (t != NOT_YET).then_some(t)
    }

    /// Start the device's next action at `now` if its compute stream is free and the action's
    /// inputs are present.
    fn try_start(&mut self, d: usize, now: u64) {
        let dev = &self.dev[d];
        if dev.busy || dev.waking {
            return;
        }
        let Some(&a) = self.sched.devices[d].get(dev.pc) else {
            return;
        };
        let n = self
            .start_len
            .len_at_cursor(d, dev.pc, &mut self.compound_cursor[d]);
        let ready = if n == 1 {
            self.ready_at(a)
        } else {
            // A compound (PyTorch's OVERLAP_F_B) starts when the inputs of all its sub-actions
            // are present; its sub-actions then run back to back.
            self.sched.devices[d][dev.pc..dev.pc + n]
                .iter()
                .try_fold(0, |t, &b| self.ready_at(b).map(|r| r.max(t)))
        };
        let Some(ready) = ready else {
            return;
        };
        if ready > now {
            // Its input is in transit: wake up when it lands.
            self.dev[d].waking = true;
            self.push(ready, Event::Wake(d as u32));
            return;
        }
        if !self.acquire_gpu(d) {
            return;
        }
        let cost = self.costs.stages[a.stage as usize];
        let mut dur = cost.duration_ns(a.kind);
        if let Some(extra) = self.costs.unpaired_extra.get(a.stage as usize) {
            if self.lone[d][self.dev[d].pc] {
                dur += extra.duration_ns(a.kind);
            }
        }
        if a.kind == Kind::F {
            let slot = self.slot(a);
            let versions = self.versions.as_mut().map(|v| {
                let s = a.stage as usize;
                let ver = match self.sched.weight_update {
                    WeightUpdate::Stash {
                        vertical_sync: true,
                    } if s > 0 => v.used[a.microbatch as usize],
                    _ => v.current[s],
                };
                v.used[slot] = ver;
                *v.live[s].entry(ver).or_insert(0) += 1;
                let mut n = v.live[s].len() as u32;
                if !v.live[s].contains_key(&v.current[s]) {
                    n += 1;
                }
                n
            });
            let dev = &mut self.dev[d];
            dev.inflight += 1;
            dev.peak_inflight = dev.peak_inflight.max(dev.inflight);
            dev.mem_bytes += cost.activation_bytes;
            dev.peak_mem_bytes = dev.peak_mem_bytes.max(dev.mem_bytes);
            if let Some(n) = versions {
                dev.peak_versions = dev.peak_versions.max(n);
            }
        }
        let dev = &mut self.dev[d];
        dev.busy = true;
        dev.start_ns = now;
        self.push(now + dur, Event::ComputeDone(d as u32));
    }

    fn finish(&mut self, d: usize, now: u64) {
        let a = self.sched.devices[d][self.dev[d].pc];
        let slot = self.slot(a);
        let cost = self.costs.stages[a.stage as usize];
        {
            let dev = &mut self.dev[d];
            dev.pc += 1;
            dev.busy = false;
            dev.busy_ns += now - dev.start_ns;
            match a.kind {
                Kind::F => {}
                Kind::B => {
                    dev.inflight -= 1;
                    dev.mem_bytes -= cost.activation_bytes;
                }
                Kind::I => {
                    dev.mem_bytes -=
                        cost.activation_bytes - cost.weight_grad_bytes.min(cost.activation_bytes);
                }
                Kind::W => {
                    dev.inflight -= 1;
                    dev.mem_bytes -= cost.weight_grad_bytes.min(cost.activation_bytes);
                }
            }
            if let Some(spans) = self.spans.as_mut() {
                spans.push(Span {
                    device: d as u32,
                    stream: Stream::Compute,
                    action: a,
                    peer: None,
                    start_ns: dev.start_ns,
                    end_ns: now,
                });
                let tp = self.costs.tensor_parallel.get(a.stage as usize);
                let tp_ns = tp.map_or(0, |tp| match a.kind {
                    Kind::F => tp.forward_ns,
                    Kind::B | Kind::I => tp.backward_ns,
                    Kind::W => 0,
                });
                if tp_ns > 0 {
                    let (start_ns, end_ns) = if tp.is_some_and(|tp| tp.overlapped) {
                        (dev.start_ns, (dev.start_ns + tp_ns).min(now))
                    } else {
                        (now.saturating_sub(tp_ns).max(dev.start_ns), now)
                    };
                    spans.push(Span {
                        device: d as u32,
                        stream: Stream::TensorParallel,
                        action: a,
                        peer: None,
                        start_ns,
                        end_ns,
                    });
                }
            }
        }
        self.flags[slot] |= match a.kind {
            Kind::F => F_DONE,
            Kind::B => B_DONE,
            Kind::I => I_DONE,
            Kind::W => W_DONE,
        };
        if matches!(a.kind, Kind::B | Kind::W) {
            self.weight_update(a, slot);
            let left = &mut self.grads_left[a.stage as usize];
            *left -= 1;
            if *left == 0
                && self.costs.overlap_grad_reduce
                && !self.costs.grad_reduce_ns.is_empty()
                && self.deferred_ns(a.stage) == 0
            {
                let produced_from = self.dev[d].start_ns;
                self.start_reduce(d, a.stage, now, produced_from);
            }
        }
        let sent_until = match a.kind {
            Kind::F if a.stage + 1 < self.stages => {
                let dur = self.costs.send_forward_ns[a.stage as usize];
                self.transfer(d, a, a.stage + 1, true, dur, now)
            }
            Kind::B | Kind::I if a.stage > 0 => {
                let dur = self.costs.send_backward_ns[a.stage as usize - 1];
                self.transfer(d, a, a.stage - 1, false, dur, now)
            }
            _ => now,
        };
        self.release_gpu(d, now);
        if self.costs.blocking_sends && sent_until > now {
            // The compute stream waits for the send (Megatron-LM 2021's synchronous p2p).
            self.dev[d].waking = true;
            self.push(sent_until, Event::Wake(d as u32));
            return;
        }
        self.try_start(d, now);
        self.program_progress(d, now);
    }
    /// Called when the device's compute stream may have run out of actions or a reduction has
    /// finished: starts the non-overlapped reductions, then the optimizer step.
    fn program_progress(&mut self, d: usize, now: u64) {
        let dev = &self.dev[d];
        if dev.busy || dev.waking || dev.step_ending || dev.pc < self.sched.devices[d].len() {
            return;
        }
        if dev.flush == Flush::Waiting {
            let deferred: Vec<(u32, u64)> = (0..self.stages)
                .filter(|&s| self.device_of[s as usize] as usize == d && self.deferred_ns(s) > 0)
                .map(|s| (s, self.deferred_ns(s)))
                .collect();
            let dur: u64 = deferred.iter().map(|&(_, ns)| ns).sum();
            if dur > 0 && !self.acquire_gpu(d) {
                return;
            }
            let dev = &mut self.dev[d];
            if dur == 0 {
                dev.flush = Flush::Done;
            } else {
                dev.flush = Flush::Running(now);
                dev.busy = true;
                dev.start_ns = now;
                if let Some(spans) = self.spans.as_mut() {
                    let stage = deferred.last().map_or(0, |&(s, _)| s);
                    spans.push(Span {
                        device: d as u32,
                        stream: Stream::Compute,
                        action: Action::w(stage, 0),
                        peer: None,
                        start_ns: now,
                        end_ns: now + dur,
                    });
                }
                self.push(now + dur, Event::ComputeDone(d as u32));
                return;
            }
        }
        let dev = &self.dev[d];
        if dev.reduces_waiting > 0 {
            // Not overlapped: reduce every stage of this device now, last stage first (the order
            // in which their backwards finished).
            let mine: Vec<u32> = (0..self.stages)
                .rev()
                .filter(|&s| self.device_of[s as usize] as usize == d)
                .collect();
            for s in mine {
                self.start_reduce(d, s, now, now);
            }
        }
        let dev = &self.dev[d];
        if dev.reduces_running > 0 || dev.reduces_waiting > 0 {
            return;
        }
        let dur = self.costs.optimizer_ns.get(d).copied().unwrap_or(0);
        if dur > 0 && !self.acquire_gpu(d) {
            return;
        }
        let dev = &mut self.dev[d];
        dev.step_ending = true;
        if dur == 0 {
            return;
        }
        dev.busy = true;
        dev.start_ns = now;
        if let Some(spans) = self.spans.as_mut() {
            let first = (0..self.stages)
                .find(|&s| self.device_of[s as usize] as usize == d)
                .unwrap_or(0);
            spans.push(Span {
                device: d as u32,
                stream: Stream::Optimizer,
                action: Action::f(first, 0),
                peer: None,
                start_ns: now,
                end_ns: now + dur,
            });
        }
        self.push(now + dur, Event::ComputeDone(d as u32));
    }

    /// [`Costs::shared_gpu`]: takes the GPU for device `d`'s next work, or queues `d` behind
    /// the devices already waiting. Always true without a shared GPU.
    fn acquire_gpu(&mut self, d: usize) -> bool {
        if !self.costs.shared_gpu {
            return true;
        }
        match self.gpu_owner {
            None if self.gpu_waiting.front().is_none_or(|&w| w == d) => {
                if self.gpu_waiting.front() == Some(&d) {
                    self.gpu_waiting.pop_front();
                }
                self.gpu_owner = Some(d);
                true
            }
            Some(o) if o == d => true,
            _ => {
                if !self.gpu_waiting.contains(&d) {
                    self.gpu_waiting.push_back(d);
                }
                false
            }
        }
    }

    /// Device `d`'s work on the shared GPU has ended at `now`: the GPU goes to the devices
    /// waiting for it, in order, until one of them starts.
    fn release_gpu(&mut self, d: usize, now: u64) {
        if !self.costs.shared_gpu || self.gpu_owner != Some(d) {
            return;
        }
        self.gpu_owner = None;
        while self.gpu_owner.is_none() {
            let Some(&w) = self.gpu_waiting.front() else {
                break;
            };
            self.try_start(w, now);
            if self.gpu_owner.is_none() {
                self.program_progress(w, now);
            }
            if self.gpu_owner.is_none() && self.gpu_waiting.front() == Some(&w) {
                // Nothing of w's could start after all: it asks again when woken.
                self.gpu_waiting.pop_front();
            }
        }
    }

    /// Deferred weight-gradient work of `stage` (0 when none).
    fn deferred_ns(&self, stage: u32) -> u64 {
        self.costs
            .deferred_weight_grad_ns
            .get(stage as usize)
            .copied()
            .unwrap_or(0)
    }

    /// The deferred weight gradients of device `d`, started at the time `Flush::Running`
    /// holds, have finished at `now`: with overlapped reduction their stages' reductions start
    /// (their gradients completed over the flush), then the step goes on.
    fn flush_done(&mut self, d: usize, now: u64) {
        let dev = &mut self.dev[d];
        let Flush::Running(from) = dev.flush else {
            return;
        };
        dev.flush = Flush::Done;
        dev.busy = false;
        dev.busy_ns += now - dev.start_ns;
        self.release_gpu(d, now);
        if self.costs.overlap_grad_reduce && !self.costs.grad_reduce_ns.is_empty() {
            for s in 0..self.stages {
                if self.device_of[s as usize] as usize == d && self.deferred_ns(s) > 0 {
                    self.start_reduce(d, s, now, from);
                }
            }
        }
        self.program_progress(d, now);
    }

    /// Queue the gradient reduction of `stage` on device `d`'s data-parallel stream. Its
    /// gradients were produced from `produced_from` until `now`, in the stage's buckets, each
    /// reduced once produced and once the stream is free (a two-stage flow shop; one bucket:
    /// the reduction starts at `now`).
    fn start_reduce(&mut self, d: usize, stage: u32, now: u64, produced_from: u64) {
        let dur = self.costs.grad_reduce_ns[stage as usize];
        let n = self
            .costs
            .grad_reduce_buckets
            .get(stage as usize)
            .copied()
            .unwrap_or(1)
            .max(1) as u64;
        let dev = &mut self.dev[d];
        if dev.reduces_waiting == 0 {
            return;
        }
        dev.reduces_waiting -= 1;
        dev.reduces_running += 1;
        let produce = now - produced_from.min(now);
        let mut start = None;
        let mut end = dev.dp_free_ns;
        for k in 1..=n {
            let ready = produced_from + produce * k / n;
            let s = ready.max(end);
            start.get_or_insert(s);
            // Bucket sizes sum exactly to `dur`.
            end = s + dur * k / n - dur * (k - 1) / n;
        }
        let start = start.unwrap_or(now);
        dev.dp_free_ns = end;
        if let Some(spans) = self.spans.as_mut() {
            spans.push(Span {
                device: d as u32,
                stream: Stream::DataParallel,
                action: Action::w(stage, 0),
                peer: None,
                start_ns: start,
                end_ns: end,
            });
        }
        self.push(end, Event::ReduceDone(d as u32));
    }

    fn weight_update(&mut self, a: Action, slot: usize) {
        let per_step = self.sched.microbatches_per_step.max(1);
        let Some(v) = self.versions.as_mut() else {
            return;
        };
        let s = a.stage as usize;
        let used = v.used[slot];
        if let Some(c) = v.live[s].get_mut(&used) {
            *c -= 1;
            if *c == 0 {
                v.live[s].remove(&used);
            }
        }
        v.backwards[s] += 1;
        if v.backwards[s] % per_step == 0 {
            v.current[s] += 1;
        }
    }

    /// Move the output of `a` to `to_stage` (an activation if `forward`, else a gradient).
    /// Returns when the data has arrived.
    fn transfer(
        &mut self,
        d: usize,
        a: Action,
        to_stage: u32,
        forward: bool,
        dur: u64,
        now: u64,
    ) -> u64 {
        let dst = self.device_of[to_stage as usize] as usize;
        let slot = to_stage as usize * self.m + a.microbatch as usize;
        let arrive = if dst == d || dur == 0 {
            now
        } else {
            let start = now
                .max(self.dev[d].send_free_ns)
                .max(self.dev[dst].recv_free_ns);
            let end = start + dur;
            self.dev[d].send_free_ns = end;
            self.dev[dst].recv_free_ns = end;
            if let Some(spans) = self.spans.as_mut() {
                for (device, stream, peer) in [(d, Stream::Send, dst), (dst, Stream::Recv, d)] {
                    spans.push(Span {
                        device: device as u32,
                        stream,
                        action: a,
                        peer: Some(peer as u32),
                        start_ns: start,
                        end_ns: end,
                    });
                }
            }
            end
        };
        if forward {
            self.act_at[slot] = arrive;
        } else {
            self.grad_at[slot] = arrive;
        }
        if dst != d {
            self.try_start(dst, now);
        }
        arrive
    }

    fn stuck(&self) -> Vec<Stuck> {
        let done: Vec<u8> = self
            .flags
            .iter()
            .map(|f| f & (F_DONE | B_DONE | I_DONE | W_DONE))
            .collect();
        let pc: Vec<usize> = self.dev.iter().map(|d| d.pc).collect();
        validate::stuck_devices(self.sched, &pc, &done)
    }
}
