//! Predicted vs published throughput for Meta's Llama 3 405B BF16 runs on H100 (Llama 3 paper,
//! Table 4): the held-out check of the H100 calibration in docs/validation.md.
//!
//! `cargo run --release --example validate_llama3_405b`

use pplan::inputs::hardware::Hardware;
use pplan::report::llama3_405b::{
    llama3_405b_markdown, validate_llama3_405b, LLAMA3_405B_ASSUMPTIONS,
};

fn main() {
    let hw = Hardware::bundled("h100-80gb").expect("bundled profile");
    match validate_llama3_405b(&hw) {
        Ok(rows) => {
            print!("{}", llama3_405b_markdown(&rows));
            println!("\nAssumed: {LLAMA3_405B_ASSUMPTIONS}.");
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
