//! Megatron-Core's split rules from the command line (docs/partition.md, "Megatron-Core's
//! split rules"): `predict` and `search` take `--account-for-embedding-in-pipeline-split`,
//! `--account-for-loss-in-pipeline-split` and `--decoder-first/last-pipeline-num-layers`,
//! stages may then hold the embedding or the loss alone, the plan file carries the split and
//! `emit --target megatron` gives the flags back; bad combinations exit 2 naming the flags.

mod common;
use common::{json, pplan};

/// GPT 1.7B (24 layers) on 2 pipeline devices with 13 chunks: 24 + 2 = 26 layers counted,
/// one a stage, so the first stage only embeds and the last only computes the loss.
const BASE: [&str; 16] = [
    "predict",
    "--model",
    "gpt-1.7b",
    "--gpus",
    "2",
    "--pp",
    "2",
    "--chunks",
    "13",
    "--global-batch",
    "8",
    "--recompute",
    "none",
    "--format",
    "json",
    "--account-for-embedding-in-pipeline-split",
];

#[test]
fn embedding_and_loss_alone_in_their_stages() {
    let mut args = BASE.to_vec();
    args.push("--account-for-loss-in-pipeline-split");
    let (code, out, err) = pplan(&args);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["split"], "megatron");
    let counts: Vec<u32> = serde_json::from_value(v["stage_layers"].clone()).unwrap();
    assert_eq!(counts.len(), 26);
    assert_eq!((counts[0], counts[25]), (0, 0));
    assert!(counts[1..25].iter().all(|&c| c == 1), "{counts:?}");
    assert!(v["step_time_s"].as_f64().unwrap() > 0.0);
    // Deterministic.
    assert_eq!(pplan(&args).1, out);
}

#[test]
fn the_split_goes_through_the_plan_file_to_megatron_flags() {
    let dir = std::env::temp_dir().join(format!("pplan-split-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("plan.json");
    let mut args = BASE.to_vec();
    args.extend(["--account-for-loss-in-pipeline-split", "--output"]);
    args.push(plan.to_str().unwrap());
    let (code, _, err) = pplan(&args);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&plan).unwrap();
    let p: serde_json::Value = serde_json::from_str(&text).unwrap();
    let stages = p["stages"].as_array().unwrap();
    assert_eq!(stages.len(), 26);
    assert_eq!(stages[0]["num_layers"], 0);
    assert_eq!(stages[0]["embedding"], true);
    assert_eq!(stages[25]["num_layers"], 0);
    assert_eq!(stages[25]["output"], true);
    let (code, out, err) = pplan(&[
        "emit",
        "--plan",
        plan.to_str().unwrap(),
        "--target",
        "megatron",
    ]);
    assert_eq!(code, 0, "{err}");
    for f in [
        "  --account-for-embedding-in-pipeline-split\n",
        "  --account-for-loss-in-pipeline-split\n",
        "  --num-virtual-stages-per-pipeline-rank 13\n",
    ] {
        assert!(out.contains(f), "{f}{out}");
    }
    assert!(!out.contains("--pipeline-model-parallel-layout"), "{out}");
}

#[test]
fn bad_combinations_exit_2_naming_the_flags() {
    // 24 + 1 = 25 layers do not split over 26 stages.
    let (code, _, err) = pplan(&BASE);
    assert_eq!(code, 2);
    assert!(
        err.contains("--account-for-embedding-in-pipeline-split")
            && err.contains("25 layers")
            && err.contains("valid"),
        "{err}"
    );
    let mut args = BASE.to_vec();
    args.extend(["--partition", "balanced"]);
    let (code, _, err) = pplan(&args);
    assert_eq!(code, 2);
    assert!(
        err.contains("--partition balanced") && err.contains("valid"),
        "{err}"
    );
    let mut args = BASE.to_vec();
    args.extend(["--decoder-first-pipeline-num-layers", "6"]);
    let (code, _, err) = pplan(&args);
    assert_eq!(code, 2);
    assert!(err.contains("cannot be combined"), "{err}");
    // First and last ranks: 24 - 5 - 5 = 14 layers do not split over 3 middle ranks.
    let (code, _, err) = pplan(&[
        "predict",
        "--model",
        "gpt-1.7b",
        "--gpus",
        "5",
        "--pp",
        "5",
        "--global-batch",
        "10",
        "--decoder-first-pipeline-num-layers",
        "5",
        "--decoder-last-pipeline-num-layers",
        "5",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("14 layers for 3 middle pipeline ranks"),
        "{err}"
    );
}

#[test]
fn first_and_last_rank_counts() {
    let (code, out, err) = pplan(&[
        "predict",
        "--model",
        "gpt-1.7b",
        "--gpus",
        "4",
        "--pp",
        "4",
        "--global-batch",
        "8",
        "--decoder-first-pipeline-num-layers",
        "4",
        "--decoder-last-pipeline-num-layers",
        "4",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let counts: Vec<u32> = serde_json::from_value(json(&out)["stage_layers"].clone()).unwrap();
    assert_eq!(counts, [4, 8, 8, 4]);
}

#[test]
fn search_keeps_to_the_rule() {
    let (code, out, err) = pplan(&[
        "search",
        "--model",
        "gpt-1.7b",
        "--gpus",
        "8",
        "--global-batch",
        "16",
        "--pp",
        "2",
        "--schedule",
        "interleaved-1f1b",
        "--account-for-embedding-in-pipeline-split",
        "--account-for-loss-in-pipeline-split",
        "--top",
        "50",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    let results = v["results"].as_array().unwrap();
    assert!(!results.is_empty());
    for r in results {
        assert_eq!(r["split"], "megatron", "{r}");
        // 24 + 2 layers counted split evenly over 2 x v stages: v = 13 is the only
        // interleaving (the even split would need 24 / 2v whole).
        assert_eq!(
            (r["pp"].as_u64(), r["chunks"].as_u64()),
            (Some(2), Some(13)),
            "{r}"
        );
        let counts: Vec<u32> = serde_json::from_value(r["stage_layers"].clone()).unwrap();
        assert_eq!((counts[0], counts[25]), (0, 0));
    }
}

/// docs/partition.md's layout string: DeepSeek-V3's 61 layers and its multi-token prediction
/// layer on PP 4 x VP 4, predicted with the string's stages, written to the plan file and
/// emitted back as the same stage counts with the 'm' on the last stage.
#[test]
fn a_layout_string_is_predicted_and_emitted_as_given() {
    let layout = "Et*3|(t*4|)*13t*3|t*3mL";
    let dir = std::env::temp_dir().join(format!("pplan-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("plan.json");
    let (code, out, err) = pplan(&[
        "predict",
        "--model",
        "deepseek-v3",
        "--hardware",
        "gb200-nvl72",
        "--gpus",
        "256",
        "--tp",
        "1",
        "--pp",
        "4",
        "--chunks",
        "4",
        "--ep",
        "64",
        "--global-batch",
        "4096",
        "--micro-batch",
        "1",
        "--precision",
        "mxfp8",
        "--pipeline-layout",
        layout,
        "--format",
        "json",
        "--output",
        plan.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    let counts: Vec<u32> = serde_json::from_value(v["stage_layers"].clone()).unwrap();
    let mut want = vec![3];
    want.extend([4; 13]);
    want.extend([3, 3]);
    assert_eq!(counts, want);
    assert!(v["step_time_s"].as_f64().unwrap() > 0.0);
    let (code, out, err) = pplan(&[
        "emit",
        "--plan",
        plan.to_str().unwrap(),
        "--target",
        "megatron",
    ]);
    assert_eq!(code, 0, "{err}");
    let line = out
        .lines()
        .find(|l| {
            l.trim_start()
                .starts_with("--pipeline-model-parallel-layout")
        })
        .unwrap_or_else(|| panic!("no layout flag:\n{out}"));
    // Megatron-Core's parser reads the emitted string back to the same stages.
    let emitted = line
        .split_whitespace()
        .nth(1)
        .unwrap()
        .trim_matches(|c| c == '"' || c == '\'');
    let parsed = pplan::plan::predict::layout::parse_layout(emitted).unwrap();
    assert_eq!(parsed.layers, want, "{line}");
    assert_eq!(parsed.mtp, vec![15], "{line}");
    assert!(out.contains("--mtp-num-layers 1"), "{out}");
}

/// Layout strings Megatron-Core refuses are refused with the flag and what is wrong.
#[test]
fn bad_layout_strings_exit_2_naming_the_flag() {
    let base = [
        "predict",
        "--model",
        "gpt-1.7b",
        "--gpus",
        "4",
        "--pp",
        "4",
        "--global-batch",
        "8",
        "--pipeline-layout",
    ];
    for (layout, chunks, want) in [
        ("t*6|t*6|t*6|t*6L", "1", "embedding"),
        ("Et*6|t*6|t*6|t*6", "1", "loss"),
        ("Et*6|t*6|t*6|t*5L", "1", "23"),
        ("Et*8|t*8|t*8L", "1", "3 stages"),
        ("Et*6|t*6|(t*6|t*6L", "1", "parenthes"),
        ("Et*3|(t*3|)*6t*3L", "1", "--chunks"),
        ("Et*6|t*6|t*6|t*6mL", "1", "--mtp-num-layers"),
    ] {
        let mut args = base.to_vec();
        args.extend([layout, "--chunks", chunks]);
        let (code, _, err) = pplan(&args);
        assert_eq!(code, 2, "{layout}: {err}");
        assert!(err.contains("--pipeline-layout"), "{layout}: {err}");
        assert!(err.contains(want), "{layout}: want '{want}' in {err}");
    }
}
