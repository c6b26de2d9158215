//! What the routed experts' grouped GEMMs pay beside their FLOPs, against hand counts: in a low
//! precision, their operands' casts and the split accumulator, as the dense layers'; with
//! biases (GPT-OSS), the second GEMM's bias, which Megatron-Core adds weighted by each row's
//! routing probability, expert by expert in eager PyTorch (`TEGroupedMLP._apply_bias`,
//! core_v0.15.0-0.19.0) unless Transformer Engine's op fuser runs the grouped experts
//! (`--use-transformer-engine-op-fuser`), whose fused GEMM adds it; that switch through a plan
//! file and the Megatron-LM arguments, and its refusal with expert tensor parallelism. No
//! timed assertions.

mod common;
use common::{json, pplan};
use pplan::cost::recipe::MoeDispatcher;
use pplan::cost::{CostModel, Layout, Recompute, Stack};
use pplan::inputs::{Hardware, Model};

/// [`common::small_moe`] with biases on its linear layers (GPT-OSS's experts).
fn biased() -> Model {
    let mut m = common::small_moe();
    m.arch.add_bias_linear = Some(true);
    m
}

/// EP `ep` of 8 ranks, no tensor parallelism, balanced routing, `stack` otherwise.
fn with_stack<'a>(m: &'a Model, hw: &'a Hardware, ep: u64, stack: Stack) -> CostModel<'a> {
    CostModel {
        model: m,
        hw,
        layout: Layout {
            dp: 8,
            ep,
            recompute: Recompute::None,
            ..Layout::tensor_parallel(1)
        },
        stack: Stack {
            moe_imbalance: 1.0,
            ..stack
        },
    }
}

fn cm<'a>(m: &'a Model, hw: &'a Hardware, ep: u64, fuser: bool) -> CostModel<'a> {
    with_stack(
        m,
        hw,
        ep,
        Stack {
            moe_layer_host_s: 0.0,
            te_op_fuser: fuser,
            ..Stack::megatron_core()
        },
    )
}

#[test]
fn the_second_expert_bias_costs_its_eager_passes_unless_fused() {
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let m = biased();
    // 1024 tokens x top-2 over EP 4 of 8 experts: 2 local experts, 1024 rows each, 2048 rows
    // of h = 1024 on the rank.
    let elements = 2048.0 * 1024.0;
    let eager = cm(&m, &hw, 4, false);
    let fused = cm(&m, &hw, 4, true);
    assert!(eager.moe_eager_expert_bias() && !fused.moe_eager_expert_bias());
    assert_eq!(
        eager.moe_expert_bias_bytes(),
        (28.0 * elements, 36.0 * elements)
    );
    assert_eq!(fused.moe_expert_bias_bytes(), (0.0, 0.0));
    // Kernels: per local expert a product and an add forward, then the concatenation and
    // the cast back; backward five per expert and one more.
    let (ke, kf) = (eager.moe_kernels(2.0), fused.moe_kernels(2.0));
    assert_eq!(ke.forward - kf.forward, 2.0 * 2.0 + 2.0);
    assert_eq!(ke.backward_input - kf.backward_input, 5.0 * 2.0 + 1.0);
    assert_eq!(ke.backward_weight, kf.backward_weight);
    // In the layer, the bytes at the HBM rate, forward and backward.
    let hbm = hw.hbm_bytes_per_s();
    let (le, lf) = (eager.moe_layer(), fused.moe_layer());
    let df = le.forward.memory_s - lf.forward.memory_s;
    let db = le.backward_input.memory_s - lf.backward_input.memory_s;
    assert!((df * hbm / (28.0 * elements) - 1.0).abs() < 1e-9, "{df}");
    assert!((db * hbm / (36.0 * elements) - 1.0).abs() < 1e-9, "{db}");
    // Without biases, or a dense model, nothing.
    let mut plain = biased();
    plain.arch.add_bias_linear = None;
    assert_eq!(
        cm(&plain, &hw, 4, false).moe_expert_bias_bytes(),
        (0.0, 0.0)
    );
}

const GPT_OSS: [&str; 22] = [
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
    "128",
    "--seq-len",
    "4096",
    "--moe-imbalance",
    "1",
    "--recompute",
    "selective-norm-act",
    "--format",
    "json",
    "--micro-batch=1",
];

#[test]
fn the_op_fuser_switch_predicts_again_from_its_plan_and_is_emitted() {
    let dir = std::env::temp_dir().join(format!("pplan-expert-bias-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("fused.plan.json");
    let run = |extra: &[&str]| {
        let (code, out, err) = pplan(&[&GPT_OSS[..], extra].concat());
        assert_eq!(code, 0, "{extra:?}: {err}");
        json(&out)
    };
    let eager = run(&[]);
    let fused = run(&[
        "--use-transformer-engine-op-fuser",
        "on",
        "--output",
        plan.to_str().unwrap(),
    ]);
    let step = |v: &serde_json::Value| v["step_time_s"].as_f64().unwrap();
    assert!(
        step(&fused) < step(&eager),
        "{} {}",
        step(&fused),
        step(&eager)
    );
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&plan).unwrap()).unwrap();
    assert_eq!(p["parallelism"]["use_transformer_engine_op_fuser"], true);
    let (code, out, err) = pplan(&[
        "predict",
        "--plan",
        plan.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(step(&json(&out)), step(&fused));
    // Off, the plan writes no field.
    let off = dir.join("eager.plan.json");
    run(&["--output", off.to_str().unwrap()]);
    let p: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&off).unwrap()).unwrap();
    assert!(p["parallelism"]
        .get("use_transformer_engine_op_fuser")
        .is_none());
    // Megatron-LM's flag, read back.
    let (code, out, err) = pplan(&[
        "emit",
        "--plan",
        plan.to_str().unwrap(),
        "--target",
        "megatron",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("--use-transformer-engine-op-fuser"), "{out}");
    let back = pplan::plan::megatron_args::parse_megatron_args(&out, "megatron.sh").unwrap();
    assert!(back.te_op_fuser);
    // Not with expert tensor parallelism, as Megatron-Core asserts.
    let (code, _, err) = pplan(&[
        "predict",
        "--model",
        "qwen3-30b-a3b",
        "--hardware",
        "h100-80gb",
        "--gpus",
        "16",
        "--tp",
        "2",
        "--ep",
        "8",
        "--etp",
        "2",
        "--global-batch",
        "64",
        "--use-transformer-engine-op-fuser",
        "on",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--etp 2") && err.contains("--use-transformer-engine-op-fuser"),
        "{err}"
    );
}

/// The routed experts' grouped GEMMs in a low precision pay what a dense layer's GEMMs pay:
/// their operands cast expert by expert (forward the inputs of both expert GEMMs, backward
/// both output gradients: read in BF16, written as the format's row- and column-wise copies;
/// current scaling reads each once more for its amax) and, on Hopper, the split accumulator
/// of the input- and weight-gradient GEMMs. Hand counts on the small model: 1,024 tokens,
/// top-2 over EP 8 of 8 experts, so 2,048 rows on the rank and one local expert; h = 1,024,
/// f_e = 512 (gated: the first GEMM writes 1,024 a row).
#[test]
fn expert_gemm_operands_are_cast_like_the_dense_layers() {
    use pplan::cost::fp8_recipe::Fp8Recipe;
    use pplan::inputs::hardware::Precision;
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let m = common::small_moe();
    let (rows, h, f, up) = (2048.0, 1024.0, 512.0, 1024.0);
    let with = |precision, fp8_recipe| Stack {
        precision,
        fp8_recipe,
        moe_dispatcher: MoeDispatcher::HybridEp,
        moe_layer_host_s: 0.0,
        ..Stack::default()
    };
    let bf16 = with_stack(&m, &hw, 8, with(Precision::Bf16, Fp8Recipe::Delayed));
    let delayed = with_stack(&m, &hw, 8, with(Precision::Fp8, Fp8Recipe::Delayed));
    let current = with_stack(&m, &hw, 8, with(Precision::Fp8, Fp8Recipe::Tensorwise));
    assert_eq!(
        delayed.moe_cast_elements(),
        (rows * (h + f), rows * (h + up))
    );
    assert_eq!(bf16.moe_low_precision_cast_bytes(), (0.0, 0.0));
    // H100: FP8 GEMMs take one layout, so both copies are written: 2 + 1 + 1 bytes.
    assert_eq!(
        delayed.moe_low_precision_cast_bytes(),
        (4.0 * rows * (h + f), 4.0 * rows * (h + up))
    );
    assert_eq!(
        current.moe_low_precision_cast_bytes(),
        (6.0 * rows * (h + f), 6.0 * rows * (h + up))
    );
    // Delayed scaling casts an operand's experts in one kernel; current scaling expert by
    // expert, each with its amax zeroed, computed and turned into a scale.
    assert_eq!(delayed.moe_cast_kernels(16.0), (2.0, 2.0));
    assert_eq!(current.moe_cast_kernels(16.0), (128.0, 128.0));
    assert_eq!(bf16.moe_cast_kernels(16.0), (0.0, 0.0));

    // The MoE layer and its dense part (attention, no MLP), the difference being the
    // experts'.
    let layers = |c: &CostModel| {
        let dense_model = c.moe_dense_part_model();
        let dense = CostModel {
            model: &dense_model,
            ..*c
        }
        .layer();
        (dense, c.moe_layer())
    };
    // In the layer: beyond its dense part, the forward's HBM time is the activation (6 bytes
    // an element of the gated intermediate), the router's scores (2 x 8 bytes each of 1,024
    // tokens x 8 experts) and the casts; HybridEP permutes inside its kernels.
    let hbm = hw.hbm_bytes_per_s();
    for c in [&bf16, &delayed, &current] {
        let (cast_f, cast_b) = c.moe_low_precision_cast_bytes();
        let (dense, moe) = layers(c);
        let want_f = (6.0 * rows * f + 16.0 * 1024.0 * 8.0 + cast_f) / hbm;
        let want_b = (10.0 * rows * f + 16.0 * 1024.0 * 8.0 + cast_b) / hbm;
        let got_f = moe.forward.memory_s - dense.forward.memory_s;
        let got_b = moe.backward_input.memory_s - dense.backward_input.memory_s;
        assert!((got_f / want_f - 1.0).abs() < 1e-9, "{got_f} vs {want_f}");
        assert!((got_b / want_b - 1.0).abs() < 1e-9, "{got_b} vs {want_b}");
    }
    // The input- and weight-gradient expert GEMMs with the split accumulator (H100: 1.15x);
    // the forward without, as for per-tensor scales in the dense layers.
    let slow = hw.gpu.fp8_split_accumulator_slowdown.unwrap();
    let expert_gemms = |c: &CostModel| {
        let (dense, moe) = layers(c);
        (
            moe.forward.gemm_s - dense.forward.gemm_s,
            moe.backward_weight.gemm_s - dense.backward_weight.gemm_s,
        )
    };
    let (fwd_d, wgrad_d) = expert_gemms(&delayed);
    let (fwd_c, wgrad_c) = expert_gemms(&current);
    assert!((fwd_c / fwd_d - 1.0).abs() < 1e-12);
    let [e_up, e_down] = current.moe_expert_gemms();
    let unslowed = [e_up.weight_grad(), e_down.weight_grad()]
        .iter()
        .map(|g| pplan::cost::compute::gemm_time_in_s(&hw, g, Precision::Fp8))
        .sum::<f64>();
    assert!((wgrad_d / wgrad_c - 1.0).abs() < 1e-12);
    // The router's weight gradient (1,024 tokens x 8 experts x h, BF16) runs beside them.
    let router_wgrad = pplan::cost::compute::gemm_time_s(
        &hw,
        &pplan::cost::compute::Gemm {
            m: 1024.0,
            n: 8.0,
            k: h,
            batch: 1.0,
        }
        .weight_grad(),
    );
    let want = unslowed * slow + router_wgrad;
    assert!((wgrad_c / want - 1.0).abs() < 1e-12, "{wgrad_c} vs {want}");
}
