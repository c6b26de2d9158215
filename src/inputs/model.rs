//! Transformer model descriptions: bundled presets, Hugging Face `config.json` and
//! Megatron-style JSON.
//!
//! A [`Model`] is the handful of dimensions the cost and memory models need. Grouped-query
//! attention is `num_kv_heads < num_heads`; a gated MLP (SwiGLU, as in Llama) has three weight
//! matrices instead of two. Parsing does no IO; [`Model::load`] reads a file when given a path.
//!
//! Hugging Face `config.json`, read as `transformers` reads it:
//! - `head_dim`, when given, is the attention head size (Qwen3, Gemma 2: `heads x head_dim` may
//!   differ from `hidden_size`); otherwise `hidden_size / num_attention_heads`.
//! - The MLP is gated (three matrices: gate, up, down) for the model families whose
//!   `transformers` class is gated whatever the activation (Llama, Mistral, Qwen2/3, Gemma 1/2/3,
//!   Phi-3, OLMo, Cohere, Granite, InternLM2), and not gated for GPT-NeoX, GPT-J, GPT-BigCode,
//!   StarCoder2, Falcon, Phi-1/2, Nemotron, Bloom, OPT, MPT. For any other `model_type` the
//!   activation (`hidden_activation`, else `hidden_act`) decides: silu, swish, swiglu, geglu and
//!   reglu are gated; the gelu family, relu, relu2 and the rest of [`ACTIVATIONS`] are not.
//! - An absent `tie_word_embeddings` takes the default of the family's `transformers` config
//!   class: false for Llama, Mistral, Qwen2/3 and Phi-3 (their classes override it), true
//!   otherwise (`PretrainedConfig`'s default; Gemma).
//! - Mixture-of-experts keys (`num_local_experts`, `num_experts`, `n_routed_experts`,
//!   `moe_intermediate_size`, ...), multi-head latent attention (`kv_lora_rank`, ...) and
//!   sliding-window layers are read by `inputs::moe`. Hybrid or state-space layers
//!   (`layer_types` with a mamba or linear-attention layer, `ssm_cfg`,
//!   `hybrid_override_pattern`, `mamba_*`, `ssm_*` keys) and MoE families whose config pplan
//!   does not read (DBRX, Arctic, Grok-1) are refused with the key named: a silently dense
//!   model would be wrong.
//! - A multimodal release's language model is read from its `text_config` (Gemma 3, Llama 4,
//!   Mistral 3), with the family defaults and Llama 4 expert keys of `inputs::hf_text`.
//! - The training sequence length is not in a `config.json` (`max_position_embeddings` is the
//!   longest context the positions support, 131,072 for Llama 3.1). Without `--seq-len` it is
//!   [`DEFAULT_SEQ_LEN`] (4096), or `max_position_embeddings` when that is smaller, and
//!   [`Model::seq_len_defaulted`] says so, so that the CLI can print it.

use super::moe::{self, FieldError, Mla, Moe, SlidingWindow};
use super::mtp;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    pub name: String,
    pub num_layers: u32,
    pub hidden_size: u64,
    pub num_heads: u64,
    /// Key/value heads (query groups); equal to `num_heads` without grouped-query attention.
    pub num_kv_heads: u64,
    pub ffn_hidden_size: u64,
    pub vocab_size: u64,
    pub seq_len: u64,
    /// SwiGLU-style MLP: gate and up projections (2 x ffn) then down.
    pub gated_mlp: bool,
    /// Input and output embeddings share one matrix (GPT-2/Megatron GPT); counted once.
    pub tied_embeddings: bool,
    /// The layers apply dropout in training (hidden or attention dropout above 0), so each
    /// bias-dropout-add keeps a 1-byte mask for the backward. GPT-style models (Megatron-LM's
    /// default 0.1) do; Llama-style models and Hugging Face configs without a dropout
    /// probability do not.
    pub dropout: bool,
    /// The attention head size when the file gives one (Hugging Face `head_dim`, Megatron
    /// `kv_channels`); `None` means `hidden_size / num_heads` ([`Model::head_dim`]).
    pub attention_head_dim: Option<u64>,
    /// `seq_len` is [`DEFAULT_SEQ_LEN`] (capped by `max_position_embeddings`) because the file
    /// has no training sequence length (a Hugging Face config.json).
    pub seq_len_defaulted: bool,
    /// Mixture-of-experts MLPs (None: every layer's MLP is dense, `ffn_hidden_size` wide).
    pub moe: Option<Moe>,
    /// Multi-head latent attention (DeepSeek-V2/V3) instead of multi-/grouped-query attention.
    pub mla: Option<Mla>,
    /// Sliding-window attention on some layers (GPT-OSS).
    pub sliding_window: Option<SlidingWindow>,
    /// RMSNorm layer norms (Llama and later: a `transformers` config with `rms_norm_eps`,
    /// Megatron's `normalization: RMSNorm`) rather than LayerNorm (GPT-2, Megatron's GPT,
    /// GPT-NeoX, MPT). Eager PyTorch runs RMSNorm as several elementwise kernels and LayerNorm
    /// as one (`cost::compute`, the eager stack's traffic).
    pub rms_norm: bool,
    /// Rotary position embeddings applied to q and k in every layer (Llama, GPT-NeoX and
    /// later); false for learned absolute positions or ALiBi (GPT-2, OPT, BLOOM, MPT,
    /// Megatron's default `learned_absolute`).
    pub rotary: bool,
    /// Multi-token prediction depths trained after the decoder (`inputs::mtp`: Hugging Face
    /// `num_nextn_predict_layers`, Megatron `mtp_num_layers`; 0: none), each one more layer
    /// of the last layer's kind ([`Model::mtp_depth_params`]).
    pub mtp_layers: u32,
    /// Facts that change what a framework builds (rotary base, QK norm, biases, activation,
    /// router scoring; `inputs::arch`); of them only the experts' biases change what pplan
    /// predicts (`CostModel::moe_expert_bias_bytes`).
    pub arch: super::arch::Arch,
}

/// The training sequence length of a Hugging Face config.json when `--seq-len` is not given
/// (capped by the config's `max_position_embeddings`).
pub const DEFAULT_SEQ_LEN: u64 = 4096;

pub use super::families::{megatron_rms_norm, megatron_rotary, ACTIVATIONS, GATED_ACTIVATIONS};
use super::families::{GATED_FAMILIES, NON_ROTARY_FAMILIES, UNGATED_FAMILIES, UNTIED_BY_DEFAULT};

/// Keys of hybrid state-space models (Jamba, Zamba, Nemotron-H, Falcon-H1, Mamba).
const HYBRID_KEYS: [&str; 5] = [
    "ssm_cfg",
    "hybrid_override_pattern",
    "attn_layer_period",
    "attn_layer_offset",
    "hybrid_layer_ids",
];

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    #[error("--model: unknown model '{name}' (valid: {}, or a path to a Hugging Face config.json or Megatron-style JSON)", preset_names().join(", "))]
    Unknown { name: String },
    #[error("--model: cannot read '{path}': {reason}")]
    Read { path: String, reason: String },
    #[error("--model: '{path}' is not JSON: {reason}")]
    NotJson { path: String, reason: String },
    #[error("--model: '{path}': {reason}")]
    Duplicate { path: String, reason: String },
    #[error("--model: '{path}' is neither a Hugging Face config.json (needs num_hidden_layers) nor Megatron-style JSON (needs num_layers)")]
    UnknownFormat { path: String },
    #[error("--model: '{path}' ({format}) is missing field '{field}' (a positive integer)")]
    MissingField {
        path: String,
        format: &'static str,
        field: &'static str,
    },
    #[error("--model: '{path}': field '{field}' must be a positive integer (got {got})")]
    BadField {
        path: String,
        field: &'static str,
        got: String,
    },
    #[error("--model: '{path}': field '{field}' must be {expected} (got {got})")]
    BadType {
        path: String,
        field: &'static str,
        expected: &'static str,
        got: String,
    },
    #[error("--model: '{path}': {field} '{got}' is not an activation pplan knows (valid: {})", ACTIVATIONS.join(", "))]
    UnknownActivation {
        path: String,
        field: &'static str,
        got: String,
    },
    /// A key of an architecture pplan cannot model yet (mixture of experts, multi-latent
    /// attention, state-space layers).
    #[error("--model: '{path}': key '{key}' ({value}) describes {what}, which pplan does not model yet (it models dense transformers); refusing rather than planning it as a dense model")]
    Unsupported {
        path: String,
        key: String,
        value: String,
        what: &'static str,
    },
    #[error("--model: {0}")]
    Inconsistent(String),
    /// A mixture-of-experts, latent-attention or sliding-window field with a bad value.
    #[error("--model: '{path}': field '{field}' must be {expected} (got {got})")]
    BadMoeField {
        path: String,
        field: String,
        expected: &'static str,
        got: String,
    },
}

pub use super::dense_presets::{Preset, PRESETS};

pub fn preset_names() -> Vec<&'static str> {
    PRESETS
        .iter()
        .map(|p| p.0)
        .chain(super::moe_presets::MOE_PRESET_NAMES)
        .collect()
}

fn get_u64(
    v: &Value,
    field: &'static str,
    path: &str,
    format: &'static str,
) -> Result<u64, ModelError> {
    match v.get(field) {
        None | Some(Value::Null) => Err(ModelError::MissingField {
            path: path.to_string(),
            format,
            field,
        }),
        Some(x) => match x.as_u64() {
            Some(n) if n > 0 => Ok(n),
            _ => Err(ModelError::BadField {
                path: path.to_string(),
                field,
                got: x.to_string(),
            }),
        },
    }
}

fn get_opt_u64(v: &Value, field: &'static str, path: &str) -> Result<Option<u64>, ModelError> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => match x.as_u64() {
            Some(n) if n > 0 => Ok(Some(n)),
            _ => Err(ModelError::BadField {
                path: path.to_string(),
                field,
                got: x.to_string(),
            }),
        },
    }
}

fn layers_u32(
    v: &Value,
    field: &'static str,
    path: &str,
    format: &'static str,
) -> Result<u32, ModelError> {
    u32::try_from(get_u64(v, field, path, format)?).map_err(|_| ModelError::BadField {
        path: path.to_string(),
        field,
        got: "a number above 2^32".to_string(),
    })
}

fn get_opt_str<'a>(
    v: &'a Value,
    field: &'static str,
    path: &str,
) -> Result<Option<&'a str>, ModelError> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(x) => Err(ModelError::BadType {
            path: path.to_string(),
            field,
            expected: "a string",
            got: x.to_string(),
        }),
    }
}

/// A probability field (0 to 1).
fn get_opt_prob(v: &Value, field: &'static str, path: &str) -> Result<Option<f64>, ModelError> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => match x.as_f64() {
            Some(p) if (0.0..=1.0).contains(&p) => Ok(Some(p)),
            _ => Err(ModelError::BadType {
                path: path.to_string(),
                field,
                expected: "a probability from 0 to 1",
                got: x.to_string(),
            }),
        },
    }
}

/// Megatron-LM's `--hidden-dropout` and `--attention-dropout` when not given.
pub const MEGATRON_DEFAULT_DROPOUT: f64 = 0.1;

/// Whether a Megatron-style model trains with dropout, from its hidden and attention dropout
/// probabilities (each [`MEGATRON_DEFAULT_DROPOUT`] when absent): Megatron-style JSON,
/// Megatron-LM arguments, NeMo configs.
pub fn megatron_dropout(hidden: Option<f64>, attention: Option<f64>) -> bool {
    hidden.unwrap_or(MEGATRON_DEFAULT_DROPOUT) > 0.0
        || attention.unwrap_or(MEGATRON_DEFAULT_DROPOUT) > 0.0
}

/// Whether a Hugging Face config trains with dropout: any of transformers' dropout
/// probabilities above 0 (Llama's `attention_dropout`, GPT-2's `resid_pdrop` / `attn_pdrop`
/// / `embd_pdrop`, BERT-style `hidden_dropout_prob` / `attention_probs_dropout_prob`,
/// `hidden_dropout`); none given, none.
fn hf_dropout(v: &Value, path: &str) -> Result<bool, ModelError> {
    const KEYS: [&str; 7] = [
        "attention_dropout",
        "hidden_dropout",
        "resid_pdrop",
        "attn_pdrop",
        "embd_pdrop",
        "hidden_dropout_prob",
        "attention_probs_dropout_prob",
    ];
    for k in KEYS {
        if get_opt_prob(v, k, path)?.is_some_and(|p| p > 0.0) {
            return Ok(true);
        }
    }
    Ok(false)
}

fn get_opt_bool(v: &Value, field: &'static str, path: &str) -> Result<Option<bool>, ModelError> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(x) => Err(ModelError::BadType {
            path: path.to_string(),
            field,
            expected: "true or false",
            got: x.to_string(),
        }),
    }
}

/// A value that switches a feature on: a positive number, `true`, or a non-empty string,
/// list or object (`0`, `false`, `null`, `""`, `[]` leave the model dense).
fn is_set(x: &Value) -> bool {
    match x {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
        Value::String(s) => !s.is_empty(),
        Value::Array(a) => !a.is_empty(),
        Value::Object(o) => !o.is_empty(),
    }
}

fn field_error(path: &str, e: FieldError) -> ModelError {
    ModelError::BadMoeField {
        path: path.to_string(),
        field: e.field,
        expected: e.expected,
        got: e.got,
    }
}

/// Refuse a config that describes an architecture pplan would otherwise count as dense.
fn refuse_unmodelled(v: &Value, path: &str) -> Result<(), ModelError> {
    let refuse = |key: &str, value: &Value, what: &'static str| ModelError::Unsupported {
        path: path.to_string(),
        key: key.to_string(),
        value: value.to_string(),
        what,
    };
    let Some(obj) = v.as_object() else {
        return Ok(());
    };
    for key in HYBRID_KEYS {
        if let Some(x) = obj.get(key).filter(|x| is_set(x)) {
            return Err(refuse(key, x, "a hybrid state-space (Mamba) model"));
        }
    }
    for key in super::hf_text::LINEAR_ATTENTION_KEYS {
        if let Some(x) = obj.get(key).filter(|x| is_set(x)) {
            return Err(refuse(key, x, "linear-attention layers (Gated DeltaNet, as in Qwen3-Next) between full-attention ones"));
        }
    }
    // Keys in sorted order, so the key named is the same on every run.
    let mut keys: Vec<&String> = obj.keys().collect();
    keys.sort();
    for key in keys {
        let x = &obj[key];
        if (key.starts_with("mamba") || key.starts_with("ssm_")) && is_set(x) {
            return Err(refuse(key, x, "a hybrid state-space (Mamba) model"));
        }
    }
    if let Some(Value::Array(types)) = obj.get("layer_types") {
        let dense = [
            "full_attention",
            "sliding_attention",
            "attention",
            "global",
            "local",
        ];
        if let Some(bad) = types
            .iter()
            .find(|t| !t.as_str().is_some_and(|t| dense.contains(&t)))
        {
            return Err(refuse(
                "layer_types",
                bad,
                "layers other than attention (state-space, Mamba or linear attention)",
            ));
        }
    }
    if let Some(t) = obj.get("model_type").and_then(Value::as_str) {
        // MoE families whose experts are not under keys pplan reads.
        let moe = ["dbrx", "arctic", "grok-1"].contains(&t);
        let ssm = [
            "mamba",
            "mamba2",
            "jamba",
            "zamba",
            "zamba2",
            "bamba",
            "falcon_h1",
            "nemotron_h",
            "rwkv",
        ]
        .contains(&t);
        if moe {
            return Err(refuse(
                "model_type",
                &obj["model_type"],
                "a mixture-of-experts family whose config layout pplan does not read (it reads Mixtral, Qwen-MoE, DeepSeek-V2/V3 and GPT-OSS configs)",
            ));
        }
        if ssm {
            return Err(refuse(
                "model_type",
                &obj["model_type"],
                "a hybrid state-space (Mamba) model",
            ));
        }
    }
    Ok(())
}

impl Model {
    pub fn preset(name: &str) -> Option<Model> {
        PRESETS
            .iter()
            .find(|p| p.0 == name)
            .map(|&(name, l, h, a, g, f, v, s, gated, tied)| Model {
                name: name.to_string(),
                num_layers: l,
                hidden_size: h,
                num_heads: a,
                num_kv_heads: g,
                ffn_hidden_size: f,
                vocab_size: v,
                seq_len: s,
                gated_mlp: gated,
                tied_embeddings: tied,
                // The GPT presets are Megatron-LM's GPT (dropout 0.1), the gated ones Llama
                // (trained without dropout: Meta's configs, NeMo's hidden_dropout 0.0).
                dropout: !gated,
                attention_head_dim: None,
                seq_len_defaulted: false,
                moe: None,
                mla: None,
                sliding_window: None,
                // Megatron-LM's GPT: LayerNorm and learned absolute positions; Llama 3:
                // RMSNorm and rotary embeddings.
                rms_norm: gated,
                rotary: gated,
                mtp_layers: 0,
                arch: super::arch::Arch::preset(name),
            })
            .or_else(|| {
                super::moe_presets::moe_preset(name).map(|p| Model {
                    name: p.name.to_string(),
                    num_layers: p.layers,
                    hidden_size: p.hidden,
                    num_heads: p.heads,
                    num_kv_heads: p.kv_heads,
                    ffn_hidden_size: p.ffn,
                    vocab_size: p.vocab,
                    seq_len: p.seq,
                    gated_mlp: true,
                    tied_embeddings: false,
                    dropout: false,
                    attention_head_dim: p.head_dim,
                    seq_len_defaulted: false,
                    moe: Some(p.moe),
                    mla: p.mla,
                    sliding_window: None,
                    // Mixtral, Qwen3-MoE and DeepSeek-V3: RMSNorm, rotary embeddings.
                    rms_norm: true,
                    rotary: true,
                    mtp_layers: p.mtp_layers,
                    arch: super::arch::Arch::preset(p.name),
                })
            })
    }

    /// A preset name, or else a path to a JSON file.
    pub fn load(name_or_path: &str) -> Result<Model, ModelError> {
        if let Some(m) = Model::preset(name_or_path) {
            return Ok(m);
        }
        let looks_like_path = name_or_path.contains('/') || name_or_path.ends_with(".json");
        match std::fs::read_to_string(name_or_path) {
            Ok(text) => Model::from_json(&text, name_or_path),
            Err(_) if !looks_like_path => Err(ModelError::Unknown {
                name: name_or_path.to_string(),
            }),
            Err(e) => Err(ModelError::Read {
                path: name_or_path.to_string(),
                reason: e.to_string(),
            }),
        }
    }

    /// Parse a Hugging Face `config.json` or Megatron-style JSON; `path` names it in errors.
    pub fn from_json(text: &str, path: &str) -> Result<Model, ModelError> {
        // A byte-order mark is skipped (Windows editors write one); a key given twice is
        // refused, naming it (serde_json would keep the last silently).
        let text = super::json_strict::prepare(text).map_err(|reason| ModelError::Duplicate {
            path: path.to_string(),
            reason,
        })?;
        let v: Value = serde_json::from_str(text).map_err(|e| ModelError::NotJson {
            path: path.to_string(),
            reason: e.to_string(),
        })?;
        // Multimodal releases nest the language model under `text_config` (inputs::hf_text).
        let v = super::hf_text::language_model(v).map_err(|e| field_error(path, e))?;
        let name = std::path::Path::new(path)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.to_string());
        let model = if v.get("num_hidden_layers").is_some() {
            refuse_unmodelled(&v, path)?;
            let f = "Hugging Face config.json";
            let num_layers = layers_u32(&v, "num_hidden_layers", path, f)?;
            let heads = get_u64(&v, "num_attention_heads", path, f)?;
            let model_type = get_opt_str(&v, "model_type", path)?.unwrap_or("");
            let (act_field, act) = match get_opt_str(&v, "hidden_activation", path)? {
                Some(a) => ("hidden_activation", Some(a)),
                None => ("hidden_act", get_opt_str(&v, "hidden_act", path)?),
            };
            if let Some(a) = act {
                if !ACTIVATIONS.contains(&a) {
                    return Err(ModelError::UnknownActivation {
                        path: path.to_string(),
                        field: act_field,
                        got: a.to_string(),
                    });
                }
            }
            let gated_mlp = if GATED_FAMILIES.contains(&model_type) {
                true
            } else if UNGATED_FAMILIES.contains(&model_type) {
                false
            } else {
                // transformers' own default activation is silu (LlamaConfig), a gated MLP.
                GATED_ACTIVATIONS.contains(&act.unwrap_or("silu"))
            };
            let tied_embeddings = match v.get("tie_word_embeddings") {
                None | Some(Value::Null) => !UNTIED_BY_DEFAULT.contains(&model_type),
                Some(Value::Bool(b)) => *b,
                Some(x) => {
                    return Err(ModelError::BadType {
                        path: path.to_string(),
                        field: "tie_word_embeddings",
                        expected: "true or false",
                        got: x.to_string(),
                    })
                }
            };
            let max_positions = get_opt_u64(&v, "max_position_embeddings", path)?;
            Model {
                name,
                num_layers,
                hidden_size: get_u64(&v, "hidden_size", path, f)?,
                num_heads: heads,
                num_kv_heads: get_opt_u64(&v, "num_key_value_heads", path)?.unwrap_or(heads),
                ffn_hidden_size: get_u64(&v, "intermediate_size", path, f)?,
                vocab_size: get_u64(&v, "vocab_size", path, f)?,
                seq_len: max_positions.map_or(DEFAULT_SEQ_LEN, |n| n.min(DEFAULT_SEQ_LEN)),
                gated_mlp,
                tied_embeddings,
                dropout: hf_dropout(&v, path)?,
                attention_head_dim: get_opt_u64(&v, "head_dim", path)?,
                seq_len_defaulted: true,
                moe: moe::moe_from_hf(&v, num_layers).map_err(|e| field_error(path, e))?,
                mla: moe::mla_from_hf(&v).map_err(|e| field_error(path, e))?,
                sliding_window: moe::sliding_from_hf(&v, num_layers)
                    .map_err(|e| field_error(path, e))?,
                // `transformers`' config classes carry `rms_norm_eps` exactly when the model's
                // norms are RMSNorm (LayerNorm ones: `layer_norm_eps`/`_epsilon`).
                rms_norm: v.get("rms_norm_eps").is_some(),
                rotary: !NON_ROTARY_FAMILIES.contains(&model_type)
                    && get_opt_bool(&v, "alibi", path)? != Some(true),
                mtp_layers: mtp::mtp_layers(&v, mtp::HF_KEY, num_layers)
                    .map_err(|e| field_error(path, e))?,
                arch: super::arch::Arch::from_hf(
                    &v,
                    gated_mlp,
                    ["num_local_experts", "num_experts", "n_routed_experts"]
                        .iter()
                        .any(|k| v.get(k).and_then(Value::as_u64).unwrap_or(0) > 0),
                )
                .map_err(|e| field_error(path, e))?,
            }
        } else if v.get("num_layers").is_some() {
            refuse_unmodelled(&v, path)?;
            let f = "Megatron-style JSON";
            let num_layers = layers_u32(&v, "num_layers", path, f)?;
            let heads = get_u64(&v, "num_attention_heads", path, f)?;
            Model {
                name,
                num_layers,
                hidden_size: get_u64(&v, "hidden_size", path, f)?,
                num_heads: heads,
                num_kv_heads: get_opt_u64(&v, "num_query_groups", path)?.unwrap_or(heads),
                ffn_hidden_size: get_u64(&v, "ffn_hidden_size", path, f)?,
                vocab_size: get_u64(&v, "vocab_size", path, f)?,
                seq_len: get_u64(&v, "seq_length", path, f)?,
                gated_mlp: get_opt_bool(&v, "swiglu", path)?.unwrap_or(false),
                tied_embeddings: !get_opt_bool(&v, "untie_embeddings_and_output_weights", path)?
                    .unwrap_or(false),
                dropout: megatron_dropout(
                    get_opt_prob(&v, "hidden_dropout", path)?,
                    get_opt_prob(&v, "attention_dropout", path)?,
                ),
                attention_head_dim: get_opt_u64(&v, "kv_channels", path)?,
                seq_len_defaulted: false,
                moe: moe::moe_from_megatron(
                    &v,
                    num_layers,
                    get_u64(&v, "ffn_hidden_size", path, f)?,
                )
                .map_err(|e| field_error(path, e))?,
                mla: moe::mla_from_megatron(&v).map_err(|e| field_error(path, e))?,
                sliding_window: None,
                rms_norm: megatron_rms_norm(get_opt_str(&v, "normalization", path)?).map_err(
                    |got| ModelError::BadType {
                        path: path.to_string(),
                        field: "normalization",
                        expected: "LayerNorm or RMSNorm (NeMo: layernorm, layernorm1p, rmsnorm)",
                        got,
                    },
                )?,
                rotary: megatron_rotary(get_opt_str(&v, "position_embedding_type", path)?)
                    .map_err(|got| ModelError::BadType {
                        path: path.to_string(),
                        field: "position_embedding_type",
                        expected: "learned_absolute, rope, mrope, yarn, relative or none",
                        got,
                    })?,
                mtp_layers: mtp::mtp_layers(&v, mtp::MEGATRON_KEY, num_layers)
                    .map_err(|e| field_error(path, e))?,
                arch: super::arch::Arch::from_megatron(
                    &v,
                    get_opt_bool(&v, "swiglu", path)?.unwrap_or(false),
                )
                .map_err(|e| field_error(path, e))?,
            }
        } else {
            return Err(ModelError::UnknownFormat {
                path: path.to_string(),
            });
        };
        model.check()?;
        Ok(model)
    }

    /// Dimensions that must agree with each other.
    pub fn check(&self) -> Result<(), ModelError> {
        if self.attention_head_dim.is_none() && self.hidden_size % self.num_heads != 0 {
            return Err(ModelError::Inconsistent(format!(
                "hidden size {} is not divisible by the head count {}",
                self.hidden_size, self.num_heads
            )));
        }
        if self.num_heads % self.num_kv_heads != 0 {
            return Err(ModelError::Inconsistent(format!(
                "head count {} is not divisible by the key/value head count {}",
                self.num_heads, self.num_kv_heads
            )));
        }
        // Keeps every FLOP and byte count far below f64/u64 trouble.
        let limits = [
            ("layers", self.num_layers as u64, 1 << 16),
            ("hidden size", self.hidden_size, 1 << 20),
            ("ffn hidden size", self.ffn_hidden_size, 1 << 22),
            ("vocabulary", self.vocab_size, 1 << 24),
            ("sequence length", self.seq_len, 1 << 24),
            ("attention heads", self.num_heads, 1 << 20),
            ("attention head size", self.head_dim(), 1 << 20),
            (
                "attention width (heads x head size)",
                self.num_heads.saturating_mul(self.head_dim()),
                1 << 22,
            ),
        ];
        if let Some(m) = &self.moe {
            m.check(self.num_layers).map_err(ModelError::Inconsistent)?;
        }
        if let Some(a) = &self.mla {
            a.check().map_err(ModelError::Inconsistent)?;
        }
        if self.mtp_layers > self.num_layers {
            return Err(ModelError::Inconsistent(format!(
                "{} multi-token prediction layers for {} transformer layers (valid: 0 to {})",
                self.mtp_layers, self.num_layers, self.num_layers
            )));
        }
        for (what, v, max) in limits {
            if v == 0 || v > max {
                return Err(ModelError::Inconsistent(format!(
                    "{what} {v} is outside 1..={max}"
                )));
            }
        }
        Ok(())
    }

    /// The attention head size: the file's `head_dim`/`kv_channels`, else hidden / heads.
    pub fn head_dim(&self) -> u64 {
        self.attention_head_dim
            .unwrap_or(self.hidden_size / self.num_heads)
    }

    /// Parameters of one transformer layer: attention (Q and O are heads x head_dim wide, K and
    /// V key/value heads x head_dim), MLP (2 or 3 matrices), biases and two layer norms.
    /// With multi-head latent attention the attention part is [`Mla::params`]. For a MoE
    /// model this is a dense layer (its MLP `ffn_hidden_size` wide); see
    /// [`Model::layer_params`].
    pub fn params_per_layer(&self) -> u64 {
        let h = self.hidden_size;
        let mlp_mats = if self.gated_mlp { 3 } else { 2 };
        let mlp = mlp_mats * h * self.ffn_hidden_size + self.ffn_hidden_size + h;
        self.attention_params() + mlp + 4 * h
    }

    /// Attention parameters of one layer (with biases, as counted since the first release).
    pub fn attention_params(&self) -> u64 {
        let h = self.hidden_size;
        if let Some(mla) = &self.mla {
            return mla.params(h, self.num_heads);
        }
        let q = self.num_heads * self.head_dim();
        let kv = 2 * self.num_kv_heads * self.head_dim();
        h * (q + kv) + q * h + (q + kv) + h
    }

    /// The attention window when every layer attends within it (a per-layer-kind copy of a
    /// model with sliding-window layers, as `cost::moe` makes them); `None` otherwise.
    pub fn uniform_window(&self) -> Option<u64> {
        self.sliding_window
            .as_ref()
            .filter(|w| w.layers.iter().all(|&x| x))
            .map(|w| w.window)
    }

    /// Whether layer `i` has a MoE block.
    pub fn is_moe_layer(&self, i: usize) -> bool {
        self.moe
            .as_ref()
            .is_some_and(|m| m.layers.get(i).copied().unwrap_or(false))
    }

    /// Parameters of layer `i`: [`Model::params_per_layer`] for a dense layer; attention, the
    /// experts, shared experts, router and norms for a MoE layer.
    pub fn layer_params(&self, i: usize) -> u64 {
        match &self.moe {
            Some(m) if self.is_moe_layer(i) => {
                self.attention_params()
                    + m.layer_params(self.hidden_size, self.gated_mlp)
                    + 4 * self.hidden_size
            }
            _ => self.params_per_layer(),
        }
    }

    /// Parameters of layer `i` one token uses (its top-k experts only).
    pub fn layer_active_params(&self, i: usize) -> u64 {
        match &self.moe {
            Some(m) if self.is_moe_layer(i) => {
                self.attention_params()
                    + m.layer_active_params(self.hidden_size, self.gated_mlp)
                    + 4 * self.hidden_size
            }
            _ => self.params_per_layer(),
        }
    }

    /// Parameters one token uses: every dense weight, the top-k experts of each MoE layer,
    /// both embeddings and the multi-token prediction depths' active part (the convention of
    /// the Mixtral, Qwen3 and DeepSeek-V3 reports; equal to [`Model::total_params`] for a
    /// dense model).
    pub fn active_params(&self) -> u64 {
        if self.moe.is_none() {
            return self.total_params();
        }
        (0..self.num_layers as usize)
            .map(|i| self.layer_active_params(i))
            .sum::<u64>()
            + self.embedding_params()
            + self.mtp_layers as u64
                * (self.layer_active_params(self.last_layer()) + self.mtp_projection_params())
    }

    /// The last transformer layer, whose kind every multi-token prediction depth repeats.
    pub fn last_layer(&self) -> usize {
        self.num_layers.saturating_sub(1) as usize
    }

    /// Parameters of one multi-token prediction depth besides its transformer layer: the
    /// projection and three norms ([`mtp::projection_params`]).
    pub fn mtp_projection_params(&self) -> u64 {
        mtp::projection_params(self.hidden_size, self.rms_norm)
    }

    /// Parameters of one multi-token prediction depth (DeepSeek-V3 report Sec. 2.2;
    /// Megatron-Core `MultiTokenPredictionLayer`): a transformer layer of the last layer's
    /// kind and [`Model::mtp_projection_params`]. The embedding and the output layer are the
    /// model's, shared, and not counted again.
    pub fn mtp_depth_params(&self) -> u64 {
        self.layer_params(self.last_layer()) + self.mtp_projection_params()
    }

    /// Parameters of all multi-token prediction depths (0 without them).
    pub fn mtp_params(&self) -> u64 {
        self.mtp_layers as u64 * self.mtp_depth_params()
    }

    /// Embedding parameters (input, and output unless tied).
    pub fn embedding_params(&self) -> u64 {
        let e = self.vocab_size * self.hidden_size;
        if self.tied_embeddings {
            e
        } else {
            2 * e
        }
    }

    /// Every parameter: the layers, the embeddings and the multi-token prediction depths
    /// ([`Model::mtp_params`]).
    pub fn total_params(&self) -> u64 {
        let layers = if self.moe.is_none() {
            self.num_layers as u64 * self.params_per_layer()
        } else {
            (0..self.num_layers as usize)
                .map(|i| self.layer_params(i))
                .sum::<u64>()
        };
        layers + self.embedding_params() + self.mtp_params()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_match_their_names() {
        // Parameter counts close to the names (Megatron Table 1 counts include embeddings).
        for (name, billions) in [
            ("gpt-1.7b", 1.7),
            ("gpt-18.4b", 18.4),
            ("gpt-145.6b", 145.6),
            ("gpt-1t", 1008.0),
            ("gpt3-175b", 175.0),
            ("llama3-8b", 8.0),
            ("llama3-70b", 70.6),
            ("llama3-405b", 405.8),
        ] {
            let m = Model::preset(name).unwrap();
            let got = m.total_params() as f64 / 1e9;
            assert!(
                (got / billions - 1.0).abs() < 0.05,
                "{name}: {got:.2}B params, expected about {billions}B"
            );
        }
    }

    #[test]
    fn hugging_face_and_megatron_configs() {
        let hf = r#"{"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
            "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
            "max_position_embeddings": 131072, "hidden_act": "silu"}"#;
        let m = Model::from_json(hf, "x/config.json").unwrap();
        // The training length is the documented default, not max_position_embeddings.
        assert_eq!(
            (m.num_kv_heads, m.gated_mlp, m.seq_len, m.seq_len_defaulted),
            (8, true, DEFAULT_SEQ_LEN, true)
        );
        // No model_type: absent tie_word_embeddings is PretrainedConfig's true.
        assert!(m.tied_embeddings);
        let meg = r#"{"num_layers": 24, "hidden_size": 2304, "num_attention_heads": 24,
            "ffn_hidden_size": 9216, "seq_length": 2048, "vocab_size": 51200}"#;
        let m = Model::from_json(meg, "gpt.json").unwrap();
        assert_eq!(m, {
            let mut p = Model::preset("gpt-1.7b").unwrap();
            p.name = "gpt".into();
            p
        });
    }

    #[test]
    fn missing_field_is_named() {
        let meg = r#"{"num_layers": 24, "hidden_size": 2304, "num_attention_heads": 24,
            "seq_length": 2048, "vocab_size": 51200}"#;
        let e = Model::from_json(meg, "gpt.json").unwrap_err().to_string();
        assert!(e.contains("ffn_hidden_size"), "{e}");
        let e = Model::load("gpt-2t").unwrap_err().to_string();
        assert!(e.contains("--model") && e.contains("gpt-1t"), "{e}");
        let e = Model::from_json("{\"num_layers\": -3}", "g.json")
            .unwrap_err()
            .to_string();
        assert!(e.contains("num_layers"), "{e}");
    }

    fn hf(extra: &str) -> Result<Model, ModelError> {
        let text = format!(
            r#"{{"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
            "intermediate_size": 128, "vocab_size": 100, "max_position_embeddings": 2048{extra}}}"#
        );
        Model::from_json(&text, "c.json")
    }

    #[test]
    fn hugging_face_defaults_and_activations() {
        // A short context caps the default length.
        assert_eq!(hf("").unwrap().seq_len, 2048);
        // Gated by family whatever the activation (Gemma 2's gelu_pytorch_tanh MLP is gated).
        let m =
            hf(r#", "model_type": "gemma2", "hidden_activation": "gelu_pytorch_tanh""#).unwrap();
        assert!(m.gated_mlp && m.tied_embeddings);
        // Not gated: GPT-style and Nemotron families, and gelu/relu2 of an unknown family.
        for extra in [
            r#", "model_type": "nemotron", "hidden_act": "relu2""#,
            r#", "model_type": "gpt_neox", "hidden_act": "gelu""#,
            r#", "hidden_act": "relu""#,
            r#", "hidden_act": "gelu_new""#,
        ] {
            assert!(!hf(extra).unwrap().gated_mlp, "{extra}");
        }
        assert!(hf(r#", "hidden_act": "swiglu""#).unwrap().gated_mlp);
        // Llama's config class unties by default.
        assert!(!hf(r#", "model_type": "llama""#).unwrap().tied_embeddings);
        let e = hf(r#", "hidden_act": "mish2""#).unwrap_err().to_string();
        assert!(
            e.contains("hidden_act") && e.contains("gelu_pytorch_tanh"),
            "{e}"
        );
        let e = hf(r#", "tie_word_embeddings": "yes""#)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("tie_word_embeddings") && e.contains("true or false"),
            "{e}"
        );
    }

    #[test]
    fn dropout_follows_the_config() {
        // Hugging Face: any dropout probability above 0; none given, none (Llama's configs
        // state attention_dropout 0.0).
        assert!(!hf("").unwrap().dropout);
        assert!(!hf(r#", "attention_dropout": 0.0"#).unwrap().dropout);
        assert!(hf(r#", "resid_pdrop": 0.1"#).unwrap().dropout);
        let e = hf(r#", "attention_dropout": 2"#).unwrap_err().to_string();
        assert!(
            e.contains("attention_dropout") && e.contains("0 to 1"),
            "{e}"
        );
        // Megatron-style JSON: Megatron-LM's defaults, 0.1 each.
        let meg = |extra: &str| {
            Model::from_json(
                &format!(
                    r#"{{"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "ffn_hidden_size": 256, "seq_length": 128, "vocab_size": 1000{extra}}}"#
                ),
                "m.json",
            )
            .unwrap()
        };
        assert!(meg("").dropout);
        assert!(!meg(r#", "hidden_dropout": 0.0, "attention_dropout": 0.0"#).dropout);
        assert!(meg(r#", "hidden_dropout": 0.0"#).dropout);
        // Presets: Megatron's GPT with dropout, Llama and the MoE models without.
        assert!(Model::preset("gpt3-175b").unwrap().dropout);
        assert!(!Model::preset("llama3-8b").unwrap().dropout);
        assert!(!Model::preset("deepseek-v3").unwrap().dropout);
    }

    #[test]
    fn head_dim_is_honoured() {
        let m = hf(r#", "head_dim": 32"#).unwrap();
        assert_eq!(m.head_dim(), 32);
        let plain = hf("").unwrap();
        // Q, K, V and O are 4 x 32 = 128 wide instead of 64: four 64 x 64 blocks and their biases more.
        assert_eq!(
            m.params_per_layer() - plain.params_per_layer(),
            4 * 64 * 64 + 3 * 64
        );
    }

    #[test]
    fn unmodelled_architectures_are_refused_with_the_key() {
        for (extra, key) in [
            (r#", "ssm_cfg": {"d_state": 16}"#, "ssm_cfg"),
            (
                r#", "hybrid_override_pattern": "M-M*""#,
                "hybrid_override_pattern",
            ),
            (r#", "mamba_d_state": 16"#, "mamba_d_state"),
            (
                r#", "layer_types": ["full_attention", "mamba"]"#,
                "layer_types",
            ),
            (r#", "model_type": "dbrx""#, "model_type"),
        ] {
            let e = hf(extra).unwrap_err().to_string();
            assert!(e.contains(&format!("'{key}'")) && e.contains("not"), "{e}");
        }
        // A zero expert count is refused naming the key (a dense config has no expert keys);
        // a null one and attention-only layer types stay dense.
        let e = hf(r#", "num_experts": 0, "moe_intermediate_size": null"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("num_experts") && e.contains("positive"), "{e}");
        assert!(hf(r#", "num_experts": null"#).unwrap().moe.is_none());
        hf(r#", "layer_types": ["sliding_attention", "full_attention"]"#).unwrap();
    }
}
