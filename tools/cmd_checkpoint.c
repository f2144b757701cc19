/*
 * cmd_checkpoint.c — `hanayo checkpoint verify|list DIR` (cmd_checkpoint.h):
 * the usage, the two subcommands and the lines they print, over
 * lib/checkpoint.h's hy_checkpoint_find and hy_checkpoint_verify.
 */
#include "cmd_checkpoint.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "checkpoint.h"
#include "cli.h"

static const char usage_checkpoint[] =
    "usage: hanayo checkpoint verify DIR\n"
    "       hanayo checkpoint list DIR\n"
    "\n"
    "DIR is one checkpoint (a step_NNNNNN directory) or a checkpoint.dir.\n"
    "\n"
    "verify checks each checkpoint's state.json against its own checksum and\n"
    "every file against the size and CRC-32C recorded for it, and prints one\n"
    "line each: ok, BAD (what is wrong) or unverified (written before\n"
    "checksums). Exit 2 when any is bad.\n"
    "\n"
    "list prints each checkpoint's step, loss, time (UTC) and size.\n";

static void size_text(uint64_t b, char *buf, size_t n) {
    if (b >= (1ull << 30)) snprintf(buf, n, "%.2f GiB", (double)b / (1ull << 30));
    else if (b >= (1ull << 20)) snprintf(buf, n, "%.1f MiB", (double)b / (1ull << 20));
    else snprintf(buf, n, "%.1f KiB", (double)b / 1024.0);
}

/* The checkpoints of dir; none is an error. */
static int find_some(const char *dir, hy_checkpoint_info **all, int *n, hy_error *err) {
    int rc = hy_checkpoint_find(dir, all, n, err);
    if (!rc && *n == 0)
        rc = hy_fail(err, HY_ERR_INPUT, "%s: no checkpoints (neither a state.json nor "
                     "step_NNNNNN directories)", dir);
    return rc;
}

int cli_checkpoint_verify(const char *dir, FILE *out, hy_error *err) {
    hy_checkpoint_info *all = NULL;
    int n = 0, bad = 0, rc = find_some(dir, &all, &n, err);
    for (int i = 0; i < n && !rc; i++) {
        hy_error e;
        int unverified = 0;
        if (hy_checkpoint_verify(all[i].path, &unverified, &e) != HY_OK) {
            fprintf(out, "BAD         %s: %s\n", all[i].path, e.msg);
            bad++;
        } else if (unverified) {
            fprintf(out, "unverified  %s: format 1, written without checksums\n", all[i].path);
        } else {
            char size[32];
            size_text(all[i].bytes, size, sizeof size);
            fprintf(out, "ok          %s (%s)\n", all[i].path, size);
        }
    }
    free(all);
    if (!rc && bad)
        rc = hy_fail(err, HY_ERR_INPUT, "%d of %d checkpoint%s in %s failed the check", bad, n,
                     n == 1 ? "" : "s", dir);
    return rc;
}

int cli_checkpoint_list(const char *dir, FILE *out, hy_error *err) {
    hy_checkpoint_info *all = NULL;
    int n = 0, rc = find_some(dir, &all, &n, err);
    if (!rc) fprintf(out, "%8s  %9s  %-20s  %10s  %s\n", "step", "loss", "time (UTC)", "size",
                     "path");
    for (int i = 0; i < n && !rc; i++) {
        char size[32], loss[32];
        size_text(all[i].bytes, size, sizeof size);
        if (isfinite(all[i].loss)) snprintf(loss, sizeof loss, "%.4f", all[i].loss);
        else snprintf(loss, sizeof loss, "-");
        fprintf(out, "%8d  %9s  %-20s  %10s  %s\n", all[i].step, loss,
                all[i].time[0] ? all[i].time : "-", size, all[i].path);
    }
    free(all);
    return rc;
}

/* ---- The command ----------------------------------------------------------- */

static const hy_flag no_flags[] = { { .name = NULL } };
static const hy_args_spec ckpt_verify_spec = {
    .command = "checkpoint verify", .flags = no_flags, .operand = "directory",
    .synopsis = "hanayo checkpoint verify DIR",
    .second_operand = "checkpoint verify takes one directory" };
static const hy_args_spec ckpt_list_spec = {
    .command = "checkpoint list", .flags = no_flags, .operand = "directory",
    .synopsis = "hanayo checkpoint list DIR",
    .second_operand = "checkpoint list takes one directory" };

static int ckpt_verify(const cli_command *cmd, int argc, char **argv, hy_error *err) {
    hy_args_result got;
    int rc = cli_read_args(cmd, argc, argv, NULL, &got, err);
    return rc != HY_OK || got.help ? rc : cli_checkpoint_verify(got.operand, stdout, err);
}

static int ckpt_list(const cli_command *cmd, int argc, char **argv, hy_error *err) {
    hy_args_result got;
    int rc = cli_read_args(cmd, argc, argv, NULL, &got, err);
    return rc != HY_OK || got.help ? rc : cli_checkpoint_list(got.operand, stdout, err);
}

static const cli_command checkpoint_commands[] = {
    {"verify", ckpt_verify, usage_checkpoint, &ckpt_verify_spec, NULL, 0},
    {"list", ckpt_list, usage_checkpoint, &ckpt_list_spec, NULL, 0},
};
static int cmd_checkpoint(const cli_command *cmd, int argc, char **argv, hy_error *err) {
    return cli_run_subcommand(cmd, argc, argv, err);
}

const cli_command cli_checkpoint_command = {"checkpoint", cmd_checkpoint, usage_checkpoint, NULL,
                                            checkpoint_commands, 2};
