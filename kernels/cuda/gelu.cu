/*
 * gelu.cu — GELU with the tanh approximation (GPT-2's "gelu_new"),
 * elementwise over bf16, CUDA backend (kernels/cpu/gelu.c on the CPU):
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

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/π) */
#define GELU_CUBE 0.044715f
#define GELU_THREADS 256
#define GELU_MAX_BLOCKS 65536u

/* 8 bf16, one 16-byte load or store. */
struct __align__(16) gelu_pack {
    __nv_bfloat162 h[4];
};

static __device__ __forceinline__ float gelu_sigma(float x) {
    float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
    return 1.0f / (1.0f + expf(-2.0f * u));
}

static __device__ __forceinline__ float gelu_f(float x) { return x * gelu_sigma(x); }

static __device__ __forceinline__ float gelu_slope(float x) {
    float sg = gelu_sigma(x);
    return sg + 2.0f * x * sg * (1.0f - sg) * GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
}

// ----------------------------------------------------------------------------
// Kernels: nvec packs of 8 (0 when unaligned), then elements nvec·8 .. n−1

static __global__ void gelu_fwd_kernel(hy_bf16 *out, const hy_bf16 *inp, size_t n, size_t nvec) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t gid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t v = gid; v < nvec; v += stride) {
        gelu_pack x = reinterpret_cast<const gelu_pack *>(inp)[v], y;
        for (int j = 0; j < 4; j++) {
            float2 f = __bfloat1622float2(x.h[j]);
            y.h[j] = __floats2bfloat162_rn(gelu_f(f.x), gelu_f(f.y));
        }
        reinterpret_cast<gelu_pack *>(out)[v] = y;
    }
    for (size_t i = nvec * 8 + gid; i < n; i += stride)
        out[i] = __float2bfloat16(gelu_f(__bfloat162float(inp[i])));
}

/* dinp = (ADD ? dinp : 0) + dout · gelu'(inp); without ADD dinp is never read. */
template <int ADD>
static __global__ void gelu_bwd_kernel(hy_bf16 *dinp, const hy_bf16 *dout, const hy_bf16 *inp, size_t n,
                                size_t nvec) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t gid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t v = gid; v < nvec; v += stride) {
        gelu_pack x = reinterpret_cast<const gelu_pack *>(inp)[v];
        gelu_pack d = reinterpret_cast<const gelu_pack *>(dout)[v];
        gelu_pack a, y;
        if (ADD) a = reinterpret_cast<const gelu_pack *>(dinp)[v];
        for (int j = 0; j < 4; j++) {
            float2 fx = __bfloat1622float2(x.h[j]);
            float2 fd = __bfloat1622float2(d.h[j]);
            float2 fa = ADD ? __bfloat1622float2(a.h[j]) : make_float2(0.0f, 0.0f);
            y.h[j] = __floats2bfloat162_rn(fa.x + fd.x * gelu_slope(fx.x),
                                           fa.y + fd.y * gelu_slope(fx.y));
        }
        reinterpret_cast<gelu_pack *>(dinp)[v] = y;
    }
    for (size_t i = nvec * 8 + gid; i < n; i += stride) {
        float x = __bfloat162float(inp[i]);
        float a = ADD ? __bfloat162float(dinp[i]) : 0.0f;
        dinp[i] = __float2bfloat16(a + __bfloat162float(dout[i]) * gelu_slope(x));
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

int hy_k_gelu_fwd(cudaStream_t s, hy_bf16 *out, const hy_bf16 *inp, size_t n, hy_error *err) {
    if (n == 0) return HY_OK;
    size_t nvec = gelu_aligned(out) && gelu_aligned(inp) ? n / 8 : 0;
    gelu_fwd_kernel<<<gelu_blocks(n, nvec), GELU_THREADS, 0, s>>>(out, inp, n, nvec);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

int hy_k_gelu_bwd(cudaStream_t s, hy_bf16 *dinp, const hy_bf16 *dout, const hy_bf16 *inp,
                  size_t n, int overwrite, hy_error *err) {
    if (n == 0) return HY_OK;
    size_t nvec = gelu_aligned(dinp) && gelu_aligned(dout) && gelu_aligned(inp) ? n / 8 : 0;
    if (overwrite)
        gelu_bwd_kernel<0><<<gelu_blocks(n, nvec), GELU_THREADS, 0, s>>>(dinp, dout, inp, n, nvec);
    else
        gelu_bwd_kernel<1><<<gelu_blocks(n, nvec), GELU_THREADS, 0, s>>>(dinp, dout, inp, n, nvec);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

// ----------------------------------------------------------------------------
// Preload (kernels.cuh)

int hy_k_gelu_preload(hy_error *err) {
    HY_CUDA_PRELOAD(gelu_fwd_kernel, err);
    HY_CUDA_PRELOAD(gelu_bwd_kernel<0>, err);
    HY_CUDA_PRELOAD(gelu_bwd_kernel<1>, err);
    return HY_OK;
}
