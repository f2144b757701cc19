/*
 * test_profile.c — the profiler, measured-cost planning and the tuner.
 *
 *   - trace.json is Chrome-trace JSON with one track per rank, exactly one
 *     event per action of every rank's list (hy_runtime_schedule), times
 *     non-negative and in list order, and an arrow per transfer;
 *   - from the stamps of a known timeline (a simulated step, P = 2, 1f1b
 *     and hanayo W = 1, stage 0 slower by a delay per action) the profile
 *     finds every stage's cost exactly, the slow stage by the delay, and
 *     a measured bubble the simulator's prediction from those costs
 *     matches;
 *   - with the slow-stage hook in a real run, stage 0's forward costs at
 *     least the delay;
 *   - tune never puts layers on the slow stage, and moves them off it when
 *     they can make up for it (the delay as large as a layer's work);
 *   - summary.json reads back (hy_measured_costs_load) to the same costs;
 *   - the tuned config written by cli_tune_apply loads.
 *
 * No assertion depends on the machine's speed: what a real run measures
 * is only held to what its clock guarantees (a sleep of d lasts at least
 * d), the profile's arithmetic is checked on stamps given to it
 * (hy_profile_from_stamps), and tune is fed cost models built by hand.
 * The runtime tests pin backend=cpu. Runs in a few seconds (the delays
 * dominate, so it stays short under the sanitizers too).
 */
#include "cmd_profile.h"
#include "cmd_tune.h"
#include "config.h"
#include "data.h"
#include "mailbox.h"
#include "measured.h"
#include "order.h"
#include "profile.h"
#include "runtime.h"
#include "schedule.h"
#include "sim.h"
#include "test.h"
#include "lib/testrun.h"
#include "lib/shard.h"
#include "tune.h"

#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64], shard[128];

static void remove_path(const char *name) {
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

/* A small GPT on P = 2 with the schedule given by `sched_sets`. */
static int load_config(hy_run *c, const char *const *sched_sets, int n_sched) {
    char data_set[200];
    snprintf(data_set, sizeof data_set, "data.train=%s", shard);
    const char *sets[24] = {
        "model.layers=4", "model.d_model=32", "model.heads=4", "model.seq_len=16",
        "model.vocab=64", "schedule.micro_batch_size=2", "schedule.ranks=2",
        "data.val=null", "checkpoint.dir=null", "backend=cpu", data_set,
    };
    int n = 11;
    for (int i = 0; i < n_sched; i++) sets[n++] = sched_sets[i];
    hy_error err;
    int rc = hy_test_run_load(c, NULL, sets, n, &err);
    if (rc) fprintf(stderr, "config: %s\n", err.msg);
    return rc;
}

/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */

/* The trace of one profile against the runtime's own action lists. */
static void check_trace(const hy_profile *p, const hy_schedule *s) {
    char *text = hy_profile_trace_json(p);
    CHECK(text != NULL);
    json_error_t je;
    json_t *root = text ? json_loads(text, 0, &je) : NULL;
    free(text);
    CHECKF(root != NULL, "trace.json does not parse: %s", je.text);
    if (!root) return;
    json_t *ev = json_object_get(root, "traceEvents");
    CHECK(json_is_array(ev));
    CHECK(json_is_string(json_object_get(root, "displayTimeUnit")));
    int P = s->ranks;
    int *names = calloc((size_t)P, sizeof *names);
    int **seen = calloc((size_t)P, sizeof *seen);
    double *last_end = calloc((size_t)P, sizeof *last_end);
    int *next = calloc((size_t)P, sizeof *next);
    for (int r = 0; r < P; r++) seen[r] = calloc((size_t)s->n_actions[r], sizeof **seen);
    int flows_s = 0, flows_f = 0, bad_order = 0, negative = 0, unknown = 0;
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        const char *name = json_string_value(json_object_get(e, "name"));
        int tid = (int)json_integer_value(json_object_get(e, "tid"));
        if (!ph || !name) { unknown++; continue; }
        if (!strcmp(ph, "M") && !strcmp(name, "thread_name")) {
            char want[32];
            snprintf(want, sizeof want, "rank %d", tid);
            const char *got = json_string_value(json_object_get(json_object_get(e, "args"), "name"));
            CHECKF(tid >= 0 && tid < P && got && !strcmp(got, want), "thread_name %d: %s", tid,
                   got ? got : "(none)");
            if (tid >= 0 && tid < P) names[tid]++;
            continue;
        }
        if (!strcmp(ph, "s")) flows_s++;
        if (!strcmp(ph, "f")) flows_f++;
        if (strcmp(ph, "X") != 0) continue;
        double ts = json_number_value(json_object_get(e, "ts"));
        double dur = json_number_value(json_object_get(e, "dur"));
        if (ts < 0 || dur < 0) negative++;
        const char *cat = json_string_value(json_object_get(e, "cat"));
        if (!cat || (strcmp(cat, "forward") != 0 && strcmp(cat, "backward") != 0)) continue;
        if (tid < 0 || tid >= P) { unknown++; continue; }
        /* Action events come in list order: the next one must carry the
         * next action's label, start no earlier than the last one ended. */
        int k = next[tid]++;
        if (k >= s->n_actions[tid]) { unknown++; continue; }
        char label[48];
        hy_action_label(&s->actions[tid][k], label, sizeof label);
        CHECKF(!strcmp(label, name), "rank %d action %d: event %s, list %s", tid, k, name, label);
        seen[tid][k]++;
        if (ts < last_end[tid] - 1e-3) bad_order++;
        last_end[tid] = ts + dur;
        json_t *args = json_object_get(e, "args");
        CHECK(json_integer_value(json_object_get(args, "mb")) == s->actions[tid][k].mb);
        CHECK(json_integer_value(json_object_get(args, "stage")) == s->actions[tid][k].stage);
        CHECK(json_number_value(json_object_get(args, "compute_us")) >= 0);
    }
    for (int r = 0; r < P; r++) {
        CHECKF(names[r] == 1, "rank %d has %d thread_name events", r, names[r]);
        CHECKF(next[r] == s->n_actions[r], "rank %d: %d action events for %d actions", r, next[r],
               s->n_actions[r]);
        int once = 1;
        for (int k = 0; k < s->n_actions[r]; k++) once &= seen[r][k] == 1;
        CHECK(once);
        free(seen[r]);
    }
    CHECK(bad_order == 0);
    CHECK(negative == 0);
    CHECK(unknown == 0);
    CHECKF(flows_s == hy_schedule_transfers(s) && flows_f == flows_s,
           "%d flow starts, %d ends, %d transfers", flows_s, flows_f, hy_schedule_transfers(s));
    free(names);
    free(seen);
    free(last_end);
    free(next);
    json_decref(root);
}

static void test_trace(void) {
    const char *sched[] = {"schedule.kind=hanayo", "schedule.waves=1", "schedule.micro_batches=4"};
    hy_run c;
    if (load_config(&c, sched, 3)) { CHECK(0); return; }
    hy_error err;
    hy_runtime *rt = NULL;
    CHECK(hy_runtime_create(&rt, &c, &err) == HY_OK);
    hy_profile p;
    hy_profile_opts o;
    hy_profile_opts_init(&o);
    o.steps = 2;
    int rc = hy_profile_run(&p, &c, &o, &err);
    CHECKF(rc == HY_OK, "%s", err.msg);
    if (!rc && rt) check_trace(&p, hy_runtime_schedule(rt));
    /* The memory plan beside the allocation: equal on the CPU. */
    for (int r = 0; !rc && r < p.sched.ranks; r++)
        CHECKF(p.mem_planned && p.mem_planned[r] > 0 && p.mem_allocated[r] == p.mem_planned[r],
               "rank %d: planned %.0f, allocated %.0f", r, p.mem_planned ? p.mem_planned[r] : 0,
               p.mem_planned ? p.mem_allocated[r] : 0);
    if (!rc) {
        /* Per rank, the parts add up to the step. */
        for (int r = 0; r < p.sched.ranks; r++) {
            const hy_rank_time *t = &p.rank[r];
            CHECK(t->compute > 0 && t->copy >= 0 && t->wait >= 0 && t->blocked >= 0 &&
                  t->tail >= 0 && t->idle >= 0);
            CHECK_NEAR(t->compute + t->copy + t->wait + t->blocked + t->sums + t->tail + t->idle, p.step_ms,
                       1e-6 * p.step_ms + 1e-9);
        }
        CHECK(p.makespan > 0 && p.makespan <= p.step_ms);
        CHECK(p.bubble >= 0 && p.bubble < 1);
        CHECK_NEAR(p.ideal_bubble, 1.0 / 9, 1e-12);   /* (P-1) / (2WM + P-1) */
        /* The bars: six parts per rank, six in the legend. */
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        hy_profile_write_bars_svg(f, &p);
        fclose(f);
        int rects = 0;
        for (const char *q = text; (q = strstr(q, "<rect")); q++) rects++;
        CHECK(rects == 6 * p.sched.ranks + 6);
        free(text);
    }
    hy_profile_free(&p);
    hy_runtime_destroy(rt);
    hy_run_free(&c);
}

/* ------------------------------------------------------------------------ */

#define SLOW_S 0.012   /* the delay of every action of the slow stage */

/* Profiles config c with stage 0 slowed down by the hook. What a real run
 * measures depends on the machine, so the one check is what the clock
 * guarantees: stage 0's forward has no input from another rank, so its
 * cost runs from its start, and the delay (a sleep until the clock has
 * moved on by SLOW_S) lies inside it: at least the delay, however loaded
 * the machine. (test_stamps checks the arithmetic that turns stamps into
 * costs and bubbles, on stamps whose every figure it knows.) 0 when it
 * ran. */
static int slow_profile(hy_profile *p, const hy_run *c) {
    hy_profile_opts o;
    hy_profile_opts_init(&o);
    o.steps = 4;
    o.slow_stage = 0;
    o.slow_seconds = SLOW_S;
    hy_error err;
    int rc = hy_profile_run(p, c, &o, &err);
    CHECKF(rc == HY_OK, "%s", err.msg);
    if (rc) return rc;
    double d = SLOW_S * 1e3, others_f = 0, others_b = 0;
    for (int s = 1; s < p->sched.stages; s++) {
        others_f = fmax(others_f, p->stage[s].fwd);
        others_b = fmax(others_b, p->stage[s].bwd);
    }
    const hy_stage_cost *s0 = &p->stage[0];
    printf("%s, slow stage 0 by %.1f ms: stage 0 F %.3f B %.3f ms, the others at most F %.3f "
           "B %.3f ms; bubble measured %.4f, predicted %.4f (ideal %.4f)\n",
           hy_sched_name(p->sched.kind), d, s0->fwd, s0->bwd, others_f, others_b, p->bubble,
           p->pred_bubble, p->ideal_bubble);
    CHECKF(s0->fwd >= d * (1 - 1e-6), "F: stage 0 %.6f ms, under the delay %.1f ms", s0->fwd, d);
    return HY_OK;
}

/* A cost model (ms) as a profile of the slow-stage hook would fit it,
 * without the machine in it: layers at F 1, B 2, the head half a layer,
 * and stage 0 dearer by `delay` on each of its actions. */
static hy_cost_model slow_first_model(double delay) {
    return (hy_cost_model){ .layer_fwd = 1, .layer_bwd = 2, .first_fwd = delay,
                            .first_bwd = delay, .last_fwd = 0.5, .last_bwd = 1, .comm = 0 };
}

/* The test config as a file (src) and where a tuned copy goes (out). */
static void write_base_config(char *src, char *out, size_t n) {
    snprintf(src, n, "%s/base.json", dir);
    snprintf(out, n, "%s/tuned.json", dir);
    FILE *f = fopen(src, "w");
    if (f) {
        fprintf(f, "{\"model\": {\"layers\": 4, \"d_model\": 32, \"heads\": 4, \"seq_len\": 16,"
                   " \"vocab\": 64}, \"schedule\": {\"kind\": \"1f1b\", \"ranks\": 2}}\n");
        fclose(f);
    }
}

/* Rank r's stamps (1 + 4n + 3, ns after origin) of one step of schedule s
 * as the simulator runs it under per-stage costs fwd, bwd (ms): each
 * action starts when its rank is free, receives its input when the
 * simulator starts it, computes and sends when it ends; then the tail, a
 * tenth of a ms a phase. Its bubble and makespan in *r. */
static int simulated_stamps(const hy_schedule *s, const double *fwd, const double *bwd,
                            uint64_t origin, uint64_t **raw, hy_sim_result *r) {
    hy_costs cc = { .fwd_stage = fwd, .bwd_stage = bwd };
    hy_error err;
    int rc = hy_simulate(s, &cc, NULL, r, &err);
    CHECKF(rc == HY_OK, "%s", err.msg);
    if (rc) return rc;
#define NS(ms) (origin + (uint64_t)llround((ms) * 1e6))
    for (int k = 0; k < s->ranks; k++) {
        int n = s->n_actions[k];
        uint64_t *t = raw[k] = malloc((1 + 4 * (size_t)n + 3) * sizeof *t);
        if (!t) return HY_ERR_RUNTIME;
        double free_at = 0;
        t[0] = NS(0);
        for (int i = 0; i < n; i++) {
            t[1 + 4 * i] = NS(free_at);
            t[2 + 4 * i] = NS(r->start[k][i]);
            t[3 + 4 * i] = t[4 + 4 * i] = NS(r->end[k][i]);
            free_at = r->end[k][i];
        }
        for (int j = 0; j < 3; j++) t[1 + 4 * n + j] = NS(free_at + 0.1 * (j + 1));
    }
#undef NS
    return HY_OK;
}

/* The profile's arithmetic on a known timeline: a simulated step of the
 * schedule `sched` under costs fwd, bwd, stage 0 slower by SLOW_S per
 * action, fed as stamps (two steps alike). Every stage's cost comes back
 * as given (nothing is blocked, nothing copied), the slow stage by about
 * the delay, and the measured bubble is the simulated one, which the
 * prediction from the measured costs repeats. */
static void check_stamps(const char *const *sched, int n_sched, const double *fwd,
                         const double *bwd) {
    hy_run c;
    if (load_config(&c, sched, n_sched)) { CHECK(0); return; }
    hy_error err;
    const hy_schedule s = c.sched;   /* the run's, shallow: freed with it */
    int P = s.ranks, S = s.stages;
    uint64_t **raw = calloc((size_t)P, sizeof *raw);
    hy_sim_result r;
    memset(&r, 0, sizeof r);
    if (raw && simulated_stamps(&s, fwd, bwd, 1000000000u, raw, &r) == HY_OK) {
        uint64_t *const *steps[2] = { raw, raw };
        hy_profile p;
        int rc = hy_profile_from_stamps(&p, &c, 2, steps, &err);
        CHECKF(rc == HY_OK, "%s", err.msg);
        if (!rc) {
            double d = SLOW_S * 1e3, others_f = 0, others_b = 0;
            for (int st = 0; st < S; st++) {
                const hy_stage_cost *x = &p.stage[st];
                CHECKF(fabs(x->fwd - fwd[st]) < 1e-9 && fabs(x->bwd - bwd[st]) < 1e-9,
                       "stage %d: F %.6f B %.6f ms, given %.6f %.6f", st, x->fwd, x->bwd,
                       fwd[st], bwd[st]);
                CHECK(x->fwd_copy == 0 && x->bwd_copy == 0);
                CHECK(fabs(x->fwd_blocked) < 1e-9 && fabs(x->bwd_blocked) < 1e-9);
                if (st > 0) {
                    others_f = fmax(others_f, x->fwd);
                    others_b = fmax(others_b, x->bwd);
                }
            }
            const hy_stage_cost *s0 = &p.stage[0];
            CHECK(s0->fwd - others_f > 0.7 * d && s0->fwd - others_f < 1.3 * d);
            CHECK(s0->bwd - others_b > 0.7 * d && s0->bwd - others_b < 1.3 * d);
            CHECK(p.model.first_fwd > 0.7 * d && p.model.first_bwd > 0.7 * d);
            CHECKF(fabs(p.makespan - r.makespan) < 1e-9 && fabs(p.bubble - r.bubble) < 1e-9,
                   "makespan %.6f bubble %.6f, simulated %.6f %.6f", p.makespan, p.bubble,
                   r.makespan, r.bubble);
            CHECKF(fabs(p.pred_bubble - p.bubble) < 1e-9, "predicted bubble %.6f vs measured %.6f",
                   p.pred_bubble, p.bubble);
            CHECK(p.comm == 0);
            for (int k = 0; k < P; k++) {
                const hy_rank_time *t = &p.rank[k];
                CHECK_NEAR(t->compute + t->copy + t->wait + t->blocked + t->sums + t->tail + t->idle,
                           p.step_ms, 1e-9);
                CHECK_NEAR(t->tail, 0.3, 1e-9);
            }
            check_trace(&p, &s);
            printf("%s from given stamps: bubble %.4f, predicted %.4f\n", hy_sched_name(s.kind),
                   p.bubble, p.pred_bubble);
            hy_profile_free(&p);
        }
    }
    for (int k = 0; raw && k < P; k++) free(raw[k]);
    free(raw);
    hy_sim_result_free(&r);
    hy_run_free(&c);
}

static void test_stamps(void) {
    /* 1f1b, 2 + 2 layers: a layer F 0.1 B 0.2 ms, the head 0.1 and 0.3 on
     * stage 1, stage 0 slow. */
    const char *one[] = {"schedule.kind=1f1b", "schedule.micro_batches=4"};
    double d = SLOW_S * 1e3;
    double f1[] = { 0.2 + d, 0.3 }, b1[] = { 0.4 + d, 0.7 };
    check_stamps(one, 2, f1, b1);
    /* hanayo W = 1: four stages of a layer, two on each rank (a transfer
     * between ranks 0 and 1 both ways, a local one on rank 1). */
    const char *wave[] = {"schedule.kind=hanayo", "schedule.waves=1", "schedule.micro_batches=4"};
    double f2[] = { 0.1 + d, 0.1, 0.1, 0.2 }, b2[] = { 0.2 + d, 0.2, 0.2, 0.5 };
    check_stamps(wave, 3, f2, b2);
}

static void test_slow_hanayo(void) {
    const char *sched[] = {"schedule.kind=hanayo", "schedule.waves=1", "schedule.micro_batches=4"};
    hy_run c;
    if (load_config(&c, sched, 3)) { CHECK(0); return; }
    hy_profile p;
    if (slow_profile(&p, &c) == HY_OK) hy_profile_free(&p);
    hy_run_free(&c);
}

static void test_slow_stage(void) {
    const char *sched[] = {"schedule.kind=1f1b", "schedule.micro_batches=4"};
    hy_run c;
    if (load_config(&c, sched, 2)) { CHECK(0); return; }
    hy_profile p;
    hy_error err;
    if (slow_profile(&p, &c) != HY_OK) { hy_run_free(&c); return; }
    int rc;

    /* Tune never puts more layers on the slow stage. (With the delay at
     * 40 layers' forwards, moving a layer off it gains about 3.5% on the
     * slowest stage, less than tune's margin for leaving the default
     * split: test_tune_moves_layers has a delay the layers can make up
     * for.) */
    hy_cost_model slow = slow_first_model(40);
    hy_tune_opts to = { 0, 1e12, 1, NULL, -1, HY_RECOMPUTE_NONE };
    hy_tune_result res;
    rc = hy_tune_search(&c, &slow, &to, &res, &err);
    CHECKF(rc == HY_OK, "%s", err.msg);
    if (!rc) {
        CHECK(res.n_best > 0 && res.searched >= res.n_best);
        printf("tune: best %s, first stage %d of 4 layers, M = %d\n",
               hy_sched_name(res.best[0].kind), res.best[0].split[0], res.best[0].micro_batches);
        CHECKF(res.best[0].split[0] <= 2 - (res.best[0].stages > 2),
               "best: %s, first stage %d layers", hy_sched_name(res.best[0].kind),
               res.best[0].split[0]);
        CHECK(res.current.split[0] == 2);
        CHECK(res.best[0].us_per_token <= res.current.us_per_token);
        for (int i = 0; i < res.n_best; i++) CHECK(!res.best[i].split_backward);
        for (int i = 1; i < res.n_best; i++)
            CHECK(res.best[i - 1].us_per_token <= res.best[i].us_per_token);
        int total = 0;
        for (int s = 0; s < res.best[0].stages; s++) total += res.best[0].split[s];
        CHECK(total == 4);

        /* The tuned config, written over a file copy of the test config. */
        char src[160], out[160];
        write_base_config(src, out, sizeof src);
        rc = cli_tune_apply(src, NULL, 0, &res.best[0], out, &err);
        CHECKF(rc == HY_OK, "%s", err.msg);
        hy_config t;
        hy_config_init(&t);
        rc = hy_config_load(&t, out, NULL, 0, &err);
        CHECKF(rc == HY_OK, "%s", err.msg);
        if (!rc) {
            CHECK(t.schedule.kind == res.best[0].kind);
            CHECK(t.schedule.micro_batches == res.best[0].micro_batches);
            CHECK(t.schedule.n_layers_per_stage == res.best[0].stages);
            CHECK(t.schedule.n_layers_per_stage > 0 && t.schedule.layers_per_stage[0] == res.best[0].split[0]);
        }
        hy_config_free(&t);
        remove_path("base.json");
        remove_path("tuned.json");
        hy_tune_result_free(&res);
    }
    /* With W's share of a backward known, every schedule is searched whole
     * and split too: both kinds of row come back, a split row holds more
     * activations than the same schedule whole (W keeps its inputs), and
     * the tuned config says which it is. None without the share. */
    to.wgrad_share = 0.5;
    rc = hy_tune_search(&c, &slow, &to, &res, &err);
    CHECKF(rc == HY_OK, "%s", err.msg);
    if (!rc) {
        int splits = 0, wholes = 0;
        const hy_tune_candidate *one = NULL, *other = NULL;
        for (int i = 0; i < res.n_best; i++) {
            const hy_tune_candidate *x = &res.best[i];
            splits += x->split_backward;
            wholes += !x->split_backward;
            if (x->kind == HY_SCHED_1F1B && x->split_backward) one = x;
            if (x->kind == HY_SCHED_1F1B && !x->split_backward) other = x;
        }
        CHECK(splits > 0 && wholes > 0);
        if (one && other && one->micro_batches == other->micro_batches &&
            memcmp(one->split, other->split, (size_t)one->stages * sizeof(int)) == 0)
            CHECK(one->act_bytes > other->act_bytes);
        const hy_tune_candidate *best_split = NULL;
        for (int i = 0; i < res.n_best && !best_split; i++)
            if (res.best[i].split_backward) best_split = &res.best[i];
        char src[160], out[160];
        write_base_config(src, out, sizeof src);
        if (best_split && cli_tune_apply(src, NULL, 0, best_split, out, &err) == HY_OK) {
            hy_config t;
            hy_config_init(&t);
            CHECK(hy_config_load(&t, out, NULL, 0, &err) == HY_OK && t.schedule.split_backward);
            hy_config_free(&t);
        } else {
            CHECK(0);
        }
        remove_path("base.json");
        remove_path("tuned.json");
        hy_tune_result_free(&res);
    }
    to.wgrad_share = -1;

    /* No candidate fits a tiny budget: an input error saying so. */
    to.budget_bytes = 1000;
    rc = hy_tune_search(&c, &slow, &to, &res, &err);
    CHECK(rc == HY_ERR_INPUT && strstr(err.msg, "memory budget"));

    /* summary.json reads back to the same costs. */
    char path[160];
    snprintf(path, sizeof path, "%s/summary.json", dir);
    char *text = hy_profile_summary_json(&p);
    FILE *f = text ? fopen(path, "w") : NULL;
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    free(text);
    hy_measured_costs mc;
    rc = hy_measured_costs_load(&mc, path, &err);
    CHECKF(rc == HY_OK, "%s", err.msg);
    if (!rc) {
        CHECK(mc.kind == HY_SCHED_1F1B && mc.ranks == 2 && mc.stages == 2 && mc.micro_batches == 4);
        CHECK(mc.n_layers[0] == 2 && mc.n_layers[1] == 2);
        /* Written with 12 significant digits. */
        CHECK_NEAR(mc.fwd[0], p.stage[0].fwd, 1e-10 * p.stage[0].fwd);
        CHECK_NEAR(mc.bwd[1], p.stage[1].bwd, 1e-10 * p.stage[1].bwd);
        CHECK_NEAR(mc.model.first_fwd, p.model.first_fwd, 1e-10 * p.model.first_fwd);
        hy_measured_costs_free(&mc);
    }
    remove_path("summary.json");
    hy_profile_free(&p);
    hy_run_free(&c);
}

/* Tune moves layers off a slow stage when they can make up for it: each
 * action of stage 0 dearer by twice a layer's F + B. 1f1b, 4 layers,
 * 2 + 2: stage 0 then costs 6 layers' worth per micro-batch (its 2, and
 * 2 more on its F and on its B) against 2 plus the head, and 1 + 3
 * brings it to 5: a sixth off the step, well beyond tune's margin. The
 * costs are given, not measured, so the machine's load cannot blur them
 * (it once made tune keep 2 + 2). */
static void test_tune_moves_layers(void) {
    const char *sched[] = {"schedule.kind=1f1b", "schedule.micro_batches=4"};
    hy_run c;
    if (load_config(&c, sched, 2)) { CHECK(0); return; }
    hy_cost_model m = slow_first_model(2 * (1 + 2));
    hy_tune_opts to = { 1u << HY_SCHED_1F1B, 1e12, 1, NULL, -1, HY_RECOMPUTE_NONE };
    hy_tune_result res;
    hy_error err;
    int rc = hy_tune_search(&c, &m, &to, &res, &err);
    CHECKF(rc == HY_OK, "%s", err.msg);
    if (!rc) {
        printf("slow stage 0 by twice a layer's F + B per action: tune's 1f1b split %d %d at "
               "M = %d (the config's: 2 2)\n", res.best[0].split[0], res.best[0].split[1],
               res.best[0].micro_batches);
        CHECKF(res.best[0].kind == HY_SCHED_1F1B && res.best[0].split[0] < 2,
               "1f1b best split %d %d", res.best[0].split[0], res.best[0].split[1]);
        CHECK(res.current.split[0] == 2);
        CHECK(res.best[0].us_per_token < res.current.us_per_token);
        hy_tune_result_free(&res);
    }
    hy_run_free(&c);
}

/* Tune at a fixed global batch, under a memory cap: every candidate keeps
 * the config's M x B sequences; under a budget between the config's plan
 * with full recompute and without, candidates fit by recomputing or by
 * an activation cap (lib/fit.h weighs the two), and one that does either
 * is predicted no faster than the same one without: slower when it
 * recomputes (its backward redoes the forward), the same or slower when
 * only capped (a capped order may wait, or lose nothing). */
static void test_tune_memory_cap(void) {
    const char *sched[] = {"schedule.kind=1f1b", "schedule.micro_batches=4",
                           "schedule.micro_batch_size=4"};
    hy_run c;
    if (load_config(&c, sched, 3)) { CHECK(0); return; }
    int G = 4 * 4;
    hy_cost_model m = { .layer_fwd = 1, .layer_bwd = 2, .last_fwd = 0.5, .last_bwd = 1 };
    hy_tune_opts to = { 0, 1e12, 0, NULL, -1, HY_RECOMPUTE_NONE };
    hy_tune_result free_res, cap_res;
    hy_error err;
    int rc = hy_tune_search(&c, &m, &to, &free_res, &err);
    CHECKF(rc == HY_OK, "%s", err.msg);
    if (rc) { hy_run_free(&c); return; }
    double none_act, none_all, full_act, full_all;
    hy_tune_memory(&c, &c.sched, c.model.n_layers, 4, HY_RECOMPUTE_NONE, NULL, &none_act, &none_all);
    hy_tune_memory(&c, &c.sched, c.model.n_layers, 4, HY_RECOMPUTE_FULL, NULL, &full_act, &full_all);
    CHECK(full_all < none_all && full_act < none_act);
    to.budget_bytes = (none_all + full_all) / 2;
    rc = hy_tune_search(&c, &m, &to, &cap_res, &err);
    CHECKF(rc == HY_OK, "%s", err.msg);
    int recomputing = 0;
    for (int i = 0; !rc && i < cap_res.n_best; i++) {
        const hy_tune_candidate *x = &cap_res.best[i];
        CHECKF(x->micro_batches * x->micro_batch_size == G, "M %d x B %d", x->micro_batches,
               x->micro_batch_size);
        CHECK(x->mem_bytes <= to.budget_bytes);
        if (x->recompute == HY_RECOMPUTE_NONE && x->max_activations == 0) continue;
        recomputing++;
        for (int j = 0; j < free_res.n_best; j++) {
            const hy_tune_candidate *y = &free_res.best[j];
            if (y->kind == x->kind && y->chunks == x->chunks &&
                y->split_backward == x->split_backward && y->micro_batches == x->micro_batches &&
                !memcmp(y->split, x->split, sizeof(int) * (size_t)x->stages)) {
                /* a cap may cost nothing (GPipe's order capped can run as fast);
                 * a recomputed forward always costs */
                double slower = x->step_ms - y->step_ms;
                CHECKF(y->recompute == HY_RECOMPUTE_NONE && y->max_activations == 0 &&
                       (x->recompute != HY_RECOMPUTE_NONE ? slower > 0 : slower >= 0), "%s: free %g ms (cap %d, %s), fitting %g ms "
                       "(cap %d, %s)", hy_sched_name(x->kind), y->step_ms, y->max_activations,
                       hy_recompute_name(y->recompute), x->step_ms, x->max_activations,
                       hy_recompute_name(x->recompute));
                CHECK(y->mem_bytes > to.budget_bytes);
            }
        }
    }
    for (int i = 0; i < free_res.n_best; i++)
        CHECK(free_res.best[i].micro_batches * free_res.best[i].micro_batch_size == G);
    CHECKF(recomputing > 0, "no candidate recomputes or caps under %.0f bytes",
           to.budget_bytes);
    printf("tune under %.0f bytes per rank: %d of %d schedules fit by recomputing or a cap\n",
           to.budget_bytes, recomputing, cap_res.n_best);
    if (!rc) hy_tune_result_free(&cap_res);
    hy_tune_result_free(&free_res);
    hy_run_free(&c);
}

/* ------------------------------------------------------------------------ */

static void test_default_dir(void) {
    char *d = cli_profile_default_dir("configs/tiny-gpt.json");
    CHECK(d && !strcmp(d, "profile/tiny-gpt"));
    free(d);
    d = cli_profile_default_dir("my.run.json");
    CHECK(d && !strcmp(d, "profile/my.run"));
    free(d);
    d = cli_profile_default_dir(".hidden");
    CHECK(d && !strcmp(d, "profile/.hidden"));
    free(d);
    hy_error err;
    CHECK(hy_profile_check_dir("/tmp/hy-no-such-dir/a/b", &err) == HY_OK);
    CHECK(hy_profile_check_dir(shard, &err) == HY_ERR_INPUT && strstr(err.msg, "not a directory"));
    char below[200];
    snprintf(below, sizeof below, "%s/x", shard);
    CHECK(hy_profile_check_dir(below, &err) == HY_ERR_INPUT);
}

/* Tune prices each candidate in the order the runtime will run for the
 * measured transfer time, and writes that time as schedule.comm_cost (in
 * stage forwards) so the tuned run gets the same order: here a transfer
 * costs half a one-layer stage's forward. */
static void test_tune_comm_cost(void) {
    const char *sched[] = {"schedule.kind=hanayo", "schedule.waves=1", "schedule.micro_batches=4"};
    hy_run c;
    if (load_config(&c, sched, 3)) { CHECK(0); return; }
    hy_cost_model m = { .layer_fwd = 1, .layer_bwd = 2, .comm = 0.5 };
    hy_tune_opts to = { 1u << HY_SCHED_HANAYO, 1e12, 0, NULL, -1, HY_RECOMPUTE_NONE };
    hy_tune_result res;
    hy_error err;
    int rc = hy_tune_search(&c, &m, &to, &res, &err);
    CHECKF(rc == HY_OK, "%s", err.msg);
    if (rc) { hy_run_free(&c); return; }
    const hy_tune_candidate *b = &res.best[0];
    double fwd = 0;
    for (int st = 0; st < b->stages; st++) fwd += b->split[st] * m.layer_fwd;
    CHECK_NEAR(b->comm_cost, m.comm / (fwd / b->stages), 1e-12);
    /* No slower than the canonical order under the same costs. */
    hy_sched_params p = { b->kind, 2, b->micro_batches, b->waves, b->chunks, b->split_backward, 0 };
    hy_schedule s;
    double f[64], bw[64];
    if (hy_schedule_build(&s, &p, &err) == HY_OK) {
        hy_cost_model_stages(&m, b->split, b->stages, f, bw);
        hy_costs cc = { .comm = m.comm, .fwd_stage = f, .bwd_stage = bw };
        hy_sim_limits lim;
        hy_sim_result r;
        if (hy_mailbox_sim_limits(&s, &lim, &err) == HY_OK) {
            if (hy_simulate(&s, &cc, &lim, &r, &err) == HY_OK) {
                CHECKF(b->makespan_ms <= r.makespan + 1e-9, "%g vs canonical %g", b->makespan_ms,
                       r.makespan);
                hy_sim_result_free(&r);
            }
            hy_sim_limits_free(&lim);
        }
        hy_schedule_free(&s);
    }
    char src[160], out[160];
    write_base_config(src, out, sizeof src);
    rc = cli_tune_apply(src, NULL, 0, b, out, &err);
    CHECKF(rc == HY_OK, "%s", err.msg);
    hy_config t;
    hy_config_init(&t);
    if (!rc && hy_config_load(&t, out, NULL, 0, &err) == HY_OK)
        CHECK_NEAR(t.schedule.comm_cost, b->comm_cost, 1e-4);
    else
        CHECK(0);
    hy_config_free(&t);
    remove_path("base.json");
    remove_path("tuned.json");
    hy_tune_result_free(&res);
    hy_run_free(&c);
}

int main(void) {
    if (hy_test_shard_make(shard, sizeof shard, "profile", 64, 20000) != 0) {
        printf("profile: 0 passed, 1 failed\n");
        return 1;
    }
    snprintf(dir, sizeof dir, "%.*s", (int)(strrchr(shard, '/') - shard), shard);   /* the shard's folder */
    test_default_dir();
    test_trace();
    test_stamps();
    test_slow_stage();
    test_slow_hanayo();
    test_tune_moves_layers();
    test_tune_comm_cost();
    test_tune_memory_cap();
    hy_test_shard_remove(shard);
    return TEST_END("profile");
}
