//! `--tokens` and `--gpu-hour-price` on `predict` and `search`: the run's steps, days,
//! GPU-hours and cost follow from the predicted step time; without the flags the output is
//! unchanged; bad values exit 2 naming the flag.

mod common;
use common::pplan;

const PREDICT: &[&str] = &[
    "predict",
    "--model",
    "llama3-8b",
    "--hardware",
    "h100-80gb",
    "--gpus",
    "64",
    "--tp",
    "4",
    "--pp",
    "4",
    "--global-batch",
    "128",
    "--micro-batch",
    "1",
];

fn run(extra: &[&str]) -> (i32, String, String) {
    let mut args = PREDICT.to_vec();
    args.extend_from_slice(extra);
    pplan(&args)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

#[test]
fn predict_reports_days_gpu_hours_and_cost() {
    let (code, out, err) = run(&["--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let plain: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(plain.get("training_days").is_none());

    for tokens in ["15T", "15e12", "15000000000000"] {
        let (code, out2, err) = run(&[
            "--format",
            "json",
            "--tokens",
            tokens,
            "--gpu-hour-price",
            "2.5",
        ]);
        assert_eq!(code, 0, "{err}");
        // The prediction's fields come first, unchanged (`schema_version` closes both).
        let fields = out.trim_end().trim_end_matches(",\"schema_version\":1}");
        assert!(
            out2.starts_with(fields) && out2.trim_end().ends_with(",\"schema_version\":1}"),
            "{out2}"
        );
        let v: serde_json::Value = serde_json::from_str(&out2).unwrap();
        let step = v["step_time_s"].as_f64().unwrap();
        let steps = v["training_steps"].as_u64().unwrap();
        // 15e12 tokens / (128 sequences x 8192 tokens) per step, rounded up.
        assert_eq!(v["training_tokens"].as_u64().unwrap(), 15_000_000_000_000);
        assert_eq!(steps, 15_000_000_000_000u64.div_ceil(128 * 8192));
        let days = v["training_days"].as_f64().unwrap();
        assert!(close(days, steps as f64 * step / 86_400.0), "{days}");
        let gpu_hours = v["gpu_hours"].as_f64().unwrap();
        assert!(close(gpu_hours, 64.0 * days * 24.0), "{gpu_hours}");
        assert!(close(v["cost_usd"].as_f64().unwrap(), 2.5 * gpu_hours));
    }

    // Without a price: no cost field; the table has the run's lines.
    let (code, out, err) = run(&["--format", "json", "--tokens", "1T"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(v.get("cost_usd").is_none() && v.get("gpu_hours").is_some());
    let (code, out, _) = run(&["--tokens", "1T", "--gpu-hour-price", "2"]);
    assert_eq!(code, 0);
    for line in [
        "training_tokens      1000000000000 (",
        "training_days  ",
        "gpu_hours  ",
        "cost_usd  ",
    ] {
        assert!(out.contains(line), "missing {line:?}:\n{out}");
    }
}

#[test]
fn search_results_carry_the_run() {
    let (code, out, err) = pplan(&[
        "search",
        "--gpus",
        "8",
        "--model",
        "llama3-8b",
        "--hardware",
        "h100-80gb",
        "--global-batch",
        "64",
        "--top",
        "3",
        "--tokens",
        "300B",
        "--gpu-hour-price",
        "3",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let results = v["results"].as_array().unwrap();
    assert!(!results.is_empty());
    for r in results {
        let steps = r["training_steps"].as_u64().unwrap();
        assert_eq!(steps, 300_000_000_000u64.div_ceil(64 * 8192));
        let days = r["training_days"].as_f64().unwrap();
        assert!(close(
            days,
            steps as f64 * r["step_time_s"].as_f64().unwrap() / 86_400.0
        ));
        assert!(close(
            r["cost_usd"].as_f64().unwrap(),
            3.0 * r["gpu_hours"].as_f64().unwrap()
        ));
    }
    // Best first in step time is best first in days.
    let days: Vec<f64> = results
        .iter()
        .map(|r| r["training_days"].as_f64().unwrap())
        .collect();
    assert!(days.windows(2).all(|w| w[0] <= w[1]), "{days:?}");
}

#[test]
fn bad_run_flags_exit_2_naming_the_flag() {
    for (extra, needle) in [
        (&["--tokens", "-3"][..], "--tokens"),
        (&["--tokens", "lots"][..], "--tokens"),
        (&["--tokens", "0"][..], "--tokens"),
        (
            &["--tokens", "1T", "--gpu-hour-price", "-1"][..],
            "--gpu-hour-price",
        ),
        (
            &["--tokens", "1T", "--gpu-hour-price", "cheap"][..],
            "--gpu-hour-price",
        ),
        (&["--gpu-hour-price", "2"][..], "needs --tokens"),
    ] {
        let (code, _, err) = run(extra);
        assert_eq!(code, 2, "{extra:?}: {err}");
        assert!(err.contains(needle), "{extra:?}: {err}");
    }
}
