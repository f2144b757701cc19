/*
 * runtime.h — training: one thread per pipeline rank, each running its
 * schedule's action list every step through the backend.
 *
 * hy_runtime_create builds everything a run needs once: the schedule, the
 * model's partition, every rank's memory (parameters, gradients, AdamW
 * state, activation stashes sized by the schedule's in-flight counts,
 * mailboxes on every stage boundary), and starts the rank threads. Each
 * hy_runtime_step loads the step's micro-batches, sets the learning rate
 * its caller gives, and lets every rank run one iteration: its F and B actions in
 * schedule order with sends and receives through the mailboxes, the tied
 * embedding's gradient exchange, the global gradient norm and clipping,
 * and AdamW. The first iteration runs eagerly; with `graph` on, the
 * second is recorded and every later one is a replay of that recording
 * (DESIGN §4 "Record and replay"). The CPU and the CUDA backend run this same
 * code. What a stage computes for a micro-batch is transformer.h's; the
 * runtime moves its inputs and outputs and orders the work.
 */
#ifndef HY_RUNTIME_H
#define HY_RUNTIME_H

#include <assert.h>
#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "data.h"
#include "error.h"
#include "model.h"
#include "run.h"
#include "schedule.h"

typedef struct hy_runtime hy_runtime;

typedef struct {
    int step;            /* 1-based, the step just taken */
    double loss;         /* mean over micro-batches of each one's mean token loss */
    double grad_norm;    /* global gradient norm before clipping */
    double lr;           /* the learning rate this step used */
    double ms;           /* wall time of the step */
    double tokens;       /* tokens this step trained on */
    int nonfinite;       /* the loss or the gradient norm is NaN or infinite */
    int updated;         /* the optimizer step was applied: the gradient norm was
                            finite (a non-finite one makes every rank skip it) */
} hy_step_stats;

/* Builds the runtime of the resolved run (run.h) on the backend it asks
 * for (backend.h, hy_backend_open), with GPT-2's initialization from
 * train.seed (the run's `init` file, if any, is loaded over it by
 * train.h's hy_train_runtime, through weights.h). It runs run->sched as
 * it is and borrows run->model: `run` must outlive the runtime. */
int hy_runtime_create(hy_runtime **out, const hy_run *run, hy_error *err);

/* hy_runtime_create as one of the data-parallel replicas of dp (dp.h;
 * NULL: the only one): the runtime reads its share of each step's global
 * batch, counts every micro-batch as 1/(N M) of it, and sums its ranks'
 * gradients and its loss over the replicas. chosen: the backend
 * hy_backend_describe chose for run->backend, opened as it is (NULL: the
 * runtime describes it itself). */
struct hy_dp;
int hy_runtime_create_dp(hy_runtime **out, const hy_run *run, const hy_backend_choice *chosen,
                         struct hy_dp *dp, hy_error *err);

/* One optimizer step over all ranks at learning rate lr (the caller's
 * schedule: train.h's hy_train_lr, through hy_train_step). */
int hy_runtime_step(hy_runtime *rt, double lr, hy_step_stats *st, hy_error *err);

/* The mean over `batches` batches of each one's mean loss, reading the
 * shard from its start (forward only, no update). tokens: tokens scored. */
int hy_runtime_eval(hy_runtime *rt, const char *shard, int batches, double *loss, double *tokens,
                    hy_error *err);

/* The fraction of the positions the last hy_runtime_eval scored (BERT:
 * the masked ones; GPT: every next token) whose target the model ranked
 * first (argmax over the vocabulary); NaN before any eval or when none
 * was scored. */
double hy_runtime_eval_accuracy(const hy_runtime *rt);

/* What a named tensor of the runtime's state may be. */
typedef enum { HY_T_PARAM, HY_T_GRAD, HY_T_ADAM_M, HY_T_ADAM_V } hy_tensor_role;

/* The model the runtime runs: shapes, partition and the parameter table
 * (its wte has the padded vocabulary's rows). */
const hy_model *hy_runtime_model(const hy_runtime *rt);

/* The first n floats (n <= p->numel) of parameter p's `role` tensor, p
 * from hy_runtime_model's table: get copies them out; put copies them in,
 * into the tied embedding's replica too. put leaves the compute copy of
 * the weights as it was: a loader puts every tensor, then calls
 * hy_runtime_refresh once, instead of converting a stage per tensor. */
int hy_runtime_get(hy_runtime *rt, hy_tensor_role role, const hy_param *p, float *dst, size_t n,
                   hy_error *err);
int hy_runtime_put(hy_runtime *rt, hy_tensor_role role, const hy_param *p, const float *src,
                   size_t n, hy_error *err);
/* Brings every compute copy of the weights up to date with the masters
 * (on the CPU, where the ops compute on the masters, nothing to do). */
int hy_runtime_refresh(hy_runtime *rt, hy_error *err);

/* By name, for tests and tools: the `role` tensor of parameter `name`
 * (Hugging Face GPT-2 name), n floats, which must be
 * hy_model_real_numel's (wte: the real vocabulary's rows, unpadded).
 * Writing the weights (HY_T_PARAM) refreshes their stage's compute copy. */
int hy_runtime_read(hy_runtime *rt, hy_tensor_role role, const char *name, float *dst, size_t n,
                    hy_error *err);
int hy_runtime_write(hy_runtime *rt, hy_tensor_role role, const char *name, const float *src,
                     size_t n, hy_error *err);
int hy_runtime_read_param(hy_runtime *rt, const char *name, float *dst, size_t n, hy_error *err);

/* Where training stands, for checkpoints: the last step taken and the
 * read position in the training data's stream of shards. Setting them
 * makes the next step continue exactly there. */
int hy_runtime_get_progress(hy_runtime *rt, int *step, size_t *data_pos, hy_error *err);
int hy_runtime_set_progress(hy_runtime *rt, int step, size_t data_pos, hy_error *err);

/* The training data as the runtime reads it (data.train's shards, its
 * patterns expanded when it was opened), opening it first if need be:
 * what a checkpoint identifies, and what a pass over the data holds. */
int hy_runtime_data(hy_runtime *rt, const hy_dataset **ds, hy_error *err);

/* The loss of the last step taken (hy_runtime_step), NaN before the
 * first: what a checkpoint records beside its step. */
double hy_runtime_last_loss(const hy_runtime *rt);

/* The resolved run the runtime runs (run.h). */
const hy_run *hy_runtime_run(const hy_runtime *rt);

/* The number of data-parallel replicas the runtime is one of (1: none). */
int hy_runtime_replicas(const hy_runtime *rt);

/* The backend the runtime runs on (for benchmarks and profiling). */
struct hy_backend *hy_runtime_backend(hy_runtime *rt);

/* The schedule every rank runs: its action lists index the profile stamps. */
const hy_schedule *hy_runtime_schedule(const hy_runtime *rt);

/* After a step whose stats say nonfinite: where it was, in words (the loss
 * if it is not finite, and the first parameter whose gradient holds a NaN
 * or infinity, with its rank and stage), into buf. */
int hy_runtime_nonfinite_where(hy_runtime *rt, char *buf, size_t n, hy_error *err);

/* Profiling (hanayo profile). Call before the first step: from then on
 * every rank records, in every iteration, eager or replayed, clock stamps
 * in nanoseconds (one clock for all ranks) at:
 *   [0]               the start of its iteration
 *   [1 + 4i + 0..3]   action i of its list (hy_runtime_schedule): its start,
 *                     its input received (the wait for another rank ends),
 *                     its compute done, its output sent (hy_stamp_action)
 *   [1 + 4n + 0..2]   after the tied-embedding exchange, after the norm
 *                     and clip, after the optimizer (n = its action count;
 *                     hy_stamp_tail)
 *   [1 + 4n + 3 + 2j + 0..1]
 *                     with data-parallel replicas, the rank's gradient sum
 *                     j (hy_runtime_sums): just before it started, and
 *                     after the rank's wait for it ended (hy_stamp_sum)
 * The functions below are that layout's one statement: the runtime writes
 * by them and the profiler reads by them. hy_runtime_stamps copies the
 * last step's stamps of one rank (n must be hy_runtime_stamp_count(rt,
 * rank)). */
enum { HY_STAMP_START, HY_STAMP_RECEIVED, HY_STAMP_COMPUTED, HY_STAMP_SENT,
       HY_STAMPS_PER_ACTION };
enum { HY_STAMP_EXCHANGED, HY_STAMP_CLIPPED, HY_STAMP_OPTIMIZED, HY_STAMPS_TAIL };
static inline size_t hy_stamp_action(int i, int part) {
    assert(i >= 0 && part >= 0 && part < HY_STAMPS_PER_ACTION);
    return 1 + HY_STAMPS_PER_ACTION * (size_t)i + (size_t)part;
}
static inline size_t hy_stamp_tail(int n_actions, int part) {
    assert(part >= 0 && part < HY_STAMPS_TAIL);
    return hy_stamp_action(n_actions, 0) + (size_t)part;
}
static inline size_t hy_stamp_sum(int n_actions, int j, int end) {
    assert(j >= 0 && (end == 0 || end == 1));
    return hy_stamp_tail(n_actions, 0) + HY_STAMPS_TAIL + 2 * (size_t)j + (size_t)end;
}
static inline size_t hy_stamp_count(int n_actions, int n_sums) {
    return hy_stamp_sum(n_actions, n_sums, 0);
}
int hy_runtime_profile(hy_runtime *rt, hy_error *err);
size_t hy_runtime_stamp_count(const hy_runtime *rt, int rank);
/* The gradient sums over the replicas that rank starts each step, in the
 * order of its stamps: the stage of each (S: the tied embedding's replica
 * on the last stage's rank) into buckets (room for stages + 1; NULL: only
 * count). 0 with one replica. */
int hy_runtime_sums(const hy_runtime *rt, int rank, int *buckets);
int hy_runtime_stamps(hy_runtime *rt, int rank, uint64_t *dst, size_t n, hy_error *err);

/* Writes rank's recorded iteration as Graphviz DOT to path and counts its
 * nodes. Only CUDA graphs can be drawn: on the CPU backend, or before a
 * graph was recorded (graph = false, or before the second step), this
 * fails saying so. */
int hy_runtime_graph_dot(hy_runtime *rt, int rank, const char *path, hy_graph_nodes *nodes,
                         hy_error *err);

/* Test hook, before the first step: every action of `stage` (forward and
 * backward, training and evaluation) first holds its rank for `seconds`,
 * as if that stage were that much slower. For the profiler's and the
 * watchdog's tests. */
int hy_runtime_slow_stage(hy_runtime *rt, int stage, double seconds, hy_error *err);

void hy_runtime_destroy(hy_runtime *rt);

#endif
