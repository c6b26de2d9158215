//! Hugging Face `config.json` files of ten public models (tests/data/hf/, sources in its README)
//! give the parameter counts their publishers state, within 1 %; configs pplan cannot model
//! (hybrid state-space layers, MoE families whose keys pplan does not read) are refused by
//! name, never read as dense. The MoE configs are in `tests/moe_models.rs`.

use pplan::inputs::model::{Model, DEFAULT_SEQ_LEN};
use std::process::Command;

/// (file, published parameters, where the figure is published)
const PUBLISHED: [(&str, f64, &str); 10] = [
    ("llama-3.1-8b", 8.0e9, "Llama 3.1 model card (meta-llama/Llama-3.1-8B): 8B"),
    ("llama-3.1-70b", 70.0e9, "Llama 3.1 model card: 70B"),
    ("llama-3.1-405b", 405.0e9, "Llama 3.1 model card: 405B"),
    ("qwen2.5-7b", 7.61e9, "Qwen2.5-7B model card: Number of Parameters 7.61B"),
    ("qwen3-8b", 8.2e9, "Qwen3-8B model card: Number of Parameters 8.2B"),
    ("qwen3-32b", 32.8e9, "Qwen3-32B model card: Number of Parameters 32.8B"),
    ("mistral-7b-v0.1", 7.3e9, "Mistral AI, 'Mistral 7B' announcement (2023): a 7.3B parameter model"),
    (
        "gemma-2-9b",
        9_242_164_736.0,
        "Gemma 2 technical report (2024), Table 2: 917,962,752 embedding + 8,324,201,984 non-embedding",
    ),
    (
        "gemma-2-27b",
        27_227_128_320.0,
        "Gemma 2 technical report (2024), Table 2: 1,179,648,000 embedding + 26,047,480,320 non-embedding",
    ),
    (
        "phi-3-mini-4k-instruct",
        3.8e9,
        "Phi-3 technical report (Abdin et al. 2024) and model card: 3.8B",
    ),
];

fn path(name: &str) -> String {
    format!("{}/tests/data/hf/{name}.json", env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn ten_public_configs_give_the_published_parameter_counts() {
    for (name, published, source) in PUBLISHED {
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
        // The training length is never the context limit of the config.
        assert!(
            m.seq_len_defaulted && m.seq_len <= DEFAULT_SEQ_LEN,
            "{name}"
        );
    }
}

#[test]
fn qwen3_head_dim_and_gemma2_gated_mlp() {
    // Qwen3-32B: 64 heads of 128 = 8192 wide attention on a 5120 hidden size.
    let q = Model::load(&path("qwen3-32b")).unwrap();
    assert_eq!((q.head_dim(), q.hidden_size / q.num_heads), (128, 80));
    // Gemma 2: gelu_pytorch_tanh with a gated MLP, tied embeddings.
    let g = Model::load(&path("gemma-2-9b")).unwrap();
    assert!(g.gated_mlp && g.tied_embeddings && g.head_dim() == 256);
    let l = Model::load(&path("llama-3.1-8b")).unwrap();
    assert_eq!((l.seq_len, l.tied_embeddings), (4096, false));
}

fn pplan(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pplan"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn predict_says_which_sequence_length_it_used() {
    let base = [
        "predict",
        "--model",
        "",
        "--hardware",
        "h100-80gb",
        "--gpus",
        "8",
        "--tp",
        "8",
        "--global-batch",
        "8",
    ];
    let file = path("llama-3.1-8b");
    let mut args = base.to_vec();
    args[2] = &file;
    let out = pplan(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("4096") && stderr.contains("--seq-len"),
        "{stderr}"
    );
    assert!(stdout.contains("seq=4096"), "{stdout}");
    // An explicit --seq-len is used as given, without the note.
    args.extend(["--seq-len", "8192"]);
    let out = pplan(&args);
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).contains("seq=8192"));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("--seq-len"));
}

#[test]
fn hybrid_and_unread_moe_configs_exit_2_naming_the_key() {
    let dir = std::env::temp_dir().join(format!("pplan-hf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let base = r#""num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
        "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000,
        "max_position_embeddings": 32768, "hidden_act": "silu""#;
    for (extra, key) in [
        // DBRX keeps its experts under ffn_config, which pplan does not read.
        (r#""model_type": "dbrx""#, "model_type"),
        // Jamba, Nemotron-H
        (r#""layer_types": ["mamba", "attention"]"#, "layer_types"),
        (
            r#""hybrid_override_pattern": "M-M-M*-""#,
            "hybrid_override_pattern",
        ),
    ] {
        let f = dir.join("config.json");
        std::fs::write(&f, format!("{{{base}, {extra}}}")).unwrap();
        let out = pplan(&[
            "predict",
            "--model",
            f.to_str().unwrap(),
            "--gpus",
            "8",
            "--global-batch",
            "8",
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra}: {stderr}");
        assert!(
            stderr.contains(&format!("'{key}'")) && stderr.contains("not model"),
            "{stderr}"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn norms_and_positions_come_from_the_config() {
    // Every Llama-family config in tests/data/hf/ has `rms_norm_eps` and rotary positions.
    for (name, _, _) in PUBLISHED {
        let m = Model::load(&path(name)).unwrap();
        assert!(m.rms_norm && m.rotary, "{name}");
    }
    let hf = |extra: &str| {
        Model::from_json(
            &format!(
                r#"{{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                    "intermediate_size": 256, "vocab_size": 100 {extra}}}"#
            ),
            "config.json",
        )
        .unwrap()
    };
    // GPT-2 / MPT: LayerNorm (no `rms_norm_eps`), learned or ALiBi positions.
    for t in ["gpt2", "mpt", "bloom", "opt"] {
        let m = hf(&format!(
            r#", "model_type": "{t}", "layer_norm_epsilon": 1e-5"#
        ));
        assert!(!m.rms_norm && !m.rotary, "{t}");
    }
    // GPT-NeoX: LayerNorm with rotary positions; Falcon with ALiBi says so.
    let neox = hf(r#", "model_type": "gpt_neox", "layer_norm_eps": 1e-5"#);
    assert!(!neox.rms_norm && neox.rotary);
    assert!(!hf(r#", "model_type": "falcon", "alibi": true"#).rotary);
    // Megatron-style JSON: Megatron-LM's argument values (and NeMo's lower-case names);
    // LayerNorm and learned positions when absent, its defaults.
    let meg = |extra: &str| {
        Model::from_json(
            &format!(
                r#"{{"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                    "ffn_hidden_size": 256, "vocab_size": 100, "seq_length": 128 {extra}}}"#
            ),
            "model.json",
        )
    };
    let m = meg("").unwrap();
    assert!(!m.rms_norm && !m.rotary);
    let m = meg(r#", "normalization": "RMSNorm", "position_embedding_type": "rope""#).unwrap();
    assert!(m.rms_norm && m.rotary);
    assert!(meg(r#", "normalization": "layernorm1p""#).is_ok());
    let e = meg(r#", "normalization": "BatchNorm""#)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("normalization") && e.contains("RMSNorm") && e.contains("BatchNorm"),
        "{e}"
    );
    let e = meg(r#", "position_embedding_type": "sinusoidal""#)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("position_embedding_type") && e.contains("rope"),
        "{e}"
    );
}
