//! Predicted vs published throughput for Megatron-Bridge's DGX-H100 pre-training rows of the
//! four models pplan bundles (held out; `report::bridge_h100`).
//!
//! `cargo run --release --example validate_bridge` prints the Markdown table used in
//! docs/validation.md.

use pplan::inputs::hardware::Hardware;
use pplan::report::bridge_h100::{bridge_markdown, validate_bridge_h100};

fn main() {
    let hw = Hardware::bundled("h100-80gb").expect("bundled profile");
    match validate_bridge_h100(&hw) {
        Ok(rows) => print!("{}", bridge_markdown(&rows)),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
