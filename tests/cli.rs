//! The `pplan` binary as a user runs it: exit codes, messages, and files.

mod common;
use common::{json, pplan};

use std::path::PathBuf;

fn temp_file(name: &str, contents: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pplan-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

/// Compare two simulate reports on everything but the schedule label.
fn same_result(a: &serde_json::Value, b: &serde_json::Value) {
    for key in [
        "stages",
        "microbatches",
        "chunks",
        "actions",
        "makespan",
        "bubble_fraction",
        "devices",
    ] {
        assert_eq!(a[key], b[key], "field {key}");
    }
}

#[test]
fn readme_command_works() {
    let (code, out, err) = pplan(&[
        "simulate",
        "--schedule",
        "1f1b",
        "--stages",
        "4",
        "--microbatches",
        "8",
        "--forward",
        "1",
        "--backward",
        "2",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("makespan        33"), "{out}");
}

#[test]
fn bundled_files_replay_to_the_generator_result() {
    let cases: &[(&str, &[&str], &[&str])] = &[
        (
            "schedules/gpipe-p4-m8.csv",
            &[
                "--schedule",
                "gpipe",
                "--stages",
                "4",
                "--microbatches",
                "8",
            ],
            &[],
        ),
        (
            "schedules/1f1b-p4-m8.csv",
            &["--schedule", "1f1b", "--stages", "4", "--microbatches", "8"],
            &[],
        ),
        (
            "schedules/interleaved-1f1b-p4-m8-v2.csv",
            &[
                "--schedule",
                "interleaved-1f1b",
                "--stages",
                "4",
                "--microbatches",
                "8",
                "--chunks",
                "2",
            ],
            &[],
        ),
        (
            "schedules/pipedream-p4-m8-steps2.csv",
            &[
                "--schedule",
                "pipedream",
                "--stages",
                "4",
                "--microbatches",
                "8",
                "--steps",
                "2",
            ],
            &["--weight-update", "stash"],
        ),
        (
            "schedules/pipedream-2bw-p4-m8-steps2.csv",
            &[
                "--schedule",
                "pipedream-2bw",
                "--stages",
                "4",
                "--microbatches",
                "8",
                "--steps",
                "2",
            ],
            &["--weight-update", "2bw", "--steps", "2"],
        ),
    ];
    for (file, gen_args, file_args) in cases {
        let mut a = vec!["simulate", "--format", "json", "--p2p", "0.1"];
        a.extend_from_slice(gen_args);
        let (code, gen_out, err) = pplan(&a);
        assert_eq!(code, 0, "{err}");
        let mut b = vec![
            "simulate",
            "--format",
            "json",
            "--p2p",
            "0.1",
            "--schedule",
            file,
        ];
        b.extend_from_slice(file_args);
        let (code, file_out, err) = pplan(&b);
        assert_eq!(code, 0, "{file}: {err}");
        same_result(&json(&gen_out), &json(&file_out));
        // The file on disk is exactly what the generator writes today.
        let mut g = vec!["generate"];
        g.extend_from_slice(gen_args);
        let (_, generated, _) = pplan(&g);
        let on_disk =
            std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
        assert_eq!(
            generated, on_disk,
            "{file} is stale: regenerate it with `pplan generate`"
        );
    }
}

#[test]
fn json_output_has_the_contract_fields() {
    let (code, out, _) = pplan(&[
        "simulate",
        "--schedule",
        "interleaved-1f1b",
        "--stages",
        "4",
        "--microbatches",
        "8",
        "--chunks",
        "2",
        "--format",
        "json",
    ]);
    assert_eq!(code, 0);
    let v = json(&out);
    assert_eq!(v["makespan"], 28.5); // 8·3 + 3·3/2
    assert!(v["bubble_fraction"].as_f64().unwrap() > 0.0);
    let d = &v["devices"][0];
    for key in ["busy", "idle", "peak_inflight_microbatches"] {
        assert!(d.get(key).is_some(), "missing {key}: {d}");
    }
}

#[test]
fn trace_is_chrome_format() {
    let path = std::env::temp_dir().join(format!("pplan-trace-{}.json", std::process::id()));
    let (code, _, err) = pplan(&[
        "simulate",
        "--schedule",
        "1f1b",
        "--stages",
        "2",
        "--microbatches",
        "2",
        "--p2p",
        "0.5",
        "--trace",
        path.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let v = json(&std::fs::read_to_string(&path).unwrap());
    let events = v["traceEvents"].as_array().unwrap();
    let x: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
    // 8 compute actions + 4 transfers, each a send span and a recv span.
    assert_eq!(x.len(), 8 + 8);
    let f0 = x.iter().find(|e| e["name"] == "0F0").unwrap();
    assert_eq!(f0["ts"], 0.0);
    assert_eq!(f0["dur"], 1000.0); // 1 unit = 1 ms = 1000 µs
    assert_eq!(f0["args"]["kind"], "F");
    assert!(x.iter().any(|e| e["name"] == "1RECV_F0" && e["pid"] == 1));
}

#[test]
fn deterministic_output() {
    let args = [
        "simulate",
        "--schedule",
        "interleaved-1f1b",
        "--stages",
        "8",
        "--microbatches",
        "32",
        "--chunks",
        "4",
        "--p2p",
        "0.05",
        "--format",
        "json",
    ];
    assert_eq!(pplan(&args).1, pplan(&args).1);
}

fn expect_input_error(args: &[&str], needles: &[&str]) {
    let (code, out, err) = pplan(args);
    assert_eq!(
        code, 2,
        "expected exit 2 for {args:?}; stdout {out}; stderr {err}"
    );
    for n in needles {
        assert!(err.contains(n), "stderr for {args:?} lacks '{n}':\n{err}");
    }
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn malformed_files_exit_2_naming_row_and_field() {
    let unknown = temp_file("unknown.csv", "0F0,0B0\n1F0,1Q0\n");
    expect_input_error(
        &["simulate", "--schedule", unknown.to_str().unwrap()],
        &[
            "unknown.csv",
            "row 2 (device 1), field 2",
            "unknown action kind 'Q'",
        ],
    );
    let bad_number = temp_file("badnum.csv", "0F0,0B0x\n");
    expect_input_error(
        &["simulate", "--schedule", bad_number.to_str().unwrap()],
        &["row 1 (device 0), field 2", "0B0x"],
    );
    let huge = temp_file("huge.csv", "0F0,0B99999999999\n");
    expect_input_error(
        &["simulate", "--schedule", huge.to_str().unwrap()],
        &["field 2", "not a valid non-negative integer"],
    );
    let duplicate = temp_file("dup.csv", "0F0,0F1,0B0,0F1,0B1\n1F0,1B0,1F1,1B1\n");
    expect_input_error(
        &["simulate", "--schedule", duplicate.to_str().unwrap()],
        &[
            "duplicate action 0F1",
            "device 0 position 1",
            "device 0 position 3",
        ],
    );
    let missing = temp_file("missing.csv", "0F0,0F1,0B0\n1F0,1B0,1F1,1B1\n");
    expect_input_error(
        &["simulate", "--schedule", missing.to_str().unwrap()],
        &["missing action 0B1", "device 0"],
    );
    let deadlock = temp_file("deadlock.csv", "0F0,0B0,0F1,0B1\r\n1F0,1F1,1B0,1B1\r\n");
    expect_input_error(
        &["simulate", "--schedule", deadlock.to_str().unwrap()],
        &[
            "deadlocks",
            "device 0 position 1 (0B0) waits for the gradient of 1B0",
            "device 1 position 1 (1F1)",
        ],
    );
    let empty = temp_file("empty.csv", "\n");
    expect_input_error(
        &["simulate", "--schedule", empty.to_str().unwrap()],
        &["no rows"],
    );
}

#[test]
fn crlf_and_empty_fields_are_accepted() {
    let f = temp_file("crlf.csv", "0F0,,0F1,0B0,,0B1\r\n,1F0,1B0,1F1,1B1,\r\n");
    let (code, out, err) = pplan(&[
        "simulate",
        "--schedule",
        f.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(json(&out)["makespan"], 9.0); // (m + p - 1)(1 + 2)
}

#[test]
fn bad_flags_exit_2_naming_the_flag() {
    expect_input_error(
        &[
            "simulate",
            "--schedule",
            "nope",
            "--stages",
            "4",
            "--microbatches",
            "8",
        ],
        &["unknown schedule 'nope'", "1f1b"],
    );
    expect_input_error(
        &["simulate", "--schedule", "1f1b", "--microbatches", "8"],
        &["--stages is required"],
    );
    expect_input_error(
        &[
            "simulate",
            "--schedule",
            "1f1b",
            "--stages",
            "0",
            "--microbatches",
            "8",
        ],
        &["--stages must be at least 1"],
    );
    expect_input_error(
        &[
            "simulate",
            "--schedule",
            "gpipe",
            "--stages",
            "4",
            "--microbatches",
            "8",
            "--chunks",
            "2",
        ],
        &["--chunks must be 1"],
    );
    expect_input_error(
        &[
            "simulate",
            "--schedule",
            "1f1b",
            "--stages",
            "4",
            "--microbatches",
            "8",
            "--forward",
            "-1",
        ],
        &["--forward -1"],
    );
    expect_input_error(
        &[
            "simulate",
            "--schedule",
            "1f1b",
            "--stages",
            "4",
            "--microbatches",
            "8",
            "--backward",
            "inf",
        ],
        &["--backward inf"],
    );
    expect_input_error(
        &[
            "simulate",
            "--schedule",
            "1f1b",
            "--stages",
            "4",
            "--microbatches",
            "abc",
        ],
        &["--microbatches"],
    );
    expect_input_error(
        &[
            "simulate",
            "--schedule",
            "schedules/1f1b-p4-m8.csv",
            "--stages",
            "3",
        ],
        &["--stages 3 does not match", "4 rows"],
    );
    expect_input_error(
        &["simulate", "--schedule", "does-not-exist.csv"],
        &["cannot read --schedule file 'does-not-exist.csv'"],
    );
    expect_input_error(
        &[
            "simulate",
            "--schedule",
            "schedules/1f1b-p4-m8.csv",
            "--placement",
            "zigzag",
        ],
        &["--placement", "loop, v"],
    );
    expect_input_error(
        &[
            "simulate",
            "--schedule",
            "schedules/1f1b-p4-m8.csv",
            "--weight-update",
            "2bw",
            "--steps",
            "3",
        ],
        &["--steps 3 must divide"],
    );
    expect_input_error(
        &[
            "simulate",
            "--schedule",
            "1f1b",
            "--stages",
            "100000",
            "--microbatches",
            "100000",
        ],
        &["too large"],
    );
}

#[test]
fn gantt_svg_and_png_from_the_cli() {
    let dir = std::env::temp_dir().join(format!("pplan-gantt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for ext in ["svg", "png"] {
        let path = dir.join(format!("g.{ext}"));
        let (code, _, err) = pplan(&[
            "simulate",
            "--schedule",
            "1f1b",
            "--stages",
            "4",
            "--microbatches",
            "8",
            "--forward",
            "1",
            "--backward",
            "2",
            "--gantt",
            path.to_str().unwrap(),
        ]);
        assert_eq!(code, 0, "{err}");
        let bytes = std::fs::read(&path).unwrap();
        match ext {
            "svg" => assert!(String::from_utf8(bytes).unwrap().contains("<svg")),
            _ => assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n"),
        }
    }
    expect_input_error(
        &[
            "simulate",
            "--schedule",
            "1f1b",
            "--stages",
            "2",
            "--microbatches",
            "2",
            "--gantt",
            "chart.jpg",
        ],
        &["--gantt", "chart.jpg", ".svg, .png"],
    );
}

/// `pplan ... | head`: a reader that closes the pipe early must not make pplan panic.
#[cfg(unix)]
#[test]
fn closed_stdout_pipe_is_not_a_panic() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_pplan"))
        .args([
            "generate",
            "--schedule",
            "1f1b",
            "--stages",
            "64",
            "--microbatches",
            "4096",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run pplan");
    drop(child.stdout.take()); // the reader goes away before pplan has written anything
    let out = child.wait_with_output().expect("wait for pplan");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    // Killed by SIGPIPE, as `seq 1 1000000 | head -1` is; never Rust's panic exit code 101.
    assert_eq!(
        out.status.signal(),
        Some(13),
        "status {:?}, stderr {stderr}",
        out.status
    );
}
