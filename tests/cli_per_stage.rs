//! `pplan predict --per-stage` (each pipeline rank's layers, times and memory) and the
//! `mfu_precision_peak` table line: the ranks' largest peak is the reported peak, the fullest
//! rank's breakdown is the reported one, the ranks' layers are the model's, and without the
//! flags the outputs are what they were.

mod common;
use common::{json, pplan};

fn run(args: &[&str]) -> String {
    let (code, out, err) = pplan(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    out
}

/// The peak, the breakdown and the layers of `args`' prediction against its ranks.
fn check_ranks(args: &[&str], layers: u64) -> serde_json::Value {
    let plain = run(&[args, &["--format", "json"]].concat());
    let v = json(&run(&[args, &["--format", "json", "--per-stage"]].concat()));
    let stages = v["stages"].as_array().expect("a stages array");
    assert_eq!(
        stages.len() as u64,
        v["pp"].as_u64().unwrap(),
        "a row per rank"
    );
    let peak = |s: &serde_json::Value| s["peak_memory_bytes"].as_u64().unwrap();
    let fullest = stages.iter().max_by_key(|s| peak(s)).unwrap();
    assert_eq!(peak(fullest), v["peak_memory_bytes"].as_u64().unwrap());
    assert_eq!(fullest["memory_breakdown"], v["memory_breakdown"]);
    let sum: u64 = stages.iter().map(|s| s["layers"].as_u64().unwrap()).sum();
    assert_eq!(sum, layers, "the ranks hold every layer once");
    let held: usize = stages
        .iter()
        .map(|s| s["stages"].as_array().unwrap().len())
        .sum();
    assert_eq!(
        held as u64,
        v["pp"].as_u64().unwrap() * v["chunks"].as_u64().unwrap()
    );
    for s in stages {
        let sum = |k: &str| -> f64 {
            s[k].as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap())
                .sum()
        };
        assert_eq!(sum("stage_layers") as u64, s["layers"].as_u64().unwrap());
        assert!((sum("stage_forward_ms") - s["forward_ms"].as_f64().unwrap()).abs() < 1e-6);
        assert!((sum("stage_backward_ms") - s["backward_ms"].as_f64().unwrap()).abs() < 1e-6);
        assert!(s["forward_ms"].as_f64().unwrap() > 0.0);
        assert!(s["backward_ms"].as_f64().unwrap() > s["forward_ms"].as_f64().unwrap());
    }
    assert_eq!(stages[0]["role"], "first");
    assert!(stages.last().unwrap()["role"] == "last");
    // Without --per-stage: the same object without `stages`, byte for byte.
    let mut without = v.clone();
    without.as_object_mut().unwrap().remove("stages");
    assert_eq!(json(&plain), without);
    assert!(!plain.contains("\"stages\""));
    v
}

#[test]
fn interleaved_dense_ranks_add_up_to_the_prediction() {
    let args = [
        "predict",
        "--model",
        "gpt-18.4b",
        "--gpus",
        "64",
        "--tp",
        "8",
        "--pp",
        "4",
        "--global-batch",
        "64",
        "--micro-batch",
        "1",
        "--chunks",
        "2",
    ];
    let v = check_ranks(&args, 40);
    assert_eq!(v["stages"][0]["stages"], serde_json::json!([0, 4]));
    assert_eq!(v["stages"][0]["expert_params"], 0);
    let table = run(&[&args[..], &["--per-stage"]].concat());
    assert!(
        table.contains("per stage (each pipeline rank at its own peak"),
        "{table}"
    );
    assert!(!run(&args).contains("per stage"));
}

#[test]
fn moe_ranks_show_their_expert_parameters() {
    let args = [
        "predict",
        "--model",
        "mixtral-8x7b",
        "--hardware",
        "h100-80gb",
        "--gpus",
        "16",
        "--global-batch",
        "16",
        "--pp",
        "2",
        "--ep",
        "8",
    ];
    let v = check_ranks(&args, 32);
    for s in v["stages"].as_array().unwrap() {
        let (all, experts) = (
            s["params"].as_u64().unwrap(),
            s["expert_params"].as_u64().unwrap(),
        );
        assert!(experts > 0 && experts < all, "{s}");
    }
}

#[test]
fn fp8_runs_show_the_mfu_against_their_own_peak() {
    let args = [
        "predict",
        "--model",
        "llama3-8b",
        "--hardware",
        "h100-80gb",
        "--gpus",
        "8",
        "--tp",
        "8",
        "--global-batch",
        "8",
    ];
    let bf16 = run(&args);
    assert!(!bf16.contains("mfu_precision_peak"), "{bf16}");
    let fp8 = run(&[&args[..], &["--precision", "fp8"]].concat());
    let line = fp8
        .lines()
        .find(|l| l.starts_with("mfu_precision_peak"))
        .unwrap_or_else(|| panic!("{fp8}"));
    let v = json(&run(&[
        &args[..],
        &["--precision", "fp8", "--format", "json"],
    ]
    .concat()));
    let shown = format!("{:.3}", v["mfu_precision_peak"].as_f64().unwrap());
    assert!(line.contains(&shown) && line.contains("fp8"), "{line}");
}
