/*
 * cmd_profile.h — `hanayo profile`, and what `hanayo tune` takes from it:
 * the flags of a measurement (tools/cmd_profile.c, tools/cmd_tune.c).
 *
 * Both commands measure with lib/profile.h's hy_profile_run, so both read
 * its options, hy_profile_opts, from the same flags: --steps, --set and
 * the --slow-stage test hook.
 */
#ifndef HY_CMD_PROFILE_H
#define HY_CMD_PROFILE_H

#include <stddef.h>

#include "cli.h"
#include "error.h"

/* The default output directory of a config path: "profile/" and its file
 * name without the extension. malloc'd; NULL when out of memory. */
char *cli_profile_default_dir(const char *config);

/* --slow-stage S:SECONDS, the test hook (runtime.h, hy_runtime_slow_stage),
 * into the hy_profile_opts at `field`. */
int cli_profile_parse_slow_stage(const char *name, const char *v, void *field, hy_error *err);

/* The flags profile and tune share, for a struct T with a `sets` list and
 * its hy_profile_opts at field `opts`. */
#define CLI_PROFILE_MEASURE_FLAGS(T, opts) \
    { .name = "--steps", .kind = HY_FLAG_INT, .off = offsetof(T, opts.steps), \
      .example = "5", .lo = 1, .hi = 1000 }, \
    CLI_SET_FLAG(T, "schedule.micro_batches=16"), \
    { .name = "--slow-stage", .kind = HY_FLAG_CUSTOM, .off = offsetof(T, opts), \
      .example = "0:0.02", .parse = cli_profile_parse_slow_stage }

#endif
