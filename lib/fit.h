/*
 * fit.h — the fastest way one schedule runs within a byte budget per
 * rank: activation recomputation, an activation cap on its order, or both.
 *
 * A schedule (kind, P, W or v, M, split backward) over a model's layer
 * split, with micro-batches of B sequences, needs what its memory plan
 * (memplan.h) says; most of that beyond the weights is the stash, one
 * slot per micro-batch in flight on each stage. Two things shrink it:
 * recomputation (train.recompute: none, selective, full; each backward
 * pass redoes part of the forward, costs.h) and a cap on the activations
 * a rank holds (schedule.max_activations: the order is chosen within it,
 * order.h and capped.h; fewer in flight, a longer bubble). The options
 * weighed, each simulated under the costs of its recompute mode:
 *
 *   the natural order (no cap) with the least recompute under which its
 *   memory plan fits;
 *   for every mode that recomputes less than that (all of them when the
 *   natural order fits under no mode), the order within the largest cap
 *   below the natural order's peak that fits under that mode (found as
 *   below), and in that order the least mode that fits.
 *
 * The fastest option that fits wins; of equals, the one met first (the
 * natural order, then less recompute). Why the largest cap and not a
 * search over caps: the step time over the caps is nonincreasing but for
 * small bumps (the order search is heuristic and bounded: P = 4, W = 2,
 * c = 0.05 ends at 221.1 within 13 and 221.5 within 14), and a cap's
 * memory is not a function of the cap alone (stages may borrow unused
 * share: capped.h), so neither a bisection on the step nor one on the
 * memory is exact; while each cap is a whole order search (0.1 to 3 s at
 * P = 8, M = 64). So per mode: the cap the natural order's memory plan
 * allows (hy_fit_cap_estimate), below its peak; then while that order's
 * own plan does not fit, the cap its plan allows, at least one less, down
 * to the smallest cap that runs; once one fits, the gap between it and
 * the smallest cap that did not, halved (HY_FIT_CAP_TRIES orders in all,
 * so the cap found may be a little below the largest that fits). The
 * descent stops where an order runs no shorter than the best option
 * that fits so far (or than in->beat): a smaller cap would not either,
 * but for those bumps. A cap whose bound (sim.h, hy_makespan_bound_memory:
 * no order within it is shorter) is no shorter is not built at all.
 *
 * Orders are built as the runtime builds them (order_costs: what
 * hy_run_resolve gives hy_order_schedule), so a written cap and comm_cost
 * give the run the same order.
 */
#ifndef HY_FIT_H
#define HY_FIT_H

#include "backend.h"
#include "costs.h"
#include "error.h"
#include "memplan.h"
#include "model.h"
#include "schedule.h"
#include "transformer.h"

/* Orders built per recompute mode while looking for a cap that fits. */
#define HY_FIT_CAP_TRIES 3

/* The orders built so far, kept for searches of the same schedule under
 * the same order costs (tune's layer splits of one schedule share them:
 * the order does not depend on the split). Zeroed to start; freed by
 * hy_fit_cache_free. */
typedef struct {
    hy_sched_params *p;     /* [n]: each order's parameters, its cap included */
    hy_costs *costs;        /* [n]: the costs it was chosen for (uniform ones only) */
    hy_schedule *s;         /* [n] */
    int n, cap;
} hy_fit_cache;

void hy_fit_cache_free(hy_fit_cache *c);

typedef struct {
    const hy_sched_params *p;   /* its max_activations > 0: the user's cap, kept, no search */
    const hy_costs *order_costs;   /* what the order is chosen for */
    /* The simulation's costs under each mode (its recompute priced in);
     * NULL: the mode is not an option. At least one is not NULL. */
    const hy_costs *costs[HY_RECOMPUTE_COUNT];
    int mailbox_limits;         /* simulate with the runtime's mailbox slots (mailbox.h) */
    const hy_model *model;      /* split over the schedule's stages */
    int micro_batch_size;       /* B */
    const hy_backend_memory *mem;
    double budget;              /* bytes per rank */
    int search_caps;            /* 0: the natural order only (or the user's cap) */
    /* A capped order whose bound is no shorter than this is not built
     * (another schedule's candidate already runs that fast); 0: none. */
    double beat;
    hy_fit_cache *cache;        /* orders to reuse, or NULL */
} hy_fit_in;

typedef struct {
    int cap;                    /* schedule.max_activations of the order (0: none) */
    hy_recompute recompute;
    int peak;                   /* the most activations its order holds on a rank */
    double makespan, bubble;
    double act_bytes, mem_bytes;   /* the most over ranks: the stash, and everything */
    int fits;                   /* mem_bytes within the budget on every rank */
    hy_mem_term largest;        /* the largest term of the rank that needs the most */
    double largest_bytes;
    int rank;                   /* that rank */
    int outrun;                 /* a cap was not tried: its bound could not beat in->beat */
} hy_fit_option;

/* The fastest option of `in` that fits (best->fits), or, when none does,
 * the one that needs the least memory (best->fits 0). HY_ERR_INPUT when
 * the schedule cannot be built (as hy_order_schedule says). */
int hy_fit_search(const hy_fit_in *in, hy_fit_option *best, hy_error *err);

/* The cap under which an order of `peak` activations on its busiest
 * rank, whose memory plan is mp, would fit `available` bytes if each
 * rank's stash shrank with the cap (its peak times the share of its
 * stash that fits beside everything else it allocates; the least over
 * ranks); 0 when nothing says (no stash), -1 when not even one fits. */
int hy_fit_cap_estimate(const hy_memplan *mp, int peak, double available);

#endif
