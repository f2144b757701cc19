/*
 * rope.c — rotary position embedding (Llama's RoPE), CPU backend.
 *
 * Applied in place to the query and key heads of the attention input
 * qkv[B, T, (NH + 2·NKV)·hd] (NH query heads, then NKV key heads, then NKV
 * value heads; values are not rotated). Hugging Face Llama pairs element i
 * of a head with element i + hd/2 ("rotate half"), so each pair turns by
 * the angle of frequency i at position t:
 *   x'[i]        = x[i] · c − x[i + hd/2] · s
 *   x'[i + hd/2] = x[i + hd/2] · c + x[i] · s
 * with c, s read from the table lib/model.h's hy_rope_table builds (per
 * position hd/2 cosines, then hd/2 sines). A rotation's inverse is its
 * transpose, the rotation by −angle: the backward of the forward above,
 * applied to d(q) and d(k), is the same loop with s negated.
 */
#include "ops.h"

void hy_cpu_rope(float *qkv, const float *cs, int B, int T, int NH, int NKV, int hd,
                 int inverse) {
    int half = hd / 2, heads = NH + NKV;   /* the rotated heads: q and k */
    size_t row = (size_t)(NH + 2 * NKV) * hd;
    float sign = inverse ? -1.0f : 1.0f;
    for (int b = 0; b < B; b++) {
        for (int t = 0; t < T; t++) {
            float *x = qkv + ((size_t)b * T + t) * row;
            const float *c = cs + (size_t)t * hd, *s = c + half;
            for (int h = 0; h < heads; h++, x += hd) {
                for (int i = 0; i < half; i++) {
                    float x0 = x[i], x1 = x[i + half], si = sign * s[i];
                    x[i] = x0 * c[i] - x1 * si;
                    x[i + half] = x1 * c[i] + x0 * si;
                }
            }
        }
    }
}
