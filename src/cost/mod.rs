//! The cost model: how long each piece of a training step takes, and how much memory it holds.
//!
//! - [`stack`]: what is being costed: the parallel [`Layout`], the training [`Stack`] and the
//!   [`CostModel`] binding them to a model and a hardware profile;
//! - [`compute`]: per-layer, embedding, output-layer and optimizer time on one GPU;
//! - [`cp`]: context parallelism: the K/V exchange and the ring's merge traffic;
//! - [`eager`]: where Megatron-Core falls back to eager PyTorch for a model's own features
//!   (YaRN's rotary embedding, a clamped gated activation);
//! - [`network`]: collectives and point-to-point transfers on the links they cross;
//! - [`memory`]: model state and activation memory per GPU;
//! - [`moe`]: mixture-of-experts layers, expert parallelism, expert memory and reduction;
//! - [`launch`]: the kernels each layer launches, which bound its time from below;
//! - [`fp8_recipe`]: the FP8 recipes (`--fp8-recipe`) and the GPUs that run them;
//! - [`low_precision`]: what the recipes cost beside the GEMMs (casts, accumulator, amax
//!   all-reduces);
//! - [`mtp`]: a multi-token prediction depth's projection, norms and FLOPs, and what the
//!   depths add to their stage;
//! - [`offload`]: activation offloading to host memory and the stalls its copies cause;
//! - [`profiled`]: a measured layer profile in place of the formulas;
//! - [`recipe`]: Megatron-Core's dispatcher, token-dropping and CUDA-graph switches and their
//!   rules;
//! - [`step`]: one step's costs in one call: every stage's action durations and bytes, the
//!   sends, the gradient reductions, each device's optimizer step, static bytes and
//!   parameters, from the cost model and the planner's stage split (the planner only asks).
//!
//! Invariants: no IO, no clock; inputs are a model, a hardware profile, a layout and a stack.
//! Times are seconds (`_s`), sizes bytes (`_bytes`), work FLOPs (`_flops`). Every formula, its
//! source and its unit are in docs/cost-model.md. Imports `inputs` only; never the schedule,
//! the simulator or the planner.
//!
//! Shape of a step (Megatron-LM 2021, Narayanan et al.): per micro-batch and layer, a forward
//! (GEMMs, memory-bound kernels, two tensor-parallel all-reduces), an input-gradient backward
//! `I` (GEMMs for activations' gradients, memory-bound kernels, two all-reduces, plus the
//! recomputed forward), and a weight-gradient backward `W` (weight GEMMs and the accumulation
//! of the gradient into the main-gradient buffer).

pub mod compute;
pub mod cp;
pub mod eager;
pub mod fp8_recipe;
pub mod kernel_bytes;
pub mod launch;
pub mod low_precision;
pub mod memory;
pub mod mla;
pub mod moe;
pub mod mtp;
pub mod network;
pub mod offload;
pub mod optimizer;
pub mod profiled;
pub mod recipe;
pub mod stack;
pub mod step;
pub mod switches;
pub mod tp;

pub use compute::{
    gemm_efficiency, gemm_time_s, linear_fans, BlockCost, Gemm, MemoryTraffic, Part,
};
pub use fp8_recipe::Fp8Recipe;
pub use kernel_bytes::CrossEntropyFusion;
pub use network::{all_gather_s, all_reduce_s, p2p_link_s};
pub use optimizer::{MasterWeights, OptimizerState, StateDtype};
pub use stack::{
    Attention, AttentionKernel, CostModel, CpComm, Layout, Overheads, RankOrder, Recompute, Stack,
    Zero, MEGATRON_CORE_MOE_LAYER_HOST_S, MOE_FORWARD_SYNC_LOSS,
};
