/*
 * adamw.c — the optimizer step and the global-norm helpers that precede
 * it, CPU backend.
 *
 * AdamW (Loshchilov & Hutter; PyTorch's torch.optim.AdamW), per element,
 * with t = hp->step ≥ 1:
 *   m ← β1 m + (1−β1) g,   v ← β2 v + (1−β2) g²
 *   m̂ = m / (1 − β1^t),    v̂ = v / (1 − β2^t)
 *   p ← p − lr · (m̂ / (sqrt(v̂) + eps) + λ p),   λ = decay ? weight_decay : 0
 * The decay term uses p before this step's update, as PyTorch's
 * p.mul_(1 − lr·λ) does. Every step-varying value (lr, t) is read through
 * the hp pointer at call time, as the CUDA backend's replayed graph reads
 * them from memory; decay is a per-call constant (it belongs to the tensor,
 * not to the step). The bias corrections are computed in double once per
 * call: 1 − β2^t for β2 = 0.999 and small t is a difference of nearly equal
 * numbers.
 *
 * Gradient clipping by global norm, as the runtime composes it:
 *   sumsq = Σ over all gradients of g²   (hy_cpu_sumsq, accumulating)
 *   f = hy_cpu_clip_factor(sumsq, max_norm) = min(1, max_norm / (norm + 1e-6))
 *   AdamW on f · g                       (the scale fused into the update)
 */
#include <math.h>

#include "ops.h"

void hy_cpu_adamw_update(float *param, const float *grad, float *m, float *v,
                         size_t n, const hy_cpu_adamw_params *hp, float scale, int decay) {
    float lr = hp->lr, b1 = hp->beta1, b2 = hp->beta2, eps = hp->eps;
    float wd = decay ? hp->weight_decay : 0.0f;
    float bc1 = (float)(1.0 - pow((double)b1, hp->step));
    float bc2 = (float)(1.0 - pow((double)b2, hp->step));
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * scale;
        float mi = b1 * m[i] + (1.0f - b1) * g;
        float vi = b2 * v[i] + (1.0f - b2) * g * g;
        m[i] = mi;
        v[i] = vi;
        float mhat = mi / bc1, vhat = vi / bc2;
        param[i] -= lr * (mhat / (sqrtf(vhat) + eps) + wd * param[i]);
    }
}

void hy_cpu_sumsq(double *acc, const float *x, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    *acc += s;
}

float hy_cpu_clip_factor(double sumsq, float max_norm) {
    if (!isfinite(sumsq)) return NAN;
    if (max_norm <= 0.0f) return 1.0f;
    /* PyTorch's clip_grad_norm_: the coefficient clamped to 1. */
    double f = max_norm / (sqrt(sumsq) + 1e-6);
    return f < 1.0 ? (float)f : 1.0f;
}
