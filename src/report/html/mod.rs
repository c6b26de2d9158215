//! `pplan report`: one self-contained HTML page a team can read about a plan (docs/report.md):
//! the prediction's figures, the step's Gantt chart and each pipeline rank's memory as inline
//! SVG, a search's alternatives and why they lost, the emitted Megatron-LM and torchtitan
//! commands, and a measured run beside the prediction. Nothing on the page loads anything:
//! styles and the zoom script are inline. No IO.
//!
//! Files: [`page`] (the page's data and the template, `report.html.j2`), [`charts`] (the
//! Gantt chart's bounded view, the memory bars), [`search_results`] (`pplan search --format
//! json` read back).

pub mod charts;
pub mod page;
pub mod search_results;

pub use page::{render, ReportError, ReportInput};
pub use search_results::{read_search, SearchFileError, SearchSummary};
