/*
 * pack.cuh — eight bf16 as one 16-byte access, for the memory-bound
 * kernels that read rows 8 elements at a time (layernorm.cu, swiglu.cu,
 * gelu.cu, classifier.cu; adamw.cu writes its bf16 copy so):
 * the type, a load, and the conversions to and from eight floats (each
 * float rounded to bf16 once, to nearest even).
 *
 * Included only by .cu files, after kernels.cuh (hy_bf16).
 */
#ifndef HY_CUDA_PACK_CUH
#define HY_CUDA_PACK_CUH

#include <cuda_bf16.h>

#include "kernels.cuh"

struct __align__(16) hy_k_bf16x8 {
    __nv_bfloat162 h[4];
};

/* p must be 16-byte aligned. */
static __device__ __forceinline__ hy_k_bf16x8 hy_k_load8(const hy_bf16 *p) {
    return *(const hy_k_bf16x8 *)p;
}

static __device__ __forceinline__ void hy_k_unpack8(const hy_k_bf16x8 &p, float f[8]) {
#pragma unroll
    for (int j = 0; j < 4; j++) {
        float2 v = __bfloat1622float2(p.h[j]);
        f[2 * j] = v.x;
        f[2 * j + 1] = v.y;
    }
}

static __device__ __forceinline__ hy_k_bf16x8 hy_k_pack8(const float f[8]) {
    hy_k_bf16x8 p;
#pragma unroll
    for (int j = 0; j < 4; j++) p.h[j] = __floats2bfloat162_rn(f[2 * j], f[2 * j + 1]);
    return p;
}

#endif
