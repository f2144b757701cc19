/*
 * test_cuda.c — the CUDA backend against the CPU backend.
 *
 * Compiled in every build and run everywhere. Without a GPU (or without
 * the CUDA backend in the build) it checks what a user then sees: the CUDA
 * backend refuses to start with a message that says why, `backend: cuda`
 * is an input error, and `auto` falls back to the CPU. With a GPU:
 *
 *  1. Every math op on the CUDA backend against the same op on the CPU
 *     backend, on random inputs with odd and even shapes. Inputs are bf16
 *     values (rounded on the host), so both backends see identical
 *     numbers and the difference is only the GPU's bf16 outputs and
 *     intermediates. Tolerances, normwise (max |cuda − cpu| / max |cpu|):
 *       - a bf16 output of fp32 arithmetic: one rounding, 2^-9 = 0.2%
 *         relative per element; 1e-2 leaves room for the fp32 sums being
 *         added in another order and for outputs near zero;
 *       - attention: out and its gradients 1e-2 (test_attention says
 *         why);
 *       - fp32 outputs (weight gradients, LayerNorm statistics, the loss,
 *         AdamW's state) of bf16 inputs: only fp32 reordering, 1e-4 (1e-3
 *         for weight gradients summed over a thousand products).
 *     Accumulation (+=) is tested by starting every gradient at random
 *     values, not zero.
 *  2. Training a small GPT (vocabulary 250, padded to 256: the masked
 *     padding logits are on the path): CUDA and CPU losses agree within
 *     2% over 6 steps (bf16 activations move the loss by ~0.1–0.5% per step; 2%
 *     still fails a wrong gradient, which moves it by far more after a
 *     few steps at this learning rate), at P = 1 and with hanayo at P = 2
 *     on one GPU; the final weights agree within 5e-2 normwise (bf16
 *     forward, fp32 master weights: AdamW's first steps move every weight
 *     by ~lr regardless of the gradient's size, so the weights agree far
 *     better than the gradients).
 *  3. Replay = eager on the GPU, bit for bit: the same 4 steps with
 *     graph = true and graph = false leave identical weights and losses
 *     (every kernel is deterministic, kernels.cuh).
 *  4. The opt-in Hopper attention (kernels/cuda/attention_sm90.cu), first:
 *     the backend's attention ops with HY_CUDA_ATTENTION=sm90 against the
 *     CPU backend's and the default kernel's, on grouped-query shapes
 *     (test_attention_sm90 says how); skipped, and counted, on a device
 *     that is not compute capability 9.0. `test_cuda sm90` runs only
 *     this (tools/gpu-check.sh's sm90 section); `test_cuda sm90-workload
 *     SHAPE` compares nothing and only launches both attentions for the
 *     profiler there (sm90_workload).
 *  Without a GPU too: HY_CUDA_ATTENTION's values, as the backend reads
 *     them (test_attention_choice).
 */
#include "backend.h"
#include "backend_test.h"
#include "config.h"
#include "data.h"
#include "model.h"
#include "rng.h"
#include "runtime.h"
#include "sample.h"
#include "train.h"
#include "test.h"
#include "lib/testrun.h"
#include "lib/shard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* bf16 on the host (round to nearest even, as __float2bfloat16 does) */

static uint16_t f2bf(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);   /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float bf2f(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ------------------------------------------------------------------------ */
/* One rank on one backend */

typedef struct {
    hy_backend *be;
    hy_stream *st;
    hy_error err;
} dev;

static int dev_open(dev *d, int cuda) {
    memset(d, 0, sizeof *d);
    int zero = 0;
    int rc = cuda ? hy_backend_cuda_create(&d->be, 1, &zero, 1, 0, 30.0, &d->err)
                  : hy_backend_cpu_create(&d->be, 1, 30.0, &d->err);
    if (!rc) rc = d->be->ops->stream_create(d->be, 0, &d->st, &d->err);
    if (rc) fprintf(stderr, "%s backend: %s\n", cuda ? "cuda" : "cpu", d->err.msg);
    return rc;
}

static void dev_close(dev *d) {
    if (!d->be) return;
    d->be->ops->stream_destroy(d->st);
    d->be->ops->destroy(d->be);
}

static void *dev_alloc(dev *d, size_t bytes) {
    void *p = NULL;
    if (d->be->ops->alloc(d->be, 0, bytes, &p, &d->err) != HY_OK) {
        fprintf(stderr, "alloc: %s\n", d->err.msg);
        exit(2);
    }
    return p;
}

/* n fp32 values into the backend's memory. */
static float *put_f32(dev *d, const float *h, size_t n) {
    float *p = dev_alloc(d, n * sizeof(float));
    CHECK(d->be->ops->upload(d->be, 0, p, h, n * sizeof(float), &d->err) == HY_OK);
    return p;
}

static int *put_int(dev *d, const int *h, size_t n) {
    int *p = dev_alloc(d, n * sizeof(int));
    CHECK(d->be->ops->upload(d->be, 0, p, h, n * sizeof(int), &d->err) == HY_OK);
    return p;
}

/* n values, already bf16-exact, as activations (bf16 or fp32). */
static void *put_act(dev *d, const float *h, size_t n) {
    size_t A = d->be->ops->act_size;
    void *p = dev_alloc(d, n * A);
    if (A == sizeof(float)) {
        CHECK(d->be->ops->upload(d->be, 0, p, h, n * A, &d->err) == HY_OK);
        return p;
    }
    uint16_t *b = malloc(n * sizeof *b);
    for (size_t i = 0; i < n; i++) b[i] = f2bf(h[i]);
    CHECK(d->be->ops->upload(d->be, 0, p, b, n * A, &d->err) == HY_OK);
    free(b);
    return p;
}

static void get_f32(dev *d, float *h, const void *p, size_t n) {
    CHECK(d->be->ops->sync(d->st, &d->err) == HY_OK);
    CHECK(d->be->ops->download(d->be, 0, h, p, n * sizeof(float), &d->err) == HY_OK);
}

static void get_act(dev *d, float *h, const void *p, size_t n) {
    size_t A = d->be->ops->act_size;
    CHECK(d->be->ops->sync(d->st, &d->err) == HY_OK);
    if (A == sizeof(float)) {
        CHECK(d->be->ops->download(d->be, 0, h, p, n * A, &d->err) == HY_OK);
        return;
    }
    uint16_t *b = malloc(n * sizeof *b);
    CHECK(d->be->ops->download(d->be, 0, b, p, n * A, &d->err) == HY_OK);
    for (size_t i = 0; i < n; i++) h[i] = bf2f(b[i]);
    free(b);
}

/* n values of the backend's memory in a new host array (fp32, or
 * activations). */
static float *fetch_f32(dev *d, const void *p, size_t n) {
    float *h = malloc((n ? n : 1) * sizeof(float));
    get_f32(d, h, p, n);
    return h;
}

static float *fetch_act(dev *d, const void *p, size_t n) {
    float *h = malloc((n ? n : 1) * sizeof(float));
    get_act(d, h, p, n);
    return h;
}

/* Random bf16-exact values in [-scale, scale). */
static float *rnd(hy_rng *r, size_t n, float scale) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = bf2f(f2bf((float)(2 * hy_rng_uniform(r) - 1) * scale));
    return x;
}

/* max |a − b| / max |b|, and the check against tol. */
static void compare(const char *what, const float *got, const float *want, size_t n, double tol) {
    double dmax = 0, wmax = 0;
    size_t worst = 0;
    int finite = 1;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!isfinite(got[i])) finite = 0;
        if (d > dmax) { dmax = d; worst = i; }
        wmax = fmax(wmax, fabs((double)want[i]));
    }
    double rel = wmax > 0 ? dmax / wmax : dmax;
    CHECKF(finite && rel <= tol, "%s: normwise error %.3g > %.3g (element %zu: %g vs %g)", what, rel,
           tol, worst, n ? got[worst] : 0.0, n ? want[worst] : 0.0);
}

/* Both backends, side by side: index 0 the CPU, 1 the GPU; 2 the GPU
 * with the opt-in Hopper attention (test_attention_sm90). */
static dev D[3];

#define BOTH for (int k = 0; k < 2; k++)

/* ------------------------------------------------------------------------ */
/* The ops */

static void test_matmul(hy_rng *r, int N, int C, int OC, int bias) {
    float *inp = rnd(r, (size_t)N * C, 1), *w = rnd(r, (size_t)C * OC, 0.5f), *b = rnd(r, OC, 0.5f);
    float *dout = rnd(r, (size_t)N * OC, 1), *dinp0 = rnd(r, (size_t)N * C, 1);
    float *dw0 = rnd(r, (size_t)C * OC, 1), *db0 = rnd(r, OC, 1);
    float *out[2], *dinp[2], *dw[2], *db[2];
    BOTH {
        dev *d = &D[k];
        const hy_backend_ops *o = d->be->ops;
        void *pi = put_act(d, inp, (size_t)N * C), *pw = put_act(d, w, (size_t)C * OC);
        void *pb = bias ? put_act(d, b, OC) : NULL, *po = put_act(d, dout, (size_t)N * OC);
        void *pdo = put_act(d, dout, (size_t)N * OC), *pdi = put_act(d, dinp0, (size_t)N * C);
        float *pdw = put_f32(d, dw0, (size_t)C * OC), *pdb = put_f32(d, db0, OC);
        CHECK(o->matmul_fwd(d->st, po, pi, pw, pb, N, C, OC, &d->err) == HY_OK);
        CHECK(o->matmul_bwd(d->st, pdi, pdw, bias ? pdb : NULL, pdo, pi, pw, N, C, OC, &d->err) == HY_OK);
        out[k] = malloc((size_t)N * OC * sizeof(float));
        dinp[k] = malloc((size_t)N * C * sizeof(float));
        dw[k] = malloc((size_t)C * OC * sizeof(float));
        db[k] = malloc((size_t)OC * sizeof(float));
        get_act(d, out[k], po, (size_t)N * OC);
        get_act(d, dinp[k], pdi, (size_t)N * C);
        get_f32(d, dw[k], pdw, (size_t)C * OC);
        get_f32(d, db[k], pdb, OC);
    }
    char what[96];
    snprintf(what, sizeof what, "matmul N=%d C=%d OC=%d bias=%d", N, C, OC, bias);
    compare(what, out[1], out[0], (size_t)N * OC, 1e-2);
    compare(what, dinp[1], dinp[0], (size_t)N * C, 1e-2);
    compare(what, dw[1], dw[0], (size_t)C * OC, 1e-3);
    compare(what, db[1], db[0], OC, 1e-3);
    /* The two passes of a split backward on the GPU: dinp alone, then the
     * weights alone, give what one call gave (the same kernels). */
    {
        dev *d = &D[1];
        const hy_backend_ops *o = d->be->ops;
        void *pi = put_act(d, inp, (size_t)N * C), *pw = put_act(d, w, (size_t)C * OC);
        void *pdo = put_act(d, dout, (size_t)N * OC), *pdi = put_act(d, dinp0, (size_t)N * C);
        float *pdw = put_f32(d, dw0, (size_t)C * OC), *pdb = put_f32(d, db0, OC);
        CHECK(o->matmul_bwd(d->st, pdi, NULL, NULL, pdo, pi, pw, N, C, OC, &d->err) == HY_OK);
        CHECK(o->matmul_bwd(d->st, NULL, pdw, bias ? pdb : NULL, pdo, pi, pw, N, C, OC, &d->err) == HY_OK);
        size_t most = (size_t)N * C > (size_t)C * OC ? (size_t)N * C : (size_t)C * OC;
        float *two = malloc(most * sizeof(float));
        get_act(d, two, pdi, (size_t)N * C);
        CHECK(memcmp(two, dinp[1], (size_t)N * C * sizeof(float)) == 0);
        get_f32(d, two, pdw, (size_t)C * OC);
        CHECK(memcmp(two, dw[1], (size_t)C * OC * sizeof(float)) == 0);
        free(two);
    }
    BOTH { free(out[k]); free(dinp[k]); free(dw[k]); free(db[k]); }
    free(inp); free(w); free(b); free(dout); free(dinp0); free(dw0); free(db0);
}

/* n NaNs: a buffer an op must write all of before anyone reads it. */
static float *nans(size_t n) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = NAN;
    return x;
}

/* How many of n values differ in their bits. */
static size_t differ(const float *a, const float *b, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return k;
}

/* The MLP's dense layer with its GELU (matmul_gelu_fwd) and the next
 * layer's backward through the GELU (matmul_gelu_bwd), on the GPU against
 * the CPU, which runs the separate ops they replace. Forward: inp [N,C] ·
 * w1 [C,H] + b1 → pre, out = gelu(pre). Backward, with inputs of its own so
 * both backends see the same bf16 numbers: g [N,H] (the GELU's output as
 * the next layer read it), pre2 [N,H] in [-4, 4) (GELU's bend), w2 [H,C],
 * dout [N,C]. Tolerances: out, pre and dpre are bf16 outputs of fp32
 * arithmetic, 1e-2 as everywhere here; where the epilogue computes GELU
 * and its slope from the fp32 accumulator instead of a bf16-rounded
 * product, the GPU is nearer the CPU's fp32, not farther. dw2 and db2
 * (the layer's own gradients, matmul_bwd's kernels) 1e-3 as in
 * test_matmul. dbias_pre is a column sum of dpre over N rows: with the
 * DGELU_BGRAD epilogue it is rounded once to bf16 (2^-9 of each value,
 * normwise at most 2e-3), without it it sums N bf16-rounded values in
 * fp32 (random rounding errors, relative ~2^-9 of the sum): 1e-2 either
 * way. Outputs start as NaN (every element must be written: out, pre,
 * dpre is stored, never added to) and gradients at random values (+=).
 * dbias_pre NULL and dw2, db2 NULL (a split backward's B pass) gives dpre
 * within the same tolerance. The GPU run twice gives the same bits, and
 * the test says whether cuBLASLt's epilogue ran: its results differ from
 * the separate passes' (matmul_fwd then gelu_fwd) in rounding. */
static void test_matmul_gelu(hy_rng *r, int N, int C, int H, int bias) {
    size_t NC = (size_t)N * C, NH = (size_t)N * H, CH = (size_t)C * H;
    float *inp = rnd(r, NC, 1), *w1 = rnd(r, CH, 0.5f), *b1 = rnd(r, H, 0.5f);
    float *g = rnd(r, NH, 1), *pre2 = rnd(r, NH, 4), *w2 = rnd(r, CH, 0.5f), *dout = rnd(r, NC, 1);
    float *dw0 = rnd(r, CH, 1), *db0 = rnd(r, C, 1), *dbp0 = rnd(r, H, 1);
    float *poison = nans(NH);
    float *out[3], *pre[3], *dpre[4], *dw[3], *db[3], *dbp[3];
    for (int k = 0; k < 3; k++) {   /* the CPU, the GPU, the GPU again */
        dev *d = &D[k > 0];
        const hy_backend_ops *o = d->be->ops;
        void *pi = put_act(d, inp, NC), *pw1 = put_act(d, w1, CH), *pb1 = bias ? put_act(d, b1, H) : NULL;
        void *po = put_act(d, poison, NH), *pp = put_act(d, poison, NH);
        void *pg = put_act(d, g, NH), *pp2 = put_act(d, pre2, NH), *pw2 = put_act(d, w2, CH);
        void *pdo = put_act(d, dout, NC), *pdp = put_act(d, poison, NH), *scr = put_act(d, poison, NH);
        float *pdw = put_f32(d, dw0, CH), *pdb = put_f32(d, db0, C), *pdbp = put_f32(d, dbp0, H);
        CHECK(o->matmul_gelu_fwd(d->st, po, pp, pi, pw1, pb1, N, C, H, HY_GELU_TANH, &d->err) == HY_OK);
        CHECK(o->matmul_gelu_bwd(d->st, pdp, bias ? pdbp : NULL, pdw, bias ? pdb : NULL, scr, pdo, pg,
                                 pp2, pw2, N, H, C, HY_GELU_TANH, &d->err) == HY_OK);
        out[k] = fetch_act(d, po, NH);
        pre[k] = fetch_act(d, pp, NH);
        dpre[k] = fetch_act(d, pdp, NH);
        dw[k] = fetch_f32(d, pdw, CH);
        db[k] = fetch_f32(d, pdb, C);
        dbp[k] = fetch_f32(d, pdbp, H);
    }
    char what[96];
    snprintf(what, sizeof what, "matmul_gelu N=%d C=%d H=%d bias=%d", N, C, H, bias);
    compare(what, pre[1], pre[0], NH, 1e-2);
    compare(what, out[1], out[0], NH, 1e-2);
    compare(what, dpre[1], dpre[0], NH, 1e-2);
    compare(what, dw[1], dw[0], CH, 1e-3);
    if (bias) {
        compare(what, db[1], db[0], C, 1e-3);
        compare(what, dbp[1], dbp[0], H, 1e-2);
    }
    CHECKF(differ(out[1], out[2], NH) == 0 && differ(pre[1], pre[2], NH) == 0 &&
           differ(dpre[1], dpre[2], NH) == 0 && differ(dw[1], dw[2], CH) == 0 &&
           differ(dbp[1], dbp[2], H) == 0, "%s: the GPU differs from itself between runs", what);
    {   /* The B pass of a split backward: dpre alone. And the two passes
         * the forward replaces, to say which path ran. */
        dev *d = &D[1];
        const hy_backend_ops *o = d->be->ops;
        void *pi = put_act(d, inp, NC), *pw1 = put_act(d, w1, CH), *pb1 = bias ? put_act(d, b1, H) : NULL;
        void *po = put_act(d, poison, NH), *pp = put_act(d, poison, NH);
        void *pg = put_act(d, g, NH), *pp2 = put_act(d, pre2, NH), *pw2 = put_act(d, w2, CH);
        void *pdo = put_act(d, dout, NC), *pdp = put_act(d, poison, NH), *scr = put_act(d, poison, NH);
        CHECK(o->matmul_gelu_bwd(d->st, pdp, NULL, NULL, NULL, scr, pdo, pg, pp2, pw2, N, H, C,
                                 HY_GELU_TANH, &d->err) == HY_OK);
        dpre[3] = fetch_act(d, pdp, NH);
        compare(what, dpre[3], dpre[0], NH, 1e-2);
        CHECK(o->matmul_fwd(d->st, pp, pi, pw1, pb1, N, C, H, &d->err) == HY_OK);
        CHECK(o->gelu_fwd(d->st, po, pp, NH, HY_GELU_TANH, &d->err) == HY_OK);
        float *two = fetch_act(d, po, NH);
        size_t k = differ(two, out[1], NH);
        printf("cuda: %s: forward %s (%zu of %zu values differ from matmul_fwd + gelu_fwd)\n", what,
               k ? "in the cuBLASLt epilogue" : "as the two passes", k, NH);
        free(two);
        free(dpre[3]);
    }
    for (int k = 0; k < 3; k++) { free(out[k]); free(pre[k]); free(dpre[k]); free(dw[k]); free(db[k]); free(dbp[k]); }
    free(inp); free(w1); free(b1); free(g); free(pre2); free(w2); free(dout);
    free(dw0); free(db0); free(dbp0); free(poison);
}

static void test_lm_head(hy_rng *r, int N, int C, int V) {
    float *inp = rnd(r, (size_t)N * C, 1), *wte = rnd(r, (size_t)V * C, 0.5f);
    float *dl = rnd(r, (size_t)N * V, 1), *dinp0 = rnd(r, (size_t)N * C, 1), *dwte0 = rnd(r, (size_t)V * C, 1);
    float *out[2], *dinp[2], *dwte[2];
    BOTH {
        dev *d = &D[k];
        const hy_backend_ops *o = d->be->ops;
        void *pi = put_act(d, inp, (size_t)N * C), *pw = put_act(d, wte, (size_t)V * C);
        void *pl = put_act(d, dl, (size_t)N * V), *pdl = put_act(d, dl, (size_t)N * V);
        void *pdi = put_act(d, dinp0, (size_t)N * C);
        float *pdw = put_f32(d, dwte0, (size_t)V * C);
        CHECK(o->lm_head_fwd(d->st, pl, pi, pw, NULL, N, C, V, &d->err) == HY_OK);
        CHECK(o->lm_head_bwd(d->st, pdi, pdw, NULL, pdl, pi, pw, N, C, V, &d->err) == HY_OK);
        out[k] = malloc((size_t)N * V * sizeof(float));
        dinp[k] = malloc((size_t)N * C * sizeof(float));
        dwte[k] = malloc((size_t)V * C * sizeof(float));
        get_act(d, out[k], pl, (size_t)N * V);
        get_act(d, dinp[k], pdi, (size_t)N * C);
        get_f32(d, dwte[k], pdw, (size_t)V * C);
    }
    char what[96];
    snprintf(what, sizeof what, "lm_head N=%d C=%d V=%d", N, C, V);
    compare(what, out[1], out[0], (size_t)N * V, 1e-2);
    compare(what, dinp[1], dinp[0], (size_t)N * C, 1e-2);
    compare(what, dwte[1], dwte[0], (size_t)V * C, 1e-3);
    BOTH { free(out[k]); free(dinp[k]); free(dwte[k]); }
    free(inp); free(wte); free(dl); free(dinp0); free(dwte0);
}

static void test_layernorm(hy_rng *r, int N, int C) {
    float *inp = rnd(r, (size_t)N * C, 2), *w = rnd(r, C, 1), *b = rnd(r, C, 1);
    float *dout = rnd(r, (size_t)N * C, 1), *dinp0 = rnd(r, (size_t)N * C, 1);
    float *dw0 = rnd(r, C, 1), *db0 = rnd(r, C, 1);
    float *out[2], *mean[2], *rstd[2], *dinp[2], *dw[2], *db[2];
    BOTH {
        dev *d = &D[k];
        const hy_backend_ops *o = d->be->ops;
        void *pi = put_act(d, inp, (size_t)N * C), *pw = put_act(d, w, C), *pb = put_act(d, b, C);
        void *po = put_act(d, inp, (size_t)N * C), *pdo = put_act(d, dout, (size_t)N * C);
        void *pdi = put_act(d, dinp0, (size_t)N * C);
        float *pdw = put_f32(d, dw0, C), *pdb = put_f32(d, db0, C);
        float *pm = dev_alloc(d, (size_t)N * sizeof(float)), *prs = dev_alloc(d, (size_t)N * sizeof(float));
        CHECK(o->layernorm_fwd(d->st, po, pm, prs, pi, pw, pb, N, C, 1e-5f, &d->err) == HY_OK);
        CHECK(o->layernorm_bwd(d->st, pdi, pdw, pdb, pdo, pi, pw, pm, prs, N, C, &d->err) == HY_OK);
        out[k] = malloc((size_t)N * C * sizeof(float));
        dinp[k] = malloc((size_t)N * C * sizeof(float));
        mean[k] = malloc((size_t)N * sizeof(float));
        rstd[k] = malloc((size_t)N * sizeof(float));
        dw[k] = malloc((size_t)C * sizeof(float));
        db[k] = malloc((size_t)C * sizeof(float));
        get_act(d, out[k], po, (size_t)N * C);
        get_act(d, dinp[k], pdi, (size_t)N * C);
        get_f32(d, mean[k], pm, N);
        get_f32(d, rstd[k], prs, N);
        get_f32(d, dw[k], pdw, C);
        get_f32(d, db[k], pdb, C);
    }
    char what[64];
    snprintf(what, sizeof what, "layernorm N=%d C=%d", N, C);
    compare(what, out[1], out[0], (size_t)N * C, 1e-2);
    compare(what, mean[1], mean[0], N, 1e-4);
    compare(what, rstd[1], rstd[0], N, 1e-4);
    compare(what, dinp[1], dinp[0], (size_t)N * C, 1e-2);
    compare(what, dw[1], dw[0], C, 1e-3);
    compare(what, db[1], db[0], C, 1e-3);
    BOTH { free(out[k]); free(dinp[k]); free(mean[k]); free(rstd[k]); free(dw[k]); free(db[k]); }
    free(inp); free(w); free(b); free(dout); free(dinp0); free(dw0); free(db0);
}

static void test_gelu_add(hy_rng *r, size_t n) {
    float *x = rnd(r, n, 4), *dout = rnd(r, n, 1), *acc0 = rnd(r, n, 1);
    float *out[2], *dinp[2], *sum[2];
    BOTH {
        dev *d = &D[k];
        const hy_backend_ops *o = d->be->ops;
        void *px = put_act(d, x, n), *po = put_act(d, x, n), *pdo = put_act(d, dout, n);
        void *pdi = put_act(d, acc0, n), *pacc = put_act(d, acc0, n);
        CHECK(o->gelu_fwd(d->st, po, px, n, HY_GELU_TANH, &d->err) == HY_OK);
        CHECK(o->gelu_bwd(d->st, pdi, pdo, px, n, HY_GELU_TANH, &d->err) == HY_OK);
        CHECK(o->add(d->st, pacc, px, n, &d->err) == HY_OK);
        out[k] = malloc(n * sizeof(float));
        dinp[k] = malloc(n * sizeof(float));
        sum[k] = malloc(n * sizeof(float));
        get_act(d, out[k], po, n);
        get_act(d, dinp[k], pdi, n);
        get_act(d, sum[k], pacc, n);
    }
    char what[64];
    snprintf(what, sizeof what, "gelu/add n=%zu", n);
    compare(what, out[1], out[0], n, 1e-2);
    compare(what, dinp[1], dinp[0], n, 1e-2);
    compare(what, sum[1], sum[0], n, 1e-2);
    BOTH { free(out[k]); free(dinp[k]); free(sum[k]); }
    free(x); free(dout); free(acc0);
}

/* One forward and backward of attention on d: out, lse (in natural-log
 * units on either backend) and dqkv (which starts at dqkv0, or NULL:
 * zeroed by the backend's zero, which the GPU fuses into the backward)
 * into host arrays. out, lse and (before the zero) dqkv start as NaN, so
 * an element an op leaves unwritten fails the comparison. graph: the
 * three ops recorded into a graph and replayed once, instead of run. */
static void attention_on(dev *d, const float *qkv, const float *dout, const float *dqkv0, int B,
                         int T, int NH, int NKV, int hd, int causal, int graph, float *out,
                         float *lse, float *dqkv) {
    const hy_backend_ops *o = d->be->ops;
    size_t nqkv = (size_t)B * T * (NH + 2 * NKV) * hd, nout = (size_t)B * T * NH * hd;
    size_t nlse = (size_t)B * NH * T;
    float *poison = nans(nqkv > nout ? nqkv : nout);
    void *pq = put_act(d, qkv, nqkv), *po = put_act(d, poison, nout), *pdo = put_act(d, dout, nout);
    float *pl = put_f32(d, poison, nlse);
    void *pdq = put_act(d, dqkv0 ? dqkv0 : poison, nqkv);
    void *scr = dev_alloc(d, o->attention_scratch(B, T, NH, NKV, hd));
    hy_graph *g = NULL;
    int rc = graph ? o->capture_begin(d->st, &d->err) : HY_OK;
    if (!rc) rc = o->attention_fwd(d->st, po, pl, pq, B, T, NH, NKV, hd, causal, &d->err);
    if (!rc && !dqkv0) rc = o->zero(d->st, pdq, nqkv * o->act_size, &d->err);
    if (!rc) rc = o->attention_bwd(d->st, pdq, scr, pdo, pq, po, pl, B, T, NH, NKV, hd, causal,
                                   &d->err);
    if (!rc && graph) rc = o->capture_end(d->st, &g, &d->err);
    if (!rc && graph) rc = o->graph_launch(g, d->st, &d->err);
    CHECKF(rc == HY_OK, "attention%s: %s", graph ? " (graph)" : "", d->err.msg);
    get_act(d, out, po, nout);
    get_f32(d, lse, pl, nlse);
    get_act(d, dqkv, pdq, nqkv);
    if (g) o->graph_destroy(g);
    void *bufs[] = { pq, po, pdo, pl, pdq, scr };
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) o->free_mem(d->be, bufs[i]);
    free(poison);
    /* The GPU's lse is in base 2 (backend.h): L · ln 2 is the natural one. */
    if (o->act_size != sizeof(float))
        for (size_t i = 0; i < nlse; i++) lse[i] *= 0.6931471805599453f;
}

/* The fused attention against the CPU's. out and the gradients 1e-2
 * each: out takes one bf16 rounding of P into the tensor cores and one of
 * itself (2^-9 relative each); the gradients take dS and P into their
 * products rounded to bf16, and the softmax gradient P (dP - D) cancels,
 * which a bit-level emulation of the kernels' roundings put at 2e-3 to
 * 4e-3 of each of dq, dk and dv. lse is fp32 from the same bf16 inputs on
 * both sides: 1e-4. The gradients are compared twice: added to random
 * values (the += of every backward here), and alone, from zero, where no
 * rounding of the larger sum hides them. The GPU run twice gives the same
 * bits. NKV < NH: grouped-query attention, whose dk and dv sum over the
 * group's query heads. */
static void test_attention(hy_rng *r, int B, int T, int NH, int NKV, int hd, int causal) {
    size_t nqkv = (size_t)B * T * (NH + 2 * NKV) * hd, nout = (size_t)B * T * NH * hd;
    size_t nlse = (size_t)B * NH * T;
    float *qkv = rnd(r, nqkv, 1), *dout = rnd(r, nout, 1), *dqkv0 = rnd(r, nqkv, 1);
    float *out[5], *lse[5], *dqkv[5];
    for (int k = 0; k < 5; k++) {   /* cpu, gpu from dqkv0; cpu, gpu, gpu again from zero */
        out[k] = malloc(nout * sizeof(float));
        lse[k] = malloc(nlse * sizeof(float));
        dqkv[k] = malloc(nqkv * sizeof(float));
        attention_on(&D[k == 0 || k == 2 ? 0 : 1], qkv, dout, k < 2 ? dqkv0 : NULL, B, T, NH, NKV,
                     hd, causal, 0, out[k], lse[k], dqkv[k]);
    }
    char what[112];
    snprintf(what, sizeof what, "attention B=%d T=%d NH=%d NKV=%d hd=%d causal=%d", B, T, NH, NKV,
             hd, causal);
    compare(what, out[1], out[0], nout, 1e-2);
    compare(what, lse[1], lse[0], nlse, 1e-4);
    compare(what, dqkv[1], dqkv[0], nqkv, 1e-2);
    compare(what, dqkv[3], dqkv[2], nqkv, 1e-2);
    CHECKF(memcmp(out[3], out[4], nout * sizeof(float)) == 0, "%s: out differs between runs", what);
    CHECKF(memcmp(dqkv[3], dqkv[4], nqkv * sizeof(float)) == 0, "%s: dqkv differs between runs", what);
    for (int k = 0; k < 5; k++) { free(out[k]); free(lse[k]); free(dqkv[k]); }
    free(qkv); free(dout); free(dqkv0);
}

/* Attention over a KV cache: B sequences of T tokens arrive in pieces
 * (the sizes in `pieces`, summing to T: a prefill, then decode steps),
 * each kv_append'ed into a cache of Tmax positions and attended over it;
 * the outputs of every piece, on the GPU, against the CPU's. */
static void test_kvcache(hy_rng *r, int B, const int *pieces, int n_pieces, int Tmax, int NH,
                         int NKV, int hd) {
    int T = 0, W = (NH + 2 * NKV) * hd, C = NH * hd;
    for (int p = 0; p < n_pieces; p++) T += pieces[p];
    size_t ncache = (size_t)B * Tmax * NKV * hd;
    float *qkv = rnd(r, (size_t)B * T * W, 2), *zero = calloc(ncache, sizeof(float));
    float *out[2];
    BOTH {
        dev *d = &D[k];
        const hy_backend_ops *o = d->be->ops;
        void *kc = put_act(d, zero, ncache), *vc = put_act(d, zero, ncache);
        out[k] = malloc(sizeof(float) * B * T * C);
        int t0 = 0;
        for (int p = 0; p < n_pieces; p++) {
            int n = pieces[p];
            float *in = malloc(sizeof(float) * B * n * W), *got = malloc(sizeof(float) * B * n * C);
            for (int b = 0; b < B; b++)
                memcpy(in + (size_t)b * n * W, qkv + ((size_t)b * T + t0) * W,
                       sizeof(float) * n * W);
            void *pin = put_act(d, in, (size_t)B * n * W);
            void *po = dev_alloc(d, (size_t)B * n * C * o->act_size);
            CHECK(o->kv_append(d->st, kc, vc, pin, B, n, t0, Tmax, NH, NKV, hd, &d->err) == HY_OK);
            CHECK(o->attention_cached(d->st, po, pin, kc, vc, B, n, t0, Tmax, NH, NKV, hd,
                                      &d->err) == HY_OK);
            get_act(d, got, po, (size_t)B * n * C);
            for (int b = 0; b < B; b++)
                memcpy(out[k] + ((size_t)b * T + t0) * C, got + (size_t)b * n * C,
                       sizeof(float) * n * C);
            free(in);
            free(got);
            t0 += n;
        }
    }
    char what[96];
    snprintf(what, sizeof what, "kvcache B=%d T=%d Tmax=%d NH=%d NKV=%d hd=%d", B, T, Tmax, NH,
             NKV, hd);
    compare(what, out[1], out[0], (size_t)B * T * C, 1e-2);
    BOTH free(out[k]);
    free(qkv);
    free(zero);
}

/* A sampler (lib/sample.h) on the GPU: its logits after a prefill and
 * each decode step over its cache match the CPU sampler's on the same
 * weights, and a full recompute on the GPU (its flash attention) too. A
 * GPT, and Llamas with grouped-query heads (RoPE at the cache's
 * positions), untied and tied. */
static void test_sampler(const hy_model_shape *given) {
    hy_model_shape shape = *given;
    hy_model m;
    hy_error err;
    if (hy_model_build(&m, &shape, NULL, 1, 1, &err) != HY_OK) {
        CHECKF(0, "%s", err.msg);
        return;
    }
    float *block = malloc(sizeof(float) * m.stage_numel[0]);
    hy_model_init_stage(&m, 0, 9, block);
    for (size_t i = 0; i < m.stage_numel[0]; i++) block[i] *= 5.0f;   /* logits far from flat */
    hy_sampler *sp[2] = { NULL, NULL };
    BOTH CHECKF(hy_sampler_create(&sp[k], D[k].be, &shape, block, &err) == HY_OK, "%s", err.msg);
    if (sp[0] && sp[1]) {
        int seq[40];
        for (int i = 0; i < 40; i++) seq[i] = (i * 37 + 11) % 100;
        float *cached[2], *full = malloc(sizeof(float) * 100);
        BOTH cached[k] = malloc(sizeof(float) * 100);
        for (int n = 9; n <= 40; n++) {
            BOTH CHECK(n == 9 ? hy_sampler_feed(sp[k], seq, 9, cached[k], &err) == HY_OK
                              : hy_sampler_feed(sp[k], &seq[n - 1], 1, cached[k], &err) == HY_OK);
            char what[64];
            snprintf(what, sizeof what, "%s sampler logits at %d tokens",
                     hy_model_name(shape.kind), n);
            compare(what, cached[1], cached[0], 100, 5e-2);
            CHECK(hy_sampler_forward_full(sp[1], seq, n, full, &err) == HY_OK);
            compare(what, cached[1], full, 100, 5e-2);
        }
        BOTH free(cached[k]);
        free(full);
    }
    BOTH hy_sampler_destroy(sp[k]);
    free(block);
    hy_model_free(&m);
}

/* RMSNorm (Llama): the layernorm kernels without mean and bias, so the
 * same tolerances as test_layernorm; then, on the GPU alone, the residual
 * add fused into it (fuse.cu) against the two unfused (a sync between
 * them), bit for bit. */
static void test_rmsnorm(hy_rng *r, int N, int C, float eps) {
    size_t NC = (size_t)N * C;
    float *inp = rnd(r, NC, 2), *w = rnd(r, C, 1), *x = rnd(r, NC, 1);
    float *dout = rnd(r, NC, 1), *dinp0 = rnd(r, NC, 1), *dw0 = rnd(r, C, 1);
    float *out[2], *rstd[2], *dinp[2], *dw[2];
    BOTH {
        dev *d = &D[k];
        const hy_backend_ops *o = d->be->ops;
        void *pi = put_act(d, inp, NC), *pw = put_act(d, w, C), *po = put_act(d, inp, NC);
        void *pdo = put_act(d, dout, NC), *pdi = put_act(d, dinp0, NC);
        float *pdw = put_f32(d, dw0, C), *prs = dev_alloc(d, (size_t)N * sizeof(float));
        CHECK(o->rmsnorm_fwd(d->st, po, prs, pi, pw, N, C, eps, &d->err) == HY_OK);
        CHECK(o->rmsnorm_bwd(d->st, pdi, pdw, pdo, pi, pw, prs, N, C, &d->err) == HY_OK);
        out[k] = fetch_act(d, po, NC);
        rstd[k] = fetch_f32(d, prs, N);
        dinp[k] = fetch_act(d, pdi, NC);
        dw[k] = fetch_f32(d, pdw, C);
    }
    char what[64];
    snprintf(what, sizeof what, "rmsnorm N=%d C=%d", N, C);
    compare(what, out[1], out[0], NC, 1e-2);
    compare(what, rstd[1], rstd[0], N, 1e-4);
    compare(what, dinp[1], dinp[0], NC, 1e-2);
    compare(what, dw[1], dw[0], C, 1e-3);
    BOTH { free(out[k]); free(rstd[k]); free(dinp[k]); free(dw[k]); }

    float *acc[2], *fo[2], *frs[2];
    for (int unfused = 0; unfused < 2; unfused++) {
        dev *d = &D[1];
        const hy_backend_ops *o = d->be->ops;
        void *pacc = put_act(d, inp, NC), *px = put_act(d, x, NC), *pw = put_act(d, w, C);
        void *po = dev_alloc(d, NC * o->act_size);
        float *prs = dev_alloc(d, (size_t)N * sizeof(float));
        CHECK(o->add(d->st, pacc, px, NC, &d->err) == HY_OK);
        if (unfused) CHECK(o->sync(d->st, &d->err) == HY_OK);
        CHECK(o->rmsnorm_fwd(d->st, po, prs, pacc, pw, N, C, eps, &d->err) == HY_OK);
        acc[unfused] = fetch_act(d, pacc, NC);
        fo[unfused] = fetch_act(d, po, NC);
        frs[unfused] = fetch_f32(d, prs, N);
    }
    CHECKF(memcmp(acc[0], acc[1], NC * sizeof(float)) == 0, "%s: fused residual differs", what);
    CHECKF(memcmp(fo[0], fo[1], NC * sizeof(float)) == 0, "%s: fused add+rmsnorm differs", what);
    CHECKF(memcmp(frs[0], frs[1], (size_t)N * sizeof(float)) == 0, "%s: fused rstd differs", what);
    for (int k = 0; k < 2; k++) { free(acc[k]); free(fo[k]); free(frs[k]); }
    free(inp); free(w); free(x); free(dout); free(dinp0); free(dw0);
}

/* SwiGLU: bf16 outputs of fp32 arithmetic, 1e-2 (see the top); the
 * backward added to random values and alone from zero (where the GPU
 * stores instead, fuse.cu). F not a multiple of 8, or a row start off 16
 * bytes, takes the element-wise path. */
static void test_swiglu(hy_rng *r, int N, int F) {
    size_t ni = (size_t)N * 2 * F, no = (size_t)N * F;
    float *inp = rnd(r, ni, 4), *dout = rnd(r, no, 1), *dinp0 = rnd(r, ni, 1);
    float *out[2], *dinp[2], *dalone[2];
    BOTH {
        dev *d = &D[k];
        const hy_backend_ops *o = d->be->ops;
        void *pi = put_act(d, inp, ni), *po = dev_alloc(d, no * o->act_size);
        void *pdo = put_act(d, dout, no), *pdi = put_act(d, dinp0, ni);
        void *pda = dev_alloc(d, ni * o->act_size);
        CHECK(o->swiglu_fwd(d->st, po, pi, N, F, &d->err) == HY_OK);
        CHECK(o->swiglu_bwd(d->st, pdi, pdo, pi, N, F, &d->err) == HY_OK);
        CHECK(o->zero(d->st, pda, ni * o->act_size, &d->err) == HY_OK);
        CHECK(o->swiglu_bwd(d->st, pda, pdo, pi, N, F, &d->err) == HY_OK);
        out[k] = fetch_act(d, po, no);
        dinp[k] = fetch_act(d, pdi, ni);
        dalone[k] = fetch_act(d, pda, ni);
    }
    char what[64];
    snprintf(what, sizeof what, "swiglu N=%d F=%d", N, F);
    compare(what, out[1], out[0], no, 1e-2);
    compare(what, dinp[1], dinp[0], ni, 1e-2);
    compare(what, dalone[1], dalone[0], ni, 1e-2);
    BOTH { free(out[k]); free(dinp[k]); free(dalone[k]); }
    free(inp); free(dout); free(dinp0);
}

/* RoPE in place, forward then inverse, on both: the rotated q and k within
 * bf16's 1e-2 of the CPU's (each output one rounding of fp32 arithmetic on
 * the same table), the value heads untouched to the bit, and the inverse
 * of the forward back at the input within two roundings. The positions
 * start at t0 (a caller passes cs + t0·hd). */
static void test_rope(hy_rng *r, int B, int T, int NH, int NKV, int hd, int t0) {
    size_t row = (size_t)(NH + 2 * NKV) * hd, n = (size_t)B * T * row;
    float *qkv = rnd(r, n, 2), *cs = malloc((size_t)(t0 + T) * hd * sizeof(float));
    hy_rope_table(cs, t0 + T, hd, 500000.0, NULL);
    float *fwd[2], *back[2];
    BOTH {
        dev *d = &D[k];
        const hy_backend_ops *o = d->be->ops;
        void *pq = put_act(d, qkv, n);
        float *pcs = put_f32(d, cs, (size_t)(t0 + T) * hd);
        CHECK(o->rope(d->st, pq, pcs + (size_t)t0 * hd, B, T, NH, NKV, hd, 0, &d->err) == HY_OK);
        fwd[k] = fetch_act(d, pq, n);
        CHECK(o->rope(d->st, pq, pcs + (size_t)t0 * hd, B, T, NH, NKV, hd, 1, &d->err) == HY_OK);
        back[k] = fetch_act(d, pq, n);
    }
    char what[96];
    snprintf(what, sizeof what, "rope B=%d T=%d NH=%d NKV=%d hd=%d t0=%d", B, T, NH, NKV, hd, t0);
    compare(what, fwd[1], fwd[0], n, 1e-2);
    compare(what, back[1], back[0], n, 1e-2);
    compare(what, back[1], qkv, n, 1e-2);
    size_t changed = 0;
    for (size_t bt = 0; bt < (size_t)B * T; bt++)
        for (size_t j = (size_t)(NH + NKV) * hd; j < row; j++) changed += fwd[1][bt * row + j] != qkv[bt * row + j];
    CHECKF(changed == 0, "%s: %zu value-head elements changed", what, changed);
    BOTH { free(fwd[k]); free(back[k]); }
    free(qkv); free(cs);
}

static void test_embedding(hy_rng *r, int B, int T, int C, int V) {
    size_t N = (size_t)B * T;
    int *tok = malloc(N * sizeof(int));
    for (size_t i = 0; i < N; i++) tok[i] = (int)hy_rng_below(r, (uint64_t)(i % 3 ? V : 3));  /* repeats */
    float *wte = rnd(r, (size_t)V * C, 1), *wpe = rnd(r, (size_t)T * C, 1), *dout = rnd(r, N * C, 1);
    float *dwte0 = rnd(r, (size_t)V * C, 1), *dwpe0 = rnd(r, (size_t)T * C, 1);
    float *out[2], *dwte[2], *dwpe[2];
    BOTH {
        dev *d = &D[k];
        const hy_backend_ops *o = d->be->ops;
        int *pt = put_int(d, tok, N);
        void *pwte = put_act(d, wte, (size_t)V * C), *pwpe = put_act(d, wpe, (size_t)T * C);
        void *po = put_act(d, dout, N * C), *pdo = put_act(d, dout, N * C);
        float *pdwte = put_f32(d, dwte0, (size_t)V * C), *pdwpe = put_f32(d, dwpe0, (size_t)T * C);
        CHECK(o->embedding_fwd(d->st, po, pt, pwte, pwpe, NULL, B, T, C, &d->err) == HY_OK);
        CHECK(o->embedding_bwd(d->st, pdwte, pdwpe, pdo, pt, B, T, C, &d->err) == HY_OK);
        out[k] = malloc(N * C * sizeof(float));
        dwte[k] = malloc((size_t)V * C * sizeof(float));
        dwpe[k] = malloc((size_t)T * C * sizeof(float));
        get_act(d, out[k], po, N * C);
        get_f32(d, dwte[k], pdwte, (size_t)V * C);
        get_f32(d, dwpe[k], pdwpe, (size_t)T * C);
    }
    char what[80];
    snprintf(what, sizeof what, "embedding B=%d T=%d C=%d V=%d", B, T, C, V);
    compare(what, out[1], out[0], N * C, 1e-2);
    compare(what, dwte[1], dwte[0], (size_t)V * C, 1e-4);
    compare(what, dwpe[1], dwpe[0], (size_t)T * C, 1e-4);
    BOTH { free(out[k]); free(dwte[k]); free(dwpe[k]); }
    free(tok); free(wte); free(wpe); free(dout); free(dwte0); free(dwpe0);
}

/* Without learned positions (wpe NULL, Llama): each output row is its
 * token's row of wte, to the bit (a bf16 copy), and dwte as with them. */
static void test_embedding_no_wpe(hy_rng *r, int B, int T, int C, int V) {
    size_t N = (size_t)B * T;
    int *tok = malloc(N * sizeof(int));
    for (size_t i = 0; i < N; i++) tok[i] = (int)hy_rng_below(r, (uint64_t)(i % 3 ? V : 3));
    float *wte = rnd(r, (size_t)V * C, 1), *dout = rnd(r, N * C, 1), *dwte0 = rnd(r, (size_t)V * C, 1);
    float *out[2], *dwte[2];
    BOTH {
        dev *d = &D[k];
        const hy_backend_ops *o = d->be->ops;
        int *pt = put_int(d, tok, N);
        void *pwte = put_act(d, wte, (size_t)V * C), *po = dev_alloc(d, N * C * o->act_size);
        void *pdo = put_act(d, dout, N * C);
        float *pdwte = put_f32(d, dwte0, (size_t)V * C);
        CHECK(o->embedding_fwd(d->st, po, pt, pwte, NULL, NULL, B, T, C, &d->err) == HY_OK);
        CHECK(o->embedding_bwd(d->st, pdwte, NULL, pdo, pt, B, T, C, &d->err) == HY_OK);
        out[k] = fetch_act(d, po, N * C);
        dwte[k] = fetch_f32(d, pdwte, (size_t)V * C);
    }
    size_t off = 0;
    for (size_t i = 0; i < N; i++)
        off += memcmp(out[1] + i * C, wte + (size_t)tok[i] * C, (size_t)C * sizeof(float)) != 0;
    CHECKF(off == 0, "embedding without wpe: %zu rows are not their token's wte row", off);
    compare("embedding without wpe: dwte", dwte[1], dwte[0], (size_t)V * C, 1e-4);
    BOTH { free(out[k]); free(dwte[k]); }
    free(tok); free(wte); free(dout); free(dwte0);
}

/* Post-LN BERT's ops against the CPU's: the exact erf GELU (alone, and
 * through matmul_gelu, which takes its two-pass path: cuBLASLt's epilogue
 * is tanh's), the LM head's decoder bias and its gradient (the column sums
 * of dlogits), the embedding's token-type row, and LayerNorm at eps 1e-12
 * on rows of small spread, where the epsilon shows (1e-5 would move rstd
 * by several percent). Tolerances as the ops' own tests. */
static void test_bert_ops(hy_rng *r, int N, int C, int V) {
    size_t NC = (size_t)N * C, NH = (size_t)N * 4 * C, CH = (size_t)C * 4 * C, NV = (size_t)N * V;
    int H = 4 * C, B = 2, T = N / 2;
    float *x = rnd(r, NH, 4), *dg = rnd(r, NH, 1), *inp = rnd(r, NC, 1), *w1 = rnd(r, CH, 0.5f);
    float *b1 = rnd(r, H, 0.5f), *wte = rnd(r, (size_t)V * C, 0.5f), *bias = rnd(r, V, 1);
    float *dl = rnd(r, NV, 1), *dbias0 = rnd(r, V, 1), *wpe = rnd(r, (size_t)T * C, 1);
    float *type = rnd(r, C, 1), *small = rnd(r, NC, 1e-4f), *lw = rnd(r, C, 1), *lb = rnd(r, C, 1);
    int *tok = malloc((size_t)N * sizeof(int));
    for (int i = 0; i < N; i++) tok[i] = (int)hy_rng_below(r, (uint64_t)V);
    float *gout[2], *gd[2], *mgo[2], *mgp[2], *lo[2], *db[2], *eo[2], *no[2], *nr[2];
    BOTH {
        dev *d = &D[k];
        const hy_backend_ops *o = d->be->ops;
        void *px = put_act(d, x, NH), *po = put_act(d, x, NH), *pdg = put_act(d, dg, NH);
        void *pdi = put_act(d, dg, NH);
        CHECK(o->gelu_fwd(d->st, po, px, NH, HY_GELU_ERF, &d->err) == HY_OK);
        CHECK(o->gelu_bwd(d->st, pdi, pdg, px, NH, HY_GELU_ERF, &d->err) == HY_OK);
        gout[k] = fetch_act(d, po, NH);
        gd[k] = fetch_act(d, pdi, NH);
        void *pi = put_act(d, inp, NC), *pw1 = put_act(d, w1, CH), *pb1 = put_act(d, b1, H);
        void *pmo = put_act(d, x, NH), *pmp = put_act(d, x, NH);
        CHECK(o->matmul_gelu_fwd(d->st, pmo, pmp, pi, pw1, pb1, N, C, H, HY_GELU_ERF, &d->err) ==
              HY_OK);
        mgo[k] = fetch_act(d, pmo, NH);
        mgp[k] = fetch_act(d, pmp, NH);
        void *pw = put_act(d, wte, (size_t)V * C), *pbias = put_act(d, bias, V);
        void *pl = put_act(d, dl, NV), *pdl = put_act(d, dl, NV);
        float *pdb = put_f32(d, dbias0, V);
        CHECK(o->lm_head_fwd(d->st, pl, pi, pw, pbias, N, C, V, &d->err) == HY_OK);
        CHECK(o->lm_head_bwd(d->st, NULL, NULL, pdb, pdl, pi, pw, N, C, V, &d->err) == HY_OK);
        lo[k] = fetch_act(d, pl, NV);
        db[k] = fetch_f32(d, pdb, V);
        int *pt = put_int(d, tok, (size_t)N);
        void *pwpe = put_act(d, wpe, (size_t)T * C), *ptype = put_act(d, type, C);
        void *pe = put_act(d, inp, NC);
        CHECK(o->embedding_fwd(d->st, pe, pt, pw, pwpe, ptype, B, T, C, &d->err) == HY_OK);
        eo[k] = fetch_act(d, pe, NC);
        void *ps = put_act(d, small, NC), *pno = put_act(d, small, NC);
        void *plw = put_act(d, lw, C), *plb = put_act(d, lb, C);
        float *pm = dev_alloc(d, (size_t)N * sizeof(float)), *prs = dev_alloc(d, (size_t)N * sizeof(float));
        CHECK(o->layernorm_fwd(d->st, pno, pm, prs, ps, plw, plb, N, C, 1e-12f, &d->err) == HY_OK);
        no[k] = fetch_act(d, pno, NC);
        nr[k] = fetch_f32(d, prs, (size_t)N);
    }
    char what[96];
    snprintf(what, sizeof what, "bert ops N=%d C=%d V=%d", N, C, V);
    compare(what, gout[1], gout[0], NH, 1e-2);
    compare(what, gd[1], gd[0], NH, 1e-2);
    compare(what, mgp[1], mgp[0], NH, 1e-2);
    compare(what, mgo[1], mgo[0], NH, 1e-2);
    compare(what, lo[1], lo[0], NV, 1e-2);
    compare(what, db[1], db[0], V, 1e-2);
    compare(what, eo[1], eo[0], NC, 1e-2);
    compare(what, no[1], no[0], NC, 1e-2);
    compare(what, nr[1], nr[0], N, 1e-2);
    BOTH { free(gout[k]); free(gd[k]); free(mgo[k]); free(mgp[k]); free(lo[k]); free(db[k]);
           free(eo[k]); free(no[k]); free(nr[k]); }
    free(x); free(dg); free(inp); free(w1); free(b1); free(wte); free(bias); free(dl);
    free(dbias0); free(wpe); free(type); free(small); free(lw); free(lb); free(tok);
}

static void test_classifier(hy_rng *r, int N, int V, int Vp) {
    float *logits = rnd(r, (size_t)N * Vp, 4);
    int *tg = malloc((size_t)N * sizeof(int));
    for (int i = 0; i < N; i++) tg[i] = i % 4 == 3 ? -1 : (int)hy_rng_below(r, (uint64_t)V);
    /* Argmax hits with ties (the values are bf16-exact, so both backends
     * see them): row 0 ties its target with a column before it (a miss:
     * the first maximum counts), row 1 with one after it (a hit), row 2's
     * target is the largest alone (a hit). */
    for (int n = 0; n < 3 && n < N && V >= 3; n++) {
        float *z = logits + (size_t)n * Vp;
        tg[n] = n == 0 ? V - 1 : n == 1 ? 0 : V / 2;
        z[tg[n]] = 8.0f;   /* above rnd's range */
        if (n == 0) z[0] = 8.0f;
        if (n == 1) z[V - 1] = 8.0f;
    }
    float *grad[2], loss[2] = { 0, 0 }, hits[2] = { 0, 0 };
    float start = 0.25f, hits0 = 3.0f;
    BOTH {
        dev *d = &D[k];
        const hy_backend_ops *o = d->be->ops;
        void *pl = put_act(d, logits, (size_t)N * Vp);
        int *pt = put_int(d, tg, N);
        float *pacc = put_f32(d, &start, 1), *phits = put_f32(d, &hits0, 1);
        CHECK(o->classifier(d->st, pl, pacc, phits, pt, N, V, Vp, 0.5f, 2.0f, &d->err) == HY_OK);
        grad[k] = malloc((size_t)N * Vp * sizeof(float));
        get_act(d, grad[k], pl, (size_t)N * Vp);
        get_f32(d, &loss[k], pacc, 1);
        get_f32(d, &hits[k], phits, 1);
    }
    char what[64];
    snprintf(what, sizeof what, "classifier N=%d V=%d Vp=%d", N, V, Vp);
    compare(what, grad[1], grad[0], (size_t)N * Vp, 1e-2);
    compare(what, &loss[1], &loss[0], 1, 1e-4);
    /* The same hits exactly: one count, added to what was there. */
    CHECKF(hits[1] == hits[0] && hits[0] >= hits0 + (N >= 3 && V >= 3 ? 2 : 0),
           "%s: argmax hits %g on the GPU, %g on the CPU", what, (double)hits[1], (double)hits[0]);
    size_t pad = 0;
    for (int n = 0; n < N; n++)
        for (int v = V; v < Vp; v++) pad += grad[1][(size_t)n * Vp + v] != 0.0f;
    CHECKF(pad == 0, "%s: %zu padding gradients are not 0", what, pad);
    BOTH free(grad[k]);
    free(logits); free(tg);
}

/* AdamW, the norm and the clip factor, and the compute copy. */
static void test_optimizer(hy_rng *r, size_t n) {
    float *p0 = rnd(r, n, 1), *g = rnd(r, n, 1), *m0 = rnd(r, n, 0.1f), *v0 = rnd(r, n, 0.01f);
    for (size_t i = 0; i < n; i++) v0[i] = fabsf(v0[i]);
    hy_adamw_hparams hp = { 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 7 };
    float *p[2], *m[2], *v[2], *wc = malloc(n * sizeof(float)), norm[2], factor[2];
    double sumsq[2];
    BOTH {
        dev *d = &D[k];
        const hy_backend_ops *o = d->be->ops;
        float *pp = put_f32(d, p0, n), *pg = put_f32(d, g, n), *pm = put_f32(d, m0, n);
        float *pv = put_f32(d, v0, n);
        hy_adamw_hparams *php = dev_alloc(d, sizeof hp);
        CHECK(o->upload(d->be, 0, php, &hp, sizeof hp, &d->err) == HY_OK);
        double *part = dev_alloc(d, 2 * sizeof(double));
        float *pf = dev_alloc(d, 2 * sizeof(float));
        void *pc = o->act_size == sizeof(float) ? NULL : dev_alloc(d, n * o->act_size);
        CHECK(o->zero(d->st, part, 2 * sizeof(double), &d->err) == HY_OK);
        CHECK(o->sumsq(d->st, part, pg, n, &d->err) == HY_OK);
        CHECK(o->sumsq(d->st, part, pg, n / 2, &d->err) == HY_OK);   /* accumulates */
        CHECK(o->clip(d->st, pf, pf + 1, part, 2, 1.0f, &d->err) == HY_OK);
        CHECK(o->adamw(d->st, pp, pc, pg, pm, pv, n, php, pf, 1, &d->err) == HY_OK);
        p[k] = malloc(n * sizeof(float));
        m[k] = malloc(n * sizeof(float));
        v[k] = malloc(n * sizeof(float));
        get_f32(d, p[k], pp, n);
        get_f32(d, m[k], pm, n);
        get_f32(d, v[k], pv, n);
        get_f32(d, &factor[k], pf, 1);
        get_f32(d, &norm[k], pf + 1, 1);
        CHECK(o->download(d->be, 0, &sumsq[k], part, sizeof(double), &d->err) == HY_OK);
        if (pc) get_act(d, wc, pc, n);
    }
    CHECKF(fabs(sumsq[1] - sumsq[0]) <= 1e-12 * sumsq[0], "sumsq %.17g vs %.17g", sumsq[1], sumsq[0]);
    compare("clip factor", &factor[1], &factor[0], 1, 1e-6);
    compare("norm", &norm[1], &norm[0], 1, 1e-6);
    compare("adamw param", p[1], p[0], n, 1e-5);
    compare("adamw m", m[1], m[0], n, 1e-5);
    compare("adamw v", v[1], v[0], n, 1e-5);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) off += bf2f(f2bf(p[1][i])) != wc[i];
    CHECKF(off == 0, "adamw: %zu compute-copy values are not the bf16 of the new weights", off);
    BOTH { free(p[k]); free(m[k]); free(v[k]); }
    free(p0); free(g); free(m0); free(v0); free(wc);
}

/* The fused paths of the GPU (kernels/cuda/fuse.cu): an op that adds
 * into a buffer zeroed just before stores instead (matmul_bwd's and
 * lm_head_bwd's dinp, gelu_bwd; attention_bwd in test_attention), add then
 * layernorm_fwd of the same buffer is one kernel, consecutive adamw calls
 * are one launch. Run three ways: the CPU, the GPU as the runtime calls
 * it (fused), and the GPU with a sync after every call, which flushes
 * each op on its own (unfused). Fused against the CPU within the
 * tolerances above (1e-2 for bf16 outputs, 1e-4 for the statistics, 1e-5
 * for AdamW); fused against unfused bit for bit where the fused kernel
 * rounds exactly as the separate ones (the residual and its LayerNorm,
 * AdamW). */
#define FUSED_TENSORS 8
static void test_fused(hy_rng *r, int N, int C) {
    /* AdamW's tensors; a gap of 16 before the last two makes them a
     * second block. */
    const size_t sizes[FUSED_TENSORS] = { 1, 7, 1000, 33, 4096, 5, 640, 3 }, gap = 16;
    /* w is both a layer's weight [C, 4C] and an LM head's wte [4C, C]. */
    size_t NC = (size_t)N * C, WC = 4 * (size_t)C * C, n = gap;
    for (int i = 0; i < FUSED_TENSORS; i++) n += sizes[i];
    float *a = rnd(r, 4 * NC, 1), *b = rnd(r, 4 * NC, 1), *w = rnd(r, WC, 0.5f), *x = rnd(r, NC, 1);
    float *lw = rnd(r, C, 1), *lb = rnd(r, C, 1);
    float *p0 = rnd(r, n, 1), *g0 = rnd(r, n, 1), *m0 = rnd(r, n, 0.1f), *v0 = rnd(r, n, 0.01f);
    for (size_t i = 0; i < n; i++) v0[i] = fabsf(v0[i]);
    hy_adamw_hparams hp = { 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 3 };
    float half = 0.5f;
    float *got[3][8];
    for (int k = 0; k < 3; k++) {
        dev *d = &D[k > 0];
        const hy_backend_ops *o = d->be->ops;
        int unfused = k == 2;
        void *pa = put_act(d, a, 4 * NC), *pb = put_act(d, b, 4 * NC), *pw = put_act(d, w, WC);
        void *d1 = put_act(d, x, NC), *d2 = put_act(d, a, 4 * NC), *d3 = put_act(d, x, NC);
        void *acc = put_act(d, x, NC), *lout = put_act(d, x, NC);
        void *plw = put_act(d, lw, C), *plb = put_act(d, lb, C);
        float *mean = dev_alloc(d, N * sizeof(float)), *rstd = dev_alloc(d, N * sizeof(float));
        float *pp = put_f32(d, p0, n), *pg = put_f32(d, g0, n), *pm = put_f32(d, m0, n);
        float *pv = put_f32(d, v0, n), *pf = put_f32(d, &half, 1);
        void *pc = o->act_size == sizeof(float) ? NULL : dev_alloc(d, n * o->act_size);
        hy_adamw_hparams *php = dev_alloc(d, sizeof hp);
        CHECK(o->upload(d->be, 0, php, &hp, sizeof hp, &d->err) == HY_OK);
#define FUSED_STEP(call) do { CHECK((call) == HY_OK); if (unfused) CHECK(o->sync(d->st, &d->err) == HY_OK); } while (0)
        FUSED_STEP(o->zero(d->st, d1, NC * o->act_size, &d->err));
        FUSED_STEP(o->matmul_bwd(d->st, d1, NULL, NULL, pb, pa, pw, N, C, 4 * C, &d->err));
        FUSED_STEP(o->zero(d->st, d2, 4 * NC * o->act_size, &d->err));
        FUSED_STEP(o->gelu_bwd(d->st, d2, pb, pa, 4 * NC, HY_GELU_TANH, &d->err));
        FUSED_STEP(o->zero(d->st, d3, NC * o->act_size, &d->err));
        FUSED_STEP(o->lm_head_bwd(d->st, d3, NULL, NULL, pb, pa, pw, N, C, 4 * C, &d->err));
        FUSED_STEP(o->add(d->st, acc, pa, NC, &d->err));
        FUSED_STEP(o->layernorm_fwd(d->st, lout, mean, rstd, acc, plw, plb, N, C, 1e-5f, &d->err));
        size_t at = 0;
        for (int i = 0; i < FUSED_TENSORS; i++) {
            size_t off = at + (i >= FUSED_TENSORS - 2 ? gap : 0);
            void *c = pc ? (char *)pc + off * o->act_size : NULL;
            FUSED_STEP(o->adamw(d->st, pp + off, c, pg + off, pm + off, pv + off, sizes[i], php, pf,
                                i % 2, &d->err));
            at += sizes[i];
        }
#undef FUSED_STEP
        size_t len[8] = { NC, 4 * NC, NC, NC, NC, (size_t)N, (size_t)N, n };
        for (int j = 0; j < 8; j++) got[k][j] = malloc(len[j] * sizeof(float));
        get_act(d, got[k][0], d1, NC);
        get_act(d, got[k][1], d2, 4 * NC);
        get_act(d, got[k][2], d3, NC);
        get_act(d, got[k][3], acc, NC);
        get_act(d, got[k][4], lout, NC);
        get_f32(d, got[k][5], mean, N);
        get_f32(d, got[k][6], rstd, N);
        get_f32(d, got[k][7], pp, n);
    }
    char what[64];
    snprintf(what, sizeof what, "fused ops N=%d C=%d", N, C);
    compare(what, got[1][0], got[0][0], NC, 1e-2);
    compare(what, got[1][1], got[0][1], 4 * NC, 1e-2);
    compare(what, got[1][2], got[0][2], NC, 1e-2);
    compare(what, got[1][3], got[0][3], NC, 1e-2);
    compare(what, got[1][4], got[0][4], NC, 1e-2);
    /* The residual sum is rounded to bf16 on the GPU before it is
     * normalised and kept exact in fp32 on the CPU, so the statistics
     * differ by that rounding (2^-9 of each element, partly cancelling in
     * the mean): bf16's tolerance, not fp32's. */
    compare(what, got[1][5], got[0][5], N, 1e-2);
    compare(what, got[1][6], got[0][6], N, 1e-2);
    compare(what, got[1][7], got[0][7], n, 1e-5);
    static const char *const same[] = { "residual", "layernorm out", "mean", "rstd", "adamw" };
    size_t len[5] = { NC, NC, (size_t)N, (size_t)N, n };
    for (int j = 0; j < 5; j++)
        CHECKF(memcmp(got[1][3 + j], got[2][3 + j], len[j] * sizeof(float)) == 0,
               "%s: %s fused differs from unfused", what, same[j]);
    for (int k = 0; k < 3; k++)
        for (int j = 0; j < 8; j++) free(got[k][j]);
    free(a); free(b); free(w); free(x); free(lw); free(lb); free(p0); free(g0); free(m0); free(v0);
}

/* AdamW over more tensors than one launch took before (300, where the old
 * batch held 256), with a model's pattern of sizes and weight decay
 * (matrices decayed, vectors not, odd lengths), in three blocks: the
 * first starting 16-byte aligned, the second 1 float off (every access
 * element by element), the third after a gap. Against the CPU within
 * 1e-5 as test_optimizer; the GPU now rounds every step as the CPU does,
 * so most values should agree to the bit (only the bias corrections' pow
 * may differ in the last place), which the test reports. The compute
 * copy is the bf16 of the new weights exactly, and the batched launch
 * (the calls in a row, fuse.cu) equals one launch per call (a sync after
 * each) bit for bit. */
#define ADAMW_MANY 300
static void test_adamw_many(hy_rng *r) {
    size_t sizes[ADAMW_MANY], offs[ADAMW_MANY], n = 0;
    int decay[ADAMW_MANY];
    for (int i = 0; i < ADAMW_MANY; i++) {
        int matrix = i % 4 == 1 || i % 4 == 3;
        sizes[i] = matrix ? 64 + hy_rng_below(r, 4000) : 1 + hy_rng_below(r, 70);
        decay[i] = matrix;
        if (i == 100) n += 1;     /* the second block: one float off */
        if (i == 200) n += 37;    /* the third */
        offs[i] = n;
        n += sizes[i];
    }
    float *p0 = rnd(r, n, 1), *g = rnd(r, n, 1), *m0 = rnd(r, n, 0.1f), *v0 = rnd(r, n, 0.01f);
    for (size_t i = 0; i < n; i++) v0[i] = fabsf(v0[i]);
    hy_adamw_hparams hp = { 3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 5 };
    float clip = 0.75f;
    float *p[3], *m[3], *v[3], *wc = malloc(n * sizeof(float));
    for (int k = 0; k < 3; k++) {   /* the CPU, the GPU batched, the GPU a launch per call */
        dev *d = &D[k > 0];
        const hy_backend_ops *o = d->be->ops;
        float *pp = put_f32(d, p0, n), *pg = put_f32(d, g, n), *pm = put_f32(d, m0, n);
        float *pv = put_f32(d, v0, n), *pf = put_f32(d, &clip, 1);
        void *pc = o->act_size == sizeof(float) ? NULL : dev_alloc(d, n * o->act_size);
        hy_adamw_hparams *php = dev_alloc(d, sizeof hp);
        CHECK(o->upload(d->be, 0, php, &hp, sizeof hp, &d->err) == HY_OK);
        for (int i = 0; i < ADAMW_MANY; i++) {
            void *c = pc ? (char *)pc + offs[i] * o->act_size : NULL;
            CHECK(o->adamw(d->st, pp + offs[i], c, pg + offs[i], pm + offs[i], pv + offs[i], sizes[i],
                           php, pf, decay[i], &d->err) == HY_OK);
            if (k == 2) CHECK(o->sync(d->st, &d->err) == HY_OK);
        }
        p[k] = fetch_f32(d, pp, n);
        m[k] = fetch_f32(d, pm, n);
        v[k] = fetch_f32(d, pv, n);
        if (k == 1 && pc) get_act(d, wc, pc, n);
        if (k == 1) {
            /* the gaps between the blocks are no tensor's: untouched */
            CHECK(p[1][offs[100] - 1] == p0[offs[100] - 1] && p[1][offs[200] - 1] == p0[offs[200] - 1]);
        }
    }
    compare("adamw many param", p[1], p[0], n, 1e-5);
    compare("adamw many m", m[1], m[0], n, 1e-5);
    compare("adamw many v", v[1], v[0], n, 1e-5);
    size_t off = 0;
    for (size_t i = 0; i < n && D[1].be->ops->act_size != sizeof(float); i++)
        off += bf2f(f2bf(p[1][i])) != wc[i];
    CHECKF(off == 0, "adamw many: %zu compute-copy values are not the bf16 of the new weights", off);
    CHECKF(differ(p[1], p[2], n) == 0 && differ(m[1], m[2], n) == 0 && differ(v[1], v[2], n) == 0,
           "adamw many: one launch differs from a launch per call");
    printf("cuda: adamw, %d tensors in 3 blocks: %zu of %zu weights bit-identical to the CPU's\n",
           ADAMW_MANY, n - differ(p[1], p[0], n), n);
    for (int k = 0; k < 3; k++) { free(p[k]); free(m[k]); free(v[k]); }
    free(p0); free(g); free(m0); free(v0); free(wc);
}

/* A non-finite norm: factor NaN, and AdamW leaves everything as it was. */
static void test_nonfinite(void) {
    dev *d = &D[1];
    const hy_backend_ops *o = d->be->ops;
    float g[3] = { 1, INFINITY, 2 }, p0[3] = { 1, 2, 3 }, z[3] = { 0, 0, 0 };
    hy_adamw_hparams hp = { 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1 };
    float *pg = put_f32(d, g, 3), *pp = put_f32(d, p0, 3), *pm = put_f32(d, z, 3), *pv = put_f32(d, z, 3);
    hy_adamw_hparams *php = dev_alloc(d, sizeof hp);
    CHECK(o->upload(d->be, 0, php, &hp, sizeof hp, &d->err) == HY_OK);
    double *part = dev_alloc(d, sizeof(double));
    float *pf = dev_alloc(d, 2 * sizeof(float));
    CHECK(o->sumsq(d->st, part, pg, 3, &d->err) == HY_OK);
    CHECK(o->clip(d->st, pf, pf + 1, part, 1, 0.0f, &d->err) == HY_OK);
    CHECK(o->adamw(d->st, pp, NULL, pg, pm, pv, 3, php, pf, 1, &d->err) == HY_OK);
    float f[2], p[3];
    get_f32(d, f, pf, 2);
    get_f32(d, p, pp, 3);
    CHECK(isnan(f[0]) && !isfinite(f[1]));
    CHECK(memcmp(p, p0, sizeof p) == 0);
}

/* to_act rounds to nearest even exactly as the host does; the test ops'
 * pattern on the device is the host's hy_pattern. */
static void test_conversions_and_patterns(hy_rng *r) {
    dev *d = &D[1];
    const hy_backend_ops *o = d->be->ops;
    size_t n = 4099;
    float *x = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = (float)((2 * hy_rng_uniform(r) - 1) * 1000);
    float *px = put_f32(d, x, n);
    void *pc = dev_alloc(d, n * 2);
    CHECK(o->to_act(d->st, pc, px, n, &d->err) == HY_OK);
    uint16_t *b = malloc(n * 2);
    CHECK(o->sync(d->st, &d->err) == HY_OK);
    CHECK(o->download(d->be, 0, b, pc, n * 2, &d->err) == HY_OK);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) off += b[i] != f2bf(x[i]);
    CHECKF(off == 0, "to_act: %zu of %zu values rounded differently from the host", off, n);

    uint32_t it = 5, *pit = dev_alloc(d, sizeof it), *buf = dev_alloc(d, n * 4), *errs = dev_alloc(d, 4);
    CHECK(o->upload(d->be, 0, pit, &it, sizeof it, &d->err) == HY_OK);
    const hy_backend_test_ops *to = hy_backend_test_ops_of(d->be);
    CHECK(to->fill(d->st, buf, n, 77, pit, &d->err) == HY_OK);
    CHECK(to->check(d->st, buf, n, 77, pit, errs, &d->err) == HY_OK);
    uint32_t *h = malloc(n * 4), e = 1;
    CHECK(o->sync(d->st, &d->err) == HY_OK);
    CHECK(o->download(d->be, 0, h, buf, n * 4, &d->err) == HY_OK);
    CHECK(o->download(d->be, 0, &e, errs, 4, &d->err) == HY_OK);
    off = 0;
    for (size_t i = 0; i < n; i++) off += h[i] != hy_pattern(77, it, (uint32_t)i);
    CHECKF(off == 0 && e == 0, "device hy_pattern differs from the host's at %zu words", off);

    /* Timestamps move forward, and a sleep of 2 ms shows between two. */
    uint64_t *ts = dev_alloc(d, 2 * sizeof(uint64_t)), t[2];
    CHECK(o->timestamp(d->st, &ts[0], &d->err) == HY_OK);
    CHECK(o->sleep(d->st, 2000000, &d->err) == HY_OK);
    CHECK(o->timestamp(d->st, &ts[1], &d->err) == HY_OK);
    CHECK(o->sync(d->st, &d->err) == HY_OK);
    CHECK(o->download(d->be, 0, t, ts, sizeof t, &d->err) == HY_OK);
    CHECKF(t[1] >= t[0] + 2000000 && t[1] < t[0] + 1000000000, "stamps %llu, %llu",
           (unsigned long long)t[0], (unsigned long long)t[1]);
    free(x); free(b); free(h);
}

static void test_ops(void) {
    if (dev_open(&D[0], 0) || dev_open(&D[1], 1)) {
        CHECK(0);
        dev_close(&D[0]);
        return;
    }
    hy_rng r = hy_rng_stream(2026, 1);
    test_matmul(&r, 1, 1, 1, 1);
    test_matmul(&r, 7, 13, 5, 1);
    test_matmul(&r, 64, 96, 288, 1);
    test_matmul(&r, 130, 64, 257, 0);
    test_matmul(&r, 512, 768, 3072, 1);
    /* The GELU epilogues: GPT-2's MLP shape (hidden 3072), the small GPT's
     * (256), and widths the epilogue cannot take (not a multiple of 8),
     * which run as separate passes; no bias (GELU_AUX); one row. */
    test_matmul_gelu(&r, 512, 768, 3072, 1);
    test_matmul_gelu(&r, 256, 64, 256, 1);
    test_matmul_gelu(&r, 37, 24, 96, 1);
    test_matmul_gelu(&r, 37, 16, 64, 0);
    test_matmul_gelu(&r, 33, 20, 76, 1);
    test_matmul_gelu(&r, 1, 8, 16, 1);
    test_lm_head(&r, 33, 64, 129);
    test_lm_head(&r, 256, 128, 1024);
    test_bert_ops(&r, 32, 32, 256);
    test_bert_ops(&r, 66, 48, 384);
    test_layernorm(&r, 1, 1);
    test_layernorm(&r, 17, 33);
    test_layernorm(&r, 300, 768);
    test_rmsnorm(&r, 1, 1, 1e-5f);
    test_rmsnorm(&r, 17, 33, 1e-6f);
    test_rmsnorm(&r, 300, 2048, 1e-5f);
    test_swiglu(&r, 1, 1);
    test_swiglu(&r, 37, 101);
    test_swiglu(&r, 64, 8192 / 8);
    test_swiglu(&r, 33, 260);   /* F % 8 = 4: rows of 2F = 520 elements, the element path */
    test_rope(&r, 1, 1, 1, 1, 2, 0);
    test_rope(&r, 2, 33, 8, 2, 64, 0);
    test_rope(&r, 1, 70, 4, 1, 128, 100);
    test_rope(&r, 3, 17, 3, 3, 6, 5);
    test_gelu_add(&r, 1);
    test_gelu_add(&r, 100003);
    /* Head sizes 4 .. 128 (padded to 32, 64, 128), 16-byte and element
     * loads (hd not a multiple of 8), partial tiles of 64, causal and
     * not, T from 1 (one query, one key) to 1024. (B, T, NH, NKV, hd,
     * causal) */
    test_attention(&r, 1, 1, 1, 1, 4, 1);
    test_attention(&r, 2, 17, 3, 3, 8, 1);
    test_attention(&r, 2, 64, 4, 4, 32, 1);
    test_attention(&r, 1, 33, 2, 2, 16, 0);
    test_attention(&r, 1, 70, 3, 3, 12, 1);
    test_attention(&r, 1, 33, 2, 2, 64, 1);
    test_attention(&r, 1, 130, 2, 2, 96, 1);
    test_attention(&r, 1, 65, 1, 1, 128, 0);
    test_attention(&r, 3, 200, 2, 2, 60, 0);
    test_attention(&r, 2, 256, 4, 4, 64, 1);
    test_attention(&r, 1, 1024, 12, 12, 64, 1);
    /* grouped-query attention, and Llama's head size 128 */
    test_attention(&r, 2, 77, 8, 2, 64, 1);
    test_attention(&r, 1, 130, 4, 1, 128, 1);
    test_attention(&r, 2, 64, 6, 3, 128, 0);
    test_attention(&r, 1, 300, 8, 2, 128, 1);
    test_attention(&r, 1, 33, 4, 2, 20, 0);
    test_attention(&r, 1, 512, 32, 8, 64, 1);
    /* The cache: a prefill then single steps, grouped-query heads (NKV <
     * NH), head sizes 4 .. 128, more keys than threads in a block, and a
     * cache long enough to need more than 48 KiB of shared memory. */
    test_kvcache(&r, 1, (const int[]){ 1, 1, 1 }, 3, 4, 1, 1, 4);
    test_kvcache(&r, 2, (const int[]){ 5, 1, 1, 4 }, 4, 16, 4, 4, 8);
    test_kvcache(&r, 2, (const int[]){ 7, 1, 3 }, 3, 12, 8, 2, 64);
    test_kvcache(&r, 1, (const int[]){ 300, 1, 1 }, 3, 400, 12, 12, 64);
    test_kvcache(&r, 1, (const int[]){ 1, 200 }, 2, 256, 6, 3, 128);
    test_kvcache(&r, 1, (const int[]){ 12300, 1 }, 2, 12301, 1, 1, 4);
    test_embedding(&r, 1, 1, 1, 2);
    test_embedding(&r, 3, 17, 33, 50);
    test_embedding(&r, 4, 128, 256, 1000);
    test_embedding_no_wpe(&r, 1, 1, 1, 2);
    test_embedding_no_wpe(&r, 3, 17, 33, 50);
    test_classifier(&r, 1, 2, 2);
    test_classifier(&r, 37, 100, 128);
    test_classifier(&r, 256, 50257, 50304);
    test_optimizer(&r, 1);
    test_optimizer(&r, 1000003);
    test_adamw_many(&r);
    test_fused(&r, 64, 96);
    test_fused(&r, 33, 36);
    test_nonfinite();
    test_conversions_and_patterns(&r);
    hy_model_shape gpt = { .kind = HY_MODEL_GPT, .layers = 2, .d_model = 64, .heads = 4,
                           .seq_len = 40, .positions = 40, .vocab = 100, .kv_heads = 4,
                           .ffn_dim = 256,
                           .tie_embeddings = 1 };
    hy_model_shape llama = { .kind = HY_MODEL_LLAMA, .layers = 2, .d_model = 64, .heads = 4,
                             .seq_len = 40, .vocab = 100, .kv_heads = 2, .ffn_dim = 176,
                             .tie_embeddings = 0, .norm_eps = 1e-5, .rope_theta = 10000.0 };
    test_sampler(&gpt);
    test_sampler(&llama);
    llama.tie_embeddings = 1;
    test_sampler(&llama);
    dev_close(&D[0]);
    dev_close(&D[1]);
}

/* ------------------------------------------------------------------------ */
/* The Hopper attention (kernels/cuda/attention_sm90.cu), opt-in until this
 * passes on an H100/H200: the backend's own attention_fwd and
 * attention_bwd on a CUDA backend created with HY_CUDA_ATTENTION=sm90
 * (D[2]), against the CPU backend's attention (D[0]) and against the
 * default kernel (D[1], created with HY_CUDA_ATTENTION=mma), on grouped
 * heads (NKV < NH) as they are. Tolerances as test_attention's, whose
 * argument holds for both kernels (the same bf16 roundings of P and dS,
 * fp32 everywhere else): out and the gradients 1e-2 normwise, lse 1e-4.
 * Outputs start as NaN (attention_on); the gradients are stored (the
 * zero fused into the backward) and added into random values (+=). A
 * second run, recorded into a graph and replayed, gives the same bits as
 * the first. Shapes the backend does not give this kernel on this device
 * (the test op attention_sm90 asks it) are counted as skipped. */

static int sm90_skipped, sm90_run;

/* A CUDA backend with HY_CUDA_ATTENTION set to `attention` while it is
 * created (the backend reads it then), the variable restored after. */
static int dev_open_attention(dev *d, const char *attention) {
    const char *was = getenv("HY_CUDA_ATTENTION");
    char *keep = was ? strdup(was) : NULL;
    setenv("HY_CUDA_ATTENTION", attention, 1);
    int rc = dev_open(d, 1);
    if (keep) setenv("HY_CUDA_ATTENTION", keep, 1);
    else unsetenv("HY_CUDA_ATTENTION");
    free(keep);
    return rc;
}

static void test_attention_sm90(hy_rng *r, int B, int T, int NH, int NKV, int hd, int causal) {
    const hy_backend_test_ops *to = hy_backend_test_ops_of(D[2].be);
    if (!to->attention_sm90 || !to->attention_sm90(D[2].st, T, NH, NKV, hd)) {
        sm90_skipped++;
        return;
    }
    sm90_run++;
    size_t nqkv = (size_t)B * T * (NH + 2 * NKV) * hd, nout = (size_t)B * T * NH * hd;
    size_t nl = (size_t)B * NH * T;
    float *qkv = rnd(r, nqkv, 1), *dout = rnd(r, nout, 1), *dqkv0 = rnd(r, nqkv, 1);
    /* 0: the CPU from dqkv0, 1: the CPU from zero, 2: the default kernel
     * from zero, 3: sm90 from dqkv0, 4: sm90 from zero, 5: again, replayed */
    float *out[6], *lse[6], *dq[6];
    static const int on[6] = { 0, 0, 1, 2, 2, 2 };
    for (int k = 0; k < 6; k++) {
        out[k] = malloc(nout * sizeof(float));
        lse[k] = malloc(nl * sizeof(float));
        dq[k] = malloc(nqkv * sizeof(float));
        attention_on(&D[on[k]], qkv, dout, k == 0 || k == 3 ? dqkv0 : NULL, B, T, NH, NKV, hd, causal,
                     k == 5, out[k], lse[k], dq[k]);
    }
    char what[128];
    snprintf(what, sizeof what, "attention_sm90 B=%d T=%d NH=%d NKV=%d hd=%d causal=%d vs the CPU", B,
             T, NH, NKV, hd, causal);
    compare(what, out[4], out[1], nout, 1e-2);
    compare(what, lse[4], lse[1], nl, 1e-4);
    compare(what, dq[3], dq[0], nqkv, 1e-2);
    compare(what, dq[4], dq[1], nqkv, 1e-2);
    snprintf(what, sizeof what, "attention_sm90 B=%d T=%d NH=%d NKV=%d hd=%d causal=%d vs mma", B, T,
             NH, NKV, hd, causal);
    compare(what, out[4], out[2], nout, 1e-2);
    compare(what, lse[4], lse[2], nl, 1e-4);
    compare(what, dq[4], dq[2], nqkv, 1e-2);
    CHECKF(differ(out[4], out[5], nout) == 0, "%s: out differs between runs", what);
    CHECKF(differ(lse[4], lse[5], nl) == 0, "%s: lse differs between runs", what);
    CHECKF(differ(dq[4], dq[5], nqkv) == 0, "%s: dqkv differs between runs", what);
    for (int k = 0; k < 6; k++) { free(out[k]); free(lse[k]); free(dq[k]); }
    free(qkv); free(dout); free(dqkv0);
}

/* One row-block and many, T = 1 and T = 1000 (no multiple of either tile:
 * 128 and 64), T a multiple of both; causal and not; head sizes 64 and
 * 128; NKV = NH, NH/4 and 1; GPT-2 124M's shape last. Also what the
 * backend says about itself with the opt-in on. */
static void test_attention_sm90_all(void) {
    if (dev_open(&D[0], 0) || dev_open_attention(&D[1], "mma") || dev_open_attention(&D[2], "sm90")) {
        CHECK(0);
        for (int k = 0; k < 3; k++) dev_close(&D[k]);
        return;
    }
    const hy_backend_test_ops *to = hy_backend_test_ops_of(D[1].be);
    CHECKF(to->attention_sm90(D[1].st, 1024, 12, 12, 64) == 0,
           "HY_CUDA_ATTENTION=mma still runs the Hopper attention");
    hy_rng r = hy_rng_stream(2026, 90);
    test_attention_sm90(&r, 1, 1, 1, 1, 64, 1);
    test_attention_sm90(&r, 1, 1, 4, 1, 128, 0);
    test_attention_sm90(&r, 2, 77, 4, 4, 64, 0);
    test_attention_sm90(&r, 2, 200, 8, 2, 64, 1);
    test_attention_sm90(&r, 1, 256, 4, 1, 64, 0);
    test_attention_sm90(&r, 2, 129, 8, 2, 128, 0);
    test_attention_sm90(&r, 1, 1000, 4, 1, 128, 1);
    test_attention_sm90(&r, 1, 1000, 4, 4, 128, 0);
    test_attention_sm90(&r, 1, 1000, 8, 2, 64, 1);
    test_attention_sm90(&r, 2, 1024, 12, 12, 64, 1);
    printf("attention_sm90: %d shapes compared, %d skipped (%s)\n", sm90_run, sm90_skipped,
           sm90_skipped ? "not a compute capability 9.0 device: the default kernel runs there" : "none");
    for (int k = 0; k < 3; k++) dev_close(&D[k]);
}

/* `test_cuda sm90-workload SHAPE`: no comparisons, only launches, for a
 * profiler (tools/gpu-check.sh's sm90 section times each kernel with
 * ncu): three forwards and backwards through the backend's ops with the
 * default attention (attention.cu) and three with HY_CUDA_ATTENTION=sm90,
 * on one layer of GPT-2 124M at B = 16 (SHAPE "124m": T = 1024, 12 heads
 * of 64, causal) or of the head-size-128 model at B = 8 ("h128": 16 heads
 * of 128). Random inputs: zeros can run faster than real data. Returns
 * the exit status (2: an unknown shape). */
static int sm90_workload(const char *shape) {
    int B, NH, hd, T = 1024;
    if (shape && strcmp(shape, "124m") == 0) { B = 16; NH = 12; hd = 64; }
    else if (shape && strcmp(shape, "h128") == 0) { B = 8; NH = 16; hd = 128; }
    else {
        fprintf(stderr, "test_cuda sm90-workload: the shape is 124m or h128, not '%s'\n", shape ? shape : "");
        return 2;
    }
    int rc = 0, ok = 0;
    hy_rng r = hy_rng_stream(2026, 91);
    size_t nqkv = (size_t)B * T * 3 * NH * hd, nout = (size_t)B * T * NH * hd;
    float *h = rnd(&r, nqkv, 1);
    for (int k = 1; k <= 2 && !rc; k++) {
        dev *d = &D[k];
        if (dev_open_attention(d, k == 1 ? "mma" : "sm90")) {
            rc = 1;
            break;
        }
        const hy_backend_ops *o = d->be->ops;
        if (k == 2) ok = hy_backend_test_ops_of(d->be)->attention_sm90(d->st, T, NH, NH, hd);
        void *qkv = put_act(d, h, nqkv), *dout = put_act(d, h, nout);
        void *out = dev_alloc(d, nout * o->act_size), *dqkv = dev_alloc(d, nqkv * o->act_size);
        void *scr = dev_alloc(d, o->attention_scratch(B, T, NH, NH, hd));
        float *lse = dev_alloc(d, (size_t)B * NH * T * sizeof(float));
        for (int i = 0; i < 3 && !rc && (k == 1 || ok); i++) {
            rc = o->attention_fwd(d->st, out, lse, qkv, B, T, NH, NH, hd, 1, &d->err);
            if (!rc) rc = o->attention_bwd(d->st, dqkv, scr, dout, qkv, out, lse, B, T, NH, NH, hd, 1,
                                           &d->err);
            if (!rc) rc = o->sync(d->st, &d->err);
        }
        if (rc) fprintf(stderr, "test_cuda sm90-workload: %s\n", d->err.msg);
        dev_close(d);
    }
    printf("sm90-workload %s: B=%d T=%d NH=%d hd=%d causal, 3 x default%s\n", shape, B, T, NH, hd,
           ok ? " and 3 x sm90" : " (sm90: not this device)");
    free(h);
    return rc ? 1 : 0;
}

/* ------------------------------------------------------------------------ */
/* Work the backend does not own (NCCL's sums): watched like a flag */

/* A stream waiting for another stream's work that never ends (a replica
 * gone, as NCCL would see it) is ended by the watchdog, eagerly and in a
 * replayed graph: the error names the wait, the release ran, and sync
 * returns instead of hanging. Also: work that ends in time passes. */
static void test_foreign_wait(int graph) {
    hy_backend *be = NULL;
    hy_stream *st = NULL;
    hy_error err;
    hy_error_clear(&err);
    int zero = 0;
    CHECK(hy_backend_cuda_create(&be, 1, &zero, 1, 0, 1.0, &err) == HY_OK);
    if (!be) return;
    const hy_backend_ops *o = be->ops;
    const hy_backend_test_ops *t = hy_backend_test_ops_of(be);
    CHECK(o->stream_create(be, 0, &st, &err) == HY_OK);
    int released = 0;
    /* 10 ms of foreign work: waited for, not released. */
    CHECK(t->foreign_wait(st, 0.01, &released, &err) == HY_OK);
    CHECK(o->sync(st, &err) == HY_OK);
    CHECK(released == 0);
    /* An hour of it, with watchdog_s = 1. */
    hy_graph *g = NULL;
    int rc;
    if (graph) {
        rc = o->capture_begin(st, &err);
        if (!rc) rc = t->foreign_wait(st, 3600, &released, &err);
        if (!rc) rc = o->capture_end(st, &g, &err);
        CHECK(rc == HY_OK);
        if (!rc) rc = o->graph_launch(g, st, &err);
        if (!rc) rc = o->sync(st, &err);
    } else {
        rc = t->foreign_wait(st, 3600, &released, &err);
        if (!rc) rc = o->sync(st, &err);
    }
    CHECKF(rc != HY_OK && strstr(err.msg, "watchdog: rank 0 waited") &&
           strstr(err.msg, "the test's foreign work"), "%s: %s", graph ? "graph" : "eager", err.msg);
    CHECKF(released >= 1, "%s: the release did not run", graph ? "graph" : "eager");
    if (g) o->graph_destroy(g);
    o->stream_destroy(st);
    o->destroy(be);
}

/* ------------------------------------------------------------------------ */
/* Training */

static char shard[256];

typedef struct {
    size_t n;
    float *w;
    double loss[8];
} run;

/* Each rank's recorded graph as DOT into dir (rank<r>.dot): it has kernels
 * and, with P >= 2, the flag waits and writes (stream memory operations). */
static void graph_dots(hy_runtime *rt, int P, const char *dir) {
    for (int r = 0; r < P; r++) {
        char path[400];
        snprintf(path, sizeof path, "%s/rank%d.dot", dir, r);
        hy_graph_nodes nodes;
        hy_error err;
        int rc = hy_runtime_graph_dot(rt, r, path, &nodes, &err);
        CHECKF(rc == HY_OK, "graph of rank %d: %s", r, err.msg);
        if (rc) continue;
        CHECKF(nodes.kernels > 0 && (P < 2 || nodes.memops > 0) &&
               nodes.nodes == nodes.kernels + nodes.memcpys + nodes.memsets + nodes.memops + nodes.others,
               "graph of rank %d: %d nodes, %d kernels, %d copies, %d memsets, %d memory operations", r,
               nodes.nodes, nodes.kernels, nodes.memcpys, nodes.memsets, nodes.memops);
        FILE *f = fopen(path, "r");
        CHECKF(f && fgetc(f) != EOF, "%s is missing or empty", path);
        if (f) fclose(f);
        printf("cuda: rank %d's graph: %d nodes (%d kernels, %d copies, %d memsets, %d memory "
               "operations) in %s\n", r, nodes.nodes, nodes.kernels, nodes.memcpys, nodes.memsets,
               nodes.memops, path);
    }
}

/* Trains `steps` steps of the small GPT on backend with extra settings;
 * dot_dir: also draw each rank's graph there (NULL: not). */
static int train(const char *backend, const char *const *extra, int n_extra, int steps,
                 const char *dot_dir, run *res) {
    const char *base[24] = {
        "model.layers=4", "model.d_model=64", "model.heads=4", "model.seq_len=64",
        "model.vocab=250", "schedule.micro_batch_size=4", "schedule.micro_batches=4",
        "train.lr=1e-3", "train.warmup_steps=2", "data.val=null", "checkpoint.dir=null",
    };
    int n = 11;
    char be_set[64], data_set[300];
    snprintf(be_set, sizeof be_set, "backend=%s", backend);
    snprintf(data_set, sizeof data_set, "data.train=%s", shard);
    base[n++] = be_set;
    base[n++] = data_set;
    for (int i = 0; i < n_extra; i++) base[n++] = extra[i];
    hy_run c;
    hy_error err;
    memset(&c, 0, sizeof c);
    int rc = hy_test_run_load(&c, NULL, base, n, &err);
    hy_runtime *rt = NULL;
    if (!rc) rc = hy_runtime_create(&rt, &c, &err);
    memset(res, 0, sizeof *res);
    for (int s = 0; s < steps && s < 8 && !rc; s++) {
        hy_step_stats st;
        rc = hy_train_step(rt, &st, &err);
        if (!rc) res->loss[s] = st.loss;
    }
    if (!rc && dot_dir) graph_dots(rt, hy_runtime_schedule(rt)->ranks, dot_dir);
    hy_model m;
    if (!rc) rc = hy_test_model_copy(&m, &c, 1, &err);
    if (!rc) {
        size_t total = 0;
        for (int i = 0; i < m.n_params; i++)
            total += hy_model_real_numel(&m, &m.params[i]);
        res->w = malloc(total * sizeof(float));
        res->n = total;
        size_t at = 0;
        for (int i = 0; i < m.n_params && !rc; i++) {
            size_t k = hy_model_real_numel(&m, &m.params[i]);
            rc = hy_runtime_read_param(rt, m.params[i].name, res->w + at, k, &err);
            at += k;
        }
        hy_model_free(&m);
    }
    if (rc) fprintf(stderr, "train on %s: %s\n", backend, err.msg);
    hy_runtime_destroy(rt);
    hy_run_free(&c);
    return rc;
}

/* Activation recomputation on the GPU (train.recompute): selective and
 * full, whole and split backward, GPT and Llama, train as the CPU does
 * without it (within bf16 tolerance: GPT's selective GELU is rebuilt from
 * the bf16 pre-activation), and replay equals eager bit for bit, the
 * reruns inside the recorded graphs. A Llama's rebuilds are its
 * forward's own kernels on the same bf16 inputs (RMSNorm recomputes the
 * same rstd; SwiGLU is no GEMM epilogue), so on the GPU each mode also
 * equals none bit for bit. */
static void test_training_recompute(void) {
    static const char *const modes[] = { "train.recompute=selective", "train.recompute=full" };
    static const char *const kinds[][3] = {
        { "model.kind=gpt" },
        { "model.kind=llama", "model.kv_heads=2", "model.ffn_dim=176" },
    };
    for (int kd = 0; kd < 2; kd++)
        for (int split = 0; split <= 1; split++) {
            const char *sets[10] = { "schedule.kind=hanayo", "schedule.ranks=2",
                                     "schedule.waves=1", "devices=[0,0]",
                                     split ? "schedule.split_backward=true"
                                           : "schedule.split_backward=false" };
            int n = 5;
            for (int i = 0; i < 3 && kinds[kd][i]; i++) sets[n++] = kinds[kd][i];
            run none;
            memset(&none, 0, sizeof none);
            int llama = kd == 1;
            sets[n] = "graph=false";
            if (llama && train("cuda", sets, n + 1, 6, NULL, &none)) {
                CHECK(0);
                continue;
            }
            for (int k = 0; k < 2; k++) {
                sets[n] = modes[k];
                sets[n + 1] = "graph=false";
                run cpu, gpu, replay;
                if (train("cpu", sets, n, 6, NULL, &cpu) ||
                    train("cuda", sets, n + 2, 6, NULL, &gpu)) {
                    CHECK(0);
                    continue;
                }
                for (int st = 0; st < 6; st++)
                    CHECKF(fabs(gpu.loss[st] - cpu.loss[st]) <= 2e-2 * cpu.loss[st],
                           "%s %s split %d step %d: loss %.6f on cuda, %.6f on cpu without",
                           kinds[kd][0], modes[k], split, st + 1, gpu.loss[st], cpu.loss[st]);
                compare(modes[k], gpu.w, cpu.w, cpu.n, 5e-2);
                if (llama)
                    CHECKF(gpu.n == none.n && memcmp(gpu.w, none.w, gpu.n * sizeof(float)) == 0 &&
                           memcmp(gpu.loss, none.loss, sizeof gpu.loss) == 0,
                           "llama %s split %d: not none's weights on cuda bit for bit", modes[k],
                           split);
                sets[n + 1] = "graph=true";
                if (train("cuda", sets, n + 2, 6, NULL, &replay) == HY_OK) {
                    CHECKF(replay.n == gpu.n && memcmp(replay.w, gpu.w, gpu.n * sizeof(float)) == 0 &&
                           memcmp(replay.loss, gpu.loss, sizeof gpu.loss) == 0,
                           "%s %s split %d: replay differs from eager", kinds[kd][0], modes[k],
                           split);
                    free(replay.w);
                } else {
                    CHECK(0);
                }
                free(cpu.w);
                free(gpu.w);
            }
            if (llama) free(none.w);
        }
}

static void test_training(void) {
    if (hy_test_shard_make(shard, sizeof shard, "cuda", 250, 60000)) { CHECK(0); return; }
    static const char *const layouts[][8] = {
        { "schedule.kind=gpipe", "schedule.ranks=1" },
        { "schedule.kind=hanayo", "schedule.ranks=2", "schedule.waves=1", "devices=[0,0]" },
        /* Split backward: the input-gradient and weight passes apart. */
        { "schedule.kind=hanayo", "schedule.ranks=2", "schedule.waves=1", "devices=[0,0]",
          "schedule.split_backward=true" },
        /* A Llama (RMSNorm, RoPE, GQA, SwiGLU, untied head), whole and split. */
        { "schedule.kind=hanayo", "schedule.ranks=2", "schedule.waves=1", "devices=[0,0]",
          "model.kind=llama", "model.kv_heads=2", "model.ffn_dim=176" },
        { "schedule.kind=hanayo", "schedule.ranks=2", "schedule.waves=1", "devices=[0,0]",
          "model.kind=llama", "model.kv_heads=2", "model.ffn_dim=176",
          "schedule.split_backward=true" },
    };
    for (int v = 0; v < (int)(sizeof layouts / sizeof layouts[0]); v++) {
        int n = 0;
        while (n < 8 && layouts[v][n]) n++;
        run cpu, gpu;
        if (train("cpu", layouts[v], n, 6, NULL, &cpu) || train("cuda", layouts[v], n, 6, NULL, &gpu)) {
            CHECK(0);
            continue;
        }
        for (int s = 0; s < 6; s++)
            CHECKF(fabs(gpu.loss[s] - cpu.loss[s]) <= 2e-2 * cpu.loss[s],
                   "%s step %d: loss %.6f on cuda, %.6f on cpu", layouts[v][0], s + 1, gpu.loss[s],
                   cpu.loss[s]);
        CHECK(gpu.loss[5] < gpu.loss[0]);
        compare(layouts[v][0], gpu.w, cpu.w, cpu.n, 5e-2);
        free(cpu.w);
        free(gpu.w);
    }
    /* Replay = eager on the GPU, bit for bit. */
    const char *eager[] = { "schedule.kind=hanayo", "schedule.ranks=2", "devices=[0,0]", "graph=false" };
    const char *replay[] = { "schedule.kind=hanayo", "schedule.ranks=2", "devices=[0,0]", "graph=true" };
    /* The replayed run also draws its graphs: into HY_TEST_DOT_DIR when
     * that is set (tools/gpu-check.sh keeps them), else a directory of
     * its own that goes again. */
    char tmp[] = "/tmp/hy-cuda-dot-XXXXXX";
    const char *dots = getenv("HY_TEST_DOT_DIR");
    int own = !(dots && *dots);
    if (own) dots = mkdtemp(tmp);
    run a, b;
    if (!dots || train("cuda", eager, 4, 4, NULL, &a) || train("cuda", replay, 4, 4, dots, &b)) {
        CHECK(0);
    } else {
        CHECK(a.n == b.n && memcmp(a.w, b.w, a.n * sizeof(float)) == 0);
        CHECK(memcmp(a.loss, b.loss, sizeof a.loss) == 0);
        free(a.w);
        free(b.w);
    }
    if (own && dots) {
        for (int r = 0; r < 2; r++) {
            char path[400];
            snprintf(path, sizeof path, "%s/rank%d.dot", dots, r);
            remove(path);
        }
        rmdir(dots);
    }
    test_training_recompute();
    hy_test_shard_remove(shard);
}

/* ------------------------------------------------------------------------ */
/* Without a GPU */

static void test_no_gpu(void) {
    hy_backend *be = NULL;
    hy_error err;
    int zero = 0;
    CHECK(hy_backend_cuda_create(&be, 1, &zero, 1, 0, 30.0, &err) != HY_OK && be == NULL);
    CHECKF(strstr(err.msg, "no CUDA device") || strstr(err.msg, "no CUDA backend in this build"),
           "%s", err.msg);
    hy_run c;
    memset(&c, 0, sizeof c);
    const char *cuda[] = { "backend=cuda" }, *autob[] = { "backend=auto" };
    hy_backend_request rq;
    hy_backend_choice use;
    CHECK(hy_test_run_load(&c, NULL, cuda, 1, &err) == HY_OK);
    rq = c.backend;
    CHECK(hy_backend_describe(&rq, &use, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, "backend \"cuda\"") != NULL, "%s", err.msg);
    hy_run_free(&c);
    memset(&c, 0, sizeof c);
    CHECK(hy_test_run_load(&c, NULL, autob, 1, &err) == HY_OK);
    rq = c.backend;
    CHECK(hy_backend_describe(&rq, &use, &err) == HY_OK && use.cuda == 0);
    CHECKF(strncmp(use.why, "cpu (auto: ", 11) == 0, "%s", use.why);
    hy_run_free(&c);
}

/* HY_CUDA_ATTENTION as the CUDA backend reads it (hy_backend_cuda_attention,
 * which hy_backend_cuda_create and hy_backend_describe call): unset, ""
 * and "mma" the default, "sm90" the opt-in, anything else an input error
 * naming the variable, from creating the backend too (before it looks
 * for a device) and, where a GPU is, from describing one; the
 * description says when the opt-in is on. A build without the CUDA
 * backend has nothing to choose: 0 for every value. The variable is
 * restored after. */
static void test_attention_choice(int gpus) {
    int cuda = strstr(hy_backends_compiled(), "cuda") != NULL;
    const char *was = getenv("HY_CUDA_ATTENTION");
    char *keep = was ? strdup(was) : NULL;
    static const struct { const char *value; int rc, sm90; } cases[] = {
        { NULL, HY_OK, 0 }, { "", HY_OK, 0 }, { "mma", HY_OK, 0 }, { "sm90", HY_OK, 1 },
        { "fa3", HY_ERR_INPUT, 0 }, { "SM90", HY_ERR_INPUT, 0 },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *v = cases[i].value;
        if (v) setenv("HY_CUDA_ATTENTION", v, 1);
        else unsetenv("HY_CUDA_ATTENTION");
        hy_error err;
        int sm90 = -1, rc = hy_backend_cuda_attention(&sm90, &err);
        int want = cuda ? cases[i].rc : HY_OK;
        CHECKF(rc == want && (rc || sm90 == (cuda && cases[i].sm90)), "HY_CUDA_ATTENTION=%s: rc %d sm90 %d",
               v ? v : "(unset)", rc, sm90);
        if (rc) CHECKF(strstr(err.msg, "HY_CUDA_ATTENTION") != NULL, "%s", err.msg);
        if (cuda && cases[i].rc) {
            hy_backend *be = NULL;
            int zero = 0;
            CHECK(hy_backend_cuda_create(&be, 1, &zero, 1, 0, 30.0, &err) == HY_ERR_INPUT && !be);
            CHECKF(strstr(err.msg, "HY_CUDA_ATTENTION") != NULL, "%s", err.msg);
        }
        if (cuda && gpus > 0) {
            hy_backend_request rq = { .kind = HY_BACKEND_CUDA, .ranks = 1, .watchdog_s = 30.0 };
            hy_backend_choice use;
            rc = hy_backend_describe(&rq, &use, &err);
            CHECKF(rc == cases[i].rc, "describe, HY_CUDA_ATTENTION=%s: %d", v ? v : "(unset)", rc);
            if (!rc)
                CHECKF((strstr(use.why, "attention sm90") != NULL) == cases[i].sm90, "%s", use.why);
        }
    }
    if (keep) setenv("HY_CUDA_ATTENTION", keep, 1);
    else unsetenv("HY_CUDA_ATTENTION");
    free(keep);
}

/* cuBLASLt is loaded at the backend's first use, not linked
 * (kernels/cuda/ltload.cuh): the build's toolkit has it, so it loads here
 * too, GPU or not, and from a file of its soname; without the CUDA
 * backend the answer is an error that says so. */
static void test_library(void) {
    char where[4096];
    hy_error err;
    int rc = hy_backend_cuda_library(where, sizeof where, &err);
    if (!strstr(hy_backends_compiled(), "cuda")) {
        CHECKF(rc == HY_ERR_RUNTIME && strstr(err.msg, "no CUDA backend"), "%d: %s", rc,
               rc ? err.msg : "");
        return;
    }
    CHECKF(rc == HY_OK, "%s", err.msg);
    if (rc) return;
    CHECKF(strstr(where, "/libcublasLt.so") != NULL, "loaded from %s", where);
    CHECK(access(where, R_OK) == 0);
    char again[4096];
    CHECK(hy_backend_cuda_library(again, sizeof again, &err) == HY_OK && !strcmp(again, where));
    printf("cuBLASLt loaded from %s\n", where);
}

int main(int argc, char **argv) {
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);   /* as hanayo's main, before any CUDA call */
    int only_sm90 = argc > 1 && strcmp(argv[1], "sm90") == 0;
    if (argc > 1 && strcmp(argv[1], "sm90-workload") == 0) return sm90_workload(argc > 2 ? argv[2] : NULL);
    int gpus = 0;
    hy_error err;
    if (hy_device_count(&gpus, &err) != HY_OK) gpus = 0;
    test_attention_choice(gpus);
    test_library();
    if (gpus == 0 || !strstr(hy_backends_compiled(), "cuda")) {
        test_no_gpu();
        printf("cuda: no CUDA device (or no CUDA backend in this build): checked the refusals; "
               "the GPU comparisons are not run here\n");
        return TEST_END("cuda");
    }
    test_attention_sm90_all();
    if (only_sm90) return TEST_END("cuda");
    test_ops();
    test_foreign_wait(0);
    test_foreign_wait(1);
    test_training();
    return TEST_END("cuda");
}
