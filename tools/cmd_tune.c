/*
 * cmd_tune.c — `hanayo tune` (cmd_tune.h): its flags, the measurement,
 * the search, the printed ranking and the tuned config --apply writes.
 *
 * Loads the config and takes its costs: measured, by profiling it briefly
 * (lib/profile.h, hy_profile_run, writing no files; a second profile with
 * split backward when the config does not split it, for W's share), or
 * modelled (lib/tune.h, hy_tune_model_costs: the model's FLOPs at an
 * assumed rate) when asked, or when the run cannot be profiled here (see
 * choose_costs). Then searches with hy_tune_search under the memory
 * budget, prints the best schedules beside the config as it is, and with
 * --apply writes the config with the best candidate's schedule keys.
 */
#include "cmd_tune.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "atomicfile.h"
#include "backend.h"
#include "cli.h"
#include "cmd_profile.h"
#include "config.h"
#include "costs.h"
#include "error.h"
#include "infile.h"
#include "outfile.h"
#include "profile.h"
#include "run.h"
#include "schedule.h"
#include "train.h"
#include "tune.h"

static const char usage_tune[] =
    "usage: hanayo tune CONFIG [--steps N] [--top K] [--apply OUT.json]\n"
    "                   [--memory-gb G] [--schedule K] [--set key=value]...\n"
    "                   [--costs auto|measured|model] [--tflops T] [--link-gbps G]\n"
    "\n"
    "Profiles CONFIG briefly (as hanayo profile, writing no files), fits a\n"
    "per-layer cost model to the measured stage costs (a layer's F and B, what\n"
    "the first and the last stage cost beyond their layers, a transfer), or\n"
    "models those costs from the model's FLOPs (--costs), and searches with\n"
    "the simulator: schedule (gpipe, 1f1b, interleaved v = 2..4,\n"
    "hanayo W = 1..4), its backward whole or split (W's share measured by a\n"
    "second profile with split backward), micro-batches M = P, 2P, .. 8P of\n"
    "the size B that keeps CONFIG's global batch M x B (what is trained stays),\n"
    "the layer split, and the fastest way each fits the memory budget: the\n"
    "least activation recomputation (none, selective, full), or less within a\n"
    "cap on the activations its order holds (schedule.max_activations).\n"
    "Candidates over it even with full recompute and the smallest cap are\n"
    "dropped. Candidates are ranked by predicted time per token; each\n"
    "schedule is shown by its best M and split, beside the config as it is.\n"
    "\n"
    "  --costs WHICH       measured: profile CONFIG here; model: price its FLOPs\n"
    "                      at --tflops and its transfers at --link-gbps, running\n"
    "                      nothing (a GPU run unless backend is \"cpu\"); auto\n"
    "                      (default): measured, or modelled with a notice when\n"
    "                      the run does not fit this machine (or asks for CUDA\n"
    "                      where there is none) and backend is not \"cpu\"\n"
    "  --tflops T          modelled: sustained TFLOP/s of one rank's device\n"
    "                      (default on a GPU: 396, an H200's dense bf16 989 at an\n"
    "                      assumed 40% MFU; the CPU has no default)\n"
    "  --link-gbps G       modelled: a transfer's link in Gb/s (default 3600,\n"
    "                      NVLink 4's 450 GB/s each way)\n"
    "  --steps N           measured steps, 1..1000 (default 5)\n"
    "  --top K             print the best K schedules, 1..100 (default 5)\n"
    "  --apply OUT.json    write CONFIG with the best candidate's schedule.kind,\n"
    "                      waves or chunks, micro_batches, micro_batch_size,\n"
    "                      split, max_activations and train.recompute (--set\n"
    "                      values are measured with but not written)\n"
    "  --memory-gb G       memory per rank in GiB (default: the GPU's memory,\n"
    "                      on the CPU the host's memory over the ranks; modelled\n"
    "                      on a GPU, the assumed H200's 141 GB)\n"
    "  --schedule K        search only this schedule\n"
    "  --json              print the ranking as one JSON object instead of the\n"
    "                      report: each candidate's schedule keys, recompute,\n"
    "                      max_activations, predicted step and memory\n"
    "  --set key=value     override a config key for the measurement\n"
    "  --slow-stage S:SEC  test hook, as in hanayo profile\n";

/* --costs: where the costs come from. */
enum { COSTS_AUTO, COSTS_MEASURED, COSTS_MODEL };
static const char *const costs_names[] = {"auto", "measured", "model", NULL};

typedef struct {
    hy_profile_opts profile;   /* as hanayo profile's (5 steps) */
    int costs;                 /* COSTS_* */
    double tflops, link_gbps;  /* modelled costs' rate and link; 0: the default */
    int top;                   /* candidates printed (default 5) */
    double memory_gb;          /* per rank; 0: the device's */
    unsigned kinds;            /* as hy_tune_opts */
    const char *apply;         /* write the tuned config here, or NULL */
    int json;                  /* --json: the ranking as JSON */
    hy_flag_list sets;
} tune_args;

/* --schedule K: search only that kind (a bit of hy_tune_opts.kinds). */
static int parse_tune_schedule(const char *name, const char *v, void *field, hy_error *err) {
    (void)name;
    hy_sched_kind k;
    int rc = hy_sched_parse(v, &k, err);
    if (rc == HY_OK) *(unsigned *)field = 1u << k;
    return rc;
}

#define TUNE(field) offsetof(tune_args, field)
static const hy_flag tune_flags[] = {
    CLI_PROFILE_MEASURE_FLAGS(tune_args, profile),
    { .name = "--top", .kind = HY_FLAG_INT, .off = TUNE(top), .example = "5",
      .lo = 1, .hi = 100 },
    { .name = "--apply", .kind = HY_FLAG_STRING, .off = TUNE(apply), .example = "tuned.json" },
    { .name = "--json", .kind = HY_FLAG_SWITCH, .off = TUNE(json) },
    { .name = "--memory-gb", .kind = HY_FLAG_REAL, .off = TUNE(memory_gb), .example = "80",
      .lo = 0, .lo_open = 1, .hi = 1e12 },
    { .name = "--schedule", .kind = HY_FLAG_CUSTOM, .off = TUNE(kinds), .example = "hanayo",
      .parse = parse_tune_schedule },
    { .name = "--costs", .kind = HY_FLAG_CHOICE, .off = TUNE(costs), .example = "model",
      .choices = costs_names },
    { .name = "--tflops", .kind = HY_FLAG_REAL, .off = TUNE(tflops), .example = "400",
      .lo = 0, .lo_open = 1, .hi = 1e9 },
    { .name = "--link-gbps", .kind = HY_FLAG_REAL, .off = TUNE(link_gbps), .example = "3600",
      .lo = 0, .lo_open = 1, .hi = 1e9 },
    { .name = NULL },
};
static const hy_args_spec tune_spec = {
    .command = "tune", .flags = tune_flags, .operand = "config file",
    .synopsis = "hanayo tune CONFIG [--steps N] [--apply OUT.json]" };

/* ---- Writing the tuned config ---------------------------------------------- */

int cli_tune_apply(const char *config, const char *const *sets, int n_sets,
                   const hy_tune_candidate *cand, const char *out_path, hy_error *err) {
    json_error_t je;
    json_t *root = hy_infile_json(config, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return hy_fail(err, HY_ERR_INPUT, "%s: cannot read it back to write the tuned config: %s",
                       config, je.text);
    int bad = !json_is_object(root);
    json_t *sc = bad ? NULL : json_object_get(root, "schedule");
    if (!bad && !sc) {
        sc = json_object();
        bad |= json_object_set_new(root, "schedule", sc);
    }
    bad |= !json_is_object(sc);
    if (bad) {
        json_decref(root);
        return hy_fail(err, HY_ERR_INPUT, "%s: the top level and \"schedule\" must be objects "
                       "to write a tuned config", config);
    }
    json_t *split = json_array();
    for (int i = 0; split && i < cand->stages; i++)
        bad |= json_array_append_new(split, json_integer(cand->split[i]));
    bad |= json_object_set_new(sc, "kind", json_string(hy_sched_name(cand->kind)));
    if (cand->kind == HY_SCHED_HANAYO) bad |= json_object_set_new(sc, "waves", json_integer(cand->waves));
    if (cand->kind == HY_SCHED_INTERLEAVED)
        bad |= json_object_set_new(sc, "chunks", json_integer(cand->chunks));
    bad |= json_object_set_new(sc, "micro_batches", json_integer(cand->micro_batches));
    bad |= json_object_set_new(sc, "micro_batch_size", json_integer(cand->micro_batch_size));
    bad |= json_object_set_new(sc, "split", split);
    bad |= json_object_set_new(sc, "split_backward", json_boolean(cand->split_backward));
    bad |= json_object_set_new(sc, "max_activations", json_integer(cand->max_activations));
    /* Rounded as the search rounded it (lib/tune.c, comm_units): the
     * tuned run builds the order that was priced. */
    bad |= json_object_set_new(sc, "comm_cost", json_real(round(cand->comm_cost * 1e4) / 1e4));
    json_t *train = bad ? NULL : json_object_get(root, "train");
    if (!bad && !train) {
        train = json_object();
        bad |= json_object_set_new(root, "train", train);
    }
    if (!json_is_object(train)) {
        json_decref(root);
        return hy_fail(err, HY_ERR_INPUT, "%s: \"train\" must be an object to write a tuned "
                       "config", config);
    }
    bad |= json_object_set_new(train, "recompute", json_string(hy_recompute_name(cand->recompute)));
    char *text = bad ? NULL : json_dumps(root, JSON_PRESERVE_ORDER | JSON_INDENT(2));
    json_decref(root);
    if (!text) return hy_fail(err, HY_ERR_RUNTIME, "out of memory writing the tuned config");
    hy_atomic_file af;
    int rc = hy_atomic_open(&af, out_path, HY_ERR_INPUT, err);
    if (!rc) rc = hy_atomic_write(&af, text, strlen(text), err);
    if (!rc) rc = hy_atomic_write(&af, "\n", 1, err);
    free(text);
    /* The written file must load as it was measured before it takes the
     * name (the temporary holds it all: no stream, nothing buffered). */
    if (!rc) {
        hy_config k;
        hy_config_init(&k);
        hy_error e;
        if (hy_config_load(&k, af.tmp, sets, n_sets, &e) != HY_OK) {
            hy_atomic_abort(&af);
            rc = hy_fail(err, HY_ERR_RUNTIME, "the tuned config does not load (a bug): %s", e.msg);
        }
        hy_config_free(&k);
    }
    if (!rc) rc = hy_atomic_commit(&af, err);
    return rc;
}

/* ---- The search and its report ---------------------------------------------- */

/* W's share of a whole backward in profile p, as measured (costs.h). */
static int profile_wgrad_share(const hy_profile *p, double *share, hy_error *err) {
    int S = p->sched.stages;
    double *b = malloc(2 * (size_t)S * sizeof *b), *w = b + S;
    if (!b) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    for (int s = 0; s < S; s++) {
        b[s] = p->stage[s].bwd;
        w[s] = p->stage[s].wgrad;
    }
    *share = hy_costs_wgrad_share(b, w, S);
    free(b);
    return HY_OK;
}

/* What W costs of a backward: from the profile when the config splits it,
 * else from a second, equally long profile of the same config with split
 * backward, so that split candidates are priced from a measurement. */
static int wgrad_share(const char *config, const tune_args *a, const hy_profile *p,
                       double *share, hy_error *err) {
    if (p->sched.split) return profile_wgrad_share(p, share, err);
    const char **sets = malloc(((size_t)a->sets.n + 1) * sizeof *sets);
    if (!sets) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    for (int i = 0; i < a->sets.n; i++) sets[i] = a->sets.items[i];
    sets[a->sets.n] = "schedule.split_backward=true";
    hy_config c;
    hy_config_init(&c);
    hy_run run;
    memset(&run, 0, sizeof run);
    hy_profile q;
    memset(&q, 0, sizeof q);
    int rc = hy_config_load(&c, config, sets, a->sets.n + 1, err);
    if (!rc) rc = hy_run_resolve(&run, &c, err);
    if (!rc) rc = hy_profile_run(&q, &run, &a->profile, err);
    if (!rc) rc = profile_wgrad_share(&q, share, err);
    hy_profile_free(&q);
    hy_run_free(&run);
    hy_config_free(&c);
    free(sets);
    return rc;
}

static void write_candidate(FILE *f, const char *tag, const hy_tune_candidate *x) {
    char name[40], split[160];
    if (x->kind == HY_SCHED_HANAYO) snprintf(name, sizeof name, "hanayo W=%d", x->waves);
    else if (x->kind == HY_SCHED_INTERLEAVED) snprintf(name, sizeof name, "interleaved v=%d", x->chunks);
    else snprintf(name, sizeof name, "%s", hy_sched_name(x->kind));
    if (x->split_backward) {
        size_t n = strlen(name);
        snprintf(name + n, sizeof name - n, " +split");
    }
    size_t used = 0;
    split[0] = '\0';
    for (int i = 0; i < x->stages && used + 8 < sizeof split; i++)
        used += (size_t)snprintf(split + used, sizeof split - used, "%s%d", i ? " " : "", x->split[i]);
    if (used + 8 >= sizeof split) snprintf(split + used, sizeof split - used, " ...");
    char cap[16] = "-";
    if (x->max_activations > 0) snprintf(cap, sizeof cap, "%d", x->max_activations);
    fprintf(f, "  %4s  %-22s %4d %4d  %-24s %-9s %4s %9.2f %9.0f %8.4f %8.2f %8.2f\n", tag, name,
            x->micro_batches, x->micro_batch_size, split, hy_recompute_name(x->recompute), cap,
            x->step_ms, x->tokens / (x->step_ms / 1e3), x->bubble, x->act_bytes / 1048576.0,
            x->mem_bytes / 1048576.0);
}

/* Candidate x as a JSON object (the keys --apply writes, and the
 * prediction), or NULL when out of memory. */
static json_t *candidate_json(const hy_tune_candidate *x) {
    json_t *split = json_array(), *o = json_object();
    int bad = !split || !o;
    for (int i = 0; !bad && i < x->stages; i++)
        bad |= json_array_append_new(split, json_integer(x->split[i]));
    if (bad) {
        json_decref(split);
        json_decref(o);
        return NULL;
    }
    bad |= json_object_set_new(o, "kind", json_string(hy_sched_name(x->kind)));
    bad |= json_object_set_new(o, "waves", json_integer(x->waves));
    bad |= json_object_set_new(o, "chunks", json_integer(x->chunks));
    bad |= json_object_set_new(o, "split_backward", json_boolean(x->split_backward));
    bad |= json_object_set_new(o, "micro_batches", json_integer(x->micro_batches));
    bad |= json_object_set_new(o, "micro_batch_size", json_integer(x->micro_batch_size));
    bad |= json_object_set_new(o, "split", split);
    bad |= json_object_set_new(o, "comm_cost", json_real(round(x->comm_cost * 1e4) / 1e4));
    bad |= json_object_set_new(o, "recompute", json_string(hy_recompute_name(x->recompute)));
    bad |= json_object_set_new(o, "max_activations", json_integer(x->max_activations));
    bad |= json_object_set_new(o, "peak_activations", json_integer(x->peak));
    bad |= json_object_set_new(o, "step_ms", json_real(x->step_ms));
    bad |= json_object_set_new(o, "tokens_per_s", json_real(x->tokens / (x->step_ms / 1e3)));
    bad |= json_object_set_new(o, "bubble", json_real(x->bubble));
    bad |= json_object_set_new(o, "act_bytes", json_real(x->act_bytes));
    bad |= json_object_set_new(o, "mem_bytes", json_real(x->mem_bytes));
    if (bad) {
        json_decref(o);
        return NULL;
    }
    return o;
}

/* --json: the ranking (the best `top`), the config as it is and the
 * search's extent as one object on one line. */
static int write_json(FILE *out, const hy_tune_result *res, int top, double budget,
                      hy_error *err) {
    json_t *root = json_object(), *best = json_array();
    int bad = !root || !best;
    for (int i = 0; !bad && i < top; i++) {
        json_t *c = candidate_json(&res->best[i]);
        bad |= !c || json_array_append_new(best, c);
    }
    json_t *now = bad ? NULL : candidate_json(&res->current);
    if (!bad && now) {
        bad |= json_object_set_new(root, "budget_bytes", json_real(budget));
        bad |= json_object_set_new(root, "searched", json_integer(res->searched));
        bad |= json_object_set_new(root, "over_budget", json_integer(res->over_budget));
        bad |= json_object_set_new(root, "outrun", json_integer(res->outrun));
        bad |= json_object_set_new(root, "best", best);
        best = NULL;
        bad |= json_object_set_new(root, "now", now);
    } else {
        json_decref(now);
        bad = 1;
    }
    char *text = bad ? NULL : json_dumps(root, JSON_PRESERVE_ORDER | JSON_COMPACT);
    json_decref(best);
    json_decref(root);
    if (!text) return hy_fail(err, HY_ERR_RUNTIME, "out of memory writing the JSON");
    fprintf(out, "%s\n", text);
    free(text);
    return HY_OK;
}

/* Candidate 1 as the --set flags that run it (what --apply writes). */
static void write_sets(FILE *f, const hy_tune_candidate *x) {
    fprintf(f, "\ncandidate 1: --set schedule.kind=%s", hy_sched_name(x->kind));
    if (x->kind == HY_SCHED_HANAYO) fprintf(f, " --set schedule.waves=%d", x->waves);
    if (x->kind == HY_SCHED_INTERLEAVED) fprintf(f, " --set schedule.chunks=%d", x->chunks);
    fprintf(f, " --set schedule.micro_batches=%d --set schedule.micro_batch_size=%d --set "
            "schedule.split=", x->micro_batches, x->micro_batch_size);
    for (int i = 0; i < x->stages; i++) fprintf(f, "%s%d", i ? "," : "[", x->split[i]);
    fprintf(f, "] --set schedule.split_backward=%s --set schedule.comm_cost=%.4f --set "
            "schedule.max_activations=%d --set train.recompute=%s\n",
            x->split_backward ? "true" : "false", round(x->comm_cost * 1e4) / 1e4,
            x->max_activations, hy_recompute_name(x->recompute));
}

/* Where the search's costs come from, and what it plans on. */
typedef struct {
    int modelled;                /* 1: from the model's FLOPs, 0: a profile's */
    char notice[1200];           /* --costs auto chose the model: why; else empty */
    hy_backend_choice target;    /* the backend the candidates' memory is planned on */
    double budget;               /* bytes per rank */
    char budget_why[160];
    double tflops, link_gbps;    /* modelled: the assumed rate and link */
    char rate_why[160];
    hy_profile p;                /* measured: the profile */
} tune_costs;

/* Measured or modelled (--costs; tc->modelled). With auto: measured when
 * the run can be profiled here, else modelled with tc->notice saying why:
 * when its memory plan does not fit this machine, or it asks for the CUDA
 * backend where there is none. Not for a run that names the CPU backend:
 * this machine is where it would train, and a CPU run that does not fit
 * it is refused, as train refuses it, when it is measured. */
static int choose_costs(const tune_args *a, const hy_run *run, tune_costs *tc, hy_error *err) {
    hy_error e;
    int described = hy_backend_describe(&run->backend, &tc->target, &e) == HY_OK;
    tc->modelled = a->costs == COSTS_MODEL;
    if (a->costs == COSTS_AUTO && run->backend.kind != HY_BACKEND_CPU) {
        int rc = described ? hy_train_fits(run, &tc->target, 1, &e) : HY_ERR_INPUT;
        if (rc == HY_ERR_RUNTIME) return hy_fail(err, rc, "%s", e.msg);
        tc->modelled = rc != HY_OK;
        if (tc->modelled)
            snprintf(tc->notice, sizeof tc->notice, "costs modelled, not measured: the run "
                     "cannot be profiled here (%s); --costs measured insists on a profile",
                     e.msg);
    }
    if (!tc->modelled && (a->tflops > 0 || a->link_gbps > 0))
        return hy_fail(err, HY_ERR_INPUT, "--tflops and --link-gbps price modelled costs; add "
                       "--costs model, or drop them to measure");
    if (!tc->modelled && !described) return hy_fail(err, e.status, "%s", e.msg);
    return HY_OK;
}

/* The modelled machine: the CUDA backend's memory at the assumed (or
 * given) rate, budget and link, or, for a run that names the CPU backend,
 * this host's memory at the rate --tflops must give. */
static int model_machine(const tune_args *a, const hy_run *run, tune_costs *tc, hy_error *err) {
    tc->link_gbps = a->link_gbps > 0 ? a->link_gbps : HY_COSTS_LINK_GBPS;
    if (run->backend.kind == HY_BACKEND_CPU) {
        if (!(a->tflops > 0))
            return hy_fail(err, HY_ERR_INPUT, "modelled costs on the CPU backend need its rate: "
                           "give --tflops T, the TFLOP/s one rank sustains (or measure: --costs "
                           "measured)");
        tc->tflops = a->tflops;
        snprintf(tc->rate_why, sizeof tc->rate_why, "--tflops");
        cli_memory_budget(a->memory_gb, run->sched_params.ranks, &tc->target, &tc->budget,
                          tc->budget_why, sizeof tc->budget_why);
        return HY_OK;
    }
    memset(&tc->target, 0, sizeof tc->target);
    tc->target.cuda = 1;
    snprintf(tc->target.why, sizeof tc->target.why, "cuda (modelled)");
    hy_backend_cuda_memory(&tc->target.mem);
    tc->tflops = a->tflops > 0 ? a->tflops : HY_COSTS_GPU_PEAK_TFLOPS * HY_COSTS_GPU_MFU;
    if (a->tflops > 0) snprintf(tc->rate_why, sizeof tc->rate_why, "--tflops");
    else snprintf(tc->rate_why, sizeof tc->rate_why, "assumed: an H200's dense bf16 peak of %.0f "
                  "at %.0f%% MFU; --tflops sets it", HY_COSTS_GPU_PEAK_TFLOPS,
                  100 * HY_COSTS_GPU_MFU);
    if (a->memory_gb > 0) {
        tc->budget = a->memory_gb * 1073741824.0;
        snprintf(tc->budget_why, sizeof tc->budget_why, "--memory-gb");
    } else {
        tc->budget = HY_COSTS_GPU_MEMORY_BYTES;
        snprintf(tc->budget_why, sizeof tc->budget_why, "assumed: an H200's %.0f GB, a GPU per "
                 "rank; --memory-gb sets it", HY_COSTS_GPU_MEMORY_BYTES / 1e9);
    }
    return HY_OK;
}

/* The costs and the options of the search (o), measured or modelled. */
static int take_costs(const char *config, const tune_args *a, const hy_run *run, tune_costs *tc,
                      hy_cost_model *m, hy_tune_opts *o, hy_error *err) {
    o->kinds = a->kinds;
    o->wgrad_share = -1;
    if (tc->modelled) {
        int rc = model_machine(a, run, tc, err);
        if (rc) return rc;
        hy_tune_model_costs(run, &tc->target.mem, tc->tflops, tc->link_gbps, m, &o->wgrad_share);
        o->budget_bytes = tc->budget;
        o->overhead_ms = 0;
        o->mem = &tc->target.mem;
        o->priced_recompute = HY_RECOMPUTE_NONE;
        return HY_OK;
    }
    cli_memory_budget(a->memory_gb, run->sched_params.ranks, &tc->target, &tc->budget,
                      tc->budget_why, sizeof tc->budget_why);
    int rc = hy_profile_run(&tc->p, run, &a->profile, err);
    if (!rc) rc = wgrad_share(config, a, &tc->p, &o->wgrad_share, err);
    if (rc) return rc;
    *m = tc->p.model;
    o->budget_bytes = tc->budget;
    o->overhead_ms = fmax(0, tc->p.wall_ms - tc->p.makespan);
    o->mem = &tc->target.mem;
    o->priced_recompute = run->train.recompute;
    return HY_OK;
}

/* The lines above the ranking: what the costs are and where they come
 * from, the budget and the search's extent. */
static void write_report_head(FILE *out, const char *config, const hy_run *run,
                              const tune_costs *tc, const hy_cost_model *m, const hy_tune_opts *o,
                              const hy_tune_result *res) {
    const hy_schedule *s = &run->sched;
    if (tc->notice[0]) fprintf(out, "%s\n", tc->notice);
    fprintf(out, "tune: %s, %s%s P = %d, M = %d", config, tc->modelled ? "" : "measured ",
            hy_sched_name(s->kind), s->ranks, s->micro_batches);
    if (s->kind == HY_SCHED_HANAYO) fprintf(out, ", W = %d", s->waves);
    if (s->kind == HY_SCHED_INTERLEAVED) fprintf(out, ", v = %d", s->chunks);
    fprintf(out, ", split");
    for (int i = 0; i < s->stages; i++) fprintf(out, " %d", run->model.n_layers[i]);
    if (tc->modelled)
        fprintf(out, ": costs modelled, not measured: the model's FLOPs at %.4g TFLOP/s a rank "
                "(%s), a transfer's bytes over %.4g Gb/s (%s), on %s\n", tc->tflops, tc->rate_why,
                tc->link_gbps, tc->link_gbps == HY_COSTS_LINK_GBPS ? "assumed: NVLink 4's 450 GB/s "
                "each way; --link-gbps sets it" : "--link-gbps", tc->target.why);
    else
        fprintf(out, ": %.2f ms per step, %.0f tokens/s (%d steps after %d warm-up; %s)\n",
                tc->p.wall_ms, tc->p.tokens / (tc->p.wall_ms / 1e3), tc->p.steps,
                HY_PROFILE_WARMUP, tc->target.why);
    fprintf(out, "cost model, ms: a layer F %.3f B %.3f; the first stage's extra F %.3f B %.3f; "
            "the last stage's extra F %.3f B %.3f; a transfer %.3f\n", m->layer_fwd,
            m->layer_bwd, m->first_fwd, m->first_bwd, m->last_fwd, m->last_bwd, m->comm);
    if (tc->modelled)
        fprintf(out, "the rest of the step (exchange, clip, optimizer, batch loading): not "
                "modelled, taken as 0\nsplit backward: W at %.0f%% of a backward (its weight "
                "products' share of the FLOPs)\n", 100 * o->wgrad_share);
    else
        fprintf(out, "the rest of the step (exchange, clip, optimizer, batch loading): %.2f ms, "
                "taken as fixed\nsplit backward: W measured at %.0f%% of a backward%s\n",
                o->overhead_ms, 100 * o->wgrad_share,
                tc->p.sched.split ? "" : " (a second profile, with split backward)");
    fprintf(out, "memory budget: %.2f GiB per rank (%s)\n", tc->budget / 1073741824.0,
            tc->budget_why);
    fprintf(out, "searched %d candidates (schedule, W 1..4 or v 2..4, whole or split backward, "
            "M = %d..%d at the global batch of %d sequences, layer splits, recompute and "
            "activation caps); %d over the memory budget, %d outrun (over it, and no cap that "
            "fits could beat a faster candidate of their schedule)\n", res->searched, s->ranks,
            HY_TUNE_MAX_M_FACTOR * s->ranks, s->micro_batches * run->micro_batch_size,
            res->over_budget, res->outrun);
    fprintf(out, "ranked by predicted time per token; each schedule by its best M and split, "
            "with the fastest way it fits: the least recompute, or less within an activation "
            "cap (cap: schedule.max_activations)\n\n");
}

/* The tuning of the config file `config` as a asks, printed to out (see
 * the top of this file). */
static int run_tune(const char *config, const tune_args *a, FILE *out, hy_error *err) {
    hy_config c;
    hy_run run;
    memset(&run, 0, sizeof run);
    tune_costs tc;
    memset(&tc, 0, sizeof tc);
    int rc = cli_load_config(&c, config, &a->sets, err);
    if (!rc) rc = hy_run_resolve(&run, &c, err);
    hy_config_free(&c);
    if (!rc) rc = choose_costs(a, &run, &tc, err);
    /* The output is checked before the measurement: it must be none of
     * the run's inputs (the config itself, above all: outfile.h), and
     * opening (and dropping) the temporary file proves its directory can
     * be written. */
    if (!rc && a->apply) {
        hy_outfile_inputs inputs;
        hy_outfile_inputs_init(&inputs);
        rc = hy_outfile_inputs_of_run(&inputs, &run, NULL, err);
        /* Modelled costs read no shard: a run tuned before its data is
         * there is held against the config (and what files there are). */
        if (rc == HY_ERR_INPUT && tc.modelled) {
            hy_outfile_inputs_free(&inputs);
            rc = hy_outfile_inputs_add(&inputs, run.config_path, "the config", err);
            if (!rc) rc = hy_outfile_inputs_add_tree(&inputs, run.checkpoint.dir,
                                                     "a file in checkpoint.dir", err);
        }
        if (!rc) rc = hy_outfile_check(&inputs, "--apply", a->apply, 0, err);
        hy_outfile_inputs_free(&inputs);
        hy_atomic_file af;
        if (!rc) rc = hy_atomic_open(&af, a->apply, HY_ERR_INPUT, err);
        if (!rc) hy_atomic_abort(&af);
    }
    hy_tune_result res;
    memset(&res, 0, sizeof res);
    hy_cost_model m;
    hy_tune_opts o;
    memset(&o, 0, sizeof o);
    if (!rc) rc = take_costs(config, a, &run, &tc, &m, &o, err);
    if (!rc) rc = hy_tune_search(&run, &m, &o, &res, err);
    int top = a->top < res.n_best ? a->top : res.n_best;
    if (!rc && a->json) rc = write_json(out, &res, top, o.budget_bytes, err);
    if (!rc && a->json && a->apply)
        rc = cli_tune_apply(config, a->sets.items, a->sets.n, &res.best[0], a->apply, err);
    if (!rc && !a->json) {
        write_report_head(out, config, &run, &tc, &m, &o, &res);
        fprintf(out, "  %4s  %-22s %4s %4s  %-24s %-9s %4s %9s %9s %8s %8s %8s\n", "#", "schedule",
                "M", "B", "split", "recompute", "cap", "step ms", "tokens/s", "bubble", "act MiB",
                "mem MiB");
        for (int i = 0; i < top; i++) {
            char tag[16];
            snprintf(tag, sizeof tag, "%d", i + 1);
            write_candidate(out, tag, &res.best[i]);
        }
        write_candidate(out, "now", &res.current);
        const char *over = res.current.mem_bytes > o.budget_bytes ? "; over the memory budget" : "";
        if (tc.modelled)
            fprintf(out, "  (now: the config as it is, predicted the same way%s)\n", over);
        else
            fprintf(out, "  (now: the config as it is, predicted the same way%s; measured %.2f "
                    "ms)\n", over, tc.p.wall_ms);
        if (res.n_best > 0) write_sets(out, &res.best[0]);
        if (a->apply) {
            rc = cli_tune_apply(config, a->sets.items, a->sets.n, &res.best[0], a->apply, err);
            if (!rc) fprintf(out, "\nwrote %s: candidate 1\n", a->apply);
        }
    }
    hy_tune_result_free(&res);
    hy_profile_free(&tc.p);
    hy_run_free(&run);
    return rc;
}

static int cmd_tune(const cli_command *cmd, int argc, char **argv, hy_error *err) {
    tune_args a = { .costs = COSTS_AUTO, .top = 5, .memory_gb = 0, .kinds = 0, .apply = NULL,
                    .sets = { 0 } };
    hy_profile_opts_init(&a.profile);   /* 5 steps: fewer let one hiccup of the
                                           machine decide the split */
    hy_args_result got;
    int rc = cli_read_args(cmd, argc, argv, &a, &got, err);
    if (rc == HY_OK && !got.help) rc = run_tune(got.operand, &a, stdout, err);
    hy_flag_list_free(&a.sets);
    return rc;
}

const cli_command cli_tune_command = {"tune", cmd_tune, usage_tune, &tune_spec, NULL, 0};
