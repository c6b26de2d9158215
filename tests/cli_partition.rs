//! `pplan partition` as a user runs it: the JSON contract, errors (exit 2, naming the
//! constraint), determinism, and the two methods agreeing.

mod common;
use common::{json, pplan};

const TOY: &str = "examples/profiles/uneven-12.json";
const GPT1T: &str = "examples/profiles/gpt-1t-a100-t8.json";

#[test]
fn json_contract() {
    let (code, out, err) = pplan(&[
        "partition",
        "--profile",
        TOY,
        "--stages",
        "4",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["method"], "dp");
    let b: Vec<u64> = serde_json::from_value(v["boundaries"].clone()).unwrap();
    assert_eq!(b.len(), 4);
    assert_eq!(b[0], 0);
    assert!(b.windows(2).all(|w| w[0] < w[1]), "{b:?}");
    let t: Vec<f64> = serde_json::from_value(v["stage_times_ms"].clone()).unwrap();
    assert_eq!(t.len(), 4);
    let max = t.iter().copied().fold(0.0, f64::max);
    assert_eq!(v["bottleneck_ms"].as_f64().unwrap(), max);
    assert_eq!(v["optimal"], true);
    assert_eq!(v["gap"], 0.0);
    assert_eq!(v["config"], "1-1-1-1");
    // Free communication: stage time = sum of (forward + backward) of its layers.
    let profile: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(TOY).unwrap()).unwrap();
    let layers = profile["layers"].as_array().unwrap();
    let mut bounds = b.clone();
    bounds.push(layers.len() as u64);
    for s in 0..4 {
        let sum: f64 = (bounds[s]..bounds[s + 1])
            .map(|i| {
                let l = &layers[i as usize];
                l["forward_ms"].as_f64().unwrap() + l["backward_ms"].as_f64().unwrap()
            })
            .sum();
        assert!((sum - t[s]).abs() < 1e-9, "stage {s}: {sum} vs {}", t[s]);
    }
}

#[test]
fn ilp_and_dp_print_the_same_split() {
    for extra in [
        &[][..],
        &[
            "--devices",
            "6",
            "--p2p-gb-per-s",
            "25",
            "--p2p-latency-us",
            "5",
        ][..],
        &[
            "--device-speeds",
            "1,2,1,0.5",
            "--memory-limit",
            "9000000000",
        ][..],
    ] {
        let run = |method: &str| {
            let mut args = vec![
                "partition",
                "--profile",
                TOY,
                "--stages",
                "4",
                "--format",
                "json",
                "--method",
                method,
            ];
            args.extend_from_slice(extra);
            let (code, out, err) = pplan(&args);
            assert_eq!(code, 0, "{args:?}: {err}");
            json(&out)
        };
        let (d, i) = (run("dp"), run("ilp"));
        assert_eq!(i["method"], "ilp");
        assert_eq!(i["optimal"], true, "{i}");
        for field in ["boundaries", "replicas", "stage_times_ms", "bottleneck_ms"] {
            assert_eq!(d[field], i[field], "{extra:?} {field}");
        }
    }
}

#[test]
fn deterministic_output() {
    let args = [
        "partition",
        "--profile",
        GPT1T,
        "--stages",
        "64",
        "--hardware",
        "a100-80gb",
        "--gpus-per-node",
        "1",
        "--format",
        "json",
    ];
    let a = pplan(&args);
    assert_eq!(a.0, 0, "{}", a.2);
    assert_eq!(a, pplan(&args));
    let v = json(&a.1);
    // Embedding + 128 layers + output: the two light end layers ride with two layers each.
    assert_eq!(v["boundaries"][1], 3);
    assert_eq!(v["boundaries"][63], 127);
}

#[test]
fn errors_exit_2_naming_the_constraint() {
    let cases: [(&[&str], &str); 8] = [
        (
            &["--stages", "13"],
            "--stages 13: 13 stages need at least 13 layers; the profile has 12",
        ),
        (
            &["--stages", "4", "--memory-limit", "1000"],
            "layer 0 ('embedding') alone needs",
        ),
        (
            &["--stages", "2", "--memory-limit", "9000000000"],
            "no split of 12 layers into 2 stages fits the memory limit 9000000000 bytes",
        ),
        (&["--stages", "4", "--devices", "3"], "--devices 3"),
        (
            &["--stages", "4", "--device-speeds", "1,1"],
            "--device-speeds: has 2 entries; give one per device (4)",
        ),
        (&["--stages", "4", "--in-flight", "lots"], "--in-flight"),
        (&["--stages", "4", "--hardware", "tpu"], "--hardware"),
        (
            &["--stages", "4", "--p2p-gb-per-s", "0"],
            "--p2p-gb-per-s 0",
        ),
    ];
    for (extra, want) in cases {
        let mut args = vec!["partition", "--profile", TOY];
        args.extend_from_slice(extra);
        let (code, out, err) = pplan(&args);
        assert_eq!(code, 2, "{args:?}: {out} {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(out.is_empty());
    }
    let (code, _, err) = pplan(&[
        "partition",
        "--profile",
        TOY,
        "--stages",
        "4",
        "--method",
        "ilp",
        "--solver",
        "highs",
    ]);
    if !cfg!(feature = "highs") {
        assert_eq!(code, 2);
        assert!(err.contains("--solver: 'highs' is not built in"), "{err}");
    }
    let (code, _, err) = pplan(&["partition", "--profile", "missing.json", "--stages", "2"]);
    assert_eq!(code, 2);
    assert!(err.contains("missing.json"), "{err}");
}

#[test]
fn table_output_lists_every_stage() {
    let (code, out, err) = pplan(&[
        "partition",
        "--profile",
        TOY,
        "--stages",
        "3",
        "--method",
        "ilp",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("status optimal"), "{out}");
    assert_eq!(out.lines().count(), 3 + 3, "{out}");
}
