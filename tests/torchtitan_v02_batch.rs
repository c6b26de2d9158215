//! Issue 41: the torchtitan 0.2.x TOML (`pplan emit --target torchtitan-v0.2`) runs exactly the
//! planned sequences per forward and per step, for pp = 1 and pp > 1, and names the model's
//! tokenizer and a placeholder dataset instead of torchtitan's test ones.
//!
//! torchtitan 0.2.2's semantics, which [`torchtitan_batches`] re-states:
//! - `torchtitan/train.py` (`Trainer.__init__`, "verify batch sizes"): `global_batch_size`
//!   (default `local_batch_size x batch_degree`) must be a multiple of
//!   `local_batch_size x batch_degree`, the data-parallel degree
//!   (`data_parallel_replicate_degree x data_parallel_shard_degree`, the "batch" mesh), and the
//!   quotient is `gradient_accumulation_steps`; `train_step` draws that many batches of
//!   `local_batch_size` sequences per rank and runs forward and backward on each.
//! - `torchtitan/distributed/pipeline_parallel.py` (`pipeline_llm`): with pp > 1 each such
//!   batch is the pipeline schedule's input, cut into `local_batch_size /
//!   pipeline_parallel_microbatch_size` micro-batches (`n_microbatches`); with pp = 1 the batch
//!   is one forward.

mod common;
use common::pplan;
use std::collections::{BTreeMap, BTreeSet};

/// The emitted TOML as `section.key` → value text: the subset of TOML the emitter writes
/// (`[section]` headers, `key = value` lines, `#` comment lines).
fn toml_keys(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut section = String::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(s) = line.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            section = s.to_string();
            continue;
        }
        let (k, v) = line
            .split_once(" = ")
            .unwrap_or_else(|| panic!("not a key line: {line}"));
        let key = format!("{section}.{k}");
        assert!(
            out.insert(key.clone(), v.to_string()).is_none(),
            "{key} twice"
        );
    }
    out
}

/// (sequences per forward per data-parallel rank, sequences per optimizer step over all
/// ranks, forwards per rank per step) as torchtitan 0.2.2 runs the keys.
fn torchtitan_batches(keys: &BTreeMap<String, String>) -> (u64, u64, u64) {
    let num = |k: &str, default: u64| -> u64 {
        keys.get(k)
            .map(|v| v.parse().unwrap_or_else(|_| panic!("{k} = {v}")))
            .unwrap_or(default)
    };
    // job_config.py defaults: local_batch_size 8, global_batch_size -1, degrees 1 (shard -1:
    // the rest of the world, never left to that here).
    let local = num("training.local_batch_size", 8);
    let batch_degree = num("parallelism.data_parallel_replicate_degree", 1)
        * num("parallelism.data_parallel_shard_degree", 1);
    let global = match keys.get("training.global_batch_size") {
        Some(v) => v.parse().unwrap(),
        None => local * batch_degree,
    };
    assert_eq!(global % (local * batch_degree), 0, "train.py's assertion");
    let accumulation = global / (local * batch_degree);
    let (per_forward, forwards_per_batch) = if num("parallelism.pipeline_parallel_degree", 1) > 1 {
        let mb = num("parallelism.pipeline_parallel_microbatch_size", 1);
        assert_eq!(local % mb, 0, "pipeline_parallel.py's divisibility check");
        (mb, local / mb)
    } else {
        (local, 1)
    };
    (
        per_forward,
        accumulation * local * batch_degree,
        accumulation * forwards_per_batch,
    )
}

fn keys_file() -> BTreeSet<String> {
    let text = std::fs::read_to_string(format!(
        "{}/tests/data/torchtitan_v0.2_keys.txt",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// A plan to emit: (model, gpus, tp, pp, dp, global batch, micro-batch, extra predict flags).
type Case = (
    &'static str,
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    &'static [&'static str],
);

/// pp = 1 with gradient accumulation was emitted with `local_batch_size = global / dp`, a
/// forward of every accumulated micro-batch at once (8x the plan's sequences here: OOM).
#[test]
fn torchtitan_v02_batch_keys_give_the_planned_sequences_for_every_pp() {
    let dir = std::env::temp_dir().join(format!("pplan-tt02-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let known = keys_file();
    // (model, gpus, tp, pp, dp, global batch, micro-batch, extra flags)
    let cases: [Case; 5] = [
        ("llama3-8b", 8, 2, 1, 4, 64, 2, &[]),
        ("llama3-8b", 8, 1, 1, 8, 64, 1, &["--zero", "3"]),
        ("llama3-8b", 16, 2, 4, 2, 32, 1, &[]),
        (
            "llama3-70b",
            64,
            8,
            4,
            2,
            64,
            2,
            &["--schedule", "interleaved-1f1b", "--chunks", "2"],
        ),
        ("gpt-1.7b", 8, 1, 2, 4, 32, 4, &["--zero", "3"]),
    ];
    for (model, gpus, tp, pp, dp, global, micro, extra) in cases {
        let plan = dir.join(format!("{model}-pp{pp}-tp{tp}.json"));
        let (gpus_s, tp_s, pp_s, dp_s) = (
            gpus.to_string(),
            tp.to_string(),
            pp.to_string(),
            dp.to_string(),
        );
        let (g_s, b_s) = (global.to_string(), micro.to_string());
        let mut args = vec![
            "predict",
            "--model",
            model,
            "--hardware",
            "h100-80gb",
            "--gpus",
            &gpus_s,
            "--tp",
            &tp_s,
            "--pp",
            &pp_s,
            "--dp",
            &dp_s,
            "--global-batch",
            &g_s,
            "--micro-batch",
            &b_s,
            "--output",
            plan.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let (code, _, err) = pplan(&args);
        assert_eq!(code, 0, "{args:?}: {err}");
        let (code, toml, err) = pplan(&[
            "emit",
            "--plan",
            plan.to_str().unwrap(),
            "--target",
            "torchtitan-v0.2",
        ]);
        assert_eq!(code, 0, "{err}");
        let keys = toml_keys(&toml);
        for k in keys.keys() {
            assert!(known.contains(k), "{k} is not torchtitan 0.2's:\n{toml}");
        }
        let (per_forward, per_step, forwards) = torchtitan_batches(&keys);
        let case = format!("{model} tp {tp} pp {pp} dp {dp} B {global} b {micro}:\n{toml}");
        assert_eq!(per_forward, micro, "sequences per forward, {case}");
        assert_eq!(per_step, global, "sequences per step, {case}");
        assert_eq!(
            forwards,
            global / (micro * dp),
            "micro-batches per step, {case}"
        );
        // The model's tokenizer and a dataset the user must name, never torchtitan's test
        // assets (job_config.py defaults: ./tests/assets/tokenizer and c4_test).
        let assets = &keys["model.hf_assets_path"];
        assert!(!assets.contains("tests/assets"), "{case}");
        if model.starts_with("llama3") {
            let flavor = keys["model.flavor"].trim_matches('"').to_string();
            assert_eq!(
                assets,
                &format!("\"./assets/hf/Llama-3.1-{flavor}\""),
                "{case}"
            );
        } else {
            assert!(assets.contains("PLACEHOLDER"), "{case}");
        }
        assert!(keys["training.dataset"].contains("PLACEHOLDER"), "{case}");
        assert!(toml.contains("# dataset: a placeholder"), "{case}");
    }
}
