/*
 * order.c — see order.h.
 *
 * The candidates, in the order they are tried (the first of equals wins):
 *   1. the canonical order (hy_sched_order_default);
 *   2. hanayo: the merge under the costs with a rank holding 2WP + e
 *      activations, e = 0..P, flat or rising by r, looking 1, WP or 2WP
 *      stream entries ahead. More activations in flight are what hides a
 *      transfer's latency; the cap keeps the memory bounded;
 *   3. split backward: each of those F/B orders (the published one for
 *      the other schedules) with rank r keeping a*r + b weight passes
 *      back, a in 0..2, b in 0..2; for hanayo also the merge placing the
 *      weight passes itself (each activation counted until its W, a W
 *      filling a wait of more than 0, 1/2 or 1 W, forwards of the last
 *      stage or the last P/2 stages passing a rank's cap), which is what
 *      keeps memory within the bound while W's fill the latency of the
 *      hops.
 * Each is simulated once. Unsplit hanayo's best is then double-justified
 * (justify.h): its actions moved into the gaps the merge's greedy replay
 * left, within the same memory, which is what takes it ahead of
 * interleaved's order when a transfer takes time. The search is skipped,
 * the canonical order returned, when the costs are the uniform ones it is
 * made for, and narrowed to the canonical merge's neighbours when the
 * schedule is too large for many simulations to be cheap.
 */
#include "order.h"

#include <math.h>
#include <string.h>

#include "justify.h"
#include "sim.h"

/* Past this many actions over all ranks only a few candidates are tried:
 * each costs a merge and a simulation, about a microsecond per action. */
#define ORDER_SEARCH_ACTIONS 200000

/* Justification rounds at most (each two passes and a simulation), and
 * the work past which it is skipped: a pass costs about (actions) x
 * (actions per rank) steps, a tenth of a second at this many. */
#define JUSTIFY_ROUNDS 4
#define JUSTIFY_WORK 1e8

/* Whether c is what the canonical orders are made for. */
static int is_uniform(const hy_sched_params *p, const hy_costs *c) {
    hy_costs u = hy_costs_uniform_for(p->split_backward, 0);
    return !c->fwd_stage && !c->bwd_stage && !c->wgrad_stage && c->comm == 0 &&
           c->fwd == u.fwd && c->bwd == u.bwd && (!p->split_backward || c->wgrad == u.wgrad);
}

typedef struct {
    const hy_sched_params *p;
    const hy_costs *c;
    int peak_limit;         /* the most activations a candidate may hold on a rank */
    hy_schedule best;
    double makespan;        /* of best; < 0: none yet */
    int peak, peak_sum;
    int tried;
} order_search;

static int peak_of(const hy_sim_result *r, int *sum) {
    *sum = 0;
    for (int k = 0; k < r->ranks; k++) *sum += r->peak_activations[k];
    return hy_sim_peak_max(r);
}

/* Builds and prices one candidate (o NULL: the canonical order, made for
 * the uniform costs); keeps it if it beats the best so far. */
static int try_order(order_search *g, const hy_sched_order *o, hy_error *err) {
    hy_schedule s;
    int rc = o ? hy_schedule_build_order(&s, g->p, g->c, o, err) : hy_schedule_build(&s, g->p, err);
    if (rc) return rc;
    hy_sim_result r;
    rc = hy_simulate(&s, g->c, NULL, &r, err);
    if (rc) {
        hy_schedule_free(&s);
        return rc;
    }
    g->tried++;
    int sum, peak = peak_of(&r, &sum);
    double makespan = r.makespan;
    hy_sim_result_free(&r);
    /* Shorter by more than rounding, else as short with less memory. */
    double eps = 1e-9 * (g->makespan > 1 ? g->makespan : 1);
    int better = g->makespan < 0 ||
                 (peak <= g->peak_limit &&
                  (makespan < g->makespan - eps ||
                   (makespan <= g->makespan + eps &&
                    (peak < g->peak || (peak == g->peak && sum < g->peak_sum)))));
    if (!better) {
        hy_schedule_free(&s);
        return HY_OK;
    }
    hy_schedule_free(&g->best);
    g->best = s;
    g->makespan = makespan;
    g->peak = peak;
    g->peak_sum = sum;
    return HY_OK;
}

/* The memory the canonical unsplit order of p needs at most on a rank:
 * the bound a candidate must keep to. */
static int canonical_peak(const hy_sched_params *p, hy_error *err) {
    hy_sched_params q = *p;
    q.split_backward = 0;
    hy_schedule s;
    int rc = hy_schedule_build(&s, &q, err);
    if (rc) return -1;
    hy_costs u = hy_costs_uniform();
    hy_sim_result r;
    rc = hy_simulate(&s, &u, NULL, &r, err);
    int sum, peak = rc ? -1 : peak_of(&r, &sum);
    if (!rc) hy_sim_result_free(&r);
    hy_schedule_free(&s);
    if (p->kind == HY_SCHED_HANAYO) {
        /* Interleaved v = 2W's peak, which the canonical wave order meets
         * when M fills the pipeline and may undercut when it does not. */
        int bound = 2 * p->waves * p->ranks + p->ranks - 1;
        if (peak < bound) peak = bound;
    }
    return peak;
}

/* Split hanayo with o's F/B knobs, the merge placing the W's itself: a W
 * filling waits of more than 0, 1/2 or 1 W, and the last stage or (from
 * P = 4) the last P/2 passing a full rank's cap. */
static int try_merged_wgrads(order_search *g, const hy_sched_order *o, hy_error *err) {
    int P = g->p->ranks, rc = HY_OK;
    for (int k = 1; k <= 3 && !rc; k++)
        for (int t = 0; t < (P >= 4 ? 2 : 1) && !rc; t++) {
            hy_sched_order m = *o;
            m.w_in_merge = k;
            m.cap_tail = t ? P / 2 : 1;
            rc = try_order(g, &m, err);
        }
    return rc;
}

static int search(order_search *g, hy_error *err) {
    const hy_sched_params *p = g->p;
    int rc = try_order(g, NULL, err);   /* always kept: the first */
    if (rc) return rc;
    g->peak_limit = canonical_peak(p, err);
    if (g->peak_limit < 0) return err ? err->status : HY_ERR_RUNTIME;
    int P = p->ranks, hanayo = p->kind == HY_SCHED_HANAYO;
    long actions = P * hy_sched_rank_actions(p->split_backward, hy_sched_chunks(p), p->micro_batches);
    int wide = actions <= ORDER_SEARCH_ACTIONS;
    int group = hanayo ? 2 * p->waves * P : 0;
    int windows[3] = { group, 1, group / 2 };
    int max_extra = hanayo ? (wide ? P : 1) : 0;
    for (int extra = 0; extra <= max_extra && !rc; extra++)
        for (int rises = 0; rises <= (hanayo ? 1 : 0) && !rc; rises++)
            for (int w = 0; w < (hanayo && wide ? 3 : 1) && !rc; w++)
              for (int bf = 0; bf <= (hanayo && wide ? 1 : 0) && !rc; bf++)
                for (int slope = 0; slope <= (p->split_backward ? 2 : 0) && !rc; slope++)
                    for (int b = 0; b <= (p->split_backward && wide ? 2 : 0) && !rc; b++) {
                        hy_sched_order o = { .cap_extra = extra, .cap_rises = rises,
                                       .window = hanayo ? windows[w] : 0, .backward_first = bf,
                                       .defer_slope = slope, .defer_base = b };
                        rc = try_order(g, &o, err);
                        /* once per F/B knob setting: no deferral to vary */
                        if (!rc && hanayo && p->split_backward && slope == 0 && b == 0)
                            rc = try_merged_wgrads(g, &o, err);
                    }
    return rc;
}

int hy_order_schedule(hy_schedule *s, const hy_sched_params *p, const hy_costs *c,
                          hy_error *err) {
    if (!c || is_uniform(p, c)) return hy_schedule_build(s, p, err);
    int rc = hy_costs_check(c, 0, err);
    if (rc) {
        memset(s, 0, sizeof *s);
        return rc;
    }
    order_search g = { .p = p, .c = c, .makespan = -1, .peak_limit = 1 << 30 };
    memset(&g.best, 0, sizeof g.best);
    rc = search(&g, err);
    if (rc) {
        hy_schedule_free(&g.best);
        memset(s, 0, sizeof *s);
        return rc;
    }
    /* Unsplit hanayo: the justification closes gaps the merge's greedy
     * replay left (justify.h), within the same memory. */
    double actions = (double)p->ranks * hy_sched_rank_actions(0, hy_sched_chunks(p), p->micro_batches);
    if (p->kind == HY_SCHED_HANAYO && !p->split_backward &&
        actions * (actions / p->ranks) <= JUSTIFY_WORK)
        rc = hy_justify_schedule(&g.best, c, g.peak_limit, JUSTIFY_ROUNDS, err);
    if (rc) {
        hy_schedule_free(&g.best);
        memset(s, 0, sizeof *s);
        return rc;
    }
    *s = g.best;
    return HY_OK;
}
