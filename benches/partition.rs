//! How long the partitioner takes (docs/partition.md, "Figures"). Instances come from the
//! bundled 1T profile (`examples/profiles/gpt-1t-a100-t8.json`: embedding, 128 transformer
//! layers, output layer, per tensor-parallel rank of t = 8 on A100s), cut to n layers by keeping
//! the embedding and the output layer, with the A100 cluster's links (one pipeline device per
//! node, `--gpus-per-node 1`), and from a seeded random uneven profile (layer times 1..10 ms,
//! output sizes 0..40 MB). Acceptance: DP 128 x 64 < 50 ms; ILP proves 48 x 6 < 5 s (microlp);
//! ILP 100 x 8 < 5 s (HiGHS). The DP on the same instance is the baseline of each ILP figure.
//!
//! `cargo bench --bench partition` (add `--features highs` for the HiGHS rows)

use pplan::inputs::profile::LayerProfile;
use pplan::plan::partition::{self, Backend, IlpOptions, Layer, Link, Problem};

fn main() {
    divan::main();
}

fn links(pb: &mut Problem) {
    let hw = pplan::inputs::hardware::Hardware::bundled("a100-80gb").unwrap();
    pb.gpus_per_node = 1;
    pb.intra_node = Link {
        bandwidth_bytes_per_s: hw.nvlink_bytes_per_s(),
        latency_s: hw.node.nvlink_latency_s,
    };
    pb.inter_node = Link {
        bandwidth_bytes_per_s: hw.nic_bytes_per_s_per_gpu(false),
        latency_s: hw.node.nic_latency_s,
    };
}

/// The 1T profile with `n` layers (embedding, n - 2 transformer layers, output layer).
fn gpt1t(n: usize, p: usize) -> Problem {
    let text = include_str!("../examples/profiles/gpt-1t-a100-t8.json");
    let mut prof = LayerProfile::from_json(text, "gpt-1t-a100-t8.json").unwrap();
    let out = prof.layers.pop().unwrap();
    prof.layers.truncate(n - 1);
    prof.layers.push(out);
    let mut pb = Problem::from_profile(&prof, p);
    links(&mut pb);
    pb
}

/// Seeded random uneven layers.
fn random(n: usize, p: usize) -> Problem {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |m: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % m
    };
    let layers = (0..n)
        .map(|i| Layer {
            name: format!("l{i}"),
            compute_ns: 1_000_000 + next(9_000_000),
            weight_bytes: 1_000_000 * (1 + next(100)),
            activation_bytes: 1_000_000 * (1 + next(100)),
            output_bytes: 1_000_000 * next(40),
        })
        .collect();
    let mut pb = Problem {
        layers,
        ..Problem::from_profile(&gpt1t_stub(), p)
    };
    links(&mut pb);
    pb
}

fn gpt1t_stub() -> LayerProfile {
    LayerProfile {
        source: None,
        micro_batch: None,
        layers: Vec::new(),
    }
}

fn ilp(pb: &Problem, backend: Backend) {
    let out = partition::ilp(
        pb,
        &IlpOptions {
            backend,
            ..IlpOptions::default()
        },
    )
    .unwrap();
    assert!(out.optimal, "not proven: {}", out.status);
}

#[divan::bench(args = [(128, 64), (130, 64), (48, 6), (100, 8)])]
fn dp_gpt1t(bencher: divan::Bencher, (n, p): (usize, usize)) {
    let pb = gpt1t(n, p);
    bencher.bench(|| partition::dp(divan::black_box(&pb)).unwrap());
}

#[divan::bench(args = [(128, 64), (48, 6), (100, 8)])]
fn dp_random(bencher: divan::Bencher, (n, p): (usize, usize)) {
    let pb = random(n, p);
    bencher.bench(|| partition::dp(divan::black_box(&pb)).unwrap());
}

/// Replication: 64 layers, 8 stages over 16 devices.
#[divan::bench]
fn dp_gpt1t_replicated_64x8_on_16(bencher: divan::Bencher) {
    let mut pb = gpt1t(64, 8);
    pb.devices = 16;
    bencher.bench(|| partition::dp(divan::black_box(&pb)).unwrap());
}

#[divan::bench(args = [(48, 6), (100, 8)], sample_count = 3, sample_size = 1)]
fn ilp_microlp_gpt1t(bencher: divan::Bencher, (n, p): (usize, usize)) {
    let pb = gpt1t(n, p);
    bencher.bench(|| ilp(&pb, Backend::Microlp));
}

#[divan::bench(args = [(48, 6), (100, 8)], sample_count = 3, sample_size = 1)]
fn ilp_microlp_random(bencher: divan::Bencher, (n, p): (usize, usize)) {
    let pb = random(n, p);
    bencher.bench(|| ilp(&pb, Backend::Microlp));
}

#[cfg(feature = "highs")]
#[divan::bench(args = [(48, 6), (100, 8)], sample_count = 3, sample_size = 1)]
fn ilp_highs_gpt1t(bencher: divan::Bencher, (n, p): (usize, usize)) {
    let pb = gpt1t(n, p);
    bencher.bench(|| ilp(&pb, Backend::Highs));
}

#[cfg(feature = "highs")]
#[divan::bench(args = [(48, 6), (100, 8)], sample_count = 3, sample_size = 1)]
fn ilp_highs_random(bencher: divan::Bencher, (n, p): (usize, usize)) {
    let pb = random(n, p);
    bencher.bench(|| ilp(&pb, Backend::Highs));
}

/// The formulation alone (no DP bound, warm start or windows), 60 s limit: how far microlp
/// gets. Prints status, gap and model size once per run; not an acceptance figure.
#[divan::bench(args = [(48, 6), (100, 8)], sample_count = 1, sample_size = 1)]
fn ilp_microlp_unseeded(bencher: divan::Bencher, (n, p): (usize, usize)) {
    let (a, b) = (gpt1t(n, p), random(n, p));
    let opts = IlpOptions {
        seed_with_dp: false,
        time_limit_s: 60.0,
        ..IlpOptions::default()
    };
    bencher.bench(|| {
        for (name, pb) in [("random", &b), ("gpt1t", &a)] {
            let t0 = std::time::Instant::now();
            let out = partition::ilp(pb, &opts).unwrap();
            eprintln!(
                "unseeded {name} {n}x{p}: {} binaries, {} rows, status {}, incumbent {:.4} ms, bound {:.4} ms, gap {:.2e}, {:.2} s",
                out.binaries, out.constraints, out.status, out.incumbent_ms, out.best_bound_ms, out.gap,
                t0.elapsed().as_secs_f64()
            );
        }
    });
}

/// Model size with the seed (printed once).
#[divan::bench(args = [(48, 6), (100, 8)], sample_count = 1, sample_size = 1)]
fn ilp_microlp_seeded_size(bencher: divan::Bencher, (n, p): (usize, usize)) {
    let (a, b) = (gpt1t(n, p), random(n, p));
    bencher.bench(|| {
        for (name, pb) in [("gpt1t", &a), ("random", &b)] {
            let out = partition::ilp(pb, &IlpOptions::default()).unwrap();
            eprintln!(
                "seeded {name} {n}x{p}: {} binaries, {} rows, status {}",
                out.binaries, out.constraints, out.status
            );
        }
    });
}
