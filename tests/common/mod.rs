//! Helpers shared by the tests that run the `pplan` binary.

#![allow(dead_code)]

use std::process::Command;

/// Run `pplan` from the repository root; returns (exit code, stdout, stderr).
pub fn pplan(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pplan"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run pplan");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Parse `pplan`'s `--format json` output, failing the test with the text if it is not JSON.
pub fn json(stdout: &str) -> serde_json::Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"))
}

/// The rows `pplan validate --runs FILE --format json` reports for a runs file (the
/// command must succeed).
pub fn validated_rows(file: &str) -> Vec<serde_json::Value> {
    let (code, out, err) = pplan(&["validate", "--runs", file, "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    match json(&out)["runs"].take() {
        serde_json::Value::Array(rows) => rows,
        other => panic!("no runs array: {other}"),
    }
}

/// The signed throughput error of row `id` among `rows` ([`validated_rows`]).
pub fn row_error(rows: &[serde_json::Value], id: &str) -> f64 {
    let r = rows.iter().find(|r| r["id"] == id).expect(id);
    r["error"].as_f64().expect("error")
}

/// Command-line arguments: `base` followed by `extra`.
pub fn with<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
    base.iter().chain(extra).copied().collect()
}

/// A small mixture-of-experts model for hand counts: Llama 3 8B's family with 4 layers,
/// h = 1024, 8 heads (8 KV heads), sequence 1024, vocabulary 1000, and 8 experts of 512 in
/// every layer, top-2, no shared expert.
pub fn small_moe() -> pplan::inputs::Model {
    let mut m = pplan::inputs::Model::preset("llama3-8b").unwrap();
    m.num_layers = 4;
    m.hidden_size = 1024;
    m.num_heads = 8;
    m.num_kv_heads = 8;
    m.seq_len = 1024;
    m.vocab_size = 1000;
    m.moe = Some(pplan::inputs::moe::Moe {
        num_experts: 8,
        top_k: 2,
        expert_ffn: 512,
        shared_ffn: 0,
        layers: vec![true; 4],
        groups: None,
    });
    m
}

/// A file of `hardware/measured/{gpu}/`, parsed (the GPU measurements the profiles rest on).
pub fn measured(gpu: &str, file: &str) -> serde_json::Value {
    let p = format!(
        "{}/hardware/measured/{gpu}/{file}",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}")))
        .unwrap()
}
