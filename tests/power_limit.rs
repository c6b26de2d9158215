//! A GPU's power limit (docs/cost-model.md, "Power limit"): `gpu.sustained_clock_fraction`
//! slows every GEMM and attention kernel by exactly its inverse and no memory-bound kernel;
//! the bundled 500 W H100 profile carries the value scaled from NVIDIA's published
//! power-capped MLPerf runs and torchtitan's page's memory bandwidth; and its held-out rows
//! (torchtitan's Grand Teton runs) are predicted within what docs/validation.md states.

mod common;

use common::{pplan, row_error, validated_rows};
use pplan::cost::compute::{gemm_time_in_s, Gemm};
use pplan::cost::{Attention, CostModel, Layout, Stack};
use pplan::inputs::hardware::Precision;
use pplan::inputs::{Hardware, Model};

fn capped(fraction: f64) -> Hardware {
    let mut hw = Hardware::bundled("h100-80gb").unwrap();
    hw.gpu.sustained_clock_fraction = Some(fraction);
    hw
}

fn cost_model<'a>(m: &'a Model, hw: &'a Hardware) -> CostModel<'a> {
    CostModel {
        model: m,
        hw,
        layout: Layout::tensor_parallel(1),
        stack: Stack {
            attention: Attention::Flash,
            ..Stack::default()
        },
    }
}

#[test]
fn the_clock_fraction_slows_gemms_and_attention_and_not_memory() {
    let full = Hardware::bundled("h100-80gb").unwrap();
    let half = capped(0.5);
    let g = Gemm {
        m: 8192.0,
        n: 8192.0,
        k: 8192.0,
        batch: 1.0,
    };
    for p in [Precision::Bf16, Precision::Fp8] {
        let ratio = gemm_time_in_s(&half, &g, p) / gemm_time_in_s(&full, &g, p);
        assert!((ratio - 2.0).abs() < 1e-12, "{p:?}: {ratio}");
    }
    let m = Model::preset("llama3-8b").unwrap();
    let (a, b) = (cost_model(&m, &full), cost_model(&m, &half));
    let (af, ab) = a.attention_core_s();
    let (bf, bb) = b.attention_core_s();
    assert!((bf / af - 2.0).abs() < 1e-12 && (bb / ab - 2.0).abs() < 1e-12);
    // The layer's memory-bound traffic (norms, activation, rotary) is the same bytes at the
    // same HBM rate.
    let (la, lb) = (a.layer(), b.layer());
    assert_eq!(la.forward.memory_s, lb.forward.memory_s);
    assert!(lb.forward.gemm_s > 1.99 * la.forward.gemm_s);
}

#[test]
fn the_500w_profile_carries_the_published_figures() {
    let hw = Hardware::bundled("h100-96gb-500w").unwrap();
    // (500 / 700)^k with k the mean of MLPerf v4.0's two H100 MaxQ points: 53,727 of 70,116
    // samples/s at 400 W, 50,999 of 62,183 at 450 W.
    let k = |r: f64, p: f64| r.ln() / (p / 700.0_f64).ln();
    let k = (k(53727.0 / 70116.0, 400.0) + k(50999.0 / 62183.0, 450.0)) / 2.0;
    let f = (500.0_f64 / 700.0).powf(k);
    let carried = hw.sustained_clock_fraction();
    assert!((carried - f).abs() < 0.0005, "{carried} vs {f}");
    assert_eq!(hw.gpu.power_limit_w, Some(500.0));
    assert_eq!(hw.gpu.hbm_bandwidth_bytes_per_s, 2.4e12);
    // The same die and laws as the 700 W part.
    let h100 = Hardware::bundled("h100-80gb").unwrap();
    assert_eq!(hw.gpu.peak_flops_per_s, h100.gpu.peak_flops_per_s);
    assert_eq!(hw.gpu.gemm_efficiency_max, h100.gpu.gemm_efficiency_max);
    assert!(
        !hw.fitted.iter().any(|f| f.contains("clock")),
        "{:?}",
        hw.fitted
    );
}

#[test]
fn an_impossible_clock_fraction_is_refused_by_name() {
    let dir = std::env::temp_dir().join(format!("pplan-power-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut v: serde_json::Value =
        serde_json::from_str(include_str!("../hardware/h100-96gb-500w.json")).unwrap();
    v["gpu"]["sustained_clock_fraction"] = 1.5.into();
    let path = dir.join("hw.json");
    std::fs::write(&path, v.to_string()).unwrap();
    let (code, _, err) = pplan(&[
        "predict",
        "--model",
        "llama3-8b",
        "--gpus",
        "8",
        "--global-batch",
        "8",
        "--hardware",
        path.to_str().unwrap(),
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("gpu.sustained_clock_fraction") && err.contains("(0, 1]"),
        "{err}"
    );
}

/// torchtitan's Grand Teton rows that pplan models whole (eager FSDP; FSDP + CP 1-2 at 32k-64k
/// tokens; 2D on 256 GPUs; 3D on 512; 4D at CP 1), held out: within 8 % each, the figures
/// docs/validation.md gives. The compiled FSDP rows (torch.compile is not modelled) and the
/// ring at CP 4-8 are not asserted here; the page says what they lack.
#[test]
fn torchtitan_grand_teton_rows_pplan_models_whole() {
    let rows = validated_rows("data/runs/torchtitan-llama3-h100-500w.json");
    let mut seen = 0;
    for id in [
        "tt-h100-8b-8-fsdp",
        "tt-h100-8b-128-fsdp",
        "tt-h100-8b-cp1",
        "tt-h100-8b-cp2",
        "tt-h100-70b-256-2d",
        "tt-h100-70b-256-2d-asynctp",
        "tt-h100-405b-512-1f1b",
        "tt-h100-405b-512-interleaved",
        "tt-h100-405b-cp1",
    ] {
        let e = row_error(&rows, id);
        assert!(e.abs() < 0.08, "{id}: {e}");
        seen += 1;
    }
    assert_eq!(seen, 9);
}
