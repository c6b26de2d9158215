//! Schedule generators: pure functions from `(p, m, v, ...)` to a [`Schedule`].
//!
//! Each generator only fixes the *order* of actions on each device. Timing, bubbles and
//! communication come out of the simulator. Every generator's output passes
//! [`crate::schedule::validate::validate`] for every `p >= 1`, `m >= 1` and `v >= 1` it accepts
//! (property-tested in `tests/generators.rs`).

use crate::schedule::ir::{Action, Compound, Kind, Placement, Schedule, WeightUpdate};
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
    ZbH1,
    ZbH2,
    ZbV,
    DualPipeV,
    LoopedBfs,
}

impl ScheduleName {
    pub const ALL: [ScheduleName; 10] = [
        ScheduleName::GPipe,
        ScheduleName::OneFOneB,
        ScheduleName::Interleaved1F1B,
        ScheduleName::PipeDream,
        ScheduleName::PipeDream2BW,
        ScheduleName::ZbH1,
        ScheduleName::ZbH2,
        ScheduleName::ZbV,
        ScheduleName::DualPipeV,
        ScheduleName::LoopedBfs,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ScheduleName::GPipe => "gpipe",
            ScheduleName::OneFOneB => "1f1b",
            ScheduleName::Interleaved1F1B => "interleaved-1f1b",
            ScheduleName::PipeDream => "pipedream",
            ScheduleName::PipeDream2BW => "pipedream-2bw",
            ScheduleName::ZbH1 => "zb-h1",
            ScheduleName::ZbH2 => "zb-h2",
            ScheduleName::ZbV => "zbv",
            ScheduleName::DualPipeV => "dualpipev",
            ScheduleName::LoopedBfs => "looped-bfs",
        }
    }

    /// Whether the schedule places more than one chunk per device when asked to.
    pub fn supports_chunks(self) -> bool {
        matches!(
            self,
            ScheduleName::Interleaved1F1B | ScheduleName::LoopedBfs
        )
    }

    /// The chunk count a schedule is defined for, if it fixes one: ZB-V and DualPipeV hold
    /// exactly two stages per device in a V (device r holds stages r and 2p-1-r).
    pub fn fixed_chunks(self) -> Option<u32> {
        matches!(self, ScheduleName::ZbV | ScheduleName::DualPipeV).then_some(2)
    }

    /// Whether the schedule splits backward into `I` and `W` (for some or all micro-batches).
    pub fn splits_backward(self) -> bool {
        matches!(
            self,
            ScheduleName::ZbH1 | ScheduleName::ZbH2 | ScheduleName::ZbV | ScheduleName::DualPipeV
        )
    }

    /// How stages are placed on devices.
    pub fn placement(self) -> Placement {
        if self.fixed_chunks().is_some() {
            Placement::V
        } else {
            Placement::Loop
        }
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

impl FromStr for ScheduleName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        for name in ScheduleName::ALL {
            if name.as_str() == s {
                return Ok(name);
            }
        }
        let valid: Vec<&str> = ScheduleName::ALL.iter().map(|n| n.as_str()).collect();
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
    /// Interleaved 1F1B: Megatron-Core's micro-batch group per virtual stage
    /// (`--microbatch-group-size-per-virtual-pipeline-stage`, [`interleaved_groups`]); `None`:
    /// the rounds of [`interleaved_rounds`] (groups of p when p divides m, as Megatron-LM's
    /// default, else PyTorch's rounds).
    pub group: Option<u32>,
}

impl GenParams {
    pub fn new(devices: u32, microbatches: u32) -> Self {
        GenParams {
            devices,
            microbatches,
            chunks: 1,
            steps: 1,
            vertical_sync: false,
            group: None,
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
    pub fn group(mut self, n: Option<u32>) -> Self {
        self.group = n;
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
    #[error("{schedule} holds exactly {required} chunks per device in a V: --chunks must be {required} or left out (got {chunks})")]
    ChunksFixed {
        schedule: &'static str,
        required: u32,
        chunks: u32,
    },
    #[error("dualpipev needs at least as many micro-batches as stages (m >= 2p, as PyTorch's ScheduleDualPipeV requires); got m = {m}, p = {p}")]
    DualPipeTooFewMicrobatches { m: u32, p: u32 },
    #[error("schedule too large: {actions} actions exceeds the limit of {limit}")]
    TooLarge { actions: u64, limit: u64 },
    #[error("{0}")]
    Group(String),
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
        group,
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
    let v = match name.fixed_chunks() {
        // `--chunks` left out reaches us as 1.
        Some(required) if v == 1 || v == required => required,
        Some(required) => {
            return Err(GenError::ChunksFixed {
                schedule: name.as_str(),
                required,
                chunks: v,
            })
        }
        None if v != 1 && !name.supports_chunks() => {
            return Err(GenError::ChunksUnsupported {
                schedule: name.as_str(),
                chunks: v,
            })
        }
        None => v,
    };
    let total_mb = if name.is_asynchronous() {
        m as u64 * steps as u64
    } else {
        m as u64
    };
    // Split-backward schedules hold three actions per (stage, micro-batch).
    let per_pair = if name.splits_backward() { 3 } else { 2 };
    let actions = per_pair * total_mb * p as u64 * v as u64;
    if actions > MAX_ACTIONS || total_mb > u32::MAX as u64 {
        return Err(GenError::TooLarge {
            actions,
            limit: MAX_ACTIONS,
        });
    }
    Ok(match name {
        ScheduleName::GPipe => gpipe(p, m),
        ScheduleName::OneFOneB => one_f_one_b(p, m),
        ScheduleName::Interleaved1F1B => match group {
            None => interleaved_1f1b(p, m, v),
            Some(n) => {
                check_group(p, m, n).map_err(GenError::Group)?;
                interleaved_in_groups(p, v, &interleaved_groups(m, n))
            }
        },
        ScheduleName::PipeDream => pipedream(p, m, steps, vertical_sync),
        ScheduleName::PipeDream2BW => {
            if m < p {
                return Err(GenError::TooFewMicrobatches { m, p });
            }
            pipedream_2bw(p, m, steps)
        }
        ScheduleName::ZbH1 => zb_h1(p, m),
        ScheduleName::ZbH2 => zb_h2(p, m),
        ScheduleName::ZbV => zbv(p, m),
        ScheduleName::DualPipeV => {
            if m < 2 * p {
                return Err(GenError::DualPipeTooFewMicrobatches { m, p });
            }
            dualpipev(p, m)
        }
        ScheduleName::LoopedBfs => looped_bfs(p, m, v),
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
        compounds: Vec::new(),
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

/// Megatron-Core's micro-batch groups of the interleaved schedule
/// (`megatron/core/pipeline_parallel/schedules.py`, `get_schedule_table`, at d98e8a6): groups
/// of `n` consecutive micro-batches, the last group whatever remains once another full group
/// would reach or pass `m` (so it holds between 1 and `n`).
pub fn interleaved_groups(m: u32, n: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < m {
        let g = if start + n >= m { m - start } else { n };
        out.push(g);
        start += g;
    }
    out
}

/// Megatron-Core's rule for the group size `n` of `m` micro-batches on `p` pipeline ranks
/// (`forward_backward_pipelining_with_interleaving`): `p <= n <= m`, and the last group empty
/// or at least `p` (a shorter one leaves dependency bubbles, and Megatron-Core refuses it).
/// The error says which part fails and the smallest `n` that holds, if any.
pub fn check_group(p: u32, m: u32, n: u32) -> Result<(), String> {
    let flag = "--microbatch-group-size-per-virtual-pipeline-stage";
    let valid = match smallest_group(p, m) {
        Some(k) => format!("valid: {flag} {k} (the smallest that holds for m = {m}, p = {p})"),
        None => format!(
            "no group size holds: interleaving needs at least p = {p} micro-batches, m = {m}"
        ),
    };
    if n < p || n > m {
        return Err(format!(
            "{flag} {n}: must be between the pipeline ranks p = {p} and the micro-batches m = {m}, as Megatron-Core requires; {valid}"
        ));
    }
    let last = m % n;
    if last > 0 && last < p {
        return Err(format!(
            "{flag} {n}: the last group would hold m mod {n} = {last} micro-batches, fewer than the pipeline ranks p = {p}, which Megatron-Core refuses (dependency bubbles); {valid}"
        ));
    }
    Ok(())
}

/// The smallest group size Megatron-Core accepts for `m` micro-batches on `p` ranks (`p` when
/// `p` divides `m`, Megatron-LM's default); `None` when `m < p`.
pub fn smallest_group(p: u32, m: u32) -> Option<u32> {
    (p.max(1)..=m).find(|&n| check_group_holds(p, m, n))
}

fn check_group_holds(p: u32, m: u32, n: u32) -> bool {
    n >= p && n <= m && !(m % n > 0 && m % n < p)
}

/// Interleaved 1F1B (Narayanan et al. 2021, Sec. 2.2): v chunks per device, stage s on device
/// s mod p. Within a round of g micro-batches a device runs chunk 0 for all of them, then
/// chunk 1, and so on; backwards go through the chunks in reverse. Device r warms up with
/// (v-1)·g + 2(p-1-r) forwards (Megatron-LM's count), then alternates, then drains.
/// Bubble over ideal compute: (p-1)/(v·m) when p divides m.
pub fn interleaved_1f1b(p: u32, m: u32, v: u32) -> Schedule {
    interleaved_in_groups(p, v, &interleaved_rounds(p, m))
}

/// Interleaved 1F1B over the given micro-batch groups (rounds): the first group's size sets
/// the warm-up, `(v-1)·g + 2(p-1-r)` forwards on device r, as Megatron-Core counts it with
/// its group size.
pub fn interleaved_in_groups(p: u32, v: u32, rounds: &[u32]) -> Schedule {
    let m: u32 = rounds.iter().sum();
    // Order of (chunk, microbatch) pairs for forwards and backwards, shared by all devices.
    let mut fwd = Vec::with_capacity((m * v) as usize);
    let mut bwd = Vec::with_capacity((m * v) as usize);
    let mut start = 0;
    for &g in rounds {
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
    asynchronous_1f1b(p, m * steps, WeightUpdate::Stash { vertical_sync }, 1)
}

/// PipeDream-2BW (Narayanan et al. 2021, "Memory-efficient pipeline-parallel DNN training"):
/// the same 1F1B order with no flush, gradients accumulated over `m` micro-batches, and a new
/// weight version every `m` micro-batches; double buffering keeps at most two versions.
pub fn pipedream_2bw(p: u32, m: u32, steps: u32) -> Schedule {
    asynchronous_1f1b(p, m * steps, WeightUpdate::DoubleBuffered, m)
}

/// 1F1B over `total` micro-batches with no flush, updating weights every `per_step` backwards.
fn asynchronous_1f1b(p: u32, total: u32, weight_update: WeightUpdate, per_step: u32) -> Schedule {
    let devices = (0..p)
        .map(|r| one_f_one_b_device(r, p - 1 - r, total))
        .collect();
    Schedule {
        devices,
        num_stages: p,
        num_microbatches: total,
        placement: Placement::Loop,
        weight_update,
        microbatches_per_step: per_step,
        compounds: Vec::new(),
    }
}

/// A schedule with a flush and split backward on `p * v` stages.
fn flush_schedule_placed(
    devices: Vec<Vec<Action>>,
    num_stages: u32,
    m: u32,
    placement: Placement,
) -> Schedule {
    Schedule {
        placement,
        ..flush_schedule(devices, num_stages, m)
    }
}

/// ZB-H1 (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", Sec. 2.1, Fig. 3 top): the 1F1B
/// order with the backward split into `I` (input gradient) and `W` (weight gradient). Device r
/// warms up with min(p-1-r, m) forwards as 1F1B does, then runs F, I and — delayed by r
/// micro-batches — W; the delayed W passes fill the cool-down. Every device then holds at most
/// p micro-batches in flight (counted until W ends), which is 1F1B's peak on device 0, and with
/// F = I = W the bubble is (p-1)(F+I-W) instead of 1F1B's (p-1)(F+I+W): one third.
pub fn zb_h1(p: u32, m: u32) -> Schedule {
    let warmup: Vec<u32> = (0..p).map(|r| p - 1 - r).collect();
    let delay: Vec<u32> = (0..p).collect();
    delayed_w_order(p, m, &warmup, &delay)
}

/// A split-backward 1F1B order: device r runs `warmup[r]` forwards, then (F, I) pairs with
/// each W delayed by `delay[r]` micro-batches, then (I, W) pairs, then the remaining W passes.
/// Peak in-flight on device r is at most `warmup[r] + 1 + delay[r]`.
pub fn delayed_w_order(p: u32, m: u32, warmup: &[u32], delay: &[u32]) -> Schedule {
    let devices = (0..p)
        .map(|r| {
            let warmup = warmup[r as usize].min(m);
            let delay = delay[r as usize];
            let mut out = Vec::with_capacity(3 * m as usize);
            out.extend((0..warmup).map(|k| Action::f(r, k)));
            let mut next_w = 0;
            for k in 0..m - warmup {
                out.push(Action::f(r, warmup + k));
                out.push(Action::i(r, k));
                if k >= delay {
                    out.push(Action::w(r, next_w));
                    next_w += 1;
                }
            }
            for k in m - warmup..m {
                out.push(Action::i(r, k));
                if k >= delay {
                    out.push(Action::w(r, next_w));
                    next_w += 1;
                }
            }
            out.extend((next_w..m).map(|k| Action::w(r, k)));
            out
        })
        .collect();
    Schedule {
        devices,
        num_stages: p,
        num_microbatches: m,
        placement: Placement::Loop,
        weight_update: WeightUpdate::Flush,
        microbatches_per_step: m,
        compounds: Vec::new(),
    }
}

/// ZB-H2 (Qi et al. 2024, Sec. 2.2, Fig. 3 bottom): up to 2p-1 micro-batches in flight so that
/// extra warm-up forwards fill the start of the pipeline and W passes fill its end. The order
/// is what the list scheduler of [`super::list_scheduler`] builds under the paper's
/// assumption F = I = W with free communication and a limit of 2p-1 micro-batches in flight:
/// each device runs an `I` as soon as its gradient is there, else a forward while under the
/// limit, else the oldest pending `W`. With that limit device r warms up with 2(p-1-r)+1
/// forwards (device 0 with 2p-1), as in the paper's figure.
pub fn zb_h2(p: u32, m: u32) -> Schedule {
    super::list_scheduler::zb_h2_order(p, m)
}

/// ZB-V (Qi et al. 2024, Sec. 6; PyTorch `ScheduleZBVZeroBubble`): two chunks per device in a
/// V (device r holds stages r and 2p-1-r), so the first and last stage share device 0. Device r:
/// 2(p-r)-1 forwards of its first chunk; r pairs (second-chunk F, first-chunk F); p-r rounds of
/// second-chunk F, I, W; then a steady state of (F, I, W) on each chunk in turn; a cool-down
/// of r pairs of I passes and p-r rounds of first-chunk (I, W); then the delayed W passes.
/// The order is built for max(m, 2p-1) micro-batches and the ones beyond m are dropped, as
/// PyTorch does, so every m >= 1 is accepted. With F = I = W each device holds at most about
/// 2p chunk activations (p micro-batches' worth, 1F1B's peak) and the bubble vanishes for
/// m >= 2p-1 in the paper's analysis.
pub fn zbv(p: u32, m: u32) -> Schedule {
    let n = m.max(2 * p - 1);
    let devices = (0..p)
        .map(|r| {
            let (c0, c1) = (r, 2 * p - 1 - r);
            let mut out = Vec::with_capacity(6 * n as usize);
            let (mut f0, mut f1, mut b0, mut b1) = (0u32, 0u32, 0u32, 0u32);
            let fwd = |out: &mut Vec<Action>, stage: u32, k: &mut u32| {
                out.push(Action::f(stage, *k));
                *k += 1;
            };
            let split = |out: &mut Vec<Action>, stage: u32, k: &mut u32| {
                out.push(Action::i(stage, *k));
                out.push(Action::w(stage, *k));
                *k += 1;
            };
            for _ in 0..2 * (p - r) - 1 {
                fwd(&mut out, c0, &mut f0);
            }
            for _ in 0..r {
                fwd(&mut out, c1, &mut f1);
                fwd(&mut out, c0, &mut f0);
            }
            for _ in 0..p - r {
                fwd(&mut out, c1, &mut f1);
                split(&mut out, c1, &mut b1);
            }
            while f1 < f0 || f0 < n {
                if f0 < n {
                    fwd(&mut out, c0, &mut f0);
                }
                split(&mut out, c0, &mut b0);
                fwd(&mut out, c1, &mut f1);
                split(&mut out, c1, &mut b1);
            }
            let (mut w0, mut w1) = (b0, b1);
            for _ in 0..r {
                out.push(Action::i(c0, b0));
                out.push(Action::i(c1, b1));
                b0 += 1;
                b1 += 1;
            }
            for _ in 0..p - r {
                out.push(Action::i(c0, b0));
                out.push(Action::w(c0, w0));
                b0 += 1;
                w0 += 1;
            }
            out.extend((w1..b1).map(|k| Action::w(c1, k)));
            w1 = b1;
            out.extend((w0..b0).map(|k| Action::w(c0, k)));
            w0 = b0;
            debug_assert!(f0 == n && f1 == n && b0 == n && b1 == n && w0 == n && w1 == n);
            out.retain(|a| a.microbatch < m);
            out
        })
        .collect();
    flush_schedule_placed(devices, 2 * p, m, Placement::V)
}

/// DualPipeV (DeepSeek-AI, DualPipe repository; PyTorch `ScheduleDualPipeV`): the V placement
/// of ZB-V with the two chunks fed so that one chunk's forward overlaps the other chunk's
/// backward. PyTorch writes each such pair as one compound `(F;B)OVERLAP_F_B` action, and so
/// does this generator: the pair's forward and backward follow each other in the device's list
/// and are recorded in [`Schedule::compounds`], so the pair starts when both inputs are there
/// (docs/zero-bubble.md, "Timing of OVERLAP_F_B"). Device r runs, in phases:
/// 2(p-r-1) first-chunk forwards; r+1 pairs of forwards (first chunk, second chunk); p-r-1
/// rounds of second-chunk I, the oldest pending W, second-chunk F; m-2p+r+1 rounds of two
/// overlapped pairs (F first chunk + B second chunk, F second chunk + B first chunk; device p-1
/// does not overlap its very first pair); p-r-1 rounds of second-chunk B plus an overlapped
/// pair; r+1 rounds of backward on both chunks, switching from full B to I half-way (the zero-
/// bubble tail); p-r-1 rounds of a pending W then a first-chunk backward; finally r+1 pending W.
/// Micro-batch indices are counted per stage, a B and an I sharing one counter.
/// Defined for m >= 2p (PyTorch's requirement: at least as many micro-batches as stages).
pub fn dualpipev(p: u32, m: u32) -> Schedule {
    use std::collections::VecDeque;
    let stages = 2 * p;
    let mut compounds = Vec::new();
    let devices = (0..p)
        .map(|r| {
            let (s0, s1) = (r, stages - 1 - r);
            // Record the next two pushed actions as one OVERLAP_F_B compound.
            let mut pair = |out: &Vec<Action>| {
                compounds.push(Compound {
                    device: r,
                    first: out.len() as u32,
                    len: 2,
                })
            };
            let mut out = Vec::with_capacity(6 * m as usize);
            let mut fwd_next = [0u32; 2];
            let mut bwd_next = [0u32; 2];
            let mut pending_w: VecDeque<Action> = VecDeque::new();
            let local = |s: u32| usize::from(s == s1);
            let mut push = |out: &mut Vec<Action>, pending_w: &mut VecDeque<Action>, s, kind| {
                let counter = if kind == Kind::F {
                    &mut fwd_next[local(s)]
                } else {
                    &mut bwd_next[local(s)]
                };
                let a = Action::new(s, kind, *counter);
                *counter += 1;
                out.push(a);
                if kind == Kind::I {
                    pending_w.push_back(Action::w(s, a.microbatch));
                }
            };
            let flush_one = |out: &mut Vec<Action>, pending_w: &mut VecDeque<Action>| {
                if let Some(w) = pending_w.pop_front() {
                    out.push(w);
                }
            };
            let q = &mut pending_w;
            for _ in 0..2 * (p - r - 1) {
                push(&mut out, q, s0, Kind::F);
            }
            for _ in 0..r + 1 {
                push(&mut out, q, s0, Kind::F);
                push(&mut out, q, s1, Kind::F);
            }
            for _ in 0..p - r - 1 {
                push(&mut out, q, s1, Kind::I);
                flush_one(&mut out, q);
                push(&mut out, q, s1, Kind::F);
            }
            for round in 0..m + r + 1 - 2 * p {
                // (F s0; B s1) then (F s1; B s0); device p-1 runs its very first pair apart.
                if !(round == 0 && r == p - 1) {
                    pair(&out);
                }
                push(&mut out, q, s0, Kind::F);
                push(&mut out, q, s1, Kind::B);
                pair(&out);
                push(&mut out, q, s1, Kind::F);
                push(&mut out, q, s0, Kind::B);
            }
            for _ in 0..p - r - 1 {
                push(&mut out, q, s1, Kind::B);
                pair(&out);
                push(&mut out, q, s1, Kind::F);
                push(&mut out, q, s0, Kind::B);
            }
            let mut zero_bubble = false;
            // The round (of r+1) at which the tail switches from B to I: floor((r+1)/2).
            let half = r.div_ceil(2);
            for i in 0..r + 1 {
                if i == half && r % 2 == 1 {
                    zero_bubble = true;
                }
                let kind = if zero_bubble { Kind::I } else { Kind::B };
                push(&mut out, q, s1, kind);
                if i == half && r % 2 == 0 {
                    zero_bubble = true;
                }
                let kind = if zero_bubble { Kind::I } else { Kind::B };
                push(&mut out, q, s0, kind);
            }
            for _ in 0..p - r - 1 {
                flush_one(&mut out, q);
                let kind = if zero_bubble { Kind::I } else { Kind::B };
                push(&mut out, q, s0, kind);
            }
            for _ in 0..r + 1 {
                flush_one(&mut out, q);
            }
            out
        })
        .collect();
    Schedule {
        compounds,
        ..flush_schedule_placed(devices, stages, m, Placement::V)
    }
}

/// Looped BFS (Lamy-Poirier 2023, "Breadth-First Pipeline Parallelism"; PyTorch
/// `ScheduleLoopedBFS`): v chunks per device, stage s on device s mod p. Each device runs all
/// forwards of its first chunk, then of its next chunk, and so on; then the backwards chunk by
/// chunk in reverse stage order, each chunk's micro-batches from last to first (as PyTorch
/// orders them). Every device stashes all m·v chunk activations (GPipe-like memory); with v = 1
/// it is GPipe with the backwards reversed.
pub fn looped_bfs(p: u32, m: u32, v: u32) -> Schedule {
    let devices = (0..p)
        .map(|r| {
            let stages: Vec<u32> = (0..v).map(|c| c * p + r).collect();
            let mut out = Vec::with_capacity(2 * (m * v) as usize);
            for &s in &stages {
                out.extend((0..m).map(|k| Action::f(s, k)));
            }
            for &s in stages.iter().rev() {
                out.extend((0..m).rev().map(|k| Action::b(s, k)));
            }
            out
        })
        .collect();
    flush_schedule(devices, p * v, m)
}

/// Convenience used by tests and the CLI: the kinds a schedule uses for backward.
pub fn uses_split_backward(schedule: &Schedule) -> bool {
    schedule
        .devices
        .iter()
        .flatten()
        .any(|a| matches!(a.kind, Kind::I | Kind::W))
}
