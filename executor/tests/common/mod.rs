//! Tiny plans and sequential references shared by the executor's tests.
#![allow(dead_code)]

use pplan::inputs::profile::even_split;
use pplan::plan::plan_file::{
    stages_from_counts, Parallelism, Plan, PlanModel, PlanSchedule, PLAN_FORMAT, PLAN_VERSION,
};
use pplan::schedule::generators::{generate, GenParams, ScheduleName};
use pplan_exec::cpu::comm::Comms;
use pplan_exec::cpu::model::{self, Ctx, StageInput, StageWeights};
use pplan_exec::cpu::quant::Fp8Recipe;
use pplan_exec::run::RunResult;
use pplan_exec::spec::{self, Dims};

pub const LAYERS: u32 = 4;

pub fn tiny_model(layers: u32) -> PlanModel {
    PlanModel {
        name: "tiny".into(),
        num_layers: layers,
        hidden_size: 16,
        num_attention_heads: 2,
        num_query_groups: 2,
        ffn_hidden_size: 32,
        seq_length: 8,
        vocab_size: 32,
        gated_mlp: false,
        untie_embeddings_and_output_weights: false,
        dropout: true,
        kv_channels: None,
        moe: None,
        mla: None,
        normalization: None,
        position_embedding_type: None,
        mtp_num_layers: 0,
        arch: Default::default(),
        sliding_window: None,
    }
}

/// A plan for schedule `name` on `p` devices, `m` micro-batches of 2 sequences, `v` chunks,
/// `steps` mini-batches in the action lists (asynchronous schedules), `layers` layers.
pub fn plan_with(name: ScheduleName, params: GenParams, layers: u32) -> Plan {
    let sch = generate(name, params).expect("generator accepts the test's parameters");
    let p = params.devices;
    let stages = sch.num_stages;
    let v = stages / p;
    Plan {
        format: PLAN_FORMAT.into(),
        version: PLAN_VERSION,
        model: tiny_model(layers),
        // Plans name a bundled profile or a path (the plan reader refuses anything else).
        hardware: "a100-80gb".into(),
        parallelism: Parallelism {
            gpus: p as u64,
            tp: 1,
            pp: p as u64,
            dp: 1,
            cp: 1,
            ep: 1,
            etp: 1,
            micro_batch: 2,
            global_batch: 2 * params.microbatches as u64,
            chunks: v as u64,
            recompute: "none".into(),
            sequence_parallel: false,
            zero1: false,
            zero: 0,
            dp_replicate: 1,
            ..Parallelism::stack_defaults()
        },
        dtype: "f32".into(),
        stages: stages_from_counts(&even_split(layers, stages), sch.placement, p),
        schedule: PlanSchedule::from_schedule(name.as_str(), &sch),
        predicted: None,
    }
}

pub fn plan(name: ScheduleName, p: u32, m: u32, v: u32) -> Plan {
    let plan = plan_with(name, GenParams::new(p, m).chunks(v), LAYERS);
    // Round trip through the file format and its validator, as the binary reads it.
    Plan::from_json(&plan.to_json(), "test plan").expect("test plan validates")
}

pub fn dims(plan: &Plan) -> Dims {
    Dims::from_plan(plan)
}

/// The whole model of `plan` (every expert) on one rank, as it starts.
pub fn initial_weights(plan: &Plan, seed: u64) -> StageWeights {
    let d = Dims::from_plan(plan).single_rank();
    let pattern = plan
        .model
        .moe
        .as_ref()
        .map_or_else(Vec::new, |m| m.moe_layer_pattern.clone());
    let experts = d.moe.map_or(0, |m| m.experts as u32);
    let layers = plan.model.num_layers;
    StageWeights::init_moe(seed, 0, layers, true, true, &d, &pattern, 0..experts)
}

/// The sequential reference of any synchronous plan, replicas included: the whole model (every
/// expert) on one stage of one rank, the step's `dp · m` micro-batches one after another (F then
/// I then W) with whole sequences (no context parallelism), in the plan's number format; SGD
/// after each step. Returns the flat weights (embedding, layers, output) and the loss per step.
pub fn sequential_plan(plan: &Plan, steps: u32, lr: f32, seed: u64) -> (Vec<f32>, Vec<f64>) {
    let par = &plan.parallelism;
    let c = Ctx {
        fp8: Fp8Recipe::from_plan(&par.precision, &par.fp8_recipe).unwrap(),
        ..Ctx::new(Dims::from_plan(plan).single_rank(), 1)
    };
    let per_step = plan.schedule.microbatches * par.dp as u32;
    train(&c, initial_weights(plan, seed), per_step, steps, lr, seed)
}

/// `steps` steps of `per_step` micro-batches on one rank, SGD after each; the final flat
/// weights and the loss per step.
fn train(
    c: &Ctx,
    mut w: StageWeights,
    per_step: u32,
    steps: u32,
    lr: f32,
    seed: u64,
) -> (Vec<f32>, Vec<f64>) {
    let d = &c.dims;
    let mut grads = w.zeros_like();
    let mut losses = Vec::new();
    let mut solo = Comms::solo();
    for step in 0..steps {
        let mut loss = 0.0;
        for k in 0..per_step {
            let ids = spec::token_ids(seed, step, k, d);
            let labels = spec::labels(seed, step, k, d);
            let (_, l, mut st) = model::stage_forward(
                c,
                &w,
                StageInput::Tokens(&ids),
                Some(&labels),
                spec::loss_scale(d, per_step),
                &mut solo,
            )
            .unwrap();
            loss += l;
            model::stage_backward_input(c, &w, &mut st, None, &mut solo).unwrap();
            model::stage_backward_weight(c, &st, &mut grads);
        }
        w.sgd(lr, &grads);
        grads.zero();
        losses.push(loss);
    }
    (w.flat(), losses)
}

/// Asserts that `r`, a run of `plan` for `steps` steps at `lr`, ended at the sequential
/// reference's weights within `tol` and its losses within `loss_tol`, and that the comparison
/// means something: training moved the weights by more than `100 · tol`. Returns that movement.
pub fn assert_matches_sequential(
    plan: &Plan,
    r: &RunResult,
    (steps, lr): (u32, f32),
    (tol, loss_tol): (f32, f64),
    what: &str,
) -> f32 {
    let (want, want_loss) = sequential_plan(plan, steps, lr, spec::DEFAULT_SEED);
    let diff = max_abs_diff(&concat(&r.weights), &want);
    assert!(
        diff <= tol,
        "{what}: weights differ from the sequential run by {diff}"
    );
    for (s, (a, b)) in r.loss_per_step.iter().zip(&want_loss).enumerate() {
        assert!(
            (a - b).abs() < loss_tol,
            "{what}: loss of step {s}: {a} vs {b}"
        );
    }
    let init = initial_weights(plan, spec::DEFAULT_SEED).flat();
    let moved = max_abs_diff(&init, &want);
    assert!(
        moved > 100.0 * tol,
        "{what}: weights barely moved ({moved})"
    );
    moved
}

/// Max |a - b| over two equally long vectors.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "weight vectors differ in length");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// All stages' weights concatenated in stage order.
pub fn concat(weights: &[(u32, Vec<f32>)]) -> Vec<f32> {
    let mut w = weights.to_vec();
    w.sort_by_key(|(s, _)| *s);
    w.into_iter().flat_map(|(_, v)| v).collect()
}
