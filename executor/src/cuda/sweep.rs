//! `pplan-exec sweep`: measures the kernels a transformer layer is made of on one GPU, over the
//! shapes that tensor parallelism and the micro-batch size produce, with the CUDA worker's own
//! calls (the layers' `cublasGemmEx`, its NVRTC kernels, its copies). The result is the data
//! under `hardware/measured/` that docs/validation.md sets beside the cost model's curves.
//!
//! - GEMMs: for each tensor-parallel size `t` and micro-batch `b`, the four linear layers of
//!   a layer (QKV, attention output, MLP up, MLP down) sharded as Megatron shards them (QKV and
//!   MLP up by output columns, attention output and MLP down by input rows), each in its three
//!   passes: forward `Y = X·Wᵀ`, input gradient `dX = dY·W`, weight gradient `dW = dYᵀ·X`,
//!   with `b·s` tokens. One set of buffers at the largest shape, random values.
//! - HBM bandwidth: the `y += a·x` kernel over 1 Mi to 256 Mi f32 elements (12 bytes each).
//! - Device-to-device copies (`cuMemcpyDtoDAsync`) of 1 MiB to 1 GiB: bytes / time (each byte
//!   is read once and written once).
//! - Launch overhead: back-to-back launches of a one-element kernel; host time per launch (what
//!   the CPU spends in `cuLaunchKernel`) and device time per launch (kernel-to-kernel spacing).

use super::calibrate::{axpy_bytes, gemm_flops_per_s, profiling_worker, timed_samples};
use super::device::{self, Gpu};
use super::{availability, guarded, kernels};
use crate::backend::ExecError;
use crate::profile::median;
use crate::spec::Dims;
use pplan::cost::linear_fans;
use pplan::inputs::model::Model;
use serde::Serialize;
use std::time::Instant;

/// One GEMM of a transformer layer: which linear layer, which pass, and the row-major
/// `(m, n, k)` with the operands' storage (`ta`: A stored k×m; `tb`: B stored n×k).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GemmCase {
    pub op: &'static str,
    pub pass: &'static str,
    pub tp: u32,
    pub micro_batch: u32,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    #[serde(skip)]
    pub trans: (bool, bool),
}

/// The 12 GEMMs of one layer of `model` at tensor-parallel size `tp`, micro-batch `mb` and
/// sequence `seq`: the cost model's four linear layers ([`pplan::cost::linear_fans`], the
/// shapes `CostModel::layer_gemms` prices) in their three passes. `None` when `tp` does not
/// divide the heads, the key/value heads or the FFN width (as `predict` and `search` require),
/// or for multi-head latent attention, whose projections the sweep does not build.
pub fn layer_gemm_cases(model: &Model, seq: u64, tp: u32, mb: u32) -> Option<Vec<GemmCase>> {
    let t = tp as u64;
    if t == 0
        || model.mla.is_some()
        || [model.num_heads, model.num_kv_heads, model.ffn_hidden_size]
            .iter()
            .any(|&x| x % t != 0)
    {
        return None;
    }
    let tokens = (mb as u64 * seq) as usize;
    let ops = ["qkv", "proj", "fc1", "fc2"];
    let mut v = Vec::new();
    for (op, (fan_in, fan_out)) in ops.into_iter().zip(linear_fans(model, t as f64)) {
        // Whole numbers: t divides every sharded dimension.
        let (i, o) = (fan_in as usize, fan_out as usize);
        for (pass, trans, (m, n, k)) in [
            ("forward", (false, true), (tokens, o, i)),
            ("input_grad", (false, false), (tokens, i, o)),
            ("weight_grad", (true, false), (o, i, tokens)),
        ] {
            v.push(GemmCase {
                op,
                pass,
                tp,
                micro_batch: mb,
                m,
                n,
                k,
                trans,
            });
        }
    }
    Some(v)
}

/// Element counts of A, B and C large enough for every case.
pub fn arena_sizes(cases: &[GemmCase]) -> (usize, usize, usize) {
    cases.iter().fold((0, 0, 0), |(a, b, c), g| {
        (a.max(g.m * g.k), b.max(g.k * g.n), c.max(g.m * g.n))
    })
}

/// What to sweep.
pub struct SweepRequest {
    pub model: Model,
    pub seq: u64,
    pub tps: Vec<u32>,
    pub micro_batches: Vec<u32>,
    pub repeats: u32,
    pub bf16: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct GemmPoint {
    #[serde(flatten)]
    pub case: GemmCase,
    pub seconds: f64,
    pub flops_per_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct BandwidthPoint {
    pub bytes: f64,
    pub seconds: f64,
    pub bytes_per_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct LaunchPoint {
    pub launches: u32,
    pub host_s_per_launch: f64,
    pub device_s_per_launch: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SweepOutput {
    pub tool: String,
    pub gpu: String,
    pub compute_capability: String,
    pub memory_bytes: u64,
    pub model: String,
    pub seq_len: u64,
    pub gemm_dtype: String,
    pub repeats: u32,
    pub method: String,
    pub gemm: Vec<GemmPoint>,
    pub skipped_tp: Vec<u32>,
    pub hbm_axpy: Vec<BandwidthPoint>,
    pub copy_d2d: Vec<BandwidthPoint>,
    pub launch: Vec<LaunchPoint>,
}

/// Runs the sweep on GPU 0.
pub fn sweep_cuda(req: &SweepRequest) -> Result<SweepOutput, ExecError> {
    availability()?;
    guarded("sweeping the GPU", || measure(req))
}

fn measure(req: &SweepRequest) -> Result<SweepOutput, ExecError> {
    let repeats = req.repeats.max(1);
    let mut cases = Vec::new();
    let mut skipped_tp = Vec::new();
    for &t in &req.tps {
        let mut any = false;
        for &b in &req.micro_batches {
            if let Some(c) = layer_gemm_cases(&req.model, req.seq, t, b) {
                cases.extend(c);
                any = true;
            }
        }
        if !any {
            skipped_tp.push(t);
        }
    }
    let ptx = cudarc::nvrtc::compile_ptx(kernels::SOURCE)
        .map_err(|e| ExecError::Backend(format!("NVRTC: {e}")))?;
    let g0 = Gpu::new(0, &ptx, false)?;
    let name = g0
        .ctx
        .name()
        .unwrap_or_else(|_| "unknown NVIDIA GPU".into());
    let total = g0.ctx.total_mem().map_err(device::drv)? as u64;
    let (maj, min) = g0.ctx.compute_capability().unwrap_or((0, 0));
    // A tiny worker: only its GEMM call, kernels and events are used.
    let tiny = Dims::dense(64, 2, 256, 16, 1, 128);
    let mut w = profiling_worker(&g0, tiny, req.bf16)?;
    w.start_clock(Instant::now())?;

    let (a, b, c) = arena_sizes(&cases);
    let arena = w.gemm_arena(a, b, c)?;
    let mut gemm = Vec::new();
    for g in cases {
        let shape = (g.m, g.n, g.k);
        let seconds = median(timed_samples(repeats, 0.01, |c| {
            w.time_gemm_in(&arena, g.trans, shape, c)
        })?);
        gemm.push(GemmPoint {
            flops_per_s: gemm_flops_per_s(shape, seconds),
            case: g,
            seconds,
        });
    }
    drop(arena);

    let mut hbm_axpy = Vec::new();
    for shift in [20usize, 22, 24, 26, 28] {
        let n = 1usize << shift;
        let seconds = median(timed_samples(repeats, 0.01, |c| w.time_axpy(n, c))?);
        hbm_axpy.push(BandwidthPoint {
            bytes: axpy_bytes(n),
            seconds,
            bytes_per_s: axpy_bytes(n) / seconds,
        });
    }

    let mut copy_d2d = Vec::new();
    for shift in [18usize, 20, 22, 24, 26, 28] {
        let elems = 1usize << shift;
        let seconds = median(timed_samples(repeats, 0.01, |c| {
            device::timing::time_copy(&g0, &g0, elems, c)
        })?);
        let bytes = 4.0 * elems as f64;
        copy_d2d.push(BandwidthPoint {
            bytes,
            seconds,
            bytes_per_s: bytes / seconds,
        });
    }

    let mut launch = Vec::new();
    for _ in 0..repeats {
        let (host, dev) = w.time_launches(10_000)?;
        launch.push(LaunchPoint {
            launches: 10_000,
            host_s_per_launch: host,
            device_s_per_launch: dev,
        });
    }
    drop(w);

    let dtype = if req.bf16 { "bf16" } else { "f32" };
    Ok(SweepOutput {
        tool: format!("pplan-exec {} sweep", env!("CARGO_PKG_VERSION")),
        gpu: name,
        compute_capability: format!("{maj}.{min}"),
        memory_bytes: total,
        model: req.model.name.clone(),
        seq_len: req.seq,
        gemm_dtype: dtype.into(),
        repeats,
        method: format!("CUDA events around back-to-back calls (at least 10 ms a sample), one untimed call first, median of {repeats} samples; GEMMs: cublasGemmEx with {dtype} inputs, f32 accumulation and f32 output as the executor's layers call it, random inputs; flops = 2mnk; HBM: y += a*x, 12 bytes per element; copies: cuMemcpyDtoDAsync, bytes copied / time (each byte read and written once); launches: 10000 one-element kernels, host time of the launch loop and CUDA-event time per launch"),
        gemm,
        skipped_tp,
        hbm_axpy,
        copy_d2d,
        launch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llama70b() -> Model {
        Model::load("llama3-70b").unwrap()
    }

    #[test]
    fn layer_gemms_follow_megatron_sharding_and_count_the_layer_flops() {
        let m = llama70b();
        let cases = layer_gemm_cases(&m, 4096, 8, 1).unwrap();
        assert_eq!(cases.len(), 12);
        let fwd: Vec<_> = cases.iter().filter(|c| c.pass == "forward").collect();
        // hidden 8192, 64 heads of 128, 8 KV heads, FFN 28672 gated; t = 8.
        assert_eq!((fwd[0].m, fwd[0].n, fwd[0].k), (4096, 1024 + 256, 8192));
        assert_eq!((fwd[1].m, fwd[1].n, fwd[1].k), (4096, 8192, 1024));
        assert_eq!((fwd[2].m, fwd[2].n, fwd[2].k), (4096, 2 * 28672 / 8, 8192));
        assert_eq!((fwd[3].m, fwd[3].n, fwd[3].k), (4096, 8192, 28672 / 8));
        // Every pass of a linear layer has the same FLOPs.
        for op in cases.chunks(3) {
            let f: Vec<usize> = op.iter().map(|c| c.m * c.n * c.k).collect();
            assert!(f.iter().all(|&x| x == f[0]), "{op:?}");
        }
        // The layer's linear FLOPs per token and rank (forward): 2·(h·(q+kv) + q·h + 3·h·ffn)/t.
        let per_token: usize = fwd.iter().map(|c| 2 * c.n * c.k).sum();
        assert_eq!(
            per_token,
            2 * (8192 * (8192 + 2048) + 8192 * 8192 + 3 * 8192 * 28672) / 8
        );
        let (a, b, c) = arena_sizes(&cases);
        // A: tokens x hidden (forward of QKV/fc1); B: fc1's weight 8192 x 7168; C: fc1's
        // forward output, tokens x 7168.
        assert_eq!((a, b, c), (4096 * 8192, 8192 * 7168, 8192 * 7168));
        assert!(layer_gemm_cases(&m, 4096, 3, 1).is_none());
        // 8 key/value heads cannot be split 16 ways (Megatron-Core divides the query groups
        // by t; predict and search refuse it too).
        assert!(layer_gemm_cases(&m, 4096, 16, 1).is_none());
    }

    /// The sweep times the GEMMs the cost model prices: the same (m, n, k) as the four linear
    /// entries of `CostModel::layer_gemms` for the same layout.
    #[test]
    fn sweep_shapes_are_the_cost_models() {
        use pplan::cost::{CostModel, Layout, Stack};
        use pplan::inputs::hardware::Hardware;
        let hw = Hardware::bundled("h100-80gb").unwrap();
        for name in ["llama3-70b", "qwen3-30b-a3b", "gpt3-175b"] {
            let mut m = Model::load(name).unwrap();
            m.seq_len = 2048;
            for (t, b) in [(1, 1), (2, 4), (4, 2)] {
                let cm = CostModel {
                    model: &m,
                    hw: &hw,
                    layout: Layout {
                        micro_batch: b,
                        ..Layout::tensor_parallel(t)
                    },
                    stack: Stack::default(),
                };
                let g = cm.layer_gemms();
                let want: Vec<_> = [g[0], g[3], g[4], g[5]]
                    .iter()
                    .map(|g| (g.m as usize, g.n as usize, g.k as usize))
                    .collect();
                let got: Vec<_> = layer_gemm_cases(&m, 2048, t as u32, b as u32)
                    .unwrap()
                    .into_iter()
                    .filter(|c| c.pass == "forward")
                    .map(|c| (c.m, c.n, c.k))
                    .collect();
                assert_eq!(got, want, "{name} t {t} b {b}");
            }
        }
    }

    #[test]
    fn without_a_gpu_the_sweep_answers_unavailable() {
        if availability().is_ok() {
            return;
        }
        let r = sweep_cuda(&SweepRequest {
            model: llama70b(),
            seq: 128,
            tps: vec![1],
            micro_batches: vec![1],
            repeats: 1,
            bf16: true,
        });
        assert!(matches!(r, Err(ExecError::Unavailable(_))), "{r:?}");
    }
}
