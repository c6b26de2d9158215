//! The CUDA [`DeviceWorker`]: one pipeline device's stages, weights and activations on one GPU,
//! its streams, its GEMMs and kernels, its transfers and its event timing.
//!
//! Ordering rules (event tracking of cudarc is disabled on every context, so these are ours):
//! - All of a worker's math runs on its one compute stream, in program order.
//! - A buffer produced on the compute stream and handed to another device carries a `ready`
//!   event recorded right after it was written; the copy (peer copy or NCCL) waits on it.
//! - The compute stream waits on a copy's `done` event before it reads the received buffer.
//! - A buffer touched by more than one stream is never freed while a stream may still use it:
//!   it is *retired* with an event recorded after its last use and dropped once the host sees
//!   the event complete (polled at every call, all at `synchronize`), so freeing adds no
//!   dependency between streams.
//!
//! This file holds the types (GPU, mailbox, links, buffers, the worker) and the worker's
//! plumbing (construction, events, allocation, retiring, spans); the worker's other methods are
//! split by concern: [`ops`] (operands, GEMMs, kernel launches), [`transfer`] (messages between
//! devices), [`layers`] (one layer's forward and backward math), [`steps`] (a stage's pipeline
//! actions and the [`DeviceWorker`] impl) and [`timing`] (calibration timings).

mod layers;
mod ops;
mod steps;
pub(crate) mod timing;
mod transfer;

use super::kernels::{self, elementwise_config, row_block};
use super::layout::{backward_kind, col_major, Dir, MsgKey};
use super::ticket::{spin_until, TicketGuard, TicketLock};
use crate::backend::{BackwardPart, DeviceWorker, ExecError, Span, SpanStream};
use crate::spec::{init_matrix, labels, token_ids, Dims, Matrix};
use cudarc::cublas::{result as cublas_result, sys as cublas_sys, CudaBlas};
use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{
    result as drv_result, CudaContext, CudaEvent, CudaFunction, CudaSlice, CudaStream, DevicePtr,
    LaunchConfig, PushKernelArg,
};
use cudarc::nccl::{result as nccl_result, sys as nccl_sys};
use pplan::schedule::ir::{Action, Kind};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub(crate) fn drv(e: impl std::fmt::Display) -> ExecError {
    ExecError::Backend(format!("CUDA: {e}"))
}
fn blas_err(e: impl std::fmt::Display) -> ExecError {
    ExecError::Backend(format!("cuBLAS: {e}"))
}
fn nccl_err(e: impl std::fmt::Debug) -> ExecError {
    ExecError::Backend(format!("NCCL: {e:?}"))
}

/// Raw device address of a slice (event tracking is off, so the guard does nothing).
fn dptr<T>(s: &CudaSlice<T>, st: &CudaStream) -> u64 {
    let (p, _guard) = s.device_ptr(st);
    p
}

fn lock(gpu: &Gpu) -> Option<TicketGuard<'_>> {
    gpu.serial.as_ref().map(TicketLock::lock)
}

/// One GPU shared by the workers placed on it: its context, its kernels, and in `serialize`
/// mode the lock that lets one worker's action run at a time.
pub(crate) struct Gpu {
    pub ctx: Arc<CudaContext>,
    pub ordinal: u32,
    funcs: Vec<CudaFunction>,
    serial: Option<TicketLock>,
}

const K_CAST: usize = 0;
const K_EMBED_FWD: usize = 1;
const K_EMBED_BWD: usize = 2;
const K_GELU_FWD: usize = 3;
const K_GELU_BWD: usize = 4;
const K_SOFTMAX_FWD: usize = 5;
const K_SOFTMAX_BWD: usize = 6;
const K_XENT: usize = 7;
const K_SGD: usize = 8;
const K_AXPY: usize = 9;

impl Gpu {
    pub fn new(
        ordinal: u32,
        ptx: &cudarc::nvrtc::Ptx,
        serialize: bool,
    ) -> Result<Arc<Gpu>, ExecError> {
        let ctx = CudaContext::new(ordinal as usize).map_err(drv)?;
        // SAFETY: every worker follows the ordering rules in this module's documentation.
        unsafe { ctx.disable_event_tracking() };
        // Keep freed memory in the stream-ordered pool: with the default release threshold (0)
        // the driver returns it to the OS at every synchronisation and the next allocations
        // map it again, milliseconds each (PyTorch's caching allocator avoids the same cost).
        let pools = ctx
            .attribute(
                cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED,
            )
            .unwrap_or(0);
        if pools != 0 {
            // SAFETY: the device is this context's; the attribute takes a u64.
            unsafe {
                let pool =
                    drv_result::device::get_default_mem_pool(ctx.cu_device()).map_err(drv)?;
                let mut keep = u64::MAX;
                drv_result::mem_pool::set_attribute(
                    pool,
                    cudarc::driver::sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                    &mut keep as *mut u64 as *mut std::ffi::c_void,
                )
                .map_err(drv)?;
            }
        }
        let module = ctx.load_module(ptx.clone()).map_err(drv)?;
        let funcs = kernels::NAMES
            .iter()
            .map(|n| module.load_function(n).map_err(drv))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Arc::new(Gpu {
            ctx,
            ordinal,
            funcs,
            serial: serialize.then(TicketLock::default),
        }))
    }
}

/// Messages between workers of one process: the producer posts its buffer and a `ready`
/// event; the consumer takes it (waiting on the host until it is posted) and copies it.
#[derive(Default)]
pub(crate) struct Mailbox {
    slots: Mutex<HashMap<(u32, MsgKey), Msg>>,
}

struct Msg {
    data: CudaSlice<f32>,
    ready: CudaEvent,
}

impl Mailbox {
    fn post(&self, step: u32, key: MsgKey, msg: Msg) {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.insert((step, key), msg);
    }

    /// Polls (spinning, then yielding: no sleep, so no wake-up latency) until the message is
    /// posted or `timeout` passes.
    fn take(&self, step: u32, key: MsgKey, timeout: Duration) -> Option<Msg> {
        spin_until(Instant::now() + timeout, || {
            self.slots
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&(step, key))
        })
    }
}

/// A two-rank NCCL communicator that carries one direction between two pipeline devices.
pub(crate) struct NcclComm(pub nccl_sys::ncclComm_t);
// SAFETY: a communicator is used by one worker (one thread at a time).
unsafe impl Send for NcclComm {}
impl Drop for NcclComm {
    fn drop(&mut self) {
        unsafe {
            let _ = nccl_result::comm_destroy(self.0);
        }
    }
}

/// This worker's end of a channel to (`out`) or from (`inn`) one peer device.
pub(crate) struct NcclOut {
    pub comm: NcclComm,
}
pub(crate) struct NcclIn {
    pub comm: NcclComm,
    /// The peer's sends to us in its program order (see `layout::send_order`).
    pub order: Vec<MsgKey>,
    pub cursor: usize,
    pub landed: HashMap<MsgKey, (CudaSlice<f32>, CudaEvent)>,
}

pub(crate) enum Link {
    /// Workers of one process: mailbox + peer copies (or device-local copies on a shared GPU).
    InProc {
        mailbox: Arc<Mailbox>,
        gpu_of: Vec<Arc<Gpu>>,
    },
    /// One worker per process: NCCL send/recv on a communicator per direction.
    Nccl {
        out: BTreeMap<u32, NcclOut>,
        inn: BTreeMap<u32, NcclIn>,
    },
}

struct Mat {
    w: CudaSlice<f32>,
    g: CudaSlice<f32>,
    w16: Option<CudaSlice<u16>>,
}

struct StageWeights {
    first_layer: u32,
    emb: Option<Mat>,
    layers: Vec<[Mat; 4]>,
    out: Option<Mat>,
}

#[derive(Default)]
struct LayerAct {
    x: Option<CudaSlice<f32>>,
    qkv: Option<CudaSlice<f32>>,
    p: Option<CudaSlice<f32>>,
    ctx: Option<CudaSlice<f32>>,
    x1: Option<CudaSlice<f32>>,
    u: Option<CudaSlice<f32>>,
    g: Option<CudaSlice<f32>>,
    dqkv: Option<CudaSlice<f32>>,
    dx1: Option<CudaSlice<f32>>,
    du: Option<CudaSlice<f32>>,
    dy: Option<CudaSlice<f32>>,
}

#[derive(Default)]
struct StageAct {
    ids: Option<CudaSlice<u32>>,
    layers: Vec<LayerAct>,
    /// Input of the output GEMM (last stage).
    y: Option<CudaSlice<f32>>,
    /// `(softmax − onehot)/(T·M)`, computed in F (last stage).
    dlogits: Option<CudaSlice<f32>>,
    /// Gradient of the embedding output, kept by I for W (stage 0).
    dx0: Option<CudaSlice<f32>>,
    input_done: bool,
}

/// Buffers of a GEMM sweep, allocated once (see [`CudaWorker::gemm_arena`]).
pub(crate) struct GemmArena {
    _a: CudaSlice<f32>,
    _b: CudaSlice<f32>,
    c: CudaSlice<f32>,
    ao: Opnd,
    bo: Opnd,
}

/// A GEMM operand: f32 data, or its bf16 copy when the plan's dtype is bf16.
struct Opnd {
    ptr: u64,
    esz: u64,
    _keep: Option<CudaSlice<u16>>,
}
impl Opnd {
    fn at(&self, elems: usize) -> u64 {
        self.ptr + self.esz * elems as u64
    }
}

/// (GEMM input X, output gradient dY, matrix index, rows, cols) of one `dW += Xᵀ·dY`.
type WeightGemm<'a> = (
    &'a Option<CudaSlice<f32>>,
    &'a Option<CudaSlice<f32>>,
    usize,
    usize,
    usize,
);

struct PendingSpan {
    span: Span,
    start: CudaEvent,
    end: CudaEvent,
}

/// Static facts a worker needs about the plan.
pub(crate) struct WorkerPlan {
    pub device: u32,
    pub dims: Dims,
    pub bf16: bool,
    pub lr: f32,
    pub seed: u64,
    pub microbatches_per_step: u32,
    /// `stage_device[s]`.
    pub stage_device: Vec<u32>,
    /// (stage, first_layer, num_layers, embedding, output) of this device's stages.
    pub stages: Vec<(u32, u32, u32, bool, bool)>,
    /// Every device's action list (names the backward kind of gradient transfers).
    pub actions: Vec<Vec<Action>>,
    pub timeout: Duration,
}

pub struct CudaWorker {
    p: WorkerPlan,
    gpu: Arc<Gpu>,
    compute: Arc<CudaStream>,
    blas: CudaBlas,
    /// Receive streams (in-process pulls, NCCL receives), one per peer device.
    recv: BTreeMap<u32, Arc<CudaStream>>,
    /// NCCL send streams, one per peer device.
    send: BTreeMap<u32, Arc<CudaStream>>,
    weights: BTreeMap<u32, StageWeights>,
    acts: HashMap<(u32, u32), StageAct>,
    local: HashMap<MsgKey, CudaSlice<f32>>,
    pub(crate) link: Link,
    step: u32,
    loss: CudaSlice<f64>,
    origin: Option<(CudaEvent, u64)>,
    pending: Vec<PendingSpan>,
    retired: Vec<(Box<dyn Send>, CudaEvent)>,
}

enum Incoming {
    Local(CudaSlice<f32>),
    Mail(Msg),
    Nccl,
}

impl CudaWorker {
    pub(crate) fn new(p: WorkerPlan, gpu: Arc<Gpu>, link: Link) -> Result<CudaWorker, ExecError> {
        let compute = gpu.ctx.new_stream().map_err(drv)?;
        let blas = CudaBlas::new(compute.clone()).map_err(blas_err)?;
        let d = p.dims;
        let mk = |layer: u32, m: Matrix| -> Result<Mat, ExecError> {
            let host = init_matrix(p.seed, layer, m, &d);
            let w = compute.clone_htod(&host).map_err(drv)?;
            let g = compute.alloc_zeros::<f32>(host.len()).map_err(drv)?;
            let w16 = if p.bf16 {
                Some(unsafe { compute.alloc::<u16>(host.len()) }.map_err(drv)?)
            } else {
                None
            };
            Ok(Mat { w, g, w16 })
        };
        let mut weights = BTreeMap::new();
        for &(stage, first, n, emb, out) in &p.stages {
            let layers = (first..first + n)
                .map(|l| {
                    Ok([
                        mk(l, Matrix::Qkv)?,
                        mk(l, Matrix::Out)?,
                        mk(l, Matrix::Mlp1)?,
                        mk(l, Matrix::Mlp2)?,
                    ])
                })
                .collect::<Result<Vec<_>, ExecError>>()?;
            weights.insert(
                stage,
                StageWeights {
                    first_layer: first,
                    emb: if emb {
                        Some(mk(0, Matrix::Embedding)?)
                    } else {
                        None
                    },
                    layers,
                    out: if out {
                        Some(mk(0, Matrix::Output)?)
                    } else {
                        None
                    },
                },
            );
        }
        let loss = compute.alloc_zeros::<f64>(1).map_err(drv)?;
        let mut peers: Vec<u32> = Vec::new();
        for &(stage, ..) in &p.stages {
            for nb in [stage.checked_sub(1), Some(stage + 1)]
                .into_iter()
                .flatten()
            {
                if let Some(&dv) = p.stage_device.get(nb as usize) {
                    if dv != p.device && !peers.contains(&dv) {
                        peers.push(dv);
                    }
                }
            }
        }
        let mut recv = BTreeMap::new();
        let mut send = BTreeMap::new();
        for &peer in &peers {
            recv.insert(peer, gpu.ctx.new_stream().map_err(drv)?);
            if matches!(link, Link::Nccl { .. }) {
                send.insert(peer, gpu.ctx.new_stream().map_err(drv)?);
            }
        }
        let mut w = CudaWorker {
            p,
            gpu,
            compute,
            blas,
            recv,
            send,
            weights,
            acts: HashMap::new(),
            local: HashMap::new(),
            link,
            step: 0,
            loss,
            origin: None,
            pending: Vec::new(),
            retired: Vec::new(),
        };
        w.refresh_bf16()?;
        w.compute.synchronize().map_err(drv)?;
        Ok(w)
    }

    /// Records this worker's origin event and the host time at which it completed, relative to
    /// the run's common `origin`; every span is `offset + (event − origin event)`.
    pub(crate) fn start_clock(&mut self, origin: Instant) -> Result<(), ExecError> {
        self.compute.synchronize().map_err(drv)?;
        let ev = self.timing_event()?;
        ev.record(&self.compute).map_err(drv)?;
        ev.synchronize().map_err(drv)?;
        let offset = origin.elapsed().as_nanos() as u64;
        self.origin = Some((ev, offset));
        Ok(())
    }

    /// Warms up NCCL channels: a one-float send/recv on each, in channel order (the caller
    /// passes the channel list so every process walks it identically).
    pub(crate) fn nccl_warmup(&mut self, channels: &[(u32, u32)]) -> Result<(), ExecError> {
        let probe = self.compute.alloc_zeros::<f32>(1).map_err(drv)?;
        self.compute.synchronize().map_err(drv)?;
        let ptr = dptr(&probe, &self.compute);
        if let Link::Nccl { out, inn } = &self.link {
            for &(a, b) in channels {
                if a == self.p.device {
                    let st = &self.send[&b];
                    unsafe {
                        nccl_result::send(
                            ptr as _,
                            1,
                            nccl_sys::ncclDataType_t::ncclFloat32,
                            1,
                            out[&b].comm.0,
                            st.cu_stream() as _,
                        )
                    }
                    .map_err(nccl_err)?;
                    st.synchronize().map_err(drv)?;
                } else if b == self.p.device {
                    let st = &self.recv[&a];
                    unsafe {
                        nccl_result::recv(
                            ptr as _,
                            1,
                            nccl_sys::ncclDataType_t::ncclFloat32,
                            0,
                            inn[&a].comm.0,
                            st.cu_stream() as _,
                        )
                    }
                    .map_err(nccl_err)?;
                    st.synchronize().map_err(drv)?;
                }
            }
        }
        Ok(())
    }

    fn timing_event(&self) -> Result<CudaEvent, ExecError> {
        self.gpu
            .ctx
            .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(drv)
    }

    fn sync_event(&self) -> Result<CudaEvent, ExecError> {
        self.gpu.ctx.new_event(None).map_err(drv)
    }

    fn alloc(&self, n: usize) -> Result<CudaSlice<f32>, ExecError> {
        unsafe { self.compute.alloc::<f32>(n.max(1)) }.map_err(drv)
    }

    fn retire(&mut self, what: Box<dyn Send>, after: &CudaStream) -> Result<(), ExecError> {
        let ev = self.sync_event()?;
        ev.record(after).map_err(drv)?;
        self.retired.push((what, ev));
        Ok(())
    }

    fn reap(&mut self) {
        self.retired.retain(|(_, ev)| !ev.is_complete());
    }

    #[allow(clippy::too_many_arguments)]
    fn span(
        &self,
        stream: SpanStream,
        device: u32,
        name: String,
        stage: u32,
        mb: u32,
        kind: Kind,
        peer: Option<u32>,
    ) -> Span {
        Span {
            device,
            stream,
            name,
            stage: Some(stage),
            microbatch: Some(mb),
            kind: Some(kind),
            peer,
            start_ns: 0,
            end_ns: 0,
        }
    }

    /// Moves every pending span whose end event has completed (all of them if `all`) into
    /// `spans`, converting event times into nanoseconds since the run's origin. Resolution:
    /// `cuEventElapsedTime` reports about 0.5 µs.
    fn flush_spans(&mut self, spans: &mut Vec<Span>, all: bool) -> Result<(), ExecError> {
        let Some((origin, offset)) = &self.origin else {
            return Ok(());
        };
        let mut keep = Vec::new();
        for mut p in self.pending.drain(..) {
            if !all && !p.end.is_complete() {
                keep.push(p);
                continue;
            }
            let ns = |e: &CudaEvent| -> Result<u64, ExecError> {
                let ms = origin.elapsed_ms(e).map_err(drv)?;
                Ok(offset + (ms.max(0.0) as f64 * 1e6).round() as u64)
            };
            p.span.start_ns = ns(&p.start)?;
            p.span.end_ns = ns(&p.end)?.max(p.span.start_ns);
            spans.push(p.span);
        }
        self.pending = keep;
        Ok(())
    }

    fn sync_all(&mut self) -> Result<(), ExecError> {
        self.gpu.ctx.bind_to_thread().map_err(drv)?;
        self.compute.synchronize().map_err(drv)?;
        for st in self.recv.values().chain(self.send.values()) {
            st.synchronize().map_err(drv)?;
        }
        self.retired.clear();
        Ok(())
    }

    fn download(&self, s: &CudaSlice<f32>) -> Result<Vec<f32>, ExecError> {
        self.compute.clone_dtoh(s).map_err(drv)
    }
}

impl Drop for CudaWorker {
    fn drop(&mut self) {
        // Let queued work finish before buffers are freed and streams destroyed.
        let _ = self.sync_all();
    }
}
