//! `pplan validate`: a predicted trace against a measured one (docs/validate.md has every
//! formula).
//!
//! Both inputs are Chrome traces ([`crate::report::trace`]): the simulator's prediction (one step) and
//! the executor's measurement (possibly several optimizer steps, marked by `args.step`). Actions
//! are matched by (device, name, occurrence); the report gives the step-time error, per-action
//! and per-kind duration errors, the bubble fraction of both, and the start-time error
//! normalised by the step time. Traces from different pipelines, or actions present on one side
//! only, are an error or a warning, never a silently wrong number. No IO here.

use crate::measured::breakdown::{median, union_len};
use crate::report::trace::TraceEvent;
use crate::schedule::ir::{Action, CommKind, Kind, Token};
use crate::sim::{Span, Stream, Timeline};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The kind of a trace event, from its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EventKind {
    Compute(Kind),
    Overlap,
    SendRecv,
    Optimizer,
    ReduceGrad,
    TensorParallel,
    Other,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Compute(Kind::F) => "F",
            EventKind::Compute(Kind::B) => "B",
            EventKind::Compute(Kind::I) => "I",
            EventKind::Compute(Kind::W) => "W",
            EventKind::Overlap => "OVERLAP_F_B",
            EventKind::SendRecv => "send/recv",
            EventKind::Optimizer => "optimizer",
            EventKind::ReduceGrad => "reduce_grad",
            EventKind::TensorParallel => "tensor_parallel",
            EventKind::Other => "other",
        }
    }

    /// Compute actions of the schedule: a mismatch here means different pipelines.
    fn is_schedule_compute(self) -> bool {
        matches!(self, EventKind::Compute(_) | EventKind::Overlap)
    }

    /// Counts as busy compute time for the bubble (as in the simulator).
    fn is_compute_stream(self) -> bool {
        self.is_schedule_compute() || self == EventKind::Optimizer
    }
}

/// Classify an event by its name (the action's text form or a lowered name).
pub fn classify(name: &str) -> EventKind {
    match name.parse::<Token>() {
        Ok(Token::Compute(a)) => EventKind::Compute(a.kind),
        Ok(Token::Overlap(_)) => EventKind::Overlap,
        Ok(Token::Comm { kind, .. }) => match kind {
            CommKind::SendF
            | CommKind::RecvF
            | CommKind::SendB
            | CommKind::RecvB
            | CommKind::WaitSendF
            | CommKind::WaitSendB => EventKind::SendRecv,
            CommKind::ReduceGrad | CommKind::WaitReduceGrad => EventKind::ReduceGrad,
            CommKind::Unshard | CommKind::Reshard => EventKind::Other,
        },
        Err(_) if name.contains("OPTIMIZER") => EventKind::Optimizer,
        Err(_) if tp_action(name).is_some() => EventKind::TensorParallel,
        Err(_) => EventKind::Other,
    }
}

/// `3TP_F1` (a tensor-parallel span inside `3F1`) → the action.
fn tp_action(name: &str) -> Option<Action> {
    let (stage, rest) = name.split_once("TP_")?;
    format!("{stage}{rest}").parse::<Action>().ok()
}

/// Why two traces could not be compared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompareError {
    #[error("{origin}: not a Chrome trace: {reason}")]
    Json { origin: String, reason: String },
    #[error("{origin}: traceEvents[{index}] ('{name}'): {reason}")]
    Event {
        origin: String,
        index: usize,
        name: String,
        reason: String,
    },
    #[error("{origin}: no complete (\"ph\": \"X\") events")]
    NoEvents { origin: String },
    #[error("{origin}: traceEvents[{index}] ('{name}') has no args.step, but other events do; a trace of several steps must mark every event")]
    MissingStep {
        origin: String,
        index: usize,
        name: String,
    },
    #[error("--skip-steps {skip} leaves no step of the {steps} in {origin}; valid: 0 to {}", steps.saturating_sub(1))]
    SkipsAll {
        origin: String,
        steps: usize,
        skip: usize,
    },
    #[error("the traces come from different pipelines: {predicted} has compute events on devices {pred_devices:?}, {measured} on devices {meas_devices:?}")]
    Devices {
        predicted: String,
        measured: String,
        pred_devices: Vec<u32>,
        meas_devices: Vec<u32>,
    },
    #[error("the traces run different schedules: {predicted_only} compute actions only in {predicted} (e.g. {pred_examples}), {measured_only} only in {measured} (e.g. {meas_examples}); pass --allow-unmatched to compare the rest")]
    Unmatched {
        predicted: String,
        measured: String,
        predicted_only: usize,
        measured_only: usize,
        pred_examples: String,
        meas_examples: String,
    },
    #[error("no compute action of {predicted} is in {measured}: nothing to compare")]
    NoMatch { predicted: String, measured: String },
    /// `--skip-steps` given, but no trace has more than one step, so it would skip nothing.
    #[error("--skip-steps {skip}: {predicted} and {measured} hold one step each, so there is no warm-up step to skip; valid: --skip-steps 0, or leave it out")]
    SkipsNothing {
        skip: usize,
        predicted: String,
        measured: String,
    },
    /// Every matched compute action lasts 0 in the measured trace: no relative error exists.
    #[error("every one of the {matched} matched compute actions in {measured} lasts 0 us: durations cannot be compared; valid: a measured trace with real timings")]
    ZeroMeasured { measured: String, matched: usize },
}

/// A trace file's text, parsed leniently: `{"traceEvents": [...]}` (other fields ignored) or a
/// bare array of events.
pub fn parse_events(text: &str, origin: &str) -> Result<Vec<TraceEvent>, CompareError> {
    #[derive(Deserialize)]
    struct Obj {
        #[serde(rename = "traceEvents")]
        trace_events: Vec<TraceEvent>,
    }
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Either {
        Obj(Obj),
        Arr(Vec<TraceEvent>),
    }
    match serde_json::from_str::<Either>(text) {
        Ok(Either::Obj(o)) => Ok(o.trace_events),
        Ok(Either::Arr(a)) => Ok(a),
        Err(_) => {
            // Re-parse as the object form for a message that says where it went wrong.
            let reason = match serde_json::from_str::<Obj>(text) {
                Err(e) => e.to_string(),
                Ok(_) => "unreadable".to_string(),
            };
            Err(CompareError::Json {
                origin: origin.to_string(),
                reason: format!(
                    "{reason}; expected {{\"traceEvents\": [{{\"name\", \"ph\", \"ts\", \"dur\", \"pid\", \"tid\"}}]}}"
                ),
            })
        }
    }
}

/// One complete event, times in microseconds.
#[derive(Debug, Clone)]
struct Ev {
    device: u32,
    name: String,
    kind: EventKind,
    start_us: f64,
    dur_us: f64,
    step: u32,
    /// Position in the file (a tie-break).
    index: usize,
    args_action: Option<Action>,
}

/// An action key: (device, name, occurrence within its step).
type Key = (u32, String, u32);

/// One trace, split into steps.
struct Steps {
    origin: String,
    /// step id → events, ordered by (device, name, start, duration, index).
    steps: BTreeMap<u32, Vec<Ev>>,
}

fn load(events: &[TraceEvent], origin: &str) -> Result<Steps, CompareError> {
    let mut evs = Vec::new();
    let any_step = events
        .iter()
        .any(|e| e.ph == "X" && e.args.as_ref().and_then(|a| a.step).is_some());
    for (index, e) in events.iter().enumerate() {
        if e.ph != "X" {
            continue;
        }
        let bad = |reason: String| CompareError::Event {
            origin: origin.to_string(),
            index,
            name: e.name.clone(),
            reason,
        };
        let (Some(ts), Some(dur)) = (e.ts, e.dur) else {
            return Err(bad("a complete event needs `ts` and `dur`".into()));
        };
        if !ts.is_finite() || !dur.is_finite() || dur < 0.0 || ts.abs() > 1e15 || dur > 1e15 {
            return Err(bad(format!(
                "ts {ts} / dur {dur}: expected finite microseconds, dur >= 0"
            )));
        }
        let step = match e.args.as_ref().and_then(|a| a.step) {
            Some(s) => s,
            None if any_step => {
                return Err(CompareError::MissingStep {
                    origin: origin.to_string(),
                    index,
                    name: e.name.clone(),
                })
            }
            None => 0,
        };
        let args_action = e.args.as_ref().and_then(|a| {
            let kind = match a.kind.as_deref()? {
                "F" => Kind::F,
                "B" => Kind::B,
                "I" => Kind::I,
                "W" => Kind::W,
                _ => return None,
            };
            Some(Action::new(a.stage?, kind, a.microbatch?))
        });
        evs.push(Ev {
            device: e.pid,
            name: e.name.clone(),
            kind: classify(&e.name),
            start_us: ts,
            dur_us: dur,
            step,
            index,
            args_action,
        });
    }
    if evs.is_empty() {
        return Err(CompareError::NoEvents {
            origin: origin.to_string(),
        });
    }
    let mut steps: BTreeMap<u32, Vec<Ev>> = BTreeMap::new();
    for e in evs {
        steps.entry(e.step).or_default().push(e);
    }
    for list in steps.values_mut() {
        list.sort_by(|a, b| {
            (a.device, &a.name)
                .cmp(&(b.device, &b.name))
                .then(a.start_us.total_cmp(&b.start_us))
                .then(a.dur_us.total_cmp(&b.dur_us))
                .then(a.index.cmp(&b.index))
        });
    }
    Ok(Steps {
        origin: origin.to_string(),
        steps,
    })
}

fn span_of(events: &[Ev]) -> (f64, f64) {
    let start = events
        .iter()
        .map(|e| e.start_us)
        .fold(f64::INFINITY, f64::min);
    let end = events
        .iter()
        .map(|e| e.start_us + e.dur_us)
        .fold(f64::NEG_INFINITY, f64::max);
    (start, end)
}

/// Devices with compute-stream events anywhere in the trace.
fn compute_devices(t: &Steps) -> BTreeSet<u32> {
    t.steps
        .values()
        .flatten()
        .filter(|e| e.kind.is_compute_stream())
        .map(|e| e.device)
        .collect()
}

/// Per-action aggregate over the steps used.
struct Agg {
    kind: EventKind,
    dur_us: f64,
    start_norm: f64,
    steps_seen: usize,
}

/// What one trace gives over its used steps.
struct Summary {
    steps_total: usize,
    skipped: usize,
    /// (step id, makespan µs) of the steps used.
    makespans_us: Vec<(u32, f64)>,
    step_time_us: f64,
    bubble: f64,
    actions: BTreeMap<Key, Agg>,
}

fn summarize(t: &Steps, skip: Option<usize>) -> Result<Summary, CompareError> {
    let n = t.steps.len();
    // A one-step trace (the prediction) is used whole; warm-up only exists with several steps.
    let skip = if n > 1 { skip.unwrap_or(1) } else { 0 };
    if skip >= n {
        return Err(CompareError::SkipsAll {
            origin: t.origin.clone(),
            steps: n,
            skip,
        });
    }
    let devices = compute_devices(t);
    let mut makespans_us = Vec::new();
    let mut bubbles = Vec::new();
    let mut per_action: BTreeMap<Key, (EventKind, Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for (&id, events) in t.steps.iter().skip(skip) {
        let (start, end) = span_of(events);
        let makespan = end - start;
        makespans_us.push((id, makespan));
        let mut busy = 0.0;
        for &d in &devices {
            let iv: Vec<(f64, f64)> = events
                .iter()
                .filter(|e| e.device == d && e.kind.is_compute_stream())
                .map(|e| (e.start_us, e.start_us + e.dur_us))
                .collect();
            busy += union_len(iv);
        }
        let total = devices.len() as f64 * makespan;
        bubbles.push(if total > 0.0 {
            (1.0 - busy / total).max(0.0)
        } else {
            0.0
        });
        // Events are sorted by (device, name, start, ...), so occurrences count up in order.
        let mut prev: Option<(u32, &str)> = None;
        let mut occ = 0u32;
        for e in events {
            if prev == Some((e.device, e.name.as_str())) {
                occ += 1;
            } else {
                occ = 0;
            }
            prev = Some((e.device, e.name.as_str()));
            let entry = per_action
                .entry((e.device, e.name.clone(), occ))
                .or_insert_with(|| (e.kind, Vec::new(), Vec::new()));
            entry.1.push(e.dur_us);
            entry.2.push(if makespan > 0.0 {
                (e.start_us - start) / makespan
            } else {
                0.0
            });
        }
    }
    // Every list here holds one value per step used, and at least one step is used.
    let median = |v: Vec<f64>| median(v).unwrap_or(0.0);
    let step_time_us = median(makespans_us.iter().map(|x| x.1).collect());
    let bubble = median(bubbles);
    let actions = per_action
        .into_iter()
        .map(|(k, (kind, d, s))| {
            let steps_seen = d.len();
            (
                k,
                Agg {
                    kind,
                    dur_us: median(d),
                    start_norm: median(s),
                    steps_seen,
                },
            )
        })
        .collect();
    Ok(Summary {
        steps_total: n,
        skipped: skip,
        makespans_us,
        step_time_us,
        bubble,
        actions,
    })
}

/// Options of a comparison.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompareOptions {
    /// Warm-up steps to discard from each trace of several steps (`None`: 1); a one-step
    /// trace is always used whole.
    pub skip_steps: Option<usize>,
    /// Compare the common actions even when the schedules' compute actions differ.
    pub allow_unmatched: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct KindError {
    pub count: usize,
    /// Mean predicted duration.
    pub predicted_ms: f64,
    /// Mean measured duration.
    pub measured_ms: f64,
    /// (Σ predicted − Σ measured) / Σ measured; `None` when Σ measured is 0.
    pub error: Option<f64>,
    pub mean_abs_error: f64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unmatched {
    pub predicted_only: usize,
    pub measured_only: usize,
}

/// One matched action's duration, predicted against measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActionError {
    pub device: u32,
    pub name: String,
    /// Its rank among the same name's actions of the device in a step (0 for the first).
    pub occurrence: u32,
    pub predicted_ms: f64,
    pub measured_ms: f64,
    /// (predicted − measured) / measured.
    pub error: f64,
}

/// The report (`pplan validate --format json`); docs/validate.md defines every field.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub predicted: String,
    pub measured: String,
    pub devices: usize,
    pub steps_predicted: usize,
    pub steps_measured: usize,
    pub steps_skipped_predicted: usize,
    pub steps_skipped_measured: usize,
    pub step_times_measured_s: Vec<f64>,
    pub step_time_predicted_s: f64,
    pub step_time_measured_s: f64,
    pub step_time_error: f64,
    pub actions_matched: usize,
    pub actions_unmatched: Unmatched,
    pub actions_zero_measured: usize,
    pub action_error_mean_abs: f64,
    pub action_error_mean: f64,
    pub by_kind: BTreeMap<String, KindError>,
    pub bubble_predicted: f64,
    pub bubble_measured: f64,
    pub start_error_mean_abs: f64,
    pub start_error_max_abs: f64,
    /// The matched compute actions with the largest |duration error|, worst first (at most
    /// 10; ties in (device, name, occurrence) order).
    pub worst_actions: Vec<ActionError>,
    pub warnings: Vec<String>,
    /// Predicted and measured step side by side (rows `2d`, `2d+1`) for the overlay chart.
    #[serde(skip)]
    pub overlay: Timeline,
    /// Row labels of `overlay`.
    #[serde(skip)]
    pub overlay_labels: Vec<String>,
    /// Pipeline devices (for chunk shading in the chart).
    #[serde(skip)]
    pub pipeline_devices: u32,
}

fn examples(keys: &[&Key]) -> String {
    let v: Vec<String> = keys
        .iter()
        .take(3)
        .map(|(d, n, o)| {
            if *o == 0 {
                format!("device {d} {n}")
            } else {
                format!("device {d} {n} #{}", o + 1)
            }
        })
        .collect();
    if v.is_empty() {
        "none".to_string()
    } else {
        v.join(", ")
    }
}

/// Compare a predicted trace with a measured one.
pub fn compare(
    predicted: &[TraceEvent],
    predicted_origin: &str,
    measured: &[TraceEvent],
    measured_origin: &str,
    opts: CompareOptions,
) -> Result<Comparison, CompareError> {
    let pt = load(predicted, predicted_origin)?;
    let mt = load(measured, measured_origin)?;
    let (pd, md) = (compute_devices(&pt), compute_devices(&mt));
    if pd != md {
        return Err(CompareError::Devices {
            predicted: predicted_origin.to_string(),
            measured: measured_origin.to_string(),
            pred_devices: pd.into_iter().collect(),
            meas_devices: md.into_iter().collect(),
        });
    }
    if let Some(skip) = opts.skip_steps.filter(|&k| k > 0) {
        if pt.steps.len() <= 1 && mt.steps.len() <= 1 {
            return Err(CompareError::SkipsNothing {
                skip,
                predicted: predicted_origin.to_string(),
                measured: measured_origin.to_string(),
            });
        }
    }
    let ps = summarize(&pt, opts.skip_steps)?;
    let ms = summarize(&mt, opts.skip_steps)?;
    let mut warnings = Vec::new();

    // A predicted collective of no duration (the data-parallel reduction of a single
    // replica) is nothing a run would record: not counted as unmatched.
    let pred_only: Vec<&Key> = ps
        .actions
        .iter()
        .filter(|(k, a)| {
            !ms.actions.contains_key(*k) && (a.kind.is_schedule_compute() || a.dur_us > 0.0)
        })
        .map(|(k, _)| k)
        .collect();
    let meas_only: Vec<&Key> = ms
        .actions
        .keys()
        .filter(|k| !ps.actions.contains_key(*k))
        .collect();
    let compute_only = |keys: &[&Key], s: &Summary| -> Vec<Key> {
        keys.iter()
            .filter(|k| s.actions[**k].kind.is_schedule_compute())
            .map(|k| (*k).clone())
            .collect()
    };
    let (pc, mc) = (compute_only(&pred_only, &ps), compute_only(&meas_only, &ms));
    if !pc.is_empty() || !mc.is_empty() {
        let (pe, me) = (
            examples(&pc.iter().collect::<Vec<_>>()),
            examples(&mc.iter().collect::<Vec<_>>()),
        );
        if !opts.allow_unmatched {
            return Err(CompareError::Unmatched {
                predicted: predicted_origin.to_string(),
                measured: measured_origin.to_string(),
                predicted_only: pc.len(),
                measured_only: mc.len(),
                pred_examples: pe,
                meas_examples: me,
            });
        }
        warnings.push(format!(
            "the schedules differ: {} compute actions only in the prediction (e.g. {pe}), {} only in the measurement (e.g. {me}); they are left out",
            pc.len(),
            mc.len()
        ));
    }
    let other_p = pred_only.len() - pc.len();
    let other_m = meas_only.len() - mc.len();
    if other_p + other_m > 0 {
        let (pe, me) = (
            examples(
                &pred_only
                    .iter()
                    .copied()
                    .filter(|k| !pc.contains(k))
                    .collect::<Vec<_>>(),
            ),
            examples(
                &meas_only
                    .iter()
                    .copied()
                    .filter(|k| !mc.contains(k))
                    .collect::<Vec<_>>(),
            ),
        );
        warnings.push(format!(
            "{other_p} transfer/collective events only in the prediction (e.g. {pe}), {other_m} only in the measurement (e.g. {me}); they are left out"
        ));
    }

    let used_m = ms.makespans_us.len();
    let mut partial = 0usize;
    let mut matched = 0usize;
    let mut zero = 0usize;
    let (mut abs_sum, mut signed_sum, mut rel_n) = (0.0, 0.0, 0usize);
    let (mut start_sum, mut start_max) = (0.0f64, 0.0f64);
    let mut kinds: BTreeMap<EventKind, (usize, f64, f64, f64, usize)> = BTreeMap::new();
    let mut worst: Vec<ActionError> = Vec::new();
    for (k, p) in &ps.actions {
        let Some(m) = ms.actions.get(k) else { continue };
        matched += 1;
        if m.steps_seen < used_m {
            partial += 1;
        }
        let ds = (p.start_norm - m.start_norm).abs();
        start_sum += ds;
        start_max = start_max.max(ds);
        let e = kinds.entry(p.kind).or_insert((0, 0.0, 0.0, 0.0, 0));
        e.0 += 1;
        e.1 += p.dur_us;
        e.2 += m.dur_us;
        if m.dur_us > 0.0 {
            let rel = (p.dur_us - m.dur_us) / m.dur_us;
            // The headline per-action error covers compute actions only: transfers of a few
            // microseconds would dominate a mean of relative errors (they are in `by_kind`).
            if p.kind.is_schedule_compute() {
                abs_sum += rel.abs();
                signed_sum += rel;
                rel_n += 1;
                worst.push(ActionError {
                    device: k.0,
                    name: k.1.clone(),
                    occurrence: k.2,
                    predicted_ms: p.dur_us / 1e3,
                    measured_ms: m.dur_us / 1e3,
                    error: rel,
                });
            }
            e.3 += rel.abs();
            e.4 += 1;
        } else {
            zero += 1;
        }
    }
    if matched == 0 || !kinds.keys().any(|k| k.is_schedule_compute()) {
        return Err(CompareError::NoMatch {
            predicted: predicted_origin.to_string(),
            measured: measured_origin.to_string(),
        });
    }
    if rel_n == 0 {
        return Err(CompareError::ZeroMeasured {
            measured: measured_origin.to_string(),
            matched: kinds
                .iter()
                .filter(|(k, _)| k.is_schedule_compute())
                .map(|(_, e)| e.0)
                .sum(),
        });
    }
    if partial > 0 {
        warnings.push(format!(
            "{partial} matched actions are missing from some of the {used_m} measured steps used; their medians use the steps they appear in"
        ));
    }
    let mean = |s: f64, n: usize| if n > 0 { s / n as f64 } else { 0.0 };
    let by_kind = kinds
        .iter()
        .map(|(k, &(count, p_sum, m_sum, abs, n))| {
            (
                k.as_str().to_string(),
                KindError {
                    count,
                    predicted_ms: p_sum / count as f64 / 1e3,
                    measured_ms: m_sum / count as f64 / 1e3,
                    error: (m_sum > 0.0).then(|| (p_sum - m_sum) / m_sum),
                    mean_abs_error: mean(abs, n),
                },
            )
        })
        .collect();

    // Stable sort: equal errors keep the (device, name, occurrence) order of the map.
    worst.sort_by(|a, b| b.error.abs().total_cmp(&a.error.abs()));
    worst.truncate(10);
    let devices: Vec<u32> = compute_devices(&pt).into_iter().collect();
    let (overlay, overlay_labels) = overlay(&pt, &ps, &mt, &ms, &devices);
    let step_time_error = if ms.step_time_us > 0.0 {
        (ps.step_time_us - ms.step_time_us) / ms.step_time_us
    } else {
        0.0
    };
    if ms.step_time_us <= 0.0 {
        warnings.push("the measured step time is 0; step_time_error is reported as 0".into());
    }
    Ok(Comparison {
        predicted: predicted_origin.to_string(),
        measured: measured_origin.to_string(),
        devices: devices.len(),
        steps_predicted: ps.steps_total,
        steps_measured: ms.steps_total,
        steps_skipped_predicted: ps.skipped,
        steps_skipped_measured: ms.skipped,
        step_times_measured_s: ms.makespans_us.iter().map(|x| x.1 / 1e6).collect(),
        step_time_predicted_s: ps.step_time_us / 1e6,
        step_time_measured_s: ms.step_time_us / 1e6,
        step_time_error,
        actions_matched: matched,
        actions_unmatched: Unmatched {
            predicted_only: pred_only.len(),
            measured_only: meas_only.len(),
        },
        actions_zero_measured: zero,
        action_error_mean_abs: mean(abs_sum, rel_n),
        action_error_mean: mean(signed_sum, rel_n),
        by_kind,
        bubble_predicted: ps.bubble,
        bubble_measured: ms.bubble,
        start_error_mean_abs: mean(start_sum, matched),
        start_error_max_abs: start_max,
        worst_actions: worst,
        warnings,
        pipeline_devices: devices.len() as u32,
        overlay,
        overlay_labels,
    })
}

/// The step of `s` drawn in the overlay: the used step whose makespan is closest to the median
/// (the earliest on a tie).
fn representative(s: &Summary) -> u32 {
    let mut best = s.makespans_us[0];
    for &(id, m) in &s.makespans_us {
        if (m - s.step_time_us).abs() < (best.1 - s.step_time_us).abs() {
            best = (id, m);
        }
    }
    best.0
}

fn overlay(
    pt: &Steps,
    ps: &Summary,
    mt: &Steps,
    ms: &Summary,
    devices: &[u32],
) -> (Timeline, Vec<String>) {
    let row: BTreeMap<u32, u32> = devices
        .iter()
        .enumerate()
        .map(|(i, &d)| (d, i as u32))
        .collect();
    let mut spans = Vec::new();
    let mut makespan_ns = 0u64;
    for (lane, t, s) in [(0u32, pt, ps), (1u32, mt, ms)] {
        let events = &t.steps[&representative(s)];
        let (start, _) = span_of(events);
        for e in events {
            let Some(&r) = row.get(&e.device) else {
                continue;
            };
            let device = 2 * r + lane;
            let t0 = ((e.start_us - start) * 1e3).round().max(0.0) as u64;
            let t1 = t0 + (e.dur_us * 1e3).round() as u64;
            makespan_ns = makespan_ns.max(t1);
            let fallback = e.args_action.unwrap_or(Action::new(0, Kind::F, 0));
            let mut push = |stream: Stream, action: Action, a: u64, b: u64| {
                spans.push(Span {
                    device,
                    stream,
                    action,
                    peer: None,
                    start_ns: a,
                    end_ns: b,
                })
            };
            match (e.kind, e.name.parse::<Token>()) {
                (EventKind::Compute(_), Ok(Token::Compute(a))) => push(Stream::Compute, a, t0, t1),
                (EventKind::Overlap, Ok(Token::Overlap(subs))) => {
                    // Sub-actions back to back, sharing the span evenly.
                    let n = subs.len() as u64;
                    for (i, a) in subs.into_iter().enumerate() {
                        let i = i as u64;
                        push(
                            Stream::Compute,
                            a,
                            t0 + (t1 - t0) * i / n,
                            t0 + (t1 - t0) * (i + 1) / n,
                        );
                    }
                }
                (EventKind::SendRecv, _) => {
                    let stream = if e.name.contains("SEND") {
                        Stream::Send
                    } else {
                        Stream::Recv
                    };
                    push(stream, fallback, t0, t1)
                }
                (EventKind::TensorParallel, _) => push(
                    Stream::TensorParallel,
                    tp_action(&e.name).unwrap_or(fallback),
                    t0,
                    t1,
                ),
                (EventKind::ReduceGrad, _) => push(Stream::DataParallel, fallback, t0, t1),
                (EventKind::Optimizer, _) => push(Stream::Optimizer, fallback, t0, t1),
                _ => {}
            }
        }
    }
    let labels = devices
        .iter()
        .flat_map(|d| [format!("device {d} pred"), format!("device {d} meas")])
        .collect();
    (
        Timeline {
            num_devices: 2 * devices.len() as u32,
            makespan_ns,
            spans,
        },
        labels,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_from_names() {
        assert_eq!(classify("3F1"), EventKind::Compute(Kind::F));
        assert_eq!(classify("0W12"), EventKind::Compute(Kind::W));
        assert_eq!(classify("(0F3;3B1)OVERLAP_F_B"), EventKind::Overlap);
        assert_eq!(classify("1RECV_F3"), EventKind::SendRecv);
        assert_eq!(classify("2REDUCE_GRAD"), EventKind::ReduceGrad);
        assert_eq!(classify("OPTIMIZER_STEP"), EventKind::Optimizer);
        assert_eq!(classify("3TP_B1"), EventKind::TensorParallel);
        assert_eq!(classify("cudaMemcpy"), EventKind::Other);
    }

    #[test]
    fn medians_and_unions() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(union_len(vec![(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)]), 4.0);
        assert_eq!(union_len::<f64>(vec![]), 0.0);
    }
}
