//! Sharded data parallelism (`--zero 0|1|2|3`, `--dp-replicate R`): memory per rank, the
//! collectives each stage adds per step and per micro-batch, the flow shop that hides them,
//! HSDP's replica all-reduce, and the checks.

use pplan::cost::compute::sharded_exposure;
use pplan::cost::memory::{model_state_parts, sharded_working_bytes, StateBytes};
use pplan::cost::{all_reduce_s, Attention, CostModel, Layout, Recompute, Stack, Zero};
use pplan::inputs::{Hardware, Model};
use pplan::plan::predict::{predict, PredictError, PredictRequest};
use std::process::Command;

#[test]
fn state_per_rank_for_each_stage() {
    // 1000 parameters over 8 ranks; 2 bytes of FP8 copies per parameter.
    let fp8 = StateBytes {
        extra_weight: 2,
        ..StateBytes::ADAM
    };
    let parts = |z| model_state_parts(1000, 8, z, fp8);
    assert_eq!(parts(Zero::Off), (4000, 2000, 12000));
    assert_eq!(parts(Zero::Optimizer), (4000, 2000, 1500));
    assert_eq!(parts(Zero::Gradients), (4000, 250, 1500));
    assert_eq!(parts(Zero::Full), (500, 250, 1500));
    // Working memory (4 bytes a weight: 16-bit + copies): ZeRO-3 gathers two layers and holds one layer's
    // gradients; without resharding every gathered weight stays; ZeRO-2 one layer's gradients.
    assert_eq!(
        sharded_working_bytes(1000, 100, 8, Zero::Full, true, 4),
        800 + 200
    );
    // FP8 weights only (--fp8-param-gather): the gathered layers are their 2 bytes of casts.
    let fp8_only = StateBytes { weight: 0, ..fp8 };
    assert_eq!(model_state_parts(1000, 8, Zero::Full, fp8_only).0, 250);
    assert_eq!(
        sharded_working_bytes(
            1000,
            100,
            8,
            Zero::Full,
            true,
            fp8_only.weight + fp8_only.extra_weight
        ),
        400 + 200
    );
    assert_eq!(
        sharded_working_bytes(1000, 100, 8, Zero::Full, false, 4),
        3500 + 200
    );
    assert_eq!(
        sharded_working_bytes(1000, 100, 8, Zero::Gradients, true, 4),
        200
    );
    assert_eq!(
        sharded_working_bytes(1000, 100, 8, Zero::Optimizer, true, 4),
        0
    );
}

#[test]
fn flow_shop_of_gathers_and_reduce_scatters_against_a_hand_count() {
    // Four layers; forward 2 s a layer, gather 1 s: 1 + 3 x 2 + 2 = 9 s against 8 of compute.
    let e = sharded_exposure(Zero::Full, true, 4.0, (8.0, 3.0, 1.0), (1.0, 0.5));
    assert_eq!((e.forward_exposed_s, e.forward_hidden_s), (1.0, 3.0));
    // Backward 1 s a layer (i + w = 4 s), gather + reduce-scatter 1.5 s a layer:
    // 1.5 + 3 x 1.5 + 1 = 7 s against 4: 3 s exposed, of which the last reduce-scatter (0.5 s)
    // trails the weight gradients; 6 - 3 = 3 s hidden.
    assert_eq!(e.backward_input_exposed_s, 2.5);
    assert_eq!(e.backward_weight_exposed_s, 0.5);
    assert_eq!(e.backward_hidden_s, 3.0);
    // Without resharding the backward only reduce-scatters: 0.5 + 3 x 1 + 1 = 4.5 s.
    let e = sharded_exposure(Zero::Full, false, 4.0, (8.0, 3.0, 1.0), (1.0, 0.5));
    assert_eq!(
        e.backward_input_exposed_s + e.backward_weight_exposed_s,
        0.5
    );
    // ZeRO-2: no forward gathers; ZeRO-1 and 0: nothing per micro-batch.
    let e = sharded_exposure(Zero::Gradients, true, 4.0, (8.0, 3.0, 1.0), (1.0, 0.5));
    assert_eq!((e.forward_exposed_s, e.forward_hidden_s), (0.0, 0.0));
    assert_eq!(e.backward_weight_exposed_s, 0.5);
    for z in [Zero::Off, Zero::Optimizer] {
        assert_eq!(
            sharded_exposure(z, true, 4.0, (8.0, 3.0, 1.0), (1.0, 0.5)),
            Default::default()
        );
    }
}

fn cost_model<'a>(
    m: &'a Model,
    hw: &'a Hardware,
    dp: u64,
    replicas: u64,
    zero: Zero,
) -> CostModel<'a> {
    CostModel {
        model: m,
        hw,
        layout: Layout {
            tp: 1,
            pp: 1,
            dp,
            cp: 1,
            dp_replicate: replicas,
            micro_batch: 1,
            chunks: 1,
            sequence_parallel: false,
            recompute: Recompute::Full,
            ep: 1,
            etp: 1,
        },
        stack: Stack {
            zero,
            ..Stack::default()
        },
    }
}

#[test]
fn what_stays_at_the_end_of_the_step_and_what_runs_per_micro_batch() {
    let hw = Hardware::bundled("h100-80gb").unwrap();
    let m = Model::preset("llama3-8b").unwrap();
    let params = 1e9;
    let (nvl, nic) = (hw.nvlink_bytes_per_s(), hw.nic_bytes_per_s_per_gpu(false));
    let (nvl_lat, nic_lat) = (hw.node.nvlink_latency_s, hw.node.nic_latency_s);
    // d = 16, t = 1: eight ranks a node; 2 bytes per gradient.
    let full = all_reduce_s(2e9, 8, nvl, nvl_lat) + all_reduce_s(2e9 / 8.0, 2, nic, nic_lat);
    let at_end = |z| cost_model(&m, &hw, 16, 1, z).step_grad_reduce_s(params);
    assert!((at_end(Zero::Off) / full - 1.0).abs() < 1e-12);
    assert!((at_end(Zero::Optimizer) / full - 1.0).abs() < 1e-12);
    assert!((at_end(Zero::Gradients) / (full / 2.0) - 1.0).abs() < 1e-12);
    assert_eq!(at_end(Zero::Full), 0.0);
    // Per layer and micro-batch: nothing below ZeRO-2; a gather of the 16-bit parameters and a
    // reduce-scatter of the gradients, half an all-reduce each.
    assert_eq!(
        cost_model(&m, &hw, 16, 1, Zero::Optimizer).sharded_layer_comm_s(params),
        (0.0, 0.0)
    );
    let (ag, rs) = cost_model(&m, &hw, 16, 1, Zero::Full).sharded_layer_comm_s(params);
    assert!((ag / (full / 2.0) - 1.0).abs() < 1e-12 && (rs / (full / 2.0) - 1.0).abs() < 1e-12);
    // HSDP, 2 replicas of 8: the shard group is one node (NVLink only); the replicas
    // all-reduce each rank's 1/8 shard across the two nodes.
    let (ag, rs) = cost_model(&m, &hw, 16, 2, Zero::Full).sharded_layer_comm_s(params);
    let shard = all_reduce_s(2e9, 8, nvl, nvl_lat) / 2.0;
    let replica = all_reduce_s(2e9 / 8.0, 2, nic, nic_lat);
    assert!((ag / shard - 1.0).abs() < 1e-12);
    assert!((rs / (shard + replica) - 1.0).abs() < 1e-12);
}

fn request<'a>(m: &'a Model, hw: &'a Hardware, zero: Zero) -> PredictRequest<'a> {
    let mut r = PredictRequest::new(m, hw);
    r.gpus = 64;
    r.global_batch = 128;
    r.micro_batch = 2;
    r.recompute = Recompute::Full;
    r.stack = Stack {
        zero,
        attention: Attention::Flash,
        overlap_grad_reduce: true,
        ..Stack::default()
    };
    r
}

#[test]
fn fsdp_fits_what_replication_cannot_and_pays_per_micro_batch() {
    let hw = Hardware::bundled("a100-80gb").unwrap();
    let m = Model::preset("llama3-70b").unwrap();
    let preds: Vec<_> = Zero::ALL
        .iter()
        .map(|&z| predict(&request(&m, &hw, z)).unwrap())
        .collect();
    assert_eq!(
        preds.iter().map(|p| p.zero).collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
    assert!(!preds[1].fits && preds[3].fits);
    let state = |i: usize| {
        let b = &preds[i].memory_breakdown;
        b.weights + b.gradients + b.optimizer
    };
    assert!(state(0) > state(1) && state(1) > state(2) && state(2) > state(3));
    // 70B over 64 ranks in 16-bit: about 2.2 GB of weights per rank.
    assert!((preds[3].memory_breakdown.weights as f64 / (2.0 * 70.6e9 / 64.0) - 1.0).abs() < 0.02);
    // Gathering every layer twice and reduce-scattering every micro-batch costs time.
    assert!(preds[3].step_time_s > preds[1].step_time_s);
}

#[test]
fn replicas_need_a_sharded_state_and_must_divide_d() {
    let hw = Hardware::bundled("a100-80gb").unwrap();
    let m = Model::preset("llama3-8b").unwrap();
    let mut r = request(&m, &hw, Zero::Off);
    r.dp_replicate = 2;
    let e = predict(&r).unwrap_err();
    assert!(
        matches!(e, PredictError::Replicate { replicas: 2, .. }),
        "{e}"
    );
    let mut r = request(&m, &hw, Zero::Full);
    r.dp_replicate = 3;
    assert!(predict(&r)
        .unwrap_err()
        .to_string()
        .contains("must divide the data-parallel size 64"));
    r.dp_replicate = 8;
    let p = predict(&r).unwrap();
    assert_eq!((p.zero, p.dp_replicate), (3, 8));
}

#[test]
fn zero_flags_on_the_command_line() {
    let run = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_pplan"))
            .args([
                "predict",
                "--model",
                "llama3-8b",
                "--gpus",
                "64",
                "--global-batch",
                "128",
            ])
            .args(["--format", "json"])
            .args(args)
            .output()
            .unwrap()
    };
    let ok = run(&["--zero", "3", "--dp-replicate", "8"]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(
        (v["zero"].as_u64(), v["dp_replicate"].as_u64()),
        (Some(3), Some(8))
    );
    assert_eq!(v["zero1"], true);
    // The old spelling still works and means stage 1.
    let old = run(&["--zero1"]);
    let v: serde_json::Value = serde_json::from_slice(&old.stdout).unwrap();
    assert_eq!(v["zero"].as_u64(), Some(1));
    for (args, says) in [
        (&["--zero", "4"][..], "--zero: unknown ZeRO stage '4'"),
        (&["--zero", "3", "--zero1", "off"][..], "disagree"),
        (
            &["--zero", "0", "--dp-replicate", "2"][..],
            "--dp-replicate 2",
        ),
    ] {
        let o = run(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
