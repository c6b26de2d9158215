//! Numerical correctness of pipelined CPU runs: every synchronous schedule's updated weights
//! equal those of a sequential run of the same micro-batches on one device, within
//! `TOLERANCE`; PipeDream and 2BW equal a sequential reference that uses, for each micro-batch
//! and stage, the weight version the schedule gives its forward, and differ without stashing.
//!
//! Tolerance: f32 results differ only by the order of additions where gradients of different
//! micro-batches are accumulated (a schedule may run W passes in another order than the
//! reference); each weight is the initial value minus a sum of at most steps · m
//! float-rounded terms, so the bound used is `TOLERANCE = 1e-5` absolute on weights of size
//! ~0.1–0.4 (about 100 ulps), while one SGD update at the learning rate used moves weights by
//! about 1e-3 — so a wrong micro-batch, a missed or doubled gradient or a wrong weight version
//! shows up two orders of magnitude above the tolerance.

mod common;

use common::*;
use pplan::schedule::generators::{GenParams, ScheduleName};
use pplan_exec::backend::RunOptions;
use pplan_exec::cpu::model::{self, Ctx, StageInput, StageWeights};
use pplan_exec::run::{run_plan, Backend};
use pplan_exec::spec;

const TOLERANCE: f32 = 1e-5;
const LR: f32 = 0.5;

fn opts(steps: u32) -> RunOptions {
    RunOptions {
        steps,
        lr: LR,
        ..RunOptions::default()
    }
}

fn check_synchronous(name: ScheduleName, p: u32, m: u32, v: u32) {
    let plan = plan(name, p, m, v);
    let steps = 2;
    let what = format!("{name} p={p} m={m} v={v}");
    let r =
        run_plan(&plan, Backend::Cpu, &opts(steps), None).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_matches_sequential(&plan, &r, (steps, LR), (TOLERANCE, 1e-6), &what);
}

#[test]
fn gpipe_matches_sequential() {
    check_synchronous(ScheduleName::GPipe, 2, 4, 1);
}

#[test]
fn one_f_one_b_matches_sequential() {
    check_synchronous(ScheduleName::OneFOneB, 4, 6, 1);
}

#[test]
fn interleaved_matches_sequential() {
    check_synchronous(ScheduleName::Interleaved1F1B, 2, 4, 2);
}

#[test]
fn zb_h1_matches_sequential() {
    check_synchronous(ScheduleName::ZbH1, 4, 5, 1);
}

#[test]
fn zb_h2_matches_sequential() {
    check_synchronous(ScheduleName::ZbH2, 2, 5, 1);
}

#[test]
fn zbv_matches_sequential() {
    check_synchronous(ScheduleName::ZbV, 2, 4, 2);
}

#[test]
fn dualpipev_matches_sequential() {
    check_synchronous(ScheduleName::DualPipeV, 2, 4, 2);
}

#[test]
fn looped_bfs_matches_sequential() {
    check_synchronous(ScheduleName::LoopedBfs, 2, 3, 2);
}

/// The asynchronous reference: micro-batches one after another in global order; on every
/// stage the forward uses version `fwd_version` and the backward `bwd_version` (the same one
/// with stashing; the newest one at the backward's turn without); a stage's gradients are
/// applied after every `per_step` backwards.
fn asynchronous_reference(
    plan: &pplan::plan::plan_file::Plan,
    passes: u32,
    stash: bool,
    lr: f32,
) -> Vec<f32> {
    let sch = plan.schedule_ir().unwrap();
    let d = dims(plan);
    let c = Ctx::new(d, 1);
    let mut solo = pplan_exec::cpu::comm::Comms::solo();
    let seed = spec::DEFAULT_SEED;
    let n = plan.stages.len();
    let big_m = sch.num_microbatches;
    let per = sch.microbatches_per_step;
    let vsync = plan.schedule.weight_update == "stash-vsync";
    // Backwards of stage s that precede its F of micro-batch k, in its device's list.
    let before_f = |s: u32, k: u32| -> u32 {
        let list = &sch.devices[sch.device_of(s) as usize];
        let pos = list
            .iter()
            .position(|a| {
                a.stage == s && a.kind == pplan::schedule::ir::Kind::F && a.microbatch == k
            })
            .unwrap();
        list[..pos]
            .iter()
            .filter(|a| a.stage == s && a.kind != pplan::schedule::ir::Kind::F)
            .count() as u32
    };
    let mut versions: Vec<Vec<StageWeights>> = plan
        .stages
        .iter()
        .map(|st| {
            vec![StageWeights::init(
                seed,
                st.first_layer,
                st.num_layers,
                st.embedding,
                st.output,
                &d,
            )]
        })
        .collect();
    let mut acc: Vec<StageWeights> = versions.iter().map(|v| v[0].zeros_like()).collect();
    let mut count = vec![0u32; n];
    for pass in 0..passes {
        for k in 0..big_m {
            let g = pass * big_m + k;
            let (step, mb) = spec::data_index(pass, k, big_m, per);
            let ids = spec::token_ids(seed, step, mb, &d);
            let labels = spec::labels(seed, step, mb, &d);
            let fwd_v: Vec<usize> = (0..n as u32)
                .map(|s| {
                    let s_ref = if vsync { 0 } else { s };
                    ((pass * big_m + before_f(s_ref, k)) / per) as usize
                })
                .collect();
            let bwd_v: Vec<usize> = if stash {
                fwd_v.clone()
            } else {
                vec![(g / per) as usize; n]
            };
            let mut states = Vec::new();
            let mut x = None;
            for s in 0..n {
                let w = &versions[s][fwd_v[s]];
                let input = match x.take() {
                    None => StageInput::Tokens(&ids),
                    Some(h) => StageInput::Hidden(h),
                };
                let lab = (s + 1 == n).then_some(labels.as_slice());
                let (y, _, st) =
                    model::stage_forward(&c, w, input, lab, spec::loss_scale(&d, per), &mut solo)
                        .unwrap();
                x = y;
                states.push(st);
            }
            let mut dy = None;
            for s in (0..n).rev() {
                let w = &versions[s][bwd_v[s]];
                dy = model::stage_backward_input(&c, w, &mut states[s], dy.take(), &mut solo)
                    .unwrap();
                model::stage_backward_weight(&c, &states[s], &mut acc[s]);
                count[s] += 1;
                if count[s] % per == 0 {
                    let mut new = versions[s].last().unwrap().clone();
                    new.sgd(lr, &acc[s]);
                    acc[s].zero();
                    versions[s].push(new);
                }
            }
        }
    }
    versions
        .iter()
        .flat_map(|v| v.last().unwrap().flat())
        .collect()
}

fn check_asynchronous(name: ScheduleName, params: GenParams, lr: f32) {
    let plan = plan_with(name, params, LAYERS);
    let plan = pplan::plan::plan_file::Plan::from_json(&plan.to_json(), "test").unwrap();
    let passes = 2;
    let run_opts = RunOptions { lr, ..opts(passes) };
    let stashed = run_plan(&plan, Backend::Cpu, &run_opts, None).unwrap();
    let want = asynchronous_reference(&plan, passes, true, lr);
    let got = concat(&stashed.weights);
    let diff = max_abs_diff(&got, &want);
    assert!(
        diff <= TOLERANCE,
        "{name}: differs from the stashing reference by {diff}"
    );

    let no_stash = RunOptions {
        disable_weight_stashing: true,
        ..run_opts
    };
    let r = run_plan(&plan, Backend::Cpu, &no_stash, None).unwrap();
    let got_ns = concat(&r.weights);
    let want_ns = asynchronous_reference(&plan, passes, false, lr);
    assert!(
        max_abs_diff(&got_ns, &want_ns) <= TOLERANCE,
        "{name}: without stashing, differs from its reference"
    );
    let apart = max_abs_diff(&got, &got_ns);
    eprintln!("{name}: stashed vs reference {diff}, stashed vs not {apart}");
    assert!(
        apart > 10.0 * TOLERANCE,
        "{name}: stashing made no difference ({apart})"
    );
}

#[test]
fn pipedream_uses_the_stashed_version_in_each_backward() {
    check_asynchronous(ScheduleName::PipeDream, GenParams::new(3, 3).steps(2), LR);
}

#[test]
fn pipedream_vertical_sync_uses_stage_zeros_version() {
    let mut params = GenParams::new(3, 3).steps(2);
    params.vertical_sync = true;
    check_asynchronous(ScheduleName::PipeDream, params, LR);
}

#[test]
fn pipedream_2bw_backward_uses_its_forwards_version() {
    check_asynchronous(
        ScheduleName::PipeDream2BW,
        GenParams::new(3, 3).steps(3),
        2.0,
    );
}

#[test]
fn threads_per_device_give_the_same_weights() {
    // Rows of each GEMM split over threads: bitwise the same as one thread.
    let mut plan = plan_with(ScheduleName::OneFOneB, GenParams::new(2, 2), 2);
    plan.model.hidden_size = 64;
    plan.model.ffn_hidden_size = 256;
    plan.model.seq_length = 64;
    let one = run_plan(&plan, Backend::Cpu, &opts(1), None).unwrap();
    let two = RunOptions {
        threads_per_device: 2,
        ..opts(1)
    };
    let two = run_plan(&plan, Backend::Cpu, &two, None).unwrap();
    assert_eq!(concat(&one.weights), concat(&two.weights));
}

#[test]
fn spans_cover_every_action_once_per_step() {
    let plan = plan(ScheduleName::ZbH1, 2, 3, 1);
    let r = run_plan(&plan, Backend::Cpu, &opts(2), None).unwrap();
    let compute: Vec<_> = r
        .spans
        .iter()
        .filter(|s| s.span.stream == pplan_exec::backend::SpanStream::Compute)
        .collect();
    let actions = plan.schedule_ir().unwrap().num_actions();
    assert_eq!(compute.len(), 2 * actions);
    for step in 0..2 {
        assert_eq!(compute.iter().filter(|s| s.step == step).count(), actions);
    }
    // Two devices exchange an activation and a gradient per micro-batch each way.
    let sends = r
        .spans
        .iter()
        .filter(|s| s.span.stream == pplan_exec::backend::SpanStream::Send)
        .count();
    assert_eq!(sends, 2 * 2 * 3);
    assert_eq!(r.step_times_s.len(), 2);
    assert!(r.spans.iter().all(|s| s.span.end_ns >= s.span.start_ns));
}

/// The V placement puts stages p-1 and p on one device: a local handoff with no transfer spans.
#[test]
fn local_handoffs_record_no_transfer() {
    let plan = plan(ScheduleName::ZbV, 2, 2, 2);
    let r = run_plan(&plan, Backend::Cpu, &opts(1), None).unwrap();
    assert!(r
        .spans
        .iter()
        .filter(|s| s.span.name.contains("SEND") || s.span.name.contains("RECV"))
        .all(|s| s.span.peer != Some(s.span.device)));
}
