//! Every table docs/validation.md shows from a validation harness is what the harness prints
//! now: each table row and summary line of the reports (`cargo run --release --example
//! validate_*`) appears in the page word for word, so that a change to the model cannot leave
//! the page's figures behind. (Table 1's rows are formatted by its example itself and pinned by
//! `tests/megatron_table1.rs`; the prose quoting the figures is kept by hand.)

use pplan::cost::Stack;
use pplan::inputs::hardware::Hardware;
use pplan::report::bridge_blackwell::{blackwell_markdown, validate_bridge_blackwell};
use pplan::report::bridge_h100::{bridge_markdown, validate_bridge_h100};
use pplan::report::llama3_405b::{llama3_405b_markdown, validate_llama3_405b};
use pplan::report::llm_foundry::{foundry_markdown, validate_llm_foundry, FoundryTable};
use pplan::report::moe_long_context::{long_context_markdown, validate_long_context};
use pplan::report::moe_modelzoo::validate_moe_modelzoo;
use pplan::report::nemo::{nemo_24_07_stack, validate_nemo};
use pplan::report::nemo_long_context::{long_sequence_markdown, validate_long_sequence};
use pplan::report::torchtitan::{
    torchtitan_markdown, validate_torchtitan, validate_torchtitan_llama3,
};

fn page() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/validation.md")).unwrap()
}

/// The lines of `report` a reader compares: table rows and the summary lines.
fn assert_on_page(name: &str, report: &str, page: &str) {
    let lines: Vec<&str> = report
        .lines()
        .filter(|l| l.starts_with('|') || l.contains("MAE") || l.contains("mean absolute"))
        .collect();
    assert!(lines.len() >= 3, "{name}: {report}");
    let missing: Vec<&&str> = lines.iter().filter(|l| !page.contains(**l)).collect();
    assert!(
        missing.is_empty(),
        "{name}: docs/validation.md lacks {} line(s) the harness prints now:\n{}",
        missing.len(),
        missing
            .iter()
            .map(|l| l.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn h100_reports_are_the_pages_tables() {
    let page = page();
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let nemo = validate_nemo(&hw, nemo_24_07_stack()).unwrap();
    assert_on_page("NeMo 24.07", &nemo.markdown(), &page);
    let long = validate_long_sequence(&hw).unwrap();
    assert_on_page("NeMo long sequence", &long_sequence_markdown(&long), &page);
    let moe = validate_moe_modelzoo(&hw).unwrap();
    assert_on_page("ModelZoo", &moe.markdown(), &page);
    let lc = validate_long_context(&hw).unwrap();
    assert_on_page("ModelZoo long context", &long_context_markdown(&lc), &page);
    let bridge = validate_bridge_h100(&hw).unwrap();
    assert_on_page("Megatron-Bridge H100", &bridge_markdown(&bridge), &page);
    let llama = validate_llama3_405b(&hw).unwrap();
    assert_on_page("Llama 3 405B", &llama3_405b_markdown(&llama), &page);
}

#[test]
fn other_reports_are_the_pages_tables() {
    let page = page();
    let blackwell = validate_bridge_blackwell().unwrap();
    assert_on_page(
        "Megatron-Bridge Blackwell",
        &blackwell_markdown(&blackwell),
        &page,
    );
    let a100 = Hardware::bundled("a100-80gb").unwrap();
    let tt = validate_torchtitan(&a100, Stack::torchtitan()).unwrap();
    assert_on_page("torchtitan", &torchtitan_markdown(&tt, &a100.name), &page);
    let held = validate_torchtitan_llama3(&a100, Stack::torchtitan()).unwrap();
    assert_on_page(
        "torchtitan Llama 3",
        &torchtitan_markdown(&held, &a100.name),
        &page,
    );
    for table in [FoundryTable::H100LargeScale, FoundryTable::A100] {
        let hw = Hardware::bundled(table.hardware()).unwrap();
        let rows = validate_llm_foundry(table, &hw).unwrap();
        assert_on_page(
            table.hardware(),
            &foundry_markdown(&rows, table.hardware()),
            &page,
        );
    }
}
