//! The architecture part of `--target megatron`: normalisation, positions, activation,
//! biases, the rotary base and scaling, QK norm, norm epsilon, the MoE router's scoring and
//! balancing, the sliding window (the plan model's `arch` and `sliding_window`), as
//! Megatron-LM flags at the commit `tests/data/megatron_args.txt` names;
//! `plan::megatron_args` reads them back.

use crate::plan::plan_file::PlanModel;

/// `x` as Megatron-LM's argparse reads it (`float`): Rust's shortest round-trip form.
fn num(x: f64) -> Option<String> {
    Some(format!("{x}"))
}

/// Pushes the architecture flags of `m` through `flag`; what Megatron-LM cannot express goes
/// to `notes`, what pplan assumed to `assumed`.
pub fn arch_flags(
    m: &PlanModel,
    flag: &mut dyn FnMut(&'static str, Option<String>),
    notes: &mut Vec<String>,
    _assumed: &mut Vec<&'static str>,
) {
    let a = &m.arch;
    let family = |recorded: &Option<String>, default: &str| {
        Some(recorded.clone().unwrap_or_else(|| default.to_string()))
    };
    let rope_default = if m.gated_mlp {
        "rope"
    } else {
        "learned_absolute"
    };
    let scaling = a.rope_scaling.as_ref();
    let yarn = scaling.is_some_and(|s| s.rope_type == "yarn");
    // Non-MLA YaRN is its own position-embedding type; MLA takes `--rope-type yarn`.
    let positions = match &m.position_embedding_type {
        Some(p) => p.clone(),
        None if yarn && m.mla.is_none() => "yarn".into(),
        None => rope_default.into(),
    };
    flag("--position-embedding-type", Some(positions.clone()));
    let rotary = positions != "learned_absolute" && positions != "none";
    if rotary {
        match a.rotary_base {
            // Megatron-LM's --rotary-base is an integer (arguments.py `type=int`).
            Some(b) if b.fract() == 0.0 => flag("--rotary-base", Some(format!("{}", b as u64))),
            Some(b) => notes.push(format!(
                "rotary base {b} is not an integer: Megatron-LM's --rotary-base takes integers"
            )),
            None => notes.push(format!(
                "pplan's model '{}' does not record its rotary base (rope_theta): Megatron-LM's default 10000 applies; add --rotary-base",
                m.name
            )),
        }
    }
    if let Some(s) = scaling {
        match s.rope_type.as_str() {
            "llama3" => {
                flag("--use-rope-scaling", None);
                flag("--rope-scaling-factor", num(s.factor));
                if s.original_max_position_embeddings.is_some_and(|n| n != 8192) {
                    notes.push(format!(
                        "llama3 rope scaling from {} positions: Megatron-LM's --use-rope-scaling assumes 8192",
                        s.original_max_position_embeddings.unwrap_or(0)
                    ));
                }
            }
            "yarn" => {
                if m.mla.is_some() {
                    flag("--rope-type", Some("yarn".into()));
                    if s.original_max_position_embeddings.is_some_and(|n| n != 4096) {
                        notes.push(
                            "MLA YaRN from other than 4096 positions: Megatron-LM has no flag for MLATransformerConfig.original_max_position_embeddings".into(),
                        );
                    }
                } else if let Some(n) = s.original_max_position_embeddings {
                    flag("--yarn-original-max-position-embeddings", Some(n.to_string()));
                }
                flag("--rotary-scaling-factor", num(s.factor));
                if let Some(x) = s.mscale {
                    flag("--mscale", num(x));
                }
                if let Some(x) = s.mscale_all_dim {
                    flag("--mscale-all-dim", num(x));
                }
            }
            other => notes.push(format!(
                "rope scaling '{other}' (factor {}) has no Megatron-LM flag: positions are unscaled",
                s.factor
            )),
        }
    }
    let rms_default = if m.gated_mlp { "RMSNorm" } else { "LayerNorm" };
    flag("--normalization", family(&m.normalization, rms_default));
    if let Some(e) = a.norm_epsilon {
        flag("--norm-epsilon", num(e));
    }
    if a.qk_layernorm {
        flag("--qk-layernorm", None);
    }
    let activation = a
        .activation
        .as_deref()
        .unwrap_or(if m.gated_mlp { "swiglu" } else { "gelu" });
    match activation {
        "swiglu" => flag("--swiglu", None),
        "quick-geglu" => {
            flag("--quick-geglu", None);
            if let Some(c) = a.activation_func_clamp_value {
                flag("--activation-func-clamp-value", num(c));
            }
            if let Some(o) = a.glu_linear_offset {
                flag("--glu-linear-offset", num(o));
            }
        }
        "squared-relu" => flag("--squared-relu", None),
        "gelu" => {}
        "geglu" => {
            // Same shapes (a gated MLP), another gate function.
            flag("--swiglu", None);
            notes.push(
                "GeGLU (a GELU-gated MLP, Gemma) has no Megatron-LM flag: --swiglu builds the same shapes with a SiLU gate; Megatron-Bridge sets activation_func in its model provider".into(),
            );
        }
        other => notes.push(format!(
            "activation '{other}' has no Megatron-LM flag: its default GELU applies"
        )),
    }
    if !m.gated_mlp && activation != "gelu" && activation != "squared-relu" {
        notes.push(format!(
            "activation '{activation}' with an ungated MLP: Megatron-LM's gated flags build a gated one"
        ));
    }
    let biases = a.add_bias_linear.unwrap_or(!m.gated_mlp);
    if !biases {
        flag("--disable-bias-linear", None);
        if a.add_qkv_bias {
            flag("--add-qkv-bias", None);
        }
    }
    if m.moe.is_some() {
        if let Some(s) = &a.moe_router_score_function {
            flag("--moe-router-score-function", Some(s.clone()));
        }
        if a.moe_router_enable_expert_bias {
            flag("--moe-router-enable-expert-bias", None);
        }
        if let Some(s) = a.moe_router_topk_scaling_factor {
            flag("--moe-router-topk-scaling-factor", num(s));
        }
        if let Some(t) = &a.moe_router_load_balancing_type {
            flag("--moe-router-load-balancing-type", Some(t.clone()));
        }
        if let Some(c) = a.moe_aux_loss_coeff {
            flag("--moe-aux-loss-coeff", num(c));
        }
        if let Some(d) = &a.moe_router_dtype {
            flag("--moe-router-dtype", Some(d.clone()));
        }
    }
    if let Some(w) = &m.sliding_window {
        // Megatron-Core's (left, right) window: causal attention looks left only.
        flag("--window-size", Some(format!("{},0", w.window_size)));
        let p = &w.window_layer_pattern;
        if p.contains(&0) {
            let every = (2..=p.len()).find(|&n| {
                p.iter()
                    .enumerate()
                    .all(|(i, &b)| (b != 0) == ((i + 1) % n != 0))
            });
            let freq = match every {
                Some(n) => n.to_string(),
                None => format!(
                    "[{}]",
                    p.iter().map(u8::to_string).collect::<Vec<_>>().join(",")
                ),
            };
            flag("--window-attn-skip-freq", Some(freq));
        }
    }
}
