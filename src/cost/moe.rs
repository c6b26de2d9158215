//! Mixture of experts: the cost of a MoE layer (router, token dispatch and combine as
//! all-to-all, grouped expert GEMMs, shared experts), expert parallelism (`ep`) and expert
//! tensor parallelism (`etp`) as Megatron-Core lays them out, the expert weights' memory and
//! their gradient reduction over the expert data-parallel group. Formulas and sources:
//! docs/cost-model.md, "Mixture of experts".
//!
//! Layout (Megatron-Core `parallel_state`, expert rank order etp-ep-edp-pp over the same GPUs
//! as tp-cp-dp-pp): the `ep x etp` ranks of one expert group are consecutive, carved from the
//! t x cp x d ranks of a pipeline stage; the expert data-parallel size is
//! `edp = t cp d / (ep etp)`.

use super::compute::{gemm_time_in_s, gemm_time_s, BlockCost, Gemm, Part};
use super::launch::{Kernels, ROUTER_KERNELS};
use super::memory;
use super::network::{all_gather_s, ranks_per_nvlink_domain};
use super::stack::{CostModel, Layout, Recompute, Zero, MOE_FORWARD_SYNC_LOSS};
use crate::inputs::model::Model;

/// Bytes of a routed row's probability as the weighted activation keeps it for its gradient:
/// fp32, the router's logits dtype with `moe_router_dtype fp32`, which Megatron-Bridge's MoE
/// models set (`router.py`, `moe_utils.py` at core_v0.15.0: the probabilities take the
/// logits' dtype; 2 bytes without it, a difference of under 0.1 % of a routed row).
const MOE_PROB_BYTES: f64 = 4.0;

/// Fraction of a Hopper GPU's 132 SMs that the dispatch/combine kernels hold while they run
/// beside compute: DeepSeek-V3's technical report (arXiv 2412.19437, Sec. 3.2.2) dedicates 20
/// of the H800's 132 SMs to them ("only 20 SMs are sufficient to fully utilize the bandwidths
/// of IB and NVLink"); DeepEP's normal kernels take the same order (20-24 SMs). The compute
/// that hides the all-to-all runs on the other 112.
pub const MOE_COMM_SM_FRACTION: f64 = 20.0 / 132.0;

/// One layer's costs for each kind of layer (see [`CostModel::layer_kinds`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LayerKinds {
    pub dense: BlockCost,
    pub moe: BlockCost,
    pub dense_sliding: BlockCost,
    pub moe_sliding: BlockCost,
}

impl LayerKinds {
    /// How many of layers `[first, first + n)` of `model` are of each kind: dense, MoE,
    /// dense with sliding-window attention, MoE with sliding-window attention.
    pub fn kind_counts(model: &Model, first: usize, n: usize) -> [u64; 4] {
        let mut counts = [0u64; 4];
        if model.moe.is_none() && model.sliding_window.is_none() {
            counts[0] = n as u64;
            return counts;
        }
        for i in first..first + n {
            let sliding = model
                .sliding_window
                .as_ref()
                .is_some_and(|w| w.layers.get(i).copied().unwrap_or(false));
            counts[model.is_moe_layer(i) as usize + 2 * sliding as usize] += 1;
        }
        counts
    }

    /// Costs of layers `[first, first + n)` of `model`.
    pub fn block(&self, model: &Model, first: usize, n: usize) -> BlockCost {
        let counts = Self::kind_counts(model, first, n);
        let kinds = [self.dense, self.moe, self.dense_sliding, self.moe_sliding];
        let mut c = BlockCost::default();
        for (k, &count) in kinds.iter().zip(&counts) {
            if count > 0 {
                c = c.plus(k.scale(count as f64));
            }
        }
        c
    }

    /// One layer's costs: layer `i` of `model`.
    pub fn of(&self, model: &Model, i: usize) -> BlockCost {
        self.block(model, i, 1)
    }
}

/// One layer's parameters by kind: a dense layer's (`dense`), a MoE layer's dense part
/// (attention, shared experts, router, norms: `moe_dense`), a MoE layer's routed experts on
/// one rank (`expert_per_layer`); dense parts split over `tp`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LayerParams {
    pub dense: u64,
    pub moe_dense: u64,
    pub expert_per_layer: f64,
    pub tp: u64,
    pub is_moe: bool,
}

impl LayerParams {
    /// What one rank holds of `dense` dense layers and `moe_layers` MoE layers.
    pub fn rank(&self, dense: u64, moe_layers: u64) -> RankParams {
        let t = self.tp as f64;
        if !self.is_moe {
            return RankParams {
                dense: self.dense as f64 / t * dense as f64,
                expert: 0.0,
            };
        }
        RankParams {
            dense: (moe_layers * self.moe_dense + dense * self.dense) as f64 / t,
            expert: moe_layers as f64 * self.expert_per_layer,
        }
    }
}

/// Parameters one rank holds for a run of layers: the dense part (attention, dense or shared
/// MLPs, router, norms; split over t) and the routed experts (split over ep and etp).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RankParams {
    pub dense: f64,
    pub expert: f64,
}

impl CostModel<'_> {
    pub(super) fn ep(&self) -> u64 {
        self.layout.ep.max(1)
    }

    pub(super) fn etp(&self) -> u64 {
        self.layout.etp.max(1)
    }

    /// Routed experts on one rank: `E/ep`, at least 1; 0 without experts.
    pub fn moe_local_experts(&self) -> f64 {
        self.model
            .moe
            .as_ref()
            .map_or(0.0, |m| (m.num_experts / self.ep()).max(1) as f64)
    }

    /// Routed rows the busiest rank multiplies: [`CostModel::moe_rows_per_expert`] for each of
    /// its [`CostModel::moe_local_experts`].
    pub fn moe_rank_rows(&self) -> f64 {
        self.moe_rows_per_expert() * self.moe_local_experts()
    }

    /// Expert data-parallel size: `t cp d / (ep etp)` (at least 1).
    pub fn expert_dp(&self) -> u64 {
        let l = self.layout;
        (l.tp * l.cp.max(1) * l.dp / (self.ep() * self.etp())).max(1)
    }

    /// Tokens of one micro-batch that one rank routes: `b s / (cp t)` (the MoE block runs in
    /// the sequence-parallel region, which Megatron-Core requires with tensor parallelism).
    pub fn moe_tokens_per_rank(&self) -> f64 {
        let (b, s, _, _, _, t, _) = self.dims();
        b * s / t
    }

    /// Bytes one rank sends to the other ranks of its expert-parallel group in one dispatch
    /// (or one combine) of one layer and micro-batch, balanced routing: each of its `n` tokens
    /// goes to `k` experts, `2 h` bytes each (BF16), and `(ep - 1)/ep` of them live elsewhere.
    pub fn moe_a2a_bytes(&self) -> f64 {
        let Some(moe) = &self.model.moe else {
            return 0.0;
        };
        let ep = self.ep() as f64;
        self.moe_tokens_per_rank()
            * moe.top_k as f64
            * self.model.hidden_size as f64
            * 2.0
            * (ep - 1.0)
            / ep
    }

    /// Time of one all-to-all of the busiest rank (its bytes scaled by the busiest expert's
    /// load, [`CostModel::moe_busiest_load`]): the share of peers in the rank's NVLink domain
    /// over NVLink, the rest over the GPU's share of the node's NICs, both at once; plus one
    /// latency. With a deduplicating dispatcher (DeepEP, HybridEP) a token crosses the fabric
    /// once per remote domain that holds one of its experts and reaches each other GPU that
    /// holds one once, over NVLink (forwarded inside the domain)
    /// ([`CostModel::moe_remote_domains_per_token`] with domains and with GPUs).
    pub fn moe_a2a_s(&self) -> f64 {
        let ep = self.ep();
        if ep <= 1 || self.model.moe.is_none() {
            return 0.0;
        }
        let etp = self.etp();
        let rho = self.moe_busiest_load();
        // Bytes to each peer.
        let bytes = self.moe_a2a_bytes() * rho / ((ep - 1) as f64);
        let per_domain = ranks_per_nvlink_domain(self.hw, self.layout.tp);
        let local = (per_domain / etp).clamp(1, ep);
        let remote = ep - local;
        // A deduplicating dispatcher sends a token once per remote GPU (NVLink) and domain
        // (NICs) that holds one of its experts.
        let dedup = self.stack.moe_dispatcher.deduplicates();
        let (n, token) = (
            self.moe_tokens_per_rank(),
            2.0 * self.model.hidden_size as f64 * rho,
        );
        let nvl_bytes = if dedup {
            n * token * self.moe_remote_domains_per_token(ep)
        } else {
            bytes * (local - 1) as f64
        };
        if remote == 0 {
            return nvl_bytes / self.hw.nvlink_bytes_per_s() + self.hw.node.nvlink_latency_s;
        }
        let span_nodes = (ep * etp).div_ceil(self.hw.node.gpus_per_node as u64);
        let leaves = span_nodes > self.hw.network.nodes_per_leaf_switch as u64;
        let nic_bw = self.hw.nic_bytes_per_s_per_gpu(leaves);
        let nic_bytes = if dedup {
            n * token * self.moe_remote_domains_per_token(ep.div_ceil(local))
        } else {
            bytes * remote as f64
        };
        (nvl_bytes / self.hw.nvlink_bytes_per_s()).max(nic_bytes / nic_bw)
            + self.hw.node.nic_latency_s
    }

    /// Expected remote NVLink domains a token's top-k experts fall in, the experts spread evenly
    /// over `domains` domains `G` of the expert-parallel group. Each remote domain is hit with
    /// probability `1 - miss(n, m, c)`, `miss` the chance that `c` draws without replacement
    /// from `n` items avoid `m` given ones (`C(n - m, c) / C(n, c)`):
    /// - any expert (uniform routing): `1 - miss(E, E/G, k)`;
    /// - group-limited routing, `N` groups of which `c` per token, whole groups in a domain
    ///   (`G | N`; node-limited routing has `N = G`): `1 - miss(N, N/G, c)`, each chosen group
    ///   receiving one of the token's experts at least (Megatron-Core picks the groups by the
    ///   sum of their best `k/c` scores, so a chosen group's best expert is among the best);
    /// - groups spanning domains (`N | G`): the domain's group chosen (`c/N`), then `k` experts
    ///   uniform over the chosen groups' `cE/N`: `c/N (1 - miss(cE/N, E/G, k))`.
    ///
    /// Other group counts are priced as uniform routing.
    pub fn moe_remote_domains_per_token(&self, domains: u64) -> f64 {
        let Some(moe) = &self.model.moe else {
            return 0.0;
        };
        if domains <= 1 {
            return 0.0;
        }
        let miss = |n: f64, m: f64, c: u64| {
            (0..c).fold(1.0, |acc, i| {
                acc * ((n - m - i as f64) / (n - i as f64)).max(0.0)
            })
        };
        let (e, g, k) = (moe.num_experts as f64, domains as f64, moe.top_k);
        let hit = match moe.groups {
            Some(r) if r.num_groups % domains == 0 => {
                let n = r.num_groups as f64;
                1.0 - miss(n, n / g, r.topk)
            }
            Some(r) if domains % r.num_groups == 0 => {
                let (n, c) = (r.num_groups as f64, r.topk as f64);
                c / n * (1.0 - miss(c * e / n, e / g, k))
            }
            _ => 1.0 - miss(e, e / g, k),
        };
        (g - 1.0) * hit
    }

    /// The all-gather (dispatch) or reduce-scatter (combine) of routed tokens over the `etp`
    /// ranks that share an expert, on NVLink when they share a domain.
    pub fn moe_etp_collective_s(&self) -> f64 {
        let etp = self.etp();
        let Some(moe) = &self.model.moe else {
            return 0.0;
        };
        if etp <= 1 {
            return 0.0;
        }
        let bytes = self.moe_tokens_per_rank()
            * moe.top_k as f64
            * self.model.hidden_size as f64
            * 2.0
            * etp as f64
            * self.moe_busiest_load();
        let (bw, lat) = if etp <= ranks_per_nvlink_domain(self.hw, self.layout.tp) {
            (self.hw.nvlink_bytes_per_s(), self.hw.node.nvlink_latency_s)
        } else {
            (
                self.hw.nic_bytes_per_s_per_gpu(true),
                self.hw.node.nic_latency_s,
            )
        };
        all_gather_s(bytes, etp, bw, lat)
    }

    /// Rows on the busiest expert over the mean: `--moe-imbalance` when dropless, capped at
    /// the capacity factor when tokens are dropped, the capacity factor itself when padded
    /// ([`MoeCapacity::busiest_load`](super::recipe::MoeCapacity::busiest_load)).
    pub fn moe_busiest_load(&self) -> f64 {
        super::recipe::busiest_load(self.stack.moe_capacity, self.stack.moe_imbalance)
    }

    /// Rows each local expert multiplies on the busiest rank: `n k etp ep / E x load`
    /// ([`CostModel::moe_busiest_load`]).
    pub fn moe_rows_per_expert(&self) -> f64 {
        let Some(moe) = &self.model.moe else {
            return 0.0;
        };
        self.moe_tokens_per_rank() * moe.top_k as f64 * (self.etp() * self.ep()) as f64
            / moe.num_experts as f64
            * self.moe_busiest_load()
    }

    /// The grouped GEMMs of the routed experts on one rank, forward: `E/ep` experts, each
    /// `(rows x h) . (h x (2) f_e/etp)` then `(rows x f_e/etp) . (f_e/etp x h)`.
    pub fn moe_expert_gemms(&self) -> [Gemm; 2] {
        let Some(moe) = &self.model.moe else {
            return [Gemm {
                m: 0.0,
                n: 0.0,
                k: 0.0,
                batch: 0.0,
            }; 2];
        };
        let h = self.model.hidden_size as f64;
        let f = moe.expert_ffn as f64 / self.etp() as f64;
        let up = if self.model.gated_mlp { 2.0 * f } else { f };
        let local = self.moe_local_experts();
        let m = self.moe_rows_per_expert();
        [
            Gemm {
                m,
                n: up,
                k: h,
                batch: local,
            },
            Gemm {
                m,
                n: h,
                k: f,
                batch: local,
            },
        ]
    }

    /// The router of one rank: scores `(n x h) . (h x E)`, plus softmax/sigmoid and top-k over
    /// the fp32 scores (read and write 4 bytes per score, twice).
    fn moe_router(&self) -> (Gemm, f64) {
        let e = self.model.moe.as_ref().map_or(0, |m| m.num_experts) as f64;
        let n = self.moe_tokens_per_rank();
        (
            Gemm {
                m: n,
                n: e,
                k: self.model.hidden_size as f64,
                batch: 1.0,
            },
            2.0 * 8.0 * n * e,
        )
    }

    /// The same cost model with the MoE block replaced by its shared experts as a dense MLP
    /// (`ffn_hidden_size` = the shared width, 0 without shared experts): attention, norms,
    /// residuals and the tensor-parallel collectives of a MoE layer.
    pub fn moe_dense_part_model(&self) -> Model {
        let mut m = self.model.clone();
        m.ffn_hidden_size = m.moe.as_ref().map_or(m.ffn_hidden_size, |x| x.shared_ffn);
        m.moe = None;
        m
    }

    /// One MoE layer for one micro-batch on one rank: the dense part (attention, shared
    /// experts) from [`CostModel::layer`], plus the router, the permutation of the routed
    /// tokens, dispatch and combine all-to-alls (and the etp all-gather/reduce-scatter), and
    /// the grouped expert GEMMs, all on the busiest rank. Full recompute repeats the forward.
    pub fn moe_layer(&self) -> BlockCost {
        let dense_model = self.moe_dense_part_model();
        // Megatron-Core's `mlp` module recomputes dense MLPs only, never a MoE layer's shared
        // experts (which the dense part stands for here).
        let dense_layout = match self.layout.recompute {
            Recompute::Mlp => Layout {
                recompute: Recompute::None,
                ..self.layout
            },
            Recompute::MlaUpProjMlp => Layout {
                recompute: Recompute::MlaUpProj,
                ..self.layout
            },
            _ => self.layout,
        };
        let dense_cm = CostModel {
            model: &dense_model,
            layout: dense_layout,
            ..*self
        };
        let (dense, dense_kernels) = (dense_cm.layer(), dense_cm.layer_kernels());
        let Some(moe) = &self.model.moe else {
            return dense;
        };
        let hbm = self.hw.hbm_bytes_per_s();
        let h = self.model.hidden_size as f64;
        // The expert GEMMs in the stack's precision, with the split accumulator where its
        // recipe asks for one, as the dense layers' (`CostModel::fp8_gemm_slowdowns`).
        let (fprop_slowdown, grad_slowdown) = self.fp8_gemm_slowdowns();
        let lin = |g: &Gemm| gemm_time_in_s(self.hw, g, self.stack.precision) * fprop_slowdown;
        let lin_grad = |g: &Gemm| gemm_time_in_s(self.hw, g, self.stack.precision) * grad_slowdown;
        let [up, down] = self.moe_expert_gemms();
        let (router, router_bytes) = self.moe_router();
        let rows = self.moe_rank_rows();
        let f = moe.expert_ffn as f64 / self.etp() as f64;
        // Permute before the experts and un-permute after (read and write 2 bytes per
        // element of the routed rows), and the activation (SwiGLU 6 / 10 bytes per element,
        // GeLU 4 / 6, as for the dense MLP). Megatron-Core's all-to-all dispatcher
        // (`MoEAlltoAllTokenDispatcher`) permutes the rows for the all-to-all, and with more
        // than one local expert sorts the received rows by expert and back again
        // (`sort_chunks_by_idxs`, "Permutation 2"): two passes each way. DeepEP's dispatch
        // gathers its send buffer inside the communication kernel: one. HybridEP fuses both
        // into its dispatch and combine kernels: none.
        let (act_f, act_b) = if self.model.gated_mlp {
            (6.0, 10.0)
        } else {
            (4.0, 6.0)
        };
        let passes = self.stack.moe_dispatcher.permute_passes(up.batch);
        let permute = passes * 2.0 * 4.0 * rows * h;
        // Their operands cast to the low precision, expert by expert.
        let (cast_f, cast_b) = self.moe_low_precision_cast_bytes();
        // The second expert GEMM's bias, added outside it ([`CostModel::moe_expert_bias_bytes`]).
        let (bias_f, bias_b) = self.moe_expert_bias_bytes();
        // A clamped activation's eager clamps ([`CostModel::moe_clamp_bytes`]).
        let (clamp_f, clamp_b) = self.moe_clamp_bytes();
        let fwd_mem = permute + act_f * rows * f + router_bytes + cast_f + bias_f + clamp_f;
        let bwd_mem = permute + act_b * rows * f + router_bytes + cast_b + bias_b + clamp_b;
        let comm = 2.0 * (self.moe_a2a_s() + self.moe_etp_collective_s());
        let fwd_gemm = lin(&up) + lin(&down) + gemm_time_s(self.hw, &router);
        let bwd_in_gemm = lin_grad(&up.input_grad())
            + lin_grad(&down.input_grad())
            + gemm_time_s(self.hw, &router.input_grad());
        let bwd_w_gemm = lin_grad(&up.weight_grad())
            + lin_grad(&down.weight_grad())
            + gemm_time_s(self.hw, &router.weight_grad());
        // With overlap (DualPipe, Megatron-Core's EP all-to-all overlap) another
        // micro-batch's compute runs beside the all-to-all: only what outlasts it shows, but
        // that compute runs on the SMs the communication kernels leave it, so it takes
        // 1 / (1 - f) as long while they run: f / (1 - f) of the hidden time is added.
        let split = |comm: f64, compute: f64| -> (f64, f64) {
            if self.stack.moe_comm_overlap {
                let hidden = comm.min(compute);
                let slowed = hidden * MOE_COMM_SM_FRACTION / (1.0 - MOE_COMM_SM_FRACTION);
                (comm - hidden + slowed, hidden - slowed)
            } else {
                (comm, 0.0)
            }
        };
        let fwd_compute = dense.forward.total_s() + fwd_gemm + fwd_mem / hbm;
        let (f_exp, f_hid) = split(comm, fwd_compute);
        let forward = Part {
            gemm_s: fwd_gemm,
            memory_s: fwd_mem / hbm,
            tp_comm_s: f_exp,
            tp_hidden_s: f_hid,
            cp_comm_s: 0.0,
            cp_hidden_s: 0.0,
            launch_s: 0.0,
        };
        let bwd_compute = dense.backward_input.total_s() + bwd_in_gemm + bwd_mem / hbm;
        let (b_exp, b_hid) = split(comm, bwd_compute);
        let mut backward_input = Part {
            gemm_s: bwd_in_gemm,
            memory_s: bwd_mem / hbm,
            tp_comm_s: b_exp,
            tp_hidden_s: b_hid,
            cp_comm_s: 0.0,
            cp_hidden_s: 0.0,
            launch_s: 0.0,
        };
        match self.layout.recompute {
            // The MoE block again (router, dispatch, experts, combine) before its backward.
            Recompute::Full | Recompute::NormMoe => backward_input = backward_input.plus(forward),
            // The `moe_act` module again: the experts' activation, and a clamped one's clamps.
            r if r.recomputes_moe_act() => {
                backward_input.memory_s += (act_f * rows * f + clamp_f) / hbm
            }
            _ => {}
        }
        // Expert weight gradients accumulate into their fp32 main gradients like the dense
        // ones (fused epilogue or a kernel of its own).
        let expert_params = self.moe_rank_expert_params_per_layer();
        let acc = self.weight_grad_accumulation_s(expert_params, bwd_w_gemm);
        let backward_weight = Part {
            gemm_s: bwd_w_gemm,
            memory_s: acc,
            ..Part::default()
        };
        // The launches of the whole layer, dense part and experts, bound it from below.
        let local_experts = self.moe_local_experts();
        let moe_kernels = self.moe_kernels(local_experts);
        let kernels = dense_kernels.plus(moe_kernels);
        // CUDA graphs launch what they capture at once (docs/cost-model.md, "CUDA graphs").
        let captured = self.moe_captured_kernels(dense_kernels, moe_kernels, moe.shared_ffn > 0);
        let layer = dense
            .plus(BlockCost {
                forward,
                backward_input,
                backward_weight,
            })
            .floored_launching(kernels, captured, self.hw);
        if self.stack.moe_layer_host_s <= 0.0 {
            return layer;
        }
        // The same layer's kernels without recomputation, which the host time is measured on.
        let layout = Layout {
            recompute: Recompute::None,
            ..self.layout
        };
        // The run the host time was read off graphed its routers and preprocessing
        // (`--cuda-graph-impl transformer_engine --cuda-graph-modules moe_router
        // moe_preprocess`): the time is that of the other kernels, launched one by one.
        let base = CostModel { layout, ..dense_cm }
            .layer_kernels()
            .plus(CostModel { layout, ..*self }.moe_kernels(local_experts));
        let base = base.minus(ROUTER_KERNELS);
        self.with_moe_host_time(layer, kernels.minus(captured), base)
    }

    /// `layer` with the framework's host time for it ([`Stack::moe_layer_host_s`] for the
    /// layer's `base` kernels, scaled by the `kernels` the host runs itself: recomputation
    /// adds some, CUDA graphs take the ones they capture; shared between the forward and the
    /// backward by their kernels): the forward, whose dispatcher waits on the GPU once a layer
    /// for the per-expert token counts, takes `max(H, G) + c min(H, G)` with `c` =
    /// [`MOE_FORWARD_SYNC_LOSS`] (0 when every expert is padded to its capacity or a graph
    /// runs the experts: static shapes, no wait); the backward, which never waits, `max(H, G)`, its wait spread over
    /// the two backward parts by their kernels.
    ///
    /// [`Stack::moe_layer_host_s`]: crate::cost::Stack::moe_layer_host_s
    fn with_moe_host_time(&self, layer: BlockCost, kernels: Kernels, base: Kernels) -> BlockCost {
        let all = kernels.total();
        if all <= 0.0 {
            return layer;
        }
        let host = self.stack.moe_layer_host_s * all / base.total().max(1.0);
        let host_f = host * kernels.forward / all;
        let host_b = host - host_f;
        let gpu_f = layer.forward.total_s();
        let gpu_b = layer.backward_input.total_s() + layer.backward_weight.total_s();
        let mut forward = layer.forward;
        let sync = if self.stack.moe_capacity.is_some_and(|c| c.pad)
            || self.stack.cuda_graphs.captured(true).experts
        {
            0.0
        } else {
            MOE_FORWARD_SYNC_LOSS
        };
        forward.launch_s += (host_f - gpu_f).max(0.0) + sync * host_f.min(gpu_f);
        let wait_b = (host_b - gpu_b).max(0.0);
        let kb = (kernels.backward_input + kernels.backward_weight).max(1.0);
        let add = |mut p: Part, k: f64| {
            p.launch_s += wait_b * k / kb;
            p
        };
        BlockCost {
            forward,
            backward_input: add(layer.backward_input, kernels.backward_input),
            backward_weight: add(layer.backward_weight, kernels.backward_weight),
        }
    }

    /// Whether the routed experts carry biases (GPT-OSS: `arch.add_bias_linear`, which
    /// Megatron-Core's grouped experts accept since core_v0.15.0) that eager PyTorch adds
    /// (no [`Stack::te_op_fuser`](super::Stack::te_op_fuser)).
    pub fn moe_eager_expert_bias(&self) -> bool {
        self.model.moe.is_some()
            && self.model.arch.add_bias_linear == Some(true)
            && !self.stack.te_op_fuser
    }

    /// HBM traffic (forward, backward) of the second expert GEMM's bias on the busiest rank,
    /// for experts with biases that eager PyTorch adds ([`CostModel::moe_eager_expert_bias`]);
    /// zero otherwise (with Transformer Engine's op fuser, [`Stack::te_op_fuser`], the fused
    /// grouped GEMM adds it). The first
    /// GEMM's bias goes into the fused weighted activation; the second's is returned by the
    /// grouped GEMM (`skip_bias_add`) and added weighted by each row's fp32 probability, expert
    /// by expert, in eager PyTorch (`TEGroupedMLP._apply_bias`, experts.py at core_v0.15.0-0.19.0:
    /// `torch.cat([t + b * p ...]).to(dtype)`). Per element of the `R h` output rows: forward
    /// `b * p` writes FP32 (4 bytes), the add reads the BF16 output and that (2 + 4) and writes
    /// FP32 (4), the concatenation reads and writes it (4 + 4), the cast back reads it and writes
    /// BF16 (4 + 2): 28 bytes; backward the cast's gradient (2 + 4), the add's BF16 gradient for
    /// the output (4 + 2), and the product's two gradients, each an FP32 product written and
    /// summed (4 + 4 + 4 for the bias over the rows, the same for the probability over `h`):
    /// 36 bytes.
    ///
    /// [`Stack::te_op_fuser`]: super::Stack::te_op_fuser
    pub fn moe_expert_bias_bytes(&self) -> (f64, f64) {
        if !self.moe_eager_expert_bias() {
            return (0.0, 0.0);
        }
        let elements = self.moe_rank_rows() * self.model.hidden_size as f64;
        (28.0 * elements, 36.0 * elements)
    }

    /// Routed-expert parameters one rank holds per MoE layer: `E/ep` experts, `1/etp` of each.
    pub fn moe_rank_expert_params_per_layer(&self) -> f64 {
        let Some(moe) = &self.model.moe else {
            return 0.0;
        };
        let per_expert = moe.expert_params(self.model.hidden_size, self.model.gated_mlp) as f64;
        self.moe_local_experts() * per_expert / self.etp() as f64
    }

    /// Costs of `n` consecutive layers from layer `first`: dense layers cost [`CostModel::layer`],
    /// MoE layers [`CostModel::moe_layer`], sliding-window layers with their window.
    pub fn layers_block(&self, first: usize, n: usize) -> BlockCost {
        self.layer_kinds().block(self.model, first, n)
    }

    /// The costs of each kind of layer the model has (dense or MoE, full or sliding-window
    /// attention), each computed once.
    pub fn layer_kinds(&self) -> LayerKinds {
        let kind = |moe: bool, sliding: bool| -> BlockCost {
            let mut m = self.model.clone();
            if let Some(w) = m.sliding_window.as_mut() {
                if sliding {
                    w.layers.iter_mut().for_each(|x| *x = true);
                } else {
                    m.sliding_window = None;
                }
            }
            let c = CostModel { model: &m, ..*self };
            if moe {
                c.moe_layer()
            } else {
                c.layer()
            }
        };
        let has_moe = self.model.moe.is_some();
        let has_window = self.model.sliding_window.is_some();
        LayerKinds {
            dense: kind(false, false),
            moe: if has_moe {
                kind(true, false)
            } else {
                BlockCost::default()
            },
            dense_sliding: if has_window {
                kind(false, true)
            } else {
                BlockCost::default()
            },
            moe_sliding: if has_moe && has_window {
                kind(true, true)
            } else {
                BlockCost::default()
            },
        }
    }

    /// Parameters one rank holds for layers `[first, first + n)`.
    pub fn layers_rank_params(&self, first: usize, n: usize) -> RankParams {
        let k = self
            .model
            .moe
            .as_ref()
            .map_or(0, |moe| moe.count_in(first, n));
        self.rank_params_of(n as u64 - k, k)
    }

    /// Parameters one rank holds for `dense` dense layers and `moe` MoE layers.
    pub fn rank_params_of(&self, dense: u64, moe_layers: u64) -> RankParams {
        self.layer_params_per_kind().rank(dense, moe_layers)
    }

    /// Each kind of layer's parameters, from which [`LayerParams::rank`] sums a run's.
    pub fn layer_params_per_kind(&self) -> LayerParams {
        let dense = self.model.params_per_layer();
        let Some(moe) = &self.model.moe else {
            return LayerParams {
                dense,
                moe_dense: 0,
                expert_per_layer: 0.0,
                tp: self.layout.tp,
                is_moe: false,
            };
        };
        let h = self.model.hidden_size;
        LayerParams {
            dense,
            moe_dense: self.model.attention_params()
                + moe.shared_params(h, self.model.gated_mlp)
                + moe.router_params(h)
                + 4 * h,
            expert_per_layer: self.moe_rank_expert_params_per_layer(),
            tp: self.layout.tp,
            is_moe: true,
        }
    }

    /// Forward FLOPs of all layers for one micro-batch (all ranks), MoE layers counting the
    /// top-k experts each token uses (not the imbalance): the FLOPs MFU is computed from.
    pub fn all_layers_forward_flops(&self) -> f64 {
        let l = self.model.num_layers as f64;
        let Some(moe) = &self.model.moe else {
            return l * self.layer_forward_flops();
        };
        let dense_model = self.moe_dense_part_model();
        let moe_dense = CostModel {
            model: &dense_model,
            ..*self
        }
        .layer_forward_flops();
        let k = moe.num_moe_layers() as f64;
        k * (moe_dense + self.moe_routed_forward_flops()) + (l - k) * self.layer_forward_flops()
    }

    /// Forward FLOPs of layer `i` for one micro-batch (all ranks): a dense layer's, or a MoE
    /// layer's dense part and the top-k experts each token uses.
    pub fn layer_forward_flops_of(&self, i: usize) -> f64 {
        if !self.model.is_moe_layer(i) {
            return self.layer_forward_flops();
        }
        let dense_model = self.moe_dense_part_model();
        CostModel {
            model: &dense_model,
            ..*self
        }
        .layer_forward_flops()
            + self.moe_routed_forward_flops()
    }

    /// The share of the model FLOPs (all layers, the multi-token prediction depths and the
    /// logits, attention core counted whole, pplan's `model_tflops_per_gpu` convention) that
    /// remains when the attention core is counted causally instead: half of
    /// [`CostModel::attention_core_flops`] in every layer dropped. Converts a predicted model
    /// TFLOP/s into the other convention.
    pub fn causal_model_flops_fraction(&self) -> f64 {
        let full =
            self.all_layers_forward_flops() + self.logit_forward_flops() + self.mtp_forward_flops();
        let layers = (self.model.num_layers + self.model.mtp_layers) as f64;
        let half_attention = 0.5 * self.attention_core_flops() * layers;
        (full - half_attention) / full
    }

    /// Forward FLOPs of one MoE layer's router and routed experts for one micro-batch, all
    /// ranks: every token's top-k experts (not the imbalance) and its router scores.
    fn moe_routed_forward_flops(&self) -> f64 {
        let Some(moe) = &self.model.moe else {
            return 0.0;
        };
        let (b, s) = (self.layout.micro_batch as f64, self.model.seq_len as f64);
        let h = self.model.hidden_size as f64;
        let mats = if self.model.gated_mlp { 3.0 } else { 2.0 };
        b * s
            * 2.0
            * (moe.top_k as f64 * mats * h * moe.expert_ffn as f64 + h * moe.num_experts as f64)
    }

    /// Working memory of rebuilding one MoE layer's routed activations before its backward
    /// (`selective-norm-moe`): what [`CostModel::moe_layer_activation_bytes`] keeps without
    /// the module; zero otherwise.
    pub fn moe_recompute_working_bytes(&self) -> u64 {
        if self.layout.recompute != Recompute::NormMoe || self.model.moe.is_none() {
            return 0;
        }
        let (kept, act) = self.moe_routed_activation_bytes();
        (kept + act).ceil() as u64
    }

    /// Activations of one MoE layer's routed rows on the busiest rank, in bytes: (the
    /// dispatched input, `e h` per row, the up-projection output, 2 x (2) f_e/etp, and the
    /// row's routing probability, 4; the activation output, `e f_e/etp` per row), `e` the
    /// bytes of a linear layer's saved input in the stack's precision.
    fn moe_routed_activation_bytes(&self) -> (f64, f64) {
        let h = self.model.hidden_size as f64;
        let [up, down] = self.moe_expert_gemms();
        let rows = self.moe_rank_rows();
        // The two expert GEMMs' inputs are kept as Transformer Engine casts them for the GEMM
        // (`e` bytes an element: 2 in BF16, 1 in FP8, as the dense layers' linear inputs);
        // the first GEMM's output in BF16 and the row's fp32 probability, which the fused
        // weighted activation keeps: Megatron-Core (since core_v0.13.0, `TEGroupedMLP`,
        // `weighted_bias_swiglu_impl`) multiplies the probabilities in there, so the second
        // GEMM's output is not kept for their gradient and the un-permutation keeps only its
        // indices. `down.k` is the expert's hidden width on this rank, f_e / etp.
        // The activation's input in 16 bits, or cast to FP8 with
        // `--activation-func-fp8-input-store` (`weighted_bias_swiglu_impl`'s `fp8_input_store`).
        let d = self.act_dims();
        let e = d.input_32ths as f64 / 32.0;
        let a = d.act_input_32ths as f64 / 32.0;
        (
            rows * (e * h + a * up.n + MOE_PROB_BYTES),
            rows * e * down.k,
        )
    }

    /// Forward FLOPs of the routed part of the MoE blocks (router and routed experts) of all
    /// MoE layers for one micro-batch, all ranks: what `--recompute selective-norm-moe` runs
    /// again in pplan (shared experts, which pplan costs with the layer's dense part, are not
    /// counted as recomputed).
    pub fn moe_blocks_forward_flops(&self) -> f64 {
        let layers = self.model.moe.as_ref().map_or(0, |m| m.num_moe_layers());
        layers as f64 * self.moe_routed_forward_flops()
    }

    /// An all-reduce of `bytes` per rank over the expert data-parallel group (`edp` ranks,
    /// `ep x etp` apart): hierarchical when several share an NVLink domain, else a ring over
    /// the NICs. Zero with one member.
    fn expert_all_reduce_s(&self, bytes: f64) -> f64 {
        let edp = self.expert_dp();
        if edp <= 1 || bytes <= 0.0 {
            return 0.0;
        }
        let stride = self.ep() * self.etp();
        let per_domain = ranks_per_nvlink_domain(self.hw, self.layout.tp);
        let local = if stride >= per_domain {
            1
        } else {
            (per_domain / stride).clamp(1, edp)
        };
        let span_nodes = (stride * edp).div_ceil(self.hw.node.gpus_per_node as u64);
        let leaves = span_nodes > self.hw.network.nodes_per_leaf_switch as u64;
        self.hierarchical_all_reduce_s(bytes, edp, local, leaves)
    }

    /// The distributed optimizer's all-gather of a rank's `params` updated expert parameters
    /// over the expert data-parallel group (their 16-bit weights, half an all-reduce).
    pub fn expert_param_gather_s(&self, params: f64) -> f64 {
        self.expert_all_reduce_s(params * self.stack.param_gather_bytes_per_param()) / 2.0
    }

    /// What of the expert gradients' reduction over the expert data-parallel group stays in
    /// the step, as for the dense gradients (`step_grad_reduce_s`): replicated, the
    /// all-reduce; ZeRO-1, its reduce-scatter and all-gather halves, the all-gather only
    /// without `--overlap-param-gather`; ZeRO-2, the all-gather the same way (the gradients
    /// were reduce-scattered layer by layer, [`Self::expert_sharded_layer_comm_s`]);
    /// ZeRO-3, nothing.
    pub fn expert_grad_reduce_s(&self, params: f64) -> f64 {
        let full = self.expert_all_reduce_s(params * self.stack.grad_reduce_bytes_per_param);
        let gather = if self.stack.overlap_param_gather {
            0.0
        } else {
            full / 2.0
        };
        match self.stack.zero {
            Zero::Off => full,
            Zero::Optimizer => full / 2.0 + gather,
            Zero::Gradients => gather,
            Zero::Full => 0.0,
        }
    }

    /// Per MoE layer and micro-batch with sharded expert gradients (ZeRO-2) or weights too
    /// (ZeRO-3), for a rank's `params` expert parameters of the layer: (the all-gather of
    /// their 16-bit weights over the expert data-parallel group, the reduce-scatter of their
    /// gradients over it), each half an all-reduce. Zero below ZeRO-2. Experts are sharded
    /// over their own group, `t cp d / (ep etp)` ranks (Megatron-Core's expert data-parallel
    /// group, which its distributed optimizer and Megatron-FSDP shard expert state over).
    pub fn expert_sharded_layer_comm_s(&self, params: f64) -> (f64, f64) {
        if !self.stack.zero.shards_gradients() {
            return (0.0, 0.0);
        }
        (
            self.expert_all_reduce_s(params * 2.0) / 2.0,
            self.expert_all_reduce_s(params * self.stack.grad_reduce_bytes_per_param) / 2.0,
        )
    }

    /// The optimizer step over a rank's expert parameters; ZeRO-1 shards it over the expert
    /// data-parallel group.
    pub fn expert_optimizer_s(&self, params: f64) -> f64 {
        let shard = if self.stack.zero.shards_optimizer() {
            self.expert_dp() as f64
        } else {
            1.0
        };
        params * self.stack.optimizer_bytes_per_param / shard / self.hw.hbm_bytes_per_s()
    }

    /// Weights (with their low-precision copies), gradients and optimizer state of a rank's
    /// expert parameters, sharded over the expert data-parallel group as deep as the ZeRO
    /// stage says.
    pub fn expert_state_bytes(&self, params: f64) -> u64 {
        let (w, g, o) = memory::model_state_parts(
            params.ceil() as u64,
            self.expert_dp(),
            self.stack.zero,
            self.stack.state_bytes(self.hw),
        );
        w.saturating_add(g).saturating_add(o)
    }

    /// Activations of one MoE layer for one micro-batch on the busiest rank, given a dense
    /// layer's (`dense_layer_bytes`, whose MLP keeps `memory::mlp_intermediate_bytes` of
    /// intermediates for its `ffn_hidden_size`-wide hidden layer): those intermediates
    /// replaced by the routed rows' permuted input and combined output (2 x 2 h bytes), the
    /// experts' up-projection and activation outputs (2 x (2) f_e/etp and 2 f_e/etp bytes per
    /// row), and the shared experts' (the same per token, `/t`). Unchanged with full
    /// recompute (only the layer input is kept).
    /// With `selective-norm-act` the experts' activation outputs (`2 f_e/etp` bytes per row)
    /// are not kept; with `selective-norm-moe` nothing of the routed part is but the
    /// checkpoint's input, the pre-MLP norm output (`2 sbh / t`, which the `layernorm` module
    /// would otherwise drop).
    pub fn moe_layer_activation_bytes(&self, dense_layer_bytes: u64) -> u64 {
        let Some(moe) = &self.model.moe else {
            return dense_layer_bytes;
        };
        if self.layout.recompute == Recompute::Full {
            return dense_layer_bytes;
        }
        let (b, s, h, _, _, t, _) = self.dims();
        let sbh = s * b * h;
        let (kept, act) = self.moe_routed_activation_bytes();
        let routed = match self.layout.recompute {
            Recompute::NormMoe => 2.0 * sbh / t,
            r if r.recomputes_moe_act() => kept,
            // With a clamped activation's eager clamps, their input too.
            _ => kept + act + self.moe_clamp_saved_bytes(),
        };
        let fs = moe.shared_ffn as f64 / t;
        let up_s = if self.model.gated_mlp { 2.0 * fs } else { fs };
        let shared = b * s * (2.0 * up_s + 2.0 * fs);
        // `dense_layer_bytes` is a dense layer's under the same recomputation: with `mlp` its
        // MLP intermediates are already left out (and a MoE layer keeps its own).
        let dense_mlp = match self.layout.recompute {
            Recompute::Mlp | Recompute::MlaUpProjMlp => 0.0,
            _ => memory::mlp_intermediate_bytes(self.act_dims(), self.stack.attention) as f64,
        };
        let bytes = dense_layer_bytes as f64 - dense_mlp + routed + shared;
        bytes.max(0.0).ceil() as u64
    }
}
