/*
 * test_sample.c — generation (lib/sample.h) and its attention over a KV
 * cache (kernels/cpu/kvcache.c), on the CPU backend.
 *
 * - The ops: attention_cached over a cache filled by kv_append, in
 *   pieces (a prefill, then one position at a time), equals the training
 *   attention (attention.c, causal) over the whole sequence, row for row;
 *   with grouped-query heads (NKV < NH) it equals that attention with each
 *   kv head repeated for its group.
 * - Cached = uncached: a sampler's logits after a prefill and after each
 *   later token fed alone over its cache equal those of the whole sequence
 *   run again through the training forward (hy_sampler_forward_full), at
 *   every step up to seq_len; a prefill split in two equals it in one. For
 *   a GPT (and one whose position table is longer than seq_len: the
 *   cache still ends at seq_len) and for Llamas with grouped-query heads
 *   (RoPE at the cache's positions, Llama 3's scaling of it, RMSNorm,
 *   SwiGLU), untied and tied.
 * - Sampling: greedy is the argmax (the lowest id of equal maxima); top-k 1
 *   is greedy whatever the seed; one seed gives one sequence of draws and
 *   another seed another; the draws follow softmax(logits / T); nothing
 *   outside the top k is ever drawn.
 * - Generation stops where it says: after max_new tokens, at the stop
 *   token (emitted), when prompt and tokens fill seq_len (a full prompt
 *   gets none); an emit failure stops it with its status. Greedy is the
 *   argmax of the full forward at each step, for a GPT and a Llama.
 * - Bad input is HY_ERR_INPUT: an id outside the vocabulary, a prompt
 *   longer than seq_len or empty, a feed past seq_len, a BERT model.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../kernels/cpu/ops.h"
#include "backend.h"
#include "model.h"
#include "rng.h"
#include "sample.h"
#include "test.h"

/* ---- the ops --------------------------------------------------------------- */

static void fill(float *x, size_t n, uint64_t seed) {
    hy_rng r = hy_rng_stream(seed, 0);
    for (size_t i = 0; i < n; i++) x[i] = (float)hy_rng_normal(&r);
}

/* The attention of the whole sequence (qkv [T, (NH + 2 NKV) hd]) through
 * attention.c, each kv head repeated for its group of query heads (as
 * many kv heads as query heads: no grouping to share with the op under
 * test). */
static void full_attention(float *out, const float *qkv, int T, int NH, int NKV, int hd) {
    int C = NH * hd, W = (NH + 2 * NKV) * hd;
    float *wide = malloc(sizeof(float) * (size_t)T * 3 * C);
    float *lse = malloc(sizeof(float) * (size_t)NH * T);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < NH; h++) {
            int g = h / (NH / NKV);
            const float *row = qkv + (size_t)t * W;
            memcpy(wide + (size_t)t * 3 * C + h * hd, row + h * hd, sizeof(float) * hd);
            memcpy(wide + (size_t)t * 3 * C + C + h * hd, row + (NH + g) * hd, sizeof(float) * hd);
            memcpy(wide + (size_t)t * 3 * C + 2 * C + h * hd, row + (NH + NKV + g) * hd,
                   sizeof(float) * hd);
        }
    hy_cpu_attention_forward(out, lse, wide, 1, T, NH, NH, hd, 1);
    free(wide);
    free(lse);
}

static void test_ops(int NH, int NKV, int hd) {
    enum { T = 11, TMAX = 16, B = 2 };
    int W = (NH + 2 * NKV) * hd, C = NH * hd;
    float *qkv = malloc(sizeof(float) * B * T * W), *want = malloc(sizeof(float) * T * C);
    float *kc = calloc((size_t)B * TMAX * NKV * hd, sizeof(float));
    float *vc = calloc((size_t)B * TMAX * NKV * hd, sizeof(float));
    float *got = malloc(sizeof(float) * B * T * C);
    fill(qkv, (size_t)B * T * W, 7 + NKV);
    /* Two sequences: a prefill of 5, then 1, 1, 4 positions. The qkv of
     * a piece is its rows of each sequence, gathered. */
    int pieces[] = { 5, 1, 1, 4 }, t0 = 0;
    for (int p = 0; p < 4; p++) {
        int n = pieces[p];
        float *in = malloc(sizeof(float) * B * n * W), *out = malloc(sizeof(float) * B * n * C);
        for (int b = 0; b < B; b++)
            memcpy(in + (size_t)b * n * W, qkv + ((size_t)b * T + t0) * W, sizeof(float) * n * W);
        hy_cpu_kv_append(kc, vc, in, B, n, t0, TMAX, NH, NKV, hd);
        hy_cpu_attention_cached(out, in, kc, vc, B, n, t0, TMAX, NH, NKV, hd);
        for (int b = 0; b < B; b++)
            memcpy(got + ((size_t)b * T + t0) * C, out + (size_t)b * n * C, sizeof(float) * n * C);
        free(in);
        free(out);
        t0 += n;
    }
    double worst = 0;
    for (int b = 0; b < B; b++) {
        full_attention(want, qkv + (size_t)b * T * W, T, NH, NKV, hd);
        for (int i = 0; i < T * C; i++) {
            double d = fabs(want[i] - got[(size_t)b * T * C + i]);
            worst = d > worst ? d : worst;
        }
    }
    CHECKF(worst < 1e-5, "NH %d NKV %d: cached attention differs from the full one by %g", NH,
           NKV, worst);
    free(qkv);
    free(want);
    free(kc);
    free(vc);
    free(got);
}

/* ---- a sampler --------------------------------------------------------------- */

static const hy_model_shape SHAPE = { .kind = HY_MODEL_GPT, .layers = 2, .d_model = 32,
                                      .heads = 4, .seq_len = 12, .positions = 12, .vocab = 61,
                                      .kv_heads = 4,
                                      .ffn_dim = 128, .tie_embeddings = 1 };
/* Two query heads per kv head, an untied head. */
static const hy_model_shape LLAMA = { .kind = HY_MODEL_LLAMA, .layers = 2, .d_model = 32,
                                      .heads = 4, .seq_len = 12, .vocab = 61, .kv_heads = 2,
                                      .ffn_dim = 48, .tie_embeddings = 0, .norm_eps = 1e-5,
                                      .rope_theta = 10000.0 };

/* A sampler of `shape` on be with the model's initialization of seed
 * (model.h: GPT-2's, or Llama's), every parameter scaled by 10 so that the
 * logits are far from flat. */
static hy_sampler *make_sampler(hy_backend *be, const hy_model_shape *shape, uint64_t seed) {
    hy_model m;
    hy_error err;
    if (hy_model_build(&m, shape, NULL, 1, 1, &err) != HY_OK) return NULL;
    float *block = malloc(sizeof(float) * m.stage_numel[0]);
    hy_model_init_stage(&m, 0, seed, block);
    /* The norms' gains too (1 -> 10; biases stay 0): the tests compare the
     * sampler with itself and the references on the same weights, so any
     * weights with peaked logits serve. */
    for (size_t i = 0; i < m.stage_numel[0]; i++) block[i] *= 10.0f;
    hy_sampler *s = NULL;
    int rc = hy_sampler_create(&s, be, shape, block, &err);
    CHECKF(rc == HY_OK, "%s", err.msg);
    free(block);
    hy_model_free(&m);
    return s;
}

static double max_diff(const float *a, const float *b, int n, double *scale) {
    double worst = 0;
    *scale = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        worst = d > worst ? d : worst;
        *scale = fabs(b[i]) > *scale ? fabs(b[i]) : *scale;
    }
    return worst;
}

static void test_cached_equals_full(hy_backend *be, const hy_model_shape *shape) {
    hy_sampler *s = make_sampler(be, shape, 3);
    if (!s) return;
    int V = shape->vocab, S = shape->seq_len;
    const char *kind = hy_model_name(shape->kind);
    float *cached = malloc(sizeof(float) * V), *full = malloc(sizeof(float) * V);
    int seq[12] = { 5, 17, 3, 60, 0, 22, 9, 41, 8, 8, 30, 1 };
    hy_error err;
    hy_sampler_reset(s);
    CHECK(hy_sampler_feed(s, seq, 4, cached, &err) == HY_OK);
    CHECK(hy_sampler_position(s) == 4);
    double worst = 0, scale = 0, sc;
    for (int n = 4; n <= S; n++) {
        if (n > 4) CHECK(hy_sampler_feed(s, &seq[n - 1], 1, cached, &err) == HY_OK);
        CHECK(hy_sampler_forward_full(s, seq, n, full, &err) == HY_OK);
        double d = max_diff(cached, full, V, &sc);
        worst = d > worst ? d : worst;
        scale = sc > scale ? sc : scale;
    }
    CHECKF(worst <= 1e-5 * (1 + scale), "%s (kv heads %d): cached logits differ from a full "
           "recompute by %g (logits up to %g)", kind, shape->kv_heads, worst, scale);
    CHECKF(scale > 1.0, "%s: the logits are flat (%g): the comparison would see little", kind,
           scale);
    /* The cache is full: one more position is refused. */
    CHECK(hy_sampler_feed(s, seq, 1, cached, &err) == HY_ERR_INPUT);
    /* A prefill split in two equals one prefill. */
    float *one = malloc(sizeof(float) * V);
    hy_sampler_reset(s);
    CHECK(hy_sampler_feed(s, seq, 7, one, &err) == HY_OK);
    hy_sampler_reset(s);
    CHECK(hy_sampler_feed(s, seq, 3, cached, &err) == HY_OK);
    CHECK(hy_sampler_feed(s, seq + 3, 4, cached, &err) == HY_OK);
    CHECK(max_diff(cached, one, V, &sc) <= 1e-5 * (1 + sc));
    /* Ids outside the vocabulary, and nothing at all, are refused. */
    int bad[2] = { 1, 61 };
    hy_sampler_reset(s);
    CHECK(hy_sampler_feed(s, bad, 2, cached, &err) == HY_ERR_INPUT && strstr(err.msg, "61"));
    bad[1] = -1;
    CHECK(hy_sampler_feed(s, bad, 2, cached, &err) == HY_ERR_INPUT);
    int longer[13] = { 0 };
    CHECK(hy_sampler_forward_full(s, longer, 13, cached, &err) == HY_ERR_INPUT);
    free(one);
    free(cached);
    free(full);
    hy_sampler_destroy(s);
}

static void test_pick(void) {
    float logits[6] = { 0.5f, 2.0f, -1.0f, 2.0f, 1.9f, 0.0f };
    hy_sample_params greedy = { .temperature = 0 }, p = { .temperature = 1.0 };
    hy_rng r = hy_rng_stream(1, 0);
    hy_error err;
    int tok = -1;
    CHECK(hy_sample_pick(logits, 6, &greedy, &r, &tok, &err) == HY_OK && tok == 1);
    /* top-k 1 is greedy, whatever the draw. */
    p.top_k = 1;
    for (uint64_t seed = 0; seed < 20; seed++) {
        hy_rng q = hy_rng_stream(seed, 0);
        CHECK(hy_sample_pick(logits, 6, &p, &q, &tok, &err) == HY_OK && (tok == 1 || tok == 3));
    }
    /* top-k 3 never draws outside {1, 3, 4}; all of them do come. */
    p.top_k = 3;
    int seen[6] = { 0 };
    hy_rng q = hy_rng_stream(5, 0);
    for (int i = 0; i < 600; i++) {
        CHECK(hy_sample_pick(logits, 6, &p, &q, &tok, &err) == HY_OK);
        seen[tok]++;
    }
    CHECK(seen[0] == 0 && seen[2] == 0 && seen[5] == 0 && seen[1] && seen[3] && seen[4]);
    /* The draws follow softmax(logits / T): with logits (0, ln 3) at T = 1
     * the second comes 3/4 of the time; at T = 0.5 (ln 3 / 0.5 = ln 9), 9/10. */
    float two[2] = { 0.0f, logf(3.0f) };
    for (int k = 0; k < 2; k++) {
        hy_sample_params t = { .temperature = k ? 0.5 : 1.0 };
        hy_rng d = hy_rng_stream(11, 0);
        int second = 0, n = 20000;
        for (int i = 0; i < n; i++) {
            hy_sample_pick(two, 2, &t, &d, &tok, &err);
            second += tok == 1;
        }
        CHECK_NEAR((double)second / n, k ? 0.9 : 0.75, 0.015);
    }
}

/* Collects the emitted tokens; fails with HY_ERR_RUNTIME at `fail_at`. */
typedef struct {
    int tokens[64], n, fail_at;
} collect;

static int emit(void *ctx, int token, hy_error *err) {
    collect *c = ctx;
    if (c->n == c->fail_at) return hy_fail(err, HY_ERR_RUNTIME, "emit failed");
    c->tokens[c->n++] = token;
    return HY_OK;
}

/* Greedy generation from prompt to seq_len: each token is the argmax of
 * the full forward over all before it. */
static void test_greedy(hy_backend *be, const hy_model_shape *shape) {
    hy_sampler *s = make_sampler(be, shape, 5);
    if (!s) return;
    int prompt[3] = { 4, 40, 2 }, n_new = 0, seq[12];
    hy_sample_end end;
    hy_error err;
    collect g = { .fail_at = -1 };
    hy_sample_params greedy = { .max_new = 100, .temperature = 0, .stop_token = -1 };
    CHECK(hy_sample_generate(s, prompt, 3, &greedy, emit, &g, &n_new, &end, &err) == HY_OK);
    CHECK(end == HY_SAMPLE_SEQ_LEN && n_new == shape->seq_len - 3 && g.n == n_new);
    memcpy(seq, prompt, sizeof prompt);
    memcpy(seq + 3, g.tokens, sizeof(int) * (size_t)g.n);
    float logits[61];
    int argmax_ok = 1, distinct = 0;
    for (int i = 0; i < g.n; i++) {
        hy_sample_params gp = { .temperature = 0 };
        int want = -1;
        hy_sampler_forward_full(s, seq, 3 + i, logits, &err);
        hy_sample_pick(logits, shape->vocab, &gp, NULL, &want, &err);
        argmax_ok &= want == g.tokens[i];
        distinct += i > 0 && g.tokens[i] != g.tokens[i - 1];
    }
    CHECKF(argmax_ok, "%s: a greedy token is not the full forward's argmax",
           hy_model_name(shape->kind));
    /* A sample of one token repeated would show little of the positions. */
    CHECKF(distinct > 0, "%s: greedy repeats one token", hy_model_name(shape->kind));
    hy_sampler_destroy(s);
}

static void test_generate(hy_backend *be) {
    hy_sampler *s = make_sampler(be, &SHAPE, 5);
    if (!s) return;
    int prompt[3] = { 4, 40, 2 }, n_new = 0;
    hy_sample_end end;
    hy_error err;
    /* The greedy sample (test_greedy checks its tokens). */
    collect g = { .fail_at = -1 };
    hy_sample_params greedy = { .max_new = 100, .temperature = 0, .stop_token = -1 };
    CHECK(hy_sample_generate(s, prompt, 3, &greedy, emit, &g, &n_new, &end, &err) == HY_OK);
    CHECK(end == HY_SAMPLE_SEQ_LEN && n_new == SHAPE.seq_len - 3 && g.n == n_new);
    int seq[12];
    memcpy(seq, prompt, sizeof prompt);
    memcpy(seq + 3, g.tokens, sizeof(int) * (size_t)g.n);
    /* max_new */
    collect c = { .fail_at = -1 };
    greedy.max_new = 4;
    CHECK(hy_sample_generate(s, prompt, 3, &greedy, emit, &c, &n_new, &end, &err) == HY_OK);
    CHECK(end == HY_SAMPLE_MAX_NEW && n_new == 4 && !memcmp(c.tokens, g.tokens, 4 * sizeof(int)));
    /* The stop token ends it, emitted. */
    collect st = { .fail_at = -1 };
    greedy.max_new = 100;
    greedy.stop_token = g.tokens[2];
    CHECK(hy_sample_generate(s, prompt, 3, &greedy, emit, &st, &n_new, &end, &err) == HY_OK);
    int first = 0;
    while (g.tokens[first] != g.tokens[2]) first++;
    CHECK(end == HY_SAMPLE_STOP_TOKEN && n_new == first + 1 && st.tokens[first] == g.tokens[2]);
    /* A full prompt gets nothing; a longer or empty one is refused. */
    collect none = { .fail_at = -1 };
    greedy.stop_token = -1;
    CHECK(hy_sample_generate(s, seq, 12, &greedy, emit, &none, &n_new, &end, &err) == HY_OK);
    CHECK(end == HY_SAMPLE_SEQ_LEN && n_new == 0 && none.n == 0);
    int long_prompt[13] = { 0 };
    CHECK(hy_sample_generate(s, long_prompt, 13, &greedy, emit, &none, &n_new, &end, &err) ==
              HY_ERR_INPUT && strstr(err.msg, "seq_len 12"));
    CHECK(hy_sample_generate(s, prompt, 0, &greedy, emit, &none, &n_new, &end, &err) ==
              HY_ERR_INPUT);
    int bad[2] = { 3, 99 };
    CHECK(hy_sample_generate(s, bad, 2, &greedy, emit, &none, &n_new, &end, &err) == HY_ERR_INPUT
          && strstr(err.msg, "99"));
    /* An emit that fails stops generation with its status. */
    collect f = { .fail_at = 2 };
    CHECK(hy_sample_generate(s, prompt, 3, &greedy, emit, &f, &n_new, &end, &err) ==
              HY_ERR_RUNTIME && n_new == 2 && strstr(err.msg, "emit failed"));
    /* One seed, one sample; another seed, another. The logits are
     * peaked (the scaled weights): a high temperature makes each draw
     * matter. */
    hy_sample_params p = { .max_new = 9, .temperature = 20.0, .seed = 42, .stop_token = -1 };
    collect a = { .fail_at = -1 }, b = { .fail_at = -1 }, o = { .fail_at = -1 };
    hy_sample_generate(s, prompt, 3, &p, emit, &a, &n_new, &end, &err);
    hy_sample_generate(s, prompt, 3, &p, emit, &b, &n_new, &end, &err);
    p.seed = 43;
    hy_sample_generate(s, prompt, 3, &p, emit, &o, &n_new, &end, &err);
    CHECK(a.n == 9 && b.n == 9 && !memcmp(a.tokens, b.tokens, sizeof(int) * 9));
    CHECK(o.n == 9 && memcmp(a.tokens, o.tokens, sizeof(int) * 9) != 0);
    hy_sampler_destroy(s);
}

static void test_refused(hy_backend *be) {
    hy_model_shape bert = SHAPE;
    bert.kind = HY_MODEL_BERT;
    hy_sampler *s = NULL;
    hy_error err;
    float dummy[1] = { 0 };
    CHECK(hy_sampler_create(&s, be, &bert, dummy, &err) == HY_ERR_INPUT && !s &&
          strstr(err.msg, "bert"));
    int unverified = 0;
    CHECK(hy_sampler_open(&s, be, &SHAPE, "/nonexistent/model.safetensors", &unverified, &err) ==
              HY_ERR_INPUT && !s);
}

int main(void) {
    test_ops(4, 4, 8);
    test_ops(4, 2, 8);
    test_ops(6, 1, 4);
    test_pick();
    hy_backend *be = NULL;
    hy_error err;
    if (hy_backend_cpu_create(&be, 1, 60.0, &err) != HY_OK) {
        CHECKF(0, "%s", err.msg);
        return TEST_END("sample");
    }
    hy_model_shape tied = LLAMA, scaled = LLAMA, mqa = LLAMA;
    tied.tie_embeddings = 1;
    /* Llama 3's scaling, its original length inside seq_len, so that it
     * changes rotations the positions see. */
    scaled.rope_scaling = (hy_rope_scaling){ .factor = 8.0, .low_freq_factor = 1.0,
                                             .high_freq_factor = 4.0,
                                             .original_max_position_embeddings = 4 };
    mqa.kv_heads = 1;
    /* A GPT whose position table is longer than seq_len: generation reads
     * its first rows and still ends at seq_len. */
    hy_model_shape longer = SHAPE;
    longer.positions = 20;
    const hy_model_shape *shapes[] = { &SHAPE, &LLAMA, &tied, &scaled, &mqa, &longer };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        test_cached_equals_full(be, shapes[i]);
        test_greedy(be, shapes[i]);
    }
    test_generate(be);
    test_refused(be);
    be->ops->destroy(be);
    return TEST_END("sample");
}
