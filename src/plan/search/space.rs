//! The search space: the structural checks that need no costs and the enumeration of
//! candidates (one layout, micro-batch, schedule, chunk count, recomputation, sequence
//! parallelism and ZeRO setting each), counting what each constraint excludes.

use super::candidate::Candidate;
use super::outcome::{Reason, SearchError, Tally, MAX_GLOBAL_BATCH, MAX_GPUS};
use super::request::SearchRequest;
use crate::cost::{Recompute, Zero};
use crate::plan::predict::{divisors, Split, MAX_SIMULATED_ACTIONS};
use crate::schedule::generators::ScheduleName;
use crate::schedule::ir::Placement;

/// The synchronous schedules searched when `--schedule` is not pinned. The asynchronous
/// PipeDream schedules change the training semantics (stale weights) and are searched only
/// when pinned.
pub const SEARCHED_SCHEDULES: [ScheduleName; 8] = [
    ScheduleName::GPipe,
    ScheduleName::OneFOneB,
    ScheduleName::Interleaved1F1B,
    ScheduleName::ZbH1,
    ScheduleName::ZbH2,
    ScheduleName::ZbV,
    ScheduleName::DualPipeV,
    ScheduleName::LoopedBfs,
];

pub(super) fn check_inputs(req: &SearchRequest) -> Result<(), SearchError> {
    if let Err(e) = req.hardware.peak_flops_per_s_for(req.stack.precision) {
        return Err(SearchError::Pin(format!("--precision: {e}")));
    }
    if req.stack.attention == crate::cost::Attention::Flash
        && req.hardware.attention_efficiencies().is_none()
    {
        let e = crate::plan::predict::PredictError::NoAttentionEfficiency {
            hardware: req.hardware.name.clone(),
        };
        return Err(SearchError::Pin(e.to_string()));
    }
    for (flag, value) in [("--gpus", req.gpus), ("--global-batch", req.global_batch)] {
        if value == 0 {
            return Err(SearchError::Zero { flag, value });
        }
    }
    if req.top == 0 {
        return Err(SearchError::Zero {
            flag: "--top",
            value: 0,
        });
    }
    for (flag, value, max) in [
        ("--gpus", req.gpus, MAX_GPUS),
        ("--global-batch", req.global_batch, MAX_GLOBAL_BATCH),
    ] {
        if value > max {
            return Err(SearchError::TooLargeInput { flag, value, max });
        }
    }
    let p = &req.pins;
    for (flag, value) in [
        ("--tp", p.tp),
        ("--pp", p.pp),
        ("--dp", p.dp),
        ("--micro-batch", p.micro_batch),
        ("--chunks", p.chunks),
        ("--cp", p.cp),
        ("--ep", p.ep),
        ("--etp", p.etp),
    ] {
        if value == Some(0) {
            return Err(SearchError::Zero { flag, value: 0 });
        }
    }
    for (flag, value) in [
        ("--tp", p.tp),
        ("--pp", p.pp),
        ("--dp", p.dp),
        ("--cp", p.cp),
    ] {
        if let Some(v) = value {
            if req.gpus % v != 0 {
                return Err(SearchError::Pin(format!(
                    "{flag} {v} does not divide --gpus {}; valid {flag}: {}",
                    req.gpus,
                    list(&divisors(req.gpus))
                )));
            }
        }
    }
    if req.model.moe.is_none() && (p.ep.is_some_and(|e| e > 1) || p.etp.is_some_and(|e| e > 1)) {
        return Err(SearchError::Pin(format!(
            "--ep and --etp above 1 need a mixture-of-experts model ({} is dense); valid: --ep 1 --etp 1",
            req.model.name
        )));
    }
    if let (Some(moe), Some(e)) = (&req.model.moe, p.ep) {
        if moe.num_experts % e != 0 {
            return Err(SearchError::Pin(format!(
                "--ep {e} does not divide the model's {} experts; valid --ep: {}",
                moe.num_experts,
                list(&divisors(moe.num_experts))
            )));
        }
    }
    if p.cp.is_some_and(|c| c > 1) && req.stack.attention != crate::cost::Attention::Flash {
        return Err(SearchError::Pin(
            "--cp above 1 needs --attention flash (Megatron-Core runs context parallelism inside Transformer Engine's fused attention)".to_string(),
        ));
    }
    if let (Some(s), Some(v)) = (p.schedule, p.chunks) {
        let ok = match s.fixed_chunks() {
            Some(f) => v == f as u64,
            None => v == 1 || s.supports_chunks(),
        };
        if !ok {
            return Err(SearchError::Pin(format!(
                "--chunks {v} does not apply to --schedule {s}: {}",
                match s.fixed_chunks() {
                    Some(f) => format!("it always uses {f} chunks per device"),
                    None => "it places one stage per device (--chunks 1)".to_string(),
                }
            )));
        }
    }
    Ok(())
}

fn list(v: &[u64]) -> String {
    let s: Vec<String> = v.iter().map(u64::to_string).collect();
    s.join(", ")
}

/// Enumerate the structurally valid candidates, counting what the constraints exclude.
pub(super) fn enumerate(req: &SearchRequest, tally: &mut Tally) -> (u64, u64, u64, Vec<Candidate>) {
    let model = req.model;
    let layers = model.num_layers as u64;
    // Unpinned, t stays inside an NVLink domain and tiles it: no GPU is left idle.
    let domain = req.hardware.nvlink_domain_gpus() as u64;
    let pins = &req.pins;
    let n = req.gpus;
    let mut layouts = 0u64;
    let mut layouts_valid = 0u64;
    let mut evaluated = 0u64;
    let mut out = Vec::new();
    let schedules: Vec<ScheduleName> = match pins.schedule {
        Some(s) => vec![s],
        None => SEARCHED_SCHEDULES.to_vec(),
    };
    // Mixture of experts: Megatron-Core's recompute modules too (the ModelZoo recipes'
    // `layernorm moe_act`, and `layernorm moe` for long sequences).
    let recomputes: Vec<Recompute> = match pins.recompute {
        Some(r) => vec![r],
        None if req.model.moe.is_some() => {
            let mut v = Recompute::ALL.to_vec();
            v.extend([Recompute::NormAct, Recompute::NormMoe]);
            v
        }
        None => Recompute::ALL.to_vec(),
    };
    let flash = req.stack.attention == crate::cost::Attention::Flash;
    // With a Megatron-Core split rule, whether it splits `layers` over p x v stages.
    let rule_splits = |p: u64, v: u64, s: ScheduleName| {
        req.split_rule.is_none_or(|r| {
            r.stage_layers(
                layers as u32,
                p as u32,
                v as u32,
                s.placement() == Placement::V,
            )
            .is_ok()
        })
    };
    let even_split = match req.split_rule {
        Some(rule) => Split::Megatron(rule),
        None => Split::Even,
    };
    for t in divisors(n) {
        if pins.tp.is_some_and(|x| x != t) {
            continue;
        }
        // Context parallelism runs only in the fused attention kernel.
        let cps: Vec<u64> = match pins.cp {
            Some(c) => vec![c],
            None if flash => divisors(n / t),
            None => vec![1],
        };
        for c in cps.into_iter().filter(|&c| (n / t) % c == 0) {
            for p in divisors(n / t / c) {
                if pins.pp.is_some_and(|x| x != p) {
                    continue;
                }
                let d = n / t / c / p;
                if pins.dp.is_some_and(|x| x != d) {
                    continue;
                }
                layouts += 1;
                let tc = t * c;
                let layout_reason = if pins.tp.is_none() && (t > domain || domain % t != 0) {
                    Some(Reason::TpAcrossNodes)
                } else if model.num_heads % t != 0 || model.num_kv_heads % t != 0 {
                    Some(Reason::TpHeads)
                } else if c > 1 && pins.cp.is_none() && (tc > domain || domain % tc != 0) {
                    Some(Reason::CpAcrossNodes)
                } else if c > 1 && model.seq_len % (2 * c) != 0 {
                    Some(Reason::CpSequence)
                } else if req.global_batch % d != 0 {
                    Some(Reason::BatchNotDivisible)
                } else if pins
                    .micro_batch
                    .is_some_and(|b| (req.global_batch / d) % b != 0)
                {
                    Some(Reason::MicroBatchNotDivisible)
                } else {
                    None
                };
                if let Some(r) = layout_reason {
                    tally.add(r, 1);
                    continue;
                }
                layouts_valid += 1;
                let per_replica = req.global_batch / d;
                let sps: Vec<bool> = match pins.sequence_parallel {
                    Some(x) => vec![x],
                    None if t > 1 => vec![false, true],
                    None => vec![false],
                };
                // Unpinned, replicated state (ZeRO-0) is not enumerated where ZeRO-1 applies
                // (in Megatron's stacks):
                // the same bytes cross the network (reduce-scatter + all-gather = all-reduce),
                // the optimizer step runs on a shard and less memory is held, so it never
                // ranks above its ZeRO-1 twin.
                let zeros: Vec<Zero> = match pins.zero {
                    Some(z) => vec![z],
                    // Mixture of experts: ZeRO-2/3 are costed (pin --zero), but enumerating
                    // them triples a space of up to a million candidates (DeepSeek-V3 on
                    // 2,048 GPUs: 2.9 s against the 2 s budget), so unpinned MoE stays at 1.
                    None if d * c > 1 && model.moe.is_some() => vec![Zero::Optimizer],
                    // torchtitan replicates (DDP) or shards everything (FSDP2): it has no
                    // sharded optimizer alone, nor sharded gradients alone.
                    None if d * c > 1 && req.stack.fsdp2 => vec![Zero::Off, Zero::Full],
                    None if d * c > 1 => vec![Zero::Optimizer, Zero::Gradients, Zero::Full],
                    None => vec![Zero::Off],
                };
                // HSDP replicas apply to sharded state whose d they divide.
                let replicas = |z: Zero| match pins.dp_replicate {
                    Some(r) if z.shards_optimizer() && d % r == 0 => r,
                    _ => 1,
                };
                let experts = expert_layouts(req, t, c, d);
                let variants = (recomputes.len() * sps.len() * zeros.len() * experts.len()) as u64;
                let bs = match pins.micro_batch {
                    Some(b) => vec![b],
                    None => divisors(per_replica),
                };
                for &b in &bs {
                    let m = per_replica / b;
                    for &s in &schedules {
                        // With one pipeline device every schedule runs the same work back to back;
                        // 1F1B holds the fewest activations, so the others are not enumerated.
                        if p == 1 && pins.schedule.is_none() && s != ScheduleName::OneFOneB {
                            continue;
                        }
                        let vs: Vec<u64> = match (s.fixed_chunks(), pins.chunks) {
                            (Some(f), _) => vec![f as u64],
                            (None, Some(v)) if s.supports_chunks() || v == 1 => vec![v],
                            (None, Some(_)) => continue,
                            // Every chunk count the rule splits (at most the layers it counts,
                            // two more than the transformer layers).
                            (None, None) if s.supports_chunks() && req.split_rule.is_some() => {
                                if p > 1 {
                                    (2..=(layers + 2) / p)
                                        .filter(|&v| rule_splits(p, v, s))
                                        .collect()
                                } else {
                                    Vec::new()
                                }
                            }
                            (None, None) if s.supports_chunks() => {
                                if p > 1 && layers % p == 0 {
                                    divisors(layers / p)
                                        .into_iter()
                                        .filter(|&v| v > 1)
                                        .collect()
                                } else {
                                    Vec::new()
                                }
                            }
                            (None, None) => vec![1],
                        };
                        for v in vs {
                            evaluated += variants;
                            let stages = p.saturating_mul(v);
                            let per_pair = if s.splits_backward() { 3u128 } else { 2 };
                            let reason = if v > 1 && p == 1 {
                                Some(Reason::ChunksNeedPipeline)
                            } else if !rule_splits(p, v, s) {
                                Some(Reason::LayersNotDivisible)
                            } else if req.split_rule.is_none() && stages > layers {
                                Some(Reason::TooManyStages)
                            } else if req.split_rule.is_none()
                                && v > 1
                                && s.supports_chunks()
                                && layers % stages != 0
                            {
                                Some(Reason::LayersNotDivisible)
                            } else if s == ScheduleName::Interleaved1F1B && v > 1 && m % p != 0 {
                                Some(Reason::MicrobatchesNotMultipleOfP)
                            } else if (s == ScheduleName::DualPipeV && m < 2 * p)
                                || (s == ScheduleName::PipeDream2BW && m < p)
                            {
                                Some(Reason::TooFewMicrobatches)
                            } else if per_pair * m as u128 * stages as u128
                                > MAX_SIMULATED_ACTIONS as u128
                                || m > u32::MAX as u64
                            {
                                Some(Reason::TooLarge)
                            } else {
                                None
                            };
                            if let Some(r) = reason {
                                tally.add(r, variants);
                                continue;
                            }
                            for &recompute in &recomputes {
                                for &sp in &sps {
                                    for &z in &zeros {
                                        for &(ep, etp) in &experts {
                                            out.push(Candidate {
                                                tp: t,
                                                pp: p,
                                                dp: d,
                                                cp: c,
                                                micro_batch: b,
                                                microbatches: m,
                                                schedule: s,
                                                chunks: v,
                                                recompute,
                                                sequence_parallel: sp,
                                                zero: z,
                                                dp_replicate: replicas(z),
                                                split: even_split,
                                                ep,
                                                etp,
                                            });
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    (layouts, layouts_valid, evaluated, out)
}

/// The (ep, etp) pairs of a layout: (1, 1) for a dense model; for a MoE model every pinned or
/// enumerated ep dividing the expert count, with etp 1 or t (pinned: as given), such that
/// ep x etp divides the t x cp x d ranks of a stage (Megatron-Core carves the expert-parallel
/// ranks from them).
pub(super) fn expert_layouts(req: &SearchRequest, t: u64, c: u64, d: u64) -> Vec<(u64, u64)> {
    let pins = &req.pins;
    let Some(moe) = &req.model.moe else {
        return vec![(1, 1)];
    };
    let ranks = t * c * d;
    let etps: Vec<u64> = match pins.etp {
        Some(x) => vec![x],
        None if t > 1 => vec![1, t],
        None => vec![1],
    };
    let mut out = Vec::new();
    for etp in etps {
        if ranks % etp != 0 {
            continue;
        }
        let eps: Vec<u64> = match pins.ep {
            Some(e) => vec![e],
            None => divisors(ranks / etp),
        };
        for ep in eps {
            if moe.num_experts % ep == 0 && ranks % (ep * etp) == 0 {
                out.push((ep, etp));
            }
        }
    }
    out
}
