//! The layer partitioner: contiguous layers into `p` pipeline stages, minimising the slowest
//! stage (compute split over its replicas, plus the all-reduce of its weights, plus the
//! transfer to the next stage), under a per-stage memory limit. The model, the formulas and
//! the tie-break rule are in `docs/partition.md`.
//!
//! Two methods over one [`Problem`]: [`dp`], a dynamic program that is exact for the model
//! (PipeDream's DP with replication, one pass over both bandwidth levels), and [`ilp`], an
//! integer program (good_lp; microlp by default, HiGHS with the `highs` feature) that proves
//! the optimum or reports its gap. Both print the same canonical split.
//!
//! Invariants: no IO; the clock is read only by the ILP solver for its time limit. Same
//! problem, same DP answer, byte for byte.

use crate::inputs::profile::LayerProfile;
use std::fmt;

/// A point-to-point or collective link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    /// Bytes per second; `f64::INFINITY` makes transfers free of bandwidth cost.
    pub bandwidth_bytes_per_s: f64,
    pub latency_s: f64,
}

impl Link {
    /// Infinite bandwidth, zero latency: communication costs nothing.
    pub const FREE: Link = Link {
        bandwidth_bytes_per_s: f64::INFINITY,
        latency_s: 0.0,
    };

    /// One transfer of `bytes`, in ms.
    fn transfer_ms(&self, bytes: f64) -> f64 {
        (bytes / self.bandwidth_bytes_per_s + self.latency_s) * 1e3
    }

    /// Ring all-reduce of `bytes` over `n` ranks, in ms (`cost::all_reduce_s`).
    fn all_reduce_ms(&self, bytes: f64, n: usize) -> f64 {
        crate::cost::all_reduce_s(bytes, n as u64, self.bandwidth_bytes_per_s, self.latency_s) * 1e3
    }
}

/// How many micro-batches of activations a stage holds at its peak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InFlight {
    /// Stage `s` of `p` holds `min(p - s, m)` (1F1B's warm-up).
    OneFOneB,
    /// Every stage holds all `m` (all forwards before any backward).
    GPipe,
    /// Every stage holds this many.
    Fixed(u64),
}

impl fmt::Display for InFlight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InFlight::OneFOneB => f.write_str("1f1b"),
            InFlight::GPipe => f.write_str("gpipe"),
            InFlight::Fixed(k) => write!(f, "{k}"),
        }
    }
}

impl std::str::FromStr for InFlight {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "1f1b" => Ok(InFlight::OneFOneB),
            "gpipe" => Ok(InFlight::GPipe),
            _ => match s.parse::<u64>() {
                Ok(k) if k >= 1 => Ok(InFlight::Fixed(k)),
                _ => Err(format!(
                    "unknown in-flight model '{s}' (valid: 1f1b, gpipe, or a whole number of micro-batches >= 1)"
                )),
            },
        }
    }
}

/// One layer as the partitioner sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Layer {
    pub name: String,
    /// Forward + backward of one micro-batch, whole nanoseconds (sums are exact).
    pub compute_ns: u64,
    pub weight_bytes: u64,
    pub activation_bytes: u64,
    pub output_bytes: u64,
}

/// A partitioning request. Build with [`Problem::from_profile`] and adjust the fields.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub layers: Vec<Layer>,
    /// Pipeline stages `p`.
    pub stages: usize,
    /// Devices `N ≥ p`; stage `s` gets `r_s ≥ 1` of them, `Σ r_s = N`.
    pub devices: usize,
    /// Relative speed of each device in pipeline order (1 = the profile's speed); empty means
    /// all 1.
    pub device_speeds: Vec<f64>,
    pub memory_limit_bytes: Option<u64>,
    /// Static bytes per byte of `weight_bytes` (8: 16-bit weights with mixed-precision Adam).
    pub weight_memory_factor: u64,
    pub in_flight: InFlight,
    /// Micro-batches per step `m` (caps 1F1B's in-flight count; GPipe's count).
    pub microbatches: u64,
    /// Devices per node: a boundary or all-reduce that crosses a node uses `inter_node`.
    pub gpus_per_node: usize,
    pub intra_node: Link,
    pub inter_node: Link,
}

/// The default `weight_memory_factor`: (2 + 2 + 12) bytes per parameter / 2-byte weights.
pub const DEFAULT_WEIGHT_MEMORY_FACTOR: u64 = 8;

/// Largest DP (states × transitions) estimate accepted, so a request cannot run for hours.
pub const MAX_DP_WORK: f64 = 2e10;

impl Problem {
    /// `stages` stages over as many devices, no memory limit, free communication, 1F1B.
    pub fn from_profile(profile: &LayerProfile, stages: usize) -> Problem {
        Problem {
            layers: profile
                .layers
                .iter()
                .map(|l| Layer {
                    name: l.name.clone(),
                    compute_ns: ((l.forward_ms + l.backward_ms) * 1e6).round() as u64,
                    weight_bytes: l.weight_bytes,
                    activation_bytes: l.activation_bytes,
                    output_bytes: l.output_bytes,
                })
                .collect(),
            stages,
            devices: stages,
            device_speeds: Vec::new(),
            memory_limit_bytes: None,
            weight_memory_factor: DEFAULT_WEIGHT_MEMORY_FACTOR,
            in_flight: InFlight::OneFOneB,
            microbatches: stages as u64,
            gpus_per_node: 1,
            intra_node: Link::FREE,
            inter_node: Link::FREE,
        }
    }

    /// Micro-batches of activations stage `s` holds at its peak.
    pub fn in_flight_of(&self, s: usize) -> u64 {
        match self.in_flight {
            InFlight::OneFOneB => ((self.stages - s) as u64).min(self.microbatches),
            InFlight::GPipe => self.microbatches,
            InFlight::Fixed(k) => k,
        }
    }

    fn speed(&self, d: usize) -> f64 {
        self.device_speeds.get(d).copied().unwrap_or(1.0)
    }

    fn check_shape(&self) -> Result<(), PartitionError> {
        let n = self.layers.len();
        let p = self.stages;
        let bad =
            |field: &'static str, reason: String| Err(PartitionError::Invalid { field, reason });
        if n == 0 {
            return bad("layers", "the profile has no layers".into());
        }
        if p == 0 {
            return bad("stages", "must be at least 1".into());
        }
        if p > n {
            return Err(PartitionError::MoreStagesThanLayers {
                stages: p,
                layers: n,
            });
        }
        if self.devices < p {
            return Err(PartitionError::FewerDevicesThanStages {
                devices: self.devices,
                stages: p,
            });
        }
        if !self.device_speeds.is_empty() && self.device_speeds.len() != self.devices {
            return bad(
                "device_speeds",
                format!(
                    "has {} entries; give one per device ({})",
                    self.device_speeds.len(),
                    self.devices
                ),
            );
        }
        if let Some((d, v)) = self
            .device_speeds
            .iter()
            .enumerate()
            .find(|(_, v)| !v.is_finite() || **v <= 0.0 || **v > 1e6)
        {
            return bad(
                "device_speeds",
                format!("device {d} has speed {v}; valid: a finite number in (0, 1e6]"),
            );
        }
        if self.gpus_per_node == 0 {
            return bad("gpus_per_node", "must be at least 1".into());
        }
        if self.microbatches == 0 {
            return bad("microbatches", "must be at least 1".into());
        }
        for (field, l) in [
            ("intra_node", self.intra_node),
            ("inter_node", self.inter_node),
        ] {
            if l.bandwidth_bytes_per_s.is_nan()
                || l.bandwidth_bytes_per_s <= 0.0
                || !l.latency_s.is_finite()
                || l.latency_s < 0.0
            {
                return bad(
                    field,
                    format!(
                        "bandwidth {} B/s, latency {} s; valid: bandwidth > 0, latency finite and >= 0",
                        l.bandwidth_bytes_per_s, l.latency_s
                    ),
                );
            }
        }
        let extra = (self.devices - p + 1) as f64;
        let work = (n as f64).powi(2) * p as f64 * extra * extra;
        if work > MAX_DP_WORK || (p + 1) as f64 * (n + 1) as f64 * (self.devices + 1) as f64 > 5e7 {
            return Err(PartitionError::TooLarge {
                layers: n,
                stages: p,
                devices: self.devices,
            });
        }
        Ok(())
    }

    fn check(&self) -> Result<(), PartitionError> {
        self.check_shape()?;
        let (n, p) = (self.layers.len(), self.stages);
        // A layer alone on the stage with the fewest micro-batches in flight that it can be on.
        if let Some(limit) = self.memory_limit_bytes {
            let pre = Prefix::new(self);
            for i in 0..n {
                let first = (p + i).saturating_sub(n); // later stages need a layer each
                let last = i.min(p - 1);
                let s = (first..=last)
                    .min_by_key(|&s| self.in_flight_of(s))
                    .unwrap_or(first);
                let need = pre.memory(self, i, i + 1, s);
                if need > limit as u128 {
                    return Err(PartitionError::LayerExceedsMemory {
                        layer: i,
                        name: self.layers[i].name.clone(),
                        needs_bytes: need,
                        limit_bytes: limit,
                        in_flight: self.in_flight_of(s),
                    });
                }
            }
        }
        Ok(())
    }
}

/// The library's errors. The CLI maps every variant but [`PartitionError::Solver`] to exit 2.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PartitionError {
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error("{stages} stages need at least {stages} layers; the profile has {layers}")]
    MoreStagesThanLayers { stages: usize, layers: usize },
    #[error("{stages} stages need at least {stages} devices; {devices} given")]
    FewerDevicesThanStages { devices: usize, stages: usize },
    #[error("layer {layer} ('{name}') alone needs {needs_bytes} bytes (weights x factor + activations of {in_flight} micro-batches in flight) > memory limit {limit_bytes} bytes")]
    LayerExceedsMemory {
        layer: usize,
        name: String,
        needs_bytes: u128,
        limit_bytes: u64,
        in_flight: u64,
    },
    #[error("no split of {layers} layers into {stages} stages fits the memory limit {limit_bytes} bytes: the smallest per-stage peak any split reaches is {best_peak_bytes} bytes")]
    NoSplitFitsMemory {
        layers: usize,
        stages: usize,
        limit_bytes: u64,
        best_peak_bytes: u128,
    },
    #[error("{layers} layers x {stages} stages x {devices} devices is too large for the partitioner (work estimate above {MAX_DP_WORK:e})")]
    TooLarge {
        layers: usize,
        stages: usize,
        devices: usize,
    },
    #[error("split does not match the problem: {0}")]
    BadSplit(String),
    /// The time limit ran out before the solver had any feasible split (possible only
    /// without the DP's warm start).
    #[error("the ILP found no feasible split within the time limit of {time_limit_s} s")]
    NoIncumbent { time_limit_s: f64 },
    /// The ILP solver failed (an internal error, not a property of the input).
    #[error("ILP solver: {0}")]
    Solver(String),
}

/// A split and its costs.
#[derive(Debug, Clone, PartialEq)]
pub struct Partition {
    /// First layer of each stage (`boundaries[0] = 0`).
    pub boundaries: Vec<usize>,
    /// Devices of each stage.
    pub replicas: Vec<usize>,
    pub stage_times_ms: Vec<f64>,
    pub stage_memory_bytes: Vec<u128>,
    pub bottleneck_ms: f64,
}

impl Partition {
    /// PipeDream's configuration string: replicas per stage joined by '-', e.g. "15-1".
    pub fn config(&self) -> String {
        self.replicas
            .iter()
            .map(|r| r.to_string())
            .collect::<Vec<_>>()
            .join("-")
    }
}

/// Prefix sums over layers (exact integers).
struct Prefix {
    compute_ns: Vec<u128>,
    weight: Vec<u128>,
    act: Vec<u128>,
}

impl Prefix {
    fn new(pb: &Problem) -> Prefix {
        let mut p = Prefix {
            compute_ns: vec![0],
            weight: vec![0],
            act: vec![0],
        };
        for l in &pb.layers {
            p.compute_ns
                .push(p.compute_ns.last().unwrap() + l.compute_ns as u128);
            p.weight
                .push(p.weight.last().unwrap() + l.weight_bytes as u128);
            p.act
                .push(p.act.last().unwrap() + l.activation_bytes as u128);
        }
        p
    }

    /// Memory of layers `[i, j)` as stage `s`.
    fn memory(&self, pb: &Problem, i: usize, j: usize, s: usize) -> u128 {
        (self.weight[j] - self.weight[i]) * pb.weight_memory_factor as u128
            + (self.act[j] - self.act[i]) * pb.in_flight_of(s) as u128
    }

    fn compute_ms(&self, i: usize, j: usize) -> f64 {
        (self.compute_ns[j] - self.compute_ns[i]) as f64 / 1e6
    }
}

/// Shared cost evaluation: the one definition of a stage's time (docs/partition.md).
struct Costs<'a> {
    pb: &'a Problem,
    pre: Prefix,
}

impl<'a> Costs<'a> {
    fn new(pb: &'a Problem) -> Costs<'a> {
        Costs {
            pb,
            pre: Prefix::new(pb),
        }
    }

    /// The link of the boundary whose downstream stage starts at device `d`.
    fn boundary_link(&self, d: usize) -> Link {
        if d % self.pb.gpus_per_node == 0 {
            self.pb.inter_node
        } else {
            self.pb.intra_node
        }
    }

    /// The link of an all-reduce among devices `[d, d + r)`.
    fn replica_link(&self, d: usize, r: usize) -> Link {
        let g = self.pb.gpus_per_node;
        if d / g == (d + r - 1) / g {
            self.pb.intra_node
        } else {
            self.pb.inter_node
        }
    }

    /// Communication of stage `s` ending at layer `j - 1`, next stage starting at device `d_next`.
    fn comm_ms(&self, s: usize, j: usize, d_next: usize) -> f64 {
        if s + 1 == self.pb.stages {
            return 0.0;
        }
        2.0 * self
            .boundary_link(d_next)
            .transfer_ms(self.pb.layers[j - 1].output_bytes as f64)
    }

    fn all_reduce_ms(&self, i: usize, j: usize, d: usize, r: usize) -> f64 {
        if r <= 1 {
            return 0.0;
        }
        let bytes = (self.pre.weight[j] - self.pre.weight[i]) as f64;
        self.replica_link(d, r).all_reduce_ms(bytes, r)
    }

    /// Time of layers `[i, j)` as stage `s` on devices `[d, d + r)` whose slowest speed is
    /// `min_speed`.
    fn stage_ms(&self, i: usize, j: usize, s: usize, d: usize, r: usize, min_speed: f64) -> f64 {
        self.pre.compute_ms(i, j) / (r as f64 * min_speed)
            + self.all_reduce_ms(i, j, d, r)
            + self.comm_ms(s, j, d + r)
    }

    fn min_speed(&self, d: usize, r: usize) -> f64 {
        (d..d + r)
            .map(|x| self.pb.speed(x))
            .fold(f64::INFINITY, f64::min)
    }

    fn fits(&self, i: usize, j: usize, s: usize) -> bool {
        match self.pb.memory_limit_bytes {
            None => true,
            Some(l) => self.pre.memory(self.pb, i, j, s) <= l as u128,
        }
    }
}

/// Evaluate a given split (no memory-limit check; `stage_memory_bytes` tells).
pub fn evaluate(
    pb: &Problem,
    boundaries: &[usize],
    replicas: &[usize],
) -> Result<Partition, PartitionError> {
    pb.check_shape()?;
    let c = Costs::new(pb);
    evaluate_with(&c, boundaries, replicas)
}

fn evaluate_with(
    c: &Costs,
    boundaries: &[usize],
    replicas: &[usize],
) -> Result<Partition, PartitionError> {
    let pb = c.pb;
    let (n, p) = (pb.layers.len(), pb.stages);
    if boundaries.len() != p || replicas.len() != p {
        return Err(PartitionError::BadSplit(format!(
            "{} boundaries and {} replica counts for {p} stages",
            boundaries.len(),
            replicas.len()
        )));
    }
    if boundaries[0] != 0 || boundaries.windows(2).any(|w| w[1] <= w[0]) || boundaries[p - 1] >= n {
        return Err(PartitionError::BadSplit(format!(
            "boundaries {boundaries:?} must start at 0 and increase strictly below {n}"
        )));
    }
    if replicas.contains(&0) || replicas.iter().sum::<usize>() != pb.devices {
        return Err(PartitionError::BadSplit(format!(
            "replicas {replicas:?} must be >= 1 each and sum to {} devices",
            pb.devices
        )));
    }
    let mut times = Vec::with_capacity(p);
    let mut mem = Vec::with_capacity(p);
    let mut d = 0;
    for s in 0..p {
        let i = boundaries[s];
        let j = if s + 1 < p { boundaries[s + 1] } else { n };
        let r = replicas[s];
        times.push(c.stage_ms(i, j, s, d, r, c.min_speed(d, r)));
        mem.push(c.pre.memory(pb, i, j, s));
        d += r;
    }
    let bottleneck_ms = times.iter().copied().fold(0.0, f64::max);
    Ok(Partition {
        boundaries: boundaries.to_vec(),
        replicas: replicas.to_vec(),
        stage_times_ms: times,
        stage_memory_bytes: mem,
        bottleneck_ms,
    })
}

/// The DP's table: `f(s, i, d)` = smallest bottleneck of layers `[i, n)` in stages `s..p` on
/// devices `[d, N)`.
struct Table<'a> {
    c: Costs<'a>,
    f: Vec<f64>,
}

impl<'a> Table<'a> {
    /// Stage `s` starts at a device `d` in `[s, s + N - p]` (each earlier stage has at least
    /// one), so the table stores `d - s` in `N - p + 1` slots: with one device per stage the
    /// device dimension vanishes.
    fn idx(&self, s: usize, i: usize, d: usize) -> usize {
        let (n, nd, p) = (self.c.pb.layers.len(), self.c.pb.devices, self.c.pb.stages);
        debug_assert!(d >= s && d - s <= nd - p);
        (s * (n + 1) + i) * (nd - p + 1) + (d - s)
    }

    fn get(&self, s: usize, i: usize, d: usize) -> f64 {
        self.f[self.idx(s, i, d)]
    }

    fn build(pb: &'a Problem) -> Table<'a> {
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

    fn optimum(&self) -> f64 {
        self.get(0, 0, 0)
    }

    /// The canonical split with bottleneck `≤ target`: each stage in turn takes the smallest
    /// end layer, then the fewest replicas, that still allow a completion within `target`.
    fn reconstruct(&self, target: f64) -> Option<Partition> {
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
fn min_peak_memory(pb: &Problem) -> u128 {
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

fn dp_table(pb: &Problem) -> Result<Table<'_>, PartitionError> {
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
