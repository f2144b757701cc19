/*
 * sim.c — see sim.h.
 *
 * Because each rank runs its list in order, every action's start time is
 * max(its rank's previous end, its inputs' arrival): a function of the
 * lists alone. The simulator advances each rank as far as its inputs
 * (and, with limits, its output's slot) allow; a rank that lacks an
 * action's output waits on it and is advanced again once that action
 * has run, so no rank is tried while nothing it needs has changed (the
 * search of order.c simulates millions of actions). When no rank can
 * advance and some list is not done, the lists deadlock under blocking
 * receives.
 */
#include "sim.h"

#include <stdlib.h>
#include <string.h>

double hy_ideal_bubble(const hy_schedule *s) {
    double P = s->ranks, work = (double)s->chunks * s->micro_batches * (s->split ? 3 : 1);
    return (P - 1) / (work + P - 1);
}

/* The cost of a transfer from stage a to stage b: c when they are on two
 * ranks. */
static double hop(const hy_schedule *s, const hy_costs *c, int a, int b) {
    return s->placement[a] != s->placement[b] ? c->comm : 0;
}

double hy_makespan_bound_memory(const hy_schedule *s, const hy_costs *c, int limit) {
    int S = s->stages;
    double *est = malloc(sizeof(double) * 3 * (size_t)S), *tail = est + S, *est_b = est + 2 * S;
    double bound = 0;
    if (!est) return 0;
    /* est[stage]: the earliest F(m, stage) can start. tail[stage]: the least work
     * and transfer time that must follow the end of B(m, stage) before
     * micro-batch m is done (on every rank its last action is a B, or a
     * W, which nothing follows). est_b[stage]: the earliest B(m, stage) can
     * start: after F(m, stage) and after B(m, stage + 1) has come back. */
    est[0] = 0;
    for (int stage = 1; stage < S; stage++)
        est[stage] = est[stage - 1] + hy_costs_fwd(c, stage - 1) + hop(s, c, stage - 1, stage);
    tail[0] = 0;
    for (int stage = 1; stage < S; stage++)
        tail[stage] = hop(s, c, stage, stage - 1) + hy_costs_bwd(c, stage - 1) + tail[stage - 1];
    est_b[S - 1] = est[S - 1] + hy_costs_fwd(c, S - 1);
    for (int stage = S - 2; stage >= 0; stage--) {
        double back = est_b[stage + 1] + hy_costs_bwd(c, stage + 1) + hop(s, c, stage + 1, stage);
        double own = est[stage] + hy_costs_fwd(c, stage);
        est_b[stage] = back > own ? back : own;
    }
    for (int r = 0; r < s->ranks; r++) {
        double first = -1, last = -1, work = 0, first_b = -1, max_f = 0;
        int stages = 0;
        for (int stage = 0; stage < S; stage++) {
            if (s->placement[stage] != r) continue;
            double after = s->split ? 0 : tail[stage];
            if (first < 0 || est[stage] < first) first = est[stage];
            if (last < 0 || after < last) last = after;
            if (first_b < 0 || est_b[stage] < first_b) first_b = est_b[stage];
            if (hy_costs_fwd(c, stage) > max_f) max_f = hy_costs_fwd(c, stage);
            work += hy_costs_fwd(c, stage) + hy_costs_bwd(c, stage) + (s->split ? hy_costs_wgrad(c, stage) : 0);
            stages++;
        }
        if (first < 0) continue;   /* a rank without stages */
        /* Before its first backward a rank runs forwards only, each one
         * holding an activation: at most `limit` of them, so it is idle
         * for all of that wait their work does not fill. */
        double idle = first;
        if (limit > 0) {
            double most = (double)limit < (double)stages * s->micro_batches
                              ? (double)limit : (double)stages * s->micro_batches;
            if (first_b - most * max_f > idle) idle = first_b - most * max_f;
        }
        double b = idle + work * s->micro_batches + last;
        if (b > bound) bound = b;
    }
    free(est);
    return bound;
}

double hy_makespan_bound(const hy_schedule *s, const hy_costs *c) {
    return hy_makespan_bound_memory(s, c, 0);
}

void hy_sim_limits_free(hy_sim_limits *l) {
    if (!l) return;
    if (l->freed_by)
        for (int r = 0; r < l->ranks; r++) free(l->freed_by[r]);
    free(l->freed_by);
    memset(l, 0, sizeof *l);
}

int hy_sim_limits_init(hy_sim_limits *l, const hy_schedule *s, hy_error *err) {
    memset(l, 0, sizeof *l);
    l->ranks = s->ranks;
    l->freed_by = calloc((size_t)s->ranks, sizeof *l->freed_by);
    int ok = l->freed_by != NULL;
    for (int r = 0; ok && r < s->ranks; r++) {
        l->freed_by[r] = malloc(((size_t)s->n_actions[r] + 1) * sizeof **l->freed_by);
        ok = l->freed_by[r] != NULL;
        for (int i = 0; ok && i < s->n_actions[r]; i++) l->freed_by[r][i] = (hy_action){ -1, 0, 0 };
    }
    if (!ok) {
        hy_sim_limits_free(l);
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory simulating a schedule");
    }
    return HY_OK;
}

void hy_sim_result_free(hy_sim_result *r) {
    if (!r) return;
    if (r->start)
        for (int i = 0; i < r->ranks; i++) free(r->start[i]);
    if (r->end)
        for (int i = 0; i < r->ranks; i++) free(r->end[i]);
    free(r->start);
    free(r->end);
    free(r->busy);
    free(r->peak_activations);
    memset(r, 0, sizeof *r);
}

/* s's shape: what a scratch's buffers are sized for. */
static int same_shape(const hy_sim_scratch *w, const hy_schedule *s) {
    if (w->result.ranks != s->ranks || w->stages != s->stages || w->keys != hy_action_keys(s))
        return 0;
    for (int r = 0; r < s->ranks; r++)
        if (w->n_actions[r] != s->n_actions[r]) return 0;
    return 1;
}

/* w's buffers sized for s (kept when they already are); -1 when out of
 * memory (w is then left empty). */
static int scratch_fit(hy_sim_scratch *w, const hy_schedule *s) {
    if (w->ends && same_shape(w, s)) return 0;
    hy_sim_scratch_free(w);
    size_t keys = hy_action_keys(s), P = (size_t)s->ranks;
    hy_sim_result *r = &w->result;
    w->stages = s->stages;
    w->keys = keys;
    r->ranks = s->ranks;
    w->ends = malloc(keys * sizeof(double));
    w->waiter = malloc(keys * sizeof(int));
    w->cost = malloc(3 * (size_t)s->stages * sizeof(double));
    w->n_actions = malloc(P * sizeof(int));
    w->next_waiter = malloc(P * sizeof(int));
    w->ready = malloc(P * sizeof(int));
    w->next = malloc(P * sizeof(int));
    w->live = malloc(P * sizeof(int));
    w->free_at = malloc(P * sizeof(double));
    r->busy = malloc(P * sizeof(double));
    r->peak_activations = malloc(P * sizeof(int));
    r->start = calloc(P, sizeof(double *));
    r->end = calloc(P, sizeof(double *));
    int ok = w->ends && w->waiter && w->cost && w->n_actions && w->next_waiter && w->ready &&
             w->next && w->live && w->free_at && r->busy && r->peak_activations && r->start &&
             r->end;
    for (size_t k = 0; ok && k < P; k++) {
        w->n_actions[k] = s->n_actions[k];
        r->start[k] = malloc(((size_t)s->n_actions[k] + 1) * sizeof(double));
        r->end[k] = malloc(((size_t)s->n_actions[k] + 1) * sizeof(double));
        ok = r->start[k] && r->end[k];
    }
    if (!ok) hy_sim_scratch_free(w);
    return ok ? 0 : -1;
}

void hy_sim_scratch_free(hy_sim_scratch *w) {
    if (!w) return;
    hy_sim_result_free(&w->result);
    free(w->ends); free(w->waiter); free(w->cost); free(w->n_actions); free(w->next_waiter);
    free(w->ready); free(w->next); free(w->live); free(w->free_at);
    memset(w, 0, sizeof *w);
}

/* A simulation under way. */
typedef struct {
    const hy_schedule *s;
    const hy_costs *c;
    const hy_sim_limits *limits;   /* or NULL */
    double *ends;                  /* [hy_action_keys]: each action's hand-over, -1: not yet */
    double *cost;                  /* [3 * stages]: hy_action_cost of (op, stage), by op * S + stage */
    int *waiter;                   /* [hy_action_keys]: the first rank waiting for that action, -1 */
    int *next_waiter;              /* [ranks]: the next rank waiting for the same action, -1 */
    int *ready;                    /* [ranks]: a stack of the ranks that may advance */
    int n_ready;
    int *next;                     /* [ranks]: the index of each rank's next action */
    int *live;                     /* [ranks]: activations held now */
    double *free_at;               /* [ranks]: when each rank is free again */
    hy_sim_result *r;
} sim_state;

/* When the action of key `key` has handed its output over; if it has not
 * run yet, rank k waits for it (woken when it does) and -1. */
static double end_or_wait(sim_state *g, size_t key, int k) {
    double u = g->ends[key];
    if (u < 0) {
        g->next_waiter[k] = g->waiter[key];
        g->waiter[key] = k;
    }
    return u;
}

/* Runs rank k's actions in list order while their inputs are there (c->comm
 * added to each made on another rank) and, with limits, their outputs'
 * slots will be freed; at one that must wait, the rank waits
 * (end_or_wait) for what it lacks. The rank's state is kept in locals
 * for the run: this loop is the simulator's time. */
static void advance(sim_state *g, int k) {
    const hy_schedule *s = g->s;
    const hy_action *acts = s->actions[k];
    const hy_action *freed_by = g->limits ? g->limits->freed_by[k] : NULL;
    int i = g->next[k], n_acts = s->n_actions[k], S = s->stages;
    int frees = s->split ? HY_WGRAD : HY_BWD;   /* the pass that releases an activation */
    int live = g->live[k], peak = g->r->peak_activations[k];
    double free_at = g->free_at[k], busy = g->r->busy[k], comm = g->c->comm;
    double *start = g->r->start[k], *end = g->r->end[k];
    for (; i < n_acts; i++) {
        const hy_action *a = &acts[i];
        hy_action in[HY_MAX_INPUTS];
        int n = hy_action_inputs(s, a, in), missing = 0;
        double t = free_at;
        for (int j = 0; j < n && !missing; j++) {
            double u = end_or_wait(g, hy_action_key(s, &in[j]), k);
            if (u < 0) missing = 1;
            if (s->placement[in[j].stage] != k) u += comm;
            if (u > t) t = u;
        }
        if (missing) break;
        double d = g->cost[a->op * S + a->stage];
        double done = t + d;
        if (freed_by && freed_by[i].op >= 0) {
            double freed = end_or_wait(g, hy_action_key(s, &freed_by[i]), k);
            if (freed < 0) break;   /* its output's slot is still taken */
            if (freed > done) done = freed;
        }
        size_t key = hy_action_key(s, a);
        g->ends[key] = done;
        for (int w = g->waiter[key]; w >= 0; w = g->next_waiter[w]) g->ready[g->n_ready++] = w;
        g->waiter[key] = -1;
        start[i] = t;
        end[i] = done;
        busy += d;   /* waiting for the slot is not work */
        free_at = done;
        /* An activation is held from its forward until the last pass that
         * reads it: B, or W when the backward is split. */
        live += a->op == HY_FWD ? 1 : a->op == frees ? -1 : 0;
        if (live > peak) peak = live;
    }
    g->next[k] = i;
    g->live[k] = live;
    g->r->peak_activations[k] = peak;
    g->free_at[k] = free_at;
    g->r->busy[k] = busy;
}

int hy_simulate_reuse(const hy_schedule *s, const hy_costs *c, const hy_sim_limits *limits,
                      hy_sim_scratch *w, hy_error *err) {
    int rc = hy_costs_check(c, s->stages, err);
    if (rc) return rc;
    if (scratch_fit(w, s) != 0)
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory simulating a schedule");
    size_t n_ends = w->keys, P = (size_t)s->ranks;
    hy_sim_result *r = &w->result;
    sim_state g = { .s = s, .c = c, .limits = limits, .r = r, .ends = w->ends, .cost = w->cost,
                    .waiter = w->waiter, .next_waiter = w->next_waiter, .ready = w->ready,
                    .next = w->next, .live = w->live, .free_at = w->free_at };
    r->makespan = r->bubble = r->bound = r->bound_memory = 0;
    r->transfers = 0;
    for (size_t i = 0; i < n_ends; i++) {
        g.ends[i] = -1;
        g.waiter[i] = -1;
    }
    for (size_t k = 0; k < P; k++) {
        g.next[k] = g.live[k] = r->peak_activations[k] = 0;
        g.free_at[k] = r->busy[k] = 0;
        r->start[k][s->n_actions[k]] = r->end[k][s->n_actions[k]] = 0;
    }
    for (int op = HY_FWD; op <= HY_WGRAD; op++)
        for (int st = 0; st < s->stages; st++) {
            hy_action a = { op, 0, st };
            g.cost[op * s->stages + st] = hy_action_cost(c, &a);
        }
    /* Each rank advances as far as it can, then waits for the one action
     * it lacks, and runs on when that action ends; the times are those of
     * the lists alone, whatever order the ranks advance in. */
    for (int k = s->ranks - 1; k >= 0; k--) g.ready[g.n_ready++] = k;
    while (g.n_ready > 0) {
        int k = g.ready[--g.n_ready];
        advance(&g, k);
    }
    for (int k = 0; k < s->ranks; k++) {
        if (g.next[k] < s->n_actions[k]) {
            const char *why = limits ? "under blocking receives and its slot limits"
                                     : "under blocking receives";
            return hy_schedule_deadlock(s, g.next, why, err);
        }
    }
    double busy = 0;
    for (int k = 0; k < s->ranks; k++) {
        if (g.free_at[k] > r->makespan) r->makespan = g.free_at[k];
        busy += r->busy[k];
    }
    r->bubble = r->makespan > 0 ? 1.0 - busy / (s->ranks * r->makespan) : 0.0;
    r->transfers = hy_schedule_transfers(s);
    r->bound = hy_makespan_bound(s, c);
    r->bound_memory = hy_makespan_bound_memory(s, c, hy_sim_peak_max(r));
    return HY_OK;
}

int hy_simulate(const hy_schedule *s, const hy_costs *c, const hy_sim_limits *limits,
                hy_sim_result *r, hy_error *err) {
    hy_sim_scratch w = { 0 };
    int rc = hy_simulate_reuse(s, c, limits, &w, err);
    if (rc == HY_OK) {
        *r = w.result;   /* the result's arrays are the caller's now */
        memset(&w.result, 0, sizeof w.result);
    } else {
        memset(r, 0, sizeof *r);
    }
    hy_sim_scratch_free(&w);
    return rc;
}

double hy_makespan_tolerance(double makespan) {
    return 1e-9 * (makespan > 1 ? makespan : 1);
}

int hy_sim_peak_max(const hy_sim_result *r) {
    int peak = 0;
    for (int k = 0; k < r->ranks; k++)
        if (r->peak_activations[k] > peak) peak = r->peak_activations[k];
    return peak;
}
