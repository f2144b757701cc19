/*
 * sim.h — the event simulator of a schedule's action lists.
 *
 * Each rank runs its list in order; an action starts when its rank is free
 * and its inputs (schedule.h, hy_action_inputs) have arrived. An input
 * produced on another rank arrives `comm` after its producer ends. The costs
 * (costs.h) are uniform (f, b, c) or given per stage (measured costs,
 * `hanayo plan --costs`).
 *
 *   makespan     = the last finish
 *   bubble ratio = 1 - (sum of busy time over ranks) / (P * makespan)
 *   peak_activations[r] = the most (m, s) pairs on rank r whose F has run
 *                         and whose B (split: W) has not
 *
 * Flow control (hy_sim_limits, optional): without limits an output goes
 * whenever its producer is done. The runtime's mailboxes hold K slots per
 * cross-rank edge, and which slot each micro-batch's message takes is
 * fixed beforehand (mailbox.h, hy_mailbox_plan); so when real costs let a
 * producer run ahead of its consumer, it waits until the consumer frees
 * that slot's previous message. With limits, an action holds its rank
 * until the action that frees its output's slot has ended; the wait is not
 * busy time, end[r][i] is when the action handed its output over, and a
 * consumer's input arrives c after the hand-over. The limits are plain
 * data: whoever knows the slots computes them (hy_mailbox_sim_limits).
 */
#ifndef HY_SIM_H
#define HY_SIM_H

#include "costs.h"
#include "error.h"
#include "schedule.h"

typedef struct {
    int ranks;
    /* [ranks][n_actions[r]]: the action whose end frees the slot that
     * action i of rank r hands its output to; op < 0 when it waits for
     * nothing (its slot is free from the start, or it sends nothing off
     * its rank). */
    hy_action **freed_by;
} hy_sim_limits;

/* Limits for s that hold nothing back (every op -1), to be filled in.
 * On failure (out of memory) l is left empty. */
int hy_sim_limits_init(hy_sim_limits *l, const hy_schedule *s, hy_error *err);
void hy_sim_limits_free(hy_sim_limits *l);

typedef struct {
    int ranks;
    double makespan;
    double bubble;             /* as defined above */
    int transfers;             /* cross-rank transfers per iteration */
    double bound;              /* hy_makespan_bound: no order of these costs is shorter */
    double bound_memory;       /* hy_makespan_bound_memory at this order's peak: no order
                                  holding no more on any rank is shorter */
    double *busy;              /* [ranks] total compute time */
    int *peak_activations;     /* [ranks] */
    double **start, **end;     /* [ranks][n_actions]: each action's times */
} hy_sim_result;

/* Runs the schedule, held back by `limits` when not NULL. Returns
 * HY_ERR_INPUT if it deadlocks (naming the stuck ranks' next actions) or
 * if a cost is negative or not finite. Under uniform costs the mailbox
 * limits change nothing: the replay that chose the slots is a witness
 * that nobody waits. */
int hy_simulate(const hy_schedule *s, const hy_costs *c, const hy_sim_limits *limits,
                hy_sim_result *r, hy_error *err);
void hy_sim_result_free(hy_sim_result *r);

/* What a simulation allocates, kept by a caller that simulates many
 * orders of one shape (the polish's steps, the justification's rounds)
 * so that each runs without allocating: zero it before the first use,
 * free it with hy_sim_scratch_free. */
typedef struct {
    hy_sim_result result;   /* the last simulation's, when it succeeded; valid until the
                               next call, and the scratch's (never freed on its own) */
    int stages;             /* the shape the buffers below are sized for, with
                               result.ranks */
    size_t keys;
    int *n_actions;         /* [result.ranks] */
    double *ends, *cost, *free_at;
    int *waiter, *next_waiter, *ready, *next, *live;
} hy_sim_scratch;

/* hy_simulate into w->result, reusing w's buffers (sized again when s's
 * shape is not theirs). With err NULL a deadlock is reported by its
 * status alone, HY_ERR_INPUT, without naming the stuck actions: for a
 * search that only drops such orders. */
int hy_simulate_reuse(const hy_schedule *s, const hy_costs *c, const hy_sim_limits *limits,
                      hy_sim_scratch *w, hy_error *err);
void hy_sim_scratch_free(hy_sim_scratch *w);

/* The uniform-cost ideal: (P-1) / (chunks*M + P-1), and with split
 * backward (f = B = W = 1) (P-1) / (3 chunks M + P-1). Exact for gpipe,
 * 1f1b and interleaved unsplit; the target for hanayo (chunks = 2W) and
 * for split orders. */
double hy_ideal_bubble(const hy_schedule *s);

/* A lower bound on the makespan of any order of s's placement under costs
 * c (DESIGN §1.1 "The uniform-cost model and the ideal"): for every rank,
 * the earliest any of its actions can start (the shortest chain of
 * forwards and transfers that reaches it), plus all its work, plus the
 * least that must still run after its last action (the backwards still to
 * travel to stage 0; nothing after a split's W), the largest over the
 * ranks. With c = 0
 * and uniform costs it is the ideal's makespan; with transfer time it
 * counts each hop the fill and the drain cannot avoid. */
double hy_makespan_bound(const hy_schedule *s, const hy_costs *c);

/* The same bound for the orders that hold at most `limit` activations on
 * every rank (limit <= 0: any number, hy_makespan_bound): before its first
 * backward can start (the chain of forwards to the last stage and of
 * backwards and hops back to the rank's deepest stage) a rank runs only
 * forwards, at most `limit` of them, so it waits at least for what their
 * work cannot fill. It tells a schedule whose placement needs more memory
 * to hide a latency (hanayo's high ranks wait for a backward that has
 * travelled the whole wave) from an order that could do better. */
double hy_makespan_bound_memory(const hy_schedule *s, const hy_costs *c, int limit);

/* How far apart two makespans near `makespan` may be and still be the
 * same order's: the rounding of sums of costs, relative to the makespan
 * (absolute below 1). What every comparison of orders' makespans allows. */
double hy_makespan_tolerance(double makespan);

/* The largest peak_activations over r's ranks: the memory the order
 * needs on its busiest rank, in stage activations. */
int hy_sim_peak_max(const hy_sim_result *r);

#endif
