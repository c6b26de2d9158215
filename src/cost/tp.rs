//! Tensor-parallel communication of a transformer layer: which collectives a layer runs, what
//! of them shows beside its GEMMs, and what the userbuffers overlap costs the GEMMs
//! (docs/cost-model.md, "Communication" and "Overlapped communication").

use super::stack::CostModel;
use crate::inputs::hardware::Precision;

/// Chunks of the GEMM that userbuffers' pipelined reduce-scatter runs (`num_splits`, 4 in
/// Transformer Engine's default and NeMo's H100 configs).
pub const TP_OVERLAP_RS_SPLITS: f64 = 4.0;

/// SMs the pipelined reduce-scatter's kernel holds (`set_sm_margin`) while the GEMM before it
/// runs, as fractions of Hopper's 132: 24 after the attention projection, 16 after MLP-out
/// (NeMo's H100 userbuffer configs, `userbuffers_{bf16,fp8}_h100_h8192_tp4_mbs1_seqlen8192`,
/// `proj_fprop` and `fc2_fprop`).
pub const TP_OVERLAP_RS_SM_FRACTION: [f64; 2] = [24.0 / 132.0, 16.0 / 132.0];

impl CostModel<'_> {
    /// `--tp-comm-overlap` is in effect: set, with sequence parallelism (Megatron requires it)
    /// and more than one tensor-parallel rank.
    pub fn tp_overlap(&self) -> bool {
        self.stack.tp_comm_overlap && self.layout.sequence_parallel && self.layout.tp > 1
    }

    /// The exposed and hidden parts of one layer's tensor-parallel communication, forward and
    /// backward, as `((forward exposed, forward hidden), (backward exposed, backward hidden))`,
    /// given the four linear layers' (QKV, projection, MLP-in, MLP-out) forward, input-gradient
    /// and weight-gradient GEMM times. Per block (attention, MLP) a column-parallel layer
    /// (QKV, MLP-in) is followed by a row-parallel one (projection, MLP-out); `u` below is one
    /// all-gather or reduce-scatter of the block's `b s h` activation, half an all-reduce
    /// (docs/cost-model.md, "Tensor-parallel communication"):
    ///
    /// - without sequence parallelism: forward, the all-reduce after each row-parallel layer
    ///   (Shoeybi et al. 2019, the g operator); backward, the all-reduce of each
    ///   column-parallel layer's input gradient (the f operator);
    /// - with it (Korthikanti et al. 2022, Sec. 4.2.2): forward, an all-gather into each
    ///   column-parallel layer and a reduce-scatter after each row-parallel one; backward, an
    ///   all-gather of the row-parallel layer's output gradient, and for the column-parallel
    ///   layer an all-gather of its saved input (the weight gradient needs it whole) and a
    ///   reduce-scatter of its input gradient: three collectives a block.
    ///
    /// A column-parallel layer's backward collectives can run beside its GEMMs, the
    /// all-gather beside the input-gradient GEMM and the reduce-scatter (or all-reduce) beside
    /// the weight-gradient GEMM, so only what outlasts the GEMM shows: always with sequence
    /// parallelism (Megatron's and Transformer Engine's sequence-parallel backward issues
    /// them asynchronously), and without it with `Stack::tp_async_backward` (the all-reduce;
    /// Megatron-LM 2021 ran it in line). With `--tp-comm-overlap` (userbuffers;
    /// sequence parallelism) the collectives that feed or follow a GEMM are pipelined with it
    /// in t chunks, a two-stage flow shop whose makespan is `max(c, g) + min(c, g) / t`, so
    /// `min(c, g) (1 - 1/t)` of the communication is hidden. Otherwise all of it is exposed.
    /// With FP8 or MXFP8 the all-gathers move the 1-byte cast tensors, with or without the
    /// overlap: Transformer Engine casts before it gathers (`LayerNormLinear` writes the norm
    /// output in FP8 and all-gathers that, and re-gathers the saved FP8 copy for the weight
    /// gradient; `grad_output_preprocess` casts the output gradient to FP8, then gathers it;
    /// the userbuffers keep their all-gather buffers in FP8, `fp8_buf` in `initialize_ub`).
    /// The reduce-scatters move the 16-bit GEMM outputs. A layer without an MLP (a MoE layer's
    /// dense part without shared experts, [`CostModel::moe_dense_part_model`]) has only the
    /// attention block's collectives: Megatron-Core's MoE block takes the sequence-parallel
    /// shard as it is and moves its tokens by the expert all-to-all (an all-gather only over
    /// the expert tensor-parallel group, `moe_etp_collective_s`).
    pub fn tp_comm_s(
        &self,
        fwd: [f64; 4],
        dgrad: [f64; 4],
        wgrad: [f64; 4],
    ) -> ((f64, f64), (f64, f64)) {
        let t = self.layout.tp;
        if t <= 1 {
            return ((0.0, 0.0), (0.0, 0.0));
        }
        let (b, s, h, ..) = self.dims();
        let elems = b * s * h;
        let u = |bytes_per_elem: f64| self.tp_all_reduce_s(bytes_per_elem * elems) / 2.0;
        // A MoE layer's dense part without shared experts has no MLP block: its routed
        // tokens leave the sequence-parallel shard through the expert all-to-all instead
        // (`moe_layer`), so only the attention block's collectives run.
        let (col, row): (&[usize], &[usize]) = if self.model.ffn_hidden_size == 0 {
            (&[0], &[1])
        } else {
            (&[0, 2], &[1, 3])
        };
        // Beside a GEMM without a chunk dependency (bulk): only the excess shows.
        let bulk = |c: f64, g: f64| (c - c.min(g), c.min(g));
        let flow_shop = |c: f64, g: f64| {
            let hidden = c.min(g) * (1.0 - 1.0 / t as f64);
            (c - hidden, hidden)
        };
        let exposed = |c: f64| (c, 0.0);
        let add = |a: (f64, f64), b: (f64, f64)| (a.0 + b.0, a.1 + b.1);
        if !self.layout.sequence_parallel {
            let asyn = self.stack.tp_async_backward;
            let ar = 2.0 * u(2.0);
            let fwd_comm = (row.len() as f64 * ar, 0.0);
            let bwd_comm = col
                .iter()
                .map(|&i| {
                    if asyn {
                        bulk(ar, wgrad[i])
                    } else {
                        exposed(ar)
                    }
                })
                .fold((0.0, 0.0), add);
            return (fwd_comm, bwd_comm);
        }
        let overlap = self.tp_overlap();
        let ag_bytes = match self.stack.precision {
            Precision::Fp8 | Precision::Mxfp8 => 1.0,
            _ => 2.0,
        };
        let (ag, rs) = (u(ag_bytes), u(2.0));
        let paired = |c: f64, g: f64| if overlap { flow_shop(c, g) } else { exposed(c) };
        let fwd_comm = col
            .iter()
            .map(|&i| paired(ag, fwd[i]))
            .chain(row.iter().map(|&i| paired(rs, fwd[i])))
            .fold((0.0, 0.0), add);
        let bwd_comm = row
            .iter()
            .map(|&i| paired(ag, dgrad[i]))
            .chain(col.iter().map(|&i| bulk(ag, dgrad[i])))
            .chain(col.iter().map(|&i| bulk(rs, wgrad[i])))
            .fold((0.0, 0.0), add);
        (fwd_comm, bwd_comm)
    }

    /// The four linear layers' forward and input-gradient GEMM times `(fwd, dgrad)` as the
    /// tensor-parallel overlap (`--tp-comm-overlap`, sequence parallelism, t > 1) runs them;
    /// unchanged without it. `chunk(i, parts)` times layer i's forward and input-gradient GEMM
    /// split into `parts` along the tokens. Userbuffers' ring exchange (all-gather into QKV and
    /// MLP-in; the output-gradient all-gather into the projection's and MLP-out's input
    /// gradients) runs a GEMM as t chunks of `b s / t` rows; the pipelined reduce-scatter
    /// after the projection and MLP-out runs it as `TP_OVERLAP_RS_SPLITS` chunks on the SMs the
    /// communication kernel leaves (NeMo's H100 userbuffer configs: `num_splits` 4,
    /// `set_sm_margin`, 24 SMs for the projection and 16 for MLP-out of 132).
    pub fn tp_overlap_gemm_s(
        &self,
        fwd: [f64; 4],
        dgrad: [f64; 4],
        chunk: impl Fn(usize, f64) -> (f64, f64),
    ) -> ([f64; 4], [f64; 4]) {
        if !self.tp_overlap() {
            return (fwd, dgrad);
        }
        let t = self.layout.tp as f64;
        let (mut f, mut d) = (fwd, dgrad);
        // Column-parallel (QKV, MLP-in): ring-exchange all-gather into the forward.
        for i in [0, 2] {
            f[i] = chunk(i, t).0;
        }
        // Row-parallel (projection, MLP-out): pipelined reduce-scatter after the forward,
        // ring-exchange all-gather of the output gradient into the input gradient.
        for (i, sm) in [
            (1, TP_OVERLAP_RS_SM_FRACTION[0]),
            (3, TP_OVERLAP_RS_SM_FRACTION[1]),
        ] {
            f[i] = chunk(i, TP_OVERLAP_RS_SPLITS).0 / (1.0 - sm);
            d[i] = chunk(i, t).1;
        }
        (f, d)
    }
}

#[cfg(test)]
mod tests {
    use crate::cost::stack::{CostModel, Layout, Stack};
    use crate::cost::{all_gather_s, Zero};
    use crate::inputs::hardware::{Hardware, Precision};
    use crate::inputs::model::Model;

    fn cm<'a>(m: &'a Model, hw: &'a Hardware, sp: bool, stack: Stack) -> CostModel<'a> {
        CostModel {
            model: m,
            hw,
            layout: Layout {
                sequence_parallel: sp,
                ..Layout::tensor_parallel(4)
            },
            stack: Stack {
                zero: Zero::Off,
                ..stack
            },
        }
    }

    /// A MoE layer's dense part without shared experts (no MLP block) by hand, t = 4 on
    /// NVLink: with sequence parallelism the attention block's 2u forward and 3u backward; with
    /// shared experts (an MLP block again) the whole layer's 4u and 6u.
    #[test]
    fn a_moe_layers_collectives_are_the_attention_blocks_by_hand() {
        let hw = Hardware::bundled("h100-80gb").unwrap();
        let mut m = Model::preset("qwen3-30b-a3b").unwrap();
        let elems = (m.seq_len * m.hidden_size) as f64;
        let u = all_gather_s(
            2.0 * elems,
            4,
            hw.nvlink_bytes_per_s(),
            hw.node.nvlink_latency_s,
        );
        let close = |a: f64, b: f64| assert!((a - b).abs() < 1e-12, "{a} vs {b}");
        let none = [0.0; 4];
        let dense_part = cm(&m, &hw, true, Stack::default()).moe_dense_part_model();
        assert_eq!(dense_part.ffn_hidden_size, 0);
        let ((f, _), (b, _)) =
            cm(&dense_part, &hw, true, Stack::default()).tp_comm_s(none, none, none);
        close(f, 2.0 * u);
        close(b, 3.0 * u);
        // Without sequence parallelism: one all-reduce (2u) each way.
        let ((f, _), (b, _)) =
            cm(&dense_part, &hw, false, Stack::default()).tp_comm_s(none, none, none);
        close(f, 2.0 * u);
        close(b, 2.0 * u);
        m.moe.as_mut().unwrap().shared_ffn = 1024;
        let shared = cm(&m, &hw, true, Stack::default()).moe_dense_part_model();
        let ((f, _), (b, _)) = cm(&shared, &hw, true, Stack::default()).tp_comm_s(none, none, none);
        close(f, 4.0 * u);
        close(b, 6.0 * u);
    }

    /// Volumes by hand for t = 4 on NVLink: `u` is one all-gather of the `s h` activation in
    /// BF16. With sequence parallelism the forward has 4u and the backward 6u (three a block);
    /// with GEMMs too short to hide anything all of it shows, with long ones only the
    /// row-parallel layers' output-gradient all-gathers (2u). Without it: 2 all-reduces each
    /// way, the backward ones hidden with `tp_async_backward`. FP8 with the userbuffers
    /// overlap moves its all-gathers in 1 byte.
    #[test]
    fn a_layers_collectives_by_hand() {
        let hw = Hardware::bundled("h100-80gb").unwrap();
        let m = Model::preset("llama3-8b").unwrap();
        let elems = (m.seq_len * m.hidden_size) as f64;
        let u = |bytes: f64| {
            all_gather_s(
                bytes * elems,
                4,
                hw.nvlink_bytes_per_s(),
                hw.node.nvlink_latency_s,
            )
        };
        let (none, long) = ([0.0; 4], [1.0; 4]);
        let close = |a: f64, b: f64| assert!((a - b).abs() < 1e-12, "{a} vs {b}");
        let sp = cm(&m, &hw, true, Stack::default());
        let ((f, fh), (b, bh)) = sp.tp_comm_s(none, none, none);
        close(f, 4.0 * u(2.0));
        close(b, 6.0 * u(2.0));
        assert_eq!((fh, bh), (0.0, 0.0));
        let ((f, _), (b, bh)) = sp.tp_comm_s(long, long, long);
        close(f, 4.0 * u(2.0));
        close(b, 2.0 * u(2.0));
        close(bh, 4.0 * u(2.0));
        let plain = cm(&m, &hw, false, Stack::default());
        let ((f, _), (b, _)) = plain.tp_comm_s(long, long, long);
        close(f, 4.0 * u(2.0));
        close(b, 4.0 * u(2.0));
        let asyn = cm(
            &m,
            &hw,
            false,
            Stack {
                tp_async_backward: true,
                ..Stack::default()
            },
        );
        let ((_, _), (b, bh)) = asyn.tp_comm_s(long, long, long);
        close(b, 0.0);
        close(bh, 4.0 * u(2.0));
        let fp8 = cm(
            &m,
            &hw,
            true,
            Stack {
                precision: Precision::Fp8,
                tp_comm_overlap: true,
                ..Stack::default()
            },
        );
        // Nothing hidden with zero-length GEMMs: the totals are the bytes moved.
        let ((f, _), (b, _)) = fp8.tp_comm_s(none, none, none);
        close(f, 2.0 * u(1.0) + 2.0 * u(2.0));
        close(b, 4.0 * u(1.0) + 2.0 * u(2.0));
        // Without the overlap Transformer Engine still gathers the FP8 casts: the same bytes,
        // all of them exposed in the forward.
        let fp8_nccl = cm(
            &m,
            &hw,
            true,
            Stack {
                precision: Precision::Fp8,
                ..Stack::default()
            },
        );
        let ((f, fh), (b, _)) = fp8_nccl.tp_comm_s(long, long, long);
        close(f, 2.0 * u(1.0) + 2.0 * u(2.0));
        close(fh, 0.0);
        let ((_, _), (b0, _)) = fp8_nccl.tp_comm_s(none, none, none);
        close(b0, 4.0 * u(1.0) + 2.0 * u(2.0));
        assert!(b < b0);
    }

    /// The userbuffers overlap runs QKV and MLP-in as t chunks, the projection and MLP-out as
    /// 4 chunks on the SMs the reduce-scatter leaves, and the row-parallel input gradients as t
    /// chunks; without the overlap (or without sequence parallelism) nothing changes.
    #[test]
    fn the_overlap_chunks_its_gemms() {
        use super::{TP_OVERLAP_RS_SM_FRACTION, TP_OVERLAP_RS_SPLITS};
        let hw = Hardware::bundled("h100-80gb").unwrap();
        let m = Model::preset("llama3-8b").unwrap();
        let chunk = |i: usize, parts: f64| (parts * 10.0 + i as f64, parts * 100.0 + i as f64);
        let (fwd, dgrad) = ([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]);
        let on = Stack {
            tp_comm_overlap: true,
            ..Stack::default()
        };
        assert_eq!(
            cm(&m, &hw, false, on).tp_overlap_gemm_s(fwd, dgrad, chunk),
            (fwd, dgrad)
        );
        assert_eq!(
            cm(&m, &hw, true, Stack::default()).tp_overlap_gemm_s(fwd, dgrad, chunk),
            (fwd, dgrad)
        );
        let (f, d) = cm(&m, &hw, true, on).tp_overlap_gemm_s(fwd, dgrad, chunk);
        let rs = |i: usize, frac: f64| (TP_OVERLAP_RS_SPLITS * 10.0 + i as f64) / (1.0 - frac);
        assert_eq!(
            f,
            [
                40.0,
                rs(1, TP_OVERLAP_RS_SM_FRACTION[0]),
                42.0,
                rs(3, TP_OVERLAP_RS_SM_FRACTION[1])
            ]
        );
        assert_eq!(d, [5.0, 401.0, 7.0, 403.0]);
    }
}
