//! `pplan calibrate --runs`: hardware-profile parameters (and the one stack constant measured
//! off a run, Megatron-Core's host time for a MoE layer) fitted to runs by least squares on
//! the rows' errors, one value of each parameter shared by every row's profile, and the
//! left-out error of each group (`--cv`): the group's runs predicted with the values fitted
//! to the other groups.
//!
//! The fit is deterministic and starts from no profile's values: each parameter is searched
//! over its whole plausible range on a grid, then refined by golden-section search around the
//! best grid point; several parameters are fitted one at a time in turn, with a line search
//! along each round's step, until none moves. A best value on the edge of
//! the plausible range is refused: the runs then ask for an effect the parameter does not
//! stand for.

use super::predict::Prepared;
use crate::cost::MEGATRON_CORE_MOE_LAYER_HOST_S;
use crate::inputs::hardware::Hardware;
use rayon::prelude::*;
use serde::Serialize;

/// A parameter that can be fitted, with its physical meaning and plausible range
/// (docs/cost-model.md, "What can be fitted").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Param {
    /// The profile field's path (`gpu.gemm_training_factor`).
    pub name: &'static str,
    pub unit: &'static str,
    /// The plausible range: a fit outside it is refused.
    pub lo: f64,
    pub hi: f64,
    /// What it stands for.
    pub meaning: &'static str,
}

/// The stack parameter: Megatron-Core's host time for one MoE layer
/// (`--moe-layer-host-ms`). Rows that give the flag keep their value; rows of another stack
/// have none.
pub const MOE_LAYER_HOST_S: &str = "stack.moe_layer_host_s";

/// Every parameter `--fit` takes.
pub const PARAMS: [Param; 14] = [
    Param {
        name: "gpu.gemm_efficiency_max",
        unit: "fraction of peak",
        lo: 0.3,
        hi: 1.0,
        meaning: "the fraction of the dense peak a large GEMM reaches (the kernel's ceiling)",
    },
    Param {
        name: "gpu.gemm_half_dim",
        unit: "elements",
        lo: 8.0,
        hi: 1024.0,
        meaning: "the GEMM dimension at which that dimension alone halves the efficiency (tile quantisation and wave fill of small GEMMs)",
    },
    Param {
        name: "gpu.gemm_training_factor",
        unit: "fraction",
        lo: 0.5,
        hi: 1.0,
        meaning: "what a training step's GEMMs reach of the kernel ceiling: SMs and HBM bandwidth taken by communication kernels running under them, host delays, a node's GPUs sharing power",
    },
    Param {
        name: "gpu.sustained_clock_fraction",
        unit: "fraction of the rated clock",
        lo: 0.5,
        hi: 1.0,
        meaning: "the SM clock a step sustains under the GPU's power limit over the one its compute laws were measured at (a power limit below the rated one lowers it)",
    },
    Param {
        name: "gpu.hbm_efficiency",
        unit: "fraction of peak",
        lo: 0.5,
        hi: 1.0,
        meaning: "the fraction of the HBM bandwidth memory-bound kernels (norms, activations, optimizer) reach",
    },
    Param {
        name: "gpu.cross_entropy_hbm_efficiency",
        unit: "fraction of peak",
        lo: 0.3,
        hi: 1.0,
        meaning: "the fraction of the HBM bandwidth the unfused cross-entropy's passes reach",
    },
    Param {
        name: "gpu.attention_efficiency_forward",
        unit: "fraction of peak",
        lo: 0.2,
        hi: 1.0,
        meaning: "the asymptote of the fused attention forward kernel's efficiency",
    },
    Param {
        name: "gpu.attention_efficiency_backward",
        unit: "fraction of peak",
        lo: 0.2,
        hi: 1.0,
        meaning: "the asymptote of the fused attention backward kernel's efficiency",
    },
    Param {
        name: "gpu.kernel_gap_s",
        unit: "s",
        lo: 0.0,
        hi: 20e-6,
        meaning: "the GPU's idle time between two kernels queued back to back",
    },
    Param {
        name: "node.nvlink_efficiency",
        unit: "fraction of line rate",
        lo: 0.3,
        hi: 1.0,
        meaning: "the fraction of the NVLink line rate collectives reach (protocol overhead)",
    },
    Param {
        name: "node.nic_efficiency",
        unit: "fraction of line rate",
        lo: 0.3,
        hi: 1.0,
        meaning: "the fraction of the NIC line rate collectives between nodes reach",
    },
    Param {
        name: "node.nvlink_latency_s",
        unit: "s",
        lo: 0.0,
        hi: 50e-6,
        meaning: "the latency of one NVLink transfer or collective step",
    },
    Param {
        name: "node.nic_latency_s",
        unit: "s",
        lo: 0.0,
        hi: 50e-6,
        meaning: "the latency of one transfer or collective step between nodes",
    },
    Param {
        name: MOE_LAYER_HOST_S,
        unit: "s",
        lo: 0.0,
        hi: 30e-3,
        meaning: "Megatron-Core's host time to issue one MoE layer's kernels for one micro-batch, eager (scaled by the kernels it still launches one by one; rows of --stack megatron-core that do not give --moe-layer-host-ms)",
    },
];

impl Param {
    /// Whether the parameter is a stack constant rather than a hardware-profile field: it
    /// cannot be written into a profile (`--out-hardware`).
    pub fn is_stack(&self) -> bool {
        self.name == MOE_LAYER_HOST_S
    }
}

/// The parameter called `name`, or an error listing the ones there are.
pub fn param(name: &str) -> Result<&'static Param, String> {
    PARAMS.iter().find(|p| p.name == name).ok_or_else(|| {
        format!(
            "--fit: '{name}' is not a parameter that can be fitted (valid: {})",
            PARAMS.iter().map(|p| p.name).collect::<Vec<_>>().join(", ")
        )
    })
}

/// `hw`'s value of `p` (the value pplan uses where the profile leaves it out); for the stack
/// parameter, Megatron-Core's default.
pub fn get(hw: &Hardware, p: &Param) -> f64 {
    let (g, n) = (&hw.gpu, &hw.node);
    match p.name {
        MOE_LAYER_HOST_S => MEGATRON_CORE_MOE_LAYER_HOST_S,
        "gpu.gemm_efficiency_max" => g.gemm_efficiency_max,
        "gpu.gemm_half_dim" => g.gemm_half_dim,
        "gpu.gemm_training_factor" => hw.gemm_training_factor(),
        "gpu.sustained_clock_fraction" => hw.sustained_clock_fraction(),
        "gpu.hbm_efficiency" => g.hbm_efficiency,
        "gpu.cross_entropy_hbm_efficiency" => {
            g.cross_entropy_hbm_efficiency.unwrap_or(g.hbm_efficiency)
        }
        "gpu.attention_efficiency_forward" => hw.attention_efficiency().0,
        "gpu.attention_efficiency_backward" => hw.attention_efficiency().1,
        "gpu.kernel_gap_s" => hw.kernel_gap_s(),
        "node.nvlink_efficiency" => n.nvlink_efficiency,
        "node.nic_efficiency" => n.nic_efficiency,
        "node.nvlink_latency_s" => n.nvlink_latency_s,
        "node.nic_latency_s" => n.nic_latency_s,
        other => unreachable!("PARAMS has no {other}"),
    }
}

/// Set `p` to `v` in `hw`.
pub fn set(hw: &mut Hardware, p: &Param, v: f64) {
    let (g, n) = (&mut hw.gpu, &mut hw.node);
    match p.name {
        "gpu.gemm_efficiency_max" => g.gemm_efficiency_max = v,
        "gpu.gemm_half_dim" => g.gemm_half_dim = v,
        "gpu.gemm_training_factor" => g.gemm_training_factor = Some(v),
        "gpu.sustained_clock_fraction" => g.sustained_clock_fraction = Some(v),
        "gpu.hbm_efficiency" => g.hbm_efficiency = v,
        "gpu.cross_entropy_hbm_efficiency" => g.cross_entropy_hbm_efficiency = Some(v),
        "gpu.attention_efficiency_forward" => g.attention_efficiency_forward = Some(v),
        "gpu.attention_efficiency_backward" => g.attention_efficiency_backward = Some(v),
        "gpu.kernel_gap_s" => g.kernel_gap_s = Some(v),
        "node.nvlink_efficiency" => n.nvlink_efficiency = v,
        "node.nic_efficiency" => n.nic_efficiency = v,
        "node.nvlink_latency_s" => n.nvlink_latency_s = v,
        "node.nic_latency_s" => n.nic_latency_s = v,
        // Not a profile field: `errors_at` gives it to the rows' flags.
        MOE_LAYER_HOST_S => {}
        other => unreachable!("PARAMS has no {other}"),
    }
}

/// The errors of `rows` with `params` set to `values` in each row's own profile (the stack
/// parameter in the flags of each row that takes it, [`Prepared::takes_moe_layer_host_time`]);
/// `None` if a row cannot be predicted with them.
pub fn errors_at(rows: &[&Prepared], params: &[&Param], values: &[f64]) -> Option<Vec<f64>> {
    rows.par_iter()
        .map(|r| {
            let mut hw = r.hardware.clone();
            let mut host_s = None;
            for (p, &v) in params.iter().zip(values) {
                if p.is_stack() {
                    host_s = Some(v);
                } else {
                    set(&mut hw, p, v);
                }
            }
            match host_s {
                Some(h) if r.takes_moe_layer_host_time() => {
                    let mut flags = r.flags.clone();
                    flags.stack.moe_layer_host_ms = Some(h * 1e3);
                    r.predict_with(&hw, &flags).ok().map(|x| x.error)
                }
                _ => r.predict_on(&hw).ok().map(|x| x.error),
            }
        })
        .collect()
}

fn sum_squares(errors: &Option<Vec<f64>>) -> f64 {
    errors
        .as_ref()
        .map_or(f64::INFINITY, |e| e.iter().map(|x| x * x).sum())
}

/// Points of the grid each parameter's first search starts from, over its whole range; later
/// rounds search `LOCAL_GRID` points within one first-round grid step of the value.
const GRID: usize = 17;
const LOCAL_GRID: usize = 5;
/// The golden-section search stops when its bracket is this fraction of the range.
const TOLERANCE: f64 = 1e-5;
/// A best value this close (a fraction of the range) to an end of the range is on the edge.
const EDGE: f64 = 1e-3;
/// Rounds of fitting the parameters one at a time.
const MAX_SWEEPS: usize = 12;

/// The value of one parameter in `[lo, hi]` that minimises `f` (a grid of `grid` points,
/// then golden-section search between the best point's neighbours, to `TOLERANCE` of
/// `range`), and `f` there.
fn minimize(
    f: &dyn Fn(f64) -> f64,
    (lo, hi): (f64, f64),
    grid: usize,
    range: f64,
    evaluations: &mut usize,
) -> (f64, f64) {
    let xs: Vec<f64> = (0..grid)
        .map(|k| lo + (hi - lo) * k as f64 / (grid - 1) as f64)
        .collect();
    let fs: Vec<f64> = xs.iter().map(|&x| f(x)).collect();
    *evaluations += grid;
    let k = (0..grid).fold(0, |b, i| if fs[i] < fs[b] { i } else { b });
    let (mut best_x, mut best_f) = (xs[k], fs[k]);
    let (mut a, mut b) = (xs[k.saturating_sub(1)], xs[(k + 1).min(grid - 1)]);
    let phi = (5f64.sqrt() - 1.0) / 2.0;
    let mut c = b - phi * (b - a);
    let mut d = a + phi * (b - a);
    let (mut fc, mut fd) = (f(c), f(d));
    *evaluations += 2;
    while b - a > TOLERANCE * range {
        if fc <= fd {
            b = d;
            d = c;
            fd = fc;
            c = b - phi * (b - a);
            fc = f(c);
        } else {
            a = c;
            c = d;
            fc = fd;
            d = a + phi * (b - a);
            fd = f(d);
        }
        *evaluations += 1;
    }
    for (x, fx) in [(c, fc), (d, fd)] {
        if fx < best_f {
            (best_x, best_f) = (x, fx);
        }
    }
    (best_x, best_f)
}

/// A fit of `params` to rows.
#[derive(Debug, Clone, PartialEq)]
pub struct Fit {
    pub values: Vec<f64>,
    /// The rows' errors at the fitted values, in the rows' order.
    pub errors: Vec<f64>,
    /// Which parameters ended on an edge of their plausible range.
    pub at_edge: Vec<bool>,
    /// Predictions of all rows made (one per row each).
    pub evaluations: usize,
}

/// Fit `params` to `rows`. The search starts from the middle of each range, not from any
/// profile's values, so the result depends on the runs and the model only. One parameter is
/// searched over its whole range; several are searched one at a time in turn (the first round
/// over their whole ranges, later rounds within one grid step of the value), each round
/// followed by a line search along the step the round made (Powell's direction: two
/// parameters that trade against each other move together along their valley), until no
/// parameter moves by 10^-4 of its range. `None` when a row cannot be predicted.
pub fn fit(rows: &[&Prepared], params: &[&Param]) -> Option<Fit> {
    let mut values: Vec<f64> = params.iter().map(|p| (p.lo + p.hi) / 2.0).collect();
    let mut evaluations = 1;
    errors_at(rows, params, &values)?;
    let f_at = |v: &[f64]| sum_squares(&errors_at(rows, params, v));
    for sweep in 0..if params.len() == 1 { 1 } else { MAX_SWEEPS } {
        let before = values.clone();
        for j in 0..params.len() {
            let p = params[j];
            let f = |x: f64| {
                let mut v = values.clone();
                v[j] = x;
                f_at(&v)
            };
            let range = p.hi - p.lo;
            let (bounds, grid) = if sweep == 0 {
                ((p.lo, p.hi), GRID)
            } else {
                let step = range / (GRID - 1) as f64;
                (
                    ((values[j] - step).max(p.lo), (values[j] + step).min(p.hi)),
                    LOCAL_GRID,
                )
            };
            values[j] = minimize(&f, bounds, grid, range, &mut evaluations).0;
        }
        // Along the round's step d, from the round's end: t in [0, t_max], the box's edge or
        // four steps.
        let d: Vec<f64> = values.iter().zip(&before).map(|(a, b)| a - b).collect();
        if params.len() > 1 && d.iter().any(|&x| x != 0.0) {
            let t_max = params
                .iter()
                .zip(values.iter().zip(&d))
                .map(|(p, (&v, &dj))| match dj {
                    x if x > 0.0 => (p.hi - v) / x,
                    x if x < 0.0 => (p.lo - v) / x,
                    _ => f64::INFINITY,
                })
                .fold(4.0f64, f64::min);
            if t_max > 0.0 {
                let start = values.clone();
                let along = |t: f64| -> Vec<f64> {
                    start.iter().zip(&d).map(|(v, dj)| v + t * dj).collect()
                };
                let f = |t: f64| f_at(&along(t));
                let (t, ft) = minimize(&f, (0.0, t_max), LOCAL_GRID, t_max, &mut evaluations);
                if ft < f_at(&start) {
                    values = along(t);
                }
                evaluations += 1;
            }
        }
        let moved = params
            .iter()
            .zip(values.iter().zip(&before))
            .map(|(p, (a, b))| (a - b).abs() / (p.hi - p.lo))
            .fold(0.0f64, f64::max);
        if moved < 1e-4 {
            break;
        }
    }
    let errors = errors_at(rows, params, &values)?;
    let at_edge = params
        .iter()
        .zip(&values)
        .map(|(p, &v)| (v - p.lo) <= EDGE * (p.hi - p.lo) || (p.hi - v) <= EDGE * (p.hi - p.lo))
        .collect();
    Some(Fit {
        values,
        errors,
        at_edge,
        evaluations,
    })
}

/// Mean absolute value.
pub fn mape(errors: &[f64]) -> f64 {
    if errors.is_empty() {
        0.0
    } else {
        errors.iter().map(|e| e.abs()).sum::<f64>() / errors.len() as f64
    }
}

/// One group left out.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeldOut {
    pub name: String,
    pub count: usize,
    /// The group's mean absolute error with every group in the fit.
    pub fit_mape: f64,
    /// The group's mean absolute error predicted with the values fitted to the others; none
    /// when no other group has runs to fit to.
    pub cv_mape: Option<f64>,
    /// The values fitted without it (empty when no other group has runs).
    pub fitted_without: Vec<f64>,
    /// Parameters whose fit without this group ended on an edge of their range.
    pub at_edge: Vec<String>,
}

/// Leave each group out in turn: `groups[i]` is row `i`'s group; `all` the fit to every row.
/// Returns each group's result (groups in order of their first row) and the left-out errors
/// of the rows whose group could be left out (another group has runs), in row order; `None`
/// when a row cannot be predicted.
pub fn cross_validate(
    rows: &[&Prepared],
    groups: &[String],
    params: &[&Param],
    all: &Fit,
) -> Option<(Vec<HeldOut>, Vec<f64>)> {
    let mut names: Vec<&String> = Vec::new();
    for g in groups {
        if !names.contains(&g) {
            names.push(g);
        }
    }
    let mut left_out = vec![None; rows.len()];
    let mut out = Vec::new();
    for name in names {
        let (inside, outside): (Vec<usize>, Vec<usize>) =
            (0..rows.len()).partition(|&i| &groups[i] == name);
        let train: Vec<&Prepared> = outside.iter().map(|&i| rows[i]).collect();
        let test: Vec<&Prepared> = inside.iter().map(|&i| rows[i]).collect();
        let fitted: Vec<f64> = inside.iter().map(|&i| all.errors[i]).collect();
        let mut held = HeldOut {
            name: name.clone(),
            count: inside.len(),
            fit_mape: mape(&fitted),
            cv_mape: None,
            fitted_without: Vec::new(),
            at_edge: Vec::new(),
        };
        if !train.is_empty() {
            let f = fit(&train, params)?;
            held.at_edge = params
                .iter()
                .zip(&f.at_edge)
                .filter(|(_, &e)| e)
                .map(|(p, _)| p.name.to_string())
                .collect();
            let errors = errors_at(&test, params, &f.values)?;
            for (&i, &e) in inside.iter().zip(&errors) {
                left_out[i] = Some(e);
            }
            held.cv_mape = Some(mape(&errors));
            held.fitted_without = f.values;
        }
        out.push(held);
    }
    Some((out, left_out.into_iter().flatten().collect()))
}
