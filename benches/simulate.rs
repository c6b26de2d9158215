//! Simulated actions per second, and how the cost grows with the number of actions.
//!
//! Run: `cargo bench --bench simulate`. Each case reports items (= schedule actions) per
//! second. `baseline_walk` touches every action once and sums its cost: the floor any
//! simulator must pay; quote simulator figures as a ratio to it, since the machine is noisy.
//! `simulate` includes validation (every schedule is validated before it is simulated).

use divan::counter::ItemsCount;
use divan::Bencher;
use pplan::schedule::generators::{dualpipev, interleaved_1f1b, one_f_one_b};
use pplan::schedule::ir::Schedule;
use pplan::sim::{simulate, Costs, SimOptions, UnitCosts};

fn main() {
    divan::main();
}

fn costs(s: &Schedule) -> Costs {
    Costs::uniform(
        s.num_stages,
        s.num_devices(),
        UnitCosts {
            forward_ns: 1_000_000,
            backward_ns: 2_000_000,
            p2p_ns: 50_000,
            ..UnitCosts::default()
        },
    )
}

fn bench_sim(bencher: Bencher, s: Schedule, record_timeline: bool) {
    let c = costs(&s);
    let n = s.num_actions();
    let opts = SimOptions {
        record_timeline,
        max_events: None,
    };
    bencher.counter(ItemsCount::new(n)).bench(|| {
        simulate(divan::black_box(&s), &c, opts)
            .unwrap()
            .makespan_ns
    });
}

/// 1F1B at p = 64, m = 1024 (131,072 actions).
#[divan::bench(sample_count = 20)]
fn one_f_one_b_p64_m1024(bencher: Bencher) {
    bench_sim(bencher, one_f_one_b(64, 1024), false);
}

/// Interleaved 1F1B at p = 64, v = 4, m = 1024 (524,288 actions).
#[divan::bench(sample_count = 10)]
fn interleaved_p64_v4_m1024(bencher: Bencher) {
    bench_sim(bencher, interleaved_1f1b(64, 1024, 4), false);
}

/// DualPipeV at p = 64, m = 1024 with its OVERLAP_F_B compounds (each pair starts when both
/// inputs are there), and the same order with the compounds dropped: the cost of compounds.
#[divan::bench(sample_count = 10)]
fn dualpipev_p64_m1024(bencher: Bencher) {
    bench_sim(bencher, dualpipev(64, 1024), false);
}

#[divan::bench(sample_count = 10)]
fn dualpipev_apart_p64_m1024(bencher: Bencher) {
    let mut s = dualpipev(64, 1024);
    s.compounds.clear();
    bench_sim(bencher, s, false);
}

/// The same with every span kept for Gantt charts and traces.
#[divan::bench(sample_count = 20)]
fn one_f_one_b_p64_m1024_with_timeline(bencher: Bencher) {
    bench_sim(bencher, one_f_one_b(64, 1024), true);
}

/// Growth with size: 1F1B at p = 64 and m = 128 … 8192 (16 K … 1 M actions).
#[divan::bench(args = [128, 512, 2048, 8192], sample_count = 10)]
fn scaling_1f1b_p64(bencher: Bencher, m: u32) {
    bench_sim(bencher, one_f_one_b(64, m), false);
}

/// Baseline: one pass over the actions summing their costs.
#[divan::bench(sample_count = 20)]
fn baseline_walk_p64_m1024(bencher: Bencher) {
    let s = one_f_one_b(64, 1024);
    let c = costs(&s);
    bencher.counter(ItemsCount::new(s.num_actions())).bench(|| {
        let mut total = 0u64;
        for list in divan::black_box(&s).devices.iter() {
            for a in list {
                total += c.stages[a.stage as usize].duration_ns(a.kind);
            }
        }
        total
    });
}
