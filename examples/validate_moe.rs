//! Predicted vs published Megatron-Core MoE throughput (Megatron-MoE-ModelZoo, Qwen3 on H100).
//!
//! `cargo run --release --example validate_moe` prints the Markdown table used in
//! docs/validation.md.

use pplan::inputs::hardware::Hardware;
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
}
