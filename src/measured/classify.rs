//! A profiler range's name → the pipeline action it runs; a collective's name → its operation; a
//! process group's description or size → the parallel dimension it serves (docs/validate.md,
//! "Kernel classes"). Kernel names → classes are `kernels`.

use super::timeline::{Collective, Dim, STAGE_OF_RANK};
use crate::schedule::ir::{Action, Kind};

/// The pipeline action a profiler or NVTX range names: `PP:0F1` (PyTorch's
/// `_PipelineScheduleRuntime`), `0F1`, or PyTorch's single-stage schedules' `Forward 3` /
/// `Backward 3`, whose stage is [`STAGE_OF_RANK`] until the ranks are put together.
pub fn action_from_range(name: &str) -> Option<Action> {
    let name = name.trim();
    for (prefix, kind) in [("Forward ", Kind::F), ("Backward ", Kind::B)] {
        if let Some(mb) = name.strip_prefix(prefix) {
            return mb
                .trim()
                .parse()
                .ok()
                .map(|mb| Action::new(STAGE_OF_RANK, kind, mb));
        }
    }
    name.strip_prefix("PP:").unwrap_or(name).trim().parse().ok()
}

/// The collective a communication kernel or annotation names (`ncclDevKernel_AllGather_RING_LL`,
/// `nccl:all_to_all`, Kineto's `Collective name` `reduce_scatter_tensor_coalesced`).
pub fn collective(name: &str) -> Collective {
    let n: String = name
        .to_ascii_lowercase()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .collect();
    if n.contains("alltoall") {
        Collective::AllToAll
    } else if n.contains("reducescatter") {
        Collective::ReduceScatter
    } else if n.contains("allgather") {
        Collective::AllGather
    } else if n.contains("allreduce") {
        Collective::AllReduce
    } else if n.contains("broadcast") {
        Collective::Broadcast
    } else if n.contains("sendrecv") || n.contains("send") || n.contains("recv") {
        Collective::SendRecv
    } else {
        Collective::Other
    }
}

/// The dimension a process group serves, from its description: Megatron-Core's `group_desc`
/// (`TENSOR_MODEL_PARALLEL_GROUP`, `DATA_PARALLEL_GROUP_WITH_CP`, `EXPERT_MODEL_PARALLEL_GROUP`,
/// …) or a DeviceMesh dimension name as torchtitan names them (`tp`, `dp_shard`, `cp`, `pp`,
/// `ep`). Groups that span several dimensions (`TENSOR_AND_DATA_PARALLEL_GROUP`,
/// `MODEL_PARALLEL_GROUP`) and the world group give `None`.
pub fn dim_from_group(desc: &str) -> Option<Dim> {
    let d = desc.to_ascii_lowercase();
    let words: Vec<&str> = d
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    let has = |w: &str| words.contains(&w);
    if has("and") || d.starts_with("model_parallel") || has("default") || has("world") {
        return None;
    }
    if has("expert") {
        // The expert data-parallel group reduces gradients; the others move tokens.
        return Some(if has("data") { Dim::Dp } else { Dim::Ep });
    }
    if has("ep") {
        return Some(Dim::Ep);
    }
    if has("pipeline") || has("pp") {
        return Some(Dim::Pp);
    }
    if has("tensor") || has("tp") {
        return Some(Dim::Tp);
    }
    // `DATA_PARALLEL_GROUP_WITH_CP` reduces gradients: data parallel, CP folded in.
    if has("data") || has("dp") || has("shard") || has("replicate") || has("fsdp") {
        return Some(Dim::Dp);
    }
    if has("context") || has("cp") {
        return Some(Dim::Cp);
    }
    None
}

/// The parallel sizes of the run, when a plan says them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayoutSizes {
    pub tp: u32,
    pub cp: u32,
    pub pp: u32,
    pub dp: u32,
    pub ep: u32,
}

impl LayoutSizes {
    /// The pipeline stage (pipeline-parallel rank) of a global rank: ⌊rank / (t·cp·d)⌋ mod p,
    /// the pipeline outermost as Megatron-LM and torchtitan order ranks.
    pub fn pipeline_rank(&self, rank: u32) -> u32 {
        let inner = (self.tp * self.cp * self.dp).max(1);
        (rank / inner) % self.pp.max(1)
    }
}

/// The dimension of a communication kernel: its group's description when the trace has one,
/// else its group size matched against the plan's sizes when exactly one dimension has that
/// size, else point-to-point → pipeline and all-to-all → expert when the plan has that
/// dimension and no other that uses such traffic; otherwise unattributed.
pub fn attribute(
    op: Collective,
    group_desc: Option<&str>,
    group_size: Option<u32>,
    layout: Option<LayoutSizes>,
) -> Dim {
    if let Some(d) = group_desc.and_then(dim_from_group) {
        return d;
    }
    let Some(l) = layout else {
        return Dim::Unattributed;
    };
    if let Some(size) = group_size.filter(|&s| s > 1) {
        let candidates: Vec<Dim> = [
            (Dim::Tp, l.tp),
            (Dim::Cp, l.cp),
            (Dim::Pp, l.pp),
            (Dim::Dp, l.dp * l.cp),
            (Dim::Ep, l.ep),
        ]
        .into_iter()
        .filter(|&(_, s)| s == size)
        .map(|(d, _)| d)
        .collect();
        if candidates.len() == 1 {
            return candidates[0];
        }
    }
    match op {
        Collective::SendRecv if l.pp > 1 && l.cp == 1 && l.ep == 1 => Dim::Pp,
        Collective::AllToAll if l.ep > 1 && l.cp == 1 => Dim::Ep,
        _ => Dim::Unattributed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_from_range_names() {
        assert_eq!(
            action_from_range("PP:2B7"),
            Some(Action::new(2, Kind::B, 7))
        );
        assert_eq!(action_from_range("0F1"), Some(Action::new(0, Kind::F, 1)));
        assert_eq!(
            action_from_range("Forward 3"),
            Some(Action::new(STAGE_OF_RANK, Kind::F, 3))
        );
        assert_eq!(
            action_from_range("Backward 12"),
            Some(Action::new(STAGE_OF_RANK, Kind::B, 12))
        );
        assert_eq!(action_from_range("Forward pass"), None);
        assert_eq!(action_from_range("## forward ##"), None);
    }

    #[test]
    fn groups_to_dimensions() {
        assert_eq!(dim_from_group("TENSOR_MODEL_PARALLEL_GROUP"), Some(Dim::Tp));
        assert_eq!(dim_from_group("DATA_PARALLEL_GROUP_WITH_CP"), Some(Dim::Dp));
        assert_eq!(
            dim_from_group("PIPELINE_MODEL_PARALLEL_GROUP"),
            Some(Dim::Pp)
        );
        assert_eq!(dim_from_group("CONTEXT_PARALLEL_GROUP"), Some(Dim::Cp));
        assert_eq!(dim_from_group("EXPERT_MODEL_PARALLEL_GROUP"), Some(Dim::Ep));
        assert_eq!(dim_from_group("EXPERT_DATA_PARALLEL_GROUP"), Some(Dim::Dp));
        assert_eq!(dim_from_group("mesh_dp_shard"), Some(Dim::Dp));
        assert_eq!(dim_from_group("mesh_tp"), Some(Dim::Tp));
        assert_eq!(dim_from_group("TENSOR_AND_DATA_PARALLEL_GROUP"), None);
        assert_eq!(dim_from_group("default_pg"), None);
    }

    #[test]
    fn attribution_by_size_and_kind() {
        let l = LayoutSizes {
            tp: 8,
            cp: 1,
            pp: 4,
            dp: 2,
            ep: 1,
        };
        assert_eq!(
            attribute(Collective::AllReduce, None, Some(8), Some(l)),
            Dim::Tp
        );
        assert_eq!(
            attribute(Collective::AllReduce, None, Some(2), Some(l)),
            Dim::Dp
        );
        assert_eq!(
            attribute(Collective::SendRecv, None, None, Some(l)),
            Dim::Pp
        );
        assert_eq!(
            attribute(Collective::AllReduce, None, None, Some(l)),
            Dim::Unattributed
        );
        assert_eq!(
            attribute(Collective::AllReduce, None, Some(8), None),
            Dim::Unattributed
        );
        // Two dimensions of size 4: the size alone cannot tell.
        let square = LayoutSizes {
            tp: 4,
            cp: 1,
            pp: 4,
            dp: 1,
            ep: 1,
        };
        assert_eq!(
            attribute(Collective::AllGather, None, Some(4), Some(square)),
            Dim::Unattributed
        );
        assert_eq!(
            attribute(
                Collective::AllGather,
                Some("TENSOR_MODEL_PARALLEL_GROUP"),
                Some(4),
                Some(square)
            ),
            Dim::Tp
        );
    }
}
