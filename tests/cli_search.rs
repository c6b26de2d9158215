//! `pplan search` as a user runs it: the bare default search, pins, impossible requests (exit 2
//! naming the constraint), determinism, `--output` plans, and pruned == exhaustive.

mod common;
use common::{json, pplan};
use pplan::plan::plan_file::Plan;

/// The output with the `elapsed_s` field (the only non-deterministic one) cut out.
fn without_elapsed(stdout: &str) -> String {
    let start = stdout.find("\"elapsed_s\":").expect("elapsed_s present");
    let end = start
        + stdout[start..]
            .find(',')
            .expect("a field follows elapsed_s");
    format!("{}{}", &stdout[..start], &stdout[end + 1..])
}

#[test]
fn bare_search_on_3072_gpus_works_and_is_deterministic() {
    let (code, out, err) = pplan(&["search", "--gpus", "3072", "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let v = json(&out);
    assert_eq!(v["model"], "gpt-1t");
    assert_eq!(v["hardware"], "a100-80gb");
    assert_eq!(v["global_batch"], 3072);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 10);
    let evaluated = v["evaluated"].as_u64().unwrap();
    let feasible = v["feasible"].as_u64().unwrap();
    let simulated = v["simulated"].as_u64().unwrap();
    let pruned = v["pruned"].as_u64().unwrap();
    assert!(evaluated > feasible && feasible >= simulated && simulated >= 10);
    assert_eq!(simulated + pruned, feasible);
    let rejected: u64 = v["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["level"] == "candidate")
        .map(|r| r["count"].as_u64().unwrap())
        .sum();
    assert_eq!(
        rejected + feasible,
        evaluated,
        "every candidate is accounted for"
    );
    let mut last = 0.0;
    for (i, r) in results.iter().enumerate() {
        assert_eq!(r["rank"], i + 1);
        for f in [
            "step_time_s",
            "tflops_per_gpu",
            "model_tflops_per_gpu",
            "mfu",
            "tokens_per_s",
            "bubble_fraction",
            "peak_memory_bytes",
            "fits",
            "tp",
            "pp",
            "dp",
            "micro_batch",
            "schedule",
            "chunks",
            "recompute",
            "sequence_parallel",
            "zero1",
        ] {
            assert!(r.get(f).is_some(), "result {i} lacks {f}: {r}");
        }
        assert_eq!(r["fits"], true);
        let (t, p, d, cp) = (
            r["tp"].as_u64().unwrap(),
            r["pp"].as_u64().unwrap(),
            r["dp"].as_u64().unwrap(),
            r["cp"].as_u64().unwrap(),
        );
        assert_eq!(t * p * d * cp, 3072);
        assert!(
            r["peak_memory_bytes"].as_u64().unwrap() <= r["memory_limit_bytes"].as_u64().unwrap()
        );
        let s = r["step_time_s"].as_f64().unwrap();
        assert!(s >= last, "results are best first");
        assert!(r["lower_bound_s"].as_f64().unwrap() <= s);
        last = s;
    }
    let (code2, out2, _) = pplan(&["search", "--gpus", "3072", "--format", "json"]);
    assert_eq!(code2, 0);
    assert_eq!(without_elapsed(&out), without_elapsed(&out2));
}

#[test]
fn pins_are_respected() {
    let (code, out, err) = pplan(&[
        "search",
        "--gpus",
        "64",
        "--model",
        "gpt-1.7b",
        "--global-batch",
        "128",
        "--tp",
        "2",
        "--pp",
        "4",
        "--cp",
        "1",
        "--schedule",
        "interleaved-1f1b",
        "--recompute",
        "selective",
        "--sequence-parallel",
        "on",
        "--zero1",
        "off",
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
        assert_eq!(r["tp"], 2);
        assert_eq!(r["pp"], 4);
        assert_eq!(r["dp"], 8);
        assert_eq!(r["schedule"], "interleaved-1f1b");
        assert_eq!(r["recompute"], "selective");
        assert_eq!(r["sequence_parallel"], true);
        assert_eq!(r["zero1"], false);
        // v > 1 divides 24 / 4 = 6, or is one of the uneven chunk counts Megatron-Bridge's
        // recipes interleave with (4: 16 stages of 24 layers, a layout string).
        let v = r["chunks"].as_u64().unwrap();
        assert!([2, 3, 4, 6].contains(&v), "{r}");
        let stages = r["stage_layers"].as_array().unwrap();
        assert_eq!(stages.len() as u64, 4 * v, "{r}");
        let layers: u64 = stages.iter().map(|x| x.as_u64().unwrap()).sum();
        assert_eq!(layers, 24, "{r}");
    }
}

fn assert_exit2(args: &[&str], needles: &[&str]) {
    let (code, out, err) = pplan(args);
    assert_eq!(code, 2, "{args:?}: stdout {out} stderr {err}");
    assert!(out.is_empty(), "{args:?}: {out}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: '{n}' not in: {err}");
    }
}

#[test]
fn impossible_requests_exit_2_and_name_the_constraint() {
    // The 1T model's weights, gradients and Adam state are 16 TB: 8 GPUs cannot hold them.
    assert_exit2(
        &["search", "--gpus", "8"],
        &[
            "memory_model_state",
            "weights, gradients and optimizer state",
        ],
    );
    // 5 does not divide the 24 heads, and is not a divisor of a node's 8 GPUs.
    assert_exit2(
        &["search", "--gpus", "5", "--model", "gpt-1.7b", "--tp", "5"],
        &["tp_heads", "24 attention heads"],
    );
    // d = 7 does not divide the batch.
    assert_exit2(
        &[
            "search",
            "--gpus",
            "7",
            "--model",
            "gpt-1.7b",
            "--global-batch",
            "512",
            "--tp",
            "1",
            "--pp",
            "1",
        ],
        &["batch_not_divisible", "global batch 512"],
    );
    // One sequence cannot feed a dualpipev pipeline of 4 devices (needs m >= 8).
    assert_exit2(
        &[
            "search",
            "--gpus",
            "4",
            "--model",
            "gpt-1.7b",
            "--global-batch",
            "1",
            "--pp",
            "4",
            "--schedule",
            "dualpipev",
        ],
        &["too_few_microbatches", "m >= 2p"],
    );
    // 29 GPUs: t = 29 crosses nodes, p = 29 exceeds the 24 layers, d = 29 does not divide B.
    assert_exit2(
        &["search", "--gpus", "29", "--model", "gpt-1.7b"],
        &["tp_across_nodes", "too_many_stages", "batch_not_divisible"],
    );
    // A pin that does not divide the GPU count.
    assert_exit2(
        &["search", "--gpus", "64", "--tp", "3"],
        &["--tp 3 does not divide --gpus 64", "1, 2, 4, 8"],
    );
    assert_exit2(&["search", "--gpus", "0"], &["--gpus must be at least 1"]);
    assert_exit2(
        &["search", "--gpus", "64", "--schedule", "nope"],
        &["--schedule"],
    );
    assert_exit2(
        &[
            "search",
            "--gpus",
            "64",
            "--schedule",
            "zbv",
            "--chunks",
            "3",
        ],
        &["--chunks 3", "zbv"],
    );
}

#[test]
fn output_plan_round_trips_and_matches_the_best_result() {
    let dir = std::env::temp_dir().join(format!("pplan-search-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("plan.json");
    let p = path.to_str().unwrap();
    let (code, out, err) = pplan(&[
        "search",
        "--gpus",
        "16",
        "--model",
        "gpt-1.7b",
        "--global-batch",
        "32",
        "--format",
        "json",
        "--output",
        p,
    ]);
    assert_eq!(code, 0, "{err}");
    let best = &json(&out)["results"][0];
    let text = std::fs::read_to_string(&path).unwrap();
    let plan = Plan::from_json(&text, p).unwrap();
    assert_eq!(plan.dtype, "bf16");
    assert_eq!(plan.hardware, "a100-80gb");
    assert_eq!(plan.model.name, "gpt-1.7b");
    let par = &plan.parallelism;
    assert_eq!(par.gpus, 16);
    assert_eq!(par.global_batch, 32);
    assert_eq!(best["tp"], par.tp);
    assert_eq!(best["pp"], par.pp);
    assert_eq!(best["dp"], par.dp);
    assert_eq!(best["micro_batch"], par.micro_batch);
    assert_eq!(best["recompute"], par.recompute.as_str());
    assert_eq!(best["sequence_parallel"], par.sequence_parallel);
    assert_eq!(best["zero1"], par.zero1);
    assert_eq!(best["schedule"], plan.schedule.name.as_str());
    let pred = plan.predicted.as_ref().unwrap();
    assert_eq!(best["step_time_s"].as_f64().unwrap(), pred.step_time_s);

    // predict --output writes the same plan for the same configuration.
    let path2 = dir.join("predict.json");
    let p2 = path2.to_str().unwrap();
    let on_off = |b: bool| if b { "on" } else { "off" };
    let (tp, pp, dp, b) = (
        par.tp.to_string(),
        par.pp.to_string(),
        par.dp.to_string(),
        par.micro_batch.to_string(),
    );
    let chunks = par.chunks.to_string();
    let mut args = vec![
        "predict",
        "--model",
        "gpt-1.7b",
        "--gpus",
        "16",
        "--global-batch",
        "32",
        "--tp",
        &tp,
        "--pp",
        &pp,
        "--dp",
        &dp,
        "--micro-batch",
        &b,
        "--schedule",
        &plan.schedule.name,
        "--chunks",
        &chunks,
        "--recompute",
        &par.recompute,
        "--sequence-parallel",
        on_off(par.sequence_parallel),
        "--output",
        p2,
    ];
    let zero = if par.zero >= 2 {
        par.zero
    } else {
        u8::from(par.zero1)
    }
    .to_string();
    args.extend(["--zero", zero.as_str()]);
    let (code, _, err) = pplan(&args);
    assert_eq!(code, 0, "{err}");
    let text2 = std::fs::read_to_string(&path2).unwrap();
    assert_eq!(
        text2, text,
        "predict and search write the same plan, byte for byte"
    );
    Plan::from_json(&text2, p2).unwrap();
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn pruned_and_exhaustive_searches_give_the_same_top_10() {
    for args in [
        [
            "--gpus",
            "32",
            "--model",
            "gpt-1.7b",
            "--global-batch",
            "64",
        ],
        [
            "--gpus",
            "16",
            "--model",
            "gpt-3.6b",
            "--global-batch",
            "48",
        ],
        [
            "--gpus",
            "64",
            "--model",
            "gpt-7.5b",
            "--global-batch",
            "32",
        ],
    ] {
        let mut a = vec!["search", "--format", "json"];
        a.extend(args);
        let (code, pruned, err) = pplan(&a);
        assert_eq!(code, 0, "{err}");
        a.push("--exhaustive");
        let (code, all, err) = pplan(&a);
        assert_eq!(code, 0, "{err}");
        let (pruned, all) = (json(&pruned), json(&all));
        assert_eq!(pruned["results"], all["results"], "{args:?}");
        assert_eq!(all["simulated"], all["feasible"]);
        assert!(pruned["simulated"].as_u64() < all["simulated"].as_u64());
    }
}

#[test]
fn table_has_the_columns_and_the_rejection_summary() {
    let (code, out, err) = pplan(&[
        "search",
        "--gpus",
        "32",
        "--model",
        "gpt-1.7b",
        "--global-batch",
        "64",
        "--top",
        "3",
    ]);
    assert_eq!(code, 0, "{err}");
    for col in [
        "p",
        "t",
        "d",
        "b",
        "m",
        "schedule",
        "v",
        "recompute",
        "SP",
        "ZeRO",
        "step (s)",
        "TFLOP/s",
        "MFU",
        "bubble",
        "peak GB",
        "headroom",
    ] {
        assert!(out.contains(col), "column {col} missing:\n{out}");
    }
    assert!(
        out.contains("rejected:") && out.contains("too_many_stages"),
        "{out}"
    );
    // Three result rows between the header and the blank line.
    let rows = out
        .lines()
        .skip_while(|l| !l.contains("schedule"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .count();
    assert_eq!(rows, 3, "{out}");
}
