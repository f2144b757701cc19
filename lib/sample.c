/*
 * sample.c — see sample.h.
 *
 * A sampler holds in rank 0's memory: the compute copy of the weights,
 * the cache (per layer K and V [seq_len, kv_heads·head_dim]), two
 * residual streams [seq_len, d_model] that the blocks pass between them,
 * one block's activations for seq_len tokens (hy_block_work_bytes: every
 * block reuses them, nothing is kept for a backward), a Llama's RoPE
 * table for seq_len positions, the tokens, and the head's buffers for one
 * row. Only the logits come back to the host.
 */
#include "sample.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "safetensors.h"
#include "transformer.h"
#include "weights.h"

struct hy_sampler {
    hy_backend *be;
    const hy_backend_ops *o;
    hy_stream *st;
    hy_model model;          /* one stage */
    hy_transformer tf;       /* B = 1; T set per call */
    void *weights;           /* the compute copy of the stage's block */
    void **k, **v;           /* [layers]: the cache, [seq_len, kv_heads·head_dim] each */
    void *x[2];              /* residual streams, [seq_len, d_model] */
    void *work;              /* one block's activations for seq_len tokens */
    float *rope;             /* a Llama's RoPE table, seq_len positions; NULL: GPT */
    int *tokens;             /* [seq_len], rank memory */
    void *ln, *logits;       /* the final norm's output [d_model], the logits [vocab_padded] */
    float *mean, *rstd;      /* the final norm's statistics, one row */
    void *host_logits;       /* the logits on the host, in the compute type */
    int pos;                 /* tokens in the cache */
};

static size_t sp_acts(const hy_sampler *s, size_t n) { return n * s->o->act_size; }

static int sp_alloc(hy_sampler *s, size_t bytes, void *out, hy_error *err) {
    return s->be->ops->alloc(s->be, 0, bytes, (void **)out, err);
}

/* The model, its transformer and every buffer, weights not yet in. */
static int sp_new(hy_sampler **out, hy_backend *be, const hy_model_shape *shape, hy_error *err) {
    *out = NULL;
    if (shape->kind == HY_MODEL_BERT)
        return hy_fail(err, HY_ERR_INPUT, "sample generates text with a next-token model (gpt "
                       "or llama); the config's model.kind is %s (its attention sees both ways: "
                       "it has no next token to predict)", hy_model_name(shape->kind));
    assert(shape->kind == HY_MODEL_GPT || shape->kind == HY_MODEL_LLAMA);
    const hy_backend_ops *o = be->ops;
    if (!o->kv_append || !o->attention_cached)
        return hy_fail(err, HY_ERR_INPUT, "sample: the %s backend has no attention over a KV "
                       "cache (kv_append, attention_cached); use another backend", o->name);
    hy_sampler *s = calloc(1, sizeof *s);
    if (!s) return hy_fail(err, HY_ERR_RUNTIME, "sample: out of memory");
    s->be = be;
    s->o = o;
    int rc = hy_model_build(&s->model, shape, NULL, 1, 1, err);
    if (rc) {
        free(s);
        return rc;
    }
    *out = s;
    const hy_model *m = &s->model;
    rc = hy_transformer_check_ops(m, o, err);
    if (rc) return rc;
    size_t S = (size_t)m->seq_len, C = (size_t)m->d_model;
    size_t KV = (size_t)m->kv_heads * (size_t)m->head_dim;   /* one position's keys */
    s->tf = (hy_transformer){ .model = m, .ops = o, .act_size = o->act_size, .B = 1,
                              .T = m->seq_len, .global_micro_batches = 1, .split = 0,
                              .weights = &s->weights, .grads = NULL };
    s->k = calloc((size_t)m->layers, sizeof *s->k);
    s->v = calloc((size_t)m->layers, sizeof *s->v);
    s->host_logits = malloc(sp_acts(s, (size_t)m->vocab_padded));
    if (!s->k || !s->v || !s->host_logits)
        return hy_fail(err, HY_ERR_RUNTIME, "sample: out of memory");
    rc = o->stream_create(be, 0, &s->st, err);
    for (int l = 0; l < m->layers && !rc; l++) {
        rc = sp_alloc(s, sp_acts(s, S * KV), &s->k[l], err);
        if (!rc) rc = sp_alloc(s, sp_acts(s, S * KV), &s->v[l], err);
    }
    if (!rc) rc = sp_alloc(s, sp_acts(s, m->stage_numel[0]), &s->weights, err);
    if (!rc) rc = sp_alloc(s, sp_acts(s, S * C), &s->x[0], err);
    if (!rc) rc = sp_alloc(s, sp_acts(s, S * C), &s->x[1], err);
    if (!rc) rc = sp_alloc(s, hy_block_work_bytes(&s->tf), &s->work, err);
    if (!rc) rc = sp_alloc(s, S * sizeof(int), &s->tokens, err);
    if (!rc) rc = sp_alloc(s, sp_acts(s, C), &s->ln, err);
    if (!rc) rc = sp_alloc(s, sp_acts(s, (size_t)m->vocab_padded), &s->logits, err);
    if (!rc) rc = sp_alloc(s, sizeof(float), &s->mean, err);
    if (!rc) rc = sp_alloc(s, sizeof(float), &s->rstd, err);
    /* The rotations of every position the cache has, built once. */
    if (!rc && hy_rope_bytes(&s->tf)) rc = sp_alloc(s, hy_rope_bytes(&s->tf), &s->rope, err);
    if (!rc && s->rope) rc = hy_rope_upload(&s->tf, be, 0, s->rope, err);
    if (!rc && o->reserve) rc = o->reserve(s->st, S, hy_model_widest(m), err);
    return rc;
}

/* The host block's values into the compute copy: uploaded as fp32, then
 * converted (to_act), the fp32 copy freed again. */
static int sp_set_weights(hy_sampler *s, const float *block, hy_error *err) {
    size_t n = s->model.stage_numel[0];
    float *master = NULL;
    int rc = sp_alloc(s, n * sizeof(float), &master, err);
    if (!rc) rc = s->be->ops->upload(s->be, 0, master, block, n * sizeof(float), err);
    if (!rc) rc = s->o->to_act(s->st, s->weights, master, n, err);
    if (!rc) rc = s->o->sync(s->st, err);
    if (master) s->be->ops->free_mem(s->be, master);
    return rc;
}

int hy_sampler_create(hy_sampler **out, hy_backend *be, const hy_model_shape *shape,
                      const float *block, hy_error *err) {
    int rc = sp_new(out, be, shape, err);
    if (!rc) rc = sp_set_weights(*out, block, err);
    if (rc) {
        hy_sampler_destroy(*out);
        *out = NULL;
    }
    return rc;
}

int hy_sampler_open(hy_sampler **out, hy_backend *be, const hy_model_shape *shape,
                    const char *path, int *unverified, hy_error *err) {
    float *block = NULL;
    int unchecked = 0, rc = sp_new(out, be, shape, err);
    /* A checkpoint's weights are checked as training's init is. */
    if (!rc) rc = hy_checkpoint_verify_file(path, &(*out)->model, &unchecked, err);
    if (unverified) *unverified = unchecked;
    if (!rc) {
        block = calloc((*out)->model.stage_numel[0], sizeof(float));
        if (!block) rc = hy_fail(err, HY_ERR_RUNTIME, "sample: out of memory for %s", path);
    }
    if (!rc) rc = hy_weights_read(&(*out)->model, path, &block, err);
    if (!rc) rc = sp_set_weights(*out, block, err);
    free(block);
    if (rc) {
        hy_sampler_destroy(*out);
        *out = NULL;
    }
    return rc;
}

void hy_sampler_destroy(hy_sampler *s) {
    if (!s) return;
    /* The buffers are the backend's: it frees them when it is destroyed. */
    if (s->st) s->o->stream_destroy(s->st);
    free(s->k);
    free(s->v);
    free(s->host_logits);
    hy_model_free(&s->model);
    free(s);
}

void hy_sampler_reset(hy_sampler *s) { s->pos = 0; }

int hy_sampler_position(const hy_sampler *s) { return s->pos; }

/* ------------------------------------------------------------------------ */
/* The forward */

static int sp_check_tokens(int vocab, const int *tokens, int n, hy_error *err) {
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= vocab)
            return hy_fail(err, HY_ERR_INPUT, "token %d (at %d) is not in the model's vocabulary "
                           "(model.vocab %d: ids 0 .. %d)", tokens[i], i, vocab, vocab - 1);
    return HY_OK;
}

int hy_sample_check_prompt(const hy_model_shape *shape, const int *prompt, int n, hy_error *err) {
    if (n < 1)
        return hy_fail(err, HY_ERR_INPUT, "sample: the prompt is empty; give at least one token");
    if (n > shape->seq_len)
        return hy_fail(err, HY_ERR_INPUT, "sample: the prompt is %d tokens, longer than "
                       "model.seq_len %d (the positions a sample has)", n, shape->seq_len);
    return sp_check_tokens(shape->vocab, prompt, n, err);
}

/* tokens[0..n) at positions t0 .. through the embeddings, the blocks
 * (over the cache when kv, else attention over the n alone: t0 is 0) and
 * the head on the last row, into logits. */
static int sp_forward(hy_sampler *s, const int *tokens, int n, int t0, int kv, float *logits,
                      hy_error *err) {
    const hy_backend_ops *o = s->o;
    const hy_model *m = &s->model;
    int C = m->d_model, V = m->vocab, Vp = m->vocab_padded;
    if (n < 1 || t0 + n > m->seq_len)
        return hy_fail(err, HY_ERR_INPUT, "%d token%s at position %d: past model.seq_len %d",
                       n, n == 1 ? "" : "s", t0, m->seq_len);
    int rc = sp_check_tokens(m->vocab, tokens, n, err);
    if (rc) return rc;
    hy_transformer t = s->tf;
    t.T = n;
    rc = s->be->ops->upload(s->be, 0, s->tokens, tokens, (size_t)n * sizeof(int), err);
    if (!rc) rc = hy_embed_forward_at(&t, s->st, s->x[0], s->tokens, t0, err);
    int cur = 0;
    for (int l = 0; l < m->layers && !rc; l++, cur = !cur) {
        hy_kv_layer cache = { .k = s->k[l], .v = s->v[l], .t0 = t0, .Tmax = m->seq_len };
        rc = hy_block_forward(&t, s->rope, s->st, l, s->x[cur], s->work, s->x[!cur],
                              kv ? &cache : NULL, err);
    }
    /* The head on the last position alone: the one whose logits count. */
    const unsigned char *last = (const unsigned char *)s->x[cur] + sp_acts(s, (size_t)(n - 1) * C);
    t.T = 1;
    if (!rc) rc = hy_head_logits(&t, s->st, last, s->ln, s->mean, s->rstd, s->logits, err);
    if (!rc) rc = o->sync(s->st, err);
    if (!rc) rc = s->be->ops->download(s->be, 0, s->host_logits, s->logits, sp_acts(s, (size_t)Vp),
                                       err);
    if (rc) return rc;
    if (o->act_size == sizeof(float)) {
        memcpy(logits, s->host_logits, (size_t)V * sizeof(float));
    } else {
        assert(o->act_size == sizeof(uint16_t));   /* bf16 */
        const uint16_t *h = s->host_logits;
        for (int i = 0; i < V; i++) logits[i] = hy_safetensors_bf16_to_f32(h[i]);
    }
    return HY_OK;
}

int hy_sampler_feed(hy_sampler *s, const int *tokens, int n, float *logits, hy_error *err) {
    int rc = sp_forward(s, tokens, n, s->pos, 1, logits, err);
    if (!rc) s->pos += n;
    return rc;
}

int hy_sampler_forward_full(hy_sampler *s, const int *tokens, int n, float *logits,
                            hy_error *err) {
    return sp_forward(s, tokens, n, 0, 0, logits, err);
}

/* ------------------------------------------------------------------------ */
/* Sampling */

static int sp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

int hy_sample_pick(const float *logits, int V, const hy_sample_params *p, hy_rng *rng,
                   int *token, hy_error *err) {
    assert(V > 0);
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;   /* the first of equal maxima */
    if (p->temperature <= 0) {
        *token = best;
        return HY_OK;
    }
    /* top-k: the k-th largest logit is the floor (ties with it stay in). */
    float floor = -INFINITY;
    if (p->top_k > 0 && p->top_k < V) {
        float *sorted = malloc((size_t)V * sizeof *sorted);
        if (!sorted) return hy_fail(err, HY_ERR_RUNTIME, "sample: out of memory");
        memcpy(sorted, logits, (size_t)V * sizeof *sorted);
        qsort(sorted, (size_t)V, sizeof *sorted, sp_desc);
        floor = sorted[p->top_k - 1];
        free(sorted);
    }
    /* softmax(logits / T) over those, in double, max first (exp never
     * overflows); one uniform draw walks the cumulative sum. */
    double mx = logits[best], sum = 0.0;
    for (int i = 0; i < V; i++)
        if (logits[i] >= floor) sum += exp((logits[i] - mx) / p->temperature);
    double u = hy_rng_uniform(rng) * sum, acc = 0.0;
    *token = best;   /* if rounding leaves u past the last term */
    for (int i = 0; i < V; i++) {
        if (logits[i] < floor) continue;
        acc += exp((logits[i] - mx) / p->temperature);
        if (u < acc) {
            *token = i;
            break;
        }
    }
    return HY_OK;
}

int hy_sample_generate(hy_sampler *s, const int *prompt, int n_prompt, const hy_sample_params *p,
                       hy_sample_emit emit, void *ctx, int *n_new, hy_sample_end *end,
                       hy_error *err) {
    const hy_model *m = &s->model;
    *n_new = 0;
    *end = HY_SAMPLE_MAX_NEW;
    hy_model_shape shape = hy_model_shape_of(m);
    int rc = hy_sample_check_prompt(&shape, prompt, n_prompt, err);
    if (rc) return rc;
    float *logits = malloc((size_t)m->vocab * sizeof *logits);
    if (!logits) return hy_fail(err, HY_ERR_RUNTIME, "sample: out of memory");
    hy_rng rng = hy_rng_stream(p->seed, 0);
    hy_sampler_reset(s);
    rc = hy_sampler_feed(s, prompt, n_prompt, logits, err);
    int total = n_prompt, token = -1;
    while (!rc && *n_new < p->max_new) {
        /* Every position is taken: a next token would have none. */
        if (total == m->seq_len) {
            *end = HY_SAMPLE_SEQ_LEN;
            break;
        }
        /* The previous token goes in only when another is to follow it. */
        if (*n_new > 0) rc = hy_sampler_feed(s, &token, 1, logits, err);
        if (!rc) rc = hy_sample_pick(logits, m->vocab, p, &rng, &token, err);
        if (!rc) rc = emit(ctx, token, err);
        if (rc) break;
        (*n_new)++;
        total++;
        if (token == p->stop_token) {
            *end = HY_SAMPLE_STOP_TOKEN;
            break;
        }
    }
    free(logits);
    return rc;
}
