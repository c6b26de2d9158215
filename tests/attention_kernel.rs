//! `--attention-kernel cudnn|fa2`: whose fused attention kernels run the attention core, each
//! at its own measured law in the hardware profile (docs/cost-model.md, "Flash attention").
//! FlashAttention-2's (PyTorch SDPA's flash backend, torchtitan before 2025-03) runs at about
//! half cuDNN's rate on Hopper; on A100 the two are the same law; a profile without it refuses
//! it by name; plans carry it and the emitters say what their framework runs.

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
fn a_profile_without_flash_attention_2_rates_refuses_it_by_name() {
    let mut b200 = LLAMA3_8B_32K.to_vec();
    b200[4] = "b200";
    let (code, _, err) = pplan(&with(&b200, &["--attention-kernel", "fa2"]));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("gpu.attention_fa2_efficiency_forward"),
        "{err}"
    );
    assert!(err.contains("--attention-kernel cudnn"), "{err}");
    let (code, _, err) = pplan(&with(&LLAMA3_8B_32K, &["--attention-kernel", "fa3"]));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("valid: cudnn, fa2"), "{err}");
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
    // cuDNN's, the default, is left out of the plan.
    step(&with(
        &LLAMA3_8B_32K,
        &["--attention-kernel", "cudnn", "--output", plan],
    ));
    let text = std::fs::read_to_string(plan).unwrap();
    assert!(!text.contains("attention_kernel"), "{text}");
    std::fs::remove_dir_all(&dir).ok();
}
