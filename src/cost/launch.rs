//! Kernel launches: a layer's work on the GPU cannot finish sooner than the host can launch
//! its kernels (docs/cost-model.md, "Kernel launches"). Each part of a layer (forward,
//! input-gradient backward with its recomputation, weight-gradient backward) launches a
//! counted number of kernels, each costing the host [`Hardware::kernel_launch_s`]; where the
//! part's GPU time is shorter than that, the GPU waits for the launches
//! ([`Part::launch_s`]). With large GEMMs it never binds; with small shards, short sequences
//! and small micro-batches it does. Where the GPU is the bound, each kernel still waits
//! [`Hardware::kernel_gap_s`] behind the one before it (measured on H100: 1.0-1.8 us).
//!
//! [`Hardware::kernel_launch_s`]: crate::inputs::hardware::Hardware::kernel_launch_s
//! [`Hardware::kernel_gap_s`]: crate::inputs::hardware::Hardware::kernel_gap_s

use super::compute::{BlockCost, Part};
use super::stack::{Attention, CostModel, Recompute};
use crate::inputs::hardware::Hardware;

/// A MoE router's kernels: GEMM, score function and top-k each way, its weight gradient
/// ([`CostModel::moe_kernels`]).
pub const ROUTER_KERNELS: Kernels = Kernels {
    forward: 3.0,
    backward_input: 3.0,
    backward_weight: 1.0,
};

/// Kernels launched by each part of a block, for one micro-batch on one rank.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Kernels {
    pub forward: f64,
    pub backward_input: f64,
    pub backward_weight: f64,
}

impl Kernels {
    pub fn plus(self, o: Kernels) -> Kernels {
        Kernels {
            forward: self.forward + o.forward,
            backward_input: self.backward_input + o.backward_input,
            backward_weight: self.backward_weight + o.backward_weight,
        }
    }

    pub fn minus(self, o: Kernels) -> Kernels {
        Kernels {
            forward: self.forward - o.forward,
            backward_input: self.backward_input - o.backward_input,
            backward_weight: self.backward_weight - o.backward_weight,
        }
    }

    pub fn scaled(self, f: f64) -> Kernels {
        Kernels {
            forward: self.forward * f,
            backward_input: self.backward_input * f,
            backward_weight: self.backward_weight * f,
        }
    }

    pub fn total(self) -> f64 {
        self.forward + self.backward_input + self.backward_weight
    }

    /// What the host launches one by one when a CUDA graph runs `captured` of these kernels:
    /// the others, and one graph launch for each part that has captured kernels.
    pub fn launched_with_graph(self, captured: Kernels) -> Kernels {
        let one = |all: f64, c: f64| {
            let c = c.min(all);
            all - c + if c > 0.0 { 1.0 } else { 0.0 }
        };
        Kernels {
            forward: one(self.forward, captured.forward),
            backward_input: one(self.backward_input, captured.backward_input),
            backward_weight: one(self.backward_weight, captured.backward_weight),
        }
    }
}

impl Part {
    /// This part with its GPU's idle time between its `kernels` set: each kernel waits
    /// `gap_s` behind the one before it on the GPU (queued back to back), or, when launching
    /// takes longer, for the host's `launch_s` a launch: `max(n launch, busy + n gap) - busy`
    /// (any earlier value is replaced, so flooring twice is flooring once).
    pub fn floored(self, kernels: f64, launch_s: f64, gap_s: f64) -> Part {
        self.floored_launching(kernels * launch_s, kernels * gap_s)
    }

    /// [`Part::floored`] with the host's launches taking `launches_s` and the GPU's waits
    /// between the kernels `gaps_s` in all: `max(launches, busy + gaps) - busy`.
    pub fn floored_launching(self, launches_s: f64, gaps_s: f64) -> Part {
        let busy = self.gemm_s + self.memory_s + self.tp_comm_s + self.cp_comm_s;
        Part {
            launch_s: launches_s.max(busy + gaps_s) - busy,
            ..self
        }
    }
}

impl BlockCost {
    /// Each part floored by its kernels ([`Part::floored`]) on `hw`'s launch time and gap.
    pub fn floored(self, k: Kernels, hw: &Hardware) -> BlockCost {
        self.floored_launching(k, Kernels::default(), hw)
    }

    /// [`BlockCost::floored`] where a CUDA graph runs `captured` of the kernels: the host
    /// launches the others one by one and each graph once ([`Kernels::launched_with_graph`]);
    /// a captured kernel waits [`Hardware::graph_kernel_gap_s`] behind the one before it, the
    /// others [`Hardware::kernel_gap_s`] ([`Part::floored_launching`]).
    pub fn floored_launching(self, k: Kernels, captured: Kernels, hw: &Hardware) -> BlockCost {
        let launched = k.launched_with_graph(captured);
        let (launch, gap, graph_gap) = (
            hw.kernel_launch_s(),
            hw.kernel_gap_s(),
            hw.graph_kernel_gap_s(),
        );
        let floor = |p: Part, all: f64, c: f64, n: f64| {
            let c = c.min(all);
            p.floored_launching(n * launch, (all - c) * gap + c * graph_gap)
        };
        BlockCost {
            forward: floor(self.forward, k.forward, captured.forward, launched.forward),
            backward_input: floor(
                self.backward_input,
                k.backward_input,
                captured.backward_input,
                launched.backward_input,
            ),
            backward_weight: floor(
                self.backward_weight,
                k.backward_weight,
                captured.backward_weight,
                launched.backward_weight,
            ),
        }
    }
}

impl CostModel<'_> {
    /// The kernels one transformer layer launches (docs/cost-model.md, "Kernel launches").
    /// Fused (Megatron-Core with Transformer Engine): forward 2 norms, 4 linear GEMMs, the
    /// attention core (flash 1; unfused: 2 GEMMs, softmax, and dropout when the model has
    /// it), 2 bias(-dropout)-adds, the activation; input-gradient backward the same kernels'
    /// backward (unfused core: 4 GEMMs, softmax, dropout); weight gradients 4 GEMMs, and 4
    /// accumulation kernels unless fused into them. Eager (torchtitan): RMSNorm 6 kernels, 7
    /// linear GEMMs (wq, wk, wv, wo, w1, w3, w2), rotary embedding 3 for each of q and k,
    /// 2 residual adds, SwiGLU 2 (forward) and 4 (backward), RMSNorm's backward 8. Tensor
    /// parallelism adds its collectives (2 all-reduces a direction; with sequence
    /// parallelism 2 all-gathers and 2 reduce-scatters forward, 6 collectives backward), low
    /// precision its casts (2 forward, 4 backward; more with current or block scaling:
    /// `CostModel::cast_kernels`); recomputation adds what it re-runs. A
    /// model part without an MLP (a MoE layer's dense part) launches none of the MLP's.
    pub fn layer_kernels(&self) -> Kernels {
        let t = self.layout.tp;
        let sp = self.layout.sequence_parallel;
        let dropout = f64::from(u8::from(self.model.dropout));
        let flash = self.stack.attention == Attention::Flash;
        let (tp_f, tp_b) = match (t > 1, sp) {
            (false, _) => (0.0, 0.0),
            (true, false) => (2.0, 2.0),
            (true, true) => (4.0, 6.0),
        };
        let (cast_f, cast_b) = self.cast_kernels();
        let (core_f, core_b) = if flash {
            (1.0, 1.0)
        } else {
            (3.0 + dropout, 5.0 + dropout)
        };
        let (forward, backward, weight, elementwise_f) = if self.stack.fused_kernels {
            // YaRN's eager rotary embedding (`cost::eager`), where it cannot be fused.
            let (rope_f, rope_b) = self.unfused_rope_kernels();
            let elementwise = 2.0 + 2.0 + 1.0 + rope_f;
            (
                4.0 + core_f + elementwise + tp_f + cast_f,
                4.0 + core_b + 2.0 + 2.0 + 1.0 + rope_b + tp_b + cast_b,
                4.0 + if self.stack.grad_accumulation_fusion {
                    0.0
                } else {
                    4.0
                },
                elementwise,
            )
        } else {
            let elementwise = 2.0 * 6.0 + 2.0 * 3.0 + 2.0 + 2.0;
            (
                7.0 + core_f + elementwise + tp_f + cast_f,
                7.0 + core_b + 2.0 * 8.0 + 2.0 * 3.0 + 2.0 + 4.0 + tp_b + cast_b,
                7.0,
                elementwise,
            )
        };
        // A MoE layer's dense part without shared experts has no MLP: 2 GEMMs and the
        // activation fewer each way, 2 weight-gradient GEMMs (and their accumulations) fewer.
        let (forward, backward, weight) = if self.model.ffn_hidden_size == 0 {
            let acc = if self.stack.fused_kernels && !self.stack.grad_accumulation_fusion {
                2.0
            } else {
                0.0
            };
            (forward - 3.0, backward - 3.0, weight - 2.0 - acc)
        } else {
            (forward, backward, weight)
        };
        let recompute = match self.layout.recompute {
            Recompute::None => 0.0,
            Recompute::Selective => core_f,
            Recompute::Full => forward,
            Recompute::SelectiveOp => elementwise_f + 2.0,
            Recompute::NormAct | Recompute::NormMoe => 2.0,
            Recompute::SelectiveLayer => forward / 2.0,
            // The two up-projection GEMMs and the rotary embedding's kernel.
            Recompute::MlaUpProj => 3.0,
            // The MLP's two GEMMs, its activation and half the layer's TP collectives.
            Recompute::Mlp => 3.0 + tp_f / 2.0,
            // Two modules: each one's kernels.
            Recompute::NormMlaUpProj | Recompute::NormActMlaUpProj => 2.0 + 3.0,
            Recompute::MlaUpProjMlp => 3.0 + 3.0 + tp_f / 2.0,
        };
        Kernels {
            forward,
            backward_input: backward + recompute,
            backward_weight: weight,
        }
    }

    /// What CUDA graphs capture of a dense layer's `kernels` (docs/cost-model.md, "CUDA
    /// graphs"): a graph of the attention block or of the MLP block takes about half of them
    /// each (fused forward: norm, 2 GEMMs, the core, the residual add against norm, 2 GEMMs,
    /// the activation, the residual add), and is launched once.
    pub fn layer_captured_kernels(&self, kernels: Kernels) -> Kernels {
        let c = self.stack.cuda_graphs.captured(false);
        let share = 0.5 * f64::from(u8::from(c.attention)) + 0.5 * f64::from(u8::from(c.mlp));
        kernels.scaled(share)
    }

    /// The kernels of a MoE layer (`dense` its attention block and shared experts, `moe` the
    /// rest, [`CostModel::moe_kernels`]) that its CUDA graphs capture: the attention block
    /// (all of `dense`, or half with shared experts); the router (3 kernels forward and
    /// backward, its weight gradient) with the shared experts (Megatron-Core's `moe_router`
    /// region holds them when they are not overlapped); the dispatch, permutation, experts and
    /// combine (`moe`, padded layers only). The preprocessing region launches no kernel pplan
    /// counts: what capturing it removes is the host's work, counted with the router's.
    pub fn moe_captured_kernels(&self, dense: Kernels, moe: Kernels, shared: bool) -> Kernels {
        let c = self.stack.cuda_graphs.captured(true);
        let mut out = Kernels::default();
        let attn_share = if shared { 0.5 } else { 1.0 };
        if c.attention {
            out = out.plus(dense.scaled(attn_share));
        }
        if c.router {
            out = out.plus(ROUTER_KERNELS);
            if shared {
                out = out.plus(dense.scaled(0.5));
            }
        }
        if c.experts {
            out = out.plus(moe.minus(ROUTER_KERNELS));
        }
        out
    }

    /// The kernels a MoE layer launches beyond its dense part: the router (GEMM, softmax
    /// and top-k: 3), the permutation and un-permutation (2), the dispatch and combine
    /// all-to-alls (2), the activation (1) and one GEMM per local expert for each of the two
    /// expert matrices (Transformer Engine's grouped linear layer: a GEMM per expert), and in
    /// a low precision the casts of their operands ([`CostModel::moe_cast_kernels`]), and with
    /// expert biases the second GEMM's bias added expert by expert;
    /// backward the same kernels' backward (each GEMM twice), and the expert weight-gradient
    /// GEMMs. Recomputation that repeats the MoE block (full, `selective-norm-moe`) repeats
    /// its forward; `selective-norm-act` its activation.
    pub fn moe_kernels(&self, local_experts: f64) -> Kernels {
        let gemms = 2.0 * local_experts;
        let (cast_f, cast_b) = self.moe_cast_kernels(local_experts);
        // Experts with biases add the second GEMM's bias expert by expert
        // (`CostModel::moe_expert_bias_bytes`): a product and an add each, the concatenation
        // and the cast back; backward the cast's and the add's gradients, and a product and a
        // sum for each of the bias's and the probabilities' gradients.
        let (bias_f, bias_b) = if self.moe_eager_expert_bias() {
            (2.0 * local_experts + 2.0, 5.0 * local_experts + 1.0)
        } else {
            (0.0, 0.0)
        };
        // A clamped activation's eager clamps (`cost::eager`).
        let (clamp_f, clamp_b) = self.moe_clamp_kernels();
        let forward = 3.0 + 2.0 + 2.0 + 1.0 + gemms + cast_f + bias_f + clamp_f;
        let recompute = match self.layout.recompute {
            Recompute::Full | Recompute::NormMoe => forward,
            // The `moe_act` module: the activation kernel, and a clamped one's clamps.
            r if r.recomputes_moe_act() => 1.0 + clamp_f,
            _ => 0.0,
        };
        Kernels {
            forward,
            backward_input: 3.0 + 2.0 + 2.0 + 1.0 + gemms + cast_b + bias_b + clamp_b + recompute,
            backward_weight: 1.0 + gemms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{Layout, Stack};
    use crate::inputs::{Hardware, Model};

    /// GPT 1.7B on one GPU, no tensor parallelism (no collectives), Megatron-Core's stack.
    fn layer(seq: u64, micro_batch: u64) -> (BlockCost, Kernels, Hardware) {
        // Without the GEMM latency floor, which at 16 tokens makes the four GEMMs alone
        // outlast the launches: these tests look at the launch floor by itself.
        let mut hw = Hardware::bundled("h100-80gb").unwrap();
        hw.gpu.gemm_latency_s = None;
        // A small layer (hidden 512): its weights stream in about 2 us.
        let mut m = Model::preset("gpt-1.7b").unwrap();
        (
            m.hidden_size,
            m.num_heads,
            m.num_kv_heads,
            m.ffn_hidden_size,
        ) = (512, 8, 8, 2048);
        m.seq_len = seq;
        let cm = CostModel {
            model: &m,
            hw: &hw,
            layout: Layout {
                micro_batch,
                ..Layout::tensor_parallel(1)
            },
            stack: Stack::megatron_core(),
        };
        let (b, k) = (cm.layer(), cm.layer_kernels());
        (b, k, hw)
    }

    #[test]
    fn launches_bound_small_layers_and_leave_large_ones() {
        // 2 norms, 4 GEMMs, flash attention, 2 adds and the activation each way; the weight
        // gradients' 4 GEMMs (accumulation fused).
        let (b, k, hw) = layer(16, 1);
        let l = hw.kernel_launch_s();
        assert_eq!(
            (k.forward, k.backward_input, k.backward_weight),
            (10.0, 10.0, 4.0)
        );
        // On 16 tokens the forward's kernels have less than the 3.1 us launch of work with
        // the gap before each: it takes what its launches take. Every part takes the longer
        // of its launches and its kernels with their gaps.
        let gap = hw.kernel_gap_s();
        let busy = |p: Part| p.total_s() - p.launch_s;
        assert!(busy(b.forward) + k.forward * gap < k.forward * l);
        assert!((b.forward.total_s() - k.forward * l).abs() < 1e-15);
        for (p, n) in [
            (b.backward_input, k.backward_input),
            (b.backward_weight, k.backward_weight),
        ] {
            let want = (n * l).max(busy(p) + n * gap);
            assert!(
                (p.total_s() - want).abs() < 1e-15,
                "{} vs {want}",
                p.total_s()
            );
        }
        // At 2048 tokens and 4 sequences the GEMMs dwarf the launches: the GPU waits only
        // the gap between its kernels, once a kernel.
        let (b, k, hw) = layer(2048, 4);
        let gap = hw.kernel_gap_s();
        assert!(gap > 0.0);
        let idle = [b.forward, b.backward_input, b.backward_weight].map(|p| p.launch_s);
        let want = [k.forward, k.backward_input, k.backward_weight].map(|n| n * gap);
        for (i, w) in idle.iter().zip(want) {
            assert!((i - w).abs() < 1e-15, "{i} vs {w}");
        }
    }

    /// Kernels a CUDA graph captures wait the graph's gap (measured: 0.17 us on H100), the
    /// others the stream's (1.5 us); the host launches the others and each graph once.
    #[test]
    fn captured_kernels_wait_the_graphs_gap() {
        let (b, k, hw) = layer(2048, 4);
        let (gap, in_graph) = (hw.kernel_gap_s(), hw.graph_kernel_gap_s());
        assert!(in_graph > 0.0 && in_graph < 0.2 * gap);
        let half = k.scaled(0.5);
        let floored = b.floored_launching(k, half, &hw);
        for (p, n) in [
            (floored.forward, k.forward),
            (floored.backward_input, k.backward_input),
            (floored.backward_weight, k.backward_weight),
        ] {
            let want = n / 2.0 * gap + n / 2.0 * in_graph;
            assert!(
                (p.launch_s - want).abs() < 1e-15,
                "{} vs {want}",
                p.launch_s
            );
        }
        // Nothing captured: the stream's gap for every kernel.
        assert_eq!(
            b.floored_launching(k, Kernels::default(), &hw),
            b.floored(k, &hw)
        );
    }

    #[test]
    fn flooring_twice_is_flooring_once() {
        let (b, k, hw) = layer(16, 1);
        assert_eq!(b.floored(k, &hw), b);
        // With no launch cost and no gap nothing is added.
        assert_eq!(b.forward.floored(k.forward, 0.0, 0.0).launch_s, 0.0);
    }
}
