/*
 * swiglu.c — SwiGLU, the gated activation of Llama's MLP, CPU backend.
 *
 * One fused up-projection feeds it: inp[N, 2F] holds per row the gate
 * (columns 0..F−1, Hugging Face's gate_proj) then the up values (F..2F−1,
 * up_proj), so the MLP's two input GEMMs are one.
 *   silu(g) = g · σ(g),  σ(g) = 1 / (1 + e^−g)
 *   forward   out[n,i] = silu(gate[n,i]) · up[n,i]
 *   backward  dgate += dout · up · σ · (1 + gate · (1 − σ))
 *             dup   += dout · silu(gate)           (into dinp [N, 2F])
 * σ saturates cleanly: for g → −∞ e^−g overflows to inf and σ = 0, so the
 * output and both gradients go to 0 (−0), never NaN.
 */
#include <math.h>

#include "ops.h"

static inline float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

void hy_cpu_swiglu_forward(float *out, const float *inp, int N, int F) {
    for (int n = 0; n < N; n++) {
        const float *gate = inp + (size_t)n * 2 * F, *up = gate + F;
        float *o = out + (size_t)n * F;
        for (int i = 0; i < F; i++) o[i] = gate[i] * sigmoid(gate[i]) * up[i];
    }
}

void hy_cpu_swiglu_backward(float *dinp, const float *dout, const float *inp, int N, int F) {
    for (int n = 0; n < N; n++) {
        const float *gate = inp + (size_t)n * 2 * F, *up = gate + F;
        const float *dy = dout + (size_t)n * F;
        float *dgate = dinp + (size_t)n * 2 * F, *dup = dgate + F;
        for (int i = 0; i < F; i++) {
            float g = gate[i], sg = sigmoid(g);
            dgate[i] += dy[i] * up[i] * sg * (1.0f + g * (1.0f - sg));
            dup[i] += dy[i] * g * sg;
        }
    }
}
