/*
 * classifier.c — fused softmax + cross-entropy + its gradient, CPU backend:
 * the end of the model, where logits become a loss and the backward begins.
 *
 * For each row n of logits[N, Vp] (V real columns, Vp − V padding) with
 * target y = targets[n] ≠ −1, and count = the number of such rows:
 *   mx      = max_i z_i                      (z = logits[n, :V])
 *   e_i     = exp(z_i − mx),  sum = Σ_i e_i  (sum ≥ 1, never overflows)
 *   loss_n  = log(sum) + mx − z_y            (= logsumexp(z) − z_y)
 *   z_i    ← g · (e_i / sum − [i = y]),  g = grad_scale / count
 * Rows with y = −1 and the padding columns are overwritten with 0. The
 * mean loss is Σ loss_n / count. So logits ends up holding
 * d(grad_scale · mean loss)/d logits, ready for hy_cpu_lm_head_backward.
 * A row is a hit when its first maximum is at y (found in the max sweep).
 *
 * Each row is swept three times while it is in cache (max; exp, written
 * over z as it is computed, z_y kept aside first; scale into the gradient),
 * so exp runs once per element and no probability buffer exists.
 * Sums are in double: sum has up to V ~ 50k terms, and the loss is a
 * difference of two values of size ~log V that must keep its digits.
 * Targets are checked in a first, cheap sweep (N ints), so that a bad one is
 * reported before anything is written, and so count is known when the
 * gradient is formed.
 */
#include <math.h>
#include <string.h>

#include "ops.h"

int hy_cpu_classifier_forward_backward(float *logits, float *losses, float *mean_loss, int *hits,
                                       const int *targets, int N, int V, int Vp,
                                       float grad_scale) {
    int count = 0, hit = 0;
    for (int n = 0; n < N; n++) {
        int y = targets[n];
        if (y == HY_IGNORE_INDEX) continue;
        if (y < 0 || y >= V) return -1;
        count++;
    }

    double g = count > 0 ? (double)grad_scale / count : 0.0;
    double loss_sum = 0.0;
    for (int n = 0; n < N; n++) {
        float *z = logits + (size_t)n * Vp;
        int y = targets[n];
        if (y == HY_IGNORE_INDEX) {
            memset(z, 0, (size_t)Vp * sizeof *z);
            if (losses != NULL) losses[n] = 0.0f;
            continue;
        }

        float mx = z[0];
        int arg = 0;
        for (int i = 1; i < V; i++)
            if (z[i] > mx) {
                mx = z[i];
                arg = i;
            }
        hit += arg == y;
        float zy = z[y];
        double sum = 0.0;
        for (int i = 0; i < V; i++) {
            z[i] = expf(z[i] - mx);
            sum += z[i];
        }
        double loss = log(sum) + ((double)mx - zy);
        loss_sum += loss;
        if (losses != NULL) losses[n] = (float)loss;

        /* The target's entry is formed in double as (e_y − sum)/sum: e_y/sum
         * is often close to 1, and p − 1 in float would lose its digits. */
        double ey = z[y];
        float gs = (float)(g / sum);
        for (int i = 0; i < V; i++) z[i] *= gs;
        z[y] = (float)(g * ((ey - sum) / sum));
        for (int i = V; i < Vp; i++) z[i] = 0.0f;
    }
    if (mean_loss != NULL) *mean_loss = count > 0 ? (float)(loss_sum / count) : 0.0f;
    if (hits != NULL) *hits = hit;
    return count;
}
