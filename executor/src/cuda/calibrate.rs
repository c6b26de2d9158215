//! `pplan-exec profile --backend cuda`: measures a GPU with the CUDA worker's own code and
//! hands the numbers to [`crate::profile::assemble`], which writes the same two files as the
//! CPU profiler. Formulas and what each number means: docs/executor-cuda.md, "Profiling".
//!
//! - F, I, W of the embedding, one transformer layer and the output layer: one `CudaWorker`
//!   holding a three-stage pipeline on one device (stage 0 the embedding alone, stage 1 one
//!   layer, stage 2 the output layer alone; the stages hand over locally), driven F0 F1 F2,
//!   I2 W2, I1 W1, I0 W0 per micro-batch; each action's time is the compute span the worker
//!   measures with CUDA events, exactly as in `pplan-exec run`. One warm-up micro-batch, then
//!   the median of `repeats`.
//! - GEMM rates, `y += a·x` bandwidth and copies: CUDA events around back-to-back calls.

use super::device::{self, CudaWorker, Gpu, Link, Mailbox, WorkerPlan};
use super::{availability, guarded, kernels};
use crate::backend::{BackwardPart, DeviceWorker, ExecError, Span, SpanStream};
use crate::profile::{self, GemmPoint, Measurement, ProfileOutput, ProfileRequest, StageTimes};
use crate::spec::Dims;
use pplan::schedule::ir::Kind;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Square GEMM sizes measured for the fit (the layer's own shapes are added).
pub const SQUARES: [usize; 6] = [256, 512, 1024, 2048, 4096, 8192];

/// Elements of the memory-bound probe: two 256 MiB f32 arrays (far above any L2 cache).
pub const AXPY_ELEMS: usize = 64 << 20;

/// Calls per timed sample so that one sample lasts about `target_s`, from one call's time;
/// at least 1, at most 10 000.
pub fn calls_for(once_s: f64, target_s: f64) -> u32 {
    if !(once_s.is_finite() && once_s > 0.0) {
        return 1;
    }
    (target_s / once_s).ceil().clamp(1.0, 10_000.0) as u32
}

/// `repeats` (at least 1) samples of `time(calls)`: one call timed first, then `calls` chosen
/// by [`calls_for`] so that a sample lasts about `target_s`.
pub fn timed_samples(
    repeats: u32,
    target_s: f64,
    mut time: impl FnMut(u32) -> Result<f64, ExecError>,
) -> Result<Vec<f64>, ExecError> {
    let calls = calls_for(time(1)?, target_s);
    (0..repeats.max(1)).map(|_| time(calls)).collect()
}

/// `2mnk / t`.
pub fn gemm_flops_per_s((m, n, k): (usize, usize, usize), seconds: f64) -> f64 {
    2.0 * m as f64 * n as f64 * k as f64 / seconds
}

/// Bytes moved by one `y += a·x` pass: read x, read y, write y (f32).
pub fn axpy_bytes(n: usize) -> f64 {
    12.0 * n as f64
}

/// Device bytes one GEMM probe allocates: f32 A, B, C plus bf16 copies of A and B.
pub fn gemm_probe_bytes((m, n, k): (usize, usize, usize), bf16: bool) -> u64 {
    let ab = (m * k + k * n) as u64;
    ab * 4 + (m * n) as u64 * 4 + if bf16 { ab * 2 } else { 0 }
}

/// The worker plan of the profiling pipeline: three stages on device 0 (embedding alone, one
/// layer, output layer alone), SGD with lr 0 (weights never move).
pub fn profiling_stages() -> Vec<(u32, u32, u32, bool, bool)> {
    vec![
        (0, 0, 0, true, false),
        (1, 0, 1, false, false),
        (2, 1, 0, false, true),
    ]
}

/// A worker holding [`profiling_stages`] of `dims` on GPU `g0` (SGD with lr 0: the weights
/// never move), handing over between its stages locally: the profiler's and the sweep's.
pub(crate) fn profiling_worker(
    g0: &Arc<Gpu>,
    dims: Dims,
    bf16: bool,
) -> Result<CudaWorker, ExecError> {
    let wp = WorkerPlan {
        device: 0,
        dims,
        bf16,
        lr: 0.0,
        seed: crate::spec::DEFAULT_SEED,
        microbatches_per_step: 1,
        stage_device: vec![0, 0, 0],
        stages: profiling_stages(),
        actions: vec![Vec::new()],
        timeout: Duration::from_secs(600),
    };
    let link = Link::InProc {
        mailbox: Arc::new(Mailbox::default()),
        gpu_of: vec![g0.clone()],
    };
    CudaWorker::new(wp, g0.clone(), link)
}

/// Median (F, I, W) in ms per stage from measured compute spans, leaving out micro-batch 0
/// (the warm-up). `None` when a stage has no sample of some kind.
pub fn stage_medians(spans: &[Span], stage: u32) -> Option<StageTimes> {
    let pick = |kind: Kind| -> Vec<f64> {
        spans
            .iter()
            .filter(|s| {
                s.stream == SpanStream::Compute
                    && s.stage == Some(stage)
                    && s.kind == Some(kind)
                    && s.microbatch != Some(0)
            })
            .map(|s| (s.end_ns.saturating_sub(s.start_ns)) as f64 * 1e-6)
            .collect()
    };
    let (f, i, w) = (pick(Kind::F), pick(Kind::I), pick(Kind::W));
    if f.is_empty() || i.is_empty() || w.is_empty() {
        return None;
    }
    Some(StageTimes {
        f: profile::median(f),
        i: profile::median(i),
        w: profile::median(w),
    })
}

fn step<T>(what: &str, r: Result<T, ExecError>) -> Result<T, ExecError> {
    r.map_err(|e| match e {
        ExecError::Backend(m) => ExecError::Backend(format!("profiling ({what}): {m}")),
        ExecError::Plan(m) => ExecError::Plan(format!("profiling ({what}): {m}")),
        other => other,
    })
}

/// Profiles GPU 0 (and the copy GPU 0 → GPU 1 when there are two). `bf16` selects the GEMM
/// input type (`--dtype`). Without CUDA: `ExecError::Unavailable` from [`availability`].
pub fn profile_cuda(req: &ProfileRequest, bf16: bool) -> Result<ProfileOutput, ExecError> {
    let d = profile::dims_of(req).map_err(ExecError::Plan)?;
    availability()?;
    guarded("profiling the GPU", || measure(req, d, bf16))
}

fn measure(req: &ProfileRequest, d: Dims, bf16: bool) -> Result<ProfileOutput, ExecError> {
    let repeats = req.repeats.max(1);
    let dtype = if bf16 { "bf16" } else { "f32" };
    let ptx = step(
        "compiling kernels",
        cudarc::nvrtc::compile_ptx(kernels::SOURCE)
            .map_err(|e| ExecError::Backend(format!("NVRTC: {e}"))),
    )?;
    let gpus = step(
        "counting GPUs",
        cudarc::driver::CudaContext::device_count().map_err(device::drv),
    )? as u32;
    let g0 = step("opening GPU 0", Gpu::new(0, &ptx, false))?;
    let name = g0
        .ctx
        .name()
        .unwrap_or_else(|_| "unknown NVIDIA GPU".into());
    let total = step(
        "reading GPU memory",
        g0.ctx.total_mem().map_err(device::drv),
    )? as u64;
    let (maj, min) = g0.ctx.compute_capability().unwrap_or((0, 0));

    // Layer times with the worker itself.
    let mut w = step(
        "building the one-layer worker (is the shape too large for this GPU?)",
        profiling_worker(&g0, d, bf16),
    )?;
    step("starting the event clock", w.start_clock(Instant::now()))?;
    let mut spans = Vec::new();
    for mb in 0..=repeats {
        let r = (|| {
            for s in 0..3 {
                w.forward(s, mb, &mut spans)?;
            }
            for s in (0..3).rev() {
                w.backward(s, mb, BackwardPart::Input, &mut spans)?;
                w.backward(s, mb, BackwardPart::Weight, &mut spans)?;
            }
            w.drain_spans(&mut spans)
        })();
        step(&format!("layer F/I/W, micro-batch {mb}"), r)?;
    }
    let times = |stage: u32, what: &str| {
        stage_medians(&spans, stage).ok_or_else(|| {
            ExecError::Backend(format!(
                "profiling: no compute spans measured for the {what}"
            ))
        })
    };
    let (emb, layer, out) = (
        times(0, "embedding")?,
        times(1, "layer")?,
        times(2, "output layer")?,
    );

    // GEMMs.
    let mut gemm = Vec::new();
    let mut skipped = Vec::new();
    let shapes = profile::gemm_shapes(&SQUARES, &d);
    for (idx, &shape) in shapes.iter().enumerate() {
        let (free, _) = step(
            "reading free memory",
            g0.ctx.mem_get_info().map_err(device::drv),
        )?;
        if gemm_probe_bytes(shape, bf16) > (free as u64) * 9 / 10 {
            if idx < SQUARES.len() {
                return Err(ExecError::Plan(format!(
                    "profiling: the {}^3 GEMM probe needs {} bytes but only {free} are free on GPU 0",
                    shape.0,
                    gemm_probe_bytes(shape, bf16)
                )));
            }
            skipped.push(format!("{}x{}x{}", shape.0, shape.1, shape.2));
            continue;
        }
        let what = format!("GEMM {}x{}x{}", shape.0, shape.1, shape.2);
        let seconds = timed_samples(repeats, 0.02, |c| step(&what, w.time_gemm(shape, c)))?;
        gemm.push(GemmPoint {
            m: shape.0,
            n: shape.1,
            k: shape.2,
            flops_per_s: profile::median(
                seconds
                    .into_iter()
                    .map(|s| gemm_flops_per_s(shape, s))
                    .collect(),
            ),
        });
    }

    // Memory-bound bandwidth.
    let seconds = timed_samples(repeats, 0.02, |c| {
        step("y += a*x", w.time_axpy(AXPY_ELEMS, c))
    })?;
    let bw = profile::median(
        seconds
            .into_iter()
            .map(|s| axpy_bytes(AXPY_ELEMS) / s)
            .collect(),
    );
    drop(w);

    // Transfers: GPU 0 -> GPU 1 when there are two, else within GPU 0.
    let g1 = if gpus >= 2 {
        let g1 = step("opening GPU 1", Gpu::new(1, &ptx, false))?;
        step(
            "enabling peer access",
            g1.ctx.bind_to_thread().map_err(device::drv),
        )?;
        // Ignored when already enabled or unsupported (the copy then goes through the host).
        let _ = unsafe { cudarc::driver::sys::cuCtxEnablePeerAccess(g0.ctx.cu_ctx(), 0) };
        Some(g1)
    } else {
        None
    };
    let dst = g1.as_ref().unwrap_or(&g0);
    let act_elems = d.tokens() * d.hidden;
    let one_way = |elems: usize| -> Result<f64, ExecError> {
        let what = format!("copy of {elems} f32");
        let v = timed_samples(repeats, 0.01, |c| {
            step(&what, device::timing::time_copy(&g0, dst, elems, c))
        })?;
        Ok(profile::median(v))
    };
    let lat = one_way(1)?;
    let big = one_way(act_elems)?;
    let out_bytes = 4 * act_elems as u64;
    let link_desc = if g1.is_some() {
        format!("cuMemcpyPeerAsync GPU 0 -> GPU 1 ({name} to its peer)")
    } else {
        "cuMemcpyDtoDAsync within GPU 0: one GPU, so pipeline devices share it and the executor's transfers are device-local copies (an HBM copy, not a link)".to_string()
    };

    let devices = if req.devices_explicit {
        req.devices
    } else {
        gpus.max(1)
    };
    let mut sources = BTreeMap::new();
    let mut src = |k: &str, v: String| {
        sources.insert(k.to_string(), v);
    };
    let skipped_note = if skipped.is_empty() {
        String::new()
    } else {
        format!("; skipped for lack of free memory: {}", skipped.join(", "))
    };
    src("gpu.peak_flops_per_s", format!("measured on {name} (GPU 0, sm_{maj}{min}): best rate of cublasGemmEx with {dtype} inputs, f32 accumulation (CUBLAS_COMPUTE_32F) and f32 output, as the executor's layers call it, over square sizes 256..8192 and the layer's shapes (QKV, MLP up/down, output), CUDA events around back-to-back calls, median of {repeats}; this is an achieved rate, not the datasheet peak (FLOP/s){skipped_note}"));
    src(
        "gpu.memory_bytes",
        format!(
            "measured: total memory of {name} reported by the driver (cuDeviceTotalMem) (bytes)"
        ),
    );
    src("gpu.hbm_bandwidth_bytes_per_s", format!("measured on {name}: y += a*x NVRTC kernel over two {} MiB f32 arrays, 12 bytes per element, CUDA events, median of {repeats} (bytes/s)", (AXPY_ELEMS * 4) >> 20));
    src(
        "node.gpus_per_node",
        if req.devices_explicit {
            "pipeline devices this profile is for: --devices (count)".to_string()
        } else {
            format!("measured: CUDA devices visible to the process ({gpus}) (count)")
        },
    );
    src("node.nvlink_bandwidth_bytes_per_s", format!("measured: {link_desc}; {out_bytes}-byte activation, bytes / (one-way time - latency), CUDA events, median of {repeats} (bytes/s)"));
    src("node.nvlink_latency_s", format!("measured: {link_desc}; time of one 1-element (4-byte) copy, mean of back-to-back copies between CUDA events, median of {repeats} (s)"));
    let layer_source = format!(
        "pplan-exec profile --backend cuda: measured on {name} (GPU 0, sm_{maj}{min}) with the CUDA backend's own worker, GEMM inputs {dtype} with f32 accumulation, activations f32; compute spans timed with CUDA events, median of {repeats} micro-batches after one warm-up; the executor's spec layer (executor/src/spec.rs: no GQA, no gated MLP, no normalisation) at hidden {}, heads {}, ffn {}, seq {}, micro-batch {}, vocab {}; one layer measured, its times used for every layer; weight_bytes in {dtype}",
        d.hidden, d.heads, d.ffn, d.seq, d.micro_batch, d.vocab
    );
    profile::assemble(Measurement {
        dims: d,
        num_layers: req.model.num_layers,
        micro_batch: req.micro_batch,
        weight_elem_bytes: if bf16 { 2 } else { 4 },
        layer,
        moe: None,
        embedding: emb,
        output: out,
        gemm,
        square_points: SQUARES.len(),
        memory_bandwidth_bytes_per_s: bw,
        transfer_bytes: out_bytes,
        transfer_big_s: big,
        transfer_small_s: lat,
        memory_bytes: total,
        gpus_per_node: devices,
        hardware_name: format!("cuda-measured-{dtype}"),
        description: format!(
            "Measured by pplan-exec profile --backend cuda --dtype {dtype} on {name} ({gpus} visible GPU(s)); {}",
            if g1.is_some() { "links: GPU 0 -> GPU 1 peer copies" } else { "one GPU: pipeline devices share it, links are device-local copies" }
        ),
        device_name: name,
        layer_source,
        sources,
    })
    .map_err(ExecError::Backend)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn span(stage: u32, kind: Kind, mb: u32, start: u64, end: u64) -> Span {
        Span {
            device: 0,
            stream: SpanStream::Compute,
            name: format!("{stage}{kind}{mb}"),
            stage: Some(stage),
            microbatch: Some(mb),
            kind: Some(kind),
            peer: None,
            start_ns: start,
            end_ns: end,
        }
    }

    #[test]
    fn calls_make_a_sample_long_enough_and_stay_bounded() {
        assert_eq!(calls_for(0.001, 0.02), 20);
        assert_eq!(calls_for(0.5, 0.02), 1);
        assert_eq!(calls_for(1e-9, 0.02), 10_000);
        assert_eq!(calls_for(0.0, 0.02), 1);
        assert_eq!(calls_for(f64::NAN, 0.02), 1);
    }

    /// One call timed first, then `repeats` samples of the calls that make 20 ms; an error
    /// from any timing stops the sampling.
    #[test]
    fn samples_time_one_call_then_enough_calls() {
        let mut asked = Vec::new();
        let v = timed_samples(3, 0.02, |c| {
            asked.push(c);
            Ok(0.001 * c as f64)
        })
        .unwrap();
        assert_eq!(asked, vec![1, 20, 20, 20]);
        assert!(
            v.len() == 3 && v.iter().all(|x| (x - 0.02).abs() < 1e-12),
            "{v:?}"
        );
        assert_eq!(timed_samples(0, 0.02, |_| Ok(1.0)).unwrap().len(), 1);
        let e = timed_samples(3, 0.02, |c| {
            if c > 1 {
                Err(ExecError::Backend("boom".into()))
            } else {
                Ok(0.001)
            }
        });
        assert!(e.is_err());
    }

    #[test]
    fn rates_and_bytes_follow_the_documented_formulas() {
        // 2·1024³ FLOP in 1 ms = 2.147e12 FLOP/s.
        let r = gemm_flops_per_s((1024, 1024, 1024), 1e-3);
        assert!((r - 2.0 * 1024f64.powi(3) / 1e-3).abs() < 1.0, "{r}");
        assert_eq!(axpy_bytes(1000), 12_000.0);
        // 8192³ bf16 probe: 2·8192² inputs · (4 + 2) bytes + 8192² · 4 output.
        let n = 8192u64 * 8192;
        assert_eq!(
            gemm_probe_bytes((8192, 8192, 8192), true),
            2 * n * 6 + 4 * n
        );
        assert_eq!(
            gemm_probe_bytes((8192, 8192, 8192), false),
            2 * n * 4 + 4 * n
        );
    }

    #[test]
    fn profiling_pipeline_is_embedding_layer_output_in_order() {
        let st = profiling_stages();
        assert_eq!(st.len(), 3);
        assert!(st[0].3 && st[0].2 == 0, "stage 0: embedding alone");
        assert!(!st[1].3 && !st[1].4 && st[1].2 == 1, "stage 1: one layer");
        assert!(st[2].4 && st[2].2 == 0, "stage 2: output alone");
    }

    #[test]
    fn stage_medians_skip_the_warm_up_and_take_the_median() {
        let mut spans = vec![
            span(1, Kind::F, 0, 0, 99_000_000), // warm-up: ignored
            span(1, Kind::F, 1, 0, 2_000_000),
            span(1, Kind::F, 2, 10, 3_000_010),
            span(1, Kind::F, 3, 0, 4_000_000),
            span(1, Kind::I, 1, 0, 5_000_000),
            span(1, Kind::W, 1, 0, 1_000_000),
            span(2, Kind::F, 1, 0, 7_000_000),
        ];
        let t = stage_medians(&spans, 1).unwrap();
        assert_eq!((t.f, t.i, t.w), (3.0, 5.0, 1.0));
        assert!(stage_medians(&spans, 2).is_none(), "no I/W for stage 2");
        spans[1].stream = SpanStream::Recv;
        let t = stage_medians(&spans, 1).unwrap();
        assert_eq!(t.f, 3.5, "transfer spans are not compute");
    }

    #[test]
    fn without_a_gpu_the_profiler_answers_unavailable() {
        if availability().is_ok() {
            return;
        }
        let req = ProfileRequest {
            model: pplan::inputs::model::Model::load("gpt-1.7b").unwrap(),
            micro_batch: 1,
            seq_len: Some(16),
            repeats: 1,
            devices: 2,
            devices_explicit: false,
            threads_per_device: 1,
            parallel: Default::default(),
        };
        match profile_cuda(&req, true) {
            Err(ExecError::Unavailable(m)) => {
                assert!(m.contains("CUDA") || m.contains("cu"), "{m}")
            }
            Err(e) => panic!("expected Unavailable, got {e:?}"),
            Ok(_) => panic!("profiled without a GPU"),
        }
    }

    /// The CUDA profiler on a tiny model writes files pplan's readers accept, with positive,
    /// finite layer times and rates.
    #[test]
    #[ignore = "needs a CUDA GPU: cargo test -p pplan-exec -- --ignored"]
    fn cuda_profile_of_a_tiny_model_reads_back() {
        if let Err(e) = availability() {
            eprintln!("skipping: {e}");
            return;
        }
        let model = pplan::inputs::model::Model::from_json(
            r#"{"num_layers": 3, "hidden_size": 64, "num_attention_heads": 4, "ffn_hidden_size": 256, "seq_length": 32, "vocab_size": 128}"#,
            "tiny",
        )
        .unwrap();
        for bf16 in [true, false] {
            let req = ProfileRequest {
                model: model.clone(),
                micro_batch: 2,
                seq_len: None,
                repeats: 3,
                devices: 2,
                devices_explicit: true,
                threads_per_device: 1,
                parallel: Default::default(),
            };
            let out = profile_cuda(&req, bf16).unwrap();
            let lp =
                pplan::inputs::profile::LayerProfile::from_json(&out.layers.to_json(), "layers")
                    .unwrap();
            assert_eq!(lp.layers.len(), 3 + 2);
            for l in &lp.layers[1..4] {
                assert!(l.forward_ms > 0.0 && l.forward_ms.is_finite(), "{l:?}");
                assert!(l.backward_ms > 0.0 && l.backward_ms.is_finite(), "{l:?}");
            }
            assert!(lp.layers[4].forward_ms > 0.0, "output F");
            let hw = pplan::inputs::hardware::Hardware::from_json(
                &serde_json::to_string(&out.hardware).unwrap(),
                "hw",
            )
            .unwrap();
            assert!(
                hw.gpu.peak_flops_per_s > 1e11,
                "{}",
                hw.gpu.peak_flops_per_s
            );
            assert!(hw.gpu.hbm_bandwidth_bytes_per_s > 1e10);
            assert!(hw.gpu.memory_bytes > 1 << 30);
            assert!(hw.node.nvlink_latency_s > 0.0 && hw.node.nvlink_bandwidth_bytes_per_s > 0.0);
            assert_eq!(hw.node.gpus_per_node, 2);
            let w = if bf16 { 2 } else { 4 };
            assert_eq!(lp.layers[1].weight_bytes, w * (4 * 64 * 64 + 2 * 64 * 256));
        }
    }
}
