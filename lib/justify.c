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

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sim.h"

typedef struct {
    int n;
    int *id;            /* placed actions (keys), in time order */
    double *ts, *te;    /* their start and end */
    int *live;          /* the activations held, as memory_full says */
    /* The arrays above are views into buffers of 2 room + 1 entries, room
     * the rank's actions, starting at off: each insertion moves the
     * shorter side of the timeline, so there is room either way. */
    int room, off;
    int *id_buf, *live_buf;
    double *ts_buf, *te_buf;
    /* For each block of GAP_BLOCK buffer slots, a bound on the idle time
     * before its entries (ts[i] - te[i - 1]): raised as entries come,
     * made exact when a search looks through the block. A pass skips
     * the blocks with no gap an action fits in rather than walk past
     * every entry. tmax: the largest time placed, which says how far
     * rounding goes. */
    double *gap, tmax;
    int blocks;
} timeline;

typedef struct {
    double key;
    int id;
} keyed;

/* Slots per block of a timeline's gap bounds. */
#define GAP_BLOCK 32

typedef struct {
    const hy_schedule *s;
    const hy_costs *c;
    int N, limit;
    int skip;           /* skip the stretches of a timeline with no gap that fits,
                         * or where the rank's memory is full */
    int frees;          /* the op that gives an activation back: B, split W */
    hy_action *act;     /* [N]: the action of each key */
    int (*out)[HY_MAX_INPUTS];   /* [N]: the keys that take each action's output, -1: none */
    double *t0, *t1;    /* [N]: start and end of every action in the current pass */
    int *order;         /* [N]: the keys in the order they are placed */
    keyed *ks, *ks_tmp; /* [N]: the keys being put in that order */
    timeline tl[HY_MAX_RANKS];
    hy_sim_scratch *sim;  /* where the rounds' orders are simulated */
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
 * one, what frees it takes one: a prefix sum), and an F at i raises every
 * count from i on; going late, built from the end, live[k] is what it
 * holds before action k (what frees one adds one looking back, an F takes
 * it: a suffix sum), and what frees one at i raises every count before i.
 * Each way the count is exact for the part of the step already placed.
 * d is the action's held(). The counts it raises are those insert
 * changes, on the side each pass rarely reaches far into, so they are
 * looked through here rather than kept as a running largest, which every
 * insertion at the other side would have to bring up to date.
 *
 * Returns -1 if the action fits at i, else the count k that would go
 * over the limit the farthest from i: going late an action at i' raises
 * the counts up to i' (and is held by the one at i'), so every i' >= k
 * fails as well; going early every i' <= k + 1. The search goes on from
 * beyond k rather than test each of those positions (under a tight cap
 * most of a timeline is at the limit), and finds the same one: the
 * counts do not change while one action is placed. */
static int memory_full(const justify *j, const timeline *t, int i, int d, int late) {
    if (late) {
        if (d >= 0) return -1;
        int last = i < t->n ? i : t->n - 1;
        for (int k = 0; k <= last; k++)
            if (t->live[k] + 1 > j->limit) return k;
        return -1;
    }
    if (d <= 0) return -1;
    for (int k = t->n - 1; k >= i - 1 && k >= 0; k--)
        if (t->live[k] + 1 > j->limit) return k;
    return -1;
}

/* Points t's arrays at slot off of its buffers. */
static void view(timeline *t, int off) {
    t->off = off;
    t->id = t->id_buf + off;
    t->ts = t->ts_buf + off;
    t->te = t->te_buf + off;
    t->live = t->live_buf + off;
}

/* Empties t, its views in the middle of its buffers: the late pass
 * inserts mostly at the front, the early pass at the back. */
static void reset(timeline *t) {
    t->n = 0;
    t->tmax = 0;
    view(t, t->room);
    for (int b = 0; b < t->blocks; b++) t->gap[b] = -INFINITY;
}

/* The idle time before entry i of t: -inf before the first. */
static double gap_at(const timeline *t, int i) {
    return i > 0 ? t->ts[i] - t->te[i - 1] : -INFINITY;
}

/* The gaps before positions lo..hi of t changed: their blocks' bounds
 * raised to them. */
static void gaps_set(timeline *t, int lo, int hi) {
    for (int i = lo; i <= hi; i++) {
        double g = gap_at(t, i);
        double *most = &t->gap[(t->off + i) / GAP_BLOCK];
        if (g > *most) *most = g;
    }
}

/* The gap an action of duration du needs, at least, to go before an
 * entry i (0 < i < n): going late it ends by ts[i] and starts after
 * te[i - 1], going early the same, each within eps. Less the rounding
 * of those sums, by far: so every position below it is one where the
 * exact test fails, and skipping them changes nothing. */
static double gap_needed(const timeline *t, double du, double at, double eps) {
    return du - eps - 1e-9 * (1 + t->tmax + fabs(at) + du);
}

/* The last position in [1, i] of t whose gap reaches `least` (0 if
 * none); i itself when it is not an inner position. Whole blocks whose
 * bound is below it are skipped, and a block looked through entry by
 * entry gets its bound made exact. */
static int gap_last(timeline *t, int i, double least) {
    if (i < 1 || i >= t->n) return i;
    while (i >= 1) {
        int b = (t->off + i) / GAP_BLOCK, first = b * GAP_BLOCK - t->off;
        int lo = first > 1 ? first : 1, last = first + GAP_BLOCK - 1;
        if (t->gap[b] >= least) {
            double most = -INFINITY;
            for (int k = i; k >= lo; k--) {
                double g = gap_at(t, k);
                if (g >= least) return k;
                if (g > most) most = g;
            }
            if (i >= last || i >= t->n - 1) t->gap[b] = most;   /* all of it seen */
        }
        i = lo - 1;
    }
    return 0;
}

/* The first position in [i, n - 1] whose gap reaches `least` (n if none);
 * i itself when it is not an inner position. */
static int gap_first(timeline *t, int i, double least) {
    if (i < 1 || i >= t->n) return i;
    while (i < t->n) {
        int b = (t->off + i) / GAP_BLOCK, first = b * GAP_BLOCK - t->off;
        int hi = first + GAP_BLOCK - 1 < t->n - 1 ? first + GAP_BLOCK - 1 : t->n - 1;
        if (t->gap[b] >= least) {
            double most = -INFINITY;
            for (int k = i; k <= hi; k++) {
                double g = gap_at(t, k);
                if (g >= least) return k;
                if (g > most) most = g;
            }
            if (i <= (first > 1 ? first : 1)) t->gap[b] = most;   /* all of it seen */
        }
        i = hi + 1;
    }
    return t->n;
}

/* Places action id at position i of t, and brings the count up to date.
 * Only what the insertion changes is touched: the shorter side of the
 * timeline moves one slot, and the counts on the side the action shifts
 * (after it going early, before it going late: mostly few, since each
 * pass places actions near the end it builds from) change by its own. */
static void insert(timeline *t, int i, int id, double ts, double te, int held, int late) {
    if (i < t->n - i) {   /* the entries before i move one slot down */
        assert(t->off > 0);
        memmove(t->id - 1, t->id, (size_t)i * sizeof *t->id);
        memmove(t->ts - 1, t->ts, (size_t)i * sizeof *t->ts);
        memmove(t->te - 1, t->te, (size_t)i * sizeof *t->te);
        memmove(t->live - 1, t->live, (size_t)i * sizeof *t->live);
        view(t, t->off - 1);
    } else {              /* those from i on move one slot up */
        int tail = t->n - i;
        assert(t->off + t->n < 2 * t->room + 1);
        memmove(t->id + i + 1, t->id + i, (size_t)tail * sizeof *t->id);
        memmove(t->ts + i + 1, t->ts + i, (size_t)tail * sizeof *t->ts);
        memmove(t->te + i + 1, t->te + i, (size_t)tail * sizeof *t->te);
        memmove(t->live + i + 1, t->live + i, (size_t)tail * sizeof *t->live);
    }
    int front = i < t->n - i;
    t->id[i] = id;
    t->ts[i] = ts;
    t->te[i] = te;
    int n = ++t->n;
    /* the gaps of the entries that moved, its own and the next one's */
    gaps_set(t, front ? 0 : i, front ? (i + 1 < n ? i + 1 : i) : n - 1);
    if (fabs(ts) > t->tmax) t->tmax = fabs(ts);
    if (fabs(te) > t->tmax) t->tmax = fabs(te);
    if (late) {
        int d = -held;
        t->live[i] = (i + 1 < n ? t->live[i + 1] : 0) + d;
        for (int k = 0; d && k < i; k++) t->live[k] += d;
        return;
    }
    int d = held;
    t->live[i] = (i > 0 ? t->live[i - 1] : 0) + d;
    for (int k = i + 1; d && k < n; k++) t->live[k] += d;
}

/* The first position of t at which an action of duration du starting no
 * earlier than est can go (every start before it is earlier than
 * est + du): starts are in time order, so a binary search, within steps
 * doubling back from the end first: the early pass places each action
 * near the end it builds, and a search across the whole timeline cost
 * as much as the rest of the placing. */
static int first_fit(const timeline *t, double est, double du, double eps) {
    int lo = 0, hi = t->n;   /* every start from hi on is late enough */
    for (int step = 1; hi > 0; step *= 2) {
        int m = hi - step > 0 ? hi - step : 0;
        if (t->ts[m] < est + du - eps) {
            lo = m + 1;
            break;
        }
        hi = m;
    }
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (t->ts[mid] < est + du - eps) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* The last position of t at which an action of duration du ending no
 * later than lft can go (every end after it is later than lft - du): the
 * same search from the front, where the late pass builds. */
static int last_fit(const timeline *t, double lft, double du, double eps) {
    int lo = 0, hi = t->n;   /* the largest i with i == 0 or te[i - 1] <= lft - du + eps */
    for (int step = 1; lo < hi; step *= 2) {
        int m = lo + step < hi ? lo + step : hi;
        if (t->te[m - 1] > lft - du + eps) {
            hi = m - 1;
            break;
        }
        lo = m;
    }
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (t->te[mid - 1] <= lft - du + eps) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static int keyed_less(const keyed *x, const keyed *y) {
    return x->key < y->key || (x->key == y->key && x->id < y->id);
}

/* Sorts a[0..n) by key, then id, with tmp[n] to merge into: a merge sort
 * of the runs already in order, so P runs (each rank's timeline, in time
 * order) cost log P merges of the whole. Any input comes out sorted;
 * (key, id) pairs are distinct, so there is one result whatever the
 * algorithm. */
static void sort_keyed(keyed *a, keyed *tmp, int n) {
    for (;;) {
        int runs = 0;
        for (int lo = 0; lo < n; runs++) {
            int mid = lo + 1;
            while (mid < n && !keyed_less(&a[mid], &a[mid - 1])) mid++;
            int hi = mid < n ? mid + 1 : n;
            while (hi < n && !keyed_less(&a[hi], &a[hi - 1])) hi++;
            int x = lo, y = mid, k = lo;
            while (x < mid && y < hi) tmp[k++] = keyed_less(&a[y], &a[x]) ? a[y++] : a[x++];
            while (x < mid) tmp[k++] = a[x++];
            while (y < hi) tmp[k++] = a[y++];
            lo = hi;
        }
        memcpy(a, tmp, (size_t)n * sizeof *a);
        if (runs <= 1) return;
    }
}

/* j->order: every key, the last to end first (late) or the first to
 * start first, ties by key. Each rank's timeline holds its actions in
 * time order, so going through them rank by rank (backwards, late) gives
 * the sort P runs already in order. */
static void place_order(justify *j, int late) {
    int n = 0;
    for (int r = 0; r < j->s->ranks; r++) {
        const timeline *t = &j->tl[r];
        for (int i = 0; i < t->n; i++) {
            int id = t->id[late ? t->n - 1 - i : i];
            /* + 0.0: a -0.0 key equals 0.0, as the comparison says */
            j->ks[n++] = (keyed){ late ? -j->t1[id] + 0.0 : j->t0[id], id };
        }
    }
    assert(n == j->N);
    sort_keyed(j->ks, j->ks_tmp, n);
    for (int i = 0; i < n; i++) j->order[i] = j->ks[i].id;
}

/* One pass: late (every action as late as it can end by `horizon`, the
 * last to end first) or early (as early as it can start, the first to
 * start first). Reads t0/t1, writes them. Returns 0, or -1 if an action
 * found no place within the limit. */
static int pass(justify *j, int late, double horizon) {
    place_order(j, late);
    for (int r = 0; r < j->s->ranks; r++) reset(&j->tl[r]);
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
            double least = j->skip ? gap_needed(t, du, lft, eps) : -INFINITY;
            for (int i = last_fit(t, lft, du, eps); i >= 0 && !placed; i--) {
                i = gap_last(t, i, least);
                double next = i < t->n ? t->ts[i] : horizon;
                double end = lft < next ? lft : next;
                double prev = i > 0 ? t->te[i - 1] : -INFINITY;
                if (end - du < prev - eps) continue;
                int full = memory_full(j, t, i, d, 1);
                if (full >= 0) {   /* no position from `full` on fits: go on below it */
                    if (j->skip) i = full;
                } else {
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
            double least = j->skip ? gap_needed(t, du, est, eps) : -INFINITY;
            for (int i = first_fit(t, est, du, eps); i <= t->n && !placed; i++) {
                i = gap_first(t, i, least);
                double prev = i > 0 ? t->te[i - 1] : 0;
                double start = est > prev ? est : prev;
                double next = i < t->n ? t->ts[i] : INFINITY;
                if (start + du > next + eps) continue;
                int full = memory_full(j, t, i, d, 0);
                if (full >= 0) {   /* no position up to full + 1 fits: go on past it */
                    if (j->skip) i = full + 1;
                } else {
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

/* Simulation r of s taken as the passes' start: its times into t0/t1,
 * its lists into the timelines (the order the first pass sorts from);
 * its makespan and most activations on a rank. */
static void load(justify *j, const hy_schedule *s, const hy_sim_result *r, double *makespan,
                 int *peak) {
    *makespan = r->makespan;
    *peak = hy_sim_peak_max(r);
    for (int q = 0; q < s->ranks; q++) {
        timeline *t = &j->tl[q];   /* the rank's actions in the order they run */
        reset(t);
        for (int i = 0; i < s->n_actions[q]; i++) {
            int key = (int)hy_action_key(s, &s->actions[q][i]);
            j->t0[key] = r->start[q][i];
            j->t1[key] = r->end[q][i];
            t->id[t->n++] = key;
        }
    }
}

/* load() of s simulated in j's scratch. */
static int measure(justify *j, const hy_schedule *s, double *makespan, int *peak, hy_error *err) {
    int rc = hy_simulate_reuse(s, j->c, NULL, j->sim, err);
    if (rc) return rc;
    load(j, s, &j->sim->result, makespan, peak);
    return HY_OK;
}

/* A justification's buffers, sized for one shape of schedule: kept in a
 * caller's scratch between calls (hy_justify_scratch), or for one call. */
typedef struct {
    justify j;
    /* Each round's order is written here, and swapped with s's lists when
     * it is taken. */
    hy_action *lists[HY_MAX_RANKS];
    int ranks, n_actions[HY_MAX_RANKS];
} buffers;

static void buffers_free(buffers *b) {
    justify *j = &b->j;
    free(j->act);
    free(j->out);
    free(j->t0);
    free(j->t1);
    free(j->order);
    free(j->ks);
    free(j->ks_tmp);
    for (int r = 0; r < HY_MAX_RANKS; r++) {
        timeline *t = &j->tl[r];
        free(t->id_buf); free(t->ts_buf); free(t->te_buf); free(t->live_buf);
        free(t->gap);
        free(b->lists[r]);
    }
    memset(b, 0, sizeof *b);
}

/* b sized for s (kept when it already is); -1 when out of memory (b is
 * then left empty). */
static int buffers_fit(buffers *b, const hy_schedule *s) {
    int same = b->j.act && b->ranks == s->ranks && b->j.N == (int)hy_action_keys(s);
    for (int r = 0; same && r < s->ranks; r++) same = b->n_actions[r] == s->n_actions[r];
    if (same) return 0;
    buffers_free(b);
    justify *j = &b->j;
    j->N = (int)hy_action_keys(s);
    b->ranks = s->ranks;
    size_t N = (size_t)j->N;
    j->act = malloc(N * sizeof *j->act);
    j->out = malloc(N * sizeof *j->out);
    j->t0 = malloc(N * sizeof *j->t0);
    j->t1 = malloc(N * sizeof *j->t1);
    j->order = malloc(N * sizeof *j->order);
    j->ks = malloc(N * sizeof *j->ks);
    j->ks_tmp = malloc(N * sizeof *j->ks_tmp);
    int ok = j->act && j->out && j->t0 && j->t1 && j->order && j->ks && j->ks_tmp;
    for (int r = 0; ok && r < s->ranks; r++) {
        size_t n = (size_t)s->n_actions[r], room = 2 * n + 1;
        timeline *t = &j->tl[r];
        b->n_actions[r] = s->n_actions[r];
        t->room = s->n_actions[r];
        t->id_buf = malloc(room * sizeof *t->id_buf);
        t->ts_buf = malloc(room * sizeof *t->ts_buf);
        t->te_buf = malloc(room * sizeof *t->te_buf);
        t->live_buf = malloc(room * sizeof *t->live_buf);
        b->lists[r] = malloc(n * sizeof *b->lists[r]);
        t->blocks = (int)(room / GAP_BLOCK) + 1;
        t->gap = malloc((size_t)t->blocks * sizeof *t->gap);
        ok = t->id_buf && t->ts_buf && t->te_buf && t->live_buf && b->lists[r] && t->gap;
    }
    if (!ok) buffers_free(b);
    return ok ? 0 : -1;
}

/* The justification (see justify.h) in w's buffers when not NULL (whose
 * simulation is s's when `given`: the start, instead of simulating s
 * itself), else in its own, saying in *made and *made_peak (when not
 * NULL) the makespan and peak of the order it leaves. */
static int justify_run(hy_schedule *s, const hy_costs *c, int limit, int rounds, int skip,
                       hy_justify_scratch *w, int given, double *made, int *made_peak,
                       hy_error *err) {
    hy_justify_scratch own = { 0 };
    if (!w) w = &own;
    if (!w->state && !(w->state = calloc(1, sizeof(buffers))))
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory justifying a schedule");
    buffers *b = w->state;
    if (buffers_fit(b, s) != 0) {
        hy_justify_scratch_free(&own);
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory justifying a schedule");
    }
    justify *j = &b->j;
    hy_action **lists = b->lists;
    j->skip = skip;
    j->s = s;
    j->frees = s->split ? HY_WGRAD : HY_BWD;
    j->c = c;
    j->limit = limit;
    j->sim = &w->sim;
    index_actions(j);
    double best = 0;
    int peak = 0, rc = HY_OK;
    if (given) load(j, s, &w->sim.result, &best, &peak);
    else rc = measure(j, s, &best, &peak, err);
    int best_peak = peak;
    for (int round = 0; round < rounds && !rc; round++) {
        int p = pass(j, 1, best);
        if (p == 0) p = pass(j, 0, 0);
        if (p) break;
        /* The early pass's timelines are the new order, priced by the
         * simulator, which starts each action as early as the order lets
         * it (never later than the pass placed it). The pass keeps every
         * dependency in time, so the order runs; were it refused, it is
         * simply not taken. */
        for (int r = 0; r < s->ranks; r++)
            for (int i = 0; i < s->n_actions[r]; i++) lists[r][i] = j->act[j->tl[r].id[i]];
        hy_schedule t = *s;
        t.actions = lists;
        double makespan;
        hy_error ignored;
        int better = measure(j, &t, &makespan, &peak, &ignored) == HY_OK &&
                     makespan < best - hy_makespan_tolerance(best) && peak <= limit;
        if (!better) break;
        for (int r = 0; r < s->ranks; r++) {
            hy_action *was = s->actions[r];
            s->actions[r] = lists[r];
            lists[r] = was;
        }
        best = makespan;   /* and t0/t1 hold its times: the next round starts there */
        best_peak = peak;
    }
    hy_justify_scratch_free(&own);
    if (!rc && made) *made = best;
    if (!rc && made_peak) *made_peak = best_peak;
    return rc;
}

void hy_justify_scratch_free(hy_justify_scratch *w) {
    if (!w) return;
    if (w->state) buffers_free(w->state);
    free(w->state);
    hy_sim_scratch_free(&w->sim);
    memset(w, 0, sizeof *w);
}

int hy_justify_schedule(hy_schedule *s, const hy_costs *c, int limit, int rounds, hy_error *err) {
    return justify_run(s, c, limit, rounds, 1, NULL, 0, NULL, NULL, err);
}

int hy_justify_simulated(hy_schedule *s, const hy_costs *c, int limit, int rounds,
                         hy_justify_scratch *w, double *makespan, int *peak, hy_error *err) {
    return justify_run(s, c, limit, rounds, 1, w, 1, makespan, peak, err);
}

int hy_justify_schedule_plain(hy_schedule *s, const hy_costs *c, int limit, int rounds,
                              hy_error *err) {
    return justify_run(s, c, limit, rounds, 0, NULL, 0, NULL, NULL, err);
}
