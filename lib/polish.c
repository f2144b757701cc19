/*
 * polish.c — see polish.h.
 */
#include "polish.h"

#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "justify.h"
#include "rng.h"
#include "sim.h"

/* Walks from the order, each from its own seed: a few, so that one stuck
 * on a plateau does not decide, and spread over the threads. */
#define POLISH_WALKS 4

/* Actions moved a step, and how many places later each goes at most:
 * one move alone is nearly always undone by the justification. */
#define POLISH_MOVES 2
#define POLISH_REACH 3

/* Fewer steps a walk than this and the polish is not started: too few to
 * cross a plateau. */
#define POLISH_MIN_STEPS 16

/* The seed of walk k's stream (rng.h): any fixed number. */
#define POLISH_SEED 0x706f6c697368ULL

/* Stages of the orders polished, at most: larger ones are left as they
 * are. */
#define POLISH_MAX_STAGES 512

typedef struct {
    const hy_schedule *start;
    const hy_costs *c;
    int limit;            /* the start's most activations on a rank */
    const int *slots;     /* [stages]: the start's stash slots, each a bound too */
    double start_makespan;
    long long steps;
    int walk;
    hy_schedule best;     /* the shortest order met, if shorter than start (found) */
    int found;
    double makespan;      /* of best (of start while not found) */
    int rc;
    hy_error err;
} walk_job;

/* s's makespan and most activations on a rank; HY_ERR_INPUT when it
 * deadlocks, HY_ERR_RUNTIME when memory runs out. */
static int price(const hy_schedule *s, const hy_costs *c, double *makespan, int *peak,
                 hy_error *err) {
    hy_sim_result r;
    int rc = hy_simulate(s, c, NULL, &r, err);
    if (rc) return rc;
    *makespan = r.makespan;
    *peak = hy_sim_peak_max(&r);
    hy_sim_result_free(&r);
    return HY_OK;
}

/* dst's lists made src's (the same schedule's shape: every rank the same
 * number of actions). */
static void copy_lists(hy_schedule *dst, const hy_schedule *src) {
    for (int r = 0; r < src->ranks; r++) {
        assert(dst->n_actions[r] == src->n_actions[r]);
        memcpy(dst->actions[r], src->actions[r], sizeof(hy_action) * (size_t)src->n_actions[r]);
    }
}

/* POLISH_MOVES actions, each of a random rank, moved 1..POLISH_REACH
 * places later in its list (to its end at most). */
static void perturb(hy_schedule *s, hy_rng *g) {
    for (int k = 0; k < POLISH_MOVES; k++) {
        int r = (int)hy_rng_below(g, (uint64_t)s->ranks), n = s->n_actions[r];
        if (n < 2) continue;
        int i = (int)hy_rng_below(g, (uint64_t)(n - 1));
        int d = 1 + (int)hy_rng_below(g, POLISH_REACH);
        if (i + d > n - 1) d = n - 1 - i;
        hy_action a = s->actions[r][i];
        memmove(&s->actions[r][i], &s->actions[r][i + 1], sizeof(hy_action) * (size_t)d);
        s->actions[r][i + d] = a;
    }
}

/* One step of walk j from cur into next (cur's lists perturbed and
 * justified): 1 if next is to be taken, 0 if not, < 0 on an error
 * (j->rc says which). */
static int step(walk_job *j, const hy_schedule *cur, double cur_makespan, hy_schedule *next,
                hy_rng *g, hy_justify_scratch *w, double *makespan, int *peak) {
    copy_lists(next, cur);
    perturb(next, g);
    /* No message for a deadlock: half the steps make one, and drop it. */
    int rc = hy_simulate_reuse(next, j->c, NULL, &w->sim, NULL);
    if (rc == HY_ERR_INPUT) return 0;
    if (!rc && hy_sim_peak_max(&w->sim.result) > j->limit) return 0;
    if (rc) {
        j->rc = hy_fail(&j->err, rc, "out of memory simulating the polish's orders");
        return -1;
    }
    rc = hy_justify_simulated(next, j->c, j->limit, 1, w, makespan, peak, &j->err);
    if (rc) {
        j->rc = rc;
        return -1;
    }
    if (*peak > j->limit || *makespan > cur_makespan + hy_makespan_tolerance(cur_makespan))
        return 0;
    int held[POLISH_MAX_STAGES];
    hy_schedule_in_flight(next, held);
    for (int st = 0; st < next->stages; st++)
        if (held[st] > j->slots[st]) return 0;
    return 1;
}

/* Walk j: its steps from the start, keeping the shortest order met. */
static void walk(walk_job *j) {
    hy_schedule cur, next;
    memset(&j->best, 0, sizeof j->best);
    j->rc = hy_schedule_copy(&cur, j->start, &j->err);
    if (j->rc) return;
    j->rc = hy_schedule_copy(&next, j->start, &j->err);
    if (j->rc) {
        hy_schedule_free(&cur);
        return;
    }
    hy_justify_scratch w = { 0 };
    hy_rng g = hy_rng_stream(POLISH_SEED, (uint64_t)j->walk);
    double cur_makespan = j->start_makespan;
    j->makespan = j->start_makespan;
    for (long long k = 0; k < j->steps; k++) {
        double makespan;
        int peak;
        int take = step(j, &cur, cur_makespan, &next, &g, &w, &makespan, &peak);
        if (take < 0) break;
        if (!take) continue;
        hy_schedule was = cur;   /* the lists swap places: no copy */
        cur = next;
        next = was;
        cur_makespan = makespan;
        if (makespan < j->makespan - hy_makespan_tolerance(j->makespan)) {
            if (!j->found && (j->rc = hy_schedule_copy(&j->best, &cur, &j->err)) != HY_OK) break;
            if (j->found) copy_lists(&j->best, &cur);
            j->found = 1;
            j->makespan = makespan;
        }
    }
    hy_justify_scratch_free(&w);
    hy_schedule_free(&cur);
    hy_schedule_free(&next);
}

typedef struct {
    walk_job *jobs;
    int first, stride;    /* this thread's walks: first, first + stride, ... */
} walker;

static void *walker_main(void *arg) {
    walker *w = arg;
    for (int k = w->first; k < POLISH_WALKS; k += w->stride) walk(&w->jobs[k]);
    return NULL;
}

/* Runs every walk on up to `threads` threads, the caller's among them
 * (fewer if one cannot be started: the caller runs the rest); returns
 * how many ran them. */
static int run_walks(walk_job *jobs, int threads) {
    if (threads > POLISH_WALKS) threads = POLISH_WALKS;
    if (threads < 1) threads = 1;
    pthread_t th[POLISH_WALKS];
    walker w[POLISH_WALKS];
    int started = 0;
    for (int t = 1; t < threads; t++) {
        w[t] = (walker){ jobs, t, threads };
        if (pthread_create(&th[t], NULL, walker_main, &w[t]) != 0) break;
        started = t;
    }
    /* The caller takes walk 0's share, and every share a thread did not. */
    for (int t = started + 1; t < threads; t++) {
        w[t] = (walker){ jobs, t, threads };
        walker_main(&w[t]);
    }
    w[0] = (walker){ jobs, 0, threads };
    walker_main(&w[0]);
    for (int t = 1; t <= started; t++) pthread_join(th[t], NULL);
    return started + 1;
}

int hy_polish_schedule(hy_schedule *s, const hy_costs *c, long long work, int threads,
                       hy_polish_stats *stats, hy_error *err) {
    double makespan = 0;
    int peak = 0;
    int rc = price(s, c, &makespan, &peak, err);
    if (stats) *stats = (hy_polish_stats){ .before = makespan, .after = makespan };
    if (rc) return rc;
    int limit = peak;   /* as much memory as the order holds, no more */
    if (makespan <= hy_makespan_bound_memory(s, c, limit) + hy_makespan_tolerance(makespan))
        return HY_OK;   /* no order within it ends sooner */
    long long actions = (long long)hy_action_keys(s);
    long long steps = work / ((long long)POLISH_WALKS * HY_POLISH_STEP_SIMS * actions);
    if (steps < POLISH_MIN_STEPS) return HY_OK;
    if (s->stages > POLISH_MAX_STAGES) return HY_OK;
    int slots[POLISH_MAX_STAGES];
    hy_schedule_in_flight(s, slots);
    walk_job jobs[POLISH_WALKS];
    for (int k = 0; k < POLISH_WALKS; k++)
        jobs[k] = (walk_job){ .start = s, .c = c, .limit = limit, .slots = slots,
                              .start_makespan = makespan, .steps = steps, .walk = k };
    int ran = run_walks(jobs, threads);
    int best = -1;
    for (int k = 0; k < POLISH_WALKS && !rc; k++) {
        if (jobs[k].rc) {
            rc = jobs[k].rc;
            if (err) *err = jobs[k].err;
        } else if (jobs[k].found) {
            double m = best < 0 ? 0 : jobs[best].makespan;
            if (best < 0 || jobs[k].makespan < m - hy_makespan_tolerance(m)) best = k;
        }
    }
    if (!rc && best >= 0) {
        hy_schedule_free(s);
        *s = jobs[best].best;
        jobs[best].found = 0;   /* s has it now */
        if (stats) stats->after = jobs[best].makespan;
    }
    for (int k = 0; k < POLISH_WALKS; k++)
        if (jobs[k].found) hy_schedule_free(&jobs[k].best);
    if (stats) {
        stats->steps = steps * POLISH_WALKS;
        stats->actions = stats->steps * HY_POLISH_STEP_SIMS * actions;
        stats->threads = ran;
    }
    return rc;
}
