//! Host-side arithmetic of the CUDA backend, free of any CUDA call so it is tested everywhere:
//! the row-major → cuBLAS column-major GEMM mapping, the bytes a worker will allocate, how many
//! micro-batches each stage keeps in flight, which GPU each pipeline device uses, and the
//! order of the messages between two devices (NCCL matches sends and receives by order).

use crate::spec::{Dims, Matrix};
use pplan::plan::plan_file::Plan;
use pplan::schedule::ir::{Action, Kind};

/// A row-major GEMM `C[m,n] = alpha·op(A)[m,k]·op(B)[k,n] + beta·C` expressed as the
/// column-major call cuBLAS takes: a row-major matrix with leading dimension `ld` is the
/// column-major transpose with the same `ld`, so `Cᵀ = op(B)ᵀ·op(A)ᵀ`: swap the operands and
/// the sizes `m`/`n`, keep each operand's transpose flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColMajorGemm {
    /// Transpose flag of cuBLAS's first operand (our B).
    pub trans_first: bool,
    /// Transpose flag of cuBLAS's second operand (our A).
    pub trans_second: bool,
    pub m: usize,
    pub n: usize,
    pub k: usize,
}

pub fn col_major(trans_a: bool, trans_b: bool, m: usize, n: usize, k: usize) -> ColMajorGemm {
    ColMajorGemm {
        trans_first: trans_b,
        trans_second: trans_a,
        m: n,
        n: m,
        k,
    }
}

/// Reference row-major GEMM on the host with the same argument convention as the device
/// helper (used by tests to check [`col_major`] by brute force).
#[allow(clippy::too_many_arguments)]
pub fn host_gemm_row_major(
    ta: bool,
    tb: bool,
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
    alpha: f32,
    beta: f32,
) {
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0.0f32;
            for p in 0..k {
                let av = if ta { a[p * lda + i] } else { a[i * lda + p] };
                let bv = if tb { b[j * ldb + p] } else { b[p * ldb + j] };
                acc += av * bv;
            }
            c[i * ldc + j] = alpha * acc + beta * c[i * ldc + j];
        }
    }
}

/// Column-major GEMM on the host exactly as BLAS defines it (the oracle for [`col_major`]).
#[allow(clippy::too_many_arguments)]
pub fn host_gemm_col_major(
    ta: bool,
    tb: bool,
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
    alpha: f32,
    beta: f32,
) {
    for j in 0..n {
        for i in 0..m {
            let mut acc = 0.0f32;
            for p in 0..k {
                let av = if ta { a[i * lda + p] } else { a[p * lda + i] };
                let bv = if tb { b[p * ldb + j] } else { b[j * ldb + p] };
                acc += av * bv;
            }
            c[j * ldc + i] = alpha * acc + beta * c[j * ldc + i];
        }
    }
}

/// The largest number of micro-batches whose activations stage `stage` holds at once, walking
/// its device's action list: a micro-batch enters at `F` and leaves at `B` or `W`.
pub fn peak_inflight(actions: &[Action], stage: u32) -> usize {
    let mut now = 0usize;
    let mut peak = 0usize;
    for a in actions.iter().filter(|a| a.stage == stage) {
        match a.kind {
            Kind::F => {
                now += 1;
                peak = peak.max(now);
            }
            Kind::B | Kind::W => now = now.saturating_sub(1),
            Kind::I => {}
        }
    }
    peak
}

/// f32 elements one micro-batch keeps for one transformer layer from F until W: the layer
/// input `x`, `qkv`, the attention probabilities, `ctx`, `x1`, `u`, `g` (forward) plus `dqkv`,
/// `dx1`, `du`, `dy` kept by I for W. (I frees `qkv`, the probabilities and `u`, but the peak is
/// inside I, when both sets are alive.)
pub fn layer_stash_elems(d: &Dims) -> usize {
    let t = d.tokens();
    let probs = d.micro_batch * d.heads * d.seq * d.seq;
    t * (d.hidden + 3 * d.hidden + d.hidden + d.hidden + 2 * d.ffn) // forward
        + probs
        + t * (3 * d.hidden + 2 * d.hidden + d.ffn) // kept for W
}

/// f32 elements the largest transient of one action needs: the dP/dS buffer of attention, the
/// logits or the MLP activations, and their bf16 copies (counted as f32 halves).
pub fn workspace_elems(d: &Dims) -> usize {
    let t = d.tokens();
    let probs = d.micro_batch * d.heads * d.seq * d.seq;
    let widest = t * (3 * d.hidden).max(d.ffn).max(d.vocab);
    // f32 scratch of the widest tensor and of dP, plus bf16 copies of two GEMM inputs.
    widest + probs + (widest + probs)
}

/// Bytes the CUDA worker of pipeline device `device` allocates for `plan` (weights, their
/// gradients and bf16 copies, activations of every in-flight micro-batch, the largest
/// workspace) plus a fixed allowance for the cuBLAS workspace, the CUDA context's own use and
/// NCCL buffers.
pub fn worker_bytes(plan: &Plan, device: u32, bf16: bool) -> Result<u64, String> {
    const FIXED_BYTES: u64 = 256 << 20;
    let d = Dims::from_plan(plan);
    let sched = plan.schedule_ir().map_err(|e| e.to_string())?;
    let actions = sched
        .devices
        .get(device as usize)
        .ok_or_else(|| format!("the plan has no pipeline device {device}"))?;
    let per_weight = if bf16 { 4 + 4 + 2 } else { 4 + 4 };
    let mut bytes: u128 = FIXED_BYTES as u128;
    for st in plan.stages.iter().filter(|s| s.device == device) {
        let mut weight_elems: u128 = 0;
        let layer: usize = [Matrix::Qkv, Matrix::Out, Matrix::Mlp1, Matrix::Mlp2]
            .iter()
            .map(|m| {
                let (r, c) = m.shape(&d);
                r * c
            })
            .sum();
        weight_elems += layer as u128 * st.num_layers as u128;
        let mut act_elems: u128 = layer_stash_elems(&d) as u128 * st.num_layers as u128;
        let t = d.tokens() as u128;
        if st.embedding {
            let (r, c) = Matrix::Embedding.shape(&d);
            weight_elems += (r * c) as u128;
            act_elems += t + t * d.hidden as u128; // ids, dx0
        }
        if st.output {
            let (r, c) = Matrix::Output.shape(&d);
            weight_elems += (r * c) as u128;
            act_elems += t + t * d.hidden as u128 + t * d.vocab as u128; // labels, y, dlogits
        }
        let inflight = peak_inflight(actions, st.stage).max(1) as u128;
        bytes += weight_elems * per_weight + act_elems * 4 * inflight;
    }
    bytes += workspace_elems(&d) as u128 * 4;
    u64::try_from(bytes).map_err(|_| "the plan needs more than 2^64 bytes".to_string())
}

/// Which GPU (ordinal) each pipeline device uses in a single-process run: device `r` on GPU
/// `r` when there are enough GPUs, otherwise every device on GPU 0 (shared).
pub fn gpu_assignment(pipeline_devices: u32, gpus: u32) -> Vec<u32> {
    if gpus >= pipeline_devices {
        (0..pipeline_devices).collect()
    } else {
        vec![0; pipeline_devices as usize]
    }
}

/// Direction of a message between stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dir {
    /// An activation from stage `s` to `s + 1`.
    Act,
    /// A gradient from stage `s` to `s - 1`.
    Grad,
}

/// A message: direction, producing stage, micro-batch.
pub type MsgKey = (Dir, u32, u32);

/// The messages device `from` sends to device `to` during one pass over the action lists, in
/// `from`'s program order (the order NCCL will match them in).
pub fn send_order(plan: &Plan, actions: &[Action], from: u32, to: u32) -> Vec<MsgKey> {
    let n = plan.stages.len() as u32;
    let dev = |s: u32| plan.stages[s as usize].device;
    let mut out = Vec::new();
    for a in actions {
        match a.kind {
            Kind::F if a.stage + 1 < n && dev(a.stage + 1) == to && from != to => {
                out.push((Dir::Act, a.stage, a.microbatch))
            }
            Kind::B | Kind::I if a.stage > 0 && dev(a.stage - 1) == to && from != to => {
                out.push((Dir::Grad, a.stage, a.microbatch))
            }
            _ => {}
        }
    }
    out
}

/// The kind of backward (`B` or `I`) stage `stage` runs for `microbatch` in the plan, which is
/// what names a gradient transfer; `B` when the plan has neither.
pub fn backward_kind(actions: &[Action], stage: u32, microbatch: u32) -> Kind {
    actions
        .iter()
        .find(|a| {
            a.stage == stage && a.microbatch == microbatch && matches!(a.kind, Kind::B | Kind::I)
        })
        .map(|a| a.kind)
        .unwrap_or(Kind::B)
}

/// Small plans for the tests of this module tree.
#[cfg(test)]
pub(crate) mod tests_support {
    use pplan::inputs::profile::even_split;
    use pplan::plan::plan_file::*;
    use pplan::schedule::generators::{generate, GenParams, ScheduleName};
    use pplan::schedule::ir::Placement;

    pub(crate) fn plan(name: ScheduleName, p: u32, m: u32, v: u32, layers: u32) -> Plan {
        let sch = generate(name, GenParams::new(p, m).chunks(v)).unwrap();
        let stages = sch.num_stages;
        Plan {
            format: PLAN_FORMAT.into(),
            version: PLAN_VERSION,
            model: PlanModel {
                name: "tiny".into(),
                num_layers: layers,
                hidden_size: 16,
                num_attention_heads: 2,
                num_query_groups: 2,
                ffn_hidden_size: 32,
                seq_length: 8,
                vocab_size: 13,
                gated_mlp: false,
                untie_embeddings_and_output_weights: false,
                dropout: true,
                kv_channels: None,
                moe: None,
                mla: None,
                normalization: None,
                position_embedding_type: None,
                mtp_num_layers: 0,
                arch: Default::default(),
                sliding_window: None,
            },
            hardware: "h100-80gb".into(),
            parallelism: Parallelism {
                gpus: p as u64,
                tp: 1,
                pp: p as u64,
                dp: 1,
                cp: 1,
                ep: 1,
                etp: 1,
                micro_batch: 2,
                global_batch: 2 * m as u64,
                chunks: (stages / p) as u64,
                recompute: "none".into(),
                sequence_parallel: false,
                zero1: false,
                zero: 0,
                dp_replicate: 1,
                ..Parallelism::stack_defaults()
            },
            dtype: "f32".into(),
            stages: stages_from_counts(&even_split(layers, stages), Placement::Loop, p),
            schedule: PlanSchedule::from_schedule(name.as_str(), &sch),
            predicted: None,
        }
    }

    /// 1F1B, 2 pipeline devices, 4 micro-batches, 4 layers, f32.
    pub(crate) fn tiny_plan() -> Plan {
        plan(ScheduleName::OneFOneB, 2, 4, 1, 4)
    }
}

#[cfg(test)]
mod tests {
    use super::tests_support::plan;
    use super::*;
    use pplan::schedule::generators::ScheduleName;

    #[test]
    fn col_major_mapping_matches_blas_for_every_transpose() {
        let (m, n, k) = (3, 4, 5);
        let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i as f32 * 0.11).cos()).collect();
        for ta in [false, true] {
            for tb in [false, true] {
                let lda = if ta { m } else { k };
                let ldb = if tb { k } else { n };
                let mut want = vec![0.5f32; m * n];
                host_gemm_row_major(ta, tb, m, n, k, &a, lda, &b, ldb, &mut want, n, 1.5, 1.0);
                let g = col_major(ta, tb, m, n, k);
                let mut got = vec![0.5f32; m * n];
                host_gemm_col_major(
                    g.trans_first,
                    g.trans_second,
                    g.m,
                    g.n,
                    g.k,
                    &b,
                    ldb,
                    &a,
                    lda,
                    &mut got,
                    n,
                    1.5,
                    1.0,
                );
                for (x, y) in want.iter().zip(&got) {
                    assert!((x - y).abs() < 1e-5, "ta={ta} tb={tb}: {want:?} vs {got:?}");
                }
            }
        }
    }

    #[test]
    fn inflight_counts_follow_the_schedule() {
        let p = plan(ScheduleName::OneFOneB, 2, 4, 1, 4);
        let s = p.schedule_ir().unwrap();
        // 1F1B: device 0 warms up with p - 0 = 2 forwards, device 1 with 1.
        assert_eq!(peak_inflight(&s.devices[0], 0), 2);
        assert_eq!(peak_inflight(&s.devices[1], 1), 1);
        let g = plan(ScheduleName::GPipe, 2, 4, 1, 4);
        let s = g.schedule_ir().unwrap();
        assert_eq!(peak_inflight(&s.devices[0], 0), 4);
        assert_eq!(peak_inflight(&s.devices[1], 1), 4);
    }

    #[test]
    fn memory_estimate_adds_up() {
        let p = plan(ScheduleName::GPipe, 2, 4, 1, 4);
        let d = Dims::from_plan(&p);
        // Device 1: layers 2..4 and the output layer, 4 micro-batches in flight.
        let layer_w = 16 * 48 + 16 * 16 + 16 * 32 + 32 * 16;
        let t = 16;
        let want = (256u64 << 20)
            + ((2 * layer_w + 16 * 13) * 8) as u64
            + (4 * (2 * layer_stash_elems(&d) + t + t * 16 + t * 13) * 4) as u64
            + (workspace_elems(&d) * 4) as u64;
        assert_eq!(worker_bytes(&p, 1, false).unwrap(), want);
        // bf16 adds a 2-byte copy of every weight.
        assert_eq!(
            worker_bytes(&p, 1, true).unwrap() - want,
            ((2 * layer_w + 16 * 13) * 2) as u64
        );
        // The per-layer stash by hand: T=16, h=16, f=32, b=2, n=2, s=8.
        assert_eq!(
            layer_stash_elems(&d),
            16 * (6 * 16 + 64) + 2 * 2 * 64 + 16 * (5 * 16 + 32)
        );
        assert!(worker_bytes(&p, 2, false).is_err());
    }

    #[test]
    fn gpus_are_assigned_one_per_device_or_shared() {
        assert_eq!(gpu_assignment(4, 8), vec![0, 1, 2, 3]);
        assert_eq!(gpu_assignment(2, 2), vec![0, 1]);
        assert_eq!(gpu_assignment(2, 1), vec![0, 0]);
    }

    #[test]
    fn send_orders_pair_up_with_receives() {
        let p = plan(ScheduleName::Interleaved1F1B, 2, 4, 2, 8);
        let s = p.schedule_ir().unwrap();
        let a_to_b = send_order(&p, &s.devices[0], 0, 1);
        let b_to_a = send_order(&p, &s.devices[1], 1, 0);
        // Every activation of stages 0 and 2 and every gradient of stage 2 goes 0 -> 1.
        assert_eq!(a_to_b.len(), 4 * 2 + 4);
        assert_eq!(b_to_a.len(), 4 + 4 * 2);
        assert!(a_to_b.contains(&(Dir::Act, 2, 3)) && a_to_b.contains(&(Dir::Grad, 2, 0)));
        assert!(!a_to_b.contains(&(Dir::Grad, 0, 0)));
        assert!(send_order(&p, &s.devices[0], 0, 0).is_empty());
        let z = plan(ScheduleName::ZbH1, 2, 2, 1, 2);
        let s = z.schedule_ir().unwrap();
        assert_eq!(backward_kind(&s.devices[1], 1, 0), Kind::I);
    }
}
