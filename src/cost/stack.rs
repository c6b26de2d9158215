//! What is being costed: the parallel [`Layout`] of a run, the training [`Stack`] (the
//! implementation choices of the framework that runs it) and the [`CostModel`] that binds a
//! model, a hardware profile, a layout and a stack.
//!
//! [`Stack`] is the one place where how a step is implemented is described (fused kernels,
//! point-to-point style, overlap of the gradient reduction, optimizer sharding, bytes moved per
//! parameter). Features of a newer stack (precision, attention kernel, communication overlap,
//! sharding) are added here as fields, read by the compute, network and memory models through
//! the `CostModel`, rather than threaded through every function as booleans.

use super::fp8_recipe::Fp8Recipe;
use super::kernel_bytes::CrossEntropyFusion;
use super::optimizer::OptimizerState;
use super::recipe::{CudaGraphs, MoeCapacity, MoeDispatcher};
use crate::inputs::hardware::{Hardware, Precision};
use crate::inputs::model::Model;
use std::fmt;
use std::str::FromStr;

/// Activation recomputation (Korthikanti et al. 2022).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Recompute {
    None,
    /// Recompute only the attention core (QK^T, softmax, dropout, attention over V).
    Selective,
    /// Keep only each layer's input; recompute the whole layer before its backward.
    #[default]
    Full,
    /// torchtitan's per-op selective checkpointing (`activation_checkpoint.mode = "selective"`,
    /// `selective_ac_option = "op"`): of each layer's linear GEMMs in order (q, k, v, output
    /// projection, MLP in, MLP out) every second is recomputed, attention and the other GEMMs'
    /// outputs are saved, every elementwise kernel is recomputed.
    SelectiveOp,
    /// torchtitan's per-layer selective checkpointing with `selective_ac_option = "2"`: every
    /// second layer is checkpointed whole (full recompute), the others keep everything.
    SelectiveLayer,
    /// Megatron-Core's `--recompute-granularity selective --recompute-modules layernorm
    /// moe_act` (the Megatron-MoE-ModelZoo H100 and GB200 recipes): the two norms' outputs and
    /// the experts' activation output are dropped after use and recomputed in the backward.
    NormAct,
    /// Megatron-Core's `--recompute-modules layernorm moe`: the norms' outputs dropped and the
    /// whole MoE block (router, dispatch and combine, experts) checkpointed, run again before
    /// its backward.
    NormMoe,
    /// Megatron-Core's `--recompute-modules mla_up_proj` (Megatron-Bridge's DeepSeek-V3
    /// recipes): multi-head latent attention's up-projections and rotary embedding are
    /// checkpointed without their outputs (`CheckpointWithoutOutput`), so the queries, keys and
    /// values are freed after the attention kernel's forward and rebuilt from the kept
    /// latents before its backward (multi_latent_attention.py at d98e8a64,
    /// `recompute_up_proj`). Latent attention only.
    MlaUpProj,
    /// Megatron-Core's `--recompute-modules mlp` (Megatron-Bridge's DeepSeek-V3 recipes of the
    /// 25.09 and 25.11 containers): the dense MLP submodule is checkpointed (its input kept,
    /// its intermediates freed) and run again before its backward; MoE layers and their shared
    /// experts are not touched (transformer_layer.py at core_v0.14.0: `recompute_mlp` only
    /// when `self.mlp` is not a `MoELayer`). Models with dense MLP layers only.
    Mlp,
    /// Megatron-Core's `--recompute-modules layernorm mla_up_proj` (DeepSeek-V3's report,
    /// Sec. 3.3: RMSNorm and the MLA up-projections recomputed): [`Recompute::NormAct`]'s
    /// `layernorm` part and [`Recompute::MlaUpProj`] together, each freeing, costing and
    /// launching what it does alone. Latent attention only.
    NormMlaUpProj,
    /// Megatron-Core's `--recompute-modules mla_up_proj mlp` (Megatron-Bridge's DeepSeek-V3
    /// recipes for B200 and H100): [`Recompute::MlaUpProj`] and [`Recompute::Mlp`] together;
    /// MoE layers' MLPs stay untouched as with `mlp` alone. Latent attention only.
    MlaUpProjMlp,
    /// Megatron-Core's `--recompute-modules layernorm moe_act mla_up_proj`, what DeepSeek-V3's
    /// report recomputes (Sec. 3.3.1: RMSNorm and the MLA up-projections; Sec. 3.3.2: the
    /// MoE SwiGLU's output from its cached input): [`Recompute::NormMlaUpProj`] and the
    /// `moe_act` module of [`Recompute::NormAct`] together, each freeing, costing and
    /// launching what it does alone. Latent attention only.
    NormActMlaUpProj,
}

impl Recompute {
    /// Megatron-LM's modes: what the search enumerates.
    pub const ALL: [Recompute; 3] = [Recompute::None, Recompute::Selective, Recompute::Full];
    /// Every mode a user can pin (`--recompute`, a plan's `parallelism.recompute`).
    pub const EVERY: [Recompute; 12] = [
        Recompute::None,
        Recompute::Selective,
        Recompute::Full,
        Recompute::SelectiveOp,
        Recompute::SelectiveLayer,
        Recompute::NormAct,
        Recompute::NormMoe,
        Recompute::MlaUpProj,
        Recompute::Mlp,
        Recompute::NormMlaUpProj,
        Recompute::MlaUpProjMlp,
        Recompute::NormActMlaUpProj,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            Recompute::None => "none",
            Recompute::Selective => "selective",
            Recompute::Full => "full",
            Recompute::SelectiveOp => "selective-op",
            Recompute::SelectiveLayer => "selective-layer",
            Recompute::NormAct => "selective-norm-act",
            Recompute::NormMoe => "selective-norm-moe",
            Recompute::MlaUpProj => "selective-mla-up-proj",
            Recompute::Mlp => "selective-mlp",
            Recompute::NormMlaUpProj => "selective-norm-mla-up-proj",
            Recompute::MlaUpProjMlp => "selective-mla-up-proj-mlp",
            Recompute::NormActMlaUpProj => "selective-norm-act-mla-up-proj",
        }
    }

    /// Whether Megatron-Core's `layernorm` module is in the set: the norms' outputs are
    /// dropped and recomputed.
    pub fn recomputes_norms(self) -> bool {
        matches!(
            self,
            Recompute::NormAct
                | Recompute::NormMoe
                | Recompute::NormMlaUpProj
                | Recompute::NormActMlaUpProj
        )
    }

    /// Whether Megatron-Core's `moe_act` module is in the set: the routed experts' activation
    /// output is dropped and recomputed from its kept input.
    pub fn recomputes_moe_act(self) -> bool {
        matches!(self, Recompute::NormAct | Recompute::NormActMlaUpProj)
    }

    /// Whether Megatron-Core's `mla_up_proj` module is in the set.
    pub fn recomputes_mla_up_proj(self) -> bool {
        matches!(
            self,
            Recompute::MlaUpProj
                | Recompute::NormMlaUpProj
                | Recompute::MlaUpProjMlp
                | Recompute::NormActMlaUpProj
        )
    }

    /// Whether Megatron-Core's `mlp` module (dense MLPs only) is in the set.
    pub fn recomputes_mlp(self) -> bool {
        matches!(self, Recompute::Mlp | Recompute::MlaUpProjMlp)
    }
}

impl fmt::Display for Recompute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Recompute {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Recompute::EVERY
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| {
                let valid: Vec<&str> = Recompute::EVERY.iter().map(|r| r.as_str()).collect();
                format!("unknown recompute '{s}' (valid: {})", valid.join(", "))
            })
    }
}

/// How the attention core (scores, softmax, values) is computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Attention {
    /// Scores materialised in HBM: the GEMMs QK^T and PV, and scale, mask, softmax and dropout
    /// kernels over the `a s^2 b / t` scores (Megatron-LM 2021; Korthikanti et al. 2022).
    #[default]
    Unfused,
    /// One fused kernel that keeps the scores on chip (FlashAttention-2/-3, cuDNN fused
    /// attention): no `s^2` traffic or activations; causal blocks above the diagonal skipped;
    /// its speed is the hardware profile's measured attention efficiency.
    Flash,
}

impl Attention {
    pub const ALL: [Attention; 2] = [Attention::Unfused, Attention::Flash];
    pub fn as_str(self) -> &'static str {
        match self {
            Attention::Unfused => "unfused",
            Attention::Flash => "flash",
        }
    }
}

impl fmt::Display for Attention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Attention {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Attention::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| format!("unknown attention '{s}' (valid: flash, unfused)"))
    }
}

/// Which fused attention kernels run the attention core (with [`Attention::Flash`]): their
/// rates are the hardware profile's, one law per kernel family (docs/cost-model.md, "Flash
/// attention").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum AttentionKernel {
    /// cuDNN's fused attention: what Transformer Engine runs on Hopper and Blackwell
    /// (Megatron-Core's default) and what torchtitan asks PyTorch's SDPA for first since
    /// 2025-03 (`sdpa_backends`, CUDNN_ATTENTION before FLASH_ATTENTION). The profile's
    /// `attention_efficiency_*` law.
    #[default]
    Cudnn,
    /// FlashAttention-2's kernels: PyTorch SDPA's flash backend (torchtitan before 2025-03,
    /// and its context-parallel ring then), the `flash-attn` 2 package. On Hopper they use
    /// neither its asynchronous tensor-core instructions nor TMA: about half cuDNN's rate. The
    /// profile's `attention_fa2_*` law.
    Fa2,
    /// FlashAttention's Triton kernel of 2022 (`flash_attn_triton.py`, Dao, at eff9fe6b;
    /// MosaicML llm-foundry's `attn_impl: triton`, the default of its MPT benchmarks):
    /// forward faster and backward slower than the CUDA FlashAttention (v1) of the time,
    /// together slightly slower. The profile's `attention_triton_*` rates.
    Triton,
}

impl AttentionKernel {
    pub const ALL: [AttentionKernel; 3] = [
        AttentionKernel::Cudnn,
        AttentionKernel::Fa2,
        AttentionKernel::Triton,
    ];
    pub fn as_str(self) -> &'static str {
        match self {
            AttentionKernel::Cudnn => "cudnn",
            AttentionKernel::Fa2 => "fa2",
            AttentionKernel::Triton => "triton",
        }
    }
}

impl fmt::Display for AttentionKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AttentionKernel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AttentionKernel::ALL
            .into_iter()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| format!("unknown attention kernel '{s}' (valid: cudnn, fa2, triton)"))
    }
}

/// How far the data-parallel state is sharded (ZeRO, Rajbhandari et al. 2020; FSDP): over the
/// data- and context-parallel ranks, or with `Layout::dp_replicate` > 1 over each replica's
/// `d cp / R` of them (HSDP).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub enum Zero {
    /// Replicated: every rank holds weights, gradients and optimizer state (DDP).
    #[default]
    Off,
    /// ZeRO-1: optimizer state sharded (Megatron-Core's distributed optimizer).
    Optimizer,
    /// ZeRO-2: gradients sharded too, reduce-scattered every micro-batch.
    Gradients,
    /// ZeRO-3 / FSDP: parameters sharded too, all-gathered layer by layer.
    Full,
}

impl Zero {
    pub const ALL: [Zero; 4] = [Zero::Off, Zero::Optimizer, Zero::Gradients, Zero::Full];
    /// The stage number 0..3.
    pub fn stage(self) -> u8 {
        self as u8
    }
    pub fn from_stage(stage: u8) -> Option<Zero> {
        Zero::ALL.get(stage as usize).copied()
    }
    /// The optimizer state is sharded (stage >= 1).
    pub fn shards_optimizer(self) -> bool {
        self >= Zero::Optimizer
    }
    pub fn shards_gradients(self) -> bool {
        self >= Zero::Gradients
    }
    pub fn shards_weights(self) -> bool {
        self == Zero::Full
    }
}

impl fmt::Display for Zero {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.stage())
    }
}

impl FromStr for Zero {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse::<u8>()
            .ok()
            .and_then(Zero::from_stage)
            .ok_or_else(|| format!("unknown ZeRO stage '{s}' (valid: 0, 1, 2, 3)"))
    }
}

/// How the context-parallel ranks exchange keys and values (Megatron-Core
/// `--cp-comm-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum CpComm {
    /// A ring of point-to-point sends overlapped with the attention blocks (the default).
    #[default]
    P2p,
    /// All-gather the K/V before the attention, reduce-scatter their gradients after.
    AllGather,
}

impl CpComm {
    pub const ALL: [CpComm; 2] = [CpComm::P2p, CpComm::AllGather];
    pub fn as_str(self) -> &'static str {
        match self {
            CpComm::P2p => "p2p",
            CpComm::AllGather => "all-gather",
        }
    }
}

impl fmt::Display for CpComm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for CpComm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        CpComm::ALL
            .into_iter()
            .find(|c| c.as_str() == s)
            .ok_or_else(|| {
                format!("unknown context-parallel exchange '{s}' (valid: p2p, all-gather)")
            })
    }
}

/// How ranks are numbered onto GPUs (GPU `g` of node `n` is rank `n * gpus_per_node + g`; where
/// an NVLink domain spans several nodes and t = 16 does not tile it, a domain's leftover nodes
/// are skipped, see `cost::network`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum RankOrder {
    /// Tensor-parallel innermost, then data-parallel, then pipeline (Megatron-LM's default).
    #[default]
    TensorDataPipeline,
    /// Tensor-parallel innermost, then pipeline, then data-parallel.
    TensorPipelineData,
}

/// The parallel layout and batch shape of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub tp: u64,
    pub pp: u64,
    pub dp: u64,
    /// Context-parallel size: each sequence split over `cp` ranks (1: none).
    pub cp: u64,
    /// Replicas of the sharded state (HSDP): state sharded over `dp cp / dp_replicate` ranks
    /// and replicated `dp_replicate` times (1: sharded over all of them).
    pub dp_replicate: u64,
    pub micro_batch: u64,
    /// Model chunks per pipeline device (interleaving).
    pub chunks: u64,
    pub sequence_parallel: bool,
    pub recompute: Recompute,
    /// Expert-parallel size (mixture of experts): the routed experts split over `ep` ranks
    /// carved from the t x cp x d ranks (Megatron-Core); 1 for dense models.
    pub ep: u64,
    /// Expert tensor-parallel size: each expert's FFN split over `etp` ranks; 1 for dense.
    pub etp: u64,
}

impl Layout {
    /// `tp` tensor-parallel ranks and nothing else: no pipeline, data, context or expert
    /// parallelism, micro-batch 1, one chunk, no sequence parallelism, no recomputation (for
    /// struct update syntax: `Layout { sequence_parallel: true, ..Layout::tensor_parallel(8) }`).
    pub fn tensor_parallel(tp: u64) -> Layout {
        Layout {
            tp,
            pp: 1,
            dp: 1,
            cp: 1,
            dp_replicate: 1,
            micro_batch: 1,
            chunks: 1,
            sequence_parallel: false,
            recompute: Recompute::None,
            ep: 1,
            etp: 1,
        }
    }
}

/// The training stack: implementation choices of the framework that runs the step. The
/// defaults are Megatron-LM as used for Narayanan et al. 2021.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stack {
    /// Fused bias+GeLU, scale+mask+softmax and bias+dropout+add kernels.
    pub fused_kernels: bool,
    /// The attention kernel.
    pub attention: Attention,
    /// Whose fused attention kernels (with [`Attention::Flash`]).
    pub attention_kernel: AttentionKernel,
    /// Number format of the transformer layers' linear GEMMs (forward, input- and
    /// weight-gradient), as Transformer Engine runs them; attention, norms, the embedding and
    /// the output layer stay BF16.
    pub precision: Precision,
    /// How Transformer Engine scales the FP8 tensors where `precision` is `fp8` (`--fp8-recipe`:
    /// delayed, the default, tensorwise or blockwise; `mxfp8` goes with `Precision::Mxfp8`):
    /// the casts' HBM traffic and kernels, the GEMMs' accumulator and the copies kept
    /// (`cost::low_precision`, docs/cost-model.md "FP8 recipes").
    pub fp8_recipe: Fp8Recipe,
    /// The linear layers' weights are kept only in the low precision (Megatron-Core
    /// `--fp8-param-gather`, Transformer Engine's `fp8_model_init`): no BF16 copy beside the
    /// low-precision ones (the FP32 master weights stay in the optimizer), and the distributed
    /// optimizer's or ZeRO-3's parameter all-gathers move one byte an element
    /// ([`Stack::param_gather_bytes_per_param`]). In effect with `precision` fp8 or mxfp8.
    pub fp8_param_gather: bool,
    /// Tensor-parallel all-gathers and reduce-scatters pipelined with the GEMMs they feed or
    /// follow (Megatron-Core `--tp-comm-overlap`, Transformer Engine userbuffers). Megatron
    /// requires sequence parallelism for it; without it the setting has no effect.
    pub tp_comm_overlap: bool,
    /// Without sequence parallelism, the all-reduce of a column-parallel layer's input
    /// gradient runs beside its weight-gradient GEMM (Megatron's
    /// `LinearWithGradAccumulationAndAsyncCommunication`, Transformer Engine's `Linear`:
    /// `async_op=True`; Megatron-LM 2021 ran it in line). With sequence parallelism the
    /// backward collectives are always asynchronous (`CostModel::tp_comm_s`).
    pub tp_async_backward: bool,
    /// Pipeline sends split over the t tensor-parallel ranks' NICs, then all-gathered over
    /// NVLink (Narayanan et al. 2021, Sec. 4.1).
    pub scatter_gather: bool,
    /// The sender's compute waits for each point-to-point transfer (Megatron-LM 2021's
    /// `batch_isend_irecv` followed by a synchronize).
    pub blocking_p2p: bool,
    /// Reduce a stage's gradients as soon as its last backward has finished.
    pub overlap_grad_reduce: bool,
    /// With the distributed optimizer (ZeRO-1), gather the updated parameters under the next
    /// step's forward (Megatron-Core `--overlap-param-gather`) instead of before it ends.
    pub overlap_param_gather: bool,
    /// How far the data-parallel state is sharded (ZeRO stage).
    pub zero: Zero,
    /// ZeRO-3: free the gathered parameters after each layer's forward and gather them again
    /// for its backward (FSDP2's `reshard_after_forward`, the default).
    pub reshard_after_forward: bool,
    /// Sharded data parallelism (ZeRO-2/3) runs as PyTorch FSDP2 (`fully_shard`, what
    /// torchtitan uses): each all-gather's flat output is copied out to the per-parameter
    /// tensors on the compute stream, and each reduce-scatter's input is copied in (and cast
    /// to the reduce dtype) from the per-parameter gradients before the compute stream may go
    /// on ([`CostModel::fsdp2_copies_s`]). Megatron's buffers, whose parameters and gradients
    /// are views, need neither copy.
    pub fsdp2: bool,
    /// The context-parallel K/V exchange (with `Layout::cp` > 1).
    pub cp_comm: CpComm,
    /// Bytes per parameter of the data-parallel gradient reduction (2: fp16/bf16 gradients).
    pub grad_reduce_bytes_per_param: f64,
    /// Memory traffic per parameter per micro-batch of accumulating the weight gradient into
    /// the main-gradient buffer: write the 16-bit gradient (2), read it (2), read and write the
    /// fp32 main gradient (8).
    pub grad_accumulation_bytes_per_param: f64,
    /// The weight-gradient GEMM accumulates straight into the fp32 main-gradient buffer
    /// (Megatron-Core/Transformer Engine `gradient_accumulation_fusion`, on in NeMo's and
    /// Megatron-Core's recipes): no separate accumulation kernel; the GEMM's epilogue reads and
    /// writes the fp32 buffer, [`FUSED_GRAD_ACCUMULATION_BYTES_PER_PARAM`] bytes per parameter,
    /// which bounds the GEMM only where that traffic outlasts its arithmetic.
    pub grad_accumulation_fusion: bool,
    /// Memory traffic per parameter of the mixed-precision Adam step: read fp32 master, m, v
    /// and the gradient, write master, m, v and the 16-bit weight (28), plus the gradient-norm
    /// and unscale passes over the gradient (4).
    pub optimizer_bytes_per_param: f64,
    pub rank_order: RankOrder,
    /// Memory beyond the tensors (CUDA context, NCCL, workspaces, allocator reserve).
    pub overheads: Overheads,
    /// Tokens on the busiest expert-parallel rank over the mean (`--moe-imbalance`): scales
    /// the expert GEMMs and the all-to-all of a MoE layer (docs/cost-model.md).
    pub moe_imbalance: f64,
    /// Token dispatch/combine all-to-alls overlapped with another micro-batch's compute
    /// (`--moe-comm-overlap`: Megatron-Core `--overlap-moe-expert-parallel-comm`, DeepSeek's
    /// DualPipe).
    pub moe_comm_overlap: bool,
    /// How tokens reach their experts (`--moe-dispatcher alltoall|deepep|hybridep`; Megatron-Core
    /// `--moe-token-dispatcher-type`, `--moe-flex-dispatcher-backend`): copies per expert or per
    /// GPU and remote domain, and the permutation passes ([`MoeDispatcher`]).
    pub moe_dispatcher: MoeDispatcher,
    /// Token dropping with a capacity factor (`--moe-expert-capacity-factor`,
    /// `--moe-pad-expert-input-to-capacity`); `None`: dropless.
    pub moe_capacity: Option<MoeCapacity>,
    /// CUDA graphs (`--cuda-graph-impl`, `--cuda-graph-modules`): the host launches and
    /// framework time of what they capture are not paid per micro-batch.
    pub cuda_graphs: CudaGraphs,
    /// Host time of one MoE layer's forward and backward for one micro-batch, in seconds: the
    /// layer takes at least this long whatever its GPU work (docs/cost-model.md, "Host time
    /// of a MoE layer"). 0: only the kernel launches bound it.
    pub moe_layer_host_s: f64,
    /// The output layer's weight-gradient GEMMs of the last pipeline stage wait until its
    /// pipeline flush and run there, after the device's last backward and before the stage's
    /// gradient reduction, instead of inside each micro-batch's backward (Megatron-Core
    /// `--defer-embedding-wgrad-compute`: `LinearWithGradAccumulationAndAsyncCommunication`
    /// keeps each micro-batch's input and output gradient, `finish_embedding_wgrad_compute`
    /// drains them). The kept tensors stay in memory until then.
    pub defer_embedding_wgrad: bool,
    /// Megatron-Core's `--use-transformer-engine-op-fuser`: the grouped experts run as
    /// Transformer Engine's fused operations (`TEGroupedMLP._fused_forward`, core_v0.19.0;
    /// needs TE 2.14 and no expert tensor parallelism), which scale and add the second expert
    /// GEMM's bias inside the GEMM (`scale_bias`) instead of expert by expert in eager PyTorch
    /// ([`CostModel::moe_expert_bias_bytes`](super::CostModel::moe_expert_bias_bytes)). What
    /// else the fused path speeds up is not costed.
    pub te_op_fuser: bool,
    /// Megatron-Core's `--activation-func-fp8-input-store`: the MLP activation's input (the
    /// first MLP GEMM's output, dense and routed) is kept for the backward cast to
    /// `float8_e4m3fn`, 1 byte an element without a scale, instead of its 16 bits
    /// (`fused_bias_swiglu.py`/`fused_weighted_swiglu`: `input.to(torch.float8_e4m3fn)` when
    /// `fp8_input_store`; DeepSeek-V3's report, Sec. 3.3.2, caches the MoE SwiGLU's input in
    /// FP8 the same way). Gated MLPs on a fused stack only (the fused SwiGLU kernels take the
    /// switch; GeLU's does not). The cast happens inside the activation kernel: no time.
    pub activation_func_fp8_input_store: bool,
    /// With [`Stack::defer_embedding_wgrad`], how many micro-batches' weight gradients are
    /// deferred (the first ones; the rest run in their backward); 0: all of them
    /// (Megatron-Core `--wgrad-deferral-limit`).
    pub wgrad_deferral_limit: u32,
    /// The cross-entropy's kernels (`--cross-entropy-loss-fusion`,
    /// `--cross-entropy-fusion-impl`): their HBM traffic per logit.
    pub cross_entropy_fusion: CrossEntropyFusion,
    /// Transformer layers whose activations are offloaded to host memory during the forward
    /// and reloaded for the backward (Megatron-Core `--cpu-offloading-num-layers`, Transformer
    /// Engine's `get_cpu_offload_context`; docs/cost-model.md "Activation offloading"); 0:
    /// none.
    pub cpu_offload_layers: u32,
    /// Adam's state per parameter (`--use-precision-aware-optimizer`, `--main-params-dtype`,
    /// `--exp-avg-dtype`, `--exp-avg-sq-dtype`; `cost::optimizer`).
    pub optimizer_state: OptimizerState,
}

impl Stack {
    /// Megatron-Core with Transformer Engine as its recipes run it (the CLI's default,
    /// `--stack megatron-core`): flash attention (TE/cuDNN fused attention), the tensor-parallel
    /// collectives pipelined with the GEMMs (`--tp-comm-overlap`, in effect with sequence
    /// parallelism) and the backward ones asynchronous, the gradient reduction overlapped with
    /// the backward and the distributed optimizer's parameter gather with the next forward
    /// (`--overlap-grad-reduce`, `--overlap-param-gather`, in effect with ZeRO-1), weight
    /// gradients accumulated in the GEMM epilogue (`gradient_accumulation_fusion`) and
    /// non-blocking pipeline sends. Precision and ZeRO stay as given (BF16, replicated).
    /// [`Stack::default`] is Megatron-LM as used for Narayanan et al. 2021.
    pub fn megatron_core() -> Stack {
        Stack {
            attention: Attention::Flash,
            attention_kernel: AttentionKernel::Cudnn,
            tp_comm_overlap: true,
            tp_async_backward: true,
            blocking_p2p: false,
            overlap_grad_reduce: true,
            overlap_param_gather: true,
            grad_accumulation_fusion: true,
            moe_layer_host_s: MEGATRON_CORE_MOE_LAYER_HOST_S,
            ..Stack::default()
        }
    }

    /// torchtitan as its Llama recipes run it (`--stack torchtitan`): FSDP2 over the whole
    /// data-parallel group (ZeRO-3, `data_parallel_shard_degree = -1`), parameters resharded
    /// after the forward, BF16 parameters with FP32 gradient reduction
    /// (`mixed_precision_param = bfloat16`, `mixed_precision_reduce = float32`: 4 bytes per
    /// gradient), PyTorch SDPA's flash attention, eager PyTorch kernels (no compile, no
    /// Megatron fusions), a separate gradient accumulation, DDP's reduction overlapped with
    /// the backward when unsharded, and `torch.distributed.pipelining`'s asynchronous sends.
    /// Tensor-parallel collectives are not overlapped (async TP needs `torch.compile`).
    pub fn torchtitan() -> Stack {
        Stack {
            attention: Attention::Flash,
            attention_kernel: AttentionKernel::Cudnn,
            fused_kernels: false,
            zero: Zero::Full,
            reshard_after_forward: true,
            fsdp2: true,
            grad_reduce_bytes_per_param: 4.0,
            overlap_grad_reduce: true,
            blocking_p2p: false,
            ..Stack::default()
        }
    }

    /// The presets `--stack` and a plan's `parallelism.stack` name, in the CLI's order.
    pub const PRESET_NAMES: [&'static str; 3] = ["megatron-core", "megatron-2021", "torchtitan"];

    /// The preset of one of [`Stack::PRESET_NAMES`]; `None` for any other name.
    pub fn preset(name: &str) -> Option<Stack> {
        match name {
            "megatron-core" => Some(Stack::megatron_core()),
            "megatron-2021" => Some(Stack::default()),
            "torchtitan" => Some(Stack::torchtitan()),
            _ => None,
        }
    }

    /// The preset this stack was built from, as `--stack` names it, read off the two
    /// choices no flag changes: `torchtitan` with eager (unfused) kernels, `megatron-core`
    /// with the asynchronous tensor-parallel backward, else `megatron-2021`. The switches a
    /// flag sets (`--gradient-accumulation-fusion`, `--overlap-p2p-comm`, `--fsdp-copies`,
    /// ...) do not change the name, so a plan that records it and the switches that differ
    /// from its defaults is predicted again on the same preset.
    pub fn preset_name(&self) -> &'static str {
        if !self.fused_kernels {
            "torchtitan"
        } else if self.tp_async_backward {
            "megatron-core"
        } else {
            "megatron-2021"
        }
    }

    /// Bytes per element of the low-precision copies Transformer Engine keeps of a tensor it
    /// casts for the GEMMs: of every weight (beside the BF16 one, without `fp8_model_params`)
    /// and of the activations and gradients it casts each micro-batch
    /// ([`super::CostModel::low_precision_cast_bytes`]). FP8 with per-tensor scales, the cast
    /// and its transpose (1 + 1) where the GPU's FP8 GEMMs take only the TN layout (Hopper),
    /// the cast alone where they take every layout (Blackwell,
    /// [`crate::inputs::hardware::Gpu::fp8_any_layout`]); MXFP8, the row- and the column-wise
    /// casts (1 + 1: its 32-element scales run along one direction); NVFP4, 0.5 + 0.5 plus
    /// its scales, rounded up to 1. FP8 with block scales (`--fp8-recipe blockwise`) keeps
    /// both on every GPU: Transformer Engine computes the row- and the column-wise casts from
    /// the BF16 tensor, as their 128-element scales run along one direction
    /// (`Float8BlockScaling`); their FP32 scales, 4 bytes per 128x128 block of a weight, are
    /// left out. BF16: none.
    pub fn low_precision_copy_bytes(&self, hw: &Hardware) -> u64 {
        match self.precision {
            Precision::Bf16 => 0,
            Precision::Fp8 if self.fp8_recipe == Fp8Recipe::Blockwise => 2,
            Precision::Fp8 if hw.gpu.fp8_any_layout => 1,
            Precision::Fp8 | Precision::Mxfp8 => 2,
            Precision::Nvfp4 => 1,
        }
    }

    /// Whether the weights live only in the low precision ([`Stack::fp8_param_gather`] with
    /// an FP8 or MXFP8 precision).
    pub fn low_precision_params(&self) -> bool {
        self.fp8_param_gather && matches!(self.precision, Precision::Fp8 | Precision::Mxfp8)
    }

    /// Bytes per parameter a parameter all-gather moves (the distributed optimizer's gather of
    /// the updated weights, ZeRO-3's gather of a layer): the BF16 weight (2), or with
    /// [`Stack::low_precision_params`] its FP8 row-wise data (1; MXFP8 adds one E8M0 scale per
    /// 32 elements: Megatron-Core gathers it into the gradient buffer,
    /// `reuse_grad_buf_for_mxfp8_param_ag`, and restores the column-wise copy locally).
    pub fn param_gather_bytes_per_param(&self) -> f64 {
        match (self.low_precision_params(), self.precision) {
            (false, _) => 2.0,
            (true, Precision::Mxfp8) => 1.0 + 1.0 / 32.0,
            (true, _) => 1.0,
        }
    }
}

impl Default for Stack {
    fn default() -> Self {
        Stack {
            fused_kernels: true,
            attention: Attention::Unfused,
            attention_kernel: AttentionKernel::Cudnn,
            precision: Precision::Bf16,
            fp8_recipe: Fp8Recipe::Delayed,
            fp8_param_gather: false,
            tp_comm_overlap: false,
            tp_async_backward: false,
            scatter_gather: true,
            blocking_p2p: true,
            overlap_grad_reduce: false,
            overlap_param_gather: false,
            zero: Zero::Off,
            reshard_after_forward: true,
            fsdp2: false,
            cp_comm: CpComm::P2p,
            grad_reduce_bytes_per_param: 2.0,
            grad_accumulation_bytes_per_param: 12.0,
            grad_accumulation_fusion: false,
            optimizer_bytes_per_param: 32.0,
            rank_order: RankOrder::TensorDataPipeline,
            overheads: Overheads::default(),
            moe_imbalance: DEFAULT_MOE_IMBALANCE,
            moe_layer_host_s: 0.0,
            moe_comm_overlap: false,
            moe_dispatcher: MoeDispatcher::AllToAll,
            moe_capacity: None,
            cuda_graphs: CudaGraphs::default(),
            defer_embedding_wgrad: false,
            te_op_fuser: false,
            activation_func_fp8_input_store: false,
            wgrad_deferral_limit: 0,
            cross_entropy_fusion: CrossEntropyFusion::Off,
            optimizer_state: OptimizerState::FP32,
            cpu_offload_layers: 0,
        }
    }
}

impl Stack {
    /// Of `microbatches` per step, how many have their output-layer weight gradients deferred
    /// to the pipeline flush ([`Stack::defer_embedding_wgrad`]): none when off, all with limit
    /// 0, else the first `wgrad_deferral_limit`.
    pub fn deferred_wgrad_microbatches(&self, microbatches: u64) -> u64 {
        match (self.defer_embedding_wgrad, self.wgrad_deferral_limit) {
            (false, _) => 0,
            (true, 0) => microbatches,
            (true, k) => microbatches.min(k as u64),
        }
    }
}

/// Default `--moe-imbalance`: the training capacity factor of Switch Transformer (Fedus et al.
/// 2022, JMLR, Sec. 2.2 and the capacity-factor tables: 1.25), i.e. the busiest expert-parallel
/// rank taking 25 % more than its share of the routed tokens (docs/cost-model.md).
pub const DEFAULT_MOE_IMBALANCE: f64 = 1.25;

/// Megatron-Core's host time for one MoE layer's forward and backward on one micro-batch, on
/// DGX hosts (x86): 8.85 ms. Read off a published run whose layer time is not GPU work:
/// Megatron-Bridge's Qwen3-30B-A3B on 8 DGX-B200 (NVIDIA-NeMo/Megatron-Bridge
/// `docs/performance-summary-archive.md`, 25.11 container: MXFP8, EP 8, micro-batch 1, global
/// batch 512, 9,299 tokens/s per GPU) takes 28.2 s a step, 9.2 ms for each of its 64 x 48
/// layer passes a rank, 9.1 without the output layer; a layer whose host outlasts its GPU work
/// both ways takes `H + c G_f` ([`MOE_FORWARD_SYNC_LOSS`] `c`, `G_f` its forward's GPU time,
/// 1.27 ms in pplan, its experts' MXFP8 casts included; 1.39 with the gap between kernels the
/// Blackwell profiles carry since, 8.82 ms, within the 0.1 ms the layer time is read to), so
/// `H` = 9.1 - 0.20 x 1.27 = 8.85 ms. The same layer takes 9.7 ms on
/// H100 (26.06), a GPU with 0.44 of the B200's tensor-core peak, and 3.6 ms a sequence on
/// GB200 with micro-batch 4. Held out: every H100 run in docs/validation.md. That run graphed
/// each layer's router and preprocessing (Transformer Engine's CUDA graphs, `moe_router
/// moe_preprocess`), so 8.85 ms is the host time of the layer's other kernels, launched one by
/// one: a layer with nothing graphed takes it scaled by all its kernels over those
/// (`CostModel::moe_layer`, docs/cost-model.md "CUDA graphs").
pub const MEGATRON_CORE_MOE_LAYER_HOST_S: f64 = 8.85e-3;

/// What a MoE layer's forward loses because its dispatcher waits on the GPU once a layer (the
/// per-expert token counts read on the host): the forward takes `max(H, G) + c min(H, G)` of
/// its host time `H` and GPU time `G` (its kernels and the gaps between them,
/// [`Hardware::kernel_gap_s`](crate::inputs::hardware::Hardware::kernel_gap_s)) instead of
/// `max(H, G)`, the host unable to run ahead past the wait. `c` = 0.20: measured on one H100
/// (`benches/gpu_kernels.py`, part `moe_layer_sync`: a stack of attention + eager MoE layers
/// of Qwen3-30B-A3B and Qwen3-235B-A22B shapes, 4-16 local experts, 1k-8k tokens, host time
/// measured in the same steps; `hardware/measured/h100/torch-kernels-moe-sync2.json`), median
/// of 16 layouts x passes 0.204 (0.11-0.29), with forward GPU times from 0.3x to 1.5x their
/// host time; held out on H200, 0.199. The backward, with no wait, takes `max(H, G)` within
/// 2.1 %.
pub const MOE_FORWARD_SYNC_LOSS: f64 = 0.20;

/// Bytes per parameter per micro-batch that a fused weight-gradient GEMM moves in its
/// epilogue: read and write the fp32 main gradient.
pub const FUSED_GRAD_ACCUMULATION_BYTES_PER_PARAM: f64 = 8.0;

/// The cost model for one (model, hardware, layout, stack).
#[derive(Debug, Clone, Copy)]
pub struct CostModel<'a> {
    pub model: &'a Model,
    pub hw: &'a Hardware,
    pub layout: Layout,
    pub stack: Stack,
}

impl CostModel<'_> {
    /// Ranks that hold the same weights: data- times context-parallel.
    pub fn dp_cp(&self) -> u64 {
        self.layout.dp.max(1) * self.layout.cp.max(1)
    }

    /// Ranks the sharded state is split over: [`Self::dp_cp`] over the HSDP replicas.
    pub fn shard_ranks(&self) -> u64 {
        (self.dp_cp() / self.layout.dp_replicate.max(1)).max(1)
    }

    /// (b, s, h, a, f, t, head dim) of one micro-batch as `f64`; `s` is the tokens of a
    /// sequence one rank holds: the whole sequence over the context-parallel size.
    pub(super) fn dims(&self) -> (f64, f64, f64, f64, f64, f64, f64) {
        let m = self.model;
        (
            self.layout.micro_batch as f64,
            m.seq_len as f64 / self.layout.cp.max(1) as f64,
            m.hidden_size as f64,
            m.num_heads as f64,
            m.ffn_hidden_size as f64,
            self.layout.tp as f64,
            m.head_dim() as f64,
        )
    }
}

/// Memory a training process holds besides its tensors, and the caching allocator's reserve:
/// what turns the simulated peak of weights, gradients, optimizer state and activations into
/// what `nvidia-smi` shows (docs/cost-model.md, "Memory beyond the tensors").
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Overheads {
    /// CUDA context and the kernels' modules loaded into it.
    pub cuda_context_bytes: u64,
    /// NCCL's buffers for the communicators a Megatron-style rank creates (tensor, pipeline,
    /// data-parallel and embedding groups).
    pub nccl_bytes: u64,
    /// cuBLAS / Transformer Engine workspaces.
    pub workspace_bytes: u64,
    /// Memory PyTorch's caching allocator reserves beyond the peak of live tensors, as a
    /// fraction of that peak (block rounding and fragmentation).
    pub allocator_reserve_fraction: f64,
}

impl Overheads {
    /// None at all: the memory model of the 2021 reproduction (peak = tensors).
    pub const NONE: Overheads = Overheads {
        cuda_context_bytes: 0,
        nccl_bytes: 0,
        workspace_bytes: 0,
        allocator_reserve_fraction: 0.0,
    };

    /// The bytes that do not depend on the run's tensors.
    pub fn fixed_bytes(&self) -> u64 {
        self.cuda_context_bytes
            .saturating_add(self.nccl_bytes)
            .saturating_add(self.workspace_bytes)
    }

    /// What the process holds on the GPU when its live tensors peak at `tensor_bytes`.
    pub fn reserved_bytes(&self, tensor_bytes: u64) -> u64 {
        let reserve = (tensor_bytes as f64 * self.allocator_reserve_fraction).ceil();
        tensor_bytes
            .saturating_add(reserve.min(u64::MAX as f64) as u64)
            .saturating_add(self.fixed_bytes())
    }

    /// The largest tensor peak whose [`Overheads::reserved_bytes`] stay within `capacity_bytes`.
    pub fn tensor_budget_bytes(&self, capacity_bytes: u64) -> u64 {
        let free = capacity_bytes.saturating_sub(self.fixed_bytes()) as f64;
        let mut budget = (free / (1.0 + self.allocator_reserve_fraction)).floor() as u64;
        // Exact at the boundary despite rounding: the budget's own reserve must fit.
        while budget > 0 && self.reserved_bytes(budget) > capacity_bytes {
            budget -= 1;
        }
        budget
    }
}

impl Default for Overheads {
    /// Measured figures for a Megatron-Core rank (docs/cost-model.md has each source).
    fn default() -> Self {
        const MIB: u64 = 1 << 20;
        Overheads {
            cuda_context_bytes: 512 * MIB,
            nccl_bytes: 4 * 640 * MIB,
            workspace_bytes: 4 * 32 * MIB,
            allocator_reserve_fraction: 0.05,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_is_named_back_by_preset_name() {
        for name in Stack::PRESET_NAMES {
            let stack = Stack::preset(name).unwrap();
            assert_eq!(stack.preset_name(), name);
        }
        assert_eq!(Stack::preset("deepspeed"), None);
    }
}
