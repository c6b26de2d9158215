//! A [`CudaWorker`]'s pipeline actions: a stage's forward and backward (input and weight parts)
//! over its layers, with their spans, and the [`DeviceWorker`] trait the runner drives.

use super::*;

impl CudaWorker {
    pub(super) fn do_forward(
        &mut self,
        stage: u32,
        mb: u32,
        spans: &mut Vec<Span>,
    ) -> Result<(), ExecError> {
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

    pub(super) fn backward_input(
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

    pub(super) fn backward_weight(&mut self, stage: u32, act: &StageAct) -> Result<(), ExecError> {
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

    pub(super) fn do_backward(
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
