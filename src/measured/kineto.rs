//! Chrome-trace JSON, streamed: PyTorch profiler (Kineto) traces, one file per rank, and
//! pplan's own traces (told apart by Kineto's `cat` field). docs/validate.md ("Kineto traces")
//! lists what is read.
//!
//! From a Kineto trace: GPU activity (`cat` `kernel`, `gpu_memcpy`, `gpu_memset`), CUDA
//! runtime launches (`cuda_runtime`/`cuda_driver`, for their `correlation` id: a kernel belongs
//! to the step and the annotation its launch happened in), `ProfilerStep#N` windows,
//! `record_function` annotations naming a pipeline action (`PP:0F1` as PyTorch's
//! `_PipelineScheduleRuntime` writes them, or plain `0F1`), their GPU-side copies
//! (`gpu_user_annotation`), and `nccl:<collective>` annotations. Everything else (CPU ops,
//! Python frames, flows) is skipped as it streams past, so memory grows with the GPU events
//! kept, not with the file.

use super::classify::{action_from_range, attribute, collective, LayoutSizes};
use super::json_stream;
use super::kernels::kernel_class;
use super::pplan_trace::PplanEvent;
use super::timeline::{
    ActionSpan, Collective, Kernel, KernelClass, MeasuredError, RankTrace, StepWindow,
};
use crate::schedule::ir::Action;
use serde::Deserialize;
use std::borrow::Cow;
use std::collections::HashMap;
use std::io::BufRead;

/// What a JSON trace file held.
#[derive(Debug)]
pub enum JsonTrace {
    /// A Kineto trace; `rank` and `world_size` are `distributedInfo`'s when the file has them;
    /// `flagged`: what was kept but counted (kernels launched outside every step).
    Kineto {
        trace: RankTrace,
        rank: Option<u32>,
        world_size: Option<u32>,
        flagged: super::checks::Flagged,
    },
    /// pplan's own trace events (no `cat` field), in file order.
    Pplan(Vec<PplanEvent>),
}

/// A number that may be written as a string (Kineto writes some ids as strings) or be absent;
/// anything else (a process named "Spans") reads as absent.
fn num<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Option<f64>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a number")
        }
        fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
            Ok(Some(v as f64))
        }
        fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
            Ok(Some(v as f64))
        }
        fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
            Ok(v.trim().parse().ok())
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(V)
        }
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut a: A,
        ) -> Result<Self::Value, A::Error> {
            while a.next_element::<serde::de::IgnoredAny>()?.is_some() {}
            Ok(None)
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut a: A,
        ) -> Result<Self::Value, A::Error> {
            while a
                .next_entry::<serde::de::IgnoredAny, serde::de::IgnoredAny>()?
                .is_some()
            {}
            Ok(None)
        }
    }
    d.deserialize_any(V)
}

#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(borrow, default)]
    ph: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    cat: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "num")]
    ts: Option<f64>,
    #[serde(default, deserialize_with = "num")]
    dur: Option<f64>,
    #[serde(default, deserialize_with = "num")]
    pid: Option<f64>,
    #[serde(default, deserialize_with = "num")]
    tid: Option<f64>,
    #[serde(borrow, default)]
    args: Option<RawArgs<'a>>,
}

#[derive(Deserialize, Default)]
struct RawArgs<'a> {
    #[serde(default, deserialize_with = "num")]
    stage: Option<f64>,
    #[serde(default, deserialize_with = "num")]
    microbatch: Option<f64>,
    #[serde(borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, deserialize_with = "num")]
    step: Option<f64>,
    #[serde(default, deserialize_with = "num")]
    correlation: Option<f64>,
    #[serde(rename = "Group size", default, deserialize_with = "num")]
    group_size: Option<f64>,
    #[serde(rename = "Process Group Description", borrow, default)]
    group_desc: Option<Cow<'a, str>>,
    #[serde(rename = "Process Group Name", borrow, default)]
    group_name: Option<Cow<'a, str>>,
    #[serde(rename = "Collective name", borrow, default)]
    collective: Option<Cow<'a, str>>,
}

/// A GPU activity as read, before steps and annotations are applied.
struct Gpu {
    /// Its position in `traceEvents`, for messages.
    index: usize,
    start_ns: i64,
    end_ns: i64,
    stream: u32,
    name: u32,
    class: KernelClass,
    correlation: Option<i64>,
    group_size: Option<u32>,
    /// Interned group description or name.
    group: Option<u32>,
}

/// A `record_function` range (CPU side unless `gpu`).
struct Annotation {
    start_ns: i64,
    end_ns: i64,
    what: Annotated,
    gpu: bool,
}

enum Annotated {
    Step(u64),
    Action(Action),
    Collective(Collective),
}

/// What a `record_function` range names; `Err` (the reason) for a `ProfilerStep#` whose
/// number is not one: PyTorch's profiler writes `ProfilerStep#<step_num>`, a non-negative
/// integer, and a step read as some other number would put kernels in the wrong step.
fn annotated(name: &str) -> Result<Option<Annotated>, String> {
    if let Some(n) = name.strip_prefix("ProfilerStep#") {
        return match n.trim().parse::<u64>() {
            Ok(id) => Ok(Some(Annotated::Step(id))),
            Err(_) => Err(format!(
                "step number '{n}' is not a non-negative integer below 2^64 (PyTorch writes \
                 ProfilerStep#<step>)"
            )),
        };
    }
    if let Some(c) = name.strip_prefix("nccl:") {
        return Ok(Some(Annotated::Collective(collective(c))));
    }
    Ok(action_from_range(name).map(Annotated::Action))
}

/// Microseconds (Chrome trace units) → integer nanoseconds, refusing what is not a time. The
/// whole microseconds and the fraction are converted apart: absolute Kineto timestamps
/// (~1.7e15 µs) times 1000 would exceed f64's exact integers and round to 256 ns.
fn to_ns(us: f64) -> Option<i64> {
    if !(us.is_finite() && us.abs() < 9e15) {
        return None;
    }
    let whole = us.trunc();
    Some(whole as i64 * 1000 + ((us - whole) * 1000.0).round() as i64)
}

/// The Kineto categories read; every other event is skipped.
const KEPT: [&[u8]; 7] = [
    b"kernel",
    b"gpu_memcpy",
    b"gpu_memset",
    b"cuda_runtime",
    b"cuda_driver",
    b"user_annotation",
    b"gpu_user_annotation",
];

/// The value of an event's top-level `"cat"` field when it is a plain string (no escapes),
/// found without parsing the event; `None` when absent or not simple (then the parse decides).
fn quick_cat(bytes: &[u8]) -> Option<&[u8]> {
    const KEY: &[u8] = b"\"cat\"";
    let at = bytes.windows(KEY.len()).position(|w| w == KEY)?;
    // A `"cat"` inside a nested object (args) would be at depth > 1: only trust the first
    // occurrence when nothing before it opens a nested value.
    if bytes[1..at].iter().any(|&c| c == b'{' || c == b'[') {
        return None;
    }
    let rest = &bytes[at + KEY.len()..];
    let rest = rest
        .trim_ascii_start()
        .strip_prefix(b":")?
        .trim_ascii_start();
    let rest = rest.strip_prefix(b"\"")?;
    let end = rest.iter().position(|&c| c == b'"' || c == b'\\')?;
    (rest[end] == b'"').then(|| &rest[..end])
}

#[derive(Default)]
struct Collect {
    kineto_events: usize,
    gpu: Vec<Gpu>,
    /// Correlation id → (event index, launch time).
    runtime: HashMap<i64, (usize, i64)>,
    annotations: Vec<Annotation>,
    pplan: Vec<PplanEvent>,
    names: Vec<String>,
    name_ids: HashMap<String, u32>,
    /// Each kernel name's class, by name id, once computed.
    classes: Vec<Option<KernelClass>>,
}

impl Collect {
    fn intern(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.name_ids.get(s) {
            return i;
        }
        let i = self.names.len() as u32;
        self.names.push(s.to_string());
        self.name_ids.insert(s.to_string(), i);
        i
    }

    fn event(&mut self, bytes: &[u8], index: usize, file: &str) -> Result<(), MeasuredError> {
        // Most of a profiler trace is CPU ops, Python frames and flows: tell them by their
        // `cat` before parsing the event (the parse is most of the reading time).
        if let Some(cat) = quick_cat(bytes) {
            if !KEPT.contains(&cat) {
                self.kineto_events += 1;
                return Ok(());
            }
        }
        let e: RawEvent = serde_json::from_slice(bytes)
            .map_err(|err| MeasuredError::new(file, format!("traceEvents[{index}]: {err}")))?;
        if e.ph.as_deref() != Some("X") {
            return Ok(());
        }
        let name = e.name.as_deref().unwrap_or("");
        // Only the categories read below are checked: a malformed CPU op is not our business.
        if let Some(cat) = e.cat.as_deref() {
            if !KEPT.contains(&cat.as_bytes()) {
                self.kineto_events += 1;
                return Ok(());
            }
        }
        let bad = |what: &str| {
            MeasuredError::new(file, format!("traceEvents[{index}] ('{name}'): {what}"))
        };
        let (Some(ts), Some(dur)) = (e.ts, e.dur) else {
            return Err(bad(
                "a complete event (\"ph\": \"X\") needs numeric `ts` and `dur` (microseconds)",
            ));
        };
        let (Some(start_ns), Some(dur_ns)) = (to_ns(ts), to_ns(dur)) else {
            return Err(bad(&format!(
                "ts {ts} / dur {dur}: expected finite microseconds"
            )));
        };
        if dur_ns < 0 {
            return Err(bad(&format!("dur {dur}: expected >= 0")));
        }
        let args = e.args.unwrap_or_default();
        let Some(cat) = e.cat.as_deref() else {
            let pid = e
                .pid
                .ok_or_else(|| bad("a pplan trace event needs a numeric `pid` (the device)"))?;
            self.pplan.push(PplanEvent {
                index,
                name: name.to_string(),
                start_ns,
                dur_ns,
                device: pid as u32,
                stream: e.tid.unwrap_or(0.0) as u32,
                stage: args.stage.map(|x| x as u32),
                microbatch: args.microbatch.map(|x| x as u32),
                kind: args.kind.as_deref().map(str::to_string),
                step: args.step.map(|x| x as u32),
            });
            return Ok(());
        };
        self.kineto_events += 1;
        match cat {
            "kernel" | "gpu_memcpy" | "gpu_memset" => {
                let class = if cat == "kernel" {
                    // Once per distinct name: a trace repeats a few hundred names millions of
                    // times, and the family rules allocate.
                    let id = self.intern(name) as usize;
                    if self.classes.len() <= id {
                        self.classes.resize(id + 1, None);
                    }
                    *self.classes[id].get_or_insert_with(|| kernel_class(name))
                } else {
                    KernelClass::Memory
                };
                let group = args
                    .group_desc
                    .as_deref()
                    .filter(|s| !s.is_empty() && *s != "undefined")
                    .or(args.group_name.as_deref())
                    .map(|g| g.to_string());
                let class = match (class, args.collective.as_deref()) {
                    (KernelClass::Comm(op, d), Some(c)) => {
                        let named = collective(c);
                        KernelClass::Comm(
                            if named == Collective::Other {
                                op
                            } else {
                                named
                            },
                            d,
                        )
                    }
                    (c, _) => c,
                };
                let name_id = self.intern(name);
                let group = group.map(|g| self.intern(&g));
                self.gpu.push(Gpu {
                    index,
                    start_ns,
                    end_ns: start_ns + dur_ns,
                    stream: e.tid.unwrap_or(0.0) as u32,
                    name: name_id,
                    class,
                    correlation: args.correlation.map(|c| c as i64),
                    group_size: args.group_size.map(|g| g as u32),
                    group,
                });
            }
            "cuda_runtime" | "cuda_driver" => {
                if let Some(c) = args.correlation {
                    // CUPTI gives every API call its own correlation id; two launches sharing
                    // one would tie their kernels to the wrong step and range.
                    if let Some((first, t)) = self.runtime.insert(c as i64, (index, start_ns)) {
                        if t != start_ns {
                            return Err(bad(&format!(
                                "correlation id {c} is also the id of traceEvents[{first}], \
                                 another CUDA launch: each launch has its own id, so kernels \
                                 cannot be tied to their launches"
                            )));
                        }
                        self.runtime.insert(c as i64, (first, t));
                    }
                }
            }
            "user_annotation" | "gpu_user_annotation" => {
                if let Some(what) = annotated(name).map_err(|e| bad(&e))? {
                    self.annotations.push(Annotation {
                        start_ns,
                        end_ns: start_ns + dur_ns,
                        what,
                        gpu: cat == "gpu_user_annotation",
                    });
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// Read one JSON trace file, streaming. `layout` (from a plan) lets collectives be attributed
/// by group size.
pub fn read(
    r: impl BufRead,
    file: &str,
    layout: Option<LayoutSizes>,
) -> Result<JsonTrace, MeasuredError> {
    let mut c = Collect::default();
    let top = json_stream::stream(r, file, |bytes, index| c.event(bytes, index, file))?;
    if c.kineto_events == 0 {
        if c.pplan.is_empty() {
            return Err(MeasuredError::new(
                file,
                "no complete (\"ph\": \"X\") events: an empty trace",
            ));
        }
        return Ok(JsonTrace::Pplan(c.pplan));
    }
    let (rank, world_size) = distributed_info(&top.fields, file)?;
    let (trace, outside) = build(c, file, layout)?;
    Ok(JsonTrace::Kineto {
        trace,
        rank,
        world_size,
        flagged: super::checks::Flagged {
            kernels_outside_steps: outside,
            ..Default::default()
        },
    })
}

/// `distributedInfo.rank` and `.world_size` (Kineto's `distributedInfo`, written by PyTorch's
/// profiler when torch.distributed is initialised). Absent fields are `None`; a present one must
/// be an integer in range, and the rank below the world size: a rank read wrongly would put a
/// trace on another GPU of the plan.
fn distributed_info(
    fields: &[(String, Vec<u8>)],
    file: &str,
) -> Result<(Option<u32>, Option<u32>), MeasuredError> {
    let Some((_, raw)) = fields.iter().find(|(k, _)| k == "distributedInfo") else {
        return Ok((None, None));
    };
    let bad = |what: String| MeasuredError::new(file, format!("distributedInfo.{what}"));
    let v: serde_json::Value =
        serde_json::from_slice(raw).map_err(|e| bad(format!(" is not a JSON object: {e}")))?;
    if !v.is_object() {
        return Err(bad(format!(
            " is {v}, not an object with `rank` and `world_size`"
        )));
    }
    let int = |key: &str, min: u64| -> Result<Option<u32>, MeasuredError> {
        match v.get(key) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(x) => x
                .as_u64()
                .filter(|&n| n >= min && n <= u64::from(u32::MAX))
                .map(|n| Some(n as u32))
                .ok_or_else(|| {
                    bad(format!(
                        "{key} is {x}: expected an integer from {min} to {}",
                        u32::MAX
                    ))
                }),
        }
    };
    let rank = int("rank", 0)?;
    let world = int("world_size", 1)?;
    if let (Some(r), Some(w)) = (rank, world) {
        if r >= w {
            return Err(bad(format!(
                "rank is {r} but world_size is {w}: a rank is 0 to world_size - 1"
            )));
        }
    }
    Ok((rank, world))
}

/// Index of the window containing `t` (windows sorted by start), if any.
fn window_of(windows: &[StepWindow], t: i64) -> Option<usize> {
    let i = windows.partition_point(|w| w.start_ns <= t);
    (i > 0 && t <= windows[i - 1].end_ns).then(|| i - 1)
}

/// The rank's timeline, and how many kernels were launched outside every step window.
fn build(
    c: Collect,
    file: &str,
    layout: Option<LayoutSizes>,
) -> Result<(RankTrace, usize), MeasuredError> {
    let Collect {
        gpu,
        runtime,
        mut annotations,
        names,
        ..
    } = c;
    annotations.sort_by_key(|a| (a.start_ns, a.end_ns));
    // Steps: the CPU-side ProfilerStep windows (GPU-side ones only when there are no others).
    let any_cpu_step = annotations
        .iter()
        .any(|a| !a.gpu && matches!(a.what, Annotated::Step(_)));
    let mut steps: Vec<StepWindow> = annotations
        .iter()
        .filter(|a| a.gpu != any_cpu_step)
        .filter_map(|a| match a.what {
            Annotated::Step(id) => Some(StepWindow {
                id,
                start_ns: a.start_ns,
                end_ns: a.end_ns,
            }),
            _ => None,
        })
        .collect();
    steps.sort_by_key(|w| (w.start_ns, w.id));
    let nccl: Vec<&Annotation> = annotations
        .iter()
        .filter(|a| !a.gpu && matches!(a.what, Annotated::Collective(_)))
        .collect();
    // Each GPU activity: its launch time, its step, its collective refined by the annotation it
    // was launched in (NCCL runs all_to_all as SendRecv kernels).
    let mut kernels = Vec::with_capacity(gpu.len());
    let mut launches = Vec::with_capacity(gpu.len());
    let mut outside = 0;
    for g in &gpu {
        let launch = g
            .correlation
            .and_then(|c| runtime.get(&c).map(|&(_, t)| t))
            .unwrap_or(g.start_ns);
        let step = if steps.is_empty() {
            0
        } else {
            match window_of(&steps, launch) {
                Some(s) => s as u32,
                // Launched outside every step window (before the first profiled step, or
                // profiler warm-up): not part of any step.
                None => {
                    outside += 1;
                    continue;
                }
            }
        };
        let class = match g.class {
            KernelClass::Comm(op, _) => {
                let i = nccl.partition_point(|a| a.start_ns <= launch);
                let op = match (i > 0).then(|| nccl[i - 1]) {
                    Some(a) if launch <= a.end_ns => match a.what {
                        Annotated::Collective(named) if named != Collective::Other => named,
                        _ => op,
                    },
                    _ => op,
                };
                let desc = g.group.map(|i| names[i as usize].as_str());
                KernelClass::Comm(op, attribute(op, desc, g.group_size, layout))
            }
            c => c,
        };
        kernels.push(Kernel {
            start_ns: g.start_ns,
            end_ns: g.end_ns,
            stream: g.stream,
            class,
            name: g.name,
            step,
            group_size: g.group_size,
        });
        launches.push((launch, g.start_ns, g.end_ns));
    }
    // Actions: GPU-side annotations when the trace has them, else the GPU extent of the kernels
    // launched inside each CPU-side range (the range itself when it launched none: a CPU run).
    let gpu_actions = annotations
        .iter()
        .any(|a| a.gpu && matches!(a.what, Annotated::Action(_)));
    launches.sort_unstable();
    let mut actions = Vec::new();
    for a in annotations.iter().filter(|a| a.gpu == gpu_actions) {
        let Annotated::Action(action) = a.what else {
            continue;
        };
        let (start_ns, end_ns) = if gpu_actions {
            (a.start_ns, a.end_ns)
        } else {
            let lo = launches.partition_point(|l| l.0 < a.start_ns);
            let hi = launches.partition_point(|l| l.0 <= a.end_ns);
            let inside = &launches[lo..hi];
            if inside.is_empty() {
                (a.start_ns, a.end_ns)
            } else {
                (
                    inside.iter().map(|l| l.1).min().unwrap_or(a.start_ns),
                    inside.iter().map(|l| l.2).max().unwrap_or(a.end_ns),
                )
            }
        };
        let step = if steps.is_empty() {
            0
        } else {
            match window_of(&steps, a.start_ns) {
                Some(s) => s as u32,
                None => continue,
            }
        };
        actions.push(ActionSpan {
            action,
            start_ns,
            end_ns,
            step,
        });
    }
    if kernels.is_empty() && actions.is_empty() && !gpu.is_empty() {
        let first = &steps[0];
        return Err(MeasuredError::new(
            file,
            format!(
                "{} GPU kernels, none launched inside a ProfilerStep window (the first, \
                 ProfilerStep#{}, runs from {:.6} s to {:.6} s; the first kernel, \
                 traceEvents[{}], starts at {:.6} s): no step to break down; profile with \
                 torch.profiler.schedule(active=N) and call prof.step() each iteration",
                gpu.len(),
                first.id,
                first.start_ns as f64 * 1e-9,
                first.end_ns as f64 * 1e-9,
                gpu[0].index,
                gpu[0].start_ns as f64 * 1e-9
            ),
        ));
    }
    if kernels.is_empty() && actions.is_empty() {
        return Err(MeasuredError::new(
            file,
            "no GPU kernel events (cat \"kernel\") and no pipeline actions (record_function \
             'PP:0F1'): profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]",
        ));
    }
    kernels.sort_by_key(|k| (k.start_ns, k.end_ns, k.stream, k.name));
    actions.sort_by_key(|a| (a.start_ns, a.end_ns, a.action));
    Ok((
        RankTrace {
            rank: 0,
            file: file.to_string(),
            kernels,
            actions,
            steps,
            names,
        },
        outside,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measured::timeline::Dim;
    use crate::schedule::ir::Kind;

    fn read_str(text: &str) -> Result<JsonTrace, MeasuredError> {
        read(text.as_bytes(), "rank0.json", None)
    }

    /// A Kineto-shaped trace: two ProfilerSteps, a CPU-side `PP:0F0` range launching a GEMM,
    /// an NCCL SendRecv launched inside `nccl:all_to_all`, a kernel launched before the first
    /// step.
    const TRACE: &str = r#"{"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": 5, "world_size": 8},
      "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 10, "dur": 5, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "ts": 100, "dur": 100, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "ts": 200, "dur": 100, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "user_annotation", "name": "PP:0F0", "ts": 101, "dur": 10, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 102, "dur": 1, "pid": 1, "tid": 1, "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NNT", "ts": 120.5, "dur": 30, "pid": 0, "tid": 7, "args": {"correlation": 7}},
        {"ph": "X", "cat": "user_annotation", "name": "nccl:all_to_all", "ts": 205, "dur": 3, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 206, "dur": 1, "pid": 1, "tid": 1, "args": {"correlation": 9}},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "ts": 230, "dur": 20, "pid": 0, "tid": 20, "args": {"correlation": 9, "Group size": 8}},
        {"ph": "X", "cat": "kernel", "name": "early", "ts": 50, "dur": 1, "pid": 0, "tid": 7},
        {"ph": "f", "cat": "ac2g", "name": "x", "ts": 1, "pid": 0, "tid": 7, "id": 1},
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}}
      ]}"#;

    #[test]
    fn reads_kernels_steps_actions_and_collectives() {
        let JsonTrace::Kineto { trace, rank, .. } = read_str(TRACE).unwrap() else {
            panic!("not read as Kineto")
        };
        assert_eq!(rank, Some(5));
        assert_eq!(trace.steps.len(), 2);
        assert_eq!((trace.steps[0].id, trace.steps[0].start_ns), (3, 100_000));
        // The kernel launched before the first step is left out.
        assert_eq!(trace.kernels.len(), 2);
        let gemm = trace.kernels[0];
        assert_eq!(
            (gemm.class, gemm.start_ns, gemm.end_ns, gemm.step),
            (KernelClass::Gemm, 120_500, 150_500, 0)
        );
        let nccl = trace.kernels[1];
        assert_eq!(
            nccl.class,
            KernelClass::Comm(Collective::AllToAll, Dim::Unattributed)
        );
        assert_eq!((nccl.step, nccl.group_size), (1, Some(8)));
        // The action spans the GPU time of what it launched.
        assert_eq!(trace.actions.len(), 1);
        let a = trace.actions[0];
        assert_eq!(a.action, Action::new(0, Kind::F, 0));
        assert_eq!((a.start_ns, a.end_ns, a.step), (120_500, 150_500, 0));
        // With a plan whose expert-parallel size is 8, the group size attributes it.
        let l = LayoutSizes {
            tp: 1,
            cp: 1,
            pp: 1,
            dp: 1,
            ep: 8,
        };
        let JsonTrace::Kineto { trace, .. } = read(TRACE.as_bytes(), "r", Some(l)).unwrap() else {
            panic!()
        };
        assert_eq!(
            trace.kernels[1].class,
            KernelClass::Comm(Collective::AllToAll, Dim::Ep)
        );
    }

    #[test]
    fn pplan_traces_pass_through_and_bad_events_are_named() {
        let JsonTrace::Pplan(ev) = read_str(
            r#"{"traceEvents": [{"name": "0F1", "ph": "X", "ts": 1.5, "dur": 2, "pid": 0, "tid": 0, "args": {"stage": 0, "microbatch": 1, "kind": "F"}}]}"#,
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(
            (ev[0].start_ns, ev[0].dur_ns, ev[0].stage),
            (1500, 2000, Some(0))
        );
        for (text, want) in [
            (r#"{"traceEvents": []}"#, "empty trace"),
            (
                r#"{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "x", "dur": 1}]}"#,
                "needs numeric `ts`",
            ),
            (
                r#"{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": -1}]}"#,
                "expected >= 0",
            ),
            (
                r#"{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "k", "ts": 1, "dur": 1}]}"#,
                "no GPU kernel events",
            ),
            (
                r#"{"traceEvents": [{"ph": "X", "cat": 5}]}"#,
                "traceEvents[0]",
            ),
        ] {
            let e = read_str(text).unwrap_err().to_string();
            assert!(e.contains(want), "{text}: {e}");
        }
    }
}

#[cfg(test)]
mod never_panic {
    use super::*;
    use proptest::prelude::*;

    const SEED: &str = r#"{"distributedInfo": {"rank": 1}, "traceEvents": [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "ts": 100, "dur": 100, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "user_annotation", "name": "PP:0F0", "ts": 101, "dur": 10, "pid": 1, "tid": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 102, "dur": 1, "pid": 1, "tid": 1, "args": {"correlation": 7}},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_SendRecv", "ts": 120.5, "dur": 30, "pid": 0, "tid": 7, "args": {"correlation": 7, "Group size": 2}},
        {"name": "0F1", "ph": "X", "ts": 1, "dur": 2, "pid": 0, "tid": 0, "args": {"step": 0}}
    ]}"#;

    /// Found by `random_bytes`: the first bytes of a byte-order mark alone, at the end of the
    /// file, were skipped past it.
    #[test]
    fn a_cut_byte_order_mark_is_an_error() {
        for bytes in [
            &[0xEF][..],
            &[0xEF, 0xBB],
            &[0xEF, 0xBB, 0xBF],
            &[0xEF, b'{'],
        ] {
            let e = read(bytes, "f.json", None).unwrap_err().to_string();
            assert!(e.starts_with("f.json: "), "{bytes:?}: {e}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any bytes: a result or an error naming the file, never a panic.
        #[test]
        fn random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
            if let Err(e) = read(bytes.as_slice(), "f.json", None) {
                prop_assert!(e.to_string().starts_with("f.json: "));
            }
        }

        /// A real-shaped trace cut short or with one byte changed.
        #[test]
        fn damaged_trace(cut in 0usize..SEED.len(), at in 0usize..SEED.len(), b in any::<u8>()) {
            let mut bytes = SEED.as_bytes().to_vec();
            bytes[at] = b;
            bytes.truncate(cut.max(1));
            let _ = read(bytes.as_slice(), "f.json", None);
            let layout = LayoutSizes { tp: 1, cp: 1, pp: 2, dp: 1, ep: 1 };
            let _ = read(SEED.as_bytes(), "f.json", Some(layout));
        }
    }
}
