//! The interface between the backend-independent runner and a backend (CPU threads, CUDA).
//!
//! The runner gives each pipeline device one [`DeviceWorker`] and one thread, walks that
//! device's action list from the plan in order, and calls the worker once per action. A worker
//! owns its stages' weights, gradients and stashed activations, and its side of every transfer:
//! `forward` of a stage whose predecessor lives on another device first receives the
//! activation, and afterwards sends its output to the successor's device; backward parts do the
//! same with gradients in the other direction. Transfers between two stages on the same device
//! are local handoffs. Each call appends the spans it measured (compute, send, receive) to
//! `spans`, timed by the backend's own clock (host monotonic clock on the CPU, CUDA events on
//! GPUs) in nanoseconds since the run's common origin.

use pplan::schedule::ir::Kind;

/// Which stream a measured span ran on; maps onto the simulator's trace `tid`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanStream {
    Compute,
    Send,
    Recv,
    /// Gradients summed over the data- and context-parallel replicas before the optimizer
    /// step (the simulator's data-parallel stream, `REDUCE_GRAD`).
    DataParallel,
    Optimizer,
}

/// One measured interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub device: u32,
    pub stream: SpanStream,
    /// The action's text form (`0F1`, `3I0`), `SEND_F`/`RECV_B`-style names for transfers
    /// (`1RECV_F0`), or `OPTIMIZER_STEP` (the simulator's name).
    pub name: String,
    pub stage: Option<u32>,
    pub microbatch: Option<u32>,
    pub kind: Option<Kind>,
    /// For transfers, the other device.
    pub peer: Option<u32>,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// Part of a backward pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackwardPart {
    /// `B`: input and weight gradients.
    Full,
    /// `I`: input gradient only (weight-gradient inputs kept for the later `W`).
    Input,
    /// `W`: weight gradient only.
    Weight,
}

/// A failure while running; the message says what and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// The backend cannot run here (no GPU, no driver, library missing). Exit code 2.
    #[error("{0}")]
    Unavailable(String),
    /// The plan cannot run on this backend (too large for memory, unsupported shape). Exit code 2.
    #[error("{0}")]
    Plan(String),
    /// A peer device failed or hung up; this device cannot continue.
    #[error("device {device}: {what}")]
    Peer { device: u32, what: String },
    /// A backend call failed (CUDA error code, allocation failure, ...). Exit code 1.
    #[error("{0}")]
    Backend(String),
}

/// One pipeline device's executor. `microbatch` indices are those of the plan's action lists;
/// for asynchronous schedules (PipeDream) they run over several mini-batches.
pub trait DeviceWorker: Send {
    /// The device index (`0..p`).
    fn device(&self) -> u32;
    /// Which data- or context-parallel replica of the pipeline this worker runs (`0..dp·cp`;
    /// 0 without replicas). Every replica runs its device's action list; the runner keeps
    /// replica 0's spans and weights.
    fn replica(&self) -> u32 {
        0
    }
    /// Forward of `stage` for `microbatch`.
    fn forward(
        &mut self,
        stage: u32,
        microbatch: u32,
        spans: &mut Vec<Span>,
    ) -> Result<(), ExecError>;
    /// Backward (or part of it) of `stage` for `microbatch`.
    fn backward(
        &mut self,
        stage: u32,
        microbatch: u32,
        part: BackwardPart,
        spans: &mut Vec<Span>,
    ) -> Result<(), ExecError>;
    /// End of an optimizer step for synchronous schedules: apply the accumulated gradients to
    /// every stage on this device and zero them. (PipeDream workers update inside `backward`
    /// and treat this as a no-op.)
    fn optimizer_step(&mut self, spans: &mut Vec<Span>) -> Result<(), ExecError>;
    /// Block until all work issued so far has finished (a no-op on the CPU).
    fn synchronize(&mut self) -> Result<(), ExecError>;
    /// The current weights of each stage on this device, as f32 on the host, in the order
    /// (stage, matrices in [`crate::spec::Matrix`] order for each of its layers; every expert
    /// of a MoE layer, gathered from the expert-parallel group). For tests. A collective when
    /// the plan has replicas: every worker calls it.
    fn weights(&mut self) -> Result<Vec<(u32, Vec<f32>)>, ExecError>;
    /// The sum of the losses computed on this device since the last call (0 off the last stage).
    fn take_loss(&mut self) -> f64;
}

/// What a run asks of a backend, besides the plan. Backends build their workers from
/// `(plan, RunOptions)`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOptions {
    /// Passes over the plan's action lists (see [`crate::run`]: one optimizer step each for
    /// synchronous schedules).
    pub steps: u32,
    /// SGD learning rate.
    pub lr: f32,
    /// Seed of the weights and data ([`crate::spec`]).
    pub seed: u64,
    /// Compute threads per pipeline device (1: one core per device).
    pub threads_per_device: usize,
    /// Overrides the plan's `dtype` (`"f32"` or `"bf16"`); `None` keeps the plan's.
    pub dtype: Option<String>,
    /// Debugging aid for asynchronous schedules: backward uses the newest weights instead of
    /// the version its forward used (turns PipeDream's weight stashing off). Tests use it to
    /// show that stashing changes the result.
    pub disable_weight_stashing: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            steps: 1,
            lr: crate::spec::DEFAULT_LR,
            seed: crate::spec::DEFAULT_SEED,
            threads_per_device: 1,
            dtype: None,
            disable_weight_stashing: false,
        }
    }
}
