//! Network: collectives and point-to-point transfers on the links they cross: ring
//! all-reduce and all-gather, the tensor-parallel group's link, pipeline transfers between
//! ranks (NVLink inside a node, the NICs and the fat-tree between nodes, Megatron's
//! scatter/gather), and the data-parallel gradient reduction (hierarchical when the group
//! shares nodes). Formulas and sources: docs/cost-model.md.

use super::stack::{CostModel, RankOrder};
use crate::inputs::hardware::Hardware;

/// Ring all-reduce of `bytes` over `n` ranks: `2 (n-1)/n bytes / bw + 2 (n-1) latency`.
pub fn all_reduce_s(bytes: f64, n: u64, bw_bytes_per_s: f64, latency_s: f64) -> f64 {
    if n <= 1 {
        return 0.0;
    }
    let n = n as f64;
    2.0 * (n - 1.0) / n * bytes / bw_bytes_per_s + 2.0 * (n - 1.0) * latency_s
}

/// Ring reduce-scatter or all-gather: half an all-reduce.
pub fn all_gather_s(bytes: f64, n: u64, bw_bytes_per_s: f64, latency_s: f64) -> f64 {
    all_reduce_s(bytes, n, bw_bytes_per_s, latency_s) / 2.0
}

/// One point-to-point transfer of `bytes`: bytes / link bandwidth + latency, over NVLink when
/// both GPUs share a node, else over the GPU's share of the node's NICs.
pub fn p2p_link_s(hw: &Hardware, bytes: f64, same_node: bool) -> f64 {
    if same_node {
        bytes / hw.nvlink_bytes_per_s() + hw.node.nvlink_latency_s
    } else {
        bytes / hw.nic_bytes_per_s_per_gpu(false) + hw.node.nic_latency_s
    }
}

impl CostModel<'_> {
    /// Time of one tensor-parallel all-reduce of `bytes` (or, with sequence parallelism, a
    /// reduce-scatter plus an all-gather, which move the same bytes).
    pub(super) fn tp_all_reduce_s(&self, bytes: f64) -> f64 {
        let t = self.layout.tp;
        if t <= 1 {
            return 0.0;
        }
        let (bw, lat) = self.tp_link();
        all_reduce_s(bytes, t, bw, lat)
    }

    /// Bandwidth and latency of the tensor-parallel group's ring: NVLink when the group fits
    /// in a node (t innermost), else the NICs.
    pub(super) fn tp_link(&self) -> (f64, f64) {
        let gpn = self.hw.node.gpus_per_node as u64;
        if self.layout.tp <= gpn && gpn % self.layout.tp == 0 {
            (self.hw.nvlink_bytes_per_s(), self.hw.node.nvlink_latency_s)
        } else {
            (
                self.hw.nic_bytes_per_s_per_gpu(true),
                self.hw.node.nic_latency_s,
            )
        }
    }

    fn node_of(&self, rank: u64) -> u64 {
        rank / self.hw.node.gpus_per_node as u64
    }

    /// Rank of (tensor rank 0, data rank `d`, pipeline rank `p`).
    pub fn rank(&self, d: u64, p: u64) -> u64 {
        let l = self.layout;
        match self.stack.rank_order {
            RankOrder::TensorDataPipeline => l.tp * (d + l.dp * p),
            RankOrder::TensorPipelineData => l.tp * (p + l.pp * d),
        }
    }

    /// Activation (or gradient) transfer between pipeline ranks `from` and `to` for one
    /// micro-batch: `2 b s h` bytes. Inside a node over NVLink. Across nodes each of the t
    /// tensor-parallel ranks uses its own NIC: with scatter/gather each sends `1/t` of the
    /// tensor and the receivers all-gather over NVLink; without it each sends all of it. With
    /// sequence parallelism the tensor is already split `1/t` per rank.
    /// `bytes` (per GPU, as a layer profile's `output_bytes` gives them) sent from pipeline rank
    /// `from` to `to`: NVLink inside a node, the NICs between nodes; no scatter/gather.
    pub fn p2p_bytes_s(&self, from: u64, to: u64, bytes: f64) -> f64 {
        let (ra, rb) = (self.rank(0, from), self.rank(0, to));
        p2p_link_s(self.hw, bytes, self.node_of(ra) == self.node_of(rb))
    }

    pub fn p2p_s(&self, from: u64, to: u64) -> f64 {
        let (b, s, h, _, _, t, _) = self.dims();
        let bytes = 2.0 * b * s * h;
        let tp = self.layout.tp;
        let (ra, rb) = (self.rank(0, from), self.rank(0, to));
        if self.node_of(ra) == self.node_of(rb) {
            let per_rank = if self.layout.sequence_parallel {
                bytes / t
            } else {
                bytes
            };
            return per_rank / self.hw.nvlink_bytes_per_s() + self.hw.node.nvlink_latency_s;
        }
        let leaves = self.node_of(ra) / self.hw.network.nodes_per_leaf_switch as u64
            != self.node_of(rb) / self.hw.network.nodes_per_leaf_switch as u64;
        let nic = self.hw.nic_bytes_per_s_per_gpu(leaves);
        let lat = self.hw.node.nic_latency_s;
        if self.layout.sequence_parallel {
            bytes / t / nic + lat
        } else if self.stack.scatter_gather && tp > 1 {
            let (bw, nvl_lat) = self.tp_link();
            bytes / t / nic + lat + all_gather_s(bytes, tp, bw, nvl_lat)
        } else {
            bytes / nic + lat
        }
    }

    /// Data-parallel reduction of `params` parameters held by one rank: hierarchical when
    /// several members of the group share a node (reduce-scatter over NVLink among the `k`
    /// local members, all-reduce of the `1/k` shard across the `n` nodes over the NICs, then
    /// all-gather over NVLink), else a flat ring over the NICs. Every GPU of a node reduces at
    /// the same time (all tensor/pipeline ranks do), so each gets its share of the NICs.
    pub fn grad_reduce_s(&self, params: f64) -> f64 {
        let l = self.layout;
        if l.dp <= 1 {
            return 0.0;
        }
        let bytes = params * self.stack.grad_reduce_bytes_per_param;
        let first = self.rank(0, 0);
        let last = self.rank(l.dp - 1, 0);
        let stride = if l.dp > 1 {
            (last - first) / (l.dp - 1)
        } else {
            1
        };
        let gpn = self.hw.node.gpus_per_node as u64;
        let local = if stride >= gpn {
            1
        } else {
            (gpn / stride).clamp(1, l.dp)
        };
        let nodes = l.dp.div_ceil(local);
        let (first_node, last_node) = (self.node_of(first), self.node_of(last));
        let leaves = first_node / self.hw.network.nodes_per_leaf_switch as u64
            != last_node / self.hw.network.nodes_per_leaf_switch as u64;
        let nvl = self.hw.nvlink_bytes_per_s();
        let nvl_lat = self.hw.node.nvlink_latency_s;
        let intra = 2.0 * all_gather_s(bytes, local, nvl, nvl_lat);
        let inter = all_reduce_s(
            bytes / local as f64,
            nodes,
            self.hw.nic_bytes_per_s_per_gpu(leaves),
            self.hw.node.nic_latency_s,
        );
        intra + inter
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_collectives() {
        // 2 (n-1)/n * bytes / bw: 8 ranks, 8 GB at 1 GB/s = 14 s.
        assert!((all_reduce_s(8e9, 8, 1e9, 0.0) - 14.0).abs() < 1e-9);
        assert_eq!(all_reduce_s(8e9, 1, 1e9, 1.0), 0.0);
        assert!((all_gather_s(8e9, 8, 1e9, 0.0) - 7.0).abs() < 1e-9);
    }
}
