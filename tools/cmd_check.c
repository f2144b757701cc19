/*
 * cmd_check.c — `hanayo check` (DESIGN §7 "The command line"): loads a
 * config with its --set overrides, which validates every key (config.h),
 * and prints the resolved configuration as one line of JSON.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

#include "args.h"
#include "cli.h"
#include "config.h"

static const char usage_check[] =
    "usage: hanayo check CONFIG [--set key=value]...\n"
    "\n"
    "Loads CONFIG, applies the --set overrides, validates everything and\n"
    "prints the resolved configuration as JSON. Exit status 2 names the\n"
    "file, the key and the fix when something is wrong.\n";

typedef struct {
    hy_flag_list sets;
} check_args;

static const hy_flag check_flags[] = {
    CLI_SET_FLAG(check_args, "schedule.waves=2"),
    { .name = NULL },
};
static const hy_args_spec check_spec = {
    .command = "check", .flags = check_flags, .operand = "config file",
    .synopsis = "hanayo check CONFIG [--set key=value]..." };

/* The config loaded (and so checked), printed as JSON. */
static int check_config(const char *path, const hy_flag_list *sets, hy_error *err) {
    hy_config cfg;
    int rc = cli_load_config(&cfg, path, sets, err);
    if (rc == HY_OK) {
        char *json = hy_config_to_json(&cfg);
        if (json) printf("%s\n", json);
        else rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory");
        free(json);
    }
    hy_config_free(&cfg);
    return rc;
}

static int cmd_check(const cli_command *cmd, int argc, char **argv, hy_error *err) {
    check_args a = { .sets = { 0 } };
    hy_args_result got;
    int rc = cli_read_args(cmd, argc, argv, &a, &got, err);
    if (rc == HY_OK && !got.help) rc = check_config(got.operand, &a.sets, err);
    hy_flag_list_free(&a.sets);
    return rc;
}

const cli_command cli_check_command = {"check", cmd_check, usage_check, &check_spec, NULL, 0};
