/*
 * costs.h — what a schedule's actions cost: the simulator's input, and the
 * per-layer model that prices any split of the layers from measured costs.
 *
 * A leaf: it knows nothing of schedules, so the simulator (sim.h), the
 * profiler (profile.h), `hanayo plan` and `hanayo tune` all take their
 * costs from here, and so may the schedule generators.
 *
 * hy_costs is one stage's forward f and backward b, uniform or given per
 * stage (measured costs, `hanayo plan --costs`), and the cost c of one
 * cross-rank transfer. Any unit will do as long as all agree (the uniform
 * model counts in units of f; measured costs are in ms).
 *
 * The per-layer cost model (hy_cost_model) is what lets measured costs
 * price another split or schedule (`hanayo plan --compare --costs`,
 * `hanayo tune`): a stage holding n layers costs
 *     n x layer + (first stage ? first : 0) + (last stage ? last : 0)
 * forward and backward alike, where `first` is what the first stage costs
 * beyond its layers (the embedding, and anything else that makes that
 * stage dearer) and `last` the same for the last (final LayerNorm, the
 * head and the loss). See hy_cost_model_fit for how it is fitted, and
 * hy_cost_model_of_work for the same model derived from the work instead
 * of measured (`hanayo tune --costs model`).
 */
#ifndef HY_COSTS_H
#define HY_COSTS_H

#include "error.h"

typedef struct {
    double fwd;                /* f: cost of one stage's forward */
    double bwd;                /* b: cost of one stage's backward; with split
                                  backward, of its input-gradient pass B */
    double wgrad;              /* w: cost of a split backward's weight-gradient
                                  pass W (unused by unsplit schedules) */
    double comm;               /* c: cost of one cross-rank transfer */
    const double *fwd_stage;   /* [stages] or NULL: overrides fwd per stage */
    const double *bwd_stage;   /* [stages] or NULL: overrides bwd per stage */
    const double *wgrad_stage; /* [stages] or NULL: overrides wgrad per stage */
} hy_costs;

/* f = 1, b = 2, c = 0: the uniform-cost model of DESIGN §1 "The schedules". */
hy_costs hy_costs_uniform(void);

/* The same model with the backward split in two passes of equal cost,
 * B = W = 1, so that split and unsplit schedules do the same work. */
hy_costs hy_costs_uniform_split(void);

/* The uniform costs of a schedule whose backward is split or not
 * (hy_costs_uniform_split or hy_costs_uniform) with transfers costing
 * comm: what an order is chosen for when only the transfer time is known
 * (a config's schedule.comm_cost, in stage forwards). The one builder of
 * uniform costs the schedules, the order search and the mailboxes use. */
hy_costs hy_costs_uniform_for(int split_backward, double comm);

/* What W's share of a whole backward (0..1) is taken to be where nothing
 * says otherwise: half (hy_costs_split with w < 0). */
#define HY_WGRAD_SHARE_DEFAULT 0.5

/* W's share of a whole backward over `stages` measured stages: the sum of
 * wgrad[] over the sum of bwd[] + wgrad[] (bwd: B's cost); with nothing
 * measured (the sum is 0), HY_WGRAD_SHARE_DEFAULT. */
double hy_costs_wgrad_share(const double *bwd, const double *wgrad, int stages);

/* Splits a whole backward's cost b into its two passes: W costs w (w < 0:
 * half of b) and B the rest, b - w. Per-stage arrays are not touched. */
void hy_costs_split(hy_costs *c, double w);

/* Activation recomputation (transformer.h's hy_recompute): each pass that
 * reads a stage's activations (B, and W too with split backward) first
 * redoes `share` of its blocks' forward (transformer.h's
 * hy_recompute_share: 1 for full, a small part for selective; the
 * embedding and the head are never redone). The work redone for fwd of
 * blocks' forward: the one formula of it, which the two below use. */
double hy_costs_recompute(double fwd, double share);

/* The uniform costs under recomputation: B (and W when c splits the
 * backward, c->wgrad > 0) grows by hy_costs_recompute(c->fwd, share); the
 * uniform model's stage forward is all blocks. Per-stage arrays are not
 * touched (measured costs already hold what their run recomputed). */
void hy_costs_add_recompute(hy_costs *c, double share);

/* The forward and backward cost of one stage: its per-stage entry when
 * there are some, else the uniform one. */
double hy_costs_fwd(const hy_costs *c, int stage);
double hy_costs_bwd(const hy_costs *c, int stage);
double hy_costs_wgrad(const hy_costs *c, int stage);

/* HY_ERR_INPUT naming the first cost (of `stages` per-stage ones) that is
 * negative or not finite. */
int hy_costs_check(const hy_costs *c, int stages, hy_error *err);

/* The per-layer cost model (see the top of this file), in ms. */
typedef struct {
    double layer_fwd, layer_bwd;
    double first_fwd, first_bwd;
    double last_fwd, last_bwd;
    double comm;
} hy_cost_model;

/* Fits the model to per-stage costs fwd[s], bwd[s] of a split n_layers[s]
 * (S stages). The per-layer cost comes from the inner stages (neither
 * first nor last) that hold layers: their total cost over their layers.
 * With none (S <= 2), from the cheaper of the first stage's cost per layer
 * and the last stage's per (layers + head_units), where head_units is the
 * head's estimated cost in layers (model.h): the cheaper one is taken as
 * the one without anything extra. The first and last stage's extras are
 * then what their costs leave beyond their layers (never below 0).
 * comm is copied in. */
void hy_cost_model_fit(hy_cost_model *m, const double *fwd, const double *bwd,
                       const int *n_layers, int S, double head_units, double comm);

/* The cost of stage `stage` of S holding n layers under the model (with
 * n = 0: the stage's extras alone). */
void hy_cost_model_stage(const hy_cost_model *m, int stage, int S, int n, double *fwd,
                         double *bwd);

/* What one pass (B, or W) of a stage of n layers redoes under
 * recomputation of `share` (hy_costs_recompute of its layers' forward). */
double hy_cost_model_recompute(const hy_cost_model *m, int n, double share);

/* Per-stage costs of split n_layers (S stages) under the model. */
void hy_cost_model_stages(const hy_cost_model *m, const int *n_layers, int S,
                          double *fwd, double *bwd);

/* ---- Modelled costs: the work at an assumed rate -----------------------
 * Where a run cannot be measured (a 13B model on one machine), its costs
 * are its FLOPs at an assumed sustained rate and its transfers' bytes
 * over an assumed link. The assumed device, unless told otherwise: an
 * H200 (SXM), dense bf16 peak 989 TFLOP/s, at a model FLOPs utilization
 * of 40% (large-model training on Hopper reaches 35-45%; GPT-2 124M on
 * one H200 ran at 34%: docs/cuda.md), 141 GB of memory, and NVLink 4's
 * 450 GB/s each way between two GPUs of one server. */
#define HY_COSTS_GPU_PEAK_TFLOPS 989.0
#define HY_COSTS_GPU_MFU 0.40
#define HY_COSTS_GPU_MEMORY_BYTES 141e9
#define HY_COSTS_LINK_GBPS 3600.0      /* Gb/s: 450 GB/s */

/* A backward's FLOPs over its forward's: every product has two
 * gradients (its input's and its other operand's), each as large as it. */
#define HY_COSTS_BWD_PER_FWD 2.0

/* The work of one micro-batch, per stage part, and the assumed machine. */
typedef struct {
    double tokens;          /* per micro-batch: B x T */
    double layer_flops;     /* forward FLOPs per token of one layer */
    double first_flops;     /* ... beyond its layers, on the first stage */
    double last_flops;      /* ... beyond its layers, on the last stage (the head) */
    double transfer_bytes;  /* one cross-rank transfer */
    double tflops;          /* sustained rate of one device, TFLOP/s */
    double link_gbps;       /* a link between two ranks, Gb/s */
} hy_cost_work;

/* ms for `flops` at `tflops` TFLOP/s, and for `bytes` over `gbps` Gb/s:
 * the two conversions from work to time. */
double hy_costs_flops_ms(double flops, double tflops);
double hy_costs_bytes_ms(double bytes, double gbps);

/* The per-layer model of work w: each part's forward FLOPs in ms, its
 * backward HY_COSTS_BWD_PER_FWD times that, a transfer its bytes' time. */
void hy_cost_model_of_work(hy_cost_model *m, const hy_cost_work *w);

#endif
