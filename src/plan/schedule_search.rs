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

use crate::schedule::ir::Schedule;
use crate::schedule::list_scheduler::{construct, Policy};
use crate::sim::{simulate, Costs, SimOptions, SimResult, UnitCosts};

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
    #[error("--iterations {iterations}: {iterations} moves of {actions} actions each is more than the {limit} action simulations one search may run (about 7 s); valid: --iterations at most {max_iterations} for --stages {devices} --microbatches {microbatches}")]
    TooMuchWork {
        iterations: u32,
        actions: u64,
        limit: u64,
        max_iterations: u64,
        devices: u32,
        microbatches: u32,
    },
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
/// Most action simulations (moves x actions) one search may run: each move simulates the whole
/// schedule once, about 70 ns an action on the 2-core development machine, so this keeps a
/// search near 7 s (`benches/bounded.sh`; `--stages 64 --microbatches 512` with 4,000 moves
/// took 28 s).
pub const MAX_SEARCH_WORK: u64 = 100_000_000;
/// Local moves tried when none are asked for: 4,000, fewer for large schedules so that the
/// search stays within [`MAX_SEARCH_WORK`].
pub fn default_iterations(devices: u32, microbatches: u32) -> u32 {
    let actions = (3 * devices as u64 * microbatches as u64).max(1);
    (MAX_SEARCH_WORK / actions).min(4000) as u32
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
    search_with_progress(params, None)
}

/// [`search`], calling `progress(done, total)` after each construction and each local move
/// (`total` = constructions + `iterations`), so a caller can show how far it is. The callback
/// cannot change the result; the search never reads the clock.
pub fn search_with_progress(
    params: &SearchParams,
    progress: Option<&dyn Fn(u64, u64)>,
) -> Result<SearchResult, SearchError> {
    let report = |done: u64, total: u64| {
        if let Some(f) = progress {
            f(done, total)
        }
    };
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
    let actions = 3 * p as u64 * m as u64;
    if params.iterations as u64 * actions > MAX_SEARCH_WORK {
        return Err(SearchError::TooMuchWork {
            iterations: params.iterations,
            actions,
            limit: MAX_SEARCH_WORK,
            max_iterations: MAX_SEARCH_WORK / actions,
            devices: p,
            microbatches: m,
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
            candidates.push(crate::schedule::generators::delayed_w_order(
                p, m, &warmup, &delay,
            ));
        }
    }
    let mut best: Option<(Schedule, SimResult)> = None;
    let constructions = candidates.len() as u32;
    let total = constructions as u64 + params.iterations as u64;
    for (i, s) in candidates.into_iter().enumerate() {
        report(i as u64, total);
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
    for it in 0..params.iterations {
        report(constructions as u64 + it as u64, total);
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
    report(total, total);
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
