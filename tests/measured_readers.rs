//! The Nsight Systems and log readers of `pplan validate` on real files pplan did not write
//! (tests/data/measured/SOURCES.md), a synthetic pipeline-shaped Nsight export, and bad inputs.

use pplan::measured::logs::{read as read_log, sniff};
use pplan::measured::nsys;
use pplan::measured::timeline::{Collective, Dim, KernelClass, MeasuredError, RankTrace, Source};
use pplan::schedule::ir::Action;
use std::path::{Path, PathBuf};

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/measured")
        .join(rel)
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pplan-measured-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn log(rel: &str) -> String {
    std::fs::read_to_string(data(rel)).unwrap()
}

fn assert_err(e: MeasuredError, file: &str, parts: &[&str]) {
    let msg = e.to_string();
    assert!(msg.starts_with(&format!("{file}: ")), "{msg}");
    for p in parts {
        assert!(msg.contains(p), "'{p}' not in: {msg}");
    }
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() <= 1e-9 * b.abs().max(1.0))
}

// ---------------------------------------------------------------- Nsight Systems

/// hpcgroup/pipit's saxpy MPI+CUDA export from Perlmutter: one process, one A100, five
/// `saxpy` kernels and fifteen copies on stream 7; its NVTX ranges (MPI calls, `saxpy`) are
/// neither actions nor steps. Times as `sqlite3` prints them from the file.
#[test]
fn pipit_saxpy_export() {
    let path = data("nsys/saxpy-mpi-cuda_nsys_perlmutter0.sqlite");
    let ranks = nsys::read(&path, "saxpy.sqlite").unwrap();
    assert_eq!(ranks.len(), 1);
    let r = &ranks[0];
    assert_eq!(r.rank, 0);
    assert_eq!(r.file, "saxpy.sqlite");
    assert!(r.actions.is_empty());
    assert!(r.steps.is_empty());
    assert_eq!(r.kernels.len(), 20);

    let saxpy: Vec<_> = r
        .kernels
        .iter()
        .filter(|k| r.names[k.name as usize].starts_with("saxpy"))
        .collect();
    let spans: Vec<(i64, i64)> = saxpy.iter().map(|k| (k.start_ns, k.end_ns)).collect();
    assert_eq!(
        spans,
        [
            (924922186, 942626994),
            (1196058242, 1213791658),
            (1449177557, 1466878365),
            (1696275954, 1713996442),
            (1947782617, 1965496577),
        ]
    );
    for k in &saxpy {
        // The demangled name is kept (shortName is only `saxpy`).
        assert_eq!(
            r.names[k.name as usize],
            "saxpy(double *, double *, double *, double, int)"
        );
        assert_eq!(k.class, KernelClass::OtherCompute);
        assert_eq!(k.stream, 7);
        assert_eq!(k.step, 0);
        assert_eq!(k.group_size, None);
    }
    let copies: Vec<_> = r
        .kernels
        .iter()
        .filter(|k| k.class == KernelClass::Memory)
        .collect();
    assert_eq!(copies.len(), 15);
    assert_eq!(
        (copies[0].start_ns, copies[0].end_ns),
        (887857742, 906688200)
    );
    assert_eq!(r.names[copies[0].name as usize], "Memcpy HtoD");
    assert_eq!(
        copies
            .iter()
            .filter(|k| r.names[k.name as usize] == "Memcpy DtoH")
            .count(),
        5
    );
    // Sorted by (start, end, stream); names interned once.
    assert!(r
        .kernels
        .windows(2)
        .all(|w| (w[0].start_ns, w[0].end_ns) <= (w[1].start_ns, w[1].end_ns)));
    assert_eq!(r.names.len(), 3);
}

fn synthetic() -> Vec<RankTrace> {
    let path = scratch("synthetic_pipeline.sqlite");
    let _ = std::fs::remove_file(&path);
    let sql = std::fs::read_to_string(data("nsys/synthetic_pipeline.sql")).unwrap();
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(&sql)
        .unwrap();
    nsys::read(&path, "synthetic.sqlite").unwrap()
}

/// SYNTHETIC export (tests/data/measured/nsys/synthetic_pipeline.sql): two processes on two
/// GPUs; actions and steps from NVTX ranges projected onto the kernels they launched.
#[test]
fn synthetic_pipeline_export() {
    let ranks = synthetic();
    assert_eq!(ranks.iter().map(|r| r.rank).collect::<Vec<_>>(), [0, 1]);

    let r0 = &ranks[0];
    let got: Vec<(i64, i64, u32, KernelClass, u32)> = r0
        .kernels
        .iter()
        .map(|k| (k.start_ns, k.end_ns, k.stream, k.class, k.step))
        .collect();
    let comm = |c| KernelClass::Comm(c, Dim::Unattributed);
    assert_eq!(
        got,
        [
            (2900, 3000, 7, KernelClass::Memory, 0),
            (3000, 3500, 7, KernelClass::Gemm, 0),
            // demangledName (flash_fwd_kernel) classifies it, not shortName (`kernel`).
            (3500, 3900, 7, KernelClass::Attention, 0),
            (3900, 4200, 20, comm(Collective::SendRecv), 0),
            (4300, 5000, 7, KernelClass::Gemm, 0),
            (5000, 6000, 21, comm(Collective::AllReduce), 0),
            // PyTorch's `vectorized_elementwise_kernel`: the elementwise family.
            (12000, 12500, 7, KernelClass::Elementwise, 1),
        ]
    );
    // Steps: the GPU extent of what each ProfilerStep range launched.
    let steps: Vec<(u64, i64, i64)> = r0
        .steps
        .iter()
        .map(|w| (w.id, w.start_ns, w.end_ns))
        .collect();
    assert_eq!(steps, [(5, 2900, 6000), (6, 12000, 12500)]);
    // Actions: PP:0F0 launched the GEMM, the attention and the send; 0B0 (a textId) the
    // second GEMM. The mark `PP:0F9` (no end) and `forward-backward` are not actions.
    let acts: Vec<(Action, i64, i64, u32)> = r0
        .actions
        .iter()
        .map(|a| (a.action, a.start_ns, a.end_ns, a.step))
        .collect();
    assert_eq!(
        acts,
        [
            (Action::f(0, 0), 3000, 4200, 0),
            (Action::b(0, 0), 4300, 5000, 0)
        ]
    );

    // Rank 1: its correlation id 1 is another process's: not launched by rank 0's PP:0F0.
    // Its own PP:1F0 launched nothing, so the range's own times stand.
    let r1 = &ranks[1];
    assert_eq!(r1.kernels.len(), 1);
    assert_eq!((r1.kernels[0].start_ns, r1.kernels[0].end_ns), (4000, 4100));
    assert!(r1.steps.is_empty());
    assert_eq!(r1.actions.len(), 1);
    assert_eq!(
        (
            r1.actions[0].action,
            r1.actions[0].start_ns,
            r1.actions[0].end_ns
        ),
        (Action::f(1, 0), 1200, 1300)
    );
}

#[test]
fn nsys_bad_inputs() {
    // Not SQLite at all.
    let text = scratch("notes.sqlite");
    std::fs::write(
        &text,
        "iteration 1 | this is a text file, not a database\n".repeat(40),
    )
    .unwrap();
    assert_err(
        nsys::read(&text, "notes.sqlite").unwrap_err(),
        "notes.sqlite",
        &["not a SQLite file", "nsys export --type sqlite"],
    );

    // The real export cut in half.
    let bytes = std::fs::read(data("nsys/saxpy-mpi-cuda_nsys_perlmutter0.sqlite")).unwrap();
    let cut = scratch("cut.sqlite");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    assert_err(
        nsys::read(&cut, "cut.sqlite").unwrap_err(),
        "cut.sqlite",
        &["damaged or truncated SQLite file"],
    );

    // SQLite, but not an Nsight export.
    let other = scratch("other.sqlite");
    let _ = std::fs::remove_file(&other);
    rusqlite::Connection::open(&other)
        .unwrap()
        .execute_batch("CREATE TABLE t (a INTEGER); INSERT INTO t VALUES (1);")
        .unwrap();
    assert_err(
        nsys::read(&other, "other.sqlite").unwrap_err(),
        "other.sqlite",
        &[
            "not an Nsight Systems export",
            "no table CUPTI_ACTIVITY_KIND_KERNEL",
            "nsys export --type sqlite",
        ],
    );

    // A kernel table without kernels, and one without a stream column.
    let empty = scratch("empty.sqlite");
    let _ = std::fs::remove_file(&empty);
    rusqlite::Connection::open(&empty)
        .unwrap()
        .execute_batch(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, \
             deviceId INTEGER, streamId INTEGER, shortName INTEGER);",
        )
        .unwrap();
    assert_err(
        nsys::read(&empty, "empty.sqlite").unwrap_err(),
        "empty.sqlite",
        &["no GPU kernels", "--trace=cuda"],
    );
    let nostream = scratch("nostream.sqlite");
    let _ = std::fs::remove_file(&nostream);
    rusqlite::Connection::open(&nostream)
        .unwrap()
        .execute_batch(
            "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, \
             deviceId INTEGER, shortName INTEGER);",
        )
        .unwrap();
    assert_err(
        nsys::read(&nostream, "nostream.sqlite").unwrap_err(),
        "nostream.sqlite",
        &["table CUPTI_ACTIVITY_KIND_KERNEL has no column 'streamId'"],
    );

    // A file that is not there.
    assert_err(
        nsys::read(&scratch("missing.sqlite"), "missing.sqlite").unwrap_err(),
        "missing.sqlite",
        &["cannot open"],
    );
}

// ---------------------------------------------------------------- logs

/// Megatron-LM with timestamps, throughput and a memory report (Ling-V2's example log).
#[test]
fn megatron_log_with_memory() {
    let text = log("logs/megatron_ling_v2.log");
    assert_eq!(sniff(&text), Some(Source::MegatronLog));
    let (source, its) = read_log(&text, "ling.log").unwrap();
    assert_eq!(source, Source::MegatronLog);
    assert_eq!(
        its.iter().map(|i| i.iteration).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert!(close(its[0].step_time_s, 79.4899));
    assert!(close(its[1].step_time_s, 11.182));
    assert!(close(its[2].step_time_s, 10.8835));
    assert!(close(its[0].tflops_per_gpu, 18.0));
    assert!(close(its[1].tflops_per_gpu, 128.2));
    assert!(close(its[2].tflops_per_gpu, 131.7));
    assert!(close(its[1].loss, 2.688647));
    assert_eq!(its[2].global_batch, Some(128));
    // `[Rank 0] (after 1 iterations) ... max reserved: 66802.0` (MB = 2^20 bytes).
    assert_eq!(its[0].memory_bytes, Some(66802 * 1024 * 1024));
    assert_eq!(its[1].memory_bytes, None);
    assert_eq!(its[0].tokens_per_s_per_gpu, None);
    assert_eq!(its[0].mfu, None);
}

/// Megatron-LM Mixtral on H100 (NVIDIA/Megatron-LM#756): MoE loss fields beside `lm loss`.
#[test]
fn megatron_log_mixtral() {
    let (_, its) = read_log(&log("logs/megatron_mixtral_issue756.log"), "m.log").unwrap();
    assert_eq!(
        its.iter().map(|i| i.iteration).collect::<Vec<_>>(),
        [71, 72, 73]
    );
    assert!(close(its[0].step_time_s, 5.3616));
    assert!(close(its[2].step_time_s, 5.8299));
    assert!(close(its[1].tflops_per_gpu, 238.7));
    assert!(close(its[2].loss, 1.798953));
    assert_eq!(its[0].global_batch, Some(128));
}

/// Older Megatron-LM lines: no timestamp, no throughput (epfLLM/Megatron-LLM#11), and the
/// oldest ones without consumed samples or batch size, with `after 5 iterations memory (MB)`
/// and a timers line (NVIDIA/Megatron-LM#60).
#[test]
fn megatron_log_older_formats() {
    let (source, its) = read_log(&log("logs/megatron_epfllm_issue11.log"), "e.log").unwrap();
    assert_eq!(source, Source::MegatronLog);
    assert_eq!(its.len(), 4);
    assert_eq!(its[0].iteration, 122);
    assert!(close(its[0].step_time_s, 86.5452));
    assert!(close(its[3].step_time_s, 89.0752));
    assert_eq!(its[0].tflops_per_gpu, None);
    assert_eq!(its[3].global_batch, Some(1024));
    assert!(close(its[3].loss, 2.477393));

    let text = log("logs/megatron_issue60_v100.log");
    assert_eq!(sniff(&text), Some(Source::MegatronLog));
    let (_, its) = read_log(&text, "v100.log").unwrap();
    assert_eq!(its.iter().map(|i| i.iteration).collect::<Vec<_>>(), [5, 10]);
    assert!(close(its[0].step_time_s, 16.4915));
    assert!(close(its[1].step_time_s, 1.9939));
    assert_eq!(its[0].memory_bytes, Some(17482 * 1024 * 1024));
    assert_eq!(its[1].memory_bytes, None);
    assert_eq!(its[0].global_batch, None);
    assert_eq!(its[0].loss, None);
}

/// torchtitan with grad_norm and tflops, printed by every rank (pytorch/torchtitan#2389).
#[test]
fn torchtitan_log_all_ranks() {
    let text = log("logs/torchtitan_pr2389.log");
    assert_eq!(sniff(&text), Some(Source::TorchtitanLog));
    let (source, its) = read_log(&text, "titan.log").unwrap();
    assert_eq!(source, Source::TorchtitanLog);
    // Seven ranks printed step 4: it counts once, with the first line's figures.
    assert_eq!(its.iter().map(|i| i.iteration).collect::<Vec<_>>(), [4, 5]);
    assert!(close(its[0].tokens_per_s_per_gpu, 10050.0));
    assert!(close(its[0].tflops_per_gpu, 314.71));
    assert!(close(its[0].mfu, 0.1399));
    assert!(close(its[0].loss, 7.62585));
    assert_eq!(
        its[0].memory_bytes,
        Some((66.91 * 1073741824.0f64).round() as u64)
    );
    assert!(close(its[1].tokens_per_s_per_gpu, 10007.0));
    assert!(close(its[1].mfu, 0.1393));
    assert_eq!(its[1].step_time_s, None);
    assert_eq!(its[1].global_batch, None);
}

/// torchtitan without grad_norm, with launcher prefixes and other INFO lines
/// (pytorch/torchtitan#1287); and the older `wps:` lines without tflops (#364).
#[test]
fn torchtitan_log_older_formats() {
    let (_, its) = read_log(&log("logs/torchtitan_pr1287.log"), "t.log").unwrap();
    assert_eq!(
        its.iter().map(|i| i.iteration).collect::<Vec<_>>(),
        [200, 210, 220]
    );
    assert!(close(its[1].tokens_per_s_per_gpu, 5593.0));
    assert!(close(its[1].tflops_per_gpu, 323.92));
    assert!(close(its[1].mfu, 0.3275));
    assert_eq!(
        its[2].memory_bytes,
        Some((49.66 * 1073741824.0f64).round() as u64)
    );

    let text = log("logs/torchtitan_pr364_wps.log");
    assert_eq!(sniff(&text), Some(Source::TorchtitanLog));
    let (_, its) = read_log(&text, "wps.log").unwrap();
    assert_eq!(
        its.iter().map(|i| i.iteration).collect::<Vec<_>>(),
        [1, 10, 20, 30]
    );
    assert!(close(its[1].tokens_per_s_per_gpu, 2792.0));
    assert!(close(its[0].mfu, 0.0317));
    assert_eq!(its[0].tflops_per_gpu, None);
    assert!(close(its[3].loss, 7.9951));
    assert_eq!(
        its[0].memory_bytes,
        Some((33.35 * 1073741824.0f64).round() as u64)
    );
}

/// SYNTHETIC: the real #2389 step 5 line with the colour codes torchtitan's `Color` writes
/// (torchtitan/components/metrics.py), and a validation line in `log_validation`'s format.
#[test]
fn torchtitan_colours_and_validation() {
    let text = "[titan] 2026-02-24 19:46:19,145 - root - INFO - \x1b[31mstep:  5  \
         \x1b[32mloss:  7.07623  \x1b[38;2;180;60;0mgrad_norm: 46.5000  \
         \x1b[38;2;54;234;195mmemory: 66.91GiB(37.51%)  \x1b[34mtps: 10,007  \
         \x1b[36mtflops: 313.36  \x1b[35mmfu: 13.93%\x1b[39m\n\
         [titan] 2026-02-24 19:46:20,000 - root - INFO - \x1b[33mvalidate step:  5  \
         \x1b[32mloss:  7.1000  \x1b[38;2;54;234;195mmemory: 66.91GiB(37.51%)  \
         \x1b[34mtps: 30,000\x1b[39m\n";
    let (source, its) = read_log(text, "colour.log").unwrap();
    assert_eq!(source, Source::TorchtitanLog);
    assert_eq!(its.len(), 1);
    assert_eq!(its[0].iteration, 5);
    assert!(close(its[0].tokens_per_s_per_gpu, 10007.0));
    assert!(close(its[0].tflops_per_gpu, 313.36));
    assert!(close(its[0].mfu, 0.1393));
    assert!(close(its[0].loss, 7.07623));
}

/// SYNTHETIC: Megatron validation lines (format of `evaluate_and_print_results`) between
/// two real iteration lines are not iterations.
#[test]
fn megatron_validation_is_skipped() {
    let real = log("logs/megatron_epfllm_issue11.log");
    let lines: Vec<&str> = real.lines().collect();
    let text = format!(
        "{}\n validation loss at iteration 122 | lm loss value: 2.500000E+00 | lm loss PPL: \
         1.218249E+01 | \n{}\n",
        lines[0], lines[1]
    );
    let (_, its) = read_log(&text, "val.log").unwrap();
    assert_eq!(
        its.iter().map(|i| i.iteration).collect::<Vec<_>>(),
        [122, 123]
    );
}

/// SYNTHETIC prefixes: real Megatron-LM lines as torchrun (`[default0]:`) and srun (`0: `)
/// prefix them.
#[test]
fn launcher_prefixes() {
    let real = log("logs/megatron_ling_v2.log");
    let lines: Vec<&str> = real.lines().collect();
    let text = format!(
        "[default0]:{}\n0: {}\n[default0]:{}\n",
        lines[0], lines[1], lines[2]
    );
    assert_eq!(sniff(&text), Some(Source::MegatronLog));
    let (_, its) = read_log(&text, "prefixed.log").unwrap();
    assert_eq!(its.iter().map(|i| i.iteration).collect::<Vec<_>>(), [1, 2]);
    assert!(close(its[1].step_time_s, 11.182));
    assert_eq!(its[0].memory_bytes, Some(66802 * 1024 * 1024));
}

#[test]
fn log_bad_inputs() {
    assert_err(
        read_log("", "empty.log").unwrap_err(),
        "empty.log",
        &[
            "the log is empty",
            "elapsed time per iteration (ms)",
            "tps:",
        ],
    );
    assert_eq!(sniff(""), None);
    let other = "Epoch: 1/200 | Train loss: 101.84 | Val loss: 38.34 | Time:  27.517s\n";
    assert_eq!(sniff(other), None);
    assert_err(
        read_log(other, "other.log").unwrap_err(),
        "other.log",
        &[
            "no Megatron-LM iteration lines",
            "nor torchtitan step lines",
        ],
    );

    // A real line with its elapsed time garbled, on line 2.
    let real = log("logs/megatron_mixtral_issue756.log");
    let mut lines: Vec<String> = real.lines().map(str::to_string).collect();
    lines[1] = lines[1].replace("5470.7", "54x0.7");
    assert_err(
        read_log(&lines.join("\n"), "garbled.log").unwrap_err(),
        "garbled.log",
        &[
            "line 2",
            "'elapsed time per iteration (ms)'",
            "'54x0.7'",
            "not a number",
        ],
    );
    let real = log("logs/megatron_ling_v2.log");
    let garbled = real.replace("max reserved: 66802.0", "max reserved: lots");
    assert_err(
        read_log(&garbled, "mem.log").unwrap_err(),
        "mem.log",
        &["line 2", "'max reserved'", "'lots'"],
    );
    let real = log("logs/torchtitan_pr1287.log");
    let garbled = real.replace("tps: 5,593", "tps: 5,5?3");
    assert_err(
        read_log(&garbled, "titan.log").unwrap_err(),
        "titan.log",
        &["line 5", "'tps'", "'5,5?3'"],
    );
    let garbled = real.replace("mfu: 34.29%", "mfu: 34.29");
    assert_err(
        read_log(&garbled, "mfu.log").unwrap_err(),
        "mfu.log",
        &["line 2", "'mfu'", "a percentage"],
    );
}

// ---------------------------------------------------------------- never panic

mod never_panic {
    use super::*;
    use proptest::prelude::*;

    /// Every real log line, each possibly cut short and with a few characters replaced: the
    /// log reader returns Ok or Err, never panics.
    fn real_lines() -> Vec<String> {
        [
            "logs/megatron_ling_v2.log",
            "logs/megatron_issue60_v100.log",
            "logs/torchtitan_pr2389.log",
            "logs/torchtitan_pr364_wps.log",
        ]
        .iter()
        .flat_map(|f| log(f).lines().map(str::to_string).collect::<Vec<_>>())
        .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn logs_never_panic(
            picks in prop::collection::vec((0usize..64, 0usize..400, any::<u32>(), any::<char>()), 1..6)
        ) {
            let lines = real_lines();
            let mut text = String::new();
            for (i, cut, at, c) in picks {
                let line = &lines[i % lines.len()];
                let mut chars: Vec<char> = line.chars().collect();
                if !chars.is_empty() {
                    let n = chars.len();
                    chars[at as usize % n] = c;
                    chars.truncate(cut.max(1).min(n));
                }
                text.extend(chars);
                text.push('\n');
            }
            let sniffed = sniff(&text);
            match read_log(&text, "fuzz.log") {
                Ok((source, its)) => {
                    prop_assert_eq!(Some(source), sniffed);
                    prop_assert!(!its.is_empty());
                    for it in &its {
                        prop_assert!(text.contains(&it.iteration.to_string()));
                        prop_assert!(it.mfu.is_none_or(f64::is_finite));
                    }
                }
                Err(e) => prop_assert!(e.to_string().starts_with("fuzz.log: "), "{}", e),
            }
        }

        #[test]
        fn nsys_never_panics(flips in prop::collection::vec((any::<u32>(), any::<u8>()), 1..8)) {
            let mut bytes =
                std::fs::read(data("nsys/saxpy-mpi-cuda_nsys_perlmutter0.sqlite")).unwrap();
            let n = bytes.len();
            for (at, b) in flips {
                bytes[at as usize % n] = b;
            }
            let path = scratch("flipped.sqlite");
            std::fs::write(&path, &bytes).unwrap();
            match nsys::read(&path, "flipped.sqlite") {
                Ok(ranks) => {
                    for r in &ranks {
                        prop_assert!(r.kernels.windows(2).all(|w| w[0].start_ns <= w[1].start_ns));
                        for k in &r.kernels {
                            prop_assert!(k.end_ns >= k.start_ns);
                            prop_assert!((k.name as usize) < r.names.len());
                        }
                    }
                }
                Err(e) => prop_assert!(e.to_string().starts_with("flipped.sqlite: "), "{}", e),
            }
        }
    }
}
