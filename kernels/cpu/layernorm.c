/*
 * layernorm.c — LayerNorm over the last dimension, the residual add, and
 * the two fused, for the CPU backend (llm.c keeps these together too: the
 * pre-LN block's residual stream feeds straight into the next LayerNorm).
 *
 * LayerNorm of row x (length C), eps given (GPT-2: HY_LAYERNORM_EPS = 1e-5):
 *   mean = (1/C) Σ x_i,  rstd = 1/sqrt((1/C) Σ (x_i − mean)² + eps)
 *   xhat_i = (x_i − mean) · rstd,  out_i = xhat_i · w_i + b_i
 * Backward, with g_i = dout_i · w_i:
 *   dx_i += rstd · (g_i − mean(g) − xhat_i · mean(g ⊙ xhat))
 *   dw_i += Σ_rows dout_i · xhat_i,  db_i += Σ_rows dout_i
 * Row statistics are accumulated in double: it costs nothing here (a
 * reduction does not vectorize without -ffast-math anyway) and it keeps the
 * variance free of cancellation even for rows with a large common offset.
 * The variance is two-pass (about the mean), never E[x²] − mean².
 *
 * Residual: out = a + b; backward da += dout, db += dout.
 *
 * RMSNorm (Llama) is LayerNorm without the mean and the bias, so it sits
 * here too: rstd = 1/sqrt((1/C) Σ x_i² + eps), out_i = x_i · rstd · w_i;
 * backward with g_i = dout_i · w_i and xhat_i = x_i · rstd:
 *   dx_i += rstd · (g_i − xhat_i · mean(g ⊙ xhat)),  dw_i += Σ_rows dout_i · xhat_i
 * (LayerNorm's backward with mean(g) dropped: no mean was subtracted).
 */
#include <math.h>

#include "ops.h"

// ----------------------------------------------------------------------------
// LayerNorm

/* Normalizes one row: writes out, *mean and *rstd. Shared by the plain and
 * the fused forward so the two give bit-identical results. */
static void layernorm_row(float *out, float *mean, float *rstd, const float *x,
                          const float *weight, const float *bias, int C, float eps) {
    double sum = 0.0;
    for (int i = 0; i < C; i++) sum += x[i];
    double mu = sum / C;
    double sq = 0.0;
    for (int i = 0; i < C; i++) {
        double d = x[i] - mu;
        sq += d * d;
    }
    double rs = 1.0 / sqrt(sq / C + (double)eps);
    float m = (float)mu, r = (float)rs;
    for (int i = 0; i < C; i++) out[i] = (x[i] - m) * r * weight[i] + bias[i];
    *mean = m;
    *rstd = r;
}

void hy_cpu_layernorm_forward(float *out, float *mean, float *rstd,
                              const float *inp, const float *weight, const float *bias,
                              int N, int C, float eps) {
    for (int n = 0; n < N; n++) {
        size_t off = (size_t)n * C;
        layernorm_row(out + off, mean + n, rstd + n, inp + off, weight, bias, C, eps);
    }
}

void hy_cpu_layernorm_backward(float *dinp, float *dweight, float *dbias,
                               const float *dout, const float *inp, const float *weight,
                               const float *mean, const float *rstd, int N, int C) {
    for (int n = 0; n < N; n++) {
        size_t off = (size_t)n * C;
        const float *x = inp + off, *dy = dout + off;
        float m = mean[n], r = rstd[n];

        /* The two row means the input gradient needs (in double, as above). */
        double sum_g = 0.0, sum_gx = 0.0;
        for (int i = 0; i < C; i++) {
            float xhat = (x[i] - m) * r;
            float g = dy[i] * weight[i];
            sum_g += g;
            sum_gx += (double)g * xhat;
        }
        float mean_g = (float)(sum_g / C), mean_gx = (float)(sum_gx / C);

        for (int i = 0; i < C; i++) {
            float xhat = (x[i] - m) * r;
            if (dbias != NULL) dbias[i] += dy[i];
            if (dweight != NULL) dweight[i] += dy[i] * xhat;
            if (dinp != NULL)
                dinp[off + i] += r * (dy[i] * weight[i] - mean_g - xhat * mean_gx);
        }
    }
}

// ----------------------------------------------------------------------------
// Residual add, and residual add fused with the LayerNorm that reads it

void hy_cpu_residual_forward(float *out, const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

void hy_cpu_residual_backward(float *da, float *db, const float *dout, size_t n) {
    if (da != NULL)
        for (size_t i = 0; i < n; i++) da[i] += dout[i];
    if (db != NULL)
        for (size_t i = 0; i < n; i++) db[i] += dout[i];
}

void hy_cpu_residual_layernorm_forward(float *residual, float *out, float *mean, float *rstd,
                                       const float *a, const float *b,
                                       const float *weight, const float *bias,
                                       int N, int C) {
    /* Row at a time: the row just summed is still in cache when the
     * LayerNorm reads it back. */
    for (int n = 0; n < N; n++) {
        size_t off = (size_t)n * C;
        hy_cpu_residual_forward(residual + off, a + off, b + off, (size_t)C);
        layernorm_row(out + off, mean + n, rstd + n, residual + off, weight, bias, C,
                      HY_LAYERNORM_EPS);
    }
}

// ----------------------------------------------------------------------------
// RMSNorm

void hy_cpu_rmsnorm_forward(float *out, float *rstd, const float *inp, const float *weight,
                            int N, int C, float eps) {
    for (int n = 0; n < N; n++) {
        size_t off = (size_t)n * C;
        const float *x = inp + off;
        double sq = 0.0;   /* in double, as LayerNorm's statistics */
        for (int i = 0; i < C; i++) sq += (double)x[i] * x[i];
        float r = (float)(1.0 / sqrt(sq / C + (double)eps));
        for (int i = 0; i < C; i++) out[off + i] = x[i] * r * weight[i];
        rstd[n] = r;
    }
}

void hy_cpu_rmsnorm_backward(float *dinp, float *dweight, const float *dout, const float *inp,
                             const float *weight, const float *rstd, int N, int C) {
    for (int n = 0; n < N; n++) {
        size_t off = (size_t)n * C;
        const float *x = inp + off, *dy = dout + off;
        float r = rstd[n];
        double sum_gx = 0.0;
        if (dinp != NULL)
            for (int i = 0; i < C; i++) sum_gx += (double)(dy[i] * weight[i]) * (x[i] * r);
        float mean_gx = (float)(sum_gx / C);
        for (int i = 0; i < C; i++) {
            float xhat = x[i] * r;
            if (dweight != NULL) dweight[i] += dy[i] * xhat;
            if (dinp != NULL) dinp[off + i] += r * (dy[i] * weight[i] - xhat * mean_gx);
        }
    }
}
