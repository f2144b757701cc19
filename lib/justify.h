/*
 * justify.h — double justification of an order, whole or split backward.
 *
 * An order fixes each rank's sequence; the simulator (sim.h) starts every
 * action as early as its inputs and its rank allow. Double justification
 * (Valls, Ballestín and Quintanilla, "Justification and RCPSP: a technique
 * that pays", European Journal of Operational Research 165, 2005) moves
 * the actions themselves: first every action, the last to end first, is
 * placed as late as it can go on its rank before what follows it (into a
 * gap if one fits, so the sequence may change), then every action, the
 * first to start first, as early as it can go after what precedes it. Each
 * pass keeps every dependency and transfer time and never makes the
 * schedule longer than the one it starts from; moving into gaps is what
 * shortens it. A rank never holds more than `limit` activations at a time
 * (an F placed where that would be exceeded goes to a later gap), each
 * held from its F to its B, split to its W, as the simulator counts them.
 *
 * It is the last step of the cost-aware choice (order.c): the merge or
 * the list scheduler builds a good order, the justification closes gaps
 * their greedy replays leave. With a transfer time that is what takes
 * the wave order ahead of interleaved's (docs/schedules.md), and split,
 * W = 2 within ZB-V's bytes ahead of ZB-V.
 */
#ifndef HY_JUSTIFY_H
#define HY_JUSTIFY_H

#include "costs.h"
#include "error.h"
#include "schedule.h"
#include "sim.h"

/* Replaces s's lists with their double justification under c, repeated
 * while it shortens the makespan (at most `rounds` times), if that is
 * shorter than s and holds at most `limit` activations on every rank;
 * otherwise leaves s as it is. Fails only on running out of memory or a schedule the
 * simulator refuses. */
int hy_justify_schedule(hy_schedule *s, const hy_costs *c, int limit, int rounds, hy_error *err);

/* What a justification allocates, kept by a caller that justifies many
 * orders of one shape (polish.h) so that each runs without allocating:
 * zero it before the first use, free it with hy_justify_scratch_free. */
typedef struct {
    hy_sim_scratch sim;   /* where the caller simulates the order to justify, and the
                             justification its rounds */
    void *state;          /* justify.c's buffers */
} hy_justify_scratch;

/* hy_justify_schedule of s whose simulation under c the caller already
 * has in w->sim (hy_simulate_reuse: sim.h), which it starts from instead
 * of simulating s again; its own simulations reuse w->sim, so its result
 * is not s's afterwards. *makespan and *peak (the most activations on a
 * rank; either pointer may be NULL) are those of the order it leaves in
 * s. For a caller that simulates every order it justifies (polish.h). */
int hy_justify_simulated(hy_schedule *s, const hy_costs *c, int limit, int rounds,
                         hy_justify_scratch *w, double *makespan, int *peak, hy_error *err);
void hy_justify_scratch_free(hy_justify_scratch *w);

/* The same justification with each pass trying every position of a
 * rank's timeline in turn, as it was first written, rather than skipping
 * the stretches where no gap fits the action or where the rank's memory
 * is full: slower, and there for the tests, which compare the two list
 * for list. */
int hy_justify_schedule_plain(hy_schedule *s, const hy_costs *c, int limit, int rounds,
                              hy_error *err);

#endif
