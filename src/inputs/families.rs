//! What a model's family or its file's keys say beyond its dimensions: the activation names
//! pplan knows, which `transformers` families have a gated MLP, untied embeddings or
//! non-rotary positions, and Megatron-LM's `--normalization` and `--position-embedding-type`
//! values (`inputs::model` reads them).

/// Activation names pplan accepts (`transformers`' ACT2FN keys and Megatron-LM's); the gated
/// ones are listed in [`GATED_ACTIVATIONS`].
pub const ACTIVATIONS: [&str; 20] = [
    "silu",
    "swish",
    "swiglu",
    "geglu",
    "reglu",
    "gelu",
    "gelu_new",
    "gelu_fast",
    "gelu_pytorch_tanh",
    "gelu_python",
    "gelu_accurate",
    "gelu_10",
    "quick_gelu",
    "relu",
    "relu2",
    "relu6",
    "leaky_relu",
    "tanh",
    "sigmoid",
    "squared_relu",
];

/// Activations that imply a gated MLP for a model family pplan does not know by name.
pub const GATED_ACTIVATIONS: [&str; 5] = ["silu", "swish", "swiglu", "geglu", "reglu"];

/// `model_type`s whose `transformers` MLP is gated whatever the activation.
pub(crate) const GATED_FAMILIES: [&str; 15] = [
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "gemma",
    "gemma2",
    "gemma3_text",
    "phi3",
    "olmo",
    "olmo2",
    "cohere",
    "cohere2",
    "granite",
    "internlm2",
    "exaone",
];

/// `model_type`s whose MLP is two matrices (up, down) whatever the activation.
pub(crate) const UNGATED_FAMILIES: [&str; 11] = [
    "gpt_neox",
    "gptj",
    "gpt_bigcode",
    "starcoder2",
    "falcon",
    "phi",
    "nemotron",
    "bloom",
    "opt",
    "mpt",
    "gpt2",
];

/// `model_type`s whose config class defaults `tie_word_embeddings` to false (the MoE and
/// Llama 4 classes too: `MixtralConfig`, `Qwen2MoeConfig`, `Qwen3MoeConfig`,
/// `Qwen3NextConfig`, `DeepseekV2Config`, `DeepseekV3Config`, `Llama4TextConfig`, and
/// `OlmoConfig`, `Olmo2Config`, `GraniteConfig`); every other family takes
/// `PretrainedConfig`'s true (Gemma 1/2/3, Cohere). `GptOssConfig` defaults to false too
/// (the runs files' GPT-OSS rows give the key, false, as its published config does).
pub(crate) const UNTIED_BY_DEFAULT: [&str; 17] = [
    "gpt_oss",
    "llama",
    "mistral",
    "qwen2",
    "qwen3",
    "phi3",
    "starcoder2",
    "mixtral",
    "qwen2_moe",
    "qwen3_moe",
    "qwen3_next",
    "deepseek_v2",
    "deepseek_v3",
    "llama4_text",
    "olmo",
    "olmo2",
    "granite",
];

/// `model_type`s whose positions are not rotary: learned absolute embeddings (GPT-2,
/// GPT-BigCode, OPT) or ALiBi (BLOOM, MPT). Falcon says `alibi: true` when it uses ALiBi.
pub(crate) const NON_ROTARY_FAMILIES: [&str; 5] = ["gpt2", "gpt_bigcode", "opt", "bloom", "mpt"];

/// Megatron-LM's `--normalization`: `RMSNorm`, or `LayerNorm` (its default, also when absent);
/// NeMo's lower-case `rmsnorm`, `layernorm` and `layernorm1p` (Nemotron's zero-centred
/// LayerNorm) too. The value itself is the error for any other.
pub fn megatron_rms_norm(value: Option<&str>) -> Result<bool, String> {
    match value {
        None => Ok(false),
        Some(v) if v.eq_ignore_ascii_case("rmsnorm") => Ok(true),
        Some(v) if v.eq_ignore_ascii_case("layernorm") || v == "layernorm1p" => Ok(false),
        Some(other) => Err(other.to_string()),
    }
}

/// Megatron-LM's `--position-embedding-type`: rotary for `rope`, `mrope` and `yarn`; not for
/// `learned_absolute` (its default, also when absent), `relative` or `none`. The value itself
/// is the error for any other.
pub fn megatron_rotary(value: Option<&str>) -> Result<bool, String> {
    match value {
        None | Some("learned_absolute" | "relative" | "none") => Ok(false),
        Some("rope" | "mrope" | "yarn") => Ok(true),
        Some(other) => Err(other.to_string()),
    }
}
