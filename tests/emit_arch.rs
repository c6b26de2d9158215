//! The architecture facts of `pplan emit --target megatron` (issue 41): every bundled model
//! on every stack emits its rotary base and scaling, QK norm, biases, activation, norm epsilon
//! and router settings, and reading the arguments back gives the same model, layout and stack
//! fields; Hugging Face configs' facts survive the trip; and three published-scale plans pass
//! the asserts of Megatron-LM's `validate_args` that apply to their flags
//! (megatron/training/arguments.py at d98e8a64ddf34856e74b24714e3bedb2f5a39553).

mod common;
use common::pplan;
use pplan::inputs::model::{preset_names, Model};
use pplan::plan::emit::{emit, Target};
use pplan::plan::megatron_args::parse_megatron_args;
use pplan::plan::plan_file::{
    stages_from_counts, Parallelism, Plan, PlanModel, PlanSchedule, PLAN_FORMAT, PLAN_VERSION,
};
use pplan::schedule::generators::{generate, GenParams, ScheduleName};
use std::path::PathBuf;

const STACKS: [&str; 3] = ["megatron-core", "megatron-2021", "torchtitan"];

/// A 2-stage 1F1B plan of `model` on `stack`, with expert parallelism where it has experts.
fn plan(model: &Model, stack: &str) -> Plan {
    let (p, m) = (2u32, 4u32);
    let sch = generate(ScheduleName::OneFOneB, GenParams::new(p, m)).unwrap();
    let counts = pplan::inputs::profile::even_split(model.num_layers, p);
    let ep = if model.moe.is_some() { 2 } else { 1 };
    Plan {
        format: PLAN_FORMAT.into(),
        version: PLAN_VERSION,
        model: PlanModel::from_model(model),
        hardware: "h100-80gb".into(),
        parallelism: Parallelism {
            gpus: 2 * p as u64 * 2,
            tp: 2,
            pp: p as u64,
            dp: 2,
            ep,
            micro_batch: 1,
            global_batch: 2 * m as u64,
            chunks: 1,
            recompute: "none".into(),
            sequence_parallel: true,
            zero1: true,
            stack: stack.into(),
            overlap_grad_reduce: true,
            ..Parallelism::stack_defaults()
        },
        dtype: "bf16".into(),
        stages: stages_from_counts(&counts, ScheduleName::OneFOneB.placement(), p),
        schedule: PlanSchedule::from_schedule("1f1b", &sch),
        predicted: None,
    }
}

/// Emits `p` for Megatron-LM, reads it back and compares the model (architecture facts
/// included), the layout and the stack fields.
fn round_trip(p: &Plan) -> String {
    let out = emit(p, Target::Megatron, None).unwrap();
    let back = parse_megatron_args(&out.text, "megatron.sh")
        .unwrap_or_else(|e| panic!("{e}\n{}", out.text));
    let mut model = PlanModel::from_model(&back.model);
    model.name = p.model.name.clone();
    // A config's head_dim equal to hidden / heads reads back as the default (no --kv-channels).
    let mut want = p.model.clone();
    if want.kv_channels == Some(want.hidden_size / want.num_attention_heads) {
        want.kv_channels = None;
    }
    assert_eq!(model, want, "{}", out.text);
    let par = &p.parallelism;
    let counts: Vec<u32> = p.stages.iter().map(|s| s.num_layers).collect();
    assert_eq!(back.stage_layers, counts);
    assert_eq!(
        (back.tp, back.pp, back.cp, back.ep, back.etp, back.chunks),
        (par.tp, par.pp, par.cp, par.ep, par.etp, par.chunks)
    );
    assert_eq!(
        (back.zero1, back.zero, back.sequence_parallel),
        (
            par.zero1,
            par.zero.max(u8::from(par.zero1)),
            par.sequence_parallel
        )
    );
    assert_eq!(
        (back.precision.as_str(), back.overlap_grad_reduce),
        (par.precision.as_str(), par.overlap_grad_reduce)
    );
    // Read but not part of pplan's model: the positions' table size; grouped GEMMs.
    let ignored: &[&str] = if p.model.moe.is_some() {
        &["--max-position-embeddings", "--moe-grouped-gemm"]
    } else {
        &["--max-position-embeddings"]
    };
    assert_eq!(back.ignored, ignored, "{}", out.text);
    out.text
}

#[test]
fn every_bundled_model_on_every_stack_reads_back_with_its_architecture() {
    for name in preset_names() {
        let model = Model::preset(name).unwrap();
        for stack in STACKS {
            round_trip(&plan(&model, stack));
        }
    }
}

#[test]
fn bundled_models_emit_their_published_architecture() {
    let text = |name: &str| round_trip(&plan(&Model::preset(name).unwrap(), "megatron-core"));
    let has = |t: &str, flags: &[&str]| {
        for f in flags {
            assert!(t.contains(&format!("  {f}\n")), "{f} missing:\n{t}");
        }
    };
    has(
        &text("qwen3-30b-a3b"),
        &[
            "--qk-layernorm",
            "--rotary-base 1000000",
            "--norm-epsilon 0.000001",
            "--moe-router-dtype fp32",
            "--moe-aux-loss-coeff 0.001",
        ],
    );
    has(
        &text("deepseek-v3"),
        &[
            "--qk-layernorm",
            "--rope-type yarn",
            "--rotary-scaling-factor 40",
            "--mscale-all-dim 1",
            "--moe-router-score-function sigmoid",
            "--moe-router-enable-expert-bias",
            "--moe-router-topk-scaling-factor 2.5",
            "--moe-router-load-balancing-type seq_aux_loss",
        ],
    );
    has(
        &text("llama3-70b"),
        &[
            "--rotary-base 500000",
            "--use-rope-scaling",
            "--rope-scaling-factor 8",
            "--swiglu",
            "--disable-bias-linear",
        ],
    );
    let gpt = text("gpt-1.7b");
    assert!(
        !gpt.contains("--swiglu") && !gpt.contains("--rotary-base"),
        "{gpt}"
    );
}

fn hf(name: &str) -> Model {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/hf")
        .join(name);
    Model::load(path.to_str().unwrap()).unwrap()
}

#[test]
fn hugging_face_configs_keep_their_architecture_through_megatron_arguments() {
    let qwen25 = hf("qwen2.5-7b.json");
    assert!(qwen25.arch.add_qkv_bias);
    assert_eq!(qwen25.arch.rotary_base, Some(1e6));
    let t = round_trip(&plan(&qwen25, "megatron-core"));
    assert!(
        t.contains("  --add-qkv-bias\n") && t.contains("  --disable-bias-linear\n"),
        "{t}"
    );

    let oss = hf("gpt-oss-120b.json");
    assert_eq!(oss.arch.add_bias_linear, Some(true));
    assert_eq!(oss.arch.activation.as_deref(), Some("quick-geglu"));
    let t = round_trip(&plan(&oss, "megatron-core"));
    for f in [
        "--quick-geglu",
        "--activation-func-clamp-value 7",
        "--glu-linear-offset 1",
        "--window-size 128,0",
        "--window-attn-skip-freq 2",
        "--rotary-base 150000",
    ] {
        assert!(t.contains(&format!("  {f}\n")), "{f}:\n{t}");
    }
    assert!(!t.contains("--disable-bias-linear"), "{t}");

    for name in [
        "llama-3.1-8b.json",
        "qwen3-8b.json",
        "mixtral-8x7b-v0.1.json",
        "qwen3-30b-a3b.json",
    ] {
        round_trip(&plan(&hf(name), "megatron-core"));
    }
    // Gemma's GeGLU has no Megatron-LM flag: the same shapes with a note, not silently SwiGLU.
    let gemma = hf("gemma-2-9b.json");
    assert_eq!(gemma.arch.activation.as_deref(), Some("geglu"));
    let out = emit(&plan(&gemma, "megatron-core"), Target::Megatron, None).unwrap();
    assert!(
        out.notes.iter().any(|n| n.contains("GeGLU")),
        "{:?}",
        out.notes
    );
}

#[test]
fn megatron_style_json_facts_read_and_survive_the_trip() {
    let path =
        std::env::temp_dir().join(format!("pplan-arch-megatron-{}.json", std::process::id()));
    std::fs::write(
        &path,
        r#"{"num_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "ffn_hidden_size": 512,
            "seq_length": 512, "vocab_size": 1024, "swiglu": true, "normalization": "RMSNorm",
            "position_embedding_type": "rope", "rotary_base": 1000000, "norm_epsilon": 1e-6,
            "qk_layernorm": true, "add_qkv_bias": true, "add_bias_linear": false,
            "num_experts": 8, "moe_router_topk": 2, "moe_router_score_function": "sigmoid",
            "moe_router_enable_expert_bias": true, "moe_aux_loss_coeff": 0.0,
            "moe_router_dtype": "fp32"}"#,
    )
    .unwrap();
    let m = Model::load(path.to_str().unwrap()).unwrap();
    assert_eq!(m.arch.rotary_base, Some(1e6));
    assert!(m.arch.qk_layernorm && m.arch.add_qkv_bias && m.arch.moe_router_enable_expert_bias);
    assert_eq!(
        m.arch.add_bias_linear, None,
        "no biases is the gated family's default"
    );
    assert_eq!(m.arch.moe_aux_loss_coeff, Some(0.0));
    round_trip(&plan(&m, "megatron-core"));
}

/// Flags and their values of an emitted file (the array's lines).
fn flags(text: &str) -> Vec<(String, Option<String>)> {
    text.lines()
        .filter_map(|l| l.strip_prefix("  --"))
        .map(|l| {
            let mut it = l.splitn(2, ' ');
            let f = format!("--{}", it.next().unwrap());
            (f, it.next().map(|v| v.trim_matches('\'').to_string()))
        })
        .collect()
}

/// The asserts of Megatron-LM's validate_args (arguments.py at d98e8a64; transformer_config.py
/// for the router) that apply to emitted flags and environment; each failure names its line.
fn validate_args_failures(text: &str, hopper: bool) -> Vec<String> {
    let fl = flags(text);
    let has = |f: &str| fl.iter().any(|(n, _)| n == f);
    let val = |f: &str| {
        fl.iter()
            .rev()
            .find(|(n, _)| n == f)
            .and_then(|(_, v)| v.clone())
    };
    let num = |f: &str, d: u64| val(f).map_or(d, |v| v.parse().unwrap());
    let env_one = text
        .lines()
        .any(|l| l == "export CUDA_DEVICE_MAX_CONNECTIONS=1");
    let fsdp = has("--use-megatron-fsdp");
    let mut bad = Vec::new();
    let mut check = |ok: bool, what: &str| {
        if !ok {
            bad.push(what.to_string());
        }
    };
    // arguments.py:1025: --overlap-param-gather needs the distributed optimizer or Megatron-FSDP.
    check(
        !has("--overlap-param-gather") || has("--use-distributed-optimizer") || fsdp,
        "1025 overlap-param-gather without distributed optimizer",
    );
    // arguments.py:1028: --overlap-param-gather needs --overlap-grad-reduce.
    check(
        !has("--overlap-param-gather") || has("--overlap-grad-reduce"),
        "1028 overlap-param-gather without overlap-grad-reduce",
    );
    // arguments.py:1166: Megatron-FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS != 1.
    check(
        !fsdp || !env_one,
        "1166 FSDP with CUDA_DEVICE_MAX_CONNECTIONS=1",
    );
    // arguments.py:1169: Megatron-FSDP requires --ckpt-format fsdp_dtensor.
    check(
        !fsdp || val("--ckpt-format").as_deref() == Some("fsdp_dtensor"),
        "1169 FSDP without fsdp_dtensor",
    );
    // arguments.py:1676: fsdp_dtensor only with Megatron-FSDP.
    check(
        val("--ckpt-format").as_deref() != Some("fsdp_dtensor") || fsdp,
        "1676 fsdp_dtensor without FSDP",
    );
    // arguments.py:1332: without --kv-channels, hidden divisible by heads.
    check(
        has("--kv-channels") || num("--hidden-size", 1) % num("--num-attention-heads", 1) == 0,
        "1332 hidden % heads",
    );
    // arguments.py:1336: with cp > 1, seq-length a multiple of 2 cp.
    let cp = num("--context-parallel-size", 1);
    check(
        cp == 1 || num("--seq-length", 0) % (2 * cp) == 0,
        "1336 seq-length % 2cp",
    );
    // arguments.py:1442: --tp-comm-overlap needs --sequence-parallel.
    check(
        !has("--tp-comm-overlap") || has("--sequence-parallel"),
        "1442 tp-comm-overlap without sequence-parallel",
    );
    // arguments.py:1477: tp or cp > 1 before Blackwell, without FSDP: CUDA_DEVICE_MAX_CONNECTIONS=1.
    let tp = num("--tensor-model-parallel-size", 1);
    check(
        !(hopper && (tp > 1 || cp > 1) && !fsdp) || env_one,
        "1477 CUDA_DEVICE_MAX_CONNECTIONS=1 missing",
    );
    // arguments.py:1657: experts a multiple of the expert-parallel size.
    let ep = num("--expert-model-parallel-size", 1);
    check(
        ep == 1 || num("--num-experts", 0) % ep == 0,
        "1657 num-experts % ep",
    );
    // transformer_config.py:2617: expert bias only with sigmoid (or sqrtsoftplus) scores.
    check(
        !has("--moe-router-enable-expert-bias")
            || matches!(
                val("--moe-router-score-function").as_deref(),
                Some("sigmoid" | "sqrtsoftplus")
            ),
        "transformer_config 2617 expert bias without sigmoid",
    );
    bad
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pplan-emit-arch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// `pplan predict ARGS --output PLAN` then `pplan emit --target megatron`: the emitted text.
fn emitted(name: &str, args: &[&str]) -> String {
    let plan = tmp(&format!("{name}.json"));
    let mut a = vec![
        "predict",
        "--format",
        "json",
        "--output",
        plan.to_str().unwrap(),
    ];
    a.extend_from_slice(args);
    let (code, _, err) = pplan(&a);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = pplan(&[
        "emit",
        "--plan",
        plan.to_str().unwrap(),
        "--target",
        "megatron",
    ]);
    assert_eq!(code, 0, "{err}");
    out
}

#[test]
fn three_plans_pass_megatron_validate_args() {
    let llama = emitted(
        "llama",
        &[
            "--model",
            "llama3-70b",
            "--hardware",
            "h100-80gb",
            "--gpus",
            "64",
            "--tp",
            "4",
            "--pp",
            "4",
            "--cp",
            "2",
            "--precision",
            "fp8",
            "--global-batch",
            "128",
            "--micro-batch",
            "1",
            "--sequence-parallel",
            "on",
            "--tp-comm-overlap",
            "on",
            "--zero",
            "1",
            "--overlap-grad-reduce",
            "on",
            "--overlap-param-gather",
            "on",
            "--stack",
            "megatron-core",
        ],
    );
    assert!(
        llama.contains("export CUDA_DEVICE_MAX_CONNECTIONS=1"),
        "{llama}"
    );
    let qwen = emitted(
        "qwen",
        &[
            "--model",
            "qwen3-30b-a3b",
            "--hardware",
            "h100-80gb",
            "--gpus",
            "16",
            "--tp",
            "1",
            "--pp",
            "1",
            "--ep",
            "8",
            "--global-batch",
            "256",
            "--micro-batch",
            "1",
            "--stack",
            "megatron-core",
        ],
    );
    let qwen_fsdp = emitted(
        "qwen-fsdp",
        &[
            "--model",
            "qwen3-30b-a3b",
            "--hardware",
            "h100-80gb",
            "--gpus",
            "16",
            "--tp",
            "2",
            "--pp",
            "1",
            "--ep",
            "8",
            "--global-batch",
            "256",
            "--micro-batch",
            "1",
            "--zero",
            "3",
            "--stack",
            "megatron-core",
        ],
    );
    assert!(
        qwen_fsdp.contains("  --ckpt-format fsdp_dtensor\n"),
        "{qwen_fsdp}"
    );
    assert!(
        qwen_fsdp.contains("unset CUDA_DEVICE_MAX_CONNECTIONS"),
        "{qwen_fsdp}"
    );
    let deepseek = emitted(
        "deepseek",
        &[
            "--model",
            "deepseek-v3",
            "--hardware",
            "h800",
            "--gpus",
            "256",
            "--tp",
            "1",
            "--pp",
            "8",
            "--ep",
            "32",
            "--global-batch",
            "1024",
            "--micro-batch",
            "1",
            "--stack",
            "megatron-core",
        ],
    );
    for (name, text) in [
        ("llama", &llama),
        ("qwen", &qwen),
        ("qwen-fsdp", &qwen_fsdp),
        ("deepseek", &deepseek),
    ] {
        let bad = validate_args_failures(text, true);
        assert!(bad.is_empty(), "{name}: {bad:?}\n{text}");
        // Every flag is Megatron-LM's, and the file reads back.
        parse_megatron_args(text, "megatron.sh").unwrap();
    }
    // The checker itself catches what it checks.
    let broken = qwen_fsdp.replace("  --ckpt-format fsdp_dtensor\n", "");
    assert_eq!(
        validate_args_failures(&broken, true),
        ["1169 FSDP without fsdp_dtensor"]
    );
}
