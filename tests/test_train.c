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
 * not nan). The learning-rate schedules the steps follow: cosine as it
 * always was, linear, constant and warmup-stable-decay, at chosen steps
 * and without a jump anywhere. And validation during training
 * (train.eval_every): its lines at the right steps, on stdout and in the
 * log, and a run that evaluates trains exactly as one that does not.
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
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POISONED "h.0.mlp.c_fc.weight"

static char dir[64], shard[128], val_shard[128];

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

/* The rate before the schedules came (cosine only), kept here word for
 * word: the default must give the same doubles, bit for bit. */
static double cosine_before(const hy_run_train *t, int step) {
    double lr = t->lr, min_lr = t->min_lr;
    int warm = t->warmup_steps, total = t->steps;
    if (step <= warm) return lr * step / (warm > 0 ? warm : 1);
    if (total <= warm) return lr;
    double progress = (double)(step - warm) / (double)(total - warm);
    if (progress > 1.0) progress = 1.0;
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + cos(3.141592653589793 * progress));
}

static hy_run_train sched(hy_lr_schedule kind, int warm, int steps, double fraction) {
    return (hy_run_train){ .steps = steps, .lr = 1e-2, .min_lr = 1e-3, .warmup_steps = warm,
                           .lr_schedule = kind, .decay_fraction = fraction };
}

/* Each schedule's rate at chosen steps (lr 1e-2, min_lr 1e-3, 4 warm-up
 * steps of 12), the cosine of before bit for bit, and no jump anywhere:
 * over a long run no two neighbouring steps differ by more than the
 * steepest part (the warm-up's lr / warmup_steps) allows. */
static void lr_schedules(void) {
    /* cosine, the default, as it was. */
    const int warms[] = { 0, 1, 4, 20, 50 }, totals[] = { 1, 5, 12, 50, 200 };
    int same = 1;
    for (int w = 0; w < 5; w++)
        for (int n = 0; n < 5; n++) {
            hy_run_train t = sched(HY_LR_COSINE, warms[w], totals[n], 0.2);
            for (int k = 1; k <= totals[n] + 3; k++)
                if (hy_train_lr(&t, k) != cosine_before(&t, k)) same = 0;
        }
    CHECKF(same, "cosine is not the rate it was");

    hy_run_train lin = sched(HY_LR_LINEAR, 4, 12, 0.2);
    CHECK_NEAR(hy_train_lr(&lin, 2), 5e-3, 1e-15);
    CHECK_NEAR(hy_train_lr(&lin, 4), 1e-2, 1e-15);
    CHECK_NEAR(hy_train_lr(&lin, 6), 7.75e-3, 1e-15);     /* a quarter of the way down */
    CHECK_NEAR(hy_train_lr(&lin, 8), 5.5e-3, 1e-15);      /* half-way */
    CHECK(hy_train_lr(&lin, 12) == 1e-3 && hy_train_lr(&lin, 20) == 1e-3);

    hy_run_train con = sched(HY_LR_CONSTANT, 4, 12, 0.2);
    CHECK_NEAR(hy_train_lr(&con, 2), 5e-3, 1e-15);
    for (int k = 4; k <= 20; k++) CHECK(hy_train_lr(&con, k) == 1e-2);

    /* wsd, the last quarter decaying: steady to step 9, then 10, 11, 12
     * a third of the way down each. */
    hy_run_train wsd = sched(HY_LR_WSD, 4, 12, 0.25);
    CHECK_NEAR(hy_train_lr(&wsd, 2), 5e-3, 1e-15);
    for (int k = 4; k <= 9; k++) CHECK(hy_train_lr(&wsd, k) == 1e-2);
    CHECK_NEAR(hy_train_lr(&wsd, 10), 7e-3, 1e-15);
    CHECK_NEAR(hy_train_lr(&wsd, 11), 4e-3, 1e-15);
    CHECK(hy_train_lr(&wsd, 12) == 1e-3 && hy_train_lr(&wsd, 20) == 1e-3);
    /* The default fifth of 12 steps starts at 9.6, between two steps. */
    wsd.decay_fraction = 0.2;
    CHECK(hy_train_lr(&wsd, 9) == 1e-2);
    CHECK_NEAR(hy_train_lr(&wsd, 10), 1e-3 + 9e-3 * 5 / 6, 1e-15);
    /* All the steps decaying: the decay starts where the warm-up ends, as
     * linear's does. */
    wsd.decay_fraction = 1;
    for (int k = 1; k <= 14; k++) CHECK_NEAR(hy_train_lr(&wsd, k), hy_train_lr(&lin, k), 1e-15);
    /* A decay that would reach into the warm-up starts after it. */
    hy_run_train late = sched(HY_LR_WSD, 10, 12, 0.5);
    CHECK(hy_train_lr(&late, 10) == 1e-2);
    CHECK_NEAR(hy_train_lr(&late, 11), 5.5e-3, 1e-15);
    CHECK(hy_train_lr(&late, 12) == 1e-3);
    /* A warm-up as long as the run: every schedule only warms up. */
    for (int kind = 0; kind < HY_LR_COUNT; kind++) {
        hy_run_train t = sched((hy_lr_schedule)kind, 12, 12, 0.2);
        CHECK_NEAR(hy_train_lr(&t, 6), 5e-3, 1e-15);
        CHECK(hy_train_lr(&t, 12) == 1e-2 && hy_train_lr(&t, 13) == 1e-2);
    }

    /* Continuity: 1000 warm-up steps of 10000, so no step may move the
     * rate by more than lr / 1000; a jump at any boundary (into the
     * decay, into wsd's stable part or out of it) would. */
    for (int kind = 0; kind < HY_LR_COUNT; kind++) {
        hy_run_train t = sched((hy_lr_schedule)kind, 1000, 10000, 0.2);
        double worst = 0;
        for (int k = 2; k <= 10000; k++) {
            double d = fabs(hy_train_lr(&t, k) - hy_train_lr(&t, k - 1));
            if (d > worst) worst = d;
        }
        CHECKF(worst <= 1e-2 / 1000 * (1 + 1e-9), "%s: a step moves the rate by %g",
               hy_lr_schedule_name((hy_lr_schedule)kind), worst);
        CHECK(hy_train_lr(&t, 1000) == 1e-2);
        CHECK_NEAR(hy_train_lr(&t, 10000), kind == HY_LR_CONSTANT ? 1e-2 : 1e-3, 1e-15);
    }
    CHECK(strcmp(hy_lr_schedule_name(HY_LR_WSD), "wsd") == 0);

    /* The keys reach the run, and its steps follow them. */
    char data_set[160];
    snprintf(data_set, sizeof data_set, "data.train=%s", shard);
    const char *sets[] = { "model.layers=2", "model.d_model=16", "model.heads=2",
                           "model.seq_len=8", "model.vocab=64", "schedule.kind=1f1b",
                           "schedule.micro_batch_size=2", "schedule.micro_batches=2",
                           "train.lr=1e-2", "train.min_lr=1e-3", "train.warmup_steps=1",
                           "train.steps=4", "train.lr_schedule=wsd", "train.decay_fraction=0.5",
                           "backend=cpu", "data.val=null", "checkpoint.dir=null", data_set };
    hy_run c;
    hy_error err;
    if (hy_test_run_load(&c, NULL, sets, 18, &err)) { CHECKF(0, "%s", err.msg); return; }
    CHECK(c.train.lr_schedule == HY_LR_WSD && c.train.decay_fraction == 0.5);
    hy_runtime *rt = NULL;
    CHECKF(hy_runtime_create(&rt, &c, &err) == HY_OK, "%s", err.msg);
    const double want[] = { 1e-2, 1e-2, 5.5e-3, 1e-3 };
    for (int k = 1; rt && k <= 4; k++) {
        hy_step_stats st;
        CHECKF(hy_train_step(rt, &st, &err) == HY_OK, "%s", err.msg);
        CHECKF(fabs(st.lr - want[k - 1]) <= 1e-15, "step %d: lr %g, want %g", k, st.lr,
               want[k - 1]);
    }
    hy_runtime_destroy(rt);
    hy_run_free(&c);
}

/* The whole of file path into a malloc'd buffer (*n bytes, then a '\0');
 * NULL if it cannot be read. */
static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, got = 1;
    *n = 0;
    while (got > 0) {
        if (*n == cap) {   /* so that a '\0' always fits after the last read */
            char *more = realloc(buf, cap = cap ? 2 * cap : 1 << 16);
            if (!more) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = more;
        }
        got = fread(buf + *n, 1, cap - *n, f);
        *n += got;
    }
    fclose(f);
    if (buf) buf[*n] = '\0';
    return buf;
}

/* Whether files a and b hold the same bytes (and both exist). */
static int same_file(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    int same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

/* Lines of text that contain `part`: their count, and the steps they
 * start with ("step N/" or "{\"step\": N,") into steps[] (up to 8). */
static int lines_with(const char *text, const char *part, int *steps) {
    int n = 0;
    for (const char *p = text; p && *p;) {
        const char *end = strchr(p, '\n');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), p);
        if (strstr(line, part)) {
            int step = -1;
            if (sscanf(line, "step %d/", &step) != 1) sscanf(line, "{\"step\": %d,", &step);
            if (n < 8) steps[n] = step;
            n++;
        }
        p = end ? end + 1 : NULL;
    }
    return n;
}

/* One 6-step run of `kind` with train.eval_every `every` (0: at the end
 * only): what it printed, its log, and where its checkpoint went. */
typedef struct {
    int rc;
    hy_error err;
    char *out, *log;
    char ckdir[160];
} eval_run;

static void train_eval(eval_run *r, const char *kind, int every) {
    char data_set[200], val_set[200], ck_set[200], every_set[40], kind_set[40], log[200];
    snprintf(r->ckdir, sizeof r->ckdir, "%s/eval-%s-%d", dir, kind, every);
    snprintf(log, sizeof log, "%s.jsonl", r->ckdir);
    snprintf(data_set, sizeof data_set, "data.train=%s", shard);
    snprintf(val_set, sizeof val_set, "data.val=%s", val_shard);
    snprintf(ck_set, sizeof ck_set, "checkpoint.dir=%s", r->ckdir);
    snprintf(every_set, sizeof every_set, "train.eval_every=%d", every);
    snprintf(kind_set, sizeof kind_set, "model.kind=%s", kind);
    const char *sets[] = { "model.layers=2", "model.d_model=32", "model.heads=4",
                           "model.seq_len=16", "model.vocab=64", "schedule.kind=1f1b",
                           "schedule.ranks=2", "schedule.micro_batch_size=2",
                           "schedule.micro_batches=4", "backend=cpu", "train.steps=6",
                           "train.warmup_steps=2", "train.log_every=1", "train.eval_batches=3",
                           data_set, val_set, ck_set, every_set, kind_set };
    memset(r, 0, offsetof(eval_run, ckdir));
    hy_run c;
    r->rc = hy_test_run_load(&c, NULL, sets, (int)(sizeof sets / sizeof sets[0]), &r->err);
    size_t len = 0;
    FILE *out = open_memstream(&r->out, &len);
    cli_train_opts o = { .log_json = log };
    if (!r->rc) r->rc = out ? cli_train_run(&c, &o, out, &r->err) : HY_ERR_RUNTIME;
    if (out) fclose(out);
    if (r->rc) fprintf(stderr, "%s, eval_every %d: %s\n", kind, every, r->err.msg);
    r->log = slurp(log, &len);
    hy_run_free(&c);
}

/* The checkpoint of step 6 in a and b: the same weights and moments. */
static int same_checkpoint(const eval_run *a, const eval_run *b) {
    int same = 1;
    const char *files[] = { "model.safetensors", "optimizer.safetensors" };
    for (int i = 0; i < 2; i++) {
        char x[256], y[256];
        snprintf(x, sizeof x, "%s/step_000006/%s", a->ckdir, files[i]);
        snprintf(y, sizeof y, "%s/step_000006/%s", b->ckdir, files[i]);
        same &= same_file(x, y);
    }
    return same;
}

/* train.eval_every 2 over 6 steps: the validation loss after steps 2, 4
 * and 6, once each, on stdout and in the log, the one after step 6 being
 * the final one; 4: after 4, and after 6 as the final one; 0: after 6
 * only. The training itself is the same in all three, bit for bit: the
 * losses of every step, and the weights and AdamW moments saved after the
 * last (GPT, and BERT, whose masks depend on the step). */
static void eval_during_training(const char *kind) {
    eval_run none, two, four;
    train_eval(&none, kind, 0);
    train_eval(&two, kind, 2);
    train_eval(&four, kind, 4);
    CHECK(none.rc == HY_OK && two.rc == HY_OK && four.rc == HY_OK);
    int steps[8] = { 0 };
    CHECKF(lines_with(two.out, "val loss", steps) == 3 && steps[0] == 2 && steps[1] == 4 &&
               steps[2] == 6, "%s: stdout with eval_every 2:\n%s", kind, two.out);
    CHECKF(strstr(two.out, "step 2/6  val loss ") && strstr(two.out, " (3 batches of "),
           "%s", two.out);
    CHECKF(lines_with(two.log, "\"val_loss\": ", steps) == 3 && steps[0] == 2 &&
               steps[1] == 4 && steps[2] == 6, "%s: log with eval_every 2:\n%s", kind, two.log);
    CHECKF(lines_with(two.log, "\"val_batches\": 3}", steps) == 3, "%s", two.log);
    /* The log's lines in order: step 2's validation right after step 2. */
    CHECKF(two.log && strstr(two.log, "\n{\"step\": 2, \"val_loss\": ") &&
               strstr(two.log, "\n{\"step\": 3, \"loss\": ") >
                   strstr(two.log, "{\"step\": 2, \"val_loss\": "), "%s", two.log);
    CHECKF(lines_with(four.out, "val loss", steps) == 2 && steps[0] == 4 && steps[1] == 6,
           "%s: stdout with eval_every 4:\n%s", kind, four.out);
    CHECKF(lines_with(four.log, "\"val_loss\": ", steps) == 2 && steps[0] == 4 && steps[1] == 6,
           "%s", four.log);
    CHECKF(lines_with(none.out, "val loss", steps) == 1 && steps[0] == 6, "%s", none.out);
    CHECKF(lines_with(none.log, "\"val_loss\": ", steps) == 1 && steps[0] == 6, "%s", none.log);
    /* The same model after step 6, so the same final validation. */
    const char *v0 = none.out ? strstr(none.out, "step 6/6  val loss ") : NULL;
    const char *v2 = two.out ? strstr(two.out, "step 6/6  val loss ") : NULL;
    CHECKF(v0 && v2 && strncmp(v0, v2, strcspn(v0, "\n")) == 0, "%s\n%s", none.out, two.out);
    /* Training unchanged: every step's line, and the checkpoint. */
    int n = lines_with(none.log, "\"loss\": ", steps), same = n == 6;
    for (const char *p = none.log, *q = two.log; same && p && q; ) {
        p = strstr(p, "\"loss\": ");
        q = strstr(q, "\"loss\": ");
        if (!p || !q) {
            same = !p && !q;
            break;
        }
        same = strncmp(p, q, strcspn(p, ",")) == 0;
        p++, q++;
    }
    CHECKF(same, "%s: the step losses differ with eval_every 2:\n%s\n%s", kind, none.log,
           two.log);
    CHECKF(same_checkpoint(&none, &two) && same_checkpoint(&none, &four),
           "%s: the weights or moments after step 6 differ with evaluation", kind);
    free(none.out), free(two.out), free(four.out);
    free(none.log), free(two.log), free(four.log);
}

/* eval_every without a validation shard is refused, naming both keys. */
static void eval_needs_val(void) {
    const char *sets[] = { "data.train=elsewhere.bin", "train.eval_every=5" };
    hy_run c;
    hy_error err;
    CHECK(hy_test_run_load(&c, NULL, sets, 2, &err) == HY_ERR_INPUT);
    CHECKF(strstr(err.msg, "train.eval_every is 5 but data.val is null") &&
               strstr(err.msg, "--set train.eval_every=5"), "%s", err.msg);
    hy_run_free(&c);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/hy-train-XXXXXX");
    if (!mkdtemp(dir)) { CHECK(0); return TEST_END("train"); }
    snprintf(shard, sizeof shard, "%s/train.bin", dir);
    snprintf(val_shard, sizeof val_shard, "%s/val.bin", dir);
    uint16_t *tok = malloc(30000 * sizeof *tok);
    hy_error err;
    if (!tok || hy_synth_tokens(tok, 30000, 64, 7, 0, &err) ||
        hy_shard_write(shard, tok, 30000, &err) || hy_synth_tokens(tok, 2000, 64, 7, 1, &err) ||
        hy_shard_write(val_shard, tok, 2000, &err)) {
        CHECK(0);
        free(tok);
        return TEST_END("train");
    }
    free(tok);
    lr_schedule();
    lr_schedules();
    eval_during_training("gpt");
    eval_during_training("bert");
    eval_needs_val();
    skip_transient();
    skip_in_a_row();
    stop_at_first();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    return TEST_END("train");
}
