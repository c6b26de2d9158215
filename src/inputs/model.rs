//! Transformer model descriptions: bundled presets, Hugging Face `config.json` and
//! Megatron-style JSON.
//!
//! A [`Model`] is the handful of dimensions the cost and memory models need. Grouped-query
//! attention is `num_kv_heads < num_heads`; a gated MLP (SwiGLU, as in Llama) has three weight
//! matrices instead of two. Parsing does no IO; [`Model::load`] reads a file when given a path.

use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Eq)]
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
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    #[error("--model: unknown model '{name}' (valid: {}, or a path to a Hugging Face config.json or Megatron-style JSON)", preset_names().join(", "))]
    Unknown { name: String },
    #[error("--model: cannot read '{path}': {reason}")]
    Read { path: String, reason: String },
    #[error("--model: '{path}' is not JSON: {reason}")]
    NotJson { path: String, reason: String },
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
    #[error("--model: {0}")]
    Inconsistent(String),
}

/// (name, layers, hidden, heads, kv heads, ffn, vocab, seq, gated, tied)
type Preset = (&'static str, u32, u64, u64, u64, u64, u64, u64, bool, bool);

/// The bundled models. The ten `gpt-*` models are the weak-scaling models of Narayanan et al.
/// 2021 Table 1 (vocabulary 51200, sequence 2048, ffn = 4h); `gpt3-175b` is Brown et al. 2020's
/// largest model; the Llama 3 dimensions are from Meta's released `config.json` files
/// (Llama 3.1, 8k context used as the default sequence length).
pub const PRESETS: [Preset; 14] = [
    ("gpt-1.7b", 24, 2304, 24, 24, 9216, 51200, 2048, false, true),
    (
        "gpt-3.6b", 30, 3072, 32, 32, 12288, 51200, 2048, false, true,
    ),
    (
        "gpt-7.5b", 36, 4096, 32, 32, 16384, 51200, 2048, false, true,
    ),
    (
        "gpt-18.4b",
        40,
        6144,
        48,
        48,
        24576,
        51200,
        2048,
        false,
        true,
    ),
    (
        "gpt-39.1b",
        48,
        8192,
        64,
        64,
        32768,
        51200,
        2048,
        false,
        true,
    ),
    (
        "gpt-76.1b",
        60,
        10240,
        80,
        80,
        40960,
        51200,
        2048,
        false,
        true,
    ),
    (
        "gpt-145.6b",
        80,
        12288,
        96,
        96,
        49152,
        51200,
        2048,
        false,
        true,
    ),
    (
        "gpt-310.1b",
        96,
        16384,
        128,
        128,
        65536,
        51200,
        2048,
        false,
        true,
    ),
    (
        "gpt-529.6b",
        105,
        20480,
        128,
        128,
        81920,
        51200,
        2048,
        false,
        true,
    ),
    (
        "gpt-1t", 128, 25600, 160, 160, 102400, 51200, 2048, false, true,
    ),
    (
        "gpt3-175b",
        96,
        12288,
        96,
        96,
        49152,
        51200,
        2048,
        false,
        true,
    ),
    (
        "llama3-8b",
        32,
        4096,
        32,
        8,
        14336,
        128256,
        8192,
        true,
        false,
    ),
    (
        "llama3-70b",
        80,
        8192,
        64,
        8,
        28672,
        128256,
        8192,
        true,
        false,
    ),
    (
        "llama3-405b",
        126,
        16384,
        128,
        8,
        53248,
        128256,
        8192,
        true,
        false,
    ),
];

pub fn preset_names() -> Vec<&'static str> {
    PRESETS.iter().map(|p| p.0).collect()
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
        let v: Value = serde_json::from_str(text).map_err(|e| ModelError::NotJson {
            path: path.to_string(),
            reason: e.to_string(),
        })?;
        let name = std::path::Path::new(path)
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.to_string());
        let model = if v.get("num_hidden_layers").is_some() {
            let f = "Hugging Face config.json";
            get_u64(&v, "num_hidden_layers", path, f)?;
            let heads = get_u64(&v, "num_attention_heads", path, f)?;
            let act = v.get("hidden_act").and_then(Value::as_str).unwrap_or("");
            let model_type = v.get("model_type").and_then(Value::as_str).unwrap_or("");
            Model {
                name,
                num_layers: u32::try_from(get_u64(&v, "num_hidden_layers", path, f)?).map_err(
                    |_| ModelError::BadField {
                        path: path.to_string(),
                        field: "num_hidden_layers",
                        got: "a number above 2^32".to_string(),
                    },
                )?,
                hidden_size: get_u64(&v, "hidden_size", path, f)?,
                num_heads: heads,
                num_kv_heads: get_opt_u64(&v, "num_key_value_heads", path)?.unwrap_or(heads),
                ffn_hidden_size: get_u64(&v, "intermediate_size", path, f)?,
                vocab_size: get_u64(&v, "vocab_size", path, f)?,
                seq_len: get_u64(&v, "max_position_embeddings", path, f)?,
                gated_mlp: matches!(act, "silu" | "swiglu")
                    || matches!(model_type, "llama" | "mistral" | "qwen2" | "qwen3"),
                tied_embeddings: v
                    .get("tie_word_embeddings")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
            }
        } else if v.get("num_layers").is_some() {
            let f = "Megatron-style JSON";
            get_u64(&v, "num_layers", path, f)?;
            let heads = get_u64(&v, "num_attention_heads", path, f)?;
            Model {
                name,
                num_layers: u32::try_from(get_u64(&v, "num_layers", path, f)?).map_err(|_| {
                    ModelError::BadField {
                        path: path.to_string(),
                        field: "num_layers",
                        got: "a number above 2^32".to_string(),
                    }
                })?,
                hidden_size: get_u64(&v, "hidden_size", path, f)?,
                num_heads: heads,
                num_kv_heads: get_opt_u64(&v, "num_query_groups", path)?.unwrap_or(heads),
                ffn_hidden_size: get_u64(&v, "ffn_hidden_size", path, f)?,
                vocab_size: get_u64(&v, "vocab_size", path, f)?,
                seq_len: get_u64(&v, "seq_length", path, f)?,
                gated_mlp: v.get("swiglu").and_then(Value::as_bool).unwrap_or(false),
                tied_embeddings: !v
                    .get("untie_embeddings_and_output_weights")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
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
        if self.hidden_size % self.num_heads != 0 {
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
        ];
        for (what, v, max) in limits {
            if v == 0 || v > max {
                return Err(ModelError::Inconsistent(format!(
                    "{what} {v} is outside 1..={max}"
                )));
            }
        }
        Ok(())
    }

    pub fn head_dim(&self) -> u64 {
        self.hidden_size / self.num_heads
    }

    /// Parameters of one transformer layer: attention (Q, O full; K, V per key/value head),
    /// MLP (2 or 3 matrices), biases and two layer norms.
    pub fn params_per_layer(&self) -> u64 {
        let h = self.hidden_size;
        let kv = 2 * self.num_kv_heads * self.head_dim();
        let attn = h * (h + kv) + h * h + (h + kv) + h;
        let mlp_mats = if self.gated_mlp { 3 } else { 2 };
        let mlp = mlp_mats * h * self.ffn_hidden_size + self.ffn_hidden_size + h;
        attn + mlp + 4 * h
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

    pub fn total_params(&self) -> u64 {
        self.num_layers as u64 * self.params_per_layer() + self.embedding_params()
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
        assert_eq!((m.num_kv_heads, m.gated_mlp, m.seq_len), (8, true, 131072));
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
}
