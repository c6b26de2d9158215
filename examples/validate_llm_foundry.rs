//! Held out: llm-foundry's MPT runs with PyTorch FSDP on H100 (128-512 GPUs) and A100
//! (mostly one node), against pplan (docs/validation.md, "Held out: llm-foundry MPT with
//! PyTorch FSDP").
//!
//!     cargo run --release --example validate_llm_foundry

use pplan::inputs::hardware::Hardware;
use pplan::report::llm_foundry::{foundry_markdown, validate_llm_foundry, FoundryTable};

fn main() {
    for table in [FoundryTable::H100LargeScale, FoundryTable::A100] {
        let hw = Hardware::bundled(table.hardware()).expect("bundled profile");
        match validate_llm_foundry(table, &hw) {
            Ok(rows) => println!("{}", foundry_markdown(&rows, table.hardware())),
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(2);
            }
        }
    }
}
