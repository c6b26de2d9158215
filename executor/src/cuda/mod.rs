//! The CUDA backend: one [`DeviceWorker`] per pipeline device on NVIDIA GPUs, through cudarc,
//! which loads libcuda, cuBLAS, NVRTC and NCCL at run time, so this module builds (and its
//! host-side tests run) on machines without CUDA. Design, kernels, timing and the multi-GPU
//! and multi-node modes are described in docs/executor-cuda.md.
//!
//! - [`availability`]: what CUDA this machine offers, never panicking;
//! - [`workers`]: builds the workers for a plan (one per pipeline device this process runs);
//! - `device`: the worker (GEMMs, kernels, transfers, event timing);
//! - `kernels`: the NVRTC source and launch arithmetic; `layout`: host-side shape, memory and
//!   ordering arithmetic; `env`: the torchrun/Slurm environment and the NCCL-id rendezvous;
//! - `reference`: an independent host f32 implementation of `spec.rs`, the GPU tests' oracle.

pub mod calibrate;
mod device;
pub mod env;
pub mod kernels;
pub mod layout;
pub mod reference;
pub mod sweep;
pub mod ticket;

use crate::backend::{DeviceWorker, ExecError};
use crate::spec::Dims;
use device::{CudaWorker, Gpu, Link, Mailbox, NcclComm, NcclIn, NcclOut, WorkerPlan};
use pplan::plan::plan_file::Plan;
use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use crate::backend::RunOptions;

/// How pipeline devices that share one GPU run (`PPLAN_CUDA_SHARE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareMode {
    /// Each device on its own streams; kernels of different devices overlap and share the SMs.
    Streams,
    /// One device's action at a time (a GPU-wide lock, each action synchronised).
    Serialize,
}

/// Parses `PPLAN_CUDA_SHARE` (unset: `streams`).
pub fn parse_share_mode(value: Option<&str>) -> Result<ShareMode, String> {
    match value.map(str::trim) {
        None | Some("") | Some("streams") => Ok(ShareMode::Streams),
        Some("serialize") => Ok(ShareMode::Serialize),
        Some(other) => Err(format!(
            "environment variable PPLAN_CUDA_SHARE='{other}' (valid: streams, serialize)"
        )),
    }
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown panic".into())
}

/// Runs `f`, turning a panic inside cudarc (a library or symbol that cannot be loaded) into
/// an error. The panic hook still prints the message once; that is acceptable next to a hang.
fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T, ExecError>) -> Result<T, ExecError> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => Err(ExecError::Unavailable(format!(
            "{what} failed: {}",
            panic_message(p)
        ))),
    }
}

fn lib_names(lib: &str) -> String {
    format!("lib{lib}.so, lib{lib}.so.13 and similar names on LD_LIBRARY_PATH")
}

/// `Ok(description of the GPUs)` or `Unavailable(why)`: no libcuda, cuInit failing, no device,
/// no cuBLAS, no NVRTC. NCCL is needed only for multi-process runs; its absence is noted.
pub fn availability() -> Result<String, ExecError> {
    guarded("probing CUDA", || {
        // SAFETY: these only try to dlopen the libraries.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return Err(ExecError::Unavailable(format!(
                "CUDA is not available: the NVIDIA driver library libcuda could not be loaded (searched {}); is there an NVIDIA GPU and driver on this machine?",
                lib_names("cuda")
            )));
        }
        if !unsafe { cudarc::cublas::sys::is_culib_present() } {
            return Err(ExecError::Unavailable(format!(
                "CUDA driver found but cuBLAS could not be loaded (searched {}); install the CUDA 13 toolkit libraries",
                lib_names("cublas")
            )));
        }
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            return Err(ExecError::Unavailable(format!(
                "CUDA driver found but NVRTC could not be loaded (searched {}); install the CUDA 13 toolkit libraries",
                lib_names("nvrtc")
            )));
        }
        cudarc::driver::result::init().map_err(|e| {
            ExecError::Unavailable(format!("CUDA driver present but cuInit failed: {e}"))
        })?;
        let n = cudarc::driver::CudaContext::device_count()
            .map_err(|e| ExecError::Unavailable(format!("cannot count CUDA devices: {e}")))?;
        if n <= 0 {
            return Err(ExecError::Unavailable(
                "CUDA driver present but no CUDA device is visible (check CUDA_VISIBLE_DEVICES)"
                    .into(),
            ));
        }
        let mut parts = Vec::new();
        for i in 0..n {
            let ctx = cudarc::driver::CudaContext::new(i as usize).map_err(device::drv)?;
            let name = ctx.name().unwrap_or_else(|_| "unknown GPU".into());
            let mem = ctx.total_mem().unwrap_or(0) as f64 / (1u64 << 30) as f64;
            let (maj, min) = ctx.compute_capability().unwrap_or((0, 0));
            parts.push(format!("{i}: {name} ({mem:.1} GiB, sm_{maj}{min})"));
        }
        let nccl = if unsafe { cudarc::nccl::sys::is_culib_present() } {
            ""
        } else {
            "; NCCL not found (multi-process runs unavailable)"
        };
        Ok(format!("{n} CUDA device(s): {}{nccl}", parts.join(", ")))
    })
}

fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / (1u64 << 30) as f64)
}

/// Builds one CUDA worker per pipeline device of this process (all of them in a single-process
/// run; the device whose index is the rank under torchrun/Slurm), checking memory first.
pub fn workers(plan: &Plan, opts: &RunOptions) -> Result<Vec<Box<dyn DeviceWorker>>, ExecError> {
    if let Some(why) = refusal(plan) {
        return Err(ExecError::Plan(why));
    }
    if plan.schedule.weight_update != "flush" {
        return Err(ExecError::Plan(format!(
            "plan field `schedule.weight_update` is '{}': the CUDA backend runs synchronous schedules (flush) only; PipeDream weight stashing is run by the CPU backend",
            plan.schedule.weight_update
        )));
    }
    let dist = env::parse_dist_env(&|k| std::env::var(k).ok()).map_err(ExecError::Plan)?;
    let share = parse_share_mode(std::env::var("PPLAN_CUDA_SHARE").ok().as_deref())
        .map_err(ExecError::Plan)?;
    let timeout = match std::env::var("PPLAN_CUDA_TIMEOUT_S") {
        Ok(v) => Duration::from_secs(v.trim().parse::<u64>().map_err(|_| {
            ExecError::Plan(format!(
                "environment variable PPLAN_CUDA_TIMEOUT_S='{v}' is not a whole number of seconds"
            ))
        })?),
        Err(_) => Duration::from_secs(600),
    };
    availability()?;
    guarded("setting up the CUDA workers", || {
        build(plan, opts, dist, share, timeout)
    })
}

/// Why the CUDA backend cannot run a plan, whatever the machine: what the executor's model
/// cannot express, and what only the CPU backend runs. Checked before looking for a GPU.
pub fn refusal(plan: &Plan) -> Option<String> {
    crate::cpu::unsupported_model(plan).or_else(|| cpu_only(plan))
}

/// What the CPU backend runs and the CUDA backend does not yet: mixture-of-experts layers,
/// data, context and expert parallelism, FP8 GEMMs.
fn cpu_only(plan: &Plan) -> Option<String> {
    let par = &plan.parallelism;
    let what = if plan.model.moe.is_some() {
        "field `model.moe` is set (mixture-of-experts layers)".to_string()
    } else if par.dp > 1 || par.cp > 1 || par.ep > 1 {
        format!(
            "fields `parallelism.dp` = {}, `cp` = {}, `ep` = {} (replicas of the pipeline)",
            par.dp, par.cp, par.ep
        )
    } else if par.precision != "bf16" {
        format!("field `parallelism.precision` is '{}'", par.precision)
    } else {
        return None;
    };
    Some(format!(
        "plan: {what}: the CUDA backend runs one dense BF16/f32 pipeline; run this plan with --backend cpu"
    ))
}

fn build(
    plan: &Plan,
    opts: &RunOptions,
    dist: Option<env::DistEnv>,
    share: ShareMode,
    timeout: Duration,
) -> Result<Vec<Box<dyn DeviceWorker>>, ExecError> {
    let pp = plan.parallelism.pp as u32;
    let bf16 = plan.dtype == "bf16";
    let sched = plan
        .schedule_ir()
        .map_err(|e| ExecError::Plan(e.to_string()))?;
    let gpus = cudarc::driver::CudaContext::device_count().map_err(device::drv)? as u32;
    // (pipeline device, GPU ordinal) run by this process.
    let local: Vec<(u32, u32)> = match &dist {
        Some(e) => {
            if e.world_size != pp {
                return Err(ExecError::Plan(format!(
                    "the launcher started {} processes but the plan has parallelism.pp = {pp}; start one process per pipeline device",
                    e.world_size
                )));
            }
            if e.local_rank >= gpus {
                return Err(ExecError::Plan(format!(
                    "local rank {} has no GPU: this node shows {gpus} CUDA device(s)",
                    e.local_rank
                )));
            }
            vec![(e.rank, e.local_rank)]
        }
        None => layout::gpu_assignment(pp, gpus)
            .into_iter()
            .enumerate()
            .map(|(r, g)| (r as u32, g))
            .collect(),
    };
    // Memory check before any allocation.
    let mut need: BTreeMap<u32, (u64, Vec<u32>)> = BTreeMap::new();
    for &(dev, g) in &local {
        let b = layout::worker_bytes(plan, dev, bf16).map_err(ExecError::Plan)?;
        let e = need.entry(g).or_default();
        e.0 += b;
        e.1.push(dev);
    }
    let ptx = cudarc::nvrtc::compile_ptx(kernels::SOURCE)
        .map_err(|e| ExecError::Backend(format!("NVRTC could not compile the kernels: {e}")))?;
    let shared_gpu = need.values().any(|(_, devs)| devs.len() > 1);
    let mut gpu_objs: BTreeMap<u32, Arc<Gpu>> = BTreeMap::new();
    for (&g, (bytes, devs)) in &need {
        let gpu = Gpu::new(g, &ptx, shared_gpu && share == ShareMode::Serialize)?;
        gpu.ctx.bind_to_thread().map_err(device::drv)?;
        let (free, _total) = cudarc::driver::result::mem_get_info().map_err(device::drv)?;
        if *bytes > free as u64 {
            return Err(ExecError::Plan(format!(
                "pipeline device(s) {devs:?} need about {} on GPU {g} but only {} is free: short by {}; use fewer layers per stage, a smaller micro-batch or sequence, dtype bf16, or more GPUs",
                gib(*bytes),
                gib(free as u64),
                gib(*bytes - free as u64)
            )));
        }
        gpu_objs.insert(g, gpu);
    }
    let dims = Dims::from_plan(plan);
    let stage_device: Vec<u32> = plan.stages.iter().map(|s| s.device).collect();
    let wplan = |dev: u32| WorkerPlan {
        device: dev,
        dims,
        bf16,
        lr: opts.lr,
        seed: opts.seed,
        microbatches_per_step: plan.schedule.microbatches_per_step.max(1),
        stage_device: stage_device.clone(),
        stages: plan
            .stages
            .iter()
            .filter(|s| s.device == dev)
            .map(|s| (s.stage, s.first_layer, s.num_layers, s.embedding, s.output))
            .collect(),
        actions: sched.devices.clone(),
        timeout,
    };
    let mut built: Vec<CudaWorker> = Vec::new();
    match &dist {
        None => {
            let mailbox = Arc::new(Mailbox::default());
            let gpu_of: Vec<Arc<Gpu>> = local.iter().map(|&(_, g)| gpu_objs[&g].clone()).collect();
            // Peer access makes the copies direct (NVLink/PCIe P2P); without it
            // cuMemcpyPeerAsync still works, staged through the host.
            for a in gpu_objs.values() {
                for b in gpu_objs.values() {
                    if a.ordinal != b.ordinal {
                        a.ctx.bind_to_thread().map_err(device::drv)?;
                        let _ = unsafe {
                            cudarc::driver::sys::cuCtxEnablePeerAccess(b.ctx.cu_ctx(), 0)
                        };
                    }
                }
            }
            for &(dev, g) in &local {
                let link = Link::InProc {
                    mailbox: mailbox.clone(),
                    gpu_of: gpu_of.clone(),
                };
                built.push(CudaWorker::new(wplan(dev), gpu_objs[&g].clone(), link)?);
            }
        }
        Some(e) => {
            let me = e.rank;
            let g = e.local_rank;
            // Channels: every ordered pair of devices that exchange messages, in a fixed order.
            let mut channels: Vec<(u32, u32)> = Vec::new();
            for a in 0..pp {
                for b in 0..pp {
                    if a != b
                        && !layout::send_order(plan, &sched.devices[a as usize], a, b).is_empty()
                    {
                        channels.push((a, b));
                    }
                }
            }
            if !unsafe { cudarc::nccl::sys::is_culib_present() } {
                return Err(ExecError::Unavailable(format!(
                    "a multi-process run needs NCCL, which could not be loaded (searched {})",
                    lib_names("nccl")
                )));
            }
            let mut payload = Vec::new();
            if me == 0 {
                for _ in &channels {
                    let id = cudarc::nccl::result::get_uniqueid()
                        .map_err(|e| ExecError::Backend(format!("NCCL: {e:?}")))?;
                    payload.extend(id.internal.iter().map(|&c| c as u8));
                }
            }
            let ids = env::rendezvous(e, &payload, timeout).map_err(ExecError::Unavailable)?;
            if ids.len() != 128 * channels.len() {
                return Err(ExecError::Backend(format!(
                    "rendezvous: got {} bytes of NCCL ids, expected {}",
                    ids.len(),
                    128 * channels.len()
                )));
            }
            let gpu = gpu_objs[&g].clone();
            gpu.ctx.bind_to_thread().map_err(device::drv)?;
            let mut out = BTreeMap::new();
            let mut inn = BTreeMap::new();
            for (c, &(a, b)) in channels.iter().enumerate() {
                if a != me && b != me {
                    continue;
                }
                let mut internal = [0 as std::ffi::c_char; 128];
                for (i, x) in internal.iter_mut().enumerate() {
                    *x = ids[c * 128 + i] as std::ffi::c_char;
                }
                let id = cudarc::nccl::sys::ncclUniqueId { internal };
                let mut comm = std::mem::MaybeUninit::uninit();
                // Sender is rank 0 of the channel, receiver rank 1. Blocking until the peer
                // joins; every process walks the channels in the same order, so this ends.
                unsafe {
                    cudarc::nccl::result::comm_init_rank(
                        comm.as_mut_ptr(),
                        2,
                        id,
                        i32::from(b == me),
                    )
                }
                .map_err(|e| {
                    ExecError::Backend(format!(
                        "NCCL: ncclCommInitRank for channel {a}->{b}: {e:?}"
                    ))
                })?;
                let comm = NcclComm(unsafe { comm.assume_init() });
                if a == me {
                    out.insert(b, NcclOut { comm });
                } else {
                    let order = layout::send_order(plan, &sched.devices[a as usize], a, b);
                    inn.insert(
                        a,
                        NcclIn {
                            comm,
                            order,
                            cursor: 0,
                            landed: Default::default(),
                        },
                    );
                }
            }
            let mut w = CudaWorker::new(wplan(me), gpu, Link::Nccl { out, inn })?;
            w.nccl_warmup(&channels)?;
            built.push(w);
        }
    }
    // Common origin: all workers of this process against one host instant (in a multi-process
    // run each process has its own; they agree to the NCCL warm-up's skew, see the docs).
    let origin = Instant::now();
    for w in &mut built {
        w.start_clock(origin)?;
    }
    Ok(built
        .into_iter()
        .map(|w| Box::new(w) as Box<dyn DeviceWorker>)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{BackwardPart, Span, SpanStream};
    use layout::tests_support::plan;
    use pplan::schedule::generators::ScheduleName;
    use pplan::schedule::ir::Kind;
    use reference::HostModel;

    #[test]
    fn availability_says_what_is_missing_without_a_gpu() {
        match availability() {
            Ok(desc) => {
                // A GPU machine: the description lists the devices.
                assert!(desc.contains("CUDA device"), "{desc}");
            }
            Err(ExecError::Unavailable(msg)) => {
                eprintln!("availability(): {msg}");
                let names_a_library = ["libcuda", "cuBLAS", "NVRTC", "cuInit", "no CUDA device"]
                    .iter()
                    .any(|w| msg.contains(w));
                assert!(
                    names_a_library,
                    "message does not say what is missing: {msg}"
                );
            }
            Err(other) => panic!("availability must answer Unavailable, got {other:?}"),
        }
    }

    #[test]
    fn workers_refuse_cleanly_without_a_gpu_or_for_stashing_plans() {
        let mut p = plan(ScheduleName::OneFOneB, 2, 4, 1, 4);
        if availability().is_err() {
            match workers(&p, &RunOptions::default()) {
                Err(ExecError::Unavailable(_)) => {}
                Err(e) => panic!("expected Unavailable, got {e:?}"),
                Ok(_) => panic!("workers built without CUDA"),
            }
        }
        p.schedule.weight_update = "stash".into();
        match workers(&p, &RunOptions::default()) {
            Err(ExecError::Plan(m)) => assert!(m.contains("schedule.weight_update"), "{m}"),
            Err(e) => panic!("expected a plan error, got {e:?}"),
            Ok(_) => panic!("a stashing plan was accepted"),
        }
    }

    #[test]
    fn share_mode_is_parsed_and_bad_values_named() {
        assert_eq!(parse_share_mode(None), Ok(ShareMode::Streams));
        assert_eq!(parse_share_mode(Some("streams")), Ok(ShareMode::Streams));
        assert_eq!(
            parse_share_mode(Some("serialize")),
            Ok(ShareMode::Serialize)
        );
        let e = parse_share_mode(Some("mps")).unwrap_err();
        assert!(
            e.contains("PPLAN_CUDA_SHARE") && e.contains("serialize"),
            "{e}"
        );
    }

    /// Drives the workers the way the runner will: one thread per device, the plan's action
    /// lists in order, an optimizer step at the end of each step. (The runner replaces this
    /// at merge; it is kept small on purpose.)
    fn drive(
        plan: &Plan,
        ws: Vec<Box<dyn DeviceWorker>>,
        steps: u32,
    ) -> (Vec<Box<dyn DeviceWorker>>, Vec<Span>, f64) {
        let sched = plan.schedule_ir().unwrap();
        let handles: Vec<_> = ws
            .into_iter()
            .map(|mut w| {
                let acts = sched.devices[w.device() as usize].clone();
                std::thread::spawn(move || {
                    let mut spans = Vec::new();
                    let mut loss = 0.0;
                    for _ in 0..steps {
                        for a in &acts {
                            match a.kind {
                                Kind::F => w.forward(a.stage, a.microbatch, &mut spans),
                                Kind::B => w.backward(
                                    a.stage,
                                    a.microbatch,
                                    BackwardPart::Full,
                                    &mut spans,
                                ),
                                Kind::I => w.backward(
                                    a.stage,
                                    a.microbatch,
                                    BackwardPart::Input,
                                    &mut spans,
                                ),
                                Kind::W => w.backward(
                                    a.stage,
                                    a.microbatch,
                                    BackwardPart::Weight,
                                    &mut spans,
                                ),
                            }
                            .unwrap();
                        }
                        w.optimizer_step(&mut spans).unwrap();
                        loss += w.take_loss();
                    }
                    w.synchronize().unwrap();
                    (w, spans, loss)
                })
            })
            .collect();
        let mut out = Vec::new();
        let mut spans = Vec::new();
        let mut loss = 0.0;
        for h in handles {
            let (w, s, l) = h.join().unwrap();
            out.push(w);
            spans.extend(s);
            loss += l;
        }
        (out, spans, loss)
    }

    fn max_rel_diff(got: &[f32], want: &[f32]) -> f32 {
        let scale = want.iter().fold(0.0f32, |m, x| m.max(x.abs())).max(1e-6);
        got.iter()
            .zip(want)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max)
            / scale
    }

    /// The CUDA run's weights after two steps equal the host reference's (f32: 1e-4 of the
    /// largest weight, reduction order differs; bf16: 2e-2, GEMM inputs rounded to 8 bits).
    #[test]
    #[ignore = "needs a CUDA GPU: cargo test -p pplan-exec -- --ignored"]
    fn cuda_weights_match_the_host_reference() {
        if let Err(e) = availability() {
            eprintln!("skipping: {e}");
            return;
        }
        for (dtype, tol) in [("f32", 1e-4f32), ("bf16", 2e-2)] {
            for name in [
                ScheduleName::OneFOneB,
                ScheduleName::ZbH1,
                ScheduleName::GPipe,
            ] {
                let mut p = plan(name, 2, 4, 1, 4);
                p.dtype = dtype.into();
                let opts = RunOptions {
                    steps: 2,
                    lr: 0.1,
                    seed: 11,
                    ..RunOptions::default()
                };
                let ws = workers(&p, &opts).unwrap();
                let (mut ws, _, loss) = drive(&p, ws, opts.steps);
                let mut host = HostModel::new(opts.seed, Dims::from_plan(&p), p.model.num_layers);
                let mut want_loss = 0.0;
                for step in 0..opts.steps {
                    want_loss +=
                        host.train_step(opts.seed, step, p.schedule.microbatches_per_step, opts.lr);
                }
                let want = host.stage_weights(&p);
                for w in &mut ws {
                    for (stage, got) in w.weights().unwrap() {
                        let exp = &want[stage as usize].1;
                        assert_eq!(got.len(), exp.len(), "{dtype} {name:?} stage {stage}");
                        let d = max_rel_diff(&got, exp);
                        assert!(
                            d <= tol,
                            "{dtype} {name:?} stage {stage}: max relative difference {d} > {tol}"
                        );
                    }
                }
                assert!(
                    ((loss - want_loss) / want_loss).abs() < 10.0 * tol as f64,
                    "{dtype} {name:?}: loss {loss} vs {want_loss}"
                );
            }
        }
    }

    /// 1F1B with two pipeline devices on one GPU (forced by CUDA_VISIBLE_DEVICES-independent
    /// means: a plan whose pp exceeds the GPU count, or any count when only one GPU exists)
    /// completes in both sharing modes and measures one compute span per action.
    #[test]
    #[ignore = "needs a CUDA GPU: cargo test -p pplan-exec -- --ignored"]
    fn one_f_one_b_on_a_shared_gpu_produces_spans() {
        if let Err(e) = availability() {
            eprintln!("skipping: {e}");
            return;
        }
        let gpus = cudarc::driver::CudaContext::device_count().unwrap() as u32;
        // pp above the GPU count puts every device on GPU 0.
        let pp = if gpus >= 2 { gpus + 1 } else { 2 };
        let p = plan(ScheduleName::OneFOneB, pp, 4, 1, 2 * pp);
        for mode in ["streams", "serialize"] {
            std::env::set_var("PPLAN_CUDA_SHARE", mode);
            let ws = workers(&p, &RunOptions::default()).unwrap();
            let (_, spans, loss) = drive(&p, ws, 1);
            assert!(loss.is_finite() && loss > 0.0, "{mode}: loss {loss}");
            let compute: Vec<_> = spans
                .iter()
                .filter(|s| s.stream == SpanStream::Compute)
                .collect();
            assert_eq!(
                compute.len() as u32,
                pp * 4 * 2,
                "{mode}: one span per F and B"
            );
            assert!(
                spans
                    .iter()
                    .any(|s| s.stream == SpanStream::Recv && s.name == "1RECV_F0"),
                "{mode}"
            );
            assert!(
                spans
                    .iter()
                    .any(|s| s.stream == SpanStream::Send && s.name == "0SEND_F0" && s.device == 0),
                "{mode}"
            );
            assert_eq!(
                spans
                    .iter()
                    .filter(|s| s.stream == SpanStream::Optimizer)
                    .count() as u32,
                pp
            );
            for s in &spans {
                assert!(s.end_ns >= s.start_ns, "{mode}: {s:?}");
            }
            // On one device, compute spans never overlap (one compute stream).
            for d in 0..pp {
                let mut mine: Vec<_> = compute.iter().filter(|s| s.device == d).collect();
                mine.sort_by_key(|s| s.start_ns);
                for w in mine.windows(2) {
                    assert!(
                        w[1].start_ns + 1_000 >= w[0].end_ns,
                        "{mode}: {:?} overlaps {:?}",
                        w[0],
                        w[1]
                    );
                }
            }
            if mode == "serialize" {
                // Only one device's action at a time on the GPU.
                let mut all = compute.clone();
                all.sort_by_key(|s| s.start_ns);
                // Different workers' clocks agree to the origin-sync latency: allow 50 µs.
                for w in all.windows(2) {
                    assert!(
                        w[1].start_ns + 50_000 >= w[0].end_ns,
                        "serialize: {:?} overlaps {:?}",
                        w[0],
                        w[1]
                    );
                }
            }
        }
        std::env::remove_var("PPLAN_CUDA_SHARE");
    }
}
