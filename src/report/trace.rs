//! Chrome trace event format (opens in Perfetto and chrome://tracing).
//!
//! Complete events (`"ph":"X"`) with `ts`/`dur` in microseconds, `pid` = device, `tid` =
//! stream, `name` = the action's text form (or PyTorch's lowered SEND/RECV names for
//! transfers), `args` with stage, microbatch and kind. Metadata events name each process
//! ("device N") and thread ("compute", "send", "recv"). The executor writes the same format,
//! so predicted and measured timelines can be compared action by action.

use crate::sim::{Stream, Timeline};
use serde::{Deserialize, Serialize};

/// Thread id of each stream in traces.
pub fn stream_tid(stream: Stream) -> u32 {
    match stream {
        Stream::Compute => 0,
        Stream::Send => 1,
        Stream::Recv => 2,
        Stream::TensorParallel => 3,
        Stream::DataParallel => 4,
        Stream::Optimizer => 5,
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceArgs {
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub stage: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub microbatch: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub peer: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub name: Option<String>,
    /// Position of a process or thread in the viewer (`process_sort_index` and
    /// `thread_sort_index` metadata carry `{"sort_index": N}`, as Perfetto reads it).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub sort_index: Option<u32>,
    /// Optimizer step the event belongs to (measured traces of several steps; the simulator
    /// predicts one step and leaves it out).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub step: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceEvent {
    pub name: String,
    pub ph: String,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub ts: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub dur: Option<f64>,
    pub pid: u32,
    pub tid: u32,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub args: Option<TraceArgs>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Trace {
    #[serde(rename = "traceEvents")]
    pub trace_events: Vec<TraceEvent>,
    #[serde(rename = "displayTimeUnit")]
    pub display_time_unit: String,
}

impl TraceArgs {
    /// No field set.
    pub fn none() -> TraceArgs {
        TraceArgs {
            stage: None,
            microbatch: None,
            kind: None,
            peer: None,
            name: None,
            sort_index: None,
            step: None,
        }
    }
}

/// A naming metadata event (`"ph":"M"`, `args: {"name": value}`): `process_name`,
/// `thread_name`.
pub fn meta(name: &str, pid: u32, tid: u32, value: String) -> TraceEvent {
    meta_with(
        name,
        pid,
        tid,
        TraceArgs {
            name: Some(value),
            ..TraceArgs::none()
        },
    )
}

/// An ordering metadata event (`"ph":"M"`, `args: {"sort_index": index}`):
/// `process_sort_index`, `thread_sort_index`.
pub fn sort_index(name: &str, pid: u32, tid: u32, index: u32) -> TraceEvent {
    meta_with(
        name,
        pid,
        tid,
        TraceArgs {
            sort_index: Some(index),
            ..TraceArgs::none()
        },
    )
}

fn meta_with(name: &str, pid: u32, tid: u32, args: TraceArgs) -> TraceEvent {
    TraceEvent {
        name: name.to_string(),
        ph: "M".to_string(),
        ts: None,
        dur: None,
        pid,
        tid,
        args: Some(args),
    }
}

/// Convert a timeline to a trace. Events are ordered by (device, stream, start) so the output
/// is stable and easy to diff.
pub fn from_timeline(tl: &Timeline) -> Trace {
    let mut events = Vec::with_capacity(tl.spans.len() + 4 * tl.num_devices as usize);
    for d in 0..tl.num_devices {
        events.push(meta("process_name", d, 0, format!("device {d}")));
        events.push(sort_index("process_sort_index", d, 0, d));
        for s in [
            Stream::Compute,
            Stream::Send,
            Stream::Recv,
            Stream::TensorParallel,
            Stream::DataParallel,
            Stream::Optimizer,
        ] {
            events.push(meta(
                "thread_name",
                d,
                stream_tid(s),
                s.as_str().to_string(),
            ));
        }
    }
    let mut spans: Vec<_> = tl.spans.iter().collect();
    spans.sort_by_key(|s| (s.device, stream_tid(s.stream), s.start_ns, s.end_ns));
    for s in spans {
        events.push(TraceEvent {
            name: s.name(),
            ph: "X".to_string(),
            ts: Some(s.start_ns as f64 / 1000.0),
            dur: Some((s.end_ns - s.start_ns) as f64 / 1000.0),
            pid: s.device,
            tid: stream_tid(s.stream),
            args: Some(span_args(s)),
        });
    }
    Trace {
        trace_events: events,
        display_time_unit: "ns".to_string(),
    }
}

/// A span's `args`: stage, micro-batch and kind of the action it belongs to. A gradient
/// reduction belongs to a stage, not to a micro-batch; the optimizer step to a device only.
fn span_args(s: &crate::sim::Span) -> TraceArgs {
    let per_microbatch = !matches!(s.stream, Stream::DataParallel | Stream::Optimizer);
    TraceArgs {
        stage: (s.stream != Stream::Optimizer).then_some(s.action.stage),
        microbatch: per_microbatch.then_some(s.action.microbatch),
        kind: per_microbatch.then(|| s.action.kind.to_string()),
        peer: s.peer,
        ..TraceArgs::none()
    }
}

/// The trace as JSON text (deterministic).
pub fn to_json(tl: &Timeline) -> String {
    serde_json::to_string(&from_timeline(tl)).expect("trace serialisation cannot fail")
}
