//! A measured run broken down in pplan's terms (docs/validate.md, "The breakdown"): per rank
//! and step, compute (GEMM, attention, other), each communication dimension (total and the part
//! not hidden under compute), copies, idle time and the bubble; per pipeline stage, the
//! forward and backward times of its actions. Figures are medians over the steps used (the
//! first is dropped as warm-up when there are several), then means over ranks.

use super::timeline::{Dim, KernelClass, LogIteration, Measured, MeasuredError, RankTrace};
use serde::Serialize;
use std::collections::BTreeMap;

/// Time of one parallel dimension's communication.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct CommFigures {
    /// Length of the union of its kernels, seconds per step.
    pub total_s: f64,
    /// The part of `total_s` when no compute kernel runs (not overlapped).
    pub exposed_s: f64,
}

/// One rank's (or the mean rank's) step.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct Figures {
    /// Step time: the step window (`ProfilerStep#N`, a pplan step), else the GPU activity's span.
    pub step_time_s: f64,
    /// Union of compute kernels (GEMM, attention, other).
    pub compute_s: f64,
    /// Kernel time of each compute class (sums: concurrent kernels on two streams both count;
    /// classes by kernel family, docs/validate.md "Kernel classes").
    pub gemm_s: f64,
    pub attention_s: f64,
    pub norm_s: f64,
    pub elementwise_s: f64,
    pub embedding_s: f64,
    /// Compute kernels of no known family (and pplan's own compute actions).
    pub other_compute_s: f64,
    /// `other_compute_s` over the sum of the compute classes: how much of the compute the
    /// classes above do not explain (0 when there is no compute).
    pub other_compute_share: f64,
    /// Union of copies and memsets.
    pub memory_s: f64,
    /// Union of all communication kernels, and its part not under compute.
    pub comm_s: f64,
    pub comm_exposed_s: f64,
    /// Per dimension (`tp`, `dp`, `pp`, `cp`, `ep`, `unattributed`), only those present.
    pub comm: BTreeMap<&'static str, CommFigures>,
    /// Step time with no GPU activity at all.
    pub idle_s: f64,
    /// 1 − busy / step time, busy = union of the schedule's actions and compute kernels: the
    /// simulator's bubble fraction when read from a pplan trace.
    pub bubble: f64,
}

/// Mean forward and backward time of one pipeline stage's actions.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageTimes {
    pub stage: u32,
    /// The rank its actions ran on (the lowest, when several ranks run the stage).
    pub rank: u32,
    pub forward_ms: f64,
    /// B, or I + W for a split backward, per micro-batch.
    pub backward_ms: f64,
    pub forward_count: usize,
    pub backward_count: usize,
}

/// The breakdown of a traced run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Breakdown {
    pub source: super::timeline::Source,
    pub files: Vec<String>,
    pub ranks: usize,
    /// Steps in the traces (the most any rank has) and how many were dropped as warm-up.
    pub steps: usize,
    pub steps_skipped: usize,
    /// `actions+kernels` when the traces name the schedule's actions, else `kernels`.
    pub bubble_basis: &'static str,
    /// The mean over ranks.
    pub mean: Figures,
    pub per_rank: Vec<(u32, Figures)>,
    /// Every step used of every rank: (rank, step id as the trace numbers it, figures).
    pub per_step: Vec<(u32, u64, Figures)>,
    /// Per stage, when the traces name actions; sorted by stage.
    pub stages: Vec<StageTimes>,
}

/// Length of the union of intervals `(start, end)`: integer nanoseconds here, microseconds
/// of a pplan trace in `report::compare`.
pub fn union_len<T>(mut iv: Vec<(T, T)>) -> T
where
    T: Copy + Default + PartialOrd + std::ops::Add<Output = T> + std::ops::Sub<Output = T>,
{
    iv.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let mut total = T::default();
    let mut cur: Option<(T, T)> = None;
    for (s, e) in iv {
        match cur {
            Some((cs, ce)) if s <= ce => cur = Some((cs, if e > ce { e } else { ce })),
            Some((cs, ce)) => {
                total = total + (ce - cs);
                cur = Some((s, e));
            }
            None => cur = Some((s, e)),
        }
    }
    match cur {
        Some((cs, ce)) => total + (ce - cs),
        None => total,
    }
}

/// The median (the mean of the two middle values for an even count); `None` when empty.
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// [`median`] over the steps, 0 for none.
fn step_median(v: Vec<f64>) -> f64 {
    median(v).unwrap_or(0.0)
}

/// Warm-up steps to drop from `n`: `skip`, or 1 when there are several and none was given.
fn warmup(n: usize, skip: Option<usize>, file: &str) -> Result<usize, MeasuredError> {
    let n = n.max(1);
    let k = skip.unwrap_or(usize::from(n > 1));
    if k >= n {
        return Err(MeasuredError::new(
            file,
            format!(
                "--skip-steps {k} leaves none of its {n} steps; valid: 0 to {}",
                n - 1
            ),
        ));
    }
    Ok(k)
}

fn step_figures(r: &RankTrace, step: u32) -> Figures {
    let ns = 1e-9;
    let kernels: Vec<_> = r.kernels.iter().filter(|k| k.step == step).collect();
    let actions: Vec<_> = r.actions.iter().filter(|a| a.step == step).collect();
    let span = |iv: &mut dyn Iterator<Item = (i64, i64)>| {
        iv.fold((i64::MAX, i64::MIN), |(s, e), (a, b)| (s.min(a), e.max(b)))
    };
    let (s, e) = match r.steps.get(step as usize) {
        Some(w) => (w.start_ns, w.end_ns),
        None => span(
            &mut kernels
                .iter()
                .map(|k| (k.start_ns, k.end_ns))
                .chain(actions.iter().map(|a| (a.start_ns, a.end_ns))),
        ),
    };
    let step_ns = (e - s).max(0);
    let iv = |f: &dyn Fn(KernelClass) -> bool| -> Vec<(i64, i64)> {
        kernels
            .iter()
            .filter(|k| f(k.class))
            .map(|k| (k.start_ns, k.end_ns))
            .collect()
    };
    let sum = |c: KernelClass| -> f64 {
        kernels
            .iter()
            .filter(|k| k.class == c)
            .map(|k| k.dur_ns() as f64 * ns)
            .sum::<f64>()
            + 0.0
    };
    let compute = iv(&|c| c.is_compute());
    let classes = [
        KernelClass::Gemm,
        KernelClass::Attention,
        KernelClass::Norm,
        KernelClass::Elementwise,
        KernelClass::Embedding,
        KernelClass::OtherCompute,
    ];
    let compute_sum: f64 = classes.iter().map(|&c| sum(c)).sum();
    let other = sum(KernelClass::OtherCompute);
    let compute_len = union_len(compute.clone());
    let exposed = |comm: Vec<(i64, i64)>| -> (i64, i64) {
        let total = union_len(comm.clone());
        let both = union_len(comm.into_iter().chain(compute.iter().copied()).collect());
        (total, both - compute_len)
    };
    let mut dims: BTreeMap<&'static str, CommFigures> = BTreeMap::new();
    for d in [
        Dim::Tp,
        Dim::Cp,
        Dim::Ep,
        Dim::Pp,
        Dim::Dp,
        Dim::Unattributed,
    ] {
        let c = iv(&|c| matches!(c, KernelClass::Comm(_, x) if x == d));
        if c.is_empty() {
            continue;
        }
        let (t, x) = exposed(c);
        dims.insert(
            d.as_str(),
            CommFigures {
                total_s: t as f64 * ns,
                exposed_s: x as f64 * ns,
            },
        );
    }
    let (comm_total, comm_exposed) = exposed(iv(&|c| matches!(c, KernelClass::Comm(..))));
    let all = union_len(kernels.iter().map(|k| (k.start_ns, k.end_ns)).collect());
    let busy = union_len(
        compute
            .iter()
            .copied()
            .chain(actions.iter().map(|a| (a.start_ns, a.end_ns)))
            .collect(),
    );
    Figures {
        step_time_s: step_ns as f64 * ns,
        compute_s: compute_len as f64 * ns,
        gemm_s: sum(KernelClass::Gemm),
        attention_s: sum(KernelClass::Attention),
        norm_s: sum(KernelClass::Norm),
        elementwise_s: sum(KernelClass::Elementwise),
        embedding_s: sum(KernelClass::Embedding),
        other_compute_s: other,
        other_compute_share: if compute_sum > 0.0 {
            other / compute_sum
        } else {
            0.0
        },
        memory_s: union_len(iv(&|c| c == KernelClass::Memory)) as f64 * ns,
        comm_s: comm_total as f64 * ns,
        comm_exposed_s: comm_exposed as f64 * ns,
        comm: dims,
        idle_s: (step_ns - all).max(0) as f64 * ns,
        bubble: if step_ns > 0 {
            (1.0 - busy as f64 / step_ns as f64).max(0.0)
        } else {
            0.0
        },
    }
}

/// The field-wise median (over steps) or mean (over ranks) of several figures.
fn combine(figs: &[Figures], how: fn(Vec<f64>) -> f64) -> Figures {
    let f = |g: fn(&Figures) -> f64| how(figs.iter().map(g).collect());
    let mut comm = BTreeMap::new();
    let dims: std::collections::BTreeSet<&'static str> =
        figs.iter().flat_map(|x| x.comm.keys().copied()).collect();
    for d in dims {
        let get = |x: &Figures| x.comm.get(d).copied().unwrap_or_default();
        comm.insert(
            d,
            CommFigures {
                total_s: how(figs.iter().map(|x| get(x).total_s).collect()),
                exposed_s: how(figs.iter().map(|x| get(x).exposed_s).collect()),
            },
        );
    }
    Figures {
        step_time_s: f(|x| x.step_time_s),
        compute_s: f(|x| x.compute_s),
        gemm_s: f(|x| x.gemm_s),
        attention_s: f(|x| x.attention_s),
        norm_s: f(|x| x.norm_s),
        elementwise_s: f(|x| x.elementwise_s),
        embedding_s: f(|x| x.embedding_s),
        other_compute_s: f(|x| x.other_compute_s),
        other_compute_share: f(|x| x.other_compute_share),
        memory_s: f(|x| x.memory_s),
        comm_s: f(|x| x.comm_s),
        comm_exposed_s: f(|x| x.comm_exposed_s),
        comm,
        idle_s: f(|x| x.idle_s),
        bubble: f(|x| x.bubble),
    }
}

fn mean(v: Vec<f64>) -> f64 {
    if v.is_empty() {
        0.0
    } else {
        v.iter().sum::<f64>() / v.len() as f64
    }
}

/// Per stage, the mean forward and backward time of its actions over the steps used
/// (`first_used[i]`: the first step used of `m.ranks[i]`).
fn stage_times(m: &Measured, first_used: &[usize]) -> Vec<StageTimes> {
    use crate::schedule::ir::Kind;
    // stage → (rank, forward durations, backward durations per micro-batch)
    type Acc = (u32, Vec<i64>, BTreeMap<(u32, u32), i64>);
    let mut by_stage: BTreeMap<u32, Acc> = BTreeMap::new();
    for (r, &k) in m.ranks.iter().zip(first_used) {
        for a in r.actions.iter().filter(|a| a.step as usize >= k) {
            let e = by_stage
                .entry(a.action.stage)
                .or_insert_with(|| (r.rank, Vec::new(), BTreeMap::new()));
            if e.0 != r.rank {
                continue;
            }
            let d = a.end_ns - a.start_ns;
            match a.action.kind {
                Kind::F => e.1.push(d),
                Kind::B | Kind::I | Kind::W => {
                    *e.2.entry((a.step, a.action.microbatch)).or_insert(0) += d
                }
            }
        }
    }
    by_stage
        .into_iter()
        .map(|(stage, (rank, f, b))| StageTimes {
            stage,
            rank,
            forward_ms: mean(f.iter().map(|&x| x as f64 * 1e-6).collect()),
            backward_ms: mean(b.values().map(|&x| x as f64 * 1e-6).collect()),
            forward_count: f.len(),
            backward_count: b.len(),
        })
        .collect()
}

/// Break a traced run down. `skip`: warm-up steps to drop (default 1 when a rank has several).
pub fn breakdown(m: &Measured, skip: Option<usize>) -> Result<Breakdown, MeasuredError> {
    if m.ranks.is_empty() {
        return Err(MeasuredError::new(
            m.files.join(", "),
            "a log has no timeline to break down",
        ));
    }
    let mut per_rank = Vec::new();
    let mut per_step = Vec::new();
    let mut steps = 0;
    let mut first_used = Vec::with_capacity(m.ranks.len());
    for r in &m.ranks {
        let n = r.steps.len().max(1);
        let k = warmup(r.steps.len(), skip, &r.file)?;
        steps = steps.max(n);
        first_used.push(k);
        let figs: Vec<Figures> = (k..n).map(|s| step_figures(r, s as u32)).collect();
        per_rank.push((r.rank, combine(&figs, step_median)));
        for (s, f) in (k..n).zip(&figs) {
            let id = r.steps.get(s).map_or(0, |w| w.id);
            per_step.push((r.rank, id, f.clone()));
        }
    }
    let rows: Vec<Figures> = per_rank.iter().map(|x| x.1.clone()).collect();
    let any_actions = m.ranks.iter().any(|r| !r.actions.is_empty());
    Ok(Breakdown {
        source: m.source,
        files: m.files.clone(),
        ranks: m.ranks.len(),
        steps,
        steps_skipped: first_used.iter().copied().max().unwrap_or(0),
        bubble_basis: if any_actions {
            "actions+kernels"
        } else {
            "kernels"
        },
        mean: combine(&rows, mean),
        per_rank,
        per_step,
        stages: stage_times(m, &first_used),
    })
}

/// A log's iterations summarised: medians over the iterations used.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogSummary {
    pub source: super::timeline::Source,
    pub file: String,
    pub iterations: usize,
    pub iterations_skipped: usize,
    pub step_time_s: Option<f64>,
    pub tflops_per_gpu: Option<f64>,
    pub tokens_per_s_per_gpu: Option<f64>,
    pub mfu: Option<f64>,
    /// The largest memory any iteration reports.
    pub memory_bytes: Option<u64>,
}

/// Summarise a log. `skip`: warm-up iterations to drop (default 1 when there are several).
pub fn log_summary(m: &Measured, skip: Option<usize>) -> Result<LogSummary, MeasuredError> {
    let file = m.files.join(", ");
    let n = m.iterations.len();
    if n == 0 {
        return Err(MeasuredError::new(file, "no iterations to summarise"));
    }
    let k = warmup(n, skip, &file)?;
    let used = &m.iterations[k..];
    let med = |g: fn(&LogIteration) -> Option<f64>| median(used.iter().filter_map(g).collect());
    Ok(LogSummary {
        source: m.source,
        file,
        iterations: n,
        iterations_skipped: k,
        step_time_s: med(|i| i.step_time_s),
        tflops_per_gpu: med(|i| i.tflops_per_gpu),
        tokens_per_s_per_gpu: med(|i| i.tokens_per_s_per_gpu),
        mfu: med(|i| i.mfu),
        memory_bytes: used.iter().filter_map(|i| i.memory_bytes).max(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measured::timeline::{ActionSpan, Collective, Kernel, Source, StepWindow};
    use crate::schedule::ir::{Action, Kind};

    fn k(start: i64, end: i64, class: KernelClass, step: u32) -> Kernel {
        Kernel {
            start_ns: start,
            end_ns: end,
            stream: 0,
            class,
            name: 0,
            step,
            group_size: None,
        }
    }

    #[test]
    fn figures_of_a_hand_made_step() {
        // Step window 0..1000 ns. GEMM 0..400, attention 300..500 (other stream), TP
        // all-reduce 450..650 (50 ns under attention), a copy 900..950; action 0F0 0..500.
        let tp = KernelClass::Comm(Collective::AllReduce, Dim::Tp);
        let r = RankTrace {
            rank: 0,
            file: "x".into(),
            kernels: vec![
                k(0, 400, KernelClass::Gemm, 0),
                k(300, 500, KernelClass::Attention, 0),
                k(450, 650, tp, 0),
                k(900, 950, KernelClass::Memory, 0),
            ],
            actions: vec![ActionSpan {
                action: Action::new(0, Kind::F, 0),
                start_ns: 0,
                end_ns: 500,
                step: 0,
            }],
            steps: vec![StepWindow {
                id: 1,
                start_ns: 0,
                end_ns: 1000,
            }],
            names: vec!["k".into()],
        };
        let f = step_figures(&r, 0);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-15;
        assert!(close(f.step_time_s, 1000e-9));
        assert!(close(f.compute_s, 500e-9));
        assert!(close(f.gemm_s, 400e-9) && close(f.attention_s, 200e-9));
        assert!(close(f.comm["tp"].total_s, 200e-9));
        assert!(close(f.comm["tp"].exposed_s, 150e-9));
        assert!(close(f.memory_s, 50e-9));
        // Busy 0..650 and 900..950: idle 300 ns; bubble 1 − 500/1000.
        assert!(close(f.idle_s, 300e-9));
        assert!((f.bubble - 0.5).abs() < 1e-12);
        let m = Measured {
            source: Source::Kineto,
            files: vec!["x".into()],
            ranks: vec![r],
            iterations: vec![],
            flagged: Default::default(),
        };
        let b = breakdown(&m, None).unwrap();
        assert_eq!(
            (b.steps, b.steps_skipped, b.bubble_basis),
            (1, 0, "actions+kernels")
        );
        assert_eq!(b.stages.len(), 1);
        assert!((b.stages[0].forward_ms - 500e-6).abs() < 1e-12);
        let e = breakdown(&m, Some(1)).unwrap_err();
        assert!(
            e.to_string().contains("--skip-steps 1 leaves none of its"),
            "{e}"
        );
    }

    #[test]
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(vec![]), None);
    }

    #[test]
    fn union_of_intervals() {
        assert_eq!(union_len(vec![(0, 10), (5, 15), (20, 30)]), 25);
        assert_eq!(union_len::<i64>(vec![]), 0);
    }
}
