//! A mixture-of-experts plan written by `predict --output` and emitted for Megatron-LM and
//! torchtitan: every emitted flag and key is upstream's (tests/data/, with their commits), and
//! the Megatron-LM arguments read back give the same model (total and active parameters, the
//! MoE layer pattern, latent attention) and the same expert layout.

mod common;
use common::pplan;
use pplan::inputs::model::Model;
use pplan::plan::megatron_args::parse_megatron_args;
use std::collections::BTreeSet;

fn data_set(file: &str) -> BTreeSet<String> {
    let path = format!("{}/tests/data/{file}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(str::to_string)
        .collect()
}

/// A 4-layer DeepSeek-style model: first layer dense, MLA, 16 experts with a shared one,
/// routed within 2 of 4 expert groups.
const MODEL: &str = r#"{"num_layers": 4, "hidden_size": 512, "num_attention_heads": 8,
    "ffn_hidden_size": 1024, "seq_length": 256, "vocab_size": 1024, "swiglu": true,
    "untie_embeddings_and_output_weights": true, "num_experts": 16, "moe_router_topk": 4,
    "moe_ffn_hidden_size": 128, "moe_shared_expert_intermediate_size": 128,
    "moe_layer_freq": [0, 1, 1, 1], "multi_latent_attention": true, "q_lora_rank": 96,
    "kv_lora_rank": 64, "qk_head_dim": 32, "qk_pos_emb_head_dim": 16, "v_head_dim": 32,
    "moe_router_num_groups": 4, "moe_router_group_topk": 2}"#;

#[test]
fn moe_plans_emit_upstream_flags_and_read_back() {
    let dir = std::env::temp_dir().join(format!("pplan-moe-emit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = dir.join("moe.json");
    std::fs::write(&model, MODEL).unwrap();
    let plan = dir.join("plan.json");
    let out = pplan(&[
        "predict",
        "--model",
        model.to_str().unwrap(),
        "--hardware",
        "h100-80gb",
        "--gpus",
        "16",
        "--tp",
        "2",
        "--pp",
        "2",
        "--ep",
        "4",
        "--etp",
        "2",
        "--global-batch",
        "16",
        "--sequence-parallel",
        "on",
        "--output",
        plan.to_str().unwrap(),
        "--format",
        "json",
    ]);
    let (code, stdout, stderr) = out;
    assert_eq!(code, 0, "{stderr}");
    let pred: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let m = Model::load(model.to_str().unwrap()).unwrap();
    assert_eq!(pred["ep"], 4);
    assert_eq!(pred["etp"], 2);
    assert_eq!(pred["active_params"], m.active_params());
    let plan_text = std::fs::read_to_string(&plan).unwrap();
    let plan_json: serde_json::Value = serde_json::from_str(&plan_text).unwrap();
    assert_eq!(plan_json["parallelism"]["ep"], 4);
    assert_eq!(plan_json["model"]["moe"]["num_experts"], 16);
    assert_eq!(plan_json["model"]["moe"]["moe_router_num_groups"], 4);

    let (code, text, stderr) = pplan(&[
        "emit",
        "--plan",
        plan.to_str().unwrap(),
        "--target",
        "megatron",
    ]);
    assert_eq!(code, 0, "{stderr}");
    let valid = data_set("megatron_args.txt");
    for want in [
        "--expert-model-parallel-size 4",
        "--expert-tensor-parallel-size 2",
        "--num-experts 16",
        "--moe-router-topk 4",
        "--moe-ffn-hidden-size 128",
        "--moe-shared-expert-intermediate-size 128",
        "--moe-layer-freq '[0,1,1,1]'",
        "--moe-router-num-groups 4",
        "--moe-router-group-topk 2",
        "--multi-latent-attention",
        "--q-lora-rank 96",
        "--kv-lora-rank 64",
        "--qk-head-dim 32",
        "--qk-pos-emb-head-dim 16",
        "--v-head-dim 32",
    ] {
        assert!(text.contains(want), "{want} missing:\n{text}");
    }
    let code_lines = text.lines().filter(|l| !l.trim_start().starts_with('#'));
    for word in code_lines
        .flat_map(str::split_whitespace)
        .filter(|w| w.starts_with("--"))
    {
        assert!(valid.contains(word), "{word} is not a Megatron-LM flag");
    }
    let back = parse_megatron_args(&text, "megatron.sh").unwrap();
    assert_eq!((back.ep, back.etp), (4, 2));
    assert_eq!(back.model.moe, m.moe);
    assert_eq!(back.model.mla, m.mla);
    assert_eq!(back.model.total_params(), m.total_params());

    // Megatron-Core's recompute modules are written as its flags and read back.
    let mut emitted = String::new();
    for (recompute, module) in [
        ("selective-norm-act", "moe_act"),
        ("selective-norm-moe", "moe"),
    ] {
        let modules_plan = dir.join(format!("{recompute}.json"));
        let (code, _, stderr) = pplan(&[
            "predict",
            "--model",
            model.to_str().unwrap(),
            "--hardware",
            "h100-80gb",
            "--gpus",
            "16",
            "--tp",
            "2",
            "--pp",
            "2",
            "--ep",
            "4",
            "--global-batch",
            "16",
            "--sequence-parallel",
            "on",
            "--recompute",
            recompute,
            "--output",
            modules_plan.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{stderr}");
        let (code, text, stderr) = pplan(&[
            "emit",
            "--plan",
            modules_plan.to_str().unwrap(),
            "--target",
            "megatron",
        ]);
        assert_eq!(code, 0, "{stderr}");
        let words: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .flat_map(str::split_whitespace)
            .collect();
        let at = words
            .iter()
            .position(|w| *w == "--recompute-modules")
            .unwrap_or_else(|| panic!("no --recompute-modules in\n{text}"));
        assert_eq!(&words[at + 1..at + 3], ["layernorm", module], "{text}");
        assert!(text.contains("--recompute-granularity selective"), "{text}");
        let back = parse_megatron_args(&text, "megatron.sh").unwrap();
        assert_eq!(back.recompute, recompute);
        emitted = text;
    }
    // A module list pplan does not model is refused, naming the flag and what it reads.
    let other = emitted.replace("\n  moe\n", "\n  mlp\n");
    assert_ne!(other, emitted);
    let err = parse_megatron_args(&other, "args.sh")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("--recompute-modules") && err.contains("layernorm moe_act"),
        "{err}"
    );

    let (_, text, _) = pplan(&[
        "emit",
        "--plan",
        plan.to_str().unwrap(),
        "--target",
        "torchtitan",
    ]);
    assert!(text.contains("expert_parallel_degree=4"), "{text}");
    assert!(data_set("torchtitan_keys.txt").contains("ParallelismConfig.expert_parallel_degree"));
    std::fs::remove_dir_all(&dir).ok();
}
