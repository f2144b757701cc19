/*
 * rope.cu — rotary position embedding (Llama's RoPE), in place on the
 * query and key heads of the attention input, CUDA backend
 * (kernels/cpu/rope.c on the CPU).
 *
 * qkv[B,T,(NH+2·NKV)·hd] bf16: NH query heads, NKV key heads, NKV value
 * heads (not touched). For query and key heads, position t, i < hd/2,
 * with c = cs[t·hd + i], s = cs[t·hd + hd/2 + i] (fp32, lib/model.h's
 * hy_rope_table):
 *   x'[i] = x[i]·c − x[i + hd/2]·s,   x'[i + hd/2] = x[i + hd/2]·c + x[i]·s
 * in fp32, each result rounded to bf16 once. The backward is the rotation
 * by −angle (s negated), applied in place to d(q) and d(k): a separate
 * kernel name, so that a profile counts it with the attention's backward.
 *
 * One thread per pair (i, i + hd/2) of one head of one token, grid-stride:
 * each element is read and written by one thread, so in place is safe and
 * the result does not depend on the launch.
 */
#include <stddef.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "check.cuh"
#include "kernels.cuh"

#define ROPE_THREADS 256
#define ROPE_MAX_BLOCKS 65536u

/* Pair p of the n = B·T·(NH+NKV)·hd/2 pairs, rotated by sign·angle. */
static __device__ __forceinline__ void rope_pair(hy_bf16 *qkv, const float *cs, size_t p, int T,
                                                 int heads, int row_heads, int hd, float sign) {
    int half = hd / 2;
    int i = (int)(p % (size_t)half);
    size_t rest = p / (size_t)half;
    int h = (int)(rest % (size_t)heads);
    size_t bt = rest / (size_t)heads;
    int t = (int)(bt % (size_t)T);
    hy_bf16 *x = qkv + bt * (size_t)row_heads * hd + (size_t)h * hd;
    float c = cs[(size_t)t * hd + i], s = sign * cs[(size_t)t * hd + half + i];
    float x0 = __bfloat162float(x[i]), x1 = __bfloat162float(x[i + half]);
    x[i] = __float2bfloat16(x0 * c - x1 * s);
    x[i + half] = __float2bfloat16(x1 * c + x0 * s);
}

static __global__ void rope_fwd_kernel(hy_bf16 *qkv, const float *cs, size_t n, int T, int heads,
                                       int row_heads, int hd) {
    for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < n;
         p += (size_t)gridDim.x * blockDim.x)
        rope_pair(qkv, cs, p, T, heads, row_heads, hd, 1.0f);
}

static __global__ void rope_bwd_kernel(hy_bf16 *qkv, const float *cs, size_t n, int T, int heads,
                                       int row_heads, int hd) {
    for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < n;
         p += (size_t)gridDim.x * blockDim.x)
        rope_pair(qkv, cs, p, T, heads, row_heads, hd, -1.0f);
}

int hy_k_rope(cudaStream_t s, hy_bf16 *qkv, const float *cs, int B, int T, int NH, int NKV, int hd,
              int inverse, hy_error *err) {
    if (B <= 0 || T <= 0 || NH <= 0 || hd < 2) return HY_OK;
    int heads = NH + NKV, row_heads = NH + 2 * NKV;
    size_t n = (size_t)B * T * heads * (size_t)(hd / 2);
    size_t blocks = (n + ROPE_THREADS - 1) / ROPE_THREADS;
    unsigned grid = blocks > ROPE_MAX_BLOCKS ? ROPE_MAX_BLOCKS : (unsigned)blocks;
    if (inverse)
        rope_bwd_kernel<<<grid, ROPE_THREADS, 0, s>>>(qkv, cs, n, T, heads, row_heads, hd);
    else
        rope_fwd_kernel<<<grid, ROPE_THREADS, 0, s>>>(qkv, cs, n, T, heads, row_heads, hd);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

// ----------------------------------------------------------------------------
// Preload (kernels.cuh)

int hy_k_rope_preload(hy_error *err) {
    HY_CUDA_PRELOAD(rope_fwd_kernel, err);
    HY_CUDA_PRELOAD(rope_bwd_kernel, err);
    return HY_OK;
}
