//! Kernel classes by library family (docs/validate.md, "Kernel classes"), one test per family,
//! each on real kernel names with where they were seen:
//!
//! - **HTA**: Holistic Trace Analysis' test traces (github.com/facebookresearch/
//!   HolisticTraceAnalysis at f4d0062c382f42bd8a74838bcdad1916c7d5d2da, `tests/data/`), three of
//!   which are in `tests/data/measured/kineto/` (SOURCES.md); the path is given per name.
//! - **vLLM docs**: `nsys stats` output quoted in vllm-project/vllm `docs/contributing/profiling.md`
//!   (names as nsys prints them, cut with `…` at 100 characters).
//! - **source**: the kernel's definition in the library's source, path given.
//! - **issue**: a GitHub issue quoting a profile, URL given.
//!
//! And the acceptance check of issue #42 on a real two-rank recommendation-model trace (HTA's
//! `trace_filter/sampled_rank-{0,1}`, a 128-rank TorchRec job): GEMM time is the cuBLAS and
//! CUTLASS kernels only, FBGEMM's embedding and permute kernels are `embedding`.

use pplan::measured::kernels::{family, kernel_class, FAMILIES};
use pplan::measured::timeline::{Collective, Dim, KernelClass};
use serde_json::Value;
mod common;
use common::pplan;

fn check(names: &[&str], want: KernelClass) {
    for n in names {
        assert_eq!(kernel_class(n), want, "{n}");
    }
}

#[test]
fn cublas_and_cublaslt() {
    check(
        &[
            // HTA trace_filter/sampled_rank-0 (in tests/data/measured/kineto/).
            "ampere_sgemm_128x64_nn",
            "void sgemm_largek_lds64<true, true, 6, 3, 4, 5, 2, 66>(float*, float const*, float const*, int, int, int, int, int, int, float const*, float const*, float, float, int, int, int*, int*)",
            // HTA trace_filter/sampled_rank-1.
            "void gemvNSP_kernel<float, float, float, float, 1, 16, 4, 1024, cublasGemvParams<cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float> >(cublasGemvParams<cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>)",
            // HTA nccl_parser_config/nccl_data (in tests/data/measured/kineto/).
            "void cublasLt::splitKreduce_kernel<32, 16, int, float, float, float, float, true, false, false>(cublasLt::cublasSplitKParams<float>, float const*, float const*, float*, float const*, float const*, float const*, float const*, float*, void*, long, float*, int*)",
            // HTA trace_diff/test/test.json.gz.
            "void epilogue::impl::globalKernel<float, float, float, true, true>(int, int, long, float*, cublasLtEpilogue_t, int, float*, long, void*, long, long, long, float*, long, int*)",
            // vLLM docs (Hopper, cuBLAS 12).
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_of…",
            // issue https://github.com/NVIDIA/TensorRT-LLM/issues/1541.
            "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
            // issue https://github.com/NVIDIA/Megatron-LM/issues/997.
            "ampere_bf16_s16816gemm_bf16_128x256_ldg8_f2f_stages_64x3_tn",
            // pull request https://github.com/GindaChen/nsys-ai/pull/582 (Hopper's nvjet GEMMs).
            "nvjet_sm90_hss_320x128",
        ],
        KernelClass::Gemm,
    );
}

#[test]
fn cutlass() {
    check(
        &[
            // HTA trace_filter/sampled_rank-0.
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x64_32x6_nt_align1>(cutlass_80_tensorop_s1688gemm_128x64_32x6_nt_align1::Params)",
            // issue https://github.com/NVIDIA/Megatron-LM/issues/997.
            "cutlass::Kernel<cutlass_75_tensorop_bf16_s1688gemm_bf16_256x128_tn_align1",
            // issue https://github.com/NVIDIA/cutlass/issues/177 (nsys stats, cut at 100).
            "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align1>(cutlass_80_tensorop_s168…",
        ],
        KernelClass::Gemm,
    );
}

#[test]
fn cudnn() {
    // Convolutions are implicit GEMMs: counted with the GEMMs.
    check(
        &[
            // HTA nccl_parser_config/nccl_data.
            "sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x128x16_stage4_warpsize2x2x1_g1_tensor16x8x8_execute_kernel_cudnn_infer",
            "cudnn_infer_ampere_scudnn_128x64_relu_xregs_large_nn_v1",
            "void cutlass_cudnn_infer::Kernel<cutlass_tensorop_s1688dgrad_optimized_tf32_64x128_32x3_nhwc_align4>(cutlass_tensorop_s1688dgrad_optimized_tf32_64x128_32x3_nhwc_align4::Params)",
            // HTA ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz.
            "cudnn_train_volta_scudnn_128x128_stridedB_splitK_interior_nn_v1",
        ],
        KernelClass::Gemm,
    );
    // Batch norm (HTA nccl_parser_config/nccl_data).
    check(
        &[
            "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, int, 128, true, 1, true>(cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*, float const*, float, float, float*, float*, float*, float*, float, float)",
            "void cudnn::bn_bw_1C11_kernel_new<float, float, float2, 128, true, 1>(float, float, float, float, cudnnTensorStruct, float const*, cudnnTensorStruct, float const*, cudnnTensorStruct, float*, float const*, float*, float*, float const*, float const*, float)",
        ],
        KernelClass::Norm,
    );
    // Layout changes (HTA nccl_parser_config/nccl_data).
    check(
        &["void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>(cudnn::ops::nchw2nhwc_params_t<float>, float const*, float*)"],
        KernelClass::Elementwise,
    );
    // Fused attention (the cuDNN SDPA kernels Transformer Engine and PyTorch run; name as in
    // this repository's earlier test, the `cudnn_generated_fort_native_sdpa_*` family).
    check(
        &["cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_3_64x64x128_4x1x1_kernel0_0"],
        KernelClass::Attention,
    );
}

#[test]
fn flash_attention() {
    check(
        &[
            // vLLM docs: FlashAttention 3 (Hopper), built on CUTLASS — attention, not GEMM.
            "void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<flash::CollectiveMa…",
            // source: Dao-AILab/flash-attention csrc/flash_attn/src/flash_bwd_launch_template.h
            // (`flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel`, `flash_bwd_dot_do_o_kernel`,
            // `flash_bwd_convert_dq_kernel`, templated on `Flash_bwd_kernel_traits`).
            "void flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t>, true, true, false, false, true, true, false>(Flash_bwd_params)",
            "void flash_bwd_dot_do_o_kernel<true, Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t> >(Flash_bwd_params)",
            "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, Flash_kernel_traits<128, 128, 64, 4, cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>(Flash_fwd_params)",
        ],
        KernelClass::Attention,
    );
}

#[test]
fn transformer_engine() {
    // source: NVIDIA/TransformerEngine transformer_engine/common/normalization/rmsnorm/
    // rmsnorm_fwd_kernels.cuh and layernorm/ln_fwd_kernels.cuh (namespace
    // transformer_engine::normalization).
    check(
        &[
            "void transformer_engine::normalization::rmsnorm_fwd_tuned_kernel<transformer_engine::normalization::Kernel_traits<float, __nv_bfloat16, __nv_bfloat16, float, unsigned int, 4096u, 1u, 1u, 4u, 16u, 4u> >(transformer_engine::normalization::ForwardKernelParams)",
            "void transformer_engine::normalization::ln_bwd_tuned_kernel<transformer_engine::normalization::Kernel_traits<float, __nv_bfloat16, __nv_bfloat16, float, unsigned int, 8192u, 1u, 1u, 4u, 16u, 4u> >(transformer_engine::normalization::BackwardKernelParams)",
        ],
        KernelClass::Norm,
    );
    // source: transformer_engine/common/comm_gemm_overlap/userbuffers/userbuffers.cu; the
    // demangled names as a public trace analysis quotes them.
    assert_eq!(
        kernel_class("void userbuffers_fp16_sum_inplace_gpu_rr_rs<2>(int, int, int, int, int, int, int, void**, int, unsigned long)"),
        KernelClass::Comm(Collective::ReduceScatter, Dim::Unattributed)
    );
    assert_eq!(
        kernel_class("void userbuffers_fp16_sum_inplace_gpu_rw_ag<2>(int, int, int, int, int, int, int, void**, int, unsigned long)"),
        KernelClass::Comm(Collective::AllGather, Dim::Unattributed)
    );
    // source: transformer_engine/common/fused_rope/fused_rope.cu (`fused_rope_forward_kernel`).
    check(
        &["void transformer_engine::fused_rope_forward_kernel<__nv_bfloat16>(__nv_bfloat16 const*, float const*, __nv_bfloat16*, int, int, int, int, int, int, int, int, int, int)"],
        KernelClass::Elementwise,
    );
}

#[test]
fn triton() {
    // HTA triton_example/triton_example.json.gz (Inductor's pointwise kernel).
    check(
        &["triton_poi_fused_add_cos_sin_0"],
        KernelClass::Elementwise,
    );
    // Inductor's templates (torch/_inductor/select_algorithm.py names them `triton_tem_fused_*`):
    // a GEMM unless it is flex attention. Names from the profiles quoted in public issues.
    check(
        &[
            "triton_tem_fused_addmm_t_view_3",
            "triton_tem_fused__to_copy_addmm_gelu_t_view_9",
        ],
        KernelClass::Gemm,
    );
    check(
        &["triton_tem_fused_flex_attention_backward_split_transpose_1"],
        KernelClass::Attention,
    );
    // Inductor's RMSNorm as a persistent reduction (mean of the square, then rsqrt).
    check(
        &[
            "triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0",
            "triton_red_fused_native_layer_norm_0",
        ],
        KernelClass::Norm,
    );
    // Older Inductor names say nothing of what they do (HTA
    // negative_queue_length_values_check/rank0.json.gz): other, shown as such.
    check(&["triton__0d1d2d3d"], KernelClass::OtherCompute);
}

#[test]
fn nccl() {
    // HTA trace_filter/sampled_rank-0 and nccl_parser_config/nccl_data.
    assert_eq!(
        kernel_class(
            "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
        ),
        KernelClass::Comm(Collective::SendRecv, Dim::Unattributed)
    );
    assert_eq!(
        kernel_class(
            "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"
        ),
        KernelClass::Comm(Collective::AllReduce, Dim::Unattributed)
    );
    assert_eq!(
        kernel_class("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
        KernelClass::Comm(Collective::AllGather, Dim::Unattributed)
    );
}

#[test]
fn fbgemm_embeddings_are_not_gemm() {
    // HTA trace_filter/sampled_rank-{0,1} (TorchRec on FBGEMM): table-batched embeddings and
    // the sparse-feature permutes around them. Every one of these contains `gemm` (in
    // `fbgemm_gpu::`) or runs beside GEMMs; none is a matrix multiply.
    check(
        &[
            "void split_embedding_codegen_forward_unweighted_kernel<c10::Half, c10::Half, float, false, long, 2ul, 32ul>(at::GenericPackedTensorAccessor<c10::Half, 1ul, at::RestrictPtrTraits, long>)",
            "void split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1<c10::Half, float, c10::Half, 2ul, 32>(at::GenericPackedTensorAccessor<float, 2ul, at::RestrictPtrTraits, long>)",
            "void fbgemm_gpu::permute_2D_data_kernel<false, int, int, decltype(nullptr)>(int, int, int, int const*, decltype(nullptr) const*, int const*, int const*, int const*, int*, decltype(nullptr)*)",
            "void fbgemm_gpu::permute_indices_weights_kernel<false, int, decltype(nullptr)>(int, int, int const*, decltype(nullptr) const*, int const*, int const*, int const*, int*, decltype(nullptr)*)",
            "void permute_pooled_embs_kernel<float>(float const*, long const*, long const*, long const*, float*, long, long, long)",
            "void bounds_check_indices_kernel<long, false>(at::GenericPackedTensorAccessor<long, 1ul, at::RestrictPtrTraits, int>)",
            "void linearize_index_kernel<long>(at::GenericPackedTensorAccessor<long, 1ul, at::RestrictPtrTraits, int>)",
        ],
        KernelClass::Embedding,
    );
    // FBGEMM's FP8 quantization of the pooled embeddings for communication: elementwise.
    check(
        &[
            "void fbgemm_gpu::(anonymous namespace)::_compute_FP8_quantize_cuda_kernel<float>(float const*, float const*, int, int, unsigned char*, bool)",
            "void fbgemm_gpu::(anonymous namespace)::_FP8rowwise_to_float_cuda_kernel<float>(unsigned char const*, int, int, float*, bool)",
        ],
        KernelClass::Elementwise,
    );
}

#[test]
fn pytorch_and_vllm_elementwise_and_norms() {
    check(
        &[
            // HTA trace_filter/sampled_rank-1 and trace_diff/test/test.json.gz.
            "void at::native::(anonymous namespace)::LayerNormForwardCUDAKernel<float, float>(long, float const*, float const*, float const*, float const*, float const*, float*)",
            "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, float const*, float const*, float const*, float*, float*, float*)",
            // vLLM docs.
            "std::enable_if<T2>(int)0&&vllm::_typeConvert<T1>::exists, void>::type vllm::fused_add_rms_norm_kern…",
        ],
        KernelClass::Norm,
    );
    check(
        &[
            // HTA nccl_parser_config/nccl_data.
            "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)",
            // HTA trace_filter/sampled_rank-0.
            "void at::native::(anonymous namespace)::CatArrayBatchedCopy<float, unsigned int, 1, 128, 1>(float*, at::native::(anonymous namespace)::CatArrInputTensorMetadata<float, unsigned int, 128, 1>)",
            // vLLM docs: the activation and the rotary embedding (not an embedding table).
            "void vllm::act_and_mul_kernel<c10::BFloat16, &vllm::silu_kernel<c10::BFloat16>, (bool)1>(T1 *, cons…",
            "void vllm::rotary_embedding_kernel<c10::BFloat16, (bool)1>(const long *, T1 *, T1 *, const T1 *, in…",
        ],
        KernelClass::Elementwise,
    );
    // Reductions, sorts and softmax are none of the classes (HTA traces): `other`.
    check(
        &[
            "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10, true, false>(float*, float const*, int, int, int, bool const*, int, bool)",
            "void cub::DeviceRadixSortOnesweepKernel<cub::DeviceRadixSortPolicy<long, int, int>::Policy800, false, long, int, int, int>(int*, int*, int*, int const*, long*, long const*, int*, int const*, int, int, cub::detail::identity_decomposer_t)",
            "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::NormTwoOps<float, float, float>, unsigned int, float, 4> >(at::native::ReduceOp<float, at::native::NormTwoOps<float, float, float>, unsigned int, float, 4>)",
        ],
        KernelClass::OtherCompute,
    );
}

/// Every family's rule is reachable: some name above is classified by it.
#[test]
fn every_family_is_used() {
    let names = [
        "ncclDevKernel_AllGather_RING_LL",
        "void userbuffers_fp16_sum_inplace_gpu_rr_rs<2>(int)",
        "triton_poi_fused_add_cos_sin_0",
        "triton_tem_fused_flex_attention_backward_split_transpose_1",
        "triton_tem_fused_addmm_t_view_3",
        "triton_per_fused__to_copy_add_mean_mul_pow_rsqrt_0",
        "triton_red_fused__log_softmax_0",
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>",
        "void flash_fwd_kernel<Flash_fwd_kernel_traits<128>>",
        "void permute_pooled_embs_kernel<float>",
        "ampere_sgemm_128x64_nn",
        "void at::native::vectorized_elementwise_kernel<4>",
    ];
    let used: std::collections::BTreeSet<usize> = names
        .iter()
        .filter_map(|n| {
            let f = family(&n.to_ascii_lowercase())?;
            FAMILIES.iter().position(|g| std::ptr::eq(g, f))
        })
        .collect();
    assert_eq!(used.len(), FAMILIES.len(), "{used:?}");
}

/// Issue #42: on a real two-rank recommendation-model trace, GEMM time is the cuBLAS and
/// CUTLASS kernels only. The expected figures were computed with a short Python script over
/// the same files, independently of pplan's rules: kernels launched (runtime correlation) in
/// ProfilerStep#552; GEMM = names starting `ampere_sgemm`/`cutlass::Kernel<cutlass_80` or
/// containing `sgemm_largek`, `gemv`, `gemmk1`, `splitKreduce` or `cublasLt`; embedding =
/// names containing `split_embedding`, `permute_`, `bounds_check_indices`, `linearize_index`.
/// Before the families, rank 0's "GEMM" was 0.077363 s and rank 1's 0.109780 s (58 % and 68 %
/// FBGEMM kernels).
#[test]
fn a_recommendation_model_trace_counts_only_matrix_multiplies_as_gemm() {
    let data = |n: &str| {
        format!(
            "{}/tests/data/measured/kineto/{n}",
            env!("CARGO_MANIFEST_DIR")
        )
    };
    let (code, out, err) = pplan(&[
        "validate",
        "--measured",
        &data("hta-sampled-rank-0.json.gz"),
        &data("hta-sampled-rank-1.json.gz"),
        "--format",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let rank = |i: usize, f: &str| v["breakdown"]["per_rank"][i][1][f].as_f64().unwrap();
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    assert!(close(rank(0, "gemm_s"), 0.032605), "{}", rank(0, "gemm_s"));
    assert!(close(rank(1, "gemm_s"), 0.035070), "{}", rank(1, "gemm_s"));
    assert!(close(rank(0, "embedding_s"), 0.046423));
    assert!(close(rank(1, "embedding_s"), 0.074106));
    // The classes do not overlap: their sum is the step's kernel time of compute kernels, and
    // `other` (no known family) is reported with its share.
    for i in 0..2 {
        let classes = [
            "gemm_s",
            "attention_s",
            "norm_s",
            "elementwise_s",
            "embedding_s",
        ];
        let known: f64 = classes.iter().map(|f| rank(i, f)).sum();
        let other = rank(i, "other_compute_s");
        assert!(close(
            rank(i, "other_compute_share"),
            other / (known + other)
        ));
        assert!(rank(i, "other_compute_share") < 0.1);
    }
}
