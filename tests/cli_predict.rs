//! `pplan predict`: the JSON contract, exit code 2 with the flag named on bad input, no panics.

mod common;
use common::pplan;

const GPT_1T: [&str; 14] = [
    "predict",
    "--model",
    "gpt-1t",
    "--hardware",
    "a100-80gb",
    "--gpus",
    "3072",
    "--tp",
    "8",
    "--pp",
    "64",
    "--global-batch",
    "3072",
    "--chunks",
];

#[test]
fn json_has_the_contract_fields() {
    let mut args = GPT_1T.to_vec();
    args.extend(["2", "--format", "json"]);
    let (code, out, err) = pplan(&args);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    for field in [
        "step_time_s",
        "tflops_per_gpu",
        "model_tflops_per_gpu",
        "mfu",
        "tokens_per_s",
        "bubble_fraction",
        "peak_memory_bytes",
        "fits",
    ] {
        assert!(v.get(field).is_some(), "missing {field}: {out}");
    }
    assert_eq!(out.trim().lines().count(), 1);
}

#[test]
fn model_files_in_both_formats() {
    for (file, gpus, tp) in [
        ("examples/models/gpt-1.7b-megatron.json", "8", "1"),
        ("examples/models/llama3-8b-config.json", "8", "8"),
    ] {
        let (code, out, err) = pplan(&[
            "predict",
            "--model",
            file,
            "--gpus",
            gpus,
            "--tp",
            tp,
            "--global-batch",
            "64",
            "--format",
            "json",
            "--sequence-parallel",
            "on",
            "--recompute",
            "selective",
        ]);
        assert_eq!(code, 0, "{file}: {err}");
        assert!(out.contains("\"fits\":true"), "{file}: {out}");
    }
}

#[test]
fn bad_input_exits_2_naming_the_flag() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--model", "gpt-9t", "--gpus", "8", "--global-batch", "8"],
            "--model",
        ),
        (
            &[
                "--model",
                "gpt-1.7b",
                "--gpus",
                "10",
                "--tp",
                "5",
                "--global-batch",
                "10",
            ],
            "--tp 5",
        ),
        (
            &[
                "--model",
                "gpt-1.7b",
                "--gpus",
                "8",
                "--tp",
                "2",
                "--dp",
                "2",
                "--global-batch",
                "8",
            ],
            "--gpus",
        ),
        (
            &[
                "--model",
                "gpt-1.7b",
                "--gpus",
                "8",
                "--global-batch",
                "16",
                "--micro-batch",
                "3",
            ],
            "--micro-batch 3",
        ),
        (
            &[
                "--model",
                "gpt-1.7b",
                "--gpus",
                "8",
                "--global-batch",
                "8",
                "--hardware",
                "tpu",
            ],
            "--hardware",
        ),
        (
            &[
                "--model",
                "gpt-1.7b",
                "--gpus",
                "8",
                "--global-batch",
                "8",
                "--recompute",
                "some",
            ],
            "--recompute",
        ),
        (
            &[
                "--model",
                "gpt-1.7b",
                "--gpus",
                "8",
                "--global-batch",
                "8",
                "--pp",
                "2",
                "--chunks",
                "13",
            ],
            "--chunks",
        ),
        (
            &[
                "--model",
                "tests/does-not-exist.json",
                "--gpus",
                "8",
                "--global-batch",
                "8",
            ],
            "--model",
        ),
    ];
    for (args, needle) in cases {
        let mut full = vec!["predict"];
        full.extend_from_slice(args);
        let (code, _, err) = pplan(&full);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

#[test]
fn hostile_numbers_never_panic() {
    let max = u64::MAX.to_string();
    for args in [
        vec![
            "--gpus",
            max.as_str(),
            "--tp",
            max.as_str(),
            "--global-batch",
            "8",
        ],
        vec![
            "--gpus",
            max.as_str(),
            "--pp",
            max.as_str(),
            "--tp",
            "2",
            "--global-batch",
            "8",
        ],
        vec!["--gpus", "8", "--global-batch", max.as_str()],
        vec![
            "--gpus",
            "1",
            "--global-batch",
            max.as_str(),
            "--micro-batch",
            max.as_str(),
        ],
        vec![
            "--gpus",
            "8",
            "--global-batch",
            "8",
            "--seq-len",
            max.as_str(),
        ],
        vec!["--gpus", "0", "--global-batch", "8"],
        vec![
            "--gpus",
            "8",
            "--global-batch",
            "8",
            "--seq-len",
            "16777216",
        ],
    ] {
        let mut full = vec!["predict", "--model", "gpt-1.7b"];
        full.extend(args.iter().copied());
        let (code, out, err) = pplan(&full);
        assert!(
            code == 0 || code == 2,
            "{full:?}: code {code}\n{out}\n{err}"
        );
        assert!(!err.contains("panicked"), "{full:?}: {err}");
    }
}

#[test]
fn weights_alone_over_80gb_do_not_fit() {
    // GPT-3 175B on one GPU: 350 GB of 16-bit weights.
    let (code, out, err) = pplan(&[
        "predict",
        "--model",
        "gpt3-175b",
        "--gpus",
        "1",
        "--global-batch",
        "1",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("\"fits\":false"), "{out}");
}

#[test]
fn predict_draws_a_gantt_chart_with_the_collectives_lane() {
    let path = std::env::temp_dir().join(format!("pplan-predict-{}.svg", std::process::id()));
    let (code, _, err) = pplan(&[
        "predict",
        "--model",
        "gpt-1.7b",
        "--gpus",
        "16",
        "--tp",
        "4",
        "--pp",
        "2",
        "--global-batch",
        "16",
        "--micro-batch",
        "1",
        "--gantt",
        path.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let svg = std::fs::read_to_string(&path).unwrap();
    for needle in [
        "tensor-parallel collectives",
        "data-parallel gradient reduction",
        "optimizer step",
        ">\ncoll\n<",
    ] {
        assert!(svg.contains(needle), "chart lacks {needle:?}");
    }
}
