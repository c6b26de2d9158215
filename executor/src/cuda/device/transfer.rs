//! A [`CudaWorker`]'s transfers between pipeline devices: what a message is, how it is
//! fetched (mailbox peer copy or NCCL), landed on the compute stream and delivered.

use super::*;

impl CudaWorker {
    pub(super) fn transfer_kind(&self, key: MsgKey) -> Kind {
        match key.0 {
            Dir::Act => Kind::F,
            Dir::Grad => {
                let dev = self.p.stage_device[key.1 as usize] as usize;
                backward_kind(&self.p.actions[dev], key.1, key.2)
            }
        }
    }

    pub(super) fn transfer_names(key: MsgKey) -> (String, String) {
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
    pub(super) fn fetch(&mut self, key: MsgKey) -> Result<Incoming, ExecError> {
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
    pub(super) fn land(&mut self, key: MsgKey, inc: Incoming) -> Result<CudaSlice<f32>, ExecError> {
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
    pub(super) fn deliver(
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
}
