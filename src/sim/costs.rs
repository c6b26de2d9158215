//! What the simulator needs to time a schedule: per-stage costs and the step-level work.

use crate::schedule::ir::{Kind, Schedule};

/// Cost of one stage for one micro-batch.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StageCost {
    pub forward_ns: u64,
    /// Full backward (`B`).
    pub backward_ns: u64,
    /// Input-gradient part (`I`).
    pub backward_input_ns: u64,
    /// Weight-gradient part (`W`).
    pub backward_weight_ns: u64,
    /// Activations stashed from the start of `F` until the backward ends (`B`, or `W`).
    pub activation_bytes: u64,
    /// The part of `activation_bytes` that `W` still needs after `I` (the rest is freed at `I`'s end).
    pub weight_grad_bytes: u64,
}

impl StageCost {
    pub fn duration_ns(&self, kind: Kind) -> u64 {
        match kind {
            Kind::F => self.forward_ns,
            Kind::B => self.backward_ns,
            Kind::I => self.backward_input_ns,
            Kind::W => self.backward_weight_ns,
        }
    }
}

/// Everything the simulator needs to time a schedule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Costs {
    /// One entry per stage (`num_stages` entries).
    pub stages: Vec<StageCost>,
    /// `send_forward_ns[s]`: moving stage `s`'s output activation to stage `s+1` (`num_stages-1` entries).
    pub send_forward_ns: Vec<u64>,
    /// `send_backward_ns[s]`: moving the gradient from stage `s+1` back to stage `s`.
    pub send_backward_ns: Vec<u64>,
    /// Memory that does not depend on the schedule (weights, gradients, optimizer state), per device.
    pub static_bytes: Vec<u64>,
    /// Per stage, the part of each action's duration spent in tensor-parallel collectives
    /// (empty: none). Shown on [`Stream::TensorParallel`](crate::sim::Stream::TensorParallel); it does not add time.
    pub tensor_parallel: Vec<TpCommNs>,
    /// The sender's compute stream is held until each point-to-point send has completed.
    pub blocking_sends: bool,
    /// Per stage, the data-parallel gradient reduction (empty: none).
    pub grad_reduce_ns: Vec<u64>,
    /// Start each stage's reduction when its last backward finishes, instead of when the
    /// device's whole program has finished.
    pub overlap_grad_reduce: bool,
    /// Per stage, the buckets its gradients are reduced in (empty or 1: one piece). With
    /// [`Costs::overlap_grad_reduce`] bucket k of n is ready k/n of the way through the
    /// stage's last backward and is reduced as soon as the data-parallel stream is free, so
    /// the reduction runs under that backward (Megatron-Core's bucketed `overlap_grad_reduce`).
    pub grad_reduce_buckets: Vec<u32>,
    /// Per device, the optimizer step after all its reductions (empty: none).
    pub optimizer_ns: Vec<u64>,
    /// Per stage, weight-gradient work deferred to the end of its device's program (empty:
    /// none): it runs on the compute stream once the device's last action has finished, and
    /// the stage's gradients are reduced only after it.
    pub deferred_weight_grad_ns: Vec<u64>,
    /// All devices share one GPU that runs one device's work at a time (the executor's
    /// `PPLAN_CUDA_SHARE=serialize`): a compute action, deferred weight gradients or an
    /// optimizer step starts only when the GPU is free; devices that are ready wait for it in
    /// the order they became ready.
    pub shared_gpu: bool,
    /// Per stage, what an action takes beyond `stages` when it has no partner
    /// ([`lone_actions`]; empty: nothing): the mixture-of-experts all-to-all that a paired
    /// action hides under its partner's compute and a lone one exposes (Megatron-Core's
    /// `--overlap-moe-expert-parallel-comm`, DualPipe).
    pub unpaired_extra: Vec<StageCost>,
}

/// Time spent in tensor-parallel collectives inside one stage's actions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TpCommNs {
    /// Inside `F`.
    pub forward_ns: u64,
    /// Inside `B` or `I` (input-gradient collectives, and the recomputed forward's).
    pub backward_ns: u64,
    /// The collectives are pipelined with the action's GEMMs (`--tp-comm-overlap`): shown
    /// from the action's start, under its compute, rather than at its end.
    pub overlapped: bool,
}

/// Unit costs as the CLI takes them: per *device* (a device's whole share of the model); with
/// `v` chunks a chunk's forward takes `forward/v`. Splits are exact: the `v` chunk durations
/// sum to the device total.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UnitCosts {
    pub forward_ns: u64,
    pub backward_ns: u64,
    pub backward_input_ns: Option<u64>,
    pub backward_weight_ns: Option<u64>,
    pub p2p_ns: u64,
}

fn share(total: u64, parts: u32, index: u32) -> u64 {
    let (parts, index) = (parts as u128, index as u128);
    let t = total as u128;
    ((index + 1) * t / parts - index * t / parts) as u64
}

impl Costs {
    /// Uniform costs for a schedule of `num_stages` stages over `devices` devices. When the
    /// backward is split and only `backward_ns` is given, `I` and `W` each take half of it.
    pub fn uniform(num_stages: u32, devices: u32, unit: UnitCosts) -> Costs {
        let v = (num_stages / devices.max(1)).max(1);
        let bi = unit.backward_input_ns.unwrap_or(unit.backward_ns / 2);
        let bw = unit
            .backward_weight_ns
            .unwrap_or(unit.backward_ns - unit.backward_ns / 2);
        let stages = (0..num_stages)
            .map(|s| {
                let c = s / devices.max(1);
                StageCost {
                    forward_ns: share(unit.forward_ns, v, c),
                    backward_ns: share(unit.backward_ns, v, c),
                    backward_input_ns: share(bi, v, c),
                    backward_weight_ns: share(bw, v, c),
                    activation_bytes: 0,
                    weight_grad_bytes: 0,
                }
            })
            .collect();
        let links = num_stages.saturating_sub(1) as usize;
        Costs {
            stages,
            send_forward_ns: vec![unit.p2p_ns; links],
            send_backward_ns: vec![unit.p2p_ns; links],
            static_bytes: vec![0; devices as usize],
            ..Costs::default()
        }
    }
}

/// Per device, which actions run without a partner to overlap with. A schedule with compounds
/// (DualPipeV's `OVERLAP_F_B`, schedule files) pairs exactly their sub-actions. Otherwise a
/// forward and a backward (`B` or `I`) of two different micro-batches next to each other on
/// the device pair, matched greedily from the start of its list: the steady state of 1F1B,
/// whose forward of one micro-batch and backward of another Megatron-Core's combined 1F1B
/// runs as one step (`--overlap-moe-expert-parallel-comm`). The warm-up forwards, the
/// cool-down backwards, weight gradients and a forward beside its own micro-batch's backward
/// are lone. Pairing changes only durations, never the order or the dependencies.
pub fn lone_actions(schedule: &Schedule) -> Vec<Vec<bool>> {
    let starts = schedule.start_lengths();
    let backward = |k: Kind| matches!(k, Kind::B | Kind::I);
    schedule
        .devices
        .iter()
        .enumerate()
        .map(|(d, actions)| {
            if !schedule.compounds.is_empty() {
                return (0..actions.len()).map(|i| !starts.covers(d, i)).collect();
            }
            let mut lone = vec![true; actions.len()];
            let mut i = 0;
            while i + 1 < actions.len() {
                let (a, b) = (actions[i], actions[i + 1]);
                let pair = a.microbatch != b.microbatch
                    && (a.kind == Kind::F && backward(b.kind)
                        || backward(a.kind) && b.kind == Kind::F);
                if pair {
                    lone[i] = false;
                    lone[i + 1] = false;
                    i += 2;
                } else {
                    i += 1;
                }
            }
            lone
        })
        .collect()
}
