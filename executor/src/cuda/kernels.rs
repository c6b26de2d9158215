//! The CUDA C source of every non-GEMM kernel (compiled once per process with NVRTC, loaded
//! once per GPU) and the host-side launch arithmetic.
//!
//! No headers are included, so NVRTC needs no include path: bf16 is handled as raw `unsigned
//! short` bits with round-to-nearest-even, exactly what `__float2bfloat16_rn` does.
//! Element-wise kernels use grid-stride loops; row kernels (softmax, cross-entropy) use one
//! block per row and shared-memory tree reductions.

/// Names of the kernels in [`SOURCE`], in the order `cuda::device` loads them.
pub const NAMES: [&str; 10] = [
    "cast_bf16",
    "embed_fwd",
    "embed_bwd",
    "gelu_fwd",
    "gelu_bwd",
    "softmax_causal_fwd",
    "softmax_causal_bwd",
    "xent_fwd_bwd",
    "sgd_zero",
    "axpy",
];

/// The kernels. Layouts are row-major as in `spec.rs`.
pub const SOURCE: &str = r#"
extern "C" __global__ void cast_bf16(const float* x, unsigned short* y, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float v = x[i];
        unsigned int u = __float_as_uint(v);
        if (v != v) { y[i] = 0x7FC0; continue; }
        u += 0x7FFFu + ((u >> 16) & 1u);
        y[i] = (unsigned short)(u >> 16);
    }
}

// x[t, c] = E[ids[t], c]
extern "C" __global__ void embed_fwd(const float* E, const unsigned int* ids, float* x,
                                     long long T, long long h) {
    long long n = T * h;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        long long t = i / h, c = i % h;
        x[i] = E[(long long)ids[t] * h + c];
    }
}

// dE[ids[t], c] += dx[t, c]  (atomic: tokens may repeat)
extern "C" __global__ void embed_bwd(const float* dx, const unsigned int* ids, float* dE,
                                     long long T, long long h) {
    long long n = T * h;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        long long t = i / h, c = i % h;
        atomicAdd(&dE[(long long)ids[t] * h + c], dx[i]);
    }
}

__device__ __forceinline__ float gelu_inner(float u) {
    return 0.7978845608028654f * (u + 0.044715f * u * u * u);
}

extern "C" __global__ void gelu_fwd(const float* u, float* g, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float x = u[i];
        g[i] = 0.5f * x * (1.0f + tanhf(gelu_inner(x)));
    }
}

// du = dg * d/du [0.5 u (1 + tanh(a))], a = sqrt(2/pi) (u + 0.044715 u^3)
extern "C" __global__ void gelu_bwd(const float* u, const float* dg, float* du, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        float x = u[i];
        float t = tanhf(gelu_inner(x));
        float da = 0.7978845608028654f * (1.0f + 3.0f * 0.044715f * x * x);
        du[i] = dg[i] * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * da);
    }
}

__device__ float block_max(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

__device__ float block_sum(float v, float* sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

// In place over S [rows, seq] where rows = batches * seq; row r is query position r % seq,
// which sees keys 0..=r%seq. Masked entries become exactly 0. blockDim is a power of two.
extern "C" __global__ void softmax_causal_fwd(float* S, long long seq) {
    extern __shared__ float sh[];
    long long r = blockIdx.x;
    long long i = r % seq;
    float* row = S + r * seq;
    float m = -3.0e38f;
    for (long long j = threadIdx.x; j <= i; j += blockDim.x) m = fmaxf(m, row[j]);
    m = block_max(m, sh);
    float z = 0.0f;
    for (long long j = threadIdx.x; j <= i; j += blockDim.x) z += expf(row[j] - m);
    z = block_sum(z, sh);
    for (long long j = threadIdx.x; j < seq; j += blockDim.x)
        row[j] = (j <= i) ? expf(row[j] - m) / z : 0.0f;
}

// dS = P * (dP - sum_j dP_j P_j), in place over dP; masked entries 0.
extern "C" __global__ void softmax_causal_bwd(const float* P, float* dP, long long seq) {
    extern __shared__ float sh[];
    long long r = blockIdx.x;
    long long i = r % seq;
    const float* p = P + r * seq;
    float* d = dP + r * seq;
    float acc = 0.0f;
    for (long long j = threadIdx.x; j <= i; j += blockDim.x) acc += p[j] * d[j];
    acc = block_sum(acc, sh);
    for (long long j = threadIdx.x; j < seq; j += blockDim.x)
        d[j] = (j <= i) ? p[j] * (d[j] - acc) : 0.0f;
}

// One block per token: in place logits -> (softmax - onehot) * scale; loss += (lse - l[y]) * scale.
extern "C" __global__ void xent_fwd_bwd(float* logits, const unsigned int* labels, double* loss,
                                        long long V, float scale) {
    extern __shared__ float sh[];
    long long t = blockIdx.x;
    float* row = logits + t * V;
    unsigned int y = labels[t];
    float ly = row[y];
    float m = -3.0e38f;
    for (long long j = threadIdx.x; j < V; j += blockDim.x) m = fmaxf(m, row[j]);
    m = block_max(m, sh);
    float z = 0.0f;
    for (long long j = threadIdx.x; j < V; j += blockDim.x) z += expf(row[j] - m);
    z = block_sum(z, sh);
    for (long long j = threadIdx.x; j < V; j += blockDim.x) {
        float p = expf(row[j] - m) / z;
        row[j] = (p - (j == (long long)y ? 1.0f : 0.0f)) * scale;
    }
    if (threadIdx.x == 0) atomicAdd(loss, (double)((logf(z) + m - ly) * scale));
}

// w -= lr * g; g = 0
extern "C" __global__ void sgd_zero(float* w, float* g, float lr, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        w[i] -= lr * g[i];
        g[i] = 0.0f;
    }
}

// y += a * x: the memory-bound probe of `pplan-exec profile --backend cuda` (12 bytes/element).
extern "C" __global__ void axpy(const float* x, float* y, float a, long long n) {
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        y[i] += a * x[i];
    }
}
"#;

/// Threads per block of the element-wise kernels.
pub const ELEMENTWISE_BLOCK: u32 = 256;
/// Upper bound on blocks of an element-wise launch; the grid-stride loop covers the rest.
pub const ELEMENTWISE_MAX_BLOCKS: u32 = 65_535;

/// (blocks, threads) for an element-wise kernel over `n` elements (at least one block).
pub fn elementwise_config(n: usize) -> (u32, u32) {
    let blocks = n
        .div_ceil(ELEMENTWISE_BLOCK as usize)
        .clamp(1, ELEMENTWISE_MAX_BLOCKS as usize);
    (blocks as u32, ELEMENTWISE_BLOCK)
}

/// Threads per block of a row kernel over rows of `row_len`: the smallest power of two that
/// covers the row, between 32 (a warp) and 1024 (the hardware limit); the tree reductions need
/// a power of two. Shared memory is one f32 per thread.
pub fn row_block(row_len: usize) -> u32 {
    (row_len.max(1).next_power_of_two()).clamp(32, 1024) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_configs_cover_the_data() {
        assert_eq!(elementwise_config(0), (1, 256));
        assert_eq!(elementwise_config(1), (1, 256));
        assert_eq!(elementwise_config(256), (1, 256));
        assert_eq!(elementwise_config(257), (2, 256));
        // Huge tensors cap the grid; the grid-stride loop does the rest.
        assert_eq!(elementwise_config(1 << 40).0, ELEMENTWISE_MAX_BLOCKS);
        assert_eq!(row_block(1), 32);
        assert_eq!(row_block(33), 64);
        assert_eq!(row_block(1024), 1024);
        assert_eq!(row_block(50_257), 1024);
        for n in [1usize, 7, 100, 4096] {
            assert!(row_block(n).is_power_of_two());
        }
    }

    #[test]
    fn every_named_kernel_is_in_the_source() {
        for name in NAMES {
            assert!(
                SOURCE.contains(&format!("void {name}(")),
                "kernel {name} missing from SOURCE"
            );
        }
    }
}
