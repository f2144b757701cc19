/*
 * run.h — a run resolved once: what the commands and the runtime take.
 *
 * A config (config.h) is what the user wrote, checked. hy_run_resolve turns
 * it, once per command, into plain structs: the model's shape and its
 * partition into stages (model.h), the schedule in the order chosen for
 * the run's transfer time (order.h: the run's order is searched here,
 * once; plan and tune search orders only for the other schedules they
 * price), the training settings, the files and the backend request
 * (DESIGN §2 "The parts"). Below that nobody takes the config: the
 * runtime, training, checkpoints, the profiler and the tuner read a
 * hy_run, as llm.c's model code reads its GPT2Config and never argv.
 *
 * A run owns everything it points to (copies of the config's strings and
 * arrays), so the config may be freed once the run is resolved.
 */
#ifndef HY_RUN_H
#define HY_RUN_H

#include "backend.h"
#include "config.h"
#include "error.h"
#include "model.h"
#include "schedule.h"

/* How training goes: the optimizer, its learning rate over the steps and
 * how often the validation loss is taken. */
typedef struct {
    int steps;                  /* optimizer steps of the whole run */
    double lr, min_lr;          /* peak learning rate and the decay's floor */
    int warmup_steps;
    hy_lr_schedule lr_schedule; /* the shape after the warm-up (hy_train_lr) */
    double decay_fraction;      /* wsd: the decay's share of the steps, in (0, 1] */
    double weight_decay, beta1, beta2, eps, grad_clip;
    unsigned long long seed;    /* initialization and BERT's masking */
    int log_every;
    hy_nonfinite_policy on_nonfinite;
    int eval_every;             /* validation every this many steps; 0: at the end only */
    int eval_batches;           /* batches of data.val per validation (at most its own) */
    hy_recompute recompute;     /* what the stash keeps for the backward (transformer.h) */
} hy_run_train;

typedef struct {
    char *config_path;        /* the file it came from, or NULL */
    char *config_json;        /* the resolved config as JSON (hy_config_to_json): what a
                                 checkpoint records and data-parallel replicas compare */
    hy_model model;           /* shape, partition into stages, parameter table */
    hy_sched_params sched_params;   /* kind, P, M, W or v, split backward */
    double comm_cost;         /* the transfer time the order was chosen for, in stage
                                 forwards (schedule.comm_cost) */
    hy_schedule sched;        /* every rank's actions, in that order */
    int micro_batch_size;     /* sequences per micro-batch (B) */
    hy_run_train train;
    struct { char **train; int n_train;              /* the shards' paths and glob patterns,
                                                        as given: data.h's hy_data_expand
                                                        lists the files where they are read */
             char *val; } data;                      /* val NULL: no validation */
    char *init;                                      /* weights to start from, or NULL */
    struct { char *dir; int every, keep; } checkpoint;   /* dir NULL: no checkpoints */
    hy_backend_request backend;                      /* its devices point into the run */
    int graph;                /* record once, replay (bool) */
    double watchdog_s;
} hy_run;

/* Resolves config c: builds the schedule (in the order chosen for
 * schedule.comm_cost) and the model partitioned over its stages
 * (schedule.split, else balanced), and copies the rest. A config loaded
 * for one rank (HY_CONFIG_FOR_ONE_RANK, config.h) gives the whole model as
 * one stage, no schedule (sched empty) and a backend request of one rank.
 * On failure *r is left empty (safe to free). The only function below the
 * commands that reads a hy_config past loading. */
int hy_run_resolve(hy_run *r, const hy_config *c, hy_error *err);
void hy_run_free(hy_run *r);

/* Tokens one optimizer step trains on: replicas x M x B x T (M
 * micro-batches of B sequences of T tokens on each replica). The one
 * definition the training log, the planner and the tuner use. */
double hy_run_tokens_per_step(int micro_batches, int micro_batch_size, int seq_len,
                              int replicas);

#endif
