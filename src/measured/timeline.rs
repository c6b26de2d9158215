//! The measured run in pplan's terms: per rank, GPU activity (kernels classified as compute or
//! communication), the schedule's actions where a trace names them, and step windows; for a
//! log, per-iteration figures. Times are integer nanoseconds on the trace's own clock.

use crate::schedule::ir::Action;
use serde::Serialize;

/// Where the measurement came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// pplan's own Chrome trace (`pplan-exec run --trace`, `pplan simulate --trace`).
    Pplan,
    /// PyTorch profiler (Kineto) Chrome trace, one file per rank, `.json` or `.json.gz`.
    Kineto,
    /// Nsight Systems SQLite export (`nsys export --type sqlite`).
    Nsys,
    /// Megatron-LM's iteration lines.
    MegatronLog,
    /// torchtitan's step lines.
    TorchtitanLog,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Pplan => "pplan trace",
            Source::Kineto => "PyTorch profiler (Kineto) trace",
            Source::Nsys => "Nsight Systems SQLite export",
            Source::MegatronLog => "Megatron-LM log",
            Source::TorchtitanLog => "torchtitan log",
        }
    }
}

/// A measured run: traces (one [`RankTrace`] per rank) or a log (iterations).
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    pub source: Source,
    /// The files read, as the user named them.
    pub files: Vec<String>,
    /// One per rank, ordered by rank; empty for a log.
    pub ranks: Vec<RankTrace>,
    /// A log's iterations in file order; empty for a trace.
    pub iterations: Vec<LogIteration>,
    /// What the readers kept but counted as suspect (the rules of `super::checks`).
    pub flagged: Flagged,
}

/// What was flagged but kept: counts for the JSON report (the rules are in `super::checks`;
/// the record lives here, with the timeline that carries it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Flagged {
    /// Pairs of kernels on one stream of one rank that overlap by more than
    /// [`super::checks::SAME_STREAM_OVERLAP_NS_MAX`].
    pub overlapping_kernels: usize,
    /// GPU kernels launched outside every step window (profiler warm-up), left out.
    pub kernels_outside_steps: usize,
}

impl Flagged {
    pub fn add(&mut self, other: Flagged) {
        self.overlapping_kernels += other.overlapping_kernels;
        self.kernels_outside_steps += other.kernels_outside_steps;
    }
}

/// One rank's GPU timeline.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RankTrace {
    /// Global rank (Kineto `distributedInfo.rank`, the Nsight device or process, the pplan
    /// trace's device).
    pub rank: u32,
    /// The file it came from.
    pub file: String,
    /// GPU activity sorted by (start, end, stream).
    pub kernels: Vec<Kernel>,
    /// The pipeline schedule's compute actions where the trace names them (`PP:0F1`, `0F1`,
    /// pplan's own events), sorted by start.
    pub actions: Vec<ActionSpan>,
    /// Optimizer steps (`ProfilerStep#N`, `args.step`), sorted; empty means the whole trace is
    /// one step (index 0).
    pub steps: Vec<StepWindow>,
    /// Kernel names, indexed by [`Kernel::name`].
    pub names: Vec<String>,
}

/// One GPU activity (a kernel, a copy, a collective) or, in pplan's own traces, one event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Kernel {
    pub start_ns: i64,
    pub end_ns: i64,
    /// CUDA stream (Kineto `tid`, Nsight `streamId`, pplan's stream lane).
    pub stream: u32,
    pub class: KernelClass,
    /// Index into [`RankTrace::names`].
    pub name: u32,
    /// Index into [`RankTrace::steps`] (0 when the trace has no steps).
    pub step: u32,
    /// The collective's group size when the trace says it (Kineto `Group size`).
    pub group_size: Option<u32>,
}

impl Kernel {
    pub fn dur_ns(&self) -> i64 {
        self.end_ns - self.start_ns
    }
}

/// What a kernel does, in pplan's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelClass {
    /// Matrix multiplies (cuBLAS, CUTLASS, nvjet, cuDNN convolutions, Triton templates).
    Gemm,
    /// Attention kernels (FlashAttention, fused multi-head attention, cuDNN SDPA).
    Attention,
    /// Normalisation layers (LayerNorm, RMSNorm, batch norm).
    Norm,
    /// Elementwise and data-movement kernels (activations, casts, transposes, optimizers'
    /// multi-tensor kernels, concatenation, rotary embeddings).
    Elementwise,
    /// Embedding-table lookups and their sparse-feature kernels (FBGEMM, TorchRec).
    Embedding,
    /// A compute kernel of no known family (`other`), and pplan's own compute actions.
    OtherCompute,
    /// Copies and memsets.
    Memory,
    /// Communication: the collective and, where identifiable, the parallel dimension.
    Comm(Collective, Dim),
}

impl KernelClass {
    pub fn is_compute(self) -> bool {
        matches!(
            self,
            KernelClass::Gemm
                | KernelClass::Attention
                | KernelClass::Norm
                | KernelClass::Elementwise
                | KernelClass::Embedding
                | KernelClass::OtherCompute
        )
    }
}

/// A collective operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Collective {
    AllReduce,
    AllGather,
    ReduceScatter,
    AllToAll,
    SendRecv,
    Broadcast,
    Other,
}

/// The parallel dimension a collective belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Dim {
    Tp,
    Dp,
    Pp,
    Cp,
    Ep,
    /// Not identifiable from the trace (no group name or size, no plan to match against).
    Unattributed,
}

impl Dim {
    pub fn as_str(self) -> &'static str {
        match self {
            Dim::Tp => "tp",
            Dim::Dp => "dp",
            Dim::Pp => "pp",
            Dim::Cp => "cp",
            Dim::Ep => "ep",
            Dim::Unattributed => "unattributed",
        }
    }
}

/// The stage of an action named without one: PyTorch's single-stage schedules (GPipe, 1F1B)
/// name their ranges `Forward 3` / `Backward 3`, and the stage is the rank's pipeline position,
/// which [`super::load::load`] fills in.
pub const STAGE_OF_RANK: u32 = u32::MAX;

/// A compute action of the pipeline schedule as it ran on the GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ActionSpan {
    pub action: Action,
    pub start_ns: i64,
    pub end_ns: i64,
    /// Index into [`RankTrace::steps`] (0 when the trace has no steps).
    pub step: u32,
}

/// One optimizer step's window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepWindow {
    /// The step's number as the trace gives it (`ProfilerStep#12` → 12).
    pub id: u64,
    pub start_ns: i64,
    pub end_ns: i64,
}

/// One iteration line of a training log.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct LogIteration {
    /// The iteration or step number the log prints.
    pub iteration: u64,
    /// Wall-clock time of one iteration (Megatron: elapsed time per iteration; torchtitan:
    /// derived from tps and the tokens of a step when the log states them).
    pub step_time_s: Option<f64>,
    /// Throughput per GPU as the framework counts it (Megatron TFLOP/s/GPU, torchtitan tflops).
    pub tflops_per_gpu: Option<f64>,
    /// Tokens per second per GPU (torchtitan tps).
    pub tokens_per_s_per_gpu: Option<f64>,
    /// Model FLOPs utilisation as a fraction (torchtitan mfu / 100).
    pub mfu: Option<f64>,
    /// Peak memory the log reports, in bytes.
    pub memory_bytes: Option<u64>,
    pub loss: Option<f64>,
    pub global_batch: Option<u64>,
}

/// A file that cannot be read, with the field or line that is wrong and what would be valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {reason}")]
pub struct MeasuredError {
    pub file: String,
    pub reason: String,
}

impl MeasuredError {
    pub fn new(file: impl Into<String>, reason: impl Into<String>) -> MeasuredError {
        MeasuredError {
            file: file.into(),
            reason: reason.into(),
        }
    }
}
