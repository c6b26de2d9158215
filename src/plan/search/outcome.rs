//! What a search answers: the ranked results, the counted reasons for rejection, and how
//! they read.

use super::request::SearchRequest;
use crate::plan::predict::MAX_SIMULATED_ACTIONS;
use serde::Serialize;

/// Why a layout or candidate was excluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// t larger than an NVLink domain (a node, or an NVL72 rack) or not dividing its GPU count,
    /// while --tp is not pinned.
    TpAcrossNodes,
    /// t does not divide the attention heads or key/value heads.
    TpHeads,
    /// cp > 1 with t x cp beyond an NVLink domain or not tiling it, while --cp is not pinned.
    CpAcrossNodes,
    /// The sequence does not split into 2 cp equal chunks (causal load balance).
    CpSequence,
    /// p (or p·v) exceeds the layers.
    TooManyStages,
    /// The global batch is not divisible by d.
    BatchNotDivisible,
    /// The pinned micro-batch does not divide B/d.
    MicroBatchNotDivisible,
    /// No (ep, etp) pair: the pinned or possible ep x etp does not divide the t x cp x d ranks
    /// of a stage, or ep the experts.
    ExpertLayout,
    /// More than one chunk per device needs p ≥ 2.
    ChunksNeedPipeline,
    /// The pinned split rule or layout string cannot split the layers into p·v stages.
    LayersNotDivisible,
    /// dualpipev needs m ≥ 2p, pipedream-2bw and interleaved 1F1B m ≥ p.
    TooFewMicrobatches,
    /// The pinned micro-batch group does not hold for m and p (Megatron-Core's rule:
    /// p ≤ n ≤ m, the last group empty or at least p).
    MicrobatchGroup,
    /// More actions than `predict` simulates.
    TooLarge,
    /// Weights, gradients and optimizer state (plus recompute working memory) exceed the GPU.
    ModelStateMemory,
    /// Model state plus the schedule's peak of stashed activations exceed the GPU.
    ActivationMemory,
}

impl Reason {
    pub const ALL: [Reason; 15] = [
        Reason::TpAcrossNodes,
        Reason::TpHeads,
        Reason::CpAcrossNodes,
        Reason::CpSequence,
        Reason::TooManyStages,
        Reason::BatchNotDivisible,
        Reason::MicroBatchNotDivisible,
        Reason::ExpertLayout,
        Reason::ChunksNeedPipeline,
        Reason::LayersNotDivisible,
        Reason::TooFewMicrobatches,
        Reason::MicrobatchGroup,
        Reason::TooLarge,
        Reason::ModelStateMemory,
        Reason::ActivationMemory,
    ];

    /// `layout` for reasons that exclude a whole (t, p, d), else `candidate`.
    pub fn level(self) -> &'static str {
        match self {
            Reason::TpAcrossNodes
            | Reason::TpHeads
            | Reason::CpAcrossNodes
            | Reason::CpSequence
            | Reason::BatchNotDivisible
            | Reason::MicroBatchNotDivisible
            | Reason::ExpertLayout => "layout",
            _ => "candidate",
        }
    }

    pub fn code(self) -> &'static str {
        match self {
            Reason::TpAcrossNodes => "tp_across_nodes",
            Reason::TpHeads => "tp_heads",
            Reason::CpAcrossNodes => "cp_across_nodes",
            Reason::CpSequence => "cp_sequence",
            Reason::TooManyStages => "too_many_stages",
            Reason::BatchNotDivisible => "batch_not_divisible",
            Reason::MicroBatchNotDivisible => "micro_batch_not_divisible",
            Reason::ExpertLayout => "expert_layout",
            Reason::ChunksNeedPipeline => "chunks_need_pipeline",
            Reason::LayersNotDivisible => "layers_not_divisible",
            Reason::TooFewMicrobatches => "too_few_microbatches",
            Reason::MicrobatchGroup => "microbatch_group",
            Reason::TooLarge => "too_large",
            Reason::ModelStateMemory => "memory_model_state",
            Reason::ActivationMemory => "memory",
        }
    }

    /// The constraint in words, with the request's numbers.
    pub fn constraint(self, req: &SearchRequest) -> String {
        let m = req.model;
        match self {
            Reason::TpAcrossNodes => {
                let domain = req.hardware.nvlink_domain_gpus();
                if domain == req.hardware.node.gpus_per_node {
                    format!("t must divide the {domain} GPUs of a node (pin --tp to go across nodes)")
                } else {
                    format!(
                        "t must divide the {domain} GPUs of an NVLink domain (pin --tp to go across domains)"
                    )
                }
            }
            Reason::TpHeads => format!(
                "t must divide the {} attention heads and {} key/value heads",
                m.num_heads, m.num_kv_heads
            ),
            Reason::CpAcrossNodes => format!(
                "t x cp must divide the {} GPUs of an NVLink domain, or t fill it and cp ring across domains (pin --cp for other sizes)",
                req.hardware.nvlink_domain_gpus()
            ),
            Reason::CpSequence => format!(
                "the sequence of {} tokens must split into 2 x cp equal chunks",
                m.seq_len
            ),
            Reason::TooManyStages => format!(
                "p x v stages must not exceed the {} layers, or {} with the embedding and the loss counted as layers (zbv and dualpipev: 2p)",
                m.num_layers,
                m.num_layers + 2
            ),
            Reason::BatchNotDivisible => {
                format!("d must divide the global batch {}", req.global_batch)
            }
            Reason::MicroBatchNotDivisible => "--micro-batch must divide B/d".to_string(),
            Reason::ExpertLayout => format!(
                "ep x etp must divide the t x cp x d ranks of a stage (Megatron-Core carves the expert-parallel ranks from them) and ep the {} experts",
                m.moe.as_ref().map_or(0, |moe| moe.num_experts)
            ),
            Reason::ChunksNeedPipeline => "v > 1 chunks per device need p >= 2".to_string(),
            Reason::LayersNotDivisible => match (&req.layout, req.split_rule) {
                (Some(l), _) => match req.layout_mtp_stage {
                    Some(m) => format!(
                        "--pipeline-layout gives {} stages, not p x v, or its multi-token prediction stage {m} is not in a rank's last virtual stage (stage >= p x v - p)",
                        l.len()
                    ),
                    None => format!("--pipeline-layout gives {} stages, not p x v", l.len()),
                },
                (None, Some(rule)) => format!(
                    "{} cannot split the {} layers over these p x v stages",
                    rule.flags().join(" "),
                    m.num_layers
                ),
                (None, None) => format!(
                    "the {} layers do not split into these p x v stages",
                    m.num_layers
                ),
            },
            Reason::TooFewMicrobatches => {
                "dualpipev needs m >= 2p, pipedream-2bw and interleaved-1f1b m >= p (Megatron-Core's micro-batch groups run interleaving with any m >= p)".to_string()
            }
            Reason::MicrobatchGroup => format!(
                "--microbatch-group-size-per-virtual-pipeline-stage {} must lie between p and m with the last group empty or at least p, as Megatron-Core requires",
                req.pins.microbatch_group.unwrap_or(0)
            ),
            Reason::TooLarge => format!(
                "more than {MAX_SIMULATED_ACTIONS} actions to simulate (m x p x v too large)"
            ),
            Reason::ModelStateMemory => format!(
                "weights, gradients and optimizer state exceed the {:.1} GB a GPU's {:.1} GB leave for tensors (CUDA context, NCCL, workspaces, allocator reserve)",
                req.stack.overheads.tensor_budget_bytes(req.hardware.gpu.memory_bytes) as f64 / 1e9,
                req.hardware.gpu.memory_bytes as f64 / 1e9
            ),
            Reason::ActivationMemory => format!(
                "model state plus the schedule's peak of stashed activations exceed the {:.1} GB left for tensors",
                req.stack.overheads.tensor_budget_bytes(req.hardware.gpu.memory_bytes) as f64 / 1e9
            ),
        }
    }
}

/// How many were excluded for one reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rejection {
    pub reason: Reason,
    /// `layout` (counts (t, p, d) layouts) or `candidate` (counts full candidates).
    pub level: &'static str,
    pub count: u64,
    pub constraint: String,
    /// The first excluded candidate or layout, with its numbers and what would make it run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub example: Option<String>,
}

/// Bad input or an empty feasible set; every message names the flag or the constraints.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum SearchError {
    #[error("{flag} must be at least 1 (got {value})")]
    Zero { flag: &'static str, value: u64 },
    #[error("{flag} {value} is too large (at most {max})")]
    TooLargeInput {
        flag: &'static str,
        value: u64,
        max: u64,
    },
    #[error("{0}")]
    Pin(String),
    #[error("no feasible configuration of {model} on --gpus {gpus} (--global-batch {global_batch}): {summary}")]
    Infeasible {
        model: String,
        gpus: u64,
        global_batch: u64,
        summary: String,
        rejected: Vec<Rejection>,
    },
    #[error("internal error: {0}")]
    Internal(String),
}

/// `reason: count` pairs in words, largest first.
pub fn describe_rejections(rejected: &[Rejection]) -> String {
    let mut v: Vec<&Rejection> = rejected.iter().collect();
    v.sort_by(|a, b| b.count.cmp(&a.count).then(a.reason.cmp(&b.reason)));
    let parts: Vec<String> = v
        .iter()
        .map(|r| {
            let example = r
                .example
                .as_ref()
                .map_or(String::new(), |e| format!(" (e.g. {e})"));
            format!(
                "{} {}{} excluded because {}{example} [{}]",
                r.count,
                r.level,
                if r.count == 1 { "" } else { "s" },
                r.constraint,
                r.reason.code()
            )
        })
        .collect();
    parts.join("; ")
}

pub(super) const MAX_GPUS: u64 = 1 << 24;
pub(super) const MAX_GLOBAL_BATCH: u64 = 1 << 32;
/// Candidates simulated per batch after the first (fixed, so counts do not depend on threads).
pub(super) const BATCH: usize = 16;

/// Counts per reason, and each reason's first example (enumeration order: deterministic).
pub(super) struct Tally(
    pub(super) [u64; Reason::ALL.len()],
    [Option<String>; Reason::ALL.len()],
);

impl Tally {
    pub(super) fn new() -> Self {
        Tally([0; Reason::ALL.len()], Default::default())
    }
    pub(super) fn add(&mut self, r: Reason, n: u64) {
        self.0[r as usize] += n;
    }
    /// [`Tally::add`], keeping `example()` if it is the reason's first.
    pub(super) fn add_example(&mut self, r: Reason, n: u64, example: impl FnOnce() -> String) {
        self.add(r, n);
        if n > 0 && self.1[r as usize].is_none() {
            self.1[r as usize] = Some(example());
        }
    }
    pub(super) fn list(&self, req: &SearchRequest) -> Vec<Rejection> {
        Reason::ALL
            .iter()
            .filter(|&&r| self.0[r as usize] > 0)
            .map(|&r| Rejection {
                reason: r,
                level: r.level(),
                count: self.0[r as usize],
                constraint: r.constraint(req),
                example: self.1[r as usize].clone(),
            })
            .collect()
    }
}
