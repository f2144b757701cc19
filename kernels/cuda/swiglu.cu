/*
 * swiglu.cu — SwiGLU, the gated activation of Llama's MLP, elementwise
 * over bf16, CUDA backend (kernels/cpu/swiglu.c on the CPU).
 *
 * inp[N, 2F]: per row the gate (columns 0..F−1) then the up values
 * (F..2F−1); with σ = 1/(1 + e^−gate), silu = gate·σ:
 *   out[n,i]     = silu(gate[n,i]) · up[n,i]
 *   dgate[n,i]  += dout[n,i] · up · σ · (1 + gate · (1 − σ))
 *   dup[n,i]    += dout[n,i] · silu(gate)          (into dinp [N, 2F])
 * in fp32 with the accurate expf, as the CPU; each output rounded to bf16
 * once. σ saturates to 0 or 1 without NaN.
 *
 * Memory-bound: when F is a multiple of 8 and every pointer 16-byte
 * aligned, each thread takes 8 consecutive columns of one row (a 16-byte
 * load of gate, of up, of dout, ...) per step; otherwise one element.
 * The backward stores instead of adding when its dinp was just zeroed
 * (overwrite: fuse.cu), never reading it then.
 */
#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "check.cuh"
#include "kernels.cuh"
#include "pack.cuh"

#define SW_THREADS 256
#define SW_MAX_BLOCKS 65536u

static __device__ __forceinline__ float sw_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

/* Grid-stride over the n = N·W work items (W per row: F/8 packs of 8
 * columns with VEC, else F single columns); item k is row k / W from
 * column (k % W) · (VEC ? 8 : 1). */
#define SW_STEP ((size_t)gridDim.x * blockDim.x)
#define SW_FIRST ((size_t)blockIdx.x * blockDim.x + threadIdx.x)

template <int VEC>
static __global__ void swiglu_fwd_kernel(hy_bf16 *out, const hy_bf16 *inp, size_t n, int W, int F) {
    for (size_t k = SW_FIRST; k < n; k += SW_STEP) {
        size_t row = k / (size_t)W, col = (k % (size_t)W) * (VEC ? 8 : 1);
        const hy_bf16 *gate = inp + row * 2 * (size_t)F + col, *up = gate + F;
        hy_bf16 *o = out + row * (size_t)F + col;
        if (VEC) {
            float g[8], u[8], y[8];
            hy_k_unpack8(hy_k_load8(gate), g);
            hy_k_unpack8(hy_k_load8(up), u);
#pragma unroll
            for (int j = 0; j < 8; j++) y[j] = g[j] * sw_sigmoid(g[j]) * u[j];
            *(hy_k_bf16x8 *)o = hy_k_pack8(y);
        } else {
            float g = __bfloat162float(*gate);
            *o = __float2bfloat16(g * sw_sigmoid(g) * __bfloat162float(*up));
        }
    }
}

/* dinp = (ADD ? dinp : 0) + the gradients; without ADD dinp is never read. */
template <int VEC, int ADD>
static __global__ void swiglu_bwd_kernel(hy_bf16 *dinp, const hy_bf16 *dout, const hy_bf16 *inp, size_t n,
                                         int W, int F) {
    for (size_t k = SW_FIRST; k < n; k += SW_STEP) {
        size_t row = k / (size_t)W, col = (k % (size_t)W) * (VEC ? 8 : 1);
        size_t at = row * 2 * (size_t)F + col;
        const hy_bf16 *gate = inp + at, *up = gate + F, *dy = dout + row * (size_t)F + col;
        hy_bf16 *dgate = dinp + at, *dup = dgate + F;
        if (VEC) {
            float g[8], u[8], d[8], ag[8], au[8];
            hy_k_unpack8(hy_k_load8(gate), g);
            hy_k_unpack8(hy_k_load8(up), u);
            hy_k_unpack8(hy_k_load8(dy), d);
            if (ADD) {
                hy_k_unpack8(hy_k_load8(dgate), ag);
                hy_k_unpack8(hy_k_load8(dup), au);
            }
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float sg = sw_sigmoid(g[j]);
                float a0 = ADD ? ag[j] : 0.0f, a1 = ADD ? au[j] : 0.0f;
                ag[j] = a0 + d[j] * u[j] * sg * (1.0f + g[j] * (1.0f - sg));
                au[j] = a1 + d[j] * g[j] * sg;
            }
            *(hy_k_bf16x8 *)dgate = hy_k_pack8(ag);
            *(hy_k_bf16x8 *)dup = hy_k_pack8(au);
        } else {
            float g = __bfloat162float(*gate), u = __bfloat162float(*up), d = __bfloat162float(*dy);
            float sg = sw_sigmoid(g);
            float a0 = ADD ? __bfloat162float(*dgate) : 0.0f, a1 = ADD ? __bfloat162float(*dup) : 0.0f;
            *dgate = __float2bfloat16(a0 + d * u * sg * (1.0f + g * (1.0f - sg)));
            *dup = __float2bfloat16(a1 + d * g * sg);
        }
    }
}

// ----------------------------------------------------------------------------
// Launchers

static int sw_aligned(const void *p) { return ((uintptr_t)p & 15) == 0; }

static unsigned sw_blocks(size_t n) {
    size_t b = (n + SW_THREADS - 1) / SW_THREADS;
    if (b < 1) b = 1;
    return b > SW_MAX_BLOCKS ? SW_MAX_BLOCKS : (unsigned)b;
}

int hy_k_swiglu_fwd(cudaStream_t s, hy_bf16 *out, const hy_bf16 *inp, int N, int F, hy_error *err) {
    if (N <= 0 || F <= 0) return HY_OK;
    int vec = F % 8 == 0 && sw_aligned(out) && sw_aligned(inp);
    int W = vec ? F / 8 : F;
    size_t n = (size_t)N * W;
    if (vec) swiglu_fwd_kernel<1><<<sw_blocks(n), SW_THREADS, 0, s>>>(out, inp, n, W, F);
    else swiglu_fwd_kernel<0><<<sw_blocks(n), SW_THREADS, 0, s>>>(out, inp, n, W, F);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

int hy_k_swiglu_bwd(cudaStream_t s, hy_bf16 *dinp, const hy_bf16 *dout, const hy_bf16 *inp, int N,
                    int F, int overwrite, hy_error *err) {
    if (N <= 0 || F <= 0) return HY_OK;
    int vec = F % 8 == 0 && sw_aligned(dinp) && sw_aligned(dout) && sw_aligned(inp);
    int W = vec ? F / 8 : F;
    size_t n = (size_t)N * W;
    void (*k)(hy_bf16 *, const hy_bf16 *, const hy_bf16 *, size_t, int, int) =
        vec ? (overwrite ? swiglu_bwd_kernel<1, 0> : swiglu_bwd_kernel<1, 1>)
            : (overwrite ? swiglu_bwd_kernel<0, 0> : swiglu_bwd_kernel<0, 1>);
    k<<<sw_blocks(n), SW_THREADS, 0, s>>>(dinp, dout, inp, n, W, F);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

// ----------------------------------------------------------------------------
// Preload (kernels.cuh)

int hy_k_swiglu_preload(hy_error *err) {
    HY_CUDA_PRELOAD(swiglu_fwd_kernel<0>, err);
    HY_CUDA_PRELOAD(swiglu_fwd_kernel<1>, err);
    HY_CUDA_PRELOAD((swiglu_bwd_kernel<0, 0>), err);
    HY_CUDA_PRELOAD((swiglu_bwd_kernel<0, 1>), err);
    HY_CUDA_PRELOAD((swiglu_bwd_kernel<1, 0>), err);
    HY_CUDA_PRELOAD((swiglu_bwd_kernel<1, 1>), err);
    return HY_OK;
}
