/*
 * attention.c — the multi-head self-attention core, CPU backend: what sits
 * between c_attn (which produces qkv) and c_proj (which reads out).
 *
 * Layout (GPT-2's c_attn split): qkv[b,t,:] = [q | k | v], each C = NH·hd
 * wide, head h at columns h·hd .. h·hd+hd−1 of its third. For one (b, h),
 * Q, K and V are T×hd matrices sitting in qkv with row stride 3C, so cblas
 * reads them in place (lda = 3C) and nothing is permuted or copied.
 *
 * Forward, per (b, h), with scale = 1/sqrt(hd):
 *   S = scale · Q Kᵀ                        [T,T]
 *   att = softmax over each row of S, over columns s ≤ t when causal (GPT)
 *         or all s (BERT); masked entries are stored as exactly 0
 *   O = att · V                              [T,hd], into out[b,:,h·hd..] (stride C)
 * Backward, given dO and the saved att (the mask lives in att's zeros, so
 * the backward needs no causal flag):
 *   dV += attᵀ dO
 *   dA  = dO Vᵀ                              (scratch, T×T)
 *   dS  = att ⊙ (dA − rowsum(att ⊙ dA))      (softmax backward, per row)
 *   dQ += scale · dS K,   dK += scale · dSᵀ Q
 * dqkv accumulates (+=), like every backward in kernels/cpu.
 *
 * The causal forward still computes the whole T×T product and then zeroes
 * the upper triangle: one GEMM per head beats T small ones at these sizes,
 * and the zeros make the full att·V product exact.
 */
#include <math.h>

#include <cblas.h>

#include "ops.h"

// ----------------------------------------------------------------------------
// Softmax rows

/* Row t of one head's scores, in place: softmax over s < len, zero beyond.
 * The max is subtracted first (exp never overflows); the sum is in double
 * so a long row of small terms loses nothing. */
static void softmax_row(float *row, int len, int T) {
    float mx = row[0];
    for (int s = 1; s < len; s++) mx = row[s] > mx ? row[s] : mx;
    double sum = 0.0;
    for (int s = 0; s < len; s++) {
        row[s] = expf(row[s] - mx);
        sum += row[s];
    }
    float inv = (float)(1.0 / sum); /* sum ≥ 1: the max term is exp(0) */
    for (int s = 0; s < len; s++) row[s] *= inv;
    for (int s = len; s < T; s++) row[s] = 0.0f;
}

// ----------------------------------------------------------------------------
// Forward and backward

void hy_cpu_attention_forward(float *out, float *att, const float *qkv,
                              int B, int T, int C, int NH, int causal) {
    int hd = C / NH, ld = 3 * C;
    float scale = 1.0f / sqrtf((float)hd);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * ld + (size_t)h * hd;
            const float *k = q + C, *v = q + 2 * C;
            float *a = att + ((size_t)b * NH + h) * T * T;
            float *o = out + (size_t)b * T * C + (size_t)h * hd;

            /* a[T,T] = scale · q[T,hd] · k[T,hd]ᵀ */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd,
                        scale, q, ld, k, ld, 0.0f, a, T);
            for (int t = 0; t < T; t++)
                softmax_row(a + (size_t)t * T, causal ? t + 1 : T, T);
            /* o[T,hd] = a[T,T] · v[T,hd] */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T,
                        1.0f, a, T, v, ld, 0.0f, o, C);
        }
    }
}

void hy_cpu_attention_backward(float *dqkv, float *scratch, const float *dout,
                               const float *qkv, const float *att,
                               int B, int T, int C, int NH) {
    int hd = C / NH, ld = 3 * C;
    float scale = 1.0f / sqrtf((float)hd);
    float *da = scratch;
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            size_t qoff = (size_t)b * T * ld + (size_t)h * hd;
            const float *q = qkv + qoff, *k = q + C, *v = q + 2 * C;
            float *dq = dqkv + qoff, *dk = dq + C, *dv = dq + 2 * C;
            const float *a = att + ((size_t)b * NH + h) * T * T;
            const float *dout_h = dout + (size_t)b * T * C + (size_t)h * hd;

            /* dv[T,hd] += a[T,T]ᵀ · dout_h[T,hd] */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T,
                        1.0f, a, T, dout_h, C, 1.0f, dv, ld);
            /* da[T,T] = dout_h[T,hd] · v[T,hd]ᵀ */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd,
                        1.0f, dout_h, C, v, ld, 0.0f, da, T);
            /* Softmax backward in place: ds = a ⊙ (da − Σ_s a·da). Masked
             * entries have a = 0 and so get ds = 0 with no test. */
            for (int t = 0; t < T; t++) {
                const float *arow = a + (size_t)t * T;
                float *row = da + (size_t)t * T;
                double dot = 0.0;
                for (int s = 0; s < T; s++) dot += (double)arow[s] * row[s];
                float d = (float)dot;
                for (int s = 0; s < T; s++) row[s] = arow[s] * (row[s] - d);
            }
            /* dq[T,hd] += scale · ds[T,T] · k[T,hd];  dk += scale · dsᵀ · q */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T,
                        scale, da, T, k, ld, 1.0f, dq, ld);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T,
                        scale, da, T, q, ld, 1.0f, dk, ld);
        }
    }
}
