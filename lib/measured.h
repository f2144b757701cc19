/*
 * measured.h — a profile's measured costs read back from its summary.json
 * (`hanayo profile` writes it: profile.h), for `hanayo plan --costs`.
 *
 * What comes back is what the simulator and the per-layer cost model
 * (costs.h) need: the schedule that was profiled, its layer split, the
 * per-stage forward and backward costs (with split backward B's and W's),
 * the transfer cost and the fitted model (which prices a whole backward),
 * all in ms. Everything else in the file is for people and is not
 * read. The file is user input, so every value is checked and every error
 * names the file and the JSON path.
 */
#ifndef HY_MEASURED_H
#define HY_MEASURED_H

#include "costs.h"
#include "error.h"
#include "schedule.h"

typedef struct {
    hy_sched_kind kind;         /* the schedule profiled */
    int ranks, micro_batches, waves, chunks, stages;
    int split;                  /* profiled with split backward: bwd is B's, wgrad W's */
    int *n_layers;              /* [stages] */
    double *fwd, *bwd;          /* [stages], ms */
    double *wgrad;              /* [stages], ms; zeros unsplit */
    double comm;
    hy_cost_model model;
} hy_measured_costs;

/* Reads summary.json. Every error names the file and the JSON path
 * ("summary.json: stages[2].fwd_ms: ...") and is HY_ERR_INPUT. */
int hy_measured_costs_load(hy_measured_costs *mc, const char *path, hy_error *err);
void hy_measured_costs_free(hy_measured_costs *mc);

#endif
