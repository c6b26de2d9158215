//! Layout: every position is decided here, before a backend exists, so SVG and PNG agree.

use super::colours::*;
use super::font::{ensure_font, FONT_FAMILY};
use super::options::{
    Aggregate, GanttError, GanttOptions, AUTO_WIDTH_MAX_PX, MAX_SIDE_PX, MIN_WIDTH_PX,
};
use crate::schedule::ir::Kind;
use crate::sim::{Span, Stream, Timeline};
use plotters::prelude::*;

pub(super) const MARGIN_LEFT_PX: i32 = 84;
pub(super) const MARGIN_RIGHT_PX: i32 = 28;
pub(super) const MARGIN_TOP_PX: i32 = 12;
pub(super) const TITLE_FONT_PX: f64 = 20.0;
pub(super) const TITLE_LINE_PX: i32 = 28;
pub(super) const SUMMARY_FONT_PX: f64 = 13.0;
pub(super) const SUMMARY_LINE_PX: i32 = 22;
pub(super) const HEADER_GAP_PX: i32 = 8;
pub(super) const COMPUTE_LANE_PX: i32 = 26;
pub(super) const COMM_LANE_PX: i32 = 9;
pub(super) const LANE_GAP_PX: i32 = 2;
pub(super) const ROW_GAP_PX: i32 = 12;
pub(super) const LABEL_FONT_PX: f64 = 13.0;
pub(super) const LANE_FONT_PX: f64 = 9.0;
/// Font sizes tried, largest first, for the micro-batch number inside a compute box.
pub(super) const BOX_FONT_PX: [f64; 2] = [12.0, 10.0];
/// Horizontal room a micro-batch label needs besides its own width (both sides together).
pub(super) const BOX_TEXT_PAD_PX: f64 = 5.0;
pub(super) const AXIS_FONT_PX: f64 = 12.0;
pub(super) const AXIS_HEIGHT_PX: i32 = 46;
pub(super) const LEGEND_FONT_PX: f64 = 12.0;
pub(super) const LEGEND_ROW_PX: i32 = 22;
pub(super) const SWATCH_PX: i32 = 14;
pub(super) const MARGIN_BOTTOM_PX: i32 = 10;
/// The automatic width aims at this many pixels for the shortest compute action: enough for
/// a two-digit micro-batch number.
pub(super) const AUTO_MIN_BOX_PX: f64 = 26.0;
pub(super) const AUTO_PLOT_MIN_PX: f64 = 800.0;
/// At most this many ticks on the time axis (a bound on the tick loop).
pub(super) const MAX_TICKS: u32 = 200;
/// Aggregated charts with more devices than this get compact rows, so that the image stays a
/// sensible height (256 devices: about 8,500 px instead of 15,000).
pub(super) const COMPACT_ROWS_ABOVE_DEVICES: u32 = 32;

/// The heights of one device's row.
#[derive(Clone, Copy)]
pub(super) struct Lanes {
    pub(super) compute_px: i32,
    pub(super) comm_px: i32,
    pub(super) gap_px: i32,
    pub(super) row_gap_px: i32,
}

const LANES: Lanes = Lanes {
    compute_px: COMPUTE_LANE_PX,
    comm_px: COMM_LANE_PX,
    gap_px: LANE_GAP_PX,
    row_gap_px: ROW_GAP_PX,
};
const COMPACT_LANES: Lanes = Lanes {
    compute_px: 14,
    comm_px: 4,
    gap_px: 1,
    row_gap_px: 5,
};

/// Whether span `s` is drawn: all of them without a window, else those overlapping it (a
/// zero-length span when it lies inside).
pub(super) fn visible(s: &Span, window: Option<(u64, u64)>) -> bool {
    match window {
        None => true,
        Some((a, b)) if s.start_ns == s.end_ns => s.start_ns >= a && s.start_ns < b,
        Some((a, b)) => s.start_ns < b && s.end_ns > a,
    }
}

pub(super) struct LegendItem {
    pub(super) swatches: Vec<Rgb>,
    pub(super) label: String,
    /// Swatches drawn as an outline only (the white "idle" entry).
    pub(super) outlined: bool,
}

pub(super) struct PlacedLegendItem {
    pub(super) item: LegendItem,
    pub(super) x: i32,
    pub(super) y: i32,
}

pub(super) struct Layout {
    /// Draw compute boxes as measured kernels ([`GanttOptions::kernel_view`]).
    pub(super) kernel_view: bool,
    pub(super) width_px: u32,
    pub(super) height_px: u32,
    pub(super) plot_x0: i32,
    pub(super) plot_x1: i32,
    pub(super) rows_y0: i32,
    pub(super) row_pitch_px: i32,
    /// Whether the transfer lanes (send, recv) are drawn.
    pub(super) transfer_lanes: bool,
    /// Whether the collectives lane (tensor-parallel, data-parallel, optimizer) is drawn.
    pub(super) collective_lane: bool,
    pub(super) axis_y: i32,
    /// The time axis: `t0_ns` (0, or the window's start) to `t_end_ns`.
    pub(super) t0_ns: u64,
    pub(super) t_end_ns: u64,
    pub(super) window_ns: Option<(u64, u64)>,
    pub(super) chunks: u32,
    pub(super) lanes: Lanes,
    /// The aggregated form (see [`Aggregate`]).
    pub(super) aggregated: bool,
    /// Aggregated charts: each device's idle share of the whole step, printed right of its row.
    pub(super) device_bubble: Vec<f64>,
    /// The makespan, up to which idle time is tinted in aggregated charts.
    pub(super) makespan_ns: u64,
    pub(super) legend: Vec<PlacedLegendItem>,
    pub(super) summary: Option<String>,
    pub(super) ticks: Vec<(i32, String)>,
}

pub(super) fn text_width(size: f64, text: &str) -> i32 {
    let font = FontDesc::new(FontFamily::Name(FONT_FAMILY), size, FontStyle::Normal);
    // The font is registered before any layout is made; 0 is a harmless fallback.
    font.box_size(text).map(|(w, _)| w as i32).unwrap_or(0)
}

pub(super) fn fmt_units(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.1}")
    } else if v.abs() >= 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// A "nice" tick step (1, 2 or 5 times a power of ten) giving about `target` intervals over
/// `span`, and the number of decimals its labels need.
pub(super) fn nice_step(span: f64, target: f64) -> (f64, usize) {
    let raw = span / target.max(1.0);
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|k| k * mag)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0 * mag);
    let decimals = (-(step.log10() + 1e-9).floor()).max(0.0) as usize;
    (step, decimals)
}

pub(super) fn kind_label(kind: Kind) -> &'static str {
    match kind {
        Kind::F => "F forward",
        Kind::B => "B backward",
        Kind::I => "I backward (input grad)",
        Kind::W => "W backward (weight grad)",
    }
}

impl Layout {
    pub(super) fn new(tl: &Timeline, opts: &GanttOptions) -> Result<Layout, GanttError> {
        if !(opts.ns_per_unit.is_finite() && opts.ns_per_unit > 0.0) {
            return Err(GanttError::InvalidOption {
                name: "ns_per_unit",
                reason: format!("must be a finite positive number, got {}", opts.ns_per_unit),
            });
        }
        ensure_font()?;

        let window = match opts.window_ns {
            Some((a, b)) if b <= a => {
                return Err(GanttError::InvalidOption {
                    name: "window_ns",
                    reason: format!("the window's end ({b} ns) must be after its start ({a} ns)"),
                })
            }
            w => w,
        };
        let p = tl.num_devices;
        let pipeline_p = pipeline_devices(tl, opts);
        // Room for the widest row label left of the plot.
        let margin_left_px = (0..p.min(4096))
            .map(|d| text_width(LABEL_FONT_PX, &row_label(opts, d)) + 16)
            .max()
            .unwrap_or(0)
            .max(MARGIN_LEFT_PX);
        let mut t_end_ns = tl.makespan_ns;
        let mut chunks = 1u32;
        let mut kinds_present = [false; 4];
        let mut any_transfer = false;
        let mut any_collective = false;
        // Which of the tensor-parallel, data-parallel and optimizer/other lanes have spans.
        let mut collective_present = [false; 3];
        let mut min_compute_ns = u64::MAX;
        let mut busy_ns: u128 = 0;
        let mut device_busy_ns = vec![0u128; p.min(1 << 20) as usize];
        // (shown duration, micro-batch) of the visible compute boxes: can they be labelled?
        let mut visible_compute: Vec<(u64, u32)> = Vec::new();
        for (index, s) in tl.spans.iter().enumerate() {
            if s.device >= p {
                return Err(GanttError::SpanDeviceOutOfRange {
                    index,
                    stream: s.stream.as_str(),
                    action: s.action.to_string(),
                    device: s.device,
                    num_devices: p,
                });
            }
            if s.end_ns < s.start_ns {
                return Err(GanttError::SpanEndsBeforeStart {
                    index,
                    stream: s.stream.as_str(),
                    action: s.action.to_string(),
                    start_ns: s.start_ns,
                    end_ns: s.end_ns,
                });
            }
            t_end_ns = t_end_ns.max(s.end_ns);
            match s.stream {
                Stream::Compute => {
                    chunks = chunks.max(s.action.stage / pipeline_p + 1);
                    kinds_present[kind_index(s.action.kind)] = true;
                    let d = s.end_ns - s.start_ns;
                    busy_ns += d as u128;
                    if let Some(b) = device_busy_ns.get_mut(s.device as usize) {
                        *b += d as u128;
                    }
                    if visible(s, window) {
                        // Inside a window, what is drawn of a box is what counts.
                        let shown = match window {
                            None => d,
                            Some((a, b)) => {
                                s.end_ns.min(b) - s.start_ns.max(a).min(s.end_ns.min(b))
                            }
                        };
                        if shown > 0 {
                            min_compute_ns = min_compute_ns.min(shown);
                            visible_compute.push((shown, s.action.microbatch));
                        }
                    }
                }
                Stream::Send | Stream::Recv => any_transfer = true,
                Stream::TensorParallel | Stream::DataParallel | Stream::Optimizer => {
                    any_collective = true;
                    let i = match s.stream {
                        Stream::TensorParallel => 0,
                        Stream::DataParallel => 1,
                        _ => 2,
                    };
                    collective_present[i] = true;
                }
            }
        }
        // A zero-length (or empty) timeline still gets a one-nanosecond axis: no division by 0.
        let (t0_ns, t_end_ns) = match window {
            Some((a, b)) => (a, b),
            None => (0, t_end_ns.max(1)),
        };
        let axis_ns = t_end_ns - t0_ns;
        let makespan_ns = tl.makespan_ns;

        let width_px = if opts.width_px > 0 {
            opts.width_px.clamp(MIN_WIDTH_PX, MAX_SIDE_PX)
        } else {
            let margins = (margin_left_px + MARGIN_RIGHT_PX) as f64;
            let plot = if min_compute_ns == u64::MAX {
                AUTO_PLOT_MIN_PX
            } else {
                (axis_ns as f64 / min_compute_ns as f64 * AUTO_MIN_BOX_PX)
                    .clamp(AUTO_PLOT_MIN_PX, AUTO_WIDTH_MAX_PX as f64 - margins)
            };
            (plot + margins).round() as u32
        };
        // Aggregate when fewer than half of the visible compute boxes have room for their
        // micro-batch number in the smallest label font.
        let aggregated = opts.kernel_view
            || match opts.aggregate {
                Aggregate::Always => true,
                Aggregate::Never => false,
                Aggregate::Auto => {
                    let plot_px =
                        (width_px as i32 - margin_left_px - MARGIN_RIGHT_PX).max(1) as f64;
                    let smallest = BOX_FONT_PX[BOX_FONT_PX.len() - 1];
                    // Label widths by number of digits (measured once per length).
                    let mut by_digits = [0i32; 11];
                    let labelled = visible_compute
                        .iter()
                        .filter(|&&(d, mb)| {
                            let text = mb.to_string();
                            let w = &mut by_digits[text.len().min(10)];
                            if *w == 0 {
                                *w = text_width(smallest, &text).max(1);
                            }
                            *w as f64 + BOX_TEXT_PAD_PX <= d as f64 / axis_ns as f64 * plot_px
                        })
                        .count();
                    2 * labelled < visible_compute.len()
                }
            };
        // Aggregated charts print each device's bubble right of its row: room for "100.0%".
        let margin_right_px = if aggregated && p > 0 {
            MARGIN_RIGHT_PX.max(text_width(LABEL_FONT_PX, "bubble 100.0%") + 16)
        } else {
            MARGIN_RIGHT_PX
        };
        let plot_x0 = margin_left_px;
        let plot_x1 = (width_px as i32 - margin_right_px).max(plot_x0 + 1);
        let device_bubble: Vec<f64> = if aggregated && makespan_ns > 0 {
            device_busy_ns
                .iter()
                .map(|&b| (1.0 - b as f64 / makespan_ns as f64).max(0.0))
                .collect()
        } else {
            Vec::new()
        };

        let mut y = MARGIN_TOP_PX;
        if !opts.title.is_empty() {
            y += TITLE_LINE_PX;
        }
        let summary = opts.show_summary.then(|| {
            let makespan = tl.makespan_ns as f64 / opts.ns_per_unit;
            let mut s = format!(
                "{p} device{} · makespan {} {}",
                if p == 1 { "" } else { "s" },
                fmt_units(makespan),
                opts.unit_label
            );
            if p > 0 && tl.makespan_ns > 0 {
                let total = p as f64 * tl.makespan_ns as f64;
                let bubble = (1.0 - busy_ns as f64 / total).max(0.0);
                s.push_str(&format!(" · bubble {:.1}%", bubble * 100.0));
            }
            if chunks > 1 {
                s.push_str(&format!(" · {chunks} chunks per device"));
            }
            if let Some((a, b)) = window {
                s.push_str(&format!(
                    " · window {} to {} {}",
                    fmt_units(a as f64 / opts.ns_per_unit),
                    fmt_units(b as f64 / opts.ns_per_unit),
                    opts.unit_label
                ));
            }
            s
        });
        if summary.is_some() {
            y += SUMMARY_LINE_PX;
        }
        y += HEADER_GAP_PX;
        let rows_y0 = y;
        let transfer_lanes = opts.show_transfers;
        let collective_lane = any_collective;
        let thin_lanes = 2 * i32::from(transfer_lanes) + i32::from(collective_lane);
        let lanes = if aggregated && p > COMPACT_ROWS_ABOVE_DEVICES {
            COMPACT_LANES
        } else {
            LANES
        };
        let row_pitch_px =
            lanes.compute_px + thin_lanes * (lanes.gap_px + lanes.comm_px) + lanes.row_gap_px;
        // An empty timeline keeps one row's height for its "no devices" note.
        let rows_h = row_pitch_px.saturating_mul(p.max(1).min(i32::MAX as u32) as i32);
        let axis_y = rows_y0.saturating_add(rows_h);

        // Ticks: about one per 90 px, labelled in the caller's unit.
        let plot_w = (plot_x1 - plot_x0).max(1);
        let t_end_units = axis_ns as f64 / opts.ns_per_unit;
        let t0_units = t0_ns as f64 / opts.ns_per_unit;
        if !t_end_units.is_finite() {
            return Err(GanttError::InvalidOption {
                name: "ns_per_unit",
                reason: format!(
                    "{} is too small: the time axis ({t_end_ns} ns) overflows",
                    opts.ns_per_unit
                ),
            });
        }
        let (step, decimals) = nice_step(t_end_units, plot_w as f64 / 90.0);
        let mut ticks = Vec::new();
        // Ticks at multiples of the step; inside a window the first is the first multiple at
        // or after its start (without one, 0).
        let first = (t0_units / step - 1e-9).ceil();
        for i in 0..=MAX_TICKS {
            let v = (first + i as f64) * step - t0_units;
            if v > t_end_units * (1.0 + 1e-9) {
                break;
            }
            let x = plot_x0 + (v / t_end_units * plot_w as f64).round() as i32;
            let label = v + t0_units;
            ticks.push((x, format!("{label:.decimals$}")));
        }

        // Legend entries: only what the chart shows, so the legend explains every colour in it.
        let mut items = Vec::new();
        if opts.kernel_view {
            items.push(LegendItem {
                swatches: vec![KERNEL_RGB],
                label: "GPU compute kernels (measured, merged)".to_string(),
                outlined: false,
            });
        } else if aggregated {
            aggregated_kind_items(&kinds_present, &mut items);
        }
        for kind in Kind::ALL {
            if !aggregated && kinds_present[kind_index(kind)] {
                let shown = chunks.min(8);
                let swatches = (0..shown).map(|c| compute_rgb(kind, c, chunks)).collect();
                let label = if chunks > 1 {
                    format!("{}, chunk 0 to {}", kind_label(kind), chunks - 1)
                } else {
                    kind_label(kind).to_string()
                };
                items.push(LegendItem {
                    swatches,
                    label,
                    outlined: false,
                });
            }
        }
        if chunks > 1 && !aggregated {
            items.push(LegendItem {
                swatches: Vec::new(),
                label: format!("chunk = stage / {pipeline_p}; lighter shade = later chunk"),
                outlined: false,
            });
        }
        if any_collective {
            let labels = if opts.kernel_view {
                [
                    "tensor-parallel collectives",
                    "data-parallel collectives",
                    "other communication (pipeline, context, expert, unattributed)",
                ]
            } else {
                [
                    "tensor-parallel collectives (inside compute)",
                    "data-parallel gradient reduction",
                    "optimizer step",
                ]
            };
            for ((rgb, label), present) in [TENSOR_PARALLEL_RGB, DATA_PARALLEL_RGB, OPTIMIZER_RGB]
                .into_iter()
                .zip(labels)
                .zip(collective_present)
            {
                // A measured timeline lists only the communication it has.
                if opts.kernel_view && !present {
                    continue;
                }
                items.push(LegendItem {
                    swatches: vec![rgb],
                    label: format!("{label} (thin lane: coll)"),
                    outlined: false,
                });
            }
        }
        if any_transfer && opts.show_transfers {
            items.push(LegendItem {
                swatches: vec![TRANSFER_RGB],
                label: "transfer (thin lanes: send, recv)".to_string(),
                outlined: false,
            });
        }
        if aggregated {
            let overall = if p > 0 && makespan_ns > 0 {
                let total = p as f64 * makespan_ns as f64;
                format!(
                    "{:.1}% overall",
                    (1.0 - busy_ns as f64 / total).max(0.0) * 100.0
                )
            } else {
                "none".to_string()
            };
            items.push(LegendItem {
                swatches: vec![BUBBLE_RGB],
                label: format!(
                    "idle (bubble): {overall}; right of each row: that device's bubble over the whole step"
                ),
                outlined: true,
            });
            items.push(LegendItem {
                swatches: Vec::new(),
                label: "aggregated: too many actions to label; colour = kind, no micro-batch numbers or chunk shades".to_string(),
                outlined: false,
            });
        } else {
            items.push(LegendItem {
                swatches: vec![(255, 255, 255)],
                label: "idle (bubble)".to_string(),
                outlined: true,
            });
        }
        if p > 0 && !aggregated {
            items.push(LegendItem {
                swatches: Vec::new(),
                label: "number in box = micro-batch".to_string(),
                outlined: false,
            });
        }

        // Flow the legend left to right under the axis, wrapping at the right margin.
        let legend_y0 = axis_y + AXIS_HEIGHT_PX;
        let (mut lx, mut ly) = (plot_x0, legend_y0);
        let mut legend = Vec::new();
        for item in items {
            let w = legend_item_width(&item);
            if lx > plot_x0 && lx + w > plot_x1 {
                lx = plot_x0;
                ly += LEGEND_ROW_PX;
            }
            legend.push(PlacedLegendItem { item, x: lx, y: ly });
            lx += w + 22;
        }
        let height = ly as i64 + LEGEND_ROW_PX as i64 + MARGIN_BOTTOM_PX as i64;
        let height_px = height.clamp(0, u32::MAX as i64) as u32;
        if height_px > MAX_SIDE_PX || width_px > MAX_SIDE_PX {
            return Err(GanttError::TooLarge {
                width_px,
                height_px,
                max_px: MAX_SIDE_PX,
            });
        }

        Ok(Layout {
            kernel_view: opts.kernel_view,
            width_px,
            height_px,
            plot_x0,
            plot_x1,
            rows_y0,
            row_pitch_px,
            transfer_lanes,
            collective_lane,
            axis_y,
            t0_ns,
            t_end_ns,
            window_ns: window,
            chunks,
            lanes,
            aggregated,
            device_bubble,
            makespan_ns,
            legend,
            summary,
            ticks,
        })
    }

    /// The pixel column of time `t_ns`, clamped to the plot (a window cuts spans at its edges).
    pub(super) fn x_of(&self, t_ns: u64) -> i32 {
        let w = (self.plot_x1 - self.plot_x0) as f64;
        let t = t_ns.clamp(self.t0_ns, self.t_end_ns) - self.t0_ns;
        self.plot_x0 + (t as f64 / (self.t_end_ns - self.t0_ns) as f64 * w).round() as i32
    }

    /// The unrounded width in pixels of a duration.
    pub(super) fn width_of(&self, duration_ns: u64) -> f64 {
        duration_ns as f64 / (self.t_end_ns - self.t0_ns) as f64
            * (self.plot_x1 - self.plot_x0) as f64
    }

    /// Top and bottom (inclusive) of a span's lane.
    pub(super) fn lane_y(&self, device: u32, stream: Stream) -> (i32, i32) {
        let top = self.rows_y0 + device as i32 * self.row_pitch_px;
        // Thin lanes under the compute lane: send, recv (if drawn), then collectives.
        let l = self.lanes;
        let thin = |i: i32| {
            (
                l.compute_px + i * (l.gap_px + l.comm_px) + l.gap_px,
                l.comm_px,
            )
        };
        let (off, h) = match stream {
            Stream::Compute => (0, l.compute_px),
            Stream::Send => thin(0),
            Stream::Recv => thin(1),
            Stream::TensorParallel | Stream::DataParallel | Stream::Optimizer => {
                thin(2 * i32::from(self.transfer_lanes))
            }
        };
        (top + off, top + off + h - 1)
    }
}

/// The label of row `d`.
pub(super) fn row_label(opts: &GanttOptions, d: u32) -> String {
    opts.row_labels
        .get(d as usize)
        .cloned()
        .unwrap_or_else(|| format!("device {d}"))
}

/// The `p` of `chunk = stage / p`.
pub(super) fn pipeline_devices(tl: &Timeline, opts: &GanttOptions) -> u32 {
    if opts.pipeline_devices > 0 {
        opts.pipeline_devices
    } else {
        tl.num_devices.max(1)
    }
}

pub(super) fn kind_index(kind: Kind) -> usize {
    match kind {
        Kind::F => 0,
        Kind::B => 1,
        Kind::I => 2,
        Kind::W => 3,
    }
}

/// The legend's kind entries of an aggregated chart: forward, backward and input-gradient
/// together (one colour), weight gradient.
fn aggregated_kind_items(present: &[bool; 4], items: &mut Vec<LegendItem>) {
    let [f, b, i, w] = *present;
    if f {
        items.push(LegendItem {
            swatches: vec![aggregated_rgb(Kind::F)],
            label: kind_label(Kind::F).to_string(),
            outlined: false,
        });
    }
    if b || i {
        let label = match (b, i) {
            (true, true) => "B backward, I backward (input grad)",
            (true, false) => kind_label(Kind::B),
            _ => kind_label(Kind::I),
        };
        items.push(LegendItem {
            swatches: vec![aggregated_rgb(Kind::B)],
            label: label.to_string(),
            outlined: false,
        });
    }
    if w {
        items.push(LegendItem {
            swatches: vec![aggregated_rgb(Kind::W)],
            label: kind_label(Kind::W).to_string(),
            outlined: false,
        });
    }
}

pub(super) fn legend_item_width(item: &LegendItem) -> i32 {
    let sw = item.swatches.len() as i32 * (SWATCH_PX + 2);
    let gap = if item.swatches.is_empty() { 0 } else { 4 };
    sw + gap + text_width(LEGEND_FONT_PX, &item.label)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_steps_are_1_2_5_multiples() {
        assert_eq!(nice_step(34.6, 10.0), (5.0, 0));
        assert_eq!(nice_step(1.0, 10.0), (0.1, 1));
        assert_eq!(nice_step(100.0, 5.0), (20.0, 0));
        let (step, decimals) = nice_step(0.003, 3.0);
        assert!((step - 0.001).abs() < 1e-12);
        assert_eq!(decimals, 3);
    }
}
