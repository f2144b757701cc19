/*
 * sim.h — the event simulator of a schedule's action lists.
 *
 * Each rank runs its list in order; an action starts when its rank is free
 * and its inputs have arrived. F(m, s) needs F(m, s-1); B(m, S-1) needs
 * F(m, S-1); B(m, s) needs B(m, s+1) and F(m, s). An input produced on
 * another rank arrives `comm` after its producer ends. The costs
 * (costs.h) are uniform (f, b, c) or given per stage (measured costs,
 * `hanayo plan --costs`).
 *
 *   makespan     = the last finish
 *   bubble ratio = 1 - (sum of busy time over ranks) / (P * makespan)
 *   peak_activations[r] = the most (m, s) pairs on rank r whose F has run
 *                         and whose B has not
 */
#ifndef HY_SIM_H
#define HY_SIM_H

#include "costs.h"
#include "error.h"
#include "schedule.h"

typedef struct {
    int ranks;
    double makespan;
    double bubble;             /* as defined above */
    int transfers;             /* cross-rank transfers per iteration */
    double *busy;              /* [ranks] total compute time */
    int *peak_activations;     /* [ranks] */
    double **start, **end;     /* [ranks][n_actions]: each action's times */
} hy_sim_result;

/* Runs the schedule. Returns HY_ERR_INPUT if it deadlocks (naming the
 * stuck ranks' next actions) or if a cost is negative or not finite. */
int hy_simulate(const hy_schedule *s, const hy_costs *c, hy_sim_result *r,
                hy_error *err);
void hy_sim_result_free(hy_sim_result *r);

/* For simulators built on this one (profile.c's, with mailbox slots): an
 * empty result for s, every array allocated and zeroed (-1 when out of
 * memory; hy_sim_result_free takes a part-built one), and when action a's
 * inputs are all on rank r given the hand-over ends of the forwards and
 * backwards so far ([m * stages + s], -1: not yet; c->comm added across
 * ranks), or -1 if one has not been made yet. */
int hy_sim_result_alloc(hy_sim_result *r, const hy_schedule *s);
double hy_sim_inputs_ready(const hy_schedule *s, const hy_costs *c, const double *fend,
                           const double *bend, const hy_action *a, int r);

/* The uniform-cost ideal: (P-1) / (chunks*M + P-1). Exact for gpipe,
 * 1f1b and interleaved; the target for hanayo (chunks = 2W). */
double hy_ideal_bubble(const hy_schedule *s);

#endif
