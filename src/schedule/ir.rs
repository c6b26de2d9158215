//! The schedule IR: compute actions and per-device programs.
//!
//! This module owns the one representation of a pipeline schedule that every other part
//! consumes (validator, simulator, plotter, executor). It does no IO.
//!
//! Vocabulary used throughout the crate:
//! - *device* (or rank) `r` in `0..p`: one pipeline-parallel GPU;
//! - *stage* `s` in `0..p*v`: a contiguous slice of the model; with `v` chunks per device each
//!   device holds `v` stages, placed by [`Placement`];
//! - *micro-batch* `k` in `0..m`: the unit of work flowing through the pipeline.
//!
//! An [`Action`] prints and parses exactly as PyTorch's `torch.distributed.pipelining`
//! `_Action` does for compute actions: `{stage}{kind}{microbatch}`, e.g. `0F1`, `3I0`, `5W2`.

use std::fmt;
use std::str::FromStr;

/// What a compute action does. Communication is not part of the compute IR: transfers are
/// derived from the stage graph by the simulator (and by the lowering in [`crate::schedule::csv`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Forward pass of one micro-batch through one stage.
    F,
    /// Full backward (input and weight gradients together).
    B,
    /// Backward for inputs only (the zero-bubble "B"); must precede the matching `W`.
    I,
    /// Backward for weights only; may be delayed to fill bubbles.
    W,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::F, Kind::B, Kind::I, Kind::W];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::F => "F",
            Kind::B => "B",
            Kind::I => "I",
            Kind::W => "W",
        }
    }

    /// True for the kinds that consume a gradient from the next stage (B and I).
    pub fn is_input_backward(self) -> bool {
        matches!(self, Kind::B | Kind::I)
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One unit of compute on one device: `(stage, kind, microbatch)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Action {
    pub stage: u32,
    pub kind: Kind,
    pub microbatch: u32,
}

impl Action {
    pub const fn new(stage: u32, kind: Kind, microbatch: u32) -> Self {
        Action {
            stage,
            kind,
            microbatch,
        }
    }
    pub const fn f(stage: u32, microbatch: u32) -> Self {
        Self::new(stage, Kind::F, microbatch)
    }
    pub const fn b(stage: u32, microbatch: u32) -> Self {
        Self::new(stage, Kind::B, microbatch)
    }
    pub const fn i(stage: u32, microbatch: u32) -> Self {
        Self::new(stage, Kind::I, microbatch)
    }
    pub const fn w(stage: u32, microbatch: u32) -> Self {
        Self::new(stage, Kind::W, microbatch)
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}{}", self.stage, self.kind, self.microbatch)
    }
}

/// Why an action string could not be parsed. The CSV reader wraps this with row and field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ActionParseError {
    #[error("'{0}' does not start with a stage number (expected e.g. 0F1, 3I0, 5W2)")]
    MissingStage(String),
    #[error("'{text}': unknown action kind '{kind}' (valid: F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD, REDUCE_GRAD, WAIT_SEND_F, WAIT_SEND_B, WAIT_REDUCE_GRAD, OVERLAP_F_B)")]
    UnknownKind { text: String, kind: String },
    #[error("'{0}': a compute action needs a micro-batch number after its kind (e.g. 0F1)")]
    MissingMicrobatch(String),
    #[error("'{text}': number '{number}' is not a valid non-negative integer below 2^32")]
    BadNumber { text: String, number: String },
    #[error("'{0}': malformed compound action (expected e.g. (0F3;3B1)OVERLAP_F_B)")]
    BadCompound(String),
}

/// Every token of PyTorch's action vocabulary, as read from a schedule file.
/// Only compute actions enter the IR; the others are accepted and dropped when a lowered
/// (`compute_comms`) file is read, because the simulator derives communication itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    Compute(Action),
    /// SEND_F, RECV_F, SEND_B, RECV_B, UNSHARD, RESHARD, REDUCE_GRAD and the WAIT_* actions.
    Comm {
        stage: u32,
        kind: CommKind,
        microbatch: Option<u32>,
    },
    /// DualPipeV's `(0F3;3B1)OVERLAP_F_B`: one compound action. The CSV reader keeps its
    /// sub-actions in the device list and records the group as a [`Compound`].
    Overlap(Vec<Action>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommKind {
    SendF,
    RecvF,
    SendB,
    RecvB,
    Unshard,
    Reshard,
    ReduceGrad,
    /// Newer PyTorch lowerings wait for a send or a gradient reduction explicitly.
    WaitSendF,
    WaitSendB,
    WaitReduceGrad,
}

impl CommKind {
    pub fn as_str(self) -> &'static str {
        match self {
            CommKind::SendF => "SEND_F",
            CommKind::RecvF => "RECV_F",
            CommKind::SendB => "SEND_B",
            CommKind::RecvB => "RECV_B",
            CommKind::Unshard => "UNSHARD",
            CommKind::Reshard => "RESHARD",
            CommKind::ReduceGrad => "REDUCE_GRAD",
            CommKind::WaitSendF => "WAIT_SEND_F",
            CommKind::WaitSendB => "WAIT_SEND_B",
            CommKind::WaitReduceGrad => "WAIT_REDUCE_GRAD",
        }
    }
}

fn parse_u32(text: &str, number: &str) -> Result<u32, ActionParseError> {
    number
        .parse::<u32>()
        .map_err(|_| ActionParseError::BadNumber {
            text: text.to_string(),
            number: number.to_string(),
        })
}

impl FromStr for Token {
    type Err = ActionParseError;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let text = raw.trim();
        if let Some(rest) = text.strip_prefix('(') {
            let close = rest
                .find(')')
                .ok_or_else(|| ActionParseError::BadCompound(text.to_string()))?;
            if &rest[close + 1..] != "OVERLAP_F_B" {
                return Err(ActionParseError::BadCompound(text.to_string()));
            }
            let mut subs = Vec::new();
            for part in rest[..close].split(';').filter(|p| !p.trim().is_empty()) {
                match part.parse::<Token>()? {
                    Token::Compute(a) => subs.push(a),
                    _ => return Err(ActionParseError::BadCompound(text.to_string())),
                }
            }
            if subs.is_empty() {
                return Err(ActionParseError::BadCompound(text.to_string()));
            }
            return Ok(Token::Overlap(subs));
        }
        let digits = text.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(ActionParseError::MissingStage(text.to_string()));
        }
        let stage = parse_u32(text, &text[..digits])?;
        let rest = &text[digits..];
        let kind_len = rest.bytes().take_while(|b| !b.is_ascii_digit()).count();
        let (kind, number) = rest.split_at(kind_len);
        let microbatch = if number.is_empty() {
            None
        } else {
            Some(parse_u32(text, number)?)
        };
        let compute = match kind {
            "F" => Some(Kind::F),
            "B" => Some(Kind::B),
            "I" => Some(Kind::I),
            "W" => Some(Kind::W),
            _ => None,
        };
        if let Some(kind) = compute {
            let microbatch =
                microbatch.ok_or_else(|| ActionParseError::MissingMicrobatch(text.to_string()))?;
            return Ok(Token::Compute(Action::new(stage, kind, microbatch)));
        }
        let comm = match kind {
            "SEND_F" => CommKind::SendF,
            "RECV_F" => CommKind::RecvF,
            "SEND_B" => CommKind::SendB,
            "RECV_B" => CommKind::RecvB,
            "UNSHARD" => CommKind::Unshard,
            "RESHARD" => CommKind::Reshard,
            "REDUCE_GRAD" => CommKind::ReduceGrad,
            "WAIT_SEND_F" => CommKind::WaitSendF,
            "WAIT_SEND_B" => CommKind::WaitSendB,
            "WAIT_REDUCE_GRAD" => CommKind::WaitReduceGrad,
            _ => {
                return Err(ActionParseError::UnknownKind {
                    text: text.to_string(),
                    kind: kind.to_string(),
                })
            }
        };
        Ok(Token::Comm {
            stage,
            kind: comm,
            microbatch,
        })
    }
}

impl FromStr for Action {
    type Err = ActionParseError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.parse::<Token>()? {
            Token::Compute(a) => Ok(a),
            _ => Err(ActionParseError::UnknownKind {
                text: text.trim().to_string(),
                kind: "(communication or compound)".to_string(),
            }),
        }
    }
}

/// How stages map to devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Placement {
    /// Stage `s` lives on device `s % p` (Megatron interleaving, PyTorch "loop" style).
    #[default]
    Loop,
    /// Device `r` holds stages `r` and `2p-1-r` (and continues zig-zagging for `v > 2`);
    /// PyTorch's ZBV and DualPipeV use this.
    V,
}

impl Placement {
    /// The device that holds `stage` in a pipeline of `p` devices.
    pub fn device_of(self, stage: u32, p: u32) -> u32 {
        match self {
            Placement::Loop => stage % p,
            Placement::V => {
                let chunk = stage / p;
                let pos = stage % p;
                if chunk % 2 == 0 {
                    pos
                } else {
                    p - 1 - pos
                }
            }
        }
    }
}

impl FromStr for Placement {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "loop" => Ok(Placement::Loop),
            "v" => Ok(Placement::V),
            other => Err(format!("unknown placement '{other}' (valid: loop, v)")),
        }
    }
}

/// When weights are updated, which decides how many weight versions a stage must keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightUpdate {
    /// Synchronous: gradients accumulate over all micro-batches, one update after a flush
    /// (GPipe, 1F1B, interleaved, zero-bubble). One weight version.
    #[default]
    Flush,
    /// PipeDream: a stage updates after every backward; each in-flight micro-batch keeps the
    /// version its forward used (weight stashing). With `vertical_sync` every stage uses the
    /// version that stage 0 used for that micro-batch.
    Stash { vertical_sync: bool },
    /// PipeDream-2BW: an update after every `m` backwards; the forward uses the newest version
    /// and at most two are alive.
    DoubleBuffered,
}

impl FromStr for WeightUpdate {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "flush" => Ok(WeightUpdate::Flush),
            "stash" => Ok(WeightUpdate::Stash {
                vertical_sync: false,
            }),
            "stash-vsync" => Ok(WeightUpdate::Stash {
                vertical_sync: true,
            }),
            "2bw" => Ok(WeightUpdate::DoubleBuffered),
            other => Err(format!(
                "unknown weight update '{other}' (valid: flush, stash, stash-vsync, 2bw)"
            )),
        }
    }
}

/// Consecutive actions of one device that form a single compound action: PyTorch's
/// `(0F3;3B1)OVERLAP_F_B`, which DualPipeV uses to pair a forward with a backward of the other
/// chunk. Actions `first .. first + len` of `devices[device]` are its sub-actions, in order.
///
/// A compound starts only when the inputs of *all* its sub-actions are present, then runs them
/// back to back (so it takes the sum of their durations, and each sub-action's output is
/// available when that sub-action ends). This is how PyTorch's schedule tools treat the
/// compound (docs/zero-bubble.md, "Timing of OVERLAP_F_B"). Drop the compounds
/// (`schedule.compounds.clear()`) to time every sub-action on its own instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Compound {
    pub device: u32,
    /// Index of the first sub-action in the device's list.
    pub first: u32,
    /// Number of sub-actions (at least 2).
    pub len: u32,
}

/// A complete schedule: one ordered action list per device plus the facts needed to interpret it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// `devices[r]` is the program of device `r`, executed in order on its compute stream.
    pub devices: Vec<Vec<Action>>,
    /// Total number of stages (`p * v`).
    pub num_stages: u32,
    /// Number of micro-batches (over all mini-batches for the asynchronous PipeDream schedules).
    pub num_microbatches: u32,
    pub placement: Placement,
    pub weight_update: WeightUpdate,
    /// Micro-batches per optimizer step (mini-batch). Equals `num_microbatches` for flush schedules.
    pub microbatches_per_step: u32,
    /// Compound actions, sorted by (device, first) and not overlapping: PyTorch `OVERLAP_F_B`
    /// entries of schedule files, and the overlapped pairs of the `dualpipev` generator.
    pub compounds: Vec<Compound>,
}

impl Schedule {
    pub fn num_devices(&self) -> u32 {
        self.devices.len() as u32
    }
    /// Chunks (stages) per device.
    pub fn chunks(&self) -> u32 {
        let p = self.num_devices().max(1);
        self.num_stages / p
    }
    pub fn device_of(&self, stage: u32) -> u32 {
        self.placement.device_of(stage, self.num_devices())
    }
    pub fn num_actions(&self) -> usize {
        self.devices.iter().map(Vec::len).sum()
    }
    /// Where the compounds start, per device (see [`CompoundStarts::len_at`]). Expects
    /// compounds that passed [`crate::schedule::validate`]'s structure checks.
    pub(crate) fn start_lengths(&self) -> CompoundStarts {
        let mut per_device = vec![Vec::new(); self.devices.len()];
        for c in &self.compounds {
            if let Some(v) = per_device.get_mut(c.device as usize) {
                v.push((c.first, c.len));
            }
        }
        for v in &mut per_device {
            v.sort_unstable();
        }
        CompoundStarts(per_device)
    }
}

/// The compounds' (first index, length) per device, sorted: O(compounds) memory, looked up by
/// binary search as a device's program counter advances.
#[derive(Debug, Clone, Default)]
pub(crate) struct CompoundStarts(Vec<Vec<(u32, u32)>>);

impl CompoundStarts {
    /// The (first index, length) of device `d`'s compounds, sorted by first index.
    pub(crate) fn of(&self, d: usize) -> &[(u32, u32)] {
        self.0.get(d).map_or(&[], Vec::as_slice)
    }

    /// [`CompoundStarts::len_at`] for a caller whose `index` on device `d` only moves forward:
    /// `cursor` (start at 0, one per device) skips the compounds behind it, amortised O(1).
    pub(crate) fn len_at_cursor(&self, d: usize, index: usize, cursor: &mut usize) -> usize {
        let list = self.of(d);
        while list
            .get(*cursor)
            .is_some_and(|&(first, _)| (first as usize) < index)
        {
            *cursor += 1;
        }
        match list.get(*cursor) {
            Some(&(first, len)) if first as usize == index => len.max(1) as usize,
            _ => 1,
        }
    }

    /// Whether action `index` of device `d` is one of a compound's sub-actions.
    pub(crate) fn covers(&self, d: usize, index: usize) -> bool {
        let list = self.of(d);
        let i = list.partition_point(|&(first, _)| first as usize <= index);
        i > 0 && index < (list[i - 1].0 + list[i - 1].1) as usize
    }

    /// How many actions start together at `index` of device `d`: a compound's length at its
    /// first sub-action, 1 for any other action.
    pub(crate) fn len_at(&self, d: usize, index: usize) -> usize {
        let Some(list) = self.0.get(d) else {
            return 1;
        };
        match list.binary_search_by_key(&(index as u64), |&(first, _)| first as u64) {
            Ok(i) => list[i].1.max(1) as usize,
            Err(_) => 1,
        }
    }
}
