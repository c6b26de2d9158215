//! The training-stack flags `predict` and `search` share: `--stack` and the switches that
//! override it, turned into a [`Stack`].

use super::values::{AttentionArg, FlagError, OnOff};
use crate::cost::fp8_recipe::names;
use crate::cost::recipe::{
    CudaGraphImpl, CudaGraphModules, CudaGraphs, MoeCapacity, MoeDispatcher,
};
use crate::cost::{
    Attention, AttentionKernel, CrossEntropyFusion, Fp8Recipe, OptimizerState, Stack, Zero,
};
use crate::inputs::hardware::{Hardware, Precision};
use clap::ValueEnum;

/// `--stack`: the framework whose implementation the other stack flags start from.
#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
pub enum StackPreset {
    /// Megatron-Core with Transformer Engine, as its recipes run it.
    MegatronCore,
    /// Megatron-LM as used for Narayanan et al. 2021.
    #[value(name = "megatron-2021")]
    Megatron2021,
    /// torchtitan: FSDP2 (ZeRO-3), eager PyTorch kernels.
    Torchtitan,
}

impl StackPreset {
    /// The stack the preset names (its ZeRO stage is the one used when neither --zero nor
    /// --zero1 is given).
    pub fn stack(self) -> Stack {
        match self {
            StackPreset::MegatronCore => Stack::megatron_core(),
            StackPreset::Megatron2021 => Stack::default(),
            StackPreset::Torchtitan => Stack::torchtitan(),
        }
    }
}

/// The training-stack flags `predict` and `search` share (for `search`, every candidate gets
/// them). `--overlap-grad-reduce` stays with each subcommand: `predict` also takes it bare.
/// `--attention`, `--tp-comm-overlap`, `--overlap-param-gather`, `--overlap-grad-reduce`,
/// `--overlap-p2p-comm`, `--gradient-accumulation-fusion`, `--grad-reduce-dtype` and
/// `--fsdp-copies` default to what `--stack` runs.
#[derive(Debug, Clone, clap::Args)]
pub struct StackFlags {
    /// The framework the step runs on: megatron-core (Megatron-Core with Transformer Engine:
    /// flash attention, tensor-parallel, gradient-reduction and parameter-gather overlap where
    /// they apply, fused weight-gradient accumulation, non-blocking pipeline sends) or
    /// megatron-2021 (Megatron-LM as in Narayanan et al. 2021: unfused attention, nothing
    /// overlapped, blocking sends) or torchtitan (FSDP2 over the data-parallel group, i.e.
    /// --zero 3 unless given, FP32 gradient reduction, SDPA flash attention, eager PyTorch
    /// kernels, FSDP2's copies around its collectives).
    #[arg(
        long = "stack",
        value_name = "STACK",
        value_enum,
        default_value = "megatron-core"
    )]
    pub preset: StackPreset,
    /// Number format of the transformer layers' linear GEMMs: bf16, fp8 (Transformer
    /// Engine, per-tensor or per-block scales, --fp8-recipe; Hopper and later), mxfp8 or nvfp4
    /// (block-scaled, Blackwell). Default: the one --fp8-recipe implies, else bf16.
    #[arg(long)]
    pub precision: Option<String>,
    /// Megatron-LM's --fp8-recipe, how Transformer Engine scales the FP8 tensors: delayed
    /// (amax history of earlier steps; what --precision fp8 means without this flag on the
    /// megatron-2021 and torchtitan stacks), tensorwise (current scaling: an amax pass before
    /// each cast; Megatron-Bridge's recipes, and --precision fp8 alone on the megatron-core
    /// stack), blockwise (DeepSeek-V3's
    /// 1x128 and 128x128 blocks; all GEMMs with the split accumulator on Hopper) or mxfp8
    /// (Blackwell). Sets --precision (fp8, or mxfp8 for mxfp8) when that is not given; one
    /// that contradicts it is refused.
    #[arg(long, value_name = "RECIPE")]
    pub fp8_recipe: Option<String>,
    /// Keep the linear layers' weights only in FP8/MXFP8 and all-gather them in it (Megatron-LM
    /// --fp8-param-gather): no BF16 weight copy, half the parameter all-gather's bytes.
    /// Default: on with --stack megatron-core and --fp8-recipe delayed, tensorwise or mxfp8
    /// (Megatron-Bridge's mixed-precision recipes set fp8_param_gather=True for these), off
    /// otherwise.
    #[arg(long, value_enum)]
    pub fp8_param_gather: Option<OnOff>,
    /// Attention kernel: unfused (scores in HBM, Megatron-LM 2021) or flash (fused, no s^2
    /// traffic; the hardware profile's measured kernel efficiency). Default: flash with --stack
    /// megatron-core where the hardware profile has the kernel's measured rates (else unfused),
    /// unfused with megatron-2021.
    #[arg(long, value_enum)]
    pub attention: Option<AttentionArg>,
    /// Pipeline the tensor-parallel all-gathers and reduce-scatters with the GEMMs next to them
    /// (Megatron-Core --tp-comm-overlap; in effect with --sequence-parallel on). Default: on
    /// with --stack megatron-core, off with megatron-2021.
    #[arg(long, value_enum)]
    pub tp_comm_overlap: Option<OnOff>,
    /// Gather the distributed optimizer's updated parameters under the next step's forward
    /// (Megatron-Core --overlap-param-gather; in effect with ZeRO-1). Default: on with --stack
    /// megatron-core, off with megatron-2021.
    #[arg(long, value_enum)]
    pub overlap_param_gather: Option<OnOff>,
    /// Pipeline sends and receives on their own stream, so a device's compute does not wait
    /// for its transfers (Megatron-Core --overlap-p2p-communication, which its interleaved
    /// schedule honours; off: the sender waits for each transfer, as Megatron-LM 2021's
    /// batch_isend_irecv and synchronize, and Megatron-Core's non-interleaved 1F1B do).
    /// Default: on with --stack megatron-core and torchtitan, off with megatron-2021.
    #[arg(long, value_enum)]
    pub overlap_p2p_comm: Option<OnOff>,
    /// The weight-gradient GEMM accumulates straight into the fp32 main-gradient buffer
    /// (Megatron-Core's gradient_accumulation_fusion; off: --no-gradient-accumulation-fusion,
    /// a separate accumulation kernel per micro-batch). Default: on with --stack megatron-core,
    /// off with megatron-2021 and torchtitan.
    #[arg(long, value_enum)]
    pub gradient_accumulation_fusion: Option<OnOff>,
    /// Number format of the data-parallel gradient reduction: bf16 (2 bytes a gradient) or
    /// fp32 (4; Megatron-Core --grad-reduce-in-fp32 / --accumulate-allreduce-grads-in-fp32,
    /// torchtitan's mixed_precision_reduce = float32, Composer's mixed_precision DEFAULT).
    /// Default: bf16 with the Megatron stacks, fp32 with torchtitan.
    #[arg(long, value_parser = ["bf16", "fp32"])]
    pub grad_reduce_dtype: Option<String>,
    /// Sharded data parallelism (ZeRO-2/3) copies each all-gather's flat output out to the
    /// per-parameter tensors and each reduce-scatter's input in from them (PyTorch FSDP2,
    /// fully_shard) -- on -- or its parameters and gradients are views of the flat buffers
    /// (PyTorch FSDP1's FlatParameter, Megatron's buffers) -- off. Default: on with --stack
    /// torchtitan, off with the Megatron stacks.
    #[arg(long, value_enum)]
    pub fsdp_copies: Option<OnOff>,
    /// ZeRO-3: free each layer's gathered parameters after its forward and gather them again
    /// for its backward (FSDP2's reshard_after_forward).
    #[arg(long, value_enum, default_value = "on")]
    pub reshard_after_forward: OnOff,
    /// How context-parallel ranks exchange keys and values (with --cp > 1): p2p (a ring
    /// overlapped with the attention blocks) or all-gather (Megatron-Core --cp-comm-type).
    #[arg(long, default_value = "p2p")]
    pub cp_comm: String,
    /// Whose fused attention kernels run with --attention flash: cudnn (cuDNN's, what
    /// Transformer Engine runs and torchtitan's SDPA asks for first since 2025-03), fa2
    /// (FlashAttention-2's: PyTorch SDPA's flash backend, torchtitan before 2025-03, the
    /// flash-attn 2 package) or triton (FlashAttention's Triton kernel of 2022: llm-foundry's
    /// attn_impl triton); each at the hardware profile's rates.
    #[arg(long, default_value = "cudnn")]
    pub attention_kernel: String,
    /// Mixture of experts: tokens on the busiest expert-parallel rank over the mean (>= 1);
    /// scales the expert GEMMs and the all-to-all of each MoE layer.
    #[arg(long, default_value_t = crate::cost::stack::DEFAULT_MOE_IMBALANCE)]
    pub moe_imbalance: f64,
    /// Mixture of experts: overlap the token dispatch/combine all-to-alls with another
    /// micro-batch's compute (Megatron-Core --overlap-moe-expert-parallel-comm, DualPipe).
    #[arg(long, value_enum, default_value = "off")]
    pub moe_comm_overlap: OnOff,
    /// Mixture of experts: how tokens are dispatched: alltoall (NCCL, one copy per expert;
    /// Megatron-Core --moe-token-dispatcher-type alltoall), deepep (the flex dispatcher with
    /// DeepEP: one copy per GPU and per remote node, forwarded over NVLink) or hybridep (the
    /// flex dispatcher with HybridEP: the same copies, permutation fused into its kernels).
    #[arg(long, default_value = "alltoall")]
    pub moe_dispatcher: String,
    /// Mixture of experts: drop tokens beyond this many times an expert's mean share
    /// (Megatron-Core --moe-expert-capacity-factor); absent: dropless.
    #[arg(long, value_name = "C")]
    pub moe_expert_capacity_factor: Option<f64>,
    /// With --moe-expert-capacity-factor: pad every expert's input to its capacity (static
    /// shapes: no host synchronisation, CUDA graphs may capture the experts).
    #[arg(long)]
    pub moe_pad_expert_input_to_capacity: bool,
    /// With --moe-expert-capacity-factor: which tokens are dropped, probs (the lowest routing
    /// probabilities) or position (the last ones); the same cost.
    #[arg(long, default_value = "probs")]
    pub moe_token_drop_policy: String,
    /// CUDA graphs (Megatron-Core --cuda-graph-impl): none, local (Megatron-Core's per-layer
    /// graphs), transformer_engine (Transformer Engine's, per layer) or full_iteration; what
    /// they capture costs the host no launch per kernel and no framework time per micro-batch.
    #[arg(long, default_value = "none")]
    pub cuda_graph_impl: String,
    /// With per-layer CUDA graphs: the regions captured, any of attn, mlp, moe, moe_router,
    /// moe_preprocess (Megatron-Core --cuda-graph-modules; also read as --cuda-graph-scope);
    /// none: the whole layer.
    #[arg(long, alias = "cuda-graph-scope", value_delimiter = ',', num_args = 1..)]
    pub cuda_graph_modules: Vec<String>,
    /// Mixture of experts: the framework's host time for one MoE layer's forward and backward
    /// on one micro-batch, in milliseconds; a MoE layer takes at least this long, and its
    /// forward loses part of the overlap with the GPU at the dispatcher's wait. Default: 8.85
    /// with --stack megatron-core (read off a DGX-B200 run, docs/cost-model.md), 0 with the
    /// others.
    #[arg(long, value_name = "MS")]
    pub moe_layer_host_ms: Option<f64>,
    /// Run the output layer's weight-gradient GEMMs of the last pipeline stage at its pipeline
    /// flush instead of in each micro-batch's backward (Megatron-Core
    /// --defer-embedding-wgrad-compute); what they need stays in memory until then.
    #[arg(long, value_enum, default_value = "off")]
    pub defer_embedding_wgrad_compute: OnOff,
    /// Mixture of experts: run the grouped experts as Transformer Engine's fused operations
    /// (Megatron-Core --use-transformer-engine-op-fuser; needs --etp 1): experts with biases
    /// (GPT-OSS) add the second GEMM's bias inside it instead of expert by expert in eager
    /// PyTorch.
    #[arg(long, value_enum, default_value = "off")]
    pub use_transformer_engine_op_fuser: OnOff,
    /// Keep the SwiGLU's input (dense and routed experts) for the backward in FP8, 1 byte an
    /// element instead of 2 (Megatron-Core's activation_func_fp8_input_store, in its fused
    /// SwiGLU kernels; a GeLU MLP keeps 16 bits; DeepSeek-V3's report, Sec. 3.3.2).
    #[arg(long, value_enum, default_value = "off")]
    pub activation_func_fp8_input_store: OnOff,
    /// With --defer-embedding-wgrad-compute on: how many micro-batches' weight gradients are
    /// deferred, the first ones (0: all; Megatron-Core --wgrad-deferral-limit).
    #[arg(long, default_value_t = 0)]
    pub wgrad_deferral_limit: u32,
    /// Run the cross-entropy as fused kernels (Megatron-Core --cross-entropy-loss-fusion):
    /// less HBM traffic per logit on the last stage.
    #[arg(long, value_enum, default_value = "off")]
    pub cross_entropy_loss_fusion: OnOff,
    /// With --cross-entropy-loss-fusion on: native (Megatron-Core's fused PyTorch kernels,
    /// the default) or te (Transformer Engine's Triton kernels; Megatron-Core
    /// --cross-entropy-fusion-impl); with --stack torchtitan, inductor (its loss under
    /// torch.compile: torchtitan with training.compile from 2025-04) or llm-foundry (MPT's
    /// FlashAttention cross-entropy and Composer's two training metrics).
    #[arg(long, value_name = "IMPL")]
    pub cross_entropy_fusion_impl: Option<String>,
    /// Offload the activations of this many transformer layers to host memory in the forward
    /// and reload them for the backward, on copy streams beside the compute (Megatron-Core
    /// --cpu-offloading-num-layers; needs --pp 1, no recomputation, and fewer layers than the
    /// model has). 0: none.
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub cpu_offloading_num_layers: u32,
    /// Keep Adam's state in the formats below (Megatron-Core --use-precision-aware-optimizer,
    /// Transformer Engine's FusedAdam): fp32 master weights of BF16 parameters as their low
    /// 16 bits, 10 bytes a parameter instead of 12 with the defaults.
    #[arg(long, value_enum, default_value = "off")]
    pub use_precision_aware_optimizer: OnOff,
    /// Master weights' format: fp32 or fp16 (not fp32: needs --use-precision-aware-optimizer on).
    #[arg(long, default_value = "fp32")]
    pub main_params_dtype: String,
    /// Adam's first moment: fp32, fp16, bf16 or fp8 (not fp32: needs
    /// --use-precision-aware-optimizer on).
    #[arg(long, default_value = "fp32")]
    pub exp_avg_dtype: String,
    /// Adam's second moment: fp32, fp16, bf16 or fp8 (not fp32: needs
    /// --use-precision-aware-optimizer on).
    #[arg(long, default_value = "fp32")]
    pub exp_avg_sq_dtype: String,
}

impl StackFlags {
    /// `--moe-expert-capacity-factor` with its padding; the drop policy checked.
    fn moe_capacity(&self) -> Result<Option<MoeCapacity>, FlagError> {
        if !["probs", "position"].contains(&self.moe_token_drop_policy.as_str()) {
            return Err(FlagError(format!(
                "--moe-token-drop-policy: unknown policy '{}' (valid: probs, position)",
                self.moe_token_drop_policy
            )));
        }
        match self.moe_expert_capacity_factor {
            None if self.moe_pad_expert_input_to_capacity => Err(FlagError(
                "--moe-pad-expert-input-to-capacity needs --moe-expert-capacity-factor (the capacity it pads to)"
                    .into(),
            )),
            None => Ok(None),
            // Its range is checked with Megatron-Core's other rules (`check_recipe`).
            Some(factor) => Ok(Some(MoeCapacity {
                factor,
                pad: self.moe_pad_expert_input_to_capacity,
            })),
        }
    }

    /// `--cuda-graph-impl` and `--cuda-graph-modules`.
    fn cuda_graphs(&self) -> Result<CudaGraphs, FlagError> {
        let implementation = CudaGraphImpl::parse(&self.cuda_graph_impl)
            .map_err(|e| FlagError(format!("--cuda-graph-impl: {e}")))?;
        let modules = CudaGraphModules::parse(self.cuda_graph_modules.iter().map(String::as_str))
            .map_err(|e| FlagError(format!("--cuda-graph-modules: {e}")))?;
        Ok(CudaGraphs {
            implementation,
            modules,
        })
    }

    /// The stack `--stack` names on `hw`, with these flags and `overlap_grad_reduce` (the
    /// subcommand's `--overlap-grad-reduce`) applied, and the ZeRO stage and scatter/gather
    /// the subcommand gives.
    pub fn apply(
        &self,
        zero: Zero,
        scatter_gather: bool,
        overlap_grad_reduce: Option<OnOff>,
        hw: &Hardware,
    ) -> Result<Stack, FlagError> {
        let bad = |m: String| Err(FlagError(m));
        let preset = self.preset.stack();
        // A preset's fused kernel needs the profile's measured rates; without them, unfused.
        let stack = Stack {
            attention: if hw.attention_efficiencies().is_some() {
                preset.attention
            } else {
                Attention::Unfused
            },
            ..preset
        };
        let stack = Stack {
            zero,
            scatter_gather,
            ..stack
        };
        let on = |flag: Option<OnOff>, default: bool| flag.map_or(default, OnOff::is_on);
        // FP8 without a recipe: Megatron-Bridge's performance recipes run current scaling
        // (`fp8_cs`: `bf16_with_fp8_current_scaling_mixed`, fp8_recipe "tensorwise"), the other
        // stacks Megatron-LM's default, delayed scaling.
        let fp8_default = if self.preset == StackPreset::MegatronCore {
            Fp8Recipe::Tensorwise
        } else {
            Fp8Recipe::Delayed
        };
        let (precision, fp8_recipe) = precision_and_recipe(
            self.precision.as_deref(),
            self.fp8_recipe.as_deref(),
            fp8_default,
            hw,
        )?;
        let fp8_param_gather = match self.fp8_param_gather {
            Some(OnOff::On) if !matches!(precision, Precision::Fp8 | Precision::Mxfp8) => {
                return bad(format!(
                    "--fp8-param-gather on: the weights are kept in FP8 only with --precision fp8 or mxfp8 (given: {precision}); valid: --fp8-param-gather off, or --precision fp8|mxfp8"
                ))
            }
            Some(flag) => flag.is_on(),
            // In effect only with FP8 or MXFP8 (`Stack::low_precision_params`).
            None => self.preset == StackPreset::MegatronCore && fp8_recipe.gathers_params_in_fp8(),
        };
        Ok(Stack {
            precision,
            fp8_recipe,
            fp8_param_gather,
            attention: match self.attention {
                Some(AttentionArg::Unfused) => Attention::Unfused,
                Some(AttentionArg::Flash) => Attention::Flash,
                None => stack.attention,
            },
            tp_comm_overlap: on(self.tp_comm_overlap, stack.tp_comm_overlap),
            overlap_param_gather: on(self.overlap_param_gather, stack.overlap_param_gather),
            overlap_grad_reduce: on(overlap_grad_reduce, stack.overlap_grad_reduce),
            blocking_p2p: !on(self.overlap_p2p_comm, !stack.blocking_p2p),
            grad_accumulation_fusion: on(
                self.gradient_accumulation_fusion,
                stack.grad_accumulation_fusion,
            ),
            grad_reduce_bytes_per_param: match self.grad_reduce_dtype.as_deref() {
                None => stack.grad_reduce_bytes_per_param,
                Some("bf16") => 2.0,
                Some("fp32") => 4.0,
                Some(other) => {
                    return bad(format!(
                        "--grad-reduce-dtype: unknown format '{other}' (valid: bf16, fp32)"
                    ))
                }
            },
            fsdp2: on(self.fsdp_copies, stack.fsdp2),
            reshard_after_forward: self.reshard_after_forward.is_on(),
            cp_comm: self
                .cp_comm
                .parse()
                .map_err(|e: String| FlagError(format!("--cp-comm: {e}")))?,
            attention_kernel: match self.attention_kernel.parse() {
                Ok(k) => match missing_kernel_rates(k, hw) {
                    Some(e) => return bad(e),
                    None => k,
                },
                Err(e) => return bad(format!("--attention-kernel: {e}")),
            },
            moe_imbalance: if self.moe_imbalance.is_finite()
                && (1.0..=64.0).contains(&self.moe_imbalance)
            {
                self.moe_imbalance
            } else {
                return bad(format!(
                    "--moe-imbalance {}: valid values are 1 (perfectly balanced routing) to 64",
                    self.moe_imbalance
                ));
            },
            moe_comm_overlap: self.moe_comm_overlap.is_on(),
            moe_layer_host_s: match self.moe_layer_host_ms {
                None => stack.moe_layer_host_s,
                Some(ms) if ms.is_finite() && (0.0..=10_000.0).contains(&ms) => ms * 1e-3,
                Some(ms) => {
                    return bad(format!(
                        "--moe-layer-host-ms {ms}: valid values are 0 (no host time) to 10000 milliseconds"
                    ))
                }
            },
            defer_embedding_wgrad: self.defer_embedding_wgrad_compute.is_on(),
            te_op_fuser: self.use_transformer_engine_op_fuser.is_on(),
            activation_func_fp8_input_store: self.activation_func_fp8_input_store.is_on(),
            cross_entropy_fusion: cross_entropy_fusion(
                self.cross_entropy_loss_fusion,
                self.cross_entropy_fusion_impl.as_deref(),
                self.preset,
            )?,
            wgrad_deferral_limit: self.wgrad_deferral_limit,
            optimizer_state: OptimizerState::from_megatron(
                self.use_precision_aware_optimizer.is_on(),
                &self.main_params_dtype,
                &self.exp_avg_dtype,
                &self.exp_avg_sq_dtype,
            )
            .map_err(|e| FlagError(format!("--{e}")))?,
            moe_dispatcher: MoeDispatcher::parse(&self.moe_dispatcher)
                .map_err(|e| FlagError(format!("--moe-dispatcher: {e}")))?,
            moe_capacity: self.moe_capacity()?,
            cuda_graphs: self.cuda_graphs()?,
            cpu_offload_layers: self.cpu_offloading_num_layers,
            ..stack
        })
    }
}

/// The precision and FP8 recipe from `--precision` and `--fp8-recipe` on `hw`: the recipe's
/// precision where `--precision` is not given (else BF16), the precision's own recipe where
/// the recipe is not (`fp8_default` for fp8, mxfp8 for mxfp8); a recipe that contradicts the
/// precision, or that `hw` cannot run, is refused naming the flags and what is valid.
pub fn precision_and_recipe(
    precision: Option<&str>,
    recipe: Option<&str>,
    fp8_default: Fp8Recipe,
    hw: &Hardware,
) -> Result<(Precision, Fp8Recipe), FlagError> {
    let given = precision
        .map(|p| p.parse::<Precision>())
        .transpose()
        .map_err(|e| FlagError(format!("--precision: {e}")))?;
    let Some(text) = recipe else {
        let precision = given.unwrap_or_default();
        let recipe = match precision {
            Precision::Mxfp8 => Fp8Recipe::Mxfp8,
            Precision::Fp8 => fp8_default,
            _ => Fp8Recipe::Delayed,
        };
        return Ok((precision, recipe));
    };
    let recipe: Fp8Recipe = text
        .parse()
        .map_err(|e: String| FlagError(format!("--fp8-recipe: {e}")))?;
    if let Some(p) = given.filter(|&p| p != recipe.precision()) {
        let fits: Vec<Fp8Recipe> = Fp8Recipe::ALL
            .into_iter()
            .filter(|r| r.precision() == p)
            .collect();
        return Err(FlagError(format!(
            "--fp8-recipe {recipe} contradicts --precision {p}: the recipe runs the linear layers in {}; valid: drop --precision (--fp8-recipe sets it), --precision {} with --fp8-recipe {recipe}, or {}",
            recipe.precision(),
            recipe.precision(),
            if fits.is_empty() {
                format!("drop --fp8-recipe (--precision {p} has no FP8 recipe)")
            } else {
                format!("--fp8-recipe {} with --precision {p}", names(&fits).replace(", ", " or "))
            }
        )));
    }
    if !recipe.runs_on(hw) {
        let valid = Fp8Recipe::valid_on(hw);
        return Err(FlagError(if valid.is_empty() {
            format!(
                "--fp8-recipe {recipe}: {} has no FP8 tensor cores; valid: no --fp8-recipe (--precision {})",
                hw.name,
                join_precisions(&hw.precisions())
            )
        } else {
            format!(
                "--fp8-recipe {recipe}: {} has no {} tensor cores; valid --fp8-recipe on {}: {}",
                hw.name,
                if recipe == Fp8Recipe::Mxfp8 {
                    "block-scaled (MXFP8)"
                } else {
                    "FP8"
                },
                hw.name,
                names(&valid)
            )
        }));
    }
    Ok((recipe.precision(), recipe))
}

/// `--attention-kernel K`'s refusal on a profile without K's rates
/// ([`AttentionKernel::efficiency_at`]), or `None` where the profile has them (cuDNN's law is
/// the one `--attention flash` itself asks for).
fn missing_kernel_rates(k: AttentionKernel, hw: &Hardware) -> Option<String> {
    let what = match k {
        AttentionKernel::Cudnn => return None,
        AttentionKernel::Fa2 => "FlashAttention-2 rates",
        AttentionKernel::Triton => "rates for FlashAttention's Triton kernel",
    };
    k.efficiency_at(hw, 1.0, 1.0).is_none().then(|| {
        format!(
            "--attention-kernel {k}: hardware '{}' has no {what} (gpu.attention_{k}_efficiency_forward, _backward); valid: --attention-kernel cudnn, or a profile that has them (a100-80gb, h100-80gb, h100-96gb-500w, h200, h800)",
            hw.name
        )
    })
}

fn join_precisions(ps: &[Precision]) -> String {
    let v: Vec<&str> = ps.iter().map(|p| p.as_str()).collect();
    v.join(", ")
}

/// The cross-entropy's kernels from `--cross-entropy-loss-fusion` and
/// `--cross-entropy-fusion-impl` (which needs the fusion on, as in Megatron-Core where it is
/// otherwise ignored).
fn cross_entropy_fusion(
    fusion: OnOff,
    implementation: Option<&str>,
    preset: StackPreset,
) -> Result<CrossEntropyFusion, FlagError> {
    if let (OnOff::Off, Some(i)) = (fusion, implementation) {
        return Err(FlagError(format!(
            "--cross-entropy-fusion-impl {i}: needs --cross-entropy-loss-fusion on"
        )));
    }
    // PyTorch stacks' fused losses, not Megatron-Core's.
    let parsed = implementation.and_then(|i| i.parse::<CrossEntropyFusion>().ok());
    if let Some(c) = parsed.filter(|c| c.pytorch_only()) {
        return if preset == StackPreset::Torchtitan {
            Ok(c)
        } else {
            Err(FlagError(format!(
                "--cross-entropy-fusion-impl {} is a PyTorch stack's loss; valid: --stack torchtitan, or native|te",
                c.as_str()
            )))
        };
    }
    CrossEntropyFusion::from_megatron(fusion.is_on(), implementation)
        .map_err(|e| FlagError(format!("--cross-entropy-fusion-impl: {e}")))
}

/// The ZeRO stage from `--zero N` and its older spelling `--zero1 on|off` (None when neither
/// is given); the two must agree.
pub fn zero_stage(zero: Option<&str>, zero1: Option<OnOff>) -> Result<Option<Zero>, FlagError> {
    let stage = zero
        .map(|z| z.parse::<Zero>())
        .transpose()
        .map_err(|e| FlagError(format!("--zero: {e}")))?;
    let spelled = zero1.map(|z| {
        if z.is_on() {
            Zero::Optimizer
        } else {
            Zero::Off
        }
    });
    match (stage, spelled) {
        (Some(z), Some(s)) if z != s => Err(FlagError(format!(
            "--zero {z} and --zero1 {} disagree (--zero1 on is --zero 1, off is --zero 0); give one of them",
            if s == Zero::Optimizer { "on" } else { "off" }
        ))),
        (Some(z), _) | (None, Some(z)) => Ok(Some(z)),
        (None, None) => Ok(None),
    }
}

/// Megatron-Core's rules for the dispatcher, capacity and CUDA-graph switches on `model`
/// (`cost::recipe::check`); `recompute` the pinned or given recomputation.
pub fn check_recipe(
    stack: &Stack,
    model: &crate::inputs::model::Model,
    recompute: Option<crate::cost::Recompute>,
) -> Result<(), FlagError> {
    let moe = model.moe.as_ref();
    let ctx = crate::cost::recipe::RecipeContext {
        experts: moe.map_or(0, |m| m.num_experts),
        all_moe: moe.is_some_and(|m| m.layers.iter().all(|&b| b)),
        dispatcher: stack.moe_dispatcher,
        capacity: stack.moe_capacity,
        full_recompute: recompute == Some(crate::cost::Recompute::Full),
        ep_overlap: stack.moe_comm_overlap,
    };
    crate::cost::recipe::check(stack.cuda_graphs, &ctx).map_err(FlagError)
}
