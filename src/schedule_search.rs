//! Automatic zero-bubble schedule search (in the spirit of Qi et al. 2024, "Zero Bubble
//! Pipeline Parallelism", Sec. 3).
//!
//! Given the forward (F), input-gradient (I) and weight-gradient (W) time of one stage, the
//! point-to-point time, and a per-device limit on micro-batches in flight (activations stashed
//! from the start of F until W ends, the simulator's count), find a per-device order of F, I
//! and W with the smallest makespan. The simulator is the judge of every candidate.
//!
//! Two phases, both bounded and deterministic (the seed is an input; no clock is read):
//! 1. *Construction*, two families of candidates, all simulated; the best seeds phase 2:
//!    - a list scheduler in the spirit of the paper's heuristic: each device, when free, runs an
//!      `I` if its gradient has arrived (I is on the critical path), otherwise a forward while
//!      under its in-flight cap, otherwise the oldest pending `W` (W fills bubbles); variants
//!      put W before F, and shape the per-device cap flat or like 1F1B's warm-up;
//!    - split-backward 1F1B orders with W delayed: device r warms up with
//!      `min(s·(p-1-r) + o, limit-1, m)` forwards (s in {1, 2}, o in {0, 1}) and delays each W
//!      by as many micro-batches as the memory limit leaves room for. With limit p, s = 1 and
//!      o = 0 this is exactly ZB-H1, so the search never returns anything slower than ZB-H1
//!      at ZB-H1's memory; with s = 2, o = 1 it is ZB-H2's warm-up.
//! 2. *Local improvement*: `iterations` random moves of one action by up to four places in
//!    its device's list (random from the seed), each kept when the result validates, respects
//!    the memory limit and is no slower (equal moves are kept too, to walk plateaus).
//!
//! The module does no IO. `pplan schedule-search` is the CLI entry point.

use crate::ir::{Action, Kind, Placement, Schedule, WeightUpdate};
use crate::sim::{simulate, Costs, SimOptions, SimResult, UnitCosts};
use std::collections::VecDeque;

/// What to search for. Times are per stage (one stage per device).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SearchParams {
    /// Pipeline devices `p` (one stage each).
    pub devices: u32,
    /// Micro-batches `m`.
    pub microbatches: u32,
    pub forward_ns: u64,
    pub backward_input_ns: u64,
    pub backward_weight_ns: u64,
    pub p2p_ns: u64,
    /// Largest number of micro-batches in flight allowed on any device (1F1B needs `p`).
    pub memory_limit: u32,
    /// Seed of the local-improvement moves.
    pub seed: u64,
    /// Local-improvement moves to try (each costs one validation and one simulation).
    pub iterations: u32,
}

impl SearchParams {
    /// Defaults: memory limit `p` (1F1B's peak), seed 0, 4000 moves.
    pub fn new(devices: u32, microbatches: u32, f_ns: u64, i_ns: u64, w_ns: u64) -> Self {
        SearchParams {
            devices,
            microbatches,
            forward_ns: f_ns,
            backward_input_ns: i_ns,
            backward_weight_ns: w_ns,
            p2p_ns: 0,
            memory_limit: devices,
            seed: 0,
            iterations: 4000,
        }
    }

    /// The costs every candidate is simulated with.
    pub fn costs(&self) -> Costs {
        Costs::uniform(
            self.devices,
            self.devices,
            UnitCosts {
                forward_ns: self.forward_ns,
                backward_ns: self.backward_input_ns + self.backward_weight_ns,
                backward_input_ns: Some(self.backward_input_ns),
                backward_weight_ns: Some(self.backward_weight_ns),
                p2p_ns: self.p2p_ns,
            },
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SearchError {
    #[error("{param} must be at least 1 (got {value})")]
    Zero { param: &'static str, value: u32 },
    #[error("--iterations {iterations} exceeds the limit of {limit} local moves")]
    TooManyIterations { iterations: u32, limit: u32 },
    #[error("search too large: {devices} devices x {microbatches} micro-batches exceeds the limit of {limit} actions")]
    TooLarge {
        devices: u32,
        microbatches: u32,
        limit: u64,
    },
}

/// The best schedule found and how it was found.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchResult {
    pub schedule: Schedule,
    pub makespan_ns: u64,
    /// Makespan of the best constructed schedule, before local improvement.
    pub constructed_makespan_ns: u64,
    /// Largest in-flight count on any device (never above the memory limit).
    pub peak_inflight_microbatches: u32,
    pub bubble_fraction: f64,
    /// Constructions simulated in phase 1.
    pub constructions: u32,
    pub moves_tried: u32,
    pub moves_kept: u32,
    pub moves_improving: u32,
}

/// Largest search (actions) accepted, so one call stays in the seconds.
pub const MAX_SEARCH_ACTIONS: u64 = 200_000;
/// Most local moves one search may try.
pub const MAX_SEARCH_ITERATIONS: u32 = 1_000_000;

/// How the list scheduler breaks ties between a forward and a pending W.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Policy {
    /// Run a pending W before a ready forward (keeps memory low, delays the pipeline fill).
    w_before_f: bool,
    /// Per-device cap on micro-batches in flight: `min(limit, max(1, limit - slope * d))`.
    /// Slope 0 is flat; slope 1 is 1F1B's shape with limit p.
    slope: u32,
}

/// The list scheduler's state: per device, when its stream is free, its next F and I, the
/// micro-batches in flight, the I passes whose W is pending, and when each F and I ends.
struct ListState {
    m: u32,
    comm: u64,
    policy: Policy,
    cap: Vec<u32>,
    f_end: Vec<Vec<Option<u64>>>,
    i_end: Vec<Vec<Option<u64>>>,
    free_ns: Vec<u64>,
    next_f: Vec<u32>,
    next_i: Vec<u32>,
    inflight: Vec<u32>,
    pending: Vec<VecDeque<u32>>,
}

impl ListState {
    fn comm_between(&self, a: usize, b: usize) -> u64 {
        if a == b {
            0
        } else {
            self.comm
        }
    }

    /// Device `d`'s next action and its start: an I that can start now, else a pending W
    /// (before a ready F only with `w_before_f`), else an F that can start now, else whichever
    /// of its next I or F becomes ready first. Depends only on the state of `d-1`, `d`, `d+1`.
    fn choose(&self, d: usize) -> Option<(u64, Kind)> {
        let m = self.m;
        let pu = self.free_ns.len();
        let t = self.free_ns[d];
        let ready_i = (self.next_i[d] < m)
            .then(|| {
                let k = self.next_i[d] as usize;
                let own = self.f_end[d][k]?;
                if d + 1 == pu {
                    Some(own)
                } else {
                    Some(own.max(self.i_end[d + 1][k]? + self.comm_between(d, d + 1)))
                }
            })
            .flatten();
        let ready_f = (self.next_f[d] < m && self.inflight[d] < self.cap[d])
            .then(|| {
                let k = self.next_f[d] as usize;
                if d == 0 {
                    Some(0)
                } else {
                    Some(self.f_end[d - 1][k]? + self.comm_between(d - 1, d))
                }
            })
            .flatten();
        let has_w = !self.pending[d].is_empty();
        let now_i = ready_i.is_some_and(|r| r <= t);
        let now_f = ready_f.is_some_and(|r| r <= t);
        if now_i {
            Some((t, Kind::I))
        } else if has_w && (self.policy.w_before_f || !now_f) {
            Some((t, Kind::W))
        } else if now_f {
            Some((t, Kind::F))
        } else {
            match (ready_i, ready_f) {
                (Some(a), Some(b)) if b < a => Some((b, Kind::F)),
                (Some(a), _) => Some((a, Kind::I)),
                (None, Some(b)) => Some((b, Kind::F)),
                (None, None) => None,
            }
        }
    }
}

/// A tournament tree over devices: the smallest (start, device) of those with a choice.
struct MinTree {
    size: usize,
    /// Leaves at `size..2 size`; `(u64::MAX, usize::MAX)` is "no choice".
    node: Vec<(u64, usize)>,
}

impl MinTree {
    const NONE: (u64, usize) = (u64::MAX, usize::MAX);

    fn new(n: usize) -> MinTree {
        let size = n.next_power_of_two().max(1);
        MinTree {
            size,
            node: vec![Self::NONE; 2 * size],
        }
    }

    fn set(&mut self, d: usize, start: Option<u64>) {
        let mut i = self.size + d;
        self.node[i] = start.map_or(Self::NONE, |t| (t, d));
        while i > 1 {
            i /= 2;
            self.node[i] = self.node[2 * i].min(self.node[2 * i + 1]);
        }
    }

    fn min(&self) -> Option<(u64, usize)> {
        let m = self.node[1];
        (m.1 != usize::MAX).then_some(m)
    }
}

/// Build one schedule with the list scheduler. `durations_ns` are (F, I, W, p2p) per stage.
/// Each step schedules the action with the earliest start over all devices (ties: the lowest
/// device). Scheduling on device `d` changes only the choices of `d-1`, `d` and `d+1`, so the
/// choices are kept in a tournament tree keyed by (start, device): O(log p) per action instead of
/// a scan of all devices (the search builds ZB-H2 for p up to hundreds).
fn construct(p: u32, m: u32, durations_ns: [u64; 4], limit: u32, policy: Policy) -> Schedule {
    let [f, i, w, comm] = durations_ns;
    let (pu, mu) = (p as usize, m as usize);
    let mut st = ListState {
        m,
        comm,
        policy,
        cap: (0..p)
            .map(|d| limit.saturating_sub(policy.slope * d).max(1).min(limit))
            .collect(),
        f_end: vec![vec![None::<u64>; mu]; pu],
        i_end: vec![vec![None::<u64>; mu]; pu],
        free_ns: vec![0u64; pu],
        next_f: vec![0u32; pu],
        next_i: vec![0u32; pu],
        inflight: vec![0u32; pu],
        pending: vec![VecDeque::new(); pu],
    };
    let mut out: Vec<Vec<Action>> = vec![Vec::with_capacity(3 * mu); pu];
    let mut choice: Vec<Option<(u64, Kind)>> = (0..pu).map(|d| st.choose(d)).collect();
    let mut ready = MinTree::new(pu);
    for (d, c) in choice.iter().enumerate() {
        ready.set(d, c.map(|(t, _)| t));
    }
    // Each step schedules exactly one action, so 3·p·m steps finish it.
    for _ in 0..3 * pu * mu {
        let Some((start, d)) = ready.min() else {
            break;
        };
        let kind = choice[d].map_or(Kind::F, |(_, k)| k);
        let stage = d as u32;
        let action = match kind {
            Kind::F => {
                let k = st.next_f[d];
                st.next_f[d] += 1;
                st.inflight[d] += 1;
                st.f_end[d][k as usize] = Some(start + f);
                st.free_ns[d] = start + f;
                Action::f(stage, k)
            }
            Kind::I => {
                let k = st.next_i[d];
                st.next_i[d] += 1;
                st.i_end[d][k as usize] = Some(start + i);
                st.pending[d].push_back(k);
                st.free_ns[d] = start + i;
                Action::i(stage, k)
            }
            _ => {
                let k = st.pending[d]
                    .pop_front()
                    .expect("W chosen only when pending");
                st.inflight[d] -= 1;
                st.free_ns[d] = start + w;
                Action::w(stage, k)
            }
        };
        out[d].push(action);
        let lo = d.saturating_sub(1);
        for (e, c) in choice.iter_mut().enumerate().take(d + 2).skip(lo) {
            *c = st.choose(e);
            ready.set(e, c.map(|(t, _)| t));
        }
    }
    Schedule {
        devices: out,
        num_stages: p,
        num_microbatches: m,
        placement: Placement::Loop,
        weight_update: WeightUpdate::Flush,
        microbatches_per_step: m,
        compounds: Vec::new(),
    }
}

/// The ZB-H2 order: the list scheduler with F = I = W, free communication and a flat limit of
/// 2p-1 micro-batches in flight (the paper's assumptions for its handcrafted schedules).
pub(crate) fn zb_h2_order(p: u32, m: u32) -> Schedule {
    let policy = Policy {
        w_before_f: false,
        slope: 0,
    };
    construct(p, m, [1, 1, 1, 0], 2 * p - 1, policy)
}

fn evaluate(s: &Schedule, costs: &Costs, limit: u32) -> Option<SimResult> {
    let r = simulate(
        s,
        costs,
        SimOptions {
            record_timeline: false,
            max_events: None,
        },
    )
    .ok()?;
    r.devices
        .iter()
        .all(|d| d.peak_inflight_microbatches <= limit)
        .then_some(r)
}

/// How far one local move carries an action in its device's list.
const MAX_SHIFT: u64 = 4;

/// A small deterministic generator (SplitMix64) so that a seed reproduces a search exactly.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Search for the fastest zero-bubble schedule within the memory limit. See the module docs.
pub fn search(params: &SearchParams) -> Result<SearchResult, SearchError> {
    let SearchParams {
        devices: p,
        microbatches: m,
        memory_limit: limit,
        ..
    } = *params;
    for (param, value) in [
        ("--stages", p),
        ("--microbatches", m),
        ("--memory-limit", limit),
    ] {
        if value == 0 {
            return Err(SearchError::Zero { param, value });
        }
    }
    if params.iterations > MAX_SEARCH_ITERATIONS {
        return Err(SearchError::TooManyIterations {
            iterations: params.iterations,
            limit: MAX_SEARCH_ITERATIONS,
        });
    }
    if 3 * p as u64 * m as u64 > MAX_SEARCH_ACTIONS {
        return Err(SearchError::TooLarge {
            devices: p,
            microbatches: m,
            limit: MAX_SEARCH_ACTIONS,
        });
    }
    let costs = params.costs();
    let mut candidates = Vec::new();
    for w_before_f in [false, true] {
        for slope in [0, 1, 2] {
            let durations_ns = [
                params.forward_ns,
                params.backward_input_ns,
                params.backward_weight_ns,
                params.p2p_ns,
            ];
            candidates.push(construct(
                p,
                m,
                durations_ns,
                limit,
                Policy { w_before_f, slope },
            ));
        }
    }
    for slope in [1, 2] {
        for offset in [0, 1] {
            let warmup: Vec<u32> = (0..p)
                .map(|r| (slope * (p - 1 - r) + offset).min(limit - 1).min(m))
                .collect();
            let delay: Vec<u32> = warmup.iter().map(|w| limit - 1 - w).collect();
            candidates.push(crate::generators::delayed_w_order(p, m, &warmup, &delay));
        }
    }
    let mut best: Option<(Schedule, SimResult)> = None;
    let constructions = candidates.len() as u32;
    for s in candidates {
        // Every construction honours the cap by design; the simulator re-checks it.
        let Some(r) = evaluate(&s, &costs, limit) else {
            continue;
        };
        if best
            .as_ref()
            .is_none_or(|(_, b)| r.makespan_ns < b.makespan_ns)
        {
            best = Some((s, r));
        }
    }
    let (mut schedule, mut result) =
        best.expect("a flat cap of at least 1 always yields a valid schedule");
    let constructed_makespan_ns = result.makespan_ns;
    let mut rng = SplitMix64(params.seed);
    let (mut kept, mut improving) = (0, 0);
    for _ in 0..params.iterations {
        let d = rng.below(p as u64) as usize;
        let len = schedule.devices[d].len();
        if len < 2 {
            continue;
        }
        let from = rng.below(len as u64) as usize;
        // A shift of -MAX_SHIFT..=MAX_SHIFT places, never zero.
        let shift = rng.below(2 * MAX_SHIFT) as i64 - MAX_SHIFT as i64;
        let shift = if shift >= 0 { shift + 1 } else { shift };
        let to = (from as i64 + shift).clamp(0, len as i64 - 1) as usize;
        if to == from {
            continue;
        }
        let mut candidate = schedule.clone();
        let a = candidate.devices[d].remove(from);
        candidate.devices[d].insert(to, a);
        if let Some(r) = evaluate(&candidate, &costs, limit) {
            if r.makespan_ns <= result.makespan_ns {
                kept += 1;
                if r.makespan_ns < result.makespan_ns {
                    improving += 1;
                }
                schedule = candidate;
                result = r;
            }
        }
    }
    let peak = result
        .devices
        .iter()
        .map(|d| d.peak_inflight_microbatches)
        .max()
        .unwrap_or(0);
    Ok(SearchResult {
        schedule,
        makespan_ns: result.makespan_ns,
        constructed_makespan_ns,
        peak_inflight_microbatches: peak,
        bubble_fraction: result.bubble_fraction,
        constructions,
        moves_tried: params.iterations,
        moves_kept: kept,
        moves_improving: improving,
    })
}

/// The zero-bubble paper's bubble rate (Qi et al. 2024, Sec. 5): each device's time from the
/// start of its first action to the end of its last (the paper's "longest stage time", which
/// ignores the diagonal start of later devices because consecutive iterations overlap there
/// once the optimizer step is not synchronised), against its busy time:
/// `(max span - busy) / max span`, with busy taken on the device of the longest span.
/// Needs a simulation with `record_timeline`; `None` without one.
pub fn paper_bubble_rate(result: &SimResult) -> Option<f64> {
    let tl = result.timeline.as_ref()?;
    let p = tl.num_devices as usize;
    let mut first = vec![u64::MAX; p];
    let mut last = vec![0u64; p];
    for s in tl
        .spans
        .iter()
        .filter(|s| s.stream == crate::sim::Stream::Compute)
    {
        let d = s.device as usize;
        first[d] = first[d].min(s.start_ns);
        last[d] = last[d].max(s.end_ns);
    }
    let (span, busy) = (0..p)
        .filter(|&d| first[d] != u64::MAX)
        .map(|d| (last[d] - first[d], result.devices[d].busy_ns))
        .max()?;
    Some(if span == 0 {
        0.0
    } else {
        (span - busy) as f64 / span as f64
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The list scheduler as first written (a scan of all devices per action): the oracle the
    /// incremental `construct` must match action for action.
    fn construct_reference(
        p: u32,
        m: u32,
        durations_ns: [u64; 4],
        limit: u32,
        policy: Policy,
    ) -> Schedule {
        let [f, i, w, comm] = durations_ns;
        let (pu, mu) = (p as usize, m as usize);
        let mut f_end = vec![vec![None::<u64>; mu]; pu];
        let mut i_end = vec![vec![None::<u64>; mu]; pu];
        let mut free_ns = vec![0u64; pu];
        let mut next_f = vec![0u32; pu];
        let mut next_i = vec![0u32; pu];
        let mut inflight = vec![0u32; pu];
        let mut pending: Vec<VecDeque<u32>> = vec![VecDeque::new(); pu];
        let mut out: Vec<Vec<Action>> = vec![Vec::with_capacity(3 * mu); pu];
        let cap: Vec<u32> = (0..p)
            .map(|d| limit.saturating_sub(policy.slope * d).max(1).min(limit))
            .collect();
        let comm_between = |a: usize, b: usize| if a == b { 0 } else { comm };
        // Each step schedules exactly one action, so 3·p·m steps finish it.
        for _ in 0..3 * pu * mu {
            let mut best: Option<(u64, usize, Kind)> = None;
            for d in 0..pu {
                let t = free_ns[d];
                let ready_i = (next_i[d] < m)
                    .then(|| {
                        let k = next_i[d] as usize;
                        let own = f_end[d][k]?;
                        if d + 1 == pu {
                            Some(own)
                        } else {
                            Some(own.max(i_end[d + 1][k]? + comm_between(d, d + 1)))
                        }
                    })
                    .flatten();
                let ready_f = (next_f[d] < m && inflight[d] < cap[d])
                    .then(|| {
                        let k = next_f[d] as usize;
                        if d == 0 {
                            Some(0)
                        } else {
                            Some(f_end[d - 1][k]? + comm_between(d - 1, d))
                        }
                    })
                    .flatten();
                let has_w = !pending[d].is_empty();
                let now_i = ready_i.is_some_and(|r| r <= t);
                let now_f = ready_f.is_some_and(|r| r <= t);
                let choice = if now_i {
                    Some((t, Kind::I))
                } else if has_w && (policy.w_before_f || !now_f) {
                    Some((t, Kind::W))
                } else if now_f {
                    Some((t, Kind::F))
                } else {
                    match (ready_i, ready_f) {
                        (Some(a), Some(b)) if b < a => Some((b, Kind::F)),
                        (Some(a), _) => Some((a, Kind::I)),
                        (None, Some(b)) => Some((b, Kind::F)),
                        (None, None) => None,
                    }
                };
                if let Some((start, kind)) = choice {
                    if best.is_none_or(|(s, _, _)| start < s) {
                        best = Some((start, d, kind));
                    }
                }
            }
            let Some((start, d, kind)) = best else {
                break;
            };
            let stage = d as u32;
            let action = match kind {
                Kind::F => {
                    let k = next_f[d];
                    next_f[d] += 1;
                    inflight[d] += 1;
                    f_end[d][k as usize] = Some(start + f);
                    free_ns[d] = start + f;
                    Action::f(stage, k)
                }
                Kind::I => {
                    let k = next_i[d];
                    next_i[d] += 1;
                    i_end[d][k as usize] = Some(start + i);
                    pending[d].push_back(k);
                    free_ns[d] = start + i;
                    Action::i(stage, k)
                }
                _ => {
                    let k = pending[d].pop_front().expect("W chosen only when pending");
                    inflight[d] -= 1;
                    free_ns[d] = start + w;
                    Action::w(stage, k)
                }
            };
            out[d].push(action);
        }
        Schedule {
            devices: out,
            num_stages: p,
            num_microbatches: m,
            placement: Placement::Loop,
            weight_update: WeightUpdate::Flush,
            microbatches_per_step: m,
            compounds: Vec::new(),
        }
    }

    #[test]
    fn incremental_list_scheduler_matches_the_full_scan() {
        for p in 1..=9u32 {
            for m in [1u32, 2, 3, 5, 8, 13, 24] {
                for durations in [[1, 1, 1, 0], [3, 2, 1, 1], [2, 5, 3, 4], [7, 1, 2, 0]] {
                    for limit in [1, p, 2 * p - 1, 3 * p] {
                        for (w_before_f, slope) in [(false, 0), (true, 0), (false, 1), (true, 1)] {
                            let policy = Policy { w_before_f, slope };
                            assert_eq!(
                                construct(p, m, durations, limit, policy),
                                construct_reference(p, m, durations, limit, policy),
                                "p={p} m={m} {durations:?} limit={limit} {policy:?}"
                            );
                        }
                    }
                }
            }
        }
    }
}
