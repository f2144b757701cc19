/*
 * cmd_checkpoint.c — `hanayo checkpoint verify|list DIR` (cmd_checkpoint.h):
 * the usage, the two subcommands and the lines they print, over
 * lib/checkpoint.h's hy_checkpoint_find(_runs) and hy_checkpoint_verify.
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
    "DIR is one checkpoint (a step_NNNNNN directory), a checkpoint.dir, or a\n"
    "directory of checkpoint.dirs (checkpoints/, holding tiny-gpt/step_000200):\n"
    "then every run under it, one by one.\n"
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

/* The checkpoints of dir, as runs: dir's own (one run, *under 0), else
 * those of the runs one level under it (*under 1). None is an error. */
static int find_runs(const char *dir, hy_checkpoint_run **runs, int *n, int *under,
                     hy_error *err) {
    hy_checkpoint_info *own = NULL;
    int k = 0, rc = hy_checkpoint_find(dir, &own, &k, err);
    *runs = NULL;
    *n = *under = 0;
    if (!rc && k > 0) {
        if (!(*runs = calloc(1, sizeof **runs))) {
            free(own);
            return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
        }
        snprintf((*runs)->path, sizeof (*runs)->path, "%s", dir);
        (*runs)->found = own;
        (*runs)->n = k;
        *n = 1;
        return HY_OK;
    }
    free(own);
    if (!rc) rc = hy_checkpoint_find_runs(dir, runs, n, err);
    *under = 1;
    if (!rc && *n == 0)
        rc = hy_fail(err, HY_ERR_INPUT, "%s: no checkpoints (neither a state.json nor "
                     "step_NNNNNN directories, here or one level down)", dir);
    return rc;
}

int cli_checkpoint_verify(const char *dir, FILE *out, hy_error *err) {
    hy_checkpoint_run *runs = NULL;
    int n_runs = 0, under = 0, n = 0, bad = 0, rc = find_runs(dir, &runs, &n_runs, &under, err);
    for (int r = 0; r < n_runs && !rc; r++)
        for (int i = 0; i < runs[r].n; i++, n++) {
            const hy_checkpoint_info *c = &runs[r].found[i];
            hy_error e;
            int unverified = 0;
            if (hy_checkpoint_verify(c->path, &unverified, &e) != HY_OK) {
                fprintf(out, "BAD         %s: %s\n", c->path, e.msg);
                bad++;
            } else if (unverified) {
                fprintf(out, "unverified  %s: format 1, written without checksums\n", c->path);
            } else {
                char size[32];
                size_text(c->bytes, size, sizeof size);
                fprintf(out, "ok          %s (%s)\n", c->path, size);
            }
        }
    hy_checkpoint_runs_free(runs, n_runs);
    if (!rc && bad)
        rc = hy_fail(err, HY_ERR_INPUT, "%d of %d checkpoint%s in %s failed the check", bad, n,
                     n == 1 ? "" : "s", dir);
    return rc;
}

/* One run's checkpoints as a table. */
static void list_table(const hy_checkpoint_run *run, FILE *out) {
    fprintf(out, "%8s  %9s  %-20s  %10s  %s\n", "step", "loss", "time (UTC)", "size", "path");
    for (int i = 0; i < run->n; i++) {
        const hy_checkpoint_info *c = &run->found[i];
        char size[32], loss[32];
        size_text(c->bytes, size, sizeof size);
        if (isfinite(c->loss)) snprintf(loss, sizeof loss, "%.4f", c->loss);
        else snprintf(loss, sizeof loss, "-");
        fprintf(out, "%8d  %9s  %-20s  %10s  %s\n", c->step, loss, c->time[0] ? c->time : "-",
                size, c->path);
    }
}

int cli_checkpoint_list(const char *dir, FILE *out, hy_error *err) {
    hy_checkpoint_run *runs = NULL;
    int n_runs = 0, under = 0, rc = find_runs(dir, &runs, &n_runs, &under, err);
    if (!rc && under)
        fprintf(out, "%d run%s under %s\n", n_runs, n_runs == 1 ? "" : "s", dir);
    for (int r = 0; r < n_runs && !rc; r++) {
        /* Under a parent, each run's table under its name and newest step. */
        if (under)
            fprintf(out, "\nrun %s: %d checkpoint%s, newest step %d\n", runs[r].path,
                    runs[r].n, runs[r].n == 1 ? "" : "s", runs[r].found[runs[r].n - 1].step);
        list_table(&runs[r], out);
    }
    hy_checkpoint_runs_free(runs, n_runs);
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
