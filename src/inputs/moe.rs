//! Mixture-of-experts layers, multi-head latent attention and sliding-window attention: the
//! parts of a model description beyond a dense transformer, read from Hugging Face configs
//! (Mixtral, Qwen3-MoE, DeepSeek-V3, GPT-OSS) and Megatron-style JSON (Megatron-LM's argument
//! names), and their parameter counts. `inputs::model` holds them in a `Model`.
//!
//! Conventions (docs/inputs.md, "Mixture of experts"):
//! - A MoE layer replaces the dense MLP by `num_experts` routed experts of width `expert_ffn`
//!   (each a gated or plain MLP like the dense one, without biases), a router (`h x E`) and
//!   optionally shared experts, counted as one dense MLP of width `shared_ffn`.
//! - Which layers are MoE: Hugging Face DeepSeek `first_k_dense_replace` and `moe_layer_freq`
//!   (layer i is MoE when `i >= k` and `i % freq == 0`); Qwen-MoE `mlp_only_layers` and
//!   `decoder_sparse_step` (layer i is MoE when not listed and `(i + 1) % step == 0`);
//!   Megatron-LM `moe_layer_freq` (an integer N: every N-th layer from layer 0, or a 0/1 list).
//! - Multi-head latent attention (DeepSeek-V2/V3, Liu et al. 2024, Sec. 2.1): queries through a
//!   low-rank `q_lora_rank` bottleneck (or a plain projection without one), keys and values
//!   from a `kv_lora_rank` latent plus a shared `qk_rope_head_dim` rotary key.

use serde_json::Value;

/// Mixture-of-experts MLPs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moe {
    /// Routed experts per MoE layer.
    pub num_experts: u64,
    /// Experts each token is routed to.
    pub top_k: u64,
    /// FFN width of one routed expert.
    pub expert_ffn: u64,
    /// FFN width of the shared experts together (0: none): DeepSeek's `n_shared_experts x
    /// moe_intermediate_size`, Megatron-LM's `moe_shared_expert_intermediate_size`.
    pub shared_ffn: u64,
    /// One entry per layer: true where the layer's MLP is a MoE block.
    pub layers: Vec<bool>,
    /// Group-limited routing (DeepSeek-V2's device-limited and DeepSeek-V3's node-limited
    /// routing; Megatron-Core's `moe_router_num_groups` / `moe_router_group_topk`, Hugging
    /// Face's `n_group` / `topk_group`): the experts in `num_groups` equal groups, each
    /// token's experts from `topk` of them. `None`: any expert.
    pub groups: Option<RouterGroups>,
}

/// Group-limited routing: `num_groups` equal groups of consecutive experts, `topk` of them
/// chosen per token (by the sum of their best scores), the token's experts from those.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouterGroups {
    pub num_groups: u64,
    pub topk: u64,
}

/// Multi-head latent attention dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mla {
    /// Query bottleneck rank; 0 when queries are projected directly (DeepSeek-V2-Lite).
    pub q_lora_rank: u64,
    pub kv_lora_rank: u64,
    pub qk_rope_head_dim: u64,
    pub qk_nope_head_dim: u64,
    pub v_head_dim: u64,
}

/// Sliding-window attention on some layers (GPT-OSS alternates sliding and full layers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlidingWindow {
    /// Keys each query sees.
    pub window: u64,
    /// One entry per layer: true where the layer attends within the window.
    pub layers: Vec<bool>,
}

/// What went wrong reading these keys: (field, what was found, what is valid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub field: String,
    pub got: String,
    pub expected: &'static str,
}

fn bad(field: &str, got: &Value, expected: &'static str) -> FieldError {
    FieldError {
        field: field.to_string(),
        got: got.to_string(),
        expected,
    }
}

/// A non-negative integer field; absent or null is `None`.
fn opt_u64(v: &Value, field: &str) -> Result<Option<u64>, FieldError> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(x) => x
            .as_u64()
            .map(Some)
            .ok_or_else(|| bad(field, x, "a non-negative integer")),
    }
}

/// The first of `fields` that is present.
fn first_u64(v: &Value, fields: &[&str]) -> Result<Option<(String, u64)>, FieldError> {
    for f in fields {
        if let Some(n) = opt_u64(v, f)? {
            return Ok(Some((f.to_string(), n)));
        }
    }
    Ok(None)
}

fn required(v: &Value, fields: &[&str], what: &'static str) -> Result<u64, FieldError> {
    match first_u64(v, fields)? {
        Some((_, n)) if n > 0 => Ok(n),
        Some((f, n)) => Err(bad(&f, &Value::from(n), what)),
        None => Err(FieldError {
            field: fields.join(" or "),
            got: "nothing".to_string(),
            expected: what,
        }),
    }
}

impl Moe {
    /// Parameters of one routed expert: 2 or 3 matrices of `h x expert_ffn`, no biases.
    pub fn expert_params(&self, h: u64, gated: bool) -> u64 {
        mats(gated) * h * self.expert_ffn
    }

    /// Parameters of the shared experts of one MoE layer.
    pub fn shared_params(&self, h: u64, gated: bool) -> u64 {
        mats(gated) * h * self.shared_ffn
    }

    /// The router: one `h x E` matrix.
    pub fn router_params(&self, h: u64) -> u64 {
        h * self.num_experts
    }

    /// MLP parameters of one MoE layer: all experts, shared experts and the router.
    pub fn layer_params(&self, h: u64, gated: bool) -> u64 {
        self.num_experts * self.expert_params(h, gated)
            + self.shared_params(h, gated)
            + self.router_params(h)
    }

    /// MLP parameters one token uses in a MoE layer: its top-k experts, the shared experts and
    /// the router.
    pub fn layer_active_params(&self, h: u64, gated: bool) -> u64 {
        self.top_k * self.expert_params(h, gated)
            + self.shared_params(h, gated)
            + self.router_params(h)
    }

    /// MoE layers among the first `n` layers from `first`.
    pub fn count_in(&self, first: usize, n: usize) -> u64 {
        self.layers
            .iter()
            .skip(first)
            .take(n)
            .filter(|&&x| x)
            .count() as u64
    }

    pub fn num_moe_layers(&self) -> u64 {
        self.count_in(0, self.layers.len())
    }

    /// Megatron-LM's `--moe-layer-freq` for this pattern: an integer when every N-th layer
    /// from layer 0 is MoE, else the 0/1 list in Megatron's Python-expression form.
    pub fn megatron_layer_freq(&self) -> String {
        for n in 1..=self.layers.len().max(1) {
            if self
                .layers
                .iter()
                .enumerate()
                .all(|(i, &x)| x == (i % n == 0))
            {
                return n.to_string();
            }
        }
        let bits: Vec<&str> = self
            .layers
            .iter()
            .map(|&x| if x { "1" } else { "0" })
            .collect();
        format!("[{}]", bits.join(","))
    }
}

impl Moe {
    /// Dimensions that must agree with the model's and stay in range.
    pub fn check(&self, num_layers: u32) -> Result<(), String> {
        if self.layers.len() != num_layers as usize {
            return Err(format!(
                "the MoE layer pattern has {} entries for {num_layers} layers",
                self.layers.len()
            ));
        }
        if self.top_k == 0 || self.top_k > self.num_experts || self.num_experts > 1 << 16 {
            return Err(format!(
                "experts per token {} must be between 1 and the expert count {} (at most 65536)",
                self.top_k, self.num_experts
            ));
        }
        if let Some(g) = self.groups {
            if g.num_groups == 0
                || self.num_experts % g.num_groups != 0
                || g.topk == 0
                || g.topk > g.num_groups
                || self.top_k % g.topk != 0
            {
                return Err(format!(
                    "group-limited routing (n_group / moe_router_num_groups {}, topk_group / moe_router_group_topk {}): the groups must divide the {} experts, and the chosen groups be between 1 and the groups and divide the {} experts per token (Megatron-Core's rule)",
                    g.num_groups, g.topk, self.num_experts, self.top_k
                ));
            }
        }
        if self.expert_ffn == 0 || self.expert_ffn > 1 << 22 || self.shared_ffn > 1 << 22 {
            return Err(format!(
                "expert FFN width {} (shared {}) is outside 1..={}",
                self.expert_ffn,
                self.shared_ffn,
                1 << 22
            ));
        }
        Ok(())
    }
}

impl Mla {
    /// Latent-attention dimensions in range.
    pub fn check(&self) -> Result<(), String> {
        let dims = [
            self.q_lora_rank,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            self.qk_nope_head_dim,
            self.v_head_dim,
        ];
        if self.kv_lora_rank == 0 || dims.iter().any(|&d| d > 1 << 16) {
            return Err(format!(
                "latent-attention dimensions {dims:?} must be at most 65536 and kv_lora_rank positive"
            ));
        }
        Ok(())
    }
}

fn mats(gated: bool) -> u64 {
    if gated {
        3
    } else {
        2
    }
}

impl Mla {
    /// Query/key head size: the non-rotary and the rotary parts.
    pub fn qk_head_dim(&self) -> u64 {
        self.qk_nope_head_dim + self.qk_rope_head_dim
    }

    /// Attention parameters of one layer with `heads` heads on a hidden size `h`: the query
    /// down- and up-projections (with the bottleneck's norm), the joint key/value
    /// down-projection with the rotary key, its norm, the key/value up-projection, and the
    /// output projection from `heads x v_head_dim`.
    pub fn params(&self, h: u64, heads: u64) -> u64 {
        let q_out = heads * self.qk_head_dim();
        let q = if self.q_lora_rank > 0 {
            h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * q_out
        } else {
            h * q_out
        };
        let kv = h * (self.kv_lora_rank + self.qk_rope_head_dim)
            + self.kv_lora_rank
            + self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim);
        q + kv + heads * self.v_head_dim * h
    }
}

impl SlidingWindow {
    pub fn count_in(&self, first: usize, n: usize) -> u64 {
        self.layers
            .iter()
            .skip(first)
            .take(n)
            .filter(|&&x| x)
            .count() as u64
    }
}

/// Mixture of experts in a Hugging Face config.json of `layers` layers (None: dense).
pub fn moe_from_hf(v: &Value, layers: u32) -> Result<Option<Moe>, FieldError> {
    let experts = first_u64(v, &["num_local_experts", "num_experts", "n_routed_experts"])?;
    let Some((experts_key, num_experts)) = experts else {
        return Ok(None);
    };
    // An expert count of 0 is not a dense model written another way: a dense config has no
    // expert keys (Llama, Qwen2), and planning a MoE config as dense would be silently wrong.
    if num_experts == 0 {
        return Err(bad(
            &experts_key,
            &Value::from(0),
            "a positive number of experts (omit the key for a dense model)",
        ));
    }
    let top_k = required(
        v,
        &["num_experts_per_tok", "experts_per_token"],
        "a positive integer (experts per token)",
    )?;
    if top_k > num_experts {
        let key = first_u64(v, &["num_experts_per_tok", "experts_per_token"])?
            .map_or("num_experts_per_tok".to_string(), |(k, _)| k);
        return Err(FieldError {
            field: key,
            got: top_k.to_string(),
            expected: "at most the expert count (a token is routed to that many distinct experts)",
        });
    }
    // Mixtral and GPT-OSS experts are intermediate_size wide; Qwen-MoE and DeepSeek give
    // moe_intermediate_size.
    let expert_ffn = required(
        v,
        &["moe_intermediate_size", "intermediate_size"],
        "a positive integer (expert FFN width)",
    )?;
    let shared_ffn = match opt_u64(v, "n_shared_experts")? {
        Some(n) => n * expert_ffn,
        None => opt_u64(v, "shared_expert_intermediate_size")?.unwrap_or(0),
    };
    let n = layers as usize;
    let mut pattern = vec![true; n];
    if let Some(k) = opt_u64(v, "first_k_dense_replace")? {
        if k >= u64::from(layers) {
            return Err(bad(
                "first_k_dense_replace",
                &Value::from(k),
                "fewer dense layers than num_hidden_layers (else no layer has experts)",
            ));
        }
        let freq = match opt_u64(v, "moe_layer_freq")? {
            Some(0) => {
                return Err(bad(
                    "moe_layer_freq",
                    &Value::from(0),
                    "a positive layer interval (1: every layer after first_k_dense_replace)",
                ))
            }
            f => f.unwrap_or(1) as usize,
        };
        for (i, x) in pattern.iter_mut().enumerate() {
            *x = i >= k as usize && i % freq == 0;
        }
    }
    if let Some(step) = opt_u64(v, "decoder_sparse_step")? {
        if step == 0 {
            return Err(bad(
                "decoder_sparse_step",
                &Value::from(0),
                "a positive layer interval (1: every layer is MoE)",
            ));
        }
        let step = step as usize;
        for (i, x) in pattern.iter_mut().enumerate() {
            *x = *x && (i + 1) % step == 0;
        }
    }
    match v.get("mlp_only_layers") {
        None | Some(Value::Null) => {}
        Some(Value::Array(a)) => {
            for x in a {
                match x.as_u64() {
                    Some(i) if (i as usize) < n => pattern[i as usize] = false,
                    _ => {
                        return Err(bad(
                            "mlp_only_layers",
                            x,
                            "layer indices below num_hidden_layers",
                        ))
                    }
                }
            }
        }
        Some(x) => return Err(bad("mlp_only_layers", x, "a list of layer indices")),
    }
    // DeepSeek-V3 (`n_group`, `topk_group`; V2's device-limited routing names them the same).
    // A config with one group, or without the keys, routes to any expert.
    let groups = router_groups(opt_u64(v, "n_group")?, opt_u64(v, "topk_group")?);
    Ok(Some(Moe {
        num_experts,
        top_k,
        expert_ffn,
        shared_ffn,
        layers: pattern,
        groups,
    }))
}

/// Multi-head latent attention in a Hugging Face config (DeepSeek-V2/V3): `kv_lora_rank`.
pub fn mla_from_hf(v: &Value) -> Result<Option<Mla>, FieldError> {
    match opt_u64(v, "kv_lora_rank")? {
        None => Ok(None),
        // DeepSeek's latent attention compresses keys and values to this rank: 0 would be no
        // keys at all, not standard attention (which has no `kv_lora_rank`).
        Some(0) => Err(bad(
            "kv_lora_rank",
            &Value::from(0),
            "a positive rank (omit the key for standard attention)",
        )),
        Some(kv) => Ok(Some(Mla {
            q_lora_rank: opt_u64(v, "q_lora_rank")?.unwrap_or(0),
            kv_lora_rank: kv,
            qk_rope_head_dim: required(v, &["qk_rope_head_dim"], "a positive integer")?,
            qk_nope_head_dim: required(v, &["qk_nope_head_dim"], "a positive integer")?,
            v_head_dim: required(v, &["v_head_dim"], "a positive integer")?,
        })),
    }
}

/// Sliding-window layers of a Hugging Face config: `sliding_window` with `layer_types`
/// naming which layers use it (GPT-OSS, newer Gemma configs). Without `layer_types` the window
/// is not applied (Mistral 7B's 4096-token window equals its training length).
pub fn sliding_from_hf(v: &Value, layers: u32) -> Result<Option<SlidingWindow>, FieldError> {
    // `layer_types`, when given, names every layer: a shorter or longer list leaves layers
    // unnamed or names layers that do not exist.
    let types = match v.get("layer_types") {
        None | Some(Value::Null) => None,
        Some(Value::Array(t)) if t.len() == layers as usize => Some(t),
        Some(Value::Array(t)) => {
            return Err(FieldError {
                field: "layer_types".to_string(),
                got: format!("{} entries", t.len()),
                expected: "one entry per layer (num_hidden_layers)",
            })
        }
        Some(x) => return Err(bad("layer_types", x, "a list of layer types")),
    };
    let Some(window) = opt_u64(v, "sliding_window")? else {
        return Ok(None);
    };
    if window == 0 {
        // A window of 0 keys attends to nothing; no-window configs write null or omit it.
        return Err(bad(
            "sliding_window",
            &Value::from(0),
            "a positive number of tokens (null or absent: no window)",
        ));
    }
    let Some(types) = types else {
        return Ok(None);
    };
    let pattern: Vec<bool> = (0..layers as usize)
        .map(|i| {
            types
                .get(i)
                .and_then(Value::as_str)
                .is_some_and(|t| t == "sliding_attention" || t == "local")
        })
        .collect();
    Ok(pattern.iter().any(|&x| x).then_some(SlidingWindow {
        window,
        layers: pattern,
    }))
}

/// Mixture of experts in Megatron-style JSON (Megatron-LM's argument names): `num_experts`,
/// `moe_router_topk` (Megatron-LM's default 2), `moe_ffn_hidden_size` (default the dense
/// `ffn_hidden_size`), `moe_shared_expert_intermediate_size`, `moe_layer_freq` (integer or 0/1
/// list, default 1), `moe_router_num_groups` with `moe_router_group_topk` (group-limited
/// routing).
pub fn moe_from_megatron(v: &Value, layers: u32, ffn: u64) -> Result<Option<Moe>, FieldError> {
    let Some(num_experts) = opt_u64(v, "num_experts")? else {
        return Ok(None);
    };
    if num_experts == 0 {
        return Err(bad(
            "num_experts",
            &Value::from(0),
            "a positive number of experts (omit the key, or null, for a dense model)",
        ));
    }
    let top_k = opt_u64(v, "moe_router_topk")?.unwrap_or(2);
    if top_k == 0 || top_k > num_experts {
        return Err(bad(
            "moe_router_topk",
            &Value::from(top_k),
            "between 1 and num_experts",
        ));
    }
    let n = layers as usize;
    let pattern = match v.get("moe_layer_freq") {
        None | Some(Value::Null) => vec![true; n],
        Some(Value::Array(a)) => {
            let bits: Option<Vec<bool>> = a
                .iter()
                .map(|x| match x.as_u64() {
                    Some(0) => Some(false),
                    Some(1) => Some(true),
                    _ => None,
                })
                .collect();
            match bits {
                Some(b) if b.len() == n => b,
                _ => {
                    return Err(bad(
                        "moe_layer_freq",
                        &v["moe_layer_freq"],
                        "a list of 0/1 with one entry per layer, or a positive integer",
                    ))
                }
            }
        }
        Some(x) => match x.as_u64().filter(|&f| f > 0) {
            Some(f) => (0..n).map(|i| i as u64 % f == 0).collect(),
            None => {
                return Err(bad(
                    "moe_layer_freq",
                    x,
                    "a list of 0/1 with one entry per layer, or a positive integer",
                ))
            }
        },
    };
    Ok(Some(Moe {
        num_experts,
        top_k,
        expert_ffn: opt_u64(v, "moe_ffn_hidden_size")?
            .filter(|&f| f > 0)
            .unwrap_or(ffn),
        shared_ffn: opt_u64(v, "moe_shared_expert_intermediate_size")?.unwrap_or(0),
        layers: pattern,
        groups: router_groups(
            opt_u64(v, "moe_router_num_groups")?,
            opt_u64(v, "moe_router_group_topk")?,
        ),
    }))
}

/// Group-limited routing from a group count and the groups chosen per token: none without
/// both, or with a single group.
pub fn router_groups(num_groups: Option<u64>, topk: Option<u64>) -> Option<RouterGroups> {
    match (num_groups, topk) {
        (Some(g), Some(k)) if g > 1 => Some(RouterGroups {
            num_groups: g,
            topk: k,
        }),
        _ => None,
    }
}

/// Multi-head latent attention in Megatron-style JSON: `multi_latent_attention` true, with
/// `q_lora_rank` (absent: no query bottleneck), `kv_lora_rank` (Megatron-LM default 32),
/// `qk_head_dim` (128), `qk_pos_emb_head_dim` (64), `v_head_dim` (128).
pub fn mla_from_megatron(v: &Value) -> Result<Option<Mla>, FieldError> {
    match v.get("multi_latent_attention") {
        None | Some(Value::Null) | Some(Value::Bool(false)) => return Ok(None),
        Some(Value::Bool(true)) => {}
        Some(x) => return Err(bad("multi_latent_attention", x, "true or false")),
    }
    Ok(Some(Mla {
        q_lora_rank: opt_u64(v, "q_lora_rank")?.unwrap_or(0),
        kv_lora_rank: opt_u64(v, "kv_lora_rank")?.unwrap_or(32),
        qk_nope_head_dim: opt_u64(v, "qk_head_dim")?.unwrap_or(128),
        qk_rope_head_dim: opt_u64(v, "qk_pos_emb_head_dim")?.unwrap_or(64),
        v_head_dim: opt_u64(v, "v_head_dim")?.unwrap_or(128),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layer_patterns() {
        let v: Value = serde_json::from_str(
            r#"{"n_routed_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
                "first_k_dense_replace": 2, "moe_layer_freq": 1, "n_shared_experts": 2}"#,
        )
        .unwrap();
        let m = moe_from_hf(&v, 5).unwrap().unwrap();
        assert_eq!(m.layers, [false, false, true, true, true]);
        assert_eq!(m.shared_ffn, 32);
        assert_eq!(m.megatron_layer_freq(), "[0,0,1,1,1]");
        let v: Value = serde_json::from_str(
            r#"{"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 16,
                "decoder_sparse_step": 2, "mlp_only_layers": [3]}"#,
        )
        .unwrap();
        let m = moe_from_hf(&v, 6).unwrap().unwrap();
        assert_eq!(m.layers, [false, true, false, false, false, true]);
        let v: Value = serde_json::from_str(r#"{"num_experts": 8, "moe_layer_freq": 2}"#).unwrap();
        let m = moe_from_megatron(&v, 4, 64).unwrap().unwrap();
        assert_eq!((m.top_k, m.expert_ffn), (2, 64));
        assert_eq!(m.layers, [true, false, true, false]);
        assert_eq!(m.megatron_layer_freq(), "2");
        let v: Value =
            serde_json::from_str(r#"{"num_experts": 8, "moe_layer_freq": [1, 0]}"#).unwrap();
        let e = moe_from_megatron(&v, 4, 64).unwrap_err();
        assert_eq!(e.field, "moe_layer_freq");
    }

    #[test]
    fn missing_top_k_is_named() {
        let v: Value = serde_json::from_str(r#"{"num_local_experts": 8}"#).unwrap();
        let e = moe_from_hf(&v, 2).unwrap_err();
        assert!(e.field.contains("num_experts_per_tok"), "{e:?}");
    }
}
