//! `pplan validate` on traces and logs pplan did not write: the measured breakdown beside a
//! prediction (a pplan trace or a plan's headline figures), per-metric errors, stages ranked by
//! their error, and — when the measured trace names the schedule's actions — the action-by-action
//! comparison of [`crate::report::compare`]. docs/validate.md defines every field. No IO here.

use crate::measured::breakdown::{Breakdown, LogSummary};
use crate::measured::timeline::{Measured, Source};
use crate::plan::plan_file::Plan;
use crate::report::compare::{compare, CompareError, CompareOptions, Comparison};
use crate::report::trace::{TraceArgs, TraceEvent};
use crate::schedule::ir::{Action, Kind};
use crate::sim::{Span, Stream, Timeline};
use serde::Serialize;

/// One headline figure, predicted against measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Metric {
    pub name: String,
    pub unit: &'static str,
    pub predicted: Option<f64>,
    pub measured: Option<f64>,
    /// `relative`: (predicted − measured) / measured; `difference`: predicted − measured (for
    /// fractions such as the bubble).
    pub error_kind: &'static str,
    pub error: Option<f64>,
}

fn metric(name: &str, unit: &'static str, p: Option<f64>, m: Option<f64>) -> Metric {
    let (error_kind, error) = if unit == "fraction" {
        ("difference", p.zip(m).map(|(p, m)| p - m))
    } else {
        (
            "relative",
            p.zip(m).filter(|&(_, m)| m > 0.0).map(|(p, m)| (p - m) / m),
        )
    };
    Metric {
        name: name.to_string(),
        unit,
        predicted: p,
        measured: m,
        error_kind,
        error,
    }
}

/// One pipeline stage's forward and backward time, predicted against measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageRow {
    pub stage: u32,
    pub forward_ms_predicted: f64,
    pub forward_ms_measured: f64,
    pub backward_ms_predicted: f64,
    pub backward_ms_measured: f64,
    /// (F + B predicted − F + B measured) / (F + B measured).
    pub error: Option<f64>,
}

/// What the measurement is set beside.
pub enum Prediction<'a> {
    /// A pplan trace (simulate/predict `--trace`) read into the measured model, and its events
    /// for the action-by-action comparison.
    Trace {
        file: String,
        breakdown: Box<Breakdown>,
        events: &'a [TraceEvent],
        /// A plan of the run, to map measured ranks to pipeline devices.
        plan: Option<&'a Plan>,
    },
    /// A plan's headline figures (`predicted`) and layout.
    Plan { file: String, plan: &'a Plan },
}

/// The report of `pplan validate` on a measurement that is not a pplan trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ValidateReport {
    pub source: Source,
    pub measured_files: Vec<String>,
    /// The prediction's file, when one was given.
    pub predicted: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub breakdown: Option<Breakdown>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_breakdown: Option<Breakdown>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<LogSummary>,
    pub metrics: Vec<Metric>,
    /// Stages with actions on both sides, worst |error| first.
    pub stages: Vec<StageRow>,
    /// The action-by-action comparison, when both sides name the schedule's actions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actions: Option<Comparison>,
    pub warnings: Vec<String>,
    /// What the readers kept but counted as suspect (docs/validate.md, "What is refused, what
    /// is flagged").
    pub flagged: crate::measured::checks::Flagged,
}

/// The measured ranks' actions as pplan trace events, one pipeline device per rank: with a
/// plan, device = ⌊rank / (t·cp·d)⌋ mod p (Megatron-LM's and torchtitan's rank order, pipeline
/// outermost) and the lowest rank of each device; without one, the ranks in order.
pub fn measured_action_events(m: &Measured, plan: Option<&Plan>) -> Vec<TraceEvent> {
    let mut chosen: std::collections::BTreeMap<u32, &crate::measured::timeline::RankTrace> =
        std::collections::BTreeMap::new();
    for (i, r) in m.ranks.iter().filter(|r| !r.actions.is_empty()).enumerate() {
        let device = plan.map_or(i as u32, |p| p.layout_sizes().pipeline_rank(r.rank));
        chosen.entry(device).or_insert(r);
    }
    let mut out = Vec::new();
    for (&device, r) in &chosen {
        for a in &r.actions {
            let kind = match a.action.kind {
                Kind::F => "F",
                Kind::B => "B",
                Kind::I => "I",
                Kind::W => "W",
            };
            out.push(TraceEvent {
                name: a.action.to_string(),
                ph: "X".into(),
                ts: Some(a.start_ns as f64 / 1e3),
                dur: Some((a.end_ns - a.start_ns) as f64 / 1e3),
                pid: device,
                tid: 0,
                args: Some(TraceArgs {
                    stage: Some(a.action.stage),
                    microbatch: Some(a.action.microbatch),
                    kind: Some(kind.into()),
                    step: (!r.steps.is_empty()).then_some(a.step),
                    ..TraceArgs::none()
                }),
            });
        }
    }
    out
}

fn stage_rows(pred: &Breakdown, meas: &Breakdown) -> Vec<StageRow> {
    let mut rows: Vec<StageRow> = meas
        .stages
        .iter()
        .filter_map(|m| {
            let p = pred.stages.iter().find(|p| p.stage == m.stage)?;
            let (sp, sm) = (p.forward_ms + p.backward_ms, m.forward_ms + m.backward_ms);
            Some(StageRow {
                stage: m.stage,
                forward_ms_predicted: p.forward_ms,
                forward_ms_measured: m.forward_ms,
                backward_ms_predicted: p.backward_ms,
                backward_ms_measured: m.backward_ms,
                error: (sm > 0.0).then(|| (sp - sm) / sm),
            })
        })
        .collect();
    rows.sort_by(|a, b| {
        let e = |r: &StageRow| r.error.map_or(-1.0, f64::abs);
        e(b).total_cmp(&e(a)).then(a.stage.cmp(&b.stage))
    });
    rows
}

/// Set a measurement beside a prediction (or alone, `prediction` = `None`).
pub fn validate_measured(
    measured: &Measured,
    breakdown: Option<Breakdown>,
    log: Option<LogSummary>,
    prediction: Option<Prediction>,
    skip_steps: Option<usize>,
    allow_unmatched: bool,
) -> Result<ValidateReport, CompareError> {
    let mut report = ValidateReport {
        source: measured.source,
        measured_files: measured.files.clone(),
        predicted: None,
        breakdown,
        predicted_breakdown: None,
        log,
        metrics: Vec::new(),
        stages: Vec::new(),
        actions: None,
        warnings: crate::measured::checks::warnings(&measured.flagged, &measured.files.join(", ")),
        flagged: measured.flagged,
    };
    // Disjoint fields: the measurement is read while metrics and stages are written.
    let (mb, lg) = (&report.breakdown, &report.log);
    match prediction {
        None => {}
        Some(Prediction::Trace {
            file,
            breakdown: pb,
            events,
            plan,
        }) => {
            report.predicted = Some(file.clone());
            if let Some(mb) = mb {
                let (p, m) = (&pb.mean, &mb.mean);
                report.metrics.push(metric(
                    "step_time",
                    "s",
                    Some(p.step_time_s),
                    Some(m.step_time_s),
                ));
                report
                    .metrics
                    .push(metric("compute", "s", Some(p.compute_s), Some(m.compute_s)));
                report.metrics.push(metric(
                    "communication_exposed",
                    "s",
                    Some(p.comm_exposed_s),
                    Some(m.comm_exposed_s),
                ));
                let dims: std::collections::BTreeSet<&str> =
                    p.comm.keys().chain(m.comm.keys()).copied().collect();
                for d in dims {
                    let get = |f: &crate::measured::breakdown::Figures| {
                        f.comm.get(d).map(|c| c.exposed_s).unwrap_or(0.0)
                    };
                    report.metrics.push(metric(
                        &format!("{d}_exposed"),
                        "s",
                        Some(get(p)),
                        Some(get(m)),
                    ));
                }
                report
                    .metrics
                    .push(metric("idle", "s", Some(p.idle_s), Some(m.idle_s)));
                report
                    .metrics
                    .push(metric("bubble", "fraction", Some(p.bubble), Some(m.bubble)));
                report.stages = stage_rows(&pb, mb);
                let meas_events = measured_action_events(measured, plan);
                if !meas_events.is_empty() {
                    let c = compare(
                        events,
                        &file,
                        &meas_events,
                        &measured.files.join(", "),
                        CompareOptions {
                            skip_steps,
                            allow_unmatched,
                        },
                    )?;
                    report.warnings.extend(c.warnings.iter().cloned());
                    report.actions = Some(c);
                } else {
                    report.warnings.push(format!(
                        "{} names no pipeline actions (record_function 'PP:0F1' or '0F1'): compared by metric only, not action by action",
                        measured.files.join(", ")
                    ));
                }
            } else if let Some(l) = lg {
                report.metrics.push(metric(
                    "step_time",
                    "s",
                    Some(pb.mean.step_time_s),
                    l.step_time_s,
                ));
            }
            report.predicted_breakdown = Some(*pb);
        }
        Some(Prediction::Plan { file, plan }) => {
            report.predicted = Some(file.clone());
            let Some(pp) = &plan.predicted else {
                report.warnings.push(format!(
                    "{file} holds no predicted figures (`predicted`): write it with pplan predict/search --output"
                ));
                return Ok(report);
            };
            if let Some(mb) = mb {
                report.metrics.push(metric(
                    "step_time",
                    "s",
                    Some(pp.step_time_s),
                    Some(mb.mean.step_time_s),
                ));
                report.metrics.push(metric(
                    "bubble",
                    "fraction",
                    Some(pp.bubble_fraction),
                    Some(mb.mean.bubble),
                ));
            }
            if let Some(l) = lg {
                // torchtitan prints tokens per second per rank, not the step time: a
                // data-parallel rank's share of the global batch over that rate.
                let par = &plan.parallelism;
                let derived = l.tokens_per_s_per_gpu.filter(|&t| t > 0.0).map(|tps| {
                    par.global_batch as f64 * plan.model.seq_length as f64
                        / par.dp.max(1) as f64
                        / tps
                });
                let step = l.step_time_s.or(derived);
                if l.step_time_s.is_none() && derived.is_some() {
                    report.warnings.push(format!(
                        "the measured step time is derived: global batch {} x sequence {} / dp {} tokens per rank over the logged tokens/s per GPU",
                        par.global_batch, plan.model.seq_length, par.dp
                    ));
                }
                report
                    .metrics
                    .push(metric("step_time", "s", Some(pp.step_time_s), step));
                report.metrics.push(metric(
                    "tflops_per_gpu",
                    "TFLOP/s",
                    Some(pp.tflops_per_gpu),
                    l.tflops_per_gpu,
                ));
                report
                    .metrics
                    .push(metric("mfu", "fraction", Some(pp.mfu), l.mfu));
                report.metrics.push(metric(
                    "peak_memory",
                    "bytes",
                    Some(pp.peak_memory_bytes as f64),
                    l.memory_bytes.map(|b| b as f64),
                ));
                if l.tflops_per_gpu.is_some() || l.mfu.is_some() {
                    report.warnings.push(
                        "TFLOP/s and MFU are compared as each side counts them: pplan counts model FLOPs (recomputation excluded); Megatron-LM counts recomputed FLOPs when it recomputes, torchtitan 6·N + attention per token against its own peak".to_string(),
                    );
                }
            }
        }
    }
    Ok(report)
}

/// One step of the measured run as a timeline, a row per rank (labels `rank N`): the schedule's
/// actions on the compute lane when the trace names them (pipeline transfers on the send lane),
/// else the compute kernels themselves (`kernel_view`, the third value: draw with
/// [`crate::report::gantt::GanttOptions::kernel_view`]); tensor- and data-parallel kernels on
/// the collective lane, and in the kernel view the other communication too. Time 0 is the
/// step's earliest start over the ranks. `None` when no rank has activity in that step.
pub fn measured_timeline(m: &Measured, step: u32) -> Option<(Timeline, Vec<String>, bool)> {
    use crate::measured::timeline::{Dim, KernelClass};
    let kernel_view = m.ranks.iter().all(|r| r.actions.is_empty());
    let step_of = |r: &crate::measured::timeline::RankTrace| {
        if r.steps.is_empty() {
            0
        } else {
            step.min(r.steps.len() as u32 - 1)
        }
    };
    let t0 = m
        .ranks
        .iter()
        .flat_map(|r| {
            let s = step_of(r);
            r.kernels
                .iter()
                .filter(move |k| k.step == s)
                .map(|k| k.start_ns)
                .chain(
                    r.actions
                        .iter()
                        .filter(move |a| a.step == s)
                        .map(|a| a.start_ns),
                )
        })
        .min()?;
    let filler = Action::new(0, Kind::F, 0);
    let rel = |t: i64| (t - t0).max(0) as u64;
    let mut spans = Vec::new();
    let mut labels = Vec::new();
    for (row, r) in m.ranks.iter().enumerate() {
        let s = step_of(r);
        let device = row as u32;
        labels.push(format!("rank {}", r.rank));
        for a in r.actions.iter().filter(|a| a.step == s) {
            spans.push(Span {
                device,
                stream: Stream::Compute,
                action: a.action,
                peer: None,
                start_ns: rel(a.start_ns),
                end_ns: rel(a.end_ns),
            });
        }
        for k in r.kernels.iter().filter(|k| k.step == s) {
            let stream = match k.class {
                c if c.is_compute() && kernel_view => Stream::Compute,
                KernelClass::Comm(_, Dim::Tp) => Stream::TensorParallel,
                KernelClass::Comm(_, Dim::Dp) => Stream::DataParallel,
                KernelClass::Comm(_, Dim::Pp) if !kernel_view => Stream::Send,
                KernelClass::Comm(..) if kernel_view => Stream::Optimizer,
                _ => continue,
            };
            spans.push(Span {
                device,
                stream,
                action: filler,
                peer: None,
                start_ns: rel(k.start_ns),
                end_ns: rel(k.end_ns),
            });
        }
    }
    let makespan_ns = spans.iter().map(|s| s.end_ns).max().unwrap_or(0);
    Some((
        Timeline {
            num_devices: m.ranks.len() as u32,
            makespan_ns,
            spans,
        },
        labels,
        kernel_view,
    ))
}
