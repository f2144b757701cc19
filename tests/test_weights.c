/*
 * test_weights.c — loading weights from safetensors files (lib/weights.h).
 *
 * A small GPT on the CPU backend loads files written here: the weights
 * read back are the file's, bit for bit, under plain names and under
 * Hugging Face's "transformer." prefix with the tensors its files carry
 * beside the parameters (lm_head.weight, the attention-mask buffers); the
 * tied embedding's replica on another rank gets them too (one rank and two
 * evaluate the same loss); a tensor that is not a parameter is refused
 * before any weight changes, its name shown without control characters;
 * a missing tensor and a wrong shape are refused naming the file and the
 * tensor, a position table of another row count naming model.positions.
 */
#include "config.h"
#include "model.h"
#include "runtime.h"
#include "safetensors.h"
#include "test.h"
#include "lib/testrun.h"
#include "weights.h"
#include "lib/shard.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char shard[256], dir[256];

/* A runtime of the small model with `sched` and `ranks`. */
static hy_runtime *open_run(hy_run *c, const char *sched, const char *ranks) {
    char data_set[300];
    snprintf(data_set, sizeof data_set, "data.train=%s", shard);
    const char *sets[] = { "model.layers=2", "model.d_model=16", "model.heads=2", "model.seq_len=8",
                           "model.vocab=64", "schedule.micro_batch_size=2",
                           "schedule.micro_batches=2", "backend=cpu", "data.val=null",
                           "checkpoint.dir=null", data_set, sched, ranks };
    hy_error err;
    hy_runtime *rt = NULL;
    int rc = hy_test_run_load(c, NULL, sets, 13, &err);
    if (!rc) rc = hy_runtime_create(&rt, c, &err);
    CHECKF(rc == HY_OK, "%s", err.msg);
    return rt;
}

/* Value i of parameter k in the files written here. */
static float value_of(int k, size_t i) { return (float)(k + 1) * 0.01f + (float)(i % 97) * 1e-4f; }

/* Writes every parameter of m to path (with `prefix` before its name),
 * plus the Hugging Face extras when asked, leaving out parameter `skip`
 * (-1: none), and an extra tensor `stray` when not NULL. */
static int write_file(const hy_model *m, const char *path, const char *prefix, int extras,
                      int skip, const char *stray) {
    hy_safetensors_writer w;
    hy_error err;
    hy_safetensors_writer_init(&w);
    float **bufs = calloc((size_t)m->n_params, sizeof *bufs);
    static const float junk[64 * 16] = { 0 };
    int rc = bufs ? HY_OK : HY_ERR_RUNTIME;
    for (int k = 0; k < m->n_params && !rc; k++) {
        const hy_param *p = &m->params[k];
        if (k == skip) continue;
        size_t n = hy_model_real_numel(m, p), shape[2] = { (size_t)p->shape[0], (size_t)p->shape[1] };
        if (p->kind == HY_P_WTE) shape[0] = (size_t)m->vocab;
        bufs[k] = malloc(n * sizeof(float));
        if (!bufs[k]) { rc = HY_ERR_RUNTIME; break; }
        for (size_t i = 0; i < n; i++) bufs[k][i] = value_of(k, i);
        char name[96];
        snprintf(name, sizeof name, "%s%s", prefix, p->name);
        rc = hy_safetensors_writer_add(&w, name, HY_ST_F32, p->ndim, shape, bufs[k], &err);
    }
    size_t head[2] = { (size_t)m->vocab, (size_t)m->d_model }, mask[4] = { 1, 1, 8, 8 };
    if (!rc && extras) rc = hy_safetensors_writer_add(&w, "lm_head.weight", HY_ST_F32, 2, head, junk, &err);
    if (!rc && extras) rc = hy_safetensors_writer_add(&w, "transformer.h.0.attn.bias", HY_ST_F32, 4, mask, junk, &err);
    if (!rc && extras) rc = hy_safetensors_writer_add(&w, "h.1.attn.masked_bias", HY_ST_F32, 1, head, junk, &err);
    size_t one[1] = { 4 };
    if (!rc && stray) rc = hy_safetensors_writer_add(&w, stray, HY_ST_F32, 1, one, junk, &err);
    if (!rc) rc = hy_safetensors_write(&w, path, &err);
    if (rc) fprintf(stderr, "writing %s: %s\n", path, err.msg);
    for (int k = 0; bufs && k < m->n_params; k++) free(bufs[k]);
    free(bufs);
    hy_safetensors_writer_free(&w);
    return rc;
}

/* How many of rt's weights differ from the files' values. */
static size_t differing(hy_runtime *rt) {
    const hy_model *m = hy_runtime_model(rt);
    hy_error err;
    size_t bad = 0;
    for (int k = 0; k < m->n_params; k++) {
        const hy_param *p = &m->params[k];
        size_t n = hy_model_real_numel(m, p);
        float *w = malloc(n * sizeof(float));
        if (!w || hy_runtime_read(rt, HY_T_PARAM, p->name, w, n, &err)) { free(w); return (size_t)-1; }
        for (size_t i = 0; i < n; i++) bad += w[i] != value_of(k, i);
        free(w);
    }
    return bad;
}

static void loads_both_namings(void) {
    hy_run c;
    hy_error err;
    hy_runtime *rt = open_run(&c, "schedule.kind=gpipe", "schedule.ranks=1");
    if (!rt) { hy_run_free(&c); return; }
    const hy_model *m = hy_runtime_model(rt);
    char plain[300], hf[300];
    snprintf(plain, sizeof plain, "%s/plain.safetensors", dir);
    snprintf(hf, sizeof hf, "%s/hf.safetensors", dir);
    CHECK(write_file(m, plain, "", 0, -1, NULL) == HY_OK);
    CHECK(write_file(m, hf, "transformer.", 1, -1, NULL) == HY_OK);
    CHECK(differing(rt) > 0);   /* the random initialization is not the file */
    CHECKF(hy_weights_load(rt, plain, &err) == HY_OK, "%s", err.msg);
    CHECK(differing(rt) == 0);
    hy_runtime_destroy(rt);
    hy_run_free(&c);
    rt = open_run(&c, "schedule.kind=gpipe", "schedule.ranks=1");
    if (!rt) { hy_run_free(&c); return; }
    CHECKF(hy_weights_load(rt, hf, &err) == HY_OK, "%s", err.msg);
    CHECK(differing(rt) == 0);
    hy_runtime_destroy(rt);
    hy_run_free(&c);
}

/* Under 1f1b on two ranks the last stage's head reads a replica of wte:
 * loading must reach it, or the two layouts score the weights differently. */
static void reaches_the_replica(void) {
    hy_run c1, c2;
    hy_error err;
    hy_runtime *one = open_run(&c1, "schedule.kind=gpipe", "schedule.ranks=1");
    hy_runtime *two = open_run(&c2, "schedule.kind=1f1b", "schedule.ranks=2");
    char path[300];
    snprintf(path, sizeof path, "%s/plain.safetensors", dir);
    double a = 0, b = 0, tokens = 0;
    if (one && two) {
        CHECKF(hy_weights_load(one, path, &err) == HY_OK, "%s", err.msg);
        CHECKF(hy_weights_load(two, path, &err) == HY_OK, "%s", err.msg);
        CHECK(hy_runtime_eval(one, shard, 2, &a, &tokens, &err) == HY_OK);
        CHECK(hy_runtime_eval(two, shard, 2, &b, &tokens, &err) == HY_OK);
        CHECKF(fabs(a - b) <= 1e-6 * fabs(a) && a > 0, "loss %.7f on one rank, %.7f on two", a, b);
    }
    hy_runtime_destroy(one);
    hy_runtime_destroy(two);
    hy_run_free(&c1);
    hy_run_free(&c2);
}

static void refuses_bad_files(void) {
    hy_run c;
    hy_error err;
    hy_runtime *rt = open_run(&c, "schedule.kind=gpipe", "schedule.ranks=1");
    if (!rt) { hy_run_free(&c); return; }
    const hy_model *m = hy_runtime_model(rt);
    char good[300], path[300];
    snprintf(good, sizeof good, "%s/plain.safetensors", dir);
    CHECKF(hy_weights_load(rt, good, &err) == HY_OK, "%s", err.msg);

    /* A stray tensor: refused, and nothing was changed first. */
    snprintf(path, sizeof path, "%s/stray.safetensors", dir);
    CHECK(write_file(m, path, "", 0, -1, "h.7.ln_1.weight") == HY_OK);
    for (int k = 0; k < m->n_params; k++) {   /* weights the stray file would overwrite */
        const hy_param *p = &m->params[k];
        size_t n = hy_model_real_numel(m, p);
        float *w = calloc(n, sizeof(float));
        CHECK(w && hy_runtime_write(rt, HY_T_PARAM, p->name, w, n, &err) == HY_OK);
        free(w);
    }
    CHECK(hy_weights_load(rt, path, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, path) && strstr(err.msg, "tensor 'h.7.ln_1.weight' is not a parameter"),
           "%s", err.msg);
    float first = 1;
    CHECK(hy_runtime_get(rt, HY_T_PARAM, hy_model_param(m, HY_P_WTE, 0), &first, 1, &err) == HY_OK);
    CHECK(first == 0.0f);

    /* A stray tensor whose name would drive the terminal (a newline, an
     * escape sequence, a C1 CSI in UTF-8): the message shows it tamed, as
     * the safetensors reader's own messages do (hy_safetensors_show). */
    snprintf(path, sizeof path, "%s/hostile.safetensors", dir);
    CHECK(write_file(m, path, "", 0, -1, "evil\n\x1b]0;pwned\x07\xc2\x9b" "2J") == HY_OK);
    CHECK(hy_weights_load(rt, path, &err) == HY_ERR_INPUT);
    int raw = 0;
    for (const char *q = err.msg; *q; q++) raw += (unsigned char)*q < 0x20 || *q == 0x7f;
    CHECKF(raw == 0 && strstr(err.msg, "tensor 'evil??]0;pwned???2J' is not a parameter"),
           "%s", err.msg);

    /* A missing parameter, and one of the wrong shape. */
    snprintf(path, sizeof path, "%s/missing.safetensors", dir);
    CHECK(write_file(m, path, "", 0, 3, NULL) == HY_OK);
    CHECK(hy_weights_load(rt, path, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, "tensor 'h.0.ln_1.bias' is missing (the config's model has it, shape [16])"),
           "%s", err.msg);
    hy_runtime_destroy(rt);
    hy_run_free(&c);

    hy_run other;
    hy_runtime *wide = NULL;
    char data_set[300];
    snprintf(data_set, sizeof data_set, "data.train=%s", shard);
    const char *sets[] = { "model.layers=2", "model.d_model=32", "model.heads=2", "model.seq_len=8",
                           "model.vocab=64", "schedule.kind=gpipe", "schedule.ranks=1",
                           "backend=cpu", data_set };
    memset(&other, 0, sizeof other);
    CHECK(hy_test_run_load(&other, NULL, sets, 9, &err) == HY_OK);
    CHECK(hy_runtime_create(&wide, &other, &err) == HY_OK);
    CHECK(wide && hy_weights_load(wide, good, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, "tensor 'wte.weight' has shape [64, 16], the config's model needs "
                           "[64, 32]"), "%s", err.msg);
    hy_runtime_destroy(wide);
    hy_run_free(&other);

    /* good's table has 8 rows (seq_len 8): a config of 24 rows, at
     * seq_len 8 and at 16, is told the row count and the --set that fits. */
    static const char *const tables[][2] = {
        { "model.seq_len=8", "--set model.positions=8)" },
        { "model.seq_len=16", "--set model.positions=8 --set model.seq_len=8)" },
    };
    for (int i = 0; i < 2; i++) {
        const char *more[] = { "model.layers=2", "model.d_model=16", "model.heads=2",
                               tables[i][0], "model.positions=24", "model.vocab=64",
                               "schedule.kind=gpipe", "schedule.ranks=1", "backend=cpu",
                               data_set };
        hy_runtime *longer = NULL;
        memset(&other, 0, sizeof other);
        CHECK(hy_test_run_load(&other, NULL, more, 10, &err) == HY_OK);
        CHECK(hy_runtime_create(&longer, &other, &err) == HY_OK);
        CHECK(longer && hy_weights_load(longer, good, &err) == HY_ERR_INPUT);
        CHECKF(strstr(err.msg, "tensor 'wpe.weight' has 8 rows, the config's model.positions is "
                               "24") && strstr(err.msg, tables[i][1]), "%s", err.msg);
        hy_runtime_destroy(longer);
        hy_run_free(&other);
    }
}

int main(void) {
    if (hy_test_shard_make(shard, sizeof shard, "weights", 64, 20000) != 0) {
        CHECK(0);
        return TEST_END("weights");
    }
    snprintf(dir, sizeof dir, "%s", shard);
    *strrchr(dir, '/') = '\0';
    loads_both_namings();
    reaches_the_replica();
    refuses_bad_files();
    char path[300];
    static const char *const files[] = { "plain", "hf", "stray", "missing", "hostile" };
    for (int i = 0; i < 5; i++) {
        snprintf(path, sizeof path, "%s/%s.safetensors", dir, files[i]);
        unlink(path);
    }
    hy_test_shard_remove(shard);
    return TEST_END("weights");
}
