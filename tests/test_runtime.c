/*
 * test_runtime.c — the training runtime on the CPU backend, end to end.
 *
 * Pipelined = sequential (DESIGN §6.2 "Pipelined = sequential"): a few steps
 * of a small GPT (and a small BERT, post-LN and pre-LN, and Llama) with every
 * schedule, 1 to 4 ranks, leave
 * the same weights as one rank running the whole model, within 1e-5 of the
 * largest weight (only the order of gradient accumulation differs). Replaying
 * the recorded iteration gives bit-identical weights to running it eagerly,
 * and so does every activation-recomputation mode to keeping everything.
 * A position table longer than the sequences trains the rows a run reads
 * as a table of seq_len rows does, and leaves the others to weight decay.
 * And the loss falls on the synthetic corpus.
 */
#include "config.h"
#include "data.h"
#include "model.h"
#include "runtime.h"
#include "train.h"
#include "test.h"
#include "lib/testrun.h"
#include "lib/shard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char shard[256];

typedef struct {
    size_t n;
    float *w;          /* every parameter, in the model's order, concatenated */
    double first_loss, last_loss;
} run_result;

/* Trains `steps` steps of the config given by the sets (on top of a small
 * model) and returns all its weights. */
/* The --set of a model kind the grids name: a config kind, or "bert-pre",
 * BERT with model.norm "pre" (GPT-2's blocks), beside the post-LN default. */
static const char *kind_norm(const char *kind, char *kind_set, size_t n) {
    int pre = strcmp(kind, "bert-pre") == 0;
    snprintf(kind_set, n, "model.kind=%s", pre ? "bert" : kind);
    return pre ? "model.norm=pre" : strcmp(kind, "bert") == 0 ? "model.norm=post" : "model.norm=pre";
}

static int train(const char *kind, const char *const *extra, int n_extra, int steps, run_result *res) {
    const char *base[28] = {
        "model.layers=4", "model.d_model=32", "model.heads=4", "model.seq_len=16",
        "model.vocab=64", "schedule.micro_batch_size=2", "schedule.micro_batches=4",
        "train.lr=3e-3", "train.warmup_steps=2", "data.val=null", "checkpoint.dir=null",
        "backend=cpu",   /* fp32 equalities: a GPU's bf16 is test_cuda's business */
    };
    int n = 12;
    char kind_set[64], data_set[300];
    snprintf(data_set, sizeof data_set, "data.train=%s", shard);
    base[n++] = kind_norm(kind, kind_set, sizeof kind_set);
    base[n++] = kind_set;
    base[n++] = data_set;
    /* A Llama whose MLP width is no multiple of d_model, with grouped-query
     * attention and an untied head, so a width or a head mixed up shows. */
    if (strcmp(kind, "llama") == 0) {
        base[n++] = "model.ffn_dim=40";
        base[n++] = "model.kv_heads=2";   /* grouped-query: 2 query heads a K/V head */
    }
    for (int i = 0; i < n_extra; i++) base[n++] = extra[i];
    hy_run c;
    hy_error err;
    memset(&c, 0, sizeof c);
    int rc = hy_test_run_load(&c, NULL, base, n, &err);
    hy_runtime *rt = NULL;
    if (!rc) rc = hy_runtime_create(&rt, &c, &err);
    memset(res, 0, sizeof *res);
    for (int s = 1; s <= steps && !rc; s++) {
        hy_step_stats st;
        rc = hy_train_step(rt, &st, &err);
        if (!rc && s == 1) res->first_loss = st.loss;
        if (!rc) res->last_loss = st.loss;
    }
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
    if (rc) fprintf(stderr, "train %s: %s\n", kind, err.msg);
    hy_runtime_destroy(rt);
    hy_run_free(&c);
    return rc;
}

static double rel_diff(const run_result *a, const run_result *b) {
    double dmax = 0, wmax = 0;
    for (size_t i = 0; i < a->n; i++) {
        dmax = fmax(dmax, fabs((double)a->w[i] - b->w[i]));
        wmax = fmax(wmax, fabs((double)a->w[i]));
    }
    return dmax / wmax;
}

static void pipelined_equals_sequential(const char *kind) {
    /* Each variant against one rank running the same model (4 or 8
     * layers: stages may not outnumber layers). */
    static const char *const variants[][5] = {
        { "model.layers=4", "schedule.kind=1f1b", "schedule.ranks=2" },
        { "model.layers=4", "schedule.kind=1f1b", "schedule.ranks=4", "graph=false" },
        { "model.layers=4", "schedule.kind=gpipe", "schedule.ranks=2" },
        { "model.layers=4", "schedule.kind=gpipe", "schedule.ranks=4" },
        { "model.layers=4", "schedule.kind=interleaved", "schedule.ranks=2", "schedule.chunks=2" },
        { "model.layers=8", "schedule.kind=interleaved", "schedule.ranks=4", "schedule.chunks=2" },
        { "model.layers=4", "schedule.kind=hanayo", "schedule.ranks=2", "schedule.waves=1" },
        { "model.layers=4", "schedule.kind=hanayo", "schedule.ranks=2", "schedule.waves=1", "graph=false" },
        { "model.layers=4", "schedule.kind=hanayo", "schedule.ranks=1", "schedule.waves=2" },
        { "model.layers=8", "schedule.kind=hanayo", "schedule.ranks=2", "schedule.waves=2" },
        { "model.layers=8", "schedule.kind=hanayo", "schedule.ranks=4", "schedule.waves=1" },
        /* the order chosen for a transfer time: double-justified
         * (justify.h), its actions moved out of the merge's order */
        { "model.layers=8", "schedule.kind=hanayo", "schedule.ranks=2", "schedule.waves=2",
          "schedule.comm_cost=0.8" },
        /* orders within a cap on each rank's activations (capped.h),
         * down to the smallest: one per stage a rank holds */
        { "model.layers=4", "schedule.kind=1f1b", "schedule.ranks=2", "schedule.max_activations=1" },
        { "model.layers=8", "schedule.kind=hanayo", "schedule.ranks=4", "schedule.waves=1",
          "schedule.max_activations=2" },
        { "model.layers=8", "schedule.kind=interleaved", "schedule.ranks=4", "schedule.chunks=2",
          "schedule.max_activations=3" },
    };
    run_result ref[2];
    const char *one4[] = { "model.layers=4", "schedule.kind=gpipe", "schedule.ranks=1" };
    const char *one8[] = { "model.layers=8", "schedule.kind=gpipe", "schedule.ranks=1" };
    if (train(kind, one4, 3, 3, &ref[0]) || train(kind, one8, 3, 3, &ref[1])) { CHECK(0); return; }
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        int n = 0;
        while (n < 5 && variants[v][n]) n++;
        const run_result *r0 = &ref[strcmp(variants[v][0], "model.layers=8") == 0];
        run_result r;
        if (train(kind, variants[v], n, 3, &r)) { CHECK(0); continue; }
        CHECK(r.n == r0->n);
        double d = rel_diff(r0, &r);
        CHECKF(d <= 1e-5, "%s %s %s %s %s: max |dw| / max |w| = %.3g", kind, variants[v][0],
               variants[v][1], variants[v][2], n > 3 ? variants[v][3] : "", d);
        CHECK(fabs(r.last_loss - r0->last_loss) <= 1e-4 * fabs(r0->last_loss));
        free(r.w);
    }
    free(ref[0].w);
    free(ref[1].w);
}

/* A variant's sets (up to 6, NULL-ended) into sets, and into one[4] the
 * one-rank run of the same model and M it is held against. Returns how
 * many sets. */
static int variant_sets(const char *const *variant, const char **sets, const char **one) {
    int n = 0;
    while (n < 6 && variant[n]) { sets[n] = variant[n]; n++; }
    const char *mb = "schedule.micro_batches=4";
    for (int i = 0; i < n; i++)
        if (strncmp(sets[i], "schedule.micro_batches=", 23) == 0) mb = sets[i];
    one[0] = sets[0];
    one[1] = "schedule.kind=gpipe";
    one[2] = "schedule.ranks=1";
    one[3] = mb;
    return n;
}

/* Split backward (B and W passes) leaves the same weights as one rank
 * running the whole backward at once: every schedule at P = 2 and 4, for
 * the model `kind` (main runs it for GPT, BERT and Llama), replayed and
 * eager, M = 4 and 8 (so every order of the weight
 * passes the generators make runs: ZB-H1, ZB-V, the deferred waves, and
 * the waves whose W's the merge placed for a transfer time). */
static void split_equals_sequential(const char *kind) {
    static const char *const variants[][7] = {
        { "model.layers=4", "schedule.kind=1f1b", "schedule.ranks=2" },
        { "model.layers=4", "schedule.kind=1f1b", "schedule.ranks=4", "schedule.micro_batches=8" },
        { "model.layers=4", "schedule.kind=gpipe", "schedule.ranks=4", "graph=false" },
        { "model.layers=4", "schedule.kind=interleaved", "schedule.ranks=2", "schedule.chunks=2" },
        { "model.layers=8", "schedule.kind=interleaved", "schedule.ranks=4", "schedule.chunks=2",
          "schedule.micro_batches=8" },
        { "model.layers=4", "schedule.kind=hanayo", "schedule.ranks=2", "schedule.waves=1" },
        { "model.layers=4", "schedule.kind=hanayo", "schedule.ranks=2", "schedule.waves=1",
          "graph=false" },
        { "model.layers=8", "schedule.kind=hanayo", "schedule.ranks=2", "schedule.waves=2",
          "schedule.micro_batches=8" },
        { "model.layers=8", "schedule.kind=hanayo", "schedule.ranks=4", "schedule.waves=1",
          "schedule.micro_batches=8" },
        { "model.layers=4", "schedule.kind=hanayo", "schedule.ranks=1", "schedule.waves=2" },
        /* the order chosen for a transfer time: the merge places the W's */
        { "model.layers=8", "schedule.kind=hanayo", "schedule.ranks=2", "schedule.waves=2",
          "schedule.micro_batches=8", "schedule.comm_cost=0.5" },
        /* within a cap (capped.h): the W's placed by the list scheduler */
        { "model.layers=8", "schedule.kind=hanayo", "schedule.ranks=4", "schedule.waves=1",
          "schedule.micro_batches=8", "schedule.max_activations=3" },
        { "model.layers=8", "schedule.kind=hanayo", "schedule.ranks=2", "schedule.waves=2",
          "schedule.micro_batches=8", "schedule.comm_cost=0.5", "schedule.max_activations=4" },
    };
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        const char *sets[8], *one[4];
        int n = variant_sets(variants[v], sets, one);
        run_result r0, r;
        if (train(kind, one, 4, 3, &r0)) { CHECK(0); continue; }
        sets[n++] = "schedule.split_backward=true";
        if (train(kind, sets, n, 3, &r)) { CHECK(0); free(r0.w); continue; }
        CHECK(r.n == r0.n);
        double d = rel_diff(&r0, &r);
        CHECKF(d <= 1e-5, "split %s %s %s %s %s: max |dw| / max |w| = %.3g", kind, sets[0], sets[1],
               sets[2], n > 4 ? sets[3] : "", d);
        CHECK(fabs(r.last_loss - r0.last_loss) <= 1e-4 * fabs(r0.last_loss));
        free(r.w);
        free(r0.w);
    }
}

/* A Llama with a tied head: on 1F1B's 2 ranks the last stage's rank keeps
 * the embedding's replica and the two gradients are summed, as for GPT;
 * split and not, the weights equal one rank's. */
static void tied_llama_equals_sequential(void) {
    for (int split = 0; split <= 1; split++) {
        const char *sp = split ? "schedule.split_backward=true" : "schedule.split_backward=false";
        const char *one[] = { "model.tie_embeddings=true", "schedule.kind=gpipe",
                              "schedule.ranks=1" };
        const char *two[] = { "model.tie_embeddings=true", "schedule.kind=1f1b",
                              "schedule.ranks=2", sp };
        run_result r0, r;
        if (train("llama", one, 3, 3, &r0)) { CHECK(0); return; }
        if (train("llama", two, 4, 3, &r)) { CHECK(0); free(r0.w); return; }
        CHECK(r.n == r0.n);
        double d = rel_diff(&r0, &r);
        CHECKF(d <= 1e-5, "tied llama 1f1b P=2 %s: max |dw| / max |w| = %.3g", sp, d);
        free(r.w);
        free(r0.w);
    }
}

/* Activation recomputation (train.recompute) runs the same ops in the
 * same order on the same inputs: each mode leaves exactly the weights and
 * loss of "none" on the same schedule, and so (within 1e-5) those of one
 * rank running the whole model; every schedule at P = 2 and 4, split
 * backward on and off, replayed and eager. */
static void recompute_equals_none(const char *kind) {
    static const char *const variants[][6] = {
        { "model.layers=4", "schedule.kind=1f1b", "schedule.ranks=2" },
        { "model.layers=4", "schedule.kind=gpipe", "schedule.ranks=4", "graph=false" },
        { "model.layers=4", "schedule.kind=interleaved", "schedule.ranks=2", "schedule.chunks=2" },
        { "model.layers=8", "schedule.kind=hanayo", "schedule.ranks=2", "schedule.waves=2" },
        { "model.layers=8", "schedule.kind=hanayo", "schedule.ranks=4", "schedule.waves=1",
          "schedule.micro_batches=8" },
    };
    static const char *const modes[] = { "train.recompute=selective", "train.recompute=full" };
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        for (int split = 0; split <= 1; split++) {
            const char *sets[10], *one[4];
            int n = variant_sets(variants[v], sets, one);
            sets[n++] = split ? "schedule.split_backward=true" : "schedule.split_backward=false";
            run_result seq, none;
            if (train(kind, one, 4, 3, &seq)) { CHECK(0); continue; }
            if (train(kind, sets, n, 3, &none)) { CHECK(0); free(seq.w); continue; }
            for (int k = 0; k < 2; k++) {
                sets[n] = modes[k];
                run_result r;
                if (train(kind, sets, n + 1, 3, &r)) { CHECK(0); continue; }
                CHECKF(r.n == none.n && memcmp(r.w, none.w, r.n * sizeof(float)) == 0 &&
                       r.last_loss == none.last_loss, "%s %s %s %s split %d %s: not none's "
                       "weights bit for bit", kind, sets[0], sets[1], sets[2], split, modes[k]);
                double d = rel_diff(&seq, &r);
                CHECKF(d <= 1e-5, "%s %s %s %s split %d %s: max |dw| / max |w| = %.3g against "
                       "one rank", kind, sets[0], sets[1], sets[2], split, modes[k], d);
                free(r.w);
            }
            free(seq.w);
            free(none.w);
        }
    }
}

/* The recorded and replayed iteration does exactly what the eager one does. */
static void replay_equals_eager(void) {
    for (int split = 0; split <= 1; split++) {
        const char *sp = split ? "schedule.split_backward=true" : "schedule.split_backward=false";
        const char *eager[] = { "schedule.kind=hanayo", "schedule.ranks=2", "graph=false", sp };
        const char *replay[] = { "schedule.kind=hanayo", "schedule.ranks=2", "graph=true", sp };
        run_result a, b;
        if (train("gpt", eager, 4, 4, &a) || train("gpt", replay, 4, 4, &b)) { CHECK(0); return; }
        CHECK(a.n == b.n && memcmp(a.w, b.w, a.n * sizeof(float)) == 0);
        CHECK(a.last_loss == b.last_loss);
        free(a.w);
        free(b.w);
    }
}

/* 80 steps on the synthetic corpus take the loss well below ln(64) = 4.16. */
static void loss_falls(void) {
    const char *sets[] = { "schedule.kind=hanayo", "schedule.ranks=2", "train.steps=200" };
    run_result r;
    if (train("gpt", sets, 3, 200, &r)) { CHECK(0); return; }
    CHECKF(r.first_loss > 3.9 && r.first_loss < 4.4, "first loss %.3f", r.first_loss);
    CHECKF(r.last_loss < 3.0, "loss after 200 steps %.3f (first %.3f)", r.last_loss, r.first_loss);
    free(r.w);
}

/* A failing rank stops the others (their waits end through the backend's
 * abort), and the step reports the failure itself, not a stopped wait:
 * stage 0 stalls past the watchdog, so rank 1's wait for its activations
 * fires the watchdog, and rank 0, released early, meets a stopped wait. */
static void first_failure_is_reported(void) {
    char data_set[300];
    snprintf(data_set, sizeof data_set, "data.train=%s", shard);
    const char *sets[] = { "model.layers=2", "model.d_model=16", "model.heads=2", "model.seq_len=8",
                           "model.vocab=64", "schedule.micro_batch_size=2",
                           "schedule.micro_batches=2", "schedule.kind=1f1b", "schedule.ranks=2",
                           "watchdog_s=0.3", "backend=cpu", "data.val=null",
                           "checkpoint.dir=null", data_set };
    hy_run c;
    hy_error err;
    memset(&c, 0, sizeof c);
    if (hy_test_run_load(&c, NULL, sets, 14, &err)) { CHECKF(0, "%s", err.msg); return; }
    hy_runtime *rt = NULL;
    hy_step_stats st;
    CHECKF(hy_runtime_create(&rt, &c, &err) == HY_OK, "%s", err.msg);
    /* The hook's longest delay, under a minute: rank 1's watchdog (0.3 s)
     * fires long before unless its thread is kept off a core for most of
     * that minute, and its abort cuts the sleep short, so the test takes
     * no longer for it. */
    CHECK(rt && hy_runtime_slow_stage(rt, 0, 59.0, &err) == HY_OK);
    int rc = rt ? hy_train_step(rt, &st, &err) : HY_ERR_RUNTIME;
    CHECK(rc == HY_ERR_RUNTIME);
    CHECKF(strstr(err.msg, "watchdog: rank 1") && !strstr(err.msg, "stopped while waiting"),
           "%s", err.msg);
    CHECK(err.cause == HY_CAUSE_NONE);
    hy_runtime_destroy(rt);
    hy_run_free(&c);
}

/* The whole model's gradient (DESIGN §6.3 "Gradients"): after one step with lr = 0
 * and no clipping, the gradients the pipeline accumulated must match
 * central differences of the loss, which eval recomputes on the same
 * micro-batches. fp32 losses carry about 4e-7 absolute error, so with
 * h = 1e-2 the difference quotient is good to about 4e-5 absolute plus
 * O(h^2) truncation; the check allows 3% of the gradient plus 1e-4, and
 * looks at each tensor's largest gradient, where that is meaningful. */
static void whole_model_gradient(const char *kind, const char *sched, const char *ranks) {
    char data_set[300], kind_set[64];
    snprintf(data_set, sizeof data_set, "data.train=%s", shard);
    const char *norm = kind_norm(kind, kind_set, sizeof kind_set);
    const char *sets[] = { "model.layers=2", "model.d_model=16", "model.heads=2", "model.seq_len=8",
                           "model.vocab=64", "schedule.micro_batch_size=2",
                           "schedule.micro_batches=2", "train.lr=0", "train.min_lr=0",
                           "train.warmup_steps=0", "train.weight_decay=0", "train.grad_clip=0",
                           "data.val=null", "checkpoint.dir=null", data_set, kind_set, sched, ranks,
                           norm };
    hy_run c;
    hy_error err;
    memset(&c, 0, sizeof c);
    if (hy_test_run_load(&c, NULL, sets, 19, &err)) { CHECKF(0, "%s", err.msg); return; }
    hy_runtime *rt = NULL;
    hy_model m;
    hy_step_stats st;
    if (hy_runtime_create(&rt, &c, &err) || hy_train_step(rt, &st, &err) ||
        hy_test_model_copy(&m, &c, 1, &err)) {
        CHECKF(0, "%s", err.msg);
        hy_runtime_destroy(rt);
        hy_run_free(&c);
        return;
    }
    double base = 0, tokens = 0;
    CHECK(hy_runtime_eval(rt, shard, 2, &base, &tokens, &err) == HY_OK);
    CHECKF(fabs(base - st.loss) <= 1e-6 * base, "eval %.7f vs step loss %.7f", base, st.loss);
    int checked = 0;
    for (int i = 0; i < m.n_params; i++) {
        const hy_param *p = &m.params[i];
        size_t n = hy_model_real_numel(&m, p);
        float *w = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
        CHECK(hy_runtime_read(rt, HY_T_PARAM, p->name, w, n, &err) == HY_OK);
        CHECK(hy_runtime_read(rt, HY_T_GRAD, p->name, g, n, &err) == HY_OK);
        size_t j = 0;
        for (size_t k = 1; k < n; k++) if (fabsf(g[k]) > fabsf(g[j])) j = k;
        if (fabsf(g[j]) > 1e-3f) {
            const float h = 1e-2f, keep = w[j];
            double up = 0, down = 0;
            w[j] = keep + h;
            hy_runtime_write(rt, HY_T_PARAM, p->name, w, n, &err);
            hy_runtime_eval(rt, shard, 2, &up, &tokens, &err);
            w[j] = keep - h;
            hy_runtime_write(rt, HY_T_PARAM, p->name, w, n, &err);
            hy_runtime_eval(rt, shard, 2, &down, &tokens, &err);
            w[j] = keep;
            hy_runtime_write(rt, HY_T_PARAM, p->name, w, n, &err);
            double fd = (up - down) / (2.0 * h);
            CHECKF(fabs(fd - g[j]) <= 0.03 * fabs(g[j]) + 1e-4, "%s %s: d loss / d %s[%zu] = %.6g, "
                   "central difference %.6g", kind, sched, p->name, j, g[j], fd);
            checked++;
        }
        free(w);
        free(g);
    }
    CHECKF(checked >= m.n_params / 2, "only %d of %d tensors had a gradient to check", checked,
           m.n_params);
    hy_model_free(&m);
    hy_runtime_destroy(rt);
    hy_run_free(&c);
}

/* A position table longer than the sequences (model.positions 40 at
 * seq_len 16, on 2 ranks): the rows a run reads train exactly as a table
 * of 16 rows does, every other weight too, bit for bit; the 24 rows past
 * them get no gradient, so without weight decay they stay the
 * initialization's and with it (AdamW's decoupled decay, as PyTorch's)
 * each is the initialization times one common factor below 1. */
static void longer_position_table(const char *kind) {
    const char *sets16[] = { "schedule.kind=1f1b", "schedule.ranks=2", "train.weight_decay=0.1" };
    const char *sets40[] = { "schedule.kind=1f1b", "schedule.ranks=2", "train.weight_decay=0.1",
                             "model.positions=40" };
    const char *nodecay[] = { "schedule.kind=1f1b", "schedule.ranks=2", "train.weight_decay=0",
                              "model.positions=40" };
    run_result r16, r40, init, plain;
    if (train(kind, sets16, 3, 3, &r16) || train(kind, sets40, 4, 3, &r40) ||
        train(kind, sets40, 4, 0, &init) || train(kind, nodecay, 4, 3, &plain)) {
        CHECK(0);
        return;
    }
    /* train()'s sets: vocab 64, d_model 32, seq_len 16; wte's real rows,
     * then wpe, in either kind's table */
    size_t C = 32, read = 64 * C + 16 * C, extra = 24 * C;
    CHECK(r40.n == r16.n + extra && init.n == r40.n && plain.n == r40.n);
    CHECKF(memcmp(r16.w, r40.w, read * sizeof(float)) == 0,
           "%s: the rows a run reads differ under a longer table", kind);
    CHECKF(memcmp(r16.w + read, r40.w + read + extra, (r16.n - read) * sizeof(float)) == 0,
           "%s: the weights after wpe differ under a longer table", kind);
    CHECKF(memcmp(plain.w + read, init.w + read, extra * sizeof(float)) == 0,
           "%s: rows past seq_len moved without weight decay", kind);
    size_t j0 = read;
    for (size_t j = read; j < read + extra; j++)
        if (fabsf(init.w[j]) > fabsf(init.w[j0])) j0 = j;
    double f = (double)r40.w[j0] / init.w[j0], worst = 0;
    for (size_t j = read; j < read + extra; j++)
        worst = fmax(worst, fabs(r40.w[j] - f * init.w[j]));
    CHECKF(f < 1 && f > 0.99 && worst <= 1e-6 * fabsf(init.w[j0]),
           "%s: rows past seq_len: factor %.9f, off it by %.3g", kind, f, worst);
    free(r16.w);
    free(r40.w);
    free(init.w);
    free(plain.w);
}

/* The most stash slots a rank of the runtime's schedule allocates (its
 * stages' in-flight counts added up: rt_plan_stashes asserts the slots
 * it hands out equal them), and the most it holds at once, which the
 * rank's list says: the runtime claims a slot at each F and gives it
 * back at the B (W, split) in the list's order. */
static void stash_use(const hy_schedule *sc, int *slots_most, int *held_most) {
    int peak[64];
    CHECK(sc->stages <= 64);
    hy_schedule_in_flight(sc, peak);
    *slots_most = *held_most = 0;
    for (int r = 0; r < sc->ranks; r++) {
        int slots = 0, held = 0;
        for (int st = 0; st < sc->stages; st++)
            if (sc->placement[st] == r) slots += peak[st];
        for (int i = 0; i < sc->n_actions[r]; i++) {
            int op = sc->actions[r][i].op;
            held += op == HY_FWD ? 1 : op == (sc->split ? HY_WGRAD : HY_BWD) ? -1 : 0;
            if (held > *held_most) *held_most = held;
        }
        if (slots > *slots_most) *slots_most = slots;
    }
}

/* schedule.max_activations bounds what a rank's stashes hold: a step runs
 * with the capped order, no rank holding more than the cap at once, and
 * the slots allocated fewer than the uncapped order's. */
static void capped_stashes(void) {
    char data_set[300];
    snprintf(data_set, sizeof data_set, "data.train=%s", shard);
    int uncapped = 0;
    static const char *const caps[] = { "schedule.max_activations=0", "schedule.max_activations=2",
                                        "schedule.max_activations=3" };
    for (int i = 0; i < 3; i++) {
        const char *sets[] = { "model.layers=8", "model.d_model=32", "model.heads=4",
                               "model.seq_len=16", "model.vocab=64", "schedule.micro_batch_size=2",
                               "schedule.micro_batches=8", "schedule.kind=hanayo",
                               "schedule.ranks=4", "schedule.waves=1", "data.val=null",
                               "checkpoint.dir=null", "backend=cpu", data_set, caps[i] };
        hy_run c;
        hy_error err;
        hy_runtime *rt = NULL;
        hy_step_stats st;
        memset(&c, 0, sizeof c);
        int rc = hy_test_run_load(&c, NULL, sets, (int)(sizeof sets / sizeof sets[0]), &err);
        if (!rc) rc = hy_runtime_create(&rt, &c, &err);
        if (!rc) rc = hy_train_step(rt, &st, &err);
        CHECKF(rc == HY_OK, "%s: %s", caps[i], rc ? err.msg : "");
        if (!rc) {
            int slots, held;
            stash_use(hy_runtime_schedule(rt), &slots, &held);
            if (i == 0) uncapped = slots;
            else CHECKF(held <= 1 + i && slots < uncapped, "%s: %d held at once, %d slots on a "
                        "rank, uncapped %d", caps[i], held, slots, uncapped);
        }
        hy_runtime_destroy(rt);
        hy_run_free(&c);
    }
}

int main(void) {
    if (hy_test_shard_make(shard, sizeof shard, "rt", 64, 40000) != 0) { CHECK(0); return TEST_END("runtime"); }
    /* Under ThreadSanitizer (make test runs this program once more there,
     * for the ranks' threads) the split and recompute grids run for GPT
     * alone, beside every kind's pipelined grid: a model kind changes the
     * layers each rank computes, not how the ranks meet. The normal and
     * ASan builds run every grid for every kind. */
    static const char *const kinds[] = { "gpt", "bert", "bert-pre", "llama" };
    const int all = (int)(sizeof kinds / sizeof kinds[0]);
    int n_kinds = hy_test_under("thread") ? 1 : all;
    for (int k = 0; k < all; k++) pipelined_equals_sequential(kinds[k]);
    for (int k = 0; k < n_kinds; k++) split_equals_sequential(kinds[k]);
    tied_llama_equals_sequential();
    for (int k = 0; k < n_kinds; k++) recompute_equals_none(kinds[k]);
    longer_position_table("gpt");
    longer_position_table("bert");
    capped_stashes();
    replay_equals_eager();
    loss_falls();
    first_failure_is_reported();
    whole_model_gradient("gpt", "schedule.kind=gpipe", "schedule.ranks=1");
    whole_model_gradient("gpt", "schedule.kind=1f1b", "schedule.ranks=2");
    whole_model_gradient("bert", "schedule.kind=hanayo", "schedule.ranks=1");
    whole_model_gradient("bert", "schedule.kind=1f1b", "schedule.ranks=2");
    whole_model_gradient("bert-pre", "schedule.kind=hanayo", "schedule.ranks=1");
    whole_model_gradient("llama", "schedule.kind=1f1b", "schedule.ranks=2");
    whole_model_gradient("llama", "schedule.kind=1f1b", "model.kv_heads=1");
    whole_model_gradient("llama", "schedule.kind=hanayo", "schedule.ranks=1");
    hy_test_shard_remove(shard);
    return TEST_END("runtime");
}
