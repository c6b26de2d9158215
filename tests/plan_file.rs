//! Plan files (`plan::plan_file`): a plan round-trips through its JSON, and a bad version,
//! stage, schedule or action is refused naming the field.

use pplan::inputs::model::Model;
use pplan::inputs::profile::even_split;
use pplan::plan::plan_file::{
    stages_from_counts, Parallelism, Plan, PlanModel, PlanSchedule, PLAN_FORMAT, PLAN_VERSION,
};
use pplan::schedule::generators::{generate, GenParams, ScheduleName};
use pplan::schedule::ir::Placement;

fn sample() -> Plan {
    let model = Model::preset("gpt-1.7b").unwrap();
    let sch = generate(ScheduleName::OneFOneB, GenParams::new(2, 4)).unwrap();
    Plan {
        format: PLAN_FORMAT.into(),
        version: PLAN_VERSION,
        model: PlanModel::from_model(&model),
        hardware: "a100-80gb".into(),
        parallelism: Parallelism {
            gpus: 2,
            tp: 1,
            pp: 2,
            dp: 1,
            cp: 1,
            ep: 1,
            etp: 1,
            micro_batch: 1,
            global_batch: 4,
            chunks: 1,
            recompute: "none".into(),
            sequence_parallel: false,
            zero1: false,
            zero: 0,
            dp_replicate: 1,
            ..Parallelism::stack_defaults()
        },
        dtype: "bf16".into(),
        stages: stages_from_counts(&even_split(model.num_layers, 2), Placement::Loop, 2),
        schedule: PlanSchedule::from_schedule("1f1b", &sch),
        predicted: None,
    }
}

#[test]
fn round_trips_and_checks() {
    let plan = sample();
    let text = plan.to_json();
    let back = Plan::from_json(&text, "p.json").unwrap();
    assert_eq!(back, plan);
    assert_eq!(back.schedule_ir().unwrap().num_actions(), 16);
}

#[test]
fn refuses_other_versions_and_bad_fields() {
    let text = sample()
        .to_json()
        .replace("\"version\": 1", "\"version\": 9");
    let e = Plan::from_json(&text, "p.json").unwrap_err().to_string();
    assert!(e.contains("version 9") && e.contains("version 1"), "{e}");

    let mut bad = sample();
    bad.stages[1].first_layer += 1;
    let e = Plan::from_json(&bad.to_json(), "p.json")
        .unwrap_err()
        .to_string();
    assert!(e.contains("stages[1].first_layer"), "{e}");

    let mut bad = sample();
    bad.schedule.devices[1].pop();
    let e = Plan::from_json(&bad.to_json(), "p.json")
        .unwrap_err()
        .to_string();
    assert!(e.contains("not runnable"), "{e}");

    let mut bad = sample();
    bad.schedule.devices[0][0] = "0X0".into();
    let e = Plan::from_json(&bad.to_json(), "p.json")
        .unwrap_err()
        .to_string();
    assert!(e.contains("schedule.devices[0][0]"), "{e}");
}

#[test]
fn norms_and_positions_round_trip_where_the_family_would_not_say() {
    // GPT-1.7B (LayerNorm, learned positions, ungated) writes neither field: the ungated MLP
    // already implies them, as in plans written before the fields existed.
    let text = sample().to_json();
    assert!(!text.contains("normalization") && !text.contains("position_embedding_type"));
    // An ungated model with rotary positions (GPT-NeoX) writes the one that differs.
    let mut neox = Model::preset("gpt-1.7b").unwrap();
    neox.rotary = true;
    let mut plan = sample();
    plan.model = PlanModel::from_model(&neox);
    let text = plan.to_json();
    assert!(
        text.contains("\"position_embedding_type\": \"rope\"") && !text.contains("normalization")
    );
    let back = Plan::from_json(&text, "p.json").unwrap();
    assert_eq!(back.model.to_model(), neox);
    // A value pplan does not know is refused naming the field.
    let bad = text.replace("\"rope\"", "\"sinusoidal\"");
    let e = Plan::from_json(&bad, "p.json").unwrap_err().to_string();
    assert!(
        e.contains("model.position_embedding_type") && e.contains("sinusoidal"),
        "{e}"
    );
}
