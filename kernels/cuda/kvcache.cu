/*
 * kvcache.cu — attention over a KV cache, CUDA backend (kernels/cpu/kvcache.c
 * on the CPU; kernels/cpu/ops.h gives the equations): generation's attention
 * (lib/sample.h), a few new queries over every key kept so far.
 *
 * kv_append: one thread per element of the new keys and values, a copy.
 * attention_cached: one block per (head, new query, sequence). The query
 * goes to shared memory as fp32; each thread scores keys s = tid,
 * tid + blockDim, ... (q·k in fp32 over the bf16 cache) into shared memory;
 * a block reduction gives the max, exp replaces each score, a second the
 * sum; then each thread owns output columns d and sums p_s · v_s[d] over
 * the keys in order. Fixed orders throughout, so the result is the same
 * bits every run. The scores need (hd + keys) floats of shared memory:
 * up to 48 KiB without asking (about 12 000 keys), more by raising the
 * kernel's limit, which a GPU refuses past its own (then an error says so).
 *
 * Decode is one query per head and the cache is read once per step: the
 * kernel is bound by reading K and V, which it does row by row with
 * neighbouring threads on neighbouring keys (scores) or columns (values).
 */
#include <math.h>
#include <stddef.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "check.cuh"
#include "kernels.cuh"

#define KV_THREADS 128

// ----------------------------------------------------------------------------
// Kernels

/* kc[b, t0+i, :] = k of qkv[b, i]; vc likewise; grid-stride over B·Tq·KW. */
static __global__ void kv_append_kernel(hy_bf16 *kc, hy_bf16 *vc, const hy_bf16 *qkv, int Tq,
                                        int t0, int Tmax, int NH, int NKV, int hd, size_t n) {
    size_t KW = (size_t)NKV * hd, W = (size_t)(NH + 2 * NKV) * hd;
    for (size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (size_t)gridDim.x * blockDim.x) {
        size_t c = e % KW, row = e / KW;   /* row = b·Tq + i */
        size_t b = row / Tq, i = row % Tq;
        const hy_bf16 *src = qkv + row * W + (size_t)NH * hd + c;
        size_t at = (b * Tmax + t0 + i) * KW + c;
        kc[at] = src[0];
        vc[at] = src[KW];
    }
}

/* The block's reduction of v (max or sum) through red[32]; every thread
 * gets the result. */
template <int MAX>
static __device__ float kv_block_reduce(float v, float *red) {
    for (int off = 16; off > 0; off >>= 1) {
        float o = __shfl_xor_sync(0xffffffffu, v, off);
        v = MAX ? fmaxf(v, o) : v + o;
    }
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
    __syncthreads();   /* red may still be read from the previous reduction */
    if (lane == 0) red[warp] = v;
    __syncthreads();
    v = red[0];
    for (int w = 1; w < warps; w++) v = MAX ? fmaxf(v, red[w]) : v + red[w];
    return v;
}

static __global__ void attention_cached_kernel(hy_bf16 *out, const hy_bf16 *qkv,
                                               const hy_bf16 *kc, const hy_bf16 *vc, int Tq,
                                               int t0, int Tmax, int NH, int NKV, int hd,
                                               float scale) {
    extern __shared__ float kv_shared[];
    __shared__ float red[32];
    float *q = kv_shared, *p = kv_shared + hd;
    int h = blockIdx.x, i = blockIdx.y, b = blockIdx.z;
    int keys = t0 + i + 1, g = h / (NH / NKV);
    size_t W = (size_t)(NH + 2 * NKV) * hd, KW = (size_t)NKV * hd;
    const hy_bf16 *qrow = qkv + ((size_t)b * Tq + i) * W + (size_t)h * hd;
    const hy_bf16 *k = kc + (size_t)b * Tmax * KW + (size_t)g * hd;
    const hy_bf16 *v = vc + (size_t)b * Tmax * KW + (size_t)g * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) q[d] = __bfloat162float(qrow[d]);
    __syncthreads();
    float mx = -INFINITY;
    for (int s = threadIdx.x; s < keys; s += blockDim.x) {
        const hy_bf16 *ks = k + (size_t)s * KW;
        float dot = 0.0f;
        for (int d = 0; d < hd; d++) dot += q[d] * __bfloat162float(ks[d]);
        p[s] = scale * dot;
        mx = fmaxf(mx, p[s]);
    }
    mx = kv_block_reduce<1>(mx, red);
    float sum = 0.0f;
    for (int s = threadIdx.x; s < keys; s += blockDim.x) {
        p[s] = expf(p[s] - mx);
        sum += p[s];
    }
    sum = kv_block_reduce<0>(sum, red);   /* its barrier also publishes p */
    float inv = 1.0f / sum;   /* sum >= 1: the max term is exp(0) */
    hy_bf16 *o = out + ((size_t)b * Tq + i) * NH * hd + (size_t)h * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < keys; s++) acc += p[s] * __bfloat162float(v[(size_t)s * KW + d]);
        o[d] = __float2bfloat16(acc * inv);
    }
}

// ----------------------------------------------------------------------------
// Launchers

int hy_k_kv_append(cudaStream_t s, hy_bf16 *kc, hy_bf16 *vc, const hy_bf16 *qkv, int B, int Tq,
                   int t0, int Tmax, int NH, int NKV, int hd, hy_error *err) {
    size_t n = (size_t)B * Tq * NKV * hd;
    if (n == 0) return HY_OK;
    size_t blocks = (n + KV_THREADS - 1) / KV_THREADS;
    if (blocks > 65536) blocks = 65536;
    kv_append_kernel<<<(unsigned)blocks, KV_THREADS, 0, s>>>(kc, vc, qkv, Tq, t0, Tmax, NH, NKV,
                                                              hd, n);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

int hy_k_attention_cached(cudaStream_t s, hy_bf16 *out, const hy_bf16 *qkv, const hy_bf16 *kc,
                          const hy_bf16 *vc, int B, int Tq, int t0, int Tmax, int NH, int NKV,
                          int hd, hy_error *err) {
    if (B == 0 || Tq == 0) return HY_OK;
    if (NKV <= 0 || NH % NKV != 0 || t0 + Tq > Tmax || Tq > 65535 || B > 65535)
        return hy_fail(err, HY_ERR_RUNTIME, "attention_cached: NH %d, NKV %d, B %d, Tq %d at "
                       "position %d of a cache of %d: not a shape it takes", NH, NKV, B, Tq, t0,
                       Tmax);
    size_t shared = (size_t)(hd + t0 + Tq) * sizeof(float);
    if (shared > 48 * 1024)
        HY_CUDA_CHECK(cudaFuncSetAttribute(attention_cached_kernel,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)shared), err);
    dim3 grid((unsigned)NH, (unsigned)Tq, (unsigned)B);
    attention_cached_kernel<<<grid, KV_THREADS, shared, s>>>(out, qkv, kc, vc, Tq, t0, Tmax, NH,
                                                             NKV, hd, 1.0f / sqrtf((float)hd));
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

// ----------------------------------------------------------------------------
// Preload (kernels.cuh)

int hy_k_kvcache_preload(hy_error *err) {
    HY_CUDA_PRELOAD(kv_append_kernel, err);
    HY_CUDA_PRELOAD(attention_cached_kernel, err);
    return HY_OK;
}
