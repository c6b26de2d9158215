//! `--attention-kernel cudnn|fa2|triton`: whose fused attention kernels run the attention core,
//! each at its own law in the hardware profile (docs/cost-model.md, "Flash attention").
//! FlashAttention-2's (PyTorch SDPA's flash backend, torchtitan before 2025-03) runs at about
//! half cuDNN's rate on Hopper; on A100 the two are the same law, and FlashAttention's Triton
//! kernel of 2022 (llm-foundry's) slower; a profile without a kernel's rates refuses it by
//! name; plans carry it and the emitters say what their framework runs.

mod common;
use common::{json, pplan, with};

/// Llama 3 8B at 32,768 tokens on one H100 node with torchtitan's stack, ending in
/// `--attention-kernel`.
const LLAMA3_8B_32K: [&str; 17] = [
    "predict",
    "--model",
    "llama3-8b",
    "--hardware",
    "h100-80gb",
    "--gpus",
    "8",
    "--global-batch",
    "8",
    "--seq-len",
    "32768",
    "--stack",
    "torchtitan",
    "--format",
    "json",
    "--tp",
    "1",
];

fn step(args: &[&str]) -> f64 {
    let (code, out, err) = pplan(args);
    assert_eq!(code, 0, "{err}");
    json(&out)["step_time_s"].as_f64().unwrap()
}

#[test]
fn flash_attention_2_is_slower_on_hopper_and_the_same_law_on_a100() {
    let cudnn = step(&with(&LLAMA3_8B_32K, &["--attention-kernel", "cudnn"]));
    let fa2 = step(&with(&LLAMA3_8B_32K, &["--attention-kernel", "fa2"]));
    // At 32k tokens the attention core is about 40 % of the layer's FLOPs; at half the rate
    // the step grows by a fifth or more.
    assert!(fa2 > 1.2 * cudnn && fa2 < 1.6 * cudnn, "{cudnn} {fa2}");
    // The default is cuDNN's.
    assert_eq!(step(&LLAMA3_8B_32K), cudnn);

    let mut a100 = LLAMA3_8B_32K.to_vec();
    a100[4] = "a100-80gb";
    assert_eq!(
        step(&with(&a100, &["--attention-kernel", "fa2"])),
        step(&with(&a100, &["--attention-kernel", "cudnn"]))
    );
}

#[test]
fn a_profile_without_a_kernels_rates_refuses_it_by_name() {
    let mut b200 = LLAMA3_8B_32K.to_vec();
    b200[4] = "b200";
    for kernel in ["fa2", "triton"] {
        let (code, _, err) = pplan(&with(&b200, &["--attention-kernel", kernel]));
        assert_eq!(code, 2, "{err}");
        let field = format!("gpu.attention_{kernel}_efficiency_forward");
        assert!(err.contains(&field) && err.contains("a100-80gb"), "{err}");
        assert!(err.contains("--attention-kernel cudnn"), "{err}");
    }
    let (code, _, err) = pplan(&with(&LLAMA3_8B_32K, &["--attention-kernel", "fa3"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("valid: cudnn, fa2, triton"), "{err}");
}

/// On A100 the Triton kernel's attention core runs at FlashAttention v1's published middle
/// rates (0.40 of peak forward, 0.30 backward; FlashAttention-2's 0.6 and 0.5): the core takes
/// 1.5 times as long forward and 5/3 backward, and a 32k-token step of Llama 3 8B, about two
/// fifths of it the attention core, grows by a fifth to two fifths.
#[test]
fn the_triton_kernel_runs_at_flash_attention_v1s_rates_on_a100() {
    let hw = pplan::inputs::Hardware::bundled("a100-80gb").unwrap();
    let g = &hw.gpu;
    assert_eq!(g.attention_triton_efficiency_forward, Some(0.40));
    assert_eq!(g.attention_triton_efficiency_backward, Some(0.30));
    let (tf, tb) = hw.attention_triton_efficiency_at(32768.0, 32.0).unwrap();
    let (ff, fb) = hw.attention_fa2_efficiency_at(32768.0, 32.0).unwrap();
    assert!((ff / tf - 1.5).abs() < 1e-9 && (fb / tb - 5.0 / 3.0).abs() < 1e-9);
    let mut a100 = LLAMA3_8B_32K.to_vec();
    a100[4] = "a100-80gb";
    let fa2 = step(&with(&a100, &["--attention-kernel", "fa2"]));
    let triton = step(&with(&a100, &["--attention-kernel", "triton"]));
    assert!(triton > 1.2 * fa2 && triton < 1.4 * fa2, "{fa2} {triton}");
}

/// No Hopper rate of the Triton kernel is published: the Hopper profiles assume it bears to
/// FlashAttention-2's measured law there the ratio it bears on A100 (both use Ampere's
/// instructions on Hopper), at every length and head count.
#[test]
fn the_triton_kernel_on_hopper_is_flash_attention_2s_law_at_the_a100_ratio() {
    for name in ["h100-80gb", "h200", "h800"] {
        let hw = pplan::inputs::Hardware::bundled(name).unwrap();
        for (seq, heads) in [(2048.0, 8.0), (8192.0, 64.0), (65536.0, 4.0)] {
            let (tf, tb) = hw.attention_triton_efficiency_at(seq, heads).unwrap();
            let (ff, fb) = hw.attention_fa2_efficiency_at(seq, heads).unwrap();
            assert!((tf / ff - 0.40 / 0.60).abs() < 1e-3, "{name} {seq}");
            assert!((tb / fb - 0.30 / 0.50).abs() < 1e-3, "{name} {seq}");
        }
    }
}

/// A profile's kernel rates are fractions of peak: zero or above one is refused by field.
#[test]
fn kernel_rates_outside_zero_to_one_are_refused_by_field() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/hardware/a100-80gb.json"
    ))
    .unwrap();
    for field in [
        "attention_triton_efficiency_backward",
        "attention_fa2_efficiency_forward",
    ] {
        // 0.3 -> 1.3, 0.6 -> 1.6.
        let bad = text.replacen(&format!("\"{field}\": 0."), &format!("\"{field}\": 1."), 1);
        assert_ne!(bad, text, "{field}");
        let err = pplan::inputs::Hardware::from_json(&bad, "bad.json").unwrap_err();
        assert!(err.to_string().contains(&format!("gpu.{field}")), "{err}");
    }
}

#[test]
fn plans_carry_the_kernel_and_the_emitters_say_what_runs() {
    let dir = std::env::temp_dir().join(format!("pplan-attention-kernel-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("plan.json");
    let plan = plan.to_str().unwrap();
    let fa2 = step(&with(
        &LLAMA3_8B_32K,
        &["--attention-kernel", "fa2", "--output", plan],
    ));
    let text = std::fs::read_to_string(plan).unwrap();
    assert!(text.contains("\"attention_kernel\": \"fa2\""), "{text}");
    assert_eq!(step(&["predict", "--plan", plan, "--format", "json"]), fa2);
    for (target, says) in [
        ("torchtitan", "FLASH_ATTENTION"),
        ("megatron", "flash-attn"),
    ] {
        let (code, out, err) = pplan(&["emit", "--plan", plan, "--target", target]);
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains(says) || err.contains(says),
            "{target}: {out}{err}"
        );
    }
    // The Triton kernel (llm-foundry's): the plan carries it, neither emitter can run it.
    let triton = step(&with(
        &LLAMA3_8B_32K,
        &["--attention-kernel", "triton", "--output", plan],
    ));
    let text = std::fs::read_to_string(plan).unwrap();
    assert!(text.contains("\"attention_kernel\": \"triton\""), "{text}");
    assert_eq!(
        step(&["predict", "--plan", plan, "--format", "json"]),
        triton
    );
    for target in ["torchtitan", "megatron"] {
        let (code, out, err) = pplan(&["emit", "--plan", plan, "--target", target]);
        assert_eq!(code, 0, "{err}");
        assert!(
            (out.contains("Triton kernel") || err.contains("Triton kernel"))
                && (out.contains("llm-foundry") || err.contains("llm-foundry")),
            "{target}: {out}{err}"
        );
    }
    // cuDNN's, the default, is left out of the plan.
    step(&with(
        &LLAMA3_8B_32K,
        &["--attention-kernel", "cudnn", "--output", plan],
    ));
    let text = std::fs::read_to_string(plan).unwrap();
    assert!(!text.contains("attention_kernel"), "{text}");
    std::fs::remove_dir_all(&dir).ok();
}

/// The softmax floor reaches the attention core's time: a model with heads of 64 does half the
/// attention FLOPs of the same model with heads of 128 but, on cuDNN below the H100's floor,
/// takes `0.5 x d0/64` as long forward and backward (docs/cost-model.md, "The softmax floor");
/// FlashAttention-2's law carries no floor, and latent attention's 192/128 heads are above it.
#[test]
fn a_head_dim_of_64_takes_cudnns_floor() {
    use pplan::cost::{Attention, AttentionKernel, CostModel, Layout, Stack};
    use pplan::inputs::{Hardware, Model};
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let (d0f, d0b) = (
        hw.gpu.attention_floor_head_dim_forward.unwrap(),
        hw.gpu.attention_floor_head_dim_backward.unwrap(),
    );
    let with_head_dim = |d: u64| {
        let mut m = Model::preset("llama3-8b").unwrap();
        m.attention_head_dim = Some(d);
        m
    };
    let (m64, m128) = (with_head_dim(64), with_head_dim(128));
    let core = |m: &Model, kernel| {
        CostModel {
            model: m,
            hw: &hw,
            layout: Layout::tensor_parallel(1),
            stack: Stack {
                attention: Attention::Flash,
                attention_kernel: kernel,
                ..Stack::megatron_core()
            },
        }
        .attention_core_s()
    };
    let ((f64_, b64), (f128, b128)) = (
        core(&m64, AttentionKernel::Cudnn),
        core(&m128, AttentionKernel::Cudnn),
    );
    assert!(
        (f64_ / f128 - 0.5 * d0f / 64.0).abs() < 1e-9,
        "{}",
        f64_ / f128
    );
    assert!(
        (b64 / b128 - 0.5 * d0b / 64.0).abs() < 1e-9,
        "{}",
        b64 / b128
    );
    let ((f64_, b64), (f128, b128)) = (
        core(&m64, AttentionKernel::Fa2),
        core(&m128, AttentionKernel::Fa2),
    );
    assert!((f64_ / f128 - 0.5).abs() < 1e-9 && (b64 / b128 - 0.5).abs() < 1e-9);
    let dsv3 = Model::preset("deepseek-v3").unwrap();
    let cm = CostModel {
        model: &dsv3,
        hw: &hw,
        layout: Layout::tensor_parallel(1),
        stack: Stack {
            attention: Attention::Flash,
            ..Stack::megatron_core()
        },
    };
    assert_eq!(cm.attention_head_dim_factor(), (1.0, 1.0));
}
