//! `--trace-format kineto`: the executor's run written as PyTorch-profiler traces (one per
//! device) reads back through `pplan::measured` with exactly the per-stage times of the same
//! run's pplan-format trace; the files have Kineto's shape (distributedInfo, ProfilerStep#N,
//! PP:0F1 annotations, kernels with their launches, NCCL send/recv kernels).

mod common;

use common::*;
use pplan::measured::breakdown::breakdown;
use pplan::measured::load::load;
use pplan::measured::timeline::{Collective, KernelClass, Source};
use pplan::schedule::generators::ScheduleName;
use pplan_exec::backend::RunOptions;
use pplan_exec::run::{run_plan, Backend};
use std::path::PathBuf;
use std::process::Command;

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pplan-exec-kineto-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn same_stage_times(name: ScheduleName, p: u32, m: u32, v: u32) {
    let plan = plan(name, p, m, v);
    let opts = RunOptions {
        steps: 3,
        ..RunOptions::default()
    };
    let r = run_plan(&plan, Backend::Cpu, &opts, None).unwrap();
    let tag = format!("{name:?}-{p}-{m}-{v}");
    let pplan_path = tmp(&format!("{tag}.json"));
    std::fs::write(
        &pplan_path,
        serde_json::to_string(&pplan_exec::run::trace(&r)).unwrap(),
    )
    .unwrap();
    let dir = tmp(&format!("{tag}-kineto"));
    std::fs::create_dir_all(&dir).unwrap();
    for (d, t) in pplan_exec::kineto::rank_traces(&r) {
        std::fs::write(dir.join(format!("rank-{d}.json")), t.to_string()).unwrap();
    }
    let a = load(&[pplan_path], None).unwrap();
    let b = load(&[dir], None).unwrap();
    assert_eq!((a.source, b.source), (Source::Pplan, Source::Kineto));
    assert_eq!(b.ranks.len(), p as usize);
    for r in &b.ranks {
        assert_eq!(r.steps.len(), 3, "rank {}", r.rank);
        // Every transfer is an NCCL send/recv kernel.
        assert!(r
            .kernels
            .iter()
            .any(|k| matches!(k.class, KernelClass::Comm(Collective::SendRecv, _))));
    }
    let (ba, bb) = (breakdown(&a, None).unwrap(), breakdown(&b, None).unwrap());
    assert_eq!(ba.stages.len(), (p * v) as usize);
    assert_eq!(ba.steps_skipped, bb.steps_skipped);
    // Same actions, same durations: the same per-stage means, to the nanosecond.
    assert_eq!(ba.stages, bb.stages, "{tag}");
    for (ra, rb) in a.ranks.iter().zip(&b.ranks) {
        let key = |r: &pplan::measured::timeline::RankTrace| {
            let mut v: Vec<_> = r
                .actions
                .iter()
                .map(|x| (x.action.to_string(), x.start_ns, x.end_ns))
                .collect();
            v.sort();
            v
        };
        assert_eq!(key(ra), key(rb), "rank {}", ra.rank);
    }
}

#[test]
fn kineto_traces_give_the_pplan_traces_stage_times_1f1b() {
    same_stage_times(ScheduleName::OneFOneB, 2, 4, 1);
}

#[test]
fn kineto_traces_give_the_pplan_traces_stage_times_zb_h1() {
    same_stage_times(ScheduleName::ZbH1, 2, 4, 1);
}

#[test]
fn kineto_traces_give_the_pplan_traces_stage_times_interleaved() {
    same_stage_times(ScheduleName::Interleaved1F1B, 2, 4, 2);
}

#[test]
fn run_writes_one_kineto_file_per_device() {
    let plan_path = tmp("plan.json");
    std::fs::write(&plan_path, plan(ScheduleName::OneFOneB, 2, 4, 1).to_json()).unwrap();
    let dir = tmp("cli-kineto");
    let o = Command::new(env!("CARGO_BIN_EXE_pplan-exec"))
        .args([
            "run",
            "--backend",
            "cpu",
            "--steps",
            "2",
            "--trace-format",
            "kineto",
        ])
        .arg("--plan")
        .arg(&plan_path)
        .arg("--trace")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for d in 0..2u64 {
        let text = std::fs::read_to_string(dir.join(format!("rank-{d}.json"))).unwrap();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["distributedInfo"]["rank"], d);
        assert_eq!(v["distributedInfo"]["world_size"], 2);
        let ev = v["traceEvents"].as_array().unwrap();
        let named = |cat: &str, pred: &dyn Fn(&str) -> bool| {
            ev.iter()
                .filter(|e| e["cat"] == cat && pred(e["name"].as_str().unwrap()))
                .count()
        };
        assert_eq!(
            named("user_annotation", &|n| n.starts_with("ProfilerStep#")),
            2
        );
        // 4 F and 4 B per step on each device, each annotated PP:<action>.
        assert_eq!(named("user_annotation", &|n| n.starts_with("PP:")), 16);
        assert_eq!(
            named("user_annotation", &|n| n == format!("PP:{d}F0")),
            2,
            "rank {d}"
        );
        assert_eq!(
            named("kernel", &|n| n.starts_with("ncclDevKernel_SendRecv")),
            16
        );
        // Every kernel has its launch, by correlation id.
        let launches: std::collections::BTreeSet<u64> = ev
            .iter()
            .filter(|e| e["cat"] == "cuda_runtime")
            .map(|e| e["args"]["correlation"].as_u64().unwrap())
            .collect();
        let kernels: Vec<&serde_json::Value> = ev.iter().filter(|e| e["cat"] == "kernel").collect();
        assert_eq!(kernels.len(), 16 + 16 + 2);
        for k in kernels {
            assert!(
                launches.contains(&k["args"]["correlation"].as_u64().unwrap()),
                "{k}"
            );
        }
    }
    // And pplan reads the directory as a two-rank Kineto run.
    let m = load(&[dir], None).unwrap();
    assert_eq!((m.source, m.ranks.len()), (Source::Kineto, 2));
}

/// A run with data-parallel replicas: each stage's gradient sum is an NCCL all-reduce kernel of
/// Megatron-Core's data-parallel group, which the reader counts as data-parallel communication.
#[test]
fn replicas_gradient_sums_read_back_as_data_parallel_communication() {
    let mut plan = plan(ScheduleName::OneFOneB, 2, 2, 1);
    plan.parallelism.dp = 2;
    plan.parallelism.gpus = 4;
    let opts = RunOptions {
        steps: 2,
        ..RunOptions::default()
    };
    let r = run_plan(&plan, Backend::Cpu, &opts, None).unwrap();
    let dir = tmp("dp2-kineto");
    std::fs::create_dir_all(&dir).unwrap();
    for (d, t) in pplan_exec::kineto::rank_traces(&r) {
        std::fs::write(dir.join(format!("rank-{d}.json")), t.to_string()).unwrap();
    }
    let m = load(&[dir], None).unwrap();
    for rank in &m.ranks {
        assert!(
            rank.kernels
                .iter()
                .any(|k| matches!(k.class, KernelClass::Comm(Collective::AllReduce, _))),
            "rank {}: no all-reduce kernel",
            rank.rank
        );
    }
    let b = breakdown(&m, None).unwrap();
    let dp = b.mean.comm.get("dp").map_or(0.0, |c| c.total_s);
    // (The pipeline's send/recv kernels stay unattributed without a plan's sizes.)
    assert!(dp > 0.0, "{:?}", b.mean.comm);
}
