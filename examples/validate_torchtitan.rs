//! Predict torchtitan's published FSDP2 runs (Llama 2 13B/70B on 64 A100) and print the table
//! of docs/validation.md: `cargo run --release --example validate_torchtitan`.

use pplan::inputs::hardware::Hardware;
use pplan::report::torchtitan::{torchtitan_fsdp2_stack, torchtitan_markdown, validate_torchtitan};

fn main() {
    let hw = Hardware::bundled("a100-80gb").expect("bundled profile");
    match validate_torchtitan(&hw, torchtitan_fsdp2_stack()) {
        Ok(rows) => print!("{}", torchtitan_markdown(&rows, &hw.name)),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}
