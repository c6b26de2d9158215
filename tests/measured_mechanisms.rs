//! The mechanisms measured on one H100 and one H200 on 2026-11-28 for issue 43
//! (benches/gpu_mechanisms.py and gpu_kernels.py part `attention_head_dim`;
//! hardware/measured/{h100,h200}/): each check sets a profile field beside the measurement it
//! rests on (`h100-80gb` and `h800` the H100's, `h200` the H200's), or bounds how far a law holds
//! against it, as docs/cost-model.md reports.

use pplan::cost::compute::{gemm_floor_s, gemm_kernel_efficiency, Gemm};
use pplan::inputs::hardware::Precision;
use pplan::inputs::Hardware;
use serde_json::Value;
use std::collections::BTreeMap;

mod common;
use common::measured as load;

fn rows(gpu: &str, file: &str, part: &str) -> Vec<Value> {
    load(gpu, file)[part].as_array().unwrap().clone()
}

fn f(r: &Value, key: &str) -> f64 {
    r[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing in {r}"))
}

fn median(v: Vec<f64>) -> f64 {
    pplan::measured::breakdown::median(v).expect("samples")
}

/// Each measured GPU, the file of its FP8 GEMMs and graph gaps, and the profiles its figures set.
const MEASURED: [(&str, &str, &[&str]); 2] = [
    ("h100", "torch-mechanisms.json", &["h100-80gb", "h800"]),
    ("h200", "torch-mechanisms-fp8-graphs.json", &["h200"]),
];

/// FP8 GEMMs on Llama 3 70B's four linear layers at t = 1, 2, 4, 8 (16 shapes): with per-tensor
/// scales the split accumulator takes a median 1.00 (H100; 0.89-1.38, the 1.38 one shape alone)
/// and 1.01 (H200; 0.92-1.11) of the fast one's time, the profiles'
/// `gpu.fp8_split_accumulator_slowdown`; with 1x128 / 128x128 block scales a GEMM takes a
/// median 1.19 (H100, 1.08-1.49) and 1.20 (H200, 1.17-1.48) of the per-tensor fast one, their
/// `gpu.fp8_block_scaling_slowdown`. Row-wise scales (torchao's recipe) pay medians 1.16 and
/// 1.12 for the split accumulator: within the 1.1x-1.2x the profiles took from pytorch/ao issue
/// #2377 before this measurement, which did not say which scales it timed. FP8 with the fast
/// accumulator runs 1.6-2.2x BF16 at the same shapes, the two peaks' ratio (2) within a tenth
/// at the median, as the cost model's one efficiency curve for both assumes.
#[test]
fn split_accumulator_and_block_scales_are_the_measured_medians() {
    for (gpu, file, profiles) in MEASURED {
        let mut by_shape: BTreeMap<(u64, String), BTreeMap<String, f64>> = BTreeMap::new();
        for r in rows(gpu, file, "fp8_scaling") {
            let key = (
                r["tp"].as_u64().unwrap(),
                r["op"].as_str().unwrap().to_string(),
            );
            by_shape
                .entry(key)
                .or_default()
                .insert(r["impl"].as_str().unwrap().to_string(), f(&r, "seconds"));
        }
        assert_eq!(by_shape.len(), 16, "{gpu}");
        let ratio =
            |a: &str, b: &str| -> Vec<f64> { by_shape.values().map(|v| v[a] / v[b]).collect() };
        let split = ratio("fp8_tensorwise", "fp8_tensorwise_fast_accum");
        let block = ratio("fp8_blockwise_1x128_128x128", "fp8_tensorwise_fast_accum");
        let row = ratio("fp8_rowwise", "fp8_rowwise_fast_accum");
        assert!(
            split.iter().all(|x| (0.85..1.4).contains(x)),
            "{gpu}: {split:?}"
        );
        assert!(
            block.iter().all(|x| (1.05..1.5).contains(x)),
            "{gpu}: {block:?}"
        );
        let (split, block, row) = (median(split), median(block), median(row));
        assert!((1.1..1.2).contains(&row), "{gpu}: row-wise {row}");
        let round = |x: f64| (x * 100.0).round() / 100.0;
        for name in profiles {
            let hw = Hardware::bundled(name).unwrap();
            assert_eq!(
                hw.gpu.fp8_split_accumulator_slowdown,
                Some(round(split)),
                "{name}"
            );
            assert_eq!(
                hw.gpu.fp8_block_scaling_slowdown,
                Some(round(block)),
                "{name}"
            );
        }
        let speedup = median(ratio("bf16", "fp8_tensorwise_fast_accum"));
        assert!((speedup / 2.0 - 1.0).abs() < 0.1, "{gpu}: {speedup}");
    }
}

/// The softmax floor on Hopper (`gpu.attention_floor_head_dim_*`): cuDNN's causal BF16 rate at
/// head dimensions below 128 over its rate at 128 with 64 query heads, each divided by the
/// law's fill term `H s/(H s + n0)`, is `d/d0`; d0 the geometric mean of `d / ratio` over a
/// GPU's points (2k-8k tokens), as scripts/fit_attention_floor.py computes it: on the H100 at
/// head dimension 64, forward 89.7 and backward 82.8 (each point within 1.5 %); on the H200 at
/// 32 and 64 (64 measured twice), 89.9 (within 2.6 %) and 81.5 (within 7.2 %). The fill term
/// itself: 32 heads against 64 at head dimension 128 within 3 % of the law on both.
#[test]
fn hopper_floors_are_the_fits_to_the_measured_head_dim_points() {
    for (gpu, files, profiles, points, spread) in [
        (
            "h100",
            &["torch-kernels-head-dim.json"][..],
            &["h100-80gb", "h800"][..],
            3,
            (0.015, 0.015),
        ),
        (
            "h200",
            &[
                "torch-kernels-head-dim.json",
                "torch-kernels-head-dim-32.json",
            ][..],
            &["h200"][..],
            9,
            (0.03, 0.08),
        ),
    ] {
        let pts: Vec<Value> = files
            .iter()
            .flat_map(|file| rows(gpu, file, "attention_head_dim"))
            .collect();
        let n0 = Hardware::bundled(profiles[0])
            .unwrap()
            .gpu
            .attention_half_work
            .unwrap();
        let fill = |h: f64, s: f64| h * s / (h * s + n0);
        let reference = |seq: &Value| {
            pts.iter()
                .find(|r| r["head_dim"] == 128 && r["heads"] == 64 && &r["seq"] == seq)
                .unwrap()
                .clone()
        };
        for (key, spread) in [
            ("forward_flops_per_s", spread.0),
            ("backward_flops_per_s", spread.1),
        ] {
            let d0s: Vec<f64> = pts
                .iter()
                .filter(|r| f(r, "head_dim") < 128.0)
                .map(|r| {
                    let b = reference(&r["seq"]);
                    let ratio = (f(r, key) / fill(f(r, "heads"), f(r, "seq")))
                        / (f(&b, key) / fill(f(&b, "heads"), f(&b, "seq")));
                    f(r, "head_dim") / ratio
                })
                .collect();
            assert_eq!(d0s.len(), points, "{gpu}");
            let d0 = (d0s.iter().map(|x| x.ln()).sum::<f64>() / d0s.len() as f64).exp();
            assert!(
                d0s.iter().all(|x| (x / d0 - 1.0).abs() < spread),
                "{gpu} {key}: {d0s:?}"
            );
            for name in profiles {
                let hw = Hardware::bundled(name).unwrap();
                let profile = if key.starts_with("forward") {
                    hw.gpu.attention_floor_head_dim_forward
                } else {
                    hw.gpu.attention_floor_head_dim_backward
                };
                assert!(
                    (profile.unwrap() - d0).abs() < 0.05,
                    "{name} {key}: fit {d0}"
                );
            }
        }
        for r in pts
            .iter()
            .filter(|r| r["head_dim"] == 128 && r["heads"] == 32)
        {
            let b = reference(&r["seq"]);
            let law = fill(32.0, f(r, "seq")) / fill(64.0, f(r, "seq"));
            for key in ["forward_flops_per_s", "backward_flops_per_s"] {
                let measured = f(r, key) / f(&b, key);
                assert!(
                    (measured / law - 1.0).abs() < 0.03,
                    "{gpu} {key} at {}: {measured} {law}",
                    r["seq"]
                );
            }
        }
    }
}

/// The routed experts' GEMMs (8 experts of one shape, cuBLAS one by one, the host far ahead)
/// at 4-16,384 rows an expert and four widths: one GEMM's own time is the row's seconds / 8
/// less the gap between kernels. The kernel curve alone is 32-54 % fast at 4-64 rows (a GEMM of
/// few rows streams its weights and waits on its prologue and epilogue, whatever its FLOPs);
/// with the floor `bytes / hbm + gpu.gemm_latency_s` (`cost::compute::gemm_floor_s`) the mean
/// error at 4-64 rows is within 12 %. `gpu.gemm_latency_s` is the least-squares value (log,
/// grid of 0.01 us) over a GPU's 48 shapes of at most 256 rows: 3.19 us on the H100, 3.46 us on
/// the H200, as scripts/fit_gemm_latency.py prints. From 1,024 rows the floor never binds and
/// the curve is 14-22 % slow on average (the kernel ceiling was measured on other shapes; the
/// training factor is fitted beside it).
#[test]
fn small_expert_gemms_take_their_bytes_and_a_latency() {
    for (gpu, _, profiles) in MEASURED {
        let hw = Hardware::bundled(profiles[0]).unwrap();
        let peak = hw.gpu.peak_flops_per_s;
        let gap = hw.kernel_gap_s();
        let loop_rows: Vec<Value> = rows(gpu, "torch-mechanisms.json", "grouped_gemm_rows")
            .into_iter()
            .filter(|r| r["impl"] == "loop")
            .collect();
        assert_eq!(loop_rows.len(), 4 * 7 * 3, "{gpu}");
        let gemm = |r: &Value| Gemm {
            m: f(r, "m"),
            n: f(r, "n"),
            k: f(r, "k"),
            batch: 1.0,
        };
        let one = |r: &Value| f(r, "seconds") / f(r, "experts") - gap;
        let curve = |g: &Gemm| g.flops() / (peak * gemm_kernel_efficiency(&hw, g));
        let with_floor = |hw: &Hardware, r: &Value| {
            let g = gemm(r);
            curve(&g).max(gemm_floor_s(hw, &g, Precision::Bf16))
        };
        // The least-squares latency over the small shapes.
        let small: Vec<&Value> = loop_rows
            .iter()
            .filter(|r| f(r, "rows_per_expert") <= 256.0)
            .collect();
        let sse = |latency: f64| {
            let mut h = hw.clone();
            h.gpu.gemm_latency_s = Some(latency);
            small
                .iter()
                .map(|r| (with_floor(&h, r) / one(r)).ln().powi(2))
                .sum::<f64>()
        };
        let best = (0..=1000)
            .map(|i| f64::from(i) * 1e-8)
            .min_by(|a, b| sse(*a).total_cmp(&sse(*b)))
            .unwrap();
        for name in profiles {
            let latency = Hardware::bundled(name).unwrap().gpu.gemm_latency_s.unwrap();
            assert!(
                (latency - best).abs() < 5e-9,
                "{name}: {latency} against {best}"
            );
        }
        let mean_error = |rows_per: f64, model: &dyn Fn(&Value) -> f64| {
            let e: Vec<f64> = loop_rows
                .iter()
                .filter(|r| f(r, "rows_per_expert") == rows_per)
                .map(|r| model(r) / one(r) - 1.0)
                .collect();
            e.iter().sum::<f64>() / e.len() as f64
        };
        for rows_per in [4.0, 16.0, 64.0] {
            let alone = mean_error(rows_per, &|r| curve(&gemm(r)));
            let floored = mean_error(rows_per, &|r| with_floor(&hw, r));
            assert!(alone < -0.3, "{gpu} {rows_per} rows: curve {alone}");
            assert!(
                floored.abs() < 0.12,
                "{gpu} {rows_per} rows: with the floor {floored}"
            );
        }
        for rows_per in [1024.0, 4096.0, 16384.0] {
            let floored = mean_error(rows_per, &|r| with_floor(&hw, r));
            assert_eq!(floored, mean_error(rows_per, &|r| curve(&gemm(r))));
            assert!(
                (0.13..0.23).contains(&floored),
                "{gpu} {rows_per} rows: {floored}"
            );
        }
    }
}

/// Causal and non-causal cuDNN attention at 32k-256k tokens (head dimension 128, batch 1) against
/// the Hopper laws: the causal forward law within 2 % to 64k tokens; at 128k and 256k with 4 and
/// 2 heads the kernel runs 18-26 % below it (the law is 22-34 % fast), where one head's keys and
/// values (67 and 134 MB) no longer fit the H200's 60 MB L2 and every query block reads them
/// from HBM again (about 130 FLOP a byte: HBM's 4.8 TB/s caps the kernel near 630 TFLOP/s), a
/// mechanism pplan does not price (a context-parallel rank's ring blocks stay below it in the
/// runs it is checked on). The causal backward law is 3-18 % fast at every length; the
/// non-causal laws within 14 % forward and 10 % backward. FlashAttention-2's law within 8 %
/// to 64k tokens.
#[test]
fn long_context_attention_against_the_laws() {
    let hw = Hardware::bundled("h200").unwrap();
    let peak = hw.gpu.peak_flops_per_s;
    for r in rows("h200", "torch-mechanisms.json", "long_context_attention") {
        let (seq, heads) = (f(&r, "seq"), f(&r, "heads"));
        let (mf, mb) = (
            f(&r, "forward_flops_per_s") / peak,
            f(&r, "backward_flops_per_s") / peak,
        );
        let causal = r["causal"] == true;
        let (lf, lb) = match (r["backend"].as_str().unwrap(), causal) {
            ("cudnn", true) => hw.attention_efficiency_at(seq, heads),
            ("cudnn", false) => hw.attention_noncausal_efficiency_at(seq).unwrap(),
            ("flash", _) => hw.attention_fa2_efficiency_at(seq, heads).unwrap(),
            (other, _) => panic!("backend {other}"),
        };
        let (ef, eb) = (lf / mf - 1.0, lb / mb - 1.0);
        let at = format!(
            "{} causal {causal} {heads} heads {seq} tokens: {ef:+.3} {eb:+.3}",
            r["backend"]
        );
        match (r["backend"].as_str().unwrap(), causal) {
            ("cudnn", true) if seq <= 65536.0 => assert!(ef.abs() < 0.02, "{at}"),
            ("cudnn", true) => assert!((0.2..0.36).contains(&ef), "{at}"),
            ("cudnn", false) => assert!(ef.abs() < 0.14 && eb.abs() < 0.10, "{at}"),
            ("flash", _) if seq <= 65536.0 => assert!(ef.abs() < 0.08 && eb.abs() < 0.08, "{at}"),
            _ => {}
        }
        if causal && r["backend"] == "cudnn" {
            assert!((0.0..0.18).contains(&eb), "{at}");
        }
    }
}

/// A dropless dispatcher's permutation kernels against bytes (512-16,384 tokens, top-8, hidden
/// 2,048-7,168): the gather into expert order (index_select) moves its bytes at 0.9 of a copy's
/// rate or faster from 2,048 tokens up, so pricing the fused permutation
/// (Megatron-Core's `moe_permute_fusion`, which the Megatron-Bridge recipes set) at the HBM rate holds: the
/// gathers' median, 4.8 TB/s, is above the profile's 4.32. The
/// unfused path is an order of magnitude slower: the gather's backward (index_add_, atomic
/// adds) at 0.30-0.34 TB/s and the eager un-permutation with its weighted sum at 0.46-0.55 TB/s,
/// which pplan does not price (its Megatron-Core stack is the recipes').
#[test]
fn permutation_gathers_run_at_copy_speed_and_scatters_do_not() {
    let pts = rows("h200", "torch-mechanisms.json", "permutation");
    assert_eq!(pts.len(), 3 * 4 * 4);
    let rate = |r: &Value, kernel: &str| {
        f(
            pts.iter()
                .find(|x| {
                    x["kernel"] == kernel
                        && x["tokens"] == r["tokens"]
                        && x["hidden"] == r["hidden"]
                })
                .unwrap(),
            "bytes_per_s",
        )
    };
    let hbm = Hardware::bundled("h200").unwrap().hbm_bytes_per_s();
    let mut gathers = Vec::new();
    for r in pts.iter().filter(|r| r["kernel"] == "copy_same_rows") {
        let copy = f(r, "bytes_per_s");
        let gather = rate(r, "permute_gather");
        gathers.push(gather);
        if f(r, "tokens") >= 2048.0 {
            assert!(gather >= 0.9 * copy, "{r}");
        }
        assert!(rate(r, "permute_backward_index_add") < 0.1 * copy, "{r}");
        assert!(rate(r, "unpermute_weighted_sum") < 0.15 * copy, "{r}");
    }
    // Not slower than the profile's HBM rate, which prices it (faster: each token's row is
    // read once per routed expert, partly from L2).
    let gather = median(gathers);
    assert!(gather > hbm, "gather {gather} against {hbm}");
}

/// CUDA graphs (a MoE layer with fixed per-expert rows, forward and backward, captured whole and
/// replayed): eager PyTorch spends 21-28 us of host time per kernel (autograd included), the
/// replay under 3 % of that; at real sizes the replayed layer takes its kernels' time within
/// 2 %, where the eager one waits on its host (Qwen3-30B-A3B: 7.9 ms against 6.4; H200).
/// Between kernels replayed from a graph the GPU waits a median 0.19 us on the H200 (0.03-0.88)
/// and 0.17 on the H100 (0.04-0.80), against 0.93-1.88 and 0.77-1.86 us issued one by one (the
/// profiles' `gpu.kernel_gap_s`, 1.5 us, within a tenth of their medians): the graph's median,
/// to a hundredth of a microsecond, is the profiles' `gpu.graph_kernel_gap_s`, which the
/// kernels a graph captures wait instead (`cost::launch`; docs/cost-model.md, "CUDA graphs").
#[test]
fn cuda_graphs_take_the_host_time_and_most_of_the_gap() {
    for r in rows("h200", "torch-mechanisms.json", "moe_graph") {
        let at = format!("{} {}", r["model"], r["size"]);
        if r["size"] == "toy" {
            let per_kernel = f(&r, "eager_host_s_per_kernel");
            assert!((20e-6..30e-6).contains(&per_kernel), "{at}: {per_kernel}");
            assert!(f(&r, "graph_host_s") < 0.03 * f(&r, "eager_host_s"), "{at}");
        } else {
            assert!(f(&r, "graph_wall_s") < 1.02 * f(&r, "kernel_s"), "{at}");
            assert!(f(&r, "eager_wall_s") > 0.98 * f(&r, "graph_wall_s"), "{at}");
        }
    }
    for (gpu, file, profiles) in MEASURED {
        let cases = rows(gpu, file, "graph_gaps");
        assert_eq!(cases.len(), 4);
        let gaps = |key: &str| median(cases.iter().map(|r| f(r, key)).collect());
        let (eager, graph) = (
            gaps("eager_gap_s_per_kernel"),
            gaps("graph_gap_s_per_kernel"),
        );
        assert!(graph < 0.25 * eager, "{gpu}: {graph} {eager}");
        let profile = Hardware::bundled(profiles[0]).unwrap().kernel_gap_s();
        assert!(
            (profile / eager - 1.0).abs() < 0.11,
            "{gpu}: {profile} {eager}"
        );
        for name in profiles {
            let in_graph = Hardware::bundled(name).unwrap().graph_kernel_gap_s();
            assert!(
                (in_graph - (graph * 1e8).round() / 1e8).abs() < 1e-12,
                "{name}: {in_graph} {graph}"
            );
        }
    }
}
