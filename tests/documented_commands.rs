//! The `pplan predict` commands docs/validation.md gives with their figures, run as a user runs
//! them, so that the figures cannot go stale: DeepSeek-V3 on 2,048 H800 with its published
//! layout against the report's 180K H800 GPU hours per trillion tokens ("DeepSeek-V3 on 2,048
//! H800"), and GPT-OSS 120B on 64 H100 with its Megatron-Bridge recipe against the published
//! 5,824 tokens/s per GPU ("Megatron-Bridge on DGX-H100").

mod common;
use common::pplan;

const PUBLISHED_GPU_HOURS: f64 = 180_000.0;

/// GPU hours per 10^12 tokens for the documented command with `extra` flags.
fn gpu_hours(extra: &[&str]) -> f64 {
    let args = [
        "predict",
        "--model",
        "deepseek-v3",
        "--hardware",
        "h800",
        "--gpus",
        "2048",
        "--pp",
        "16",
        "--ep",
        "64",
        "--schedule",
        "dualpipev",
        "--global-batch",
        "15360",
        "--micro-batch",
        "1",
        "--recompute",
        "none",
        "--attention",
        "flash",
        "--zero1",
        "--overlap-grad-reduce",
        "--overlap-param-gather",
        "on",
        "--precision",
        "fp8",
        "--fp8-recipe",
        "blockwise",
        "--moe-dispatcher",
        "deepep",
        "--tokens",
        "1T",
        "--format",
        "json",
    ];
    let (code, out, err) = pplan(&[&args[..], extra].concat());
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["gpu_hours"].as_f64().unwrap()
}

#[test]
fn published_layout_against_the_reported_gpu_hours() {
    let error = |h: f64| h / PUBLISHED_GPU_HOURS - 1.0;
    // The table's rows, which leave the multi-token prediction module out (the page says so):
    // -0.3 % overlapped, -2.4 % without Megatron-Core's MoE host time, +37.9 % with the
    // all-to-all exposed in the report's fine-grained (blockwise) scaling, its GEMMs at the
    // block scales' slowdown measured on H100 with cuBLASLt (-4.5, -6.6, +32.4 % at the split
    // accumulator's published 1.15; -5.3, -7.3, +30.0 % with delayed scaling; -9.0, -10.8,
    // +24.7 % before the experts' FP8 casts were costed).
    let without = |extra: &[&str]| error(gpu_hours(&[extra, &["--mtp-num-layers", "0"]].concat()));
    let overlapped = without(&["--moe-comm-overlap", "on"]);
    let no_host = without(&["--moe-comm-overlap", "on", "--moe-layer-host-ms", "0"]);
    let exposed = without(&["--moe-comm-overlap", "off"]);
    assert!((overlapped + 0.003).abs() < 0.0005, "{overlapped}");
    assert!((no_host + 0.024).abs() < 0.0005, "{no_host}");
    assert!((exposed - 0.379).abs() < 0.0005, "{exposed}");
    assert!(no_host < overlapped && overlapped < exposed);
    // The command as typed: the bundled model now trains its MTP depth (the report's 180K
    // hours include it). On pplan's even split of 61 layers over DualPipeV's 32 stages the
    // V placement puts the last stage (one layer, the MTP depth and a second output layer
    // and loss) on device 0 beside the embedding's stage: device 0 becomes the bottleneck,
    // +58.6 % (+57.3 % without the host time, +75.3 % exposed; +50.1, +48.8, +66.2 % at the
    // published split accumulator). DeepSeek's own layout for it is not published.
    let with = |extra: &[&str]| error(gpu_hours(extra));
    let overlapped_mtp = with(&["--moe-comm-overlap", "on"]);
    let no_host_mtp = with(&["--moe-comm-overlap", "on", "--moe-layer-host-ms", "0"]);
    let exposed_mtp = with(&["--moe-comm-overlap", "off"]);
    assert!((overlapped_mtp - 0.586).abs() < 0.0005, "{overlapped_mtp}");
    assert!((no_host_mtp - 0.573).abs() < 0.0005, "{no_host_mtp}");
    assert!((exposed_mtp - 0.753).abs() < 0.0005, "{exposed_mtp}");
    assert!(overlapped_mtp > overlapped && exposed_mtp > exposed);
}

/// GPT-OSS 120B (the Hugging Face config under tests/data/hf/), Megatron-Bridge's 26.04.01
/// recipe on 64 H100: 5,824 tokens/s per GPU published, +5.8 % in pplan (+6.0 % before the
/// distributed optimizer's overlapped parameter gather was costed; +11.3 % before the
/// softmax floor and the split accumulator were measured on H100, H100's training factor
/// refitted beside the latter; +12.3 % before cuDNN's softmax floor at head dimension 64; +21.7 % before YaRN's
/// eager rotary embedding and the clamped activation's eager clamps were costed; +25.9 % before the
/// second expert GEMM's bias was costed as Megatron-Core adds it, expert by expert; +25.5 % with
/// the host time at 8.9 ms, before the experts' FP8 casts moved the B200 reading; +28.1 % with DeepEP
/// copying a token once per expert over NVLink).
#[test]
fn gpt_oss_120b_against_its_bridge_row() {
    let (code, out, err) = pplan(&[
        "predict",
        "--model",
        "tests/data/hf/gpt-oss-120b.json",
        "--hardware",
        "h100-80gb",
        "--gpus",
        "64",
        "--pp",
        "4",
        "--ep",
        "8",
        "--global-batch",
        "1280",
        "--micro-batch",
        "1",
        "--seq-len",
        "4096",
        "--moe-dispatcher",
        "deepep",
        "--moe-imbalance",
        "1",
        "--recompute",
        "selective-norm-act",
        "--zero1",
        "--overlap-grad-reduce",
        "--overlap-param-gather",
        "on",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let tokens = v["tokens_per_s_per_gpu"].as_f64().unwrap();
    let error = tokens / 5824.0 - 1.0;
    assert!((error - 0.058).abs() < 0.0005, "{tokens} tokens/s, {error}");
}
