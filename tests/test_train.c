/*
 * test_train.c — the training loop's policy for steps that are not finite
 * (train.on_nonfinite), through cli_train_run itself.
 *
 * A NaN is put into one weight before chosen steps (cli_train_opts'
 * before_step hook, hy_runtime_write) and taken out again before the next
 * clean step, so non-finite steps come and go as they would after a bad
 * batch. Checked: each such step is reported with where it went wrong and
 * its update is not applied (the weights before the next step are those
 * before it, bit for bit); no checkpoint is written for it; with "skip"
 * the run goes on, says how many it skipped, and a run of 10 in a row is
 * tolerated but 11 stop it; with "stop" the run ends at the first one with
 * an error and no checkpoint of that step; the JSON log stays JSON (null,
 * not nan). And the learning-rate schedule the steps follow.
 */
#include "cmd_train.h"
#include "config.h"
#include "data.h"
#include "model.h"
#include "runtime.h"
#include "test.h"
#include "lib/testrun.h"
#include "train.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POISONED "h.0.mlp.c_fc.weight"

static char dir[64], shard[128];

/* The steps to poison, and what the hook saw. */
typedef struct {
    const int *bad;           /* sorted step numbers */
    int n_bad;
    size_t numel;             /* of POISONED */
    float *clean;             /* POISONED before the NaN went in */
    float *now;
    int poisoned;             /* the NaN is in the weights */
    int unchanged;            /* times the weights after a bad step were checked equal */
    int changed;              /* ... and found changed */
} poison;

static int is_bad(const poison *p, int step) {
    for (int i = 0; i < p->n_bad; i++)
        if (p->bad[i] == step) return 1;
    return 0;
}

static int before_step(hy_runtime *rt, int step, void *ctx, hy_error *err) {
    poison *p = ctx;
    int rc = HY_OK;
    if (p->poisoned) {
        /* The step before was not finite, so nothing may have moved: the
         * weights are still the clean ones with the NaN in place 0. */
        rc = hy_runtime_read(rt, HY_T_PARAM, POISONED, p->now, p->numel, err);
        if (rc) return rc;
        if (isnan(p->now[0]) && memcmp(p->now + 1, p->clean + 1, (p->numel - 1) * sizeof(float)) == 0)
            p->unchanged++;
        else
            p->changed++;
        if (is_bad(p, step)) return HY_OK;   /* stays poisoned */
        p->poisoned = 0;
        return hy_runtime_write(rt, HY_T_PARAM, POISONED, p->clean, p->numel, err);
    }
    if (!is_bad(p, step)) return HY_OK;
    rc = hy_runtime_read(rt, HY_T_PARAM, POISONED, p->clean, p->numel, err);
    memcpy(p->now, p->clean, p->numel * sizeof(float));
    p->now[0] = NAN;
    if (!rc) rc = hy_runtime_write(rt, HY_T_PARAM, POISONED, p->now, p->numel, err);
    p->poisoned = !rc;
    return rc;
}

/* The step_* names in ckdir, joined by spaces ("" if none or no dir). */
static void checkpoints(const char *ckdir, char *out, size_t cap) {
    struct dirent **names = NULL;
    int n = scandir(ckdir, &names, NULL, alphasort);
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (strncmp(names[i]->d_name, "step_", 5) == 0) {
            size_t used = strlen(out);
            snprintf(out + used, cap - used, "%s%s", used ? " " : "", names[i]->d_name);
        }
        free(names[i]);
    }
    free(names);
}

typedef struct {
    int rc;
    hy_error err;
    char *out;                /* what cli_train_run printed */
    char ck[512];             /* the checkpoints it left */
    poison p;
} result;

/* cli_train_run over `steps` steps with policy `policy`, poisoning steps bad[]. */
static void train(result *r, const char *name, const char *policy, int steps, const int *bad,
                  int n_bad, const char *log_json) {
    char ckdir[128], data_set[200], ck_set[200], steps_set[40], policy_set[60];
    snprintf(ckdir, sizeof ckdir, "%s/%s", dir, name);
    snprintf(data_set, sizeof data_set, "data.train=%s", shard);
    snprintf(ck_set, sizeof ck_set, "checkpoint.dir=%s", ckdir);
    snprintf(steps_set, sizeof steps_set, "train.steps=%d", steps);
    snprintf(policy_set, sizeof policy_set, "train.on_nonfinite=%s", policy);
    const char *sets[] = { "model.layers=2", "model.d_model=32", "model.heads=4",
                           "model.seq_len=16", "model.vocab=64", "schedule.kind=1f1b",
                           "schedule.ranks=2", "schedule.micro_batch_size=2",
                           "schedule.micro_batches=4", "data.val=null", "backend=cpu",
                           "train.log_every=1", "checkpoint.every=1", data_set, ck_set,
                           steps_set, policy_set };
    memset(r, 0, sizeof *r);
    hy_run c;
    r->rc = hy_test_run_load(&c, NULL, sets, (int)(sizeof sets / sizeof sets[0]), &r->err);
    if (r->rc != HY_OK) {
        fprintf(stderr, "%s: %s\n", name, r->err.msg);
        r->out = strdup("");
        hy_run_free(&c);
        return;
    }
    const hy_model *m = &c.model;
    for (int i = 0; i < m->n_params; i++)
        if (strcmp(m->params[i].name, POISONED) == 0) r->p.numel = m->params[i].numel;
    r->p.bad = bad;
    r->p.n_bad = n_bad;
    r->p.clean = calloc(r->p.numel + 1, sizeof(float));
    r->p.now = calloc(r->p.numel + 1, sizeof(float));
    size_t len = 0;
    FILE *out = open_memstream(&r->out, &len);
    cli_train_opts o = { .log_json = log_json, .before_step = before_step,
                         .before_step_ctx = &r->p };
    r->rc = out && r->p.numel ? cli_train_run(&c, &o, out, &r->err) : HY_ERR_RUNTIME;
    if (out) fclose(out);
    free(r->p.clean);
    free(r->p.now);
    checkpoints(ckdir, r->ck, sizeof r->ck);
    hy_run_free(&c);
}

static int has(const result *r, const char *text) {
    return r->out && strstr(r->out, text) != NULL;
}

/* Steps 3 and 5 go bad and come back: skipped, reported, not saved. */
static void skip_transient(void) {
    static const int bad[] = { 3, 5 };
    char log[128];
    snprintf(log, sizeof log, "%s/skip.jsonl", dir);
    result r;
    train(&r, "skip", "skip", 8, bad, 2, log);
    CHECKF(r.rc == HY_OK, "%s", r.err.msg);
    CHECKF(has(&r, "step 3: non-finite loss/gradient (") && has(&r, "skipped (1 so far)") &&
               has(&r, "step 5: non-finite loss/gradient (") && has(&r, "skipped (2 so far)"),
           "%s", r.out);
    CHECKF(has(&r, "the update was not applied") && has(&r, " on rank "), "%s", r.out);
    CHECKF(has(&r, "checkpoint of step 3 not written: the step was not finite"), "%s", r.out);
    CHECKF(has(&r, "2 non-finite steps skipped (train.on_nonfinite is \"skip\")"), "%s", r.out);
    CHECK(!has(&r, "step 4: non-finite") && has(&r, "step 8/8"));
    CHECKF(strcmp(r.ck, "step_000001 step_000002 step_000004 step_000006 step_000007 "
                        "step_000008") == 0, "checkpoints: %s", r.ck);
    CHECKF(r.p.unchanged == 2 && r.p.changed == 0,
           "weights after a non-finite step: %d unchanged, %d changed", r.p.unchanged,
           r.p.changed);
    /* The log of step 3 is JSON: null for NaN, and says so. */
    FILE *f = fopen(log, "r");
    char line[512];
    int found = 0;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "{\"step\": 3,", 11) == 0)
            found = strstr(line, "\"loss\": null") && strstr(line, "\"grad_norm\": null") &&
                    strstr(line, "\"nonfinite\": true") && !strstr(line, "nan");
    if (f) fclose(f);
    CHECKF(found, "the JSON log line of step 3");
    free(r.out);
}

/* 10 bad steps in a row are tolerated, and the count starts again after a
 * good one; 11 in a row stop the run. */
static void skip_in_a_row(void) {
    static const int ten[] = { 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 13 };
    static const int eleven[] = { 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 };
    result r;
    train(&r, "ten", "skip", 14, ten, 11, NULL);
    CHECKF(r.rc == HY_OK, "%s", r.err.msg);
    CHECKF(has(&r, "11 non-finite steps skipped"), "%s", r.out);
    CHECKF(strcmp(r.ck, "step_000001 step_000012 step_000014") == 0, "checkpoints: %s", r.ck);
    free(r.out);

    train(&r, "eleven", "skip", 14, eleven, 11, NULL);
    CHECK(r.rc == HY_ERR_RUNTIME);
    CHECKF(strstr(r.err.msg, "step 12: non-finite loss/gradient (") &&
               strstr(r.err.msg, "11 steps in a row were not finite"), "%s", r.err.msg);
    CHECKF(has(&r, "skipped (10 so far)") && !has(&r, "skipped (11 so far)"), "%s", r.out);
    CHECKF(strcmp(r.ck, "step_000001") == 0, "checkpoints: %s", r.ck);
    free(r.out);
}

/* "stop": the first bad step ends the run, unsaved. */
static void stop_at_first(void) {
    static const int bad[] = { 3 };
    result r;
    train(&r, "stop", "stop", 6, bad, 1, NULL);
    CHECK(r.rc == HY_ERR_RUNTIME);
    CHECKF(strstr(r.err.msg, "step 3: non-finite loss/gradient (") &&
               strstr(r.err.msg, " on rank ") &&
               strstr(r.err.msg, "the update was not applied") &&
               strstr(r.err.msg, "train.on_nonfinite is \"stop\""), "%s", r.err.msg);
    CHECKF(strcmp(r.ck, "step_000001 step_000002") == 0, "checkpoints: %s", r.ck);
    CHECK(!has(&r, "step 4/6") && !has(&r, "skipped"));
    free(r.out);
}

/* The learning-rate schedule: linear warm-up to train.lr, then cosine down
 * to train.min_lr at the last step, held there past it; and the rate each
 * step of hy_train_step reports is the schedule's at that step. */
static void lr_schedule(void) {
    char data_set[160];
    snprintf(data_set, sizeof data_set, "data.train=%s", shard);
    const char *sets[] = { "model.layers=4", "model.d_model=16", "model.heads=2", "model.seq_len=8",
                           "model.vocab=64", "schedule.micro_batch_size=2",
                           "schedule.micro_batches=2", "train.lr=1e-2", "train.min_lr=1e-3",
                           "train.warmup_steps=4", "train.steps=12", "backend=cpu",
                           "data.val=null", "checkpoint.dir=null", data_set };
    hy_run c;
    hy_error err;
    if (hy_test_run_load(&c, NULL, sets, 15, &err)) { CHECKF(0, "%s", err.msg); return; }
    CHECK_NEAR(hy_train_lr(&c.train, 1), 2.5e-3, 1e-15);
    CHECK_NEAR(hy_train_lr(&c.train, 2), 5e-3, 1e-15);
    CHECK_NEAR(hy_train_lr(&c.train, 4), 1e-2, 1e-15);
    CHECK_NEAR(hy_train_lr(&c.train, 8), 5.5e-3, 1e-15);   /* half-way down the cosine */
    CHECK_NEAR(hy_train_lr(&c.train, 12), 1e-3, 1e-15);
    CHECK_NEAR(hy_train_lr(&c.train, 20), 1e-3, 1e-15);
    for (int k = 5; k <= 12; k++) CHECK(hy_train_lr(&c.train, k) < hy_train_lr(&c.train, k - 1));
    hy_runtime *rt = NULL;
    CHECKF(hy_runtime_create(&rt, &c, &err) == HY_OK, "%s", err.msg);
    for (int k = 1; rt && k <= 5; k++) {
        hy_step_stats st;
        CHECKF(hy_train_step(rt, &st, &err) == HY_OK, "%s", err.msg);
        CHECK(st.step == k && st.lr == hy_train_lr(&c.train, k));
    }
    hy_runtime_destroy(rt);
    hy_run_free(&c);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/hy-train-XXXXXX");
    if (!mkdtemp(dir)) { CHECK(0); return TEST_END("train"); }
    snprintf(shard, sizeof shard, "%s/train.bin", dir);
    uint16_t *tok = malloc(30000 * sizeof *tok);
    hy_error err;
    if (!tok || hy_synth_tokens(tok, 30000, 64, 7, 0, &err) ||
        hy_shard_write(shard, tok, 30000, &err)) {
        CHECK(0);
        free(tok);
        return TEST_END("train");
    }
    free(tok);
    lr_schedule();
    skip_transient();
    skip_in_a_row();
    stop_at_first();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return TEST_END("train");
}
