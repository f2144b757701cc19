/*
 * gelu.cu — GELU, elementwise over bf16, CUDA backend (kernels/cpu/gelu.c
 * on the CPU), of a kind (backend.h's hy_gelu_kind): the exact erf one
 * (BERT's "gelu": x Φ(x), slope Φ(x) + x φ(x), erff and expf) or the tanh
 * approximation (GPT-2's "gelu_new"):
 *   u = sqrt(2/π) · (x + 0.044715 x³)
 *   out = ½ x (1 + tanh u)
 *   dinp += dout · (½(1 + tanh u) + ½ x (1 − tanh² u) · sqrt(2/π)(1 + 3·0.044715 x²))
 * Computed as the CPU does, through the logistic function:
 * ½(1 + tanh u) = σ(2u) = 1/(1 + e^(−2u)) and 1 − tanh² u = 4σ(1 − σ), with
 * the accurate expf (no fast-math intrinsics); it saturates to −0 / x and
 * slopes 0 / 1 without NaN.
 *
 * Memory-bound: when every pointer is 16-byte aligned the bulk goes 8 bf16
 * (one 16-byte load) per thread and step, the tail (< 8 elements) and any
 * unaligned call element by element; grid-stride loops, size_t indices.
 * out may alias inp (each element is read, then written, by one thread).
 */
#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "check.cuh"
#include "kernels.cuh"
#include "pack.cuh"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/π) */
#define GELU_CUBE 0.044715f
#define GELU_THREADS 256
#define GELU_MAX_BLOCKS 65536u

static __device__ __forceinline__ float gelu_sigma(float x) {
    float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
    return 1.0f / (1.0f + expf(-2.0f * u));
}

#define GELU_RSQRT2 0.70710678118654752f  /* 1/√2 */
#define GELU_RSQRT2PI 0.39894228040143268f /* 1/√(2π) */

template <int KIND>
static __device__ __forceinline__ float gelu_f(float x) {
    if (KIND == HY_GELU_ERF) return x * 0.5f * (1.0f + erff(x * GELU_RSQRT2));
    return x * gelu_sigma(x);
}

template <int KIND>
static __device__ __forceinline__ float gelu_slope(float x) {
    if (KIND == HY_GELU_ERF)
        return 0.5f * (1.0f + erff(x * GELU_RSQRT2)) + x * GELU_RSQRT2PI * expf(-0.5f * x * x);
    float sg = gelu_sigma(x);
    return sg + 2.0f * x * sg * (1.0f - sg) * GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
}

// ----------------------------------------------------------------------------
// Kernels: nvec packs of 8 (0 when unaligned), then elements nvec·8 .. n−1

template <int KIND>
static __global__ void gelu_fwd_kernel(hy_bf16 *out, const hy_bf16 *inp, size_t n, size_t nvec) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t gid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t v = gid; v < nvec; v += stride) {
        float f[8];
        hy_k_unpack8(hy_k_load8(inp + v * 8), f);
        for (int j = 0; j < 8; j++) f[j] = gelu_f<KIND>(f[j]);
        *(hy_k_bf16x8 *)(out + v * 8) = hy_k_pack8(f);
    }
    for (size_t i = nvec * 8 + gid; i < n; i += stride)
        out[i] = __float2bfloat16(gelu_f<KIND>(__bfloat162float(inp[i])));
}

/* dinp = (ADD ? dinp : 0) + dout · gelu'(inp); without ADD dinp is never read. */
template <int ADD, int KIND>
static __global__ void gelu_bwd_kernel(hy_bf16 *dinp, const hy_bf16 *dout, const hy_bf16 *inp, size_t n,
                                size_t nvec) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t gid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t v = gid; v < nvec; v += stride) {
        float x[8], d[8], a[8] = { 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f };
        hy_k_unpack8(hy_k_load8(inp + v * 8), x);
        hy_k_unpack8(hy_k_load8(dout + v * 8), d);
        if (ADD) hy_k_unpack8(hy_k_load8(dinp + v * 8), a);
        for (int j = 0; j < 8; j++) a[j] = a[j] + d[j] * gelu_slope<KIND>(x[j]);
        *(hy_k_bf16x8 *)(dinp + v * 8) = hy_k_pack8(a);
    }
    for (size_t i = nvec * 8 + gid; i < n; i += stride) {
        float x = __bfloat162float(inp[i]);
        float a = ADD ? __bfloat162float(dinp[i]) : 0.0f;
        dinp[i] = __float2bfloat16(a + __bfloat162float(dout[i]) * gelu_slope<KIND>(x));
    }
}

// ----------------------------------------------------------------------------
// Launchers

static int gelu_aligned(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* Enough blocks for one step of the bulk (or of the scalar loop), capped;
 * the grid-stride loops cover the rest. */
static unsigned gelu_blocks(size_t n, size_t nvec) {
    size_t work = nvec > 0 ? nvec : n;
    size_t b = (work + GELU_THREADS - 1) / GELU_THREADS;
    if (b < 1) b = 1;
    return b > GELU_MAX_BLOCKS ? GELU_MAX_BLOCKS : (unsigned)b;
}

int hy_k_gelu_fwd(cudaStream_t s, hy_bf16 *out, const hy_bf16 *inp, size_t n, int kind,
                  hy_error *err) {
    if (n == 0) return HY_OK;
    size_t nvec = gelu_aligned(out) && gelu_aligned(inp) ? n / 8 : 0;
    unsigned blocks = gelu_blocks(n, nvec);
    if (kind == HY_GELU_ERF)
        gelu_fwd_kernel<HY_GELU_ERF><<<blocks, GELU_THREADS, 0, s>>>(out, inp, n, nvec);
    else
        gelu_fwd_kernel<HY_GELU_TANH><<<blocks, GELU_THREADS, 0, s>>>(out, inp, n, nvec);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

int hy_k_gelu_bwd(cudaStream_t s, hy_bf16 *dinp, const hy_bf16 *dout, const hy_bf16 *inp,
                  size_t n, int overwrite, int kind, hy_error *err) {
    if (n == 0) return HY_OK;
    size_t nvec = gelu_aligned(dinp) && gelu_aligned(dout) && gelu_aligned(inp) ? n / 8 : 0;
    unsigned blocks = gelu_blocks(n, nvec);
    if (kind == HY_GELU_ERF && overwrite)
        gelu_bwd_kernel<0, HY_GELU_ERF><<<blocks, GELU_THREADS, 0, s>>>(dinp, dout, inp, n, nvec);
    else if (kind == HY_GELU_ERF)
        gelu_bwd_kernel<1, HY_GELU_ERF><<<blocks, GELU_THREADS, 0, s>>>(dinp, dout, inp, n, nvec);
    else if (overwrite)
        gelu_bwd_kernel<0, HY_GELU_TANH><<<blocks, GELU_THREADS, 0, s>>>(dinp, dout, inp, n, nvec);
    else
        gelu_bwd_kernel<1, HY_GELU_TANH><<<blocks, GELU_THREADS, 0, s>>>(dinp, dout, inp, n, nvec);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

// ----------------------------------------------------------------------------
// Preload (kernels.cuh)

int hy_k_gelu_preload(hy_error *err) {
    HY_CUDA_PRELOAD(gelu_fwd_kernel<HY_GELU_TANH>, err);
    HY_CUDA_PRELOAD(gelu_fwd_kernel<HY_GELU_ERF>, err);
    HY_CUDA_PRELOAD((gelu_bwd_kernel<0, HY_GELU_TANH>), err);
    HY_CUDA_PRELOAD((gelu_bwd_kernel<1, HY_GELU_TANH>), err);
    HY_CUDA_PRELOAD((gelu_bwd_kernel<0, HY_GELU_ERF>), err);
    HY_CUDA_PRELOAD((gelu_bwd_kernel<1, HY_GELU_ERF>), err);
    return HY_OK;
}
