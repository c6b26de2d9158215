//! Architecture facts that change what a training framework builds: the rotary base and
//! scaling, QK normalisation, biases, the MLP activation, the norm epsilon, the MoE router's
//! scoring and balancing. `pplan emit` writes them so that the emitted model is the planned one;
//! the cost model reads one of them, `add_bias_linear` on a MoE model (the experts' biases,
//! which Megatron-Core adds expert by expert: `CostModel::moe_expert_bias_bytes`); otherwise
//! costs depend on the dimensions, `gated_mlp`, `rms_norm`, `rotary`, the experts and the
//! sliding window, which `Model` carries itself.
//!
//! Field names are Megatron-LM's argument names (the plan file stores this struct as its
//! model's `arch`); `None`/`false` means "the framework's default for the family", so plans
//! written before these facts existed read as before. Values come from Hugging Face config.json
//! keys ([`Arch::from_hf`]) or the bundled presets ([`Arch::preset`], each citing its config).

use super::moe::FieldError;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Rotary-embedding scaling (Hugging Face `rope_scaling`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RopeScaling {
    /// `llama3` (Llama 3.1's frequency scaling), `yarn` (DeepSeek-V3), or another
    /// `transformers` rope type Megatron-LM cannot express (`linear`, `dynamic`, `longrope`).
    pub rope_type: String,
    pub factor: f64,
    /// The context the scaling extends (YaRN; Llama 3.1's is 8192, Megatron-LM's fixed value).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_max_position_embeddings: Option<u64>,
    /// YaRN's attention scale terms (DeepSeek-V3: 1.0 and 1.0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mscale: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mscale_all_dim: Option<f64>,
}

/// The facts; see the module documentation.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Arch {
    /// Rotary base (`rope_theta`); None: unknown (Megatron-LM's default 10000 applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotary_base: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_scaling: Option<RopeScaling>,
    /// Query and key normalised before attention (Qwen3; DeepSeek-V3's MLA latent norms).
    #[serde(default, skip_serializing_if = "is_false")]
    pub qk_layernorm: bool,
    /// Biases on the query, key and value projections only (Qwen2/2.5).
    #[serde(default, skip_serializing_if = "is_false")]
    pub add_qkv_bias: bool,
    /// Biases on every linear layer; None: the family's (biases without a gated MLP, none
    /// with one). GPT-OSS: true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_bias_linear: Option<bool>,
    /// MLP activation where it differs from the family's (None: SwiGLU with a gated MLP,
    /// GELU without): `geglu` (GELU-tanh gated: Gemma), `quick-geglu` (GPT-OSS's
    /// sigmoid(1.702 x) gate), `squared-relu`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activation: Option<String>,
    /// GPT-OSS: the gate and up projections clamped to this (`swiglu_limit`, 7.0)...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub activation_func_clamp_value: Option<f64>,
    /// ... and 1 added to the up projection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub glu_linear_offset: Option<f64>,
    /// Normalisation epsilon (`rms_norm_eps`, `layer_norm_eps`); None: Megatron-LM's 1e-5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub norm_epsilon: Option<f64>,
    /// MoE router: `softmax` (Megatron-LM's default; None) or `sigmoid` (DeepSeek-V3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_router_score_function: Option<String>,
    /// Aux-loss-free balancing with a per-expert bias (DeepSeek-V3's `noaux_tc`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub moe_router_enable_expert_bias: bool,
    /// Routed experts' weights scaled by this (DeepSeek-V3's `routed_scaling_factor` 2.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_router_topk_scaling_factor: Option<f64>,
    /// `aux_loss` (Megatron-LM's default; None), `seq_aux_loss` (DeepSeek-V2/V3) or `none`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_router_load_balancing_type: Option<String>,
    /// Coefficient of the balancing loss (`router_aux_loss_coef`, `aux_loss_alpha`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_aux_loss_coeff: Option<f64>,
    /// Routing computed in `fp32` (the `transformers` routers of Mixtral, Qwen-MoE and
    /// DeepSeek compute their probabilities in float32).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_router_dtype: Option<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Arch {
    /// True when no fact is recorded (the plan file omits the field).
    pub fn is_default(&self) -> bool {
        *self == Arch::default()
    }

    /// The facts of a bundled model, from the publisher's config.json (the same files as
    /// `tests/data/hf/`, except where noted).
    pub fn preset(name: &str) -> Arch {
        let llama31 = || Arch {
            // huggingface.co/meta-llama/Llama-3.1-{8B,70B,405B} config.json: rope_theta
            // 500000, rope_scaling llama3 factor 8 from 8192, rms_norm_eps 1e-5, no biases.
            rotary_base: Some(500_000.0),
            rope_scaling: Some(RopeScaling {
                rope_type: "llama3".into(),
                factor: 8.0,
                original_max_position_embeddings: Some(8192),
                mscale: None,
                mscale_all_dim: None,
            }),
            norm_epsilon: Some(1e-5),
            ..Arch::default()
        };
        let qwen3_moe = || Arch {
            // huggingface.co/Qwen/Qwen3-30B-A3B and Qwen3-235B-A22B config.json: rope_theta
            // 1e6, rms_norm_eps 1e-6, router_aux_loss_coef 0.001; Qwen3 attention normalises
            // q and k (transformers' Qwen3MoeAttention q_norm/k_norm); softmax routing in fp32.
            rotary_base: Some(1_000_000.0),
            qk_layernorm: true,
            norm_epsilon: Some(1e-6),
            moe_aux_loss_coeff: Some(0.001),
            moe_router_dtype: Some("fp32".into()),
            ..Arch::default()
        };
        let mixtral = |aux: f64| Arch {
            // huggingface.co/mistralai/Mixtral-8x7B-v0.1 (aux 0.02) and Mixtral-8x22B-v0.1
            // (aux 0.001) config.json: rope_theta 1e6, rms_norm_eps 1e-5.
            rotary_base: Some(1_000_000.0),
            norm_epsilon: Some(1e-5),
            moe_aux_loss_coeff: Some(aux),
            moe_router_dtype: Some("fp32".into()),
            ..Arch::default()
        };
        match name {
            "llama3-8b" | "llama3-70b" | "llama3-405b" => llama31(),
            "qwen3-30b-a3b" | "qwen3-235b-a22b" => qwen3_moe(),
            "mixtral-8x7b" => mixtral(0.02),
            "mixtral-8x22b" => mixtral(0.001),
            // huggingface.co/deepseek-ai/DeepSeek-V3 config.json: rope_theta 10000 with
            // rope_scaling yarn (factor 40 from 4096, mscale 1.0, mscale_all_dim 1.0),
            // rms_norm_eps 1e-6, scoring_func sigmoid, topk_method noaux_tc (expert bias),
            // routed_scaling_factor 2.5, aux_loss_alpha 0.001 with seq_aux true; the MLA
            // latents are normalised (q_a_layernorm, kv_a_layernorm: Megatron's qk_layernorm).
            "deepseek-v3" => Arch {
                rotary_base: Some(10_000.0),
                rope_scaling: Some(RopeScaling {
                    rope_type: "yarn".into(),
                    factor: 40.0,
                    original_max_position_embeddings: Some(4096),
                    mscale: Some(1.0),
                    mscale_all_dim: Some(1.0),
                }),
                qk_layernorm: true,
                norm_epsilon: Some(1e-6),
                moe_router_score_function: Some("sigmoid".into()),
                moe_router_enable_expert_bias: true,
                moe_router_topk_scaling_factor: Some(2.5),
                moe_router_load_balancing_type: Some("seq_aux_loss".into()),
                moe_aux_loss_coeff: Some(0.001),
                moe_router_dtype: Some("fp32".into()),
                ..Arch::default()
            },
            // The GPT presets are Megatron-LM's GPT: its defaults throughout.
            _ => Arch::default(),
        }
    }

    /// The facts a Hugging Face config.json states: `rope_theta`, `rope_scaling`,
    /// `rms_norm_eps`/`layer_norm_eps`, `attention_bias`, `hidden_act`, and for MoE models
    /// `scoring_func`, `topk_method`, `routed_scaling_factor`, `aux_loss_alpha`/`seq_aux`,
    /// `router_aux_loss_coef`; the family (`model_type`) implies QK norm (Qwen3, Gemma 3,
    /// OLMo 2, DeepSeek's MLA), QKV biases (Qwen2) and GPT-OSS's clamped GLU with biases.
    /// `gated` is the model's gated MLP, `moe` whether it has experts.
    pub fn from_hf(v: &Value, gated: bool, moe: bool) -> Result<Arch, FieldError> {
        let model_type = v.get("model_type").and_then(Value::as_str).unwrap_or("");
        let act = v
            .get("hidden_act")
            .or_else(|| v.get("hidden_activation"))
            .and_then(Value::as_str);
        let gpt_oss = model_type == "gpt_oss";
        let activation = if gpt_oss {
            Some("quick-geglu")
        } else {
            // Recorded only where it differs from the family's (SwiGLU gated, GELU not).
            match (gated, act) {
                (true, Some(a)) if a.starts_with("gelu") => Some("geglu"),
                (false, Some("relu2" | "squared_relu")) => Some("squared-relu"),
                _ => None,
            }
        };
        let attention_bias = opt_bool(v, "attention_bias")?.unwrap_or(false);
        let mla = v.get("kv_lora_rank").is_some_and(|x| !x.is_null());
        let mut a = Arch {
            rotary_base: opt_pos(v, "rope_theta")?,
            rope_scaling: rope_scaling(v)?,
            qk_layernorm: mla
                || ["qwen3", "qwen3_moe", "gemma3", "gemma3_text", "olmo2"].contains(&model_type),
            add_qkv_bias: !gpt_oss
                && (attention_bias
                    || opt_bool(v, "qkv_bias")?.unwrap_or(false)
                    || ["qwen2", "qwen2_moe"].contains(&model_type)),
            add_bias_linear: gpt_oss.then_some(true),
            activation: activation.map(str::to_string),
            activation_func_clamp_value: if gpt_oss {
                opt_pos(v, "swiglu_limit")?
            } else {
                None
            },
            glu_linear_offset: gpt_oss.then_some(1.0),
            norm_epsilon: match opt_pos(v, "rms_norm_eps")? {
                Some(e) => Some(e),
                None => match opt_pos(v, "layer_norm_eps")? {
                    Some(e) => Some(e),
                    None => opt_pos(v, "layer_norm_epsilon")?,
                },
            },
            ..Arch::default()
        };
        if moe {
            a.moe_router_score_function = match v.get("scoring_func").and_then(Value::as_str) {
                Some("sigmoid") => Some("sigmoid".into()),
                _ => None,
            };
            a.moe_router_enable_expert_bias =
                v.get("topk_method").and_then(Value::as_str) == Some("noaux_tc");
            a.moe_router_topk_scaling_factor =
                opt_pos(v, "routed_scaling_factor")?.filter(|&s| s != 1.0);
            if opt_bool(v, "seq_aux")? == Some(true) {
                a.moe_router_load_balancing_type = Some("seq_aux_loss".into());
            }
            a.moe_aux_loss_coeff = match opt_f64(v, "aux_loss_alpha")? {
                Some(c) => Some(c),
                None => opt_f64(v, "router_aux_loss_coef")?,
            };
            if !gpt_oss {
                a.moe_router_dtype = Some("fp32".into());
            }
        }
        Ok(a)
    }
}

impl Arch {
    /// The facts of Megatron-style JSON, under Megatron-LM's argument (dest) names:
    /// `rotary_base`, `norm_epsilon`, `qk_layernorm`, `add_qkv_bias`, `add_bias_linear`,
    /// `squared_relu`, `quick_geglu`, `activation_func_clamp_value`, `glu_linear_offset` and
    /// the `moe_router_*`/`moe_aux_loss_coeff` keys; absent keys are Megatron-LM's defaults.
    /// `gated` is the file's `swiglu` (or `quick_geglu`).
    pub fn from_megatron(v: &Value, gated: bool) -> Result<Arch, FieldError> {
        let text = |k: &str| -> Result<Option<String>, FieldError> {
            match v.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(x) => Err(bad(k, x, "a string")),
            }
        };
        let flag = |k: &str| opt_bool(v, k).map(|b| b.unwrap_or(false));
        let biases = opt_bool(v, "add_bias_linear")?;
        let activation = if flag("quick_geglu")? {
            Some("quick-geglu".to_string())
        } else if flag("squared_relu")? {
            Some("squared-relu".to_string())
        } else {
            None
        };
        Ok(Arch {
            rotary_base: opt_pos(v, "rotary_base")?,
            qk_layernorm: flag("qk_layernorm")?,
            add_qkv_bias: flag("add_qkv_bias")? && biases != Some(true),
            // Recorded only where it differs from the family's (none gated, biases not).
            add_bias_linear: biases.filter(|&b| b == gated),
            activation,
            activation_func_clamp_value: opt_pos(v, "activation_func_clamp_value")?,
            glu_linear_offset: opt_f64(v, "glu_linear_offset")?.filter(|&x| x != 0.0),
            norm_epsilon: opt_pos(v, "norm_epsilon")?,
            moe_router_score_function: text("moe_router_score_function")?
                .filter(|s| s != "softmax"),
            moe_router_enable_expert_bias: flag("moe_router_enable_expert_bias")?,
            moe_router_topk_scaling_factor: opt_pos(v, "moe_router_topk_scaling_factor")?,
            moe_router_load_balancing_type: text("moe_router_load_balancing_type")?
                .filter(|s| s != "aux_loss"),
            moe_aux_loss_coeff: opt_f64(v, "moe_aux_loss_coeff")?,
            moe_router_dtype: text("moe_router_dtype")?,
            ..Arch::default()
        })
    }
}

fn bad(field: &str, got: &Value, expected: &'static str) -> FieldError {
    FieldError {
        field: field.to_string(),
        got: got.to_string(),
        expected,
    }
}

/// A number, 0 or more (an aux-loss coefficient or a GLU offset of 0 is Megatron-LM's default).
fn opt_f64(v: &Value, field: &str) -> Result<Option<f64>, FieldError> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => match x.as_f64() {
            Some(f) if f.is_finite() && f >= 0.0 => Ok(Some(f)),
            _ => Err(bad(field, x, "a number, 0 or more")),
        },
    }
}

/// A positive number (a rotary base, a norm epsilon, a scaling factor).
fn opt_pos(v: &Value, field: &str) -> Result<Option<f64>, FieldError> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => match x.as_f64() {
            Some(f) if f.is_finite() && f > 0.0 => Ok(Some(f)),
            _ => Err(bad(field, x, "a positive number")),
        },
    }
}

fn opt_bool(v: &Value, field: &str) -> Result<Option<bool>, FieldError> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(x) => Err(bad(field, x, "true or false")),
    }
}

fn rope_scaling(v: &Value) -> Result<Option<RopeScaling>, FieldError> {
    let s = match v.get("rope_scaling") {
        None | Some(Value::Null) => return Ok(None),
        Some(s @ Value::Object(_)) => s,
        Some(x) => return Err(bad("rope_scaling", x, "an object or null")),
    };
    // transformers reads `rope_type`, and `type` in older configs (DeepSeek-V3's).
    let kind = s
        .get("rope_type")
        .or_else(|| s.get("type"))
        .and_then(Value::as_str)
        .ok_or_else(|| bad("rope_scaling", s, "an object with rope_type (or type)"))?;
    if kind == "default" {
        return Ok(None);
    }
    let factor = opt_pos(s, "factor")
        .map_err(|e| FieldError {
            field: format!("rope_scaling.{}", e.field),
            ..e
        })?
        .unwrap_or(1.0);
    // YaRN's terms may be 0 (mscale_all_dim's default).
    let sub = |k: &str| match s.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => match x.as_f64() {
            Some(f) if f.is_finite() && f >= 0.0 => Ok(Some(f)),
            _ => Err(bad(&format!("rope_scaling.{k}"), x, "a number, 0 or more")),
        },
    };
    Ok(Some(RopeScaling {
        rope_type: kind.to_string(),
        factor,
        original_max_position_embeddings: sub("original_max_position_embeddings")?
            .map(|x| x as u64),
        mscale: sub("mscale")?,
        mscale_all_dim: sub("mscale_all_dim")?,
    }))
}
