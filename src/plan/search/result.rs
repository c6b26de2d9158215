//! A search's results: the ranked candidates with their predictions, and the counts.

use super::candidate::Candidate;
use super::outcome::Rejection;
use crate::plan::predict::Prediction;
use serde::Serialize;

/// One ranked result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Ranked {
    pub rank: usize,
    #[serde(flatten)]
    pub prediction: Prediction,
    /// The proven lower bound the search ordered this candidate by.
    pub lower_bound_s: f64,
    /// Step time in integer nanoseconds (the ranking key).
    pub step_time_ns: u64,
    #[serde(skip)]
    pub lower_bound_ns: u64,
    #[serde(skip)]
    pub candidate: Candidate,
}

/// The outcome of a search (all counts deterministic).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchOutcome {
    pub model: String,
    pub hardware: String,
    pub gpus: u64,
    pub global_batch: u64,
    pub top: usize,
    pub exhaustive: bool,
    /// (t, p, d) layouts enumerated and how many passed the layout-level constraints.
    pub layouts: u64,
    pub layouts_valid: u64,
    /// Full candidates enumerated (every one was checked).
    pub evaluated: u64,
    /// Candidates that passed every constraint including memory.
    pub feasible: u64,
    /// Feasible candidates simulated.
    pub simulated: u64,
    /// Feasible candidates whose lower bound proved they cannot enter the top K.
    pub pruned: u64,
    /// Candidates excluded by memory (both memory reasons).
    pub memory_rejected: u64,
    /// Distinct schedules (name, p, m, v) generated and summarised for the memory check.
    pub schedules_summarised: u64,
    pub rejected: Vec<Rejection>,
    pub results: Vec<Ranked>,
}
