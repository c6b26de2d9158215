//! A [`CudaWorker`]'s operands, GEMMs and kernel launches: cuBLAS calls in FP32 or BF16 (with
//! the BF16 weight copies it keeps), the elementwise and row kernels of `cuda/kernels.rs`.

use super::*;

impl CudaWorker {
    pub(super) fn opnd(&self, s: &CudaSlice<f32>) -> Result<Opnd, ExecError> {
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

    pub(super) fn wopnd(&self, m: &Mat) -> Opnd {
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
    pub(super) fn gemm(
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
    pub(super) fn launch_elementwise(
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

    pub(super) fn row_cfg(rows: usize, row_len: usize) -> LaunchConfig {
        let t = row_block(row_len);
        LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (t, 1, 1),
            shared_mem_bytes: 4 * t,
        }
    }

    pub(super) fn copy(&self, src: &CudaSlice<f32>) -> Result<CudaSlice<f32>, ExecError> {
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

    pub(super) fn refresh_bf16(&mut self) -> Result<(), ExecError> {
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
}
