/*
 * fit.c — see fit.h.
 *
 * Every option is one order (built by hy_order_schedule, as the runtime
 * builds it), one memory plan and one simulation; the order searches are
 * what cost, so the caps are found by the memory plans' estimates rather
 * than tried one by one, and a mode whose bound cannot beat the best so
 * far builds none.
 */
#include "fit.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mailbox.h"
#include "order.h"
#include "sim.h"

int hy_fit_cap_estimate(const hy_memplan *mp, int peak, double available) {
    double most = INFINITY;
    for (int r = 0; r < mp->ranks; r++) {
        double act = mp->rank[r].bytes[HY_MEM_ACTIVATIONS];
        if (act <= 0) continue;
        double fit = floor(peak * (available - (mp->rank[r].total - act)) / act);
        if (fit < most) most = fit;
    }
    if (!isfinite(most) || peak <= 0) return 0;
    return most > 0 ? (most < 1 << 20 ? (int)most : 1 << 20) : -1;
}

void hy_fit_cache_free(hy_fit_cache *c) {
    for (int i = 0; i < c->n; i++) hy_schedule_free(&c->s[i]);
    free(c->p);
    free(c->costs);
    free(c->s);
    memset(c, 0, sizeof *c);
}

static int same_params(const hy_sched_params *a, const hy_sched_params *b) {
    return a->kind == b->kind && a->ranks == b->ranks && a->micro_batches == b->micro_batches &&
           a->waves == b->waves && a->chunks == b->chunks &&
           a->split_backward == b->split_backward && a->max_activations == b->max_activations;
}

/* Only orders of uniform costs are kept: per-stage ones would be
 * compared array by array. */
static int uniform(const hy_costs *c) {
    return !c->fwd_stage && !c->bwd_stage && !c->wgrad_stage;
}

static int same_costs(const hy_costs *a, const hy_costs *b) {
    return uniform(a) && uniform(b) && a->fwd == b->fwd && a->bwd == b->bwd &&
           a->wgrad == b->wgrad && a->comm == b->comm;
}

/* p's schedule within `cap` (0: none), in the order the runtime builds:
 * *s is the cache's (not to be freed) when *cached, else the caller's. */
static int build(const hy_fit_in *in, int cap, hy_schedule *s, int *cached, hy_error *err) {
    hy_sched_params q = *in->p;
    q.max_activations = cap;
    hy_fit_cache *c = in->cache;
    *cached = 0;
    for (int i = 0; c && i < c->n; i++)
        if (same_params(&c->p[i], &q) && same_costs(&c->costs[i], in->order_costs)) {
            *s = c->s[i];
            *cached = 1;
            return HY_OK;
        }
    int rc = hy_order_schedule(s, &q, in->order_costs, err);
    if (rc || !c || !uniform(in->order_costs)) return rc;
    if (c->n == c->cap) {
        int cap2 = c->cap ? 2 * c->cap : 16;
        hy_sched_params *p = realloc(c->p, (size_t)cap2 * sizeof *p);
        if (p) c->p = p;
        hy_costs *k = p ? realloc(c->costs, (size_t)cap2 * sizeof *k) : NULL;
        if (k) c->costs = k;
        hy_schedule *v = k ? realloc(c->s, (size_t)cap2 * sizeof *v) : NULL;
        if (v) c->s = v;
        if (!v) return HY_OK;   /* not kept: built again when asked again */
        c->cap = cap2;
    }
    c->p[c->n] = q;
    c->costs[c->n] = *in->order_costs;
    c->s[c->n++] = *s;
    *cached = 1;
    return HY_OK;
}

static void unbuild(hy_schedule *s, int cached) {
    if (!cached) hy_schedule_free(s);
}

/* The memory plan of s under recompute r into *mp, and its figures into
 * *o: the most over ranks, that rank's largest term, whether it fits. */
static int plan_memory(const hy_fit_in *in, const hy_schedule *s, hy_recompute r, hy_memplan *mp,
                       hy_fit_option *o, hy_error *err) {
    hy_memplan_in mi = { .model = in->model, .sched = s, .micro_batch_size = in->micro_batch_size,
                         .replicas = 1, .mem = in->mem, .recompute = r };
    int rc = hy_memplan_build(mp, &mi, err);
    if (rc) return rc;
    o->recompute = r;
    o->act_bytes = o->mem_bytes = 0;
    o->rank = 0;
    for (int k = 0; k < mp->ranks; k++) {
        o->act_bytes = fmax(o->act_bytes, mp->rank[k].bytes[HY_MEM_ACTIVATIONS]);
        if (mp->rank[k].total > o->mem_bytes) {
            o->mem_bytes = mp->rank[k].total;
            o->rank = k;
        }
    }
    o->largest = hy_memplan_largest(mp, o->rank);
    o->largest_bytes = mp->rank[o->rank].bytes[o->largest];
    o->fits = o->mem_bytes <= in->budget;
    return HY_OK;
}

/* Simulates s under mode o->recompute's costs into o. */
static int price(const hy_fit_in *in, const hy_schedule *s, hy_fit_option *o, hy_error *err) {
    hy_sim_limits lim;
    memset(&lim, 0, sizeof lim);
    int rc = in->mailbox_limits ? hy_mailbox_sim_limits(s, &lim, err) : HY_OK;
    hy_sim_result res;
    if (!rc) rc = hy_simulate(s, in->costs[o->recompute], in->mailbox_limits ? &lim : NULL, &res,
                              err);
    hy_sim_limits_free(&lim);
    if (rc) return rc;
    o->makespan = res.makespan;
    o->bubble = res.bubble;
    o->peak = hy_sim_peak_max(&res);
    hy_sim_result_free(&res);
    return HY_OK;
}

/* The search's state: the best option that fits, and the one that needs
 * the least memory (what a search where nothing fits reports). */
typedef struct {
    const hy_fit_in *in;
    hy_fit_option best, least;
    int have_best;
    int outrun;     /* a cap not tried for in->beat */
} fit_search;

static void consider(fit_search *g, const hy_fit_option *o) {
    if (o->mem_bytes < g->least.mem_bytes) g->least = *o;
    double eps = hy_makespan_tolerance(g->best.makespan);
    if (o->fits && (!g->have_best || o->makespan < g->best.makespan - eps)) {
        g->best = *o;
        g->have_best = 1;
    }
}

/* Whether no order of s's placement within `cap` under mode r can beat
 * the best option so far (sim.h's bound on any such order). */
static int cannot_win(fit_search *g, const hy_schedule *s, hy_recompute r, int cap) {
    double beat = g->have_best ? g->best.makespan : INFINITY;
    int outside = g->in->beat > 0 && g->in->beat < beat;
    if (outside) beat = g->in->beat;
    if (!isfinite(beat)) return 0;
    double bound = hy_makespan_bound_memory(s, g->in->costs[r], cap);
    if (bound < beat - hy_makespan_tolerance(beat)) return 0;
    if (outside) g->outrun = 1;
    return 1;
}

/* The options of order s (built within `cap`): the least mode up to
 * `last` under which its memory plan fits, and the modes below it that
 * do not, each priced; *fits: that mode (HY_RECOMPUTE_COUNT: none);
 * estimate[k]: the cap mode k's plan of s allows (hy_fit_cap_estimate). */
static int options_of(fit_search *g, const hy_schedule *s, int cap, int last, hy_recompute *fits,
                      int *estimate, double *makespan, hy_error *err) {
    *fits = HY_RECOMPUTE_COUNT;
    for (int k = 0; k <= last; k++) {
        if (!g->in->costs[k]) continue;
        hy_memplan mp;
        hy_fit_option o = { .cap = cap };
        int rc = plan_memory(g->in, s, (hy_recompute)k, &mp, &o, err);
        if (!rc) rc = price(g->in, s, &o, err);
        if (!rc) estimate[k] = hy_fit_cap_estimate(&mp, o.peak, g->in->budget);
        hy_memplan_free(&mp);
        if (rc) return rc;
        assert(cap == 0 || o.peak <= cap);   /* order.h: the search keeps within the cap */
        consider(g, &o);
        *makespan = o.makespan;
        if (o.fits) {
            *fits = (hy_recompute)k;
            break;
        }
    }
    return HY_OK;
}

/* Whether a step of t is no shorter than the best that fits so far, or
 * than in->beat (then the search was outrun). */
static int slower(fit_search *g, double t) {
    if (g->have_best && t >= g->best.makespan) return 1;
    if (g->in->beat > 0 && t >= g->in->beat) return g->outrun = 1;
    return 0;
}

/* Mode r's capped option: the largest cap below the natural order's
 * peak that fits, from the estimate `cap` (fit.h says how): down by the
 * estimates of the orders that do not fit, then, once one does, halving
 * the gap between the largest that fits and the smallest that does not;
 * with less recompute in the same order where that fits too. */
static int capped_option(fit_search *g, const hy_schedule *natural, hy_recompute r, int cap,
                         int peak, hy_error *err) {
    const hy_fit_in *in = g->in;
    int least = hy_sched_min_activations(in->p);
    int lo = 0, hi = peak;   /* the largest cap known to fit, the smallest known not to */
    if (cap > peak - 1) cap = peak - 1;
    /* Below the smallest cap: that one is tried once all the same (the
     * estimate is a rank's average), and says the least it needs. */
    if (cap < least) cap = least;
    if (cap >= peak) return HY_OK;   /* the natural order holds no more */
    for (int tries = 0; tries < HY_FIT_CAP_TRIES; tries++) {
        if (cannot_win(g, natural, r, cap)) return HY_OK;
        hy_schedule s;
        int cached;
        int rc = build(in, cap, &s, &cached, err);
        if (rc) return rc;
        hy_recompute fits;
        int estimate[HY_RECOMPUTE_COUNT] = { 0 };
        double t = 0;
        rc = options_of(g, &s, cap, r, &fits, estimate, &t, err);
        unbuild(&s, cached);
        if (rc) return rc;
        if (fits != HY_RECOMPUTE_COUNT) {
            lo = cap;
        } else {
            hi = cap;
            /* A smaller cap runs no shorter (fit.h: but for small bumps). */
            if (!lo && slower(g, t)) return HY_OK;
        }
        int next = lo ? lo + (hi - lo) / 2 : estimate[r];
        if (!lo && (next <= 0 || next >= cap)) next = cap - 1;
        if (next < least || next == lo) return HY_OK;
        cap = next;
    }
    return HY_OK;
}

int hy_fit_search(const hy_fit_in *in, hy_fit_option *best, hy_error *err) {
    memset(best, 0, sizeof *best);
    fit_search g = { .in = in };
    g.least.mem_bytes = INFINITY;
    hy_schedule natural;
    int cap0 = in->p->max_activations, cached;
    int rc = build(in, cap0, &natural, &cached, err);
    if (rc) return rc;
    /* The natural order (or the user's cap) with the least recompute
     * that fits; each mode's cap estimate on the way. */
    int estimate[HY_RECOMPUTE_COUNT] = { 0 };
    hy_recompute fits;
    double t;
    rc = options_of(&g, &natural, cap0, HY_RECOMPUTE_COUNT - 1, &fits, estimate, &t, err);
    int peak = g.least.peak;   /* every option so far is this order's */
    /* Less recompute within a cap. */
    for (int r = 0; r < (int)fits && !rc && in->search_caps && cap0 == 0; r++)
        if (in->costs[r] && estimate[r] != 0)
            rc = capped_option(&g, &natural, (hy_recompute)r, estimate[r], peak, err);
    unbuild(&natural, cached);
    if (rc) return rc;
    *best = g.have_best ? g.best : g.least;
    best->outrun = !g.have_best && g.outrun;
    return HY_OK;
}
