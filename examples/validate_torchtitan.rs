//! Predict torchtitan's published FSDP2 runs (Llama 2 13B/70B on 64 A100) and print the table
//! of docs/validation.md, then the held-out Llama 3 rows of the same page:
//! `cargo run --release --example validate_torchtitan`.

use pplan::cost::Stack;
use pplan::inputs::hardware::Hardware;
use pplan::report::torchtitan::{
    torchtitan_markdown, validate_torchtitan, validate_torchtitan_llama3,
};

fn main() {
    let hw = Hardware::bundled("a100-80gb").expect("bundled profile");
    let both = validate_torchtitan(&hw, Stack::torchtitan()).and_then(|rows| {
        validate_torchtitan_llama3(&hw, Stack::torchtitan()).map(|held| (rows, held))
    });
    match both {
        Ok((rows, held)) => {
            print!("{}", torchtitan_markdown(&rows, &hw.name));
            println!("\nHeld out: torchtitan's Llama 3 table on the same 64 A100\n");
            print!("{}", torchtitan_markdown(&held, &hw.name));
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}
