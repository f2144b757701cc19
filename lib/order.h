/*
 * order.h — the order of a schedule chosen for its costs.
 *
 * schedule.h builds each schedule in one canonical order, the one the
 * uniform costs (f = 1, b = 2, free transfers) call for. Real costs differ:
 * a transfer takes time, stages are uneven, a split backward's two passes
 * cost what they cost. hy_order_schedule builds the candidates
 * schedule.h can make for the same placement (hy_sched_order: hanayo's merge
 * replayed under the costs with other activation caps and look-aheads;
 * for a split backward other deferrals of the weight passes, and ZB-V),
 * prices each with the simulator (sim.h) and keeps the shortest (for
 * hanayo, and within a cap, double-justified: justify.h), among
 * those whose peak activations stay within the memory the canonical
 * unsplit order of the same schedule needs (for hanayo, interleaved
 * v = 2W's 2WP + P - 1). With a cap (hy_sched_params.max_activations)
 * the bound is the cap instead (on the same peak: the most activations a
 * rank holds at once), even under the uniform costs when the canonical
 * order needs more, and the list
 * scheduler's orders (capped.h) join the candidates, first, so that some
 * order within the cap is always found; a cap below one activation per
 * stage a rank holds is HY_ERR_INPUT. Ties keep the candidate met first, the canonical
 * order first of all, so under uniform costs the canonical order is what
 * comes back, and the result is a deterministic function of (schedule,
 * costs).
 *
 * The work is bounded, and counted rather than timed so that every
 * process (ranks, data-parallel replicas, a resumed run) makes the same
 * choice on any machine: the search simulates at most HY_ORDER_WORK
 * actions over all the orders it builds (or six whole simulations of the
 * schedule, if more), and where that stops it the best order so far is
 * the choice (docs/schedules.md, "What the choice costs").
 *
 * It sits above schedule.h and sim.h so that neither needs the other.
 */
#ifndef HY_ORDER_H
#define HY_ORDER_H

#include "costs.h"
#include "error.h"
#include "schedule.h"

/* The schedule of p in the order that runs shortest under costs c (NULL:
 * the uniform costs, hence the canonical order). */
int hy_order_schedule(hy_schedule *s, const hy_sched_params *p, const hy_costs *c,
                          hy_error *err);

/* The actions the search may simulate, over all the orders it builds:
 * a few seconds' work at most. */
#define HY_ORDER_WORK (1LL << 24)

/* What a choice cost: the orders built and simulated (the candidates,
 * the canonical order first) and the actions those simulations ran, over
 * all ranks. Each costs a merge and a simulation of that many actions,
 * each action a few logarithms' work. The justification of the
 * winner (justify.h) is bounded apart and not counted. */
typedef struct {
    int orders;
    long long actions;
    int stopped;        /* the bound stopped the search before its last candidate */
    int unjustified;    /* justification would have helped but was past its work limit */
    int threads;        /* threads that built candidates or polished (the more of the two),
                           the caller's among them */
    long long polish_steps;   /* the polish's steps (polish.h), their work in actions */
} hy_order_work;

/* hy_order_schedule, also saying in *work (when not NULL) what the
 * choice cost (all 0 when there was nothing to choose). */
int hy_order_schedule_work(hy_schedule *s, const hy_sched_params *p, const hy_costs *c,
                           hy_order_work *work, hy_error *err);

/* hy_order_schedule_work with the candidates built on up to `threads`
 * threads, the caller's among them (0: as many as the process may run
 * on, when the schedule is large enough to be worth one). The choice and
 * the work counted are the same on any number: one thread decides on
 * the candidates in their order, the others build ahead of it. */
int hy_order_schedule_threads(hy_schedule *s, const hy_sched_params *p, const hy_costs *c,
                              int threads, hy_order_work *work, hy_error *err);

#endif
