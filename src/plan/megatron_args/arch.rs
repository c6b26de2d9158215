//! Reading back the architecture facts `pplan emit --target megatron` writes (`inputs::arch`):
//! rotary base and scaling, QK norm, biases, activation, norm epsilon, router scoring and
//! balancing, and the sliding window. Flag names and defaults are Megatron-LM's
//! (`megatron/training/arguments.py`, `megatron/core/transformer/transformer_config.py`).

use super::{Flags, MegatronArgsError};
use crate::inputs::arch::{Arch, RopeScaling};
use crate::inputs::moe::SlidingWindow;

/// The flags read here.
pub(super) const USED: [&str; 26] = [
    "--rotary-base",
    "--use-rope-scaling",
    "--rope-scaling-factor",
    "--rope-type",
    "--rotary-scaling-factor",
    "--yarn-original-max-position-embeddings",
    "--mscale",
    "--mscale-all-dim",
    "--qk-layernorm",
    "--add-qkv-bias",
    "--disable-bias-linear",
    "--quick-geglu",
    "--squared-relu",
    "--activation-func-clamp-value",
    "--glu-linear-offset",
    "--norm-epsilon",
    "--moe-router-score-function",
    "--moe-router-enable-expert-bias",
    "--moe-router-topk-scaling-factor",
    "--moe-router-load-balancing-type",
    "--moe-aux-loss-coeff",
    "--moe-router-dtype",
    "--window-size",
    "--window-attn-skip-freq",
    "--ckpt-format",
    "--openai-gelu",
];

fn float(flags: &Flags, f: &str) -> Result<Option<f64>, MegatronArgsError> {
    match flags.str(f) {
        None => Ok(None),
        Some(s) => match s.parse::<f64>() {
            Ok(x) if x.is_finite() && x >= 0.0 => Ok(Some(x)),
            _ => Err(flags.bad(f, s, "a number, 0 or more")),
        },
    }
}

/// The facts of a command line; `gated` is its gated MLP (`--swiglu` or `--quick-geglu`),
/// `mla` its `--multi-latent-attention` (whose YaRN is `--rope-type yarn`).
pub(super) fn arch_from_flags(
    flags: &Flags,
    gated: bool,
    mla: bool,
) -> Result<Arch, MegatronArgsError> {
    let yarn = if mla {
        flags.str("--rope-type") == Some("yarn")
    } else {
        flags.str("--position-embedding-type") == Some("yarn")
    };
    let rope_scaling = if flags.has("--use-rope-scaling") {
        // Megatron-LM's Llama 3.x scaling (`apply_rope_scaling`) extends a fixed 8192.
        Some(RopeScaling {
            rope_type: "llama3".into(),
            factor: float(flags, "--rope-scaling-factor")?.unwrap_or(8.0),
            original_max_position_embeddings: Some(8192),
            mscale: None,
            mscale_all_dim: None,
        })
    } else if yarn {
        Some(RopeScaling {
            rope_type: "yarn".into(),
            // MLATransformerConfig's defaults (factor 40, from 4096) for MLA; else
            // argument_utils' YaRN defaults (1.0, 4096).
            factor: float(flags, "--rotary-scaling-factor")?.unwrap_or(if mla {
                40.0
            } else {
                1.0
            }),
            original_max_position_embeddings: Some(
                flags
                    .num("--yarn-original-max-position-embeddings")?
                    .unwrap_or(4096),
            ),
            mscale: float(flags, "--mscale")?,
            mscale_all_dim: float(flags, "--mscale-all-dim")?,
        })
    } else {
        None
    };
    // Recorded only where it differs from the family's (SwiGLU gated, GELU not).
    let activation = if flags.has("--quick-geglu") {
        Some("quick-geglu")
    } else if flags.has("--squared-relu") {
        Some("squared-relu")
    } else {
        None
    };
    let biases = !flags.has("--disable-bias-linear");
    let str_opt = |f: &str| flags.str(f).map(str::to_string);
    Ok(Arch {
        rotary_base: flags.num("--rotary-base")?.map(|b| b as f64),
        rope_scaling,
        qk_layernorm: flags.has("--qk-layernorm"),
        // Megatron-LM sets add_qkv_bias whenever all linear biases are on (validate_args).
        add_qkv_bias: flags.has("--add-qkv-bias") && !biases,
        // The family's: biases without a gated MLP, none with one.
        add_bias_linear: (biases == gated).then_some(biases),
        activation: activation.map(str::to_string),
        activation_func_clamp_value: float(flags, "--activation-func-clamp-value")?,
        glu_linear_offset: float(flags, "--glu-linear-offset")?.filter(|&x| x != 0.0),
        norm_epsilon: float(flags, "--norm-epsilon")?,
        moe_router_score_function: str_opt("--moe-router-score-function")
            .filter(|s| s != "softmax"),
        moe_router_enable_expert_bias: flags.has("--moe-router-enable-expert-bias"),
        moe_router_topk_scaling_factor: float(flags, "--moe-router-topk-scaling-factor")?,
        moe_router_load_balancing_type: str_opt("--moe-router-load-balancing-type")
            .filter(|s| s != "aux_loss"),
        moe_aux_loss_coeff: float(flags, "--moe-aux-loss-coeff")?,
        moe_router_dtype: str_opt("--moe-router-dtype"),
    })
}

/// `--window-size W,0` with `--window-attn-skip-freq` (N: one full layer after N-1 window
/// layers; a `[1,0,...]` list, 1 a window layer); without the frequency every layer.
pub(super) fn window_from_flags(
    flags: &Flags,
    layers: u32,
) -> Result<Option<SlidingWindow>, MegatronArgsError> {
    let Some(w) = flags.str("--window-size") else {
        return Ok(None);
    };
    let left = w
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .next()
        .and_then(|x| x.trim().parse::<i64>().ok());
    let window = match left {
        Some(n) if n > 0 => n as u64,
        // -1 is an infinite window: none.
        Some(-1) => return Ok(None),
        _ => return Err(flags.bad("--window-size", w, "LEFT,RIGHT (e.g. 128,0)")),
    };
    let pattern: Vec<bool> = match flags.str("--window-attn-skip-freq") {
        None => vec![true; layers as usize],
        Some(f) => match f.parse::<usize>() {
            Ok(n) if n > 0 => (0..layers as usize).map(|i| (i + 1) % n != 0).collect(),
            _ => {
                let bits: Vec<&str> = f
                    .trim_matches(|c| c == '[' || c == ']')
                    .split(',')
                    .map(str::trim)
                    .collect();
                if bits.len() != layers as usize || bits.iter().any(|b| *b != "0" && *b != "1") {
                    return Err(flags.bad(
                        "--window-attn-skip-freq",
                        f,
                        "a positive integer or a [1,0,...] list with one entry per layer",
                    ));
                }
                bits.iter().map(|b| *b == "1").collect()
            }
        },
    };
    Ok(Some(SlidingWindow {
        window,
        layers: pattern,
    }))
}
