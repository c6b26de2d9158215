//! Every generator over the whole grid p in 1..=8, m in 1..=32 (and v in 1..=4 where it
//! applies), with the validator, the papers' closed forms and the memory bounds as oracles.

use pplan::schedule::generators::{self, GenParams, ScheduleName};
use pplan::schedule::ir::{Kind, WeightUpdate};
use pplan::sim::{simulate, Costs, SimOptions, SimResult, UnitCosts};
use pplan::{validate, Schedule};

/// Divisible by every v in 1..=4 (and by 840 = lcm(1..=8)), so chunk times are exact.
const TF: u64 = 840_000;
const TB: u64 = 2 * 840_000;

fn run(schedule: &Schedule) -> SimResult {
    let costs = Costs::uniform(
        schedule.num_stages,
        schedule.num_devices(),
        UnitCosts {
            forward_ns: TF,
            backward_ns: TB,
            ..UnitCosts::default()
        },
    );
    simulate(
        schedule,
        &costs,
        SimOptions {
            record_timeline: false,
            max_events: None,
        },
    )
    .unwrap_or_else(|e| panic!("simulate failed: {e}"))
}

#[test]
fn gpipe_and_1f1b_match_the_closed_form() {
    for p in 1..=8u32 {
        for m in 1..=32u32 {
            for name in [ScheduleName::GPipe, ScheduleName::OneFOneB] {
                let s = generators::generate(name, GenParams::new(p, m)).unwrap();
                validate(&s).unwrap_or_else(|e| panic!("{name} p={p} m={m}: {e}"));
                let r = run(&s);
                let ideal = m as u64 * (TF + TB);
                // GPipe paper / Narayanan et al. 2021 eq. (1): (m + p - 1)(tf + tb).
                assert_eq!(
                    r.makespan_ns,
                    (m + p - 1) as u64 * (TF + TB),
                    "{name} p={p} m={m}"
                );
                // Bubble over ideal compute time: (p - 1) / m.
                let bubble = (r.makespan_ns - ideal) as f64 / ideal as f64;
                assert!((bubble - (p - 1) as f64 / m as f64).abs() < 1e-12);
                // The simulator's bubble_fraction is idle / (p × makespan) = (p-1)/(m+p-1).
                let expected = (p - 1) as f64 / (m + p - 1) as f64;
                assert!(
                    (r.bubble_fraction - expected).abs() < 1e-12,
                    "{name} p={p} m={m}"
                );
                for (i, d) in r.devices.iter().enumerate() {
                    let want = match name {
                        ScheduleName::GPipe => m,
                        _ => (p - i as u32).min(m),
                    };
                    assert_eq!(
                        d.peak_inflight_microbatches, want,
                        "{name} p={p} m={m} device {i}"
                    );
                    assert_eq!(d.peak_weight_versions, 1);
                    assert_eq!(d.busy_ns, ideal);
                }
            }
        }
    }
}

#[test]
fn interleaved_matches_megatron_when_p_divides_m_and_validates_otherwise() {
    for p in 1..=8u32 {
        for m in 1..=32u32 {
            for v in 1..=4u32 {
                let s = generators::generate(
                    ScheduleName::Interleaved1F1B,
                    GenParams::new(p, m).chunks(v),
                )
                .unwrap();
                validate(&s).unwrap_or_else(|e| panic!("interleaved p={p} m={m} v={v}: {e}"));
                let r = run(&s);
                let ideal = m as u64 * (TF + TB);
                assert!(r.makespan_ns >= ideal);
                if m % p == 0 {
                    // Narayanan et al. 2021, Sec. 2.2.2: bubble time (p-1)(tf+tb)/v.
                    let want = ideal + (p - 1) as u64 * (TF + TB) / v as u64;
                    assert_eq!(r.makespan_ns, want, "interleaved p={p} m={m} v={v}");
                    let bubble = (r.makespan_ns - ideal) as f64 / ideal as f64;
                    assert!((bubble - (p - 1) as f64 / (v * m) as f64).abs() < 1e-12);
                }
            }
        }
    }
}

#[test]
fn pipedream_keeps_one_weight_version_per_inflight_microbatch() {
    for p in 1..=8u32 {
        for m in 1..=32u32 {
            let steps = 3;
            let s =
                generators::generate(ScheduleName::PipeDream, GenParams::new(p, m).steps(steps))
                    .unwrap();
            assert!(matches!(s.weight_update, WeightUpdate::Stash { .. }));
            let r = run(&s);
            let total = m * steps;
            // Asynchronous 1F1B: no flush between mini-batches.
            assert_eq!(r.makespan_ns, (total + p - 1) as u64 * (TF + TB));
            for (i, d) in r.devices.iter().enumerate() {
                let inflight = (p - i as u32).min(total);
                assert_eq!(d.peak_inflight_microbatches, inflight);
                // PipeDream (Narayanan et al. 2019, Sec. 3.3): in steady state one stashed version
                // per in-flight micro-batch. Stage i's forward k follows max(0, k - w) updates
                // (w = p-1-i warm-up forwards), so the window of p-i in-flight micro-batches
                // holds distinct versions once total >= 2(p-i) - 1; before that, the warm-up
                // forwards share version 0.
                let i = i as u32;
                if total + 1 >= 2 * (p - i) {
                    assert_eq!(d.peak_weight_versions, inflight, "p={p} m={m} stage {i}");
                } else {
                    let w = p - 1 - i;
                    assert_eq!(
                        d.peak_weight_versions,
                        total.saturating_sub(w).max(1),
                        "p={p} m={m} stage {i}"
                    );
                }
            }
        }
    }
}

#[test]
fn pipedream_2bw_needs_at_most_two_weight_versions() {
    for p in 1..=8u32 {
        for m in p..=32u32 {
            let s = generators::generate(ScheduleName::PipeDream2BW, GenParams::new(p, m).steps(4))
                .unwrap();
            let r = run(&s);
            for d in &r.devices {
                assert!(d.peak_weight_versions <= 2, "p={p} m={m}: {d:?}");
            }
            if p > 1 {
                assert_eq!(r.devices[0].peak_weight_versions, 2, "p={p} m={m}");
            }
        }
    }
    let err = generators::generate(ScheduleName::PipeDream2BW, GenParams::new(4, 2)).unwrap_err();
    assert!(err.to_string().contains("m >= p"), "{err}");
}

#[test]
fn vertical_sync_holds_at_least_as_many_versions() {
    for p in 2..=6u32 {
        let mut params = GenParams::new(p, 8).steps(2);
        let plain = run(&generators::generate(ScheduleName::PipeDream, params).unwrap());
        params.vertical_sync = true;
        let vs = run(&generators::generate(ScheduleName::PipeDream, params).unwrap());
        assert_eq!(plain.makespan_ns, vs.makespan_ns);
        for (a, b) in plain.devices.iter().zip(&vs.devices) {
            assert!(b.peak_weight_versions >= a.peak_weight_versions);
        }
    }
}

#[test]
fn p2p_cost_adds_to_the_critical_path() {
    let s = generators::one_f_one_b(4, 8);
    let costs = Costs::uniform(
        4,
        4,
        UnitCosts {
            forward_ns: TF,
            backward_ns: TB,
            p2p_ns: 1000,
            ..UnitCosts::default()
        },
    );
    let r = simulate(&s, &costs, SimOptions::default()).unwrap();
    // The first forward and last backward each cross 3 links: at least 2 * 3 transfers on the
    // critical path beyond the zero-cost makespan.
    assert!(
        r.makespan_ns >= 11 * (TF + TB) + 6 * 1000,
        "{}",
        r.makespan_ns
    );
    let tl = r.timeline.unwrap();
    assert!(tl.spans.iter().any(|s| s.name() == "0SEND_F0"));
    assert!(tl.spans.iter().any(|s| s.name() == "1RECV_F0"));
    assert!(tl.spans.iter().any(|s| s.name() == "1SEND_B0"));
    assert!(tl.spans.iter().any(|s| s.name() == "0RECV_B0"));
}

#[test]
fn interleaved_peak_inflight_follows_the_warmup_count() {
    // Device r stashes its (v-1)·g + 2(p-1-r) warm-up forwards plus the first steady-state one,
    // where g is the first round's size (interleaved_rounds), capped at all v·m chunk-passes.
    for p in 1..=8u32 {
        for m in 1..=32u32 {
            for v in 1..=4u32 {
                let s = generators::interleaved_1f1b(p, m, v);
                let g = generators::interleaved_rounds(p, m)[0];
                let r = run(&s);
                for (i, d) in r.devices.iter().enumerate() {
                    let want = ((v - 1) * g + 2 * (p - 1 - i as u32) + 1).min(v * m);
                    assert_eq!(
                        d.peak_inflight_microbatches, want,
                        "p={p} m={m} v={v} device {i}"
                    );
                }
            }
        }
    }
}

/// Costs with a lone action (`pplan::sim::lone_actions`) one forward longer each way.
fn lone_costs(s: &Schedule, every_action_lone: bool) -> Costs {
    let unit = UnitCosts {
        forward_ns: TF,
        backward_ns: TB,
        ..UnitCosts::default()
    };
    let mut c = Costs::uniform(s.num_stages, s.num_devices(), unit);
    let extra = pplan::sim::StageCost {
        forward_ns: TF,
        backward_ns: TF,
        backward_input_ns: TF,
        ..Default::default()
    };
    if every_action_lone {
        for st in &mut c.stages {
            st.forward_ns += TF;
            st.backward_ns += TF;
            st.backward_input_ns += TF;
        }
    } else {
        c.unpaired_extra = vec![extra; s.num_stages as usize];
    }
    c
}

/// Forwards paired with other micro-batches' backwards (Megatron-Core's combined 1F1B):
/// 1F1B's warm-up forwards and cool-down backwards are the lone actions, as Megatron-Core
/// runs them (device d of p warms up with p - d - 1 forwards); charging only lone actions
/// the extra time lands between charging none and charging all, on every generated
/// schedule, which pairing never deadlocks (it changes durations only).
#[test]
fn lone_actions_are_1f1bs_warm_up_and_cool_down() {
    let (p, m) = (4u32, 8u32);
    let s = generators::generate(ScheduleName::OneFOneB, GenParams::new(p, m)).unwrap();
    let lone = pplan::sim::lone_actions(&s);
    for (d, l) in lone.iter().enumerate() {
        let n = l.iter().filter(|&&l| l).count();
        // The last device runs F and B of one micro-batch back to back: its first forward
        // is lone, then each backward pairs with the next micro-batch's forward.
        let want = if d + 1 == p as usize {
            2
        } else {
            2 * (p as usize - d - 1)
        };
        assert_eq!(n, want, "device {d}: {l:?}");
    }
    // DualPipeV says which pairs overlap: exactly its compounds' sub-actions are paired.
    let s = generators::generate(ScheduleName::DualPipeV, GenParams::new(4, 8)).unwrap();
    let paired: usize = pplan::sim::lone_actions(&s)
        .iter()
        .map(|l| l.iter().filter(|&&x| !x).count())
        .sum();
    let in_compounds: u32 = s.compounds.iter().map(|c| c.len).sum();
    assert!(in_compounds > 0);
    assert_eq!(paired, in_compounds as usize);
    for name in ScheduleName::ALL {
        for p in 1..=5u32 {
            for m in [1u32, 2, 4, 8] {
                for v in 1..=2u32 {
                    let Ok(s) = generators::generate(name, GenParams::new(p, m).chunks(v)) else {
                        continue;
                    };
                    let span =
                        |c: &Costs| simulate(&s, c, SimOptions::default()).unwrap().makespan_ns;
                    let (none, some, all) = (
                        run(&s).makespan_ns,
                        span(&lone_costs(&s, false)),
                        span(&lone_costs(&s, true)),
                    );
                    assert!(
                        none <= some && some <= all,
                        "{name} p={p} m={m} v={v}: {none} {some} {all}"
                    );
                }
            }
        }
    }
}

/// Megatron-Core's schedule table (`get_schedule_table` in
/// megatron/core/pipeline_parallel/schedules.py at d98e8a6), from its docstring: PP 2, N 3
/// (the micro-batch group), M 5, VP 2 runs its virtual micro-batches as
/// micro-batch 0 1 2 0 1 2 3 4 3 4 / model chunk 0 0 0 1 1 1 0 0 1 1.
#[test]
fn microbatch_groups_follow_megatron_cores_schedule_table() {
    assert_eq!(generators::interleaved_groups(5, 3), vec![3, 2]);
    let s = generators::generate(
        ScheduleName::Interleaved1F1B,
        GenParams::new(2, 5).chunks(2).group(Some(3)),
    )
    .unwrap();
    validate(&s).unwrap();
    let table: Vec<(u32, u32)> = [0, 1, 2, 0, 1, 2, 3, 4, 3, 4]
        .into_iter()
        .zip([0, 0, 0, 1, 1, 1, 0, 0, 1, 1])
        .collect();
    for r in 0..2u32 {
        let forwards: Vec<(u32, u32)> = s.devices[r as usize]
            .iter()
            .filter(|a| a.kind == Kind::F)
            .map(|a| (a.microbatch, a.stage / 2))
            .collect();
        assert_eq!(forwards, table, "device {r}");
        // Megatron-Core's warm-up: (pp - rank - 1) * 2 + (chunks - 1) * group forwards, then
        // the steady state's first forward, before the first backward.
        let before_first_backward = s.devices[r as usize]
            .iter()
            .take_while(|a| a.kind == Kind::F)
            .count();
        assert_eq!(
            before_first_backward as u32,
            (2 - r - 1) * 2 + 3 + 1,
            "device {r}"
        );
    }
}

/// Every group Megatron-Core accepts (p <= n <= m, the last group empty or at least p) gives
/// a schedule the validator passes and no faster than the ideal; every other is refused with
/// the smallest that holds. With n = p where p divides m it is Megatron-LM's default schedule.
#[test]
fn every_accepted_microbatch_group_runs_and_the_others_are_refused() {
    for p in 2..=6u32 {
        for m in 1..=20u32 {
            for n in 1..=21u32 {
                let g = GenParams::new(p, m).chunks(2).group(Some(n));
                let got = generators::generate(ScheduleName::Interleaved1F1B, g);
                let accepted = n >= p && n <= m && !(m % n > 0 && m % n < p);
                match got {
                    Ok(s) => {
                        assert!(accepted, "p={p} m={m} n={n} accepted");
                        validate(&s).unwrap_or_else(|e| panic!("p={p} m={m} n={n}: {e}"));
                        assert!(run(&s).makespan_ns >= m as u64 * (TF + TB));
                        if n == p && m % p == 0 {
                            let default = generators::interleaved_1f1b(p, m, 2);
                            assert_eq!(s.devices, default.devices, "p={p} m={m}");
                        }
                    }
                    Err(e) => {
                        assert!(!accepted, "p={p} m={m} n={n} refused: {e}");
                        let e = e.to_string();
                        assert!(e.contains(&format!("m = {m}")), "{e}");
                        match generators::smallest_group(p, m) {
                            Some(k) => assert!(
                                e.contains(&format!(
                                    "--microbatch-group-size-per-virtual-pipeline-stage {k} "
                                )),
                                "{e}"
                            ),
                            None => assert!(m < p && e.contains("at least p"), "{e}"),
                        }
                    }
                }
            }
        }
    }
}
