//! The stack switches a plan file records beside its layout (docs/report.md, "What a plan
//! records"): for each one at a value other than its default, `predict ... --output plan`
//! then `predict --plan plan` gives the same step time, peak memory and switch field as the
//! first prediction, and the switch changes the prediction (so the test would catch a plan
//! that dropped it); a plan without them writes none of their fields; a bad value in a plan
//! exits 2 naming the field; the Megatron-LM flags they emit are read back. No timed
//! assertions.

mod common;
use common::{json, pplan};
use std::path::PathBuf;

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pplan-switches-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn ok(args: &[&str]) -> serde_json::Value {
    let (code, out, err) = pplan(args);
    assert_eq!(code, 0, "{args:?}: exit {code}, stderr {err}");
    json(&out)
}

const DENSE: [&str; 16] = [
    "predict",
    "--model",
    "llama3-8b",
    "--hardware",
    "h100-80gb",
    "--gpus",
    "16",
    "--tp",
    "2",
    "--pp",
    "2",
    "--global-batch",
    "64",
    "--format",
    "json",
    "--micro-batch=1",
];

const MOE: [&str; 18] = [
    "predict",
    "--model",
    "mixtral-8x7b",
    "--hardware",
    "h100-80gb",
    "--gpus",
    "64",
    "--tp",
    "2",
    "--pp",
    "4",
    "--ep",
    "8",
    "--global-batch",
    "256",
    "--format",
    "json",
    "--micro-batch=1",
];

/// `predict base extra --output PLAN`, then `predict --plan PLAN`: both JSON objects and the
/// plan's `parallelism`.
fn round_trip(
    name: &str,
    base: &[&str],
    extra: &[&str],
) -> (serde_json::Value, serde_json::Value, serde_json::Value) {
    let plan = tmp(&format!("{name}.plan.json"));
    let first = ok(&[base, extra, &["--output", plan.to_str().unwrap()]].concat());
    let (code, out, err) = pplan(&[
        "predict",
        "--plan",
        plan.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{name}: {err}");
    assert!(!err.contains("overrides"), "{name}: {err}");
    let again = json(&out);
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    (first, again, p["parallelism"].clone())
}

/// (name, base flags, the switch's flags, its JSON and plan field, its value)
type Case<'a> = (
    &'a str,
    &'a [&'a str],
    Vec<&'a str>,
    &'a str,
    serde_json::Value,
);

#[test]
fn every_switch_predicts_again_from_its_plan() {
    let cases: Vec<Case> = vec![
        (
            "p2p-off",
            &DENSE,
            vec!["--overlap-p2p-comm", "off"],
            "overlap_p2p_comm",
            false.into(),
        ),
        (
            "p2p-on-2021",
            &DENSE,
            vec!["--stack", "megatron-2021", "--overlap-p2p-comm", "on"],
            "overlap_p2p_comm",
            true.into(),
        ),
        (
            "gaf-off",
            &DENSE,
            vec!["--gradient-accumulation-fusion", "off"],
            "gradient_accumulation_fusion",
            false.into(),
        ),
        (
            "gaf-on-torchtitan",
            &DENSE,
            vec![
                "--stack",
                "torchtitan",
                "--gradient-accumulation-fusion",
                "on",
            ],
            "gradient_accumulation_fusion",
            true.into(),
        ),
        (
            "reduce-fp32",
            &DENSE,
            vec!["--grad-reduce-dtype", "fp32"],
            "grad_reduce_dtype",
            "fp32".into(),
        ),
        (
            "reduce-bf16-torchtitan",
            &DENSE,
            vec!["--stack", "torchtitan", "--grad-reduce-dtype", "bf16"],
            "grad_reduce_dtype",
            "bf16".into(),
        ),
        (
            "fsdp-copies-on",
            &DENSE,
            vec!["--zero", "3", "--fsdp-copies", "on"],
            "fsdp_copies",
            true.into(),
        ),
        (
            "fsdp-copies-off-torchtitan",
            &DENSE,
            vec!["--stack", "torchtitan", "--fsdp-copies", "off"],
            "fsdp_copies",
            false.into(),
        ),
        (
            "no-reshard",
            &DENSE,
            vec!["--zero", "3", "--reshard-after-forward", "off"],
            "reshard_after_forward",
            false.into(),
        ),
        (
            "no-scatter-gather",
            &DENSE,
            // With sequence parallelism the activations are sharded already.
            vec![
                "--sequence-parallel",
                "off",
                "--tp-comm-overlap",
                "off",
                "--no-scatter-gather",
            ],
            "no_scatter_gather",
            true.into(),
        ),
        (
            "shared-gpu",
            &DENSE,
            vec!["--shared-gpu"],
            "shared_gpu",
            true.into(),
        ),
        (
            "imbalance",
            &MOE,
            vec!["--moe-imbalance", "1.5"],
            "moe_imbalance",
            1.5.into(),
        ),
        (
            "moe-overlap",
            &MOE,
            vec![
                "--moe-comm-overlap",
                "on",
                "--schedule",
                "interleaved-1f1b",
                "--chunks",
                "2",
            ],
            "moe_comm_overlap",
            true.into(),
        ),
        (
            "host-ms",
            &MOE,
            vec!["--moe-layer-host-ms", "2.5"],
            "moe_layer_host_ms",
            2.5.into(),
        ),
        (
            "host-ms-2021",
            &MOE,
            vec!["--stack", "megatron-2021", "--moe-layer-host-ms", "3.3"],
            "moe_layer_host_ms",
            3.3.into(),
        ),
    ];
    for (name, base, extra, field, value) in cases {
        let (first, again, par) = round_trip(name, base, &extra);
        assert_eq!(first[field], value, "{name}: predict's {field}");
        assert_eq!(par[field], value, "{name}: the plan's {field}");
        for key in [
            "step_time_s",
            "peak_memory_bytes",
            "stack",
            field,
            "tokens_per_s",
        ] {
            assert_eq!(again[key], first[key], "{name}: {key}");
        }
        // The switch is not at the value the plan's flags would give without it: the same
        // flags less the switch predict something else.
        let without: Vec<&str> = {
            let mut keep = Vec::new();
            let mut it = extra.iter().peekable();
            while let Some(&a) = it.next() {
                let is_switch = field.replace('_', "-") == a.trim_start_matches('-');
                if is_switch {
                    if it.peek().is_some_and(|v| !v.starts_with("--")) {
                        it.next();
                    }
                } else {
                    keep.push(a);
                }
            }
            keep
        };
        let plain = ok(&[base, &without[..]].concat());
        assert!(
            plain["step_time_s"] != first["step_time_s"]
                || plain["peak_memory_bytes"] != first["peak_memory_bytes"],
            "{name}: {field} changes nothing, so the test proves nothing"
        );
        assert!(plain.get(field).is_none(), "{name}: {plain}");
    }
}

/// A flag a stack preset's default is not renamed by: `--stack megatron-core
/// --gradient-accumulation-fusion off` is still megatron-core (it used to read as
/// megatron-2021, and a plan of it re-predicted without the asynchronous TP backward).
#[test]
fn a_switch_off_its_preset_keeps_the_preset_name() {
    let v = ok(&[&DENSE[..], &["--gradient-accumulation-fusion", "off"]].concat());
    assert_eq!(v["stack"], "megatron-core");
    let v = ok(&[
        &DENSE[..],
        &["--stack", "torchtitan", "--fsdp-copies", "off"],
    ]
    .concat());
    assert_eq!(v["stack"], "torchtitan");
    let v = ok(&[
        &DENSE[..],
        &["--stack", "megatron-2021", "--fsdp-copies", "on"],
    ]
    .concat());
    assert_eq!(v["stack"], "megatron-2021");
}

/// Every switch at its default: no new field in the prediction or the plan, so plans and
/// outputs written before the fields existed keep their bytes.
#[test]
fn defaults_write_none_of_the_fields() {
    const NEW: [&str; 11] = [
        "overlap_p2p_comm",
        "gradient_accumulation_fusion",
        "grad_reduce_dtype",
        "fsdp_copies",
        "moe_layer_host_ms",
        "reshard_after_forward",
        "moe_imbalance",
        "moe_comm_overlap",
        "no_scatter_gather",
        "shared_gpu",
        "profile",
    ];
    for (name, base, extra) in [
        ("dense", &DENSE[..], vec![]),
        ("moe", &MOE[..], vec![]),
        ("2021", &DENSE[..], vec!["--stack", "megatron-2021"]),
        ("torchtitan", &DENSE[..], vec!["--stack", "torchtitan"]),
        // The preset's own value, typed.
        (
            "typed-default",
            &DENSE[..],
            vec![
                "--overlap-p2p-comm",
                "on",
                "--gradient-accumulation-fusion",
                "on",
                "--grad-reduce-dtype",
                "bf16",
                "--fsdp-copies",
                "off",
                "--moe-layer-host-ms",
                "8.85",
                "--moe-imbalance",
                "1.25",
            ],
        ),
    ] {
        let (first, _, par) = round_trip(&format!("default-{name}"), base, &extra);
        for f in NEW {
            assert!(first.get(f).is_none(), "{name}: predict wrote {f}");
            assert!(par.get(f).is_none(), "{name}: the plan wrote {f}");
        }
    }
}

/// `--profile`: the plan records the layer profile as an absolute path and re-predicts with
/// it from any folder; a relative path is read against the plan's folder; a missing one
/// exits 2 naming `parallelism.profile`.
#[test]
fn a_profile_is_recorded_and_read_from_the_plan_folder() {
    let dir = tmp("profile");
    std::fs::create_dir_all(dir.join("plans")).unwrap();
    let layers: Vec<serde_json::Value> = (0..24)
        .map(|i| {
            serde_json::json!({"name": format!("l{i}"), "forward_ms": 1.0 + 0.01 * i as f64,
            "backward_ms": 2.0, "weight_bytes": 100_000_000u64, "activation_bytes": 50_000_000u64,
            "output_bytes": 8_000_000u64})
        })
        .collect();
    let profile = dir.join("prof.json");
    std::fs::write(
        &profile,
        serde_json::json!({"micro_batch": 1, "layers": layers}).to_string(),
    )
    .unwrap();
    let plan = dir.join("plans").join("p.json");
    let base = [
        "predict",
        "--model",
        "gpt-1.7b",
        "--gpus",
        "8",
        "--pp",
        "4",
        "--global-batch",
        "16",
        "--format",
        "json",
    ];
    let first = ok(&[
        &base[..],
        &[
            "--profile",
            profile.to_str().unwrap(),
            "--output",
            plan.to_str().unwrap(),
        ],
    ]
    .concat());
    assert_ne!(ok(&base)["step_time_s"], first["step_time_s"]);
    let text = std::fs::read_to_string(&plan).unwrap();
    let mut p: serde_json::Value = serde_json::from_str(&text).unwrap();
    let recorded = p["parallelism"]["profile"].as_str().unwrap().to_string();
    assert!(std::path::Path::new(&recorded).is_absolute(), "{recorded}");
    let again = |path: &PathBuf| {
        pplan(&[
            "predict",
            "--plan",
            path.to_str().unwrap(),
            "--format",
            "json",
        ])
    };
    let (code, out, err) = again(&plan);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["step_time_s"], first["step_time_s"]);
    assert_eq!(json(&out)["peak_memory_bytes"], first["peak_memory_bytes"]);
    // Relative: against the plan's folder, not the working directory (the repository).
    p["parallelism"]["profile"] = "../prof.json".into();
    let relative = dir.join("plans").join("relative.json");
    std::fs::write(&relative, p.to_string()).unwrap();
    let (code, out, err) = again(&relative);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["step_time_s"], first["step_time_s"]);
    // simulate --plan reads it too.
    let (code, _, err) = pplan(&["simulate", "--plan", relative.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    p["parallelism"]["profile"] = "not-there.json".into();
    let missing = dir.join("plans").join("missing.json");
    std::fs::write(&missing, p.to_string()).unwrap();
    for cmd in ["predict", "simulate"] {
        let (code, _, err) = pplan(&[cmd, "--plan", missing.to_str().unwrap()]);
        assert_eq!(code, 2, "{cmd}: {err}");
        assert!(
            err.contains("parallelism.profile") && err.contains("not-there.json"),
            "{cmd}: {err}"
        );
    }
}

/// A plan whose recorded switch holds a value no flag takes exits 2 naming the field and
/// what is valid.
#[test]
fn a_bad_switch_in_a_plan_exits_2_naming_the_field() {
    let plan = tmp("bad-base.plan.json");
    ok(&[&DENSE[..], &["--output", plan.to_str().unwrap()]].concat());
    let good: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    for (field, value, valid) in [
        ("grad_reduce_dtype", serde_json::json!("fp16"), "bf16, fp32"),
        ("moe_imbalance", serde_json::json!(0.5), "64"),
        ("moe_imbalance", serde_json::json!(65), "64"),
        ("moe_layer_host_ms", serde_json::json!(-1), "10000"),
        ("profile", serde_json::json!(""), "path"),
        ("overlap_p2p_comm", serde_json::json!("yes"), "bool"),
    ] {
        let mut p = good.clone();
        p["parallelism"][field] = value.clone();
        let bad = tmp(&format!("bad-{field}.plan.json"));
        std::fs::write(&bad, p.to_string()).unwrap();
        let (code, _, err) = pplan(&["predict", "--plan", bad.to_str().unwrap()]);
        assert_eq!(code, 2, "{field} {value}: {err}");
        assert!(
            err.contains(&format!("parallelism.{field}")) && err.contains(valid),
            "{field} {value}: {err}"
        );
    }
}

/// The Megatron-LM flags of the switches that have one are emitted and read back; the others
/// become notes naming pplan's flag.
#[test]
fn the_switches_are_emitted_for_megatron_and_read_back() {
    let plan = tmp("emit.plan.json");
    ok(&[
        &MOE[..],
        &[
            "--schedule",
            "interleaved-1f1b",
            "--chunks",
            "2",
            "--moe-comm-overlap",
            "on",
            "--overlap-p2p-comm",
            "off",
            "--gradient-accumulation-fusion",
            "off",
            "--grad-reduce-dtype",
            "fp32",
            "--moe-imbalance",
            "1.5",
            "--moe-layer-host-ms",
            "2",
            "--no-scatter-gather",
            "--output",
            plan.to_str().unwrap(),
        ],
    ]
    .concat());
    let (code, out, err) = pplan(&[
        "emit",
        "--plan",
        plan.to_str().unwrap(),
        "--target",
        "megatron",
    ]);
    assert_eq!(code, 0, "{err}");
    for flag in [
        "--no-overlap-p2p-communication",
        "--no-gradient-accumulation-fusion",
        "--accumulate-allreduce-grads-in-fp32",
        "--overlap-moe-expert-parallel-comm",
    ] {
        assert!(out.contains(flag), "{flag}: {out}");
    }
    for note in [
        "--moe-imbalance",
        "--moe-layer-host-ms",
        "--no-scatter-gather",
    ] {
        assert!(
            out.contains(note) && err.contains(note),
            "{note}: {out} {err}"
        );
    }
    let back = pplan::plan::megatron_args::parse_megatron_args(&out, "megatron.sh").unwrap();
    assert_eq!(back.overlap_p2p_comm, Some(false));
    assert_eq!(back.gradient_accumulation_fusion, Some(false));
    assert_eq!(back.grad_reduce_dtype.as_deref(), Some("fp32"));
    assert!(back.moe_comm_overlap);
    for target in ["torchtitan", "torchtitan-v0.2"] {
        let (code, out, err) =
            pplan(&["emit", "--plan", plan.to_str().unwrap(), "--target", target]);
        assert_eq!(code, 0, "{target}: {err}");
        assert!(
            out.contains("mixed_precision_reduce") && out.contains("\"float32\""),
            "{target}: {out}"
        );
        for note in [
            "--overlap-p2p-comm off",
            "--moe-comm-overlap on",
            "--moe-imbalance",
        ] {
            assert!(err.contains(note), "{target}: {note}: {err}");
        }
    }
}
