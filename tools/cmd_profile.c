/*
 * cmd_profile.c — `hanayo profile` (cmd_profile.h): its flags, the run
 * and the printed report.
 *
 * Loads the config, checks the output directory, profiles
 * (lib/profile.h, hy_profile_run), writes the files (hy_profile_save) and
 * prints the table and where the files are. Nothing is written unless the
 * whole profile ran. Under mpirun or srun each data-parallel replica
 * (dp.h) profiles its own pipeline, the gradient sums over the replicas
 * in its steps, and writes replica-R/ inside the directory; replica 0
 * prints, and a failure on any replica is every replica's (hy_dp_agree).
 */
#include "cmd_profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "args.h"
#include "cli.h"
#include "config.h"
#include "dp.h"
#include "error.h"
#include "outfile.h"
#include "profile.h"
#include "run.h"
#include "schedule.h"
#include "train.h"

static const char usage_profile[] =
    "usage: hanayo profile CONFIG [--steps N] [--out DIR] [--set key=value]...\n"
    "\n"
    "Trains 2 warm-up steps (the eager one and the recorded one), then N\n"
    "measured steps with a clock stamp around every action of every rank:\n"
    "its start, its input received, its compute done, its output sent. Prints\n"
    "per rank compute / copy / wait / blocked / tail / idle time, per stage\n"
    "the measured F and B cost, and the measured bubble beside the simulator's\n"
    "prediction from those costs and the uniform-cost ideal.\n"
    "Writes into DIR (default profile/<config name>; created):\n"
    "  trace.json     Chrome trace: one track per rank, an event per action,\n"
    "                 waits, transfers as arrows (Perfetto, chrome://tracing)\n"
    "  summary.json   every figure, per-stage and per-layer costs; feed it to\n"
    "                 hanayo plan --costs\n"
    "  timeline.svg   the last measured step, drawn like hanayo plan --svg\n"
    "  bars.svg       per rank, where the step goes\n"
    "\n"
    "  --steps N           measured steps, 1..1000 (default 5)\n"
    "  --out DIR           where the files go\n"
    "  --set key=value     override a config key, e.g. schedule.micro_batches=16\n"
    "  --slow-stage S:SEC  test hook: every action of stage S first holds its\n"
    "                      rank for SEC seconds (0..60), as a slower stage would\n";

typedef struct {
    const char *out;              /* the directory; NULL: profile/<config's name> */
    hy_profile_opts opts;
    hy_flag_list sets;
} profile_args;

int cli_profile_parse_slow_stage(const char *name, const char *v, void *field, hy_error *err) {
    hy_profile_opts *o = field;
    const char *colon = strchr(v, ':');
    char stage[32];
    if (!colon || (size_t)(colon - v) >= sizeof stage)
        return hy_fail(err, HY_ERR_INPUT, "%s: '%s' is not STAGE:SECONDS, e.g. 0:0.02", name, v);
    memcpy(stage, v, (size_t)(colon - v));
    stage[colon - v] = '\0';
    int rc = hy_args_int(name, stage, 0, 64 * HY_MAX_RANKS, &o->slow_stage, err);
    if (rc == HY_OK) rc = hy_args_real(name, colon + 1, 0, 1e12, 0, &o->slow_seconds, err);
    if (rc == HY_OK && o->slow_seconds >= 60)
        rc = hy_fail(err, HY_ERR_INPUT, "%s: %s seconds is out of range; give less "
                     "than 60", name, colon + 1);
    return rc;
}

static const hy_flag profile_flags[] = {
    CLI_PROFILE_MEASURE_FLAGS(profile_args, opts),
    { .name = "--out", .kind = HY_FLAG_STRING, .off = offsetof(profile_args, out),
      .example = "profile/tiny-gpt" },
    { .name = NULL },
};
static const hy_args_spec profile_spec = {
    .command = "profile", .flags = profile_flags, .operand = "config file",
    .synopsis = "hanayo profile CONFIG [--steps N] [--out DIR]" };

static void pct_cell(FILE *f, double v, double of) {
    fprintf(f, " %8.2f %5.1f%%", v, of > 0 ? 100 * v / of : 0);
}

/* The printed report: steps, per rank busy/wait/send/tail/idle, per stage
 * F/B/transfer costs, measured vs predicted vs ideal bubble. */
static void write_table(FILE *f, const hy_profile *p) {
    const hy_schedule *s = &p->sched;
    fprintf(f, "profile: %s, P = %d, M = %d", hy_sched_name(s->kind), s->ranks, s->micro_batches);
    if (s->kind == HY_SCHED_HANAYO) fprintf(f, ", W = %d", s->waves);
    if (s->kind == HY_SCHED_INTERLEAVED) fprintf(f, ", v = %d", s->chunks);
    fprintf(f, ", %d stages (layers:", s->stages);
    for (int si = 0; si < s->stages; si++) fprintf(f, " %d", p->n_layers[si]);
    fprintf(f, "); backend %s\n", p->backend);
    if (p->replicas > 1)
        fprintf(f, "replica %d of %d data-parallel replicas (their gradients summed in every "
                   "step)\n", p->replica, p->replicas);
    fprintf(f, "%d measured steps after %d warm-up: %.2f ms per step from the stamps, %.2f ms "
               "wall, %.0f tokens/s\n\n", p->steps, HY_PROFILE_WARMUP, p->step_ms, p->wall_ms,
            p->wall_ms > 0 ? p->tokens / (p->wall_ms / 1e3) : 0);

    fprintf(f, "per rank, ms per step and share of the step (busy = compute + copy):\n");
    int dp = p->replicas > 1;
    fprintf(f, "  rank %15s %15s %15s %15s", "compute", "copy", "wait", "blocked");
    if (dp) fprintf(f, " %15s", "sums");
    fprintf(f, " %15s %15s\n", "tail", "idle");
    for (int r = 0; r < s->ranks; r++) {
        const hy_rank_time *t = &p->rank[r];
        double all = t->compute + t->copy + t->wait + t->blocked + t->sums + t->tail + t->idle;
        fprintf(f, "  %4d", r);
        pct_cell(f, t->compute, all);
        pct_cell(f, t->copy, all);
        pct_cell(f, t->wait, all);
        pct_cell(f, t->blocked, all);
        if (dp) pct_cell(f, t->sums, all);
        pct_cell(f, t->tail, all);
        pct_cell(f, t->idle, all);
        fputc('\n', f);
    }
    if (dp)
        fprintf(f, "  sums: waiting after the last action for the gradient sums over the "
                   "replicas, the part the remaining backwards did not hide\n");
    fprintf(f, "\nper stage, ms per action (mean over micro-batches and steps); cost = compute "
               "+ copy of the output; blocked: a send held up beyond its copy\n");
    fprintf(f, "  stage rank layers   F cost   B cost  F comp  B comp  F copy  B copy  F blkd  B blkd%s\n",
            s->split ? "   W cost" : "");
    for (int si = 0; si < s->stages; si++) {
        const hy_stage_cost *c = &p->stage[si];
        fprintf(f, "  %5d %4d %6d %8.3f %8.3f %7.3f %7.3f %7.3f %7.3f %7.3f %7.3f", si, c->rank,
                c->layers, c->fwd, c->bwd, c->fwd_compute, c->bwd_compute, c->fwd_copy,
                c->bwd_copy, c->fwd_blocked, c->bwd_blocked);
        if (s->split) fprintf(f, " %8.3f", c->wgrad);
        fputc('\n', f);
    }
    const hy_cost_model *m = &p->model;
    fprintf(f, "  cost model: a layer F %.3f B %.3f; the first stage's extra F %.3f B %.3f; the "
               "last stage's extra F %.3f B %.3f; c = %.3f ms (%d transfers per step)\n",
            m->layer_fwd, m->layer_bwd, m->first_fwd, m->first_bwd, m->last_fwd, m->last_bwd,
            p->comm, p->transfers);
    fprintf(f, "\nbubble = 1 - busy / (P x makespan), makespan = the first action's start to "
               "the last busy end:\n");
    fprintf(f, "  measured   %.4f  makespan %8.2f ms\n", p->bubble, p->makespan);
    fprintf(f, "  predicted  %.4f  makespan %8.2f ms  (simulator, measured per-stage costs "
               "and c)\n", p->pred_bubble, p->pred_makespan);
    fprintf(f, "  slots      %.4f  makespan %8.2f ms  (the same, a sender waiting for its "
               "mailbox slot as the runtime does)\n", p->slots_bubble, p->slots_makespan);
    fprintf(f, "  ideal      %.4f                     (uniform costs, no transfer time)\n",
            p->ideal_bubble);
    if (p->mem_planned) {
        fprintf(f, "\nmemory per rank, MiB: planned (hanayo plan) and allocated by the backend\n");
        for (int r = 0; r < s->ranks; r++) {
            fprintf(f, "  %4d  planned %10.1f  allocated ", r, p->mem_planned[r] / 1048576.0);
            if (p->mem_allocated[r] >= 0)
                fprintf(f, "%10.1f  (%+.2f%%)\n", p->mem_allocated[r] / 1048576.0,
                        100 * (p->mem_allocated[r] / p->mem_planned[r] - 1));
            else
                fprintf(f, "%10s\n", "unknown");
        }
    }
}

char *cli_profile_default_dir(const char *config) {
    return hy_config_derived_dir("profile", config);
}

/* The directory replica r of a data-parallel profile writes: replica-R
 * inside the one asked for (just that one for a single process). */
static char *replica_dir(const char *dir, const hy_dp *dp) {
    if (hy_dp_size(dp) == 1) return strdup(dir);
    size_t n = strlen(dir) + 32;
    char *d = malloc(n);
    if (d) snprintf(d, n, "%s/replica-%d", dir, hy_dp_rank(dp));
    return d;
}

/* The files hy_profile_save writes into the directory. */
static const char *const profile_files[] = { "trace.json", "summary.json", "timeline.svg",
                                             "bars.svg" };

/* None of the files the profile writes into dir may be one the run reads
 * (outfile.h): --out pointed at a checkpoint or at the data's directory
 * must not replace them. */
static int check_out(const hy_run *run, const char *dir, hy_error *err) {
    hy_outfile_inputs inputs;
    hy_outfile_inputs_init(&inputs);
    int rc = hy_outfile_inputs_of_run(&inputs, run, NULL, err);
    for (size_t i = 0; !rc && i < sizeof profile_files / sizeof *profile_files; i++) {
        size_t n = strlen(dir) + strlen(profile_files[i]) + 2;
        char *path = malloc(n);
        if (!path) rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory");
        else snprintf(path, n, "%s/%s", dir, profile_files[i]);
        if (!rc) rc = hy_outfile_check(&inputs, "--out", path, 0, err);
        free(path);
    }
    hy_outfile_inputs_free(&inputs);
    return rc;
}

/* What writing the profile into dir would add: which of its files are
 * new, and how much of dir's path does not exist yet (the first missing
 * prefix's length; 0: dir exists). Taken before the save, so that a
 * failed one (a full disk) can take back exactly what it added. */
typedef struct {
    int is_new[sizeof profile_files / sizeof *profile_files];
    size_t missing;
} profile_before;

static int exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static int note_before(const char *dir, profile_before *b, hy_error *err) {
    size_t n = strlen(dir);
    char *buf = malloc(n + 32);
    if (!buf) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    for (size_t i = 0; i < sizeof profile_files / sizeof *profile_files; i++) {
        snprintf(buf, n + 32, "%s/%s", dir, profile_files[i]);
        b->is_new[i] = !exists(buf);
    }
    /* The shortest prefix (cut at a '/') that is missing. */
    b->missing = 0;
    memcpy(buf, dir, n + 1);
    for (size_t len = n; len > 0; len--) {
        if (len < n && buf[len] != '/') continue;
        buf[len] = '\0';
        if (exists(buf)) break;
        b->missing = len;
    }
    free(buf);
    return HY_OK;
}

/* A save that failed: its new files and the directories it made go again
 * (best effort; a file it replaced is whole and stays). */
static void take_back(const char *dir, const profile_before *b) {
    size_t n = strlen(dir);
    char *buf = malloc(n + 32);
    if (!buf) return;
    for (size_t i = 0; i < sizeof profile_files / sizeof *profile_files; i++) {
        snprintf(buf, n + 32, "%s/%s", dir, profile_files[i]);
        if (b->is_new[i]) unlink(buf);
    }
    memcpy(buf, dir, n + 1);
    for (size_t len = n; b->missing && len >= b->missing; len--) {
        if (len < n && buf[len] != '/') continue;
        buf[len] = '\0';
        if (rmdir(buf) != 0) break;
    }
    free(buf);
}

/* The profile of the config file `config` as a asks, its files written
 * and its report printed to out (see the top of this file). */
static int run_profile(const char *config, const profile_args *a, FILE *out, hy_error *err) {
    hy_dp *dp = a->opts.dp;
    int replicas = hy_dp_size(dp);
    hy_config c;
    hy_run run;
    memset(&run, 0, sizeof run);
    int rc = cli_load_config(&c, config, &a->sets, err);
    if (!rc) rc = hy_run_resolve(&run, &c, err);
    hy_config_free(&c);
    char *top = NULL, *dir = NULL;
    if (!rc) {
        top = a->out ? strdup(a->out) : cli_profile_default_dir(config);
        dir = top ? replica_dir(top, dp) : NULL;
        if (!dir) rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    }
    /* Before the steps run: a directory that cannot be made is bad input,
     * found at once, not after the measurement. */
    if (!rc) rc = hy_profile_check_dir(dir, err);
    if (!rc) rc = check_out(&run, dir, err);
    if (replicas > 1) {
        rc = hy_dp_agree(dp, rc, err);
        if (!rc) rc = hy_train_same_config(&run, dp, err);
        hy_dp_set_watchdog(dp, run.watchdog_s);
    }
    hy_profile p;
    memset(&p, 0, sizeof p);
    if (!rc) rc = hy_profile_run(&p, &run, &a->opts, err);
    profile_before before = { { 0 }, 0 };
    if (!rc) rc = note_before(dir, &before, err);
    if (!rc && (rc = hy_profile_save(&p, dir, err))) take_back(dir, &before);
    if (!rc && hy_dp_rank(dp) == 0) {
        write_table(out, &p);
        fprintf(out, "\nfiles: %s/trace.json (open in https://ui.perfetto.dev or chrome://tracing), "
                     "%s/summary.json, %s/timeline.svg, %s/bars.svg\n", dir, dir, dir, dir);
        if (replicas > 1)
            fprintf(out, "each replica's profile is in %s/replica-R (R = 0 .. %d)\n", top,
                    replicas - 1);
    }
    hy_profile_free(&p);
    hy_run_free(&run);
    free(dir);
    free(top);
    return rc;
}

static int cmd_profile(const cli_command *cmd, int argc, char **argv, hy_error *err) {
    profile_args a = { .out = NULL, .sets = { 0 } };
    hy_profile_opts_init(&a.opts);
    hy_args_result got;
    int rc = cli_read_args(cmd, argc, argv, &a, &got, err);
    hy_dp *dp = NULL;
    if (rc == HY_OK && !got.help) rc = hy_dp_start(&dp, NULL, NULL, err);
    if (rc == HY_OK && !got.help) {
        a.opts.dp = dp;
        rc = run_profile(got.operand, &a, stdout, err);
        if (dp) rc = rc != HY_OK ? cli_replica_failed(dp, rc, err) : HY_OK;
    }
    hy_dp_finish(dp);
    hy_flag_list_free(&a.sets);
    return rc;
}

const cli_command cli_profile_command = {"profile", cmd_profile, usage_profile, &profile_spec, NULL, 0};
