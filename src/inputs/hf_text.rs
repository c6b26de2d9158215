//! The language model of a Hugging Face `config.json`, put in the keys `inputs::model` and
//! `inputs::moe` read, before they read it (issue 41).
//!
//! - Multimodal releases (Gemma 3, Llama 4, Mistral 3) nest the language model's config under
//!   `text_config`; it is read from there, and only the language model is counted (the vision
//!   tower and projector are not: pplan plans the decoder). `tie_word_embeddings` is the text
//!   config's, else the outer config's, else the text family's `transformers` default.
//! - Keys a `transformers` config class fills in when a file leaves them out are filled in
//!   the same way for the families whose published files rely on it: Gemma 3's
//!   (`Gemma3TextConfig`: vocabulary 262,208, `head_dim` 256, RMSNorm, GELU-tanh, 131,072
//!   positions, and every `sliding_window_pattern`-th layer (6) full attention, the rest
//!   sliding).
//! - Llama 4 (`llama4_text`, `Llama4TextConfig`): `intermediate_size` is each expert's width and
//!   `intermediate_size_mlp` the dense layers' FFN; every MoE layer has one shared expert as
//!   wide as a routed one (`Llama4TextMoe.shared_expert`); the MoE layers are `moe_layers`, or
//!   every `interleave_moe_layer_step`-th layer counting from 1 (`range(step - 1, layers,
//!   step)`: Maverick's step 2 makes 24 of its 48 layers MoE). They are rewritten as the
//!   Qwen-MoE keys `inputs::moe` reads (`moe_intermediate_size`,
//!   `shared_expert_intermediate_size`, `decoder_sparse_step`, `mlp_only_layers`).
//! - Hybrid linear-attention configs that name no per-layer `layer_types` (Qwen3-Next's Gated
//!   DeltaNet layers between every `full_attention_interval`-th full-attention layer) are
//!   refused by `inputs::model` naming that key.

use super::moe::FieldError;
use serde_json::{Map, Value};

fn bad(field: &str, got: &Value, expected: &'static str) -> FieldError {
    FieldError {
        field: field.to_string(),
        got: got.to_string(),
        expected,
    }
}

/// Keys a hybrid linear-attention (Gated DeltaNet) config has instead of per-layer
/// `layer_types`: refused by `inputs::model`, which cannot count those layers.
pub const LINEAR_ATTENTION_KEYS: [&str; 2] = ["full_attention_interval", "linear_num_value_heads"];

/// The config `inputs::model` reads: the language model's, with the defaults and Llama 4 keys
/// described in the module docs. A config without `text_config` or with its own
/// `num_hidden_layers` is the language model already.
pub fn language_model(v: Value) -> Result<Value, FieldError> {
    let Value::Object(outer) = v else {
        return Ok(v);
    };
    let mut text = match outer.get("text_config") {
        Some(Value::Object(t)) if !outer.contains_key("num_hidden_layers") => {
            let mut t = t.clone();
            if !t.contains_key("tie_word_embeddings") {
                if let Some(tie) = outer.get("tie_word_embeddings") {
                    t.insert("tie_word_embeddings".into(), tie.clone());
                }
            }
            t
        }
        Some(x @ (Value::Array(_) | Value::String(_) | Value::Number(_) | Value::Bool(_)))
            if !outer.contains_key("num_hidden_layers") =>
        {
            return Err(bad(
                "text_config",
                x,
                "an object: the language model's config (Gemma 3, Llama 4, Mistral 3)",
            ))
        }
        _ => outer,
    };
    match text.get("model_type").and_then(Value::as_str) {
        Some("gemma3_text") => gemma3_defaults(&mut text),
        Some("llama4_text") => llama4_keys(&mut text)?,
        _ => {}
    }
    Ok(Value::Object(text))
}

fn default(t: &mut Map<String, Value>, key: &str, value: Value) {
    t.entry(key).or_insert(value);
}

/// `Gemma3TextConfig`'s defaults for the keys Gemma 3's published files leave out.
fn gemma3_defaults(t: &mut Map<String, Value>) {
    default(t, "vocab_size", 262_208.into());
    default(t, "head_dim", 256.into());
    default(t, "num_key_value_heads", 4.into());
    default(t, "hidden_activation", "gelu_pytorch_tanh".into());
    default(t, "max_position_embeddings", 131_072.into());
    default(t, "rms_norm_eps", 1e-6.into());
    default(t, "sliding_window", 4096.into());
    if t.contains_key("layer_types") {
        return;
    }
    let pattern = t
        .get("sliding_window_pattern")
        .and_then(Value::as_u64)
        .unwrap_or(6)
        .max(1);
    if let Some(n) = t.get("num_hidden_layers").and_then(Value::as_u64) {
        let types: Vec<Value> = (0..n)
            .map(|i| {
                if (i + 1) % pattern == 0 {
                    "full_attention"
                } else {
                    "sliding_attention"
                }
                .into()
            })
            .collect();
        t.insert("layer_types".into(), types.into());
    }
}

/// Llama 4's expert layout in the keys `inputs::moe` reads (module docs).
fn llama4_keys(t: &mut Map<String, Value>) -> Result<(), FieldError> {
    let Some(expert) = t.get("intermediate_size").cloned() else {
        return Ok(()); // inputs::model names the missing key
    };
    let dense = t
        .get("intermediate_size_mlp")
        .cloned()
        .unwrap_or_else(|| 16_384.into()); // Llama4TextConfig's default
    t.insert("moe_intermediate_size".into(), expert.clone());
    t.insert("intermediate_size".into(), dense);
    // One shared expert of a routed expert's width in every MoE layer.
    t.insert("shared_expert_intermediate_size".into(), expert);
    let layers = t.get("num_hidden_layers").and_then(Value::as_u64);
    match t.get("moe_layers") {
        None | Some(Value::Null) => {
            let step = match t.get("interleave_moe_layer_step") {
                None | Some(Value::Null) => 1,
                Some(x) => match x.as_u64() {
                    Some(s) if s > 0 => s,
                    _ => {
                        return Err(bad(
                            "interleave_moe_layer_step",
                            x,
                            "a positive layer interval (1: every layer is MoE)",
                        ))
                    }
                },
            };
            t.insert("decoder_sparse_step".into(), step.into());
        }
        Some(Value::Array(list)) => {
            let n = layers.unwrap_or(0);
            let mut moe = vec![false; n as usize];
            for x in list {
                match x.as_u64() {
                    Some(i) if i < n => moe[i as usize] = true,
                    _ => {
                        return Err(bad(
                            "moe_layers",
                            x,
                            "layer indices below num_hidden_layers",
                        ))
                    }
                }
            }
            let dense: Vec<Value> = (0..n)
                .filter(|&i| !moe[i as usize])
                .map(Value::from)
                .collect();
            t.insert("mlp_only_layers".into(), dense.into());
        }
        Some(x) => return Err(bad("moe_layers", x, "a list of layer indices")),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn text_config_is_unwrapped_and_its_own_config_kept() {
        let v = json!({"model_type": "mistral3", "tie_word_embeddings": false,
            "text_config": {"model_type": "mistral", "num_hidden_layers": 2}});
        let t = language_model(v).unwrap();
        assert_eq!(t["model_type"], "mistral");
        assert_eq!(t["tie_word_embeddings"], false);
        let flat = json!({"num_hidden_layers": 2, "text_config": {"num_hidden_layers": 9}});
        assert_eq!(language_model(flat.clone()).unwrap(), flat);
    }

    #[test]
    fn llama4_moe_layers_follow_the_interleave_step() {
        let v = json!({"model_type": "llama4_text", "num_hidden_layers": 4,
            "intermediate_size": 8, "intermediate_size_mlp": 16,
            "interleave_moe_layer_step": 2});
        let t = language_model(v).unwrap();
        assert_eq!(t["decoder_sparse_step"], 2);
        assert_eq!(t["intermediate_size"], 16);
        assert_eq!(t["moe_intermediate_size"], 8);
        assert_eq!(t["shared_expert_intermediate_size"], 8);
        let v = json!({"model_type": "llama4_text", "num_hidden_layers": 4,
            "intermediate_size": 8, "moe_layers": [1, 3]});
        assert_eq!(language_model(v).unwrap()["mlp_only_layers"], json!([0, 2]));
        let v = json!({"model_type": "llama4_text", "num_hidden_layers": 4,
            "intermediate_size": 8, "interleave_moe_layer_step": 0});
        assert_eq!(
            language_model(v).unwrap_err().field,
            "interleave_moe_layer_step"
        );
    }
}
