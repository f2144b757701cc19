/*
 * cmd_checkpoint.h — `hanayo checkpoint verify|list DIR`, the two
 * subcommands' work without their argument handling, for tests.
 *
 * DIR is one checkpoint (a step_NNNNNN directory), a checkpoint.dir, or
 * a directory of checkpoint.dirs (each run one level under it);
 * lib/checkpoint.h finds and checks them, these print one line each.
 */
#ifndef HY_CMD_CHECKPOINT_H
#define HY_CMD_CHECKPOINT_H

#include <stdio.h>

#include "error.h"

/* `hanayo checkpoint verify DIR`: every checkpoint in DIR checked, one
 * line each to out; HY_ERR_INPUT when any is bad (after checking them
 * all), or when DIR holds none. */
int cli_checkpoint_verify(const char *dir, FILE *out, hy_error *err);

/* `hanayo checkpoint list DIR`: step, loss, time and size of each; under
 * a directory of runs, a table per run after a line naming it. */
int cli_checkpoint_list(const char *dir, FILE *out, hy_error *err);

#endif
