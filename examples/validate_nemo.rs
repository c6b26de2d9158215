//! Predicted vs published throughput for NVIDIA NeMo 24.07's DGX-H100 FP8 pre-training runs.
//!
//! `cargo run --release --example validate_nemo [-- --flops]`
//! prints the Markdown table used in docs/validation.md (every row with cp = 1 predicted on
//! `h100-80gb` with the row's exact layout and today's NeMo stack, `nemo_24_07_stack`), the
//! mean absolute error and the worst row; with `--flops`, also the FLOPs-per-token check of
//! NeMo's implied figures against pplan's model FLOPs. After it, the held-out long-sequence
//! table (Llama 2 7B, 4k-1,024k tokens, CP 1-32; `report::nemo_long_context`).

use pplan::inputs::hardware::Hardware;
use pplan::report::nemo::{flops_per_token_markdown, nemo_24_07_stack, validate_nemo};
use pplan::report::nemo_long_context::{long_sequence_markdown, validate_long_sequence};

fn main() {
    let flops = std::env::args().any(|a| a == "--flops");
    let hw = Hardware::bundled("h100-80gb").expect("bundled profile");
    let report = match validate_nemo(&hw, nemo_24_07_stack()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    print!("{}", report.markdown());
    if flops {
        println!();
        match flops_per_token_markdown(&hw) {
            Ok(t) => print!("{t}"),
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(1);
            }
        }
    }
    println!();
    match validate_long_sequence(&hw) {
        Ok(rows) => print!("{}", long_sequence_markdown(&rows)),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    }
}
