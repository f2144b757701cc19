/*
 * flash.cuh — the device pieces both fused attentions share
 * (attention.cu on mma.sync, attention_sm90.cu on wgmma): the online
 * softmax's step and its end (the row's L), and two floats as a bf16
 * pair, the A operand's unit.
 * Both kernels hold their accumulators in mma.sync's m16n8 layout (wgmma's
 * repeats it along N): a thread holds two rows of its warp's 16, g and
 * g + 8 (lane = 4g + t), and a row's values lie in the four lanes 4g ..
 * 4g+3.
 *
 * Included only by .cu files, after kernels.cuh.
 */
#ifndef HY_CUDA_FLASH_CUH
#define HY_CUDA_FLASH_CUH

#include <stdint.h>
#include <string.h>

#include <cuda_bf16.h>

/* Two values as one register of bf16 pairs, the first in the low half. */
static __device__ __forceinline__ uint32_t hy_k_pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

/* One tile's step of the online softmax, in the log2 domain, for the
 * thread's two rows: mx[r] holds the thread's max of row r over the
 * tile's scores and the running max m[r] (masked scores −inf). The row's
 * four lanes agree on its max, which becomes m[r]; the running sum l[r]
 * shrinks by alpha[r] = exp2(m_old − m_new), which the caller applies to
 * its output accumulators too. Key 0 is in the first tile of every row,
 * so the max is finite from the first step on. */
static __device__ __forceinline__ void hy_k_softmax_step(float m[2], float l[2], float mx[2],
                                                         float alpha[2]) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        alpha[r] = exp2f(m[r] - mx[r]);
        m[r] = mx[r];
        l[r] *= alpha[r];
    }
}

/* The end of the walk, for the thread's two rows: the row's sum over its
 * four lanes, inv[r] = 1 / l (l >= 1: the max term is exp2(0)), what the
 * output accumulators are scaled by, and the row's log-sum-exp L[r] =
 * m + log2 l, what the backward recomputes P from (backend.h's lse). */
static __device__ __forceinline__ void hy_k_softmax_end(const float m[2], float l[2], float inv[2],
                                                        float L[2]) {
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
        inv[r] = 1.0f / l[r];
        L[r] = m[r] + log2f(l[r]);
    }
}

#endif
