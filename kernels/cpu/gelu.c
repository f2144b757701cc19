/*
 * gelu.c — GELU with the tanh approximation (GPT-2's "gelu_new", also what
 * the MLP of the BERT-like model uses here), elementwise, CPU backend.
 *
 *   u = sqrt(2/π) · (x + 0.044715 x³)
 *   out = ½ x (1 + tanh u)
 *   d out/dx = ½ (1 + tanh u) + ½ x (1 − tanh² u) · sqrt(2/π) (1 + 3·0.044715 x²)
 *   backward: dinp += dout · d out/dx   (accumulates, like every backward)
 *
 * tanhf saturates cleanly to ±1 for large |u|: for x → −∞ out → −0 and
 * the slope → 0, for x → +∞ out → x and the slope → 1, with no inf or NaN
 * on the way for any activation a model can hold (writing tanh through exp
 * would overflow once |u| > ~44).
 */
#include <math.h>

#include "ops.h"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/π) */
#define GELU_CUBE 0.044715f

void hy_cpu_gelu_forward(float *out, const float *inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
        out[i] = 0.5f * x * (1.0f + tanhf(u));
    }
}

void hy_cpu_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n) {
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
        float th = tanhf(u);
        float sech2 = 1.0f - th * th;
        float slope = 0.5f * (1.0f + th)
                    + 0.5f * x * sech2 * GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
        dinp[i] += dout[i] * slope;
    }
}
