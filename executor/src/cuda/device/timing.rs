//! Calibration timings (`pplan-exec profile --backend cuda`, see `cuda/calibrate.rs`): GEMMs,
//! launches and AXPY on a worker's compute stream, and a copy between two GPUs.

use super::*;

impl CudaWorker {
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
    pub(super) fn time_on_compute(
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
    pub(super) fn axpy_launches(
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
