/*
 * justify.c — see justify.h.
 *
 * Every action (F or B of micro-batch m at stage s) has an index
 * (op * M + m) * S + s. A pass keeps one timeline per rank, the actions
 * placed so far in time order with their start and end, and places the
 * actions one by one in the order the previous schedule gives: each goes
 * into the first gap of its rank (the last, going right) that fits it
 * between its inputs and its outputs and where an F keeps the rank's
 * count of live activations within the limit. The count is taken over the
 * actions placed so far, so the final check is the simulation of the
 * result; an order that would not keep the limit there is not taken.
 */
#include "justify.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

typedef struct {
    int n;
    int *id;            /* placed actions, in time order */
    double *ts, *te;    /* their start and end */
    int *live, *most;   /* the activations held, as fits_memory says */
} timeline;

typedef struct {
    const hy_schedule *s;
    const hy_costs *c;
    int M, S, N, limit;
    double *t0, *t1;    /* [N]: start and end of every action in the current pass */
    int *order;         /* [N]: the ids in the order they are placed */
    timeline tl[HY_MAX_RANKS];
} justify;

static int op_of(const justify *j, int id) { return id / (j->M * j->S); }
static int mb_of(const justify *j, int id) { return id / j->S % j->M; }
static int stage_of(const justify *j, int id) { return id % j->S; }
static int id_of(const justify *j, int op, int m, int st) { return (op * j->M + m) * j->S + st; }

static double cost_of(const justify *j, int id) {
    int st = stage_of(j, id);
    return op_of(j, id) == HY_FWD ? hy_costs_fwd(j->c, st) : hy_costs_bwd(j->c, st);
}

static double hop(const justify *j, int a, int b) {
    return j->s->placement[a] != j->s->placement[b] ? j->c->comm : 0.0;
}

/* The actions id depends on (up to two), with the transfer time after each. */
static int inputs(const justify *j, int id, int *dep, double *gap) {
    int m = mb_of(j, id), st = stage_of(j, id), n = 0;
    if (op_of(j, id) == HY_FWD) {
        if (st > 0) { dep[n] = id_of(j, HY_FWD, m, st - 1); gap[n++] = hop(j, st - 1, st); }
    } else {
        dep[n] = id_of(j, HY_FWD, m, st); gap[n++] = 0;
        if (st < j->S - 1) { dep[n] = id_of(j, HY_BWD, m, st + 1); gap[n++] = hop(j, st + 1, st); }
    }
    return n;
}

/* The actions that depend on id (up to two), with the transfer time before each. */
static int outputs(const justify *j, int id, int *dep, double *gap) {
    int m = mb_of(j, id), st = stage_of(j, id), n = 0;
    if (op_of(j, id) == HY_FWD) {
        if (st < j->S - 1) { dep[n] = id_of(j, HY_FWD, m, st + 1); gap[n++] = hop(j, st, st + 1); }
        dep[n] = id_of(j, HY_BWD, m, st); gap[n++] = 0;
    } else if (st > 0) {
        dep[n] = id_of(j, HY_BWD, m, st - 1); gap[n++] = hop(j, st, st - 1);
    }
    return n;
}

/* The count of live activations, over the actions placed so far: going
 * early (late = 0) live[k] is what rank holds after action k (an F adds
 * one, a B frees one: a prefix sum) and most[k] the largest of live[k..];
 * going late, built from the end, live[k] is what it holds before action
 * k (a B adds one looking back, an F frees it: a suffix sum) and most[k]
 * the largest of live[..k]. Each way the count is exact for the part of
 * the step already placed. */
static int fits_memory(const justify *j, const timeline *t, int i, int fwd, int late) {
    if (late) {
        if (fwd) return 1;
        int after = i < t->n ? t->live[i] : 0;
        if (after + 1 > j->limit) return 0;
        return i == 0 || t->most[i - 1] + 1 <= j->limit;
    }
    if (!fwd) return 1;
    int before = i > 0 ? t->live[i - 1] : 0;
    if (before + 1 > j->limit) return 0;
    return i >= t->n || t->most[i] + 1 <= j->limit;
}

static void insert(timeline *t, int i, int id, double ts, double te, int fwd, int late) {
    int tail = t->n - i;
    memmove(t->id + i + 1, t->id + i, (size_t)tail * sizeof *t->id);
    memmove(t->ts + i + 1, t->ts + i, (size_t)tail * sizeof *t->ts);
    memmove(t->te + i + 1, t->te + i, (size_t)tail * sizeof *t->te);
    memmove(t->live + i + 1, t->live + i, (size_t)tail * sizeof *t->live);
    t->id[i] = id;
    t->ts[i] = ts;
    t->te[i] = te;
    t->n++;
    if (late) {
        int d = fwd ? -1 : 1;
        t->live[i] = (i + 1 < t->n ? t->live[i + 1] : 0) + d;
        for (int k = 0; k < i; k++) t->live[k] += d;
        t->most[0] = t->live[0];
        for (int k = 1; k < t->n; k++)
            t->most[k] = t->live[k] > t->most[k - 1] ? t->live[k] : t->most[k - 1];
        return;
    }
    int d = fwd ? 1 : -1;
    t->live[i] = (i > 0 ? t->live[i - 1] : 0) + d;
    for (int k = i + 1; k < t->n; k++) t->live[k] += d;
    t->most[t->n - 1] = t->live[t->n - 1];
    for (int k = t->n - 2; k >= 0; k--)
        t->most[k] = t->live[k] > t->most[k + 1] ? t->live[k] : t->most[k + 1];
}

typedef struct {
    double key;
    int id;
} keyed;

static int by_key(const void *a, const void *b) {
    const keyed *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->id - y->id;
}

/* One pass: late (every action as late as it can end by `horizon`, the
 * last to end first) or early (as early as it can start, the first to
 * start first). Reads t0/t1, writes them. Returns 0, or -1 if an action
 * found no place within the limit. */
static int pass(justify *j, int late, double horizon) {
    keyed *ks = malloc((size_t)j->N * sizeof *ks);
    if (!ks) return -2;
    for (int i = 0; i < j->N; i++) ks[i] = (keyed){ late ? -j->t1[i] : j->t0[i], i };
    qsort(ks, (size_t)j->N, sizeof *ks, by_key);
    for (int i = 0; i < j->N; i++) j->order[i] = ks[i].id;
    free(ks);
    for (int r = 0; r < j->s->ranks; r++) j->tl[r].n = 0;
    const double eps = 1e-9;
    for (int k = 0; k < j->N; k++) {
        int id = j->order[k], dep[2];
        double gap[2], du = cost_of(j, id);
        int fwd = op_of(j, id) == HY_FWD;
        timeline *t = &j->tl[j->s->placement[stage_of(j, id)]];
        int placed = 0;
        if (late) {
            double lft = horizon;
            int n = outputs(j, id, dep, gap);
            for (int d = 0; d < n; d++)
                if (j->t0[dep[d]] - gap[d] < lft) lft = j->t0[dep[d]] - gap[d];
            for (int i = t->n; i >= 0 && !placed; i--) {
                double next = i < t->n ? t->ts[i] : horizon;
                double end = lft < next ? lft : next;
                double prev = i > 0 ? t->te[i - 1] : -INFINITY;
                if (end - du >= prev - eps && fits_memory(j, t, i, fwd, 1)) {
                    insert(t, i, id, end - du, end, fwd, 1);
                    j->t0[id] = end - du;
                    j->t1[id] = end;
                    placed = 1;
                }
            }
        } else {
            double est = 0;
            int n = inputs(j, id, dep, gap);
            for (int d = 0; d < n; d++)
                if (j->t1[dep[d]] + gap[d] > est) est = j->t1[dep[d]] + gap[d];
            for (int i = 0; i <= t->n && !placed; i++) {
                double prev = i > 0 ? t->te[i - 1] : 0;
                double start = est > prev ? est : prev;
                double next = i < t->n ? t->ts[i] : INFINITY;
                if (start + du <= next + eps && fits_memory(j, t, i, fwd, 0)) {
                    insert(t, i, id, start, start + du, fwd, 0);
                    j->t0[id] = start;
                    j->t1[id] = start + du;
                    placed = 1;
                }
            }
        }
        if (!placed) return -1;
    }
    return 0;
}

/* s's simulated times into t0/t1, and its makespan and largest peak. */
static int measure(justify *j, const hy_schedule *s, double *makespan, int *peak, hy_error *err) {
    hy_sim_result r;
    int rc = hy_simulate(s, j->c, NULL, &r, err);
    if (rc) return rc;
    *makespan = r.makespan;
    *peak = 0;
    for (int q = 0; q < s->ranks; q++) {
        if (r.peak_activations[q] > *peak) *peak = r.peak_activations[q];
        for (int i = 0; i < s->n_actions[q]; i++) {
            const hy_action *a = &s->actions[q][i];
            int id = id_of(j, a->op, a->mb, a->stage);
            j->t0[id] = r.start[q][i];
            j->t1[id] = r.end[q][i];
        }
    }
    hy_sim_result_free(&r);
    return HY_OK;
}

static void justify_free(justify *j) {
    free(j->t0);
    free(j->t1);
    free(j->order);
    for (int r = 0; r < HY_MAX_RANKS; r++) {
        timeline *t = &j->tl[r];
        free(t->id); free(t->ts); free(t->te); free(t->live); free(t->most);
    }
}

int hy_schedule_justify(hy_schedule *s, const hy_costs *c, int limit, int rounds, hy_error *err) {
    if (s->split) return HY_OK;
    justify j;
    memset(&j, 0, sizeof j);
    j.s = s;
    j.c = c;
    j.M = s->micro_batches;
    j.S = s->stages;
    j.N = 2 * j.M * j.S;
    j.limit = limit;
    j.t0 = malloc((size_t)j.N * sizeof *j.t0);
    j.t1 = malloc((size_t)j.N * sizeof *j.t1);
    j.order = malloc((size_t)j.N * sizeof *j.order);
    int ok = j.t0 && j.t1 && j.order;
    for (int r = 0; ok && r < s->ranks; r++) {
        size_t n = (size_t)s->n_actions[r];
        timeline *t = &j.tl[r];
        t->id = malloc(n * sizeof *t->id);
        t->ts = malloc(n * sizeof *t->ts);
        t->te = malloc(n * sizeof *t->te);
        t->live = malloc(n * sizeof *t->live);
        t->most = malloc(n * sizeof *t->most);
        ok = t->id && t->ts && t->te && t->live && t->most;
    }
    if (!ok) {
        justify_free(&j);
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory justifying a schedule");
    }
    double best;
    int peak, rc = measure(&j, s, &best, &peak, err);
    for (int round = 0; round < rounds && !rc; round++) {
        int p = pass(&j, 1, best);
        if (p == 0) p = pass(&j, 0, 0);
        if (p == -2) rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory justifying a schedule");
        if (p) break;
        /* The early pass's timelines are the new order; priced by the
         * simulator, which starts each action as early as the order lets
         * it (never later than the pass placed it). */
        hy_schedule t = *s;
        hy_action *lists[HY_MAX_RANKS];
        for (int r = 0; r < s->ranks && !rc; r++) {
            lists[r] = malloc((size_t)s->n_actions[r] * sizeof *lists[r]);
            if (!lists[r]) {
                for (int q = 0; q < r; q++) free(lists[q]);
                rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory justifying a schedule");
                break;
            }
            for (int i = 0; i < s->n_actions[r]; i++) {
                int id = j.tl[r].id[i];
                lists[r][i] = (hy_action){ op_of(&j, id), mb_of(&j, id), stage_of(&j, id) };
            }
        }
        if (rc) break;
        hy_action *old[HY_MAX_RANKS];
        for (int r = 0; r < s->ranks; r++) old[r] = s->actions[r];
        t.actions = lists;
        double makespan;
        int tpeak;
        /* (The early pass keeps every dependency in time, so its order
         * runs; were it refused, the order is simply not taken.) */
        hy_error ignored;
        int better = measure(&j, &t, &makespan, &tpeak, &ignored) == HY_OK &&
                     makespan < best - 1e-9 * (best > 1 ? best : 1) && tpeak <= limit;
        for (int r = 0; r < s->ranks; r++) {
            if (better) {
                s->actions[r] = lists[r];
                free(old[r]);
            } else {
                free(lists[r]);
            }
        }
        if (!better) break;
        best = makespan;
        /* measure() left t0/t1 at the new order's times: the next round
         * starts from them. */
    }
    justify_free(&j);
    return rc;
}
