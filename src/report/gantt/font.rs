//! The embedded font: registered once, used to measure text (layout) and draw it (PNG).

use super::options::GanttError;
use plotters::prelude::*;
use std::sync::OnceLock;

/// DejaVu Sans (Bitstream Vera license, see `assets/fonts/LICENSE-DejaVu.txt`), embedded so that
/// PNG output needs no font library or installed font on the machine that renders it.
static FONT_TTF: &[u8] = include_bytes!("../../../assets/fonts/DejaVuSans.ttf");

/// The family name the embedded font is registered under. It is written verbatim into the SVG
/// `font-family` attribute, so it doubles as a CSS fallback list for SVG viewers.
pub(crate) const FONT_FAMILY: &str = "DejaVu Sans, Verdana, sans-serif";

/// Registers the embedded font with plotters once per process. Both backends need it: the
/// layout measures text with it, and the bitmap backend draws glyphs with it.
pub(crate) fn ensure_font() -> Result<(), GanttError> {
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
