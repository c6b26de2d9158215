//! Mixture-of-experts models: public Hugging Face configs (tests/data/hf/, sources in its
//! README), the bundled MoE models and Megatron-style JSON give the total and active
//! parameter counts their publishers state.

use pplan::inputs::model::Model;
use pplan::inputs::moe::RouterGroups;

/// (file, bundled name, published total, published active, where the figures are published)
const PUBLISHED: [(&str, Option<&str>, f64, f64, &str); 6] = [
    (
        "mixtral-8x7b-v0.1",
        Some("mixtral-8x7b"),
        46.7e9,
        12.9e9,
        "Mistral AI, 'Mixtral of experts' (Jiang et al. 2024, arXiv 2401.04088), Sec. 2: 47B total, 13B active; mistral.ai announcement: 46.7B total, 12.9B per token",
    ),
    (
        "mixtral-8x22b-v0.1",
        Some("mixtral-8x22b"),
        141e9,
        39e9,
        "Mistral AI, 'Cheaper, Better, Faster, Stronger' (Mixtral 8x22B announcement, 2024): 39B active of 141B",
    ),
    (
        "qwen3-30b-a3b",
        Some("qwen3-30b-a3b"),
        30.5e9,
        3.3e9,
        "Qwen3-30B-A3B model card: 30.5B parameters, 3.3B activated",
    ),
    (
        "qwen3-235b-a22b",
        Some("qwen3-235b-a22b"),
        235e9,
        22e9,
        "Qwen3 technical report (arXiv 2505.09388), Table 2 and the model card: 235B total, 22B activated",
    ),
    (
        "deepseek-v3",
        Some("deepseek-v3"),
        671e9,
        37e9,
        "DeepSeek-V3 technical report (arXiv 2412.19437), abstract and Sec. 4.2: 671B total, 37B activated per token (the main model; its multi-token prediction module is checked on its own below)",
    ),
    (
        "gpt-oss-120b",
        None,
        116.83e9,
        5.13e9,
        "OpenAI, gpt-oss-120b & gpt-oss-20b model card (2025), Table 1: 116.83B total, 5.13B active (the active count leaves out the input embedding)",
    ),
];

fn path(name: &str) -> String {
    format!("{}/tests/data/hf/{name}.json", env!("CARGO_MANIFEST_DIR"))
}

fn check(what: &str, got: u64, published: f64, tolerance: f64, source: &str) {
    let err = got as f64 / published - 1.0;
    assert!(
        err.abs() < tolerance,
        "{what}: {:.3} B, published {:.3} B ({source}): {:+.2} %",
        got as f64 / 1e9,
        published / 1e9,
        err * 100.0
    );
}

#[test]
fn public_moe_configs_give_the_published_total_and_active_counts() {
    for (file, bundled, total, active, source) in PUBLISHED {
        let m = Model::load(&path(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(m.moe.is_some(), "{file} read as dense");
        // The published figures are the main model's: without the multi-token prediction
        // depths (DeepSeek-V3's one; `multi_token_prediction_module_is_its_published_size`).
        let mtp_active = m.mtp_layers as u64
            * (m.layer_active_params(m.last_layer()) + m.mtp_projection_params());
        check(
            &format!("{file} total"),
            m.total_params() - m.mtp_params(),
            total,
            0.015,
            source,
        );
        // GPT-OSS counts the output embedding but not the input lookup as active.
        let act = if file == "gpt-oss-120b" {
            m.active_params() - m.vocab_size * m.hidden_size
        } else {
            m.active_params() - mtp_active
        };
        check(&format!("{file} active"), act, active, 0.02, source);
        if let Some(name) = bundled {
            let b = Model::preset(name).unwrap();
            assert_eq!(
                (b.total_params(), b.active_params(), &b.moe, &b.mla),
                (m.total_params(), m.active_params(), &m.moe, &m.mla),
                "bundled {name} differs from its config"
            );
        }
    }
}

/// DeepSeek-V3's multi-token prediction module (`num_nextn_predict_layers` 1 in its
/// config.json, the bundled model's one depth): one MoE layer with latent attention like the
/// main model's last, the `2h x h` projection and three RMSNorms, sharing the embedding and
/// the output head. deepseek-ai/DeepSeek-V3 README_WEIGHTS.md ("Multi-Token Prediction (MTP)
/// Modules"): "11.5B unique parameters, excluding the shared 0.9B Embedding and 0.9B output
/// Head" (the model card's "685B = 671B main model + 14B MTP" counts the copies of the
/// embedding and head the checkpoint stores with the module, and rounds).
#[test]
fn multi_token_prediction_module_is_its_published_size() {
    let hf = Model::load(&path("deepseek-v3")).unwrap();
    let bundled = Model::preset("deepseek-v3").unwrap();
    assert_eq!((hf.mtp_layers, bundled.mtp_layers), (1, 1));
    // The last layer (60) is a MoE layer: the depth repeats it.
    assert!(hf.is_moe_layer(60));
    assert_eq!(
        hf.mtp_params(),
        hf.layer_params(60) + 2 * 7168 * 7168 + 3 * 7168
    );
    check(
        "DeepSeek-V3 MTP module (unique)",
        hf.mtp_params(),
        11.5e9,
        0.015,
        "DeepSeek-V3 README_WEIGHTS.md: 11.5B unique parameters",
    );
    // With the shared embedding and head, what the checkpoint stores with it: the model
    // card's 685B - 671B = 14B, to its rounding.
    let with_shared = hf.mtp_params() + 2 * hf.vocab_size * hf.hidden_size;
    check(
        "DeepSeek-V3 MTP module with its embedding and head copies",
        with_shared,
        14e9,
        0.05,
        "DeepSeek-V3 model card: 685B = 671B main + 14B MTP",
    );
    // The total counts the module once, not the shared weights again.
    let mut main = hf.clone();
    main.mtp_layers = 0;
    assert_eq!(hf.total_params() - main.total_params(), hf.mtp_params());
}

#[test]
fn layer_patterns_latent_attention_and_windows_are_read() {
    let v3 = Model::load(&path("deepseek-v3")).unwrap();
    let moe = v3.moe.as_ref().unwrap();
    assert_eq!(moe.num_moe_layers(), 58);
    assert_eq!((moe.num_experts, moe.top_k, moe.shared_ffn), (256, 8, 2048));
    // Node-limited routing: `n_group` 8, `topk_group` 4.
    let groups = RouterGroups {
        num_groups: 8,
        topk: 4,
    };
    assert_eq!(moe.groups, Some(groups));
    let mla = v3.mla.unwrap();
    assert_eq!(
        (mla.q_lora_rank, mla.kv_lora_rank, mla.qk_head_dim()),
        (1536, 512, 192)
    );
    // MLA attention of one layer: 7168 x 1536 + 1536 + 1536 x 128 x 192 (queries),
    // 7168 x 576 + 512 + 512 x 128 x 256 (keys and values), 128 x 128 x 7168 (output).
    assert_eq!(
        v3.attention_params(),
        7168 * 1536
            + 1536
            + 1536 * 128 * 192
            + 7168 * 576
            + 512
            + 512 * 128 * 256
            + 128 * 128 * 7168
    );
    let oss = Model::load(&path("gpt-oss-120b")).unwrap();
    let w = oss.sliding_window.as_ref().unwrap();
    assert_eq!((w.window, w.count_in(0, 36)), (128, 18));
    assert!(w.layers[0] && !w.layers[1]);
}

#[test]
fn megatron_style_json_takes_megatrons_argument_names() {
    let text = r#"{"num_layers": 94, "hidden_size": 4096, "num_attention_heads": 64,
        "num_query_groups": 4, "kv_channels": 128, "ffn_hidden_size": 12288,
        "seq_length": 4096, "vocab_size": 151936, "swiglu": true,
        "untie_embeddings_and_output_weights": true, "num_experts": 128,
        "moe_router_topk": 8, "moe_ffn_hidden_size": 1536, "moe_layer_freq": 1}"#;
    let m = Model::from_json(text, "qwen3-235b.json").unwrap();
    let hf = Model::load(&path("qwen3-235b-a22b")).unwrap();
    assert_eq!(
        (m.total_params(), m.active_params()),
        (hf.total_params(), hf.active_params())
    );
    let text = r#"{"num_layers": 4, "hidden_size": 7168, "num_attention_heads": 128,
        "ffn_hidden_size": 18432, "seq_length": 4096, "vocab_size": 129280, "swiglu": true,
        "num_experts": 256, "moe_router_topk": 8, "moe_ffn_hidden_size": 2048,
        "moe_shared_expert_intermediate_size": 2048, "moe_layer_freq": [0, 1, 1, 1],
        "multi_latent_attention": true, "q_lora_rank": 1536, "kv_lora_rank": 512,
        "qk_head_dim": 128, "qk_pos_emb_head_dim": 64, "v_head_dim": 128,
        "moe_router_num_groups": 8, "moe_router_group_topk": 4}"#;
    let m = Model::from_json(text, "v3-4.json").unwrap();
    assert_eq!(m.moe.as_ref().unwrap().layers, [false, true, true, true]);
    assert_eq!(
        m.moe.as_ref().unwrap().groups,
        Model::preset("deepseek-v3").unwrap().moe.unwrap().groups
    );
    assert_eq!(m.attention_params(), v3_attention());
    assert_eq!(m.moe.as_ref().unwrap().megatron_layer_freq(), "[0,1,1,1]");
}

fn v3_attention() -> u64 {
    Model::preset("deepseek-v3").unwrap().attention_params()
}

fn hf(extra: &str) -> Result<Model, pplan::inputs::model::ModelError> {
    let text = format!(
        r#"{{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
        "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 2048{extra}}}"#
    );
    Model::from_json(&text, "c.json")
}

#[test]
fn group_limits_that_megatron_core_refuses_are_refused() {
    // 8 experts in 3 groups; 2 experts per token from 3 of 4 groups.
    for extra in [
        r#", "num_local_experts": 8, "num_experts_per_tok": 2, "n_group": 3, "topk_group": 1"#,
        r#", "num_local_experts": 8, "num_experts_per_tok": 2, "n_group": 4, "topk_group": 3"#,
    ] {
        let e = hf(extra).unwrap_err().to_string();
        assert!(
            e.contains("--model") && e.contains("n_group / moe_router_num_groups"),
            "{e}"
        );
    }
    // One group is no limit.
    let one =
        r#", "num_local_experts": 8, "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1"#;
    assert_eq!(hf(one).unwrap().moe.unwrap().groups, None);
}

#[test]
fn experts_are_read_not_refused_and_bad_fields_are_named() {
    let m = hf(r#", "num_local_experts": 8, "num_experts_per_tok": 2"#).unwrap();
    let moe = m.moe.as_ref().unwrap();
    assert_eq!((moe.num_experts, moe.top_k, moe.expert_ffn), (8, 2, 128));
    // 2 layers of 8 gated experts of 3 x 64 x 128 plus the 64 x 8 router, instead of one
    // dense MLP (with its biases).
    let dense = hf("").unwrap();
    let expert = 3 * 64 * 128;
    assert_eq!(
        m.total_params() - dense.total_params(),
        2 * (8 * expert + 64 * 8 - (expert + 128 + 64))
    );
    assert_eq!(m.total_params() - m.active_params(), 2 * 6 * expert);
    let e = hf(r#", "num_local_experts": 8"#).unwrap_err().to_string();
    assert!(e.contains("num_experts_per_tok"), "{e}");
    let meg = r#"{"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
        "ffn_hidden_size": 128, "seq_length": 128, "vocab_size": 100, "num_experts": 8,
        "moe_router_topk": 9}"#;
    let e = Model::from_json(meg, "m.json").unwrap_err().to_string();
    assert!(e.contains("'moe_router_topk'"), "{e}");
}
