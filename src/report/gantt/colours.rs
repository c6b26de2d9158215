//! The colour encoding (Okabe–Ito) and its helpers.

use crate::schedule::ir::Kind;
use plotters::prelude::*;

pub(super) type Rgb = (u8, u8, u8);

/// Okabe & Ito, "Color Universal Design" (2002): distinguishable with protanopia, deuteranopia
/// and tritanopia, and in greyscale by lightness for F (dark) vs B (light).
pub(super) fn kind_rgb(kind: Kind) -> Rgb {
    match kind {
        Kind::F => (0, 114, 178),   // blue
        Kind::B => (230, 159, 0),   // orange
        Kind::I => (0, 158, 115),   // bluish green
        Kind::W => (204, 121, 167), // reddish purple
    }
}

/// Measured GPU compute kernels (Okabe–Ito vermillion).
pub(super) const KERNEL_RGB: Rgb = (213, 94, 0);
pub(super) const TRANSFER_RGB: Rgb = (150, 150, 150);
/// Idle time in aggregated charts: a light red, so bubbles stand out from the white page.
pub(super) const BUBBLE_RGB: Rgb = (250, 212, 212);

/// The fill of a compute box in an aggregated chart: its kind's colour, with B and I (both
/// on the critical path of the backward) in one colour.
pub(super) fn aggregated_rgb(kind: Kind) -> Rgb {
    match kind {
        Kind::I => kind_rgb(Kind::B),
        k => kind_rgb(k),
    }
}
/// Step-level streams of `pplan predict` (Okabe–Ito yellow, sky blue, black).
pub(super) const TENSOR_PARALLEL_RGB: Rgb = (240, 228, 66);
pub(super) const DATA_PARALLEL_RGB: Rgb = (86, 180, 233);
pub(super) const OPTIMIZER_RGB: Rgb = (0, 0, 0);
pub(super) const FRAME_RGB: Rgb = (200, 200, 200);
pub(super) const GRID_RGB: Rgb = (236, 236, 236);
pub(super) const AXIS_RGB: Rgb = (60, 60, 60);
pub(super) const TEXT_RGB: Rgb = (20, 20, 20);
pub(super) const MUTED_TEXT_RGB: Rgb = (90, 90, 90);

pub(super) fn mix(a: Rgb, b: Rgb, t: f64) -> Rgb {
    let m = |x: u8, y: u8| (x as f64 + (y as f64 - x as f64) * t).round() as u8;
    (m(a.0, b.0), m(a.1, b.1), m(a.2, b.2))
}

/// The fill of a compute box: chunk 0 at full strength, later chunks progressively mixed with
/// white, up to 55 % for the last chunk (still clearly tinted, and darker than the bubbles).
pub(super) fn compute_rgb(kind: Kind, chunk: u32, chunks: u32) -> Rgb {
    let base = kind_rgb(kind);
    if chunks <= 1 || chunk == 0 {
        return base;
    }
    let t = 0.55 * chunk.min(chunks - 1) as f64 / (chunks - 1) as f64;
    mix(base, (255, 255, 255), t)
}

/// Black or white, whichever reads better on `bg` (by approximate luminance).
pub(super) fn text_on(bg: Rgb) -> Rgb {
    let lum = 0.2126 * bg.0 as f64 + 0.7152 * bg.1 as f64 + 0.0722 * bg.2 as f64;
    if lum > 150.0 {
        (0, 0, 0)
    } else {
        (255, 255, 255)
    }
}

pub(super) fn color(c: Rgb) -> RGBColor {
    RGBColor(c.0, c.1, c.2)
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
