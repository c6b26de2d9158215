//! `pplan-exec profile`: measures this machine on the CPU backend and writes what the planner
//! reads — a layer profile (`pplan::inputs::profile` format: the embedding, one entry per transformer
//! layer, the output layer) and a hardware profile (`pplan::inputs::hardware` format) whose numbers are
//! the measured ones. See docs/executor.md for every formula.
//!
//! - Layer times: the spec's transformer layer (and the embedding and output layers) at the
//!   requested shape, on one thread per device (or `threads_per_device`), F, I and W timed
//!   separately with the host monotonic clock; the median of `repeats` runs, timed on
//!   `--devices` threads at once (as in a pipelined run, where every device computes at the
//!   same time and they share memory bandwidth and caches). All layers of
//!   the model have one shape, so one layer is measured and its times written for every layer.
//! - Bytes (f32 on the CPU): weights `4·params`; a layer's activations `4·(6Th + 2Tf + b·n·s²)`
//!   (`x, ctx, x1` and `qkv` = 6Th, `u, g` = 2Tf, the attention probabilities b·n·s²); the
//!   embedding keeps its `T` token ids (4T); the output layer keeps `y` and `dlogits`,
//!   `4·(Th + TV)`; each layer sends `4·T·h` downstream, the output layer nothing.
//! - GEMM rate: `2mnk / t` for square GEMMs of a few sizes and the layer's own shapes; peak =
//!   the best rate; `gemm_efficiency_max` and `gemm_half_dim` fitted to the square sizes with
//!   the cost model's form `e(n) = e_max (n / (n + d0))³`.
//! - Memory-bound bandwidth: `y += a·x` over two 32 MiB f32 arrays, bytes = 3 · 4 · n per pass.
//! - Transfer: a tensor of the activation size handed from one thread to another through the
//!   same channel and copy the CPU backend uses; ping-pong, one-way time = round trip / 2;
//!   latency from a 1-element message, bandwidth = bytes / (one-way time − latency).

use crate::cpu::comm::Comms;
use crate::cpu::math::gemm;
use crate::cpu::model::{self, Ctx, StageWeights};
pub use crate::profile_layers::{layer_entries, median, MoeTimes, StageTimes};
use crate::profile_layers::{median_of_threads, parallel_text, time_stage};
use crate::spec::{self, Dims};
use pplan::inputs::hardware::{Gpu, Hardware, Network, Node};
use pplan::inputs::model::Model;
use pplan::inputs::profile::LayerProfile;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct ProfileRequest {
    pub model: Model,
    pub micro_batch: u64,
    pub seq_len: Option<u64>,
    pub repeats: u32,
    pub devices: u32,
    /// `--devices` was given (the CUDA profiler otherwise writes the visible GPU count).
    pub devices_explicit: bool,
    pub threads_per_device: usize,
    /// The replicas and number format of the plans the profile is for (CPU backend only).
    pub parallel: crate::profile_layers::Parallel,
}

/// One measured GEMM shape.
#[derive(Debug, Clone, Serialize)]
pub struct GemmPoint {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub flops_per_s: f64,
}

/// What `profile` prints.
#[derive(Debug, Clone, Serialize)]
pub struct ProfileSummary {
    pub layer_forward_ms: f64,
    pub layer_backward_input_ms: f64,
    pub layer_backward_weight_ms: f64,
    /// A mixture-of-experts model's MoE layer, F / I / W (ms); absent for a dense model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moe_layer_ms: Option<[f64; 3]>,
    pub embedding_forward_ms: f64,
    pub output_forward_ms: f64,
    pub output_backward_ms: f64,
    pub gemm: Vec<GemmPoint>,
    pub peak_flops_per_s: f64,
    pub gemm_efficiency_max: f64,
    pub gemm_half_dim: f64,
    pub memory_bandwidth_bytes_per_s: f64,
    pub transfer_bytes: u64,
    pub transfer_bandwidth_bytes_per_s: f64,
    pub transfer_latency_s: f64,
}

impl ProfileSummary {
    pub fn table(&self) -> String {
        let mut s = String::new();
        s += &format!(
            "layer F / I / W        {:.3} / {:.3} / {:.3} ms\n",
            self.layer_forward_ms, self.layer_backward_input_ms, self.layer_backward_weight_ms
        );
        if let Some([f, i, w]) = self.moe_layer_ms {
            s += &format!("MoE layer F / I / W    {f:.3} / {i:.3} / {w:.3} ms\n");
        }
        s += &format!(
            "embedding F            {:.3} ms\noutput F / B           {:.3} / {:.3} ms\n",
            self.embedding_forward_ms, self.output_forward_ms, self.output_backward_ms
        );
        for g in &self.gemm {
            s += &format!(
                "gemm {:>5}x{:<5}x{:<5} {:.2} GFLOP/s\n",
                g.m,
                g.n,
                g.k,
                g.flops_per_s / 1e9
            );
        }
        s += &format!(
            "peak (best GEMM)       {:.2} GFLOP/s; fit e_max {:.3}, d0 {:.0}\n",
            self.peak_flops_per_s / 1e9,
            self.gemm_efficiency_max,
            self.gemm_half_dim
        );
        s += &format!(
            "memory bandwidth       {:.2} GB/s\n",
            self.memory_bandwidth_bytes_per_s / 1e9
        );
        s += &format!(
            "transfer {} B         {:.2} GB/s, latency {:.2} us\n",
            self.transfer_bytes,
            self.transfer_bandwidth_bytes_per_s / 1e9,
            self.transfer_latency_s * 1e6
        );
        s
    }
}

pub struct ProfileOutput {
    pub layers: LayerProfile,
    pub hardware: Hardware,
    pub summary: ProfileSummary,
}

/// [`time_stage`] on `devices` threads at once, each with its own input and accumulators, and
/// the median over threads of their medians: in a pipelined run all devices compute at the same
/// time and share the memory system and caches, so a layer timed alone on an idle machine is
/// faster than the same layer inside the run.
fn time_stage_concurrent(
    devices: u32,
    c: &Ctx,
    w: &StageWeights,
    make_input: &(dyn Fn() -> (Option<Vec<u32>>, Option<Vec<f32>>) + Sync),
    labels: Option<&[u32]>,
    dy: Option<&[f32]>,
    repeats: u32,
) -> (f64, f64, f64) {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..devices.max(1))
            .map(|_| {
                scope
                    .spawn(|| time_stage(c, w, make_input, labels, dy, repeats, &mut Comms::solo()))
            })
            .collect();
        median_of_threads(handles)
    })
}

fn gemm_rate(m: usize, n: usize, k: usize, threads: usize, repeats: u32) -> f64 {
    let mut rng = spec::SplitMix64::new(7);
    let a: Vec<f32> = (0..m * k).map(|_| rng.next_signed_unit()).collect();
    let b: Vec<f32> = (0..k * n).map(|_| rng.next_signed_unit()).collect();
    let mut c = vec![0.0; m * n];
    let flops = 2.0 * (m * n * k) as f64;
    // Enough calls per sample that one sample lasts about 20 ms or more.
    let t = Instant::now();
    gemm(m, k, n, &a, false, &b, false, &mut c, 0.0, threads);
    let once = t.elapsed().as_secs_f64().max(1e-7);
    let calls = ((0.02 / once).ceil() as usize).clamp(1, 10_000);
    let mut samples = Vec::new();
    for _ in 0..repeats {
        let t = Instant::now();
        for _ in 0..calls {
            gemm(m, k, n, &a, false, &b, false, &mut c, 0.0, threads);
        }
        samples.push(flops * calls as f64 / t.elapsed().as_secs_f64());
    }
    median(samples)
}

/// Least-squares fit of `e(n) = e_max (n/(n+d0))³` to (n, e) points: d0 on a grid of 1..=4096,
/// e_max in closed form for each d0.
pub fn fit_gemm_efficiency(points: &[(f64, f64)]) -> (f64, f64) {
    let mut best = (f64::INFINITY, 1.0, 1.0);
    for d0 in 1..=4096 {
        let d0 = d0 as f64;
        let fs: Vec<f64> = points.iter().map(|(n, _)| (n / (n + d0)).powi(3)).collect();
        let num: f64 = points.iter().zip(&fs).map(|((_, e), f)| e * f).sum();
        let den: f64 = fs.iter().map(|f| f * f).sum();
        let emax = (num / den).clamp(1e-6, 1.0);
        let err: f64 = points
            .iter()
            .zip(&fs)
            .map(|((_, e), f)| (e - emax * f).powi(2))
            .sum();
        if err < best.0 {
            best = (err, emax, d0);
        }
    }
    (best.1, best.2)
}

fn memory_bandwidth(repeats: u32) -> f64 {
    let n = 8 << 20; // 8 Mi f32 = 32 MiB per array
    let x = vec![1.0f32; n];
    let mut y = vec![0.5f32; n];
    let mut samples = Vec::new();
    for r in 0..=repeats {
        let t = Instant::now();
        for (a, b) in y.iter_mut().zip(&x) {
            *a += 1e-3 * b;
        }
        let s = t.elapsed().as_secs_f64();
        if r > 0 {
            samples.push(3.0 * 4.0 * n as f64 / s);
        }
    }
    std::hint::black_box(&y);
    median(samples)
}

/// One-way time in seconds of handing `elems` f32 to another thread and back (copying, as the
/// CPU backend's send does), median over `repeats` samples of many round trips.
fn transfer_one_way_s(elems: usize, repeats: u32) -> f64 {
    use std::sync::mpsc::channel;
    let (to_tx, to_rx) = channel::<Vec<f32>>();
    let (back_tx, back_rx) = channel::<Vec<f32>>();
    let echo = std::thread::spawn(move || {
        while let Ok(v) = to_rx.recv() {
            if back_tx.send(v.to_vec()).is_err() {
                break;
            }
        }
    });
    let data = vec![1.0f32; elems];
    let trips = if elems > 100_000 { 20 } else { 2000 };
    let mut samples = Vec::new();
    for r in 0..=repeats {
        let t = Instant::now();
        for _ in 0..trips {
            to_tx.send(data.to_vec()).expect("echo thread alive");
            let back = back_rx.recv().expect("echo thread alive");
            std::hint::black_box(&back);
        }
        if r > 0 {
            samples.push(t.elapsed().as_secs_f64() / (2 * trips) as f64);
        }
    }
    drop(to_tx);
    let _ = echo.join();
    median(samples)
}

fn cpu_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

fn host_memory_bytes() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(16 << 30)
}

/// The executor's shape for a request; an error names the flag.
pub fn dims_of(req: &ProfileRequest) -> Result<Dims, String> {
    let m = &req.model;
    if m.num_heads == 0 || m.hidden_size % m.num_heads != 0 {
        return Err(format!(
            "--model: hidden size {} is not divisible by {} heads",
            m.hidden_size, m.num_heads
        ));
    }
    let d = Dims {
        moe: m.moe.as_ref().map(|e| spec::MoeDims {
            experts: e.num_experts as usize,
            topk: e.top_k as usize,
            ffn: e.expert_ffn as usize,
            shared_ffn: e.shared_ffn as usize,
        }),
        cp: req.parallel.cp,
        dp: req.parallel.dp,
        ..Dims::dense(
            m.hidden_size as usize,
            m.num_heads as usize,
            m.ffn_hidden_size as usize,
            req.seq_len.unwrap_or(m.seq_len) as usize,
            req.micro_batch as usize,
            m.vocab_size as usize,
        )
    };
    req.parallel.check(&d)?;
    Ok(d)
}

/// Measure everything; errors are messages naming the flag.
pub fn profile_cpu(req: &ProfileRequest) -> Result<ProfileOutput, String> {
    let m = &req.model;
    let d = dims_of(req)?;
    let (t, h, f, v) = (d.tokens(), d.hidden, d.ffn, d.vocab);
    // Largest buffer: the output layer's logits (T·V) and the attention probabilities.
    let biggest = (t * v).max(d.micro_batch * d.heads * d.seq * d.seq) as u128 * 4 * 4;
    if biggest > host_memory_bytes() as u128 {
        return Err(format!(
            "--micro-batch/--seq-len: one layer at this shape needs about {:.1} GB, more than this machine's memory",
            biggest as f64 / 1e9
        ));
    }
    let c = Ctx {
        fp8: req.parallel.fp8,
        ..Ctx::new(d, req.threads_per_device)
    };
    let seed = spec::DEFAULT_SEED;
    let ids = model::cp_tokens(&spec::token_ids(seed, 0, 0, &d), &d, 0);
    let labels = model::cp_tokens(&spec::labels(seed, 0, 0, &d), &d, 0);
    let mut rng = spec::SplitMix64::new(11);
    let x: Vec<f32> = (0..t * h).map(|_| rng.next_signed_unit()).collect();
    let dy: Vec<f32> = (0..t * h).map(|_| rng.next_signed_unit() * 1e-3).collect();

    // Each layer kind the model has, on its replicas.
    let pattern: Vec<bool> = m.moe.as_ref().map_or_else(Vec::new, |e| e.layers.clone());
    let time = |moe| {
        let (f, i, w) = crate::profile_layers::time_layer(
            req.devices,
            req.parallel,
            &d,
            moe,
            req.threads_per_device,
            req.repeats,
        );
        StageTimes { f, i, w }
    };
    let dense = (pattern.len() as u32) < m.num_layers || pattern.contains(&false);
    let moe = pattern.contains(&true).then(|| MoeTimes {
        times: time(true),
        pattern: pattern.clone(),
        ep: req.parallel.ep,
    });
    let layer = if dense {
        time(false)
    } else {
        moe.as_ref().expect("a MoE model has a MoE layer").times
    };
    let emb_w = StageWeights::init(seed, 0, 0, true, false, &d);
    let (ef, ei, ew) = time_stage(
        &c,
        &emb_w,
        &|| (Some(ids.clone()), None),
        None,
        Some(&dy),
        req.repeats,
        &mut Comms::solo(),
    );
    let out_w = StageWeights::init(seed, 0, 0, false, true, &d);
    let (of, oi, ow) = time_stage_concurrent(
        req.devices,
        &c,
        &out_w,
        &|| (None, Some(x.clone())),
        Some(&labels),
        None,
        req.repeats,
    );

    let threads = req.threads_per_device;
    let layer_source = format!(
        "pplan-exec profile --backend cpu: measured on {} with {} thread(s) per device, median of {} runs, {}; the executor's spec layer (executor/src/spec.rs: no GQA, no gated MLP, no normalisation) at hidden {h}, heads {}, ffn {f}, seq {}, vocab {v}{}; {}",
        cpu_name(),
        threads,
        req.repeats,
        match req.parallel.fp8 {
            None => "f32".to_string(),
            Some(r) => format!("FP8 {r:?} (emulated)").to_lowercase(),
        },
        d.heads,
        d.seq,
        parallel_text(&d, req.parallel),
        if moe.is_some() {
            "one dense and one MoE layer measured, each one's times used for every layer of its kind"
        } else {
            "one layer measured, its times used for every layer"
        }
    );

    // GEMMs: square sizes for the fit, plus the layer's own shapes.
    let squares = [32usize, 64, 128, 256, 512];
    let mut gemm_points = Vec::new();
    for (mm, nn, kk) in gemm_shapes(&squares, &d) {
        gemm_points.push(GemmPoint {
            m: mm,
            n: nn,
            k: kk,
            flops_per_s: gemm_rate(mm, nn, kk, threads, req.repeats),
        });
    }
    let bw = memory_bandwidth(req.repeats);
    let lat = transfer_one_way_s(1, req.repeats);
    let big = transfer_one_way_s(t * h, req.repeats);
    let out_bytes = (4 * t * h) as u64;

    let mut sources = BTreeMap::new();
    let mut src = |k: &str, v: String| {
        sources.insert(k.to_string(), v);
    };
    src("gpu.peak_flops_per_s", format!("measured: best f32 GEMM rate of pplan-exec's CPU backend (matrixmultiply sgemm, {threads} thread(s)) over square sizes 32..512 and the layer's shapes (FLOP/s)"));
    if req.parallel.fp8.is_some() {
        src("gpu.peak_fp8_flops_per_s", "measured: the CPU backend's FP8 GEMMs are its f32 sgemm on operands rounded to FP8 (executor/src/cpu/quant.rs), so the f32 peak; the rounding passes are in the layer times (FLOP/s)".into());
    }
    src(
        "gpu.memory_bytes",
        format!("measured: host MemTotal / {} devices (bytes)", req.devices),
    );
    src(
        "gpu.hbm_bandwidth_bytes_per_s",
        "measured: y += a*x over 32 MiB f32 arrays on one thread, 12 bytes per element (bytes/s)"
            .into(),
    );
    src(
        "node.gpus_per_node",
        "pipeline devices (threads) this profile is for: --devices (count)".into(),
    );
    src("node.nvlink_bandwidth_bytes_per_s", format!("measured: channel handoff (copy + mpsc) of a {out_bytes}-byte activation between two threads, bytes / (one-way time - latency) (bytes/s)"));
    src(
        "node.nvlink_latency_s",
        "measured: one-way time of a 1-element channel handoff between two threads (s)".into(),
    );
    assemble(Measurement {
        dims: d,
        num_layers: m.num_layers,
        micro_batch: req.micro_batch,
        weight_elem_bytes: 4,
        layer,
        moe,
        embedding: StageTimes {
            f: ef,
            i: ei,
            w: ew,
        },
        output: StageTimes {
            f: of,
            i: oi,
            w: ow,
        },
        gemm: gemm_points,
        square_points: squares.len(),
        memory_bandwidth_bytes_per_s: bw,
        transfer_bytes: out_bytes,
        transfer_big_s: big,
        transfer_small_s: lat,
        memory_bytes: host_memory_bytes() / req.devices as u64,
        gpus_per_node: req.devices,
        hardware_name: "cpu-measured".into(),
        description: format!(
            "Measured by pplan-exec profile --backend cpu on {}: each pipeline device is one OS thread ({} compute thread(s)) of one host; links are in-process channels.",
            cpu_name(),
            threads
        ),
        device_name: cpu_name(),
        layer_source,
        sources,
    })
}

/// Everything a backend measured, before it becomes the two profiles. Both backends fill one
/// and call [`assemble`], so the files they write have one format and one byte arithmetic.
#[derive(Debug, Clone)]
pub struct Measurement {
    pub dims: Dims,
    pub num_layers: u32,
    pub micro_batch: u64,
    /// Bytes per weight element in `weight_bytes` (4: f32, 2: bf16).
    pub weight_elem_bytes: u64,
    /// The dense layer's times (the MoE layer's when every layer is one).
    pub layer: StageTimes,
    /// A mixture-of-experts model's MoE layer, and which layers are MoE.
    pub moe: Option<MoeTimes>,
    pub embedding: StageTimes,
    pub output: StageTimes,
    /// The square GEMMs first (`square_points` of them, `m = n = k`), then any others.
    pub gemm: Vec<GemmPoint>,
    pub square_points: usize,
    pub memory_bandwidth_bytes_per_s: f64,
    /// Bytes of the large transfer; its one-way time and that of a 1-element transfer (s).
    pub transfer_bytes: u64,
    pub transfer_big_s: f64,
    pub transfer_small_s: f64,
    pub memory_bytes: u64,
    pub gpus_per_node: u32,
    pub hardware_name: String,
    pub description: String,
    pub device_name: String,
    /// The layer profile's `source` text.
    pub layer_source: String,
    /// `sources` entries for the measured fields, keyed `gpu.peak_flops_per_s` etc.: at least
    /// `gpu.peak_flops_per_s`, `gpu.memory_bytes`, `gpu.hbm_bandwidth_bytes_per_s`,
    /// `node.gpus_per_node`, `node.nvlink_bandwidth_bytes_per_s`, `node.nvlink_latency_s`;
    /// the derived and fixed fields get their entries here.
    pub sources: BTreeMap<String, String>,
}

/// The square GEMM sizes, then the layer's own shapes `(m, n, k)`: QKV `(T, 3h, h)`, MLP up
/// `(T, f, h)`, MLP down `(T, h, f)`, output layer `(T, V, h)`.
pub fn gemm_shapes(squares: &[usize], d: &Dims) -> Vec<(usize, usize, usize)> {
    let (t, h, f, v) = (d.tokens(), d.hidden, d.ffn, d.vocab);
    squares
        .iter()
        .map(|&n| (n, n, n))
        .chain([(t, 3 * h, h), (t, f, h), (t, h, f), (t, v, h)])
        .collect()
}

/// Link figures from two measured one-way times: latency = the 1-element time, bandwidth =
/// `bytes / (t_big − latency)` (the time the bytes themselves took; floored at 1 ns).
pub fn link_figures(bytes: u64, big_s: f64, small_s: f64) -> (f64, f64) {
    (bytes as f64 / (big_s - small_s).max(1e-9), small_s)
}

/// (peak, e_max, d0): peak = the best measured rate; the fit is over the first `squares`
/// points (square GEMMs) as fractions of the peak, see [`fit_gemm_efficiency`].
pub fn gemm_fit(points: &[GemmPoint], squares: usize) -> (f64, f64, f64) {
    let peak = points.iter().map(|g| g.flops_per_s).fold(0.0, f64::max);
    let pts: Vec<(f64, f64)> = points
        .iter()
        .take(squares)
        .map(|g| (g.m as f64, g.flops_per_s / peak))
        .collect();
    let (emax, d0) = fit_gemm_efficiency(&pts);
    (peak, emax, d0)
}

fn check_measured(what: &str, v: f64, positive: bool) -> Result<(), String> {
    if !v.is_finite() || v < 0.0 || (positive && v == 0.0) {
        return Err(format!(
            "measurement '{what}' is {v}; expected a finite number {}",
            if positive { "> 0" } else { ">= 0" }
        ));
    }
    Ok(())
}

/// The two profiles and the summary from a [`Measurement`]; both files are read back with the
/// planner's own readers before they are returned. Pure: no clock, no device.
pub fn assemble(m: Measurement) -> Result<ProfileOutput, String> {
    for (what, s, pos) in [
        ("layer", m.layer, true),
        ("embedding", m.embedding, false),
        ("output", m.output, false),
    ] {
        check_measured(&format!("{what} F (ms)"), s.f, pos)?;
        check_measured(&format!("{what} I (ms)"), s.i, pos)?;
        check_measured(&format!("{what} W (ms)"), s.w, false)?;
    }
    if m.gemm.is_empty() || m.square_points == 0 {
        return Err("no GEMM was measured".into());
    }
    for g in &m.gemm {
        check_measured(
            &format!("GEMM {}x{}x{} (FLOP/s)", g.m, g.n, g.k),
            g.flops_per_s,
            true,
        )?;
    }
    check_measured(
        "memory bandwidth (bytes/s)",
        m.memory_bandwidth_bytes_per_s,
        true,
    )?;
    check_measured("transfer one-way time (s)", m.transfer_big_s, true)?;
    check_measured("transfer latency (s)", m.transfer_small_s, true)?;
    let (peak, emax, d0) = gemm_fit(&m.gemm, m.square_points);
    let (link_bw, lat) = link_figures(m.transfer_bytes, m.transfer_big_s, m.transfer_small_s);
    let layers = layer_entries(
        &m.dims,
        m.num_layers,
        m.weight_elem_bytes,
        m.layer,
        m.moe.as_ref(),
        m.embedding,
        m.output,
    );
    let layer_profile = LayerProfile {
        source: Some(m.layer_source.clone()),
        micro_batch: Some(m.micro_batch),
        layers,
    };
    let mut sources = m.sources.clone();
    let mut fixed = |k: &str, v: &str| {
        sources
            .entry(k.to_string())
            .or_insert_with(|| v.to_string());
    };
    fixed(
        "gpu.hbm_efficiency",
        "1.0: the bandwidth above is already the achieved one (dimensionless)",
    );
    fixed("gpu.gemm_efficiency_max", "FITTED: least squares of e_max (n/(n+d0))^3 to the measured square-GEMM rates over the best rate (dimensionless)");
    fixed("gpu.gemm_half_dim", "FITTED: d0 of the same fit (elements)");
    fixed(
        "node.nvlink_efficiency",
        "1.0: the bandwidth above is already the achieved one (dimensionless)",
    );
    fixed(
        "node.nics_per_node",
        "one host: no network; set equal to the in-node link (count)",
    );
    fixed(
        "node.nic_bandwidth_bytes_per_s",
        "one host: no network; the measured in-node link bandwidth (bytes/s)",
    );
    fixed("node.nic_efficiency", "1.0 (dimensionless)");
    fixed(
        "node.nic_latency_s",
        "one host: the measured in-node link latency (s)",
    );
    fixed("network.oversubscription", "one host: non-blocking (ratio)");
    fixed("network.levels", "one host (count)");
    fixed("network.nodes_per_leaf_switch", "one host (count)");
    let hardware = Hardware {
        name: m.hardware_name.clone(),
        description: m.description.clone(),
        gpu: Gpu {
            name: m.device_name.clone(),
            peak_flops_per_s: peak,
            // The CPU's emulated FP8 GEMMs run at its f32 rate (a profile measured with them).
            peak_fp8_flops_per_s: if m.sources.contains_key("gpu.peak_fp8_flops_per_s") {
                peak
            } else {
                0.0
            },
            peak_fp4_flops_per_s: 0.0,
            memory_bytes: m.memory_bytes,
            hbm_bandwidth_bytes_per_s: m.memory_bandwidth_bytes_per_s,
            hbm_efficiency: 1.0,
            cross_entropy_hbm_efficiency: None,
            gemm_efficiency_max: emax,
            gemm_half_dim: d0,
            // Measured kernels in the measured setting: nothing to add for training.
            gemm_training_factor: None,
            // The executor's kernels are not flash attention; nothing measured.
            attention_efficiency_forward: None,
            attention_efficiency_backward: None,
            attention_half_seq_forward: None,
            attention_half_seq_backward: None,
            attention_half_heads: None,
            attention_half_work: None,
            attention_fa2_efficiency_forward: None,
            attention_fa2_efficiency_backward: None,
            attention_fa2_half_seq_forward: None,
            attention_fa2_half_seq_backward: None,
            attention_triton_efficiency_forward: None,
            attention_triton_efficiency_backward: None,
            attention_triton_half_seq_forward: None,
            attention_triton_half_seq_backward: None,
            attention_floor_head_dim_forward: None,
            attention_floor_head_dim_backward: None,
            attention_noncausal_efficiency_forward: None,
            attention_noncausal_efficiency_backward: None,
            attention_noncausal_half_seq_forward: None,
            attention_noncausal_half_seq_backward: None,
            fp8_split_accumulator_slowdown: None,
            fp8_block_scaling_slowdown: None,
            // No FP8 peak is measured, so no FP8 layout question arises.
            fp8_any_layout: false,
            // Not measured by this profiler: pplan's default applies.
            kernel_launch_s: None,
            // Its kernels are timed back to back: their rates already hold the gaps.
            kernel_gap_s: None,
            graph_kernel_gap_s: None,
            gemm_latency_s: None,
            power_limit_w: None,
            sustained_clock_fraction: None,
        },
        node: Node {
            gpus_per_node: m.gpus_per_node,
            nvlink_domain_gpus: None,
            nvlink_bandwidth_bytes_per_s: link_bw,
            nvlink_efficiency: 1.0,
            nvlink_latency_s: lat,
            nics_per_node: 1,
            nic_bandwidth_bytes_per_s: link_bw,
            nic_efficiency: 1.0,
            nic_latency_s: lat,
            // Not measured by this profiler: no host link, so no activation offloading.
            host_link_bytes_per_s: None,
        },
        network: Network {
            topology: "fat-tree".into(),
            levels: 1,
            nodes_per_leaf_switch: 1,
            oversubscription: 1.0,
        },
        sources,
        fitted: vec!["gpu.gemm_efficiency_max".into(), "gpu.gemm_half_dim".into()],
    };
    // The files must read back with the planner's own readers.
    let text = serde_json::to_string(&hardware).map_err(|e| e.to_string())?;
    Hardware::from_json(&text, "measured hardware profile")
        .map_err(|e| format!("internal: measured hardware profile does not validate: {e}"))?;
    LayerProfile::from_json(&layer_profile.to_json(), "measured layer profile")
        .map_err(|e| format!("internal: measured layer profile does not validate: {e}"))?;
    let summary = ProfileSummary {
        layer_forward_ms: m.layer.f,
        layer_backward_input_ms: m.layer.i,
        layer_backward_weight_ms: m.layer.w,
        moe_layer_ms: m.moe.as_ref().map(|x| [x.times.f, x.times.i, x.times.w]),
        embedding_forward_ms: m.embedding.f,
        output_forward_ms: m.output.f,
        output_backward_ms: m.output.i + m.output.w,
        gemm: m.gemm,
        peak_flops_per_s: peak,
        gemm_efficiency_max: emax,
        gemm_half_dim: d0,
        memory_bandwidth_bytes_per_s: m.memory_bandwidth_bytes_per_s,
        transfer_bytes: m.transfer_bytes,
        transfer_bandwidth_bytes_per_s: link_bw,
        transfer_latency_s: lat,
    };
    Ok(ProfileOutput {
        layers: layer_profile,
        hardware,
        summary,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_recovers_known_curve() {
        let pts: Vec<(f64, f64)> = [32.0, 64.0, 128.0, 256.0, 512.0]
            .iter()
            .map(|&n: &f64| (n, 0.8 * (n / (n + 40.0)).powi(3)))
            .collect();
        let (e, d0) = fit_gemm_efficiency(&pts);
        assert!(
            (e - 0.8).abs() < 1e-3 && (d0 - 40.0).abs() < 0.5,
            "{e} {d0}"
        );
    }

    fn fake(d: Dims) -> Measurement {
        let mut sources = BTreeMap::new();
        sources.insert("gpu.peak_flops_per_s".to_string(), "fake".to_string());
        let gemm = gemm_shapes(&[256, 512, 1024], &d)
            .into_iter()
            .map(|(m, n, k)| GemmPoint {
                m,
                n,
                k,
                // The square points follow e(n) = 0.9 (n/(n+100))^3 of 1e15.
                flops_per_s: if m == n && n == k {
                    1e15 * 0.9 * (m as f64 / (m as f64 + 100.0)).powi(3)
                } else {
                    9e14
                },
            })
            .collect();
        Measurement {
            dims: d,
            num_layers: 4,
            micro_batch: 2,
            weight_elem_bytes: 2,
            moe: None,
            layer: StageTimes {
                f: 1.0,
                i: 1.2,
                w: 0.8,
            },
            embedding: StageTimes {
                f: 0.1,
                i: 0.0,
                w: 0.05,
            },
            output: StageTimes {
                f: 0.5,
                i: 0.4,
                w: 0.3,
            },
            gemm,
            square_points: 3,
            memory_bandwidth_bytes_per_s: 3e12,
            transfer_bytes: 4 * 16 * 64,
            transfer_big_s: 12e-6,
            transfer_small_s: 2e-6,
            memory_bytes: 80 << 30,
            gpus_per_node: 2,
            hardware_name: "fake".into(),
            description: "fake timings".into(),
            device_name: "FakeGPU".into(),
            layer_source: "fake".into(),
            sources,
        }
    }

    fn dims() -> Dims {
        Dims::dense(64, 4, 256, 8, 2, 100)
    }

    #[test]
    fn link_figures_subtract_the_latency() {
        // 1 MB in 12 us with 2 us latency: 1e6 / 10e-6 = 1e11 B/s.
        let (bw, lat) = link_figures(1_000_000, 12e-6, 2e-6);
        assert!((bw - 1e11).abs() < 1.0, "{bw}");
        assert_eq!(lat, 2e-6);
        // A big transfer no slower than the latency still gives a finite bandwidth.
        assert!(link_figures(100, 1e-6, 1e-6).0.is_finite());
    }

    #[test]
    fn gemm_shapes_are_squares_then_the_layer_shapes() {
        let d = dims();
        let s = gemm_shapes(&[32, 64], &d);
        assert_eq!(
            s,
            vec![
                (32, 32, 32),
                (64, 64, 64),
                (16, 192, 64),
                (16, 256, 64),
                (16, 64, 256),
                (16, 100, 64)
            ]
        );
    }

    #[test]
    fn assemble_turns_fake_timings_into_files_the_planner_reads() {
        let out = assemble(fake(dims())).unwrap();
        let lp = LayerProfile::from_json(&out.layers.to_json(), "layers").unwrap();
        assert_eq!(lp.layers.len(), 4 + 2);
        assert_eq!(lp.layers[2].forward_ms, 1.0);
        assert_eq!(lp.layers[2].backward_ms, 2.0);
        assert_eq!(lp.layers[2].backward_input_ms, Some(1.2));
        // bf16 weights: 2 bytes per parameter of 4h² + 2hf.
        assert_eq!(lp.layers[2].weight_bytes, 2 * (4 * 64 * 64 + 2 * 64 * 256));
        assert_eq!(lp.layers[0].weight_bytes, 2 * 100 * 64);
        assert_eq!(lp.layers[5].output_bytes, 0);
        assert_eq!(lp.layers[1].output_bytes, 4 * 16 * 64);
        let text = serde_json::to_string(&out.hardware).unwrap();
        let hw = Hardware::from_json(&text, "hw").unwrap();
        assert_eq!(hw.gpu.peak_flops_per_s, 9e14, "peak = best measured rate");
        assert_eq!(hw.node.gpus_per_node, 2);
        assert_eq!(hw.gpu.memory_bytes, 80 << 30);
        // bandwidth = 4096 B / (12 - 2) us.
        assert!((hw.node.nvlink_bandwidth_bytes_per_s - 4096.0 / 10e-6).abs() < 1e-3);
        assert_eq!(hw.node.nvlink_latency_s, 2e-6);
        assert_eq!(
            hw.sources["gpu.peak_flops_per_s"], "fake",
            "backend's text kept"
        );
        assert!(
            hw.sources.contains_key("network.levels"),
            "fixed fields described"
        );
        // Fit over the squares only, as fractions of the 9e14 peak: e_max = 0.9·1e15/9e14 = 1.
        assert!(
            (hw.gpu.gemm_half_dim - 100.0).abs() < 1.0,
            "{}",
            hw.gpu.gemm_half_dim
        );
        assert!((hw.gpu.gemm_efficiency_max - 1.0).abs() < 1e-3);
    }

    #[test]
    fn assemble_refuses_non_finite_or_missing_measurements() {
        let mut m = fake(dims());
        m.layer.f = f64::NAN;
        let e = assemble(m).err().unwrap();
        assert!(e.contains("layer F"), "{e}");
        let mut m = fake(dims());
        m.layer.i = 0.0;
        assert!(assemble(m).err().unwrap().contains("layer I"));
        let mut m = fake(dims());
        m.gemm[0].flops_per_s = 0.0;
        assert!(assemble(m).err().unwrap().contains("GEMM 256x256x256"));
        let mut m = fake(dims());
        m.memory_bandwidth_bytes_per_s = f64::INFINITY;
        assert!(assemble(m).err().unwrap().contains("memory bandwidth"));
        let mut m = fake(dims());
        m.gemm.clear();
        assert!(assemble(m).err().unwrap().contains("no GEMM"));
    }
}
