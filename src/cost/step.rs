//! One training step's costs in one call: [`costs`] turns the [`CostModel`] (model, hardware,
//! layout, stack) and the planner's [`StageSplit`] (each stage's transformer layers, the stage
//! of the multi-token prediction depths, the micro-batch count and a measured layer profile
//! when there is one) with each stage's device into every action's duration and bytes
//! ([`StepCost`]): each stage's forward, input-gradient and weight-gradient backward (seconds),
//! the activations it keeps and its tensor-parallel communication; each boundary's send; each
//! stage's gradient reduction; each device's optimizer step, static bytes and parameters.
//! The planner (`plan::predict::step`) chooses the split, asks, and converts the answer into
//! the simulator's nanoseconds.
//!
//! The mechanisms, each a function: [`LayerCosts::new`] (what the step's layers, embedding,
//! output layers and multi-token prediction depths cost, once per step), [`stage`] (one
//! stage's actions: its layers, ends and depths, then [`unpaired_extra`], [`offload`] and the
//! sharded data parallelism beside its compute), [`sends`] (the transfers between stages),
//! [`stage_params`] (each stage's parameters on one rank), [`devices`] (each device's static
//! bytes, model state, gradient reduction and optimizer step), [`model_state_floor`] (the
//! model state alone) and [`grad_reduce_buckets`]. Formulas: docs/cost-model.md.

use super::compute::{sharded_exposure, BlockCost, Part};
use super::memory;
use super::moe::LayerKinds;
use super::profiled::{end_blocks, profiled_block};
use super::stack::{CostModel, Stack};
use crate::inputs::profile::{sum_layers, ModelProfile};

/// What the planner decided about a step's stages.
#[derive(Clone, Copy)]
pub struct StageSplit<'a> {
    /// Transformer layers of each stage, in pipeline order (one entry per stage).
    pub layers: &'a [u32],
    /// The stage that holds the multi-token prediction depths; `None` without them.
    pub mtp_stage: Option<usize>,
    /// Micro-batches per step on one pipeline.
    pub microbatches: u64,
    /// A measured layer profile lined up with the model, replacing the cost model's layers.
    pub profile: Option<ModelProfile<'a>>,
}

/// The three actions of one stage for one micro-batch, in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Actions {
    pub forward_s: f64,
    pub backward_input_s: f64,
    pub backward_weight_s: f64,
}

/// A stage's tensor-parallel (and context-parallel, and sharded data-parallel) communication
/// inside its forward and backward, exposed and hidden together; `overlapped` when some of it
/// runs under compute.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TpComm {
    pub forward_s: f64,
    pub backward_s: f64,
    pub overlapped: bool,
}

/// One stage's costs for one micro-batch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StageActions {
    pub time: Actions,
    /// Activations the stage keeps per micro-batch in flight (not clamped).
    pub activation_bytes: u64,
    /// Of those, what W keeps until it runs: the weight GEMMs' stored inputs, a third.
    pub weight_grad_bytes: u64,
    pub tp_comm: TpComm,
    /// With the expert all-to-all overlapped: what the stage's actions take more without a
    /// partner to hide it under.
    pub unpaired_extra: Option<Actions>,
}

/// A boundary's send: one tensor's transfer, and how many such tensors go.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Send {
    pub tensor_s: f64,
    pub tensors: u64,
}

/// Every action's duration and bytes of one step (see [`costs`]).
#[derive(Debug, Clone, PartialEq)]
pub struct StepCost {
    /// Per stage.
    pub stages: Vec<StageActions>,
    /// Per boundary between stage `s` and `s + 1`, each direction alike.
    pub sends: Vec<Send>,
    /// What every send adds after it (a blocking send's device synchronisation); 0 if none.
    pub send_sync_s: f64,
    /// Per stage: its gradient buckets ([`grad_reduce_buckets`]).
    pub grad_reduce_buckets: Vec<u32>,
    /// What each device holds and runs once per step, and each stage's gradient reduction.
    pub devices: Devices,
}

/// What makes two stages cost the same: their layers of each kind, and whether they hold the
/// embedding, the output layer and the multi-token prediction depths.
type StageKey = ([u64; 4], bool, bool, bool);

/// The step's costs for `split`, stage `s` on pipeline device `device_of(s)` (of
/// `layout.pp`); see the module's documentation.
pub fn costs(cm: &CostModel, split: &StageSplit, device_of: impl Fn(usize) -> usize) -> StepCost {
    let lc = LayerCosts::new(cm, split);
    let rank_params = stage_params(cm, split.layers, split.mtp_stage, &device_of);
    let num_stages = split.layers.len();
    let model = cm.model;
    // From the cost model a stage's costs depend only on how many layers of each kind it
    // holds (`LayerKinds::kind_counts`: dense or MoE, full or sliding-window attention) and
    // whether it holds the embedding or the output layer, so equal stages are costed once.
    let memoizable = split.profile.is_none();
    let mut memo: Vec<(StageKey, StageActions)> = Vec::new();
    let mut stages = Vec::with_capacity(num_stages);
    let mut first_layer = 0usize;
    for (s, &n) in split.layers.iter().enumerate() {
        let n = n as usize;
        let key = (
            LayerKinds::kind_counts(model, first_layer, n),
            s == 0,
            s + 1 == num_stages,
            split.mtp_stage == Some(s),
        );
        let a = match memo.iter().find(|(k, _)| memoizable && *k == key) {
            Some(&(_, a)) => a,
            None => {
                let a = stage(cm, split, &lc, s, first_layer, n, rank_params[s]);
                if memoizable {
                    memo.push((key, a));
                }
                a
            }
        };
        stages.push(a);
        first_layer += n;
    }
    let mut d = devices(cm, split, &lc, &rank_params, &device_of);
    overlapped_param_gather(cm, split, &stages, &rank_params, &mut d, &device_of);
    StepCost {
        stages,
        sends: sends(cm, split),
        // A blocking send ends in a device synchronisation (Megatron-Core
        // `p2p_communication._communicate`: `torch.cuda.synchronize()` after the batched
        // send/receive, `batch_p2p_sync`), after which the GPU waits one kernel launch for its
        // next kernel: a fixed cost per transfer (docs/cost-model.md, "Kernel launches").
        send_sync_s: if cm.stack.blocking_p2p {
            cm.hw.kernel_launch_s()
        } else {
            0.0
        },
        grad_reduce_buckets: rank_params
            .iter()
            .map(|r| grad_reduce_buckets(r.dense, cm.layout.dp * cm.layout.cp))
            .collect(),
        devices: d,
    }
}

/// Megatron-Core's `--overlap-param-gather` (distributed optimizer, ZeRO-1/2): the updated
/// parameters' all-gather runs under the next step's first forwards, bucket by bucket, each
/// ahead of the layers that need it (`param_and_grad_buffer`'s bucket groups, dispatched from
/// the forward pre-hooks, the first at the end of the optimizer step), so what those forwards
/// do not cover waits. On a device the gathers run one after another in its stages' order:
/// the first stage's `G_0` against its first forward as a flow shop of its `n` layers
/// ([`flow_shop`](super::compute::flow_shop): `G_0 / n` ahead of `F_0 / n` each), and each
/// later model chunk `j`'s by the time it first runs, after `k` forwards of each earlier
/// chunk (`k` = Megatron-Core's micro-batch group, the pipeline size, at most the step's
/// micro-batches): `G_0 + ... + G_j - k (F_0 + ... + F_(j-1))`. The pipeline's fill before
/// the device's first forward (the earlier stages' first forwards) hides as much. What is
/// left waits after the device's optimizer step, where the gather begins.
fn overlapped_param_gather(
    cm: &CostModel,
    split: &StageSplit,
    stages: &[StageActions],
    rank_params: &[StageParams],
    d: &mut Devices,
    device_of: impl Fn(usize) -> usize,
) {
    let zero = cm.stack.zero;
    if !cm.stack.overlap_param_gather || !zero.shards_optimizer() || zero.shards_weights() {
        return;
    }
    let group = split.microbatches.min(cm.layout.pp).max(1) as f64;
    // Stages with the same parameters gather alike (most of them): each gather costed once.
    let mut memo: Vec<(StageParams, f64)> = Vec::new();
    // Per device: (gathered so far, forwards done before its next chunk, exposed, fill).
    let mut state: Vec<Option<(f64, f64, f64, f64)>> = vec![None; d.param_gather_wait_s.len()];
    let mut fill = 0.0;
    for (s, a) in stages.iter().enumerate() {
        let r = rank_params[s];
        let gather = match memo.iter().find(|(k, _)| *k == r) {
            Some(&(_, g)) => g,
            None => {
                let g = cm.param_gather_s(r.dense) + cm.expert_param_gather_s(r.expert);
                memo.push((r, g));
                g
            }
        };
        let (forward, dev) = (a.time.forward_s, device_of(s));
        match &mut state[dev] {
            None => {
                let n = split.layers[s].max(1) as f64;
                let (exposed, _) = super::compute::flow_shop(n, gather / n, forward / n);
                state[dev] = Some((gather, group * forward, exposed, fill));
                fill += forward;
            }
            Some((gathered, reached, exposed, _)) => {
                *gathered += gather;
                *exposed = exposed.max(*gathered - *reached);
                *reached += group * forward;
            }
        }
    }
    for (dev, st) in state.into_iter().enumerate() {
        if let Some((_, _, exposed, fill)) = st {
            d.param_gather_wait_s[dev] = (exposed - fill).max(0.0);
        }
    }
}

/// What the step's layers cost, computed once: a layer of each kind (or the profile's), the
/// embedding and the output layers, the multi-token prediction depths, and their activations.
pub struct LayerCosts<'a> {
    prof: Option<ModelProfile<'a>>,
    /// Output layers and losses on the last stage: the model's and one per prediction depth.
    outputs: u64,
    layer: BlockCost,
    layer_act: u64,
    kinds: LayerKinds,
    moe_layer_act: u64,
    lone_kinds: Option<LayerKinds>,
    embedding: BlockCost,
    embedding_act: u64,
    output: BlockCost,
    output_act: u64,
    mtp_cost: BlockCost,
    mtp_act: u64,
    deferred_mb: u64,
}

impl<'a> LayerCosts<'a> {
    pub fn new(cm: &CostModel, split: &StageSplit<'a>) -> LayerCosts<'a> {
        let model = cm.model;
        let prof = split.profile;
        // Every output layer and loss on the last stage: the model's and one per multi-token
        // prediction depth.
        let outputs = 1 + model.mtp_layers as u64;
        let layer = cm.layer();
        let dims = cm.act_dims();
        let layer_act = memory::layer_activation_bytes_for(
            dims,
            cm.layout.recompute,
            cm.layout.sequence_parallel,
            cm.stack.attention,
        );
        // The one place a measured profile replaces the cost model (docs/cost-model.md).
        let (embedding, output) = end_blocks(cm, prof);
        let embedding_act = match prof.and_then(|mp| mp.embedding) {
            Some(l) => l.activation_bytes,
            None => memory::embedding_activation_bytes(dims, cm.layout.sequence_parallel),
        };
        let output_act = match prof.and_then(|mp| mp.output) {
            Some(l) => l.activation_bytes,
            None => memory::output_activation_bytes(
                dims,
                model.vocab_size,
                cm.stack.cross_entropy_fusion.saved_bytes_per_logit(),
            ),
        }
        .saturating_mul(outputs);
        let deferred_mb = cm.stack.deferred_wgrad_microbatches(split.microbatches);
        // Mixture of experts and sliding-window layers: each kind of layer's costs, computed
        // once, and a MoE layer's activations.
        let (kinds, moe_layer_act) = if model.moe.is_some() || model.sliding_window.is_some() {
            (cm.layer_kinds(), cm.moe_layer_activation_bytes(layer_act))
        } else {
            (Default::default(), 0)
        };
        // With the expert all-to-all overlapped: what a stage's layers take in an action
        // without a partner to hide it under (`Costs::unpaired_extra`), the same layers costed
        // without it.
        let lone_kinds =
            (cm.stack.moe_comm_overlap && model.moe.is_some() && prof.is_none()).then(|| {
                let stack = Stack {
                    moe_comm_overlap: false,
                    ..cm.stack
                };
                CostModel { stack, ..*cm }.layer_kinds()
            });
        // The multi-token prediction depths on their stage: each repeats the decoder's last
        // layer as this step costs it (measured, or its kind's), with its activations.
        let last = model.last_layer();
        let (mtp_cost, mtp_act) = match split.mtp_stage {
            None => (BlockCost::default(), 0),
            Some(_) => {
                let (layer_cost, layer_bytes) = match prof {
                    Some(mp) => (
                        profiled_block(&mp.layers[last..last + 1]),
                        mp.layers[last].activation_bytes,
                    ),
                    None if model.moe.is_some() || model.sliding_window.is_some() => (
                        kinds.of(model, last),
                        if model.is_moe_layer(last) {
                            moe_layer_act
                        } else {
                            layer_act
                        },
                    ),
                    None => (layer, layer_act),
                };
                cm.mtp_depths(layer_cost, layer_bytes)
            }
        };
        LayerCosts {
            prof,
            outputs,
            layer,
            layer_act,
            kinds,
            moe_layer_act,
            lone_kinds,
            embedding,
            embedding_act,
            output,
            output_act,
            mtp_cost,
            mtp_act,
            deferred_mb,
        }
    }
}

/// Stage `s` of `split`, its `n` layers from `first_layer`, its parameters on one rank
/// `params`: its actions' durations for one micro-batch, the activations it keeps and its
/// communication.
pub fn stage(
    cm: &CostModel,
    split: &StageSplit,
    lc: &LayerCosts,
    s: usize,
    first_layer: usize,
    n: usize,
    params: StageParams,
) -> StageActions {
    let model = cm.model;
    let count = n as u64;
    let nf = count as f64;
    let (mut c, mut act): (BlockCost, u64) = match lc.prof {
        // Mixture of experts: MoE and dense layers cost differently (cost::moe).
        None if model.moe.is_some() || model.sliding_window.is_some() => {
            let k = model.moe.as_ref().map_or(0, |m| m.count_in(first_layer, n));
            (
                lc.kinds.block(model, first_layer, n),
                lc.layer_act
                    .saturating_mul(count - k)
                    .saturating_add(lc.moe_layer_act.saturating_mul(k)),
            )
        }
        None => (lc.layer.scale(nf), lc.layer_act.saturating_mul(count)),
        Some(mp) => {
            let run = &mp.layers[first_layer..first_layer + n];
            (profiled_block(run), sum_layers(run).activation_bytes)
        }
    };
    let is_mtp = split.mtp_stage == Some(s);
    if is_mtp {
        c = c.plus(lc.mtp_cost);
        act = act.saturating_add(lc.mtp_act);
    }
    let unpaired = lc
        .lone_kinds
        .as_ref()
        .map(|k| unpaired_extra(cm, lc, k, &c, first_layer, n, is_mtp));
    offload(cm, lc, &mut c, &mut act, first_layer, count);
    let StageParams {
        dense: params,
        expert,
    } = params;
    // A layer's expert parameters on this rank, averaged over the stage's layers.
    let expert_per_layer = expert / nf.max(1.0);
    if s == 0 {
        c = c.plus(lc.embedding);
        act = act.saturating_add(lc.embedding_act);
    }
    if s + 1 == split.layers.len() {
        // Deferred output-layer weight gradients leave the micro-batches' backward (the
        // average share when only the first k of m are deferred) for the flush.
        let inline =
            (split.microbatches - lc.deferred_mb) as f64 / split.microbatches.max(1) as f64;
        let outs = lc.output.scale(lc.outputs as f64);
        c = c.plus(BlockCost {
            backward_weight: outs.backward_weight.scale(inline),
            ..outs
        });
        act = act.saturating_add(lc.output_act);
    }
    // Sharded data parallelism (ZeRO-2/3): the stage's per-layer gathers and
    // reduce-scatters beside its compute, every micro-batch; a MoE layer's experts over
    // their own group, after its dense part on the same stream.
    let (dense_ag, dense_rs) = cm.sharded_layer_comm_s(params / nf.max(1.0));
    let (expert_ag, expert_rs) = cm.expert_sharded_layer_comm_s(expert_per_layer);
    // FSDP2: its copies out of each all-gather and into each reduce-scatter run on (or
    // hold) the compute stream, before the layer's forward and input gradients and after
    // its weight gradients.
    let (out_f, out_b, copy_in) = cm.fsdp2_copies_s(params / nf.max(1.0) + expert_per_layer);
    c.forward.memory_s += nf * out_f;
    c.backward_input.memory_s += nf * out_b;
    c.backward_weight.memory_s += nf * copy_in;
    let sharded = sharded_exposure(
        cm.stack.zero,
        cm.stack.reshard_after_forward,
        nf,
        (
            c.forward.total_s(),
            c.backward_input.total_s(),
            c.backward_weight.total_s(),
        ),
        (dense_ag + expert_ag, dense_rs + expert_rs),
    );
    let time = Actions {
        forward_s: c.forward.total_s() + sharded.forward_exposed_s,
        backward_input_s: c.backward_input.total_s() + sharded.backward_input_exposed_s,
        backward_weight_s: c.backward_weight.total_s() + sharded.backward_weight_exposed_s,
    };
    let tp_comm = TpComm {
        forward_s: c.forward.tp_comm_s
            + c.forward.tp_hidden_s
            + c.forward.cp_comm_s
            + c.forward.cp_hidden_s
            + sharded.forward_exposed_s
            + sharded.forward_hidden_s,
        backward_s: c.backward_input.tp_comm_s
            + c.backward_input.tp_hidden_s
            + c.backward_input.cp_comm_s
            + c.backward_input.cp_hidden_s
            + sharded.backward_input_exposed_s
            + sharded.backward_weight_exposed_s
            + sharded.backward_hidden_s,
        overlapped: c.forward.tp_hidden_s
            + c.forward.cp_hidden_s
            + sharded.forward_hidden_s
            + sharded.backward_hidden_s
            > 0.0,
    };
    StageActions {
        time,
        activation_bytes: act,
        // W keeps the stored inputs of the weight GEMMs; a third is a fair share.
        weight_grad_bytes: act / 3,
        tp_comm,
        unpaired_extra: unpaired,
    }
}

/// With the expert all-to-all overlapped, what a stage's layers (costed `c`, its depths
/// included) take more in each action without a partner: the same layers costed with `lone`
/// (the layer kinds without the overlap).
pub fn unpaired_extra(
    cm: &CostModel,
    lc: &LayerCosts,
    lone: &LayerKinds,
    c: &BlockCost,
    first_layer: usize,
    n: usize,
    is_mtp: bool,
) -> Actions {
    let model = cm.model;
    let last = model.last_layer();
    let mut alone = lone.block(model, first_layer, n);
    if is_mtp {
        // The depths' layers without a partner too (their other work is the same).
        alone = alone.plus(lc.mtp_cost).plus(
            lone.of(model, last)
                .plus(lc.kinds.of(model, last).scale(-1.0))
                .scale(model.mtp_layers as f64),
        );
    }
    let more = |a: &Part, b: &Part| (a.total_s() - b.total_s()).max(0.0);
    Actions {
        forward_s: more(&alone.forward, &c.forward),
        backward_input_s: more(&alone.backward_input, &c.backward_input),
        backward_weight_s: more(&alone.backward_weight, &c.backward_weight),
    }
}

/// Activation offloading (pp 1: this stage holds every layer): the first N of the stage's
/// `count` layers from `first_layer` send their activations off the GPU (`act` loses them),
/// and the compute `c` waits where their copies lag (cost::offload).
pub fn offload(
    cm: &CostModel,
    lc: &LayerCosts,
    c: &mut BlockCost,
    act: &mut u64,
    first_layer: usize,
    count: u64,
) {
    let offloaded = u64::from(cm.stack.cpu_offload_layers).min(count);
    if offloaded == 0 {
        return;
    }
    let model = cm.model;
    let n = count as f64;
    let bytes: u64 = (first_layer..first_layer + offloaded as usize)
        .map(|l| match lc.prof {
            Some(mp) => mp.layers[l].activation_bytes,
            None if model.is_moe_layer(l) => lc.moe_layer_act,
            None => lc.layer_act,
        })
        .sum();
    let link = cm.hw.node.host_link_bytes_per_s.unwrap_or(f64::INFINITY);
    let (fwd, bwd) = super::offload::stall_s(
        offloaded,
        count,
        c.forward.total_s() / n,
        (c.backward_input.total_s() + c.backward_weight.total_s()) / n,
        bytes as f64 / offloaded as f64 / link,
    );
    c.forward.memory_s += fwd;
    c.backward_input.memory_s += bwd;
    *act = act.saturating_sub(bytes);
}

/// The sends between consecutive stages of `split`: the hidden states over the link between
/// their devices. Without a profile a boundary's transfer depends only on its devices (the
/// first `p` boundaries give every pair, later ones repeat them), and a stage at or after the
/// multi-token prediction stage sends the decoder's hidden states and each depth's,
/// concatenated, on to the loss (Megatron-Core's `mtp_standalone` sends tensors of variable
/// shape, `p2p_communication`). With a profile, the stage's last layer's measured output (the
/// embedding's, or any layer's, the same shape, for a stage of no transformer layer).
pub fn sends(cm: &CostModel, split: &StageSplit) -> Vec<Send> {
    let p = cm.layout.pp;
    let boundaries = (split.layers.len() as u64).saturating_sub(1);
    let outputs = 1 + cm.model.mtp_layers as u64;
    let mut sends: Vec<Send> = Vec::with_capacity(boundaries as usize);
    let mut first_layer = 0usize;
    for s in 0..boundaries {
        let n = split.layers[s as usize] as usize;
        let send = match split.profile {
            None => Send {
                tensor_s: if s < p {
                    cm.p2p_s(s % p, (s + 1) % p)
                } else {
                    sends[(s % p) as usize].tensor_s
                },
                tensors: match split.mtp_stage {
                    Some(m) if s >= m as u64 => outputs,
                    _ => 1,
                },
            },
            Some(mp) => {
                let bytes = match mp.layers[first_layer..first_layer + n].last() {
                    Some(l) => l.output_bytes,
                    None => mp.embedding.unwrap_or(&mp.layers[0]).output_bytes,
                };
                Send {
                    tensor_s: cm.p2p_bytes_s(s % p, (s + 1) % p, bytes as f64),
                    tensors: 1,
                }
            }
        };
        sends.push(send);
        first_layer += n;
    }
    sends
}

/// One stage's parameters on one rank: `dense` (attention, dense and shared MLPs, routers,
/// norms, split over t; the embedding shard on the first stage, the output layer's on the
/// last, the multi-token prediction depths' on theirs: [`CostModel::mtp_stage_params`]) and
/// the routed experts' `expert` (split over ep x etp; 0 for a dense model).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StageParams {
    pub dense: f64,
    pub expert: f64,
}

/// Each stage's parameters on one rank, for the stages' layer counts `stage_layers`, the
/// multi-token prediction depths on stage `mtp_stage`, stage `s` on device `device_of(s)`.
/// A device holds the word embedding once: a later stage on the first stage's device (a
/// V-shaped schedule's last stage) uses the first stage's matrix for the depths' lookups and
/// a tied output layer instead of a copy (DeepSeek-V3's report, Sec. 3.3.1: with DualPipe the
/// embedding and the output head sit on one rank and the MTP module shares them physically).
pub fn stage_params(
    cm: &CostModel,
    stage_layers: &[u32],
    mtp_stage: Option<usize>,
    device_of: impl Fn(usize) -> usize,
) -> Vec<StageParams> {
    let model = cm.model;
    let params_embedding = cm.embedding_shard_params();
    let last = stage_layers.len().saturating_sub(1);
    // Every stage holds some dense and some MoE layers: each kind's parameters once.
    let per_kind = cm.layer_params_per_kind();
    let mut first_layer = 0usize;
    stage_layers
        .iter()
        .enumerate()
        .map(|(s, &n)| {
            let n = n as usize;
            let k = model.moe.as_ref().map_or(0, |m| m.count_in(first_layer, n));
            let rp = per_kind.rank(n as u64 - k, k);
            let (mut dense, mut expert) = (rp.dense, rp.expert);
            let holds_embedding = s == 0 || device_of(s) == device_of(0);
            if mtp_stage == Some(s) {
                let (d, e) = cm.mtp_stage_params(holds_embedding);
                dense += d;
                expert += e;
            }
            first_layer += n;
            if s == 0 {
                dense += params_embedding;
            }
            // Untied output weights, or the tied copy Megatron keeps on the last stage when
            // it is on another device than the first.
            if s == last && (!model.tied_embeddings || !holds_embedding) {
                dense += params_embedding;
            }
            StageParams { dense, expert }
        })
        .collect()
}

/// What each device holds and runs once per step (see [`devices`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Devices {
    /// Per device: model state and working buffers.
    pub static_bytes: Vec<u64>,
    /// Weights, gradients and optimizer state on the fullest device.
    pub model_state_max_bytes: u64,
    /// Per stage: the data-parallel gradient reduction of its parameters.
    pub grad_reduce_s: Vec<f64>,
    /// Per device: the optimizer step.
    pub optimizer_s: Vec<f64>,
    /// Per device: what the next step's first forwards wait for of the distributed optimizer's
    /// overlapped parameter gather (`overlapped_param_gather`), after the optimizer step.
    pub param_gather_wait_s: Vec<f64>,
    /// Per stage: deferred output-layer weight gradients run at the flush; empty if none.
    pub deferred_weight_grad_s: Vec<f64>,
    /// Parameters held by each device (rounded up).
    pub device_params: Vec<u64>,
    /// Of those, routed-expert parameters (empty for dense models).
    pub device_expert_params: Vec<u64>,
}

/// Each device's static bytes (weights, gradients and optimizer state of its stages'
/// parameters `rank_params`, sharded as deep as the ZeRO stage says, and its working buffers)
/// and optimizer step, each stage's gradient reduction, and the deferred output-layer weight
/// gradients of the last stage's flush; stage `s` on device `device_of(s)`.
pub fn devices(
    cm: &CostModel,
    split: &StageSplit,
    lc: &LayerCosts,
    rank_params: &[StageParams],
    device_of: impl Fn(usize) -> usize,
) -> Devices {
    let model = cm.model;
    let stack = &cm.stack;
    let p = cm.layout.pp;
    let num_stages = split.layers.len();
    let mut device_params = vec![0.0f64; p as usize];
    for (s, r) in rank_params.iter().enumerate() {
        device_params[device_of(s)] += r.dense;
    }
    let dims = cm.act_dims();
    let working = memory::recompute_working_bytes_for(
        dims,
        cm.layout.recompute,
        cm.layout.sequence_parallel,
        stack.attention,
    )
    .saturating_add(cm.moe_recompute_working_bytes());
    let per_param = stack.state_bytes(cm.hw);
    let weight = per_param.weight + per_param.extra_weight;
    let shard = cm.shard_ranks();
    let params_layer = model.params_per_layer() as f64 / cm.layout.tp as f64;
    let state = |prm: f64| {
        let (w, g, o) = memory::model_state_parts(prm.ceil() as u64, shard, stack.zero, per_param);
        w.saturating_add(g).saturating_add(o)
    };
    let sharded_working = |prm: f64| {
        memory::sharded_working_bytes(
            prm.ceil() as u64,
            params_layer.ceil() as u64,
            shard,
            stack.zero,
            stack.reshard_after_forward,
            weight,
        )
    };
    // FSDP2 under PyTorch's pipelining: the stage turns FSDP2's gradient reduction off for
    // every micro-batch's backward but the last (`_PipelineStageBase.backward_maybe_with_nosync`,
    // `set_requires_gradient_sync(last_backward)`), so the stage's unsharded gradients
    // accumulate, in the reduce dtype (FSDP2's `unsharded_accumulated_grad`), until then.
    let accumulated = |prm: f64| -> u64 {
        if stack.fsdp2 && p > 1 && stack.zero.shards_gradients() {
            (prm.ceil() * stack.grad_reduce_bytes_per_param) as u64
        } else {
            0
        }
    };
    let mut static_bytes: Vec<u64> = device_params
        .iter()
        .map(|&prm| {
            state(prm)
                .saturating_add(working)
                .saturating_add(sharded_working(prm))
                .saturating_add(accumulated(prm))
                .min(1 << 60)
        })
        .collect();
    // The first stage's dense embedding gradient: working memory in place of the layers'
    // (whichever is larger), on the device that holds the embedding. The multi-token
    // prediction stage's own embedding has the same gradient (once on a device that holds
    // both).
    let emb_grad = memory::embedding_grad_bytes(model.vocab_size, model.hidden_size, cm.layout.tp);
    let first = device_of(0);
    let mtp = split.mtp_stage.map(&device_of).filter(|&d| d != first);
    // The loss's working memory, on the device of the last stage, likewise (one output at a
    // time, the depths' included); where that device also holds the embedding, the larger.
    let loss = cm.loss_working_bytes();
    let last_device = device_of(num_stages.saturating_sub(1));
    let mut extra = vec![0u64; static_bytes.len()];
    for d in std::iter::once(first).chain(mtp) {
        extra[d] = emb_grad;
    }
    extra[last_device] = extra[last_device].max(loss);
    for (d, e) in extra.into_iter().enumerate() {
        static_bytes[d] = static_bytes[d]
            .saturating_add(e.saturating_sub(working))
            .min(1 << 60);
    }
    let mut model_state_max_bytes = device_params
        .iter()
        .map(|&prm| state(prm))
        .max()
        .unwrap_or(0);
    // Deferred output-layer weight gradients: run at the last stage's flush; what each
    // deferred micro-batch keeps is counted for the whole step (it peaks at the flush).
    let mut deferred_weight_grad_s = Vec::new();
    if lc.deferred_mb > 0 {
        let last = num_stages - 1;
        deferred_weight_grad_s = vec![0.0; num_stages];
        deferred_weight_grad_s[last] =
            (lc.deferred_mb * lc.outputs) as f64 * lc.output.backward_weight.total_s();
        let kept =
            memory::deferred_wgrad_bytes(dims, model.vocab_size, cm.layout.sequence_parallel)
                .saturating_mul(lc.outputs);
        let d = device_of(last);
        static_bytes[d] = static_bytes[d]
            .saturating_add(kept.saturating_mul(lc.deferred_mb))
            .min(1 << 60);
    }
    // Stages with equal parameter counts (all but the first and last, mostly) reduce alike.
    let mut reduced: Vec<(f64, f64)> = Vec::new();
    let mut grad_reduce_s: Vec<f64> = rank_params
        .iter()
        .map(|r| match reduced.iter().find(|(x, _)| *x == r.dense) {
            Some(&(_, t)) => t,
            None => {
                let t = cm.step_grad_reduce_s(r.dense);
                reduced.push((r.dense, t));
                t
            }
        })
        .collect();
    let mut optimizer_s: Vec<f64> = device_params
        .iter()
        .map(|&prm| cm.optimizer_s(prm))
        .collect();
    // Mixture of experts: the experts' weights, gradients and optimizer state (sharded over
    // the expert data-parallel group), their own gradient reduction and optimizer step.
    let mut device_expert = Vec::new();
    if model.moe.is_some() && !rank_params.is_empty() {
        device_expert = vec![0.0f64; p as usize];
        for (s, r) in rank_params.iter().enumerate() {
            device_expert[device_of(s)] += r.expert;
            grad_reduce_s[s] = cm.step_grad_reduce_s(r.dense) + cm.expert_grad_reduce_s(r.expert);
        }
        let mut state_max = 0u64;
        for (d, &e) in device_expert.iter().enumerate() {
            let state_bytes = cm.expert_state_bytes(e);
            // ZeRO-2/3: a MoE layer's gathered experts and unsharded expert gradients, as
            // for the dense part, over the expert data-parallel group.
            let working = memory::sharded_working_bytes(
                e.ceil() as u64,
                cm.moe_rank_expert_params_per_layer().ceil() as u64,
                cm.expert_dp(),
                stack.zero,
                stack.reshard_after_forward,
                weight,
            );
            static_bytes[d] = static_bytes[d]
                .saturating_add(state_bytes)
                .saturating_add(working)
                .min(1 << 60);
            optimizer_s[d] = cm.optimizer_s(device_params[d]) + cm.expert_optimizer_s(e);
            let dense_state = state(device_params[d]);
            state_max = state_max.max(dense_state.saturating_add(state_bytes));
            device_params[d] += e;
        }
        model_state_max_bytes = state_max;
    }
    Devices {
        static_bytes,
        model_state_max_bytes,
        grad_reduce_s,
        param_gather_wait_s: vec![0.0; optimizer_s.len()],
        optimizer_s,
        deferred_weight_grad_s,
        device_params: device_params.iter().map(|&p| p.ceil() as u64).collect(),
        device_expert_params: device_expert.iter().map(|&p| p.ceil() as u64).collect(),
    }
}

/// Each device's model state in bytes: the weights, gradients and optimizer state of its
/// stages' dense parameters (sharded over the data-parallel ranks as deep as the ZeRO stage
/// says) and of its routed experts (over the expert data-parallel group), for the stages'
/// layer counts `stage_layers`, the depths on `mtp_stage`, stage `s` on device `device_of(s)`.
/// A floor of [`StepCost::static_bytes`], which adds the working buffers.
pub fn model_state_floor(
    cm: &CostModel,
    stage_layers: &[u32],
    mtp_stage: Option<usize>,
    device_of: impl Fn(usize) -> usize,
) -> Vec<u64> {
    let p = cm.layout.pp as usize;
    let mut dense = vec![0.0f64; p];
    let mut expert = vec![0.0f64; p];
    for (s, sp) in stage_params(cm, stage_layers, mtp_stage, &device_of)
        .iter()
        .enumerate()
    {
        let d = device_of(s);
        dense[d] += sp.dense;
        expert[d] += sp.expert;
    }
    let per_param = cm.stack.state_bytes(cm.hw);
    let shard = cm.shard_ranks();
    dense
        .iter()
        .zip(&expert)
        .map(|(&prm, &e)| {
            let (w, g, o) =
                memory::model_state_parts(prm.ceil() as u64, shard, cm.stack.zero, per_param);
            let experts = if cm.model.moe.is_some() {
                cm.expert_state_bytes(e)
            } else {
                0
            };
            w.saturating_add(g)
                .saturating_add(o)
                .saturating_add(experts)
        })
        .collect()
}

/// Gradient buckets of a stage with `params` parameters on one rank: Megatron-Core's
/// distributed data parallelism reduces gradients in buckets of `max(40M, 1M x d)` parameters
/// (`DistributedDataParallel.__init__`, `bucket_size` when `--ddp-bucket-size` is unset).
pub fn grad_reduce_buckets(params: f64, dp: u64) -> u32 {
    let bucket = (40e6f64).max(1e6 * dp as f64);
    (params / bucket).ceil().clamp(1.0, 1e6) as u32
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::stack::Layout;
    use crate::inputs::hardware::Hardware;
    use crate::inputs::model::Model;

    /// `m` over t 8 x p 4 x d 2 with two chunks a device.
    fn cost_model<'a>(m: &'a Model, hw: &'a Hardware) -> CostModel<'a> {
        CostModel {
            model: m,
            hw,
            layout: Layout {
                pp: 4,
                dp: 2,
                chunks: 2,
                ..Layout::tensor_parallel(8)
            },
            stack: Stack::default(),
        }
    }

    /// Llama 3 8B over t 8 x p 4 with two chunks a device (8 stages of 4 layers, looped).
    fn step(m: &Model, mtp_stage: Option<usize>) -> StepCost {
        let hw = Hardware::bundled("h100-80gb").unwrap();
        let cm = cost_model(m, &hw);
        let split = StageSplit {
            layers: &[4; 8],
            mtp_stage,
            microbatches: 16,
            profile: None,
        };
        costs(&cm, &split, |s| s % 4)
    }

    /// Equal stages cost alike; the first adds the embedding, the last the output layer; every
    /// series has its stage's, boundary's or device's length.
    #[test]
    fn stages_between_the_ends_cost_alike() {
        let m = Model::preset("llama3-8b").unwrap();
        let c = step(&m, None);
        assert_eq!(c.stages.len(), 8);
        assert!(c.stages[1..7].iter().all(|a| *a == c.stages[1]));
        assert!(c.stages[0].time.forward_s > c.stages[1].time.forward_s);
        assert!(c.stages[7].time.backward_weight_s > c.stages[1].time.backward_weight_s);
        assert!(c.stages[7].activation_bytes > c.stages[1].activation_bytes);
        assert_eq!(
            c.stages[1].weight_grad_bytes,
            c.stages[1].activation_bytes / 3
        );
        assert_eq!(c.sends.len(), 7);
        assert!(c.sends.iter().all(|x| x.tensors == 1 && x.tensor_s > 0.0));
        // Megatron-LM 2021 sends block: each ends in a synchronisation.
        assert_eq!(c.send_sync_s > 0.0, Stack::default().blocking_p2p);
        let d = &c.devices;
        assert_eq!((d.grad_reduce_s.len(), c.grad_reduce_buckets.len()), (8, 8));
        assert_eq!((d.optimizer_s.len(), d.static_bytes.len()), (4, 4));
        assert_eq!(d.device_params.len(), 4);
        assert!(d.device_expert_params.is_empty() && d.deferred_weight_grad_s.is_empty());
        // Device 0 holds the embedding (stage 0), device 3 the output layer (stage 7); the
        // model's parameters over t, all on some device.
        let total: u64 = d.device_params.iter().sum();
        let whole = m.total_params() as f64 / 8.0;
        assert!(
            (total as f64 - whole).abs() / whole < 1e-2,
            "{total} vs {whole}"
        );
    }

    /// Multi-token prediction depths on stage 5: that stage costs more than its equals, and
    /// every send from it on carries the decoder's hidden states and each depth's.
    #[test]
    fn the_depths_stage_costs_more_and_sends_more_tensors() {
        let mut m = Model::preset("llama3-8b").unwrap();
        m.mtp_layers = 1;
        let c = step(&m, Some(5));
        assert!(c.stages[5].time.forward_s > c.stages[4].time.forward_s);
        assert!(c.stages[5].activation_bytes > c.stages[4].activation_bytes);
        let tensors: Vec<u64> = c.sends.iter().map(|x| x.tensors).collect();
        assert_eq!(tensors, vec![1, 1, 1, 1, 1, 2, 2]);
        assert_eq!(c.sends[5].tensor_s, c.sends[1].tensor_s);
    }

    /// A device holds the word embedding once. Eight stages over four devices: looped
    /// (stage s on s mod 4), the last stage is on device 3 and carries a copy of its own for
    /// the depths' lookups and one for a tied output layer; V-shaped (stage s and 7 - s on
    /// device min(s, 7 - s)), it uses device 0's: that device holds one `V h / t` less for
    /// each of those copies.
    #[test]
    fn a_device_holds_the_word_embedding_once() {
        let hw = Hardware::bundled("h100-80gb").unwrap();
        for (mtp, tied) in [(1, false), (0, true), (1, true), (0, false)] {
            let mut m = Model::preset("llama3-8b").unwrap();
            m.mtp_layers = mtp;
            m.tied_embeddings = tied;
            let cm = cost_model(&m, &hw);
            let dense = |device_of: fn(usize) -> usize| -> Vec<f64> {
                let mut d = vec![0.0; 4];
                let stages = stage_params(&cm, &[4; 8], (mtp > 0).then_some(7), device_of);
                for (s, sp) in stages.iter().enumerate() {
                    d[device_of(s)] += sp.dense;
                }
                d
            };
            let (looped, v_shape) = (dense(|s| s % 4), dense(|s| s.min(7 - s)));
            let embedding = cm.embedding_shard_params();
            assert!(embedding > 6e7, "{embedding}");
            // Device 0 holds stages 0 and 4 looped, 0 and 7 V-shaped; stage 4 is stage 1's
            // equal, and stage 7 is that plus what device 3 holds beyond device 1.
            let copies = f64::from(mtp) + f64::from(u8::from(tied));
            let stage_7_beyond_a_middle_one = looped[3] - looped[1];
            let expected = looped[0] + stage_7_beyond_a_middle_one - copies * embedding;
            assert!(
                (v_shape[0] - expected).abs() < 1.0,
                "mtp {mtp} tied {tied}: {v_shape:?}, expected {expected}"
            );
            assert_eq!(v_shape[1..], [looped[1]; 3]);
        }
    }

    #[test]
    fn buckets_hold_at_least_40m_parameters() {
        assert_eq!(grad_reduce_buckets(1.0, 8), 1);
        assert_eq!(grad_reduce_buckets(80e6 + 1.0, 8), 3);
        assert_eq!(grad_reduce_buckets(200e6, 100), 2);
    }
}
