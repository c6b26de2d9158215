//! The search space: the request and its pins, candidates (one layout, micro-batch, schedule,
//! chunk count, recomputation, sequence parallelism and ZeRO-1 setting each), the structural
//! checks that need no costs, the counted reasons for rejection, and the enumeration.

use crate::cost::{Recompute, Stack, Zero};
use crate::inputs::hardware::Hardware;
use crate::inputs::model::Model;
use crate::plan::predict::{
    balanced_split, check, divisors, PipelineSplit, PredictRequest, Prediction, Split,
    MAX_SIMULATED_ACTIONS,
};
use crate::schedule::generators::ScheduleName;
use crate::schedule::ir::Placement;
use rayon::prelude::*;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Optional pins: `Some` fixes a dimension.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pins {
    pub tp: Option<u64>,
    pub pp: Option<u64>,
    pub dp: Option<u64>,
    /// Context-parallel size (unpinned: 1, and with flash attention every cp that divides the
    /// sequence into 2 cp chunks and keeps t x cp on NVLink).
    pub cp: Option<u64>,
    pub micro_batch: Option<u64>,
    pub schedule: Option<ScheduleName>,
    pub chunks: Option<u64>,
    pub recompute: Option<Recompute>,
    pub sequence_parallel: Option<bool>,
    /// ZeRO stage (unpinned: 0 to 3 when more than one rank holds the weights).
    pub zero: Option<Zero>,
    /// HSDP replicas (unpinned: 1); applied to candidates with ZeRO >= 1 whose d it divides.
    pub dp_replicate: Option<u64>,
    /// Expert-parallel size (MoE models; unpinned: every ep that divides the expert count and
    /// t x cp x d / etp).
    pub ep: Option<u64>,
    /// Expert tensor-parallel size (MoE models; unpinned: 1 and t).
    pub etp: Option<u64>,
}

/// One search.
#[derive(Debug, Clone)]
pub struct SearchRequest<'a> {
    pub model: &'a Model,
    pub hardware: &'a Hardware,
    pub gpus: u64,
    pub global_batch: u64,
    /// How many ranked results to return (K).
    pub top: usize,
    pub pins: Pins,
    /// The training stack (ZeRO-1 is taken from the candidate, not from here).
    pub stack: Stack,
    /// Simulate every feasible candidate instead of pruning by the lower bound.
    pub exhaustive: bool,
    /// Which layer splits to search (`--partition`).
    pub partition: PartitionMode,
    /// One of Megatron-Core's split rules for every candidate (with `partition` even): the
    /// chunk counts searched are those the rule can split.
    pub split_rule: Option<PipelineSplit>,
}

/// `--partition`: the even split only, the balanced split only, or both (a balanced split
/// that differs from the even one is a distinct candidate).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum PartitionMode {
    #[default]
    Even,
    Balanced,
    Both,
}

impl std::str::FromStr for PartitionMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "even" => Ok(PartitionMode::Even),
            "balanced" => Ok(PartitionMode::Balanced),
            "both" => Ok(PartitionMode::Both),
            _ => Err(format!(
                "unknown partition '{s}' (valid: even, balanced, both)"
            )),
        }
    }
}

impl<'a> SearchRequest<'a> {
    pub fn new(model: &'a Model, hardware: &'a Hardware, gpus: u64, global_batch: u64) -> Self {
        SearchRequest {
            model,
            hardware,
            gpus,
            global_batch,
            top: 10,
            pins: Pins::default(),
            stack: Stack::default(),
            exhaustive: false,
            partition: PartitionMode::default(),
            split_rule: None,
        }
    }
}

/// One point of the search space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Candidate {
    pub tp: u64,
    pub pp: u64,
    pub dp: u64,
    pub cp: u64,
    pub micro_batch: u64,
    pub microbatches: u64,
    pub schedule: ScheduleName,
    /// Chunks per device v (2 for zbv and dualpipev).
    pub chunks: u64,
    pub recompute: Recompute,
    pub sequence_parallel: bool,
    pub zero: Zero,
    /// HSDP replicas of the sharded state (1: none).
    pub dp_replicate: u64,
    /// Even split, or the partitioner's balanced split (which then differs from the even one,
    /// except with `--partition balanced`).
    pub split: Split,
    /// Expert-parallel size (1 for dense models).
    pub ep: u64,
    /// Expert tensor-parallel size (1 for dense models).
    pub etp: u64,
}

fn schedule_index(s: ScheduleName) -> usize {
    ScheduleName::ALL
        .iter()
        .position(|&x| x == s)
        .unwrap_or(usize::MAX)
}

fn recompute_index(r: Recompute) -> usize {
    Recompute::EVERY
        .iter()
        .position(|&x| x == r)
        .unwrap_or(usize::MAX)
}

impl Candidate {
    /// The documented tie order after step time and peak memory.
    pub fn tie_key(&self) -> TieKey {
        (
            self.pp,
            self.tp,
            self.cp,
            self.dp,
            self.micro_batch,
            schedule_index(self.schedule),
            self.chunks,
            recompute_index(self.recompute),
            self.sequence_parallel,
            self.zero,
            self.dp_replicate,
            (self.split, self.ep, self.etp),
        )
    }

    /// What the balanced split depends on.
    pub(super) fn balance_key(&self) -> BalanceKey {
        (
            self.tp,
            self.pp,
            self.dp,
            self.cp,
            self.micro_batch,
            recompute_index(self.recompute),
            self.sequence_parallel,
            self.chunks,
            self.schedule.placement() == Placement::V,
            (self.ep, self.etp),
        )
    }

    /// The `predict` request with the balanced split taken from `splits` (computed once per
    /// [`BalanceKey`]).
    pub(super) fn request_in<'a>(
        &self,
        req: &SearchRequest<'a>,
        splits: &Splits,
    ) -> PredictRequest<'a> {
        let mut r = self.request(req);
        if self.split == Split::Balanced {
            r.stage_layers = splits.get(&self.balance_key()).map(|c| c.to_vec());
        }
        r
    }

    /// What the per-stage costs depend on: everything but the schedule, of which only the
    /// stage placement matters (the stage count is p v).
    pub(super) fn cost_key(&self) -> CostKey {
        (
            (self.tp, self.pp, self.dp, self.cp, self.dp_replicate),
            (self.micro_batch, self.chunks),
            recompute_index(self.recompute),
            self.sequence_parallel,
            self.zero,
            (self.split, self.ep, self.etp),
            self.schedule.placement() == Placement::V,
        )
    }

    pub(super) fn schedule_key(&self) -> ScheduleKey {
        (
            schedule_index(self.schedule),
            self.pp,
            self.microbatches,
            self.chunks,
        )
    }

    /// The `predict` request for this candidate.
    pub fn request<'a>(&self, req: &SearchRequest<'a>) -> PredictRequest<'a> {
        let mut r = PredictRequest::new(req.model, req.hardware);
        r.gpus = req.gpus;
        r.tp = self.tp;
        r.pp = self.pp;
        r.dp = Some(self.dp);
        r.cp = self.cp;
        r.ep = self.ep;
        r.etp = self.etp;
        r.global_batch = req.global_batch;
        r.micro_batch = self.micro_batch;
        r.schedule = Some(self.schedule);
        r.chunks = self.chunks;
        r.recompute = self.recompute;
        r.sequence_parallel = self.sequence_parallel;
        r.dp_replicate = self.dp_replicate;
        r.stack = Stack {
            zero: self.zero,
            ..req.stack
        };
        r.partition = self.split;
        r
    }
}

/// The documented tie order: p, t, cp, d, b, schedule, v, recompute, SP, ZeRO, replicas,
/// (split, ep, etp).
pub type TieKey = (
    u64,
    u64,
    u64,
    u64,
    u64,
    usize,
    u64,
    usize,
    bool,
    Zero,
    u64,
    (Split, u64, u64),
);

/// ((t, p, d, cp, replicas), (b, v), recompute index, sequence parallel, ZeRO, (split, ep,
/// etp), V placement).
pub(super) type CostKey = (
    (u64, u64, u64, u64, u64),
    (u64, u64),
    usize,
    bool,
    Zero,
    (Split, u64, u64),
    bool,
);

/// (schedule index, p, m, v).
pub(super) type ScheduleKey = (usize, u64, u64, u64);

/// (t, p, d, cp, b, recompute index, sequence parallel, v, V placement, (ep, etp)).
pub(super) type BalanceKey = (u64, u64, u64, u64, u64, usize, bool, u64, bool, (u64, u64));

/// Balanced stage layer counts per [`BalanceKey`].
pub(super) type Splits = BTreeMap<BalanceKey, Arc<[u32]>>;

/// Apply `--partition` to the structurally valid candidates: compute the balanced split once
/// per [`BalanceKey`] (in parallel), then keep the even candidates, replace them by balanced
/// ones, or add a balanced candidate wherever its split differs from the even one. Returns
/// the candidates, the splits, and how many balanced candidates were added.
pub(super) fn apply_partition(
    req: &SearchRequest,
    cands: Vec<Candidate>,
) -> Result<(Vec<Candidate>, Splits, u64), SearchError> {
    if req.partition == PartitionMode::Even {
        return Ok((cands, Splits::new(), 0));
    }
    let keys: BTreeMap<BalanceKey, Candidate> =
        cands.iter().map(|c| (c.balance_key(), *c)).collect();
    let computed: Vec<(BalanceKey, Result<Vec<u32>, String>)> = keys
        .par_iter()
        .map(|(k, c)| {
            let r = c.request(req);
            let counts = check(&r).map_err(|e| e.to_string()).and_then(|dp| {
                balanced_split(&r, dp, (c.pp * c.chunks) as u32, c.schedule.placement())
                    .map_err(|e| e.to_string())
            });
            (*k, counts)
        })
        .collect();
    let mut splits = Splits::new();
    for (k, counts) in computed {
        let counts = counts.map_err(|e| SearchError::Internal(format!("balanced split: {e}")))?;
        splits.insert(k, counts.into());
    }
    let layers = req.model.num_layers;
    let differs = |c: &Candidate| {
        let counts = &splits[&c.balance_key()];
        **counts != *crate::inputs::profile::even_split(layers, counts.len() as u32)
    };
    let mut out = Vec::with_capacity(cands.len());
    let mut added = 0u64;
    for c in cands {
        let balanced = Candidate {
            split: Split::Balanced,
            ..c
        };
        match req.partition {
            PartitionMode::Balanced => out.push(balanced),
            _ => {
                let d = differs(&c);
                out.push(c);
                if d {
                    out.push(balanced);
                    added += 1;
                }
            }
        }
    }
    Ok((out, splits, added))
}

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
    /// More than one chunk per device needs p ≥ 2.
    ChunksNeedPipeline,
    /// Interleaved/looped chunks need the layers divisible by p·v (equal chunks).
    LayersNotDivisible,
    /// Interleaved 1F1B needs m divisible by p (Megatron-LM's rule).
    MicrobatchesNotMultipleOfP,
    /// dualpipev needs m ≥ 2p, pipedream-2bw m ≥ p.
    TooFewMicrobatches,
    /// More actions than `predict` simulates.
    TooLarge,
    /// Weights, gradients and optimizer state (plus recompute working memory) exceed the GPU.
    ModelStateMemory,
    /// Model state plus the schedule's peak of stashed activations exceed the GPU.
    ActivationMemory,
}

impl Reason {
    pub const ALL: [Reason; 14] = [
        Reason::TpAcrossNodes,
        Reason::TpHeads,
        Reason::CpAcrossNodes,
        Reason::CpSequence,
        Reason::TooManyStages,
        Reason::BatchNotDivisible,
        Reason::MicroBatchNotDivisible,
        Reason::ChunksNeedPipeline,
        Reason::LayersNotDivisible,
        Reason::MicrobatchesNotMultipleOfP,
        Reason::TooFewMicrobatches,
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
            | Reason::MicroBatchNotDivisible => "layout",
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
            Reason::ChunksNeedPipeline => "chunks_need_pipeline",
            Reason::LayersNotDivisible => "layers_not_divisible",
            Reason::MicrobatchesNotMultipleOfP => "microbatches_not_multiple_of_p",
            Reason::TooFewMicrobatches => "too_few_microbatches",
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
                "t x cp must divide the {} GPUs of an NVLink domain (pin --cp to go across)",
                req.hardware.nvlink_domain_gpus()
            ),
            Reason::CpSequence => format!(
                "the sequence of {} tokens must split into 2 x cp equal chunks",
                m.seq_len
            ),
            Reason::TooManyStages => format!(
                "p x v stages must not exceed the {} layers (zbv and dualpipev: 2p)",
                m.num_layers
            ),
            Reason::BatchNotDivisible => {
                format!("d must divide the global batch {}", req.global_batch)
            }
            Reason::MicroBatchNotDivisible => "--micro-batch must divide B/d".to_string(),
            Reason::ChunksNeedPipeline => "v > 1 chunks per device need p >= 2".to_string(),
            Reason::LayersNotDivisible => match req.split_rule {
                Some(rule) => format!(
                    "{} cannot split the {} layers over these p x v stages",
                    rule.flags().join(" "),
                    m.num_layers
                ),
                None => format!(
                    "interleaved and looped chunks need the {} layers divisible by p x v",
                    m.num_layers
                ),
            },
            Reason::MicrobatchesNotMultipleOfP => {
                "interleaved-1f1b needs m = B/(b d) divisible by p".to_string()
            }
            Reason::TooFewMicrobatches => {
                "dualpipev needs m >= 2p, pipedream-2bw m >= p".to_string()
            }
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
}

/// One ranked result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ranked {
    pub rank: usize,
    #[serde(flatten)]
    pub prediction: Prediction,
    /// The proven lower bound the search ordered this candidate by.
    pub lower_bound_s: f64,
    /// Step time in integer nanoseconds (the ranking key).
    pub step_time_ns: u64,
    #[serde(skip)]
    pub lower_bound_ns: u64,
    #[serde(skip)]
    pub candidate: Candidate,
}

/// The outcome of a search (all counts deterministic).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchOutcome {
    pub model: String,
    pub hardware: String,
    pub gpus: u64,
    pub global_batch: u64,
    pub top: usize,
    pub exhaustive: bool,
    /// (t, p, d) layouts enumerated and how many passed the layout-level constraints.
    pub layouts: u64,
    pub layouts_valid: u64,
    /// Full candidates enumerated (every one was checked).
    pub evaluated: u64,
    /// Candidates that passed every constraint including memory.
    pub feasible: u64,
    /// Feasible candidates simulated.
    pub simulated: u64,
    /// Feasible candidates whose lower bound proved they cannot enter the top K.
    pub pruned: u64,
    /// Candidates excluded by memory (both memory reasons).
    pub memory_rejected: u64,
    /// Distinct schedules (name, p, m, v) generated and summarised for the memory check.
    pub schedules_summarised: u64,
    pub rejected: Vec<Rejection>,
    pub results: Vec<Ranked>,
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
            format!(
                "{} {}{} excluded because {} [{}]",
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

const MAX_GPUS: u64 = 1 << 24;
const MAX_GLOBAL_BATCH: u64 = 1 << 32;
/// Candidates simulated per batch after the first (fixed, so counts do not depend on threads).
pub(super) const BATCH: usize = 16;

pub(super) struct Tally(pub(super) [u64; Reason::ALL.len()]);

impl Tally {
    pub(super) fn new() -> Self {
        Tally([0; Reason::ALL.len()])
    }
    pub(super) fn add(&mut self, r: Reason, n: u64) {
        self.0[r as usize] += n;
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
            })
            .collect()
    }
}

/// The synchronous schedules searched when `--schedule` is not pinned. The asynchronous
/// PipeDream schedules change the training semantics (stale weights) and are searched only
/// when pinned.
pub const SEARCHED_SCHEDULES: [ScheduleName; 8] = [
    ScheduleName::GPipe,
    ScheduleName::OneFOneB,
    ScheduleName::Interleaved1F1B,
    ScheduleName::ZbH1,
    ScheduleName::ZbH2,
    ScheduleName::ZbV,
    ScheduleName::DualPipeV,
    ScheduleName::LoopedBfs,
];

pub(super) fn check_inputs(req: &SearchRequest) -> Result<(), SearchError> {
    if let Err(e) = req.hardware.peak_flops_per_s_for(req.stack.precision) {
        return Err(SearchError::Pin(format!("--precision: {e}")));
    }
    if req.stack.attention == crate::cost::Attention::Flash
        && req.hardware.attention_efficiencies().is_none()
    {
        let e = crate::plan::predict::PredictError::NoAttentionEfficiency {
            hardware: req.hardware.name.clone(),
        };
        return Err(SearchError::Pin(e.to_string()));
    }
    for (flag, value) in [("--gpus", req.gpus), ("--global-batch", req.global_batch)] {
        if value == 0 {
            return Err(SearchError::Zero { flag, value });
        }
    }
    if req.top == 0 {
        return Err(SearchError::Zero {
            flag: "--top",
            value: 0,
        });
    }
    for (flag, value, max) in [
        ("--gpus", req.gpus, MAX_GPUS),
        ("--global-batch", req.global_batch, MAX_GLOBAL_BATCH),
    ] {
        if value > max {
            return Err(SearchError::TooLargeInput { flag, value, max });
        }
    }
    let p = &req.pins;
    for (flag, value) in [
        ("--tp", p.tp),
        ("--pp", p.pp),
        ("--dp", p.dp),
        ("--micro-batch", p.micro_batch),
        ("--chunks", p.chunks),
        ("--cp", p.cp),
        ("--ep", p.ep),
        ("--etp", p.etp),
    ] {
        if value == Some(0) {
            return Err(SearchError::Zero { flag, value: 0 });
        }
    }
    for (flag, value) in [
        ("--tp", p.tp),
        ("--pp", p.pp),
        ("--dp", p.dp),
        ("--cp", p.cp),
    ] {
        if let Some(v) = value {
            if req.gpus % v != 0 {
                return Err(SearchError::Pin(format!(
                    "{flag} {v} does not divide --gpus {}; valid {flag}: {}",
                    req.gpus,
                    list(&divisors(req.gpus))
                )));
            }
        }
    }
    if req.model.moe.is_none() && (p.ep.is_some_and(|e| e > 1) || p.etp.is_some_and(|e| e > 1)) {
        return Err(SearchError::Pin(format!(
            "--ep and --etp above 1 need a mixture-of-experts model ({} is dense); valid: --ep 1 --etp 1",
            req.model.name
        )));
    }
    if let (Some(moe), Some(e)) = (&req.model.moe, p.ep) {
        if moe.num_experts % e != 0 {
            return Err(SearchError::Pin(format!(
                "--ep {e} does not divide the model's {} experts; valid --ep: {}",
                moe.num_experts,
                list(&divisors(moe.num_experts))
            )));
        }
    }
    if p.cp.is_some_and(|c| c > 1) && req.stack.attention != crate::cost::Attention::Flash {
        return Err(SearchError::Pin(
            "--cp above 1 needs --attention flash (Megatron-Core runs context parallelism inside Transformer Engine's fused attention)".to_string(),
        ));
    }
    if let (Some(s), Some(v)) = (p.schedule, p.chunks) {
        let ok = match s.fixed_chunks() {
            Some(f) => v == f as u64,
            None => v == 1 || s.supports_chunks(),
        };
        if !ok {
            return Err(SearchError::Pin(format!(
                "--chunks {v} does not apply to --schedule {s}: {}",
                match s.fixed_chunks() {
                    Some(f) => format!("it always uses {f} chunks per device"),
                    None => "it places one stage per device (--chunks 1)".to_string(),
                }
            )));
        }
    }
    Ok(())
}

fn list(v: &[u64]) -> String {
    let s: Vec<String> = v.iter().map(u64::to_string).collect();
    s.join(", ")
}

/// Enumerate the structurally valid candidates, counting what the constraints exclude.
pub(super) fn enumerate(req: &SearchRequest, tally: &mut Tally) -> (u64, u64, u64, Vec<Candidate>) {
    let model = req.model;
    let layers = model.num_layers as u64;
    // Unpinned, t stays inside an NVLink domain and tiles it: no GPU is left idle.
    let domain = req.hardware.nvlink_domain_gpus() as u64;
    let pins = &req.pins;
    let n = req.gpus;
    let mut layouts = 0u64;
    let mut layouts_valid = 0u64;
    let mut evaluated = 0u64;
    let mut out = Vec::new();
    let schedules: Vec<ScheduleName> = match pins.schedule {
        Some(s) => vec![s],
        None => SEARCHED_SCHEDULES.to_vec(),
    };
    // Mixture of experts: Megatron-Core's recompute modules too (the ModelZoo recipes'
    // `layernorm moe_act`, and `layernorm moe` for long sequences).
    let recomputes: Vec<Recompute> = match pins.recompute {
        Some(r) => vec![r],
        None if req.model.moe.is_some() => {
            let mut v = Recompute::ALL.to_vec();
            v.extend([Recompute::NormAct, Recompute::NormMoe]);
            v
        }
        None => Recompute::ALL.to_vec(),
    };
    let flash = req.stack.attention == crate::cost::Attention::Flash;
    // With a Megatron-Core split rule, whether it splits `layers` over p x v stages.
    let rule_splits = |p: u64, v: u64, s: ScheduleName| {
        req.split_rule.is_none_or(|r| {
            r.stage_layers(
                layers as u32,
                p as u32,
                v as u32,
                s.placement() == Placement::V,
            )
            .is_ok()
        })
    };
    let even_split = match req.split_rule {
        Some(rule) => Split::Megatron(rule),
        None => Split::Even,
    };
    for t in divisors(n) {
        if pins.tp.is_some_and(|x| x != t) {
            continue;
        }
        // Context parallelism runs only in the fused attention kernel.
        let cps: Vec<u64> = match pins.cp {
            Some(c) => vec![c],
            None if flash => divisors(n / t),
            None => vec![1],
        };
        for c in cps.into_iter().filter(|&c| (n / t) % c == 0) {
            for p in divisors(n / t / c) {
                if pins.pp.is_some_and(|x| x != p) {
                    continue;
                }
                let d = n / t / c / p;
                if pins.dp.is_some_and(|x| x != d) {
                    continue;
                }
                layouts += 1;
                let tc = t * c;
                let layout_reason = if pins.tp.is_none() && (t > domain || domain % t != 0) {
                    Some(Reason::TpAcrossNodes)
                } else if model.num_heads % t != 0 || model.num_kv_heads % t != 0 {
                    Some(Reason::TpHeads)
                } else if c > 1 && pins.cp.is_none() && (tc > domain || domain % tc != 0) {
                    Some(Reason::CpAcrossNodes)
                } else if c > 1 && model.seq_len % (2 * c) != 0 {
                    Some(Reason::CpSequence)
                } else if req.global_batch % d != 0 {
                    Some(Reason::BatchNotDivisible)
                } else if pins
                    .micro_batch
                    .is_some_and(|b| (req.global_batch / d) % b != 0)
                {
                    Some(Reason::MicroBatchNotDivisible)
                } else {
                    None
                };
                if let Some(r) = layout_reason {
                    tally.add(r, 1);
                    continue;
                }
                layouts_valid += 1;
                let per_replica = req.global_batch / d;
                let sps: Vec<bool> = match pins.sequence_parallel {
                    Some(x) => vec![x],
                    None if t > 1 => vec![false, true],
                    None => vec![false],
                };
                // Unpinned, replicated state (ZeRO-0) is not enumerated where ZeRO-1 applies
                // (in Megatron's stacks):
                // the same bytes cross the network (reduce-scatter + all-gather = all-reduce),
                // the optimizer step runs on a shard and less memory is held, so it never
                // ranks above its ZeRO-1 twin.
                let zeros: Vec<Zero> = match pins.zero {
                    Some(z) => vec![z],
                    // Mixture of experts: ZeRO-2/3 are costed (pin --zero), but enumerating
                    // them triples a space of up to a million candidates (DeepSeek-V3 on
                    // 2,048 GPUs: 2.9 s against the 2 s budget), so unpinned MoE stays at 1.
                    None if d * c > 1 && model.moe.is_some() => vec![Zero::Optimizer],
                    // torchtitan replicates (DDP) or shards everything (FSDP2): it has no
                    // sharded optimizer alone, nor sharded gradients alone.
                    None if d * c > 1 && req.stack.fsdp2 => vec![Zero::Off, Zero::Full],
                    None if d * c > 1 => vec![Zero::Optimizer, Zero::Gradients, Zero::Full],
                    None => vec![Zero::Off],
                };
                // HSDP replicas apply to sharded state whose d they divide.
                let replicas = |z: Zero| match pins.dp_replicate {
                    Some(r) if z.shards_optimizer() && d % r == 0 => r,
                    _ => 1,
                };
                let experts = expert_layouts(req, t, c, d);
                let variants = (recomputes.len() * sps.len() * zeros.len() * experts.len()) as u64;
                let bs = match pins.micro_batch {
                    Some(b) => vec![b],
                    None => divisors(per_replica),
                };
                for &b in &bs {
                    let m = per_replica / b;
                    for &s in &schedules {
                        // With one pipeline device every schedule runs the same work back to back;
                        // 1F1B holds the fewest activations, so the others are not enumerated.
                        if p == 1 && pins.schedule.is_none() && s != ScheduleName::OneFOneB {
                            continue;
                        }
                        let vs: Vec<u64> = match (s.fixed_chunks(), pins.chunks) {
                            (Some(f), _) => vec![f as u64],
                            (None, Some(v)) if s.supports_chunks() || v == 1 => vec![v],
                            (None, Some(_)) => continue,
                            // Every chunk count the rule splits (at most the layers it counts,
                            // two more than the transformer layers).
                            (None, None) if s.supports_chunks() && req.split_rule.is_some() => {
                                if p > 1 {
                                    (2..=(layers + 2) / p)
                                        .filter(|&v| rule_splits(p, v, s))
                                        .collect()
                                } else {
                                    Vec::new()
                                }
                            }
                            (None, None) if s.supports_chunks() => {
                                if p > 1 && layers % p == 0 {
                                    divisors(layers / p)
                                        .into_iter()
                                        .filter(|&v| v > 1)
                                        .collect()
                                } else {
                                    Vec::new()
                                }
                            }
                            (None, None) => vec![1],
                        };
                        for v in vs {
                            evaluated += variants;
                            let stages = p.saturating_mul(v);
                            let per_pair = if s.splits_backward() { 3u128 } else { 2 };
                            let reason = if v > 1 && p == 1 {
                                Some(Reason::ChunksNeedPipeline)
                            } else if !rule_splits(p, v, s) {
                                Some(Reason::LayersNotDivisible)
                            } else if req.split_rule.is_none() && stages > layers {
                                Some(Reason::TooManyStages)
                            } else if req.split_rule.is_none()
                                && v > 1
                                && s.supports_chunks()
                                && layers % stages != 0
                            {
                                Some(Reason::LayersNotDivisible)
                            } else if s == ScheduleName::Interleaved1F1B && v > 1 && m % p != 0 {
                                Some(Reason::MicrobatchesNotMultipleOfP)
                            } else if (s == ScheduleName::DualPipeV && m < 2 * p)
                                || (s == ScheduleName::PipeDream2BW && m < p)
                            {
                                Some(Reason::TooFewMicrobatches)
                            } else if per_pair * m as u128 * stages as u128
                                > MAX_SIMULATED_ACTIONS as u128
                                || m > u32::MAX as u64
                            {
                                Some(Reason::TooLarge)
                            } else {
                                None
                            };
                            if let Some(r) = reason {
                                tally.add(r, variants);
                                continue;
                            }
                            for &recompute in &recomputes {
                                for &sp in &sps {
                                    for &z in &zeros {
                                        for &(ep, etp) in &experts {
                                            out.push(Candidate {
                                                tp: t,
                                                pp: p,
                                                dp: d,
                                                cp: c,
                                                micro_batch: b,
                                                microbatches: m,
                                                schedule: s,
                                                chunks: v,
                                                recompute,
                                                sequence_parallel: sp,
                                                zero: z,
                                                dp_replicate: replicas(z),
                                                split: even_split,
                                                ep,
                                                etp,
                                            });
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    (layouts, layouts_valid, evaluated, out)
}

/// The (ep, etp) pairs of a layout: (1, 1) for a dense model; for a MoE model every pinned or
/// enumerated ep dividing the expert count, with etp 1 or t (pinned: as given), such that
/// ep x etp divides the t x cp x d ranks of a stage (Megatron-Core carves the expert-parallel
/// ranks from them).
pub(super) fn expert_layouts(req: &SearchRequest, t: u64, c: u64, d: u64) -> Vec<(u64, u64)> {
    let pins = &req.pins;
    let Some(moe) = &req.model.moe else {
        return vec![(1, 1)];
    };
    let ranks = t * c * d;
    let etps: Vec<u64> = match pins.etp {
        Some(x) => vec![x],
        None if t > 1 => vec![1, t],
        None => vec![1],
    };
    let mut out = Vec::new();
    for etp in etps {
        if ranks % etp != 0 {
            continue;
        }
        let eps: Vec<u64> = match pins.ep {
            Some(e) => vec![e],
            None => divisors(ranks / etp),
        };
        for ep in eps {
            if moe.num_experts % ep == 0 && ranks % (ep * etp) == 0 {
                out.push((ep, etp));
            }
        }
    }
    out
}
