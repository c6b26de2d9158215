//! Drawing a laid-out chart on a plotters backend.

use super::colours::*;
use super::font::FONT_FAMILY;
use super::layout::*;
use super::options::{GanttError, GanttOptions};
use crate::sim::{Span, Stream, Timeline};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

pub(super) fn draw_err<E: std::error::Error + Send + Sync>(
    e: DrawingAreaErrorKind<E>,
) -> GanttError {
    GanttError::Draw(e.to_string())
}

pub(super) fn style(size: f64, c: Rgb, h: HPos, v: VPos) -> TextStyle<'static> {
    TextStyle {
        font: FontDesc::new(FontFamily::Name(FONT_FAMILY), size, FontStyle::Normal),
        color: color(c).to_backend_color(),
        pos: Pos::new(h, v),
    }
}

pub(super) fn draw_chart<DB: DrawingBackend>(
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
        // Compact rows (large aggregated charts) have no room for the thin lanes' names.
        let named = layout.lanes.comm_px >= LANE_FONT_PX as i32;
        if layout.transfer_lanes && named {
            thin_lanes.push(("send", Stream::Send));
            thin_lanes.push(("recv", Stream::Recv));
        }
        if layout.collective_lane && named {
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

    if layout.aggregated {
        draw_aggregated(root, tl, layout)?;
    } else {
        draw_boxes(root, tl, opts, layout)?;
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

/// Every span as its own box: transfers and collectives first, then compute boxes (each a
/// fill, an outline and, when it fits, the micro-batch number).
fn draw_boxes<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    tl: &Timeline,
    opts: &GanttOptions,
    layout: &Layout,
) -> Result<(), GanttError> {
    let e = draw_err::<DB::ErrorType>;
    for s in tl.spans.iter().filter(|s| visible(s, layout.window_ns)) {
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
    for s in tl.spans.iter().filter(|s| visible(s, layout.window_ns)) {
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
        // width (of the part inside the window), so that equally long boxes are all labelled
        // alike whatever pixel rounding does to each one.
        let text = s.action.microbatch.to_string();
        let shown_ns = s.end_ns.min(layout.t_end_ns) - s.start_ns.max(layout.t0_ns).min(s.end_ns);
        let room = layout.width_of(shown_ns) - BOX_TEXT_PAD_PX;
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
    Ok(())
}

/// The aggregated form: idle time tinted, then per lane the spans merged into runs of one
/// colour (adjacent or overlapping in pixels), no outlines, no text; each device's bubble
/// percentage right of its row.
fn draw_aggregated<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    tl: &Timeline,
    layout: &Layout,
) -> Result<(), GanttError> {
    let e = draw_err::<DB::ErrorType>;
    // Idle time is whatever of the step the boxes leave uncovered.
    let idle_end = layout.makespan_ns.min(layout.t_end_ns);
    if idle_end > layout.t0_ns {
        let (x0, x1) = (layout.x_of(layout.t0_ns), layout.x_of(idle_end));
        for d in 0..tl.num_devices {
            let (top, bottom) = layout.lane_y(d, Stream::Compute);
            root.draw(&Rectangle::new(
                [(x0, top), (x1, bottom)],
                color(BUBBLE_RGB).filled(),
            ))
            .map_err(e)?;
        }
    }
    // (device, lane, start, end, colour) of every drawn span, in lane and time order.
    let lane_of = |s: &Span| match s.stream {
        Stream::Compute => 0u8,
        Stream::Send => 1,
        Stream::Recv => 2,
        _ => 3,
    };
    let mut spans: Vec<(u32, u8, u64, u64, Rgb)> = tl
        .spans
        .iter()
        .filter(|s| visible(s, layout.window_ns))
        .filter_map(|s| {
            let rgb = match s.stream {
                Stream::Compute if layout.kernel_view => KERNEL_RGB,
                Stream::Compute => aggregated_rgb(s.action.kind),
                Stream::Send | Stream::Recv if layout.transfer_lanes => TRANSFER_RGB,
                Stream::Send | Stream::Recv => return None,
                Stream::TensorParallel => TENSOR_PARALLEL_RGB,
                Stream::DataParallel => DATA_PARALLEL_RGB,
                Stream::Optimizer => OPTIMIZER_RGB,
            };
            Some((s.device, lane_of(s), s.start_ns, s.end_ns, rgb))
        })
        .collect();
    spans.sort_by_key(|&(d, lane, start, end, _)| (d, lane, start, end));
    let stream_of = |lane: u8| match lane {
        0 => Stream::Compute,
        1 => Stream::Send,
        2 => Stream::Recv,
        _ => Stream::TensorParallel,
    };
    // The run being extended: (device, lane, x0, x1, colour).
    let mut run: Option<(u32, u8, i32, i32, Rgb)> = None;
    let flush = |run: &Option<(u32, u8, i32, i32, Rgb)>| -> Result<(), GanttError> {
        if let Some((d, lane, x0, x1, rgb)) = *run {
            let (top, bottom) = layout.lane_y(d, stream_of(lane));
            root.draw(&Rectangle::new(
                [(x0, top), (x1, bottom)],
                color(rgb).filled(),
            ))
            .map_err(e)?;
        }
        Ok(())
    };
    for (d, lane, start, end, rgb) in spans {
        let x0 = layout.x_of(start);
        let x1 = layout.x_of(end).max(x0 + 1);
        match &mut run {
            Some((rd, rl, _, rx1, rc)) if *rd == d && *rl == lane && *rc == rgb && x0 <= *rx1 => {
                *rx1 = (*rx1).max(x1);
            }
            _ => {
                flush(&run)?;
                run = Some((d, lane, x0, x1, rgb));
            }
        }
    }
    flush(&run)?;
    let st = style(LABEL_FONT_PX, TEXT_RGB, HPos::Left, VPos::Center);
    for (d, bubble) in layout.device_bubble.iter().enumerate() {
        let (top, bottom) = layout.lane_y(d as u32, Stream::Compute);
        root.draw_text(
            &format!("{:.1}%", bubble * 100.0),
            &st,
            (layout.plot_x1 + 8, (top + bottom) / 2),
        )
        .map_err(e)?;
    }
    Ok(())
}

/// Pixel columns of a span, at least one pixel wide so that very short actions stay visible.
pub(super) fn span_x(layout: &Layout, s: &Span) -> (i32, i32) {
    let x0 = layout.x_of(s.start_ns);
    let x1 = layout.x_of(s.end_ns).max(x0 + 1);
    (x0, x1)
}
