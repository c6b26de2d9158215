//! Predicted vs published throughput for Megatron-Bridge's pre-training rows (held out): the
//! DGX-H100 rows of the four models pplan bundles (`report::bridge_h100`) and Llama 3.1 405B
//! on DGX-GB200 and DGX-GB300 (`report::bridge_blackwell`).
//!
//! `cargo run --release --example validate_bridge` prints the Markdown tables used in
//! docs/validation.md.

use pplan::inputs::hardware::Hardware;
use pplan::report::bridge_blackwell::{blackwell_markdown, validate_bridge_blackwell};
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
    println!();
    match validate_bridge_blackwell() {
        Ok(rows) => print!("{}", blackwell_markdown(&rows)),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
