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

#include "costs.h"
#include "error.h"
#include "schedule.h"

/* The schedule of p in the order that runs shortest under costs c (NULL:
 * the uniform costs, hence the canonical order). */
int hy_order_schedule(hy_schedule *s, const hy_sched_params *p, const hy_costs *c,
                          hy_error *err);

#endif
