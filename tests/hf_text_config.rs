//! Issue 41: the `config.json` files of multimodal and hybrid releases (tests/data/hf/, sources
//! in its README) read to their language model's published parameter count within 1 %, or are
//! refused naming the key pplan cannot model. Only the language model is counted (pplan plans
//! the decoder): where a publisher states the total with the vision tower, the tower's size,
//! worked out from the file's `vision_config` below, is taken off the published figure.

use pplan::inputs::model::Model;

fn path(name: &str) -> String {
    format!("{}/tests/data/hf/{name}.json", env!("CARGO_MANIFEST_DIR"))
}

/// Llama 4's vision tower and projector (`Llama4VisionModel`, `Llama4MultiModalProjector`,
/// `vision_config` of both Scout and Maverick): 34 encoder layers of width 1408 (Q, K, V, O
/// with biases, a 5632-wide GELU MLP with biases, two LayerNorms: 23,807,872 each), the
/// 14x14x3 patch projection, class and 577 position embeddings, two LayerNorms, the
/// pixel-shuffle MLP (5632 -> 4096 -> 4096) and the 4096 -> 5120 projector.
const LLAMA4_VISION: f64 = 871_932_416.0;

/// Pixtral's vision tower of Mistral Small 3.1 and its projector (`PixtralVisionModel`,
/// `Mistral3MultiModalProjector`): 24 layers of width 1024 (Q, K, V, O, a 4096-wide gated MLP,
/// two RMSNorms), the 14x14x3 patch convolution, two RMSNorms, the 2x2 patch merger
/// (4096 -> 1024) and the 1024 -> 5120 -> 5120 projector.
const PIXTRAL_VISION: f64 = 438_958_080.0;

/// (file, published language-model parameters, published active or 0, where from)
const PUBLISHED: [(&str, f64, f64, &str); 4] = [
    (
        "llama-4-scout-17b-16e",
        109.0e9 - LLAMA4_VISION,
        17.0e9,
        "Llama 4 model card (meta-llama/Llama-4-Scout-17B-16E): 17B activated, 109B total, with the vision tower",
    ),
    (
        "llama-4-maverick-17b-128e",
        400.0e9 - LLAMA4_VISION,
        17.0e9,
        "Llama 4 model card (meta-llama/Llama-4-Maverick-17B-128E): 17B activated, 400B total, with the vision tower",
    ),
    (
        "gemma-3-27b",
        1_416.0e6 + 25_600.0e6,
        0.0,
        "Gemma 3 technical report (2025), Table 1, 27B: 1,416M embedding + 25,600M non-embedding (vision encoder 417M apart)",
    ),
    (
        "mistral-small-3.1-24b",
        24.0e9 - PIXTRAL_VISION,
        0.0,
        "Mistral AI, 'Mistral Small 3.1' (March 2025) and model card: 24B parameters, with the vision encoder",
    ),
];

#[test]
fn multimodal_configs_read_their_language_model() {
    for (name, published, active, source) in PUBLISHED {
        let m = Model::load(&path(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let got = m.total_params() as f64;
        let err = got / published - 1.0;
        assert!(
            err.abs() < 0.01,
            "{name}: {:.3} B parameters, published {:.3} B ({source}): {:+.2} %",
            got / 1e9,
            published / 1e9,
            err * 100.0
        );
        if active > 0.0 {
            let got = m.active_params() as f64;
            assert!(
                (got / active - 1.0).abs() < 0.02,
                "{name}: {:.3} B active, published {:.1} B",
                got / 1e9,
                active / 1e9
            );
        }
    }
}

/// Maverick's MoE layers are every second one (`interleave_moe_layer_step` 2, layers 1, 3, ...):
/// read as every layer, it would count ~778 B. Both Llama 4 models have one shared expert per
/// MoE layer and a dense FFN `intermediate_size_mlp` wide; neither ties its embeddings.
#[test]
fn llama4_expert_layout() {
    let scout = Model::load(&path("llama-4-scout-17b-16e")).unwrap();
    let maverick = Model::load(&path("llama-4-maverick-17b-128e")).unwrap();
    let moe = maverick.moe.as_ref().unwrap();
    assert_eq!(moe.num_moe_layers(), 24);
    assert!(!maverick.is_moe_layer(0) && maverick.is_moe_layer(1) && maverick.is_moe_layer(47));
    assert_eq!(scout.moe.as_ref().unwrap().num_moe_layers(), 48);
    for m in [&scout, &maverick] {
        let moe = m.moe.as_ref().unwrap();
        assert_eq!((moe.expert_ffn, moe.shared_ffn, moe.top_k), (8192, 8192, 1));
        assert_eq!(m.ffn_hidden_size, 16384);
        assert!(!m.tied_embeddings && m.gated_mlp);
        assert_eq!((m.num_heads, m.num_kv_heads, m.head_dim()), (40, 8, 128));
    }
}

/// Gemma 3's file leaves out what `Gemma3TextConfig` fills in: the vocabulary (262,208),
/// RMSNorm, and five sliding-window layers to one full-attention layer. Its embeddings are
/// tied (the family's default); Mistral 3's language model (a `mistral` config) is untied.
#[test]
fn text_config_defaults_are_the_families() {
    let g = Model::load(&path("gemma-3-27b")).unwrap();
    assert_eq!(g.vocab_size, 262_208);
    assert!(g.tied_embeddings && g.rms_norm && g.gated_mlp);
    let w = g.sliding_window.as_ref().unwrap();
    assert_eq!(w.window, 1024);
    assert_eq!(w.layers.iter().filter(|&&x| !x).count(), 10);
    assert!(!w.layers[5] && w.layers[0] && w.layers[61]);
    let m = Model::load(&path("mistral-small-3.1-24b")).unwrap();
    assert!(!m.tied_embeddings);
    assert_eq!(
        (m.num_layers, m.hidden_size, m.vocab_size),
        (40, 5120, 131_072)
    );
}

/// Qwen3-Next-80B-A3B's Gated DeltaNet layers (three in four; `full_attention_interval` 4)
/// are not attention: refused naming the key rather than counted as full attention.
#[test]
fn linear_attention_hybrids_are_refused_naming_the_key() {
    let e = Model::load(&path("qwen3-next-80b-a3b"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("full_attention_interval") && e.contains("linear-attention"),
        "{e}"
    );
    // A text_config that is not an object is named too.
    let e = Model::from_json(r#"{"model_type": "gemma3", "text_config": 3}"#, "x.json")
        .unwrap_err()
        .to_string();
    assert!(e.contains("text_config"), "{e}");
}

/// GPT-OSS's config class defaults `tie_word_embeddings` to false (`GptOssConfig`): a config
/// that omits the key is untied, as the published one states.
#[test]
fn gpt_oss_without_the_tie_key_is_untied() {
    let text = std::fs::read_to_string("tests/data/hf/gpt-oss-120b.json").unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v.as_object_mut().unwrap().remove("tie_word_embeddings");
    let m = Model::from_json(&v.to_string(), "gpt-oss-no-tie.json").unwrap();
    assert!(!m.tied_embeddings);
    let published = Model::load("tests/data/hf/gpt-oss-120b.json").unwrap();
    assert_eq!(m.total_params(), published.total_params());
}
