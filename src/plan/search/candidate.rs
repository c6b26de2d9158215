//! One point of the search space: its `predict` request, the keys candidates share costs,
//! schedules and balanced splits by, and `--partition`'s balanced candidates.

use super::outcome::SearchError;
use super::request::{PartitionMode, SearchRequest};
use crate::cost::{Recompute, Stack, Zero};
use crate::plan::predict::{balanced_split, check, PredictRequest, Split};
use crate::schedule::generators::ScheduleName;
use crate::schedule::ir::Placement;
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::sync::Arc;

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
    /// Interleaved 1F1B's micro-batch group per virtual stage where p does not divide m (the
    /// smallest Megatron-Core accepts); `None`: the default, p.
    pub microbatch_group: Option<u64>,
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
            self.microbatch_group,
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
        r.microbatch_group = self.microbatch_group;
        if let Some(layers) = &req.layout {
            r.stage_layers = Some(layers.clone());
            r.mtp_stage = req.layout_mtp_stage;
        }
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

/// (schedule index, p, m, v, micro-batch group).
pub(super) type ScheduleKey = (usize, u64, u64, u64, Option<u64>);

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
