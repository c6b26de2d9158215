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

/// Seeded fuzzing of every file reader and of the flag sets, through the library readers and the
/// binary: no panic, no hang, exit 0 or 2. `PPLAN_FUZZ_CASES` (default 40) sets the number of
/// cases and `PPLAN_FUZZ_SEED` the seed (printed on failure), e.g.
/// `PPLAN_FUZZ_CASES=5000 cargo test --release --test fuzz seeded`. The measured-run readers
/// (Kineto traces, Nsight exports, Megatron-LM and torchtitan logs) and plan files are mutated
/// from real files too (`seeded_measured_readers_*`, `seeded_plan_files_*`); a run of the binary
/// that outlives [`CASE_SECONDS_MAX`] fails the test as a hang, naming the seed and case.
mod seeded {
    use serde_json::Value;
    use std::time::{Duration, Instant};

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            // xorshift64*: small, deterministic, enough to pick mutations.
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
            &xs[(self.next() % xs.len() as u64) as usize]
        }
    }

    fn settings() -> (u64, u64) {
        let env = |k: &str, d: u64| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d)
        };
        (
            env("PPLAN_FUZZ_SEED", 0x005e_ed17),
            env("PPLAN_FUZZ_CASES", 40),
        )
    }

    fn junk(r: &mut Rng) -> Value {
        r.pick(&[
            serde_json::json!(-1),
            serde_json::json!(0),
            serde_json::json!(1e300),
            serde_json::json!(-0.5),
            serde_json::json!("x"),
            serde_json::json!(null),
            serde_json::json!([]),
            serde_json::json!({}),
            serde_json::json!(true),
            serde_json::json!(18446744073709551615u64),
        ])
        .clone()
    }

    /// Replace one random leaf (or container) of `v` by junk.
    fn mutate(v: &mut Value, r: &mut Rng) {
        let n = match v {
            Value::Object(o) if !o.is_empty() => o.len(),
            Value::Array(a) if !a.is_empty() => a.len(),
            _ => {
                *v = junk(r);
                return;
            }
        };
        let i = (r.next() % n as u64) as usize;
        if r.next() % 4 == 0 {
            *v = junk(r);
            return;
        }
        match v {
            Value::Object(o) => mutate(o.values_mut().nth(i).unwrap(), r),
            Value::Array(a) => mutate(&mut a[i], r),
            _ => unreachable!(),
        }
    }

    fn read(path: &str) -> String {
        std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
    }

    /// A bound on one case run through the binary: every accepted input finishes in seconds
    /// (docs/performance.md, "Bounded commands"), so a case past it is a hang. A watchdog, not a
    /// speed assertion: it is far above any case's time.
    pub const CASE_SECONDS_MAX: u64 = 60;

    /// Run `pplan args`; exit 0 or 2 within [`CASE_SECONDS_MAX`], never a panic.
    fn run_bounded(args: &[&str], what: &str) {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_pplan"))
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if start.elapsed() > Duration::from_secs(CASE_SECONDS_MAX) {
                child.kill().ok();
                panic!("{what}: pplan {args:?} ran past {CASE_SECONDS_MAX} s");
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).ok();
        assert!(
            matches!(status.code(), Some(0 | 2)) && !err.contains("panicked"),
            "{what}: pplan {args:?}: {status:?} {err}"
        );
    }

    fn gunzip(path: &str) -> String {
        let f = std::fs::File::open(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(f), &mut text).unwrap();
        text
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("pplan-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir.join(name)
    }

    /// Read a measured file the whole way (sniffing, the reader, the physical checks, the
    /// breakdown or the log summary): a result or an error naming the file, never a panic.
    fn measure(path: &std::path::Path) {
        use pplan::measured::breakdown::{breakdown, log_summary};
        let file = path.display().to_string();
        match pplan::measured::load::load(&[path.to_path_buf()], None) {
            Ok(m) if m.ranks.is_empty() => {
                let _ = log_summary(&m, None);
            }
            Ok(m) => {
                let _ = breakdown(&m, None);
            }
            Err(e) => assert!(e.to_string().starts_with(&file), "{e}"),
        }
    }

    /// Junk for a text field: numbers at and past every bound, signs, words.
    const TEXT_JUNK: [&str; 12] = [
        "-1",
        "0",
        "1e308",
        "-0.5",
        "nan",
        "inf",
        "x",
        "",
        "300%",
        "18446744073709551616",
        "9223372036854775807",
        "1,2,3",
    ];

    /// Mutate log text: replace a whitespace-separated token with junk, or drop, duplicate or
    /// cut a line.
    fn mutate_text(text: &str, r: &mut Rng) -> String {
        let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
        if lines.is_empty() {
            return String::new();
        }
        let i = (r.next() % lines.len() as u64) as usize;
        match r.next() % 5 {
            0 => {
                lines.remove(i);
            }
            1 => {
                let l = lines[i].clone();
                lines.insert(i, l);
            }
            2 => {
                let cut = (r.next() % (lines[i].len() as u64 + 1)) as usize;
                let cut = (0..=cut)
                    .rev()
                    .find(|&c| lines[i].is_char_boundary(c))
                    .unwrap_or(0);
                lines[i].truncate(cut);
            }
            _ => {
                let mut words: Vec<String> = lines[i].split(' ').map(str::to_string).collect();
                let w = (r.next() % words.len() as u64) as usize;
                words[w] = r.pick(&TEXT_JUNK).to_string();
                lines[i] = words.join(" ");
            }
        }
        lines.join("\n")
    }

    #[test]
    fn seeded_measured_readers_never_panic() {
        let (seed, cases) = settings();
        let mut r = Rng(seed | 1);
        // Kineto: a real rank of HTA's TorchRec trace and a pplan-executor run written by
        // the profiler's format (tests/data/measured/), mutated as JSON.
        let traces = [
            gunzip("tests/data/measured/kineto/hta-sampled-rank-0.json.gz"),
            gunzip("tests/data/measured/cpu-exec/1f1b-kineto/rank-0.json.gz"),
        ];
        let traces: Vec<Value> = traces
            .iter()
            .map(|t| serde_json::from_str(t).unwrap())
            .collect();
        let logs = [
            read("tests/data/measured/logs/megatron_ling_v2.log"),
            read("tests/data/measured/logs/megatron_issue60_v100.log"),
            read("tests/data/measured/logs/torchtitan_pr2389.log"),
            read("tests/data/measured/logs/torchtitan_pr364_wps.log"),
        ];
        let sql = read("tests/data/measured/nsys/synthetic_pipeline.sql");
        let columns = [
            ("CUPTI_ACTIVITY_KIND_KERNEL", "start"),
            ("CUPTI_ACTIVITY_KIND_KERNEL", "end"),
            ("CUPTI_ACTIVITY_KIND_KERNEL", "deviceId"),
            ("CUPTI_ACTIVITY_KIND_KERNEL", "streamId"),
            ("CUPTI_ACTIVITY_KIND_KERNEL", "demangledName"),
            ("CUPTI_ACTIVITY_KIND_KERNEL", "globalPid"),
            ("CUPTI_ACTIVITY_KIND_KERNEL", "correlationId"),
            ("CUPTI_ACTIVITY_KIND_MEMCPY", "end"),
            ("NVTX_EVENTS", "start"),
            ("NVTX_EVENTS", "end"),
            ("NVTX_EVENTS", "textId"),
            ("CUPTI_ACTIVITY_KIND_RUNTIME", "correlationId"),
            ("StringIds", "value"),
        ];
        let sql_junk = [
            "NULL",
            "-1",
            "0",
            "9223372036854775807",
            "-9223372036854775808",
            "'x'",
            "1e300",
            "X'00'",
            "start",
            "end + 1000000000000",
        ];
        for case in 0..cases {
            let what = format!("seed {seed} case {case}");
            // One trace, one log and one export per case.
            let mut v = traces[(case % 2) as usize].clone();
            for _ in 0..=r.next() % 3 {
                mutate(&mut v["traceEvents"], &mut r);
            }
            if r.next() % 4 == 0 {
                mutate(&mut v, &mut r);
            }
            let p = scratch("trace.json");
            std::fs::write(&p, v.to_string()).unwrap();
            let ok = std::panic::catch_unwind(|| measure(&p));
            assert!(
                ok.is_ok(),
                "{what}: the Kineto reader panicked on {}",
                p.display()
            );

            let base: String = r.pick::<String>(&logs).clone();
            let log = mutate_text(&base, &mut r);
            let p = scratch("run.log");
            std::fs::write(&p, &log).unwrap();
            let ok = std::panic::catch_unwind(|| measure(&p));
            assert!(ok.is_ok(), "{what}: the log reader panicked on {log}");

            let p = scratch("export.sqlite");
            let _ = std::fs::remove_file(&p);
            let c = rusqlite::Connection::open(&p).unwrap();
            c.execute_batch(&sql).unwrap();
            let mut edits = Vec::new();
            for _ in 0..=r.next() % 2 {
                let (table, column) = r.pick(&columns);
                let edit = format!(
                    "UPDATE {table} SET \"{column}\" = {} WHERE rowid = {};",
                    r.pick(&sql_junk),
                    1 + r.next() % 4
                );
                // NOT NULL columns refuse some junk: such an edit is simply not made.
                if c.execute_batch(&edit).is_ok() {
                    edits.push(edit);
                }
            }
            drop(c);
            let ok = std::panic::catch_unwind(|| measure(&p));
            assert!(
                ok.is_ok(),
                "{what}: the Nsight reader panicked after {edits:?}"
            );
        }
        // Through the binary, with the time bound: a quarter as many cases.
        for case in 0..cases.div_ceil(4) {
            let what = format!("seed {seed} binary case {case}");
            let mut v = traces[(case % 2) as usize].clone();
            mutate(&mut v["traceEvents"], &mut r);
            let p = scratch("bin-trace.json");
            std::fs::write(&p, v.to_string()).unwrap();
            let plan = "tests/data/measured/cpu-exec/1f1b.plan.json";
            let path = p.display().to_string();
            run_bounded(
                &["validate", "--measured", &path, "--format", "json"],
                &what,
            );
            run_bounded(&["validate", "--measured", &path, "--plan", plan], &what);
            let p = scratch("bin.log");
            let base: String = r.pick::<String>(&logs).clone();
            std::fs::write(&p, mutate_text(&base, &mut r)).unwrap();
            run_bounded(
                &[
                    "validate",
                    "--measured",
                    &p.display().to_string(),
                    "--plan",
                    plan,
                ],
                &what,
            );
        }
    }

    #[test]
    fn seeded_plan_files_never_panic() {
        let (seed, cases) = settings();
        let mut r = Rng(seed | 1);
        use pplan::plan::emit::{emit, Target};
        use pplan::plan::plan_file::Plan;
        let plans = [
            read("tests/data/measured/cpu-exec/1f1b.plan.json"),
            read("tests/data/measured/cpu-exec/interleaved-1f1b.plan.json"),
            read("tests/data/measured/cpu-exec/zb-h1.plan.json"),
        ];
        for case in 0..cases {
            let what = format!("seed {seed} case {case}");
            let mut v: Value = serde_json::from_str(r.pick::<String>(&plans)).unwrap();
            for _ in 0..=r.next() % 3 {
                mutate(&mut v, &mut r);
            }
            let text = v.to_string();
            let ok = std::panic::catch_unwind(|| {
                if let Ok(plan) = Plan::from_json(&text, "plan.json") {
                    for t in [
                        Target::Executor,
                        Target::Megatron,
                        Target::Torchtitan,
                        Target::TorchtitanV02,
                        Target::Csv,
                    ] {
                        let _ = emit(&plan, t, None);
                    }
                }
            });
            assert!(
                ok.is_ok(),
                "{what}: a plan file panicked the reader or an emitter: {text}"
            );
        }
        for case in 0..cases.div_ceil(4) {
            let mut v: Value = serde_json::from_str(r.pick::<String>(&plans)).unwrap();
            mutate(&mut v, &mut r);
            let p = scratch("plan.json");
            std::fs::write(&p, v.to_string()).unwrap();
            let path = p.display().to_string();
            let what = format!("seed {seed} binary case {case}");
            run_bounded(&["emit", "--plan", &path, "--target", "megatron"], &what);
            run_bounded(
                &[
                    "validate",
                    "--measured",
                    "tests/data/measured/cpu-exec/1f1b.measured.json",
                    "--plan",
                    &path,
                ],
                &what,
            );
        }
    }

    #[test]
    fn seeded_file_readers_never_panic() {
        let (seed, cases) = settings();
        let mut r = Rng(seed | 1);
        type Reader = fn(&str) -> bool;
        let readers: [(&str, Reader); 5] = [
            ("tests/data/hf/qwen3-32b.json", |t| {
                pplan::inputs::model::Model::from_json(t, "m").is_ok()
            }),
            ("examples/models/gpt-1.7b-megatron.json", |t| {
                pplan::inputs::model::Model::from_json(t, "m").is_ok()
            }),
            ("hardware/h100-80gb.json", |t| {
                pplan::inputs::hardware::Hardware::from_json(t, "h").is_ok()
            }),
            ("examples/profiles/uneven-12.json", |t| {
                pplan::inputs::profile::LayerProfile::from_json(t, "p").is_ok()
            }),
            ("tests/data/hf/gemma-2-9b.json", |t| {
                pplan::inputs::model::Model::from_json(t, "g").is_ok()
            }),
        ];
        for case in 0..cases {
            for (path, reader) in &readers {
                let mut v: Value = serde_json::from_str(&read(path)).unwrap();
                for _ in 0..=r.next() % 3 {
                    mutate(&mut v, &mut r);
                }
                let text = v.to_string();
                let ok = std::panic::catch_unwind(|| reader(&text));
                assert!(
                    ok.is_ok(),
                    "seed {seed} case {case}: {path} panicked on {text}"
                );
            }
        }
    }

    #[test]
    fn seeded_flag_sets_exit_0_or_2() {
        let (seed, cases) = settings();
        let mut r = Rng(seed | 1);
        let values = [
            "-1",
            "0",
            "1",
            "2",
            "3",
            "8",
            "-0.5",
            "nan",
            "1e30",
            "x",
            "4294967296",
        ];
        let sets: [(&[&str], &[&str]); 3] = [
            (
                &["simulate", "--schedule", "zbv"],
                &[
                    "--stages",
                    "--microbatches",
                    "--forward",
                    "--backward",
                    "--backward-input",
                    "--backward-weight",
                    "--p2p",
                    "--chunks",
                ],
            ),
            (
                &["predict", "--model", "gpt-1.7b"],
                &[
                    "--gpus",
                    "--tp",
                    "--pp",
                    "--global-batch",
                    "--micro-batch",
                    "--chunks",
                    "--seq-len",
                ],
            ),
            (
                &["partition", "--profile", "examples/profiles/uneven-12.json"],
                &["--stages", "--devices", "--microbatches", "--memory-limit"],
            ),
        ];
        for case in 0..cases.div_ceil(4) {
            let (base, flags) = r.pick(&sets);
            let mut args: Vec<&str> = base.to_vec();
            for f in *flags {
                if r.next() % 3 != 0 {
                    args.extend([*f, *r.pick(&values)]);
                }
            }
            let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_pplan"))
                .args(&args)
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            let start = Instant::now();
            let status = loop {
                if let Some(s) = child.try_wait().unwrap() {
                    break s;
                }
                if start.elapsed() > Duration::from_secs(60) {
                    child.kill().ok();
                    panic!("seed {seed} case {case}: pplan {args:?} hung");
                }
                std::thread::sleep(Duration::from_millis(10));
            };
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).ok();
            assert!(
                matches!(status.code(), Some(0 | 2)) && !err.contains("panicked"),
                "seed {seed} case {case}: pplan {args:?}: {status:?} {err}"
            );
        }
    }
}
