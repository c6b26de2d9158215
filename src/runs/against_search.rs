//! `pplan validate --runs --against-search`: for each row, its own layout predicted (exactly
//! as `validate --runs` predicts it) beside the best layout an unpinned `pplan search` finds
//! for the same model, GPUs, global batch, sequence length, hardware and stack switches.
//! How much faster pplan predicts its own pick than the layout the run used ("search
//! claims") is how far its ranking can be trusted on runs tuned by people: a large claim is
//! either a mechanism the run did not use or an effect pplan's model has wrong
//! (docs/search.md, "Search's pick against the recipes' layouts").
//!
//! The search keeps every flag of the row that is not a layout choice (precision and FP8
//! recipe, dispatcher, CUDA graphs, capacity factor, optimizer formats, overlaps, imbalance,
//! MTP depths) and drops what the search enumerates ([`LAYOUT_FLAGS`]).

use super::file::RunsFile;
use super::validate::{layout_label, Loaded, RunResult};
use crate::cost::Stack;
use crate::plan::predict::Prediction;
use crate::plan::search::{candidates, search_with_bounds, Candidate, SearchRequest};
use rayon::prelude::*;
use serde::Serialize;
use std::fmt::Write as _;

/// The layout flags a row's search leaves unpinned: the dimensions `pplan search`
/// enumerates (docs/search.md, "The space"), and the split rules and layout strings that fix
/// a row's stages.
pub const LAYOUT_FLAGS: [&str; 19] = [
    "--tp",
    "--pp",
    "--dp",
    "--cp",
    "--ep",
    "--etp",
    "--micro-batch",
    "--schedule",
    "--chunks",
    "--microbatch-group-size-per-virtual-pipeline-stage",
    "--recompute",
    "--sequence-parallel",
    "--zero",
    "--zero1",
    "--dp-replicate",
    "--pipeline-layout",
    "--partition",
    "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers",
];

/// How many results each row's search ranks exactly: the row's own layout gets an exact rank
/// when its predicted step is faster than the K-th best, else a bound.
pub const SEARCH_TOP: usize = 5;

/// What the unpinned search found for one row.
#[derive(Debug, Clone)]
pub struct SearchSide {
    /// The search's best result.
    pub best: Prediction,
    /// Candidates the search checked and how many were feasible.
    pub evaluated: u64,
    pub feasible: u64,
    /// Some structurally valid candidate of the unpinned search has the row's t, cp, p, d,
    /// ep, etp, b, schedule, v, recompute, sequence parallelism and ZeRO stage (its layer
    /// split may differ from a row's layout string).
    pub own_in_space: bool,
    /// The rank the row's predicted step time takes among the feasible candidates (1 + how
    /// many are strictly faster), when that is known exactly: the step is faster than the
    /// K-th best result, or the search has fewer than K feasible candidates.
    pub own_rank: Option<u64>,
    /// 1 + the feasible candidates whose proven lower bound is below the row's step: no
    /// more can be faster.
    pub own_rank_at_most: u64,
}

/// One row compared.
#[derive(Debug, Clone)]
pub struct Compared {
    /// The row's own layout predicted, as `validate --runs` predicts it.
    pub own: RunResult,
    /// The search, or why it could not run (also when the row itself could not be predicted).
    pub search: Result<SearchSide, String>,
}

impl Compared {
    /// Search's best tokens/s per GPU over the row's own, minus 1 (the same GPUs, batch and
    /// sequence, so the ratio of the step times too).
    pub fn claims(&self) -> Option<f64> {
        let own = &self.own.outcome.as_ref().ok()?.prediction;
        let s = self.search.as_ref().ok()?;
        Some(s.best.tokens_per_s_per_gpu / own.tokens_per_s_per_gpu - 1.0)
    }

    /// The claim, when the row counts (predicted, searched, not excluded).
    pub fn counted_claims(&self) -> Option<f64> {
        self.own.exclude.is_none().then(|| self.claims()).flatten()
    }
}

/// The row's flags without the layout flags: what its search is given.
fn without_layout(args: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        let (flag, inline_value) = match a.split_once('=') {
            Some((f, _)) => (f, true),
            None => (a.as_str(), false),
        };
        let takes_value = LAYOUT_FLAGS.contains(&flag);
        let bare = matches!(
            flag,
            "--account-for-embedding-in-pipeline-split" | "--account-for-loss-in-pipeline-split"
        );
        if bare {
            i += 1;
        } else if takes_value {
            // `--zero1` may be given bare (on); the others always take a value.
            let next_is_value = !inline_value
                && (flag != "--zero1" || args.get(i + 1).is_some_and(|n| n == "on" || n == "off"));
            i += if next_is_value { 2 } else { 1 };
        } else {
            out.push(a.clone());
            i += 1;
        }
    }
    out
}

/// Whether `c` is the layout of `p` (everything but the layer split).
fn same_layout(c: &Candidate, p: &Prediction) -> bool {
    c.tp == p.tp
        && c.pp == p.pp
        && c.dp == p.dp
        && c.cp == p.cp
        && c.ep == p.ep
        && c.etp == p.etp
        && c.micro_batch == p.micro_batch
        && c.schedule.as_str() == p.schedule
        && c.chunks == p.chunks
        && c.recompute.as_str() == p.recompute
        && c.sequence_parallel == p.sequence_parallel
        && c.zero.stage() == p.zero
        && c.dp_replicate == p.dp_replicate
}

/// The unpinned search of `l`'s row, its own prediction `own` placed among its candidates.
fn search_row(l: &Loaded, own: &Prediction) -> Result<SearchSide, String> {
    let p = l.prepared.as_ref().map_err(Clone::clone)?;
    if p.profile.is_some() {
        return Err(
            "the row predicts from a layer profile (--profile), which search does not take".into(),
        );
    }
    // The row's stack switches, parsed by predict's own parser from its args less the layout.
    let mut row = p.row.clone();
    row.args = without_layout(&row.args);
    let flags = super::predict::row_flags(&row)?;
    let stack = flags
        .stack
        .apply(
            Stack::default().zero,
            !flags.no_scatter_gather,
            flags.overlap_grad_reduce,
            &p.hardware,
        )
        .map_err(|e| format!("args: {e}"))?;
    crate::plan::flags::check_recipe(&stack, &p.model, None).map_err(|e| format!("args: {e}"))?;
    let mut req = SearchRequest::new(&p.model, &p.hardware, p.row.gpus, p.row.global_batch);
    req.top = SEARCH_TOP;
    req.stack = stack;
    let own_in_space = candidates(&req)
        .map_err(|e| format!("search: {e}"))?
        .iter()
        .any(|c| same_layout(c, own));
    let (outcome, bounds_ns) =
        search_with_bounds(&req, None).map_err(|e| format!("search: {e}"))?;
    let best = outcome
        .results
        .first()
        .ok_or("search: no result")?
        .prediction
        .clone();
    let own_ns = (own.step_time_s * 1e9).round() as u64;
    let faster_in_top = outcome
        .results
        .iter()
        .filter(|r| r.step_time_ns < own_ns)
        .count() as u64;
    let exact = outcome.results.len() < SEARCH_TOP
        || outcome
            .results
            .last()
            .is_some_and(|r| r.step_time_ns >= own_ns);
    Ok(SearchSide {
        best,
        evaluated: outcome.evaluated,
        feasible: outcome.feasible,
        own_in_space,
        own_rank: exact.then_some(1 + faster_in_top),
        own_rank_at_most: 1 + bounds_ns.partition_point(|&b| b < own_ns) as u64,
    })
}

/// Compare every row: `results` are `rows` predicted ([`super::validate::predict_rows`]),
/// in the same order. Rows in parallel; the output is in row order and does not depend on the
/// threads.
pub fn compare_rows(rows: &[Loaded], results: Vec<RunResult>) -> Vec<Compared> {
    rows.par_iter()
        .zip(results.into_par_iter())
        .map(|(l, own)| {
            let search = match &own.outcome {
                Ok(o) => search_row(l, &o.prediction),
                Err(e) => Err(format!("the row's own layout could not be predicted: {e}")),
            };
            Compared { own, search }
        })
        .collect()
}

/// What the search's best changes from the row's layout: `ep 8->1`, `v 1->24`, ...
pub fn differences(own: &Prediction, best: &Prediction) -> Vec<String> {
    let on = |b: bool| if b { "on" } else { "off" }.to_string();
    let mut out = Vec::new();
    for (name, a, b) in [
        ("t", own.tp.to_string(), best.tp.to_string()),
        ("cp", own.cp.to_string(), best.cp.to_string()),
        ("p", own.pp.to_string(), best.pp.to_string()),
        ("d", own.dp.to_string(), best.dp.to_string()),
        ("ep", own.ep.to_string(), best.ep.to_string()),
        ("etp", own.etp.to_string(), best.etp.to_string()),
        (
            "b",
            own.micro_batch.to_string(),
            best.micro_batch.to_string(),
        ),
        ("schedule", own.schedule.clone(), best.schedule.clone()),
        ("v", own.chunks.to_string(), best.chunks.to_string()),
        ("recompute", own.recompute.clone(), best.recompute.clone()),
        ("SP", on(own.sequence_parallel), on(best.sequence_parallel)),
        ("ZeRO", own.zero.to_string(), best.zero.to_string()),
    ] {
        if a != b {
            out.push(format!("{name} {a}->{b}"));
        }
    }
    out
}

/// One row of the JSON output.
#[derive(Debug, Clone, Serialize)]
pub struct CompareJson {
    pub source: String,
    pub file: String,
    pub id: String,
    pub model: String,
    pub hardware: String,
    pub gpus: u64,
    pub excluded: bool,
    pub exclude_reason: Option<String>,
    /// Why the row's own layout or its search could not be predicted.
    pub problem: Option<String>,
    pub measured_tokens_per_s_per_gpu: Option<f64>,
    pub own_layout: Option<String>,
    pub own_step_time_s: Option<f64>,
    pub own_tokens_per_s_per_gpu: Option<f64>,
    pub own_bubble_fraction: Option<f64>,
    pub own_peak_memory_gb: Option<f64>,
    pub own_fits: Option<bool>,
    pub own_in_space: Option<bool>,
    pub own_rank: Option<u64>,
    pub own_rank_at_most: Option<u64>,
    pub search_evaluated: Option<u64>,
    pub search_feasible: Option<u64>,
    pub search_layout: Option<String>,
    pub search_recompute: Option<String>,
    pub search_sequence_parallel: Option<bool>,
    pub search_zero: Option<u8>,
    pub search_step_time_s: Option<f64>,
    pub search_tokens_per_s_per_gpu: Option<f64>,
    pub search_bubble_fraction: Option<f64>,
    pub search_peak_memory_gb: Option<f64>,
    /// Search's best over the row's own tokens/s per GPU, minus 1.
    pub claims: Option<f64>,
    pub differences: Vec<String>,
}

impl CompareJson {
    pub fn of(c: &Compared) -> CompareJson {
        let r = &c.own;
        let own = r.outcome.as_ref().ok().map(|o| &o.prediction);
        let s = c.search.as_ref().ok();
        let best = s.map(|s| &s.best);
        let gb = |p: &Prediction| p.peak_memory_bytes as f64 / 1e9;
        CompareJson {
            source: r.source.clone(),
            file: r.file.clone(),
            id: r.id.clone(),
            model: r.model.clone(),
            hardware: r.hardware.clone(),
            gpus: r.gpus,
            excluded: r.exclude.is_some(),
            exclude_reason: r.exclude.clone(),
            problem: c.search.as_ref().err().cloned(),
            measured_tokens_per_s_per_gpu: measured_tokens(r),
            own_layout: own.map(layout_label),
            own_step_time_s: own.map(|p| p.step_time_s),
            own_tokens_per_s_per_gpu: own.map(|p| p.tokens_per_s_per_gpu),
            own_bubble_fraction: own.map(|p| p.bubble_fraction),
            own_peak_memory_gb: own.map(gb),
            own_fits: own.map(|p| p.fits),
            own_in_space: s.map(|s| s.own_in_space),
            own_rank: s.and_then(|s| s.own_rank),
            own_rank_at_most: s.map(|s| s.own_rank_at_most),
            search_evaluated: s.map(|s| s.evaluated),
            search_feasible: s.map(|s| s.feasible),
            search_layout: best.map(layout_label),
            search_recompute: best.map(|b| b.recompute.clone()),
            search_sequence_parallel: best.map(|b| b.sequence_parallel),
            search_zero: best.map(|b| b.zero),
            search_step_time_s: best.map(|b| b.step_time_s),
            search_tokens_per_s_per_gpu: best.map(|b| b.tokens_per_s_per_gpu),
            search_bubble_fraction: best.map(|b| b.bubble_fraction),
            search_peak_memory_gb: best.map(gb),
            claims: c.claims(),
            differences: match (own, best) {
                (Some(o), Some(b)) => differences(o, b),
                _ => Vec::new(),
            },
        }
    }
}

/// The measured tokens/s per GPU, when that is the row's metric.
fn measured_tokens(r: &RunResult) -> Option<f64> {
    match r.measured {
        Some((super::metric::Metric::TokensPerSPerGpu, v)) => Some(v),
        _ => None,
    }
}

/// The summary of the counted claims.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClaimsSummary {
    /// Rows counted: own layout predicted, searched, not excluded.
    pub count: usize,
    /// Median claim (fraction; the mean of the middle two for an even count).
    pub median: f64,
    /// Rows claiming more than 10 % and more than 20 %.
    pub over_10: usize,
    pub over_20: usize,
    /// The largest claim and its row.
    pub max: f64,
    pub max_id: Option<String>,
    /// Counted rows whose own layout is predicted not to fit.
    pub own_not_fitting: usize,
}

/// The whole JSON object.
#[derive(Debug, Clone, Serialize)]
pub struct AgainstSearchJson {
    pub schema_version: u32,
    pub search_top: usize,
    pub runs: Vec<CompareJson>,
    #[serde(flatten)]
    pub summary: ClaimsSummary,
    /// Rows whose own layout or search could not be predicted (not excluded).
    pub problems: usize,
}

/// The median of `claims` (the mean of the middle two for an even count), the largest and
/// its row.
fn median_and_max(claims: &[(&str, f64)]) -> (f64, f64, Option<String>) {
    let mut sorted: Vec<f64> = claims.iter().map(|(_, x)| *x).collect();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let median = match n {
        0 => 0.0,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    };
    let max = claims
        .iter()
        .fold(None, |m: Option<(&str, f64)>, &(id, x)| match m {
            Some((_, y)) if y >= x => m,
            _ => Some((id, x)),
        });
    (
        median,
        max.map_or(0.0, |m| m.1),
        max.map(|m| m.0.to_string()),
    )
}

/// The counted claims summarised.
pub fn summary(rows: &[Compared]) -> ClaimsSummary {
    let counted: Vec<(&str, f64)> = rows
        .iter()
        .filter_map(|c| c.counted_claims().map(|x| (c.own.id.as_str(), x)))
        .collect();
    let (median, max, max_id) = median_and_max(&counted);
    ClaimsSummary {
        count: counted.len(),
        median,
        over_10: counted.iter().filter(|(_, x)| *x > 0.10).count(),
        over_20: counted.iter().filter(|(_, x)| *x > 0.20).count(),
        max,
        max_id,
        own_not_fitting: rows
            .iter()
            .filter(|c| c.counted_claims().is_some())
            .filter(|c| c.own.outcome.as_ref().is_ok_and(|o| !o.prediction.fits))
            .count(),
    }
}

/// Rows that could not be compared and are not excluded.
pub fn problems(rows: &[Compared]) -> Vec<&Compared> {
    rows.iter()
        .filter(|c| c.own.exclude.is_none() && c.search.is_err())
        .collect()
}

pub fn to_json(rows: &[Compared]) -> AgainstSearchJson {
    AgainstSearchJson {
        schema_version: 1,
        search_top: SEARCH_TOP,
        runs: rows.iter().map(CompareJson::of).collect(),
        summary: summary(rows),
        problems: problems(rows).len(),
    }
}

fn pct(x: f64) -> String {
    format!("{:+.1}%", 100.0 * x)
}

/// The rank column: exact, or `<= N`, of the feasible candidates.
fn rank_cell(s: &SearchSide) -> String {
    match s.own_rank {
        Some(r) => format!("{r} of {}", s.feasible),
        None => format!("<= {} of {}", s.own_rank_at_most, s.feasible),
    }
}

/// The Markdown report: a table per runs file, then the summary. docs/search.md quotes it.
pub fn markdown(files: &[RunsFile], rows: &[Compared]) -> String {
    let mut s = String::new();
    for f in files {
        let mine: Vec<&Compared> = rows.iter().filter(|c| c.own.file == f.origin).collect();
        let _ = writeln!(
            s,
            "Search's pick against the layouts of {} ({} {}):\n",
            f.origin,
            mine.len(),
            if mine.len() == 1 { "row" } else { "rows" }
        );
        s += "| id | model | hardware | GPUs | own layout | own tokens/s/GPU | measured | search's best | its tokens/s/GPU | search claims | own rank | what differs |\n";
        s += "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
        for c in mine {
            let r = &c.own;
            let measured = measured_tokens(r).map_or("–".to_string(), |v| format!("{v:.0}"));
            let own = r.outcome.as_ref().ok().map(|o| &o.prediction);
            let own_cells = match own {
                Some(p) => format!(
                    "{}{} | {:.0}",
                    layout_label(p),
                    if p.fits { "" } else { " (does not fit)" },
                    p.tokens_per_s_per_gpu
                ),
                None => "– | –".to_string(),
            };
            let search_cells = match (&c.search, own) {
                (Ok(sd), Some(p)) => {
                    let b = &sd.best;
                    let claims = pct(c.claims().unwrap_or(0.0));
                    format!(
                        "{} {}{} | {:.0} | {} | {}{} | {}",
                        layout_label(b),
                        b.recompute,
                        if b.sequence_parallel { " SP" } else { "" },
                        b.tokens_per_s_per_gpu,
                        if r.exclude.is_some() {
                            format!("({claims}, excluded)")
                        } else {
                            claims
                        },
                        rank_cell(sd),
                        if sd.own_in_space {
                            ""
                        } else {
                            " (not in space)"
                        },
                        differences(p, b).join(", ")
                    )
                }
                (Err(e), _) => format!(
                    "{} | – | – | – | –",
                    if r.exclude.is_some() {
                        "excluded".to_string()
                    } else {
                        format!("error: {}", e.replace('|', "/"))
                    }
                ),
                (Ok(_), None) => "– | – | – | – | –".to_string(),
            };
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {own_cells} | {measured} | {search_cells} |",
                r.id, r.model, r.hardware, r.gpus
            );
        }
        s += "\n";
        let mut reasons: Vec<(&str, Vec<&str>)> = Vec::new();
        for c in rows.iter().filter(|c| c.own.file == f.origin) {
            if let Some(why) = &c.own.exclude {
                match reasons.iter_mut().find(|(w, _)| w == why) {
                    Some((_, ids)) => ids.push(&c.own.id),
                    None => reasons.push((why, vec![&c.own.id])),
                }
            }
        }
        for (why, ids) in &reasons {
            let _ = writeln!(s, "Not counted: {}: {why}.", ids.join(", "));
        }
        if !reasons.is_empty() {
            s += "\n";
        }
    }
    let sum = summary(rows);
    let _ = writeln!(
        s,
        "search claims over {} {}: median {}, more than 10% for {}, more than 20% for {}, largest {}{}; own layout predicted not to fit: {}",
        sum.count,
        if sum.count == 1 { "row" } else { "rows" },
        pct(sum.median),
        sum.over_10,
        sum.over_20,
        pct(sum.max),
        sum.max_id.as_ref().map_or(String::new(), |id| format!(" ({id})")),
        sum.own_not_fitting
    );
    let problems = problems(rows).len();
    if problems > 0 {
        let _ = writeln!(
            s,
            "{problems} {} could not be compared (above, `error:`)",
            if problems == 1 { "row" } else { "rows" }
        );
    }
    s
}
