//! Rendering entry points (SVG, PNG, a file by extension) and the embedded font.

use super::draw::{draw_chart, draw_err};
use super::layout::Layout;
use super::options::{GanttError, GanttOptions};
use crate::sim::Timeline;
use plotters::backend::RGBPixel;
use plotters::prelude::*;
use std::path::Path;

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

pub(super) fn encode_png(pixels: &[u8], w: u32, h: u32) -> Result<Vec<u8>, GanttError> {
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

#[cfg(test)]
mod tests {
    // The drawing's boxes, checked on the SVG this file renders (draw.rs's own tests cannot
    // render without importing this file back).
    use super::super::colours::{kind_rgb, Rgb};
    use super::super::layout::COMPUTE_LANE_PX;
    use super::*;
    use crate::schedule::generators;
    use crate::schedule::ir::Kind;
    use crate::sim::{simulate, Costs, SimOptions, Stream, UnitCosts};

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
}
