//! The integer program (good_lp; microlp by default, HiGHS with the `highs` feature), seeded
//! with the DP; it proves the optimum or reports its gap (docs/partition.md).

use super::dp::*;
use super::problem::*;

/// Which MILP backend good_lp uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// Pure Rust, always available.
    #[default]
    Microlp,
    /// HiGHS; needs the crate's `highs` feature.
    Highs,
}

impl Backend {
    pub fn available() -> &'static [Backend] {
        if cfg!(feature = "highs") {
            &[Backend::Microlp, Backend::Highs]
        } else {
            &[Backend::Microlp]
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Backend::Microlp => "microlp",
            Backend::Highs => "highs",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IlpOptions {
    /// The solver stops here and reports its incumbent with `optimal: false` and the gap.
    pub time_limit_s: f64,
    /// Seed with the DP: its bottleneck as an upper bound on `T`, its split as a warm start,
    /// and the compute windows derived from that bound (docs/partition.md).
    pub seed_with_dp: bool,
    pub backend: Backend,
}

impl Default for IlpOptions {
    fn default() -> Self {
        IlpOptions {
            time_limit_s: 60.0,
            seed_with_dp: true,
            backend: Backend::Microlp,
        }
    }
}

/// The ILP's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct IlpOutcome {
    /// The canonical split (re-derived by the DP within the incumbent's bottleneck).
    pub partition: Partition,
    /// The solver proved optimality.
    pub optimal: bool,
    /// `(incumbent - best_bound) / incumbent`, 0 when optimal.
    pub gap: f64,
    pub best_bound_ms: f64,
    /// The solver's split evaluated with the DP's stage-time function.
    pub incumbent_ms: f64,
    /// The solver's own split, before the canonical re-derivation.
    pub solver_boundaries: Vec<usize>,
    pub solver_replicas: Vec<usize>,
    /// "optimal", "time limit", "gap limit".
    pub status: String,
    pub solver: &'static str,
    pub binaries: usize,
    pub constraints: usize,
}

/// Relative tolerance under which two bottlenecks count as the same value.
pub const TIE_TOLERANCE: f64 = 1e-9;

/// The optimal split by integer programming; see docs/partition.md for the formulation.
pub fn ilp(pb: &Problem, opts: &IlpOptions) -> Result<IlpOutcome, PartitionError> {
    use good_lp::{
        variable, Constraint, Expression, IntoAffineExpression, ProblemVariables, Variable,
    };
    if !opts.time_limit_s.is_finite() || opts.time_limit_s <= 0.0 {
        return Err(PartitionError::Invalid {
            field: "time_limit_s",
            reason: format!(
                "{}; valid: a finite number of seconds > 0",
                opts.time_limit_s
            ),
        });
    }
    if !Backend::available().contains(&opts.backend) {
        return Err(PartitionError::Invalid {
            field: "backend",
            reason: format!(
                "'{}' is not built in (rebuild with `--features highs`)",
                opts.backend.name()
            ),
        });
    }
    // The DP validates the problem, explains infeasibility and gives the seed.
    let table = dp_table(pb)?;
    let dp_opt = table.optimum();
    let seed = table
        .reconstruct(dp_opt)
        .ok_or_else(|| PartitionError::Solver("DP reconstruction failed".into()))?;
    let c = &table.c;
    let (n, p, nd) = (pb.layers.len(), pb.stages, pb.devices);
    let replicated = nd > p;
    let speeds: Vec<f64> = (0..nd).map(|d| pb.speed(d)).collect();
    let max_speed = speeds.iter().copied().fold(0.0, f64::max);
    let r_max = nd - p + 1;
    let comp_ms: Vec<f64> = pb
        .layers
        .iter()
        .map(|l| l.compute_ns as f64 / 1e6)
        .collect();
    let total_ms = c.pre.compute_ms(0, n);

    // Valid lower bounds (docs/partition.md, 2.).
    let lb = (comp_ms.iter().copied().fold(0.0, f64::max) / (r_max as f64 * max_speed))
        .max(total_ms / speeds.iter().sum::<f64>());
    let ub = if opts.seed_with_dp {
        dp_opt
    } else {
        f64::INFINITY
    };

    // Windows for each stage's last layer e_s.
    let mut lo: Vec<usize> = (0..p).collect();
    let mut hi: Vec<usize> = (0..p).map(|s| n - p + s).collect();
    if opts.seed_with_dp {
        let cap_ns: Vec<f64> = (0..p)
            .map(|s| {
                let sp = if replicated {
                    r_max as f64 * max_speed
                } else {
                    speeds[s]
                };
                ub * 1e6 * sp * (1.0 + 1e-9)
            })
            .collect();
        let fits = |i: usize, j: usize, s: usize| {
            (c.pre.compute_ns[j] - c.pre.compute_ns[i]) as f64 <= cap_ns[s]
        };
        // Greedy from the left: the furthest stage s can end.
        let mut start = 0;
        for (s, h) in hi.iter_mut().enumerate() {
            let mut j = start + 1;
            while j < n && fits(start, j + 1, s) {
                j += 1;
            }
            *h = (*h).min(j - 1);
            start = j;
            if start >= n {
                break;
            }
        }
        // Greedy from the right: the earliest stage s can end.
        let mut end = n;
        for s in (1..p).rev() {
            let mut i = end - 1;
            while i > 0 && fits(i - 1, end, s) {
                i -= 1;
            }
            if i > 0 {
                lo[s - 1] = lo[s - 1].max(i - 1);
            }
            end = i;
            if end == 0 {
                break;
            }
        }
        if (0..p).any(|s| lo[s] > hi[s]) {
            return Err(PartitionError::Solver(format!(
                "windows empty for the DP's bound {ub} ms (lo {lo:?}, hi {hi:?})"
            )));
        }
    }

    let mut vars = ProblemVariables::new();
    let t_var = vars.add(variable().min(lb).max(ub));
    let mut init: Vec<(Variable, f64)> = vec![(t_var, dp_opt)];
    let seed_end = |s: usize| {
        if s + 1 < p {
            seed.boundaries[s + 1] - 1
        } else {
            n - 1
        }
    };
    // x[s][i]: layer i is in a stage <= s. Stored as expressions (constants outside windows).
    let mut x: Vec<Vec<Expression>> = Vec::with_capacity(p);
    let mut binaries = 0;
    for s in 0..p {
        let mut row = Vec::with_capacity(n);
        for i in 0..n {
            if s + 1 == p || i <= lo[s] {
                row.push(Expression::from(1.0));
            } else if i > hi[s] {
                row.push(Expression::from(0.0));
            } else {
                let v = vars.add(variable().binary());
                binaries += 1;
                init.push((v, if i <= seed_end(s) { 1.0 } else { 0.0 }));
                row.push(Expression::from(v));
            }
        }
        x.push(row);
    }
    let zero = Expression::from(0.0);
    let xe = |x: &Vec<Vec<Expression>>, s: isize, i: usize| -> Expression {
        if s < 0 || i >= n {
            zero.clone()
        } else {
            x[s as usize][i].clone()
        }
    };
    let mut cons: Vec<Constraint> = Vec::new();
    let is_var = |e: &Expression| e.linear_coefficients().next().is_some();
    for s in 0..p {
        let si = s as isize;
        for i in 0..n {
            let (a, b) = (xe(&x, si, i + 1), xe(&x, si, i));
            if is_var(&a) || is_var(&b) {
                cons.push(a.leq(b)); // prefix
            }
            let (a, b) = (xe(&x, si - 1, i), xe(&x, si, i));
            if s > 0 && (is_var(&a) || is_var(&b)) {
                cons.push(a.leq(b)); // stages in order
            }
        }
        if s > 0 {
            let cur: Expression = (0..n).map(|i| xe(&x, si, i)).sum();
            let prev: Expression = (0..n).map(|i| xe(&x, si - 1, i)).sum();
            if is_var(&cur) || is_var(&prev) {
                cons.push(cur.geq(prev + 1.0)); // non-empty
            }
        }
    }
    // z[s][i] = x[s][i] - x[s-1][i]; e[s][i] = x[s][i] - x[s][i+1].
    let z = |s: usize, i: usize| xe(&x, s as isize, i) - xe(&x, s as isize - 1, i);
    let e = |s: usize, i: usize| xe(&x, s as isize, i) - xe(&x, s as isize, i + 1);
    let compute_expr = |s: usize| -> Expression {
        let mut ex = Expression::with_capacity(n);
        for (i, &cm) in comp_ms.iter().enumerate() {
            ex.add_mul(cm, z(s, i));
        }
        ex
    };
    let weight_expr = |s: usize| -> Expression {
        let mut ex = Expression::with_capacity(n);
        for (i, l) in pb.layers.iter().enumerate() {
            ex.add_mul(l.weight_bytes as f64, z(s, i));
        }
        ex
    };
    let comm_expr = |s: usize, link: Link| -> Expression {
        let mut ex = Expression::with_capacity(n);
        if s + 1 < p {
            for (i, l) in pb.layers.iter().enumerate() {
                let k = 2.0 * link.transfer_ms(l.output_bytes as f64);
                if k != 0.0 {
                    ex.add_mul(k, e(s, i));
                }
            }
        }
        ex
    };
    if let Some(limit) = pb.memory_limit_bytes {
        // Scaled by the limit so the row's coefficients are O(1) (a zero limit is not divided by).
        let lim = (limit as f64).max(1.0);
        for s in 0..p {
            let k = pb.in_flight_of(s) as f64;
            let mut ex = Expression::with_capacity(n);
            for (i, l) in pb.layers.iter().enumerate() {
                let coef = (pb.weight_memory_factor as f64 * l.weight_bytes as f64
                    + k * l.activation_bytes as f64)
                    / lim;
                ex.add_mul(coef, z(s, i));
            }
            cons.push(ex.leq(limit as f64 / lim));
        }
    }
    let mut placements: Vec<(usize, usize, Variable)> = Vec::new();
    if !replicated {
        for (s, &speed) in speeds.iter().enumerate().take(p) {
            let rhs = compute_expr(s) * (1.0 / speed) + comm_expr(s, c.boundary_link(s + 1));
            cons.push(rhs.leq(t_var));
        }
    } else {
        // v[s][D][r]: stage s on devices [D, D + r).
        let total_w = c.pre.weight[n] as f64;
        let max_comm = pb
            .layers
            .iter()
            .map(|l| {
                2.0 * pb
                    .intra_node
                    .transfer_ms(l.output_bytes as f64)
                    .max(pb.inter_node.transfer_ms(l.output_bytes as f64))
            })
            .fold(0.0, f64::max);
        let mut start_prev: Option<Expression> = None;
        placements.reserve(p * nd);
        let mut seed_d = 0;
        for s in 0..p {
            let rest = p - 1 - s;
            let mut one = Expression::from(0.0);
            let mut start = Expression::from(0.0);
            let mut end = Expression::from(0.0);
            let d_range = if s == 0 { 0..=0 } else { s..=nd - 1 - rest };
            for d in d_range {
                for r in 1..=nd - d - rest {
                    if rest == 0 && d + r != nd {
                        continue;
                    }
                    let v = vars.add(variable().binary());
                    binaries += 1;
                    placements.push((s, r, v));
                    let chosen = d == seed_d && r == seed.replicas[s];
                    init.push((v, if chosen { 1.0 } else { 0.0 }));
                    one += v;
                    start.add_mul(d as f64, v);
                    end.add_mul((d + r) as f64, v);
                    let ms = c.min_speed(d, r);
                    let link = c.replica_link(d, r);
                    // all_reduce_ms is affine in the bytes: slope and intercept.
                    let ar0 = link.all_reduce_ms(0.0, r);
                    let ar_slope = if r > 1 {
                        2.0 * (r as f64 - 1.0) / r as f64 / link.bandwidth_bytes_per_s * 1e3
                    } else {
                        0.0
                    };
                    let big_m =
                        total_ms / (r as f64 * ms) + link.all_reduce_ms(total_w, r) + max_comm;
                    let rhs = compute_expr(s) * (1.0 / (r as f64 * ms))
                        + weight_expr(s) * ar_slope
                        + ar0
                        + comm_expr(s, c.boundary_link(d + r))
                        - (Expression::from(1.0) - v) * big_m;
                    cons.push(rhs.leq(t_var));
                }
            }
            cons.push(one.eq(1.0));
            match &start_prev {
                None => cons.push(start.eq(0.0)),
                Some(prev_end) => cons.push(start.eq(prev_end.clone())),
            }
            if rest == 0 {
                cons.push(end.clone().eq(nd as f64));
            }
            start_prev = Some(end);
            seed_d += seed.replicas[s];
        }
    }
    let n_cons = cons.len();
    let init = if opts.seed_with_dp { init } else { Vec::new() };
    let sol = solve(opts, vars, t_var, cons, init)?;

    // Read the solver's split back.
    let ends: Vec<usize> = x
        .iter()
        .map(|row| row.iter().map(|e| sol.eval(e)).sum::<f64>().round() as usize)
        .collect();
    let mut boundaries = vec![0];
    boundaries.extend(ends[..p - 1].iter().copied());
    let mut replicas = vec![1; p];
    for &(s, r, v) in &placements {
        if sol.values.get(&v).copied().unwrap_or(0.0) > 0.5 {
            replicas[s] = r;
        }
    }
    let own = evaluate_with(c, &boundaries, &replicas)
        .map_err(|e| PartitionError::Solver(format!("the solver's split is not valid ({e})")))?;
    let incumbent = own.bottleneck_ms;
    let optimal = sol.optimal;
    let bound = if optimal {
        incumbent
    } else {
        sol.best_bound.unwrap_or(lb).max(lb).min(incumbent)
    };
    let gap = if optimal || incumbent <= 0.0 {
        0.0
    } else {
        ((incumbent - bound) / incumbent).max(0.0)
    };
    // Canonical split within the incumbent's bottleneck (the DP's optimum if within tolerance).
    let target = if incumbent <= dp_opt * (1.0 + TIE_TOLERANCE) {
        dp_opt
    } else {
        incumbent
    };
    let partition = table.reconstruct(target).unwrap_or_else(|| own.clone());
    Ok(IlpOutcome {
        partition,
        optimal,
        gap,
        best_bound_ms: bound,
        incumbent_ms: incumbent,
        solver_boundaries: own.boundaries,
        solver_replicas: own.replicas,
        status: sol.status,
        solver: opts.backend.name(),
        binaries,
        constraints: n_cons,
    })
}

/// What the backends report, in one shape.
struct Solved {
    values: std::collections::HashMap<good_lp::Variable, f64>,
    optimal: bool,
    status: String,
    best_bound: Option<f64>,
}

impl Solved {
    fn eval(&self, e: &good_lp::Expression) -> f64 {
        use good_lp::IntoAffineExpression;
        e.linear_coefficients()
            .map(|(v, k)| k * self.values.get(&v).copied().unwrap_or(0.0))
            .sum::<f64>()
            + e.constant()
    }
}

fn status_name(s: good_lp::solvers::SolutionStatus) -> (bool, String) {
    use good_lp::solvers::SolutionStatus as S;
    match s {
        S::Optimal => (true, "optimal".into()),
        S::TimeLimit => (false, "time limit".into()),
        S::GapLimit => (false, "gap limit".into()),
    }
}

fn solve(
    opts: &IlpOptions,
    vars: good_lp::ProblemVariables,
    t_var: good_lp::Variable,
    cons: Vec<good_lp::Constraint>,
    init: Vec<(good_lp::Variable, f64)>,
) -> Result<Solved, PartitionError> {
    use good_lp::solvers::{Solution, SolverModel, WithInitialSolution, WithTimeLimit};
    let all: Vec<good_lp::Variable> = vars.iter_variables_with_def().map(|(v, _)| v).collect();
    let err = |e: good_lp::ResolutionError| match e {
        good_lp::ResolutionError::Other(m) if m.contains("Time limit") => {
            PartitionError::NoIncumbent {
                time_limit_s: opts.time_limit_s,
            }
        }
        e => PartitionError::Solver(e.to_string()),
    };
    let collect = |get: &dyn Fn(good_lp::Variable) -> f64| {
        all.iter()
            .map(|&v| (v, get(v)))
            .collect::<std::collections::HashMap<_, _>>()
    };
    match opts.backend {
        Backend::Microlp => {
            let mut m = vars.minimise(t_var).using(good_lp::microlp);
            for c in cons {
                m.add_constraint(c);
            }
            let mut m = m.with_time_limit(opts.time_limit_s);
            if !init.is_empty() {
                m = m.with_initial_solution(init);
            }
            let sol = m.solve().map_err(err)?;
            let (optimal, status) = status_name(sol.status());
            let values = collect(&|v| sol.value(v));
            let best_bound = sol.into_inner().stats().best_bound;
            Ok(Solved {
                values,
                optimal,
                status,
                best_bound,
            })
        }
        #[cfg(feature = "highs")]
        Backend::Highs => {
            let mut m = vars.minimise(t_var).using(good_lp::highs);
            for c in cons {
                m.add_constraint(c);
            }
            let mut m = m.with_time_limit(opts.time_limit_s);
            if !init.is_empty() {
                m = m.with_initial_solution(init);
            }
            let sol = m.solve().map_err(err)?;
            let (optimal, status) = status_name(sol.status());
            let values = collect(&|v| sol.value(v));
            Ok(Solved {
                values,
                optimal,
                status,
                // good_lp does not expose HiGHS's dual bound; our own lower bounds are used.
                best_bound: None,
            })
        }
        #[allow(unreachable_patterns)]
        _ => Err(PartitionError::Solver(format!(
            "backend {} not built in",
            opts.backend.name()
        ))),
    }
}
