//! The report's charts as inline SVG (plotters' SVG backend): the predicted step's Gantt chart,
//! bounded so that a 16,384-GPU plan's page stays small (representative pipeline devices, and
//! a time window when even those hold too many boxes), and each pipeline rank's memory at
//! its peak as a stacked bar. Pure functions of their inputs: same inputs, same bytes.

use crate::plan::predict::RankFigures;
use crate::report::gantt::font::{ensure_font, FONT_FAMILY};
use crate::report::gantt::{render_svg, Aggregate, GanttError, GanttOptions};
use crate::sim::{Stream, Timeline};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Pipeline devices drawn at most: the first three, two in the middle, the last three.
pub const MAX_GANTT_DEVICES: u32 = 8;
/// Boxes drawn at most; past it the chart shows the step's start up to that many boxes.
pub const MAX_GANTT_SPANS: usize = 40_000;

/// The Gantt chart as drawn, and what of the step it shows.
#[derive(Debug, Clone, PartialEq)]
pub struct GanttView {
    pub svg: String,
    /// The pipeline devices drawn (all of them, or a representative few).
    pub devices_shown: Vec<u32>,
    pub devices_total: u32,
    /// Drawn up to this time (seconds); the whole step when equal to `step_s`.
    pub window_end_s: f64,
    pub step_s: f64,
}

/// The devices drawn of `p`: all up to [`MAX_GANTT_DEVICES`], else the first three, the two
/// around the middle and the last three (the pipeline's warm-up, steady state and drain).
pub fn representative_devices(p: u32) -> Vec<u32> {
    if p <= MAX_GANTT_DEVICES {
        return (0..p).collect();
    }
    let mid = p / 2;
    vec![0, 1, 2, mid - 1, mid, p - 3, p - 2, p - 1]
}

/// The step's Gantt chart: compute and the collectives lane of the representative devices
/// (transfers left out: the trace has them), in the aggregated form (bubbles tinted).
pub fn gantt(tl: &Timeline, title: &str) -> Result<GanttView, GanttError> {
    let devices = representative_devices(tl.num_devices);
    let mut index = vec![None; tl.num_devices as usize];
    for (i, &d) in devices.iter().enumerate() {
        index[d as usize] = Some(i as u32);
    }
    let mut spans: Vec<_> = tl
        .spans
        .iter()
        .filter(|s| !matches!(s.stream, Stream::Send | Stream::Recv))
        .filter_map(|s| {
            index[s.device as usize].map(|i| crate::sim::Span {
                device: i,
                peer: None,
                ..*s
            })
        })
        .collect();
    let mut window_end_ns = tl.makespan_ns;
    if spans.len() > MAX_GANTT_SPANS {
        let mut starts: Vec<u64> = spans.iter().map(|s| s.start_ns).collect();
        starts.sort_unstable();
        window_end_ns = starts[MAX_GANTT_SPANS].max(1);
        spans.retain(|s| s.start_ns < window_end_ns);
    }
    let sub = Timeline {
        num_devices: devices.len() as u32,
        makespan_ns: tl.makespan_ns,
        spans,
    };
    let opts = GanttOptions {
        title: title.to_string(),
        unit_label: "s".into(),
        ns_per_unit: 1e9,
        width_px: 1600,
        show_transfers: false,
        show_summary: devices.len() as u32 == tl.num_devices,
        row_labels: devices.iter().map(|d| format!("device {d}")).collect(),
        pipeline_devices: tl.num_devices,
        window_ns: (window_end_ns < tl.makespan_ns).then_some((0, window_end_ns)),
        // The aggregated form tints idle time, so the bubbles stand out, and prints each
        // device's bubble share.
        aggregate: Aggregate::Always,
        kernel_view: false,
    };
    Ok(GanttView {
        svg: render_svg(&sub, &opts)?,
        devices_shown: devices,
        devices_total: tl.num_devices,
        window_end_s: window_end_ns as f64 / 1e9,
        step_s: tl.makespan_ns as f64 / 1e9,
    })
}

/// The memory kinds drawn, in stacking order, with their colours (Okabe–Ito).
pub const MEMORY_KINDS: [(&str, (u8, u8, u8)); 5] = [
    ("weights", (0, 114, 178)),
    ("gradients", (86, 180, 233)),
    ("optimizer", (0, 158, 115)),
    ("activations", (230, 159, 0)),
    ("overheads", (150, 150, 150)),
];

/// One stacked bar per pipeline rank: its memory at its own peak by kind, in GB, against the
/// GPU's memory (a red line).
pub fn memory_bars(ranks: &[RankFigures], limit_bytes: u64) -> Result<String, GanttError> {
    ensure_font()?;
    let gb = |b: u64| b as f64 / 1e9;
    let max_gb = ranks
        .iter()
        .map(|r| gb(r.peak_memory_bytes))
        .fold(gb(limit_bytes), f64::max)
        * 1.05;
    let row_px = 16u32;
    let (w, h) = (900u32, 90 + row_px * ranks.len().max(1) as u32);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (w, h)).into_drawing_area();
        let err = |e: DrawingAreaErrorKind<_>| GanttError::Draw(e.to_string());
        root.fill(&WHITE).map_err(err)?;
        let n = ranks.len().max(1) as f64;
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(90)
            .build_cartesian_2d(0.0..max_gb, 0.0..n)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .disable_y_axis()
            .light_line_style(WHITE)
            .x_desc("GB at the rank's peak")
            .label_style((FONT_FAMILY, 12))
            .axis_desc_style((FONT_FAMILY, 13))
            .draw()
            .map_err(err)?;
        // A label beside every bar, or every k-th bar (and the last) when they are many.
        let every = ranks.len().div_ceil(32).max(1);
        let label_style =
            TextStyle::from((FONT_FAMILY, 12).into_font()).pos(Pos::new(HPos::Right, VPos::Center));
        for (i, r) in ranks.iter().enumerate() {
            if i % every != 0 && i + 1 != ranks.len() {
                continue;
            }
            let (x, y) = chart.backend_coord(&(0.0, n - 0.5 - i as f64));
            root.draw(&Text::new(
                format!("rank {}", r.device),
                (x - 6, y),
                label_style.clone(),
            ))
            .map_err(err)?;
        }
        for (i, r) in ranks.iter().enumerate() {
            let m = &r.memory_breakdown;
            let parts = [
                m.weights,
                m.gradients,
                m.optimizer,
                m.activations,
                m.overheads,
            ];
            let mut x = 0.0;
            // Rank 0 on top.
            let y = n - 1.0 - i as f64;
            for (part, (_, (cr, cg, cb))) in parts.iter().zip(MEMORY_KINDS) {
                let x1 = x + gb(*part);
                chart
                    .draw_series(std::iter::once(Rectangle::new(
                        [(x, y + 0.12), (x1, y + 0.88)],
                        RGBColor(cr, cg, cb).filled(),
                    )))
                    .map_err(err)?;
                x = x1;
            }
        }
        let limit = gb(limit_bytes);
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(limit, 0.0), (limit, n)],
                RED.stroke_width(2),
            )))
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(out)
}
