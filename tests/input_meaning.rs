//! Issue #42, "every input checked against its meaning" and "bounded time": inputs that parse
//! but mean nothing (a key given twice, zero experts, a window of 0 tokens, a link running at
//! 1e-5 of its bandwidth, a plan whose expert-parallel size does not divide its experts, a
//! schedule named after one algorithm holding another's order) exit 2 naming the key or field
//! and what is valid; the messages the issue found blaming the wrong flag or field name the
//! right one; commands that ran unbounded refuse, naming the flag and the largest valid value.

use serde_json::Value;
use std::path::PathBuf;
mod common;
use common::pplan;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pplan-meaning-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn write(name: &str, text: &str) -> String {
    let p = scratch(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

fn refused(args: &[&str], parts: &[&str]) {
    let (code, out, err) = pplan(args);
    assert_eq!(code, 2, "{args:?} accepted:\n{out}\n{err}");
    for p in parts {
        assert!(err.contains(p), "'{p}' not in: {err}");
    }
}

fn predict(model: &str) -> Vec<String> {
    [
        "predict",
        "--model",
        model,
        "--hardware",
        "h100-80gb",
        "--gpus",
        "8",
        "--tp",
        "1",
        "--pp",
        "1",
        "--global-batch",
        "64",
        "--micro-batch",
        "1",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn run_predict(model: &str, parts: &[&str]) {
    let args = predict(model);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    refused(&args, parts);
}

/// A small Hugging Face config with `extra` keys.
fn hf(extra: &str) -> String {
    format!(
        r#"{{"num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "intermediate_size": 1024, "vocab_size": 1000{extra}}}"#
    )
}

#[test]
fn a_key_given_twice_is_refused_in_every_input_file() {
    // Before: serde_json kept the last value silently (an 80-layer model read as asked twice).
    let f = write("dup.json", &hf(r#", "num_hidden_layers": 80"#));
    run_predict(&f, &["duplicate key `num_hidden_layers`", "line 1 column"]);
    let mut hw: Value = serde_json::from_str(&std::fs::read_to_string(hw_path()).unwrap()).unwrap();
    hw["sources"] = serde_json::json!({});
    let text =
        hw.to_string()
            .replacen("\"sources\":{}", "\"sources\":{\"a\":\"x\",\"a\":\"y\"}", 1);
    let f = write("dup-hw.json", &text);
    let mut args = predict("gpt-1.7b");
    args[4] = f;
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    refused(&args, &["duplicate key `sources.a`"]);
    let f = write(
        "dup-profile.json",
        r#"{"layers": [{"name": "l", "forward_ms": 1, "forward_ms": 2, "backward_ms": 2, "weight_bytes": 1, "activation_bytes": 1, "output_bytes": 1}]}"#,
    );
    refused(
        &["partition", "--profile", &f, "--stages", "1"],
        &["duplicate key `layers[0].forward_ms`"],
    );
    let plan = moe_plan();
    let text = std::fs::read_to_string(&plan).unwrap().replacen(
        "\"dtype\"",
        "\"dtype\": \"bf16\", \"dtype\"",
        1,
    );
    let f = write("dup-plan.json", &text);
    refused(
        &["emit", "--plan", &f, "--target", "megatron"],
        &["duplicate key `dtype`"],
    );
}

fn hw_path() -> String {
    format!("{}/hardware/h100-80gb.json", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn a_byte_order_mark_is_accepted() {
    // Before: a config.json saved with a BOM was "not JSON".
    let f = write("bom.json", &format!("\u{feff}{}", hf("")));
    let args = predict(&f);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (code, _, err) = pplan(&args);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn zero_or_inconsistent_moe_mla_and_window_keys_are_refused_by_name() {
    for (extra, key, valid) in [
        // Before: planned as a dense model.
        (
            r#", "num_local_experts": 0, "num_experts_per_tok": 2"#,
            "num_local_experts",
            "a positive number of experts",
        ),
        // Before: the message named the expert count, not the key.
        (
            r#", "num_local_experts": 8, "num_experts_per_tok": 9"#,
            "num_experts_per_tok",
            "at most the expert count",
        ),
        (
            r#", "n_routed_experts": 8, "num_experts_per_tok": 2, "first_k_dense_replace": 4"#,
            "first_k_dense_replace",
            "fewer dense layers than num_hidden_layers",
        ),
        (
            r#", "n_routed_experts": 8, "num_experts_per_tok": 2, "first_k_dense_replace": 1, "moe_layer_freq": 0"#,
            "moe_layer_freq",
            "a positive layer interval",
        ),
        (
            r#", "num_experts": 8, "num_experts_per_tok": 2, "decoder_sparse_step": 0"#,
            "decoder_sparse_step",
            "a positive layer interval",
        ),
        (r#", "kv_lora_rank": 0"#, "kv_lora_rank", "a positive rank"),
        (
            r#", "sliding_window": 0"#,
            "sliding_window",
            "a positive number of tokens",
        ),
        (
            r#", "sliding_window": 128, "layer_types": ["sliding_attention", "full_attention"]"#,
            "layer_types",
            "one entry per layer",
        ),
    ] {
        let f = write("moe.json", &hf(extra));
        run_predict(&f, &[&format!("field '{key}'"), valid]);
    }
    let mega = r#"{"num_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "ffn_hidden_size": 1024, "seq_length": 512, "vocab_size": 1000, "num_experts": 0}"#;
    let f = write("mega.json", mega);
    run_predict(&f, &["field 'num_experts'", "a positive number of experts"]);
}

#[test]
fn hardware_fields_are_range_checked() {
    let base: Value = serde_json::from_str(&std::fs::read_to_string(hw_path()).unwrap()).unwrap();
    for (section, key, value, want) in [
        // Before: silently taken as 1.0.
        ("network", "oversubscription", 0.5, "is below 1"),
        // Before: MFU 0.000.
        ("gpu", "peak_flops_per_s", 1e300, "valid 1e9 to 1e17 FLOP/s"),
        ("node", "nvlink_efficiency", 1e-5, "valid 0.01 to 1"),
        (
            "gpu",
            "hbm_bandwidth_bytes_per_s",
            1e20,
            "valid 1e8 to 1e14 bytes/s",
        ),
        ("node", "nic_latency_s", 50.0, "valid 0 to 1 s"),
    ] {
        let mut v = base.clone();
        v[section][key] = Value::from(value);
        let f = write("hw.json", &v.to_string());
        let mut args = predict("gpt-1.7b");
        args[4] = f;
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        refused(&args, &[&format!("field {section}.{key}"), want]);
    }
}

/// A MoE plan written by `pplan predict --output` (Mixtral 8x7B, ep 4).
fn moe_plan() -> String {
    let p = scratch("moe.plan.json");
    let (code, _, err) = pplan(&[
        "predict",
        "--model",
        "mixtral-8x7b",
        "--hardware",
        "h100-80gb",
        "--gpus",
        "16",
        "--tp",
        "2",
        "--pp",
        "2",
        "--ep",
        "4",
        "--global-batch",
        "64",
        "--micro-batch",
        "1",
        "--output",
        p.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    p.display().to_string()
}

#[test]
fn plan_files_are_checked_like_the_flags_that_made_them() {
    let plan: Value = serde_json::from_str(&std::fs::read_to_string(moe_plan()).unwrap()).unwrap();
    let emit = |v: &Value, parts: &[&str]| {
        let f = write("edited.plan.json", &v.to_string());
        refused(&["emit", "--plan", &f, "--target", "megatron"], parts);
    };
    // Before: `--expert-model-parallel-size 3` for 8 experts and `--moe-router-topk 9`.
    let mut v = plan.clone();
    v["parallelism"]["ep"] = Value::from(3);
    emit(
        &v,
        &[
            "field `parallelism.ep`",
            "must divide model.moe.num_experts = 8",
            "valid: 1, 2, 4, 8",
        ],
    );
    let mut v = plan.clone();
    v["model"]["moe"]["moe_router_topk"] = Value::from(9);
    emit(
        &v,
        &[
            "field `model.moe.moe_router_topk`",
            "valid: 1 to model.moe.num_experts = 8",
        ],
    );
    let mut v = plan.clone();
    v["parallelism"]["etp"] = Value::from(3);
    emit(
        &v,
        &["field `parallelism.etp`", "valid: 1 or parallelism.tp = 2"],
    );
    // Before: a 1F1B action list named gpipe ran as "gpipe".
    let mut v = plan.clone();
    v["schedule"]["name"] = Value::from("gpipe");
    emit(
        &v,
        &[
            "field `schedule.name`",
            "'gpipe' but schedule.devices is not its order",
            "device 0 position 2 is 0B0, gpipe has 0F2",
            "another name",
        ],
    );
    // The unedited plan, and the same order under a custom name, are accepted.
    let mut v = plan.clone();
    v["schedule"]["name"] = Value::from("my-order");
    for v in [&plan, &v] {
        let f = write("ok.plan.json", &v.to_string());
        let (code, _, err) = pplan(&["emit", "--plan", &f, "--target", "megatron"]);
        assert_eq!(code, 0, "{err}");
    }
}

#[test]
fn an_oversized_batch_names_the_global_batch() {
    // Before: "--gpus 8: ... raise --micro-batch".
    let mut args = predict("gpt-1.7b");
    args[12] = "1000000000000000".to_string();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    refused(
        &args,
        &[
            "--global-batch 1000000000000000:",
            "valid: --global-batch at most 80000000 at this --micro-batch and layout",
        ],
    );
}

#[test]
fn simulate_and_schedule_search_are_bounded() {
    // Before: 65 s and 4.1 GB.
    refused(
        &[
            "simulate",
            "--schedule",
            "1f1b",
            "--stages",
            "1000",
            "--microbatches",
            "100000",
            "--forward",
            "1",
            "--backward",
            "2",
        ],
        &[
            "--microbatches 100000 --stages 1000",
            "1f1b is too large to simulate: 200000000 actions, more than the 20000000 pplan simulates",
            "valid: --microbatches at most 10000 with --stages 1000",
        ],
    );
    // Before: 28 s with the default 4,000 moves; an explicit count over the work bound is
    // refused with the largest that fits, and the default shrinks to fit.
    refused(
        &[
            "schedule-search",
            "--stages",
            "64",
            "--microbatches",
            "512",
            "--forward",
            "1",
            "--backward-input",
            "1",
            "--backward-weight",
            "1",
            "--iterations",
            "4000",
        ],
        &[
            "--iterations 4000",
            "valid: --iterations at most 1017 for --stages 64 --microbatches 512",
        ],
    );
    assert_eq!(
        pplan::plan::schedule_search::default_iterations(64, 512),
        1017
    );
    assert_eq!(pplan::plan::schedule_search::default_iterations(4, 8), 4000);
}
