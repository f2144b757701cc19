/*
 * attention.c — the self-attention core, CPU backend: what sits between
 * the qkv projection (which produces qkv) and the output projection (which
 * reads out), with grouped-query attention.
 *
 * Layout: qkv[b,t,:] holds the NH query heads, then the NKV key heads,
 * then the NKV value heads, each hd wide (row stride ld = (NH + 2·NKV)·hd;
 * NKV = NH is GPT-2's [q | k | v]). Query head h reads kv head
 * j = h / (NH/NKV) (Hugging Face's repeat_kv), in place: K and V are never
 * copied per query head. out[b,t,h·hd..] has row stride C = NH·hd.
 *
 * Forward, per (b, h) and query row t, with scale = 1/sqrt(hd) and keys
 * s < len (len = t + 1 when causal, T when not):
 *   S_s = scale · q_t · k_s,   m = max_s S_s,   l = Σ_s e^(S_s − m)
 *   out_t = Σ_s e^(S_s − m) v_s / l,   lse_t = m + ln l
 * taken over the keys in chunks of ATT_CHUNK with the running max and sum
 * of the online softmax, so a row needs only a small buffer on the stack
 * whatever T is, and nothing T×T is stored: the backward gets lse and out.
 *
 * Backward, per (b, h), recomputing P from lse into the scratch:
 *   P = e^(S − lse) (0 where masked),  D_t = dout_t · out_t  (= Σ_s P dP)
 *   dV_j += Pᵀ dout,  dP = dout Vᵀ,  dS = P ⊙ (dP − D)
 *   dQ_h += scale · dS K_j,  dK_j += scale · dSᵀ Q_h
 * into dqkv (+=, like every backward in kernels/cpu); a kv head's gradient
 * sums its group's query heads in order h = j·g, j·g+1, ... scratch holds
 * 2·T·T floats (P and dP of one head).
 */
#include <math.h>

#include <cblas.h>

#include "ops.h"

/* Keys per step of the forward's online softmax (a stack buffer). */
#define ATT_CHUNK 256

/* Where the heads of sequence b start, and their row stride. */
typedef struct {
    size_t ld, C;
    int g;   /* query heads per kv head */
} att_layout;

static att_layout att_layout_of(int NH, int NKV, int hd) {
    att_layout l = { (size_t)(NH + 2 * NKV) * hd, (size_t)NH * hd, NH / NKV };
    return l;
}

/* Query head h's q, and its kv head's k and v, of sequence b. */
static size_t att_q(const att_layout *l, int b, int T, int h, int hd) {
    return (size_t)b * T * l->ld + (size_t)h * hd;
}
static size_t att_k(const att_layout *l, int b, int T, int NH, int h, int hd) {
    return (size_t)b * T * l->ld + (size_t)(NH + h / l->g) * hd;
}

void hy_cpu_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int NH,
                              int NKV, int hd, int causal) {
    att_layout L = att_layout_of(NH, NKV, hd);
    size_t vk = (size_t)NKV * hd;   /* from a key head to its value head */
    float scale = 1.0f / sqrtf((float)hd);
    float sc[ATT_CHUNK];
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const float *k = qkv + att_k(&L, b, T, NH, h, hd), *v = k + vk;
            for (int t = 0; t < T; t++) {
                const float *q = qkv + att_q(&L, b, T, h, hd) + (size_t)t * L.ld;
                float *o = out + ((size_t)b * T + t) * L.C + (size_t)h * hd;
                int len = causal ? t + 1 : T;
                float m = -INFINITY;
                double l = 0.0;   /* in double, as the softmax rows were */
                for (int s0 = 0; s0 < len; s0 += ATT_CHUNK) {
                    int n = len - s0 < ATT_CHUNK ? len - s0 : ATT_CHUNK;
                    /* sc[n] = scale · k[s0.., hd] · q */
                    cblas_sgemv(CblasRowMajor, CblasNoTrans, n, hd, scale, k + (size_t)s0 * L.ld,
                                (int)L.ld, q, 1, 0.0f, sc, 1);
                    float mx = m;
                    for (int s = 0; s < n; s++) mx = sc[s] > mx ? sc[s] : mx;
                    /* Rescale what the earlier chunks summed to the new max
                     * (nothing to rescale on the first chunk). */
                    float alpha = s0 == 0 ? 0.0f : expf(m - mx);
                    m = mx;
                    l *= alpha;
                    for (int s = 0; s < n; s++) {
                        sc[s] = expf(sc[s] - m);
                        l += sc[s];
                    }
                    /* o = alpha · o + sc[n] · v[s0.., hd] */
                    cblas_sgemv(CblasRowMajor, CblasTrans, n, hd, 1.0f, v + (size_t)s0 * L.ld,
                                (int)L.ld, sc, 1, alpha, o, 1);
                }
                float inv = (float)(1.0 / l);   /* l ≥ 1: the max term is e^0 */
                for (int d = 0; d < hd; d++) o[d] *= inv;
                lse[((size_t)b * NH + h) * T + t] = m + (float)log(l);
            }
        }
    }
}

void hy_cpu_attention_backward(float *dqkv, float *scratch, const float *dout, const float *qkv,
                               const float *out, const float *lse, int B, int T, int NH, int NKV,
                               int hd, int causal) {
    att_layout L = att_layout_of(NH, NKV, hd);
    size_t vk = (size_t)NKV * hd;
    int ld = (int)L.ld, C = (int)L.C;
    float scale = 1.0f / sqrtf((float)hd);
    float *p = scratch, *dp = scratch + (size_t)T * T;
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            size_t qoff = att_q(&L, b, T, h, hd), koff = att_k(&L, b, T, NH, h, hd);
            const float *q = qkv + qoff, *k = qkv + koff, *v = k + vk;
            float *dq = dqkv + qoff, *dk = dqkv + koff, *dv = dk + vk;
            size_t ooff = (size_t)b * T * C + (size_t)h * hd;
            const float *dout_h = dout + ooff, *out_h = out + ooff;
            const float *lse_h = lse + ((size_t)b * NH + h) * T;

            /* P[T,T] = e^(scale · q kᵀ − lse), masked entries 0 */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, scale, q, ld, k, ld,
                        0.0f, p, T);
            for (int t = 0; t < T; t++) {
                float *row = p + (size_t)t * T;
                int len = causal ? t + 1 : T;
                for (int s = 0; s < len; s++) row[s] = expf(row[s] - lse_h[t]);
                for (int s = len; s < T; s++) row[s] = 0.0f;
            }
            /* dv[T,hd] += pᵀ · dout_h;  dp[T,T] = dout_h · vᵀ */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, 1.0f, p, T, dout_h, C,
                        1.0f, dv, ld);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hd, 1.0f, dout_h, C, v, ld,
                        0.0f, dp, T);
            /* Softmax backward in place: ds = p ⊙ (dp − D), D = dout · out.
             * Masked entries have p = 0 and so get ds = 0 with no test. */
            for (int t = 0; t < T; t++) {
                const float *dy = dout_h + (size_t)t * C, *y = out_h + (size_t)t * C;
                double dot = 0.0;
                for (int d = 0; d < hd; d++) dot += (double)dy[d] * y[d];
                float D = (float)dot;
                const float *prow = p + (size_t)t * T;
                float *row = dp + (size_t)t * T;
                for (int s = 0; s < T; s++) row[s] = prow[s] * (row[s] - D);
            }
            /* dq[T,hd] += scale · ds[T,T] · k[T,hd];  dk += scale · dsᵀ · q */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hd, T, scale, dp, T, k, ld,
                        1.0f, dq, ld);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hd, T, scale, dp, T, q, ld,
                        1.0f, dk, ld);
        }
    }
}
