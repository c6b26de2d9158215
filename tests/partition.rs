//! The partitioner against oracles: exhaustive enumeration (every split and every replica
//! assignment) for the DP, and the DP for the ILP (with and without the DP's seed, so the ILP's
//! agreement does not rest on the DP's bound). Failing cases print proptest's seed and input.

use pplan::plan::partition::{
    self, evaluate, IlpOptions, InFlight, Layer, Link, PartitionError, Problem, TIE_TOLERANCE,
};
use proptest::prelude::*;

/// Every split of `n` layers into `p` stages (boundaries) and of `nd` devices into `p` replica
/// counts; the best by bottleneck, ties by the documented key (b1, r0, b2, r1, ...).
fn brute_force(pb: &Problem) -> Option<(f64, Vec<usize>, Vec<usize>)> {
    fn compositions(total: usize, parts: usize, cur: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if parts == 1 {
            cur.push(total);
            out.push(cur.clone());
            cur.pop();
            return;
        }
        for first in 1..=total - (parts - 1) {
            cur.push(first);
            compositions(total - first, parts - 1, cur, out);
            cur.pop();
        }
    }
    let (n, p) = (pb.layers.len(), pb.stages);
    let mut sizes = Vec::new();
    compositions(n, p, &mut Vec::new(), &mut sizes);
    let mut reps = Vec::new();
    compositions(pb.devices, p, &mut Vec::new(), &mut reps);
    let mut best: Option<(f64, Vec<usize>, Vec<usize>)> = None;
    let key = |b: &[usize], r: &[usize]| {
        let mut k = Vec::new();
        for s in 0..p {
            if s + 1 < p {
                k.push(b[s + 1]);
            }
            k.push(r[s]);
        }
        k
    };
    for sz in &sizes {
        let mut b = vec![0];
        for s in &sz[..p - 1] {
            b.push(b.last().unwrap() + s);
        }
        for r in &reps {
            let part = evaluate(pb, &b, r).unwrap();
            if let Some(l) = pb.memory_limit_bytes {
                if part.stage_memory_bytes.iter().any(|&m| m > l as u128) {
                    continue;
                }
            }
            let better = match &best {
                None => true,
                Some((v, bb, br)) => {
                    part.bottleneck_ms < *v
                        || (part.bottleneck_ms == *v && key(&b, r) < key(bb, br))
                }
            };
            if better {
                best = Some((part.bottleneck_ms, b.clone(), r.clone()));
            }
        }
    }
    best
}

/// A random small problem: uneven layers, optional replication, speeds, links, memory limit.
fn problem() -> impl Strategy<Value = Problem> {
    (1usize..=8, 1usize..=4, 0usize..=2, any::<u64>()).prop_map(|(n, p0, extra, seed)| {
        let p = p0.min(n);
        // A small deterministic generator so one seed gives the whole instance.
        let mut x = seed | 1;
        let mut next = move |m: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % m
        };
        let layers: Vec<Layer> = (0..n)
            .map(|i| Layer {
                name: format!("l{i}"),
                compute_ns: 1_000_000 + next(9_000_000),
                weight_bytes: next(4) * 1_000_000_000,
                activation_bytes: next(3) * 100_000_000,
                output_bytes: next(5) * 10_000_000,
            })
            .collect();
        let devices = p + extra;
        let speeds = if next(2) == 0 {
            Vec::new()
        } else {
            (0..devices)
                .map(|_| [0.5, 1.0, 1.5, 2.0][next(4) as usize])
                .collect()
        };
        let total_mem: u64 = layers
            .iter()
            .map(|l| 8 * l.weight_bytes + 3 * l.activation_bytes)
            .sum();
        Problem {
            layers,
            stages: p,
            devices,
            device_speeds: speeds,
            memory_limit_bytes: if next(2) == 0 {
                None
            } else {
                Some(total_mem / p as u64 + next(total_mem.max(1) / 2 + 1))
            },
            weight_memory_factor: 8,
            in_flight: [InFlight::OneFOneB, InFlight::GPipe, InFlight::Fixed(2)][next(3) as usize],
            microbatches: 1 + next(4),
            gpus_per_node: 1 + next(3) as usize,
            intra_node: Link {
                bandwidth_bytes_per_s: 100e9,
                latency_s: 2e-6,
            },
            inter_node: Link {
                bandwidth_bytes_per_s: 12.5e9,
                latency_s: 5e-6,
            },
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// The DP's split is the exhaustive search's, value and tie-break, bit for bit.
    #[test]
    fn dp_matches_exhaustive_search(pb in problem()) {
        let got = partition::dp(&pb);
        match brute_force(&pb) {
            None => prop_assert!(
                matches!(got, Err(PartitionError::NoSplitFitsMemory { .. } | PartitionError::LayerExceedsMemory { .. })),
                "{got:?}"
            ),
            Some((v, b, r)) => {
                let got = got.unwrap();
                prop_assert_eq!(got.bottleneck_ms, v);
                prop_assert_eq!(got.boundaries, b);
                prop_assert_eq!(got.replicas, r);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// The ILP proves the DP's bottleneck (within TIE_TOLERANCE relative) and, after the
    /// canonical re-derivation, prints the same split; with and without the DP's seed.
    #[test]
    fn ilp_agrees_with_dp(pb in problem(), seeded in any::<bool>()) {
        let Ok(d) = partition::dp(&pb) else { return Ok(()); };
        let opts = IlpOptions { seed_with_dp: seeded, ..IlpOptions::default() };
        let out = partition::ilp(&pb, &opts).unwrap();
        prop_assert!(out.optimal, "status {}", out.status);
        prop_assert_eq!(out.gap, 0.0);
        let tol = TIE_TOLERANCE * d.bottleneck_ms.max(1e-12);
        prop_assert!((out.incumbent_ms - d.bottleneck_ms).abs() <= tol,
            "ILP {} vs DP {}", out.incumbent_ms, d.bottleneck_ms);
        prop_assert_eq!(&out.partition, &d);
    }
}

fn uniform(n: usize, p: usize) -> Problem {
    let profile = pplan::inputs::profile::LayerProfile {
        source: None,
        micro_batch: None,
        layers: (0..n)
            .map(|i| pplan::inputs::profile::ProfiledLayer {
                name: format!("l{i}"),
                forward_ms: 1.0,
                backward_ms: 2.0,
                backward_input_ms: None,
                backward_weight_ms: None,
                weight_bytes: 10,
                activation_bytes: 1,
                output_bytes: 1,
            })
            .collect(),
    };
    Problem::from_profile(&profile, p)
}

/// Equal layers: every optimal split has the same bottleneck; the tie-break takes the
/// lexicographically smallest boundaries (the big stages last).
#[test]
fn ties_break_to_smallest_boundaries() {
    let d = partition::dp(&uniform(10, 4)).unwrap();
    assert_eq!(d.bottleneck_ms, 9.0);
    assert_eq!(d.boundaries, vec![0, 1, 4, 7]);
    let i = partition::ilp(&uniform(10, 4), &IlpOptions::default()).unwrap();
    assert_eq!(i.partition, d);
}

/// PipeDream's "15-1": 15 compute-heavy layers without weights (their all-reduce is free) and
/// a light last layer whose huge weights make replicating it ruinous: the unique optimum gives
/// 15 devices to stage 0.
#[test]
fn replication_gives_pipedream_config() {
    let mut pb = uniform(16, 2);
    for l in &mut pb.layers {
        l.compute_ns = 15_000_000;
        l.weight_bytes = 0;
        l.output_bytes = 0;
    }
    pb.layers[15].compute_ns = 1_000_000;
    pb.layers[15].weight_bytes = 1_000_000_000_000;
    let slow = Link {
        bandwidth_bytes_per_s: 1e9,
        latency_s: 0.0,
    };
    (pb.intra_node, pb.inter_node) = (slow, slow);
    pb.devices = 16;
    let d = partition::dp(&pb).unwrap();
    assert_eq!(d.config(), "15-1");
    assert_eq!(d.boundaries, vec![0, 15]);
    assert_eq!(d.bottleneck_ms, 15.0);
}

/// The hierarchy: with 2 GPUs per node and a slow inter-node link, the boundary that crosses
/// nodes (after stage 1) is put where the output is small.
#[test]
fn inter_node_boundary_prefers_small_outputs() {
    let mut pb = uniform(8, 4);
    pb.gpus_per_node = 2;
    pb.intra_node = Link {
        bandwidth_bytes_per_s: f64::INFINITY,
        latency_s: 0.0,
    };
    pb.inter_node = Link {
        bandwidth_bytes_per_s: 1e8,
        latency_s: 0.0,
    };
    for (i, l) in pb.layers.iter_mut().enumerate() {
        // 1 MB costs 20 ms there and back; layer 4's output is small.
        l.output_bytes = if i == 4 { 0 } else { 1_000_000 };
    }
    let d = partition::dp(&pb).unwrap();
    assert_eq!(d.boundaries[2], 5, "{d:?}");
}

#[test]
fn infeasible_requests_name_the_constraint() {
    let mut pb = uniform(6, 3);
    pb.memory_limit_bytes = Some(79);
    // Layer 0 can only be on stage 0, which holds 3 micro-batches: 8 x 10 + 3 x 1 = 83 bytes.
    match partition::dp(&pb) {
        Err(PartitionError::LayerExceedsMemory {
            needs_bytes,
            limit_bytes,
            ..
        }) => assert_eq!((needs_bytes, limit_bytes), (83, 79)),
        other => panic!("{other:?}"),
    }
    pb.memory_limit_bytes = Some(100);
    match partition::dp(&pb) {
        Err(PartitionError::NoSplitFitsMemory {
            best_peak_bytes, ..
        }) => assert_eq!(best_peak_bytes, 166), // 2-2-2: stage 0 holds 2 x 83
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        partition::dp(&uniform(2, 3)),
        Err(PartitionError::MoreStagesThanLayers {
            stages: 3,
            layers: 2
        })
    ));
}
