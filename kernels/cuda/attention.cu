/*
 * attention.cu — the multi-head self-attention core, CUDA backend (what
 * sits between c_attn and c_proj; kernels/cpu/attention.c on the CPU).
 *
 * qkv[b,t,:] = [q | k | v], each C = NH·hd wide, head h at columns
 * h·hd .. h·hd+hd−1. For one (b, h), Q, K and V are T×hd matrices inside
 * qkv with row stride 3C, and consecutive heads are hd elements apart; so
 * for one b the NH heads are one strided-batched cuBLASLt GEMM (batch NH,
 * batch stride hd) reading qkv in place: no permute, no copies. The loop
 * runs over b (B GEMMs per product).
 *
 * Forward, scale = 1/sqrt(hd):
 *   att  ← Q Kᵀ                  (raw scores, bf16, written into att itself)
 *   att  ← softmax(scale · att)  per row, in place; over s ≤ t when causal,
 *                                masked entries stored as exactly 0
 *   out  = att · V               [T,hd] per head, into out[b,:,h·hd..] (ld C)
 * The scores pass through bf16 once (att is the only buffer the forward
 * has, and it is bf16): a relative error of 2⁻⁹ on each score before the
 * softmax, as llm.c's and PyTorch's bf16 attention have. The softmax itself
 * is computed in fp32 (scale applied in fp32, online max/sum per warp).
 * The causal GEMMs compute the full T×T and the zeros of the mask make
 * att·V exact; skipping the upper triangle is future work.
 *
 * Backward (the mask lives in att's zeros, so no causal flag is needed):
 *   dV += attᵀ · dO                       (bf16, beta = 1 into dqkv)
 *   dA  = dO · Vᵀ                         (fp32, scratch)
 *   dS  = scale · att ⊙ (dA − rowsum(att ⊙ dA))   (bf16, scratch)
 *   dQ += dS · K,   dK += dSᵀ · Q          (bf16, beta = 1 into dqkv)
 * dA is kept in fp32 (the softmax backward subtracts nearly equal numbers);
 * dS is bf16 because it is a GEMM input. Scratch holds one b's worth:
 * NH·T·T fp32 (dA) then NH·T·T bf16 (dS), i.e. hy_k_attention_scratch =
 * round_up(4·NH·T², 256) + 2·NH·T² bytes.
 *
 * Column-major mapping (lt.cuh) of each product, per b, batched over h:
 *   scoresᵀ[s,t] = K[s,:]·Q[t,:]  A = K (T, ld 3C), B = Q (N, ld 3C), D = att (ld T)
 *   outᵀ[d,t]    = Vᵀ · attᵀ      A = V (N, ld 3C), B = att (N, ld T), D = out (ld C)
 *   dvᵀ[d,s]     = dOᵀ · att      A = dO (N, ld C), B = att (T, ld T), D = dv (ld 3C)
 *   dAᵀ[s,t]     = V[s,:]·dO[t,:] A = V (T, ld 3C), B = dO (N, ld C), D = dA (ld T)
 *   dqᵀ[d,t]     = Kᵀ · dSᵀ       A = K (N, ld 3C), B = dS (N, ld T), D = dq (ld 3C)
 *   dkᵀ[d,s]     = Qᵀ · dS        A = Q (N, ld 3C), B = dS (T, ld T), D = dk (ld 3C)
 * Everything is deterministic: fixed GEMM algorithms and warp reductions
 * in a fixed order.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math_constants.h>

#include "check.cuh"
#include "kernels.cuh"
#include "lt.cuh"

#define ATT_WARPS 8   /* rows (one warp each) per block of the softmax kernels */

// ----------------------------------------------------------------------------
// Softmax forward and backward, one warp per row

/* Row r of att (r = ((b·NH + h)·T + t)) in place: the raw score x becomes
 * softmax_s(scale·x) over s < len (len = t+1 when causal, else T), and 0
 * beyond. Each lane keeps a running (max, sum of exp) over its columns;
 * the lanes are merged by an xor butterfly, which gives every lane the
 * same bits (each merge adds the same two terms, commutatively). */
static __global__ void att_softmax_fwd_kernel(hy_bf16 *att, size_t rows, int T, float scale, int causal) {
    int lane = threadIdx.x & 31;
    size_t r = (size_t)blockIdx.x * ATT_WARPS + (threadIdx.x >> 5);
    if (r >= rows) return;
    int t = (int)(r % (size_t)T);
    int len = causal ? t + 1 : T;
    hy_bf16 *row = att + r * (size_t)T;

    float m = -CUDART_INF_F, sum = 0.0f;
    for (int i = lane; i < len; i += 32) {
        float x = __bfloat162float(row[i]) * scale;
        if (x > m) {
            sum = sum * expf(m - x) + 1.0f;
            m = x;
        } else {
            sum += expf(x - m);
        }
    }
    for (int off = 16; off > 0; off >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        float s2 = __shfl_xor_sync(0xffffffffu, sum, off);
        float mm = fmaxf(m, m2);
        /* A lane that saw no column has sum 0 (and m = -inf): it adds 0. */
        float a = sum == 0.0f ? 0.0f : sum * expf(m - mm);
        float b = s2 == 0.0f ? 0.0f : s2 * expf(m2 - mm);
        sum = a + b;
        m = mm;
    }
    float inv = 1.0f / sum;   /* sum >= 1: the max term is exp(0) */
    for (int i = lane; i < T; i += 32) {
        float p = 0.0f;
        if (i < len) p = expf(__bfloat162float(row[i]) * scale - m) * inv;
        row[i] = __float2bfloat16(p);
    }
}

/* Row r of one b's heads (r = h·T + t): ds = scale · a ⊙ (da − Σ_s a·da).
 * Masked entries have a = 0 and get ds = 0 with no test. */
static __global__ void att_softmax_bwd_kernel(hy_bf16 *ds, const float *da, const hy_bf16 *att,
                                       size_t rows, int T, float scale) {
    int lane = threadIdx.x & 31;
    size_t r = (size_t)blockIdx.x * ATT_WARPS + (threadIdx.x >> 5);
    if (r >= rows) return;
    const hy_bf16 *a = att + r * (size_t)T;
    const float *d = da + r * (size_t)T;
    hy_bf16 *o = ds + r * (size_t)T;

    float dot = 0.0f;
    for (int i = lane; i < T; i += 32) dot += __bfloat162float(a[i]) * d[i];
    for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
    for (int i = lane; i < T; i += 32)
        o[i] = __float2bfloat16(scale * (__bfloat162float(a[i]) * (d[i] - dot)));
}

static unsigned att_blocks(size_t rows) { return (unsigned)((rows + ATT_WARPS - 1) / ATT_WARPS); }

// ----------------------------------------------------------------------------
// The per-head GEMMs of one b (batch NH)

/* One strided-batched product over the NH heads of one b. */
static int att_gemm(hy_lt *lt, cudaStream_t s, const char *op, cublasOperation_t ta,
                    cublasOperation_t tb, int m, int n, int k, int NH,
                    const hy_bf16 *A, int64_t lda, int64_t sa,
                    const hy_bf16 *B, int64_t ldb, int64_t sb,
                    void *D, cudaDataType_t tD, int64_t ldd, int64_t sd, float beta,
                    hy_error *err) {
    hy_lt_gemm g;
    memset(&g, 0, sizeof g);
    g.op = op;
    g.ta = ta;
    g.tb = tb;
    g.m = m;
    g.n = n;
    g.k = k;
    g.batch = NH;
    g.A = A;
    g.lda = lda;
    g.sa = sa;
    g.B = B;
    g.ldb = ldb;
    g.sb = sb;
    g.D = D;
    g.tD = tD;
    g.ldd = ldd;
    g.sd = sd;
    g.bias = NULL;
    g.alpha = 1.0f;
    g.beta = beta;
    return hy_lt_run(lt, s, &g, err);
}

// ----------------------------------------------------------------------------
// Launchers

size_t hy_k_attention_scratch(int B, int T, int C, int NH) {
    (void)B;
    (void)C;
    if (T <= 0 || NH <= 0) return 0;
    size_t tt = (size_t)NH * (size_t)T * (size_t)T;
    size_t da = (tt * sizeof(float) + 255) / 256 * 256;
    return da + tt * sizeof(hy_bf16);
}

int hy_k_attention_fwd(hy_lt *lt, cudaStream_t s, hy_bf16 *out, hy_bf16 *att,
                       const hy_bf16 *qkv, int B, int T, int C, int NH, int causal,
                       hy_error *err) {
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) return HY_OK;
    int hd = C / NH;
    int64_t ld = 3 * (int64_t)C, tt = (int64_t)T * T;
    float scale = 1.0f / sqrtf((float)hd);
    int rc;

    /* scores: att[b,h] (col-major [T(s), T(t)]) = K · Qᵀ */
    for (int b = 0; b < B; b++) {
        const hy_bf16 *q = qkv + (size_t)b * T * ld, *k = q + C;
        hy_bf16 *a = att + (size_t)b * NH * tt;
        rc = att_gemm(lt, s, "attention_fwd (scores)", CUBLAS_OP_T, CUBLAS_OP_N, T, T, hd, NH,
                      k, ld, hd, q, ld, hd, a, CUDA_R_16BF, T, tt, 0.0f, err);
        if (rc) return rc;
    }

    size_t rows = (size_t)B * NH * T;
    att_softmax_fwd_kernel<<<att_blocks(rows), ATT_WARPS * 32, 0, s>>>(att, rows, T, scale, causal);
    HY_CUDA_CHECK(cudaGetLastError(), err);

    /* out[b,:,h] (col-major [hd, T], ld C) = Vᵀ · attᵀ */
    for (int b = 0; b < B; b++) {
        const hy_bf16 *v = qkv + (size_t)b * T * ld + 2 * (size_t)C;
        const hy_bf16 *a = att + (size_t)b * NH * tt;
        hy_bf16 *o = out + (size_t)b * T * C;
        rc = att_gemm(lt, s, "attention_fwd (att·v)", CUBLAS_OP_N, CUBLAS_OP_N, hd, T, T, NH,
                      v, ld, hd, a, T, tt, o, CUDA_R_16BF, C, hd, 0.0f, err);
        if (rc) return rc;
    }
    return HY_OK;
}

int hy_k_attention_bwd(hy_lt *lt, cudaStream_t s, hy_bf16 *dqkv, void *scratch,
                       const hy_bf16 *dout, const hy_bf16 *qkv, const hy_bf16 *att, int B, int T,
                       int C, int NH, hy_error *err) {
    if (B <= 0 || T <= 0 || C <= 0 || NH <= 0) return HY_OK;
    int hd = C / NH;
    int64_t ld = 3 * (int64_t)C, tt = (int64_t)T * T;
    float scale = 1.0f / sqrtf((float)hd);
    size_t da_bytes = ((size_t)NH * tt * sizeof(float) + 255) / 256 * 256;
    float *da = (float *)scratch;
    hy_bf16 *ds = (hy_bf16 *)((char *)scratch + da_bytes);
    size_t rows = (size_t)NH * T;
    int rc;

    for (int b = 0; b < B; b++) {
        size_t qoff = (size_t)b * T * ld;
        const hy_bf16 *q = qkv + qoff, *k = q + C, *v = q + 2 * (size_t)C;
        hy_bf16 *dq = dqkv + qoff, *dk = dq + C, *dv = dq + 2 * (size_t)C;
        const hy_bf16 *a = att + (size_t)b * NH * tt;
        const hy_bf16 *dO = dout + (size_t)b * T * C;

        /* dv += attᵀ · dO:  dvᵀ[hd, T] = dOᵀ · att */
        rc = att_gemm(lt, s, "attention_bwd (dv)", CUBLAS_OP_N, CUBLAS_OP_T, hd, T, T, NH,
                      dO, C, hd, a, T, tt, dv, CUDA_R_16BF, ld, hd, 1.0f, err);
        if (rc) return rc;
        /* dA = dO · Vᵀ:  col-major [T(s), T(t)] = V · dOᵀ, fp32 */
        rc = att_gemm(lt, s, "attention_bwd (datt)", CUBLAS_OP_T, CUBLAS_OP_N, T, T, hd, NH,
                      v, ld, hd, dO, C, hd, da, CUDA_R_32F, T, tt, 0.0f, err);
        if (rc) return rc;
        att_softmax_bwd_kernel<<<att_blocks(rows), ATT_WARPS * 32, 0, s>>>(ds, da, a, rows, T,
                                                                          scale);
        HY_CUDA_CHECK(cudaGetLastError(), err);
        /* dq += dS · K:  dqᵀ[hd, T] = Kᵀ · dSᵀ */
        rc = att_gemm(lt, s, "attention_bwd (dq)", CUBLAS_OP_N, CUBLAS_OP_N, hd, T, T, NH,
                      k, ld, hd, ds, T, tt, dq, CUDA_R_16BF, ld, hd, 1.0f, err);
        if (rc) return rc;
        /* dk += dSᵀ · Q:  dkᵀ[hd, T] = Qᵀ · dS */
        rc = att_gemm(lt, s, "attention_bwd (dk)", CUBLAS_OP_N, CUBLAS_OP_T, hd, T, T, NH,
                      q, ld, hd, ds, T, tt, dk, CUDA_R_16BF, ld, hd, 1.0f, err);
        if (rc) return rc;
    }
    return HY_OK;
}

// ----------------------------------------------------------------------------
// Preload (kernels.cuh)

int hy_k_attention_preload(hy_error *err) {
    HY_CUDA_PRELOAD(att_softmax_fwd_kernel, err);
    HY_CUDA_PRELOAD(att_softmax_bwd_kernel, err);
    return HY_OK;
}
