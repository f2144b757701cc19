/*
 * test_ops.c — every CPU op of kernels/cpu/ops.h, forward and backward,
 * and the RoPE table of lib/model.h that the rope op reads.
 *
 * For each op this file holds its own float64 reference forward, written
 * from the equations (loops, no BLAS, never calling the op under test).
 * Then, on random small shapes with odd sizes:
 *   1. the fp32 forward must match the float64 reference;
 *   2. the fp32 backward, fed dout = R (a random float tensor), must match
 *      central finite differences of L(x) = Σ R ⊙ forward64(x), taken in
 *      float64 for every element of every differentiable input;
 *   3. accumulation semantics: a second backward call adds the same amount
 *      again, NULL gradient pointers are skipped;
 * plus the edge cases of each family (causal masking, ignored and bad
 * targets, padded vocabulary, large logits, AdamW against a hand-computed
 * two-step update, the global-norm helpers).
 *
 * Tolerances, and why. All comparisons are normwise relative:
 * max_i |got_i − want_i| ≤ tol · max_i |want_i|, which is the right measure
 * for results of dot products (an element that is a near-cancelling sum has
 * an absolute error set by its terms, not by its own size).
 *   - Forward, tol 1e-5. fp32 rounds at 2⁻²⁴ ≈ 6e-8 per operation; the
 *     longest reduction here has K ≤ 40 terms of size O(1), so the error is
 *     at most ~K · 6e-8 ≈ 2.4e-6 of the largest output and typically
 *     ~sqrt(K) · 6e-8 ≈ 4e-7. 1e-5 leaves a margin of 4–25×, while any real
 *     bug (a wrong index, a missing term, a wrong scale) is off by O(0.1).
 *   - Finite-difference truth: central differences in float64 with
 *     h = 1e-6 err by h²/6 · |L'''| + ε₆₄ · |L| / h ≈ 1e-12 + 1e-16 · 10 / 1e-6
 *     ≈ 1e-9 absolute, against gradients of size 1e-2 … 1: exact for our
 *     purpose (L is smooth everywhere we evaluate it: GELU and softmax are
 *     analytic, LayerNorm's variance is bounded away from 0).
 *   - Backward, tol 1e-4. The fp32 backward works from fp32 inputs and from
 *     fp32 saved activations (mean, rstd, lse: each ~1e-7 relative), then
 *     chains two or three reductions of ≤ 40 terms: a few 1e-6 of the
 *     largest gradient in the worst case. 1e-4 is an order of magnitude
 *     above that and still three orders below a real error.
 *   - Doubling (backward called twice): both calls compute the same fp32
 *     numbers and the second adds them to the first, so the result is 2×
 *     the first up to one rounding, or to the GEMM's accumulation order:
 *     tol 1e-6.
 * Observed on x86-64 with OpenBLAS: every forward and backward within
 * 3e-7 of its reference, so the margins are two to three orders. Small
 * constant mistakes that hide below 1e-5 get their own cases instead (the
 * LayerNorm row whose variance is below eps, the classifier's rows summing
 * to 0, exact zeros where masking or padding applies). Each check was also
 * seen to fail with a deliberate bug put in its op (a missing scale, term,
 * bias correction or mask offset; overwrite instead of accumulate).
 * The whole suite takes well under a second, also under ASan.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/cpu/ops.h"
#include "backend.h"
#include "model.h"
#include "test.h"

#define TOL_FWD 1e-5
#define TOL_BWD 1e-4
#define TOL_TWICE 1e-6
#define FD_H 1e-6

// ----------------------------------------------------------------------------
// Helpers: random numbers, buffers, comparisons, finite differences

/* splitmix64: a small, well-mixed generator; state is the caller's. */
typedef struct {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [lo, hi), exactly representable in float. */
static float rng_uniform(rng *r, float lo, float hi) {
    float u = (float)(rng_next(r) >> 40) / (float)(1 << 24);
    return lo + (hi - lo) * u;
}

static int rng_int(rng *r, int n) { return (int)(rng_next(r) % (uint64_t)n); }

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (p == NULL) {
        fprintf(stderr, "test_ops: out of memory\n");
        exit(2);
    }
    return p;
}

static float *falloc(size_t n) { return xcalloc(n, sizeof(float)); }
static double *dalloc(size_t n) { return xcalloc(n, sizeof(double)); }

static float *frand(rng *r, size_t n, float lo, float hi) {
    float *x = falloc(n);
    for (size_t i = 0; i < n; i++) x[i] = rng_uniform(r, lo, hi);
    return x;
}

/* A float64 copy (exact: every float is a double). */
static double *to_d(const float *x, size_t n) {
    double *d = dalloc(n);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

static double dot_fd(const float *r, const double *y, size_t n) {
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)r[i] * y[i];
    return s;
}

/* Normwise relative check (see the header): max|got − want| ≤ tol·max|want|. */
static void check_close_d(const char *what, const float *got, const double *want,
                          size_t n, double tol) {
    double err = 0.0, ref = 0.0;
    size_t worst = 0;
    int finite = 1;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i])) finite = 0;
        double e = fabs((double)got[i] - want[i]);
        if (e > err) { err = e; worst = i; }
        if (fabs(want[i]) > ref) ref = fabs(want[i]);
    }
    double bound = tol * (ref > 0.0 ? ref : 1.0);
    CHECKF(finite && err <= bound,
           "%s: max error %.3g at [%zu] (got %.9g, want %.9g), bound %.3g = %g x max|want| %.3g%s",
           what, err, worst, (double)got[worst], want[worst], bound, tol, ref,
           finite ? "" : " (non-finite values)");
}

static void check_close_f(const char *what, const float *got, const float *want,
                          size_t n, double tol) {
    double *w = to_d(want, n);
    check_close_d(what, got, w, n, tol);
    free(w);
}

static void check_exact_zero(const char *what, const float *x, size_t n) {
    size_t bad = n;
    for (size_t i = 0; i < n && bad == n; i++)
        if (x[i] != 0.0f) bad = i;
    CHECKF(bad == n, "%s: [%zu] = %.9g, want exactly 0", what, bad, bad < n ? (double)x[bad] : 0.0);
}

/* Central differences of loss(ctx) with respect to each x[i], in float64;
 * x is perturbed in place and restored exactly. */
static void fd_grad(double *grad, double *x, size_t n, double (*loss)(void *), void *ctx) {
    for (size_t i = 0; i < n; i++) {
        double save = x[i];
        x[i] = save + FD_H;
        double lp = loss(ctx);
        x[i] = save - FD_H;
        double lm = loss(ctx);
        x[i] = save;
        grad[i] = (lp - lm) / (2.0 * FD_H);
    }
}

/* The fp32 analytic gradient `got` of one input against float64 FD. */
static void check_grad(const char *what, const float *got, double *x, size_t n,
                       double (*loss)(void *), void *ctx) {
    double *fd = dalloc(n);
    fd_grad(fd, x, n, loss, ctx);
    check_close_d(what, got, fd, n, TOL_BWD);
    free(fd);
}

/* got ≈ 2 · once, after a second backward call into the same buffer. */
static void check_doubled(const char *what, const float *got, const float *once, size_t n) {
    double *want = dalloc(n);
    for (size_t i = 0; i < n; i++) want[i] = 2.0 * once[i];
    check_close_d(what, got, want, n, TOL_TWICE);
    free(want);
}

// ----------------------------------------------------------------------------
// matmul: out = inp · W + bias (Conv1D layout), and the tied LM head

static void ref_matmul(double *out, const double *inp, const double *w, const double *bias,
                       int N, int C, int OC) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = bias != NULL ? bias[o] : 0.0;
            for (int c = 0; c < C; c++) s += inp[n * C + c] * w[c * OC + o];
            out[n * OC + o] = s;
        }
}

typedef struct {
    int N, C, OC;
    double *inp, *w, *bias, *out;
    const float *r;
} matmul_ctx;

static double matmul_loss(void *p) {
    matmul_ctx *c = p;
    ref_matmul(c->out, c->inp, c->w, c->bias, c->N, c->C, c->OC);
    return dot_fd(c->r, c->out, (size_t)c->N * c->OC);
}

static void test_matmul(void) {
    rng r = {1};
    int N = 10, C = 12, OC = 9; /* B=2, T=5 tokens; odd output width */
    size_t ni = (size_t)N * C, nw = (size_t)C * OC, no = (size_t)N * OC;
    float *inp = frand(&r, ni, -1, 1), *w = frand(&r, nw, -1, 1), *bias = frand(&r, OC, -1, 1);
    float *dout = frand(&r, no, -1, 1), *out = falloc(no);
    matmul_ctx ctx = {N, C, OC, to_d(inp, ni), to_d(w, nw), to_d(bias, OC), dalloc(no), dout};

    hy_cpu_matmul_forward(out, inp, w, bias, N, C, OC);
    ref_matmul(ctx.out, ctx.inp, ctx.w, ctx.bias, N, C, OC);
    check_close_d("matmul forward", out, ctx.out, no, TOL_FWD);

    hy_cpu_matmul_forward(out, inp, w, NULL, N, C, OC);
    ref_matmul(ctx.out, ctx.inp, ctx.w, NULL, N, C, OC);
    check_close_d("matmul forward, no bias", out, ctx.out, no, TOL_FWD);

    float *dinp = falloc(ni), *dw = falloc(nw), *db = falloc(OC);
    hy_cpu_matmul_backward(dinp, dw, db, dout, inp, w, N, C, OC);
    check_grad("matmul dinp", dinp, ctx.inp, ni, matmul_loss, &ctx);
    check_grad("matmul dweight", dw, ctx.w, nw, matmul_loss, &ctx);
    check_grad("matmul dbias", db, ctx.bias, OC, matmul_loss, &ctx);

    /* Accumulation: a second call adds the same again. */
    float *dinp2 = falloc(ni), *dw2 = falloc(nw), *db2 = falloc(OC);
    memcpy(dinp2, dinp, ni * sizeof *dinp);
    memcpy(dw2, dw, nw * sizeof *dw);
    memcpy(db2, db, OC * sizeof *db);
    hy_cpu_matmul_backward(dinp2, dw2, db2, dout, inp, w, N, C, OC);
    check_doubled("matmul dinp twice", dinp2, dinp, ni);
    check_doubled("matmul dweight twice", dw2, dw, nw);
    check_doubled("matmul dbias twice", db2, db, OC);

    /* NULL pointers are skipped; the others are still computed. */
    memset(dw2, 0, nw * sizeof *dw2);
    hy_cpu_matmul_backward(NULL, dw2, NULL, dout, inp, w, N, C, OC);
    check_close_f("matmul dweight alone", dw2, dw, nw, TOL_TWICE);
    memset(dinp2, 0, ni * sizeof *dinp2);
    memset(db2, 0, OC * sizeof *db2);
    hy_cpu_matmul_backward(dinp2, NULL, db2, dout, inp, w, N, C, OC);
    check_close_f("matmul dinp without dweight", dinp2, dinp, ni, TOL_TWICE);
    check_close_f("matmul dbias without dweight", db2, db, OC, TOL_TWICE);

    free(inp); free(w); free(bias); free(dout); free(out);
    free(ctx.inp); free(ctx.w); free(ctx.bias); free(ctx.out);
    free(dinp); free(dw); free(db); free(dinp2); free(dw2); free(db2);
}

static void ref_lm_head(double *logits, const double *inp, const double *wte, int N, int C, int V) {
    for (int n = 0; n < N; n++)
        for (int v = 0; v < V; v++) {
            double s = 0.0;
            for (int c = 0; c < C; c++) s += inp[n * C + c] * wte[v * C + c];
            logits[n * V + v] = s;
        }
}

typedef struct {
    int N, C, V;
    double *inp, *wte, *out;
    const float *r;
} lm_head_ctx;

static double lm_head_loss(void *p) {
    lm_head_ctx *c = p;
    ref_lm_head(c->out, c->inp, c->wte, c->N, c->C, c->V);
    return dot_fd(c->r, c->out, (size_t)c->N * c->V);
}

static void test_lm_head(void) {
    rng r = {2};
    int N = 10, C = 12, V = 37;
    size_t ni = (size_t)N * C, nw = (size_t)V * C, no = (size_t)N * V;
    float *inp = frand(&r, ni, -1, 1), *wte = frand(&r, nw, -1, 1);
    float *dout = frand(&r, no, -1, 1), *out = falloc(no);
    lm_head_ctx ctx = {N, C, V, to_d(inp, ni), to_d(wte, nw), dalloc(no), dout};

    hy_cpu_lm_head_forward(out, inp, wte, NULL, N, C, V);
    ref_lm_head(ctx.out, ctx.inp, ctx.wte, N, C, V);
    check_close_d("lm_head forward", out, ctx.out, no, TOL_FWD);

    float *dinp = falloc(ni), *dwte = falloc(nw);
    hy_cpu_lm_head_backward(dinp, dwte, NULL, dout, inp, wte, N, C, V);
    check_grad("lm_head dinp", dinp, ctx.inp, ni, lm_head_loss, &ctx);
    check_grad("lm_head dwte", dwte, ctx.wte, nw, lm_head_loss, &ctx);

    float *dinp2 = falloc(ni), *dwte2 = falloc(nw);
    memcpy(dinp2, dinp, ni * sizeof *dinp);
    memcpy(dwte2, dwte, nw * sizeof *dwte);
    hy_cpu_lm_head_backward(dinp2, dwte2, NULL, dout, inp, wte, N, C, V);
    check_doubled("lm_head dinp twice", dinp2, dinp, ni);
    check_doubled("lm_head dwte twice", dwte2, dwte, nw);

    memset(dwte2, 0, nw * sizeof *dwte2);
    hy_cpu_lm_head_backward(NULL, dwte2, NULL, dout, inp, wte, N, C, V);
    check_close_f("lm_head dwte alone", dwte2, dwte, nw, TOL_TWICE);

    /* BERT's decoder bias: added to every row; its gradient the column sums */
    float *bias = frand(&r, (size_t)V, -1, 1), *outb = falloc(no), *db = falloc((size_t)V);
    hy_cpu_lm_head_forward(outb, inp, wte, bias, N, C, V);
    int biased = 1;
    for (size_t i = 0; i < no; i++) biased &= fabsf(outb[i] - (out[i] + bias[i % V])) <= 1e-5f;
    CHECKF(biased, "lm_head forward with a bias is not the product plus the bias");
    hy_cpu_lm_head_backward(NULL, NULL, db, dout, inp, wte, N, C, V);
    int summed = 1;
    for (int v = 0; v < V; v++) {
        double col = 0;
        for (int n = 0; n < N; n++) col += dout[(size_t)n * V + v];
        summed &= fabs(db[v] - col) <= 1e-5;
    }
    CHECKF(summed, "lm_head dbias is not the column sums of dlogits");
    free(bias); free(outb); free(db);

    free(inp); free(wte); free(dout); free(out);
    free(ctx.inp); free(ctx.wte); free(ctx.out);
    free(dinp); free(dwte); free(dinp2); free(dwte2);
}

// ----------------------------------------------------------------------------
// layernorm, residual, and the fused residual + layernorm

static void ref_layernorm(double *out, double *mean, double *rstd, const double *x,
                          const double *w, const double *b, int N, int C) {
    for (int n = 0; n < N; n++) {
        const double *row = x + (size_t)n * C;
        double mu = 0.0, var = 0.0;
        for (int i = 0; i < C; i++) mu += row[i];
        mu /= C;
        for (int i = 0; i < C; i++) var += (row[i] - mu) * (row[i] - mu);
        var /= C;
        double rs = 1.0 / sqrt(var + 1e-5);
        for (int i = 0; i < C; i++) out[(size_t)n * C + i] = (row[i] - mu) * rs * w[i] + b[i];
        if (mean != NULL) mean[n] = mu;
        if (rstd != NULL) rstd[n] = rs;
    }
}

typedef struct {
    int N, C;
    double *x, *w, *b, *out;
    const float *r;
} layernorm_ctx;

static double layernorm_loss(void *p) {
    layernorm_ctx *c = p;
    ref_layernorm(c->out, NULL, NULL, c->x, c->w, c->b, c->N, c->C);
    return dot_fd(c->r, c->out, (size_t)c->N * c->C);
}

static void test_layernorm(void) {
    rng r = {3};
    int N = 10, C = 12;
    size_t nx = (size_t)N * C;
    float *x = frand(&r, nx, -2, 2);
    /* A per-row offset, larger on some rows than the spread: the variance
     * must not come from E[x²] − mean². */
    for (int n = 0; n < N; n++)
        for (int i = 0; i < C; i++) x[n * C + i] += (float)(n % 3) * 4.0f - 4.0f;
    /* And a row whose variance (~1e-6) is below eps = 1e-5, so that eps
     * itself, and where it enters, is tested at O(1), not at O(1e-5). */
    for (int i = 0; i < C; i++) x[1 * C + i] = rng_uniform(&r, -2e-3f, 2e-3f);
    float *w = frand(&r, C, 0.5f, 1.5f), *b = frand(&r, C, -0.5f, 0.5f);
    float *dout = frand(&r, nx, -1, 1);
    float *out = falloc(nx), *mean = falloc(N), *rstd = falloc(N);
    layernorm_ctx ctx = {N, C, to_d(x, nx), to_d(w, C), to_d(b, C), dalloc(nx), dout};
    double *mean64 = dalloc(N), *rstd64 = dalloc(N);

    hy_cpu_layernorm_forward(out, mean, rstd, x, w, b, N, C, HY_LAYERNORM_EPS);
    ref_layernorm(ctx.out, mean64, rstd64, ctx.x, ctx.w, ctx.b, N, C);
    check_close_d("layernorm forward", out, ctx.out, nx, TOL_FWD);
    check_close_d("layernorm mean", mean, mean64, N, TOL_FWD);
    check_close_d("layernorm rstd", rstd, rstd64, N, TOL_FWD);

    float *dx = falloc(nx), *dw = falloc(C), *db = falloc(C);
    hy_cpu_layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, C);
    check_grad("layernorm dinp", dx, ctx.x, nx, layernorm_loss, &ctx);
    check_grad("layernorm dweight", dw, ctx.w, C, layernorm_loss, &ctx);
    check_grad("layernorm dbias", db, ctx.b, C, layernorm_loss, &ctx);

    float *dx2 = falloc(nx), *dw2 = falloc(C), *db2 = falloc(C);
    memcpy(dx2, dx, nx * sizeof *dx);
    memcpy(dw2, dw, C * sizeof *dw);
    memcpy(db2, db, C * sizeof *db);
    hy_cpu_layernorm_backward(dx2, dw2, db2, dout, x, w, mean, rstd, N, C);
    check_doubled("layernorm dinp twice", dx2, dx, nx);
    check_doubled("layernorm dweight twice", dw2, dw, C);
    check_doubled("layernorm dbias twice", db2, db, C);
    memset(dx2, 0, nx * sizeof *dx2);
    hy_cpu_layernorm_backward(dx2, NULL, NULL, dout, x, w, mean, rstd, N, C);
    check_close_f("layernorm dinp alone", dx2, dx, nx, TOL_TWICE);

    /* Residual: out = a + b exactly (one fp32 add), and the backward adds
     * dout into both. */
    float *a = frand(&r, nx, -1, 1), *bb = frand(&r, nx, -1, 1), *res = falloc(nx);
    hy_cpu_residual_forward(res, a, bb, nx);
    int exact = 1;
    for (size_t i = 0; i < nx; i++) exact &= res[i] == a[i] + bb[i];
    CHECKF(exact, "residual forward is not a + b");
    float *da = falloc(nx), *dbb = falloc(nx);
    for (size_t i = 0; i < nx; i++) da[i] = 1.0f;
    hy_cpu_residual_backward(da, dbb, dout, nx);
    hy_cpu_residual_backward(NULL, dbb, dout, nx);
    exact = 1;
    for (size_t i = 0; i < nx; i++) exact &= da[i] == 1.0f + dout[i] && dbb[i] == 2.0f * dout[i];
    CHECKF(exact, "residual backward does not accumulate dout into da and db");

    /* Fused: bit-identical to residual then layernorm, and right against
     * the float64 reference of LayerNorm(a + b). */
    float *res2 = falloc(nx), *out2 = falloc(nx), *mean2 = falloc(N), *rstd2 = falloc(N);
    hy_cpu_residual_layernorm_forward(res2, out2, mean2, rstd2, a, bb, w, b, N, C);
    hy_cpu_layernorm_forward(out, mean, rstd, res, w, b, N, C, HY_LAYERNORM_EPS);
    CHECK(memcmp(res2, res, nx * sizeof *res) == 0);
    CHECK(memcmp(out2, out, nx * sizeof *out) == 0);
    CHECK(memcmp(mean2, mean, N * sizeof *mean) == 0);
    CHECK(memcmp(rstd2, rstd, N * sizeof *rstd) == 0);
    double *sum64 = dalloc(nx);
    for (size_t i = 0; i < nx; i++) sum64[i] = (double)a[i] + bb[i];
    ref_layernorm(ctx.out, NULL, NULL, sum64, ctx.w, ctx.b, N, C);
    check_close_d("residual+layernorm forward", out2, ctx.out, nx, TOL_FWD);

    free(x); free(w); free(b); free(dout); free(out); free(mean); free(rstd);
    free(ctx.x); free(ctx.w); free(ctx.b); free(ctx.out); free(mean64); free(rstd64);
    free(dx); free(dw); free(db); free(dx2); free(dw2); free(db2);
    free(a); free(bb); free(res); free(da); free(dbb);
    free(res2); free(out2); free(mean2); free(rstd2); free(sum64);
}

// ----------------------------------------------------------------------------
// gelu

/* GPT-2's tanh approximation, or BERT's exact x Φ(x) */
static void ref_gelu(double *out, const double *x, size_t n, int kind) {
    for (size_t i = 0; i < n; i++) {
        double u = sqrt(2.0 / M_PI) * (x[i] + 0.044715 * x[i] * x[i] * x[i]);
        out[i] = kind == HY_GELU_ERF ? 0.5 * x[i] * (1.0 + erf(x[i] / sqrt(2.0)))
                                     : 0.5 * x[i] * (1.0 + tanh(u));
    }
}

typedef struct {
    size_t n;
    double *x, *out;
    const float *r;
    int kind;
} gelu_ctx;

static double gelu_loss(void *p) {
    gelu_ctx *c = p;
    ref_gelu(c->out, c->x, c->n, c->kind);
    return dot_fd(c->r, c->out, c->n);
}

static void test_gelu(int kind) {
    rng r = {4};
    size_t n = 61;
    float *x = frand(&r, n, -6, 6);
    /* The corners: 0, tiny, and the saturated tails. */
    x[0] = 0.0f; x[1] = 1e-3f; x[2] = -1e-3f; x[3] = 10.0f; x[4] = -10.0f; x[5] = -30.0f;
    float *dout = frand(&r, n, -1, 1), *out = falloc(n), *dx = falloc(n);
    gelu_ctx ctx = {n, to_d(x, n), dalloc(n), dout, kind};

    hy_cpu_gelu_forward(out, x, n, kind);
    ref_gelu(ctx.out, ctx.x, n, kind);
    check_close_d("gelu forward", out, ctx.out, n, TOL_FWD);

    hy_cpu_gelu_backward(dx, dout, x, n, kind);
    check_grad("gelu dinp", dx, ctx.x, n, gelu_loss, &ctx);
    float *dx2 = falloc(n);
    memcpy(dx2, dx, n * sizeof *dx);
    hy_cpu_gelu_backward(dx2, dout, x, n, kind);
    check_doubled("gelu dinp twice", dx2, dx, n);
    /* the two kinds differ by up to ~5e-4 (at |x| near 2): the kind is used */
    float *other = falloc(n);
    hy_cpu_gelu_forward(other, x, n, kind == HY_GELU_ERF ? HY_GELU_TANH : HY_GELU_ERF);
    double most = 0;
    for (size_t i = 0; i < n; i++) most = fmax(most, fabs((double)other[i] - out[i]));
    CHECKF(most > 1e-4, "gelu kinds %d: the other kind differs by only %g", kind, most);
    free(other);

    free(x); free(dout); free(out); free(dx); free(dx2); free(ctx.x); free(ctx.out);
}


// ----------------------------------------------------------------------------
// rmsnorm

static void ref_rmsnorm(double *out, double *rstd, const double *x, const double *w, int N,
                        int C, double eps) {
    for (int n = 0; n < N; n++) {
        const double *row = x + (size_t)n * C;
        double ms = 0.0;
        for (int i = 0; i < C; i++) ms += row[i] * row[i];
        double rs = 1.0 / sqrt(ms / C + eps);
        for (int i = 0; i < C; i++) out[(size_t)n * C + i] = row[i] * rs * w[i];
        if (rstd != NULL) rstd[n] = rs;
    }
}

typedef struct {
    int N, C;
    double eps;
    double *x, *w, *out;
    const float *r;
} rmsnorm_ctx;

static double rmsnorm_loss(void *p) {
    rmsnorm_ctx *c = p;
    ref_rmsnorm(c->out, NULL, c->x, c->w, c->N, c->C, c->eps);
    return dot_fd(c->r, c->out, (size_t)c->N * c->C);
}

static void rmsnorm_case(int N, int C, float eps, uint64_t seed) {
    char what[128];
    rng r = {seed};
    size_t nx = (size_t)N * C;
    float *x = frand(&r, nx, -2, 2);
    /* A row of mean square ~1e-6, below eps = 1e-5 (when N > 1): eps
     * itself, and where it enters, matters at O(1) there. */
    if (N > 1)
        for (int i = 0; i < C; i++) x[(size_t)C + i] = rng_uniform(&r, -2e-3f, 2e-3f);
    float *w = frand(&r, C, 0.5f, 1.5f), *dout = frand(&r, nx, -1, 1);
    float *out = falloc(nx), *rstd = falloc(N);
    rmsnorm_ctx ctx = {N, C, eps, to_d(x, nx), to_d(w, C), dalloc(nx), dout};
    double *rstd64 = dalloc(N);

    hy_cpu_rmsnorm_forward(out, rstd, x, w, N, C, eps);
    ref_rmsnorm(ctx.out, rstd64, ctx.x, ctx.w, N, C, eps);
    snprintf(what, sizeof what, "rmsnorm forward N=%d C=%d", N, C);
    check_close_d(what, out, ctx.out, nx, TOL_FWD);
    snprintf(what, sizeof what, "rmsnorm rstd N=%d C=%d", N, C);
    check_close_d(what, rstd, rstd64, N, TOL_FWD);

    float *dx = falloc(nx), *dw = falloc(C);
    hy_cpu_rmsnorm_backward(dx, dw, dout, x, w, rstd, N, C);
    snprintf(what, sizeof what, "rmsnorm dinp N=%d C=%d", N, C);
    check_grad(what, dx, ctx.x, nx, rmsnorm_loss, &ctx);
    snprintf(what, sizeof what, "rmsnorm dweight N=%d C=%d", N, C);
    check_grad(what, dw, ctx.w, C, rmsnorm_loss, &ctx);

    float *dx2 = falloc(nx), *dw2 = falloc(C);
    memcpy(dx2, dx, nx * sizeof *dx);
    memcpy(dw2, dw, C * sizeof *dw);
    hy_cpu_rmsnorm_backward(dx2, dw2, dout, x, w, rstd, N, C);
    check_doubled("rmsnorm dinp twice", dx2, dx, nx);
    check_doubled("rmsnorm dweight twice", dw2, dw, C);
    /* NULL gradients are skipped, and each alone equals its part of both. */
    memset(dx2, 0, nx * sizeof *dx2);
    hy_cpu_rmsnorm_backward(dx2, NULL, dout, x, w, rstd, N, C);
    check_close_f("rmsnorm dinp alone", dx2, dx, nx, TOL_TWICE);
    memset(dw2, 0, C * sizeof *dw2);
    hy_cpu_rmsnorm_backward(NULL, dw2, dout, x, w, rstd, N, C);
    check_close_f("rmsnorm dweight alone", dw2, dw, C, TOL_TWICE);

    free(x); free(w); free(dout); free(out); free(rstd); free(rstd64);
    free(ctx.x); free(ctx.w); free(ctx.out); free(dx); free(dw); free(dx2); free(dw2);
}

static void test_rmsnorm(void) {
    rmsnorm_case(10, 12, 1e-5f, 20);
    rmsnorm_case(1, 7, 1e-6f, 21);    /* N = 1, C odd, Llama 3's eps */
    rmsnorm_case(5, 33, 1e-6f, 22);   /* the tiny row against a smaller eps */
}

// ----------------------------------------------------------------------------
// swiglu

static void ref_swiglu(double *out, const double *inp, int N, int F) {
    for (int n = 0; n < N; n++)
        for (int i = 0; i < F; i++) {
            double g = inp[(size_t)n * 2 * F + i], u = inp[(size_t)n * 2 * F + F + i];
            out[(size_t)n * F + i] = g / (1.0 + exp(-g)) * u;
        }
}

typedef struct {
    int N, F;
    double *inp, *out;
    const float *r;
} swiglu_ctx;

static double swiglu_loss(void *p) {
    swiglu_ctx *c = p;
    ref_swiglu(c->out, c->inp, c->N, c->F);
    return dot_fd(c->r, c->out, (size_t)c->N * c->F);
}

static void swiglu_case(int N, int F, uint64_t seed) {
    char what[128];
    rng r = {seed};
    size_t ni = (size_t)N * 2 * F, no = (size_t)N * F;
    float *inp = frand(&r, ni, -6, 6);
    /* The corners of the gate: 0, tiny, and the saturated tails. */
    float corners[] = {0.0f, 1e-3f, -1e-3f, 12.0f, -12.0f, -30.0f};
    for (int i = 0; i < 6 && i < F; i++) inp[i] = corners[i];
    float *dout = frand(&r, no, -1, 1), *out = falloc(no), *dinp = falloc(ni);
    swiglu_ctx ctx = {N, F, to_d(inp, ni), dalloc(no), dout};

    hy_cpu_swiglu_forward(out, inp, N, F);
    ref_swiglu(ctx.out, ctx.inp, N, F);
    snprintf(what, sizeof what, "swiglu forward N=%d F=%d", N, F);
    check_close_d(what, out, ctx.out, no, TOL_FWD);

    hy_cpu_swiglu_backward(dinp, dout, inp, N, F);
    snprintf(what, sizeof what, "swiglu dinp N=%d F=%d", N, F);
    check_grad(what, dinp, ctx.inp, ni, swiglu_loss, &ctx);
    float *dinp2 = falloc(ni);
    memcpy(dinp2, dinp, ni * sizeof *dinp);
    hy_cpu_swiglu_backward(dinp2, dout, inp, N, F);
    check_doubled("swiglu dinp twice", dinp2, dinp, ni);

    /* Far in the negative tail nothing is NaN: silu → −0. */
    float big[2] = {-200.0f, 3.0f}, o = 1.0f, d[2] = {0, 0}, one = 1.0f;
    hy_cpu_swiglu_forward(&o, big, 1, 1);
    hy_cpu_swiglu_backward(d, &one, big, 1, 1);
    CHECKF(o == 0.0f && d[0] == 0.0f && d[1] == 0.0f, "swiglu at gate -200: out %g, d %g %g",
           (double)o, (double)d[0], (double)d[1]);

    free(inp); free(dout); free(out); free(dinp); free(dinp2); free(ctx.inp); free(ctx.out);
}

static void test_swiglu(void) {
    swiglu_case(7, 9, 30);
    swiglu_case(1, 1, 31);    /* N = 1, F = 1 */
    swiglu_case(4, 16, 32);
}

// ----------------------------------------------------------------------------
// RoPE: the table (lib/model.h) and the op

/* Hugging Face's llama3 inverse frequency i of a head of size hd, in
 * float64 (transformers' _compute_llama3_parameters, with its
 * torch.where's written out as branches). */
static double ref_inv_freq(int i, int hd, double theta, const hy_rope_scaling *sc) {
    double f = pow(theta, -2.0 * i / hd);
    if (sc == NULL || sc->factor == 0) return f;
    double old = sc->original_max_position_embeddings, wavelen = 2 * M_PI / f;
    if (wavelen < old / sc->high_freq_factor) return f;
    if (wavelen > old / sc->low_freq_factor) return f / sc->factor;
    double smooth = (old / wavelen - sc->low_freq_factor) /
                    (sc->high_freq_factor - sc->low_freq_factor);
    return (1 - smooth) * f / sc->factor + smooth * f;
}

static void rope_table_case(int T, int hd, double theta, const hy_rope_scaling *sc) {
    float *cs = falloc((size_t)T * hd);
    double *want = dalloc((size_t)T * hd);
    hy_rope_table(cs, T, hd, theta, sc);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < hd / 2; i++) {
            double a = t * ref_inv_freq(i, hd, theta, sc);
            want[(size_t)t * hd + i] = cos(a);
            want[(size_t)t * hd + hd / 2 + i] = sin(a);
        }
    /* The table takes the angle as one fp32 product (as Hugging Face
     * does), off by up to T · 6e-8 radians from the float64 angle. */
    char what[128];
    snprintf(what, sizeof what, "rope table T=%d hd=%d theta=%g scaled=%d", T, hd, theta,
             sc != NULL && sc->factor != 0);
    check_close_d(what, cs, want, (size_t)T * hd, 2e-7 * (T + 1));
    free(cs);
    free(want);
}

static void test_rope_table(void) {
    rope_table_case(17, 2, 10000.0, NULL);
    rope_table_case(64, 128, 500000.0, NULL);
    hy_rope_scaling none = {0, 1, 4, 8192};
    rope_table_case(9, 64, 10000.0, &none);
    /* Llama 3.1/3.2's: with hd = 128 and theta = 500000 the wavelengths
     * 2π·theta^(2i/hd) run from 6.3 to ~2.6e6, across both borders (2048
     * and 8192), so all three bands are exercised. */
    hy_rope_scaling llama3 = {8, 1, 4, 8192};
    rope_table_case(64, 128, 500000.0, &llama3);
    /* The bands themselves, independent of the blend formula: position 1's
     * angle is the frequency, and asin recovers it while it is small. */
    float cs[2 * 128];
    hy_rope_table(cs, 2, 128, 500000.0, &llama3);
    double f0 = asin(cs[128 + 64]);      /* i = 0: wavelength 2π, kept */
    double f63 = asin(cs[128 + 64 + 63]);  /* i = 63: wavelength ~2.6e6, divided by 8 */
    CHECK_NEAR(f0, 1.0, 1e-6);
    CHECK_NEAR(f63 * 8.0 / pow(500000.0, -126.0 / 128.0), 1.0, 1e-5);
    /* Position 0 is the identity. */
    int ident = 1;
    for (int i = 0; i < 64; i++) ident &= cs[i] == 1.0f && cs[64 + i] == 0.0f;
    CHECKF(ident, "rope table: position 0 is not cos 1, sin 0");
}

static void ref_rope(double *qkv, const float *cs, int B, int T, int NH, int NKV, int hd) {
    size_t row = (size_t)(NH + 2 * NKV) * hd;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < NH + NKV; h++) {
                double *x = qkv + ((size_t)b * T + t) * row + (size_t)h * hd;
                for (int i = 0; i < hd / 2; i++) {
                    double c = cs[(size_t)t * hd + i], s = cs[(size_t)t * hd + hd / 2 + i];
                    double x0 = x[i], x1 = x[i + hd / 2];
                    x[i] = x0 * c - x1 * s;
                    x[i + hd / 2] = x1 * c + x0 * s;
                }
            }
}

typedef struct {
    int B, T, NH, NKV, hd;
    const float *cs;
    double *x, *y;
    const float *r;
} rope_ctx;

static double rope_loss(void *p) {
    rope_ctx *c = p;
    size_t n = (size_t)c->B * c->T * (c->NH + 2 * c->NKV) * c->hd;
    memcpy(c->y, c->x, n * sizeof *c->y);
    ref_rope(c->y, c->cs, c->B, c->T, c->NH, c->NKV, c->hd);
    return dot_fd(c->r, c->y, n);
}

static void rope_case(int B, int T, int NH, int NKV, int hd, uint64_t seed) {
    char what[128];
    rng r = {seed};
    size_t n = (size_t)B * T * (NH + 2 * NKV) * hd, row = (size_t)(NH + 2 * NKV) * hd;
    float *cs = falloc((size_t)T * hd);
    hy_rope_table(cs, T, hd, 10000.0, NULL);
    float *x = frand(&r, n, -2, 2), *y = falloc(n), *dout = frand(&r, n, -1, 1);
    memcpy(y, x, n * sizeof *x);
    rope_ctx ctx = {B, T, NH, NKV, hd, cs, to_d(x, n), dalloc(n), dout};

    hy_cpu_rope(y, cs, B, T, NH, NKV, hd, 0);
    memcpy(ctx.y, ctx.x, n * sizeof *ctx.y);
    ref_rope(ctx.y, cs, B, T, NH, NKV, hd);
    snprintf(what, sizeof what, "rope forward B=%d T=%d NH=%d NKV=%d hd=%d", B, T, NH, NKV, hd);
    check_close_d(what, y, ctx.y, n, TOL_FWD);
    /* The value heads are not touched, to the bit. */
    int v_same = 1;
    for (size_t bt = 0; bt < (size_t)B * T; bt++)
        for (size_t j = (size_t)(NH + NKV) * hd; j < row; j++) v_same &= y[bt * row + j] == x[bt * row + j];
    CHECKF(v_same, "rope: a value head changed (NH=%d NKV=%d hd=%d)", NH, NKV, hd);

    /* The inverse undoes the forward (a rotation, up to fp32 rounding). */
    hy_cpu_rope(y, cs, B, T, NH, NKV, hd, 1);
    snprintf(what, sizeof what, "rope inverse of forward NH=%d NKV=%d hd=%d", NH, NKV, hd);
    check_close_f(what, y, x, n, 1e-6);

    /* The inverse applied to dout is the gradient of Σ dout ⊙ rope(x). */
    memcpy(y, dout, n * sizeof *y);
    hy_cpu_rope(y, cs, B, T, NH, NKV, hd, 1);
    snprintf(what, sizeof what, "rope backward B=%d T=%d NH=%d NKV=%d hd=%d", B, T, NH, NKV, hd);
    check_grad(what, y, ctx.x, n, rope_loss, &ctx);

    free(cs); free(x); free(y); free(dout); free(ctx.x); free(ctx.y);
}

static void test_rope(void) {
    rope_case(2, 5, 4, 2, 8, 40);     /* GQA */
    rope_case(1, 1, 3, 3, 2, 41);     /* T = 1 (the identity), hd = 2 */
    rope_case(1, 7, 2, 1, 128, 42);   /* hd = 128, NKV = 1 */
    rope_case(3, 3, 1, 1, 6, 43);
}

// ----------------------------------------------------------------------------
// attention

/* float64 attention straight from the equations of ops.h: query head h
 * reads kv head h / (NH/NKV); lse in natural log. */
static void ref_attention(double *out, double *lse, const double *qkv, int B, int T, int NH,
                          int NKV, int hd, int causal) {
    size_t ld = (size_t)(NH + 2 * NKV) * hd, C = (size_t)NH * hd;
    double scale = 1.0 / sqrt((double)hd);
    double *a = dalloc((size_t)T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            int j = h / (NH / NKV);
            for (int t = 0; t < T; t++) {
                const double *q = qkv + ((size_t)b * T + t) * ld + (size_t)h * hd;
                int len = causal ? t + 1 : T;
                double mx = -INFINITY, sum = 0.0;
                for (int s = 0; s < len; s++) {
                    const double *k = qkv + ((size_t)b * T + s) * ld + (size_t)(NH + j) * hd;
                    double dot = 0.0;
                    for (int d = 0; d < hd; d++) dot += q[d] * k[d];
                    a[s] = dot * scale;
                    if (a[s] > mx) mx = a[s];
                }
                for (int s = 0; s < len; s++) sum += exp(a[s] - mx);
                if (lse != NULL) lse[((size_t)b * NH + h) * T + t] = mx + log(sum);
                for (int d = 0; d < hd; d++) {
                    double o = 0.0;
                    for (int s = 0; s < len; s++)
                        o += exp(a[s] - mx) / sum *
                             qkv[((size_t)b * T + s) * ld + (size_t)(NH + NKV + j) * hd + d];
                    out[((size_t)b * T + t) * C + (size_t)h * hd + d] = o;
                }
            }
        }
    free(a);
}

typedef struct {
    int B, T, NH, NKV, hd, causal;
    double *qkv, *out;
    const float *r;
} attention_ctx;

static double attention_loss(void *p) {
    attention_ctx *c = p;
    ref_attention(c->out, NULL, c->qkv, c->B, c->T, c->NH, c->NKV, c->hd, c->causal);
    return dot_fd(c->r, c->out, (size_t)c->B * c->T * c->NH * c->hd);
}

static void attention_case(int B, int T, int NH, int NKV, int hd, int causal, uint64_t seed) {
    char what[160], shape[96];
    snprintf(shape, sizeof shape, "B=%d T=%d NH=%d NKV=%d hd=%d causal=%d", B, T, NH, NKV, hd,
             causal);
    rng r = {seed};
    size_t nq = (size_t)B * T * (NH + 2 * NKV) * hd, no = (size_t)B * T * NH * hd;
    size_t nl = (size_t)B * NH * T;
    /* Scores of a few units, so the softmax is neither flat nor one-hot
     * (q·k / sqrt(hd) has the same spread for every hd). */
    float *qkv = frand(&r, nq, -1.5f, 1.5f), *dout = frand(&r, no, -1, 1);
    float *out = falloc(no), *lse = falloc(nl);
    attention_ctx ctx = {B, T, NH, NKV, hd, causal, to_d(qkv, nq), dalloc(no), dout};
    double *lse64 = dalloc(nl);

    hy_cpu_attention_forward(out, lse, qkv, B, T, NH, NKV, hd, causal);
    ref_attention(ctx.out, lse64, ctx.qkv, B, T, NH, NKV, hd, causal);
    snprintf(what, sizeof what, "attention forward %s", shape);
    check_close_d(what, out, ctx.out, no, TOL_FWD);
    snprintf(what, sizeof what, "attention lse %s", shape);
    check_close_d(what, lse, lse64, nl, TOL_FWD);

    /* Backward. The scratch is exactly 2·T·T floats and starts as NaN, so
     * any read before write or any overrun shows (ASan catches the
     * overrun). */
    size_t ns = 2 * (size_t)T * T;
    float *dqkv = falloc(nq), *scratch = falloc(ns);
    for (size_t i = 0; i < ns; i++) scratch[i] = NAN;
    hy_cpu_attention_backward(dqkv, scratch, dout, qkv, out, lse, B, T, NH, NKV, hd, causal);
    snprintf(what, sizeof what, "attention dqkv %s", shape);
    check_grad(what, dqkv, ctx.qkv, nq, attention_loss, &ctx);

    float *dqkv2 = falloc(nq);
    memcpy(dqkv2, dqkv, nq * sizeof *dqkv);
    hy_cpu_attention_backward(dqkv2, scratch, dout, qkv, out, lse, B, T, NH, NKV, hd, causal);
    snprintf(what, sizeof what, "attention dqkv twice %s", shape);
    check_doubled(what, dqkv2, dqkv, nq);

    free(qkv); free(dout); free(out); free(lse); free(lse64); free(dqkv); free(dqkv2);
    free(scratch); free(ctx.qkv); free(ctx.out);
}

/* Causal masking, on its own: a query's output must not depend on a later
 * key or value at all, to the bit, and neither may its gradient flow
 * there. */
static void test_attention_mask(void) {
    rng r = {80};
    int T = 6, NH = 2, NKV = 1, hd = 4;
    size_t ld = (size_t)(NH + 2 * NKV) * hd, nq = (size_t)T * ld, no = (size_t)T * NH * hd;
    float *qkv = frand(&r, nq, -1, 1), *out = falloc(no), *out2 = falloc(no);
    float *lse = falloc((size_t)NH * T), *lse2 = falloc((size_t)NH * T);
    hy_cpu_attention_forward(out, lse, qkv, 1, T, NH, NKV, hd, 1);
    for (size_t i = (size_t)NH * hd; i < ld; i++) qkv[(T - 1) * ld + i] += 5.0f;   /* last k, v */
    hy_cpu_attention_forward(out2, lse2, qkv, 1, T, NH, NKV, hd, 1);
    CHECK(memcmp(out, out2, (size_t)(T - 1) * NH * hd * sizeof *out) == 0);
    /* Only the dout of the last row is non-zero: q of the earlier rows gets
     * nothing, and the last key only what the last query gave it. */
    float *dout = falloc(no), *dqkv = falloc(nq), *scratch = falloc(2 * (size_t)T * T);
    for (int i = 0; i < NH * hd; i++) dout[(size_t)(T - 1) * NH * hd + i] = 1.0f;
    hy_cpu_attention_backward(dqkv, scratch, dout, qkv, out2, lse2, 1, T, NH, NKV, hd, 1);
    for (int t = 0; t < T - 1; t++)
        check_exact_zero("attention: dq of a row before the only dout", dqkv + (size_t)t * ld,
                         (size_t)NH * hd);
    free(qkv); free(out); free(out2); free(lse); free(lse2); free(dout); free(dqkv); free(scratch);
}

static void test_attention(void) {
    for (int causal = 0; causal <= 1; causal++) {
        attention_case(2, 5, 3, 3, 4, causal, 50 + causal);   /* NKV = NH: GPT-2's layout */
        attention_case(1, 7, 3, 3, 5, causal, 60 + causal);   /* hd = 5, odd everywhere */
        attention_case(3, 1, 2, 2, 4, causal, 70 + causal);   /* T = 1 */
        attention_case(2, 5, 4, 2, 4, causal, 90 + causal);   /* NKV = NH/2 */
        attention_case(1, 7, 3, 1, 6, causal, 100 + causal);  /* NKV = 1 (multi-query) */
        attention_case(1, 3, 2, 1, 128, causal, 110 + causal);   /* hd = 128 */
        attention_case(1, 9, 2, 1, 2, causal, 120 + causal);  /* hd = 2 */
    }
    test_attention_mask();
}

// ----------------------------------------------------------------------------
// embedding

typedef struct {
    int B, T, C;
    const int *tokens;
    double *wte, *wpe, *out;
    const float *r;
} embedding_ctx;

static void ref_embedding(double *out, const int *tokens, const double *wte, const double *wpe,
                          int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int i = 0; i < C; i++)
                out[((size_t)b * T + t) * C + i] =
                    wte[(size_t)tokens[b * T + t] * C + i] + wpe[(size_t)t * C + i];
}

static double embedding_loss(void *p) {
    embedding_ctx *c = p;
    ref_embedding(c->out, c->tokens, c->wte, c->wpe, c->B, c->T, c->C);
    return dot_fd(c->r, c->out, (size_t)c->B * c->T * c->C);
}

static void test_embedding(void) {
    rng r = {5};
    int B = 2, T = 5, C = 12, V = 37, maxT = 8; /* wpe has more rows than T */
    size_t no = (size_t)B * T * C;
    int tokens[10];
    for (int i = 0; i < B * T; i++) tokens[i] = rng_int(&r, V);
    tokens[3] = tokens[0]; /* a repeat within a row */
    tokens[7] = tokens[0]; /* and across rows, at another position */
    tokens[9] = V - 1;     /* the last row of wte */
    float *wte = frand(&r, (size_t)V * C, -1, 1), *wpe = frand(&r, (size_t)maxT * C, -1, 1);
    float *dout = frand(&r, no, -1, 1), *out = falloc(no);
    embedding_ctx ctx = {B, T, C, tokens, to_d(wte, (size_t)V * C), to_d(wpe, (size_t)maxT * C),
                         dalloc(no), dout};

    hy_cpu_embedding_forward(out, tokens, wte, wpe, NULL, B, T, C);
    ref_embedding(ctx.out, tokens, ctx.wte, ctx.wpe, B, T, C);
    check_close_d("embedding forward", out, ctx.out, no, TOL_FWD);

    float *dwte = falloc((size_t)V * C), *dwpe = falloc((size_t)maxT * C);
    hy_cpu_embedding_backward(dwte, dwpe, dout, tokens, B, T, C);
    check_grad("embedding dwte", dwte, ctx.wte, (size_t)V * C, embedding_loss, &ctx);
    check_grad("embedding dwpe", dwpe, ctx.wpe, (size_t)maxT * C, embedding_loss, &ctx);

    float *dwte2 = falloc((size_t)V * C);
    memcpy(dwte2, dwte, (size_t)V * C * sizeof *dwte);
    hy_cpu_embedding_backward(dwte2, NULL, dout, tokens, B, T, C);
    check_doubled("embedding dwte twice", dwte2, dwte, (size_t)V * C);

    /* BERT's token-type row: added to every token, after the word row */
    float *type = frand(&r, (size_t)C, -1, 1), *outt = falloc(no);
    hy_cpu_embedding_forward(outt, tokens, wte, wpe, type, B, T, C);
    int typed = 1;
    for (size_t i = 0; i < no; i++) typed &= fabsf(outt[i] - (out[i] + type[i % C])) <= 1e-5f;
    CHECKF(typed, "embedding forward with a type row is not the sum plus the row");
    free(type); free(outt);

    /* Without learned positions (wpe NULL, Llama): the token rows alone,
     * and the backward adds into dwte only. */
    hy_cpu_embedding_forward(out, tokens, wte, NULL, NULL, B, T, C);
    int rows = 1;
    for (int bt = 0; bt < B * T; bt++)
        rows &= memcmp(out + (size_t)bt * C, wte + (size_t)tokens[bt] * C, C * sizeof *out) == 0;
    CHECKF(rows, "embedding without wpe: a row is not its token's wte row");
    memcpy(dwte2, dwte, (size_t)V * C * sizeof *dwte);
    hy_cpu_embedding_backward(dwte2, NULL, dout, tokens, B, T, C);
    check_doubled("embedding dwte twice, no wpe", dwte2, dwte, (size_t)V * C);

    free(wte); free(wpe); free(dout); free(out); free(dwte); free(dwpe); free(dwte2);
    free(ctx.wte); free(ctx.wpe); free(ctx.out);
}

// ----------------------------------------------------------------------------
// classifier: softmax + cross-entropy + gradient

/* Per-row losses and their mean over counted rows; returns the count. */
static int ref_classifier(double *losses, double *mean, const double *logits, const int *targets,
                          int N, int V, int Vp) {
    int count = 0;
    double total = 0.0;
    for (int n = 0; n < N; n++) {
        losses[n] = 0.0;
        if (targets[n] < 0) continue;
        const double *z = logits + (size_t)n * Vp;
        double mx = z[0], sum = 0.0;
        for (int i = 1; i < V; i++) if (z[i] > mx) mx = z[i];
        for (int i = 0; i < V; i++) sum += exp(z[i] - mx);
        losses[n] = log(sum) + mx - z[targets[n]];
        total += losses[n];
        count++;
    }
    *mean = count > 0 ? total / count : 0.0;
    return count;
}

typedef struct {
    int N, V, Vp;
    const int *targets;
    double *logits, *losses;
    double scale;
} classifier_ctx;

static double classifier_loss(void *p) {
    classifier_ctx *c = p;
    double mean;
    ref_classifier(c->losses, &mean, c->logits, c->targets, c->N, c->V, c->Vp);
    return c->scale * mean;
}

/* One fused call on random logits (plus `offset`), against the reference. */
static void classifier_case(float offset, uint64_t seed) {
    char what[128];
    rng r = {seed};
    int N = 10, V = 37, Vp = 40;
    size_t nl = (size_t)N * Vp;
    int targets[10];
    for (int n = 0; n < N; n++) targets[n] = rng_int(&r, V);
    targets[2] = HY_IGNORE_INDEX;
    targets[7] = HY_IGNORE_INDEX;
    targets[4] = V - 1;
    float *logits = frand(&r, nl, -3, 3);
    for (size_t i = 0; i < nl; i++) logits[i] += offset;
    /* Padding columns hold values that would dominate if they were read. */
    for (int n = 0; n < N; n++)
        for (int i = V; i < Vp; i++) logits[(size_t)n * Vp + i] = 1e4f;
    float grad_scale = 0.5f;
    classifier_ctx ctx = {N, V, Vp, targets, to_d(logits, nl), dalloc(N), grad_scale};

    double mean64;
    double *losses64 = dalloc(N);
    int count64 = ref_classifier(losses64, &mean64, ctx.logits, targets, N, V, Vp);
    float *losses = falloc(N), mean = -1.0f;
    int count = hy_cpu_classifier_forward_backward(logits, losses, &mean, NULL, targets, N, V, Vp,
                                                   grad_scale);
    CHECKF(count == count64 && count == 8, "classifier count %d, want %d", count, count64);
    snprintf(what, sizeof what, "classifier losses (offset %g)", (double)offset);
    check_close_d(what, losses, losses64, N, TOL_FWD);
    CHECKF(fabs(mean - mean64) <= TOL_FWD * mean64, "classifier mean %.9g, want %.9g",
           (double)mean, mean64);

    /* logits now holds the gradient of grad_scale · mean loss. Padding
     * columns are included in the FD (the reference ignores them, so their
     * true derivative is 0). */
    snprintf(what, sizeof what, "classifier dlogits (offset %g)", (double)offset);
    check_grad(what, logits, ctx.logits, nl, classifier_loss, &ctx);
    check_exact_zero("classifier dlogits of an ignored row", logits + 2 * (size_t)Vp, (size_t)Vp);
    int pad_zero = 1;
    for (int n = 0; n < N; n++)
        for (int i = V; i < Vp; i++) pad_zero &= logits[(size_t)n * Vp + i] == 0.0f;
    CHECKF(pad_zero, "classifier: a padding column's gradient is not 0");
    /* Each counted row of the gradient sums to 0 (softmax minus one-hot). */
    double worst = 0.0;
    for (int n = 0; n < N; n++) {
        double s = 0.0;
        for (int i = 0; i < V; i++) s += logits[(size_t)n * Vp + i];
        if (fabs(s) > worst) worst = fabs(s);
    }
    CHECKF(worst <= 1e-6 * grad_scale, "classifier: a gradient row sums to %.3g, not 0", worst);

    free(logits); free(losses); free(losses64); free(ctx.logits); free(ctx.losses);
}

static void test_classifier(void) {
    classifier_case(0.0f, 6);
    /* Logits near 200: exp(200) overflows even double's sum without the max
     * subtraction (and float's exp past ~88). */
    classifier_case(200.0f, 7);

    /* Every row ignored: count 0, loss 0, gradient all zeros. */
    int N = 3, V = 5;
    int ign[3] = {-1, -1, -1};
    float z[15], losses[3] = {9, 9, 9}, mean = 9;
    for (int i = 0; i < 15; i++) z[i] = (float)i;
    int count = hy_cpu_classifier_forward_backward(z, losses, &mean, NULL, ign, N, V, V, 1.0f);
    CHECK(count == 0);
    CHECK(mean == 0.0f);
    check_exact_zero("classifier all ignored, dlogits", z, 15);
    check_exact_zero("classifier all ignored, losses", losses, 3);

    /* A bad target (≥ V, or negative other than −1): −1, nothing written. */
    int bad[2][3] = {{0, 5, 1}, {0, -2, 1}};
    for (int k = 0; k < 2; k++) {
        float z2[15], keep[15];
        for (int i = 0; i < 15; i++) z2[i] = keep[i] = (float)i;
        losses[0] = losses[1] = losses[2] = 9;
        mean = 9;
        count = hy_cpu_classifier_forward_backward(z2, losses, &mean, NULL, bad[k], N, V, V, 1.0f);
        CHECKF(count == -1, "classifier: bad target %d gave %d, not -1", bad[k][1], count);
        CHECK(memcmp(z2, keep, sizeof z2) == 0);
        CHECK(losses[0] == 9 && losses[2] == 9 && mean == 9);
    }

    /* NULL losses, mean and hits are allowed. */
    int tg[3] = {1, -1, 4};
    for (int i = 0; i < 15; i++) z[i] = (float)(i % 4);
    CHECK(hy_cpu_classifier_forward_backward(z, NULL, NULL, NULL, tg, N, V, V, 1.0f) == 2);

    /* Hits: the counted rows whose first maximum is the target. Rows of
     * V = 5 padded to 6 (the padding column is the largest and never read):
     * a hit; a tie with an earlier column (a miss, as torch.argmax takes the
     * first); a tie with a later one (a hit); ignored though its argmax
     * matches; a plain miss. */
    float h[5][6] = {{0, 3, 1, 0, 0, 9}, {2, 1, 2, 0, 0, 9}, {0, 2, 1, 2, 0, 9},
                     {0, 0, 5, 0, 0, 9}, {4, 0, 0, 0, 1, 9}};
    int htg[5] = {1, 2, 1, -1, 4}, hits = -1;
    CHECK(hy_cpu_classifier_forward_backward(&h[0][0], NULL, NULL, &hits, htg, 5, 5, 6, 1.0f) == 4);
    CHECKF(hits == 2, "classifier hits %d, want 2", hits);
}

// ----------------------------------------------------------------------------
// AdamW and the global-norm helpers

static void test_adamw(void) {
    /* Two steps on p = [1, −0.5, 2], β1 = 0.9, β2 = 0.999, eps = 1e-8,
     * weight_decay = 0.1; step 1: g = [0.1, −0.2, 0], lr = 0.01; step 2:
     * g = [0.3, 0.1, −0.4], lr = 0.005 (changed through the struct, as the
     * runtime's LR schedule does).
     * Step 1: m = 0.1 g, v = 0.001 g², m̂ = g, v̂ = g², so the Adam term is
     * g/(|g| + 1e-8) = ±(1 − 1e-7) (0 where g = 0). With decay:
     *   p0 = 1 − 0.01 (0.9999999 + 0.1·1)      = 0.989000001
     *   p1 = −0.5 − 0.01 (−0.99999995 − 0.05)  = −0.4895000005
     *   p2 = 2 − 0.01 (0 + 0.2)                = 1.998
     * Step 2, element 0: m = 0.9·0.01 + 0.1·0.3 = 0.039,
     * v = 0.999·1e-5 + 0.001·0.09 = 9.999e-5; m̂ = 0.039/0.19 = 0.2052632,
     * v̂ = 9.999e-5/0.001999 = 0.0500200, sqrt = 0.2236515; Adam term
     * 0.9177802; decay 0.1·0.989 = 0.0989;
     *   p0 = 0.989000001 − 0.005 (0.9177802 + 0.0989) = 0.9839166
     * and likewise for the rest (values below to 10 digits, from the same
     * formulas in float64). decay = 0 drops the λp terms. */
    static const double want[2][2][3] = {
        /* decay = 1 */ {{0.9890000010, -0.4895000005, 1.9980000000},
                         {0.9839165956, -0.4879235654, 2.0007216840}},
        /* decay = 0 */ {{0.9900000010, -0.4900000005, 2.0000000000},
                         {0.9854110956, -0.4886683154, 2.0037206840}}};
    const float g1[3] = {0.1f, -0.2f, 0.0f}, g2[3] = {0.3f, 0.1f, -0.4f};
    for (int k = 0; k < 2; k++) {
        int decay = k == 0;
        float p[3] = {1.0f, -0.5f, 2.0f}, m[3] = {0}, v[3] = {0};
        hy_cpu_adamw_params hp = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                  .weight_decay = 0.1f, .step = 1};
        hy_cpu_adamw_update(p, g1, m, v, 3, &hp, 1.0f, decay);
        for (int i = 0; i < 3; i++) CHECK_NEAR(p[i], want[k][0][i], 2e-6);
        hp.lr = 0.005f;
        hp.step = 2;
        hy_cpu_adamw_update(p, g2, m, v, 3, &hp, 1.0f, decay);
        for (int i = 0; i < 3; i++) CHECK_NEAR(p[i], want[k][1][i], 2e-6);
        /* The moments carry the fp32 betas: 0.999f = 0.99900001287, so
         * 1 − β2 is off by 1.3e-5 relative (1 − β1 by 2.4e-7), hence these
         * tolerances. The update itself is insensitive to it (the same
         * factor sits in v and in its bias correction), as the 2e-6 above
         * shows. */
        CHECK_NEAR(m[0], 0.039, 1e-6 * 0.039);
        CHECK_NEAR(v[0], 9.999e-5, 3e-5 * 9.999e-5);
        CHECK_NEAR(m[2], -0.04, 1e-6 * 0.04);
        CHECK_NEAR(v[2], 1.6e-4, 3e-5 * 1.6e-4);
    }

    /* sumsq accumulates: 1+4+9+16 = 30 onto 0.5; then 1e5 × 0.1f². */
    float x[4] = {1, -2, 3, 4};
    double acc = 0.5;
    hy_cpu_sumsq(&acc, x, 4);
    CHECK(acc == 30.5);
    size_t n = 100000;
    float *big = falloc(n);
    for (size_t i = 0; i < n; i++) big[i] = 0.1f;
    acc = 0.0;
    hy_cpu_sumsq(&acc, big, n);
    double want_big = (double)n * (double)0.1f * (double)0.1f;
    /* Double accumulation: 1e5 roundings of ulp(1000)/2 ≈ 6e-14 each, at
     * most ~6e-9 absolute; an fp32 running sum would be off by ~1e-3. */
    CHECK_NEAR(acc, want_big, 1e-10 * want_big);
    free(big);

    /* The clip factor fused into the update: scale s on g is the update of
     * s·g, exactly (the product is formed once, as the unfused g ← s·g
     * pass formed it). */
    {
        float g[3] = {0.3f, -0.7f, 1e-3f}, gs[3];
        float pa[3] = {1, 2, 3}, ma[3] = {0}, va[3] = {0};
        float pb[3] = {1, 2, 3}, mb[3] = {0}, vb[3] = {0};
        hy_cpu_adamw_params hp = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                                  .weight_decay = 0.1f, .step = 3};
        for (int i = 0; i < 3; i++) gs[i] = g[i] * 0.37f;
        hy_cpu_adamw_update(pa, g, ma, va, 3, &hp, 0.37f, 1);
        hy_cpu_adamw_update(pb, gs, mb, vb, 3, &hp, 1.0f, 1);
        CHECK(memcmp(pa, pb, sizeof pa) == 0 && memcmp(ma, mb, sizeof ma) == 0 &&
              memcmp(va, vb, sizeof va) == 0);
    }

    CHECK_NEAR(hy_cpu_clip_factor(25.0, 1.0f), 1.0 / (5.0 + 1e-6), 1e-7);
    CHECK(hy_cpu_clip_factor(0.25, 1.0f) == 1.0f);  /* norm 0.5 < 1: unclipped */
    CHECK(hy_cpu_clip_factor(1e6, 0.0f) == 1.0f);   /* max_norm 0: clipping off */
    CHECK(hy_cpu_clip_factor(0.0, 1.0f) == 1.0f);   /* zero gradient */
    /* A non-finite norm is the runtime's non-finite signal, clipping or not. */
    CHECK(isnan(hy_cpu_clip_factor(INFINITY, 1.0f)));
    CHECK(isnan(hy_cpu_clip_factor(NAN, 0.0f)));
}

int main(void) {
    test_matmul();
    test_lm_head();
    test_layernorm();
    test_gelu(HY_GELU_TANH);
    test_gelu(HY_GELU_ERF);
    test_rmsnorm();
    test_swiglu();
    test_rope_table();
    test_rope();
    test_attention();
    test_embedding();
    test_classifier();
    test_adamw();
    return TEST_END("test_ops");
}
