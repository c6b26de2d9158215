//! `pplan report`'s page: the figures of a plan's prediction, its charts, the search's
//! alternatives, the emitted commands and a measured run beside it, put into one
//! self-contained HTML file through a Jinja template (`report.html.j2`, minijinja, HTML
//! autoescaping on: every name a user chose is escaped). No IO, no clock: the same inputs
//! give the same bytes.

use super::charts::{gantt, memory_bars, GanttView, MEMORY_KINDS};
use super::search_results::SearchSummary;
use crate::plan::emit::{emit, Target};
use crate::plan::plan_file::Plan;
use crate::plan::predict::Prediction;
use crate::plan::run_cost::RunCost;
use crate::report::gantt::{render_svg, GanttError, GanttOptions};
use crate::report::measured::ValidateReport;
use minijinja::value::Serde;
use minijinja::{context, Environment, UndefinedBehavior, Value};
use serde::Serialize;

/// The template, compiled into the binary.
const TEMPLATE: &str = include_str!("report.html.j2");

/// Everything the page shows; the caller has read the files.
pub struct ReportInput<'a> {
    /// The plan file as the user named it.
    pub plan_file: &'a str,
    pub plan: &'a Plan,
    /// The plan predicted with its timeline recorded (`record_timeline`).
    pub prediction: &'a Prediction,
    /// The run's days, GPU-hours and cost (`--tokens`, `--gpu-hour-price`).
    pub run: Option<&'a RunCost>,
    /// The search's results (`--search`) and the file they came from.
    pub search: Option<(&'a str, &'a SearchSummary)>,
    /// A measured run beside the plan (`--measured`).
    pub measured: Option<&'a ValidateReport>,
}

/// Why the page could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    #[error("the prediction has no timeline to draw (predict it with record_timeline)")]
    NoTimeline,
    #[error("chart: {0}")]
    Chart(#[from] GanttError),
    #[error("template: {0}")]
    Template(String),
}

/// The measured section.
#[derive(Serialize)]
struct MeasuredView {
    files: Vec<String>,
    source: &'static str,
    metrics: Vec<MetricRow>,
    stages: Vec<StageView>,
    /// Action by action (pplan traces): per kind of action, predicted against measured.
    kinds: Vec<KindRow>,
    actions: String,
    warnings: Vec<String>,
}

#[derive(Serialize)]
struct KindRow {
    kind: String,
    count: usize,
    predicted_ms: String,
    measured_ms: String,
    error: String,
}

#[derive(Serialize)]
struct StageView {
    stage: u32,
    forward: String,
    backward: String,
    error: String,
}

/// The search section.
#[derive(Serialize)]
struct SearchView {
    file: String,
    evaluated: u64,
    feasible: u64,
    alternatives: Vec<AlternativeView>,
    rejected: Vec<super::search_results::Rejection>,
}

#[derive(Serialize)]
struct AlternativeView {
    rank: u64,
    layout: String,
    step: String,
    mfu: String,
    peak: String,
    headroom: String,
    why: String,
    same: bool,
}

/// A label and a value, preformatted.
#[derive(Serialize)]
struct Figure {
    label: &'static str,
    value: String,
    note: String,
}

/// One emitted file.
#[derive(Serialize)]
struct Command {
    target: &'static str,
    how: &'static str,
    text: String,
    notes: Vec<String>,
}

/// One row of the per-rank memory table.
#[derive(Serialize)]
struct RankRow {
    device: u32,
    role: String,
    layers: u32,
    forward_ms: String,
    backward_ms: String,
    parts_gb: Vec<String>,
    peak_gb: String,
}

/// One predicted-against-measured figure.
#[derive(Serialize)]
struct MetricRow {
    name: String,
    predicted: String,
    measured: String,
    error: String,
}

fn gb(b: u64) -> String {
    format!("{:.1}", b as f64 / 1e9)
}

/// 450000000000 as `450B`, 15e12 as `15T` (as `--tokens` takes them).
fn short_count(n: u64) -> String {
    for (div, suffix) in [(1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")] {
        if n as f64 >= div {
            let v = n as f64 / div;
            return if v.fract() == 0.0 {
                format!("{v:.0}{suffix}")
            } else {
                format!("{v:.2}{suffix}")
            };
        }
    }
    n.to_string()
}

fn opt(v: Option<f64>, prec: usize) -> String {
    v.map(|x| format!("{x:.prec$}"))
        .unwrap_or_else(|| "–".into())
}

fn summary(p: &Prediction, run: Option<&RunCost>) -> Vec<Figure> {
    let f = |label, value: String, note: &str| Figure {
        label,
        value,
        note: note.to_string(),
    };
    let mut out = vec![
        f(
            "step time",
            format!("{:.3} s", p.step_time_s),
            "one optimizer step",
        ),
        f(
            "tokens/s",
            format!("{:.0}", p.tokens_per_s),
            &format!("{:.0} per GPU", p.tokens_per_s_per_gpu),
        ),
        f(
            "MFU",
            format!("{:.1}%", p.mfu * 100.0),
            &format!("{:.1} model TFLOP/s per GPU", p.model_tflops_per_gpu),
        ),
        f(
            "bubble",
            format!("{:.1}%", p.bubble_fraction * 100.0),
            "idle compute in the step",
        ),
        f(
            "peak memory",
            format!("{} GB", gb(p.peak_memory_bytes)),
            &format!(
                "of {} GB: {}",
                gb(p.memory_limit_bytes),
                if p.fits { "fits" } else { "does not fit" }
            ),
        ),
    ];
    if let Some(r) = run {
        out.push(f(
            "training days",
            format!("{:.1}", r.training_days),
            &format!(
                "{} tokens in {} steps",
                short_count(r.training_tokens),
                r.training_steps
            ),
        ));
        out.push(f(
            "GPU-hours",
            format!("{:.0}", r.gpu_hours),
            &r.cost_usd
                .map(|c| format!("US$ {c:.0}"))
                .unwrap_or_else(|| "add --gpu-hour-price for the cost".into()),
        ));
    }
    out
}

fn layout_rows(plan: &Plan, p: &Prediction) -> Vec<(String, String)> {
    let q = &plan.parallelism;
    let mut rows = vec![
        ("GPUs".into(), format!("{} × {}", p.gpus, p.hardware)),
        (
            "parallel sizes".into(),
            format!(
                "t={} p={} d={} cp={} ep={} etp={}",
                p.tp, p.pp, p.dp, p.cp, p.ep, p.etp
            ),
        ),
        (
            "batch".into(),
            format!(
                "global {} sequences of {} tokens, micro-batch {}, {} micro-batches",
                p.global_batch, plan.model.seq_length, p.micro_batch, p.microbatches
            ),
        ),
        (
            "schedule".into(),
            format!(
                "{}, {} chunk(s) per device{}",
                p.schedule,
                p.chunks,
                p.microbatch_group
                    .map(|g| format!(", micro-batch group {g}"))
                    .unwrap_or_default()
            ),
        ),
        (
            "split".into(),
            format!("{} ({} stages)", p.split, p.stage_layers.len()),
        ),
        (
            "memory".into(),
            format!(
                "recompute {}, sequence parallel {}, ZeRO {}",
                p.recompute,
                if p.sequence_parallel { "on" } else { "off" },
                p.zero
            ),
        ),
        (
            "stack".into(),
            format!(
                "{}, {} attention, {}{}",
                p.stack,
                p.attention,
                p.precision,
                p.fp8_recipe
                    .as_deref()
                    .map(|r| format!(" ({r})"))
                    .unwrap_or_default()
            ),
        ),
        (
            "model".into(),
            format!(
                "{}: {:.1}B parameters ({:.1}B active), {} layers, hidden {}",
                plan.model.name,
                p.params as f64 / 1e9,
                p.active_params as f64 / 1e9,
                plan.model.num_layers,
                plan.model.hidden_size
            ),
        ),
    ];
    if q.moe_dispatcher != "alltoall" || q.cuda_graph_impl != "none" {
        rows.push((
            "recipe".into(),
            format!(
                "dispatcher {}, CUDA graphs {}",
                q.moe_dispatcher, q.cuda_graph_impl
            ),
        ));
    }
    rows
}

fn commands(plan: &Plan, plan_file: &str) -> Vec<Command> {
    [
        (Target::Megatron, "Megatron-LM", "megatron"),
        (Target::Torchtitan, "torchtitan", "torchtitan"),
    ]
    .into_iter()
    .map(|(target, name, flag)| {
        let how = match flag {
            "megatron" => "source it, then torchrun ... pretrain_gpt.py \"${MEGATRON_ARGS[@]}\"",
            _ => "a config function for torchtitan's --module/--config",
        };
        match emit(plan, target, Some("schedule.csv")) {
            Ok(e) => Command {
                target: name,
                how,
                text: e.text,
                notes: {
                    let mut n = e.notes;
                    if e.schedule_csv.is_some() {
                        n.push(format!(
                            "the schedule CSV it names: pplan emit --plan {plan_file} --target {flag} --output FILE"
                        ));
                    }
                    n
                },
            },
            Err(err) => Command {
                target: name,
                how,
                text: String::new(),
                notes: vec![format!("cannot be emitted: {err}")],
            },
        }
    })
    .collect()
}

fn gantt_note(v: &GanttView) -> String {
    let mut parts = Vec::new();
    if (v.devices_shown.len() as u32) < v.devices_total {
        parts.push(format!(
            "{} of the {} pipeline devices (the first, middle and last ones: warm-up, steady state and drain)",
            v.devices_shown.len(),
            v.devices_total
        ));
    } else {
        parts.push(format!("all {} pipeline devices", v.devices_total));
    }
    if v.window_end_s < v.step_s {
        parts.push(format!(
            "the first {:.3} s of the {:.3} s step (the whole step has too many boxes for one page)",
            v.window_end_s, v.step_s
        ));
    } else {
        parts.push(format!("the whole {:.3} s step", v.step_s));
    }
    format!(
        "Shown: {}. Transfers are left out; every device and transfer is in the Chrome trace (pplan predict --plan FILE --trace step.json).",
        parts.join(", ")
    )
}

fn measured_rows(r: &ValidateReport) -> Vec<MetricRow> {
    r.metrics
        .iter()
        .map(|m| MetricRow {
            name: format!("{} ({})", m.name, m.unit),
            predicted: opt(m.predicted, 6),
            measured: opt(m.measured, 6),
            error: match (m.error, m.error_kind) {
                (Some(e), "difference") => format!("{e:+.4}"),
                (Some(e), _) => format!("{:+.2}%", e * 100.0),
                (None, _) => "–".into(),
            },
        })
        .collect()
}

fn overlay_svg(r: &ValidateReport) -> Result<Option<String>, GanttError> {
    let Some(c) = &r.actions else {
        return Ok(None);
    };
    let longest = c.step_time_predicted_s.max(c.step_time_measured_s);
    let (unit, ns_per_unit) = crate::report::gantt::time_unit_for(longest);
    let opts = GanttOptions {
        title: format!(
            "predicted (upper) vs measured (lower): step {:+.1}%",
            c.step_time_error * 100.0
        ),
        unit_label: unit.to_string(),
        ns_per_unit,
        width_px: 1600,
        show_summary: false,
        row_labels: c.overlay_labels.clone(),
        pipeline_devices: c.pipeline_devices,
        ..GanttOptions::default()
    };
    render_svg(&c.overlay, &opts).map(Some)
}

/// The page for `input`.
pub fn render(input: &ReportInput) -> Result<String, ReportError> {
    let p = input.prediction;
    let tl = p.timeline.as_ref().ok_or(ReportError::NoTimeline)?;
    let title = format!(
        "{}: t={} p={} d={} b={} m={} {} v={}",
        p.model, p.tp, p.pp, p.dp, p.micro_batch, p.microbatches, p.schedule, p.chunks
    );
    let view = gantt(tl, &title)?;
    let memory = memory_bars(&p.ranks, p.memory_limit_bytes)?;
    let ranks: Vec<RankRow> = p
        .ranks
        .iter()
        .map(|r| {
            let m = &r.memory_breakdown;
            RankRow {
                device: r.device,
                role: r.role.clone(),
                layers: r.layers,
                forward_ms: format!("{:.2}", r.forward_ms),
                backward_ms: format!("{:.2}", r.backward_ms),
                parts_gb: [
                    m.weights,
                    m.gradients,
                    m.optimizer,
                    m.activations,
                    m.overheads,
                ]
                .iter()
                .map(|&b| gb(b))
                .collect(),
                peak_gb: gb(r.peak_memory_bytes),
            }
        })
        .collect();
    let kinds: Vec<(&str, String)> = MEMORY_KINDS
        .iter()
        .map(|(name, (r, g, b))| (*name, format!("#{r:02X}{g:02X}{b:02X}")))
        .collect();
    let measured = input.measured.map(|r| MeasuredView {
        files: r.measured_files.clone(),
        source: r.source.as_str(),
        metrics: measured_rows(r),
        stages: r
            .stages
            .iter()
            .take(10)
            .map(|s| StageView {
                stage: s.stage,
                forward: format!(
                    "{:.3} / {:.3}",
                    s.forward_ms_predicted, s.forward_ms_measured
                ),
                backward: format!(
                    "{:.3} / {:.3}",
                    s.backward_ms_predicted, s.backward_ms_measured
                ),
                error: s
                    .error
                    .map(|e| format!("{:+.2}%", e * 100.0))
                    .unwrap_or_else(|| "–".into()),
            })
            .collect(),
        kinds: r
            .actions
            .iter()
            .flat_map(|c| &c.by_kind)
            .map(|(kind, k)| KindRow {
                kind: kind.clone(),
                count: k.count,
                predicted_ms: format!("{:.3}", k.predicted_ms),
                measured_ms: format!("{:.3}", k.measured_ms),
                error: k
                    .error
                    .map(|e| format!("{:+.2}%", e * 100.0))
                    .unwrap_or_else(|| "–".into()),
            })
            .collect(),
        actions: r
            .actions
            .as_ref()
            .map(|c| {
                format!(
                    "{} actions matched; step {:.4} s predicted against {:.4} s measured ({:+.2}%), mean |error| per action {:.2}%, bubble {:.3} against {:.3}",
                    c.actions_matched,
                    c.step_time_predicted_s,
                    c.step_time_measured_s,
                    c.step_time_error * 100.0,
                    c.action_error_mean_abs * 100.0,
                    c.bubble_predicted,
                    c.bubble_measured
                )
            })
            .unwrap_or_default(),
        warnings: r.warnings.clone(),
    });
    let overlay = overlay_svg_value(input.measured)?;
    let search = input.search.map(|(file, s)| SearchView {
        file: file.to_string(),
        evaluated: s.evaluated,
        feasible: s.feasible,
        alternatives: s
            .alternatives
            .iter()
            .map(|a| AlternativeView {
                rank: a.rank,
                layout: a.layout.clone(),
                step: format!("{:.3}", a.step_time_s),
                mfu: format!("{:.1}%", a.mfu * 100.0),
                peak: format!("{:.1}", a.peak_memory_gb),
                headroom: format!("{:.1}", a.headroom_gb),
                why: a.why.clone(),
                same: (a.step_time_s - p.step_time_s).abs() <= 1e-9 * p.step_time_s.max(1.0),
            })
            .collect(),
        rejected: s.rejected.iter().filter(|r| r.count > 0).cloned().collect(),
    });
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.add_template("report.html.j2", TEMPLATE)
        .map_err(|e| ReportError::Template(e.to_string()))?;
    let tmpl = env
        .get_template("report.html.j2")
        .map_err(|e| ReportError::Template(e.to_string()))?;
    tmpl.render(context! {
        title => title,
        plan_file => input.plan_file,
        version => env!("CARGO_PKG_VERSION"),
        summary => Serde(summary(p, input.run)),
        layout => Serde(layout_rows(input.plan, p)),
        gantt_svg => Value::from_safe_string(view.svg.clone()),
        gantt_note => gantt_note(&view),
        memory_svg => Value::from_safe_string(memory),
        kinds => Serde(kinds),
        ranks => Serde(ranks),
        search => Serde(search),
        commands => Serde(commands(input.plan, input.plan_file)),
        measured => Serde(measured),
        overlay_svg => overlay,
    })
    .map_err(|e| ReportError::Template(e.to_string()))
}

fn overlay_svg_value(r: Option<&ValidateReport>) -> Result<Value, GanttError> {
    Ok(match r.map(overlay_svg).transpose()?.flatten() {
        Some(svg) => Value::from_safe_string(svg),
        None => Value::from(()),
    })
}
