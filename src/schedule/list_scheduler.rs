//! The list scheduler behind ZB-H2 and the zero-bubble schedule search's constructions.
//!
//! Given abstract F, I and W durations and a point-to-point time (plain numbers, not a cost
//! model), it builds one F/I/W order per device greedily: each device, when free, runs an `I` if
//! its gradient has arrived (I is on the critical path), otherwise a forward while under its
//! in-flight cap, otherwise the oldest pending `W` (W fills bubbles). Pure and deterministic;
//! [`crate::plan::schedule_search`] judges its orders with the simulator.

use super::ir::{Action, Kind, Placement, Schedule, WeightUpdate};
use std::collections::VecDeque;

/// How the list scheduler breaks ties between a forward and a pending W.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Run a pending W before a ready forward (keeps memory low, delays the pipeline fill).
    pub w_before_f: bool,
    /// Per-device cap on micro-batches in flight: `min(limit, max(1, limit - slope * d))`.
    /// Slope 0 is flat; slope 1 is 1F1B's shape with limit p.
    pub slope: u32,
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
        self.node[self.size + d] = start.map_or(Self::NONE, |t| (t, d));
    }

    /// Recompute the ancestors of leaves `lo..=hi` after [`MinTree::set`], level by level,
    /// stopping at the first level where none of them changed (the levels above hold the
    /// same minima as before).
    fn update(&mut self, lo: usize, hi: usize) {
        let (mut a, mut b) = ((self.size + lo) / 2, (self.size + hi) / 2);
        while a >= 1 {
            let mut changed = false;
            for i in a..=b {
                let v = self.node[2 * i].min(self.node[2 * i + 1]);
                if self.node[i] != v {
                    self.node[i] = v;
                    changed = true;
                }
            }
            if !changed {
                break;
            }
            (a, b) = (a / 2, b / 2);
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
pub fn construct(p: u32, m: u32, durations_ns: [u64; 4], limit: u32, policy: Policy) -> Schedule {
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
    ready.update(0, ready.size - 1);
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
        let hi = (d + 1).min(pu - 1);
        for (e, c) in choice.iter_mut().enumerate().take(hi + 1).skip(lo) {
            *c = st.choose(e);
            ready.set(e, c.map(|(t, _)| t));
        }
        ready.update(lo, hi);
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
pub fn zb_h2_order(p: u32, m: u32) -> Schedule {
    let policy = Policy {
        w_before_f: false,
        slope: 0,
    };
    construct(p, m, [1, 1, 1, 0], 2 * p - 1, policy)
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
