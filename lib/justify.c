/*
 * justify.c — see justify.h.
 *
 * Actions are indexed by hy_action_key and their dependencies are
 * schedule.h's (hy_action_inputs); what needs each action is those turned
 * round, once. A pass keeps one timeline per rank, the actions placed so
 * far in time order with their start and end, and places the actions one
 * by one in the order the previous schedule gives: each goes into the
 * first gap of its rank (the last, going right) that fits it between its
 * inputs and its outputs and where the rank's count of live activations
 * stays within the limit. The count is taken over the actions placed so
 * far, so the final check is the simulation of the result; an order that
 * would not keep the limit there is not taken.
 */
#include "justify.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

typedef struct {
    int n;
    int *id;            /* placed actions (keys), in time order */
    double *ts, *te;    /* their start and end */
    int *live, *most;   /* the activations held, as fits_memory says */
} timeline;

typedef struct {
    const hy_schedule *s;
    const hy_costs *c;
    int N, limit;
    int frees;          /* the op that gives an activation back: B, split W */
    hy_action *act;     /* [N]: the action of each key */
    int (*out)[HY_MAX_INPUTS];   /* [N]: the keys that take each action's output, -1: none */
    double *t0, *t1;    /* [N]: start and end of every action in the current pass */
    int *order;         /* [N]: the keys in the order they are placed */
    timeline tl[HY_MAX_RANKS];
} justify;

/* The transfer time from action a's rank to action b's. */
static double hop(const justify *j, const hy_action *a, const hy_action *b) {
    return j->s->placement[a->stage] != j->s->placement[b->stage] ? j->c->comm : 0.0;
}

/* Every key's action, and what needs it: hy_action_inputs turned round.
 * No action feeds more than two others (F(m, s): F(m, s+1) and B(m, s);
 * B(m, s): B(m, s-1), and split W(m, s); a W feeds none). */
static void index_actions(justify *j) {
    const hy_schedule *s = j->s;
    for (int k = 0; k < j->N; k++) j->out[k][0] = j->out[k][1] = -1;
    for (int r = 0; r < s->ranks; r++)
        for (int i = 0; i < s->n_actions[r]; i++) {
            const hy_action *a = &s->actions[r][i];
            int key = (int)hy_action_key(s, a);
            j->act[key] = *a;
            hy_action in[HY_MAX_INPUTS];
            int n = hy_action_inputs(s, a, in);
            for (int d = 0; d < n; d++) {
                int *o = j->out[hy_action_key(s, &in[d])];
                o[o[0] < 0 ? 0 : 1] = key;
            }
        }
}

/* What action a does to its rank's count of live activations, going
 * early: an F takes one, the op that frees it (B, split W) gives it back,
 * a split B leaves the count as it is. Going late the signs turn round. */
static int held(const justify *j, const hy_action *a) {
    return a->op == HY_FWD ? 1 : a->op == j->frees ? -1 : 0;
}

/* The count of live activations, over the actions placed so far: going
 * early (late = 0) live[k] is what rank holds after action k (an F adds
 * one, what frees it takes one: a prefix sum) and most[k] the largest of
 * live[k..]; going late, built from the end, live[k] is what it holds
 * before action k (what frees one adds one looking back, an F takes it:
 * a suffix sum) and most[k] the largest of live[..k]. Each way the count
 * is exact for the part of the step already placed. d is the action's
 * held(). */
static int fits_memory(const justify *j, const timeline *t, int i, int d, int late) {
    if (late) {
        if (d >= 0) return 1;
        int after = i < t->n ? t->live[i] : 0;
        if (after + 1 > j->limit) return 0;
        return i == 0 || t->most[i - 1] + 1 <= j->limit;
    }
    if (d <= 0) return 1;
    int before = i > 0 ? t->live[i - 1] : 0;
    if (before + 1 > j->limit) return 0;
    return i >= t->n || t->most[i] + 1 <= j->limit;
}

/* Places action id at position i of t, and brings the count up to date.
 * Only what the insertion changes is touched: the entries on the side
 * the action shifts (after it going early, before it going late: mostly
 * few, since each pass places actions near the end it builds from), and
 * the running largest on the other side while it changes. */
static void insert(timeline *t, int i, int id, double ts, double te, int held, int late) {
    int tail = t->n - i;
    memmove(t->id + i + 1, t->id + i, (size_t)tail * sizeof *t->id);
    memmove(t->ts + i + 1, t->ts + i, (size_t)tail * sizeof *t->ts);
    memmove(t->te + i + 1, t->te + i, (size_t)tail * sizeof *t->te);
    memmove(t->live + i + 1, t->live + i, (size_t)tail * sizeof *t->live);
    memmove(t->most + i + 1, t->most + i, (size_t)tail * sizeof *t->most);
    t->id[i] = id;
    t->ts[i] = ts;
    t->te[i] = te;
    int n = ++t->n;
    if (late) {
        int d = -held;
        t->live[i] = (i + 1 < n ? t->live[i + 1] : 0) + d;
        for (int k = 0; d && k < i; k++) {
            t->live[k] += d;
            t->most[k] += d;
        }
        t->most[i] = i > 0 && t->most[i - 1] > t->live[i] ? t->most[i - 1] : t->live[i];
        for (int k = i + 1; k < n; k++) {
            int m = t->live[k] > t->most[k - 1] ? t->live[k] : t->most[k - 1];
            if (m == t->most[k]) break;
            t->most[k] = m;
        }
        return;
    }
    int d = held;
    t->live[i] = (i > 0 ? t->live[i - 1] : 0) + d;
    for (int k = i + 1; d && k < n; k++) {
        t->live[k] += d;
        t->most[k] += d;
    }
    t->most[i] = i + 1 < n && t->most[i + 1] > t->live[i] ? t->most[i + 1] : t->live[i];
    for (int k = i - 1; k >= 0; k--) {
        int m = t->live[k] > t->most[k + 1] ? t->live[k] : t->most[k + 1];
        if (m == t->most[k]) break;
        t->most[k] = m;
    }
}

/* The first position of t at which an action of duration du starting no
 * earlier than est can go (every start before it is earlier than
 * est + du): starts are in time order, so a binary search. */
static int first_fit(const timeline *t, double est, double du, double eps) {
    int lo = 0, hi = t->n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (t->ts[mid] < est + du - eps) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The last position of t at which an action of duration du ending no
 * later than lft can go (every end after it is later than lft - du). */
static int last_fit(const timeline *t, double lft, double du, double eps) {
    int lo = 0, hi = t->n;   /* the largest i with i == 0 or te[i - 1] <= lft - du + eps */
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (t->te[mid - 1] <= lft - du + eps) lo = mid;
        else hi = mid - 1;
    }
    return lo;
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
        int id = j->order[k];
        const hy_action *a = &j->act[id];
        double du = hy_action_cost(j->c, a);
        int d = held(j, a);
        timeline *t = &j->tl[j->s->placement[a->stage]];
        int placed = 0;
        if (late) {
            double lft = horizon;
            for (int d = 0; d < HY_MAX_INPUTS && j->out[id][d] >= 0; d++) {
                int o = j->out[id][d];
                double u = j->t0[o] - hop(j, a, &j->act[o]);
                if (u < lft) lft = u;
            }
            for (int i = last_fit(t, lft, du, eps); i >= 0 && !placed; i--) {
                double next = i < t->n ? t->ts[i] : horizon;
                double end = lft < next ? lft : next;
                double prev = i > 0 ? t->te[i - 1] : -INFINITY;
                if (end - du >= prev - eps && fits_memory(j, t, i, d, 1)) {
                    insert(t, i, id, end - du, end, d, 1);
                    j->t0[id] = end - du;
                    j->t1[id] = end;
                    placed = 1;
                }
            }
        } else {
            double est = 0;
            hy_action in[HY_MAX_INPUTS];
            int n = hy_action_inputs(j->s, a, in);
            for (int d = 0; d < n; d++) {
                int key = (int)hy_action_key(j->s, &in[d]);
                double u = j->t1[key] + hop(j, &in[d], a);
                if (u > est) est = u;
            }
            for (int i = first_fit(t, est, du, eps); i <= t->n && !placed; i++) {
                double prev = i > 0 ? t->te[i - 1] : 0;
                double start = est > prev ? est : prev;
                double next = i < t->n ? t->ts[i] : INFINITY;
                if (start + du <= next + eps && fits_memory(j, t, i, d, 0)) {
                    insert(t, i, id, start, start + du, d, 0);
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

/* s's simulated times into t0/t1; its makespan and largest peak. */
static int measure(justify *j, const hy_schedule *s, double *makespan, int *peak, hy_error *err) {
    hy_sim_result r;
    int rc = hy_simulate(s, j->c, NULL, &r, err);
    if (rc) return rc;
    *makespan = r.makespan;
    *peak = 0;
    for (int q = 0; q < s->ranks; q++) {
        if (r.peak_activations[q] > *peak) *peak = r.peak_activations[q];
        for (int i = 0; i < s->n_actions[q]; i++) {
            size_t key = hy_action_key(s, &s->actions[q][i]);
            j->t0[key] = r.start[q][i];
            j->t1[key] = r.end[q][i];
        }
    }
    hy_sim_result_free(&r);
    return HY_OK;
}

static void justify_free(justify *j, hy_action **lists) {
    free(j->act);
    free(j->out);
    free(j->t0);
    free(j->t1);
    free(j->order);
    for (int r = 0; r < HY_MAX_RANKS; r++) {
        timeline *t = &j->tl[r];
        free(t->id); free(t->ts); free(t->te); free(t->live); free(t->most);
        free(lists[r]);
    }
}

int hy_justify_schedule(hy_schedule *s, const hy_costs *c, int limit, int rounds, hy_error *err) {
    justify j;
    memset(&j, 0, sizeof j);
    j.s = s;
    j.frees = s->split ? HY_WGRAD : HY_BWD;
    j.c = c;
    j.N = (int)hy_action_keys(s);
    j.limit = limit;
    size_t N = (size_t)j.N;
    j.act = malloc(N * sizeof *j.act);
    j.out = malloc(N * sizeof *j.out);
    j.t0 = malloc(N * sizeof *j.t0);
    j.t1 = malloc(N * sizeof *j.t1);
    j.order = malloc(N * sizeof *j.order);
    /* Each round's order is written here, and swapped with s's lists when
     * it is taken. */
    hy_action *lists[HY_MAX_RANKS] = { 0 };
    int ok = j.act && j.out && j.t0 && j.t1 && j.order;
    for (int r = 0; ok && r < s->ranks; r++) {
        size_t n = (size_t)s->n_actions[r];
        timeline *t = &j.tl[r];
        t->id = malloc(n * sizeof *t->id);
        t->ts = malloc(n * sizeof *t->ts);
        t->te = malloc(n * sizeof *t->te);
        t->live = malloc(n * sizeof *t->live);
        t->most = malloc(n * sizeof *t->most);
        lists[r] = malloc(n * sizeof *lists[r]);
        ok = t->id && t->ts && t->te && t->live && t->most && lists[r];
    }
    if (!ok) {
        justify_free(&j, lists);
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory justifying a schedule");
    }
    index_actions(&j);
    double best;
    int peak, rc = measure(&j, s, &best, &peak, err);
    for (int round = 0; round < rounds && !rc; round++) {
        int p = pass(&j, 1, best);
        if (p == 0) p = pass(&j, 0, 0);
        if (p == -2) rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory justifying a schedule");
        if (p) break;
        /* The early pass's timelines are the new order, priced by the
         * simulator, which starts each action as early as the order lets
         * it (never later than the pass placed it). The pass keeps every
         * dependency in time, so the order runs; were it refused, it is
         * simply not taken. */
        for (int r = 0; r < s->ranks; r++)
            for (int i = 0; i < s->n_actions[r]; i++) lists[r][i] = j.act[j.tl[r].id[i]];
        hy_schedule t = *s;
        t.actions = lists;
        double makespan;
        hy_error ignored;
        int better = measure(&j, &t, &makespan, &peak, &ignored) == HY_OK &&
                     makespan < best - 1e-9 * (best > 1 ? best : 1) && peak <= limit;
        if (!better) break;
        for (int r = 0; r < s->ranks; r++) {
            hy_action *was = s->actions[r];
            s->actions[r] = lists[r];
            lists[r] = was;
        }
        best = makespan;   /* and t0/t1 hold its times: the next round starts there */
    }
    justify_free(&j, lists);
    return rc;
}
