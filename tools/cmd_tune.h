/*
 * cmd_tune.h — `hanayo tune` (tools/cmd_tune.c): what it writes with
 * --apply, the tuned config file.
 */
#ifndef HY_CMD_TUNE_H
#define HY_CMD_TUNE_H

#include "error.h"
#include "tune.h"

/* Writes config file `config` with the candidate's schedule keys set
 * (kind, waves or chunks, micro_batches, split, split_backward, comm_cost) to
 * out_path, atomically,
 * after checking that the result loads (with `sets` applied, as it was
 * measured). */
int cli_tune_apply(const char *config, const char *const *sets, int n_sets,
                   const hy_tune_candidate *cand, const char *out_path, hy_error *err);

#endif
