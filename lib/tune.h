/*
 * tune.h — the search behind `hanayo tune` (tools/cmd_tune.c): from a short
 * profile to the schedule, the number of micro-batches and the layer split
 * the simulator predicts fastest.
 *
 * The measurement is a profile (profile.h); its per-layer cost model prices
 * any split of the layers over any number of stages, and the simulator
 * (sim.h, with the runtime's mailbox slots: mailbox.h,
 * hy_mailbox_sim_limits) turns prices into a step time for each candidate:
 *
 *   kind     gpipe, 1f1b, interleaved (v = 2..4: with v = 1 it is 1f1b
 *            with a deeper warm-up), hanayo (W = 1..4), each with its
 *            backward whole and split in B and W (schedule.h), the split
 *            one priced with the W share of a backward a profile of the
 *            split run measured;
 *   M, B     P, 2P, ..., 8P micro-batches (and the config's own M), each
 *            with the micro-batch size B that keeps the config's global
 *            batch, M x B sequences, as it is: what is trained does not
 *            change. The costs measured at the config's B are scaled by
 *            B over it (a layer's work and a transfer's bytes grow with
 *            the tokens; a GEMM's efficiency at another size is not
 *            modelled);
 *   memory   the fastest way the candidate fits the budget (fit.h):
 *            the least activation recomputation (none, selective, full:
 *            transformer.h) under which its order fits, or less
 *            recomputation within an activation cap on its order
 *            (schedule.max_activations), each mode's extra forward work
 *            priced into every backward pass (costs.h);
 *   split    for each kind and W or v: the balanced split the runtime
 *            makes by default (model.h), a greedy balance by the measured
 *            costs (each layer in turn to the stage it makes cheapest, the
 *            first and last stage's extras counted), and the best of
 *            moving one layer at a time from either, with the simulated
 *            step as the judge. Every stage holds at least one layer, and a
 *            split other than the default must be predicted at least 5%
 *            faster than it (TUNE_MIN_LAYERS, TUNE_SPLIT_MARGIN in tune.c
 *            say why).
 *
 * The costs are measured (a profile's fitted model) or modelled
 * (hy_tune_model_costs: the model's FLOPs at an assumed rate, for a run
 * that cannot be profiled on this machine); the search is the same.
 *
 * A candidate's step time is its simulated makespan plus the rest of the
 * measured step (embedding exchange, clip, optimizer, the host's batch
 * loading), taken as fixed. Every candidate trains the same tokens per
 * step; they are ranked by predicted time per token, and each schedule
 * (kind with its W or v) is shown by its best M and split. A candidate
 * whose memory plan (memplan.h: what the runtime would allocate on each
 * rank) exceeds the budget on some rank even with full recompute and the
 * smallest cap is dropped.
 */
#ifndef HY_TUNE_H
#define HY_TUNE_H

#include "run.h"
#include "costs.h"
#include "error.h"
#include "memplan.h"
#include "profile.h"
#include "schedule.h"

/* M is searched from P to this many times P micro-batches (the command's
 * report says the range). */
#define HY_TUNE_MAX_M_FACTOR 8

typedef struct {
    hy_sched_kind kind;
    int waves;             /* W for hanayo, else 0 */
    int chunks;            /* stages per rank: 1, v, or 2W */
    int micro_batches, stages;
    int micro_batch_size;  /* B: micro_batches x B is the config's global batch */
    hy_recompute recompute;   /* train.recompute: the fastest way to fit, with the cap */
    int max_activations;   /* schedule.max_activations: its order's cap (0: none) */
    int peak;              /* the most activations its order holds on a rank */
    int split_backward;    /* B and W passes */
    int *split;            /* [stages]: layers per stage */
    double comm_cost;      /* the measured transfer in stage forwards (schedule.comm_cost) */
    double makespan_ms, bubble;
    double step_ms;        /* makespan + the fixed rest of the step */
    double tokens;         /* per step */
    double us_per_token;
    double act_bytes;      /* activation stashes, the most over ranks */
    double mem_bytes;      /* the whole memory plan, the most over ranks */
    int mem_rank;          /* the rank that needs mem_bytes */
    hy_mem_term mem_largest;   /* its largest term */
    double mem_largest_bytes;
    int outrun;            /* over the budget, its caps not tried: their bound could not
                              beat a faster candidate of its schedule (fit.h, beat) */
} hy_tune_candidate;

typedef struct {
    unsigned kinds;        /* bit k: search hy_sched_kind k; 0: all */
    double budget_bytes;   /* memory per rank */
    double overhead_ms;    /* the step beyond the pipeline's makespan */
    const hy_backend_memory *mem;   /* the backend's types and scratch (NULL: the CPU's) */
    /* What W costs of a whole backward (0..1), as a profile of the split
     * run measured it (or the model's FLOPs have it); < 0: unknown, no
     * split candidates. */
    double wgrad_share;
    /* The recomputation the costs' backwards already hold, taken out
     * before each candidate's own is priced in: the profiled run's
     * train.recompute; HY_RECOMPUTE_NONE for modelled costs. */
    hy_recompute priced_recompute;
} hy_tune_opts;

typedef struct {
    hy_tune_candidate *best;   /* the best of each schedule (kind with its W
                                  or v) within the budget, best first */
    int n_best;
    int searched;              /* candidates simulated */
    int over_budget;           /* of those, dropped for memory */
    int outrun;                /* of those, dropped unfinished: no cap that fits could beat
                                  a faster candidate of their schedule */
    hy_tune_candidate current; /* config c as it is, predicted the same way */
} hy_tune_result;

/* Modelled costs (costs.h, hy_cost_model_of_work) of run's model at its
 * micro-batch size: each layer's and the head's FLOPs (model.h,
 * hy_model_block_flops, hy_model_head_flops) at tflops TFLOP/s per rank,
 * a transfer's bytes (transformer.h, hy_boundary_bytes, in the activation
 * type of `mem`) over link_gbps; and W's share of a whole backward: its
 * weight products' gradients (hy_model_block_weight_flops) over the
 * block's backward. */
void hy_tune_model_costs(const hy_run *run, const hy_backend_memory *mem, double tflops,
                         double link_gbps, hy_cost_model *m, double *wgrad_share);

/* Searches for the model and schedule P of run `run` under cost model m.
 * HY_ERR_INPUT when no candidate fits the budget (saying the smallest
 * need and its largest term). */
int hy_tune_search(const hy_run *run, const hy_cost_model *m, const hy_tune_opts *o,
                   hy_tune_result *r, hy_error *err);
void hy_tune_result_free(hy_tune_result *r);

/* The memory plan (memplan.h) of schedule s with layer split `split` of
 * run's model, micro-batches of B sequences and recomputation r on a
 * backend of memory `mem` (NULL: the CPU's): the most over ranks of the
 * activation stashes (*act) and of everything (*all), in bytes; INFINITY
 * when the split makes no model. */
void hy_tune_memory(const hy_run *run, const hy_schedule *s, const int *split, int B,
                    hy_recompute r, const hy_backend_memory *mem, double *act, double *all);

#endif
