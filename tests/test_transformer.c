/*
 * test_transformer.c — the stage math on its own (lib/transformer.h),
 * without the runtime: a one-stage GPT on the CPU backend, driven the way
 * the runtime drives it (embedding, stage forward with the head, head
 * backward, stage backward, embedding backward).
 *
 * Checked: the stash layout (every slot a whole number of 256-byte pieces;
 * two stages' slots together hold what one stage's does); the first loss
 * is near ln(vocab); the gradients the backward accumulates match central
 * differences of the forward-only loss for the largest gradient of each
 * tensor; and an evaluation forward (train = 0) scores exactly what the
 * training forward did.
 */
#include "backend.h"
#include "config.h"
#include "model.h"
#include "test.h"
#include "lib/testrun.h"
#include "transformer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    hy_config c;
    hy_model m;
    hy_backend *be;
    hy_stream *st;
    hy_transformer t;
    hy_stage_work w;
    void *weights[1];
    float *grads[1], *param;
    void *slot, *dres;
    int *tokens, *targets;
} bench;

static int load_model(hy_config *c, hy_model *m, const char *ranks, const char *split) {
    const char *sets[] = { "model.layers=2", "model.d_model=16", "model.heads=2", "model.seq_len=8",
                           "model.vocab=64", "schedule.micro_batch_size=2",
                           "schedule.micro_batches=1", "schedule.kind=gpipe", "backend=cpu",
                           ranks, split };
    hy_error err;
    hy_config_init(c);
    int rc = hy_config_load(c, NULL, sets, split ? 11 : 10, &err);
    if (!rc) rc = hy_test_model_build(m, c, 1, &err);
    if (rc) fprintf(stderr, "%s\n", err.msg);
    return rc;
}

static void describe(hy_transformer *t, const hy_model *m, size_t act_size, void **weights,
                     float **grads) {
    *t = (hy_transformer){ .model = m, .ops = NULL, .act_size = act_size, .B = 2, .T = 8,
                           .global_micro_batches = 1, .weights = weights, .grads = grads };
}

/* The layout: whole 256-byte pieces, and one stage's slot is two
 * stages' slots put together (the same blocks, embedding and head). */
static void test_layout(void) {
    hy_config c1, c2;
    hy_model m1, m2;
    if (load_model(&c1, &m1, "schedule.ranks=1", NULL) ||
        load_model(&c2, &m2, "schedule.ranks=2", "schedule.split=[1,1]")) {
        CHECK(0);
        return;
    }
    hy_transformer one, two;
    describe(&one, &m1, 4, NULL, NULL);
    describe(&two, &m2, 4, NULL, NULL);
    CHECK(hy_boundary_bytes(&one) == 2 * 8 * 16 * 4);
    CHECK(hy_stash_bytes(&one, 0) % 256 == 0);
    CHECK(hy_stash_bytes(&two, 0) % 256 == 0 && hy_stash_bytes(&two, 1) % 256 == 0);
    CHECK(hy_stash_bytes(&two, 0) + hy_stash_bytes(&two, 1) == hy_stash_bytes(&one, 0));
    CHECK(hy_stash_bytes(&two, 0) != hy_stash_bytes(&two, 1));   /* embedding vs head */
    /* The embedding output lies inside stage 0's slot, after its blocks. */
    unsigned char slot[1];
    unsigned char *e = hy_stash_embedding(&two, slot);
    CHECK(e > slot && (size_t)(e - slot) + hy_boundary_bytes(&two) <= hy_stash_bytes(&two, 0));
    /* bf16 activations take half the bytes of each activation piece. */
    hy_transformer half;
    describe(&half, &m1, 2, NULL, NULL);
    CHECK(hy_boundary_bytes(&half) * 2 == hy_boundary_bytes(&one));
    CHECK(hy_stash_bytes(&half, 0) < hy_stash_bytes(&one, 0));
    hy_model_free(&m1);
    hy_model_free(&m2);
    hy_config_free(&c1);
    hy_config_free(&c2);
}

static int open_bench(bench *b) {
    hy_error err;
    memset(b, 0, sizeof *b);
    if (load_model(&b->c, &b->m, "schedule.ranks=1", NULL)) return -1;
    int rc = hy_backend_cpu_create(&b->be, 1, 30.0, &err);
    if (!rc) rc = b->be->ops->stream_create(b->be, 0, &b->st, &err);
    size_t n = b->m.stage_numel[0] * sizeof(float), N = 16;
    void *p = NULL, *g = NULL, *tok = NULL, *tg = NULL;
    if (!rc) rc = b->be->ops->alloc(b->be, 0, n, &p, &err);
    if (!rc) rc = b->be->ops->alloc(b->be, 0, n, &g, &err);
    if (!rc) rc = b->be->ops->alloc(b->be, 0, N * sizeof(int), &tok, &err);
    if (!rc) rc = b->be->ops->alloc(b->be, 0, N * sizeof(int), &tg, &err);
    if (rc) { fprintf(stderr, "%s\n", err.msg); return rc; }
    b->param = p;
    b->weights[0] = p;   /* on the CPU the ops compute on the master weights */
    b->grads[0] = g;
    b->tokens = tok;
    b->targets = tg;
    describe(&b->t, &b->m, b->be->ops->act_size, b->weights, b->grads);
    b->t.ops = b->be->ops;
    rc = hy_stage_work_alloc(&b->t, b->be, 0, 1, b->m.n_layers[0], &b->w, &err);
    if (!rc) rc = b->be->ops->alloc(b->be, 0, hy_stash_bytes(&b->t, 0), &b->slot, &err);
    if (!rc) rc = b->be->ops->alloc(b->be, 0, hy_boundary_bytes(&b->t), &b->dres, &err);
    if (rc) { fprintf(stderr, "%s\n", err.msg); return rc; }
    float *host = malloc(n);
    if (!host) return -1;
    hy_model_init_stage(&b->m, 0, 42, host);
    rc = b->be->ops->upload(b->be, 0, b->param, host, n, &err);
    free(host);
    int in[16], out[16];
    for (int i = 0; i < 16; i++) {
        in[i] = (i * 13 + 5) % 64;
        out[i] = i == 3 ? -1 : (i * 29 + 1) % 64;   /* one position without a target */
    }
    if (!rc) rc = b->be->ops->upload(b->be, 0, b->tokens, in, sizeof in, &err);
    if (!rc) rc = b->be->ops->upload(b->be, 0, b->targets, out, sizeof out, &err);
    return rc;
}

/* The loss of one forward (train: with the head's backward). */
static double forward(bench *b, int train) {
    hy_error err;
    const hy_backend_ops *o = b->be->ops;
    float loss = NAN;
    int rc = o->zero(b->st, b->w.loss, HY_HEAD_SUMS_BYTES, &err);
    if (!rc) rc = hy_embed_forward(&b->t, b->st, b->slot, b->tokens, &err);
    if (!rc) rc = hy_stage_forward(&b->t, &b->w, b->st, 0, hy_stash_embedding(&b->t, b->slot),
                                   b->slot, NULL, b->targets, train, &err);
    if (!rc) rc = o->sync(b->st, &err);
    if (!rc) rc = o->download(b->be, 0, &loss, b->w.loss, sizeof loss, &err);
    if (rc) fprintf(stderr, "forward: %s\n", err.msg);
    return loss;
}

static int backward(bench *b) {
    hy_error err;
    const hy_backend_ops *o = b->be->ops;
    const void *in = hy_stash_embedding(&b->t, b->slot);
    int rc = o->zero(b->st, b->dres, hy_boundary_bytes(&b->t), &err);
    if (!rc) rc = hy_stage_recompute(&b->t, &b->w, b->st, 0, in, &err);
    if (!rc) rc = hy_head_backward(&b->t, &b->w, b->st, in, b->slot, b->dres, &err);
    if (!rc) rc = hy_stage_backward(&b->t, &b->w, b->st, 0, in, b->slot, b->dres, &err);
    if (!rc) rc = hy_embed_backward(&b->t, b->st, b->slot, b->dres, b->tokens, &err);
    if (!rc) rc = o->sync(b->st, &err);
    if (rc) fprintf(stderr, "backward: %s\n", err.msg);
    return rc;
}

/* The gradients against central differences, h = 1e-2 (see test_runtime's
 * whole_model_gradient for the tolerance). */
static void test_gradients(void) {
    bench b;
    if (open_bench(&b)) { CHECK(0); return; }
    size_t n = b.m.stage_numel[0];
    CHECK(b.be->ops->zero(b.st, b.grads[0], n * sizeof(float), NULL) == HY_OK);
    double loss = forward(&b, 1);
    CHECKF(fabs(loss - log(64.0)) < 0.3, "first loss %.4f, ln 64 = %.4f", loss, log(64.0));
    CHECK(forward(&b, 0) == loss);   /* evaluation scores what training did */
    CHECK(b.be->ops->zero(b.st, b.grads[0], n * sizeof(float), NULL) == HY_OK);
    CHECK(forward(&b, 1) == loss);
    CHECK(backward(&b) == HY_OK);
    float *grad = malloc(n * sizeof(float)), *w = b.param;   /* CPU memory: the host's */
    hy_error err;
    CHECK(b.be->ops->download(b.be, 0, grad, b.grads[0], n * sizeof(float), &err) == HY_OK);
    int checked = 0;
    for (int i = 0; i < b.m.n_params; i++) {
        const hy_param *p = &b.m.params[i];
        size_t j = p->offset;
        for (size_t k = p->offset; k < p->offset + p->numel; k++)
            if (fabsf(grad[k]) > fabsf(grad[j])) j = k;
        if (fabsf(grad[j]) <= 1e-3f) continue;
        const float h = 1e-2f, keep = w[j];
        w[j] = keep + h;
        double up = forward(&b, 0);
        w[j] = keep - h;
        double down = forward(&b, 0);
        w[j] = keep;
        double fd = (up - down) / (2.0 * h);
        CHECKF(fabs(fd - grad[j]) <= 0.03 * fabs(grad[j]) + 1e-4,
               "d loss / d %s[%zu] = %.6g, central difference %.6g", p->name, j - p->offset,
               grad[j], fd);
        checked++;
    }
    CHECKF(checked >= b.m.n_params / 2, "only %d of %d tensors had a gradient to check", checked,
           b.m.n_params);
    free(grad);
    b.be->ops->stream_destroy(b.st);
    b.be->ops->destroy(b.be);
    hy_model_free(&b.m);
    hy_config_free(&b.c);
}

/* A backend without a Llama op refuses a Llama when the run opens, naming
 * the op; a GPT needs none of them. */
static void test_missing_ops(void) {
    hy_config c;
    hy_model m;
    hy_error err;
    if (load_model(&c, &m, "model.kind=llama", NULL)) { CHECK(0); hy_config_free(&c); return; }
    hy_backend *be = NULL;
    if (hy_backend_cpu_create(&be, 1, 10.0, &err)) {
        CHECKF(0, "%s", err.msg);
        hy_model_free(&m);
        hy_config_free(&c);
        return;
    }
    hy_backend_ops o = *be->ops;   /* the CPU's, less one Llama op */
    CHECK(hy_transformer_check_ops(&m, &o, &err) == HY_OK);
    o.rope = NULL;
    int rc = hy_transformer_check_ops(&m, &o, &err);
    CHECKF(rc == HY_ERR_INPUT && strstr(err.msg, "rope") && strstr(err.msg, "cpu backend"),
           "%d %s", rc, err.msg);
    hy_model_free(&m);
    hy_config_free(&c);
    if (load_model(&c, &m, "model.kind=gpt", NULL)) { CHECK(0); hy_config_free(&c); return; }
    CHECK(hy_transformer_check_ops(&m, &o, &err) == HY_OK);
    hy_model_free(&m);
    hy_config_free(&c);
    be->ops->destroy(be);
}

int main(void) {
    test_layout();
    test_gradients();
    test_missing_ops();
    return TEST_END("transformer");
}
