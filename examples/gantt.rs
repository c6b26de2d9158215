//! Renders Gantt charts of a few bundled schedules.
//!
//! `cargo run --example gantt -- OUT_DIR [svg|png]` writes charts of 1F1B, interleaved 1F1B,
//! GPipe and a split-backward (I/W) variant of 1F1B into `OUT_DIR` (PNG unless `svg` is given).

use pplan::report::gantt::{write_file, GanttOptions};
use pplan::schedule::generators;
use pplan::sim::{simulate, Costs, SimOptions, UnitCosts};
use pplan::{Action, Kind, Schedule};
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = PathBuf::from(args.next().unwrap_or_else(|| ".".to_string()));
    let ext = args.next().unwrap_or_else(|| "png".to_string());
    let cases: [(&str, Schedule); 6] = [
        ("1f1b-p4-m8", generators::one_f_one_b(4, 8)),
        (
            "interleaved-p4-m8-v2",
            generators::interleaved_1f1b(4, 8, 2),
        ),
        ("gpipe-p4-m8", generators::gpipe(4, 8)),
        ("1f1b-p8-m32", generators::one_f_one_b(8, 32)),
        (
            "interleaved-p8-m32-v4",
            generators::interleaved_1f1b(8, 32, 4),
        ),
        (
            "1f1b-split-p4-m8",
            split_backward(generators::one_f_one_b(4, 8)),
        ),
    ];
    for (name, schedule) in cases {
        let costs = Costs::uniform(
            schedule.num_stages,
            schedule.num_devices(),
            UnitCosts {
                forward_ns: 1_000_000,
                backward_ns: 2_000_000,
                p2p_ns: 100_000,
                ..Default::default()
            },
        );
        let result = simulate(&schedule, &costs, SimOptions::default())?;
        let Some(timeline) = result.timeline else {
            return Err("the simulator recorded no timeline".into());
        };
        let opts = GanttOptions {
            title: format!("{name} (F = 1 ms, B = 2 ms per device, p2p = 0.1 ms)"),
            ..GanttOptions::default()
        };
        let path = dir.join(format!("{name}.{ext}"));
        write_file(&timeline, &opts, &path)?;
        println!("{}", path.display());
    }
    Ok(())
}

/// 1F1B with each `B` split into `I` then `W` in place: not a zero-bubble schedule (no `W` is
/// deferred), just a way to see all four kinds in one chart until those generators exist.
fn split_backward(mut schedule: Schedule) -> Schedule {
    for actions in &mut schedule.devices {
        *actions = actions
            .iter()
            .flat_map(|a| match a.kind {
                Kind::B => vec![
                    Action::i(a.stage, a.microbatch),
                    Action::w(a.stage, a.microbatch),
                ],
                _ => vec![*a],
            })
            .collect();
    }
    schedule
}
