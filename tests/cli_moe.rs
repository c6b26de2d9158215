//! `pplan predict` and `pplan search` with mixture-of-experts models and flags, as a user runs
//! them: bad expert layouts and MoE flags exit 2 naming the flag and what is valid; the table
//! and JSON carry the expert layout and both parameter counts.

mod common;
use common::pplan;

fn refused(args: &[&str], needles: &[&str]) {
    let (code, _, stderr) = pplan(args);
    assert_eq!(code, 2, "{args:?}: {stderr}");
    for n in needles {
        assert!(stderr.contains(n), "{args:?}: '{n}' not in {stderr}");
    }
}

const PREDICT: [&str; 9] = [
    "predict",
    "--model",
    "mixtral-8x7b",
    "--hardware",
    "h100-80gb",
    "--gpus",
    "16",
    "--global-batch",
    "16",
];

#[test]
fn bad_expert_flags_exit_2_naming_the_flag() {
    refused(
        &[&PREDICT[..], &["--ep", "3"]].concat(),
        &["--ep 3", "valid --ep: 1, 2, 4, 8"],
    );
    refused(
        &[&PREDICT[..], &["--tp", "2", "--etp", "4"]].concat(),
        &["--etp 4", "1 or the tensor-parallel size 2"],
    );
    refused(
        &[&PREDICT[..], &["--moe-imbalance", "0.5"]].concat(),
        &["--moe-imbalance", "1 (perfectly balanced routing) to 64"],
    );
    refused(
        &[&PREDICT[..], &["--moe-dispatcher", "nccl"]].concat(),
        &["--moe-dispatcher", "alltoall, deepep"],
    );
    refused(
        &[
            "predict",
            "--model",
            "llama3-8b",
            "--gpus",
            "8",
            "--global-batch",
            "8",
            "--ep",
            "2",
        ],
        &["--ep 2", "dense model"],
    );
    refused(
        &["search", "--gpus", "8", "--model", "llama3-8b", "--ep", "2"],
        &["--ep", "dense"],
    );
    refused(
        &[
            "search",
            "--gpus",
            "16",
            "--model",
            "mixtral-8x7b",
            "--ep",
            "3",
        ],
        &["--ep 3", "valid --ep: 1, 2, 4, 8"],
    );
}

#[test]
fn predict_and_search_report_the_expert_layout() {
    let (code, table, stderr) = pplan(&[&PREDICT[..], &["--ep", "8"]].concat());
    assert_eq!(code, 0, "{stderr}");
    assert!(
        table.contains("ep=8 etp=1; params 46.70B total, 12.88B active (MFU counts active)"),
        "{table}"
    );
    let (code, out, stderr) = pplan(&[
        "search",
        "--gpus",
        "16",
        "--model",
        "mixtral-8x7b",
        "--hardware",
        "h100-80gb",
        "--global-batch",
        "64",
        "--top",
        "3",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let best = &v["results"][0];
    assert!(best["ep"].as_u64().is_some_and(|e| 8 % e == 0), "{best}");
    assert!(best["etp"].as_u64().is_some(), "{best}");
    assert_eq!(best["fits"], true);
    assert!(best["active_params"].as_u64() < best["params"].as_u64());
}

/// `--moe-layer-host-ms`: out-of-range values exit 2 naming the flag; the Megatron-Core default
/// (8.85 ms) lifts a small MoE configuration's step, 0 turns the floor off, and megatron-2021
/// has none unless given.
#[test]
fn moe_layer_host_floor_flag() {
    refused(
        &[&PREDICT[..], &["--moe-layer-host-ms", "-1"]].concat(),
        &["--moe-layer-host-ms -1", "0 (no host time) to 10000"],
    );
    refused(
        &[&PREDICT[..], &["--moe-layer-host-ms", "nan"]].concat(),
        &["--moe-layer-host-ms"],
    );
    let step = |extra: &[&str]| -> f64 {
        let args = [
            "predict",
            "--model",
            "qwen3-30b-a3b",
            "--hardware",
            "h100-80gb",
            "--gpus",
            "16",
            "--ep",
            "16",
            "--global-batch",
            "64",
            "--micro-batch",
            "1",
            "--seq-len",
            "1024",
            "--moe-imbalance",
            "1",
            "--format",
            "json",
        ];
        let (code, out, err) = pplan(&[&args[..], extra].concat());
        assert_eq!(code, 0, "{err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        v["step_time_s"].as_f64().unwrap()
    };
    let default = step(&[]);
    let nine = step(&["--moe-layer-host-ms", "8.85"]);
    let off = step(&["--moe-layer-host-ms", "0"]);
    assert_eq!(default, nine);
    assert!(default > 1.3 * off, "{default} vs {off}");
    let legacy = step(&["--stack", "megatron-2021"]);
    let legacy_floored = step(&["--stack", "megatron-2021", "--moe-layer-host-ms", "8.9"]);
    assert!(legacy_floored > legacy, "{legacy_floored} vs {legacy}");
}
