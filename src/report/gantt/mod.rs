//! Gantt charts of a simulated [`Timeline`](crate::sim::Timeline), as SVG or PNG.
//!
//! This module owns the picture of a timeline: the layout, the colour encoding and the drawing
//! (through plotters). Rendering is a pure function of `(timeline, options)`: no clock, no
//! system fonts (text is measured and, in PNGs, drawn with an embedded DejaVu Sans), no hash-map
//! iteration, so the same inputs give byte-identical SVG and PNG. The only IO is [`write_file`].
//!
//! The encoding, which the chart's legend repeats:
//! - one row per device, device 0 on top. A row is the compute lane (framed in light grey) with
//!   two thin lanes under it for the send and the receive stream;
//! - compute kinds in colours from the Okabe–Ito palette, which stays distinguishable under the
//!   common colour-vision deficiencies: `F` blue, `B` orange, `I` bluish green, `W` reddish purple;
//!   the micro-batch number is printed inside a box when it fits;
//! - with several chunks per device (interleaved, V-shaped schedules) chunk `c = stage / p` is
//!   drawn lighter the larger `c` is (chunk 0 at full strength);
//! - transfers in grey; idle time (bubbles) stays white.
//!
//! Charts with too many actions to label (fewer than half of the boxes have room for their
//! number: a 32-stage, 256-micro-batch run) are drawn in an aggregated form instead: runs of
//! one colour merged, colour by kind only, idle time tinted, each device's bubble percentage
//! right of its row and the overall one in the legend (docs/gantt.md). A time window
//! ([`GanttOptions::window_ns`]) draws only the actions that overlap it.
//!
//! Files: `options` (what to draw, errors), `render` (SVG, PNG, files, the embedded font),
//! `layout` (every position, the legend), `draw` (the drawing), `colours`, `font`.

mod colours;
mod draw;
pub(crate) mod font;
mod layout;
mod options;
mod render;

pub use options::{
    time_unit_for, Aggregate, GanttError, GanttOptions, AUTO_WIDTH_MAX_PX, MAX_SIDE_PX,
    MIN_WIDTH_PX,
};
pub use render::{chart_size_px, render_png, render_svg, write_file};
