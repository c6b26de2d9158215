//! The reliability probe: bad inputs run through the binary exit 2 with a message naming the
//! flag, file or field and what is valid; never a panic, never a hang. Regression tests for
//! the silent wrong outputs of issue 17 are named after them.

mod common;
use common::{json, pplan};
use std::path::PathBuf;

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pplan-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Run `args`; assert exit 2 and that stderr contains every one of `needles`.
fn refused(args: &[&str], needles: &[&str]) -> String {
    let (code, out, err) = pplan(args);
    assert_eq!(code, 2, "{args:?}: exit {code}, stdout {out}, stderr {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: stderr lacks '{n}': {err}");
    }
    err
}

const SIM: [&str; 7] = [
    "simulate",
    "--schedule",
    "1f1b",
    "--stages",
    "2",
    "--microbatches",
    "4",
];
const PREDICT: [&str; 7] = [
    "predict",
    "--model",
    "gpt-1.7b",
    "--gpus",
    "8",
    "--global-batch",
    "8",
];

/// Every numeric flag of every subcommand, given -1: exit 2 naming the flag (not clap's
/// "unexpected argument '-1'").
#[test]
fn negative_numbers_on_every_numeric_flag() {
    let profile = "examples/profiles/uneven-12.json";
    let cases: Vec<(Vec<&str>, &[&str])> = vec![
        (
            SIM.to_vec(),
            &[
                "--stages",
                "--microbatches",
                "--chunks",
                "--steps",
                "--forward",
                "--backward",
                "--backward-input",
                "--backward-weight",
                "--p2p",
            ],
        ),
        (
            vec![
                "generate",
                "--schedule",
                "1f1b",
                "--stages",
                "2",
                "--microbatches",
                "4",
            ],
            &["--stages", "--microbatches", "--chunks", "--steps"],
        ),
        (
            PREDICT.to_vec(),
            &[
                "--gpus",
                "--tp",
                "--pp",
                "--dp",
                "--global-batch",
                "--micro-batch",
                "--chunks",
                "--seq-len",
            ],
        ),
        (
            vec!["search", "--gpus", "8", "--model", "gpt-1.7b"],
            &[
                "--gpus",
                "--global-batch",
                "--seq-len",
                "--top",
                "--tp",
                "--pp",
                "--dp",
                "--micro-batch",
                "--chunks",
            ],
        ),
        (
            vec!["partition", "--profile", profile, "--stages", "2"],
            &[
                "--stages",
                "--memory-limit",
                "--weight-memory-factor",
                "--microbatches",
                "--devices",
                "--gpus-per-node",
                "--time-limit",
                "--p2p-gb-per-s",
            ],
        ),
        (
            vec![
                "calibrate",
                "--trace",
                "tests/data/measured/cpu-exec/1f1b.measured.json",
                "--plan",
                "tests/data/measured/cpu-exec/1f1b.plan.json",
                "--out-profile",
                "target/never-written.json",
            ],
            &["--skip-steps"],
        ),
        (
            vec!["schedule-search", "--stages", "2", "--microbatches", "4"],
            &[
                "--stages",
                "--microbatches",
                "--forward",
                "--backward-input",
                "--backward-weight",
                "--memory-limit",
                "--seed",
                "--iterations",
            ],
        ),
        (
            vec!["validate", "--predicted", "a.json", "--measured", "b.json"],
            &["--skip-steps"],
        ),
    ];
    for (base, flags) in cases {
        for flag in flags {
            for value in ["-1", "-0.5"] {
                let mut args = base.clone();
                args.extend([*flag, value]);
                let err = refused(&args, &[flag]);
                assert!(!err.contains("unexpected argument"), "{args:?}: {err}");
            }
        }
    }
    let err = refused(
        &[
            &PREDICT[..1],
            &["--model", "gpt-1.7b", "--gpus", "-1", "--global-batch", "8"],
        ]
        .concat(),
        &["--gpus"],
    );
    assert!(err.contains("must be a positive integer, got -1"), "{err}");
}

#[test]
fn zero_durations_and_contradictory_costs() {
    refused(
        &[
            &SIM[..],
            &[
                "--backward",
                "3",
                "--backward-input",
                "1",
                "--backward-weight",
                "1",
            ],
        ]
        .concat(),
        &[
            "--backward 3",
            "--backward-input",
            "--backward-weight",
            "= 2",
        ],
    );
    refused(
        &[&SIM[..], &["--backward", "2", "--backward-input", "3"]].concat(),
        &["--backward-input 3", "exceeds"],
    );
    // Consistent values, or the sum alone, are accepted.
    let (code, out, err) = pplan(
        &[
            &SIM[..],
            &[
                "--backward-input",
                "1",
                "--backward-weight",
                "2",
                "--format",
                "json",
            ],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["makespan"], 4.0 * 4.0 + 4.0);
    refused(&[&PREDICT[..], &["--tp", "0"]].concat(), &["--tp"]);
}

/// Silent wrong output 1: predict --schedule zbv/dualpipev reported chunks 1 while simulating 2.
#[test]
fn predict_zbv_reports_the_two_chunks_it_simulates() {
    for s in ["zbv", "dualpipev"] {
        let (code, out, err) = pplan(&[
            "predict",
            "--model",
            "gpt-1.7b",
            "--gpus",
            "8",
            "--pp",
            "4",
            "--global-batch",
            "16",
            "--schedule",
            s,
            "--format",
            "json",
        ]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(json(&out)["chunks"], 2, "{s}");
    }
    refused(
        &[
            "predict",
            "--model",
            "gpt-1.7b",
            "--gpus",
            "8",
            "--pp",
            "4",
            "--global-batch",
            "16",
            "--schedule",
            "zbv",
            "--chunks",
            "3",
        ],
        &["--chunks", "zbv"],
    );
}

/// Silent wrong output 6: simulate accepted interleaved 1F1B with m not divisible by p.
#[test]
fn simulate_and_predict_refuse_interleaving_that_search_refuses() {
    refused(
        &[
            "simulate",
            "--schedule",
            "interleaved-1f1b",
            "--stages",
            "4",
            "--microbatches",
            "6",
            "--chunks",
            "2",
        ],
        &["--microbatches", "--stages", "p = 4"],
    );
    refused(
        &[
            "predict",
            "--model",
            "gpt-1.7b",
            "--gpus",
            "4",
            "--pp",
            "4",
            "--global-batch",
            "6",
            "--chunks",
            "2",
        ],
        &["--pp", "interleaved-1f1b"],
    );
    // One chunk is plain 1F1B, which takes any m.
    assert_eq!(
        pplan(&[
            "simulate",
            "--schedule",
            "interleaved-1f1b",
            "--stages",
            "4",
            "--microbatches",
            "6"
        ])
        .0,
        0
    );
}

fn trace(name: &str) -> String {
    let path = tmp(name);
    let (code, _, err) = pplan(&[&SIM[..], &["--trace", path.to_str().unwrap()]].concat());
    assert_eq!(code, 0, "{err}");
    path.display().to_string()
}

/// Silent wrong outputs 2 and 3: "0.00% error" against a trace of zero durations, and
/// --skip-steps beyond a one-step trace ignored.
#[test]
fn validate_refuses_zero_durations_and_skips_past_the_trace() {
    let pred = trace("pred.json");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&pred).unwrap()).unwrap();
    for e in v["traceEvents"].as_array_mut().unwrap() {
        if e["ph"] == "X" {
            e["dur"] = 0.0.into();
        }
    }
    let zero = tmp("zero.json");
    std::fs::write(&zero, v.to_string()).unwrap();
    refused(
        &[
            "validate",
            "--predicted",
            &pred,
            "--measured",
            zero.to_str().unwrap(),
        ],
        &["lasts 0", "zero.json"],
    );
    refused(
        &[
            "validate",
            "--predicted",
            &pred,
            "--measured",
            &pred,
            "--skip-steps",
            "3",
        ],
        &["--skip-steps 3", "one step"],
    );
    assert_eq!(
        pplan(&[
            "validate",
            "--predicted",
            &pred,
            "--measured",
            &pred,
            "--skip-steps",
            "0"
        ])
        .0,
        0
    );
}

/// Silent wrong output 5: an unknown hardware name in a plan flowed into emitted files.
#[test]
fn a_plan_with_unknown_hardware_is_refused_when_read() {
    let plan = tmp("plan-unknown-hardware.json");
    let (code, _, err) = pplan(&[&PREDICT[..], &["--output", plan.to_str().unwrap()]].concat());
    assert_eq!(code, 0, "{err}");
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    v["hardware"] = "tpu-v9".into();
    std::fs::write(&plan, v.to_string()).unwrap();
    for target in ["megatron", "torchtitan", "csv", "executor"] {
        refused(
            &["emit", "--plan", plan.to_str().unwrap(), "--target", target],
            &["hardware", "tpu-v9", "h100-80gb"],
        );
    }
}

#[test]
fn chrome_trace_metadata_and_step_level_events() {
    let path = tmp("pt.json");
    let (code, _, err) = pplan(
        &[
            &PREDICT[..],
            &["--pp", "2", "--trace", path.to_str().unwrap()],
        ]
        .concat(),
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let sort: Vec<_> = events
        .iter()
        .filter(|e| e["name"] == "process_sort_index")
        .collect();
    assert!(!sort.is_empty());
    for e in sort {
        assert_eq!(e["args"]["sort_index"], e["pid"], "{e}");
        assert!(e["args"].get("name").is_none(), "{e}");
    }
    let step_level: Vec<_> = events
        .iter()
        .filter(|e| {
            e["name"] == "OPTIMIZER_STEP"
                || e["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with("REDUCE_GRAD"))
        })
        .collect();
    assert!(!step_level.is_empty());
    for e in step_level {
        assert!(
            e["args"].get("microbatch").is_none() && e["args"].get("kind").is_none(),
            "{e}"
        );
    }
}

#[test]
fn schedule_files_with_a_byte_order_mark_and_quotes() {
    let f = tmp("q.csv");
    std::fs::write(
        &f,
        "\u{feff}\"0F0\",\"0F1\",0B0,0B1\r\n1F0,1B0,1F1,\"1B1\"\r\n",
    )
    .unwrap();
    let (code, out, err) = pplan(&[
        "simulate",
        "--schedule",
        f.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["stages"], 2);
    std::fs::write(&f, "0F0,\"0B0\n").unwrap();
    refused(
        &["simulate", "--schedule", f.to_str().unwrap()],
        &["q.csv", "row 1", "field 2", "quote"],
    );
}

/// Issue 17: JSON type errors gave a line and column but not the field. Every JSON input
/// (hardware, layer profile, plan, model) now names the field's path; hardware value errors
/// name the user's file, not the bundled profile the file was copied from.
#[test]
fn json_type_errors_name_the_field_path() {
    let edit = |src: &str, name: &str, f: &dyn Fn(&mut serde_json::Value)| -> String {
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(src).unwrap()).unwrap();
        f(&mut v);
        let path = tmp(name);
        std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
        path.display().to_string()
    };
    let mut predict = PREDICT.to_vec();
    predict.extend(["--tp", "1", "--pp", "1", "--micro-batch", "1"]);

    // Hardware: a type error, then a value error.
    let hw = edit("hardware/a100-80gb.json", "hw-type.json", &|v| {
        v["gpu"]["peak_flops_per_s"] = "lots".into()
    });
    let mut args = predict.clone();
    args.extend(["--hardware", &hw]);
    refused(
        &args,
        &["--hardware", &hw, "field `gpu.peak_flops_per_s`", "line "],
    );
    let hw = edit("hardware/a100-80gb.json", "hw-value.json", &|v| {
        v["gpu"]["peak_flops_per_s"] = (-1).into()
    });
    let mut args = predict.clone();
    args.extend(["--hardware", &hw]);
    let err = refused(&args, &[&hw, "gpu.peak_flops_per_s", "positive"]);
    assert!(
        !err.contains("a100-80gb"),
        "names the bundled profile: {err}"
    );

    // Layer profile: a layer's field, by index.
    let profile = edit("examples/profiles/uneven-12.json", "prof.json", &|v| {
        v["layers"][2]["forward_ms"] = "slow".into()
    });
    let mut args = SIM.to_vec();
    args.extend(["--profile", &profile]);
    refused(
        &args,
        &["--profile", &profile, "field `layers[2].forward_ms`"],
    );

    // Plan: a layout field of the wrong type, and a missing one.
    let plan_path = tmp("plan-field-paths.json");
    let mut args = predict.clone();
    args.extend(["--output", plan_path.to_str().unwrap()]);
    let (code, _, err) = pplan(&args);
    assert_eq!(code, 0, "{err}");
    let plan_src = plan_path.display().to_string();
    let bad = edit(&plan_src, "plan-tp.json", &|v| {
        v["parallelism"]["tp"] = "1".into()
    });
    refused(
        &["emit", "--plan", &bad, "--target", "megatron"],
        &[&bad, "field `parallelism.tp`"],
    );
    let bad = edit(&plan_src, "plan-stage.json", &|v| {
        v["stages"][0].as_object_mut().unwrap().remove("num_layers");
    });
    refused(
        &["emit", "--plan", &bad, "--target", "megatron"],
        &[&bad, "field `stages[0].num_layers`", "missing field"],
    );

    // The context-parallel exchange a plan records: one of pplan's two.
    let bad = edit(&plan_src, "plan-cp-comm.json", &|v| {
        v["parallelism"]["cp_comm"] = "ring".into()
    });
    refused(
        &["emit", "--plan", &bad, "--target", "megatron"],
        &[&bad, "parallelism.cp_comm", "p2p, all-gather"],
    );
    // The cross-entropy's kernels: one of Megatron-Core's.
    let bad = edit(&plan_src, "plan-cross-entropy.json", &|v| {
        v["parallelism"]["cross_entropy_fusion"] = "liger".into()
    });
    refused(
        &["emit", "--plan", &bad, "--target", "megatron"],
        &[
            &bad,
            "parallelism.cross_entropy_fusion",
            "valid: off, native, te",
        ],
    );
    // Adam's state formats: not fp32 only with the precision-aware optimizer.
    let bad = edit(&plan_src, "plan-exp-avg.json", &|v| {
        v["parallelism"]["exp_avg_dtype"] = "bf16".into()
    });
    refused(
        &["emit", "--plan", &bad, "--target", "megatron"],
        &[
            &bad,
            "parallelism.exp_avg_dtype",
            "parallelism.use_precision_aware_optimizer true",
        ],
    );

    // Model (Megatron-style JSON): the key named.
    let model = tmp("model.json");
    std::fs::write(
        &model,
        r#"{"num_layers": "24", "hidden_size": 2304, "num_attention_heads": 24, "ffn_hidden_size": 9216, "seq_length": 2048, "vocab_size": 51200}"#,
    )
    .unwrap();
    let model = model.display().to_string();
    let args = [
        "predict",
        "--model",
        &model,
        "--gpus",
        "8",
        "--global-batch",
        "8",
        "--tp",
        "1",
        "--pp",
        "1",
        "--micro-batch",
        "1",
    ];
    refused(&args, &["--model", &model, "num_layers"]);
}

/// `--plan` on predict and simulate, and `pplan report`'s inputs (issue 44): a missing or
/// broken plan, a file that is not search output, an unreadable trace and an output folder
/// that does not exist each exit 2 naming the file and, where there is one, the field.
#[test]
fn plan_hub_and_report_bad_inputs() {
    let good = "tests/data/measured/cpu-exec/1f1b.plan.json";
    let page = tmp("hub.html");
    let page = page.to_str().unwrap();
    for cmd in ["predict", "simulate"] {
        refused(
            &[cmd, "--plan", "no-such-plan.json"],
            &["--plan", "no-such-plan.json"],
        );
    }
    refused(
        &["report", "--plan", "no-such-plan.json", "--output", page],
        &["no-such-plan.json"],
    );
    // A plan whose field has the wrong type names the field.
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(good).unwrap()).unwrap();
    v["parallelism"]["tp"] = "two".into();
    let bad_plan = tmp("hub-bad.plan.json");
    std::fs::write(&bad_plan, v.to_string()).unwrap();
    let bad_plan = bad_plan.to_str().unwrap();
    for args in [
        vec!["predict", "--plan", bad_plan],
        vec!["simulate", "--plan", bad_plan],
        vec!["report", "--plan", bad_plan, "--output", page],
    ] {
        refused(&args, &["hub-bad.plan.json", "parallelism.tp"]);
    }
    // Search results that are not `pplan search --format json` output.
    let not_json = tmp("hub-search-not-json.json");
    std::fs::write(&not_json, "results: none").unwrap();
    let no_results = tmp("hub-search-no-results.json");
    std::fs::write(&no_results, r#"{"evaluated": 3}"#).unwrap();
    let no_time = tmp("hub-search-no-time.json");
    std::fs::write(
        &no_time,
        r#"{"evaluated": 3, "feasible": 1, "results": [{"tp": 1}]}"#,
    )
    .unwrap();
    for (file, field) in [
        (&not_json, "not JSON"),
        (&no_results, "results"),
        (&no_time, "results[0].step_time_s"),
    ] {
        refused(
            &[
                "report",
                "--plan",
                good,
                "--search",
                file.to_str().unwrap(),
                "--output",
                page,
            ],
            &[
                "--search",
                file.file_name().unwrap().to_str().unwrap(),
                field,
            ],
        );
    }
    refused(
        &[
            "report",
            "--plan",
            good,
            "--search",
            "no-such-search.json",
            "--output",
            page,
        ],
        &["--search", "no-such-search.json"],
    );
    // An unreadable measured trace.
    refused(
        &[
            "report",
            "--plan",
            good,
            "--measured",
            "no-such-trace.json",
            "--output",
            page,
        ],
        &["--measured", "no-such-trace.json"],
    );
    // An output folder that does not exist.
    refused(
        &[
            "report",
            "--plan",
            good,
            "--output",
            "no-such-dir/report.html",
        ],
        &["--output", "no-such-dir/report.html"],
    );
    // simulate --plan takes the plan's micro-batches.
    refused(
        &["simulate", "--plan", good, "--microbatches", "4"],
        &["--microbatches", "the plan's"],
    );
}
