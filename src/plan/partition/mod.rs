//! The layer partitioner: contiguous layers into `p` pipeline stages, minimising the slowest
//! stage (compute split over its replicas, plus the all-reduce of its weights, plus the
//! transfer to the next stage), under a per-stage memory limit. The model, the formulas and
//! the tie-break rule are in `docs/partition.md`.
//!
//! Two methods over one [`Problem`]: [`dp()`], a dynamic program that is exact for the model
//! (PipeDream's DP with replication, one pass over both bandwidth levels), and [`ilp()`], an
//! integer program (good_lp; microlp by default, HiGHS with the `highs` feature) that proves
//! the optimum or reports its gap. Both print the same canonical split.
//!
//! Invariants: no IO; the clock is read only by the ILP solver for its time limit. Same
//! problem, same DP answer, byte for byte.
//!
//! Files: `problem.rs` (the model and [`evaluate`]), `dp.rs`, `ilp.rs`.

pub mod dp;
pub mod ilp;
pub mod problem;

pub use dp::dp;
pub use ilp::{ilp, Backend, IlpOptions, IlpOutcome, TIE_TOLERANCE};
pub use problem::*;
