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

    // ----- operands, GEMMs and kernels -----

    fn opnd(&self, s: &CudaSlice<f32>) -> Result<Opnd, ExecError> {
        if !self.p.bf16 {
            return Ok(Opnd {
                ptr: dptr(s, &self.compute),
                esz: 4,
                _keep: None,
            });
        }
        let n = s.len();
        let out = unsafe { self.compute.alloc::<u16>(n.max(1)) }.map_err(drv)?;
        let (x, y, nn) = (dptr(s, &self.compute), dptr(&out, &self.compute), n as i64);
        self.launch_elementwise(K_CAST, n, &[&x, &y], Some(&nn))?;
        Ok(Opnd {
            ptr: y,
            esz: 2,
            _keep: Some(out),
        })
    }

    fn wopnd(&self, m: &Mat) -> Opnd {
        match &m.w16 {
            Some(w16) => Opnd {
                ptr: dptr(w16, &self.compute),
                esz: 2,
                _keep: None,
            },
            None => Opnd {
                ptr: dptr(&m.w, &self.compute),
                esz: 4,
                _keep: None,
            },
        }
    }

    /// Row-major `C = alpha·op(A)·op(B) + beta·C` (see `layout::col_major`), optionally
    /// strided-batched: `batch = (count, stride_a, stride_b, stride_c)` in elements.
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &self,
        ta: bool,
        tb: bool,
        (m, n, k): (usize, usize, usize),
        a: u64,
        lda: usize,
        b: u64,
        ldb: usize,
        c: u64,
        ldc: usize,
        alpha: f32,
        beta: f32,
        batch: Option<(usize, usize, usize, usize)>,
    ) -> Result<(), ExecError> {
        use cublas_sys::cublasOperation_t::{CUBLAS_OP_N, CUBLAS_OP_T};
        let g = col_major(ta, tb, m, n, k);
        let op = |t: bool| if t { CUBLAS_OP_T } else { CUBLAS_OP_N };
        let dt = if self.p.bf16 {
            cublas_sys::cudaDataType_t::CUDA_R_16BF
        } else {
            cublas_sys::cudaDataType_t::CUDA_R_32F
        };
        let f32t = cublas_sys::cudaDataType_t::CUDA_R_32F;
        let compute = cublas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F;
        let algo = cublas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT;
        let h = *self.blas.handle();
        let (alpha_p, beta_p) = (
            &alpha as *const f32 as *const _,
            &beta as *const f32 as *const _,
        );
        unsafe {
            match batch {
                None => cublas_result::gemm_ex(
                    h,
                    op(g.trans_first),
                    op(g.trans_second),
                    g.m as i32,
                    g.n as i32,
                    g.k as i32,
                    alpha_p,
                    b as _,
                    dt,
                    ldb as i32,
                    a as _,
                    dt,
                    lda as i32,
                    beta_p,
                    c as _,
                    f32t,
                    ldc as i32,
                    compute,
                    algo,
                ),
                Some((count, sa, sb, sc)) => cublas_result::gemm_strided_batched_ex(
                    h,
                    op(g.trans_first),
                    op(g.trans_second),
                    g.m as i32,
                    g.n as i32,
                    g.k as i32,
                    alpha_p,
                    b as _,
                    dt,
                    ldb as i32,
                    sb as i64,
                    a as _,
                    dt,
                    lda as i32,
                    sa as i64,
                    beta_p,
                    c as _,
                    f32t,
                    ldc as i32,
                    sc as i64,
                    count as i32,
                    compute,
                    algo,
                ),
            }
        }
        .map_err(blas_err)
    }

    /// Element-wise launch: pointer arguments, then an optional f32, then the element count.
    fn launch_elementwise(
        &self,
        k: usize,
        n: usize,
        ptrs: &[&u64],
        scalar_i64: Option<&i64>,
    ) -> Result<(), ExecError> {
        let (blocks, threads) = elementwise_config(n);
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut b = self.compute.launch_builder(&self.gpu.funcs[k]);
        for p in ptrs {
            b.arg(*p);
        }
        if let Some(s) = scalar_i64 {
            b.arg(s);
        }
        unsafe { b.launch(cfg) }.map_err(drv)?;
        Ok(())
    }

    fn row_cfg(rows: usize, row_len: usize) -> LaunchConfig {
        let t = row_block(row_len);
        LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (t, 1, 1),
            shared_mem_bytes: 4 * t,
        }
    }

    fn copy(&self, src: &CudaSlice<f32>) -> Result<CudaSlice<f32>, ExecError> {
        let dst = self.alloc(src.len())?;
        unsafe {
            drv_result::memcpy_dtod_async(
                dptr(&dst, &self.compute),
                dptr(src, &self.compute),
                4 * src.len(),
                self.compute.cu_stream(),
            )
        }
        .map_err(drv)?;
        Ok(dst)
    }

    fn refresh_bf16(&mut self) -> Result<(), ExecError> {
        if !self.p.bf16 {
            return Ok(());
        }
        let mut jobs = Vec::new();
        for sw in self.weights.values() {
            for m in sw
                .emb
                .iter()
                .chain(sw.layers.iter().flatten())
                .chain(sw.out.iter())
            {
                if let Some(w16) = &m.w16 {
                    jobs.push((
                        dptr(&m.w, &self.compute),
                        dptr(w16, &self.compute),
                        m.w.len(),
                    ));
                }
            }
        }
        for (x, y, n) in jobs {
            let nn = n as i64;
            self.launch_elementwise(K_CAST, n, &[&x, &y], Some(&nn))?;
        }
        Ok(())
    }

    // ----- transfers -----

    fn transfer_kind(&self, key: MsgKey) -> Kind {
        match key.0 {
            Dir::Act => Kind::F,
            Dir::Grad => {
                let dev = self.p.stage_device[key.1 as usize] as usize;
                backward_kind(&self.p.actions[dev], key.1, key.2)
            }
        }
    }

    fn transfer_names(key: MsgKey) -> (String, String) {
        let (d, s, mb) = key;
        match d {
            Dir::Act => (format!("{s}SEND_F{mb}"), format!("{}RECV_F{mb}", s + 1)),
            Dir::Grad => (
                format!("{s}SEND_B{mb}"),
                format!("{}RECV_B{mb}", s.saturating_sub(1)),
            ),
        }
    }

    /// First half of receiving: get hold of the message (host wait), without GPU work.
    fn fetch(&mut self, key: MsgKey) -> Result<Incoming, ExecError> {
        let from = self.p.stage_device[key.1 as usize];
        if from == self.p.device {
            return self.local.remove(&key).map(Incoming::Local).ok_or_else(|| {
                ExecError::Backend(format!(
                    "device {}: no local handoff for {key:?}",
                    self.p.device
                ))
            });
        }
        match &self.link {
            Link::InProc { mailbox, .. } => mailbox
                .take(self.step, key, self.p.timeout)
                .map(Incoming::Mail)
                .ok_or_else(|| ExecError::Peer {
                    device: from,
                    what: format!(
                        "device {} waited {} s for {} from device {from} (step {}); the peer failed or the schedule cannot progress",
                        self.p.device,
                        self.p.timeout.as_secs(),
                        Self::transfer_names(key).0,
                        self.step
                    ),
                }),
            Link::Nccl { .. } => Ok(Incoming::Nccl),
        }
    }

    /// Second half: issue the copy and make the compute stream wait for it.
    fn land(&mut self, key: MsgKey, inc: Incoming) -> Result<CudaSlice<f32>, ExecError> {
        let from = self.p.stage_device[key.1 as usize];
        let kind = self.transfer_kind(key);
        let (send_name, recv_name) = Self::transfer_names(key);
        let n = self.p.dims.tokens() * self.p.dims.hidden;
        match inc {
            Incoming::Local(s) => Ok(s),
            Incoming::Mail(msg) => {
                let rs = self.recv[&from].clone();
                rs.wait(&msg.ready).map_err(drv)?;
                let dst = unsafe { rs.alloc::<f32>(n) }.map_err(drv)?;
                // Two timing pairs: a pending span owns its events, and this one copy is
                // reported twice (receiver's recv lane, sender's send lane).
                let (t0, t1, done) = (
                    self.timing_event()?,
                    self.timing_event()?,
                    self.sync_event()?,
                );
                let (s0, s1) = (self.timing_event()?, self.timing_event()?);
                t0.record(&rs).map_err(drv)?;
                s0.record(&rs).map_err(drv)?;
                let src_gpu = match &self.link {
                    Link::InProc { gpu_of, .. } => gpu_of[from as usize].clone(),
                    Link::Nccl { .. } => unreachable!("mail only exists in-process"),
                };
                let bytes = 4 * n;
                let (dp, sp) = (dptr(&dst, &rs), dptr(&msg.data, &rs));
                unsafe {
                    if src_gpu.ordinal == self.gpu.ordinal {
                        drv_result::memcpy_dtod_async(dp, sp, bytes, rs.cu_stream())
                    } else {
                        drv_result::memcpy_peer_async(
                            self.gpu.ctx.cu_ctx(),
                            dp,
                            src_gpu.ctx.cu_ctx(),
                            sp,
                            bytes,
                            rs.cu_stream(),
                        )
                    }
                }
                .map_err(drv)?;
                t1.record(&rs).map_err(drv)?;
                s1.record(&rs).map_err(drv)?;
                done.record(&rs).map_err(drv)?;
                self.compute.wait(&done).map_err(drv)?;
                // The producer's buffer is free once the copy is done.
                self.retired.push((Box::new(msg.data), done));
                let me = self.p.device;
                // A pull copy occupies the sender's and the receiver's link at once; the
                // sender's span is the same interval, reported for the sender's device.
                let s_recv = self.span(
                    SpanStream::Recv,
                    me,
                    recv_name,
                    key.1,
                    key.2,
                    kind,
                    Some(from),
                );
                let s_send = self.span(
                    SpanStream::Send,
                    from,
                    send_name,
                    key.1,
                    key.2,
                    kind,
                    Some(me),
                );
                self.pending.push(PendingSpan {
                    span: s_send,
                    start: s0,
                    end: s1,
                });
                self.pending.push(PendingSpan {
                    span: s_recv,
                    start: t0,
                    end: t1,
                });
                Ok(dst)
            }
            Incoming::Nccl => {
                let rs = self.recv[&from].clone();
                loop {
                    let Link::Nccl { inn, .. } = &mut self.link else {
                        unreachable!()
                    };
                    let ch = inn.get_mut(&from).ok_or_else(|| {
                        ExecError::Backend(format!(
                            "device {}: no NCCL channel from device {from}",
                            self.p.device
                        ))
                    })?;
                    if let Some((buf, done)) = ch.landed.remove(&key) {
                        self.compute.wait(&done).map_err(drv)?;
                        return Ok(buf);
                    }
                    if ch.order.is_empty() {
                        return Err(ExecError::Backend(format!(
                            "device {}: device {from} sends nothing to us",
                            self.p.device
                        )));
                    }
                    let next = ch.order[ch.cursor % ch.order.len()];
                    ch.cursor += 1;
                    let comm = ch.comm.0;
                    let dst = unsafe { rs.alloc::<f32>(n) }.map_err(drv)?;
                    let (t0, t1, done) = (
                        self.timing_event()?,
                        self.timing_event()?,
                        self.sync_event()?,
                    );
                    t0.record(&rs).map_err(drv)?;
                    unsafe {
                        nccl_result::recv(
                            dptr(&dst, &rs) as _,
                            n,
                            nccl_sys::ncclDataType_t::ncclFloat32,
                            0,
                            comm,
                            rs.cu_stream() as _,
                        )
                    }
                    .map_err(nccl_err)?;
                    t1.record(&rs).map_err(drv)?;
                    done.record(&rs).map_err(drv)?;
                    let (_, rname) = Self::transfer_names(next);
                    let k = self.transfer_kind(next);
                    let sp = self.span(
                        SpanStream::Recv,
                        self.p.device,
                        rname,
                        next.1,
                        next.2,
                        k,
                        Some(from),
                    );
                    self.pending.push(PendingSpan {
                        span: sp,
                        start: t0,
                        end: t1,
                    });
                    let Link::Nccl { inn, .. } = &mut self.link else {
                        unreachable!()
                    };
                    inn.get_mut(&from)
                        .expect("checked above")
                        .landed
                        .insert(next, (dst, done));
                }
            }
        }
    }

    /// Hands `data` (produced on the compute stream) to the stage `to_stage`.
    fn deliver(
        &mut self,
        key: MsgKey,
        to_stage: u32,
        data: CudaSlice<f32>,
    ) -> Result<(), ExecError> {
        let to = self.p.stage_device[to_stage as usize];
        if to == self.p.device {
            self.local.insert(key, data);
            return Ok(());
        }
        let ready = self.sync_event()?;
        ready.record(&self.compute).map_err(drv)?;
        let step = self.step;
        let me = self.p.device;
        let kind = self.transfer_kind(key);
        match &self.link {
            Link::InProc { mailbox, .. } => {
                mailbox.post(step, key, Msg { data, ready });
                Ok(())
            }
            Link::Nccl { out, .. } => {
                let comm = out
                    .get(&to)
                    .ok_or_else(|| {
                        ExecError::Backend(format!("device {me}: no NCCL channel to device {to}"))
                    })?
                    .comm
                    .0;
                let ss = self.send[&to].clone();
                ss.wait(&ready).map_err(drv)?;
                let (t0, t1) = (self.timing_event()?, self.timing_event()?);
                t0.record(&ss).map_err(drv)?;
                unsafe {
                    nccl_result::send(
                        dptr(&data, &ss) as _,
                        data.len(),
                        nccl_sys::ncclDataType_t::ncclFloat32,
                        1,
                        comm,
                        ss.cu_stream() as _,
                    )
                }
                .map_err(nccl_err)?;
                t1.record(&ss).map_err(drv)?;
                let (sname, _) = Self::transfer_names(key);
                let sp = self.span(SpanStream::Send, me, sname, key.1, key.2, kind, Some(to));
                self.pending.push(PendingSpan {
                    span: sp,
                    start: t0,
                    end: t1,
                });
                self.retire(Box::new(data), &ss)
            }
        }
    }

    // ----- the model -----

    fn layer_forward(
        &self,
        stage: u32,
        li: usize,
        x: CudaSlice<f32>,
    ) -> Result<(CudaSlice<f32>, LayerAct), ExecError> {
        let d = self.p.dims;
        let (t, h, f, nh, hd, s) = (d.tokens(), d.hidden, d.ffn, d.heads, d.head_dim(), d.seq);
        let w = &self.weights[&stage].layers[li];
        let cs = &self.compute;
        // qkv = x · Wqkv
        let qkv = self.alloc(t * 3 * h)?;
        {
            let xa = self.opnd(&x)?;
            self.gemm(
                false,
                false,
                (t, 3 * h, h),
                xa.ptr,
                h,
                self.wopnd(&w[0]).ptr,
                3 * h,
                dptr(&qkv, cs),
                3 * h,
                1.0,
                0.0,
                None,
            )?;
        }
        // Attention: per sequence, strided-batched over heads (head j = columns j·d..).
        let probs = self.alloc(d.micro_batch * nh * s * s)?;
        let ctx = self.alloc(t * h)?;
        let scale = 1.0 / (hd as f32).sqrt();
        {
            let q = self.opnd(&qkv)?;
            for b in 0..d.micro_batch {
                let row = b * s * 3 * h;
                let pb = dptr(&probs, cs) + 4 * (b * nh * s * s) as u64;
                self.gemm(
                    false,
                    true,
                    (s, s, hd),
                    q.at(row),
                    3 * h,
                    q.at(row + h),
                    3 * h,
                    pb,
                    s,
                    scale,
                    0.0,
                    Some((nh, hd, hd, s * s)),
                )?;
            }
            let (pp, seq) = (dptr(&probs, cs), s as i64);
            let cfg = Self::row_cfg(d.micro_batch * nh * s, s);
            let mut lb = cs.launch_builder(&self.gpu.funcs[K_SOFTMAX_FWD]);
            lb.arg(&pp).arg(&seq);
            unsafe { lb.launch(cfg) }.map_err(drv)?;
            let pa = self.opnd(&probs)?;
            for b in 0..d.micro_batch {
                let c0 = dptr(&ctx, cs) + 4 * (b * s * h) as u64;
                self.gemm(
                    false,
                    false,
                    (s, hd, s),
                    pa.at(b * nh * s * s),
                    s,
                    q.at(b * s * 3 * h + 2 * h),
                    3 * h,
                    c0,
                    h,
                    1.0,
                    0.0,
                    Some((nh, s * s, hd, hd)),
                )?;
            }
        }
        // x1 = x + ctx · Wo (the residual is the GEMM's beta = 1 input)
        let x1 = self.copy(&x)?;
        {
            let ca = self.opnd(&ctx)?;
            self.gemm(
                false,
                false,
                (t, h, h),
                ca.ptr,
                h,
                self.wopnd(&w[1]).ptr,
                h,
                dptr(&x1, cs),
                h,
                1.0,
                1.0,
                None,
            )?;
        }
        // u = x1 · W1; g = gelu(u)
        let u = self.alloc(t * f)?;
        {
            let xa = self.opnd(&x1)?;
            self.gemm(
                false,
                false,
                (t, f, h),
                xa.ptr,
                h,
                self.wopnd(&w[2]).ptr,
                f,
                dptr(&u, cs),
                f,
                1.0,
                0.0,
                None,
            )?;
        }
        let g = self.alloc(t * f)?;
        let (up, gp, nn) = (dptr(&u, cs), dptr(&g, cs), (t * f) as i64);
        self.launch_elementwise(K_GELU_FWD, t * f, &[&up, &gp], Some(&nn))?;
        // y = x1 + g · W2
        let y = self.copy(&x1)?;
        {
            let ga = self.opnd(&g)?;
            self.gemm(
                false,
                false,
                (t, h, f),
                ga.ptr,
                f,
                self.wopnd(&w[3]).ptr,
                h,
                dptr(&y, cs),
                h,
                1.0,
                1.0,
                None,
            )?;
        }
        let act = LayerAct {
            x: Some(x),
            qkv: Some(qkv),
            p: Some(probs),
            ctx: Some(ctx),
            x1: Some(x1),
            u: Some(u),
            g: Some(g),
            ..Default::default()
        };
        Ok((y, act))
    }

    /// I for one layer: returns dx; keeps dqkv, dx1, du, dy for W; frees qkv, P, u.
    fn layer_backward_input(
        &mut self,
        stage: u32,
        li: usize,
        la: &mut LayerAct,
        dy: CudaSlice<f32>,
    ) -> Result<CudaSlice<f32>, ExecError> {
        let d = self.p.dims;
        let (t, h, f, nh, hd, s) = (d.tokens(), d.hidden, d.ffn, d.heads, d.head_dim(), d.seq);
        let missing =
            || ExecError::Backend(format!("stage {stage}: backward without a stashed forward"));
        let (qkv, probs, u) = (
            la.qkv.take().ok_or_else(missing)?,
            la.p.take().ok_or_else(missing)?,
            la.u.take().ok_or_else(missing)?,
        );
        let cs = self.compute.clone();
        let w = &self.weights[&stage].layers[li];
        // dg = dy · W2ᵀ; du = dg ⊙ gelu'(u)
        let dg = self.alloc(t * f)?;
        {
            let a = self.opnd(&dy)?;
            self.gemm(
                false,
                true,
                (t, f, h),
                a.ptr,
                h,
                self.wopnd(&w[3]).ptr,
                h,
                dptr(&dg, &cs),
                f,
                1.0,
                0.0,
                None,
            )?;
        }
        let du = self.alloc(t * f)?;
        let (up, gp, dp, nn) = (
            dptr(&u, &cs),
            dptr(&dg, &cs),
            dptr(&du, &cs),
            (t * f) as i64,
        );
        self.launch_elementwise(K_GELU_BWD, t * f, &[&up, &gp, &dp], Some(&nn))?;
        // dx1 = dy + du · W1ᵀ
        let dx1 = self.copy(&dy)?;
        {
            let a = self.opnd(&du)?;
            self.gemm(
                false,
                true,
                (t, h, f),
                a.ptr,
                f,
                self.wopnd(&w[2]).ptr,
                f,
                dptr(&dx1, &cs),
                h,
                1.0,
                1.0,
                None,
            )?;
        }
        // dctx = dx1 · Woᵀ
        let dctx = self.alloc(t * h)?;
        {
            let a = self.opnd(&dx1)?;
            self.gemm(
                false,
                true,
                (t, h, h),
                a.ptr,
                h,
                self.wopnd(&w[1]).ptr,
                h,
                dptr(&dctx, &cs),
                h,
                1.0,
                0.0,
                None,
            )?;
        }
        // Attention backward, per sequence, batched over heads.
        let dqkv = self.alloc(t * 3 * h)?;
        let dps = self.alloc(d.micro_batch * nh * s * s)?;
        let scale = 1.0 / (hd as f32).sqrt();
        {
            let q = self.opnd(&qkv)?;
            let dc = self.opnd(&dctx)?;
            for b in 0..d.micro_batch {
                // dP = dctx · vᵀ
                let dpb = dptr(&dps, &cs) + 4 * (b * nh * s * s) as u64;
                self.gemm(
                    false,
                    true,
                    (s, s, hd),
                    dc.at(b * s * h),
                    h,
                    q.at(b * s * 3 * h + 2 * h),
                    3 * h,
                    dpb,
                    s,
                    1.0,
                    0.0,
                    Some((nh, hd, hd, s * s)),
                )?;
            }
            let (pp, dpp, seq) = (dptr(&probs, &cs), dptr(&dps, &cs), s as i64);
            let cfg = Self::row_cfg(d.micro_batch * nh * s, s);
            let mut lb = cs.launch_builder(&self.gpu.funcs[K_SOFTMAX_BWD]);
            lb.arg(&pp).arg(&dpp).arg(&seq);
            unsafe { lb.launch(cfg) }.map_err(drv)?;
            let ds = self.opnd(&dps)?;
            let pa = self.opnd(&probs)?;
            for b in 0..d.micro_batch {
                let base = b * s * 3 * h;
                let dq0 = dptr(&dqkv, &cs) + 4 * base as u64;
                let pb = b * nh * s * s;
                // dq = scale · dS · k
                self.gemm(
                    false,
                    false,
                    (s, hd, s),
                    ds.at(pb),
                    s,
                    q.at(base + h),
                    3 * h,
                    dq0,
                    3 * h,
                    scale,
                    0.0,
                    Some((nh, s * s, hd, hd)),
                )?;
                // dk = scale · dSᵀ · q
                self.gemm(
                    true,
                    false,
                    (s, hd, s),
                    ds.at(pb),
                    s,
                    q.at(base),
                    3 * h,
                    dq0 + 4 * h as u64,
                    3 * h,
                    scale,
                    0.0,
                    Some((nh, s * s, hd, hd)),
                )?;
                // dv = Pᵀ · dctx
                self.gemm(
                    true,
                    false,
                    (s, hd, s),
                    pa.at(pb),
                    s,
                    dc.at(b * s * h),
                    h,
                    dq0 + 8 * h as u64,
                    3 * h,
                    1.0,
                    0.0,
                    Some((nh, s * s, hd, hd)),
                )?;
            }
        }
        // dx = dx1 + dqkv · Wqkvᵀ
        let dx = self.copy(&dx1)?;
        {
            let a = self.opnd(&dqkv)?;
            self.gemm(
                false,
                true,
                (t, h, 3 * h),
                a.ptr,
                3 * h,
                self.wopnd(&w[0]).ptr,
                3 * h,
                dptr(&dx, &cs),
                h,
                1.0,
                1.0,
                None,
            )?;
        }
        la.dqkv = Some(dqkv);
        la.dx1 = Some(dx1);
        la.du = Some(du);
        la.dy = Some(dy);
        self.retire(Box::new((qkv, probs, u, dg, dctx, dps)), &cs)?;
        Ok(dx)
    }

    /// W for one layer: dW += Xᵀ · dY for the four GEMMs.
    fn layer_backward_weight(&self, stage: u32, li: usize, la: &LayerAct) -> Result<(), ExecError> {
        let d = self.p.dims;
        let (t, h, f) = (d.tokens(), d.hidden, d.ffn);
        let w = &self.weights[&stage].layers[li];
        let cs = &self.compute;
        let missing = || ExecError::Backend(format!("stage {stage}: W before I"));
        let pairs: [WeightGemm<'_>; 4] = [
            (&la.x, &la.dqkv, 0, h, 3 * h),
            (&la.ctx, &la.dx1, 1, h, h),
            (&la.x1, &la.du, 2, h, f),
            (&la.g, &la.dy, 3, f, h),
        ];
        for (x, dyv, mi, rows, cols) in pairs {
            let (x, dyv) = (
                x.as_ref().ok_or_else(missing)?,
                dyv.as_ref().ok_or_else(missing)?,
            );
            let (xa, da) = (self.opnd(x)?, self.opnd(dyv)?);
            self.gemm(
                true,
                false,
                (rows, cols, t),
                xa.ptr,
                rows,
                da.ptr,
                cols,
                dptr(&w[mi].g, cs),
                cols,
                1.0,
                1.0,
                None,
            )?;
        }
        Ok(())
    }

    /// In `serialize` mode an action ends only when the GPU has finished it.
    fn settle(&self) -> Result<(), ExecError> {
        if self.gpu.serial.is_some() {
            for st in self.recv.values() {
                st.synchronize().map_err(drv)?;
            }
            self.compute.synchronize().map_err(drv)?;
        }
        Ok(())
    }

    fn stage_info(&self, stage: u32) -> Result<(u32, u32, bool, bool), ExecError> {
        self.p
            .stages
            .iter()
            .find(|s| s.0 == stage)
            .map(|&(_, first, n, e, o)| (first, n, e, o))
            .ok_or_else(|| {
                ExecError::Plan(format!("stage {stage} is not on device {}", self.p.device))
            })
    }

    fn do_forward(&mut self, stage: u32, mb: u32, spans: &mut Vec<Span>) -> Result<(), ExecError> {
        self.gpu.ctx.bind_to_thread().map_err(drv)?;
        let (_, nl, emb, out) = self.stage_info(stage)?;
        let d = self.p.dims;
        let (t, h) = (d.tokens(), d.hidden);
        let key = (Dir::Act, stage.wrapping_sub(1), mb);
        let inc = if emb { None } else { Some(self.fetch(key)?) };
        let gpu = self.gpu.clone();
        let serial = lock(&gpu);
        let x_in = match inc {
            Some(i) => Some(self.land(key, i)?),
            None => None,
        };
        let ids = if emb || out {
            Some(token_ids(self.p.seed, self.step, mb, &d))
        } else {
            None
        };
        let lab = if out {
            Some(labels(self.p.seed, self.step, mb, &d))
        } else {
            None
        };
        let ids_dev = match (&ids, emb) {
            (Some(v), true) => Some(self.compute.clone_htod(v).map_err(drv)?),
            _ => None,
        };
        let lab_dev = match &lab {
            Some(v) => Some(self.compute.clone_htod(v).map_err(drv)?),
            None => None,
        };
        let (e0, e1) = (self.timing_event()?, self.timing_event()?);
        e0.record(&self.compute).map_err(drv)?;
        let cs = self.compute.clone();
        let mut act = StageAct::default();
        let mut x = match x_in {
            Some(x) => x,
            None => {
                let x = self.alloc(t * h)?;
                let e = &self.weights[&stage]
                    .emb
                    .as_ref()
                    .expect("stage 0 has the embedding")
                    .w;
                let idp = dptr(ids_dev.as_ref().expect("ids uploaded"), &cs);
                let (ep, xp, tt, hh) = (dptr(e, &cs), dptr(&x, &cs), t as i64, h as i64);
                let (blocks, threads) = elementwise_config(t * h);
                let mut lb = cs.launch_builder(&self.gpu.funcs[K_EMBED_FWD]);
                lb.arg(&ep).arg(&idp).arg(&xp).arg(&tt).arg(&hh);
                unsafe {
                    lb.launch(LaunchConfig {
                        grid_dim: (blocks, 1, 1),
                        block_dim: (threads, 1, 1),
                        shared_mem_bytes: 0,
                    })
                }
                .map_err(drv)?;
                x
            }
        };
        for li in 0..nl as usize {
            let (y, la) = self.layer_forward(stage, li, x)?;
            act.layers.push(la);
            x = y;
        }
        let handoff = if out {
            let v = d.vocab;
            let logits = self.alloc(t * v)?;
            {
                let wo = self.weights[&stage]
                    .out
                    .as_ref()
                    .expect("last stage has the output layer");
                let xa = self.opnd(&x)?;
                self.gemm(
                    false,
                    false,
                    (t, v, h),
                    xa.ptr,
                    h,
                    self.wopnd(wo).ptr,
                    v,
                    dptr(&logits, &cs),
                    v,
                    1.0,
                    0.0,
                    None,
                )?;
            }
            let scale = 1.0 / (t as f32 * self.p.microbatches_per_step as f32);
            let (lp, lab_p, loss_p, vv) = (
                dptr(&logits, &cs),
                dptr(lab_dev.as_ref().expect("labels"), &cs),
                dptr(&self.loss, &cs),
                v as i64,
            );
            let mut lb = cs.launch_builder(&self.gpu.funcs[K_XENT]);
            lb.arg(&lp).arg(&lab_p).arg(&loss_p).arg(&vv).arg(&scale);
            unsafe { lb.launch(Self::row_cfg(t, v)) }.map_err(drv)?;
            act.y = Some(x);
            act.dlogits = Some(logits);
            None
        } else {
            Some(x)
        };
        e1.record(&cs).map_err(drv)?;
        act.ids = ids_dev;
        if let Some(l) = lab_dev {
            self.retire(Box::new(l), &cs)?;
        }
        let name = format!("{stage}F{mb}");
        let sp = self.span(
            SpanStream::Compute,
            self.p.device,
            name,
            stage,
            mb,
            Kind::F,
            None,
        );
        self.pending.push(PendingSpan {
            span: sp,
            start: e0,
            end: e1,
        });
        if self.acts.insert((stage, mb), act).is_some() {
            return Err(ExecError::Plan(format!(
                "stage {stage}: a second F of micro-batch {mb} before its backward"
            )));
        }
        if let Some(x) = handoff {
            self.deliver((Dir::Act, stage, mb), stage + 1, x)?;
        }
        self.settle()?;
        drop(serial);
        self.reap();
        self.flush_spans(spans, false)
    }

    fn backward_input(
        &mut self,
        stage: u32,
        mb: u32,
        act: &mut StageAct,
        dy_in: Option<CudaSlice<f32>>,
    ) -> Result<Option<CudaSlice<f32>>, ExecError> {
        let (_, nl, emb, out) = self.stage_info(stage)?;
        let d = self.p.dims;
        let (t, h) = (d.tokens(), d.hidden);
        let cs = self.compute.clone();
        let mut dy = match dy_in {
            Some(g) => g,
            None => {
                let _ = out;
                let dl = act.dlogits.as_ref().ok_or_else(|| {
                    ExecError::Backend(format!(
                        "stage {stage}: no logits stashed for micro-batch {mb}"
                    ))
                })?;
                let dy = self.alloc(t * h)?;
                let wo = self.weights[&stage]
                    .out
                    .as_ref()
                    .expect("last stage has the output layer");
                let a = self.opnd(dl)?;
                self.gemm(
                    false,
                    true,
                    (t, h, d.vocab),
                    a.ptr,
                    d.vocab,
                    self.wopnd(wo).ptr,
                    d.vocab,
                    dptr(&dy, &cs),
                    h,
                    1.0,
                    0.0,
                    None,
                )?;
                dy
            }
        };
        for li in (0..nl as usize).rev() {
            let mut la = std::mem::take(&mut act.layers[li]);
            let r = self.layer_backward_input(stage, li, &mut la, dy);
            act.layers[li] = la;
            dy = r?;
        }
        act.input_done = true;
        if emb {
            act.dx0 = Some(dy);
            Ok(None)
        } else {
            Ok(Some(dy))
        }
    }

    fn backward_weight(&mut self, stage: u32, act: &StageAct) -> Result<(), ExecError> {
        let d = self.p.dims;
        let (t, h) = (d.tokens(), d.hidden);
        let cs = self.compute.clone();
        for (li, la) in act.layers.iter().enumerate() {
            self.layer_backward_weight(stage, li, la)?;
        }
        let sw = &self.weights[&stage];
        if let (Some(wo), Some(y), Some(dl)) = (&sw.out, &act.y, &act.dlogits) {
            let (ya, da) = (self.opnd(y)?, self.opnd(dl)?);
            self.gemm(
                true,
                false,
                (h, d.vocab, t),
                ya.ptr,
                h,
                da.ptr,
                d.vocab,
                dptr(&wo.g, &cs),
                d.vocab,
                1.0,
                1.0,
                None,
            )?;
        }
        if let (Some(e), Some(dx0), Some(ids)) = (&sw.emb, &act.dx0, &act.ids) {
            let (dp, ip, gp, tt, hh) = (
                dptr(dx0, &cs),
                dptr(ids, &cs),
                dptr(&e.g, &cs),
                t as i64,
                h as i64,
            );
            let (blocks, threads) = elementwise_config(t * h);
            let mut lb = cs.launch_builder(&self.gpu.funcs[K_EMBED_BWD]);
            lb.arg(&dp).arg(&ip).arg(&gp).arg(&tt).arg(&hh);
            unsafe {
                lb.launch(LaunchConfig {
                    grid_dim: (blocks, 1, 1),
                    block_dim: (threads, 1, 1),
                    shared_mem_bytes: 0,
                })
            }
            .map_err(drv)?;
        }
        Ok(())
    }

    fn do_backward(
        &mut self,
        stage: u32,
        mb: u32,
        part: BackwardPart,
        spans: &mut Vec<Span>,
    ) -> Result<(), ExecError> {
        // Runner threads have no current context; raw cuBLAS/driver calls need one.
        self.gpu.ctx.bind_to_thread().map_err(drv)?;
        let (_, _, emb, out) = self.stage_info(stage)?;
        let kind = match part {
            BackwardPart::Full => Kind::B,
            BackwardPart::Input => Kind::I,
            BackwardPart::Weight => Kind::W,
        };
        let needs_grad = part != BackwardPart::Weight && !out;
        let key = (Dir::Grad, stage + 1, mb);
        let inc = if needs_grad {
            Some(self.fetch(key)?)
        } else {
            None
        };
        let gpu = self.gpu.clone();
        let serial = lock(&gpu);
        let dy_in = match inc {
            Some(i) => Some(self.land(key, i)?),
            None => None,
        };
        let mut act = self.acts.remove(&(stage, mb)).ok_or_else(|| {
            ExecError::Plan(format!(
                "device {}: {stage}{kind}{mb} has no stashed forward",
                self.p.device
            ))
        })?;
        let (e0, e1) = (self.timing_event()?, self.timing_event()?);
        e0.record(&self.compute).map_err(drv)?;
        let mut dx = None;
        if part != BackwardPart::Weight {
            if act.input_done {
                return Err(ExecError::Plan(format!(
                    "device {}: {stage}{kind}{mb} repeats a backward",
                    self.p.device
                )));
            }
            dx = self.backward_input(stage, mb, &mut act, dy_in)?;
        }
        if part != BackwardPart::Input {
            if !act.input_done {
                return Err(ExecError::Plan(format!(
                    "device {}: {stage}W{mb} before {stage}I{mb}",
                    self.p.device
                )));
            }
            self.backward_weight(stage, &act)?;
        }
        e1.record(&self.compute).map_err(drv)?;
        let sp = self.span(
            SpanStream::Compute,
            self.p.device,
            format!("{stage}{kind}{mb}"),
            stage,
            mb,
            kind,
            None,
        );
        self.pending.push(PendingSpan {
            span: sp,
            start: e0,
            end: e1,
        });
        if part == BackwardPart::Input {
            self.acts.insert((stage, mb), act);
        } else {
            let cs = self.compute.clone();
            self.retire(Box::new(act), &cs)?;
        }
        if let Some(dx) = dx {
            if !emb {
                self.deliver((Dir::Grad, stage, mb), stage - 1, dx)?;
            }
        }
        self.settle()?;
        drop(serial);
        self.reap();
        self.flush_spans(spans, false)
    }

    // ----- calibration (`pplan-exec profile --backend cuda`, see cuda/calibrate.rs) -----

    /// Waits for all issued work and moves every pending span into `spans`.
    pub(crate) fn drain_spans(&mut self, spans: &mut Vec<Span>) -> Result<(), ExecError> {
        self.sync_all()?;
        self.flush_spans(spans, true)
    }

    /// Seconds of one row-major `(m, n, k)` GEMM `C = A·B` issued through the same cuBLAS call
    /// as the layers' (inputs in the worker's dtype, f32 accumulation and output): one untimed
    /// call, then `calls` back-to-back calls between two CUDA events; the mean.
    pub(crate) fn time_gemm(
        &mut self,
        (m, n, k): (usize, usize, usize),
        calls: u32,
    ) -> Result<f64, ExecError> {
        self.gpu.ctx.bind_to_thread().map_err(drv)?;
        let cs = self.compute.clone();
        let fill = |len: usize, seed: u64| -> Vec<f32> {
            let mut r = crate::spec::SplitMix64::new(seed);
            (0..len).map(|_| r.next_signed_unit()).collect()
        };
        let a = cs.clone_htod(&fill(m * k, 1)).map_err(drv)?;
        let b = cs.clone_htod(&fill(k * n, 2)).map_err(drv)?;
        let c = self.alloc(m * n)?;
        let (ao, bo) = (self.opnd(&a)?, self.opnd(&b)?);
        let cp = dptr(&c, &cs);
        let (_, seconds) = self.time_on_compute(calls, || {
            self.gemm(
                false,
                false,
                (m, n, k),
                ao.ptr,
                k,
                bo.ptr,
                n,
                cp,
                n,
                1.0,
                0.0,
                None,
            )
        })?;
        drop((a, b, c, ao, bo));
        Ok(seconds)
    }

    /// `op` (work on the compute stream) once untimed, then `calls` times back to back:
    /// (host seconds per call, from the first call to the last returning; device seconds per
    /// call, between CUDA events recorded around them).
    fn time_on_compute(
        &self,
        calls: u32,
        op: impl Fn() -> Result<(), ExecError>,
    ) -> Result<(f64, f64), ExecError> {
        let cs = &self.compute;
        op()?;
        cs.synchronize().map_err(drv)?;
        let (e0, e1) = (self.timing_event()?, self.timing_event()?);
        e0.record(cs).map_err(drv)?;
        let t0 = Instant::now();
        for _ in 0..calls.max(1) {
            op()?;
        }
        let host = t0.elapsed().as_secs_f64();
        e1.record(cs).map_err(drv)?;
        let ms = e0.elapsed_ms(&e1).map_err(drv)?;
        cs.synchronize().map_err(drv)?;
        let k = calls.max(1) as f64;
        Ok((host / k, ms as f64 * 1e-3 / k))
    }

    /// Seconds of one `y += a·x` pass over `n` f32 elements (the `axpy` kernel): one untimed
    /// pass, then `calls` passes between two CUDA events; the mean.
    pub(crate) fn time_axpy(&mut self, n: usize, calls: u32) -> Result<f64, ExecError> {
        let (blocks, threads) = elementwise_config(n);
        Ok(self.axpy_launches(n, (blocks, threads), calls)?.1)
    }

    /// `calls` back-to-back launches of the `axpy` kernel over `n` elements with `grid` blocks
    /// and threads, after one untimed launch: (host seconds per launch, from the first launch
    /// to the last returning; device seconds per launch, between CUDA events around them).
    fn axpy_launches(
        &mut self,
        n: usize,
        (blocks, threads): (u32, u32),
        calls: u32,
    ) -> Result<(f64, f64), ExecError> {
        self.gpu.ctx.bind_to_thread().map_err(drv)?;
        let cs = self.compute.clone();
        let x = cs.alloc_zeros::<f32>(n).map_err(drv)?;
        let y = cs.alloc_zeros::<f32>(n).map_err(drv)?;
        let (xp, yp, a, nn) = (dptr(&x, &cs), dptr(&y, &cs), 1e-3f32, n as i64);
        let cfg = LaunchConfig {
            grid_dim: (blocks, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        };
        let times = self.time_on_compute(calls, || {
            let mut lb = cs.launch_builder(&self.gpu.funcs[K_AXPY]);
            lb.arg(&xp).arg(&yp).arg(&a).arg(&nn);
            unsafe { lb.launch(cfg) }.map_err(drv)?;
            Ok(())
        })?;
        drop((x, y));
        Ok(times)
    }

    /// Operands for a sweep of GEMM shapes (`pplan-exec sweep`): A, B and C of `a`, `b`, `c`
    /// elements, allocated once, A and B filled with the spec's random values (a 16 Mi-element
    /// block repeated: random data, as a real GEMM sees, not zeros, which run faster).
    pub(crate) fn gemm_arena(
        &mut self,
        a: usize,
        b: usize,
        c: usize,
    ) -> Result<GemmArena, ExecError> {
        self.gpu.ctx.bind_to_thread().map_err(drv)?;
        let cs = self.compute.clone();
        let block: Vec<f32> = {
            let mut r = crate::spec::SplitMix64::new(7);
            (0..(16usize << 20).min(a.max(b)).max(1))
                .map(|_| r.next_signed_unit())
                .collect()
        };
        let filled = |n: usize| -> Result<CudaSlice<f32>, ExecError> {
            let mut s = self.alloc(n)?;
            let mut at = 0;
            while at < n {
                let len = block.len().min(n - at);
                cs.memcpy_htod(&block[..len], &mut s.slice_mut(at..at + len))
                    .map_err(drv)?;
                at += len;
            }
            Ok(s)
        };
        let (a, b) = (filled(a)?, filled(b)?);
        let c = self.alloc(c)?;
        let (ao, bo) = (self.opnd(&a)?, self.opnd(&b)?);
        cs.synchronize().map_err(drv)?;
        Ok(GemmArena {
            _a: a,
            _b: b,
            c,
            ao,
            bo,
        })
    }

    /// Seconds of one row-major GEMM `C(m×n) = op(A)·op(B)` on the arena's buffers (`ta`: A is
    /// stored k×m; `tb`: B is stored n×k), the layers' cuBLAS call: one untimed call, then
    /// `calls` back-to-back calls between two CUDA events; the mean.
    pub(crate) fn time_gemm_in(
        &mut self,
        arena: &GemmArena,
        (ta, tb): (bool, bool),
        (m, n, k): (usize, usize, usize),
        calls: u32,
    ) -> Result<f64, ExecError> {
        self.gpu.ctx.bind_to_thread().map_err(drv)?;
        let cs = self.compute.clone();
        let cp = dptr(&arena.c, &cs);
        let (lda, ldb) = (if ta { m } else { k }, if tb { k } else { n });
        let (_, seconds) = self.time_on_compute(calls, || {
            self.gemm(
                ta,
                tb,
                (m, n, k),
                arena.ao.ptr,
                lda,
                arena.bo.ptr,
                ldb,
                cp,
                n,
                1.0,
                0.0,
                None,
            )
        })?;
        Ok(seconds)
    }

    /// Launch overhead: `calls` launches of the one-element `axpy` kernel back to back
    /// (one block of 32 threads): (host seconds per launch, device seconds per launch).
    pub(crate) fn time_launches(&mut self, calls: u32) -> Result<(f64, f64), ExecError> {
        self.axpy_launches(1, (1, 32), calls)
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

impl DeviceWorker for CudaWorker {
    fn device(&self) -> u32 {
        self.p.device
    }

    fn forward(
        &mut self,
        stage: u32,
        microbatch: u32,
        spans: &mut Vec<Span>,
    ) -> Result<(), ExecError> {
        self.do_forward(stage, microbatch, spans)
    }

    fn backward(
        &mut self,
        stage: u32,
        microbatch: u32,
        part: BackwardPart,
        spans: &mut Vec<Span>,
    ) -> Result<(), ExecError> {
        self.do_backward(stage, microbatch, part, spans)
    }

    fn optimizer_step(&mut self, spans: &mut Vec<Span>) -> Result<(), ExecError> {
        self.gpu.ctx.bind_to_thread().map_err(drv)?;
        let gpu = self.gpu.clone();
        let serial = lock(&gpu);
        let (e0, e1) = (self.timing_event()?, self.timing_event()?);
        e0.record(&self.compute).map_err(drv)?;
        let cs = self.compute.clone();
        let mut jobs = Vec::new();
        for sw in self.weights.values() {
            for m in sw
                .emb
                .iter()
                .chain(sw.layers.iter().flatten())
                .chain(sw.out.iter())
            {
                jobs.push((dptr(&m.w, &cs), dptr(&m.g, &cs), m.w.len()));
            }
        }
        let lr = self.p.lr;
        for (wp, gp, n) in jobs {
            let (blocks, threads) = elementwise_config(n);
            let nn = n as i64;
            let mut lb = cs.launch_builder(&self.gpu.funcs[K_SGD]);
            lb.arg(&wp).arg(&gp).arg(&lr).arg(&nn);
            unsafe {
                lb.launch(LaunchConfig {
                    grid_dim: (blocks, 1, 1),
                    block_dim: (threads, 1, 1),
                    shared_mem_bytes: 0,
                })
            }
            .map_err(drv)?;
        }
        self.refresh_bf16()?;
        e1.record(&cs).map_err(drv)?;
        let first = self.p.stages.first().map(|s| s.0).unwrap_or(0);
        let mut sp = self.span(
            SpanStream::Optimizer,
            self.p.device,
            "OPTIMIZER".into(),
            first,
            0,
            Kind::W,
            None,
        );
        sp.stage = None;
        sp.microbatch = None;
        sp.kind = None;
        self.pending.push(PendingSpan {
            span: sp,
            start: e0,
            end: e1,
        });
        self.step += 1;
        self.sync_all()?;
        drop(serial);
        if !self.acts.is_empty() || !self.local.is_empty() {
            return Err(ExecError::Plan(format!(
                "device {}: the optimizer step came with {} forward(s) still waiting for their backward",
                self.p.device,
                self.acts.len()
            )));
        }
        self.flush_spans(spans, true)
    }

    fn synchronize(&mut self) -> Result<(), ExecError> {
        self.sync_all()
    }

    fn weights(&mut self) -> Result<Vec<(u32, Vec<f32>)>, ExecError> {
        self.sync_all()?;
        let mut out = Vec::new();
        for (&stage, sw) in &self.weights {
            let mut v = Vec::new();
            for m in sw
                .emb
                .iter()
                .chain(sw.layers.iter().flatten())
                .chain(sw.out.iter())
            {
                v.extend(self.download(&m.w)?);
            }
            let _ = sw.first_layer;
            out.push((stage, v));
        }
        Ok(out)
    }

    fn take_loss(&mut self) -> f64 {
        let _ = self.gpu.ctx.bind_to_thread();
        let v = self
            .compute
            .clone_dtoh(&self.loss)
            .ok()
            .and_then(|v| v.first().copied())
            .unwrap_or(f64::NAN);
        let _ = self.compute.memset_zeros(&mut self.loss);
        v
    }
}

/// Seconds of one copy of `elems` f32 from GPU `src` to GPU `dst` as the in-process link does
/// it: `cuMemcpyPeerAsync` between two GPUs, `cuMemcpyDtoDAsync` when both are the same GPU
/// (pipeline devices sharing it). One untimed copy, then `calls` back-to-back copies on a
/// stream of `dst` between two CUDA events; the mean.
pub(crate) fn time_copy(src: &Gpu, dst: &Gpu, elems: usize, calls: u32) -> Result<f64, ExecError> {
    let ss = src.ctx.new_stream().map_err(drv)?;
    let from = ss.alloc_zeros::<f32>(elems.max(1)).map_err(drv)?;
    ss.synchronize().map_err(drv)?;
    let ds = dst.ctx.new_stream().map_err(drv)?;
    let to = ds.alloc_zeros::<f32>(elems.max(1)).map_err(drv)?;
    let (sp, dp) = (dptr(&from, &ss), dptr(&to, &ds));
    let bytes = 4 * elems.max(1);
    let copy = || -> Result<(), ExecError> {
        dst.ctx.bind_to_thread().map_err(drv)?;
        unsafe {
            if src.ordinal == dst.ordinal {
                drv_result::memcpy_dtod_async(dp, sp, bytes, ds.cu_stream())
            } else {
                drv_result::memcpy_peer_async(
                    dst.ctx.cu_ctx(),
                    dp,
                    src.ctx.cu_ctx(),
                    sp,
                    bytes,
                    ds.cu_stream(),
                )
            }
        }
        .map_err(drv)
    };
    copy()?;
    let e0 = dst
        .ctx
        .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(drv)?;
    let e1 = dst
        .ctx
        .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(drv)?;
    e0.record(&ds).map_err(drv)?;
    for _ in 0..calls.max(1) {
        copy()?;
    }
    e1.record(&ds).map_err(drv)?;
    let ms = e0.elapsed_ms(&e1).map_err(drv)?;
    ds.synchronize().map_err(drv)?;
    drop((from, to));
    Ok(ms as f64 * 1e-3 / calls.max(1) as f64)
}
