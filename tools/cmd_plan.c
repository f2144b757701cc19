/*
 * cmd_plan.c — `hanayo plan` (DESIGN §7 "The command line"): its flags;
 * the config, --set and the flags resolved into a schedule and its costs,
 * uniform or a profile's measured ones (--costs,
 * DESIGN §8 "Measured costs"); and what it prints: lib/plan.h's timeline
 * and summary, its JSON or SVG, or the comparison of the schedules, and
 * with --replicas the plan priced on data-parallel replicas
 * (lib/scale.h). The config is loaded once, at the start of cli_plan_run,
 * and handed to every part that reads it.
 */
#include "cmd_plan.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "cli.h"
#include "config.h"
#include "costs.h"
#include "fit.h"
#include "measured.h"
#include "memplan.h"
#include "model.h"
#include "outfile.h"
#include "run.h"
#include "scale.h"
#include "tune.h"

static const char usage_plan[] =
    "usage: hanayo plan [CONFIG] [options]\n"
    "\n"
    "Builds a pipeline schedule, simulates it (each rank runs its actions in\n"
    "order; an action starts when its rank is free and its inputs arrived)\n"
    "and shows a timeline per rank with a summary, the plan as JSON, an SVG,\n"
    "or the four schedules side by side. Values come from CONFIG (or the\n"
    "defaults), then --set, then the flags.\n"
    "\n"
    "  --schedule K        gpipe, 1f1b, interleaved or hanayo\n"
    "  --ranks P           pipeline ranks, 1..64\n"
    "  --micro-batches M   micro-batches per iteration, 1..65536\n"
    "  --waves W           hanayo: waves (2W stages per rank), 1..16\n"
    "  --chunks V          interleaved: stages per rank, 1..64\n"
    "  --fwd-cost F        time of one stage's forward (default 1)\n"
    "  --bwd-cost B        time of one stage's backward (default 2)\n"
    "  --comm-cost C       time of one cross-rank transfer (default: the\n"
    "                      config's schedule.comm_cost, 0)\n"
    "  --split-backward    split every backward in B (input gradient) and W\n"
    "                      (weights), as schedule.split_backward does\n"
    "  --wgrad-cost W      with a split, what W, the weight pass, costs of the\n"
    "                      backward's --bwd-cost (default: half); B costs the rest\n"
    "  --costs FILE        measured costs (ms) from hanayo profile's summary.json:\n"
    "                      its per-stage F and B and transfer cost; with\n"
    "                      --compare every schedule priced from its per-layer\n"
    "                      costs, each with the split the runtime would use\n"
    "  --max-activations N the most activations a rank may hold at once (stage\n"
    "                      activations); the best order found within it, as\n"
    "                      schedule.max_activations (0: no cap)\n"
    "  --json              print the plan as JSON instead of the timeline\n"
    "  --svg FILE          also draw the timeline as an SVG into FILE\n"
    "  --compare           one table of all four schedules at this P and M,\n"
    "                      whole and split backward (interleaved with v = 2W\n"
    "                      unless --chunks is given); with CONFIG, priced under\n"
    "                      its train.recompute, with each one's memory plan\n"
    "  --replicas N,N,...  also price this plan on N data-parallel replicas\n"
    "                      (servers), e.g. 1,4,16,64: each rank's gradients\n"
    "                      summed as its stages' backwards end (CONFIG's model)\n"
    "  --link-gbps G       each rank's network link for those sums (default 400)\n"
    "  --link-latency-us L a ring step's latency (default 5)\n"
    "  --step-ms MS        one step on one server, in ms, which the uniform\n"
    "                      costs are scaled to (with --costs: the measured ms)\n"
    "  --memory-gb G       hold the memory plan (bytes each rank allocates, shown\n"
    "                      under the summary and in --json) against G GiB per\n"
    "                      rank (default: this machine's, as train would run);\n"
    "                      a plan that does not fit, without a cap, is made\n"
    "                      again the fastest way that fits: recompute, an\n"
    "                      activation cap, or both (as tune weighs them)\n"
    "  --set key=value     override a config key, e.g. schedule.waves=2\n"
    "  --width N           timeline width in columns, 40..100000 (default 120)\n"
    "  --color WHEN        auto (colour on a terminal), always or never\n";

/* ------------------------------------------------------------------------
 * The flags
 * ------------------------------------------------------------------------ */

enum { COLOR_AUTO, COLOR_ALWAYS, COLOR_NEVER };
static const char *const color_names[] = {"auto", "always", "never", NULL};

typedef struct {
    cli_plan_request rq;
    hy_flag_list sets;
    int color;          /* COLOR_* */
} plan_args;

static int parse_plan_schedule(const char *name, const char *v, void *field, hy_error *err) {
    (void)name;
    cli_plan_request *rq = field;
    rq->has_kind = 1;
    return hy_sched_parse(v, &rq->kind, err);
}

#define PLAN(field) offsetof(plan_args, field)
static const hy_flag plan_flags[] = {
    { .name = "--schedule", .kind = HY_FLAG_CUSTOM, .off = PLAN(rq), .example = "hanayo",
      .parse = parse_plan_schedule },
    { .name = "--ranks", .kind = HY_FLAG_INT, .off = PLAN(rq.ranks), .example = "4",
      .lo = 1, .hi = HY_MAX_RANKS },
    { .name = "--micro-batches", .kind = HY_FLAG_INT, .off = PLAN(rq.micro_batches),
      .example = "8", .lo = 1, .hi = 65536 },
    { .name = "--waves", .kind = HY_FLAG_INT, .off = PLAN(rq.waves), .example = "2",
      .lo = 1, .hi = 16 },
    { .name = "--chunks", .kind = HY_FLAG_INT, .off = PLAN(rq.chunks), .example = "2",
      .lo = 1, .hi = 64 },
    { .name = "--fwd-cost", .kind = HY_FLAG_REAL, .off = PLAN(rq.fwd_cost), .example = "1",
      .lo = 0, .hi = 1e12 },
    { .name = "--bwd-cost", .kind = HY_FLAG_REAL, .off = PLAN(rq.bwd_cost), .example = "2",
      .lo = 0, .hi = 1e12 },
    { .name = "--comm-cost", .kind = HY_FLAG_REAL, .off = PLAN(rq.comm_cost),
      .example = "0.5", .lo = 0, .hi = 1e12 },
    { .name = "--split-backward", .kind = HY_FLAG_SWITCH, .off = PLAN(rq.split_backward) },
    { .name = "--wgrad-cost", .kind = HY_FLAG_REAL, .off = PLAN(rq.wgrad_cost),
      .example = "1", .lo = 0, .hi = 1e12 },
    { .name = "--max-activations", .kind = HY_FLAG_INT, .off = PLAN(rq.max_activations),
      .example = "16", .lo = 0, .hi = 1 << 20 },
    { .name = "--json", .kind = HY_FLAG_SWITCH, .off = PLAN(rq.json) },
    { .name = "--svg", .kind = HY_FLAG_STRING, .off = PLAN(rq.svg), .example = "plan.svg" },
    { .name = "--compare", .kind = HY_FLAG_SWITCH, .off = PLAN(rq.compare) },
    CLI_SET_FLAG(plan_args, "schedule.waves=2"),
    { .name = "--width", .kind = HY_FLAG_INT, .off = PLAN(rq.timeline.width),
      .example = "120", .lo = 40, .hi = 100000 },
    { .name = "--color", .kind = HY_FLAG_CHOICE, .off = PLAN(color), .example = "never",
      .choices = color_names },
    { .name = "--costs", .kind = HY_FLAG_STRING, .off = PLAN(rq.costs),
      .example = "profile/tiny-gpt/summary.json" },
    { .name = "--replicas", .kind = HY_FLAG_STRING, .off = PLAN(rq.replicas),
      .example = "1,4,16,64" },
    { .name = "--link-gbps", .kind = HY_FLAG_REAL, .off = PLAN(rq.link_gbps), .example = "400",
      .lo = 0.001, .hi = 1e9 },
    { .name = "--link-latency-us", .kind = HY_FLAG_REAL, .off = PLAN(rq.link_latency_us),
      .example = "5", .lo = 0, .hi = 1e9 },
    { .name = "--step-ms", .kind = HY_FLAG_REAL, .off = PLAN(rq.step_ms), .example = "120",
      .lo = 0.001, .hi = 1e12 },
    { .name = "--memory-gb", .kind = HY_FLAG_REAL, .off = PLAN(rq.memory_gb), .example = "80",
      .lo = 0, .lo_open = 1, .hi = 1e12 },
    { .name = NULL },
};
static const hy_args_spec plan_spec = {
    .command = "plan", .flags = plan_flags, .operand = "config file" };

/* --color auto: colour only for a person at a terminal that can show it. */
static int want_color(int color) {
    if (color != COLOR_AUTO) return color == COLOR_ALWAYS;
    const char *term = getenv("TERM");
    return isatty(STDOUT_FILENO) && !getenv("NO_COLOR") && !(term && strcmp(term, "dumb") == 0);
}

static int cmd_plan(const cli_command *cmd, int argc, char **argv, hy_error *err) {
    plan_args a = { .sets = { 0 }, .color = COLOR_AUTO };
    cli_plan_request_init(&a.rq);
    hy_args_result got;
    int rc = cli_read_args(cmd, argc, argv, &a, &got, err);
    if (rc == HY_OK && !got.help) {
        cli_hand_config(&got, &a.sets, &a.rq.config, &a.rq.sets, &a.rq.n_sets);
        a.rq.timeline.color = want_color(a.color);
        rc = cli_plan_run(&a.rq, stdout, err);
    }
    hy_flag_list_free(&a.sets);
    return rc;
}

const cli_command cli_plan_command = {"plan", cmd_plan, usage_plan, &plan_spec, NULL, 0};

/* ------------------------------------------------------------------------
 * The request: resolved, built and printed
 * ------------------------------------------------------------------------ */

void cli_plan_request_init(cli_plan_request *rq) {
    memset(rq, 0, sizeof *rq);
    rq->fwd_cost = rq->bwd_cost = rq->comm_cost = rq->wgrad_cost = -1;
    rq->link_latency_us = -1;
    rq->max_activations = -1;
}

/* The schedule flags over what the config says. */
static void apply_flags(const cli_plan_request *rq, hy_sched_params *p) {
    if (rq->has_kind) p->kind = rq->kind;
    if (rq->ranks > 0) p->ranks = rq->ranks;
    if (rq->micro_batches > 0) p->micro_batches = rq->micro_batches;
    if (rq->waves > 0) p->waves = rq->waves;
    if (rq->chunks > 0) p->chunks = rq->chunks;
    if (rq->split_backward) p->split_backward = 1;
    if (rq->max_activations >= 0) p->max_activations = rq->max_activations;
}

/* Config file (with --set, resolved in run), then the flags: the later
 * one wins. */
static int resolve(const cli_plan_request *rq, const hy_run *run, hy_sched_params *p,
                   hy_costs *c, hy_error *err) {
    *p = run->sched_params;
    apply_flags(rq, p);
    if (rq->wgrad_cost >= 0 && !p->split_backward && !rq->compare)
        return hy_fail(err, HY_ERR_INPUT, "--wgrad-cost is the cost of a split backward's "
                       "weight pass; add --split-backward (or schedule.split_backward=true)");
    *c = hy_costs_uniform();
    if (rq->fwd_cost >= 0) c->fwd = rq->fwd_cost;
    if (rq->bwd_cost >= 0) c->bwd = rq->bwd_cost;
    c->comm = rq->comm_cost >= 0 ? rq->comm_cost : run->comm_cost;
    /* For --compare, W's share is what its split rows give W (< 0: half). */
    c->wgrad = rq->wgrad_cost;
    if (!rq->compare && p->split_backward) hy_costs_split(c, rq->wgrad_cost);
    if (!rq->compare && !p->split_backward) c->wgrad = 0;
    /* Recomputation's extra forward work in each backward pass. */
    if (!rq->compare) hy_costs_add_recompute(c, hy_recompute_share(run->train.recompute));
    return HY_OK;
}

static int out_error(hy_error *err) {
    return hy_fail(err, HY_ERR_RUNTIME, "cannot write the output: %s",
                   strerror(errno ? errno : EIO));
}

/* The backend the run would get, as hy_backend_describe says; a GPU run
 * planned on a machine without one gets the CUDA backend's types and
 * scratch, with no memory of its own (--memory-gb gives it). */
static int plan_backend(const hy_run *run, hy_backend_choice *chosen, hy_error *err) {
    int rc = hy_backend_describe(&run->backend, chosen, err);
    if (rc && run->backend.kind == HY_BACKEND_CUDA) {
        memset(chosen, 0, sizeof *chosen);
        chosen->cuda = 1;
        chosen->rank_bytes = INFINITY;
        hy_backend_cuda_memory(&chosen->mem);
        rc = HY_OK;
    }
    return rc;
}

/* The memory of each compared schedule (hy_compare_each): the run's
 * model split as the runtime would split it for the row's stages (model.h;
 * the run's own split where the stage counts agree), under the run's
 * train.recompute, on the backend it would get. */
typedef struct {
    const hy_run *run;
    hy_backend_memory mem;
} compare_memory;

static void compare_memory_of(const hy_plan *pl, hy_compare_row *row, void *ctx) {
    const compare_memory *cm = ctx;
    const hy_run *run = cm->run;
    double act, all;
    hy_tune_memory(run, &pl->sched,
                   pl->sched.stages == run->model.stages ? run->model.n_layers : NULL,
                   run->micro_batch_size, run->train.recompute, &cm->mem, &act, &all);
    row->mem_bytes = isfinite(all) ? all : -1;   /* more stages than layers: no model */
}

static int run_compare(const cli_plan_request *rq, const hy_run *run, hy_sched_params p,
                       const hy_costs *c, FILE *out, hy_error *err) {
    if (rq->svg)
        return hy_fail(err, HY_ERR_INPUT, "--svg draws one schedule and "
                       "--compare shows four; drop one of them");
    /* Like-for-like by default: interleaved with as many chunks per rank
     * as hanayo's 2W, unless v was asked for. */
    if (rq->chunks <= 0 && p.kind != HY_SCHED_INTERLEAVED) p.chunks = 2 * p.waves;
    hy_compare_row rows[HY_COMPARE_ROWS];
    compare_memory cm = { .run = run };
    hy_backend_choice chosen;
    int rc = plan_backend(run, &chosen, err);
    if (rc != HY_OK) return rc;
    cm.mem = chosen.mem;
    double share = hy_recompute_share(run->train.recompute);
    /* Memory is a model's: planned for a CONFIG's, not for the bare
     * schedules of f and b. */
    int planned = run->config_path != NULL;
    rc = hy_plan_compare_each(&p, c, share, planned ? compare_memory_of : NULL, &cm, rows, err);
    if (rc != HY_OK) return rc;
    if (rq->json) {
        char *s = hy_compare_json(rows, HY_COMPARE_ROWS);
        if (!s) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
        fprintf(out, "%s\n", s);
        free(s);
    } else {
        double w = c->wgrad >= 0 ? c->wgrad : c->bwd / 2;
        fprintf(out, "P = %d, M = %d; one rank's share of the model costs f = %g forward, "
                "b = %g backward (f/v and b/v per stage for v chunks per rank; +split: "
                "B = %g, W = %g); a transfer costs c = %g\n",
                p.ranks, p.micro_batches, c->fwd, c->bwd, c->bwd - w, w, c->comm);
        if (share > 0)
            fprintf(out, "train.recompute = \"%s\": each backward pass (B, and W when split) "
                    "also redoes %g x its stage's forward\n",
                    hy_recompute_name(run->train.recompute), hy_costs_recompute(1, share));
        if (planned)
            fprintf(out, "mem GiB: the most a rank allocates (the memory plan of %s's model, "
                    "B = %d, recompute %s, %s backend; - where a stage would hold no layer)\n",
                    run->config_path, run->micro_batch_size,
                    hy_recompute_name(run->train.recompute), chosen.cuda ? "cuda" : "cpu");
        fputc('\n', out);
        hy_compare_write_table(out, rows, HY_COMPARE_ROWS);
    }
    return HY_OK;
}

/* The run's model with schedule p's stages: the run's layer split when
 * it has p's stage count, else the balanced one (model.h). */
static int model_for(const hy_run *run, const hy_sched_params *p, hy_model *m, hy_error *err) {
    hy_model_shape shape = hy_model_shape_of(&run->model);
    int S = hy_sched_stages(p);
    return hy_model_build(m, &shape, S == run->model.stages ? run->model.n_layers : NULL, S, 1,
                          err);
}

/* Bytes of fp32 gradients each stage of schedule sc sums across
 * replicas, for model m split over its stages: its parameters, and on the
 * last stage the tied embedding's replica when it sits on another rank
 * than stage 0 (both copies are summed). */
static void grad_bytes_of(const hy_model *m, const hy_schedule *sc, double *bytes) {
    assert(m->stages == sc->stages);
    for (int s = 0; s < sc->stages; s++) bytes[s] = 4.0 * (double)m->stage_numel[s];
    if (sc->placement[sc->stages - 1] != sc->placement[0])
        bytes[sc->stages - 1] += 4.0 * (double)hy_model_param(m, HY_P_WTE, 0)->numel;
}

/* `--replicas`: the plan's step on N data-parallel replicas (scale.h),
 * as a table under the summary, or a JSON line after the plan's. */
static int scale_table(const cli_plan_request *rq, const hy_run *run, const hy_model *m,
                       const hy_plan *pl, const hy_costs *c, FILE *out, hy_error *err) {
    int counts[HY_SCALE_MAX_ROWS], n = 0;
    int measured = c->fwd_stage != NULL;   /* per-stage costs only come from --costs: ms */
    int rc = hy_scale_parse_counts("--replicas", rq->replicas, counts, &n, err);
    double *bytes = malloc(sizeof(double) * (size_t)pl->sched.stages);
    if (rc == HY_OK && !bytes) rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    if (rc == HY_OK) grad_bytes_of(m, &pl->sched, bytes);
    hy_scale_link link = {
        .gbps = rq->link_gbps > 0 ? rq->link_gbps : 400,
        .latency_us = rq->link_latency_us >= 0 ? rq->link_latency_us : 5,
        .ms_per_unit = rq->step_ms > 0 ? rq->step_ms / pl->sim.makespan : 1,
        .tokens_per_replica = hy_run_tokens_per_step(pl->sched.micro_batches,
                                                     run->micro_batch_size, run->model.seq_len, 1),
    };
    hy_scale_row rows[HY_SCALE_MAX_ROWS];
    if (rc == HY_OK) rc = hy_scale_rows(&pl->sched, &pl->sim, bytes, &link, counts, n, rows, err);
    double total = 0;
    for (int s = 0; rc == HY_OK && s < pl->sched.stages; s++) total += bytes[s];
    free(bytes);
    if (rc != HY_OK) return rc;
    if (rq->json) {
        char *rows_json = hy_scale_json(rows, n);
        if (!rows_json) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
        fprintf(out, "{\"link_gbps\": %g, \"link_latency_us\": %g, \"ms_per_unit\": %.9g, "
                "\"grad_bytes\": %.0f, \"replicas\": %s}\n", link.gbps, link.latency_us,
                link.ms_per_unit, total, rows_json);
        free(rows_json);
        return HY_OK;
    }
    fprintf(out, "\ndata parallel: the gradients (%.1f MB) summed over the replicas as each "
            "stage's backward ends,\nring all-reduce on each rank's %g Gb/s link, %g us a step; "
            "one server's step %.2f ms%s\n", total / 1e6, link.gbps, link.latency_us,
            pl->sim.makespan * link.ms_per_unit, measured ? " (measured costs)" : " (--step-ms)");
    return hy_scale_write_table(out, rows, n) ? out_error(err) : HY_OK;
}

/* ---- The memory plan (memplan.h) ---------------------------------------- */

/* What the plan's schedule sc allocates on each rank for the run's model
 * split over sc's stages, on the backend the run would get; *available:
 * --memory-gb or that backend's memory per rank (why says which); *fit:
 * when the plan does not fit there, the least train.recompute under which
 * it would (HY_RECOMPUTE_COUNT: none, or it fits). A schedule with more
 * stages than layers has no model: HY_ERR_INPUT. */
static int memory_of(const cli_plan_request *rq, const hy_run *run, const hy_model *m,
                     const hy_schedule *sc, hy_memplan *mp, double *available, hy_recompute *fit,
                     char *why, size_t n, hy_error *err) {
    *fit = HY_RECOMPUTE_COUNT;
    hy_backend_choice chosen;
    int rc = plan_backend(run, &chosen, err);
    if (rc) return rc;
    hy_memplan_in in = { .model = m, .sched = sc, .micro_batch_size = run->micro_batch_size,
                         .replicas = 1, .mem = &chosen.mem, .recompute = run->train.recompute };
    rc = hy_memplan_build(mp, &in, err);
    cli_memory_budget(rq->memory_gb, sc->ranks, &chosen, available, why, n);
    hy_error ignored;
    if (!rc && *available >= 0 && isfinite(*available) &&
        hy_memplan_check(mp, *available, "", &ignored) != HY_OK)
        *fit = hy_memplan_recompute_to_fit(&in, in.recompute + 1, NULL, available, 1, NULL);
    size_t used = strlen(why);
    snprintf(why + used, n - used, "; %s backend, %zu-byte activations, recompute %s",
             chosen.cuda ? "cuda" : "cpu", chosen.mem.act_size,
             hy_recompute_name(run->train.recompute));
    return rc;
}

/* "812.0 KiB", "12.3 MiB", "1.52 GiB". */
static void bytes_text(double b, char *buf, size_t n) {
    if (b >= 1073741824.0) snprintf(buf, n, "%.2f GiB", b / 1073741824.0);
    else if (b >= 1048576.0) snprintf(buf, n, "%.1f MiB", b / 1048576.0);
    else snprintf(buf, n, "%.1f KiB", b / 1024.0);
}

/* The table under the summary: each rank's terms and total, and the
 * verdict against what is available. */
static void write_memory(FILE *out, const hy_memplan *mp, double available, hy_recompute fit,
                         const char *why) {
    char cell[32];
    fprintf(out, "\nmemory per rank, what the runtime allocates (%s):\n  %4s", why, "rank");
    for (int t = 0; t < HY_MEM_TERMS; t++) fprintf(out, " %11s", hy_mem_term_name((hy_mem_term)t));
    fprintf(out, " %11s\n", "total");
    for (int r = 0; r < mp->ranks; r++) {
        fprintf(out, "  %4d", r);
        for (int t = 0; t < HY_MEM_TERMS; t++) {
            bytes_text(mp->rank[r].bytes[t], cell, sizeof cell);
            fprintf(out, " %11s", cell);
        }
        bytes_text(mp->rank[r].total, cell, sizeof cell);
        fprintf(out, " %11s\n", cell);
    }
    if (!(available >= 0 && isfinite(available))) return;
    hy_error e;
    bytes_text(available, cell, sizeof cell);
    if (hy_memplan_check(mp, available, "a rank", &e) == HY_OK)
        fprintf(out, "  fits: each rank within %s\n", cell);
    else
        fprintf(out, "  does not fit in %s per rank: %s\n", cell, e.msg);
    if (fit < HY_RECOMPUTE_COUNT)
        fprintf(out, "  fits only with recompute: train.recompute = \"%s\" (the same training, "
                "more compute; --set train.recompute=%s)\n", hy_recompute_name(fit),
                hy_recompute_name(fit));
}

/* The plan's JSON line with the memory plan as one more key, "memory"
 * (null when the schedule has no model: more stages than layers). */
static char *json_with_memory(const hy_plan *pl, const char *memory) {
    char *plan = hy_plan_json(pl);
    if (!plan) return NULL;
    size_t n = strlen(plan);
    assert(n >= 2 && plan[n - 1] == '}');   /* one object on one line */
    const char *m = memory ? memory : "null";
    char *s = malloc(n + strlen(m) + 16);
    if (s) sprintf(s, "%.*s, \"memory\": %s}", (int)(n - 1), plan, m);
    free(plan);
    return s;
}

/* The plan of p under c with its memory plan (have_memory: whether one
 * could be made; merr says why not). With --memory-gb and no cap, a plan
 * that does not fit is weighed against the ways it could (lib/fit.h,
 * hy_fit_search, as tune weighs them): recomputing more than the run does
 * (priced when the costs are uniform; measured ones hold the profiled
 * run's recompute and no other), and an activation cap on the order.
 * When a capped order is the fastest that fits, the plan is made again
 * within that cap (the plan's max_activations); otherwise the uncapped
 * plan stays, and its memory table says which recompute fits. *chosen:
 * the option weighed fastest (chosen->makespan < 0: none weighed). */
static int plan_in_memory(const cli_plan_request *rq, const hy_run *run, const hy_sched_params *p,
                          const hy_costs *c, const hy_model *m, hy_plan *pl, hy_memplan *mp,
                          double *available, hy_recompute *fit, char *why, size_t n,
                          int *have_memory, hy_fit_option *chosen, hy_error *merr,
                          hy_error *err) {
    hy_sched_params q = *p;
    chosen->makespan = -1;
    int rc = hy_plan_build(pl, &q, c, err);
    if (rc != HY_OK) return rc;
    *have_memory = m && memory_of(rq, run, m, &pl->sched, mp, available, fit, why, n,
                                   merr) == HY_OK;
    hy_error fits;
    if (!*have_memory || rq->memory_gb <= 0 || q.max_activations > 0 ||
        hy_memplan_check(mp, *available, "--memory-gb", &fits) == HY_OK)
        return HY_OK;
    hy_backend_choice backend;
    if ((rc = plan_backend(run, &backend, err)) != HY_OK) return rc;
    hy_costs modes[HY_RECOMPUTE_COUNT];
    hy_fit_in in = { .p = &q, .order_costs = c, .model = m,
                     .micro_batch_size = run->micro_batch_size, .mem = &backend.mem,
                     .budget = *available, .search_caps = 1 };
    hy_recompute own = run->train.recompute;
    for (int k = own; k < HY_RECOMPUTE_COUNT && (k == (int)own || !c->fwd_stage); k++) {
        modes[k] = *c;   /* c already prices the run's own mode */
        hy_costs_add_recompute(&modes[k], hy_recompute_share((hy_recompute)k) -
                                          hy_recompute_share(own));
        in.costs[k] = &modes[k];
    }
    hy_fit_option best;
    if ((rc = hy_fit_search(&in, &best, err)) != HY_OK) return rc;
    *chosen = best;
    if (!best.fits || best.cap == 0) return HY_OK;   /* nothing fits: the uncapped plan says so */
    hy_plan next;
    hy_memplan next_mp;
    q.max_activations = best.cap;
    if ((rc = hy_plan_build(&next, &q, c, err)) != HY_OK) return rc;
    if (memory_of(rq, run, m, &next.sched, &next_mp, available, fit, why, n, merr) != HY_OK) {
        hy_plan_free(&next);
        return HY_OK;
    }
    hy_plan_free(pl);
    hy_memplan_free(mp);
    *pl = next;
    *mp = next_mp;
    return HY_OK;
}

/* Seconds on clock `id` (CLOCK_MONOTONIC: the wall; CLOCK_PROCESS_CPUTIME_ID:
 * this process's CPU). */
static double seconds_on(clockid_t id) {
    struct timespec ts;
    if (clock_gettime(id, &ts) != 0) return 0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* What making the plan took: its time (and the threads that built
 * candidates, when more than one did), and what the order search did
 * (order.h), saying so when the local search after it (polish.h) took
 * steps, when its bound stopped it before its last candidate, or when the
 * order was too large to justify. */
static void write_planning(FILE *out, const hy_plan *pl, double wall, double cpu) {
    fprintf(out, "%-18s%.2f s (%.2f s of CPU", "planning", wall, cpu);
    if (pl->work.threads > 1) fprintf(out, " on %d threads", pl->work.threads);
    fputc(')', out);
    if (pl->work.orders == 0) {
        fprintf(out, ": the order made for these costs, no search\n");
        return;
    }
    fprintf(out, ": %d orders built, %lld actions simulated", pl->work.orders, pl->work.actions);
    if (pl->work.polish_steps)
        fprintf(out, " (%lld steps of a local search among them)", pl->work.polish_steps);
    if (pl->work.stopped)
        fprintf(out, "; the search stopped at its bound (HY_ORDER_WORK), the best so far kept");
    if (pl->work.unjustified)
        fprintf(out, "; too large to justify (order.c's JUSTIFY_WORK): the order as merged, not "
                     "tightened");
    fputc('\n', out);
}

static int run_one(const cli_plan_request *rq, const hy_run *run, const hy_sched_params *p,
                   const hy_costs *c, FILE *out, hy_error *err) {
    hy_plan pl;
    hy_memplan mp;
    double available = -1;
    hy_recompute fit = HY_RECOMPUTE_COUNT;
    char why[224];
    hy_error merr;
    /* The model split over the plan's stages, once: the memory plan and
     * the data-parallel table both read it. A schedule with more stages
     * than layers has none. */
    hy_model m;
    int have_model = model_for(run, p, &m, &merr) == HY_OK;
    int have_memory = 0;
    hy_fit_option chosen = { .makespan = -1 };
    double wall = seconds_on(CLOCK_MONOTONIC), cpu = seconds_on(CLOCK_PROCESS_CPUTIME_ID);
    int rc = plan_in_memory(rq, run, p, c, have_model ? &m : NULL, &pl, &mp, &available, &fit, why,
                            sizeof why, &have_memory, &chosen, &merr, err);
    wall = seconds_on(CLOCK_MONOTONIC) - wall;
    cpu = seconds_on(CLOCK_PROCESS_CPUTIME_ID) - cpu;
    if (rc != HY_OK) {
        if (have_model) hy_model_free(&m);
        return rc;
    }
    /* The SVG first: if it cannot be written, nothing else is printed. */
    if (rq->svg) rc = hy_plan_save_svg(&pl, rq->svg, err);
    if (rc == HY_OK && rq->json) {
        char *mem = have_memory ? hy_memplan_json(&mp, available, fit) : NULL;
        char *s = have_memory && !mem ? NULL : json_with_memory(&pl, mem);
        if (s) fprintf(out, "%s\n", s);
        else rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory");
        free(s);
        free(mem);
    } else if (rc == HY_OK) {
        if (hy_plan_write_timeline(out, &pl, &rq->timeline) != 0) rc = out_error(err);
        fputc('\n', out);
        hy_plan_write_summary(out, &pl);
        write_planning(out, &pl, wall, cpu);
        if (rq->svg) fprintf(out, "%-18s%s\n", "svg", rq->svg);
        if (have_memory) write_memory(out, &mp, available, fit, why);
        else fprintf(out, "\nmemory: not planned: %s\n", merr.msg);
        if (chosen.makespan >= 0 && chosen.fits)
            fprintf(out, "  fastest way to fit (recompute or an activation cap, weighed as tune "
                    "weighs them): cap %d with train.recompute = \"%s\", makespan %g with its "
                    "recompute priced in\n", chosen.cap, hy_recompute_name(chosen.recompute),
                    chosen.makespan);
    }
    if (have_memory) hy_memplan_free(&mp);
    if (rc == HY_OK && rq->replicas && !have_model) rc = hy_fail(err, merr.status, "%s", merr.msg);
    else if (rc == HY_OK && rq->replicas) rc = scale_table(rq, run, &m, &pl, c, out, err);
    if (have_model) hy_model_free(&m);
    hy_plan_free(&pl);
    return rc;
}

/* ---- Measured costs (--costs) ------------------------------------------- */

/* The layer split the runtime would use for schedule p on the run's
 * model: the run's when it has p's stage count, else the balanced one
 * (model.h). n holds p's stage count. */
static int split_of(const hy_run *run, const hy_sched_params *p, int *n, hy_error *err) {
    hy_model m;
    int rc = model_for(run, p, &m, err);
    if (rc != HY_OK) return rc;
    memcpy(n, m.n_layers, (size_t)m.stages * sizeof(int));
    hy_model_free(&m);
    return HY_OK;
}

/* Per-stage costs of schedule p from the measured ones: as measured when
 * p has the profiled split of the layers, else priced by the per-layer
 * model. bwd is the whole backward, or B's with p split (wgrad then W's:
 * the profile must have split too, for B and W to be known). */
static int measured_costs_for(const hy_run *run, const hy_measured_costs *mc,
                              const hy_sched_params *p, double **fwd, double **bwd,
                              double **wgrad, int *measured, hy_error *err) {
    int S = hy_sched_stages(p);
    *fwd = *bwd = *wgrad = NULL;
    if (p->split_backward && !mc->split)
        return hy_fail(err, HY_ERR_INPUT, "the profile measured whole backwards; profile a run "
                       "with schedule.split_backward to price the split passes");
    int *n = malloc((size_t)S * sizeof(int));
    *fwd = malloc((size_t)S * sizeof(double));
    *bwd = malloc((size_t)S * sizeof(double));
    *wgrad = malloc((size_t)S * sizeof(double));
    int rc = n && *fwd && *bwd && *wgrad ? split_of(run, p, n, err)
                                         : hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    if (rc == HY_OK) {
        *measured = S == mc->stages && memcmp(n, mc->n_layers, (size_t)S * sizeof(int)) == 0;
        /* how a re-priced split backward is cut in two */
        double share = hy_costs_wgrad_share(mc->bwd, mc->wgrad, mc->stages);
        for (int s = 0; s < S; s++) {
            double f, b, w;
            if (*measured) {
                f = mc->fwd[s], b = mc->bwd[s], w = mc->wgrad[s];
            } else {
                hy_cost_model_stage(&mc->model, s, S, n[s], &f, &b);   /* b: whole */
                w = b * share;
                b -= w;
            }
            (*fwd)[s] = f;
            (*bwd)[s] = p->split_backward ? b : b + w;
            (*wgrad)[s] = p->split_backward ? w : 0;
        }
    }
    free(n);
    if (rc != HY_OK) {
        free(*fwd);
        free(*bwd);
        free(*wgrad);
        *fwd = *bwd = *wgrad = NULL;
    }
    return rc;
}

static int measured_one(const cli_plan_request *rq, const hy_run *run,
                        const hy_measured_costs *mc, const hy_sched_params *p, FILE *out,
                        hy_error *err) {
    int S = hy_sched_stages(p);
    if (S != mc->stages)
        return hy_fail(err, HY_ERR_INPUT, "--costs %s: schedule.stages: the profile measured "
                       "%d stages (%s, P = %d) but this plan has %d (%s, P = %d); profile "
                       "this schedule, or add --compare to price every schedule from the "
                       "measured per-layer costs", rq->costs, mc->stages, hy_sched_name(mc->kind),
                       mc->ranks, S, hy_sched_name(p->kind), p->ranks);
    double *fwd = NULL, *bwd = NULL, *wgrad = NULL;
    int measured = 0;
    int rc = measured_costs_for(run, mc, p, &fwd, &bwd, &wgrad, &measured, err);
    if (rc != HY_OK) return rc;
    hy_costs c = { .comm = mc->comm, .fwd_stage = fwd, .bwd_stage = bwd, .wgrad_stage = wgrad };
    rc = run_one(rq, run, p, &c, out, err);
    if (rc == HY_OK && !rq->json)
        fprintf(out, "%-18s%s, ms per stage %s\n", "measured costs", rq->costs,
                measured ? "as profiled" : "from the per-layer model (this split differs "
                "from the profiled one)");
    free(fwd);
    free(bwd);
    free(wgrad);
    return rc;
}

static int measured_compare(const cli_plan_request *rq, const hy_run *run,
                            const hy_measured_costs *mc, hy_sched_params p, FILE *out,
                            hy_error *err) {
    if (rq->svg)
        return hy_fail(err, HY_ERR_INPUT, "--svg draws one schedule and "
                       "--compare shows four; drop one of them");
    if (rq->chunks <= 0 && p.kind != HY_SCHED_INTERLEAVED) p.chunks = 2 * p.waves;
    hy_costs costs[HY_COMPARE_ROWS];
    hy_error notes[HY_COMPARE_ROWS];
    const char *skip[HY_COMPARE_ROWS];
    double *arrays[3 * HY_COMPARE_ROWS] = {0};
    int rc = HY_OK;
    for (int k = 0; k < HY_COMPARE_ROWS && rc == HY_OK; k++) {
        hy_sched_params q = p;
        q.kind = (hy_sched_kind)(k % HY_SCHED_COUNT);
        q.split_backward = k >= HY_SCHED_COUNT;
        int measured = 0;
        double **a = &arrays[3 * k];
        hy_error_clear(&notes[k]);
        skip[k] = NULL;
        int kst = measured_costs_for(run, mc, &q, &a[0], &a[1], &a[2], &measured, &notes[k]);
        if (kst == HY_ERR_RUNTIME) rc = hy_fail(err, kst, "%s", notes[k].msg);
        else if (kst != HY_OK) skip[k] = notes[k].msg;
        costs[k] = (hy_costs){ .comm = mc->comm, .fwd_stage = a[0], .bwd_stage = a[1],
                               .wgrad_stage = q.split_backward ? a[2] : NULL };
    }
    hy_compare_row rows[HY_COMPARE_ROWS];
    /* Each schedule's memory, as without --costs (the measured costs
     * already hold the profiled run's recomputation). */
    compare_memory cm = { .run = run };
    hy_backend_choice chosen;
    if (rc == HY_OK) rc = plan_backend(run, &chosen, err);
    if (rc == HY_OK) {
        cm.mem = chosen.mem;
        rc = hy_plan_compare_costs_each(&p, costs, skip, compare_memory_of, &cm, rows, err);
    }
    if (rc == HY_OK && rq->json) {
        char *s = hy_compare_json(rows, HY_COMPARE_ROWS);
        if (!s) rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory");
        else fprintf(out, "%s\n", s);
        free(s);
    } else if (rc == HY_OK) {
        const hy_cost_model *m = &mc->model;
        fprintf(out, "P = %d, M = %d; measured costs from %s, in ms: per layer F %.4g, B %.4g; "
                "first stage extra F %.4g, B %.4g; last stage extra F %.4g, B %.4g; a transfer "
                "c = %.4g. Each schedule with the layer split the runtime would use.\n\n",
                p.ranks, p.micro_batches, rq->costs, m->layer_fwd, m->layer_bwd, m->first_fwd,
                m->first_bwd, m->last_fwd, m->last_bwd, mc->comm);
        hy_compare_write_table(out, rows, HY_COMPARE_ROWS);
    }
    for (int i = 0; i < 3 * HY_COMPARE_ROWS; i++) free(arrays[i]);
    return rc;
}

/* With the profile's measured costs: one plan, or every schedule priced. */
static int run_measured(const cli_plan_request *rq, const hy_run *run,
                        const hy_measured_costs *mc, FILE *out, hy_error *err) {
    hy_sched_params p = run->sched_params;
    apply_flags(rq, &p);
    return rq->compare ? measured_compare(rq, run, mc, p, out, err)
                       : measured_one(rq, run, mc, &p, out, err);
}

/* With uniform costs: one plan, or the four schedules side by side. */
static int run_uniform(const cli_plan_request *rq, const hy_run *run, FILE *out,
                       hy_error *err) {
    hy_sched_params p;
    hy_costs c;
    int rc = resolve(rq, run, &p, &c, err);
    if (rc != HY_OK) return rc;
    return rq->compare ? run_compare(rq, run, p, &c, out, err)
                       : run_one(rq, run, &p, &c, out, err);
}

/* The flags that do not go together, refused before any file is read or
 * anything printed. */
static int check_request(const cli_plan_request *rq, hy_error *err) {
    if (rq->replicas && rq->compare)
        return hy_fail(err, HY_ERR_INPUT, "--replicas prices one schedule at scale and "
                       "--compare shows four at one server; drop one of them");
    if (!rq->replicas && (rq->link_gbps > 0 || rq->link_latency_us >= 0 || rq->step_ms > 0))
        return hy_fail(err, HY_ERR_INPUT, "--link-gbps, --link-latency-us and --step-ms price "
                       "data parallelism; add --replicas N,N,... (e.g. 1,4,16,64)");
    if (rq->replicas) {
        int counts[HY_SCALE_MAX_ROWS], n = 0;
        int rc = hy_scale_parse_counts("--replicas", rq->replicas, counts, &n, err);
        if (rc != HY_OK) return rc;
        if (!rq->costs && !(rq->step_ms > 0))
            return hy_fail(err, HY_ERR_INPUT, "--replicas needs the time of one step on one "
                           "server (--step-ms MS: `hanayo train` prints ms per step), or "
                           "measured costs (--costs SUMMARY.json from hanayo profile)");
    }
    if (rq->costs && (rq->fwd_cost >= 0 || rq->bwd_cost >= 0 || rq->comm_cost >= 0))
        return hy_fail(err, HY_ERR_INPUT, "--costs takes every cost from the profile; drop "
                       "--fwd-cost, --bwd-cost and --comm-cost");
    return HY_OK;
}

/* --svg must be none of the files the plan or its config's run reads
 * (outfile.h): the config, --costs, the run's data and checkpoints. */
static int check_svg(const cli_plan_request *rq, const hy_run *run, hy_error *err) {
    hy_outfile_inputs inputs;
    hy_outfile_inputs_init(&inputs);
    int rc = hy_outfile_inputs_of_run(&inputs, run, NULL, err);
    if (rc == HY_OK)
        rc = hy_outfile_inputs_add(&inputs, rq->costs, "--costs, the profile's summary", err);
    if (rc == HY_OK) rc = hy_outfile_check(&inputs, "--svg", rq->svg, 0, err);
    hy_outfile_inputs_free(&inputs);
    return rc;
}

int cli_plan_run(const cli_plan_request *rq, FILE *out, hy_error *err) {
    int rc = check_request(rq, err);
    if (rc != HY_OK) return rc;
    /* The profile before the config: when both are at fault, the
     * profile's is the error reported. */
    hy_measured_costs mc;
    if (rq->costs && (rc = hy_measured_costs_load(&mc, rq->costs, err)) != HY_OK) return rc;
    hy_config cfg;
    hy_config_init(&cfg);
    hy_run run;
    memset(&run, 0, sizeof run);
    rc = hy_config_load(&cfg, rq->config, rq->sets, rq->n_sets, err);
    if (rc == HY_OK) rc = hy_run_resolve(&run, &cfg, err);
    hy_config_free(&cfg);
    if (rc == HY_OK && rq->svg) rc = check_svg(rq, &run, err);
    if (rc == HY_OK)
        rc = rq->costs ? run_measured(rq, &run, &mc, out, err) : run_uniform(rq, &run, out, err);
    if (rc == HY_OK && (fflush(out) != 0 || ferror(out))) rc = out_error(err);
    hy_run_free(&run);
    if (rq->costs) hy_measured_costs_free(&mc);
    return rc;
}
