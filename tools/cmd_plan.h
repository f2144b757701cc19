/*
 * cmd_plan.h — the `hanayo plan` command's request and entry point
 * (tools/cmd_plan.c), which tests/test_plan.c also calls directly.
 */
#ifndef HY_CMD_PLAN_H
#define HY_CMD_PLAN_H

#include <stdio.h>

#include "error.h"
#include "plan.h"
#include "schedule.h"

/* Everything the CLI parsed, already checked for syntax and range. Numeric
 * fields at 0 (costs at a negative value) were not given: the config file,
 * then --set, then these flags decide, in that order. */
typedef struct {
    const char *config;           /* config file, or NULL for defaults */
    const char *const *sets;      /* "key=value" overrides, like --set */
    int n_sets;
    int has_kind;
    hy_sched_kind kind;
    int ranks, micro_batches, waves, chunks;
    double fwd_cost, bwd_cost, comm_cost;
    int split_backward;           /* 1: split, else the config decides */
    double wgrad_cost;            /* W's share of bwd_cost when split; < 0: half */
    int max_activations;          /* the cap on a rank's activations; < 0: the config's */
    int json;                     /* print the JSON instead of the timeline */
    int compare;                  /* print the comparison table instead */
    const char *svg;              /* also write the SVG here, or NULL */
    /* A profile's summary.json (measured.h): simulate with its measured
     * costs (ms) instead of f, b, c. One plan takes its per-stage costs
     * and needs the profiled stage count; --compare prices every
     * schedule from its per-layer cost model, each with the layer split
     * the runtime would use. NULL: uniform costs. */
    const char *costs;
    hy_timeline_opts timeline;    /* width 0: plan.h's default */
    /* Data parallelism on paper (scale.h): replica counts "1,4,16,64" to
     * price, or NULL; each rank's link in Gb/s and per-step latency in us
     * (0 and < 0: 400 and 5); step_ms, the one-server step the uniform
     * costs are scaled to (with --costs the measured ms are used). The
     * model's gradients come from the config. */
    const char *replicas;
    double link_gbps, link_latency_us, step_ms;
    /* The memory plan (memplan.h) is held against this many GiB per rank;
     * 0: the memory of the backend the run would get. */
    double memory_gb;
} cli_plan_request;

/* Every field "not given", no output options, the default timeline
 * width. */
void cli_plan_request_init(cli_plan_request *rq);

/* Loads the config once, resolves the request (config, sets, flags),
 * builds what it asks for and writes it to out. For --compare, v is
 * --chunks when given, else the config's chunks when its kind is
 * interleaved, else 2W, so that the comparison is like-for-like with
 * hanayo by default. */
int cli_plan_run(const cli_plan_request *rq, FILE *out, hy_error *err);

#endif
