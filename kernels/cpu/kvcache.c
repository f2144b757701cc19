/*
 * kvcache.c — attention over a KV cache, CPU backend: generation's
 * attention (lib/sample.h), where each step brings a few new tokens and
 * attends to every key kept from the ones before. kernels/cuda/kvcache.cu
 * is the same on the GPU; ops.h gives the equations.
 *
 * One query at a time, one head at a time, in two passes over its keys:
 * the max of the scores, then exp, its sum and the weighted sum of the
 * values straight into the output row. Nothing T×T exists and the op
 * takes no scratch. Scores are recomputed in the second pass rather than
 * kept: a decode step has one query per head, and its keys' dot products
 * cost less than a buffer the op would have to be given.
 */
#include <math.h>
#include <string.h>

#include "ops.h"

void hy_cpu_kv_append(float *kc, float *vc, const float *qkv, int B, int Tq, int t0, int Tmax,
                      int NH, int NKV, int hd) {
    size_t W = (size_t)(NH + 2 * NKV) * hd, KW = (size_t)NKV * hd;
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < Tq; i++) {
            const float *row = qkv + ((size_t)b * Tq + i) * W;
            size_t at = ((size_t)b * Tmax + (size_t)(t0 + i)) * KW;
            memcpy(kc + at, row + (size_t)NH * hd, KW * sizeof(float));
            memcpy(vc + at, row + (size_t)(NH + NKV) * hd, KW * sizeof(float));
        }
    }
}

static float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int d = 0; d < n; d++) s += a[d] * b[d];
    return s;
}

void hy_cpu_attention_cached(float *out, const float *qkv, const float *kc, const float *vc,
                             int B, int Tq, int t0, int Tmax, int NH, int NKV, int hd) {
    size_t W = (size_t)(NH + 2 * NKV) * hd, KW = (size_t)NKV * hd;
    int group = NH / NKV;   /* query heads per kv head */
    float scale = 1.0f / sqrtf((float)hd);
    for (int b = 0; b < B; b++) {
        for (int i = 0; i < Tq; i++) {
            int keys = t0 + i + 1;   /* causal: positions 0 .. t0+i */
            for (int h = 0; h < NH; h++) {
                const float *q = qkv + ((size_t)b * Tq + i) * W + (size_t)h * hd;
                const float *k = kc + (size_t)b * Tmax * KW + (size_t)(h / group) * hd;
                const float *v = vc + (size_t)b * Tmax * KW + (size_t)(h / group) * hd;
                float *o = out + ((size_t)b * Tq + i) * NH * hd + (size_t)h * hd;
                float mx = -INFINITY;
                for (int s = 0; s < keys; s++) {
                    float x = scale * dot(q, k + (size_t)s * KW, hd);
                    mx = x > mx ? x : mx;
                }
                /* The sum in double, as attention.c's softmax_row has it. */
                double sum = 0.0;
                memset(o, 0, (size_t)hd * sizeof(float));
                for (int s = 0; s < keys; s++) {
                    float e = expf(scale * dot(q, k + (size_t)s * KW, hd) - mx);
                    sum += e;
                    const float *vs = v + (size_t)s * KW;
                    for (int d = 0; d < hd; d++) o[d] += e * vs[d];
                }
                float inv = (float)(1.0 / sum);   /* sum ≥ 1: the max term is exp(0) */
                for (int d = 0; d < hd; d++) o[d] *= inv;
            }
        }
    }
}
