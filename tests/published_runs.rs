//! The bundled runs (`data/runs/*.json`) predicted as `pplan validate --runs` predicts them:
//! every row is read and predicted, the recipes written as flags reach the request, the FLOP
//! conventions are the sources' own, and each group stays within the bar docs/validation.md
//! states for it (a calibration set's bar, or a guard on a held-out group so that a change to
//! the model shows here and in the page).

use pplan::plan::predict::Prediction;
use pplan::runs::file::RunsFile;
use pplan::runs::metric::megatron_lm_flops_per_token;
use pplan::runs::predict::Prepared;
use pplan::runs::validate::{load_rows, predict_rows, to_json, GroupBy, Loaded, RunResult};
use std::sync::OnceLock;

struct Bundled {
    rows: Vec<Loaded>,
    results: Vec<RunResult>,
}

fn bundled() -> &'static Bundled {
    static B: OnceLock<Bundled> = OnceLock::new();
    B.get_or_init(|| {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/data/runs");
        let files = RunsFile::load_dir(dir.as_ref()).unwrap();
        let rows = load_rows(&files);
        let results = predict_rows(&rows);
        Bundled { rows, results }
    })
}

/// The source's counted rows: (id, error, prediction).
fn group(source: &str) -> Vec<(&'static str, f64, &'static Prediction)> {
    let v: Vec<_> = bundled()
        .results
        .iter()
        .filter(|r| r.source == source && r.exclude.is_none())
        .map(|r| {
            let p = r.outcome.as_ref().unwrap();
            (r.id.as_str(), p.error, &p.prediction)
        })
        .collect();
    assert!(!v.is_empty(), "no runs of {source}");
    v
}

/// A row's result, excluded ones too.
fn row(id: &str) -> &'static RunResult {
    bundled().results.iter().find(|r| r.id == id).unwrap()
}

/// A row prepared (its flags, model and profile).
fn prepared(id: &str) -> &'static Prepared {
    let l = bundled().rows.iter().find(|l| l.id == id).unwrap();
    l.prepared.as_ref().unwrap()
}

fn mae(errors: &[(&str, f64, &Prediction)]) -> f64 {
    errors.iter().map(|e| e.1.abs()).sum::<f64>() / errors.len() as f64
}

#[test]
fn every_bundled_run_is_read_and_predicted_and_the_output_is_deterministic() {
    let b = bundled();
    assert!(b.results.len() >= 150, "{} rows", b.results.len());
    for r in &b.results {
        assert!(
            r.problem().is_none(),
            "{} {}: {:?}",
            r.source,
            r.id,
            r.problem()
        );
        if let Ok(p) = &r.outcome {
            let x = &p.prediction;
            assert_eq!(x.gpus, x.tp * x.cp * x.pp * x.dp, "{}", r.id);
            assert_eq!(x.gpus, r.gpus, "{}", r.id);
        }
    }
    // Every row not predicted is excluded with its reason (m248: a layout the table states that
    // cannot hold; m291: Qwen3-Next).
    let unpredicted: Vec<&str> = b
        .results
        .iter()
        .filter(|r| r.outcome.is_err())
        .map(|r| r.id.as_str())
        .collect();
    assert_eq!(unpredicted, ["m248", "m291"]);
    // The same inputs, the same outputs.
    let again = predict_rows(&b.rows);
    let a = serde_json::to_string(&to_json(&b.results, GroupBy::Source)).unwrap();
    assert_eq!(
        a,
        serde_json::to_string(&to_json(&again, GroupBy::Source)).unwrap()
    );
}

/// Narayanan et al. 2021 Table 1 is the A100 calibration set: every row within 6 %, the mean
/// absolute error at most 3 %.
#[test]
fn megatron_2021_table1_within_6_percent_mae_3_percent() {
    let g = group("megatron-2021-table1-a100");
    assert_eq!(g.len(), 10);
    for (id, e, p) in &g {
        assert!(e.abs() < 0.06, "{id}: {e:+.4}");
        assert!(
            p.fits && p.recompute == "full" && p.stack == "megatron-2021",
            "{id}"
        );
    }
    assert!(mae(&g) <= 0.03, "{}", mae(&g));
    // `--micro-batch auto --chunks auto`: r005's best is interleaved with several chunks.
    let r005 = g.iter().find(|x| x.0 == "r005").unwrap().2;
    assert!(r005.chunks > 1 && r005.schedule == "interleaved-1f1b");
}

/// NeMo 24.07 on DGX-H100 in FP8 is the H100 calibration set: mean absolute error at most 5 %,
/// every row within 10 %; every row ran, and all but r082 (GPT-3 20B at t = 2, p = 1,
/// docs/validation.md) are predicted to fit.
#[test]
fn nemo_24_07_is_the_h100_calibration_set() {
    let g = group("nemo-24.07-h100-fp8");
    assert_eq!(g.len(), 12);
    assert!(mae(&g) <= 0.05, "{}", mae(&g));
    for (id, e, p) in &g {
        assert!(e.abs() < 0.10, "{id}: {e:+.4}");
        assert_eq!(
            p.fits,
            *id != "r082",
            "{id}: {} GB",
            p.peak_memory_bytes as f64 / 1e9
        );
        assert!(p.zero1 && p.precision == "fp8", "{id}");
    }
    assert_eq!(g.iter().filter(|x| x.2.cp == 2).count(), 2);
}

/// The FLOPs per token NeMo's two published figures imply (TFLOP/s x 1e12 / tokens/s) are
/// pplan's model FLOPs per token (`flop_convention: pplan`): the attention core counted whole,
/// grouped-query K/V, 2 or 3 MLP matrices, the logits, no recomputation. The figures have 3-5
/// significant digits; 0.5 % would fail a change of convention (causal attention: 1.3 % for
/// GPT-3 175B, 11 % for Llama 3 8B).
#[test]
fn nemo_counts_flops_as_pplan_does() {
    for (id, _, p) in group("nemo-24.07-h100-fp8") {
        let m = &prepared(id).row.measured.all;
        let implied = m["model_tflops_per_gpu"].as_f64().unwrap() * 1e12
            / m["tokens_per_s_per_gpu"].as_f64().unwrap();
        let ours = p.model_tflops_per_gpu * 1e12 / p.tokens_per_s_per_gpu;
        assert!(
            (ours / implied - 1.0).abs() <= 0.005,
            "{id}: {ours:.4e} vs {implied:.4e}"
        );
    }
}

/// The NeMo models (data/runs/models/nemo-*.json, Megatron-style files with a source for
/// every value): pplan's parameter count within 3 % of every published count, 10 % of a
/// nominal size (Nemotron-8B's untied 256k-word embeddings alone are 2.1e9).
#[test]
fn nemo_models_count_their_published_parameters() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/data/runs/models");
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("nemo-") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        let m = pplan::inputs::Model::from_json(&text, &name).unwrap();
        let published = v["params_published"].as_f64().unwrap();
        let err = m.total_params() as f64 / published - 1.0;
        let bar = match v["params_basis"].as_str().unwrap() {
            "count" => 0.03,
            "nominal" => 0.10,
            other => panic!("{name}: params_basis {other}"),
        };
        assert!(err.abs() <= bar, "{name}: {err:+.4}");
        assert!(v["sources"]["vocab_size"].is_string(), "{name}");
        n += 1;
    }
    assert_eq!(n, 11);
}

/// The recipes written as flags reach the request: the distributed optimizer's state (Apex
/// keeps the remainders of fp32 master weights, 10 bytes a parameter; Nemotron-340B's bf16
/// state no master copy, 4), the deferred embedding gradients (Nemotron-340B only), the
/// blocking sends where the recipe does not overlap them, the vocabulary padded to 128 t.
#[test]
fn nemo_recipes_reach_the_request() {
    for (id, _, p) in group("nemo-24.07-h100-fp8") {
        let r = prepared(id);
        let req = r.flags.request(&r.model, &r.hardware, None).unwrap();
        let s = &req.stack;
        let big = r.model.name == "nemo-nemotron-340b";
        assert_eq!(
            s.optimizer_state.bytes_per_param(),
            if big { 4 } else { 10 },
            "{id}"
        );
        assert_eq!(s.defer_embedding_wgrad, big, "{id}");
        assert_eq!(r.model.vocab_size % (128 * p.tp), 0, "{id}");
        let overlapped = r
            .row
            .args
            .windows(2)
            .any(|w| w == ["--overlap-p2p-comm", "on"]);
        assert_eq!(s.blocking_p2p, !overlapped, "{id}");
    }
}

/// NeMo's long-sequence Llama 2 7B runs (held out): 4M tokens a step; every run fits as it
/// ran; the 4k run (the calibration rows' layout family) within 5 %; context parallelism
/// divides the activations, so 1,024k tokens on 32 x 8 ranks need less than 4k on one.
#[test]
fn nemo_long_sequence_runs_fit_and_the_shortest_is_within_5_percent() {
    let g = group("nemo-long-sequence-h100-fp8");
    assert_eq!(g.len(), 9);
    for (id, _, p) in &g {
        assert_eq!(p.global_batch * prepared(id).model.seq_len, 4 << 20, "{id}");
        assert!(p.fits, "{id}");
    }
    assert!(g[0].1.abs() < 0.05, "4k: {:+.4}", g[0].1);
    assert!(g[8].2.peak_memory_bytes < g[0].2.peak_memory_bytes);
    // Read with the attention counted causally (excluded rows), every run within 15 %.
    for (id, ..) in &g {
        let c = row(&format!("{id}-causal"));
        assert!(c.exclude.is_some());
        assert!(c.outcome.as_ref().unwrap().error.abs() < 0.15, "{id}");
    }
}

/// Llama 3 405B on 8,192 and 16,384 H100 (held out): 16M tokens a step, 128 stages with the
/// embedding and the loss alone in the end chunks; the two CP 1 rows within 13 % and their
/// bubble the paper's (PP - 1) / (V M) plus the sends at chunk boundaries; the CP 16 row
/// 30-45 % fast in pplan's FLOP count, and every row within 9 % counted causally (8.4 % at
/// worst since the H100 factor is the least-squares fit to NeMo's runs; 7.9 % before).
#[test]
fn llama3_405b_held_out() {
    let g = group("llama3-405b-h100-bf16");
    assert_eq!(g.len(), 3);
    for (id, e, p) in &g {
        assert_eq!(
            p.global_batch * prepared(id).model.seq_len,
            16 << 20,
            "{id}"
        );
        assert_eq!(p.stage_layers.len(), 128);
        assert_eq!((p.stage_layers[0], p.stage_layers[127]), (0, 0));
        assert!(p.stage_layers[1..127].iter().all(|&l| l == 1));
        if p.cp == 1 {
            assert!(e.abs() < 0.13, "{id}: {e}");
            let m = (p.global_batch / p.dp) as f64;
            let formula = (p.pp as f64 - 1.0) / (8.0 * m);
            assert!(p.bubble_fraction > formula && p.bubble_fraction < formula + 0.03);
        } else {
            assert!(*e > 0.30 && *e < 0.45, "{id}: {e}");
        }
        let causal = row(&format!("{id}-causal")).outcome.as_ref().unwrap();
        assert!(causal.error.abs() < 0.09, "{id} causal: {}", causal.error);
        // The causal count by hand: per token 126 layers of linear GEMMs (QKV, output,
        // SwiGLU MLP; 2 FLOPs a multiply-add) and `4 s h` of attention, plus the logits.
        let (h, s, vocab) = (16384.0, prepared(id).model.seq_len as f64, 128256.0);
        let linear = 2.0 * (h * (h + 2048.0) + h * h + 3.0 * h * 53248.0);
        let full = 126.0 * (linear + 4.0 * s * h) + 2.0 * h * vocab;
        let half = 126.0 * (linear + 2.0 * s * h) + 2.0 * h * vocab;
        let ratio = causal.predicted / p.model_tflops_per_gpu;
        assert!((ratio / (half / full) - 1.0).abs() < 1e-9, "{ratio}");
    }
}

/// torchtitan's FSDP2 runs on 64 A100: Llama 2 within 5 % on average and 10 % each; the
/// held-out Llama 3 rows within 5 % each; all ZeRO-3 and fitting.
#[test]
fn torchtitan_rows_within_their_bars() {
    let g = group("torchtitan-llama2-a100");
    assert_eq!(g.len(), 5);
    assert!(mae(&g) <= 0.05);
    // What checkpointing costs is what torchtitan measured: on Llama 2 13B the per-op and
    // per-layer policies run at 0.881 and 0.885 of the no-recompute throughput (1904 and 1914
    // against 2162 tokens/s); the model's ratios within 2 and 3 points.
    let tps = |id: &str| g.iter().find(|x| x.0 == id).unwrap().2.tokens_per_s_per_gpu;
    let (op, layer) = (tps("r127") / tps("r125"), tps("r126") / tps("r125"));
    assert!(
        (op - 1904.0 / 2162.0).abs() < 0.02,
        "selective op ratio {op}"
    );
    assert!(
        (layer - 1914.0 / 2162.0).abs() < 0.03,
        "selective layer ratio {layer}"
    );
    for (id, e, p) in g.iter().chain(&group("torchtitan-llama3-a100")) {
        let bar = if id.starts_with("t3") { 0.05 } else { 0.10 };
        assert!(e.abs() <= bar, "{id}: {e}");
        assert!(p.fits && p.zero == 3 && p.stack == "torchtitan", "{id}");
    }
}

/// llm-foundry's MPT runs (held out): every run fits as it ran, all ZeRO-3; the guards on the
/// two tables' mean absolute errors (11 % on H100, 7 % on A100) notice a change to the model.
/// (The H100 guard was 8 %: its BF16 rows went 6.2 -> 10.0 % when the split accumulator was
/// measured on H100, 1.00 instead of the published 1.15, and H100's training factor refitted
/// to NeMo's FP8 rows fell 0.810 -> 0.745, slowing every H100 GEMM; docs/validation.md.)
#[test]
fn llm_foundry_runs_fit_and_stay_within_the_guards() {
    for (source, guard, count) in [
        ("llm-foundry-mpt-h100", 0.11, 18),
        ("llm-foundry-mpt-a100", 0.07, 61),
    ] {
        let g = group(source);
        assert_eq!(g.len(), count);
        assert!(mae(&g) < guard, "{source}: {}", mae(&g));
        for (id, _, p) in &g {
            assert!(p.fits && p.zero == 3, "{id}");
            // FSDP1 (flat parameters) under the eager kernels: not FSDP2's copies.
            let r = prepared(id);
            let req = r.flags.request(&r.model, &r.hardware, None).unwrap();
            assert!(!req.stack.fsdp2, "{id}");
        }
    }
}

/// llm-foundry's A100 table ran FlashAttention's Triton kernel of 2022 (`attn_impl: triton`),
/// priced at the middle of FlashAttention v1's published A100 ranges (Dao 2023, Sec. 1;
/// nothing fitted to these rows): its 28 runs beyond 4,096 tokens, where the attention is most
/// of the step, are within 8 % on average; at FlashAttention-2's rates they were 32 % fast.
#[test]
fn llm_foundry_a100_long_runs_take_the_triton_kernels_rates() {
    let long: Vec<_> = group("llm-foundry-mpt-a100")
        .into_iter()
        .filter(|(id, _, _)| prepared(id).model.seq_len > 4096)
        .collect();
    assert_eq!(long.len(), 28);
    assert!(mae(&long) < 0.08, "{}", mae(&long));
    let mut fa2_errors = Vec::new();
    for (id, _, _) in &long {
        let r = prepared(id);
        let req = r.flags.request(&r.model, &r.hardware, None).unwrap();
        assert_eq!(
            req.stack.attention_kernel,
            pplan::cost::AttentionKernel::Triton
        );
        let mut fa2 = r.flags.clone();
        fa2.stack.attention_kernel = "fa2".into();
        fa2_errors.push(r.predict_with(&r.hardware, &fa2).unwrap().error);
    }
    let fa2_mae = fa2_errors.iter().map(|e| e.abs()).sum::<f64>() / fa2_errors.len() as f64;
    assert!(fa2_mae > 0.25, "{fa2_mae}");
    // The kernel that ran is slower: each run's prediction falls with it.
    assert!(fa2_errors.iter().zip(&long).all(|(f, (_, e, _))| f > e));
}

/// The ModelZoo's Qwen3-235B-A22B rows: the stated layouts and stack reach the request, m289's
/// 96 stages for 94 layers put the embedding and the loss alone at the ends, and Megatron-LM's
/// causal FLOP count is the one the page reports (published TFLOP/s x step x GPUs over the
/// step's tokens, within 1 %; counting the attention core whole would be 13 % more).
#[test]
fn modelzoo_rows_take_the_stated_layout_and_count_megatrons_flops() {
    let g = group("modelzoo-qwen3-h100-bf16");
    assert_eq!(g.len(), 5);
    for (id, _, p) in &g {
        let r = prepared(id);
        let req = r.flags.request(&r.model, &r.hardware, None).unwrap();
        assert_eq!(req.stack.moe_imbalance, 1.0, "{id}");
        assert_eq!(req.stack.moe_comm_overlap, *id == "m287", "{id}");
        assert_eq!(req.stack.grad_accumulation_fusion, *id != "m288", "{id}");
        assert_eq!(req.stack.blocking_p2p, p.chunks == 1, "{id}");
        let m = &r.row.measured.all;
        let per_token = m["published_tflops_per_gpu"].as_f64().unwrap()
            * 1e12
            * m["step_time_s"].as_f64().unwrap()
            * p.gpus as f64
            / (p.global_batch * r.model.seq_len) as f64;
        let counted = megatron_lm_flops_per_token(&r.model);
        assert!((per_token / counted - 1.0).abs() < 0.01, "{id}");
    }
    let m289 = g.iter().find(|x| x.0 == "m289").unwrap().2;
    assert_eq!(m289.stage_layers.len(), 96);
    assert_eq!((m289.stage_layers[0], m289.stage_layers[95]), (0, 0));
    // By hand for Qwen3-235B-A22B at 4096 tokens.
    let layer = 4096.0 * 9216.0 + 8192.0 * 4096.0 * 2.0 + 8.0 * 3.0 * 4096.0 * 1536.0;
    let by_hand = 6.0 * (94.0 * layer + 4096.0 * 151936.0);
    let model = &prepared("m286").model;
    assert!((megatron_lm_flops_per_token(model) / by_hand - 1.0).abs() < 1e-12);
}

/// The long-context runs: forced balance held out, within 8 % each and 7 % on average (2.7 % on
/// average while DeepEP's NVLink copies were counted per expert; counted per GPU, as its
/// dispatch layout sends them, 4.9 %, too fast: DeepEP's achieved NVLink rate and its layout
/// and notify kernels are not modelled); the dropless runs' `--moe-imbalance 1.52` (1.48 with
/// copies per expert) gives all four forced/dropless ratios of the table within 1 %, so it is
/// the one value fitted to them.
#[test]
fn modelzoo_long_context_runs_and_the_dropless_imbalance() {
    let forced = group("modelzoo-qwen3-long-context-h100");
    let dropless = group("modelzoo-qwen3-long-context-dropless-h100");
    assert_eq!((forced.len(), dropless.len()), (4, 4));
    for g in [&forced, &dropless] {
        assert!(mae(g) < 0.07, "{}", mae(g));
        for (id, e, p) in g.iter() {
            assert!(e.abs() < 0.08 && p.fits, "{id}: {e}");
        }
    }
    for (f, d) in forced.iter().zip(&dropless) {
        let measured = prepared(f.0).row.measured.value / prepared(d.0).row.measured.value;
        let ratio = d.2.step_time_s / f.2.step_time_s;
        assert!(
            (ratio / measured - 1.0).abs() < 0.01,
            "{}: {ratio} vs {measured}",
            f.0
        );
    }
}

/// Megatron-Bridge's 2025-26 runs with their recipes' switches (the Blackwell GEMM ceiling is
/// fitted to the dense B200 and GB200 rows, the rest held out): the dense rows within 8 % on
/// average (issue 40's bar) and 30 % each (the NVFP4 Llama 3 70B rows on GB200 are +15 to +26
/// %), the MoE rows within a 35 % guard on average (they are issue 40's: host time, dispatch
/// and memory), GB300 within 35 % each; the NVFP4 recipes run without the userbuffers overlap.
#[test]
fn bridge_rows_within_their_guards() {
    let g = group("megatron-bridge-2025-26");
    assert!(g.len() >= 120, "{}", g.len());
    let (moe, dense): (Vec<_>, Vec<_>) = g.iter().partition(|x| x.2.active_params < x.2.params);
    let dense: Vec<_> = dense.into_iter().copied().collect();
    let moe: Vec<_> = moe.into_iter().copied().collect();
    assert!(mae(&dense) < 0.08, "dense {}", mae(&dense));
    assert!(dense.iter().all(|x| x.1.abs() < 0.30), "dense rows");
    assert!(mae(&moe) < 0.35, "moe {}", mae(&moe));
    for (id, e, p) in group("megatron-bridge-gb300") {
        assert!(e.abs() < 0.35, "{id}: {e}");
        assert_eq!(p.tp_comm_overlap, p.precision != "nvfp4", "{id}");
    }
    // The recipes' switches reach the request: the 26.06 Llama 3.1 405B NVFP4 row on GB200
    // runs without the userbuffers overlap and without the parameter-gather overlap (the
    // recipe's out-of-memory workaround), its FP8 sibling with both.
    let nvfp4 = row("m038").outcome.as_ref().unwrap();
    assert!(!nvfp4.prediction.tp_comm_overlap && !nvfp4.prediction.overlap_param_gather);
    let fp8 = row("m036").outcome.as_ref().unwrap();
    assert!(fp8.prediction.tp_comm_overlap && fp8.prediction.overlap_param_gather);
}
