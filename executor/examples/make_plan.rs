//! Writes a plan.json for a built-in schedule with an even layer split, for trying
//! `pplan-exec run` before a planner made the plan (`pplan predict/search --output` do the same
//! with a chosen configuration and a prediction attached).
//!
//! `cargo run -p pplan-exec --example make_plan -- MODEL SCHEDULE PP MICROBATCHES MICRO_BATCH [CHUNKS] > plan.json`

use pplan::inputs::model::Model;
use pplan::inputs::profile::even_split;
use pplan::plan::plan_file::*;
use pplan::schedule::generators::{generate, GenParams, ScheduleName};

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() < 5 {
        eprintln!("usage: make_plan MODEL SCHEDULE PP MICROBATCHES MICRO_BATCH [CHUNKS]");
        std::process::exit(2);
    }
    let fail = |m: String| -> ! {
        eprintln!("make_plan: {m}");
        std::process::exit(2)
    };
    let model = Model::load(&a[0]).unwrap_or_else(|e| fail(e.to_string()));
    let name: ScheduleName = a[1].parse().unwrap_or_else(|e: String| fail(e));
    let num = |i: usize, what: &str| -> u32 {
        a[i].parse()
            .unwrap_or_else(|_| fail(format!("{what} '{}' is not a whole number", a[i])))
    };
    let (p, m, b) = (num(2, "PP"), num(3, "MICROBATCHES"), num(4, "MICRO_BATCH"));
    let v = if a.len() > 5 { num(5, "CHUNKS") } else { 1 };
    let sch =
        generate(name, GenParams::new(p, m).chunks(v)).unwrap_or_else(|e| fail(e.to_string()));
    let v = sch.num_stages / p;
    let plan = Plan {
        format: PLAN_FORMAT.into(),
        version: PLAN_VERSION,
        model: PlanModel::from_model(&model),
        hardware: "cpu".into(),
        parallelism: Parallelism {
            gpus: p as u64,
            tp: 1,
            pp: p as u64,
            dp: 1,
            cp: 1,
            ep: 1,
            etp: 1,
            micro_batch: b as u64,
            global_batch: (b * m) as u64,
            chunks: v as u64,
            recompute: "none".into(),
            sequence_parallel: false,
            zero1: false,
            zero: 0,
            dp_replicate: 1,
            ..Parallelism::stack_defaults()
        },
        dtype: "f32".into(),
        stages: stages_from_counts(
            &even_split(model.num_layers, sch.num_stages),
            sch.placement,
            p,
        ),
        schedule: PlanSchedule::from_schedule(name.as_str(), &sch),
        predicted: None,
    };
    let text = plan.to_json();
    Plan::from_json(&text, "make_plan").unwrap_or_else(|e| fail(e.to_string()));
    print!("{text}");
}
