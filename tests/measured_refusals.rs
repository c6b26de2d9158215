//! Issue #42, "impossible measured data refused or flagged": each physical rule of
//! docs/validate.md ("What is refused, what is flagged") on a trace, export or log that breaks
//! it, through `pplan validate --measured` as a user runs it: exit 2 with the file, the event
//! and the rule, or (a run still usable) a warning and a count in the JSON. The traces are small
//! Kineto-shaped files written here; the Nsight cases edit the synthetic export of
//! tests/data/measured/nsys/synthetic_pipeline.sql.

use serde_json::Value;
use std::path::{Path, PathBuf};
mod common;
use common::pplan;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pplan-refusals-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn write(name: &str, text: &str) -> String {
    let p = scratch(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// `pplan validate --measured FILES [extra]` must exit 2 with every part in its message, the
/// file named.
fn refused(files: &[&str], extra: &[&str], parts: &[&str]) {
    let mut args = vec!["validate", "--measured"];
    args.extend(files);
    args.extend(extra);
    let (code, out, err) = pplan(&args);
    assert_eq!(code, 2, "{files:?} accepted:\n{out}\n{err}");
    assert!(
        err.contains(files[0]) || parts.iter().any(|p| p.contains('/')),
        "{err}"
    );
    for p in parts {
        assert!(err.contains(p), "'{p}' not in: {err}");
    }
}

/// A Kineto trace of one rank: `distributedInfo` and events (one per line).
fn kineto(info: &str, events: &[&str]) -> String {
    format!(
        "{{\"schemaVersion\": 1, {info} \"traceEvents\": [\n{}\n]}}",
        events.join(",\n")
    )
}

const STEP: &str = r#"{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "ts": 100, "dur": 100, "pid": 1, "tid": 1}"#;
const LAUNCH7: &str = r#"{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 102, "dur": 1, "pid": 1, "tid": 1, "args": {"correlation": 7}}"#;
const GEMM7: &str = r#"{"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_nn", "ts": 110, "dur": 30, "pid": 0, "tid": 7, "args": {"correlation": 7}}"#;

#[test]
fn a_good_small_trace_is_read() {
    // The base every case below breaks one rule of.
    let f = write("good.json", &kineto("", &[STEP, LAUNCH7, GEMM7]));
    let (code, out, err) = pplan(&["validate", "--measured", &f, "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert!((v["breakdown"]["mean"]["gemm_s"].as_f64().unwrap() - 30e-6).abs() < 1e-12);
    assert_eq!(v["flagged"]["overlapping_kernels"], 0);
}

#[test]
fn a_kernel_longer_than_its_step_is_refused() {
    // 1,000 s inside a 100 µs step (the issue's 1,000 s kernel in a 0.62 s step).
    let long = r#"{"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_nn", "ts": 110, "dur": 1000000000, "pid": 0, "tid": 7, "args": {"correlation": 7}}"#;
    let f = write("long.json", &kineto("", &[STEP, LAUNCH7, long]));
    refused(
        &[&f],
        &[],
        &[
            "ampere_sgemm_128x64_nn",
            "lasts 1000.000000 s, longer than the step it starts in (step 3, 0.000100 s)",
        ],
    );
}

#[test]
fn a_kernel_listed_twice_is_refused() {
    // Counted twice, GEMM time would exceed compute time.
    let f = write("dup.json", &kineto("", &[STEP, LAUNCH7, GEMM7, GEMM7]));
    refused(&[&f], &[], &["ampere_sgemm_128x64_nn", "is listed twice"]);
}

#[test]
fn launches_sharing_a_correlation_id_are_refused() {
    // Before: every kernel tied to the last launch of the id, out of its step, bubble 1.0.
    let second = r#"{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 150, "dur": 1, "pid": 1, "tid": 1, "args": {"correlation": 7}}"#;
    let f = write("corr.json", &kineto("", &[STEP, LAUNCH7, second, GEMM7]));
    refused(
        &[&f],
        &[],
        &[
            "traceEvents[2]",
            "correlation id 7 is also the id of traceEvents[1]",
        ],
    );
}

#[test]
fn step_markers_that_are_not_numbers_are_refused() {
    for (name, bad) in [
        ("ProfilerStep#abc", "'abc'"),
        (
            "ProfilerStep#99999999999999999999999",
            "'99999999999999999999999'",
        ),
        ("ProfilerStep#-1", "'-1'"),
    ] {
        let step = STEP.replace("ProfilerStep#3", name);
        let f = write("step.json", &kineto("", &[&step, LAUNCH7, GEMM7]));
        refused(
            &[&f],
            &[],
            &[
                &format!("traceEvents[0] ('{name}')"),
                &format!("step number {bad} is not a non-negative integer"),
            ],
        );
    }
}

#[test]
fn invalid_ranks_are_refused() {
    for (info, want) in [
        (
            r#""distributedInfo": {"rank": -1},"#,
            "distributedInfo.rank is -1",
        ),
        (
            r#""distributedInfo": {"rank": "x"},"#,
            "distributedInfo.rank is \"x\"",
        ),
        (
            r#""distributedInfo": {"rank": 1e10},"#,
            "distributedInfo.rank is 10000000000.0: expected an integer from 0 to 4294967295",
        ),
        (
            r#""distributedInfo": {"rank": 4, "world_size": 4},"#,
            "rank is 4 but world_size is 4",
        ),
        (
            r#""distributedInfo": {"world_size": 0},"#,
            "world_size is 0",
        ),
    ] {
        let f = write("rank.json", &kineto(info, &[STEP, LAUNCH7, GEMM7]));
        refused(&[&f], &[], &[want]);
    }
}

#[test]
fn traces_of_another_run_than_the_plan_are_refused() {
    let plan = format!(
        "{}/tests/data/measured/cpu-exec/1f1b.plan.json",
        env!("CARGO_MANIFEST_DIR")
    );
    // The issue's case: HTA's 128-rank job beside a 2-GPU plan printed a +292 % error.
    let hta = format!(
        "{}/tests/data/measured/kineto/hta-sampled-rank-0.json.gz",
        env!("CARGO_MANIFEST_DIR")
    );
    refused(
        &[&hta],
        &["--plan", &plan],
        &["distributedInfo.world_size is 128, not the plan's 2 GPUs (tp 1 x cp 1 x pp 2 x dp 1)"],
    );
    // No world size, but a rank beyond the plan's GPUs.
    let f = write(
        "rank5.json",
        &kineto(
            r#""distributedInfo": {"rank": 5},"#,
            &[STEP, LAUNCH7, GEMM7],
        ),
    );
    refused(
        &[&f],
        &["--plan", &plan],
        &["rank 5 is beyond the plan's 2 GPUs", "(ranks 0 to 1)"],
    );
    // Two files of one run that disagree on its size.
    let a = write(
        "w2.json",
        &kineto(
            r#""distributedInfo": {"rank": 0, "world_size": 2},"#,
            &[STEP, LAUNCH7, GEMM7],
        ),
    );
    let b = write(
        "w4.json",
        &kineto(
            r#""distributedInfo": {"rank": 1, "world_size": 4},"#,
            &[STEP, LAUNCH7, GEMM7],
        ),
    );
    refused(
        &[&a, &b],
        &[],
        &["distributedInfo.world_size is 4, but", "says 2"],
    );
}

#[test]
fn kernels_outside_every_step_are_named_as_such() {
    // Before: "no GPU kernel events" although the trace has kernels.
    let early = r#"{"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_nn", "ts": 50, "dur": 5, "pid": 0, "tid": 7}"#;
    let f = write("outside.json", &kineto("", &[STEP, early]));
    refused(
        &[&f],
        &[],
        &[
            "1 GPU kernels, none launched inside a ProfilerStep window",
            "ProfilerStep#3",
        ],
    );
}

#[test]
fn kernels_overlapping_on_one_stream_are_flagged_and_counted() {
    // Two kernels on stream 7 overlapping by 20 µs: kept (the run is usable), warned, counted.
    let launch8 = r#"{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 103, "dur": 1, "pid": 1, "tid": 1, "args": {"correlation": 8}}"#;
    let k8 = r#"{"ph": "X", "cat": "kernel", "name": "void at::native::vectorized_elementwise_kernel<4>", "ts": 120, "dur": 30, "pid": 0, "tid": 7, "args": {"correlation": 8}}"#;
    let f = write(
        "overlap.json",
        &kineto("", &[STEP, LAUNCH7, launch8, GEMM7, k8]),
    );
    let (code, out, err) = pplan(&["validate", "--measured", &f, "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("1 pairs of kernels overlap on one CUDA stream"),
        "{err}"
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["flagged"]["overlapping_kernels"], 1);
    assert!(v["warnings"][0]
        .as_str()
        .unwrap()
        .contains("overlap on one CUDA stream"));
}

// ---------------------------------------------------------------- Nsight Systems

/// The synthetic export with `edit` (SQL) applied.
fn nsys_with(name: &str, edit: &str) -> String {
    let path = scratch(name);
    let _ = std::fs::remove_file(&path);
    let sql = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/measured/nsys/synthetic_pipeline.sql"),
    )
    .unwrap();
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute_batch(&sql).unwrap();
    c.execute_batch(edit).unwrap();
    path.display().to_string()
}

#[test]
fn impossible_nsight_records_are_refused() {
    let good = nsys_with("good.sqlite", "");
    let (code, _, err) = pplan(&["validate", "--measured", &good]);
    assert_eq!(code, 0, "{err}");
    // An end of 2^63 - 1 printed a 9.2e9 s step.
    let f = nsys_with(
        "huge.sqlite",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = 9223372036854775807 WHERE start = 12000;",
    );
    refused(&[&f], &[], &["more than a day", "valid: 0 to 86400 s"]);
    // End before start was dropped without a word.
    let f = nsys_with(
        "inverted.sqlite",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = 2000 WHERE start = 3000;",
    );
    refused(
        &[&f],
        &[],
        &[
            "table CUPTI_ACTIVITY_KIND_KERNEL",
            "ends (end 2000 ns) before it starts (start 3000 ns)",
        ],
    );
    // A negative device id made an empty rank.
    let f = nsys_with(
        "device.sqlite",
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = -1 WHERE deviceId = 1;",
    );
    refused(&[&f], &[], &["column deviceId: -1 is not a device number"]);
    // A missing StringIds table was reported as a missing id.
    let f = nsys_with("nostrings.sqlite", "DROP TABLE StringIds;");
    refused(
        &[&f],
        &[],
        &["but the export has no table StringIds (id, value) to look names up in"],
    );
    // A duplicated kernel row.
    let f = nsys_with(
        "dup.sqlite",
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE start = 3000;",
    );
    refused(&[&f], &[], &["is listed twice"]);
}

// ---------------------------------------------------------------- logs

const MEGATRON: &str = " [2025-09-05 16:08:25] iteration        2/    2000 | consumed samples:          256 | elapsed time per iteration (ms): 11182.0 | throughput per GPU (TFLOP/s/GPU): 128.2 | learning rate: 2.999993E-05 | global batch size:   128 | lm loss: 2.688647E+00 |";
const TITAN: &str = "step:  5  loss:  7.07623  grad_norm: 46.5000  memory: 66.91GiB(37.51%)  tps: 10,007  tflops: 313.36  mfu: 13.93%";

#[test]
fn impossible_log_values_are_refused() {
    // The base lines (Ling-V2's Megatron-LM log, torchtitan PR #2389's) are read.
    for (name, text) in [("m.log", MEGATRON), ("t.log", TITAN)] {
        let f = write(name, &format!("{text}\n"));
        let (code, _, err) = pplan(&["validate", "--measured", &f]);
        assert_eq!(code, 0, "{err}");
    }
    for (from, to, field, valid) in [
        (
            "11182.0",
            "-5.0",
            "elapsed time per iteration (ms)",
            "above 0 and below 86,400,000",
        ),
        (
            "11182.0",
            "1e308",
            "elapsed time per iteration (ms)",
            "above 0 and below 86,400,000",
        ),
        ("11182.0", "0", "elapsed time per iteration (ms)", "above 0"),
        (
            "128.2",
            "-3",
            "throughput per GPU (TFLOP/s/GPU)",
            "from 0 to 100,000",
        ),
        (
            "size:   128",
            "size:   0",
            "global batch size",
            "a positive integer",
        ),
    ] {
        let f = write("bad-m.log", &format!("{}\n", MEGATRON.replace(from, to)));
        refused(&[&f], &[], &["line 1", &format!("field '{field}'"), valid]);
    }
    for (from, to, field, valid) in [
        ("13.93%", "300%", "mfu", "from 0% to 100%"),
        ("13.93%", "-1%", "mfu", "from 0% to 100%"),
        ("66.91GiB", "-3GiB", "memory", "from 0 to 1 PiB"),
        ("66.91GiB", "1e308GiB", "memory", "from 0 to 1 PiB"),
        ("10,007", "-10", "tps", "from 0 to 10^9"),
        ("313.36", "1e9", "tflops", "from 0 to 100,000"),
    ] {
        let f = write("bad-t.log", &format!("{}\n", TITAN.replace(from, to)));
        refused(&[&f], &[], &["line 1", &format!("field '{field}'"), valid]);
    }
    // Megatron's memory line with a negative or absurd peak.
    for v in ["-1.0", "1e300"] {
        let f = write(
            "mem.log",
            &format!(
                "{MEGATRON}\n[Rank 0] (after 2 iterations) memory (MB) | allocated: 1.0 | max reserved: {v}\n"
            ),
        );
        refused(&[&f], &[], &["line 2", "field 'max reserved'", "1 PiB"]);
    }
}

#[test]
fn a_log_beyond_the_size_bound_is_refused_before_it_is_read() {
    // A sparse file of 1 GiB + 1 byte: the bound is checked on the size, nothing is read.
    let p = scratch("huge.log");
    let f = std::fs::File::create(&p).unwrap();
    f.set_len(pplan::measured::load::LOG_BYTES_MAX + 1).unwrap();
    drop(f);
    let name = p.display().to_string();
    refused(
        &[&name],
        &[],
        &["more than the 1073741824 (1 GiB) a training log is read up to"],
    );
    std::fs::remove_file(&p).unwrap();
}
