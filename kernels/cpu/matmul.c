/*
 * matmul.c — the CPU backend's dense layers: every GEMM of the model goes
 * through here, to cblas_sgemm (OpenBLAS).
 *
 * Two weight layouts, because the checkpoint format fixes them:
 *   - Conv1D, W[C,OC] ([in, out], Hugging Face GPT-2's c_attn, c_proj,
 *     c_fc), used by hy_cpu_matmul_*:
 *       out[N,OC] = inp[N,C] · W + bias
 *       dinp += dout · Wᵀ,  dW += inpᵀ · dout,  dbias += Σ_rows dout
 *   - the tied LM head, whose weight is the token embedding wte[V,C]
 *     ([out, in]), used by hy_cpu_lm_head_*:
 *       logits[N,V] = inp · wteᵀ
 *       dinp += dlogits · wte,  dwte += dlogitsᵀ · inp
 * Gradients accumulate (beta = 1 in the GEMM) because they sum over
 * micro-batches, and, for the LM head, because wte also receives the
 * embedding's gradient. A NULL gradient pointer skips that product.
 */
#include <cblas.h>

#include "ops.h"

// ----------------------------------------------------------------------------
// Conv1D layout: W is [C, OC]

void hy_cpu_matmul_forward(float *out, const float *inp, const float *weight,
                           const float *bias, int N, int C, int OC) {
    float beta = 0.0f;
    if (bias != NULL) {
        /* Broadcast the bias into out and let the GEMM add onto it: one
         * pass over out instead of a second one after the product. */
        for (int n = 0; n < N; n++) {
            float *row = out + (size_t)n * OC;
            for (int o = 0; o < OC; o++) row[o] = bias[o];
        }
        beta = 1.0f;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, OC, C,
                1.0f, inp, C, weight, OC, beta, out, OC);
}

void hy_cpu_matmul_backward(float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp, const float *weight,
                            int N, int C, int OC) {
    if (dinp != NULL) /* dinp[N,C] += dout[N,OC] · W[C,OC]ᵀ */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, C, OC,
                    1.0f, dout, OC, weight, OC, 1.0f, dinp, C);
    if (dweight != NULL) /* dW[C,OC] += inp[N,C]ᵀ · dout[N,OC] */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, C, OC, N,
                    1.0f, inp, C, dout, OC, 1.0f, dweight, OC);
    if (dbias != NULL) {
        /* Row by row, so the inner loop runs along contiguous memory and
         * vectorizes; each dbias[o] sums N terms in fp32, which is
         * accurate to ~sqrt(N)·2⁻²⁴ relative — ample for a gradient. */
        for (int n = 0; n < N; n++) {
            const float *row = dout + (size_t)n * OC;
            for (int o = 0; o < OC; o++) dbias[o] += row[o];
        }
    }
}

// ----------------------------------------------------------------------------
// Tied LM head: wte is [V, C]

void hy_cpu_lm_head_forward(float *logits, const float *inp, const float *wte,
                            const float *bias, int N, int C, int V) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, V, C,
                1.0f, inp, C, wte, C, 0.0f, logits, V);
    if (bias != NULL)
        for (int n = 0; n < N; n++) {
            float *row = logits + (size_t)n * V;
            for (int v = 0; v < V; v++) row[v] += bias[v];
        }
}

void hy_cpu_lm_head_backward(float *dinp, float *dwte, float *dbias, const float *dlogits,
                             const float *inp, const float *wte, int N, int C, int V) {
    if (dbias != NULL) /* the bias's gradient: the column sums, as matmul_backward's */
        hy_cpu_matmul_backward(NULL, NULL, dbias, dlogits, NULL, NULL, N, 0, V);
    if (dinp != NULL) /* dinp[N,C] += dlogits[N,V] · wte[V,C] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, V,
                    1.0f, dlogits, V, wte, C, 1.0f, dinp, C);
    if (dwte != NULL) /* dwte[V,C] += dlogits[N,V]ᵀ · inp[N,C] */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, V, C, N,
                    1.0f, dlogits, V, inp, C, 1.0f, dwte, C);
}
