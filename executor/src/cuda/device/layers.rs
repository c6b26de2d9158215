//! The model on a [`CudaWorker`]: one transformer layer's forward, backward for its input and
//! backward for its weights, as GEMMs and kernels on the compute stream.

use super::*;

impl CudaWorker {
    pub(super) fn layer_forward(
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
    pub(super) fn layer_backward_input(
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
    pub(super) fn layer_backward_weight(
        &self,
        stage: u32,
        li: usize,
        la: &LayerAct,
    ) -> Result<(), ExecError> {
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
    pub(super) fn settle(&self) -> Result<(), ExecError> {
        if self.gpu.serial.is_some() {
            for st in self.recv.values() {
                st.synchronize().map_err(drv)?;
            }
            self.compute.synchronize().map_err(drv)?;
        }
        Ok(())
    }

    pub(super) fn stage_info(&self, stage: u32) -> Result<(u32, u32, bool, bool), ExecError> {
        self.p
            .stages
            .iter()
            .find(|s| s.0 == stage)
            .map(|&(_, first, n, e, o)| (first, n, e, o))
            .ok_or_else(|| {
                ExecError::Plan(format!("stage {stage} is not on device {}", self.p.device))
            })
    }
}
