/*
 * plan.h — a schedule together with its simulation, rendered for people
 * and for tools: what `hanayo plan` shows.
 *
 * A plan is the action lists of schedule.h plus the timings sim.h computes
 * for them. This module only renders: the JSON of
 * DESIGN §1.3 "The plan as JSON, a stable contract" (which tests/resim.py
 * re-checks independently), an ASCII timeline in the style of the paper's
 * figures, an SVG of the same timeline (drawn by svg.h, which also draws
 * measured times), and a table comparing the four schedules at one (P, M).
 * Every renderer writes to a FILE * or returns a malloc'd string; nothing
 * here prints an error — the errors come back as hy_error values to the
 * CLI, whose `hanayo plan` (tools/cmd_plan.c) resolves the config and the
 * flags into a plan and prints it.
 */
#ifndef HY_PLAN_H
#define HY_PLAN_H

#include <stdio.h>

#include "costs.h"
#include "error.h"
#include "order.h"
#include "schedule.h"
#include "sim.h"

/* The largest plan we agree to build (actions over all ranks). Past this
 * the lists and the timings alone take hundreds of MB and no timeline of
 * it could be read; asking for one is almost certainly a typo. */
#define HY_PLAN_MAX_ACTIONS (1 << 22)

typedef struct {
    hy_schedule sched;
    hy_costs costs;        /* uniform part; its per-stage pointers are NULL */
    double *fwd_stage, *bwd_stage, *wgrad_stage;   /* [stages]: per-stage costs, owned;
                                                       NULL when uniform */
    hy_sim_result sim;
    double ideal_bubble;   /* hy_ideal_bubble(&sched) */
    int max_activations;   /* the cap the order was chosen within (0: none) */
    double cap_bound;      /* hy_makespan_bound_memory at that cap: no order within it
                              is shorter (without a cap, sim.bound) */
    hy_order_work work;    /* what choosing the order cost (order.h) */
} hy_plan;

/* Builds the schedule for p and simulates it under c. On failure the plan
 * is left empty (safe to free) and err says why: HY_ERR_INPUT for
 * parameters no schedule accepts. */
int hy_plan_build(hy_plan *pl, const hy_sched_params *p, const hy_costs *c,
                  hy_error *err);
void hy_plan_free(hy_plan *pl);

/* Largest peak_activations over the ranks. */
int hy_plan_peak_max(const hy_plan *pl);

/* The bubble a plan would have at its lower bound (sim.h,
 * hy_makespan_bound): 1 - busy / (P x bound). */
double hy_plan_bound_bubble(const hy_plan *pl);
/* ... and at its bound for its memory (hy_makespan_bound_memory with the
 * plan's own peak activations). */
double hy_plan_memory_bound_bubble(const hy_plan *pl);

/* ---- JSON (DESIGN §1.3 "The plan as JSON, a stable contract") ----------
 * One line, keys in the documented order, then "ideal_bubble", then
 * "split_backward", "wgrad_cost", "bound_makespan", "bound_bubble",
 * "memory_bound_makespan", "memory_bound_bubble", "max_activations"
 * (0: no cap) and "cap_bound_makespan" (and,
 * with per-stage costs, "fwd_costs", "bwd_costs" and, split, "wgrad_costs":
 * one per stage). "waves" is W for hanayo and 0 for the other schedules (an
 * integer in every plan, so readers never meet a null). Returns NULL only
 * when out of memory. */
char *hy_plan_json(const hy_plan *pl);

/* ---- ASCII timeline ------------------------------------------------------
 * One row per rank, time left to right. F(m) is drawn as "m" followed by
 * spaces, B(m) as "[m ]", idle as '.', each run as wide as the action's
 * simulated time at one scale for the whole plan. The scale is chosen so
 * every label fits and the rows fill about `width` columns; a plan too long
 * for that is wrapped into several blocks of rows, each under its own time
 * ruler. `color` adds ANSI colours (F and B in two hues, alternate
 * micro-batches in two shades) — pass it only for a terminal. */
typedef struct {
    int color;   /* 0 or 1 */
    int width;   /* total line width in columns; 0 means 120 */
} hy_timeline_opts;

int hy_plan_write_timeline(FILE *f, const hy_plan *pl,
                           const hy_timeline_opts *o);
char *hy_plan_timeline(const hy_plan *pl, const hy_timeline_opts *o);

/* The human summary under the timeline: schedule, P, M, W or v, stages,
 * costs, makespan, bubble ratio and the ideal, peak activations per rank,
 * transfers. */
int hy_plan_write_summary(FILE *f, const hy_plan *pl);

/* ---- SVG -------------------------------------------------------------------
 * The same timeline, drawn by svg.h (hy_svg_write_timeline: one <rect> per
 * action and no other, so rects count actions) with the plan's simulated
 * times and a heading made of its figures. */
int hy_plan_write_svg(FILE *f, const hy_plan *pl);
char *hy_plan_svg(const hy_plan *pl);
/* Writes the SVG to `path` atomically (svg.h, hy_svg_save_timeline: an
 * error never leaves a partial file; HY_ERR_INPUT when the path is at
 * fault, else HY_ERR_RUNTIME). */
int hy_plan_save_svg(const hy_plan *pl, const char *path, hy_error *err);

/* ---- Comparison of the four schedules -----------------------------------
 * One row per kind, in hy_sched_kind order, at the same P and M, with W for
 * hanayo and v for interleaved; then the same four with split backward
 * (row HY_SCHED_COUNT + k). A kind whose parameters are invalid (e.g.
 * interleaved with M not a multiple of P) is a row with ok = 0 and the
 * reason in note. */
#define HY_COMPARE_ROWS (2 * HY_SCHED_COUNT)

typedef struct {
    hy_sched_kind kind;
    int split;             /* split backward */
    int ok;
    char note[1024];       /* why the row was skipped (as hy_error.msg) */
    int waves;             /* W (hanayo), else 0 */
    int chunks;            /* stages per rank */
    int stages;
    double makespan, bubble, ideal_bubble;
    double bound_bubble;   /* hy_plan_bound_bubble: no order does better */
    double memory_bound_bubble;   /* no order within its peak activations does better */
    int peak_max;          /* peak activations, max over ranks */
    int transfers;
    double mem_bytes;      /* the most a rank allocates, as a caller's hy_compare_each
                              planned it (memplan.h); < 0: not planned */
} hy_compare_row;

/* Called with each row's plan once it is built, to add the caller's
 * figures of it to the row (`hanayo plan --compare` plans its memory). */
typedef void (*hy_compare_each)(const hy_plan *pl, hy_compare_row *row, void *ctx);

/* p supplies P, M, W (waves) and v (chunks); p->kind and
 * p->split_backward are ignored. c holds one rank share's f, its whole
 * backward b and c; the split rows give W c->wgrad of it (< 0: half) and
 * B the rest. Fails (HY_ERR_INPUT) only when no schedule accepts the
 * parameters, with the first kind's reason. */
int hy_plan_compare(const hy_sched_params *p, const hy_costs *c,
                    hy_compare_row rows[HY_COMPARE_ROWS], hy_error *err);
/* The same with each backward pass (B, and W in the split rows) also
 * redoing `recompute_share` of its stage's forward (costs.h,
 * hy_costs_add_recompute: train.recompute's price), and each(pl, row,
 * ctx) called for every row built (each may be NULL). */
int hy_plan_compare_each(const hy_sched_params *p, const hy_costs *c, double recompute_share,
                         hy_compare_each each, void *ctx, hy_compare_row rows[HY_COMPARE_ROWS],
                         hy_error *err);
/* The same with each row's own costs, used as given (per-stage arrays
 * sized for that kind's stages: measured costs re-priced per schedule,
 * `hanayo plan --compare --costs`). A row with a non-NULL skip[i] (skip
 * may be NULL) is a skipped row with that reason. */
int hy_plan_compare_costs(const hy_sched_params *p, const hy_costs costs[HY_COMPARE_ROWS],
                          const char *const skip[HY_COMPARE_ROWS],
                          hy_compare_row rows[HY_COMPARE_ROWS], hy_error *err);
int hy_plan_compare_costs_each(const hy_sched_params *p, const hy_costs costs[HY_COMPARE_ROWS],
                               const char *const skip[HY_COMPARE_ROWS], hy_compare_each each,
                               void *ctx, hy_compare_row rows[HY_COMPARE_ROWS], hy_error *err);
int hy_compare_write_table(FILE *f, const hy_compare_row *rows, int n);
char *hy_compare_table(const hy_compare_row *rows, int n);
/* The table has a "mem GiB" column when some row's mem_bytes is planned.
 * A JSON array of row objects (skipped rows carry "skipped": reason; a
 * planned row "memory_bytes").
 * NULL only when out of memory. */
char *hy_compare_json(const hy_compare_row *rows, int n);

#endif
