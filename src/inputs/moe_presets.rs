//! The bundled mixture-of-experts models, from their publishers' `config.json` files (cited
//! per model below; `tests/data/hf/` holds the same configs). `inputs::model` turns them into
//! `Model`s; the training sequence length is 4096, the length of the published training runs
//! pplan validates against (DeepSeek-V3's pre-training, the Megatron-Core Qwen3 recipes).

use super::moe::{Mla, Moe, RouterGroups};

/// One bundled MoE model: the dense dimensions (as a `Model` has them) and its experts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoePreset {
    pub name: &'static str,
    pub layers: u32,
    pub hidden: u64,
    pub heads: u64,
    pub kv_heads: u64,
    /// Dense MLP width (the dense layers of DeepSeek-V3; unused where every layer is MoE).
    pub ffn: u64,
    pub vocab: u64,
    pub seq: u64,
    pub head_dim: Option<u64>,
    pub moe: Moe,
    pub mla: Option<Mla>,
    /// Multi-token prediction depths (`num_nextn_predict_layers`; 0: none).
    pub mtp_layers: u32,
}

/// Names of the bundled MoE models.
pub const MOE_PRESET_NAMES: [&str; 5] = [
    "mixtral-8x7b",
    "mixtral-8x22b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "deepseek-v3",
];

fn experts(layers: u32, num_experts: u64, top_k: u64, expert_ffn: u64) -> Moe {
    Moe {
        num_experts,
        top_k,
        expert_ffn,
        shared_ffn: 0,
        layers: vec![true; layers as usize],
        groups: None,
    }
}

/// The bundled MoE model called `name`.
pub fn moe_preset(name: &str) -> Option<MoePreset> {
    let name: &'static str = MOE_PRESET_NAMES.iter().find(|&&n| n == name)?;
    let p = |name, layers, hidden, heads, kv_heads, ffn, vocab, head_dim, moe| MoePreset {
        name,
        layers,
        hidden,
        heads,
        kv_heads,
        ffn,
        vocab,
        seq: 4096,
        head_dim,
        moe,
        mla: None,
        mtp_layers: 0,
    };
    Some(match name {
        // huggingface.co/mistralai/Mixtral-8x7B-v0.1 config.json: 8 local experts, 2 per token.
        "mixtral-8x7b" => p(
            name,
            32,
            4096,
            32,
            8,
            14336,
            32000,
            None,
            experts(32, 8, 2, 14336),
        ),
        // huggingface.co/mistralai/Mixtral-8x22B-v0.1 config.json.
        "mixtral-8x22b" => p(
            name,
            56,
            6144,
            48,
            8,
            16384,
            32000,
            None,
            experts(56, 8, 2, 16384),
        ),
        // huggingface.co/Qwen/Qwen3-30B-A3B config.json: 128 experts, 8 per token, 768 wide.
        "qwen3-30b-a3b" => p(
            name,
            48,
            2048,
            32,
            4,
            6144,
            151936,
            Some(128),
            experts(48, 128, 8, 768),
        ),
        // huggingface.co/Qwen/Qwen3-235B-A22B config.json: 128 experts, 8 per token, 1536 wide.
        "qwen3-235b-a22b" => p(
            name,
            94,
            4096,
            64,
            4,
            12288,
            151936,
            Some(128),
            experts(94, 128, 8, 1536),
        ),
        // huggingface.co/deepseek-ai/DeepSeek-V3 config.json (and the technical report,
        // arXiv 2412.19437, Sec. 4.2): 61 layers, the first 3 dense (18432 wide), then 256
        // routed experts (8 per token) and 1 shared expert, all 2048 wide; MLA with q_lora_rank
        // 1536, kv_lora_rank 512, 128 + 64 query/key head dims, 128 value head dim; one
        // multi-token prediction depth (num_nextn_predict_layers 1; the report's Sec. 2.2).
        "deepseek-v3" => MoePreset {
            mtp_layers: 1,
            mla: Some(Mla {
                q_lora_rank: 1536,
                kv_lora_rank: 512,
                qk_rope_head_dim: 64,
                qk_nope_head_dim: 128,
                v_head_dim: 128,
            }),
            ..p(
                name,
                61,
                7168,
                128,
                128,
                18432,
                129280,
                None,
                Moe {
                    num_experts: 256,
                    top_k: 8,
                    expert_ffn: 2048,
                    shared_ffn: 2048,
                    layers: (0..61).map(|i| i >= 3).collect(),
                    // Node-limited routing: 8 groups of 32 experts, 4 per token (`n_group`,
                    // `topk_group`; the report's M = 4 nodes, Sec. 2.1.2).
                    groups: Some(RouterGroups {
                        num_groups: 8,
                        topk: 4,
                    }),
                },
            )
        },
        _ => return None,
    })
}
