/*
 * polish.h — a local search that shortens a chosen order further:
 * perturb it, justify it again, keep what ends no later.
 *
 * The order search (order.h) builds its candidates greedily and
 * double-justifies the winner (justify.h), which moves each action into
 * a gap of its own; a gap that opens only once another action has moved
 * first stays. The polish walks from the order: each step moves two
 * actions, each of a random rank, one to three places later in the
 * rank's list, drops the result if it deadlocks, justifies it once and
 * takes it if it ends no later than the walk's current order (as late
 * too, so that a walk crosses plateaus) and holds no more than the order
 * it started from: on no rank more activations than its most, in no
 * stage more stash slots than that stage had (hy_schedule_in_flight,
 * what the memory plan counts), so the memory a run needs does not
 * change. POLISH_WALKS walks run, each from its own fixed seed, on up to
 * `threads` threads; the shortest order any of them met (the lowest
 * walk's of equals) replaces the order if it is shorter. Seeds, steps and
 * the choice are fixed, so the result is a function of (order, costs,
 * work): the same on any machine and any number of threads, as the
 * search's choice is.
 *
 * With a transfer time it is what takes the wave order below Megatron's
 * interleaved one where the search alone stays a few hops behind (unsplit
 * W = 2 at small transfer times), and W = 2 below DualPipeV and ZB-V at
 * their bytes at P = 4, M = 16 (docs/schedules.md).
 *
 * The work is counted as the search's is (order.h): a step counts
 * HY_POLISH_STEP_SIMS simulations of the order's actions, and the walks
 * share `work` evenly. A step takes about one and a half (a simulation,
 * and the justification starting from it: justify.h,
 * hy_justify_simulated); counting more keeps what the polish adds to a
 * plan's time well under what the search's budget would.
 */
#ifndef HY_POLISH_H
#define HY_POLISH_H

#include "costs.h"
#include "error.h"
#include "schedule.h"

/* What one step counts against the work, in simulations of the order. */
#define HY_POLISH_STEP_SIMS 8

typedef struct {
    long long steps;      /* over all walks */
    long long actions;    /* the work counted: steps x HY_POLISH_STEP_SIMS x actions */
    int threads;          /* that ran walks, the caller's among them (0: none ran) */
    double before, after; /* the order's makespan before and after */
} hy_polish_stats;

/* Polishes s (valid) under costs c with at most `work` counted actions on
 * up to `threads` threads (at least 1); s is replaced only by a shorter
 * order holding no more than s on any rank or in any stage (above).
 * Nothing is tried when s is at the bound of its memory (sim.h,
 * hy_makespan_bound_memory) or the work pays for too few steps. Fails
 * only on running out of memory or an order the simulator refuses (s is
 * then left as it was). */
int hy_polish_schedule(hy_schedule *s, const hy_costs *c, long long work, int threads,
                       hy_polish_stats *stats, hy_error *err);

#endif
