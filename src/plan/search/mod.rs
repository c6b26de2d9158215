//! `pplan search`: the fastest training configuration of a model on a cluster that fits in
//! memory, found by simulating candidates with the same costs `pplan predict` uses.
//!
//! The space (docs/search.md): every layout `n = t·p·d` (t inside a node unless pinned, t
//! dividing the heads), every micro-batch `b` with `m = B/(b·d)` whole, every synchronous
//! schedule the simulator knows with its chunk counts, recomputation none/selective/full,
//! sequence parallelism and ZeRO-1 on or off. Flags pin any dimension.
//!
//! The search runs in three exact steps:
//! 1. **Structure**: constraints that need no costs (t divides the heads, B divisible by d,
//!    p·v within the layers, schedule rules such as interleaving needing `p | m`).
//! 2. **Memory**: the simulator's peak memory is a function of each device's action *order*
//!    alone (activations are added when an `F` starts and freed when its `B`/`I`/`W` ends, and
//!    a device runs its list strictly in order). [`ScheduleSummary`] keeps, per device, the
//!    Pareto-maximal vectors of held activations over the order, so a candidate's peak memory
//!    is a few multiply-adds and equals the simulated peak exactly.
//! 3. **Simulation, best first**: every feasible candidate gets a proven lower bound on its
//!    step time ([`ScheduleSummary::lower_bound_ns`]); candidates are simulated in order of
//!    that bound, in fixed-size batches (rayon across candidates, each simulation
//!    single-threaded), and the search stops when the next bound exceeds the K-th best step
//!    time found. A pruned candidate provably ranks below the top K, so the top K equals the
//!    exhaustive search's (`--exhaustive` simulates everything; `tests/cli_search.rs` checks).
//!
//! Ranking is a total order: step time (integer nanoseconds), then peak memory, then
//! (p, t, d, b, schedule in [`ScheduleName::ALL`](crate::schedule::ScheduleName::ALL) order, v, recompute none < selective <
//! full, sequence parallelism off < on, ZeRO-1 off < on). Same inputs, same output.
//!
//! No IO and no clock; the caller measures elapsed time.
//!
//! Files: `request.rs` (the request, pins and errors), `candidate.rs` (a candidate, its
//! request and keys, balanced splits), `space.rs` (structural checks, enumeration),
//! `outcome.rs` (rejection reasons, errors), `result.rs` (ranked results), `schedule_summary.rs` (exact memory and the
//! lower bound from the action order), this file (the best-first simulation and the ranking).

mod candidate;
mod outcome;
mod request;
mod result;
mod schedule_summary;
mod space;

pub use candidate::*;
use candidate::{apply_partition, ScheduleKey};
pub use outcome::*;
use outcome::{Tally, BATCH};
pub use request::*;
pub use result::*;
pub use schedule_summary::{DeviceSummary, ScheduleSummary};
pub use space::*;
use space::{check_inputs, enumerate};

use crate::plan::predict::{check, model_state_floor, prediction_from, step_costs};
use crate::schedule::generators::{generate, GenParams};
use crate::schedule::ir::Schedule;
use crate::sim::{simulate, SimOptions};
use rayon::prelude::*;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// A schedule's summary, made by the first candidate that needs it.
type SummarySlot = OnceLock<Result<ScheduleSummary, SearchError>>;

/// A feasible candidate waiting to be simulated.
#[derive(Debug, Clone, Copy)]
struct Feasible {
    cand: Candidate,
    lower_bound_ns: u64,
}

fn generate_for(c: &Candidate) -> Result<Schedule, SearchError> {
    generate(
        c.schedule,
        GenParams::new(c.pp as u32, c.microbatches as u32)
            .chunks(c.chunks as u32)
            .group(c.microbatch_group.map(|n| n as u32)),
    )
    .map_err(|e| SearchError::Internal(format!("{}: {e}", c.schedule)))
}

fn rank_cmp(a: &Ranked, b: &Ranked) -> std::cmp::Ordering {
    a.step_time_ns
        .cmp(&b.step_time_ns)
        .then(
            a.prediction
                .peak_memory_bytes
                .cmp(&b.prediction.peak_memory_bytes),
        )
        .then(a.candidate.tie_key().cmp(&b.candidate.tie_key()))
}

/// Every structurally valid candidate of `req` (before the memory check), in enumeration
/// order, with `--partition`'s balanced candidates added: what [`search`] checks and ranks.
pub fn candidates(req: &SearchRequest) -> Result<Vec<Candidate>, SearchError> {
    check_inputs(req)?;
    let (_, _, _, cands) = enumerate(req, &mut Tally::new());
    Ok(apply_partition(req, cands)?.0)
}

/// Run the search. `progress(done, total)` is called as feasible candidates are simulated
/// (from worker threads).
pub fn search(
    req: &SearchRequest,
    progress: Option<&(dyn Fn(u64, u64) + Sync)>,
) -> Result<SearchOutcome, SearchError> {
    search_with_bounds(req, progress).map(|(outcome, _)| outcome)
}

/// [`search`], and every feasible candidate's proven lower bound on its step time, in
/// nanoseconds, ascending: the candidates that can be faster than a given step time are
/// among those whose bound is below it, so where a layout outside the top K would rank is
/// bounded without simulating the rest (`pplan validate --runs --against-search`).
pub fn search_with_bounds(
    req: &SearchRequest,
    progress: Option<&(dyn Fn(u64, u64) + Sync)>,
) -> Result<(SearchOutcome, Vec<u64>), SearchError> {
    check_inputs(req)?;
    let mut tally = Tally::new();
    let (layouts, layouts_valid, evaluated, cands) = enumerate(req, &mut tally);
    let (cands, splits, added) = apply_partition(req, cands)?;
    let evaluated = evaluated + added;
    // Exact: a candidate fits when its simulated tensor peak stays within what the GPU leaves
    // for tensors after the stack's overheads (the same test as `Prediction::fits`).
    let limit = req
        .stack
        .overheads
        .tensor_budget_bytes(req.hardware.gpu.memory_bytes);

    // The per-stage costs depend on the candidate but not on its schedule beyond the stage
    // placement: made once per distinct cost key, used by the candidates that share it, and
    // dropped (the few simulated candidates rebuild theirs), so the costs of tens of
    // thousands of keys are never all held at once. The model-state check depends on the cost
    // key alone: a key whose static bytes cannot fit rejects its candidates without a
    // schedule summary (exact: the peak is at least the static bytes). A schedule's summary is
    // made the first time a candidate that passed it needs one, and kept for the others.
    // Groups by sorting: a stable sort keeps each group in enumeration order (its first
    // candidate builds the group's request), so the output does not depend on the threads.
    let mut cands = cands;
    cands.par_sort_by_key(|c| c.cost_key());
    let groups: Vec<&[Candidate]> = cands
        .chunk_by(|a, b| a.cost_key() == b.cost_key())
        .collect();
    let mut schedule_keys: Vec<ScheduleKey> = cands.iter().map(|c| c.schedule_key()).collect();
    schedule_keys.sort_unstable();
    schedule_keys.dedup();
    let slots: BTreeMap<ScheduleKey, SummarySlot> = schedule_keys
        .into_iter()
        .map(|k| (k, OnceLock::new()))
        .collect();
    let checked: Vec<Result<Vec<Result<Feasible, Reason>>, SearchError>> = groups
        .par_iter()
        .map(|group| {
            let r = group[0].request_in(req, &splits);
            let stages = (group[0].pp * group[0].chunks) as u32;
            let placement = group[0].schedule.placement();
            let step = check(&r)
                .map_err(|_| Reason::TooLarge)
                .and_then(|dp| {
                    // The model state alone, before any stage is costed (a floor of the
                    // static bytes checked below).
                    let floor = model_state_floor(&r, dp, stages, placement)
                        .map_err(|_| Reason::TooLarge)?;
                    if floor.iter().any(|&b| b > limit) {
                        return Err(Reason::ModelStateMemory);
                    }
                    step_costs(&r, dp, stages, placement).map_err(|_| Reason::TooLarge)
                })
                .and_then(|step| {
                    if step.too_big {
                        Err(Reason::ActivationMemory)
                    } else if step.costs.static_bytes.iter().any(|&b| b > limit) {
                        Err(Reason::ModelStateMemory)
                    } else {
                        Ok(step)
                    }
                });
            let step = match step {
                Ok(step) => step,
                Err(reason) => return Ok(vec![Err(reason); group.len()]),
            };
            group
                .iter()
                .map(|c| {
                    let sum = slots[&c.schedule_key()]
                        .get_or_init(|| generate_for(c).map(|s| ScheduleSummary::new(&s)))
                        .as_ref()
                        .map_err(Clone::clone)?;
                    let peak = sum
                        .peak_memory_bytes(&step.costs)
                        .into_iter()
                        .max()
                        .unwrap_or(0);
                    Ok(if peak > limit {
                        Err(Reason::ActivationMemory)
                    } else {
                        Ok(Feasible {
                            cand: *c,
                            lower_bound_ns: sum.lower_bound_ns(&step.costs),
                        })
                    })
                })
                .collect()
        })
        .collect();
    drop(groups);
    drop(cands);
    let mut feasible = Vec::new();
    for group in checked {
        for s in group? {
            match s {
                Ok(f) => feasible.push(f),
                Err(r) => tally.add(r, 1),
            }
        }
    }
    let schedules_summarised = slots.values().filter(|s| s.get().is_some()).count() as u64;
    drop(slots);
    let rejected = tally.list(req);
    let memory_rejected =
        tally.0[Reason::ModelStateMemory as usize] + tally.0[Reason::ActivationMemory as usize];
    if feasible.is_empty() {
        let summary = if layouts == 0 {
            "no (t, p, d) layout matches the pins".to_string()
        } else {
            format!(
                "{layouts} (t, p, d) layouts ({layouts_valid} valid) and {evaluated} candidates checked; {}",
                describe_rejections(&rejected)
            )
        };
        return Err(SearchError::Infeasible {
            model: req.model.name.clone(),
            gpus: req.gpus,
            global_batch: req.global_batch,
            summary,
            rejected,
        });
    }
    feasible.sort_by(|a, b| {
        a.lower_bound_ns
            .cmp(&b.lower_bound_ns)
            .then(a.cand.tie_key().cmp(&b.cand.tie_key()))
    });

    let bounds_ns: Vec<u64> = feasible.iter().map(|f| f.lower_bound_ns).collect();

    // Best first, in fixed batches.
    let total = feasible.len() as u64;
    let done = AtomicU64::new(0);
    let mut best: Vec<Ranked> = Vec::new();
    let mut simulated = 0u64;
    let mut i = 0usize;
    while i < feasible.len() {
        let cutoff = if !req.exhaustive && best.len() >= req.top {
            Some(best[req.top - 1].step_time_ns)
        } else {
            None
        };
        if cutoff.is_some_and(|c| feasible[i].lower_bound_ns > c) {
            break;
        }
        let size = if i == 0 { req.top.max(BATCH) } else { BATCH };
        let end = (i + size).min(feasible.len());
        let batch: Vec<Feasible> = feasible[i..end]
            .iter()
            .filter(|f| cutoff.is_none_or(|c| f.lower_bound_ns <= c))
            .copied()
            .collect();
        i = end;
        let keys: BTreeMap<ScheduleKey, Candidate> = batch
            .iter()
            .map(|f| (f.cand.schedule_key(), f.cand))
            .collect();
        let schedules: Vec<(ScheduleKey, Result<Schedule, SearchError>)> = keys
            .par_iter()
            .map(|(k, c)| (*k, generate_for(c)))
            .collect();
        let mut sched: BTreeMap<ScheduleKey, Schedule> = BTreeMap::new();
        for (k, s) in schedules {
            sched.insert(k, s?);
        }
        let ranked: Vec<Result<Ranked, SearchError>> = batch
            .par_iter()
            .map(|f| {
                let c = f.cand;
                let r = c.request_in(req, &splits);
                let dp = check(&r).map_err(|e| SearchError::Internal(e.to_string()))?;
                let s = &sched[&c.schedule_key()];
                let step = step_costs(&r, dp, s.num_stages, s.placement)
                    .map_err(|e| SearchError::Internal(e.to_string()))?;
                let result = simulate(
                    s,
                    &step.costs,
                    SimOptions {
                        record_timeline: false,
                        max_events: None,
                    },
                )
                .map_err(|e| SearchError::Internal(format!("{c:?}: {e}")))?;
                let makespan = result.makespan_ns;
                let pred = prediction_from(&r, c.schedule, step, result);
                if let Some(cb) = progress {
                    cb(done.fetch_add(1, Ordering::Relaxed) + 1, total);
                }
                Ok(Ranked {
                    rank: 0,
                    prediction: pred,
                    lower_bound_s: f.lower_bound_ns as f64 / 1e9,
                    step_time_ns: makespan,
                    lower_bound_ns: f.lower_bound_ns,
                    candidate: c,
                })
            })
            .collect();
        simulated += ranked.len() as u64;
        for r in ranked {
            let r = r?;
            // The bound is proven; a violation is a bug in pplan, not an input error.
            if r.step_time_ns < r.lower_bound_ns {
                return Err(SearchError::Internal(format!(
                    "lower bound {} s above the simulated {} s for {:?}",
                    r.lower_bound_s, r.prediction.step_time_s, r.candidate
                )));
            }
            best.push(r);
        }
        best.sort_by(rank_cmp);
        best.truncate(req.top);
    }
    for (k, r) in best.iter_mut().enumerate() {
        r.rank = k + 1;
    }
    let outcome = SearchOutcome {
        model: req.model.name.clone(),
        hardware: req.hardware.name.clone(),
        gpus: req.gpus,
        global_batch: req.global_batch,
        top: req.top,
        exhaustive: req.exhaustive,
        layouts,
        layouts_valid,
        evaluated,
        feasible: total,
        simulated,
        pruned: total - simulated,
        memory_rejected,
        schedules_summarised,
        rejected,
        results: best,
    };
    Ok((outcome, bounds_ns))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inputs::{Hardware, Model};
    use crate::plan::predict::predict;
    use crate::plan::predict::Split;
    use crate::sim::Costs;
    use crate::sim::{StageCost, TpCommNs};

    /// A small deterministic generator (xorshift), so failures reproduce from the printed seed.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self, below: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % below.max(1)
        }
    }

    fn random_costs(
        s: &Schedule,
        rng: &mut Rng,
        blocking: bool,
        overlap: bool,
        lone_extra: bool,
    ) -> Costs {
        let n = s.num_stages as usize;
        let p = s.num_devices() as usize;
        let stages = (0..n)
            .map(|_| {
                let (f, i, w) = (1 + rng.next(50), 1 + rng.next(50), rng.next(50));
                let act = rng.next(1000);
                StageCost {
                    forward_ns: f,
                    backward_ns: i + w,
                    backward_input_ns: i,
                    backward_weight_ns: w,
                    activation_bytes: act,
                    weight_grad_bytes: rng.next(act + 1),
                }
            })
            .collect();
        let sends: Vec<u64> = (0..n.saturating_sub(1)).map(|_| rng.next(20)).collect();
        Costs {
            stages,
            send_forward_ns: sends.clone(),
            send_backward_ns: sends.iter().map(|x| x + rng.next(5)).collect(),
            static_bytes: (0..p).map(|_| rng.next(10_000)).collect(),
            tensor_parallel: vec![TpCommNs::default(); n],
            blocking_sends: blocking,
            grad_reduce_ns: (0..n).map(|_| rng.next(100)).collect(),
            overlap_grad_reduce: overlap,
            grad_reduce_buckets: (0..n).map(|_| 1 + rng.next(4) as u32).collect(),
            optimizer_ns: (0..p).map(|_| rng.next(100)).collect(),
            deferred_weight_grad_ns: (0..n).map(|_| rng.next(60)).collect(),
            shared_gpu: false,
            // Lone actions' exposed all-to-all: the bound counts it.
            unpaired_extra: (0..n * usize::from(lone_extra))
                .map(|_| {
                    let (f, i) = (rng.next(20), rng.next(20));
                    StageCost {
                        forward_ns: f,
                        backward_ns: i,
                        backward_input_ns: i,
                        ..StageCost::default()
                    }
                })
                .collect(),
        }
    }

    /// Every synchronous generator over a grid, random costs (with and without lone actions'
    /// extra time): the summary's peak memory equals the simulator's, and the lower bound
    /// never exceeds the simulated makespan.
    #[test]
    fn summary_memory_is_exact_and_the_bound_holds() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut ratio_sum = 0.0;
        let mut total = 0;
        for name in SEARCHED_SCHEDULES {
            for p in 1..=6u32 {
                for m in [1u32, 2, 3, 4, 6, 8, 12] {
                    for v in [1u32, 2, 3] {
                        let Ok(s) = generate(name, GenParams::new(p, m).chunks(v)) else {
                            continue;
                        };
                        let sum = ScheduleSummary::new(&s);
                        for trial in 0..6 {
                            let seed = rng.0;
                            let costs =
                                random_costs(&s, &mut rng, trial % 2 == 0, trial >= 2, trial >= 4);
                            let r = simulate(&s, &costs, SimOptions::default()).unwrap();
                            let want: Vec<u64> =
                                r.devices.iter().map(|d| d.peak_memory_bytes).collect();
                            assert_eq!(
                                sum.peak_memory_bytes(&costs),
                                want,
                                "{name} p={p} m={m} v={v} seed={seed:#x}"
                            );
                            let lb = sum.lower_bound_ns(&costs);
                            assert!(
                                lb <= r.makespan_ns,
                                "{name} p={p} m={m} v={v} seed={seed:#x}: bound {lb} > makespan {}",
                                r.makespan_ns
                            );
                            // Tightness on the costs without lone extras, as before them.
                            if trial < 4 {
                                total += 1;
                                ratio_sum += lb as f64 / r.makespan_ns.max(1) as f64;
                            }
                        }
                    }
                }
            }
        }
        // Not a proof obligation, but a loose bound would prune nothing. Random, very uneven
        // costs are the hard case; the cost model's even stages give tighter bounds.
        let mean = ratio_sum / total as f64;
        assert!(
            mean > 0.8,
            "mean bound / makespan {mean:.3} over {total} cases"
        );
        eprintln!("mean bound / makespan {mean:.3} over {total} cases");
    }

    #[test]
    fn results_are_what_predict_says() {
        let hw = Hardware::bundled("a100-80gb").unwrap();
        let m = Model::preset("gpt-1.7b").unwrap();
        let mut req = SearchRequest::new(&m, &hw, 16, 64);
        req.top = 5;
        let out = search(&req, None).unwrap();
        assert_eq!(out.results.len(), 5);
        for r in &out.results {
            let mut pr = r.candidate.request(&req);
            pr.record_timeline = false;
            let want = predict(&pr).unwrap();
            assert_eq!(r.prediction, want, "{:?}", r.candidate);
            assert!(r.prediction.fits);
        }
        for w in out.results.windows(2) {
            assert!(rank_cmp(&w[0], &w[1]).is_lt());
        }
    }

    /// With the expert all-to-all overlapped, lone actions cost more: the lower bound counts
    /// them, so pruning still finds what the exhaustive search finds, and each result is what
    /// predict says for its layout.
    #[test]
    fn overlapped_moe_search_prunes_exactly_and_matches_predict() {
        let hw = Hardware::bundled("h100-80gb").unwrap();
        let mut m = Model::preset("qwen3-30b-a3b").unwrap();
        m.num_layers = 8;
        m.seq_len = 2048;
        if let Some(moe) = m.moe.as_mut() {
            moe.layers = vec![true; 8];
        }
        let mut req = SearchRequest::new(&m, &hw, 8, 32);
        req.stack = crate::cost::Stack {
            moe_comm_overlap: true,
            ..crate::cost::Stack::megatron_core()
        };
        req.top = 3;
        let pruned = search(&req, None).unwrap();
        assert!(!pruned.results.is_empty());
        for r in &pruned.results {
            let mut pr = r.candidate.request(&req);
            pr.record_timeline = false;
            assert_eq!(r.prediction, predict(&pr).unwrap(), "{:?}", r.candidate);
        }
        req.exhaustive = true;
        assert_eq!(pruned.results, search(&req, None).unwrap().results);
    }

    #[test]
    fn pruned_search_equals_exhaustive() {
        let hw = Hardware::bundled("a100-80gb").unwrap();
        for (name, gpus, batch) in [("gpt-1.7b", 16, 32), ("gpt-3.6b", 32, 64)] {
            let m = Model::preset(name).unwrap();
            let mut req = SearchRequest::new(&m, &hw, gpus, batch);
            let pruned = search(&req, None).unwrap();
            req.exhaustive = true;
            let all = search(&req, None).unwrap();
            assert_eq!(pruned.results, all.results, "{name}");
            assert_eq!(all.simulated, all.feasible);
            assert!(pruned.simulated < all.simulated, "{name}: nothing pruned");
        }
    }

    #[test]
    fn balanced_splits_keep_pruning_exact_and_deterministic() {
        let hw = Hardware::bundled("a100-80gb").unwrap();
        let m = Model::preset("gpt-1.7b").unwrap();
        let mut req = SearchRequest::new(&m, &hw, 16, 32);
        req.partition = PartitionMode::Both;
        let pruned = search(&req, None).unwrap();
        assert_eq!(pruned, search(&req, None).unwrap(), "deterministic");
        let mut even = req.clone();
        even.partition = PartitionMode::Even;
        let even = search(&even, None).unwrap();
        assert!(
            pruned.evaluated > even.evaluated,
            "some balanced split differs from the even one"
        );
        assert!(pruned.results[0].step_time_ns <= even.results[0].step_time_ns);
        req.exhaustive = true;
        let all = search(&req, None).unwrap();
        assert_eq!(pruned.results, all.results);
        assert_eq!(all.simulated, all.feasible);
        assert!(pruned.simulated < all.simulated, "nothing pruned");
        // Every balanced result reports a split that differs from the even one and that
        // predict reproduces.
        for r in all
            .results
            .iter()
            .filter(|r| r.candidate.split == Split::Balanced)
        {
            assert_eq!(r.prediction.split, "balanced");
            let mut pr = r.candidate.request(&req);
            pr.stage_layers = None;
            assert_eq!(crate::plan::predict::predict(&pr).unwrap(), r.prediction);
        }
    }
}
