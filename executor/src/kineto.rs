//! `pplan-exec run --trace-format kineto`: the measured run as PyTorch-profiler (Kineto)
//! traces, one file per device (`rank-<device>.json`), shaped as `torch.profiler` writes them
//! for a pipeline run with `torch.distributed.pipelining`'s `_PipelineScheduleRuntime`, so the
//! readers of real runs (`pplan::measured`) read the executor's runs the same way.
//!
//! Per device d (docs/executor.md, "Kineto traces"):
//! - top level `distributedInfo: {"backend": "pplan-exec", "rank": d, "world_size": p}`;
//! - one `ProfilerStep#N` `user_annotation` per step: from the first compute (or optimizer)
//!   span of the step on this device to 1 ns before the next step's, the last one to the end of
//!   its last span;
//! - each span as a `kernel` event (`tid` = the stream: 7 compute, 8 send, 9 recv, 12
//!   optimizer; real start and duration) launched by a `cuda_runtime` `cudaLaunchKernel` event
//!   with the same `args.correlation`; compute actions also as a `user_annotation` `PP:0F1`
//!   around the launch (so an action's GPU extent is exactly its kernel), the optimizer under
//!   `Optimizer.step#SGD.step`, transfers as `ncclDevKernel_SendRecv` kernels. A launch lies at
//!   the span's start, moved into its step's window when a transfer of the next step begins
//!   before this device has finished the step, and 1 ns later when another launch on the
//!   device already has that time.

use crate::backend::SpanStream;
use crate::run::{RunResult, StepSpan};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

/// The host thread id the CPU-side events are written on.
const HOST_TID: u32 = 1;

fn stream_tid(s: SpanStream) -> u32 {
    match s {
        SpanStream::Compute => 7,
        SpanStream::Send => 8,
        SpanStream::Recv => 9,
        SpanStream::DataParallel => 10,
        SpanStream::Optimizer => 12,
    }
}

fn us(ns: i64) -> f64 {
    ns as f64 / 1000.0
}

fn kernel_name(sp: &StepSpan) -> String {
    match sp.span.stream {
        SpanStream::Send | SpanStream::Recv => {
            "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)".to_string()
        }
        SpanStream::DataParallel => {
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)".to_string()
        }
        SpanStream::Optimizer => "pplan_cpu_sgd_step".to_string(),
        SpanStream::Compute => match sp.span.kind {
            Some(k) => format!("pplan_cpu_{}", k.to_string().to_ascii_lowercase()),
            None => "pplan_cpu_compute".to_string(),
        },
    }
}

fn complete(name: &str, cat: &str, pid: u32, tid: u32, ts: i64, dur: i64, args: Value) -> Value {
    json!({
        "ph": "X",
        "cat": cat,
        "name": name,
        "pid": pid,
        "tid": tid,
        "ts": us(ts),
        "dur": us(dur),
        "args": args,
    })
}

/// One Kineto-shaped trace per device, in device order.
pub fn rank_traces(r: &RunResult) -> Vec<(u32, Value)> {
    (0..r.devices).map(|d| (d, rank_trace(r, d))).collect()
}

fn rank_trace(r: &RunResult, d: u32) -> Value {
    let mut spans: Vec<&StepSpan> = r.spans.iter().filter(|s| s.span.device == d).collect();
    spans.sort_by_key(|s| (s.span.start_ns, s.span.end_ns, stream_tid(s.span.stream)));
    // Step windows on this device.
    let mut first: BTreeMap<u32, i64> = BTreeMap::new();
    let mut last_end: BTreeMap<u32, i64> = BTreeMap::new();
    for s in &spans {
        let (a, b) = (s.span.start_ns as i64, s.span.end_ns as i64);
        let e = last_end.entry(s.step).or_insert(b);
        *e = (*e).max(b);
        if matches!(s.span.stream, SpanStream::Compute | SpanStream::Optimizer) {
            let f = first.entry(s.step).or_insert(a);
            *f = (*f).min(a);
        }
    }
    for s in &spans {
        first.entry(s.step).or_insert(s.span.start_ns as i64);
    }
    let steps: Vec<(u32, i64)> = first.into_iter().collect();
    let mut windows: BTreeMap<u32, (i64, i64)> = BTreeMap::new();
    for (i, &(step, start)) in steps.iter().enumerate() {
        let end = match steps.get(i + 1) {
            Some(&(_, next)) => next - 1,
            None => last_end[&step],
        };
        windows.insert(step, (start, end.max(start)));
    }
    let mut events = Vec::new();
    for (&step, &(a, b)) in &windows {
        events.push(complete(
            &format!("ProfilerStep#{step}"),
            "user_annotation",
            d,
            HOST_TID,
            a,
            b - a,
            json!({}),
        ));
    }
    let mut used: BTreeSet<i64> = BTreeSet::new();
    for (i, s) in spans.iter().enumerate() {
        let sp = &s.span;
        let correlation = i as u64 + 1;
        let (wa, wb) = windows[&s.step];
        let mut launch = (sp.start_ns as i64).clamp(wa, wb);
        while used.contains(&launch) {
            launch += 1;
        }
        used.insert(launch);
        let tid = stream_tid(sp.stream);
        match sp.stream {
            SpanStream::Compute => events.push(complete(
                &format!("PP:{}", sp.name),
                "user_annotation",
                d,
                HOST_TID,
                launch,
                0,
                json!({}),
            )),
            SpanStream::Optimizer => events.push(complete(
                "Optimizer.step#SGD.step",
                "user_annotation",
                d,
                HOST_TID,
                launch,
                0,
                json!({}),
            )),
            SpanStream::Send | SpanStream::Recv | SpanStream::DataParallel => {}
        }
        events.push(complete(
            "cudaLaunchKernel",
            "cuda_runtime",
            d,
            HOST_TID,
            launch,
            0,
            json!({ "correlation": correlation }),
        ));
        let mut args = json!({ "device": d, "stream": tid, "correlation": correlation });
        if sp.stream == SpanStream::DataParallel {
            // Megatron-Core's name for the group that sums gradients over data and context
            // parallel ranks, which the reader attributes to data parallelism.
            args["Collective name"] = json!("allreduce");
            args["Process Group Description"] = json!("DATA_PARALLEL_GROUP_WITH_CP");
        }
        if matches!(sp.stream, SpanStream::Send | SpanStream::Recv) {
            args["Collective name"] = json!(if sp.stream == SpanStream::Send {
                "send"
            } else {
                "recv"
            });
            args["Group size"] = json!(2);
            if let Some(peer) = sp.peer {
                args["peer"] = json!(peer);
            }
        }
        events.push(complete(
            &kernel_name(s),
            "kernel",
            d,
            tid,
            sp.start_ns as i64,
            (sp.end_ns - sp.start_ns) as i64,
            args,
        ));
    }
    json!({
        "distributedInfo": { "backend": "pplan-exec", "rank": d, "world_size": r.devices },
        "schemaVersion": 1,
        "displayTimeUnit": "ms",
        "traceEvents": events,
    })
}
