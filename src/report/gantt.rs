//! Gantt charts of a simulated [`Timeline`], as SVG or PNG.
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

use crate::schedule::ir::Kind;
use crate::sim::{Span, Stream, Timeline};
use plotters::backend::RGBPixel;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// DejaVu Sans (Bitstream Vera license, see `assets/fonts/LICENSE-DejaVu.txt`), embedded so that
/// PNG output needs no font library or installed font on the machine that renders it.
static FONT_TTF: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

/// The family name the embedded font is registered under. It is written verbatim into the SVG
/// `font-family` attribute, so it doubles as a CSS fallback list for SVG viewers.
const FONT_FAMILY: &str = "DejaVu Sans, Verdana, sans-serif";

/// No side of an image may exceed this many pixels (a guard against absurd allocations).
pub const MAX_SIDE_PX: u32 = 16_384;
/// The automatic width never exceeds this many pixels.
pub const AUTO_WIDTH_MAX_PX: u32 = 4_000;
/// An explicit `width_px` below this is raised to it, so that labels and legend still fit.
pub const MIN_WIDTH_PX: u32 = 360;

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

/// The size in pixels, `(width, height)`, that [`render_svg`] and [`render_png`] give for
/// these inputs.
pub fn chart_size_px(tl: &Timeline, opts: &GanttOptions) -> Result<(u32, u32), GanttError> {
    let layout = Layout::new(tl, opts)?;
    Ok((layout.width_px, layout.height_px))
}

/// Renders the timeline as a standalone SVG document.
pub fn render_svg(tl: &Timeline, opts: &GanttOptions) -> Result<String, GanttError> {
    let layout = Layout::new(tl, opts)?;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (layout.width_px, layout.height_px))
            .into_drawing_area();
        draw_chart(&root, tl, opts, &layout)?;
        root.present().map_err(draw_err)?;
    }
    Ok(out)
}

/// Renders the timeline as an 8-bit RGB PNG, returned as the bytes of the file.
pub fn render_png(tl: &Timeline, opts: &GanttOptions) -> Result<Vec<u8>, GanttError> {
    let layout = Layout::new(tl, opts)?;
    let (w, h) = (layout.width_px, layout.height_px);
    let mut pixels = vec![0u8; w as usize * h as usize * 3];
    {
        let backend = BitMapBackend::<RGBPixel>::with_buffer_and_format(&mut pixels, (w, h))
            .map_err(|e| GanttError::Draw(e.to_string()))?;
        let root = backend.into_drawing_area();
        draw_chart(&root, tl, opts, &layout)?;
        root.present().map_err(draw_err)?;
    }
    encode_png(&pixels, w, h)
}

/// Writes the chart to `path`, as SVG or PNG according to its extension (`.svg` or `.png`,
/// in any letter case).
pub fn write_file(tl: &Timeline, opts: &GanttOptions, path: &Path) -> Result<(), GanttError> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let bytes = match ext.as_deref() {
        Some("svg") => render_svg(tl, opts)?.into_bytes(),
        Some("png") => render_png(tl, opts)?,
        _ => {
            return Err(GanttError::UnsupportedExtension {
                path: path.to_path_buf(),
            })
        }
    };
    std::fs::write(path, bytes).map_err(|source| GanttError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn draw_err<E: std::error::Error + Send + Sync>(e: DrawingAreaErrorKind<E>) -> GanttError {
    GanttError::Draw(e.to_string())
}

fn encode_png(pixels: &[u8], w: u32, h: u32) -> Result<Vec<u8>, GanttError> {
    let png_err = |e: png::EncodingError| GanttError::Png(e.to_string());
    let mut out = Vec::new();
    {
        let mut encoder = png::Encoder::new(&mut out, w, h);
        encoder.set_color(png::ColorType::Rgb);
        encoder.set_depth(png::BitDepth::Eight);
        let mut writer = encoder.write_header().map_err(png_err)?;
        writer.write_image_data(pixels).map_err(png_err)?;
        writer.finish().map_err(png_err)?;
    }
    Ok(out)
}

/// Registers the embedded font with plotters once per process. Both backends need it: the
/// layout measures text with it, and the bitmap backend draws glyphs with it.
fn ensure_font() -> Result<(), GanttError> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font(FONT_FAMILY, FontStyle::Normal, FONT_TTF).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err(GanttError::Font)
    }
}

// ---------------------------------------------------------------------------------------------
// Colours

type Rgb = (u8, u8, u8);

/// Okabe & Ito, "Color Universal Design" (2002): distinguishable with protanopia, deuteranopia
/// and tritanopia, and in greyscale by lightness for F (dark) vs B (light).
fn kind_rgb(kind: Kind) -> Rgb {
    match kind {
        Kind::F => (0, 114, 178),   // blue
        Kind::B => (230, 159, 0),   // orange
        Kind::I => (0, 158, 115),   // bluish green
        Kind::W => (204, 121, 167), // reddish purple
    }
}

const TRANSFER_RGB: Rgb = (150, 150, 150);
/// Step-level streams of `pplan predict` (Okabe–Ito yellow, sky blue, black).
const TENSOR_PARALLEL_RGB: Rgb = (240, 228, 66);
const DATA_PARALLEL_RGB: Rgb = (86, 180, 233);
const OPTIMIZER_RGB: Rgb = (0, 0, 0);
const FRAME_RGB: Rgb = (200, 200, 200);
const GRID_RGB: Rgb = (236, 236, 236);
const AXIS_RGB: Rgb = (60, 60, 60);
const TEXT_RGB: Rgb = (20, 20, 20);
const MUTED_TEXT_RGB: Rgb = (90, 90, 90);

fn mix(a: Rgb, b: Rgb, t: f64) -> Rgb {
    let m = |x: u8, y: u8| (x as f64 + (y as f64 - x as f64) * t).round() as u8;
    (m(a.0, b.0), m(a.1, b.1), m(a.2, b.2))
}

/// The fill of a compute box: chunk 0 at full strength, later chunks progressively mixed with
/// white, up to 55 % for the last chunk (still clearly tinted, and darker than the bubbles).
fn compute_rgb(kind: Kind, chunk: u32, chunks: u32) -> Rgb {
    let base = kind_rgb(kind);
    if chunks <= 1 || chunk == 0 {
        return base;
    }
    let t = 0.55 * chunk.min(chunks - 1) as f64 / (chunks - 1) as f64;
    mix(base, (255, 255, 255), t)
}

/// Black or white, whichever reads better on `bg` (by approximate luminance).
fn text_on(bg: Rgb) -> Rgb {
    let lum = 0.2126 * bg.0 as f64 + 0.7152 * bg.1 as f64 + 0.0722 * bg.2 as f64;
    if lum > 150.0 {
        (0, 0, 0)
    } else {
        (255, 255, 255)
    }
}

fn color(c: Rgb) -> RGBColor {
    RGBColor(c.0, c.1, c.2)
}

// ---------------------------------------------------------------------------------------------
// Layout: every position is decided here, before a backend exists, so SVG and PNG agree.

const MARGIN_LEFT_PX: i32 = 84;
const MARGIN_RIGHT_PX: i32 = 28;
const MARGIN_TOP_PX: i32 = 12;
const TITLE_FONT_PX: f64 = 20.0;
const TITLE_LINE_PX: i32 = 28;
const SUMMARY_FONT_PX: f64 = 13.0;
const SUMMARY_LINE_PX: i32 = 22;
const HEADER_GAP_PX: i32 = 8;
const COMPUTE_LANE_PX: i32 = 26;
const COMM_LANE_PX: i32 = 9;
const LANE_GAP_PX: i32 = 2;
const ROW_GAP_PX: i32 = 12;
const LABEL_FONT_PX: f64 = 13.0;
const LANE_FONT_PX: f64 = 9.0;
/// Font sizes tried, largest first, for the micro-batch number inside a compute box.
const BOX_FONT_PX: [f64; 2] = [12.0, 10.0];
/// Horizontal room a micro-batch label needs besides its own width (both sides together).
const BOX_TEXT_PAD_PX: f64 = 5.0;
const AXIS_FONT_PX: f64 = 12.0;
const AXIS_HEIGHT_PX: i32 = 46;
const LEGEND_FONT_PX: f64 = 12.0;
const LEGEND_ROW_PX: i32 = 22;
const SWATCH_PX: i32 = 14;
const MARGIN_BOTTOM_PX: i32 = 10;
/// The automatic width aims at this many pixels for the shortest compute action: enough for
/// a two-digit micro-batch number.
const AUTO_MIN_BOX_PX: f64 = 26.0;
const AUTO_PLOT_MIN_PX: f64 = 800.0;
/// At most this many ticks on the time axis (a bound on the tick loop).
const MAX_TICKS: u32 = 200;

struct LegendItem {
    swatches: Vec<Rgb>,
    label: String,
    /// Swatches drawn as an outline only (the white "idle" entry).
    outlined: bool,
}

struct PlacedLegendItem {
    item: LegendItem,
    x: i32,
    y: i32,
}

struct Layout {
    width_px: u32,
    height_px: u32,
    plot_x0: i32,
    plot_x1: i32,
    rows_y0: i32,
    row_pitch_px: i32,
    /// Whether the transfer lanes (send, recv) are drawn.
    transfer_lanes: bool,
    /// Whether the collectives lane (tensor-parallel, data-parallel, optimizer) is drawn.
    collective_lane: bool,
    axis_y: i32,
    t_end_ns: u64,
    chunks: u32,
    legend: Vec<PlacedLegendItem>,
    summary: Option<String>,
    ticks: Vec<(i32, String)>,
}

fn text_width(size: f64, text: &str) -> i32 {
    let font = FontDesc::new(FontFamily::Name(FONT_FAMILY), size, FontStyle::Normal);
    // The font is registered before any layout is made; 0 is a harmless fallback.
    font.box_size(text).map(|(w, _)| w as i32).unwrap_or(0)
}

fn fmt_units(v: f64) -> String {
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
fn nice_step(span: f64, target: f64) -> (f64, usize) {
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

fn kind_label(kind: Kind) -> &'static str {
    match kind {
        Kind::F => "F forward",
        Kind::B => "B backward",
        Kind::I => "I backward (input grad)",
        Kind::W => "W backward (weight grad)",
    }
}

impl Layout {
    fn new(tl: &Timeline, opts: &GanttOptions) -> Result<Layout, GanttError> {
        if !(opts.ns_per_unit.is_finite() && opts.ns_per_unit > 0.0) {
            return Err(GanttError::InvalidOption {
                name: "ns_per_unit",
                reason: format!("must be a finite positive number, got {}", opts.ns_per_unit),
            });
        }
        ensure_font()?;

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
        let mut min_compute_ns = u64::MAX;
        let mut busy_ns: u128 = 0;
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
                    if d > 0 {
                        min_compute_ns = min_compute_ns.min(d);
                    }
                }
                Stream::Send | Stream::Recv => any_transfer = true,
                Stream::TensorParallel | Stream::DataParallel | Stream::Optimizer => {
                    any_collective = true
                }
            }
        }
        // A zero-length (or empty) timeline still gets a one-nanosecond axis: no division by 0.
        let t_end_ns = t_end_ns.max(1);

        let width_px = if opts.width_px > 0 {
            opts.width_px.clamp(MIN_WIDTH_PX, MAX_SIDE_PX)
        } else {
            let margins = (margin_left_px + MARGIN_RIGHT_PX) as f64;
            let plot = if min_compute_ns == u64::MAX {
                AUTO_PLOT_MIN_PX
            } else {
                (t_end_ns as f64 / min_compute_ns as f64 * AUTO_MIN_BOX_PX)
                    .clamp(AUTO_PLOT_MIN_PX, AUTO_WIDTH_MAX_PX as f64 - margins)
            };
            (plot + margins).round() as u32
        };
        let plot_x0 = margin_left_px;
        let plot_x1 = width_px as i32 - MARGIN_RIGHT_PX;

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
        let row_pitch_px = COMPUTE_LANE_PX + thin_lanes * (LANE_GAP_PX + COMM_LANE_PX) + ROW_GAP_PX;
        // An empty timeline keeps one row's height for its "no devices" note.
        let rows_h = row_pitch_px.saturating_mul(p.max(1).min(i32::MAX as u32) as i32);
        let axis_y = rows_y0.saturating_add(rows_h);

        // Ticks: about one per 90 px, labelled in the caller's unit.
        let plot_w = (plot_x1 - plot_x0).max(1);
        let t_end_units = t_end_ns as f64 / opts.ns_per_unit;
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
        for i in 0..=MAX_TICKS {
            let v = i as f64 * step;
            if v > t_end_units * (1.0 + 1e-9) {
                break;
            }
            let x = plot_x0 + (v / t_end_units * plot_w as f64).round() as i32;
            ticks.push((x, format!("{v:.decimals$}")));
        }

        // Legend entries: only what the chart shows, so the legend explains every colour in it.
        let mut items = Vec::new();
        for kind in Kind::ALL {
            if kinds_present[kind_index(kind)] {
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
        if chunks > 1 {
            items.push(LegendItem {
                swatches: Vec::new(),
                label: format!("chunk = stage / {pipeline_p}; lighter shade = later chunk"),
                outlined: false,
            });
        }
        if any_collective {
            for (rgb, label) in [
                (
                    TENSOR_PARALLEL_RGB,
                    "tensor-parallel collectives (inside compute)",
                ),
                (DATA_PARALLEL_RGB, "data-parallel gradient reduction"),
                (OPTIMIZER_RGB, "optimizer step"),
            ] {
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
        items.push(LegendItem {
            swatches: vec![(255, 255, 255)],
            label: "idle (bubble)".to_string(),
            outlined: true,
        });
        if p > 0 {
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
            width_px,
            height_px,
            plot_x0,
            plot_x1,
            rows_y0,
            row_pitch_px,
            transfer_lanes,
            collective_lane,
            axis_y,
            t_end_ns,
            chunks,
            legend,
            summary,
            ticks,
        })
    }

    fn x_of(&self, t_ns: u64) -> i32 {
        let w = (self.plot_x1 - self.plot_x0) as f64;
        self.plot_x0 + (t_ns as f64 / self.t_end_ns as f64 * w).round() as i32
    }

    /// The unrounded width in pixels of a duration.
    fn width_of(&self, duration_ns: u64) -> f64 {
        duration_ns as f64 / self.t_end_ns as f64 * (self.plot_x1 - self.plot_x0) as f64
    }

    /// Top and bottom (inclusive) of a span's lane.
    fn lane_y(&self, device: u32, stream: Stream) -> (i32, i32) {
        let top = self.rows_y0 + device as i32 * self.row_pitch_px;
        // Thin lanes under the compute lane: send, recv (if drawn), then collectives.
        let thin = |i: i32| {
            (
                COMPUTE_LANE_PX + i * (LANE_GAP_PX + COMM_LANE_PX) + LANE_GAP_PX,
                COMM_LANE_PX,
            )
        };
        let (off, h) = match stream {
            Stream::Compute => (0, COMPUTE_LANE_PX),
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
fn row_label(opts: &GanttOptions, d: u32) -> String {
    opts.row_labels
        .get(d as usize)
        .cloned()
        .unwrap_or_else(|| format!("device {d}"))
}

/// The `p` of `chunk = stage / p`.
fn pipeline_devices(tl: &Timeline, opts: &GanttOptions) -> u32 {
    if opts.pipeline_devices > 0 {
        opts.pipeline_devices
    } else {
        tl.num_devices.max(1)
    }
}

fn kind_index(kind: Kind) -> usize {
    match kind {
        Kind::F => 0,
        Kind::B => 1,
        Kind::I => 2,
        Kind::W => 3,
    }
}

fn legend_item_width(item: &LegendItem) -> i32 {
    let sw = item.swatches.len() as i32 * (SWATCH_PX + 2);
    let gap = if item.swatches.is_empty() { 0 } else { 4 };
    sw + gap + text_width(LEGEND_FONT_PX, &item.label)
}

// ---------------------------------------------------------------------------------------------
// Drawing

fn style(size: f64, c: Rgb, h: HPos, v: VPos) -> TextStyle<'static> {
    TextStyle {
        font: FontDesc::new(FontFamily::Name(FONT_FAMILY), size, FontStyle::Normal),
        color: color(c).to_backend_color(),
        pos: Pos::new(h, v),
    }
}

fn draw_chart<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    tl: &Timeline,
    opts: &GanttOptions,
    layout: &Layout,
) -> Result<(), GanttError> {
    let e = draw_err::<DB::ErrorType>;
    root.fill(&WHITE).map_err(e)?;
    let center_x = layout.width_px as i32 / 2;

    let mut y = MARGIN_TOP_PX;
    if !opts.title.is_empty() {
        let st = style(TITLE_FONT_PX, TEXT_RGB, HPos::Center, VPos::Center);
        root.draw_text(&opts.title, &st, (center_x, y + TITLE_LINE_PX / 2))
            .map_err(e)?;
        y += TITLE_LINE_PX;
    }
    if let Some(summary) = &layout.summary {
        let st = style(SUMMARY_FONT_PX, MUTED_TEXT_RGB, HPos::Center, VPos::Center);
        root.draw_text(summary, &st, (center_x, y + SUMMARY_LINE_PX / 2))
            .map_err(e)?;
    }

    // Grid lines behind the boxes, faint enough that idle time still reads as white.
    let grid = color(GRID_RGB);
    for (x, _) in &layout.ticks {
        root.draw(&PathElement::new(
            vec![(*x, layout.rows_y0 - 4), (*x, layout.axis_y)],
            grid,
        ))
        .map_err(e)?;
    }

    let p = tl.num_devices;
    if p == 0 {
        let st = style(LABEL_FONT_PX, MUTED_TEXT_RGB, HPos::Center, VPos::Center);
        let mid = (layout.plot_x0 + layout.plot_x1) / 2;
        root.draw_text(
            "(empty timeline: no devices)",
            &st,
            (mid, layout.rows_y0 + layout.row_pitch_px / 2),
        )
        .map_err(e)?;
    }

    // Row labels and lane frames.
    let label = style(LABEL_FONT_PX, TEXT_RGB, HPos::Right, VPos::Center);
    let lane_label = style(LANE_FONT_PX, MUTED_TEXT_RGB, HPos::Right, VPos::Center);
    let frame = color(FRAME_RGB);
    for d in 0..p {
        let (top, bottom) = layout.lane_y(d, Stream::Compute);
        root.draw(&Rectangle::new(
            [(layout.plot_x0, top - 1), (layout.plot_x1, bottom + 1)],
            frame,
        ))
        .map_err(e)?;
        root.draw_text(
            &row_label(opts, d),
            &label,
            (layout.plot_x0 - 8, (top + bottom) / 2),
        )
        .map_err(e)?;
        let mut thin_lanes = Vec::new();
        if layout.transfer_lanes {
            thin_lanes.push(("send", Stream::Send));
            thin_lanes.push(("recv", Stream::Recv));
        }
        if layout.collective_lane {
            thin_lanes.push(("coll", Stream::TensorParallel));
        }
        {
            for (name, t, b) in thin_lanes.into_iter().map(|(name, stream)| {
                let (t, b) = layout.lane_y(d, stream);
                (name, t, b)
            }) {
                root.draw_text(name, &lane_label, (layout.plot_x0 - 8, (t + b + 1) / 2))
                    .map_err(e)?;
                root.draw(&PathElement::new(
                    vec![(layout.plot_x0, (t + b) / 2), (layout.plot_x1, (t + b) / 2)],
                    color(GRID_RGB),
                ))
                .map_err(e)?;
            }
        }
    }

    // Transfers and collectives first, then compute boxes (each a fill, an outline and maybe
    // a label).
    for s in &tl.spans {
        let rgb = match s.stream {
            Stream::Send | Stream::Recv if layout.transfer_lanes => TRANSFER_RGB,
            Stream::TensorParallel => TENSOR_PARALLEL_RGB,
            Stream::DataParallel => DATA_PARALLEL_RGB,
            Stream::Optimizer => OPTIMIZER_RGB,
            _ => continue,
        };
        let (x0, x1) = span_x(layout, s);
        let (top, bottom) = layout.lane_y(s.device, s.stream);
        root.draw(&Rectangle::new(
            [(x0, top), (x1, bottom)],
            color(rgb).filled(),
        ))
        .map_err(e)?;
    }
    for s in &tl.spans {
        if s.stream != Stream::Compute {
            continue;
        }
        let chunk = s.action.stage / pipeline_devices(tl, opts);
        let fill = compute_rgb(s.action.kind, chunk, layout.chunks);
        let (x0, x1) = span_x(layout, s);
        let (top, bottom) = layout.lane_y(s.device, Stream::Compute);
        root.draw(&Rectangle::new(
            [(x0, top), (x1, bottom)],
            color(fill).filled(),
        ))
        .map_err(e)?;
        // A darker outline separates back-to-back boxes of the same kind.
        root.draw(&Rectangle::new(
            [(x0, top), (x1, bottom)],
            color(mix(fill, (0, 0, 0), 0.45)),
        ))
        .map_err(e)?;
        // The largest font in which the micro-batch number fits. Decided on the unrounded
        // width, so that equally long boxes are all labelled alike whatever pixel rounding
        // does to each one.
        let text = s.action.microbatch.to_string();
        let room = layout.width_of(s.end_ns - s.start_ns) - BOX_TEXT_PAD_PX;
        let size = BOX_FONT_PX
            .iter()
            .copied()
            .find(|&size| text_width(size, &text) as f64 <= room);
        if let Some(size) = size {
            let st = style(size, text_on(fill), HPos::Center, VPos::Center);
            root.draw_text(&text, &st, ((x0 + x1 + 1) / 2, (top + bottom + 1) / 2))
                .map_err(e)?;
        }
    }

    // Time axis.
    let axis = color(AXIS_RGB);
    let ay = layout.axis_y;
    root.draw(&PathElement::new(
        vec![(layout.plot_x0, ay), (layout.plot_x1, ay)],
        axis,
    ))
    .map_err(e)?;
    let tick_label = style(AXIS_FONT_PX, TEXT_RGB, HPos::Center, VPos::Top);
    for (x, text) in &layout.ticks {
        root.draw(&PathElement::new(vec![(*x, ay), (*x, ay + 5)], axis))
            .map_err(e)?;
        root.draw_text(text, &tick_label, (*x, ay + 8)).map_err(e)?;
    }
    let axis_title = style(AXIS_FONT_PX, MUTED_TEXT_RGB, HPos::Right, VPos::Top);
    root.draw_text(
        &format!("time ({})", opts.unit_label),
        &axis_title,
        (layout.plot_x1, ay + 26),
    )
    .map_err(e)?;

    // Legend.
    let legend_text = style(LEGEND_FONT_PX, TEXT_RGB, HPos::Left, VPos::Center);
    for placed in &layout.legend {
        let mid = placed.y + LEGEND_ROW_PX / 2;
        let mut x = placed.x;
        for &sw in &placed.item.swatches {
            let rect = [
                (x, mid - SWATCH_PX / 2),
                (x + SWATCH_PX, mid + SWATCH_PX / 2),
            ];
            root.draw(&Rectangle::new(rect, color(sw).filled()))
                .map_err(e)?;
            let outline = if placed.item.outlined {
                color(AXIS_RGB)
            } else {
                color(mix(sw, (0, 0, 0), 0.45))
            };
            root.draw(&Rectangle::new(rect, outline)).map_err(e)?;
            x += SWATCH_PX + 2;
        }
        if !placed.item.swatches.is_empty() {
            x += 4;
        }
        root.draw_text(&placed.item.label, &legend_text, (x, mid))
            .map_err(e)?;
    }
    Ok(())
}

/// Pixel columns of a span, at least one pixel wide so that very short actions stay visible.
fn span_x(layout: &Layout, s: &Span) -> (i32, i32) {
    let x0 = layout.x_of(s.start_ns);
    let x1 = layout.x_of(s.end_ns).max(x0 + 1);
    (x0, x1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::generators;
    use crate::sim::{simulate, Costs, SimOptions, UnitCosts};

    fn hex(c: Rgb) -> String {
        format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
    }

    /// `(height, fill)` of every `<rect>` in an SVG written by plotters.
    fn rects(svg: &str) -> Vec<(String, String)> {
        let attr = |tag: &str, name: &str| -> String {
            let key = format!(" {name}=\"");
            tag.find(&key)
                .map(|i| {
                    let rest = &tag[i + key.len()..];
                    rest[..rest.find('"').unwrap_or(rest.len())].to_string()
                })
                .unwrap_or_default()
        };
        svg.split("<rect")
            .skip(1)
            .map(|t| {
                let tag = &t[..t.find('>').unwrap_or(t.len())];
                (attr(tag, "height"), attr(tag, "fill"))
            })
            .collect()
    }

    #[test]
    fn one_box_per_compute_action_1f1b_p4_m8() {
        let s = generators::one_f_one_b(4, 8);
        let costs = Costs::uniform(
            4,
            4,
            UnitCosts {
                forward_ns: 1_000_000,
                backward_ns: 2_000_000,
                p2p_ns: 100_000,
                ..Default::default()
            },
        );
        let tl = simulate(&s, &costs, SimOptions::default())
            .unwrap()
            .timeline
            .unwrap();
        let svg = render_svg(&tl, &GanttOptions::default()).unwrap();
        let box_height = (COMPUTE_LANE_PX - 1).to_string();
        let count = |kind: Kind| {
            let fill = hex(kind_rgb(kind));
            rects(&svg)
                .iter()
                .filter(|(h, f)| *h == box_height && *f == fill)
                .count()
        };
        assert_eq!(count(Kind::F), 4 * 8);
        assert_eq!(count(Kind::B), 4 * 8);
        assert_eq!(count(Kind::I) + count(Kind::W), 0);
        let compute = tl
            .spans
            .iter()
            .filter(|s| s.stream == Stream::Compute)
            .count();
        assert_eq!(count(Kind::F) + count(Kind::B), compute);
    }

    #[test]
    fn later_chunks_are_lighter_and_chunk_zero_is_the_base_colour() {
        for kind in Kind::ALL {
            assert_eq!(compute_rgb(kind, 0, 2), kind_rgb(kind));
            let sum = |c: Rgb| c.0 as u32 + c.1 as u32 + c.2 as u32;
            assert!(sum(compute_rgb(kind, 1, 2)) > sum(compute_rgb(kind, 0, 2)));
            assert!(sum(compute_rgb(kind, 2, 3)) > sum(compute_rgb(kind, 1, 3)));
            assert_ne!(compute_rgb(kind, 1, 2), (255, 255, 255));
        }
    }

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
