/*
 * capped.h — orders that hold at most a given number of activations on
 * every rank, for any placement.
 *
 * A list scheduler over the dependencies of schedule.h: it replays the
 * pipeline under costs c and, whenever a rank is free, starts the action
 * of its own that can start first; each stage's F's, B's and W's run in
 * micro-batch order, so a rank chooses among at most three per stage it
 * holds. A forward runs only where its activation fits under the cap
 * (an activation is held from its F to its B, split: to its W, as the
 * simulator counts: sim.h, peak_activations). The replay only decides the
 * order: the result is a fixed per-rank list, like every generator's.
 *
 * A cap must never starve the pipeline. Each stage runs its micro-batches
 * in order, so the activations a stage holds are always a run of
 * consecutive micro-batches, and a stage that holds none can take the
 * oldest unfinished micro-batch; so a rank keeps, beside what it holds,
 * one free activation for each of its stages that holds none, and the
 * oldest micro-batch can always move: the replay never starves, down to
 * the smallest cap (hy_sched_min_activations, one per stage). Within
 * that, a stage may hold up to its share of the cap: the cap split among
 * a rank's stages in proportion to how long one micro-batch's activation
 * lives there on its own (from its F to its B, or W, through every stage
 * after it and back, hops included), times 1 + slack. With no slack the
 * shares add up to the cap, so the stash slots the runtime sizes per
 * stage (hy_schedule_in_flight) add up to at most the cap as well; with
 * slack a stage may borrow what another leaves unused, which keeps the
 * rank's peak within the cap but may size the slots above it. The order
 * search (order.h) tries it under several knobs:
 * DESIGN §1.5 "Orders chosen for their costs".
 */
#ifndef HY_CAPPED_H
#define HY_CAPPED_H

#include "costs.h"
#include "error.h"
#include "schedule.h"

typedef struct {
    int cap;             /* activations a rank may hold, >= hy_sched_min_activations */
    double slack;        /* a stage's share of the cap is its lifetime's share x (1 + slack) */
    int backward_first;  /* a tie between a ready F and B goes to the B */
    int deep_first;      /* of ready forwards, the deepest stage first (else the shallowest) */
    int w_gap;           /* split: a W fills a wait for the next F or B longer than
                            w_gap halves of a W */
} hy_capped_order;

/* Builds p's schedule (its placement, p->max_activations ignored) in the
 * order the list scheduler makes under costs c (NULL: the uniform ones)
 * and o. HY_ERR_INPUT when o->cap is below the smallest cap; then *s is
 * left empty. */
int hy_capped_build(hy_schedule *s, const hy_sched_params *p, const hy_costs *c,
                    const hy_capped_order *o, hy_error *err);

#endif
