//! The backend-independent runner: one OS thread per pipeline device walks that device's action
//! list from the plan and calls its [`DeviceWorker`]; spans come back tagged with the step they
//! belong to and become a measured Chrome trace in the format of `pplan::report::trace`.
//!
//! # What a step is
//! A *step* is one pass over the plan's complete action lists followed by
//! [`DeviceWorker::optimizer_step`] on every device. For synchronous schedules (GPipe, 1F1B,
//! interleaved, zero-bubble, DualPipeV: `weight_update = flush`) that is exactly one optimizer
//! step over `microbatches_per_step` micro-batches. For PipeDream (`stash`) and 2BW the action
//! lists already run `microbatches / microbatches_per_step` mini-batches without a flush, and
//! the weights change inside the pass (PipeDream: after every backward of a stage; 2BW: after
//! every `microbatches_per_step` backwards); a step is then that whole pass, which drains the
//! pipeline at its end — the same span of work the simulator predicts for the plan. Data of
//! pass `i` follows [`crate::spec::data_index`], so consecutive steps never repeat a batch.
//!
//! # Failure
//! A worker error ends its thread, which drops the worker and with it its channel ends, so
//! peers blocked on it get [`ExecError::Peer`] and end too. The run reports the first error
//! that is not a peer's hang-up, naming the device, the action and the step. A whole-run
//! timeout reports the devices still running and the action each is in.

use crate::backend::{BackwardPart, DeviceWorker, ExecError, Span, SpanStream};
use pplan::report::trace::{stream_tid, Trace, TraceArgs, TraceEvent};
use pplan::schedule::ir::{Kind, Schedule};
use pplan::sim::Stream;
use serde::Serialize;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A measured span with the step it ran in.
#[derive(Debug, Clone, PartialEq)]
pub struct StepSpan {
    pub step: u32,
    pub span: Span,
}

/// Everything a run measured.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// All spans, times relative to the earliest span's start.
    pub spans: Vec<StepSpan>,
    /// Loss per step: the sum over devices of the losses each took, divided by the mini-batches
    /// in the pass (1 for synchronous schedules), i.e. the mean loss over the step's data.
    pub loss_per_step: Vec<f64>,
    /// Step time in seconds: step `i` ends when its last span ends; its time runs from the end
    /// of step `i - 1` (step 0: from the first span's start).
    pub step_times_s: Vec<f64>,
    /// Final weights per stage ([`DeviceWorker::weights`]), in stage order.
    pub weights: Vec<(u32, Vec<f32>)>,
    pub devices: u32,
}

impl RunResult {
    /// Mean step time, leaving out step 0 (warm-up: first touches of memory, thread start) when
    /// there is more than one step.
    pub fn mean_step_time_s(&self) -> f64 {
        let t = if self.step_times_s.len() > 1 {
            &self.step_times_s[1..]
        } else {
            &self.step_times_s[..]
        };
        t.iter().sum::<f64>() / t.len().max(1) as f64
    }
}

/// Why a run failed, with where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("device {device}, step {step}, action {action}: {error}")]
pub struct RunError {
    pub device: u32,
    pub step: u32,
    /// The action's text form, or `OPTIMIZER_STEP`.
    pub action: String,
    pub error: ExecError,
}

/// How the runner runs.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub steps: u32,
    /// Mini-batches per pass, for the loss (plan microbatches / microbatches_per_step).
    pub minibatches_per_pass: u32,
    /// Whole-run limit; `None` waits forever.
    pub timeout: Option<Duration>,
}

type ThreadOut = Result<(Vec<StepSpan>, Vec<f64>, Vec<(u32, Vec<f32>)>), RunError>;

fn run_device(
    mut w: Box<dyn DeviceWorker>,
    slot: usize,
    actions: Vec<pplan::schedule::ir::Action>,
    steps: u32,
    progress: Arc<Mutex<Vec<String>>>,
) -> ThreadOut {
    let dev = w.device();
    let mut out: Vec<StepSpan> = Vec::new();
    let mut spans: Vec<Span> = Vec::new();
    let mut losses = Vec::with_capacity(steps as usize);
    let fail = |step: u32, action: String, error: ExecError| RunError {
        device: dev,
        step,
        action,
        error,
    };
    for step in 0..steps {
        for a in &actions {
            if let Ok(mut p) = progress.lock() {
                p[slot] = format!("{a} (step {step})");
            }
            let r = match a.kind {
                Kind::F => w.forward(a.stage, a.microbatch, &mut spans),
                Kind::B => w.backward(a.stage, a.microbatch, BackwardPart::Full, &mut spans),
                Kind::I => w.backward(a.stage, a.microbatch, BackwardPart::Input, &mut spans),
                Kind::W => w.backward(a.stage, a.microbatch, BackwardPart::Weight, &mut spans),
            };
            r.map_err(|e| fail(step, a.to_string(), e))?;
            out.extend(spans.drain(..).map(|span| StepSpan { step, span }));
        }
        w.optimizer_step(&mut spans)
            .and_then(|_| w.synchronize())
            .map_err(|e| fail(step, "OPTIMIZER_STEP".into(), e))?;
        out.extend(spans.drain(..).map(|span| StepSpan { step, span }));
        losses.push(w.take_loss());
    }
    let weights = w.weights().map_err(|e| fail(steps, "weights".into(), e))?;
    if let Ok(mut p) = progress.lock() {
        p[slot] = "finished".into();
    }
    Ok((out, losses, weights))
}

/// Run `steps` passes of `schedule` on `workers`: one per device, or one per device and
/// data/context-parallel replica ([`DeviceWorker::replica`]); each on its own thread. Under a
/// multi-process launcher a process runs only its own devices' workers, which reach the
/// others through the backend. The result keeps replica 0's spans and weights (every replica
/// runs the same actions; a step ends when the last replica's last span does) and sums the
/// losses of all.
pub fn run(
    schedule: &Schedule,
    workers: Vec<Box<dyn DeviceWorker>>,
    cfg: &RunConfig,
) -> Result<RunResult, RunError> {
    let p = schedule.num_devices();
    let n = workers.len();
    let refuse = |device: u32, why: String| RunError {
        device,
        step: 0,
        action: "(start)".into(),
        error: ExecError::Plan(why),
    };
    if n == 0 {
        return Err(refuse(0, "no worker to run".into()));
    }
    if let Some(w) = workers.iter().find(|w| w.device() >= p) {
        return Err(refuse(
            w.device(),
            format!(
                "a worker for device {} but the schedule has {p} device(s)",
                w.device()
            ),
        ));
    }
    let progress = Arc::new(Mutex::new(vec![String::from("starting"); n]));
    let (tx, rx) = mpsc::channel::<(usize, ThreadOut)>();
    let mut handles = Vec::new();
    let mut replica_of = Vec::with_capacity(n);
    for (slot, w) in workers.into_iter().enumerate() {
        let dev = w.device();
        replica_of.push((dev, w.replica()));
        let actions = schedule.devices[dev as usize].clone();
        let tx = tx.clone();
        let progress = progress.clone();
        let steps = cfg.steps;
        let h = std::thread::Builder::new()
            .name(format!("pplan-exec device {dev}"))
            .spawn(move || {
                // A panic in a backend must still report, not hang the others: the worker is
                // dropped while unwinding (hanging up its channels) and we send the message.
                let prog = progress.clone();
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    run_device(w, slot, actions, steps, prog)
                }))
                .unwrap_or_else(|e| {
                    let what = e
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "panic".into());
                    Err(RunError {
                        device: dev,
                        step: 0,
                        action: progress
                            .lock()
                            .map(|p| p[slot].clone())
                            .unwrap_or_else(|_| "(unknown)".into()),
                        error: ExecError::Backend(format!("worker panicked: {what}")),
                    })
                });
                let _ = tx.send((slot, r));
            })
            .map_err(|e| RunError {
                device: dev,
                step: 0,
                action: "(thread start)".into(),
                error: ExecError::Backend(format!("cannot start thread: {e}")),
            })?;
        handles.push(h);
    }
    drop(tx);
    let deadline = cfg.timeout.map(|t| Instant::now() + t);
    let mut results: Vec<Option<ThreadOut>> = (0..n).map(|_| None).collect();
    for _ in 0..n {
        let got = match deadline {
            Some(d) => rx.recv_timeout(d.saturating_duration_since(Instant::now())),
            None => rx.recv().map_err(|_| mpsc::RecvTimeoutError::Disconnected),
        };
        match got {
            Ok((slot, r)) => results[slot] = Some(r),
            Err(_) => {
                let prog = progress.lock().map(|p| p.clone()).unwrap_or_default();
                let stuck: Vec<String> = prog
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.as_str() != "finished")
                    .map(|(i, s)| {
                        let (d, r) = replica_of[i];
                        if n == p as usize {
                            format!("device {d} at {s}")
                        } else {
                            format!("device {d} (replica {r}) at {s}")
                        }
                    })
                    .collect();
                return Err(RunError {
                    device: stuck
                        .first()
                        .and_then(|s| s.split_whitespace().nth(1))
                        .and_then(|d| d.parse().ok())
                        .unwrap_or(0),
                    step: 0,
                    action: "(timeout)".into(),
                    error: ExecError::Backend(format!(
                        "run exceeded its time limit of {:.0} s; still running: {}",
                        cfg.timeout.unwrap_or_default().as_secs_f64(),
                        stuck.join(", ")
                    )),
                });
            }
        }
    }
    for h in handles {
        let _ = h.join();
    }
    // The root cause is the first error that is not a hang-up of a peer.
    let mut errors: Vec<RunError> = results
        .iter()
        .filter_map(|r| r.as_ref().and_then(|r| r.as_ref().err().cloned()))
        .collect();
    if !errors.is_empty() {
        errors.sort_by_key(|e| (matches!(e.error, ExecError::Peer { .. }), e.device));
        return Err(errors.swap_remove(0));
    }
    let mut spans = Vec::new();
    let mut loss = vec![0.0; cfg.steps as usize];
    let mut weights = Vec::new();
    let mut others: Vec<StepSpan> = Vec::new();
    for (i, r) in results.into_iter().enumerate() {
        let (s, l, w) = r
            .expect("every worker reported")
            .expect("errors handled above");
        for (acc, x) in loss.iter_mut().zip(l) {
            *acc += x;
        }
        if replica_of[i].1 == 0 {
            spans.extend(s);
            weights.extend(w);
        } else {
            others.extend(s);
        }
    }
    weights.sort_by_key(|(s, _)| *s);
    let per = cfg.minibatches_per_pass.max(1) as f64;
    for l in &mut loss {
        *l /= per;
    }
    let origin = spans
        .iter()
        .chain(&others)
        .map(|s| s.span.start_ns)
        .min()
        .unwrap_or(0);
    for s in spans.iter_mut().chain(&mut others) {
        s.span.start_ns = s.span.start_ns.saturating_sub(origin);
        s.span.end_ns = s.span.end_ns.saturating_sub(origin).max(s.span.start_ns);
    }
    let mut step_times_s = Vec::with_capacity(cfg.steps as usize);
    let mut prev_end = 0u64;
    for step in 0..cfg.steps {
        let end = spans
            .iter()
            .chain(&others)
            .filter(|s| s.step == step)
            .map(|s| s.span.end_ns)
            .max()
            .unwrap_or(prev_end);
        step_times_s.push(end.saturating_sub(prev_end) as f64 * 1e-9);
        prev_end = end.max(prev_end);
    }
    Ok(RunResult {
        spans,
        loss_per_step: loss,
        step_times_s,
        weights,
        devices: p,
    })
}

fn stream_of(s: SpanStream) -> Stream {
    match s {
        SpanStream::Compute => Stream::Compute,
        SpanStream::Send => Stream::Send,
        SpanStream::Recv => Stream::Recv,
        SpanStream::DataParallel => Stream::DataParallel,
        SpanStream::Optimizer => Stream::Optimizer,
    }
}

/// The measured Chrome trace: the same metadata and event layout as `pplan::report::trace`
/// (pid = device, tid = [`stream_tid`], name = the action's text form, args stage /
/// microbatch / kind / peer / step), events sorted by (device, stream, start, end).
pub fn trace(r: &RunResult) -> Trace {
    let mut events = Vec::new();
    for d in 0..r.devices {
        events.push(pplan::report::trace::meta(
            "process_name",
            d,
            0,
            format!("device {d}"),
        ));
        events.push(pplan::report::trace::sort_index(
            "process_sort_index",
            d,
            0,
            d,
        ));
        for s in [
            Stream::Compute,
            Stream::Send,
            Stream::Recv,
            Stream::Optimizer,
        ] {
            events.push(pplan::report::trace::meta(
                "thread_name",
                d,
                stream_tid(s),
                s.as_str().into(),
            ));
        }
    }
    let mut spans: Vec<&StepSpan> = r.spans.iter().collect();
    spans.sort_by_key(|s| {
        (
            s.span.device,
            stream_tid(stream_of(s.span.stream)),
            s.span.start_ns,
            s.span.end_ns,
        )
    });
    for s in spans {
        let sp = &s.span;
        let name = if sp.stream == SpanStream::Optimizer {
            "OPTIMIZER_STEP".to_string()
        } else {
            sp.name.clone()
        };
        events.push(TraceEvent {
            name,
            ph: "X".into(),
            ts: Some(sp.start_ns as f64 / 1000.0),
            dur: Some((sp.end_ns - sp.start_ns) as f64 / 1000.0),
            pid: sp.device,
            tid: stream_tid(stream_of(sp.stream)),
            args: Some(TraceArgs {
                stage: sp.stage,
                microbatch: sp.microbatch,
                kind: sp.kind.map(|k| k.to_string()),
                peer: sp.peer,
                name: None,
                sort_index: None,
                step: Some(s.step),
            }),
        });
    }
    Trace {
        trace_events: events,
        display_time_unit: "ns".into(),
    }
}

/// The `--format json` summary of a run.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub backend: String,
    pub schedule: String,
    pub devices: u32,
    pub stages: usize,
    pub microbatches: u32,
    pub steps: u32,
    pub dtype: String,
    pub step_times_s: Vec<f64>,
    pub loss_per_step: Vec<f64>,
    /// Mean over steps 1.. (step 0 left out as warm-up when there are several).
    pub mean_step_time_s: f64,
    /// Compute busy time over (devices × total time), from the spans.
    pub compute_busy_fraction: f64,
}

impl Summary {
    pub fn new(
        backend: &str,
        plan: &pplan::plan::plan_file::Plan,
        dtype: &str,
        r: &RunResult,
    ) -> Self {
        let total_ns = r.spans.iter().map(|s| s.span.end_ns).max().unwrap_or(0);
        let busy: u64 = r
            .spans
            .iter()
            .filter(|s| s.span.stream == SpanStream::Compute)
            .map(|s| s.span.end_ns - s.span.start_ns)
            .sum();
        Summary {
            backend: backend.into(),
            schedule: plan.schedule.name.clone(),
            devices: r.devices,
            stages: plan.stages.len(),
            microbatches: plan.schedule.microbatches,
            steps: r.step_times_s.len() as u32,
            dtype: dtype.into(),
            step_times_s: r.step_times_s.clone(),
            loss_per_step: r.loss_per_step.clone(),
            mean_step_time_s: r.mean_step_time_s(),
            compute_busy_fraction: busy as f64 / (r.devices as f64 * total_ns.max(1) as f64),
        }
    }
}

/// Which backend builds the workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Cpu,
    Cuda,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Cuda => "cuda",
        }
    }
}

/// A run that could not start ([`ExecError`] from the backend) or failed while running.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RunFailure {
    #[error("{0}")]
    Setup(ExecError),
    #[error("{0}")]
    Run(RunError),
}

impl RunFailure {
    /// The underlying backend error (decides the exit code).
    pub fn exec_error(&self) -> &ExecError {
        match self {
            RunFailure::Setup(e) => e,
            RunFailure::Run(r) => &r.error,
        }
    }
}

/// Build the workers of `backend` for `plan` and run `opts.steps` steps.
pub fn run_plan(
    plan: &pplan::plan::plan_file::Plan,
    backend: Backend,
    opts: &crate::backend::RunOptions,
    timeout: Option<Duration>,
) -> Result<RunResult, RunFailure> {
    let schedule = plan
        .schedule_ir()
        .map_err(|e| RunFailure::Setup(ExecError::Plan(e.to_string())))?;
    let workers = match backend {
        Backend::Cpu => crate::cpu::workers(plan, opts),
        Backend::Cuda => crate::cuda::workers(plan, opts),
    }
    .map_err(RunFailure::Setup)?;
    let cfg = RunConfig {
        steps: opts.steps,
        minibatches_per_pass: schedule.num_microbatches / schedule.microbatches_per_step.max(1),
        timeout,
    };
    run(&schedule, workers, &cfg).map_err(RunFailure::Run)
}
