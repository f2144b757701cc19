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
 * `resume` continues a run from one (checkpoint.h).
 */
#ifndef HY_TRAIN_H
#define HY_TRAIN_H

#include <stdio.h>

#include "config.h"
#include "error.h"

typedef struct {
    const char *log_json;   /* path of the per-step JSON log, or NULL */
    const char *resume;     /* checkpoint directory to continue from, or NULL */
} hy_train_opts;

int hy_train(const hy_config *c, const hy_train_opts *o, FILE *out, hy_error *err);

/* `hanayo eval`: the mean loss of the model of c (with c->init's weights)
 * over `batches` batches read in order from the start of `shard` (NULL:
 * data.val, else data.train; batches <= 0: every batch the shard holds),
 * printed as one JSON line {"loss": x, "batches": n, "tokens": t}. */
int hy_eval(const hy_config *c, const char *shard, int batches, FILE *out, hy_error *err);

#endif
