//! Predicted vs published Megatron-Core MoE throughput (Megatron-MoE-ModelZoo, Qwen3 on H100):
//! the page's main table, then its long-context table (held out).
//!
//! `cargo run --release --example validate_moe` prints the Markdown tables used in
//! docs/validation.md.

use pplan::inputs::hardware::Hardware;
use pplan::report::moe_long_context::{long_context_markdown, validate_long_context};
use pplan::report::moe_modelzoo::validate_moe_modelzoo;

fn main() {
    let hw = Hardware::bundled("h100-80gb").expect("bundled profile");
    match validate_moe_modelzoo(&hw) {
        Ok(r) => print!("{}", r.markdown()),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
    println!();
    match validate_long_context(&hw) {
        Ok(rows) => print!("{}", long_context_markdown(&rows)),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
