//! Multi-token prediction (MTP): what one prediction depth costs, as Megatron-Core runs it
//! (`MultiTokenPredictionLayer` and `process_mtp_loss`, megatron/core/transformer/
//! multi_token_prediction.py at NVIDIA/Megatron-LM d98e8a64; the DeepSeek-V3 technical report,
//! arXiv 2412.19437, Sec. 2.2). Depth k embeds the tokens shifted by k with the model's
//! embedding (built again on the stage that holds the MTP block), normalises that embedding
//! (`enorm`) and the previous depth's hidden state (`hnorm`), concatenates them and projects
//! `[2h -> h]` (`eh_proj`, column-parallel over t, its output gathered), runs one transformer
//! layer of the model's kind, a final norm, the model's output layer (the logits over the
//! vocabulary) and its own cross-entropy, scaled by `--mtp-loss-scaling-factor` (which changes
//! no cost). The transformer layer is costed as the decoder's last layer is
//! ([`CostModel::layer`] / [`CostModel::moe_layer`], all-to-all and experts included), the
//! lookup as the first stage's [`CostModel::embedding`], the final norm, logits and loss as
//! [`CostModel::output_layer`]; this file adds what only a depth has: the two norms, the
//! concatenation and the projection. Formulas: docs/cost-model.md, "Multi-token prediction".

use super::compute::{gemm_time_in_s, BlockCost, Gemm, Part};
use super::launch::Kernels;
use super::stack::{CostModel, Recompute};
use crate::inputs::hardware::Precision;

impl CostModel<'_> {
    /// The projection `eh_proj` of one depth on one rank: `b s` tokens, `2h` inputs, `h / t`
    /// outputs (column-parallel).
    pub fn mtp_projection_gemm(&self) -> Gemm {
        let (b, s, h, _, _, t, _) = self.dims();
        Gemm {
            m: b * s,
            n: h / t,
            k: 2.0 * h,
            batch: 1.0,
        }
    }

    /// Forward FLOPs of one depth's projection for one micro-batch, all ranks: `2 b s (2h) h`.
    pub fn mtp_projection_forward_flops(&self) -> f64 {
        self.mtp_projection_gemm().flops() * (self.layout.tp * self.layout.cp.max(1)) as f64
    }

    /// Forward FLOPs of every depth for one micro-batch, all ranks: the transformer layer
    /// (the last layer's kind: [`CostModel::layer_forward_flops_of`]), the projection and the
    /// logits ([`CostModel::logit_forward_flops`]) of each. 0 without MTP. Megatron-LM's
    /// `num_floating_point_operations` (megatron/training/training.py at d98e8a64) and
    /// Megatron-Bridge's (`flop_utils.py`) count the same: one more layer of the last layer's
    /// kind, `eh_proj`, and one more logit GEMM per depth.
    pub fn mtp_forward_flops(&self) -> f64 {
        let n = self.model.mtp_layers as f64;
        if n == 0.0 {
            return 0.0;
        }
        n * (self.layer_forward_flops_of(self.model.last_layer())
            + self.mtp_projection_forward_flops()
            + self.logit_forward_flops())
    }

    /// One depth's projection for one micro-batch on one rank: `enorm` and `hnorm` (a norm's
    /// HBM traffic each, as a layer's two), the concatenation (read 2 x 2 sbh, write 4 sbh;
    /// its backward splits the gradient alike), the `eh_proj` GEMMs in the stack's precision
    /// with their gradient accumulation, and its tensor-parallel collectives: the input's
    /// gradient all-reduced (sequence parallel: the input all-gathered and its gradient
    /// reduce-scattered, 4 sbh bytes each) and the `h / t`-wide output gathered (2 sbh bytes).
    /// Under full recomputation Megatron-Core checkpoints the depth's projection and layer
    /// together: the projection's forward runs again before its backward.
    pub fn mtp_projection(&self) -> BlockCost {
        let hbm = self.hw.hbm_bytes_per_s();
        let g = self.mtp_projection_gemm();
        let lin = |g: &Gemm| gemm_time_in_s(self.hw, g, self.stack.precision);
        // Transformer Engine's FP8 gradient GEMMs with the split accumulator, as the layers'.
        let split = match self.stack.precision {
            Precision::Fp8 => self.hw.gpu.fp8_split_accumulator_slowdown.unwrap_or(1.0),
            _ => 1.0,
        };
        let sbh = self.sbh_per_rank();
        let (norm_f, norm_b) = self.norm_bytes();
        let (b, s, h, ..) = self.dims();
        let full_sbh = b * s * h;
        // A half all-reduce: a ring all-gather or reduce-scatter of the same bytes.
        let gather = |bytes: f64| self.tp_all_reduce_s(bytes) / 2.0;
        let (fwd_tp, bwd_tp) = if self.layout.sequence_parallel {
            (
                gather(2.0 * full_sbh) + gather(4.0 * full_sbh),
                gather(4.0 * full_sbh),
            )
        } else {
            (gather(2.0 * full_sbh), self.tp_all_reduce_s(4.0 * full_sbh))
        };
        let forward = Part {
            gemm_s: lin(&g),
            memory_s: (2.0 * norm_f + 8.0) * sbh / hbm,
            tp_comm_s: fwd_tp,
            ..Part::default()
        };
        let recompute = if self.layout.recompute == Recompute::Full {
            forward
        } else {
            Part::default()
        };
        let wgrad_s = lin(&g.weight_grad()) * split;
        let params = self.model.mtp_projection_params() as f64 / self.layout.tp as f64;
        let tp_kernels = f64::from(u8::from(self.layout.tp > 1));
        BlockCost {
            forward,
            backward_input: Part {
                gemm_s: lin(&g.input_grad()) * split,
                memory_s: (2.0 * norm_b + 8.0) * sbh / hbm,
                tp_comm_s: bwd_tp,
                ..Part::default()
            }
            .plus(recompute),
            backward_weight: Part {
                gemm_s: wgrad_s,
                memory_s: self.weight_grad_accumulation_s(params, wgrad_s),
                ..Part::default()
            },
        }
        // Two norms, the concatenation and the GEMM each way (and the collectives); the
        // weight-gradient GEMM and its accumulation.
        .floored(
            Kernels {
                forward: 4.0 + 2.0 * tp_kernels,
                backward_input: 4.0 + tp_kernels,
                backward_weight: 2.0,
            },
            self.hw,
        )
    }

    /// One whole depth on the stage that holds the MTP block, for one micro-batch on one rank:
    /// the lookup of the shifted tokens ([`CostModel::embedding`]), the projection
    /// ([`CostModel::mtp_projection`]) and `layer`, the decoder's last layer as the caller
    /// costed it. The output layer and loss of the depth run on the last stage with the
    /// model's own (Megatron-Core computes every depth's logits in `process_mtp_loss` on the
    /// post-process stage): [`CostModel::output_layer`] once more per depth there.
    pub fn mtp_depth(&self, layer: BlockCost) -> BlockCost {
        self.embedding().plus(self.mtp_projection()).plus(layer)
    }

    /// Activation bytes one depth keeps for one micro-batch besides its transformer layer's:
    /// the projection's saved input (the `2h`-wide concatenation in the stack's precision,
    /// the sequence shard with sequence parallelism), the two norms' 16-bit inputs, and the
    /// embedding's dropout mask ([`super::memory::embedding_activation_bytes`]). Under full
    /// recomputation only the depth's two 16-bit inputs.
    pub fn mtp_projection_activation_bytes(&self) -> u64 {
        let sbh = self.sbh_per_rank();
        let e = self.act_dims().input_32ths as f64 / 32.0;
        let kept = if self.layout.recompute == Recompute::Full {
            4.0 * sbh
        } else {
            (2.0 * e + 4.0) * sbh
        };
        let embedding = super::memory::embedding_activation_bytes(
            self.act_dims(),
            self.layout.sequence_parallel,
        );
        (kept.ceil() as u64).saturating_add(embedding)
    }

    /// What the depths add to the stage that holds them, for one micro-batch on one rank,
    /// given the decoder's last layer as the step costs it (`last_layer`, its activation bytes
    /// `last_layer_bytes`): `mtp_layers` x ([`CostModel::mtp_depth`], the layer's activations
    /// and [`CostModel::mtp_projection_activation_bytes`]).
    pub fn mtp_depths(&self, last_layer: BlockCost, last_layer_bytes: u64) -> (BlockCost, u64) {
        let n = self.model.mtp_layers;
        let cost = self.mtp_depth(last_layer).scale(n as f64);
        let bytes = last_layer_bytes
            .saturating_add(self.mtp_projection_activation_bytes())
            .saturating_mul(n as u64);
        (cost, bytes)
    }

    /// Parameters the stage holding the depths adds on one rank: `(dense, expert)`. Dense:
    /// each depth's transformer layer of the last layer's kind (its dense part over t), its
    /// projection and norms over t, and, unless its device already holds the word embedding
    /// (`embedding_on_device`: the first stage, or a stage on the first stage's device), the
    /// embedding Megatron-Core builds there again for the depths' lookups (`GPTModel.__init__`:
    /// `if self.pre_process or self.mtp_process`, its gradient all-reduced with the first
    /// stage's as a tied output layer's is): `V h / t`. Expert: each depth's routed experts on
    /// this rank when the last layer is a MoE layer. The output layer is the last stage's own,
    /// not counted again.
    pub fn mtp_stage_params(&self, embedding_on_device: bool) -> (f64, f64) {
        let model = self.model;
        let n = model.mtp_layers as u64;
        if n == 0 {
            return (0.0, 0.0);
        }
        let moe = u64::from(model.is_moe_layer(model.last_layer()));
        let layer = self.layer_params_per_kind().rank(n * (1 - moe), n * moe);
        let projection = (n * model.mtp_projection_params()) as f64 / self.layout.tp as f64;
        let embedding = if embedding_on_device {
            0.0
        } else {
            self.embedding_shard_params()
        };
        (layer.dense + projection + embedding, layer.expert)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{Layout, Stack};
    use crate::inputs::{Hardware, Model};

    /// The projection by hand: DeepSeek-V3 at t = 1, b = 1, s = 4096: 2 x 4096 x 14336 x
    /// 7168 FLOPs forward (841.8 GFLOP), no collective; at t = 8 an eighth of the GEMM on a
    /// rank and the all-gather of the 2 sbh-byte output forward.
    #[test]
    fn the_projection_by_hand() {
        let hw = Hardware::bundled("h100-80gb").unwrap();
        let m = Model::preset("deepseek-v3").unwrap();
        let cm = |tp: u64| CostModel {
            model: &m,
            hw: &hw,
            layout: Layout {
                micro_batch: 1,
                recompute: Recompute::None,
                ..Layout::tensor_parallel(tp)
            },
            stack: Stack::megatron_core(),
        };
        let one = cm(1);
        assert_eq!(
            one.mtp_projection_forward_flops(),
            2.0 * 4096.0 * 14336.0 * 7168.0
        );
        assert_eq!(
            cm(8).mtp_projection_forward_flops(),
            one.mtp_projection_forward_flops()
        );
        let p1 = one.mtp_projection();
        assert_eq!(p1.forward.tp_comm_s, 0.0);
        let p8 = cm(8).mtp_projection();
        let ag = cm(8).tp_all_reduce_s(2.0 * 4096.0 * 7168.0) / 2.0;
        assert!((p8.forward.tp_comm_s - ag).abs() < 1e-12);
        assert!(p8.forward.gemm_s < p1.forward.gemm_s / 4.0);
        // The whole module: one more MoE layer's forward, the projection and the logits.
        let n = one.mtp_forward_flops();
        let moe = one.layer_forward_flops_of(60);
        assert_eq!(
            n,
            moe + one.mtp_projection_forward_flops() + one.logit_forward_flops()
        );
        let mut off = m.clone();
        off.mtp_layers = 0;
        assert_eq!(
            CostModel {
                model: &off,
                ..cm(1)
            }
            .mtp_forward_flops(),
            0.0
        );
    }
}
