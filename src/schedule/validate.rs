//! The one validator every schedule passes before it is simulated, plotted or executed.
//!
//! It checks, in order:
//! 1. shape: at least one device, `num_stages` a multiple of the device count, every stage and
//!    micro-batch index in range, every action on the device its stage is placed on;
//! 2. completeness: each (stage, micro-batch) has exactly one `F` and exactly one backward —
//!    either one `B`, or one `I` and one `W`;
//! 3. liveness: the per-device orders together with the data dependencies
//!    (`F(s,k)` needs `F(s-1,k)`; `B/I(s,k)` needs `F(s,k)` and `B/I(s+1,k)`; `W(s,k)` needs
//!    `I(s,k)`) can all complete. Sends never block the sender (the simulator gives them their
//!    own streams), so an order deadlocks exactly when this dependency graph has a cycle; we find
//!    it by running the orders with unit time and report every stuck device with what it waits for.
//!    A compound action ([`crate::schedule::ir::Compound`], PyTorch's `OVERLAP_F_B`) is one step: it
//!    proceeds only when the dependencies of all its sub-actions are met, so a sub-action that
//!    needs another sub-action of the same compound can never run.

use crate::schedule::ir::{Action, Compound, Kind, Schedule};
use std::fmt;

/// Where an action sits: device and position in that device's list (both 0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    pub device: u32,
    pub index: usize,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "device {} position {}", self.device, self.index)
    }
}

/// One device that cannot make progress, for deadlock reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stuck {
    pub at: Position,
    pub action: Action,
    /// The action whose result it needs.
    pub waits_for: Action,
    /// Where that action is in the schedule.
    pub waits_for_at: Position,
}

impl fmt::Display for Stuck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match (self.action.kind, self.waits_for.kind) {
            (Kind::F, _) => "the activation of",
            (Kind::W, _) => "the input-gradient pass",
            (_, Kind::F) => "its own forward",
            _ => "the gradient of",
        };
        write!(
            f,
            "{} ({}) waits for {} {} ({}",
            self.at, self.action, what, self.waits_for, self.waits_for_at
        )?;
        if self.waits_for_at.device == self.at.device && self.waits_for_at.index < self.at.index {
            // Everything before the stuck position has run: only a sub-action of the same
            // compound can sit there.
            write!(
                f,
                ", in the same compound action, whose sub-actions start together)"
            )
        } else if self.waits_for_at.device == self.at.device {
            write!(f, ", later in the same device's list)")
        } else {
            write!(f, ", not yet run)")
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValidationError {
    #[error("the schedule has no devices")]
    NoDevices,
    #[error("the schedule has {stages} stages, which is not a positive multiple of its {devices} devices")]
    StagesNotMultiple { stages: u32, devices: u32 },
    #[error("{at}: action {action} has stage {} but the schedule has only {stages} stages (valid: 0..{})", action.stage, stages.saturating_sub(1))]
    StageOutOfRange {
        at: Position,
        action: Action,
        stages: u32,
    },
    #[error("{at}: action {action} has micro-batch {} but the schedule has only {microbatches} micro-batches (valid: 0..{})", action.microbatch, microbatches.saturating_sub(1))]
    MicrobatchOutOfRange {
        at: Position,
        action: Action,
        microbatches: u32,
    },
    #[error("{at}: action {action} is on the wrong device: stage {} is placed on device {expected}", action.stage)]
    WrongDevice {
        at: Position,
        action: Action,
        expected: u32,
    },
    #[error("duplicate action {action}: at {first} and again at {second}")]
    Duplicate {
        action: Action,
        first: Position,
        second: Position,
    },
    #[error("missing action {action}: every (stage, micro-batch) needs one F and one backward (B, or I and W); expected on device {device}")]
    Missing { action: Action, device: u32 },
    #[error("stage {stage} micro-batch {microbatch} has both a full backward B (at {b_at}) and a split backward I/W (at {split_at}); use one or the other")]
    MixedBackward {
        stage: u32,
        microbatch: u32,
        b_at: Position,
        split_at: Position,
    },
    #[error("the schedule has {actions} actions, but {stages} stages x {microbatches} micro-batches need at least {} (one F and one backward each); check the largest stage and micro-batch numbers", 2 * *stages as u64 * *microbatches as u64)]
    TooFewActions {
        actions: u64,
        stages: u32,
        microbatches: u32,
    },
    #[error("compound action {} of device {} (positions {}..{}): {reason}", compound.first, compound.device, compound.first, compound.first as u64 + compound.len as u64)]
    BadCompound {
        compound: Compound,
        reason: &'static str,
    },
    #[error("the schedule deadlocks; {} device(s) can never proceed:\n  {}", stuck.len(), stuck.iter().map(|s| s.to_string()).collect::<Vec<_>>().join("\n  "))]
    Deadlock { stuck: Vec<Stuck> },
}

const HAS_F: u8 = 1;
const HAS_B: u8 = 2;
const HAS_I: u8 = 4;
const HAS_W: u8 = 8;

fn bit(kind: Kind) -> u8 {
    match kind {
        Kind::F => HAS_F,
        Kind::B => HAS_B,
        Kind::I => HAS_I,
        Kind::W => HAS_W,
    }
}

/// Validate a schedule: shape, completeness and liveness (checks 1–3 above).
pub fn validate(schedule: &Schedule) -> Result<(), ValidationError> {
    validate_structure(schedule)?;
    check_liveness(schedule)
}

/// Checks 1 and 2 only. The simulator uses this and detects deadlocks while it runs: the set
/// of actions that can complete before a deadlock is the unique largest dependency-closed
/// prefix of the device lists, so it reports exactly the stuck devices `validate` reports.
pub(crate) fn validate_structure(schedule: &Schedule) -> Result<(), ValidationError> {
    let p = schedule.num_devices();
    if p == 0 {
        return Err(ValidationError::NoDevices);
    }
    let stages = schedule.num_stages;
    if stages == 0 || stages % p != 0 {
        return Err(ValidationError::StagesNotMultiple { stages, devices: p });
    }
    let m = schedule.num_microbatches;
    // Guard before allocating per-(stage, micro-batch) tables: a complete schedule has at least
    // two actions for every pair, so huge indices in a short file are rejected here (small
    // cases go on to name the exact missing action).
    let needed = 2 * stages as u64 * m as u64;
    let actions = schedule.num_actions() as u64;
    if actions < needed && needed > 1 << 20 {
        return Err(ValidationError::TooFewActions {
            actions,
            stages,
            microbatches: m,
        });
    }
    let mut prev: Option<Compound> = None;
    for &compound in &schedule.compounds {
        let bad = |reason| Err(ValidationError::BadCompound { compound, reason });
        let Some(list) = schedule.devices.get(compound.device as usize) else {
            return bad("there is no such device");
        };
        if compound.len < 2 {
            return bad("a compound needs at least two sub-actions");
        }
        if compound.first as u64 + compound.len as u64 > list.len() as u64 {
            return bad("it runs past the end of the device's list");
        }
        if let Some(p) = prev {
            if (p.device, p.first as u64 + p.len as u64) > (compound.device, compound.first as u64)
            {
                return bad("compounds must be sorted by device and position and must not overlap");
            }
        }
        prev = Some(compound);
    }
    let mut seen = vec![0u8; stages as usize * m as usize];
    for (d, list) in schedule.devices.iter().enumerate() {
        for (index, &action) in list.iter().enumerate() {
            let at = Position {
                device: d as u32,
                index,
            };
            if action.stage >= stages {
                return Err(ValidationError::StageOutOfRange { at, action, stages });
            }
            if action.microbatch >= m {
                return Err(ValidationError::MicrobatchOutOfRange {
                    at,
                    action,
                    microbatches: m,
                });
            }
            let expected = schedule.device_of(action.stage);
            if expected != d as u32 {
                return Err(ValidationError::WrongDevice {
                    at,
                    action,
                    expected,
                });
            }
            let slot = action.stage as usize * m as usize + action.microbatch as usize;
            let b = bit(action.kind);
            if seen[slot] & b != 0 {
                return Err(ValidationError::Duplicate {
                    action,
                    first: position_of(schedule, action).expect("seen before"),
                    second: at,
                });
            }
            seen[slot] |= b;
        }
    }
    for stage in 0..stages {
        let device = schedule.device_of(stage);
        for k in 0..m {
            let s = seen[stage as usize * m as usize + k as usize];
            let missing = |kind| ValidationError::Missing {
                action: Action::new(stage, kind, k),
                device,
            };
            if s & HAS_F == 0 {
                return Err(missing(Kind::F));
            }
            if s & HAS_B != 0 && s & (HAS_I | HAS_W) != 0 {
                let split = if s & HAS_I != 0 { Kind::I } else { Kind::W };
                return Err(ValidationError::MixedBackward {
                    stage,
                    microbatch: k,
                    b_at: position_of(schedule, Action::b(stage, k)).expect("has B"),
                    split_at: position_of(schedule, Action::new(stage, split, k))
                        .expect("has I or W"),
                });
            }
            if s & HAS_B == 0 {
                for kind in [Kind::I, Kind::W] {
                    if s & bit(kind) == 0 {
                        return Err(missing(if s & (HAS_I | HAS_W) == 0 {
                            Kind::B
                        } else {
                            kind
                        }));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Where `action` first appears (a scan: used only to word error messages).
pub(crate) fn position_of(schedule: &Schedule, action: Action) -> Option<Position> {
    let device = schedule.device_of(action.stage);
    let list = schedule.devices.get(device as usize)?;
    let index = list.iter().position(|&a| a == action)?;
    Some(Position { device, index })
}

/// The action that `action` depends on and that has not completed yet, if any.
/// `done[slot]` holds the bits of completed kinds.
pub(crate) fn unmet_dependency(action: Action, stages: u32, m: u32, done: &[u8]) -> Option<Action> {
    let slot = |s: u32| s as usize * m as usize + action.microbatch as usize;
    let k = action.microbatch;
    match action.kind {
        Kind::F => (action.stage > 0 && done[slot(action.stage - 1)] & HAS_F == 0)
            .then(|| Action::f(action.stage - 1, k)),
        Kind::B | Kind::I => {
            if done[slot(action.stage)] & HAS_F == 0 {
                return Some(Action::f(action.stage, k));
            }
            if action.stage + 1 < stages && done[slot(action.stage + 1)] & (HAS_B | HAS_I) == 0 {
                // The next stage's input-gradient pass (B; `stuck_devices` turns it into I
                // where that stage splits its backward).
                return Some(Action::b(action.stage + 1, k));
            }
            None
        }
        Kind::W => (done[slot(action.stage)] & HAS_I == 0).then(|| Action::i(action.stage, k)),
    }
}

fn check_liveness(schedule: &Schedule) -> Result<(), ValidationError> {
    let stages = schedule.num_stages;
    let m = schedule.num_microbatches;
    let mut done = vec![0u8; stages as usize * m as usize];
    let mut pc = vec![0usize; schedule.devices.len()];
    // Worklist of devices that may be able to advance. Completing an action can only unblock
    // its own device and the devices holding the neighbouring stages, so each action is looked
    // at a bounded number of times: O(actions).
    let mut work: Vec<u32> = (0..schedule.num_devices()).rev().collect();
    let mut queued = vec![true; schedule.devices.len()];
    let lens = schedule.start_lengths();
    let mut cursor = vec![0usize; schedule.devices.len()];
    while let Some(d) = work.pop() {
        let d = d as usize;
        queued[d] = false;
        let list = &schedule.devices[d];
        while pc[d] < list.len() {
            // A compound's sub-actions go together, on the dependencies met before it.
            let unit = &list[pc[d]..pc[d] + lens.len_at_cursor(d, pc[d], &mut cursor[d])];
            if unit
                .iter()
                .any(|&a| unmet_dependency(a, stages, m, &done).is_some())
            {
                break;
            }
            for &a in unit {
                done[a.stage as usize * m as usize + a.microbatch as usize] |= bit(a.kind);
                let neighbours = [
                    a.stage.checked_sub(1),
                    Some(a.stage + 1).filter(|&s| s < stages),
                ];
                for s in neighbours.into_iter().flatten() {
                    let nd = schedule.device_of(s) as usize;
                    if nd != d && !queued[nd] {
                        queued[nd] = true;
                        work.push(nd as u32);
                    }
                }
            }
            pc[d] += unit.len();
        }
    }
    let stuck = stuck_devices(schedule, &pc, &done);
    if stuck.is_empty() {
        Ok(())
    } else {
        Err(ValidationError::Deadlock { stuck })
    }
}

/// Every device whose program is unfinished at `pc`, with the dependency it waits for, given
/// the completed kinds `done` per (stage, micro-batch). Shared by the validator and the
/// simulator so both word a deadlock identically.
pub(crate) fn stuck_devices(schedule: &Schedule, pc: &[usize], done: &[u8]) -> Vec<Stuck> {
    let (stages, m) = (schedule.num_stages, schedule.num_microbatches);
    let lens = schedule.start_lengths();
    let mut stuck = Vec::new();
    for (d, list) in schedule.devices.iter().enumerate() {
        if pc[d] >= list.len() {
            continue;
        }
        // The first sub-action (of a compound, or the plain action) that cannot start.
        let unit = pc[d]..(pc[d] + lens.len_at(d, pc[d])).min(list.len());
        let Some((index, action, mut waits_for)) = unit.into_iter().find_map(|i| {
            let a = list[i];
            unmet_dependency(a, stages, m, done).map(|w| (i, a, w))
        }) else {
            continue;
        };
        let at = Position {
            device: d as u32,
            index,
        };
        let mut waits_for_at = position_of(schedule, waits_for);
        if waits_for_at.is_none() && waits_for.kind == Kind::B {
            // The next stage splits its backward: the gradient comes from its I.
            waits_for.kind = Kind::I;
            waits_for_at = position_of(schedule, waits_for);
        }
        stuck.push(Stuck {
            at,
            action,
            waits_for,
            waits_for_at: waits_for_at.unwrap_or(at),
        });
    }
    stuck
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::ir::{Placement, WeightUpdate};

    fn sched(devices: Vec<Vec<&str>>, stages: u32, m: u32) -> Schedule {
        Schedule {
            devices: devices
                .into_iter()
                .map(|l| l.into_iter().map(|a| a.parse().unwrap()).collect())
                .collect(),
            num_stages: stages,
            num_microbatches: m,
            placement: Placement::Loop,
            weight_update: WeightUpdate::Flush,
            microbatches_per_step: m,
            compounds: Vec::new(),
        }
    }

    #[test]
    fn deadlock_names_devices_and_dependencies() {
        // Device 0 wants the gradient of micro-batch 0 before sending micro-batch 1's activation,
        // device 1 wants micro-batch 1's activation before its backward of micro-batch 0.
        let s = sched(
            vec![
                vec!["0F0", "0B0", "0F1", "0B1"],
                vec!["1F0", "1F1", "1B0", "1B1"],
            ],
            2,
            2,
        );
        let err = validate(&s).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(err, ValidationError::Deadlock { ref stuck } if stuck.len() == 2),
            "{msg}"
        );
        assert!(
            msg.contains("device 0 position 1 (0B0) waits for the gradient of 1B0"),
            "{msg}"
        );
        assert!(
            msg.contains("device 1 position 1 (1F1) waits for the activation of 0F1"),
            "{msg}"
        );
    }

    #[test]
    fn w_before_i_on_same_device_is_a_deadlock() {
        let s = sched(vec![vec!["0F0", "0W0", "0I0"]], 1, 1);
        let msg = validate(&s).unwrap_err().to_string();
        assert!(msg.contains("later in the same device's list"), "{msg}");
        assert!(
            msg.contains("(0W0) waits for the input-gradient pass 0I0"),
            "{msg}"
        );
    }

    #[test]
    fn structural_errors_name_the_action() {
        let dup = sched(vec![vec!["0F0", "0F0", "0B0"]], 1, 1);
        assert!(validate(&dup)
            .unwrap_err()
            .to_string()
            .contains("duplicate action 0F0"));
        let missing = sched(vec![vec!["0F0"]], 1, 1);
        assert!(validate(&missing)
            .unwrap_err()
            .to_string()
            .contains("missing action 0B0"));
        let wrong = sched(vec![vec!["1F0", "1B0"], vec!["0F0", "0B0"]], 2, 1);
        assert!(matches!(
            validate(&wrong),
            Err(ValidationError::WrongDevice { .. })
        ));
        let mixed = sched(vec![vec!["0F0", "0B0", "0I0", "0W0"]], 1, 1);
        assert!(matches!(
            validate(&mixed),
            Err(ValidationError::MixedBackward { .. })
        ));
    }

    #[test]
    fn compounds_go_together() {
        let c = |device, first, len| Compound { device, first, len };
        // (0F1;1B0) on device 0 of a one-device, two-stage pipeline: 1B0 needs 1F0, which
        // comes first; 0F1 needs nothing. Valid.
        let mut s = sched(
            vec![vec!["0F0", "1F0", "0F1", "1B0", "1F1", "1B1", "0B0", "0B1"]],
            2,
            2,
        );
        s.compounds = vec![c(0, 2, 2)];
        validate(&s).unwrap();
        // (1F1;1B1): 1B1 needs 1F1 of the same compound, which cannot have run yet.
        s.compounds = vec![c(0, 4, 2)];
        let msg = validate(&s).unwrap_err().to_string();
        assert!(
            msg.contains("device 0 position 5 (1B1) waits for its own forward 1F1 (device 0 position 4, in the same compound action"),
            "{msg}"
        );
        // Malformed compounds.
        for (bad, why) in [
            (vec![c(1, 0, 2)], "no such device"),
            (vec![c(0, 0, 1)], "at least two"),
            (vec![c(0, 7, 2)], "past the end"),
            (vec![c(0, 2, 2), c(0, 3, 2)], "must not overlap"),
        ] {
            s.compounds = bad;
            let err = validate(&s).unwrap_err();
            assert!(matches!(err, ValidationError::BadCompound { .. }), "{err}");
            assert!(err.to_string().contains(why), "{err}");
        }
    }
}
