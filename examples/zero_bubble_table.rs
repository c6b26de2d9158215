//! Prints the tables of `docs/zero-bubble.md`: the zero-bubble paper's bubble rates next to
//! pplan's simulated ones, and a timed schedule search.
//!
//! Run: `cargo run --release --example zero_bubble_table`

use pplan::plan::schedule_search::{paper_bubble_rate, search, SearchParams};
use pplan::schedule::generators::{generate, GenParams, ScheduleName};
use pplan::sim::{simulate, Costs, SimOptions, UnitCosts};
use std::time::Instant;

const T: u64 = 840_000;

fn main() {
    println!("| p | m | schedule | paper's bubble rate (formula) | paper value | pplan paper-style | pplan wall-clock bubble_fraction | peak in flight |");
    println!("|---|---|---|---|---|---|---|---|");
    for (p, m) in [(4u32, 8u32), (4, 16), (8, 16), (8, 32), (8, 64)] {
        let (pf, mf) = (p as f64, m as f64);
        let rows: [(ScheduleName, &str, f64); 4] = [
            (
                ScheduleName::OneFOneB,
                "(p-1)/(m+p-1)",
                (pf - 1.0) / (mf + pf - 1.0),
            ),
            (
                ScheduleName::ZbH1,
                "(p-1)/(3(m+p-1))",
                (pf - 1.0) / (3.0 * (mf + pf - 1.0)),
            ),
            (ScheduleName::ZbH2, "0", 0.0),
            (ScheduleName::ZbV, "0", 0.0),
        ];
        for (name, formula, value) in rows {
            let s = generate(name, GenParams::new(p, m)).unwrap();
            let costs = Costs::uniform(
                s.num_stages,
                p,
                UnitCosts {
                    forward_ns: T,
                    backward_ns: 2 * T,
                    backward_input_ns: Some(T),
                    backward_weight_ns: Some(T),
                    p2p_ns: 0,
                },
            );
            let r = simulate(&s, &costs, SimOptions::default()).unwrap();
            let peak = r
                .devices
                .iter()
                .map(|d| d.peak_inflight_microbatches)
                .max()
                .unwrap();
            let peak = if s.chunks() == 2 {
                format!("{} chunks = {} micro-batches", peak, peak as f64 / 2.0)
            } else {
                format!("{peak}")
            };
            println!(
                "| {p} | {m} | {name} | {formula} | {value:.4} | {:.4} | {:.4} | {peak} |",
                paper_bubble_rate(&r).unwrap(),
                r.bubble_fraction
            );
        }
    }
    println!();
    println!("| costs F/I/W/comm (ns) | limit | ZB-H1 | ZB-H2 | search | constructed | moves kept/improving | search time |");
    println!("|---|---|---|---|---|---|---|---|");
    for (f, i, w, c) in [
        (1000u64, 1000u64, 1000u64, 0u64),
        (1000, 1000, 500, 50),
        (1000, 1200, 800, 100),
        (1000, 1000, 1000, 200),
    ] {
        for limit in [4u32, 7] {
            let mut params = SearchParams::new(4, 8, f, i, w);
            params.p2p_ns = c;
            params.memory_limit = limit;
            let t0 = Instant::now();
            let r = search(&params).unwrap();
            let elapsed = t0.elapsed();
            let time = |name| {
                let s = generate(name, GenParams::new(4, 8)).unwrap();
                simulate(&s, &params.costs(), SimOptions::default())
                    .unwrap()
                    .makespan_ns
            };
            println!(
                "| {f}/{i}/{w}/{c} | {limit} | {} | {} | {} | {} | {}/{} | {:.1} ms |",
                time(ScheduleName::ZbH1),
                time(ScheduleName::ZbH2),
                r.makespan_ns,
                r.constructed_makespan_ns,
                r.moves_kept,
                r.moves_improving,
                elapsed.as_secs_f64() * 1e3
            );
        }
    }
    let mut big = SearchParams::new(8, 32, 1000, 1000, 500);
    big.p2p_ns = 50;
    big.memory_limit = 8;
    let t0 = Instant::now();
    let r = search(&big).unwrap();
    println!(
        "\np=8 m=32 F/I/W/comm 1000/1000/500/50 limit 8: makespan {} (constructed {}), {:.1} ms",
        r.makespan_ns,
        r.constructed_makespan_ns,
        t0.elapsed().as_secs_f64() * 1e3
    );
}
