//! The plan file's `parallelism` object: the parallel layout and every training-stack switch
//! a prediction ran with, each omitted at the value plans written before it existed imply.

use crate::cost::optimizer::OptimizerStateError;
use crate::cost::OptimizerState;
use serde::{Deserialize, Serialize};

/// The parallel layout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Parallelism {
    pub gpus: u64,
    pub tp: u64,
    pub pp: u64,
    pub dp: u64,
    /// Context-parallel size (omitted when 1).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub cp: u64,
    /// How context-parallel ranks exchange keys and values: `p2p` (a ring, the default,
    /// omitted) or `all-gather` (pplan's `--cp-comm`, Megatron-Core's `--cp-comm-type`).
    #[serde(
        default = "default_cp_comm",
        skip_serializing_if = "is_default_cp_comm"
    )]
    pub cp_comm: String,
    /// Expert-parallel size (mixture of experts; omitted when 1).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub ep: u64,
    /// Expert tensor-parallel size (omitted when 1).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub etp: u64,
    /// Sequences per micro-batch (b).
    pub micro_batch: u64,
    /// Sequences per optimizer step over all data-parallel replicas (B).
    pub global_batch: u64,
    /// Chunks (virtual stages) per pipeline device (v).
    pub chunks: u64,
    /// `none`, `selective` or `full`.
    pub recompute: String,
    pub sequence_parallel: bool,
    /// Optimizer state sharded over data-parallel ranks (ZeRO stage 1).
    #[serde(default)]
    pub zero1: bool,
    /// ZeRO stage when above 1 (2: gradients sharded too, 3: parameters too; omitted at 0
    /// and 1, which `zero1` says). Needs `zero1`.
    #[serde(default, skip_serializing_if = "below_two")]
    pub zero: u8,
    /// HSDP replicas of the sharded state (omitted when 1).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub dp_replicate: u64,
    /// Number format of the linear layers: `bf16` (default, omitted), `fp8`, `mxfp8`, `nvfp4`.
    #[serde(
        default = "default_precision",
        skip_serializing_if = "is_default_precision"
    )]
    pub precision: String,
    /// With `precision` `fp8`, the FP8 recipe (`--fp8-recipe`): `delayed` (Megatron-LM's
    /// default, omitted), `tensorwise` or `blockwise`.
    #[serde(
        default = "default_fp8_recipe",
        skip_serializing_if = "is_default_fp8_recipe"
    )]
    pub fp8_recipe: String,
    /// Attention kernel: `unfused` (default, omitted) or `flash`.
    #[serde(
        default = "default_attention",
        skip_serializing_if = "is_default_attention"
    )]
    pub attention: String,
    /// Whose fused attention kernels: `cudnn` (the default, omitted) or `fa2` (pplan's
    /// `--attention-kernel`).
    #[serde(
        default = "default_attention_kernel",
        skip_serializing_if = "is_default_attention_kernel"
    )]
    pub attention_kernel: String,
    /// The framework the plan was predicted for (`--stack`): `megatron-core`, `torchtitan`,
    /// or `megatron-2021` (the default, omitted: plans written before the field existed).
    #[serde(default = "default_stack", skip_serializing_if = "is_default_stack")]
    pub stack: String,
    /// Tensor-parallel collectives pipelined with the GEMMs (omitted when off).
    #[serde(default, skip_serializing_if = "is_false")]
    pub tp_comm_overlap: bool,
    /// Data-parallel gradient reduction overlapped with the backward (omitted when off).
    #[serde(default, skip_serializing_if = "is_false")]
    pub overlap_grad_reduce: bool,
    /// Parameter all-gather overlapped with the next forward (omitted when off).
    #[serde(default, skip_serializing_if = "is_false")]
    pub overlap_param_gather: bool,
    /// The last stage's output-layer weight gradients run at its pipeline flush
    /// (`--defer-embedding-wgrad-compute`; omitted when off).
    #[serde(default, skip_serializing_if = "is_false")]
    pub defer_embedding_wgrad_compute: bool,
    /// The grouped experts as Transformer Engine's fused operations
    /// (`--use-transformer-engine-op-fuser`; omitted when off).
    #[serde(default, skip_serializing_if = "is_false")]
    pub use_transformer_engine_op_fuser: bool,
    /// The MLP activation's input kept in FP8 for the backward
    /// (`--activation-func-fp8-input-store`; omitted when off).
    #[serde(default, skip_serializing_if = "is_false")]
    pub activation_func_fp8_input_store: bool,
    /// With it, how many micro-batches' are deferred (0: all, omitted).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub wgrad_deferral_limit: u32,
    /// The cross-entropy's kernels: `native` or `te` (`--cross-entropy-loss-fusion`,
    /// `--cross-entropy-fusion-impl`); `off` omitted.
    #[serde(default = "off", skip_serializing_if = "is_off")]
    pub cross_entropy_fusion: String,
    /// The linear layers' weights kept only in FP8/MXFP8 and gathered so
    /// (`--fp8-param-gather`; omitted when off).
    #[serde(default, skip_serializing_if = "is_false")]
    pub fp8_param_gather: bool,
    /// Layers whose activations are offloaded to host memory (`--cpu-offloading-num-layers`;
    /// omitted when 0).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub cpu_offloading_num_layers: u32,
    /// Adam's state in the formats below (`--use-precision-aware-optimizer`; omitted when off).
    #[serde(default, skip_serializing_if = "is_false")]
    pub use_precision_aware_optimizer: bool,
    /// `fp32`, `fp16` or `none` (omitted when `fp32`).
    #[serde(default = "fp32", skip_serializing_if = "is_fp32")]
    pub main_params_dtype: String,
    /// `fp32`, `fp16`, `bf16` or `fp8` (omitted when `fp32`).
    #[serde(default = "fp32", skip_serializing_if = "is_fp32")]
    pub exp_avg_dtype: String,
    #[serde(default = "fp32", skip_serializing_if = "is_fp32")]
    pub exp_avg_sq_dtype: String,
    /// Mixture of experts: `alltoall` (omitted), `deepep` or `hybridep` (Megatron-Core's flex
    /// dispatcher with that backend).
    #[serde(default = "alltoall", skip_serializing_if = "is_alltoall")]
    pub moe_dispatcher: String,
    /// Token dropping: the capacity factor (omitted: dropless).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_expert_capacity_factor: Option<f64>,
    /// With it, every expert's input padded to its capacity (omitted when not).
    #[serde(default, skip_serializing_if = "is_false")]
    pub moe_pad_expert_input_to_capacity: bool,
    /// CUDA graphs: `local`, `transformer_engine` or `full_iteration` (`none` omitted).
    #[serde(default = "none", skip_serializing_if = "is_none_str")]
    pub cuda_graph_impl: String,
    /// The regions per-layer graphs capture (`attn`, `mlp`, `moe`, `moe_router`,
    /// `moe_preprocess`); empty (omitted): the whole layer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cuda_graph_modules: Vec<String>,
    /// Pipeline sends on their own stream (`--overlap-p2p-comm`). This and the next four
    /// fields are written only where they differ from `stack`'s default (absent: the
    /// stack's, as in plans written before they existed), so a plan is predicted again on
    /// the same switches whatever its stack. Default on with megatron-core and torchtitan,
    /// off with megatron-2021.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlap_p2p_comm: Option<bool>,
    /// The weight-gradient GEMM accumulates into the main gradient
    /// (`--gradient-accumulation-fusion`; the stack's default: on with megatron-core).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gradient_accumulation_fusion: Option<bool>,
    /// `bf16` or `fp32`: the data-parallel gradient reduction's format
    /// (`--grad-reduce-dtype`; the stack's default: fp32 with torchtitan, else bf16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad_reduce_dtype: Option<String>,
    /// Sharded data parallelism copies into and out of its flat buffers (FSDP2,
    /// `--fsdp-copies`; the stack's default: on with torchtitan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fsdp_copies: Option<bool>,
    /// Mixture of experts: the framework's host time per MoE layer and micro-batch, in
    /// milliseconds (`--moe-layer-host-ms`; the stack's default: 8.85 with megatron-core, 0
    /// with the others).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe_layer_host_ms: Option<f64>,
    /// ZeRO-3 frees each layer's gathered parameters after its forward
    /// (`--reshard-after-forward`; omitted when on, the default).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub reshard_after_forward: bool,
    /// Mixture of experts: tokens on the busiest expert-parallel rank over the mean
    /// (`--moe-imbalance`, 1 to 64; omitted at the default 1.25).
    #[serde(
        default = "default_moe_imbalance",
        skip_serializing_if = "is_default_moe_imbalance"
    )]
    pub moe_imbalance: f64,
    /// Mixture of experts: the all-to-alls overlapped with another micro-batch's compute
    /// (`--moe-comm-overlap`; omitted when off).
    #[serde(default, skip_serializing_if = "is_false")]
    pub moe_comm_overlap: bool,
    /// Pipeline activations sent whole from every tensor-parallel rank (`--no-scatter-gather`;
    /// omitted when false).
    #[serde(default, skip_serializing_if = "is_false")]
    pub no_scatter_gather: bool,
    /// The pipeline devices share one GPU (`--shared-gpu`; omitted when false).
    #[serde(default, skip_serializing_if = "is_false")]
    pub shared_gpu: bool,
    /// The measured layer profile the prediction's layer costs came from (`--profile`), as an
    /// absolute path when pplan wrote the plan; a relative path is read against the plan
    /// file's folder. Omitted without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

impl Parallelism {
    /// The dispatcher, capacity and CUDA-graph fields from the stack a prediction ran on.
    pub fn set_recipe(&mut self, stack: &crate::cost::Stack) {
        self.attention_kernel = stack.attention_kernel.as_str().to_string();
        self.use_transformer_engine_op_fuser = stack.te_op_fuser;
        self.activation_func_fp8_input_store = stack.activation_func_fp8_input_store;
        self.moe_dispatcher = stack.moe_dispatcher.as_str().to_string();
        self.moe_expert_capacity_factor = stack.moe_capacity.map(|c| c.factor);
        self.moe_pad_expert_input_to_capacity = stack.moe_capacity.is_some_and(|c| c.pad);
        self.cuda_graph_impl = stack.cuda_graphs.implementation.as_str().to_string();
        self.cuda_graph_modules = stack
            .cuda_graphs
            .modules
            .names()
            .into_iter()
            .map(String::from)
            .collect();
    }

    /// The switches [`crate::cost::switches::RecordedSwitches`] records, from a prediction
    /// (`shared_gpu` and `profile` are the request's, not the stack's: the caller sets them).
    pub fn set_switches(&mut self, r: &crate::cost::switches::RecordedSwitches) {
        self.overlap_p2p_comm = r.overlap_p2p_comm;
        self.gradient_accumulation_fusion = r.gradient_accumulation_fusion;
        self.grad_reduce_dtype = r.grad_reduce_dtype.clone();
        self.fsdp_copies = r.fsdp_copies;
        self.moe_layer_host_ms = r.moe_layer_host_ms;
        self.reshard_after_forward = r.reshard_after_forward;
        self.moe_imbalance = r.moe_imbalance;
        self.moe_comm_overlap = r.moe_comm_overlap;
        self.no_scatter_gather = r.no_scatter_gather;
    }

    /// The recorded switches back (the inverse of [`Parallelism::set_switches`]).
    pub fn switches(&self) -> crate::cost::switches::RecordedSwitches {
        crate::cost::switches::RecordedSwitches {
            overlap_p2p_comm: self.overlap_p2p_comm,
            gradient_accumulation_fusion: self.gradient_accumulation_fusion,
            grad_reduce_dtype: self.grad_reduce_dtype.clone(),
            fsdp_copies: self.fsdp_copies,
            moe_layer_host_ms: self.moe_layer_host_ms,
            reshard_after_forward: self.reshard_after_forward,
            moe_imbalance: self.moe_imbalance,
            moe_comm_overlap: self.moe_comm_overlap,
            no_scatter_gather: self.no_scatter_gather,
        }
    }

    /// The switches above that can hold a bad value: the field's name in the plan file and
    /// what is valid.
    pub fn check_switches(&self) -> Result<(), (&'static str, String)> {
        if let Some(d) = self.grad_reduce_dtype.as_deref() {
            if !["bf16", "fp32"].contains(&d) {
                return Err((
                    "parallelism.grad_reduce_dtype",
                    format!("'{d}' (valid: bf16, fp32)"),
                ));
            }
        }
        if !(self.moe_imbalance.is_finite() && (1.0..=64.0).contains(&self.moe_imbalance)) {
            return Err((
                "parallelism.moe_imbalance",
                format!(
                    "{} (valid: 1, perfectly balanced routing, to 64)",
                    self.moe_imbalance
                ),
            ));
        }
        if let Some(ms) = self.moe_layer_host_ms {
            if !(ms.is_finite() && (0.0..=10_000.0).contains(&ms)) {
                return Err((
                    "parallelism.moe_layer_host_ms",
                    format!("{ms} (valid: 0 to 10000 milliseconds)"),
                ));
            }
        }
        if self.profile.as_deref().is_some_and(|p| p.trim().is_empty()) {
            return Err((
                "parallelism.profile",
                "an empty path (valid: the layer profile's path, or no field)".into(),
            ));
        }
        Ok(())
    }

    /// The stack fields above as the cost model's, or the field that is wrong.
    pub fn recipe(
        &self,
    ) -> Result<
        (
            crate::cost::recipe::MoeDispatcher,
            Option<crate::cost::recipe::MoeCapacity>,
            crate::cost::recipe::CudaGraphs,
        ),
        (String, String),
    > {
        use crate::cost::recipe::*;
        let d = MoeDispatcher::parse(&self.moe_dispatcher)
            .map_err(|e| ("parallelism.moe_dispatcher".to_string(), e))?;
        let capacity = self.moe_expert_capacity_factor.map(|factor| MoeCapacity {
            factor,
            pad: self.moe_pad_expert_input_to_capacity,
        });
        if capacity.is_none() && self.moe_pad_expert_input_to_capacity {
            return Err((
                "parallelism.moe_pad_expert_input_to_capacity".into(),
                "needs parallelism.moe_expert_capacity_factor".into(),
            ));
        }
        let implementation = CudaGraphImpl::parse(&self.cuda_graph_impl)
            .map_err(|e| ("parallelism.cuda_graph_impl".to_string(), e))?;
        let modules = CudaGraphModules::parse(self.cuda_graph_modules.iter().map(String::as_str))
            .map_err(|e| ("parallelism.cuda_graph_modules".to_string(), e))?;
        Ok((
            d,
            capacity,
            CudaGraphs {
                implementation,
                modules,
            },
        ))
    }

    /// Adam's state the fields say, or which field is wrong (its name in the plan file) and
    /// what is valid.
    pub fn optimizer_state(&self) -> Result<OptimizerState, OptimizerStateError> {
        OptimizerState::from_megatron(
            self.use_precision_aware_optimizer,
            &self.main_params_dtype,
            &self.exp_avg_dtype,
            &self.exp_avg_sq_dtype,
        )
    }

    /// A layout with the default stack fields (`bf16`, `unfused`, no overlaps) and zeros for
    /// the rest; for struct update syntax (`..Parallelism::stack_defaults()`).
    pub fn stack_defaults() -> Parallelism {
        Parallelism {
            gpus: 0,
            tp: 0,
            pp: 0,
            dp: 0,
            cp: 1,
            cp_comm: default_cp_comm(),
            ep: 1,
            etp: 1,
            micro_batch: 0,
            global_batch: 0,
            chunks: 0,
            recompute: String::new(),
            sequence_parallel: false,
            zero1: false,
            zero: 0,
            dp_replicate: 1,
            precision: default_precision(),
            fp8_recipe: default_fp8_recipe(),
            attention: default_attention(),
            attention_kernel: default_attention_kernel(),
            stack: default_stack(),
            tp_comm_overlap: false,
            overlap_grad_reduce: false,
            overlap_param_gather: false,
            defer_embedding_wgrad_compute: false,
            use_transformer_engine_op_fuser: false,
            activation_func_fp8_input_store: false,
            wgrad_deferral_limit: 0,
            cross_entropy_fusion: off(),
            fp8_param_gather: false,
            cpu_offloading_num_layers: 0,
            use_precision_aware_optimizer: false,
            main_params_dtype: fp32(),
            exp_avg_dtype: fp32(),
            exp_avg_sq_dtype: fp32(),
            moe_dispatcher: alltoall(),
            moe_expert_capacity_factor: None,
            moe_pad_expert_input_to_capacity: false,
            cuda_graph_impl: none(),
            cuda_graph_modules: Vec::new(),
            overlap_p2p_comm: None,
            gradient_accumulation_fusion: None,
            grad_reduce_dtype: None,
            fsdp_copies: None,
            moe_layer_host_ms: None,
            reshard_after_forward: true,
            moe_imbalance: default_moe_imbalance(),
            moe_comm_overlap: false,
            no_scatter_gather: false,
            shared_gpu: false,
            profile: None,
        }
    }
}

fn default_moe_imbalance() -> f64 {
    crate::cost::stack::DEFAULT_MOE_IMBALANCE
}
fn is_default_moe_imbalance(x: &f64) -> bool {
    crate::cost::switches::is_default_moe_imbalance(x)
}

fn alltoall() -> String {
    "alltoall".into()
}
fn is_alltoall(s: &str) -> bool {
    s == "alltoall"
}
fn none() -> String {
    "none".into()
}
fn is_none_str(s: &str) -> bool {
    s == "none"
}

fn off() -> String {
    "off".into()
}
fn is_off(s: &str) -> bool {
    s == "off"
}
fn fp32() -> String {
    "fp32".into()
}
fn is_fp32(s: &str) -> bool {
    s == "fp32"
}
fn below_two(z: &u8) -> bool {
    *z < 2
}
fn default_attention_kernel() -> String {
    "cudnn".to_string()
}
fn is_default_attention_kernel(k: &str) -> bool {
    k == "cudnn"
}
pub(super) fn default_cp_comm() -> String {
    "p2p".to_string()
}
fn is_default_cp_comm(c: &str) -> bool {
    c == "p2p"
}
fn default_precision() -> String {
    "bf16".to_string()
}
fn is_default_precision(p: &str) -> bool {
    p == "bf16"
}
pub(super) fn default_fp8_recipe() -> String {
    "delayed".to_string()
}
fn is_default_fp8_recipe(r: &str) -> bool {
    r == "delayed"
}
fn default_attention() -> String {
    "unfused".to_string()
}
fn is_default_attention(a: &str) -> bool {
    a == "unfused"
}
fn default_stack() -> String {
    "megatron-2021".to_string()
}
fn is_default_stack(s: &str) -> bool {
    s == "megatron-2021"
}

// Shared with the other plan-file types (`super` imports them from here, so the import runs
// one way).
fn one() -> u64 {
    1
}
fn is_one(v: &u64) -> bool {
    *v == 1
}
pub(super) fn is_false(b: &bool) -> bool {
    !*b
}
pub(super) fn yes() -> bool {
    true
}
pub(super) fn is_true(b: &bool) -> bool {
    *b
}
pub(super) fn is_zero_u32(x: &u32) -> bool {
    *x == 0
}
