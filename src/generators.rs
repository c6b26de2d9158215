//! Schedule generators: pure functions from `(p, m, v, ...)` to a [`Schedule`].
//!
//! Each generator only fixes the *order* of actions on each device. Timing, bubbles and
//! communication come out of the simulator. Every generator's output passes
//! [`crate::validate::validate`] for every `p >= 1`, `m >= 1` and `v >= 1` it accepts
//! (property-tested in `tests/generators.rs`).

use crate::ir::{Action, Kind, Placement, Schedule, WeightUpdate};
use std::fmt;
use std::str::FromStr;

/// The built-in schedule families, by their CLI name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScheduleName {
    GPipe,
    OneFOneB,
    Interleaved1F1B,
    PipeDream,
    PipeDream2BW,
}

impl ScheduleName {
    pub const ALL: [ScheduleName; 5] = [
        ScheduleName::GPipe,
        ScheduleName::OneFOneB,
        ScheduleName::Interleaved1F1B,
        ScheduleName::PipeDream,
        ScheduleName::PipeDream2BW,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ScheduleName::GPipe => "gpipe",
            ScheduleName::OneFOneB => "1f1b",
            ScheduleName::Interleaved1F1B => "interleaved-1f1b",
            ScheduleName::PipeDream => "pipedream",
            ScheduleName::PipeDream2BW => "pipedream-2bw",
        }
    }

    /// Whether the schedule places more than one chunk per device when asked to.
    pub fn supports_chunks(self) -> bool {
        matches!(self, ScheduleName::Interleaved1F1B)
    }

    /// Whether the schedule runs several mini-batches without a flush.
    pub fn is_asynchronous(self) -> bool {
        matches!(self, ScheduleName::PipeDream | ScheduleName::PipeDream2BW)
    }
}

impl fmt::Display for ScheduleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Names `pplan` knows but that this build cannot generate yet.
pub const PLANNED_NAMES: [&str; 5] = ["zb-h1", "zb-h2", "zbv", "dualpipev", "looped-bfs"];

impl FromStr for ScheduleName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        for name in ScheduleName::ALL {
            if name.as_str() == s {
                return Ok(name);
            }
        }
        let valid: Vec<&str> = ScheduleName::ALL.iter().map(|n| n.as_str()).collect();
        if PLANNED_NAMES.contains(&s) {
            return Err(format!(
                "schedule '{s}' is not implemented in this version (available: {}, or a .csv file)",
                valid.join(", ")
            ));
        }
        Err(format!(
            "unknown schedule '{s}' (valid: {}, or a path to a .csv schedule file)",
            valid.join(", ")
        ))
    }
}

/// Parameters of a generator call. `chunks` is `v`; `steps` the number of mini-batches the
/// asynchronous PipeDream schedules run without a flush.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GenParams {
    pub devices: u32,
    pub microbatches: u32,
    pub chunks: u32,
    pub steps: u32,
    pub vertical_sync: bool,
}

impl GenParams {
    pub fn new(devices: u32, microbatches: u32) -> Self {
        GenParams {
            devices,
            microbatches,
            chunks: 1,
            steps: 1,
            vertical_sync: false,
        }
    }
    pub fn chunks(mut self, v: u32) -> Self {
        self.chunks = v;
        self
    }
    pub fn steps(mut self, n: u32) -> Self {
        self.steps = n;
        self
    }
}

/// A request a generator cannot satisfy, naming the parameter and what would be valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GenError {
    #[error("{param} must be at least 1 (got {value})")]
    Zero { param: &'static str, value: u32 },
    #[error("{schedule} places one stage per device: --chunks must be 1 (got {chunks})")]
    ChunksUnsupported { schedule: &'static str, chunks: u32 },
    #[error("pipedream-2bw needs at least as many micro-batches per mini-batch as pipeline devices (m >= p) so that two weight versions suffice; got m = {m}, p = {p}")]
    TooFewMicrobatches { m: u32, p: u32 },
    #[error("schedule too large: {actions} actions exceeds the limit of {limit}")]
    TooLarge { actions: u64, limit: u64 },
}

/// Largest schedule a generator will build (keeps memory bounded on hostile input).
pub const MAX_ACTIONS: u64 = 200_000_000;

/// Generate a built-in schedule.
pub fn generate(name: ScheduleName, params: GenParams) -> Result<Schedule, GenError> {
    let GenParams {
        devices: p,
        microbatches: m,
        chunks: v,
        steps,
        vertical_sync,
    } = params;
    for (param, value) in [
        ("--stages", p),
        ("--microbatches", m),
        ("--chunks", v),
        ("--steps", steps),
    ] {
        if value == 0 {
            return Err(GenError::Zero { param, value });
        }
    }
    if v != 1 && !name.supports_chunks() {
        return Err(GenError::ChunksUnsupported {
            schedule: name.as_str(),
            chunks: v,
        });
    }
    let total_mb = if name.is_asynchronous() {
        m as u64 * steps as u64
    } else {
        m as u64
    };
    let actions = 2 * total_mb * p as u64 * v as u64;
    if actions > MAX_ACTIONS || total_mb > u32::MAX as u64 {
        return Err(GenError::TooLarge {
            actions,
            limit: MAX_ACTIONS,
        });
    }
    Ok(match name {
        ScheduleName::GPipe => gpipe(p, m),
        ScheduleName::OneFOneB => one_f_one_b(p, m),
        ScheduleName::Interleaved1F1B => interleaved_1f1b(p, m, v),
        ScheduleName::PipeDream => pipedream(p, m, steps, vertical_sync),
        ScheduleName::PipeDream2BW => {
            if m < p {
                return Err(GenError::TooFewMicrobatches { m, p });
            }
            pipedream_2bw(p, m, steps)
        }
    })
}

fn flush_schedule(devices: Vec<Vec<Action>>, num_stages: u32, m: u32) -> Schedule {
    Schedule {
        devices,
        num_stages,
        num_microbatches: m,
        placement: Placement::Loop,
        weight_update: WeightUpdate::Flush,
        microbatches_per_step: m,
    }
}

/// GPipe (Huang et al. 2019): every device runs all forwards, then all backwards.
/// Bubble over ideal compute: (p-1)/m; every device stashes all m micro-batches.
pub fn gpipe(p: u32, m: u32) -> Schedule {
    let devices = (0..p)
        .map(|r| {
            (0..m)
                .map(|k| Action::f(r, k))
                .chain((0..m).map(|k| Action::b(r, k)))
                .collect()
        })
        .collect();
    flush_schedule(devices, p, m)
}

/// The 1F1B order of one device over `total` micro-batches: `warmup` forwards, then
/// alternating forward/backward, then the remaining backwards (cool-down).
fn one_f_one_b_device(stage: u32, warmup: u32, total: u32) -> Vec<Action> {
    let warmup = warmup.min(total);
    let mut out = Vec::with_capacity(2 * total as usize);
    out.extend((0..warmup).map(|k| Action::f(stage, k)));
    for k in 0..total - warmup {
        out.push(Action::f(stage, warmup + k));
        out.push(Action::b(stage, k));
    }
    out.extend((total - warmup..total).map(|k| Action::b(stage, k)));
    out
}

/// 1F1B / PipeDream-Flush (Narayanan et al. 2021): device r runs min(p-1-r, m) warm-up
/// forwards, then one forward and one backward in turn, then drains. Same bubble as GPipe,
/// but at most min(p-r, m) micro-batches in flight on device r.
pub fn one_f_one_b(p: u32, m: u32) -> Schedule {
    let devices = (0..p)
        .map(|r| one_f_one_b_device(r, p - 1 - r, m))
        .collect();
    flush_schedule(devices, p, m)
}

/// Sizes of the micro-batch rounds of the interleaved schedule.
///
/// PyTorch's `ScheduleInterleaved1F1B` uses `rounds = max(1, m / p)` rounds of `m / rounds`
/// micro-batches and rejects `m % rounds != 0`. We follow it exactly where it is defined and
/// otherwise give the first `m % rounds` rounds one extra micro-batch. With `m` a multiple
/// of `p` every round holds `p` micro-batches, which is Megatron-LM's schedule.
pub fn interleaved_rounds(p: u32, m: u32) -> Vec<u32> {
    let rounds = (m / p).max(1);
    (0..rounds)
        .map(|i| m / rounds + u32::from(i < m % rounds))
        .collect()
}

/// Interleaved 1F1B (Narayanan et al. 2021, Sec. 2.2): v chunks per device, stage s on device
/// s mod p. Within a round of g micro-batches a device runs chunk 0 for all of them, then
/// chunk 1, and so on; backwards go through the chunks in reverse. Device r warms up with
/// (v-1)·g + 2(p-1-r) forwards (Megatron-LM's count), then alternates, then drains.
/// Bubble over ideal compute: (p-1)/(v·m) when p divides m.
pub fn interleaved_1f1b(p: u32, m: u32, v: u32) -> Schedule {
    let rounds = interleaved_rounds(p, m);
    // Order of (chunk, microbatch) pairs for forwards and backwards, shared by all devices.
    let mut fwd = Vec::with_capacity((m * v) as usize);
    let mut bwd = Vec::with_capacity((m * v) as usize);
    let mut start = 0;
    for &g in &rounds {
        for c in 0..v {
            fwd.extend((start..start + g).map(|k| (c, k)));
            bwd.extend((start..start + g).map(|k| (v - 1 - c, k)));
        }
        start += g;
    }
    let total = (m * v) as usize;
    let first = rounds[0];
    let devices = (0..p)
        .map(|r| {
            let warmup = (((v - 1) * first + 2 * (p - 1 - r)) as usize).min(total);
            let mut out = Vec::with_capacity(2 * total);
            let f = |(c, k): (u32, u32)| Action::f(c * p + r, k);
            let b = |(c, k): (u32, u32)| Action::b(c * p + r, k);
            out.extend(fwd[..warmup].iter().copied().map(f));
            for i in 0..total - warmup {
                out.push(f(fwd[warmup + i]));
                out.push(b(bwd[i]));
            }
            out.extend(bwd[total - warmup..].iter().copied().map(b));
            out
        })
        .collect();
    flush_schedule(devices, p * v, m)
}

/// PipeDream (Narayanan et al. 2019): asynchronous 1F1B over `steps` mini-batches of `m`
/// micro-batches with no flush in between. Each backward updates that stage's weights, so each
/// in-flight micro-batch keeps the weight version its forward used (weight stashing): stage s
/// holds up to p-s versions. With vertical sync every stage uses the version stage 0 used.
pub fn pipedream(p: u32, m: u32, steps: u32, vertical_sync: bool) -> Schedule {
    let total = m * steps;
    let devices = (0..p)
        .map(|r| one_f_one_b_device(r, p - 1 - r, total))
        .collect();
    Schedule {
        devices,
        num_stages: p,
        num_microbatches: total,
        placement: Placement::Loop,
        weight_update: WeightUpdate::Stash { vertical_sync },
        microbatches_per_step: 1,
    }
}

/// PipeDream-2BW (Narayanan et al. 2021, "Memory-efficient pipeline-parallel DNN training"):
/// the same 1F1B order with no flush, gradients accumulated over `m` micro-batches, and a new
/// weight version every `m` micro-batches; double buffering keeps at most two versions.
pub fn pipedream_2bw(p: u32, m: u32, steps: u32) -> Schedule {
    let total = m * steps;
    let devices = (0..p)
        .map(|r| one_f_one_b_device(r, p - 1 - r, total))
        .collect();
    Schedule {
        devices,
        num_stages: p,
        num_microbatches: total,
        placement: Placement::Loop,
        weight_update: WeightUpdate::DoubleBuffered,
        microbatches_per_step: m,
    }
}

/// Convenience used by tests and the CLI: the kinds a schedule uses for backward.
pub fn uses_split_backward(schedule: &Schedule) -> bool {
    schedule
        .devices
        .iter()
        .flatten()
        .any(|a| matches!(a.kind, Kind::I | Kind::W))
}
