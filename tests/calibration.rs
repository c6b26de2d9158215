//! Every calibrated kernel figure in a bundled hardware profile against the published (or, for
//! issue 18's GPU runs, measured) number it came from. A profile's `sources` entry for a
//! calibrated field ends with `published: N UNIT` or `measured: N UNIT`; the field's value must
//! reproduce N (within 1%, the precision the figures are read to).

use pplan::cost::{Attention, CostModel, Layout, Stack};
use pplan::inputs::{Hardware, Model};

/// (field path, value) of the calibrated fields a profile has, with the published figure.
fn published(hw: &Hardware) -> Vec<(String, f64, f64, String)> {
    let mut out = Vec::new();
    for (field, text) in &hw.sources {
        let Some((i, tag)) = ["published: ", "measured: "]
            .iter()
            .find_map(|t| text.rfind(t).map(|i| (i, *t)))
        else {
            continue;
        };
        let rest = &text[i + tag.len()..];
        let mut words = rest.split_whitespace();
        let number: f64 = words
            .next()
            .and_then(|n| n.trim_end_matches([')', ',', ';']).parse().ok())
            .unwrap_or_else(|| panic!("{}: {field}: no number after 'published:'", hw.name));
        let unit = words
            .next()
            .unwrap_or("")
            .trim_end_matches([')', ',', ';'])
            .to_string();
        let value = match field.as_str() {
            "gpu.attention_efficiency_forward" => hw.gpu.attention_efficiency_forward,
            "gpu.attention_efficiency_backward" => hw.gpu.attention_efficiency_backward,
            "gpu.attention_fa2_efficiency_forward" => hw.gpu.attention_fa2_efficiency_forward,
            "gpu.attention_fa2_efficiency_backward" => hw.gpu.attention_fa2_efficiency_backward,
            "gpu.attention_noncausal_efficiency_forward" => {
                hw.gpu.attention_noncausal_efficiency_forward
            }
            "gpu.attention_noncausal_efficiency_backward" => {
                hw.gpu.attention_noncausal_efficiency_backward
            }
            "gpu.fp8_split_accumulator_slowdown" => hw.gpu.fp8_split_accumulator_slowdown,
            "gpu.fp8_block_scaling_slowdown" => hw.gpu.fp8_block_scaling_slowdown,
            "gpu.kernel_launch_s" => hw.gpu.kernel_launch_s,
            "gpu.gemm_latency_s" => hw.gpu.gemm_latency_s,
            "gpu.graph_kernel_gap_s" => hw.gpu.graph_kernel_gap_s,
            other => panic!(
                "{}: {other} cites a published figure but no check knows it",
                hw.name
            ),
        }
        .unwrap_or_else(|| panic!("{}: {field} cited but absent", hw.name));
        out.push((field.clone(), value, number, unit));
    }
    out
}

#[test]
fn calibrated_figures_reproduce_their_published_numbers() {
    let mut checked = 0;
    for (name, _) in pplan::inputs::hardware::BUNDLED {
        let hw = Hardware::bundled(name).unwrap();
        for (field, value, number, unit) in published(&hw) {
            // Efficiencies are quoted as the kernel's achieved rate on the profile's GPU;
            // slowdowns as the published ratio of two kernels' times.
            let achieved = match unit.as_str() {
                "TFLOP/s" => value * hw.gpu.peak_flops_per_s / 1e12,
                "ratio" => value,
                // Host times in microseconds.
                "us" => value * 1e6,
                other => panic!("{name}: {field}: unknown unit {other}"),
            };
            assert!(
                (achieved / number - 1.0).abs() < 0.01,
                "{name}: {field} = {value} gives {achieved:.3} {unit}, published {number}"
            );
            checked += 1;
        }
    }
    assert!(checked >= 5, "only {checked} calibrated figures found");
}

fn cost_model<'a>(m: &'a Model, hw: &'a Hardware, attention: Attention) -> CostModel<'a> {
    CostModel {
        model: m,
        hw,
        layout: Layout {
            sequence_parallel: true,
            ..Layout::tensor_parallel(8)
        },
        stack: Stack {
            attention,
            ..Stack::default()
        },
    }
}

/// Flash attention costs the attention core at the profile's measured rate: the forward is
/// (1 + 128/s)/2 of `4 b s^2 a d / t` FLOPs over `efficiency x peak`, the backward 2.5 times
/// those FLOPs over the backward efficiency (GPT-3 175B, s = 2048, t = 8 on A100).
#[test]
fn flash_attention_core_is_its_flops_over_the_measured_rate() {
    let hw = Hardware::bundled("a100-80gb").unwrap();
    let m = Model::preset("gpt3-175b").unwrap();
    let cm = cost_model(&m, &hw, Attention::Flash);
    let (s, a, d, t) = (2048.0, 96.0, 128.0, 8.0);
    let flops = 4.0 * s * s * a * d / t * (1.0 + 128.0 / s) / 2.0;
    let (fwd, bwd) = cm.attention_core_s();
    assert!((fwd / (flops / (0.6 * 312e12)) - 1.0).abs() < 1e-9, "{fwd}");
    assert!(
        (bwd / (2.5 * flops / (0.5 * 312e12)) - 1.0).abs() < 1e-9,
        "{bwd}"
    );
    // Flash removes the s^2 traffic of the score kernels: the layer is faster both ways.
    let unfused = cost_model(&m, &hw, Attention::Unfused).layer();
    let flash = cm.layer();
    assert!(flash.forward.total_s() < unfused.forward.total_s());
    assert!(flash.backward_input.total_s() < unfused.backward_input.total_s());
    assert!(flash.forward.memory_s < 0.5 * unfused.forward.memory_s);
    // The reported FLOPs keep Megatron's convention (full s^2, no causal saving).
    assert_eq!(
        cm.layer_forward_flops(),
        cost_model(&m, &hw, Attention::Unfused).layer_forward_flops()
    );
}

/// H200 and H800 (the same die as H100) carry H100's measured GEMM ceiling, its shape
/// fall-off and its fitted training factor (which `tests/cli_runs.rs` re-fits to NeMo's runs).
#[test]
fn h200_and_h800_carry_the_h100_gemm_terms() {
    let h100 = Hardware::bundled("h100-80gb").unwrap();
    assert_eq!(h100.gpu.gemm_efficiency_max, 0.72);
    for name in ["h200", "h800"] {
        let h = Hardware::bundled(name).unwrap();
        assert_eq!(
            h.gpu.gemm_efficiency_max, h100.gpu.gemm_efficiency_max,
            "{name}"
        );
        assert_eq!(h.gpu.gemm_training_factor, h100.gpu.gemm_training_factor);
        assert_eq!(h.gpu.gemm_half_dim, h100.gpu.gemm_half_dim, "{name}");
    }
}
