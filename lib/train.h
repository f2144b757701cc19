/*
 * train.h — the `hanayo train` loop (run the steps, report progress) and
 * `hanayo eval`.
 *
 * Picks the backend (`backend: auto` → CUDA when a GPU is present and the
 * CUDA backend is built, else the CPU, and says which), builds the runtime,
 * runs train.steps steps, and prints a progress line every
 * train.log_every steps (and at the last): step, loss, learning rate,
 * gradient norm, tokens/s, ms/step and the time left. With a JSON log file
 * it also writes one JSON object per step. Checkpoints go to
 * checkpoint.dir every checkpoint.every steps and after the last step;
 * `resume` continues a run from one (checkpoint.h), checked first. A run
 * with a checkpoint.dir holds its lock (one writer per directory) and,
 * with checkpoint.keep, removes older checkpoints after each new one is
 * complete. A stop request (the
 * CLI's SIGINT/SIGTERM) ends the run cleanly after the current step.
 */
#ifndef HY_TRAIN_H
#define HY_TRAIN_H

#include <signal.h>
#include <stdio.h>

#include "config.h"
#include "error.h"
#include "runtime.h"

typedef struct {
    const char *log_json;   /* path of the per-step JSON log, or NULL */
    const char *resume;     /* checkpoint to continue from (or a checkpoint.dir: its
                               newest, hy_checkpoint_resolve), or NULL */
    /* A request to stop, or NULL (never). Read after every step; once it is
     * non-zero the run stops there: it saves a checkpoint of that step
     * (when checkpoint.dir is set and none was just saved), skips the
     * validation loss, prints "stopped at step N because of SIG..." and
     * returns HY_OK. The CLI's SIGINT/SIGTERM handler stores the signal's
     * number here (so the line can name it) and exits 128 + that number. */
    const volatile sig_atomic_t *stop;
    /* Test hook, or NULL: called before every step with the runtime and
     * the step about to run (1-based); a status other than HY_OK ends the
     * run with it. The tests put a NaN into the weights for chosen steps
     * through it (hy_runtime_write) to exercise train.on_nonfinite. */
    int (*before_step)(hy_runtime *rt, int step, void *ctx, hy_error *err);
    void *before_step_ctx;
    /* Where the signal the run stopped on goes (0: none), or NULL. Under
     * data parallelism the replicas agree on it: every one stops at the
     * same step, though only one got the signal. */
    int *stopped_by;
    /* The data-parallel replicas this process is one of (dp.h), or NULL:
     * the only one. Replica 0 alone writes checkpoints and the JSON log;
     * one replica's bad input, or a step all found non-finite, ends every
     * replica with one error (hy_dp_agreed). */
    struct hy_dp *dp;
} hy_train_opts;

int hy_train(const hy_config *c, const hy_train_opts *o, FILE *out, hy_error *err);

/* The runtime of config c with the weights it starts from: hy_runtime_create's
 * seeded initialization, then the file config key `init` names, when it
 * does (weights.h), checked first when it is a checkpoint's
 * (hy_checkpoint_verify_file: a damaged one is refused). dp: the
 * data-parallel replicas it is one of (NULL: none; hy_runtime_create_dp). A checkpoint
 * without checksums loads with a one-line warning on warn (NULL: none).
 * On failure *out is NULL. */
struct hy_dp;
int hy_train_runtime(hy_runtime **out, const hy_config *c, struct hy_dp *dp, FILE *warn,
                     hy_error *err);

/* Data parallelism: the replicas must run one config (the data position,
 * the schedule and the sums all assume it). Collective: compares the
 * CRC-32C of each one's resolved config, and when they differ every
 * replica gets one HY_ERR_INPUT saying so. One replica: HY_OK. */
int hy_train_same_config(const hy_config *c, struct hy_dp *dp, hy_error *err);

/* The learning rate at step (1-based): linear warm-up to train.lr over
 * warmup_steps, then cosine decay to train.min_lr at the last step. */
double hy_train_lr(const hy_config *c, int step);

/* Takes rt's next step at the learning rate hy_train_lr gives it: the step
 * after the runtime's last (hy_runtime_get_progress), so a resumed run
 * goes on along the schedule. Every caller that trains steps through
 * this, not hy_runtime_step, so no two of them can disagree on the rate. */
int hy_train_step(hy_runtime *rt, const hy_config *c, hy_step_stats *st, hy_error *err);

/* `hanayo eval`: the mean loss of the model of c (with c->init's weights)
 * over `batches` batches read in order from the start of `shard` (NULL:
 * data.val, else data.train; batches <= 0: every batch the shard holds),
 * printed as one JSON line {"loss": x, "batches": n, "tokens": t}. A
 * warning (weights from a checkpoint without checksums) goes to warn. */
int hy_eval(const hy_config *c, const char *shard, int batches, FILE *out, FILE *warn,
            hy_error *err);

#endif
