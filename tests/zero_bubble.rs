//! Zero-bubble and DualPipe schedules (issue #6): every generator over p in 2..=8 and
//! m in 1..=32 with the validator, the simulator and the zero-bubble paper's analysis as oracles
//! (Qi et al. 2024, "Zero Bubble Pipeline Parallelism", Sec. 2: with F = I = W, 1F1B's bubble is
//! (p-1)(F+B+W) = 3(p-1)F with B = I, ZB-H1's is (p-1)(F+B-W) = (p-1)F, ZB-H2's tends to zero).

use pplan::plan::schedule_search::{self, paper_bubble_rate, SearchParams};
use pplan::schedule::csv;
use pplan::schedule::generators::{self, GenError, GenParams, ScheduleName};
use pplan::schedule::ir::{Kind, Placement};
use pplan::sim::{simulate, Costs, SimOptions, SimResult, Stream, UnitCosts};
use pplan::{validate, Schedule};

/// One forward of a device's whole share; divisible by 2 (ZB-V chunks) and by 840.
const T: u64 = 840_000;

/// F = I = W = T per device and free communication, the paper's assumption for its
/// handcrafted schedules. Full backwards (1F1B, B actions of DualPipeV) take I + W = 2T.
fn equal_costs(s: &Schedule) -> Costs {
    Costs::uniform(
        s.num_stages,
        s.num_devices(),
        UnitCosts {
            forward_ns: T,
            backward_ns: 2 * T,
            backward_input_ns: Some(T),
            backward_weight_ns: Some(T),
            p2p_ns: 0,
        },
    )
}

fn run(s: &Schedule) -> SimResult {
    simulate(s, &equal_costs(s), SimOptions::default())
        .unwrap_or_else(|e| panic!("simulate failed: {e}"))
}

fn peak(r: &SimResult) -> u32 {
    r.devices
        .iter()
        .map(|d| d.peak_inflight_microbatches)
        .max()
        .unwrap()
}

fn gen(name: ScheduleName, p: u32, m: u32, v: u32) -> Result<Schedule, GenError> {
    generators::generate(name, GenParams::new(p, m).chunks(v))
}

const NEW: [ScheduleName; 5] = [
    ScheduleName::ZbH1,
    ScheduleName::ZbH2,
    ScheduleName::ZbV,
    ScheduleName::DualPipeV,
    ScheduleName::LoopedBfs,
];

#[test]
fn every_new_schedule_validates_and_simulates_on_the_grid() {
    for p in 2..=8u32 {
        for m in 1..=32u32 {
            for name in NEW {
                let chunk_choices: &[u32] = match name {
                    ScheduleName::LoopedBfs => &[1, 2, 3],
                    ScheduleName::ZbV | ScheduleName::DualPipeV => &[1, 2],
                    _ => &[1],
                };
                for &v in chunk_choices {
                    let s = match gen(name, p, m, v) {
                        Ok(s) => s,
                        Err(GenError::DualPipeTooFewMicrobatches { .. })
                            if name == ScheduleName::DualPipeV && m < 2 * p =>
                        {
                            continue
                        }
                        Err(e) => panic!("{name} p={p} m={m} v={v}: {e}"),
                    };
                    validate(&s).unwrap_or_else(|e| panic!("{name} p={p} m={m} v={v}: {e}"));
                    assert_eq!(s.placement, name.placement(), "{name}");
                    let want_v = name.fixed_chunks().unwrap_or(v);
                    assert_eq!(s.num_stages, p * want_v, "{name} p={p} m={m} v={v}");
                    let r = run(&s);
                    // Every device does its share of the work exactly once.
                    for d in &r.devices {
                        assert_eq!(d.busy_ns, 3 * m as u64 * T, "{name} p={p} m={m}");
                    }
                    assert_eq!(
                        generators::uses_split_backward(&s),
                        name.splits_backward(),
                        "{name}"
                    );
                }
            }
        }
    }
}

#[test]
fn zb_h1_bubble_is_one_third_of_1f1b_at_equal_peak_memory() {
    for p in 2..=8u32 {
        for m in 1..=32u32 {
            let one = run(&gen(ScheduleName::OneFOneB, p, m, 1).unwrap());
            let zb = run(&gen(ScheduleName::ZbH1, p, m, 1).unwrap());
            let ideal = 3 * m as u64 * T;
            let bubble_1f1b = one.makespan_ns - ideal;
            let bubble_zb = zb.makespan_ns - ideal;
            // 1F1B: (p-1)(F+B+W) = 3(p-1)T (Narayanan et al. 2021 eq. 1 with B+W = 2T).
            assert_eq!(bubble_1f1b, 3 * (p as u64 - 1) * T);
            // Same peak in-flight on the busiest device: min(p, m) micro-batches.
            assert_eq!(peak(&zb), peak(&one), "p={p} m={m}");
            assert_eq!(peak(&zb), p.min(m));
            if m >= p {
                // Qi et al. 2024 Sec. 2.1: (p-1)(F+B-W) = (p-1)T, exactly one third.
                assert_eq!(bubble_zb, (p as u64 - 1) * T, "p={p} m={m}");
                assert_eq!(3 * bubble_zb, bubble_1f1b);
            } else {
                // Fewer micro-batches than devices: no steady state; still no slower.
                assert!(bubble_zb <= bubble_1f1b, "p={p} m={m}");
            }
        }
    }
}

#[test]
fn zb_h2_bubble_vanishes_as_m_grows() {
    for p in 2..=8u32 {
        let mut last = f64::INFINITY;
        for m in 1..=32u32 {
            let r = run(&gen(ScheduleName::ZbH2, p, m, 1).unwrap());
            // ZB-H2 keeps at most 2p-1 micro-batches in flight (Qi et al. 2024 Sec. 2.2).
            assert!(peak(&r) < 2 * p, "p={p} m={m}");
            let ideal = 3 * m as u64 * T;
            if m >= 2 * p - 1 {
                // The paper's bubble (longest per-device span against its busy time) is zero
                // once the 2p-1 warm-up forwards exist.
                assert_eq!(paper_bubble_rate(&r), Some(0.0), "p={p} m={m}");
            }
            if m >= p {
                // Wall clock only keeps the unavoidable diagonal (p-1)F of the first forward:
                // bubble_fraction = (p-1) / (3m + p-1), which tends to 0 as m grows.
                assert_eq!(r.makespan_ns, ideal + (p as u64 - 1) * T, "p={p} m={m}");
                let want = (p - 1) as f64 / (3 * m + p - 1) as f64;
                assert!((r.bubble_fraction - want).abs() < 1e-12);
            }
            assert!(r.bubble_fraction <= last + 1e-12, "p={p} m={m}");
            last = r.bubble_fraction;
        }
        assert!(last < 0.07, "p={p}: {last}");
    }
}

#[test]
fn zbv_has_zero_paper_bubble_at_1f1b_memory() {
    for p in 2..=8u32 {
        for m in 1..=32u32 {
            let s = gen(ScheduleName::ZbV, p, m, 2).unwrap();
            assert_eq!(s.placement, Placement::V);
            let r = run(&s);
            // Units are chunks (half a device's share): 2p chunks = p micro-batches, 1F1B's peak.
            assert!(peak(&r) <= 2 * p, "p={p} m={m}: {}", peak(&r));
            if m >= 2 * p - 1 {
                assert_eq!(paper_bubble_rate(&r), Some(0.0), "p={p} m={m}");
                // The only wall-clock bubble is the first chunk's diagonal: (p-1)·F/2.
                let want = 3 * m as u64 * T + (p as u64 - 1) * T / 2;
                assert_eq!(r.makespan_ns, want, "p={p} m={m}");
            }
        }
    }
}

#[test]
fn chunk_rules() {
    for name in [ScheduleName::ZbV, ScheduleName::DualPipeV] {
        assert_eq!(gen(name, 4, 8, 1).unwrap().num_stages, 8);
        assert_eq!(gen(name, 4, 8, 2).unwrap().num_stages, 8);
        let err = gen(name, 4, 8, 3).unwrap_err();
        assert!(err.to_string().contains("--chunks must be 2"), "{err}");
    }
    for name in [ScheduleName::ZbH1, ScheduleName::ZbH2] {
        let err = gen(name, 4, 8, 2).unwrap_err();
        assert!(matches!(err, GenError::ChunksUnsupported { .. }), "{err}");
    }
    assert_eq!(
        gen(ScheduleName::LoopedBfs, 4, 8, 3).unwrap().num_stages,
        12
    );
    let err = gen(ScheduleName::DualPipeV, 4, 7, 2).unwrap_err();
    assert!(err.to_string().contains("m >= 2p"), "{err}");
    for name in ["zb-h1", "zb-h2", "zbv", "dualpipev", "looped-bfs"] {
        assert_eq!(name.parse::<ScheduleName>().unwrap().as_str(), name);
    }
}

#[test]
fn looped_bfs_matches_gpipe_time_and_stashes_everything() {
    for p in 2..=8u32 {
        for m in 1..=32u32 {
            for v in 1..=3u32 {
                let r = run(&gen(ScheduleName::LoopedBfs, p, m, v).unwrap());
                for d in &r.devices {
                    assert_eq!(d.peak_inflight_microbatches, m * v);
                }
                if v == 1 {
                    assert_eq!(r.makespan_ns, (m + p - 1) as u64 * 3 * T, "p={p} m={m}");
                }
            }
        }
    }
}

#[test]
fn split_backward_costs_time_i_and_w() {
    let s = generators::zb_h1(4, 8);
    let costs = Costs::uniform(
        4,
        4,
        UnitCosts {
            forward_ns: 100,
            backward_ns: 0,
            backward_input_ns: Some(70),
            backward_weight_ns: Some(30),
            p2p_ns: 5,
        },
    );
    let r = simulate(&s, &costs, SimOptions::default()).unwrap();
    let tl = r.timeline.unwrap();
    for span in tl.spans.iter().filter(|s| s.stream == Stream::Compute) {
        let want = match span.action.kind {
            Kind::F => 100,
            Kind::I => 70,
            Kind::W => 30,
            Kind::B => unreachable!("zb-h1 splits every backward"),
        };
        assert_eq!(span.end_ns - span.start_ns, want, "{}", span.action);
    }
    // A delayed W keeps its micro-batch in flight: device 3 delays W by 3, so it holds 4.
    assert_eq!(r.devices[3].peak_inflight_microbatches, 4);
}

fn all_generated() -> Vec<(String, Schedule)> {
    let mut out = Vec::new();
    for name in ScheduleName::ALL {
        for (p, m) in [(1, 1), (2, 3), (3, 8), (4, 8), (4, 9)] {
            for v in 1..=3 {
                if let Ok(s) = generators::generate(name, GenParams::new(p, m).chunks(v).steps(2)) {
                    out.push((format!("{name} p={p} m={m} v={v}"), s));
                }
            }
        }
    }
    out
}

#[test]
fn every_generator_round_trips_through_both_csv_writers() {
    let all = all_generated();
    assert!(all.len() > 40);
    for (label, s) in all {
        for text in [csv::write(&s), csv::write_torch(&s)] {
            let back = csv::parse(&text, s.placement).unwrap_or_else(|e| panic!("{label}: {e}"));
            assert_eq!(back.devices, s.devices, "{label}");
            assert_eq!(back.num_stages, s.num_stages, "{label}");
            assert_eq!(back.num_microbatches, s.num_microbatches, "{label}");
            assert_eq!(back.placement, s.placement, "{label}");
        }
        let torch = csv::write_torch(&s);
        assert!(
            torch.ends_with("\r\n") && !torch.contains("\n\n"),
            "{label}"
        );
        assert_eq!(torch.matches("\r\n").count(), s.devices.len(), "{label}");
    }
}

fn fixture(name: &str, placement: Placement) -> Schedule {
    let path = format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap();
    let s = csv::parse_bytes(&bytes, placement).unwrap_or_else(|e| panic!("{name}: {e}"));
    validate(&s).unwrap_or_else(|e| panic!("{name}: {e}"));
    run(&s);
    s
}

/// Files written by hand in PyTorch's `_dump_csv` format (CRLF, `None` as an empty field)
/// from a reading of its generators, for the same (p, m, v) as ours. (The ZBV and DualPipeV
/// ones are byte for byte what torch 2.15.0 dumps: see `tests/data/pytorch/`.)
#[test]
fn pytorch_schedule_files_are_read_validated_and_simulated() {
    // ScheduleZBVZeroBubble, 2 ranks, 2 micro-batches: built for 3 micro-batches, the third's
    // actions left as empty fields, rank 1 padded with one leading idle slot.
    let zbv = fixture("torch-zbv-p2-m2.csv", Placement::V);
    assert_eq!(
        zbv,
        generators::generate(ScheduleName::ZbV, GenParams::new(2, 2)).unwrap()
    );
    // ScheduleLoopedBFS, 2 ranks, 2 stages each, 2 micro-batches (loop placement).
    let bfs = fixture("torch-looped-bfs-p2-v2-m2.csv", Placement::Loop);
    assert_eq!(bfs, generators::looped_bfs(2, 2, 2));
    // ScheduleDualPipeV, 2 ranks, 4 micro-batches, with compound OVERLAP_F_B actions: the same
    // order and the same six compounds as the generator's.
    let dual = fixture("torch-dualpipev-p2-m4.csv", Placement::V);
    assert_eq!(dual.compounds.len(), 6);
    assert_eq!(dual, generators::dualpipev(2, 4));
    // A lowered compute_comms file (Schedule1F1B-like order): communication is dropped.
    let lowered = fixture("torch-1f1b-p2-m2-compute-comms.csv", Placement::Loop);
    assert_eq!(lowered, generators::one_f_one_b(2, 2));
    // Reading a V-placed file with loop placement puts stages on the wrong devices.
    let text = std::fs::read_to_string(format!(
        "{}/tests/data/torch-zbv-p2-m2.csv",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let wrong = csv::parse(&text, Placement::Loop).unwrap();
    assert!(validate(&wrong).is_err());
}

/// Unit costs as PyTorch's schedule simulator counts them: every chunk's F, I and W take one
/// step, a full backward B two, communication nothing.
fn torch_unit_costs(s: &Schedule) -> Costs {
    let v = s.chunks() as u64;
    Costs::uniform(
        s.num_stages,
        s.num_devices(),
        UnitCosts {
            forward_ns: v,
            backward_ns: 2 * v,
            backward_input_ns: Some(v),
            backward_weight_ns: Some(v),
            p2p_ns: 0,
        },
    )
}

/// Schedules dumped by PyTorch itself (torch 2.15.0, `tests/data/dump_torch_schedules.py`),
/// every schedule class it has, each replayed with PyTorch's unit costs: the makespan must be
/// the one PyTorch's own simulator (`_schedule_visualizer.add_schedule_op_spacing`) gives,
/// recorded by the script in `tests/data/pytorch/makespans.csv`.
#[test]
fn pytorch_dumps_replay_to_pytorchs_makespan() {
    let dir = format!("{}/tests/data/pytorch", env!("CARGO_MANIFEST_DIR"));
    let manifest = std::fs::read_to_string(format!("{dir}/makespans.csv")).unwrap();
    let mut classes = std::collections::BTreeSet::new();
    let mut checked = 0;
    let mut generated = 0;
    for line in manifest.lines().filter(|l| !l.starts_with('#')).skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let [file, class, p, m, v, placement, want] = f[..] else {
            panic!("bad manifest line {line}");
        };
        classes.insert(class);
        let text = std::fs::read_to_string(format!("{dir}/{file}")).unwrap();
        assert!(text.ends_with("\r\n"), "{file}: PyTorch writes CRLF");
        let s = csv::parse(&text, placement.parse().unwrap()).unwrap();
        assert_eq!(s.num_devices().to_string(), p, "{file}");
        if want == "deadlock" {
            // Schedule1F1B's order numbers the last rank's forwards 1..=m (it never runs
            // forward 0): PyTorch's simulator stops with "no progress", pplan rejects it.
            let err = validate(&s).unwrap_err().to_string();
            assert!(err.contains("missing action"), "{file}: {err}");
            continue;
        }
        assert_eq!(s.num_microbatches.to_string(), m, "{file}");
        assert_eq!(s.chunks().to_string(), v, "{file}");
        validate(&s).unwrap_or_else(|e| panic!("{file}: {e}"));
        // pplan's generator of the same class builds PyTorch's order, compounds included.
        let (pn, mn, vn): (u32, u32, u32) =
            (p.parse().unwrap(), m.parse().unwrap(), v.parse().unwrap());
        let ours = match class {
            "DualPipeV" => Some(generators::dualpipev(pn, mn)),
            "ZBVZeroBubble" => Some(generators::zbv(pn, mn)),
            "LoopedBFS" => Some(generators::looped_bfs(pn, mn, vn)),
            _ => None,
        };
        if let Some(ours) = ours {
            assert_eq!(
                s, ours,
                "{file}: pplan's {class} order differs from PyTorch's"
            );
            generated += 1;
        }
        let r = simulate(&s, &torch_unit_costs(&s), SimOptions::default()).unwrap();
        assert_eq!(
            r.makespan_ns.to_string(),
            want,
            "{file} ({class} p={p} m={m} v={v})"
        );
        // Where the dump has no idle slots and no non-compute entries, pplan writes it back
        // byte for byte, compounds included.
        if !text.contains(",,") && !text.contains("\n,") && !text.contains("GRAD") {
            assert_eq!(csv::write_torch(&s), text, "{file}");
        }
        checked += 1;
    }
    assert_eq!(checked, 23);
    assert_eq!(generated, 13);
    let want = [
        "1F1B",
        "DualPipeV",
        "GPipe",
        "Interleaved1F1B",
        "InterleavedZeroBubble",
        "LoopedBFS",
        "ZBVZeroBubble",
    ];
    assert_eq!(classes.into_iter().collect::<Vec<_>>(), want);
}

/// The case: DualPipeV p = 2, m = 4 takes 26 steps in PyTorch. Its compound
/// `(3F2;0B0)OVERLAP_F_B` on device 0 waits for 0B0's gradient although 3F2 could start a step
/// earlier; timed apart (the compounds dropped, `--overlap-f-b apart`) the same order takes 25.
#[test]
fn dualpipev_compounds_start_together() {
    let text = std::fs::read_to_string(format!(
        "{}/tests/data/pytorch/DualPipeV-p2-m4-v2.csv",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let mut s = csv::parse(&text, Placement::V).unwrap();
    let together = simulate(&s, &torch_unit_costs(&s), SimOptions::default()).unwrap();
    assert_eq!(together.makespan_ns, 26);
    let spans = together.timeline.unwrap().spans;
    let start = |name: &str| {
        spans
            .iter()
            .find(|x| x.stream == Stream::Compute && x.action.to_string() == name)
            .map(|x| (x.start_ns, x.end_ns))
            .unwrap()
    };
    // Device 0 is free at 10 (after 3B1) and 3F2's activation has been there since 9, but the
    // compound also waits for 0B0's gradient, which 1B0 sends at 11; 0B0 runs right after 3F2.
    assert_eq!(start("3B1"), (8, 10));
    assert_eq!(start("2F2"), (8, 9));
    assert_eq!(start("1B0"), (9, 11));
    assert_eq!(start("3F2"), (11, 12));
    assert_eq!(start("0B0"), (12, 14));
    s.compounds.clear();
    let apart = simulate(&s, &torch_unit_costs(&s), SimOptions::default()).unwrap();
    assert_eq!(apart.makespan_ns, 25);
}

/// The zero-bubble paper's handcrafted setting (F = I = W, Sec. 2) and two unequal ones with
/// communication, p = 4, m = 8: the search must match or beat ZB-H1 at ZB-H1's memory (p).
#[test]
fn search_is_no_slower_than_zb_h1_within_its_memory() {
    let zb = generators::zb_h1(4, 8);
    for (f, i, w, comm) in [
        (1000, 1000, 1000, 0),
        (1000, 1000, 500, 50),
        (1000, 1200, 800, 100),
        (1000, 1000, 1000, 200),
    ] {
        let mut params = SearchParams::new(4, 8, f, i, w);
        params.p2p_ns = comm;
        params.iterations = 1500;
        let found = schedule_search::search(&params).unwrap();
        validate(&found.schedule).unwrap();
        let zb_r = simulate(&zb, &params.costs(), SimOptions::default()).unwrap();
        assert!(
            found.makespan_ns <= zb_r.makespan_ns,
            "{f}/{i}/{w}/{comm}: {} > {}",
            found.makespan_ns,
            zb_r.makespan_ns
        );
        assert!(found.peak_inflight_microbatches <= 4);
        assert!(found.makespan_ns <= found.constructed_makespan_ns);
        // The judge agrees with the reported figure.
        let again = simulate(&found.schedule, &params.costs(), SimOptions::default()).unwrap();
        assert_eq!(again.makespan_ns, found.makespan_ns);
        // With more memory it reaches ZB-H2's time or better.
        params.memory_limit = 7;
        let roomy = schedule_search::search(&params).unwrap();
        let h2 = simulate(
            &generators::zb_h2(4, 8),
            &params.costs(),
            SimOptions::default(),
        )
        .unwrap();
        assert!(roomy.makespan_ns <= h2.makespan_ns);
        assert!(roomy.peak_inflight_microbatches <= 7);
    }
}

#[test]
fn search_is_deterministic_and_reports_bad_input() {
    let mut params = SearchParams::new(3, 6, 1000, 900, 400);
    params.p2p_ns = 30;
    params.seed = 42;
    params.iterations = 500;
    let a = schedule_search::search(&params).unwrap();
    let b = schedule_search::search(&params).unwrap();
    assert_eq!(a, b);
    params.memory_limit = 1;
    let tight = schedule_search::search(&params).unwrap();
    assert_eq!(tight.peak_inflight_microbatches, 1);
    params.memory_limit = 0;
    let err = schedule_search::search(&params).unwrap_err();
    assert!(err.to_string().contains("--memory-limit"), "{err}");
}

/// The bundled files under `schedules/` are what the generators write (LF, pplan's `write`).
/// `PPLAN_BLESS=1 cargo test --test zero_bubble bundled` rewrites them.
#[test]
fn bundled_schedule_files_match_the_generators() {
    let files = [
        ("zb-h1-p4-m8.csv", ScheduleName::ZbH1, 1, Placement::Loop),
        ("zb-h2-p4-m8.csv", ScheduleName::ZbH2, 1, Placement::Loop),
        ("zbv-p4-m8.csv", ScheduleName::ZbV, 2, Placement::V),
        (
            "dualpipev-p4-m8.csv",
            ScheduleName::DualPipeV,
            2,
            Placement::V,
        ),
        (
            "looped-bfs-p4-m8-v2.csv",
            ScheduleName::LoopedBfs,
            2,
            Placement::Loop,
        ),
    ];
    for (file, name, v, placement) in files {
        let path = format!("{}/schedules/{file}", env!("CARGO_MANIFEST_DIR"));
        let s = gen(name, 4, 8, v).unwrap();
        let text = csv::write(&s);
        if std::env::var_os("PPLAN_BLESS").is_some() {
            std::fs::write(&path, &text).unwrap();
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(on_disk, text, "{file} is stale; rerun with PPLAN_BLESS=1");
        assert_eq!(csv::parse(&on_disk, placement).unwrap(), s, "{file}");
    }
}
