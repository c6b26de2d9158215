//! Held out: llm-foundry's MPT runs on 128-512 H100 with PyTorch FSDP, against pplan
//! (docs/validation.md, "Held out: llm-foundry MPT with FSDP on H100").
//!
//!     cargo run --release --example validate_llm_foundry

use pplan::inputs::hardware::Hardware;
use pplan::report::llm_foundry::{foundry_markdown, validate_llm_foundry};

fn main() {
    let hw = Hardware::bundled("h100-80gb").expect("bundled profile");
    match validate_llm_foundry(&hw) {
        Ok(rows) => print!("{}", foundry_markdown(&rows)),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}
