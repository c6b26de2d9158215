//! `pplan validate --measured` on Nsight Systems exports and training logs, alone and beside a
//! plan, through the binary (the readers' own tests are in tests/measured_readers.rs).

use serde_json::Value;
mod common;
use common::pplan;

fn data(rel: &str) -> String {
    format!("{}/tests/data/measured/{rel}", env!("CARGO_MANIFEST_DIR"))
}

fn tmp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("pplan-valmeas-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn an_nsight_export_is_broken_down() {
    let f = data("nsys/saxpy-mpi-cuda_nsys_perlmutter0.sqlite");
    let (code, out, err) = pplan(&["validate", "--measured", &f, "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["source"], "nsys");
    let m = &v["breakdown"]["mean"];
    // Five saxpy kernels, none a GEMM, attention or collective.
    assert!(m["other_compute_s"].as_f64().unwrap() > 0.0);
    assert_eq!(m["gemm_s"].as_f64(), Some(0.0));
    assert_eq!(m["comm_s"].as_f64(), Some(0.0));
    assert!(m["memory_s"].as_f64().unwrap() > 0.0);
}

#[test]
fn a_torchtitan_log_beside_a_plan() {
    // A plan for 8 GPUs, data parallel 8, global batch 8 of 8192 tokens: 8192 tokens per rank.
    let plan = tmp("plan.json");
    let (code, _, err) = pplan(&[
        "predict",
        "--model",
        "llama3-8b",
        "--hardware",
        "h100-80gb",
        "--gpus",
        "8",
        "--tp",
        "1",
        "--pp",
        "1",
        "--global-batch",
        "8",
        "--micro-batch",
        "1",
        "--seq-len",
        "8192",
        "--zero",
        "3",
        "--output",
        plan.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let log = data("logs/torchtitan_pr1287.log");
    let (code, out, err) = pplan(&[
        "validate",
        "--measured",
        &log,
        "--plan",
        plan.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["source"], "torchtitan_log");
    let tps = v["log"]["tokens_per_s_per_gpu"].as_f64().unwrap();
    let metric = |name: &str| {
        v["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap_or_else(|| panic!("no metric {name}: {v}"))
            .clone()
    };
    // The step is derived from the plan's tokens per data-parallel rank and the logged tps.
    let step = metric("step_time");
    assert!((step["measured"].as_f64().unwrap() - 8.0 * 8192.0 / 8.0 / tps).abs() < 1e-9);
    assert!(step["predicted"].as_f64().unwrap() > 0.0 && step["error"].is_number());
    assert!(err.contains("the measured step time is derived"), "{err}");
    assert!(
        err.contains("FLOPs its own way") || err.contains("each side counts"),
        "{err}"
    );
    let mem = metric("peak_memory");
    assert!((mem["measured"].as_f64().unwrap() - 49.66 * (1u64 << 30) as f64).abs() < 1.0);
    assert_eq!(metric("mfu")["error_kind"], "difference");
}

#[test]
fn a_megatron_log_alone_and_bad_measurements() {
    let log = data("logs/megatron_mixtral_issue756.log");
    let (code, out, err) = pplan(&["validate", "--measured", &log]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("measured: Megatron-LM log"), "{out}");
    assert!(out.contains("TFLOP/s per GPU"), "{out}");
    // A log cannot be drawn; two logs, a log and a trace, a truncated export: exit 2.
    let svg = tmp("log.svg");
    let (code, _, err) = pplan(&[
        "validate",
        "--measured",
        &log,
        "--gantt",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("no GPU activity to draw"), "{err}");
    let (code, _, err) = pplan(&["validate", "--measured", &log, &log]);
    assert_eq!(code, 2);
    assert!(err.contains("one such file holds the whole run"), "{err}");
    let trace = data("kineto/hta-sampled-rank-0.json.gz");
    let (code, _, err) = pplan(&["validate", "--measured", &trace, &log]);
    assert_eq!(code, 2);
    assert!(
        err.contains("give one kind of measurement at a time"),
        "{err}"
    );
    let bytes = std::fs::read(data("nsys/saxpy-mpi-cuda_nsys_perlmutter0.sqlite")).unwrap();
    let cut = tmp("cut.sqlite");
    std::fs::write(&cut, &bytes[..bytes.len() / 3]).unwrap();
    let (code, _, err) = pplan(&["validate", "--measured", cut.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("cut.sqlite"), "{err}");
    let garbled = tmp("garbled.log");
    std::fs::write(&garbled, " iteration        1/     100 | consumed samples: 8 | elapsed time per iteration (ms): 12x4.5 | global batch size: 8 |\n").unwrap();
    let (code, _, err) = pplan(&["validate", "--measured", garbled.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("garbled.log"), "{err}");
}
