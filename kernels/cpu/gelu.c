/*
 * gelu.c — GELU, elementwise, CPU backend: the tanh approximation (GPT-2's
 * "gelu_new", and pre-LN BERT's) or the exact erf one (Hugging Face BERT's
 * "gelu"), by kind (backend.h's hy_gelu_kind; ops.h gives both).
 *
 * The tanh approximation:
 *
 *   u = sqrt(2/π) · (x + 0.044715 x³)
 *   out = ½ x (1 + tanh u)
 *   d out/dx = ½ (1 + tanh u) + ½ x (1 − tanh² u) · sqrt(2/π) (1 + 3·0.044715 x²)
 *   backward: dinp += dout · d out/dx   (accumulates, like every backward)
 *
 * Computed through the logistic function, ½ (1 + tanh u) = σ(2u) =
 * 1 / (1 + e^(−2u)), and 1 − tanh² u = 4 σ (1 − σ): one expf per element
 * instead of tanhf, which dominated a CPU training step. It saturates
 * cleanly: for u → −∞ e^(−2u) overflows to inf and σ = 1/inf = 0, for
 * u → +∞ σ → 1, so out → −0 or x and the slope → 0 or 1, never NaN.
 */
#include <math.h>

#include "backend.h"
#include "ops.h"

#define GELU_SCALE 0.7978845608028654f /* sqrt(2/π) */
#define GELU_CUBE 0.044715f

static inline float gelu_sigma(float x) {
    float u = GELU_SCALE * (x + GELU_CUBE * x * x * x);
    return 1.0f / (1.0f + expf(-2.0f * u));
}

#define GELU_RSQRT2 0.7071067811865476   /* 1/√2 */
#define GELU_RSQRT2PI 0.3989422804014327 /* 1/√(2π) */

/* Φ(x) = ½ (1 + erf(x/√2)), in double so the erf path matches PyTorch's
 * fp32 erf to the last bit or one. */
static inline double gelu_phi(double x) { return 0.5 * (1.0 + erf(x * GELU_RSQRT2)); }

void hy_cpu_gelu_forward(float *out, const float *inp, size_t n, int kind) {
    if (kind == HY_GELU_ERF) {
        for (size_t i = 0; i < n; i++) out[i] = (float)(inp[i] * gelu_phi(inp[i]));
        return;
    }
    for (size_t i = 0; i < n; i++) out[i] = inp[i] * gelu_sigma(inp[i]);
}

void hy_cpu_gelu_backward(float *dinp, const float *dout, const float *inp, size_t n, int kind) {
    if (kind == HY_GELU_ERF) {
        for (size_t i = 0; i < n; i++) {
            double x = inp[i];
            dinp[i] += dout[i] * (float)(gelu_phi(x) + x * GELU_RSQRT2PI * exp(-0.5 * x * x));
        }
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float x = inp[i], sg = gelu_sigma(x);
        float slope = sg + 2.0f * x * sg * (1.0f - sg) * GELU_SCALE * (1.0f + 3.0f * GELU_CUBE * x * x);
        dinp[i] += dout[i] * slope;
    }
}
