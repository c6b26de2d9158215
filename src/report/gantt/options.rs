//! The chart's options and errors.

use std::path::PathBuf;

/// No side of an image may exceed this many pixels (a guard against absurd allocations).
pub const MAX_SIDE_PX: u32 = 16_384;
/// The automatic width never exceeds this many pixels.
pub const AUTO_WIDTH_MAX_PX: u32 = 4_000;
/// An explicit `width_px` below this is raised to it, so that labels and legend still fit.
pub const MIN_WIDTH_PX: u32 = 360;

/// The time unit a chart of a step `longest_s` seconds long is labelled in, and nanoseconds per
/// unit: seconds from 1 s, milliseconds from 1 ms, else microseconds.
pub fn time_unit_for(longest_s: f64) -> (&'static str, f64) {
    if longest_s >= 1.0 {
        ("s", 1e9)
    } else if longest_s >= 1e-3 {
        ("ms", 1e6)
    } else {
        ("us", 1e3)
    }
}

/// How to draw a chart. `Default` gives milliseconds and an automatic width.
#[derive(Debug, Clone, PartialEq)]
pub struct GanttOptions {
    /// Drawn at the top; empty for none.
    pub title: String,
    /// The unit of the time axis, e.g. `"ms"`.
    pub unit_label: String,
    /// Nanoseconds per axis unit, e.g. `1e6` for milliseconds. Must be finite and positive.
    pub ns_per_unit: f64,
    /// Image width; `0` chooses it from the timeline (about 26 px for the shortest compute
    /// action, between 800 and [`AUTO_WIDTH_MAX_PX`]). Values below [`MIN_WIDTH_PX`] are raised.
    pub width_px: u32,
    /// Draw the thin send/receive lanes under each compute lane.
    pub show_transfers: bool,
    /// Print a summary line (devices, makespan, bubble fraction) under the title.
    pub show_summary: bool,
    /// One label per timeline row instead of "device N" (empty: the default labels). Used by
    /// the predicted-against-measured overlay, which draws two rows per device.
    pub row_labels: Vec<String>,
    /// Pipeline devices that stage numbers refer to, for chunk shading (`chunk = stage / p`);
    /// 0: the timeline's device count.
    pub pipeline_devices: u32,
    /// Draw only `(start_ns, end_ns)` (end after start): the time axis spans the window and
    /// only spans overlapping it are drawn, cut at its edges. `None`: the whole timeline.
    pub window_ns: Option<(u64, u64)>,
    /// When to draw the aggregated form of a chart with too many actions to label.
    pub aggregate: Aggregate,
    /// A measured GPU timeline rather than a schedule: compute boxes are merged GPU kernels in
    /// one colour (always aggregated), and the collective lane's colours name communication
    /// dimensions (tensor-parallel, data-parallel, other).
    pub kernel_view: bool,
}

/// The aggregated form of a chart: no per-box text or outlines, adjacent boxes of one colour
/// merged, colour by action kind only (chunks not shaded), idle time tinted, and each device's
/// bubble percentage right of its row. It keeps a 32-stage, 256-micro-batch chart legible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Aggregate {
    /// Aggregate when fewer than half of the drawn compute boxes have room for their
    /// micro-batch number (too many micro-batches to label).
    #[default]
    Auto,
    Always,
    Never,
}

impl Default for GanttOptions {
    fn default() -> Self {
        GanttOptions {
            title: "Pipeline schedule".to_string(),
            unit_label: "ms".to_string(),
            ns_per_unit: 1e6,
            width_px: 0,
            show_transfers: true,
            show_summary: true,
            row_labels: Vec::new(),
            pipeline_devices: 0,
            window_ns: None,
            aggregate: Aggregate::Auto,
            kernel_view: false,
        }
    }
}

/// Why a chart could not be drawn or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GanttError {
    #[error("cannot write a Gantt chart to '{}': unsupported extension (valid: .svg, .png)", path.display())]
    UnsupportedExtension { path: PathBuf },
    #[error("invalid Gantt option `{name}`: {reason}")]
    InvalidOption { name: &'static str, reason: String },
    #[error("timeline span {index} ({stream} {action}) is on device {device}, but the timeline has {num_devices} devices")]
    SpanDeviceOutOfRange {
        index: usize,
        stream: &'static str,
        action: String,
        device: u32,
        num_devices: u32,
    },
    #[error("timeline span {index} ({stream} {action}) ends at {end_ns} ns, before it starts at {start_ns} ns")]
    SpanEndsBeforeStart {
        index: usize,
        stream: &'static str,
        action: String,
        start_ns: u64,
        end_ns: u64,
    },
    #[error("the chart would be {width_px} x {height_px} px; each side is limited to {max_px} px (too many devices?)")]
    TooLarge {
        width_px: u32,
        height_px: u32,
        max_px: u32,
    },
    #[error("the embedded font could not be loaded")]
    Font,
    #[error("drawing the chart failed: {0}")]
    Draw(String),
    #[error("encoding the PNG failed: {0}")]
    Png(String),
    #[error("cannot write '{}': {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
