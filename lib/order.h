/*
 * order.h — the order of a schedule chosen for its costs.
 *
 * schedule.h builds each schedule in one canonical order, the one the
 * uniform costs (f = 1, b = 2, free transfers) call for. Real costs differ:
 * a transfer takes time, stages are uneven, a split backward's two passes
 * cost what they cost. hy_schedule_for_costs builds the candidates
 * schedule.h can make for the same placement (hy_order: hanayo's merge
 * replayed under the costs with other activation caps and look-aheads;
 * for a split backward other deferrals of the weight passes, and ZB-V),
 * prices each with the simulator (sim.h) and keeps the shortest (for
 * unsplit hanayo, double-justified: justify.h), among
 * those whose peak activations stay within the memory the canonical
 * unsplit order of the same schedule needs (for hanayo, interleaved
 * v = 2W's 2WP + P - 1). Ties keep the candidate met first, the canonical
 * order first of all, so under uniform costs the canonical order is what
 * comes back, and the result is a deterministic function of (schedule,
 * costs).
 *
 * It sits above schedule.h and sim.h so that neither needs the other.
 */
#ifndef HY_ORDER_H
#define HY_ORDER_H

#include "config.h"
#include "costs.h"
#include "error.h"
#include "schedule.h"

/* The schedule of p in the order that runs shortest under costs c (NULL:
 * the uniform costs, hence the canonical order). */
int hy_schedule_for_costs(hy_schedule *s, const hy_sched_params *p, const hy_costs *c,
                          hy_error *err);

/* The costs an order is chosen for when only the transfer time is known
 * (the config's schedule.comm_cost, in units of one stage's forward): the
 * uniform ones, split as the schedule is, with c = comm. */
hy_costs hy_order_costs(const hy_sched_params *p, double comm);

/* The schedule a run of config c runs: its kind, ranks, waves or chunks,
 * micro-batches and split, in the order chosen for hy_order_costs with
 * its schedule.comm_cost. The runtime, the profiler and `hanayo plan
 * CONFIG` all take it from here, so they agree. */
int hy_schedule_for_config(hy_schedule *s, const hy_config *c, hy_error *err);

#endif
