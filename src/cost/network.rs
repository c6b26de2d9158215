//! Network: collectives and point-to-point transfers on the links they cross: ring
//! all-reduce and all-gather, the tensor-parallel group's link, pipeline transfers between
//! ranks (NVLink inside an NVLink domain, the NICs and the fat-tree between domains, Megatron's
//! scatter/gather), and the data-parallel gradient reduction (hierarchical when the group
//! shares domains). Formulas and sources: docs/cost-model.md.
//!
//! Placement: ranks fill NVLink domains in order (`hw.nvlink_domain_gpus()` GPUs: one node for
//! DGX/HGX boxes, 72 GPUs = 18 trays for NVL72 racks), nodes (which hold the NICs) in order
//! inside a domain. When the tensor-parallel group is a whole number of nodes that does not
//! divide the domain (t = 16 on a 72-GPU rack), the trays left over at the end of each domain
//! stay idle so that no group straddles two domains ([`ranks_per_nvlink_domain`]); where the
//! domain is one node, this changes nothing.

use super::stack::{CostModel, RankOrder, Zero};
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
/// both GPUs share an NVLink domain, else over the GPU's share of its node's NICs.
pub fn p2p_link_s(hw: &Hardware, bytes: f64, same_domain: bool) -> f64 {
    if same_domain {
        bytes / hw.nvlink_bytes_per_s() + hw.node.nvlink_latency_s
    } else {
        bytes / hw.nic_bytes_per_s_per_gpu(false) + hw.node.nic_latency_s
    }
}

/// Ranks placed in one NVLink domain for a tensor-parallel size `tp`: the whole domain, except
/// when the group is a whole number of nodes that does not divide the domain; then as many whole
/// groups as fit (a launcher allocates whole nodes, so it can leave trays idle but not single
/// GPUs). 64 on a 72-GPU NVL72 rack for t = 16; the node's GPUs where the domain is the node.
pub fn ranks_per_nvlink_domain(hw: &Hardware, tp: u64) -> u64 {
    let domain = hw.nvlink_domain_gpus() as u64;
    let gpn = hw.node.gpus_per_node as u64;
    if tp > 1 && tp % gpn == 0 && tp <= domain && domain % tp != 0 {
        domain / tp * tp
    } else {
        domain
    }
}

/// Whether a tensor-parallel group of `tp` ranks (t innermost) stays inside one NVLink domain:
/// it fits and the groups tile the ranks placed in a domain.
pub fn tp_on_nvlink(hw: &Hardware, tp: u64) -> bool {
    let per_domain = ranks_per_nvlink_domain(hw, tp);
    tp <= per_domain && per_domain % tp == 0
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

    /// Bandwidth and latency of the tensor-parallel group's ring: NVLink when the group stays in
    /// an NVLink domain ([`tp_on_nvlink`]; t innermost), else the NICs.
    pub(super) fn tp_link(&self) -> (f64, f64) {
        if tp_on_nvlink(self.hw, self.layout.tp) {
            (self.hw.nvlink_bytes_per_s(), self.hw.node.nvlink_latency_s)
        } else {
            (
                self.hw.nic_bytes_per_s_per_gpu(true),
                self.hw.node.nic_latency_s,
            )
        }
    }

    /// Bandwidth and latency of the context-parallel ring: its cp ranks sit next to each
    /// other after the t tensor-parallel ones (Megatron-Core's order tp-cp-dp-pp), so the ring
    /// stays on NVLink when a tensor- times context-parallel group does ([`tp_on_nvlink`] of
    /// t x cp); else its slowest hops cross the NICs.
    pub(super) fn cp_link(&self) -> (f64, f64) {
        let tc = self.layout.tp.saturating_mul(self.layout.cp.max(1));
        if tp_on_nvlink(self.hw, tc) {
            (self.hw.nvlink_bytes_per_s(), self.hw.node.nvlink_latency_s)
        } else {
            (
                self.hw.nic_bytes_per_s_per_gpu(true),
                self.hw.node.nic_latency_s,
            )
        }
    }

    /// NVLink domain of `rank`.
    fn domain_of(&self, rank: u64) -> u64 {
        rank / ranks_per_nvlink_domain(self.hw, self.layout.tp)
    }

    /// Node (the unit that holds the NICs and hangs off a leaf switch) of `rank`, counting idle
    /// nodes at the end of a domain.
    fn node_of(&self, rank: u64) -> u64 {
        let gpn = self.hw.node.gpus_per_node as u64;
        let per_domain = ranks_per_nvlink_domain(self.hw, self.layout.tp);
        let nodes_per_domain = self.hw.nvlink_domain_gpus() as u64 / gpn;
        rank / per_domain * nodes_per_domain + rank % per_domain / gpn
    }

    /// Rank of (tensor rank 0, context rank 0, data rank `d`, pipeline rank `p`): the
    /// context-parallel ranks follow the tensor-parallel ones.
    pub fn rank(&self, d: u64, p: u64) -> u64 {
        let l = self.layout;
        let tc = l.tp * l.cp.max(1);
        match self.stack.rank_order {
            RankOrder::TensorDataPipeline => tc * (d + l.dp * p),
            RankOrder::TensorPipelineData => tc * (p + l.pp * d),
        }
    }

    /// `bytes` (per GPU, as a layer profile's `output_bytes` gives them) sent from pipeline rank
    /// `from` to `to`: NVLink inside an NVLink domain, the NICs between domains; no
    /// scatter/gather.
    pub fn p2p_bytes_s(&self, from: u64, to: u64, bytes: f64) -> f64 {
        let (ra, rb) = (self.rank(0, from), self.rank(0, to));
        p2p_link_s(self.hw, bytes, self.domain_of(ra) == self.domain_of(rb))
    }

    /// Activation (or gradient) transfer between pipeline ranks `from` and `to` for one
    /// micro-batch: `2 b s h` bytes. Inside an NVLink domain over NVLink. Across domains each
    /// of the t tensor-parallel ranks uses its own NIC: with scatter/gather each sends `1/t` of
    /// the tensor and the receivers all-gather over NVLink; without it each sends all of it.
    /// With sequence parallelism the tensor is already split `1/t` per rank.
    pub fn p2p_s(&self, from: u64, to: u64) -> f64 {
        let (b, s, h, _, _, t, _) = self.dims();
        let bytes = 2.0 * b * s * h;
        let tp = self.layout.tp;
        let (ra, rb) = (self.rank(0, from), self.rank(0, to));
        if self.domain_of(ra) == self.domain_of(rb) {
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

    /// All-reduce of `bytes` per rank over the first `dp_members` data-parallel ranks and their
    /// context-parallel neighbours: hierarchical when several members share an NVLink domain
    /// (reduce-scatter over NVLink among the `k` local members, all-reduce of the `1/k` shard
    /// across the domains over the NICs, then all-gather over NVLink), else a flat ring over
    /// the NICs. Every GPU of a node communicates at the same time (all tensor/pipeline ranks
    /// do), so each gets its share of the NICs. A reduce-scatter or an all-gather is half.
    pub fn dp_all_reduce_s(&self, bytes: f64, dp_members: u64) -> f64 {
        let l = self.layout;
        let cp = l.cp.max(1);
        let dp = dp_members.clamp(1, l.dp.max(1));
        let members = dp.saturating_mul(cp);
        if members <= 1 {
            return 0.0;
        }
        let first = self.rank(0, 0);
        let last = self.rank(dp - 1, 0) + l.tp * (cp - 1);
        let stride = if dp > 1 {
            (self.rank(dp - 1, 0) - first) / (dp - 1)
        } else {
            1
        };
        let per_domain = ranks_per_nvlink_domain(self.hw, l.tp);
        // Members in one NVLink domain: the context-parallel neighbours that fit, times the
        // data-parallel sets that fit beside them.
        let local_cp = (per_domain / l.tp).clamp(1, cp);
        let local_dp = if dp <= 1 || stride >= per_domain {
            1
        } else {
            (per_domain / stride).clamp(1, dp)
        };
        let (first_node, last_node) = (self.node_of(first), self.node_of(last));
        let leaves = first_node / self.hw.network.nodes_per_leaf_switch as u64
            != last_node / self.hw.network.nodes_per_leaf_switch as u64;
        self.hierarchical_all_reduce_s(bytes, members, local_cp * local_dp, leaves)
    }

    /// All-reduce of `bytes` per rank over `members` ranks of which `local` share each NVLink
    /// domain: reduce-scatter over NVLink among the local ones, all-reduce of the `1/local`
    /// shard across the domains over the NICs (through the spine when `leaves`), all-gather
    /// over NVLink.
    pub(super) fn hierarchical_all_reduce_s(
        &self,
        bytes: f64,
        members: u64,
        local: u64,
        leaves: bool,
    ) -> f64 {
        let local = local.clamp(1, members.max(1));
        let intra = 2.0
            * all_gather_s(
                bytes,
                local,
                self.hw.nvlink_bytes_per_s(),
                self.hw.node.nvlink_latency_s,
            );
        let inter = all_reduce_s(
            bytes / local as f64,
            members.div_ceil(local),
            self.hw.nic_bytes_per_s_per_gpu(leaves),
            self.hw.node.nic_latency_s,
        );
        intra + inter
    }

    /// Data-parallel ranks in one shard group (HSDP: d / R; else d).
    fn shard_dp(&self) -> u64 {
        (self.layout.dp.max(1) / self.layout.dp_replicate.max(1)).max(1)
    }

    /// All-reduce of `bytes` per rank across the R HSDP replicas (ranks `d / R` data-parallel
    /// ranks apart): over NVLink when they share a domain, else a ring over the NICs.
    pub fn replica_all_reduce_s(&self, bytes: f64) -> f64 {
        let r = self.layout.dp_replicate.max(1);
        if r <= 1 {
            return 0.0;
        }
        let step = self.shard_dp();
        let (first, last) = (self.rank(0, 0), self.rank(step * (r - 1), 0));
        if self.domain_of(first) == self.domain_of(last) {
            return all_reduce_s(
                bytes,
                r,
                self.hw.nvlink_bytes_per_s(),
                self.hw.node.nvlink_latency_s,
            );
        }
        let leaves = self.node_of(first) / self.hw.network.nodes_per_leaf_switch as u64
            != self.node_of(last) / self.hw.network.nodes_per_leaf_switch as u64;
        all_reduce_s(
            bytes,
            r,
            self.hw.nic_bytes_per_s_per_gpu(leaves),
            self.hw.node.nic_latency_s,
        )
    }

    /// The gradient reduction of `params` parameters held by one rank, once per step
    /// (replicated state or ZeRO-1), as (reduce-scatter, all-gather): the data- and
    /// context-parallel ranks together (the context-parallel ranks hold the same weights:
    /// Megatron-Core's data-parallel group with context parallelism). The reduce-scatter
    /// includes, with HSDP replicas, the all-reduce of each shard across them. Replicated state
    /// (DDP) all-reduces: the same bytes as the two halves.
    pub fn grad_reduce_parts_s(&self, params: f64) -> (f64, f64) {
        let bytes = params * self.stack.grad_reduce_bytes_per_param;
        let shard = self.dp_all_reduce_s(bytes, self.shard_dp());
        let replicas = self.replica_all_reduce_s(bytes / self.shard_ranks() as f64);
        (shard / 2.0 + replicas, shard / 2.0)
    }

    /// The distributed optimizer's all-gather of `params` updated parameters held by one rank
    /// over the ranks that shard them, [`crate::cost::Stack::param_gather_bytes_per_param`] bytes each.
    pub fn param_gather_s(&self, params: f64) -> f64 {
        self.dp_all_reduce_s(
            params * self.stack.param_gather_bytes_per_param(),
            self.shard_dp(),
        ) / 2.0
    }

    /// The whole per-step reduction (both halves of [`Self::grad_reduce_parts_s`]).
    pub fn grad_reduce_s(&self, params: f64) -> f64 {
        let (rs, ag) = self.grad_reduce_parts_s(params);
        rs + ag
    }

    /// The part of a step's data-parallel communication that stays at the end of the step:
    /// - replicated (ZeRO-0): the whole all-reduce;
    /// - ZeRO-1 (distributed optimizer): the reduce-scatter of the gradients, and the
    ///   all-gather of the updated parameters unless `--overlap-param-gather` runs it under the
    ///   next step's first forwards, bucket by bucket;
    /// - ZeRO-2: the gradients were reduce-scattered micro-batch by micro-batch
    ///   ([`Self::sharded_layer_comm_s`]); the parameter all-gather, as for ZeRO-1;
    /// - ZeRO-3: nothing (parameters stay sharded and are gathered layer by layer).
    pub fn step_grad_reduce_s(&self, params: f64) -> f64 {
        let (rs, ag) = self.grad_reduce_parts_s(params);
        let ag_in_step = if self.stack.overlap_param_gather {
            0.0
        } else {
            self.param_gather_s(params)
        };
        match self.stack.zero {
            Zero::Off => rs + ag,
            Zero::Optimizer => rs + ag_in_step,
            Zero::Gradients => ag_in_step,
            Zero::Full => 0.0,
        }
    }

    /// PyTorch FSDP2's copies around its collectives for a layer of `params` parameters (one
    /// rank's, unsharded), per micro-batch, on the compute stream: (the copy-out after the
    /// forward all-gather, the copy-out after the backward one, the reduce-scatter copy-in).
    /// Zero unless [`Stack::fsdp2`](crate::cost::Stack) with sharded gradients.
    /// - Copy-out (`foreach_all_gather_copy_out`: `torch.split_with_sizes_copy` from the flat
    ///   all-gather output into each parameter, on the current stream after waiting for the
    ///   all-gather): reads and writes the layer's 16-bit parameters, 2 + 2 bytes each, for
    ///   every all-gather (ZeRO-3: the forward's, and the backward's when resharded).
    /// - Copy-in (`foreach_reduce`: `torch._chunk_cat` of the 16-bit gradients into the flat
    ///   reduce-scatter input of the reduce dtype, on the reduce-scatter stream, then
    ///   `current_stream.wait_stream(reduce_scatter_stream)` before the gradients are freed):
    ///   reads 2 bytes and writes `grad_reduce_bytes_per_param` per parameter, and the
    ///   compute stream waits for it.
    ///
    /// (`torch/distributed/_composable/fsdp/_fsdp_collectives.py`, PyTorch 2.4–2.5, the
    /// versions of torchtitan's 2024 runs; HBM at [`Hardware::hbm_bytes_per_s`].)
    pub fn fsdp2_copies_s(&self, params: f64) -> (f64, f64, f64) {
        if !self.stack.fsdp2 || !self.stack.zero.shards_gradients() || params <= 0.0 {
            return (0.0, 0.0, 0.0);
        }
        let hbm = self.hw.hbm_bytes_per_s();
        let gathered = self.stack.zero == Zero::Full;
        let copy_out = if gathered {
            (2.0 + 2.0) * params / hbm
        } else {
            0.0
        };
        let copy_out_backward = if self.stack.reshard_after_forward {
            copy_out
        } else {
            0.0
        };
        let copy_in = (2.0 + self.stack.grad_reduce_bytes_per_param) * params / hbm;
        (copy_out, copy_out_backward, copy_in)
    }

    /// Per layer of `params` parameters (one rank's), per micro-batch, with sharded gradients
    /// or parameters: (all-gather of the 16-bit parameters over the shard group, reduce-scatter
    /// of the gradients over it plus, with HSDP replicas, the all-reduce of the shard across
    /// them). Zero below ZeRO-2.
    pub fn sharded_layer_comm_s(&self, params: f64) -> (f64, f64) {
        if !self.stack.zero.shards_gradients() {
            return (0.0, 0.0);
        }
        let shard_dp = self.shard_dp();
        let ag = self.param_gather_s(params);
        let grads = params * self.stack.grad_reduce_bytes_per_param;
        let rs = self.dp_all_reduce_s(grads, shard_dp) / 2.0
            + self.replica_all_reduce_s(grads / self.shard_ranks() as f64);
        (ag, rs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fsdp2_copies_move_the_layer_once_per_collective() {
        use crate::cost::stack::{Layout, Stack};
        use crate::inputs::model::Model;
        let hw = Hardware::bundled("a100-80gb").unwrap();
        let m = Model::preset("llama3-8b").unwrap();
        let copies = |stack: Stack| {
            CostModel {
                model: &m,
                hw: &hw,
                layout: Layout {
                    dp: 64,
                    ..Layout::tensor_parallel(1)
                },
                stack,
            }
            .fsdp2_copies_s(1e9)
        };
        let hbm = hw.hbm_bytes_per_s();
        // ZeRO-3 resharded, FP32 reduction: 4 bytes a parameter out of each all-gather,
        // 2 + 4 into each reduce-scatter.
        let (f, b, r) = copies(Stack::torchtitan());
        assert_eq!((f, b, r), (4e9 / hbm, 4e9 / hbm, 6e9 / hbm));
        // Not resharded: one gather per step, no backward copy-out.
        let kept = copies(Stack {
            reshard_after_forward: false,
            ..Stack::torchtitan()
        });
        assert_eq!(kept, (4e9 / hbm, 0.0, 6e9 / hbm));
        // ZeRO-2: only the reduce-scatter; BF16 reduction 2 + 2.
        let z2 = copies(Stack {
            zero: Zero::Gradients,
            grad_reduce_bytes_per_param: 2.0,
            ..Stack::torchtitan()
        });
        assert_eq!(z2, (0.0, 0.0, 4e9 / hbm));
        // Megatron's buffers (parameters and gradients are views) and unsharded states: none.
        let megatron = Stack {
            zero: Zero::Full,
            ..Stack::megatron_core()
        };
        assert_eq!(copies(megatron), (0.0, 0.0, 0.0));
        let ddp = Stack {
            zero: Zero::Optimizer,
            ..Stack::torchtitan()
        };
        assert_eq!(copies(ddp), (0.0, 0.0, 0.0));
    }

    #[test]
    fn tensor_parallel_groups_and_nvlink_domains() {
        // The domain is the node: unchanged rule, t divides the node.
        let h100 = Hardware::bundled("h100-80gb").unwrap();
        for t in 1..=16 {
            assert_eq!(ranks_per_nvlink_domain(&h100, t), 8);
            assert_eq!(tp_on_nvlink(&h100, t), t <= 8 && 8 % t == 0, "t = {t}");
        }
        // A 72-GPU domain of 4-GPU trays.
        let mut rack = h100.clone();
        rack.node.gpus_per_node = 4;
        rack.node.nvlink_domain_gpus = Some(72);
        for (t, per_domain, nvlink) in [
            (1, 72, true),
            (4, 72, true),
            (8, 72, true),
            (16, 64, true),
            (24, 72, true),
            (32, 64, true),
            (72, 72, true),
            (5, 72, false),
            (144, 72, false),
        ] {
            assert_eq!(ranks_per_nvlink_domain(&rack, t), per_domain, "t = {t}");
            assert_eq!(tp_on_nvlink(&rack, t), nvlink, "t = {t}");
        }
    }

    #[test]
    fn ring_collectives() {
        // 2 (n-1)/n * bytes / bw: 8 ranks, 8 GB at 1 GB/s = 14 s.
        assert!((all_reduce_s(8e9, 8, 1e9, 0.0) - 14.0).abs() < 1e-9);
        assert_eq!(all_reduce_s(8e9, 1, 1e9, 1.0), 0.0);
        assert!((all_gather_s(8e9, 8, 1e9, 0.0) - 7.0).abs() < 1e-9);
    }
}
