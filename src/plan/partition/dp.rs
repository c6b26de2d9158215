//! The exact dynamic program over (layers, stages, devices): PipeDream's DP with replication,
//! one pass over both bandwidth levels, canonical tie-break (docs/partition.md).

use super::problem::*;

/// The DP's table: `f(s, i, d)` = smallest bottleneck of layers `[i, n)` in stages `s..p` on
/// devices `[d, N)`.
pub(super) struct Table<'a> {
    pub(super) c: Costs<'a>,
    pub(super) f: Vec<f64>,
}

impl<'a> Table<'a> {
    /// Stage `s` starts at a device `d` in `[s, s + N - p]` (each earlier stage has at least
    /// one), so the table stores `d - s` in `N - p + 1` slots: with one device per stage the
    /// device dimension vanishes.
    pub(super) fn idx(&self, s: usize, i: usize, d: usize) -> usize {
        let (n, nd, p) = (self.c.pb.layers.len(), self.c.pb.devices, self.c.pb.stages);
        debug_assert!(d >= s && d - s <= nd - p);
        (s * (n + 1) + i) * (nd - p + 1) + (d - s)
    }

    pub(super) fn get(&self, s: usize, i: usize, d: usize) -> f64 {
        self.f[self.idx(s, i, d)]
    }

    pub(super) fn build(pb: &'a Problem) -> Table<'a> {
        let c = Costs::new(pb);
        let (n, p, nd) = (pb.layers.len(), pb.stages, pb.devices);
        let mut t = Table {
            c,
            f: vec![f64::INFINITY; (p + 1) * (n + 1) * (nd - p + 1)],
        };
        let end = t.idx(p, n, nd);
        t.f[end] = 0.0;
        let max_speed = (0..nd).map(|d| pb.speed(d)).fold(0.0, f64::max);
        let r_max = nd - p + 1;
        for s in (0..p).rev() {
            let rest = p - 1 - s;
            for i in s..=n - 1 - rest {
                for d in s..=nd - 1 - rest {
                    let mut best = f64::INFINITY;
                    for j in i + 1..=n - rest {
                        if !t.c.fits(i, j, s) {
                            break; // memory only grows with j
                        }
                        // Compute alone (fastest possible devices) only grows with j.
                        if t.c.pre.compute_ms(i, j) / (r_max as f64 * max_speed) >= best {
                            break;
                        }
                        let r_range = if rest == 0 {
                            nd - d..=nd - d
                        } else {
                            1..=nd - d - rest
                        };
                        let mut min_speed = f64::INFINITY;
                        for r in 1..=*r_range.end() {
                            min_speed = min_speed.min(pb.speed(d + r - 1));
                            if r < *r_range.start() {
                                continue;
                            }
                            let next = t.get(s + 1, j, d + r);
                            if next >= best {
                                continue;
                            }
                            let v = t.c.stage_ms(i, j, s, d, r, min_speed).max(next);
                            if v < best {
                                best = v;
                            }
                        }
                    }
                    let k = t.idx(s, i, d);
                    t.f[k] = best;
                }
            }
        }
        t
    }

    pub(super) fn optimum(&self) -> f64 {
        self.get(0, 0, 0)
    }

    /// The canonical split with bottleneck `≤ target`: each stage in turn takes the smallest
    /// end layer, then the fewest replicas, that still allow a completion within `target`.
    pub(super) fn reconstruct(&self, target: f64) -> Option<Partition> {
        let pb = self.c.pb;
        let (n, p, nd) = (pb.layers.len(), pb.stages, pb.devices);
        let (mut i, mut d) = (0, 0);
        let mut boundaries = Vec::with_capacity(p);
        let mut replicas = Vec::with_capacity(p);
        'stage: for s in 0..p {
            let rest = p - 1 - s;
            for j in i + 1..=n - rest {
                if !self.c.fits(i, j, s) {
                    break;
                }
                let mut min_speed = f64::INFINITY;
                for r in 1..=nd - d - rest {
                    min_speed = min_speed.min(pb.speed(d + r - 1));
                    if rest == 0 && d + r != nd {
                        continue;
                    }
                    let v =
                        self.c
                            .stage_ms(i, j, s, d, r, min_speed)
                            .max(self.get(s + 1, j, d + r));
                    if v <= target {
                        boundaries.push(i);
                        replicas.push(r);
                        i = j;
                        d += r;
                        continue 'stage;
                    }
                }
            }
            return None;
        }
        evaluate_with(&self.c, &boundaries, &replicas).ok()
    }
}

/// Smallest achievable max stage memory over all splits (to explain an infeasible limit).
pub(super) fn min_peak_memory(pb: &Problem) -> u128 {
    let pre = Prefix::new(pb);
    let (n, p) = (pb.layers.len(), pb.stages);
    let mut g = vec![vec![u128::MAX; n + 1]; p + 1];
    g[p][n] = 0;
    for s in (0..p).rev() {
        let rest = p - 1 - s;
        for i in s..=n - 1 - rest {
            let best = (i + 1..=n - rest)
                .map(|j| pre.memory(pb, i, j, s).max(g[s + 1][j]))
                .min()
                .unwrap_or(u128::MAX);
            g[s][i] = best;
        }
    }
    g[0][0]
}

pub(super) fn dp_table(pb: &Problem) -> Result<Table<'_>, PartitionError> {
    pb.check()?;
    let t = Table::build(pb);
    if !t.optimum().is_finite() {
        return Err(match pb.memory_limit_bytes {
            Some(limit) => PartitionError::NoSplitFitsMemory {
                layers: pb.layers.len(),
                stages: pb.stages,
                limit_bytes: limit,
                best_peak_bytes: min_peak_memory(pb),
            },
            None => PartitionError::Solver("the DP found no split without a memory limit".into()),
        });
    }
    Ok(t)
}

/// The optimal split by dynamic programming (exact for the model; canonical tie-break).
pub fn dp(pb: &Problem) -> Result<Partition, PartitionError> {
    let t = dp_table(pb)?;
    t.reconstruct(t.optimum())
        .ok_or_else(|| PartitionError::Solver("DP reconstruction failed".into()))
}
