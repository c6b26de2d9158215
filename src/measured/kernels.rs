//! A GPU kernel's name → the library family it comes from → what it does (GEMM, attention, norm,
//! elementwise, embedding, communication, other). The rules are [`FAMILIES`], tried in order; the
//! table in docs/validate.md ("Kernel classes") is the same list.
//!
//! Why families and not one keyword each: a name is a library's naming scheme, not a sentence.
//! `fbgemm_gpu::permute_2D_data_kernel` contains `gemm` but is FBGEMM's sparse-feature permute;
//! FlashAttention-3 (`cutlass::device_kernel<flash::FlashAttnFwdSm90<…>>`) contains `cutlass`
//! but is attention; vLLM's `rotary_embedding_kernel` contains `embedding` but is elementwise.
//! Each rule below names the library it reads and the convention it relies on.

use super::timeline::{Collective, Dim, KernelClass};

/// One family: the library it comes from (as docs/validate.md names it), the class of its
/// kernels, and the test on the lower-cased name.
pub struct Family {
    pub library: &'static str,
    pub class: KernelClass,
    /// The rule in words, as docs/validate.md states it.
    pub rule: &'static str,
    matches: fn(&str) -> bool,
}

fn any(n: &str, fragments: &[&str]) -> bool {
    fragments.iter().any(|f| n.contains(f))
}

/// PyTorch Inductor names its generated Triton kernels by kind (`torch/_inductor/codegen/
/// triton.py`, `prefix` of `TritonKernel`: `poi` pointwise, `red` reduction, `per` persistent
/// reduction, `for` foreach, `tem` a template: matmul, convolution or flex attention) followed by
/// the ATen ops fused (`triton_poi_fused_add_cos_sin_0`).
fn triton(n: &str, kinds: &[&str]) -> bool {
    n.match_indices("triton_").any(|(at, _)| {
        let rest = &n[at + "triton_".len()..];
        kinds
            .iter()
            .any(|k| rest.starts_with(k) && rest[k.len()..].starts_with('_'))
    })
}

/// Inductor's RMSNorm and LayerNorm as fused reductions: the ATen ops in the name
/// (`native_layer_norm`, or RMSNorm decomposed as `mean` of `pow` then `rsqrt`).
fn triton_norm(n: &str) -> bool {
    triton(n, &["red", "per"])
        && (any(n, &["layer_norm", "rms_norm", "group_norm", "batch_norm"])
            || (n.contains("rsqrt") && n.contains("mean")))
}

const COMM_NCCL: &[&str] = &["nccl"];
/// Transformer Engine's userbuffers kernels do tensor-parallel communication overlapped with
/// GEMMs without NCCL (`transformer_engine/common/comm_gemm_overlap/userbuffers/userbuffers.cu`:
/// `userbuffers_fp16_sum_inplace_gpu_rr_rs`, `userbuffers_fp16_sum_inplace_gpu_rw_ag`, ...).
const COMM_USERBUFFERS: &[&str] = &["userbuffers"];

const ATTENTION: &[&str] = &[
    // FlashAttention 2 (`flash_fwd_kernel`, `flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel`,
    // `flash_bwd_dot_do_o_kernel`: csrc/flash_attn/src/flash_*_launch_template.h) and 3
    // (`flash::FlashAttnFwdSm90`), PyTorch's copy (`pytorch_flash::`), FlashInfer, FlashMLA.
    "flash_fwd",
    "flash_bwd",
    "flash::",
    "flashattn",
    "flash_attn",
    "flashmla",
    // PyTorch's memory-efficient attention (xformers' CUTLASS kernels: `fmha_cutlassF_...`).
    "fmha",
    // cuDNN's fused attention, which Transformer Engine's `fused_attn` and PyTorch's cuDNN
    // backend run (`cudnn_generated_fort_native_sdpa_sm90_flash_fprop_...`).
    "sdpa",
    // Megatron-LM / Transformer Engine fused softmax of unfused core attention
    // (`scaled_upper_triang_masked_softmax_warp_forward`, `scaled_masked_softmax_warp_backward`).
    "masked_softmax",
    "attention",
    "attn",
    "_mha_",
    "mha_fwd",
    "mha_bwd",
];

const NORM: &[&str] = &[
    // PyTorch (`LayerNormForwardCUDAKernel`, `vectorized_layer_norm_kernel`,
    // `layer_norm_grad_input_kernel`, `batch_norm_collect_statistics_kernel`, group norm).
    "layer_norm",
    "layernorm",
    "batch_norm",
    "batchnorm",
    "group_norm",
    "groupnorm",
    "instance_norm",
    "rms_norm",
    "rmsnorm",
    // cuDNN batch norm (`cudnn::bn_fw_tr_1C11_kernel_NCHW`, `cudnn::bn_bw_1C11_kernel_new`).
    "bn_fw",
    "bn_bw",
    // PyTorch's group-norm statistics and layer-norm weight gradients
    // (`RowwiseMomentsCUDAKernel`, `GammaBetaBackwardCUDAKernel`).
    "rowwisemoments",
    "gammabetabackward",
    // Apex / Megatron-LM fused norms (`cuApplyLayerNorm`, `cuApplyRMSNorm`,
    // `cuComputePartGradGammaBeta`, `cuComputeGradGammaBeta`, `cuComputeGradInput`;
    // apex/csrc/layer_norm_cuda_kernel.cu).
    "cucomputepartgradgammabeta",
    "cucomputegradgammabeta",
    "cucomputegradinput",
    // Transformer Engine (`transformer_engine::normalization::rmsnorm_fwd_tuned_kernel`,
    // `ln_bwd_tuned_kernel`; transformer_engine/common/normalization/).
    "normalization::",
];

const EMBEDDING: &[&str] = &[
    // FBGEMM's table-batched embeddings (`split_embedding_codegen_forward_unweighted_kernel`,
    // `split_embedding_backward_codegen_rowwise_adagrad_*`: the lookup and its fused optimizer).
    "split_embedding",
    // FBGEMM's sparse-feature kernels around the tables, run by TorchRec: index checks and
    // linearisation, KeyedJaggedTensor and pooled-embedding permutes, bucketisation.
    "bounds_check_indices",
    "linearize_index",
    "permute_pooled_embs",
    "permute_2d_",
    "permute_1d_",
    "permute_indices_weights",
    "permute_lengths",
    "block_bucketize",
    "offsets_range",
    "recat_",
    // PyTorch's embedding bag and embedding backward (EmbeddingBag.cu, EmbeddingBackwardKernel.cu).
    "embedding_bag",
    "embeddingbag",
    "embedding_backward",
    "embedding_dense",
];

const GEMM: &[&str] = &[
    // cuBLAS / cuBLASLt: `ampere_sgemm_128x64_nn`, `sm90_xmma_gemm_bf16bf16_bf16f32_...`,
    // Hopper/Blackwell `nvjet_*`, gemv (`gemvNSP_kernel`, `gemv2T_kernel_val`), split-K
    // reduction (`cublasLt::splitKreduce_kernel`), `gemmk1_kernel`, `magma_sgemmEx_kernel`.
    "gemm",
    "gemv",
    "nvjet",
    "xmma",
    "splitkreduce",
    // cuBLASLt's epilogue kernel (`epilogue::impl::globalKernel<..., cublasLtEpilogue_t, ...>`).
    "cublaslt",
    // AMD's Tensile / hipBLASLt GEMMs (`Cijk_Alik_Bljk_SB_...`).
    "cijk_",
    // CUTLASS (`cutlass::Kernel<cutlass_80_tensorop_s1688gemm_...>`, `cutlass3x_sm90_...`).
    "cutlass",
    "s1688",
    "h1688",
    "s16816",
    "h16816",
    "s884",
    "h884",
    "wgmma",
    "hmma",
    // cuDNN convolutions (implicit GEMMs: `cudnn_train_volta_scudnn_128x128_...`,
    // `sm80_xmma_fprop_implicit_gemm_...`).
    "scudnn",
    "hcudnn",
    "implicit_convolve",
    "winograd",
    "fft2d_",
    "wgrad_alg",
    "dgrad_engine",
    // Triton's tutorial and library matmuls (`matmul_kernel`, `_matmul_persistent`).
    "matmul",
];

const ELEMENTWISE: &[&str] = &[
    // PyTorch's TensorIterator kernels (`vectorized_elementwise_kernel`,
    // `unrolled_elementwise_kernel`, `elementwise_kernel`), concatenation, optimizers'
    // `multi_tensor_apply_kernel`, dropout.
    "elementwise",
    "catarraybatchedcopy",
    "multi_tensor_apply",
    "dropout",
    "copy_kernel",
    // Activations (vLLM's `act_and_mul_kernel`, fused bias-GeLU/SwiGLU), rotary embeddings
    // (vLLM's `rotary_embedding_kernel`, Transformer Engine's `fused_rope_forward_kernel`).
    "act_and_mul",
    "gelu",
    "silu",
    "swiglu",
    "rotary",
    "rope_",
    // Casts and transposes (Transformer Engine's `cast_transpose`), layout changes
    // (`cudnn::ops::nchwToNhwcKernel`), FBGEMM's FP8/half quantization for communication.
    "cast_transpose",
    "transpose",
    "nchwtonhwc",
    "nhwctonchw",
    "quantize",
    "fp8rowwise",
    "qparam",
    "hfp8",
];

/// The families, in the order they are tried: the first that matches decides.
pub static FAMILIES: &[Family] = &[
    Family {
        library: "NCCL",
        class: KernelClass::Comm(Collective::Other, Dim::Unattributed),
        rule: "`nccl` (`ncclDevKernel_AllGather_RING_LL`, `ncclKernel_SendRecv_...`)",
        matches: |n| any(n, COMM_NCCL),
    },
    Family {
        library: "Transformer Engine userbuffers",
        class: KernelClass::Comm(Collective::Other, Dim::Unattributed),
        rule: "`userbuffers` (`userbuffers_fp16_sum_inplace_gpu_rr_rs`: tensor-parallel overlap)",
        matches: |n| any(n, COMM_USERBUFFERS),
    },
    Family {
        library: "Triton (PyTorch Inductor)",
        class: KernelClass::Elementwise,
        rule: "`triton_poi_`, `triton_for_` (pointwise, foreach)",
        matches: |n| triton(n, &["poi", "for"]),
    },
    Family {
        library: "Triton (PyTorch Inductor)",
        class: KernelClass::Attention,
        rule: "`triton_tem_` naming attention (flex attention)",
        matches: |n| triton(n, &["tem"]) && n.contains("attention"),
    },
    Family {
        library: "Triton (PyTorch Inductor)",
        class: KernelClass::Gemm,
        rule: "`triton_tem_` (matmul and convolution templates)",
        matches: |n| triton(n, &["tem"]),
    },
    Family {
        library: "Triton (PyTorch Inductor)",
        class: KernelClass::Norm,
        rule: "`triton_red_`, `triton_per_` fusing `layer_norm`, `rms_norm`, or `mean` with `rsqrt`",
        matches: triton_norm,
    },
    Family {
        library: "Triton (PyTorch Inductor)",
        class: KernelClass::OtherCompute,
        rule: "other `triton_red_`, `triton_per_` (reductions: softmax, loss, ...)",
        matches: |n| triton(n, &["red", "per"]),
    },
    Family {
        library: "PyTorch, Apex, cuDNN, Transformer Engine, vLLM norms",
        class: KernelClass::Norm,
        rule: "`layer_norm`, `layernorm`, `rms_norm`, `rmsnorm`, `batch_norm`, `group_norm`, `RowwiseMoments`, `GammaBetaBackward`, cuDNN `bn_fw`/`bn_bw`, Apex `cuComputeGradGammaBeta`..., TE `normalization::`",
        matches: |n| any(n, NORM),
    },
    Family {
        library: "FlashAttention, cuDNN SDPA, PyTorch SDPA, Transformer Engine, Megatron-LM",
        class: KernelClass::Attention,
        rule: "`flash_fwd`, `flash_bwd`, `flash::`, `fmha`, `sdpa`, `masked_softmax`, `attention`, `attn`, `mha_fwd`/`mha_bwd`",
        matches: |n| any(n, ATTENTION),
    },
    Family {
        library: "FBGEMM (TorchRec), PyTorch embeddings",
        class: KernelClass::Embedding,
        rule: "`split_embedding`, `bounds_check_indices`, `linearize_index`, `permute_pooled_embs`, `permute_2D_`/`permute_1D_`, `permute_indices_weights`, `permute_lengths`, `block_bucketize`, `offsets_range`, `recat_`, `embedding_bag`, `embedding_backward`, `embedding_dense`",
        matches: |n| any(n, EMBEDDING),
    },
    Family {
        library: "cuBLAS, cuBLASLt, CUTLASS, cuDNN convolutions, Triton matmuls",
        class: KernelClass::Gemm,
        rule: "`gemm` (not the `gemm` of `fbgemm`), `gemv`, `nvjet`, `xmma`, `splitKreduce`, `cublasLt`, `Cijk_` (Tensile), `cutlass`, `s1688`/`s16816`/`s884`, `wgmma`, `hmma`, cuDNN convolutions (`scudnn`, `winograd`, `fft2d_`, `wgrad_alg`, `dgrad_engine`), `matmul`",
        matches: |n| {
            if n.contains("fbgemm") {
                any(&n.replace("fbgemm", ""), GEMM)
            } else {
                any(n, GEMM)
            }
        },
    },
    Family {
        library: "PyTorch, vLLM, Transformer Engine, cuDNN, FBGEMM elementwise",
        class: KernelClass::Elementwise,
        rule: "`elementwise`, `CatArrayBatchedCopy`, `multi_tensor_apply`, `dropout`, activations (`gelu`, `silu`, `act_and_mul`), `rotary`, `transpose`, `nchwToNhwc`, quantization (`quantize`, `FP8rowwise`, `hfp8`)",
        matches: |n| any(n, ELEMENTWISE),
    },
];

/// Classify a GPU kernel by its (demangled) name: the first family of [`FAMILIES`] whose rule
/// matches, [`KernelClass::OtherCompute`] when none does. Communication kernels get their
/// collective from the name and [`Dim::Unattributed`]; [`super::classify::attribute`] decides
/// the dimension with what else is known.
pub fn kernel_class(name: &str) -> KernelClass {
    let n = name.to_ascii_lowercase();
    match family(&n).map(|f| f.class) {
        Some(KernelClass::Comm(..)) => KernelClass::Comm(comm_collective(&n), Dim::Unattributed),
        Some(c) => c,
        None => KernelClass::OtherCompute,
    }
}

/// The family of a lower-cased kernel name, `None` when no rule matches.
pub fn family(lower: &str) -> Option<&'static Family> {
    FAMILIES.iter().find(|f| (f.matches)(lower))
}

/// The collective of a communication kernel's lower-cased name: NCCL's kernels name theirs
/// (`ncclDevKernel_AllGather_...`); userbuffers' end in `_rs` / `_ag` (reduce-scatter,
/// all-gather) before their template arguments.
fn comm_collective(n: &str) -> Collective {
    let named = super::classify::collective(n);
    if named != Collective::Other || !n.contains("userbuffers") {
        return named;
    }
    let stem = n.split(['<', '(']).next().unwrap_or(n);
    if stem.contains("_rs") {
        Collective::ReduceScatter
    } else if stem.contains("_ag") {
        Collective::AllGather
    } else if stem.contains("send") || stem.contains("recv") {
        Collective::SendRecv
    } else {
        Collective::Other
    }
}
