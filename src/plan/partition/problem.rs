//! The partitioning problem: layers (time, bytes), stages, devices and replication, link
//! levels, the in-flight memory model, errors, and the one stage-time function both methods
//! use ([`evaluate`]). Formulas in docs/partition.md.

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
    pub(super) fn transfer_ms(&self, bytes: f64) -> f64 {
        (bytes / self.bandwidth_bytes_per_s + self.latency_s) * 1e3
    }

    /// Ring all-reduce of `bytes` over `n` ranks, in ms (`cost::all_reduce_s`).
    pub(super) fn all_reduce_ms(&self, bytes: f64, n: usize) -> f64 {
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

    pub(super) fn speed(&self, d: usize) -> f64 {
        self.device_speeds.get(d).copied().unwrap_or(1.0)
    }

    pub(super) fn check_shape(&self) -> Result<(), PartitionError> {
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

    pub(super) fn check(&self) -> Result<(), PartitionError> {
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
pub(super) struct Prefix {
    pub(super) compute_ns: Vec<u128>,
    pub(super) weight: Vec<u128>,
    pub(super) act: Vec<u128>,
}

impl Prefix {
    pub(super) fn new(pb: &Problem) -> Prefix {
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
    pub(super) fn memory(&self, pb: &Problem, i: usize, j: usize, s: usize) -> u128 {
        (self.weight[j] - self.weight[i]) * pb.weight_memory_factor as u128
            + (self.act[j] - self.act[i]) * pb.in_flight_of(s) as u128
    }

    pub(super) fn compute_ms(&self, i: usize, j: usize) -> f64 {
        (self.compute_ns[j] - self.compute_ns[i]) as f64 / 1e6
    }
}

/// Shared cost evaluation: the one definition of a stage's time (docs/partition.md).
pub(super) struct Costs<'a> {
    pub(super) pb: &'a Problem,
    pub(super) pre: Prefix,
}

impl<'a> Costs<'a> {
    pub(super) fn new(pb: &'a Problem) -> Costs<'a> {
        Costs {
            pb,
            pre: Prefix::new(pb),
        }
    }

    /// The link of the boundary whose downstream stage starts at device `d`.
    pub(super) fn boundary_link(&self, d: usize) -> Link {
        if d % self.pb.gpus_per_node == 0 {
            self.pb.inter_node
        } else {
            self.pb.intra_node
        }
    }

    /// The link of an all-reduce among devices `[d, d + r)`.
    pub(super) fn replica_link(&self, d: usize, r: usize) -> Link {
        let g = self.pb.gpus_per_node;
        if d / g == (d + r - 1) / g {
            self.pb.intra_node
        } else {
            self.pb.inter_node
        }
    }

    /// Communication of stage `s` ending at layer `j - 1`, next stage starting at device `d_next`.
    pub(super) fn comm_ms(&self, s: usize, j: usize, d_next: usize) -> f64 {
        if s + 1 == self.pb.stages {
            return 0.0;
        }
        2.0 * self
            .boundary_link(d_next)
            .transfer_ms(self.pb.layers[j - 1].output_bytes as f64)
    }

    pub(super) fn all_reduce_ms(&self, i: usize, j: usize, d: usize, r: usize) -> f64 {
        if r <= 1 {
            return 0.0;
        }
        let bytes = (self.pre.weight[j] - self.pre.weight[i]) as f64;
        self.replica_link(d, r).all_reduce_ms(bytes, r)
    }

    /// Time of layers `[i, j)` as stage `s` on devices `[d, d + r)` whose slowest speed is
    /// `min_speed`.
    pub(super) fn stage_ms(
        &self,
        i: usize,
        j: usize,
        s: usize,
        d: usize,
        r: usize,
        min_speed: f64,
    ) -> f64 {
        self.pre.compute_ms(i, j) / (r as f64 * min_speed)
            + self.all_reduce_ms(i, j, d, r)
            + self.comm_ms(s, j, d + r)
    }

    pub(super) fn min_speed(&self, d: usize, r: usize) -> f64 {
        (d..d + r)
            .map(|x| self.pb.speed(x))
            .fold(f64::INFINITY, f64::min)
    }

    pub(super) fn fits(&self, i: usize, j: usize, s: usize) -> bool {
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

pub(super) fn evaluate_with(
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
