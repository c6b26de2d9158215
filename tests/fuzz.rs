//! Randomised tests: the parser, validator and simulator never panic, and the validator's
//! liveness verdict agrees with what the simulator does. proptest prints the failing input
//! (and persists its seed) on failure.

use pplan::schedule::ir::{Action, Compound, Kind, Placement, Schedule, WeightUpdate};
use pplan::schedule::validate;
use pplan::schedule::{csv, generators};
use pplan::sim::{simulate, Costs, SimError, SimOptions, UnitCosts};
use proptest::prelude::*;

fn costs_for(s: &Schedule, p2p_ns: u64) -> Costs {
    Costs::uniform(
        s.num_stages,
        s.num_devices(),
        UnitCosts {
            forward_ns: 3,
            backward_ns: 5,
            p2p_ns,
            ..UnitCosts::default()
        },
    )
}

fn options() -> SimOptions {
    SimOptions {
        record_timeline: false,
        max_events: None,
    }
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![Just(Kind::F), Just(Kind::B), Just(Kind::I), Just(Kind::W)]
}

/// A loop-placed schedule of two chunks per device and two micro-batches from random
/// (chunk, kind, micro-batch) lists, one list per device.
fn two_chunk_schedule(lists: &[Vec<(u32, Kind, u32)>], compounds: Vec<Compound>) -> Schedule {
    let p = lists.len() as u32;
    let devices: Vec<Vec<Action>> = lists
        .iter()
        .enumerate()
        .map(|(d, l)| {
            l.iter()
                .map(|&(c, k, mb)| Action::new(c * p + d as u32, k, mb))
                .collect()
        })
        .collect();
    Schedule {
        devices,
        num_stages: 2 * p,
        num_microbatches: 2,
        placement: Placement::Loop,
        weight_update: WeightUpdate::Flush,
        microbatches_per_step: 2,
        compounds,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(s) = csv::parse_bytes(&bytes, Placement::Loop) {
            if validate(&s).is_ok() {
                let _ = simulate(&s, &costs_for(&s, 1), options());
            }
        }
    }

    #[test]
    fn random_action_text_never_panics(fields in proptest::collection::vec("[0-9]{0,3}(F|B|I|W|SEND_F|RECV_B|REDUCE_GRAD|X|)[0-9]{0,3}|\\(0F1;1B0\\)OVERLAP_F_B|", 0..20),
                                       rows in 1usize..4) {
        let mut text = String::new();
        for (i, f) in fields.iter().enumerate() {
            text.push_str(f);
            text.push(if i % rows == rows - 1 { '\n' } else { ',' });
        }
        for placement in [Placement::Loop, Placement::V] {
            if let Ok(s) = csv::parse(&text, placement) {
                let _ = validate(&s);
            }
        }
    }

    /// Random action lists: the validator's verdict must match the simulator's behaviour.
    #[test]
    fn validator_agrees_with_simulator(
        lists in proptest::collection::vec(
            proptest::collection::vec((0u32..4, kind(), 0u32..3), 0..12), 1..4),
        p2p in 0u64..3,
    ) {
        let s = two_chunk_schedule(&lists, Vec::new());
        match (validate(&s), simulate(&s, &costs_for(&s, p2p), options())) {
            (Ok(()), Ok(_)) => {}
            (Err(e), Err(SimError::Invalid(e2))) => prop_assert_eq!(e, e2),
            (v, r) => prop_assert!(false, "validator {:?} but simulator {:?}", v, r.map(|r| r.makespan_ns)),
        }
    }

    /// The same with compound actions (PyTorch's OVERLAP_F_B) over random pairs of
    /// neighbouring actions: a compound starts only when all its sub-actions can, in the
    /// validator's liveness check and in the simulator alike.
    #[test]
    fn validator_agrees_with_simulator_on_compounds(
        lists in proptest::collection::vec(
            proptest::collection::vec((0u32..2, kind(), 0u32..2), 0..10), 1..4),
        pairs in any::<u64>(),
        p2p in 0u64..3,
    ) {
        let mut compounds = Vec::new();
        for (d, list) in lists.iter().enumerate() {
            let mut i = 0;
            while i + 1 < list.len() {
                if pairs >> ((d * 10 + i) % 64) & 1 == 1 {
                    compounds.push(Compound { device: d as u32, first: i as u32, len: 2 });
                    i += 2;
                } else {
                    i += 1;
                }
            }
        }
        let s = two_chunk_schedule(&lists, compounds);
        match (validate(&s), simulate(&s, &costs_for(&s, p2p), options())) {
            (Ok(()), Ok(_)) => {}
            (Err(e), Err(SimError::Invalid(e2))) => prop_assert_eq!(e, e2),
            (v, r) => prop_assert!(false, "validator {:?} but simulator {:?}", v, r.map(|r| r.makespan_ns)),
        }
    }

    /// Valid ZB-V and interleaved orders, sometimes with a neighbouring pair swapped, and random
    /// pairs made into compounds: about a fifth stay live, the rest deadlock (mostly because a
    /// compound pairs dependent actions); the validator and the simulator must say the same.
    #[test]
    fn compounds_on_real_orders(p in 1u32..5, m in 1u32..7, zbv in any::<bool>(), seed in any::<u64>()) {
        let mut s = if zbv {
            generators::zbv(p, m)
        } else {
            generators::generate(generators::ScheduleName::Interleaved1F1B, generators::GenParams::new(p, m).chunks(2)).unwrap()
        };
        let mut x = seed | 1;
        let mut next = || { x ^= x << 13; x ^= x >> 7; x ^= x << 17; x };
        for list in &mut s.devices {
            for _ in 0..1 {
                if list.len() > 1 && next() % 2 == 0 {
                    let i = (next() % (list.len() as u64 - 1)) as usize;
                    list.swap(i, i + 1);
                }
            }
        }
        for (d, list) in s.devices.iter().enumerate() {
            let mut i = 0;
            while i + 1 < list.len() {
                if next() % 8 == 0 {
                    s.compounds.push(Compound { device: d as u32, first: i as u32, len: 2 });
                    i += 2;
                } else {
                    i += 1;
                }
            }
        }
        match (validate(&s), simulate(&s, &costs_for(&s, 1), options())) {
            (Ok(()), Ok(_)) => {}
            (Err(e), Err(SimError::Invalid(e2))) => prop_assert_eq!(e, e2),
            (v, r) => prop_assert!(false, "validator {:?} but simulator {:?}", v, r.map(|r| r.makespan_ns)),
        }
    }

    /// Shuffling a valid 1F1B schedule's per-device orders: whenever the validator accepts the
    /// result, the simulator completes it; whenever it reports a deadlock, every stuck device
    /// is named with a dependency.
    #[test]
    fn shuffled_orders_deadlock_or_complete(p in 1u32..5, m in 1u32..6, seed in any::<u64>()) {
        let mut s = generators::one_f_one_b(p, m);
        let mut x = seed | 1;
        for list in &mut s.devices {
            for i in (1..list.len()).rev() {
                x ^= x << 13; x ^= x >> 7; x ^= x << 17;
                list.swap(i, (x % (i as u64 + 1)) as usize);
            }
        }
        match validate(&s) {
            Ok(()) => { simulate(&s, &costs_for(&s, 2), options()).unwrap(); }
            Err(pplan::schedule::validate::ValidationError::Deadlock { stuck }) => {
                prop_assert!(!stuck.is_empty());
                for st in &stuck {
                    prop_assert_ne!(st.action, st.waits_for);
                }
            }
            Err(e) => prop_assert!(false, "unexpected error {}", e),
        }
    }
}

#[test]
fn every_generator_round_trips_through_csv() {
    use generators::{GenParams, ScheduleName};
    for name in ScheduleName::ALL {
        for p in 1..=6u32 {
            for m in [1u32, 2, 5, 8, 12] {
                for v in 1..=3u32 {
                    let mut params = GenParams::new(p, m).chunks(v).steps(2);
                    params.vertical_sync = false;
                    let Ok(s) = generators::generate(name, params) else {
                        continue;
                    };
                    let text = csv::write(&s);
                    let back = csv::parse(&text, s.placement).unwrap();
                    assert_eq!(back.devices, s.devices, "{name} p={p} m={m} v={v}");
                    assert_eq!(back.num_stages, s.num_stages);
                    assert_eq!(back.num_microbatches, s.num_microbatches);
                    assert_eq!(csv::write(&back), text);
                    if s.weight_update == WeightUpdate::Flush {
                        assert_eq!(back, s);
                    }
                }
            }
        }
    }
}
