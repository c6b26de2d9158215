//! What a search is asked: the request, its pins, the layer splits to try, and its errors.

use crate::cost::{Recompute, Stack, Zero};
use crate::inputs::hardware::Hardware;
use crate::inputs::model::Model;
use crate::plan::predict::PipelineSplit;
use crate::schedule::generators::ScheduleName;

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
    /// `--microbatch-group-size-per-virtual-pipeline-stage`: interleaved 1F1B's micro-batch
    /// group (Megatron-Core's; unpinned, p where p divides m, else the smallest it accepts).
    pub microbatch_group: Option<u64>,
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
    /// `--pipeline-layout`: the transformer layers of every stage, checked for the model; only
    /// candidates with p x v equal to its stage count are searched.
    pub layout: Option<Vec<u32>>,
    /// With `layout`, the stage its 'm' puts the multi-token prediction depths on (`None`:
    /// the last): candidates whose p does not make it a rank's last virtual stage are
    /// excluded, as Megatron-Core refuses them.
    pub layout_mtp_stage: Option<u32>,
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
            layout: None,
            layout_mtp_stage: None,
        }
    }
}
