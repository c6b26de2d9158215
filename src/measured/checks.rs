//! The physical rules a measured GPU timeline obeys, checked on every rank read from a profiler
//! trace or an Nsight export before anything is computed from it (docs/validate.md, "What is
//! refused, what is flagged"). A broken rule that makes the figures wrong is an error naming the
//! file, the kernel and the rule; one that leaves the run usable (kernels overlapping on one
//! stream by more than the clock's resolution) is counted and reported as a warning.

pub use super::timeline::Flagged;
use super::timeline::{MeasuredError, RankTrace};
use std::collections::BTreeMap;

/// No GPU activity lasts a day: a profile covers seconds to minutes of a run, and a kernel
/// that long is an unfinished record or a damaged time (Nsight writes an unfinished end as the
/// largest integer). 86,400 s in nanoseconds.
pub const ACTIVITY_NS_MAX: i64 = 86_400 * 1_000_000_000;

/// Two kernels of one CUDA stream run one after the other; an overlap up to this much is the
/// timestamps' rounding (Kineto wrote whole microseconds before PyTorch 2.1), beyond it the
/// stream is not one stream (CUDA graphs replayed with branches report the graph's stream) or
/// the record is wrong.
pub const SAME_STREAM_OVERLAP_NS_MAX: i64 = 1_000;

/// Seconds, for messages.
fn s(ns: i64) -> String {
    format!("{:.6} s", ns as f64 * 1e-9)
}

/// Check one rank's timeline: every activity and action lasts less than a day; no kernel is
/// listed twice (same stream, start, end and name: it would be counted twice, making GEMM time
/// exceed compute time); no kernel outlasts the step window it starts in (its step time is that
/// window, so compute would exceed the step). Returns the flagged counts (overlaps on one
/// stream).
pub fn check_rank(r: &RankTrace) -> Result<Flagged, MeasuredError> {
    let name = |i: u32| r.names.get(i as usize).map_or("?", String::as_str);
    let fail = |reason: String| MeasuredError::new(&r.file, format!("rank {}: {reason}", r.rank));
    for k in &r.kernels {
        if k.dur_ns() > ACTIVITY_NS_MAX {
            return Err(fail(format!(
                "kernel '{}' on stream {} starting at {} lasts {}, more than a day: no GPU \
                 activity runs that long (an unfinished or damaged record); valid: 0 to 86400 s",
                name(k.name),
                k.stream,
                s(k.start_ns),
                s(k.dur_ns())
            )));
        }
        if let Some(w) = r.steps.get(k.step as usize) {
            let window = w.end_ns - w.start_ns;
            if (w.start_ns..=w.end_ns).contains(&k.start_ns) && k.dur_ns() > window {
                return Err(fail(format!(
                    "kernel '{}' on stream {} starting at {} lasts {}, longer than the step it \
                     starts in (step {}, {}): a kernel cannot outlast the step that ran it; the \
                     trace is damaged or its clocks disagree",
                    name(k.name),
                    k.stream,
                    s(k.start_ns),
                    s(k.dur_ns()),
                    w.id,
                    s(window)
                )));
            }
        }
    }
    for a in &r.actions {
        if a.end_ns - a.start_ns > ACTIVITY_NS_MAX {
            return Err(fail(format!(
                "action {} starting at {} lasts {}, more than a day; valid: 0 to 86400 s",
                a.action,
                s(a.start_ns),
                s(a.end_ns - a.start_ns)
            )));
        }
    }
    // Per stream, in start order (the kernels are sorted by start, then end): the previous
    // kernel (a duplicate is next to its twin) and the latest end so far.
    let mut prev: BTreeMap<u32, (usize, i64)> = BTreeMap::new();
    let mut flagged = Flagged::default();
    for (i, k) in r.kernels.iter().enumerate() {
        let mut end = k.end_ns;
        if let Some(&(j, latest_end)) = prev.get(&k.stream) {
            let p = &r.kernels[j];
            if (p.start_ns, p.end_ns, p.name) == (k.start_ns, k.end_ns, k.name) {
                return Err(fail(format!(
                    "kernel '{}' on stream {} from {} to {} is listed twice: a duplicated \
                     record would be counted twice; give each kernel once",
                    name(k.name),
                    k.stream,
                    s(k.start_ns),
                    s(k.end_ns)
                )));
            }
            if latest_end - k.start_ns > SAME_STREAM_OVERLAP_NS_MAX {
                flagged.overlapping_kernels += 1;
            }
            end = end.max(latest_end);
        }
        prev.insert(k.stream, (i, end));
    }
    Ok(flagged)
}

/// The warning lines for what was flagged in `files`; none when nothing was.
pub fn warnings(f: &Flagged, files: &str) -> Vec<String> {
    let mut out = Vec::new();
    if f.overlapping_kernels > 0 {
        out.push(format!(
            "{files}: {} pairs of kernels overlap on one CUDA stream by more than 1 µs (a stream \
             runs its kernels one at a time: CUDA graph branches, or damaged records); unions \
             of intervals count the time once, sums by class count both (`flagged.overlapping_kernels`)",
            f.overlapping_kernels
        ));
    }
    if f.kernels_outside_steps > 0 {
        out.push(format!(
            "{files}: {} GPU kernels launched outside every ProfilerStep window (profiler \
             warm-up) are left out (`flagged.kernels_outside_steps`)",
            f.kernels_outside_steps
        ));
    }
    out
}
