//! The search space: the structural checks that need no costs and the enumeration of
//! candidates (one layout, micro-batch, schedule, chunk count, recomputation, sequence
//! parallelism and ZeRO setting each), counting what each constraint excludes.

use super::candidate::Candidate;
use super::outcome::{Reason, SearchError, Tally, MAX_GLOBAL_BATCH, MAX_GPUS};
use super::request::{PartitionMode, SearchRequest};
use crate::cost::{Recompute, Zero};
use crate::plan::predict::PipelineSplit;
use crate::plan::predict::{divisors, Split, MAX_SIMULATED_ACTIONS};
use crate::schedule::generators::{check_group, smallest_group, ScheduleName};
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
        (
            "--microbatch-group-size-per-virtual-pipeline-stage",
            p.microbatch_group,
        ),
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
    if p.microbatch_group.is_some()
        && (p
            .schedule
            .is_some_and(|s| s != ScheduleName::Interleaved1F1B)
            || p.chunks == Some(1)
            || p.pp == Some(1))
    {
        return Err(SearchError::Pin(
            "--microbatch-group-size-per-virtual-pipeline-stage applies to interleaved-1f1b with --chunks > 1 and --pp > 1; valid: leave --schedule, --chunks and --pp unpinned or pin them so".into(),
        ));
    }
    if let Some(layout) = &req.layout {
        if layout.len() as u64 > u32::MAX as u64 {
            return Err(SearchError::Pin(
                "--pipeline-layout: too many stages".into(),
            ));
        }
        let total: u64 = layout.iter().map(|&x| x as u64).sum();
        if total != req.model.num_layers as u64 {
            return Err(SearchError::Pin(format!(
                "--pipeline-layout places {total} transformer layers, but {} has {}",
                req.model.name, req.model.num_layers
            )));
        }
        if let (Some(pp), Some(v)) = (p.pp, p.chunks) {
            if pp.saturating_mul(v) != layout.len() as u64 {
                return Err(SearchError::Pin(format!(
                    "--pipeline-layout has {} stages, but --pp {pp} x --chunks {v} = {}; valid: --pp x --chunks = {}",
                    layout.len(),
                    pp.saturating_mul(v),
                    layout.len()
                )));
            }
        }
        if req.split_rule.is_some() || req.partition != PartitionMode::Even {
            return Err(SearchError::Pin(
                "--pipeline-layout fixes every stage's layers: it cannot be combined with --partition balanced/both or Megatron-Core's split-rule flags; valid: one of them".into(),
            ));
        }
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
        // A pinned micro-batch group is interleaved 1F1B's.
        None if pins.microbatch_group.is_some() => vec![ScheduleName::Interleaved1F1B],
        None => SEARCHED_SCHEDULES.to_vec(),
    };
    // Mixture of experts: Megatron-Core's recompute modules too (the ModelZoo recipes'
    // `layernorm moe_act`, and `layernorm moe` for long sequences).
    // Latent attention: Megatron-Core's `mla_up_proj` module too (the DeepSeek-V3 recipes').
    let recomputes: Vec<Recompute> = match pins.recompute {
        Some(r) => vec![r],
        None => {
            let mut v = Recompute::ALL.to_vec();
            if req.model.moe.is_some() {
                v.extend([Recompute::NormAct, Recompute::NormMoe]);
            }
            if req.model.mla.is_some() {
                v.push(Recompute::MlaUpProj);
            }
            v
        }
    };
    // Per-layer CUDA graphs do not run with full recomputation (Megatron-Core refuses it):
    // unpinned, it is not enumerated (a pinned one was refused with the flags).
    let per_layer_graphs = req.stack.cuda_graphs.enabled()
        && req.stack.cuda_graphs.implementation
            != crate::cost::recipe::CudaGraphImpl::FullIteration;
    let recomputes: Vec<Recompute> = recomputes
        .into_iter()
        .filter(|&r| !(per_layer_graphs && r == Recompute::Full))
        .collect();
    let flash = req.stack.attention == crate::cost::Attention::Flash;
    // How each (p, v, schedule) splits the layers, or why it cannot.
    let split_for = |p: u64, v: u64, s: ScheduleName| split_for(req, p, v, s);
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
                } else if c > 1
                    && pins.cp.is_none()
                    && domain % tc != 0
                    && !(t == domain && tc % domain == 0 && cp_ring_hides(req, t, c, p, d))
                {
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
                if experts.is_empty() {
                    tally.add_example(Reason::ExpertLayout, 1, || {
                        expert_layout_example(req, t, c, d)
                    });
                    continue;
                }
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
                            // The chunk count the layout string fixes.
                            (None, None) if s.supports_chunks() && req.layout.is_some() => {
                                let stages = req.layout.as_ref().map_or(0, |l| l.len() as u64);
                                if p > 1 && stages % p == 0 && stages / p > 1 {
                                    vec![stages / p]
                                } else {
                                    Vec::new()
                                }
                            }
                            // The chunk counts whose stages divide the layers, the layers and
                            // the embedding or the loss, or all three (Megatron-Core's split
                            // rules), and the counts Megatron-Core's recipes interleave with
                            // (UNEVEN_CHUNKS), split by a balanced layout string where nothing
                            // divides (`split_for`).
                            (None, None) if s.supports_chunks() => {
                                if p > 1 {
                                    (2..=(layers + 2) / p)
                                        .filter(|&v| {
                                            (0..=2).any(|k| (layers + k) % (p * v) == 0)
                                                || (s == ScheduleName::Interleaved1F1B
                                                    && UNEVEN_CHUNKS.contains(&v))
                                        })
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
                            let split = split_for(p, v, s);
                            // Megatron-Core's micro-batch group where p does not divide m.
                            let group = if s == ScheduleName::Interleaved1F1B && v > 1 {
                                microbatch_group(pins.microbatch_group, p, m)
                            } else {
                                Ok(None)
                            };
                            let group_refused = group.is_err();
                            let reason = if v > 1 && p == 1 {
                                Some(Reason::ChunksNeedPipeline)
                            } else if let Err(r) = split {
                                Some(r)
                            } else if (s == ScheduleName::DualPipeV && m < 2 * p)
                                || (s == ScheduleName::PipeDream2BW && m < p)
                                || (group_refused && m < p)
                            {
                                Some(Reason::TooFewMicrobatches)
                            } else if group_refused {
                                Some(Reason::MicrobatchGroup)
                            } else if per_pair * m as u128 * stages as u128
                                > MAX_SIMULATED_ACTIONS as u128
                                || m > u32::MAX as u64
                            {
                                Some(Reason::TooLarge)
                            } else {
                                None
                            };
                            if let Some(r) = reason {
                                tally.add_example(r, variants, || {
                                    candidate_example(req, r, (p, v, m), s)
                                });
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
                                                split: split.unwrap_or(Split::Even),
                                                ep,
                                                etp,
                                                microbatch_group: group.ok().flatten(),
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

/// Chunk counts searched even where nothing divides the layers into equal stages (then a
/// balanced layout string splits them): the virtual pipeline sizes Megatron-Bridge's
/// performance recipes interleave with where the layers do not divide (DeepSeek-V3's 61 layers
/// at VP 2 and 4, Llama 3.1 405B's 126 at VP 4, 8 and 16).
pub const UNEVEN_CHUNKS: [u64; 2] = [2, 4];

/// How a candidate with `p` pipeline ranks of `v` chunks under schedule `s` splits the
/// layers, as Megatron-Core would run it (docs/partition.md, "Megatron-Core's split rules"):
/// the layout string or the split rule the request pins; else evenly when p x v divides the
/// layers (or one chunk per rank, the first ranks a layer more); else the embedding and the
/// loss counted as layers, or one of them, where that divides; else a balanced layout string
/// (stages a layer apart), where every stage keeps a layer. `Err` names why none holds.
pub(super) fn split_for(
    req: &SearchRequest,
    p: u64,
    v: u64,
    s: ScheduleName,
) -> Result<Split, Reason> {
    let layers = req.model.num_layers as u64;
    let stages = p.saturating_mul(v);
    if let Some(layout) = &req.layout {
        // The MTP stage in its rank's last virtual stage (`Layout::check`).
        let mtp_ok = req.layout_mtp_stage.is_none_or(|m| m as u64 + p >= stages);
        return if layout.len() as u64 == stages && mtp_ok {
            Ok(Split::Even)
        } else {
            Err(Reason::LayersNotDivisible)
        };
    }
    let v_placed = s.placement() == Placement::V;
    let splits = |rule: &PipelineSplit| {
        stages <= u32::MAX as u64
            && rule
                .stage_layers(layers as u32, p as u32, v as u32, v_placed)
                .is_ok()
    };
    if let Some(rule) = req.split_rule {
        return if splits(&rule) {
            Ok(Split::Megatron(rule))
        } else {
            Err(Reason::LayersNotDivisible)
        };
    }
    let equal_chunks = v == 1 || !s.supports_chunks();
    if stages <= layers && (equal_chunks || layers % stages == 0) {
        return Ok(Split::Even);
    }
    let rules = [
        PipelineSplit::EMBEDDING_AND_LOSS,
        PipelineSplit {
            embedding: true,
            ..PipelineSplit::default()
        },
        PipelineSplit {
            loss: true,
            ..PipelineSplit::default()
        },
    ];
    if let Some(rule) = rules.into_iter().find(splits) {
        return Ok(Split::Megatron(rule));
    }
    if stages <= layers {
        Ok(Split::Even)
    } else {
        Err(Reason::TooManyStages)
    }
}

/// The micro-batch group an interleaved candidate of `p` ranks and `m` micro-batches runs
/// with (Megatron-Core's `--microbatch-group-size-per-virtual-pipeline-stage`): `None` for
/// Megatron-LM's default (p, where p divides m), the pinned group where Megatron-Core accepts
/// it, else the smallest it accepts; `Err` when none holds.
fn microbatch_group(pinned: Option<u64>, p: u64, m: u64) -> Result<Option<u64>, ()> {
    let (p32, m32) = (p as u32, m.min(u32::MAX as u64) as u32);
    match pinned {
        Some(n) => {
            check_group(p32, m32, n.min(u32::MAX as u64) as u32).map_err(|_| ())?;
            Ok((n != p || m % p != 0).then_some(n))
        }
        None if m % p == 0 => Ok(None),
        None => smallest_group(p32, m32)
            .map(|k| Some(u64::from(k)))
            .ok_or(()),
    }
}

/// Why a (t, cp, d) layout has no expert layout, with its numbers and the valid ep values.
fn expert_layout_example(req: &SearchRequest, t: u64, c: u64, d: u64) -> String {
    let ranks = t * c * d;
    let experts = req.model.moe.as_ref().map_or(0, |m| m.num_experts);
    let etp = req.pins.etp.unwrap_or(1);
    let valid: Vec<String> = divisors(ranks / etp.max(1))
        .into_iter()
        .filter(|&e| ranks % etp.max(1) == 0 && experts % e == 0)
        .map(|e| e.to_string())
        .collect();
    format!(
        "t={t} cp={c} d={d}: ep {} x etp {etp} must divide the {ranks} ranks of a stage; valid --ep: {}, or fewer pipeline stages (--pp) for more ranks a stage",
        req.pins.ep.map_or("(any)".to_string(), |e| e.to_string()),
        if valid.is_empty() { "none".to_string() } else { valid.join(", ") }
    )
}

/// One excluded candidate in words: its p, v, m and schedule, what failed with the numbers,
/// and the flag that would make it run.
fn candidate_example(
    req: &SearchRequest,
    r: Reason,
    (p, v, m): (u64, u64, u64),
    s: ScheduleName,
) -> String {
    let layers = req.model.num_layers as u64;
    let stages = p.saturating_mul(v);
    let head = format!("p={p} v={v} m={m} {s}");
    match r {
        Reason::TooManyStages => format!(
            "{head}: {stages} stages for {layers} layers ({} with the embedding and the loss as layers); fewer --chunks or --pp",
            layers + 2
        ),
        Reason::LayersNotDivisible => match (&req.layout, req.split_rule) {
            (Some(l), _) => format!(
                "{head}: --pipeline-layout has {} stages, not p x v = {stages}; --pp x --chunks = {}",
                l.len(),
                l.len()
            ),
            (None, Some(rule)) => {
                let err = rule
                    .stage_layers(layers as u32, p as u32, v as u32, s.placement() == Placement::V)
                    .err()
                    .unwrap_or_default();
                format!("{head}: {err}")
            }
            (None, None) => format!("{head}: {layers} layers in {stages} stages"),
        },
        Reason::TooFewMicrobatches => {
            let need = if s == ScheduleName::DualPipeV { 2 * p } else { p };
            format!(
                "{head}: m = {m} micro-batches, {s} needs m >= {need}; a smaller --micro-batch, a larger --global-batch or a smaller --pp"
            )
        }
        Reason::ChunksNeedPipeline => format!("{head}: --chunks {v} needs --pp 2 or more"),
        Reason::MicrobatchGroup => {
            let n = req.pins.microbatch_group.unwrap_or(p);
            let err = check_group(p as u32, m.min(u32::MAX as u64) as u32, n.min(u32::MAX as u64) as u32)
                .err()
                .unwrap_or_default();
            format!("{head}: {err}")
        }
        Reason::TooLarge => format!(
            "{head}: {} actions to simulate; a larger --micro-batch or fewer --chunks",
            (if s.splits_backward() { 3u128 } else { 2 }) * m as u128 * stages as u128
        ),
        _ => head,
    }
}

/// Whether a context-parallel ring of `c` ranks across NVLink domains (t filling each) hides
/// its K/V exchange over the network under the attention it overlaps, one micro-batch of one
/// sequence (`CostModel::cp_ring_hidden`; the ratio of attention time to K/V bytes does not
/// depend on the micro-batch). Where it cannot, the ring only adds exposed network time, so
/// unpinned search leaves such rings out (Llama 3.1 405B at 8k on H100: TP 8 x CP 2 hides;
/// GPT-3-style 2k sequences with full multi-head K/V do not).
fn cp_ring_hides(req: &SearchRequest, t: u64, c: u64, p: u64, d: u64) -> bool {
    let mut r = crate::plan::predict::PredictRequest::new(req.model, req.hardware);
    r.gpus = req.gpus;
    r.tp = t;
    r.cp = c;
    r.pp = p;
    r.dp = Some(d);
    r.global_batch = req.global_batch;
    r.stack = req.stack;
    r.cost_model(d).cp_ring_hidden()
}
