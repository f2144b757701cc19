/*
 * cmd_train.h — `hanayo train` and `hanayo eval` (tools/cmd_train.c) as
 * main() and the tests call them: a training run with its options, an
 * evaluation, and the signal that stopped a run.
 */
#ifndef HY_CMD_TRAIN_H
#define HY_CMD_TRAIN_H

#include <signal.h>
#include <stdio.h>

#include "run.h"
#include "error.h"
#include "runtime.h"

struct hy_dp;

typedef struct {
    const char *log_json;   /* path of the per-step JSON log, or NULL */
    const char *resume;     /* checkpoint to continue from (or a checkpoint.dir: its
                               newest, hy_checkpoint_resolve), or NULL */
    /* --fresh: a new run (no resume) may save into a checkpoint.dir that
     * holds another run's checkpoints, beside them; without it that is
     * refused (hy_checkpoint_check_new_run). */
    int fresh;
    /* --allow-schedule-change: a resume may change the learning-rate
     * schedule the checkpoint's run had (train.lr, min_lr, warmup_steps,
     * steps, lr_schedule, decay_fraction; hy_checkpoint_schedule), said
     * on out; without it that is refused, and so is every resume of a
     * checkpoint at or past train.steps (nothing left to train). */
    int allow_schedule_change;
    /* A request to stop, or NULL (never). Read after every step; once it is
     * non-zero the run stops there: it saves a checkpoint of that step
     * (when checkpoint.dir is set and none was just saved), skips the
     * validation loss, prints "stopped at step N because of SIG..." and
     * returns HY_OK. The SIGINT/SIGTERM handler stores the signal's
     * number here (so the line can name it) and main exits 128 + that
     * number. Until that checkpoint is saved, nothing more is flushed to
     * out or the log (a reader that does not read must not hold it up).
     * A write to out or the log that fails is a stop request too, after
     * that step: a broken pipe (EPIPE; SIGPIPE ignored) prints the stop
     * line on stderr instead, "hanayo: stopped at step N because
     * standard output is a broken pipe ...", and counts as SIGPIPE (main
     * exits 141); any other failure (a full disk) returns HY_ERR_RUNTIME
     * with that line as the message. */
    const volatile sig_atomic_t *stop;
    /* Test hook, or NULL: called before every step with the runtime and
     * the step about to run (1-based); a status other than HY_OK ends the
     * run with it. The tests put a NaN into the weights for chosen steps
     * through it (hy_runtime_write) to exercise train.on_nonfinite. */
    int (*before_step)(hy_runtime *rt, int step, void *ctx, hy_error *err);
    void *before_step_ctx;
    /* Where the signal the run stopped on goes (0: none; SIGPIPE for a
     * broken pipe; 0 when the run returns an error), or NULL. Under data
     * parallelism the replicas agree on it: every one stops at the same
     * step, though only one got the signal. */
    int *stopped_by;
    /* The data-parallel replicas this process is one of (dp.h), or NULL:
     * the only one. Replica 0 alone writes checkpoints and the JSON log;
     * one replica's bad input, or a step all found non-finite, ends every
     * replica with one error (hy_dp_agreed). */
    struct hy_dp *dp;
} cli_train_opts;

/* `hanayo train`: runs config c's steps, printing on out (o: NULL for
 * none of the options). */
int cli_train_run(const hy_run *run, const cli_train_opts *o, FILE *out, hy_error *err);

/* `hanayo eval`: the mean loss of the model of c (with c->init's weights)
 * over `batches` batches read in order from the start of `shard` (NULL:
 * data.val, else data.train; batches <= 0: every batch the shard holds),
 * printed as one JSON line {"loss": x, "batches": n, "tokens": t,
 * "weights": FILE or null (the seeded initialization)}. Which weights
 * those are goes to warn, "weights: ...", once they are loaded, and so
 * does a warning (weights from a checkpoint without checksums). init_flag:
 * --init as given (a weights file, or the checkpoint directory c->init
 * was found in), NULL when it was not given. */
int cli_eval_run(const hy_run *run, const char *shard, int batches, const char *init_flag,
                 FILE *out, FILE *warn, hy_error *err);

/* The signal that stopped the last `hanayo train` early, as it said
 * (0: none; SIGPIPE for a broken pipe); main exits with 128 + it. */
int cli_train_stop_signal(void);

#endif
