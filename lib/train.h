/*
 * train.h — what a training run is made of: the runtime a config starts
 * from (with its init weights), the learning-rate schedule and the step
 * taken along it, a shard's count of whole batches, and the data-parallel
 * replicas' agreement on their config and their weights.
 *
 * The `hanayo train` and `hanayo eval` commands (tools/cmd_train.c) run
 * the loop on these: progress lines, the JSON log, checkpoints, stops.
 */
#ifndef HY_TRAIN_H
#define HY_TRAIN_H

#include <stdio.h>

#include "run.h"
#include "error.h"
#include "runtime.h"

/* Whether run, one of `replicas` data-parallel replicas, fits the memory
 * its backend (`chosen`: hy_backend_describe of run->backend) has free
 * now (memplan.h against hy_backend_free_memory): HY_OK, or HY_ERR_INPUT
 * naming the pool, the bytes needed against the bytes free, the largest
 * term and what would make it fit (recomputation first, when it does). */
int hy_train_fits(const hy_run *run, const hy_backend_choice *chosen, int replicas,
                  hy_error *err);

/* The runtime of run `run` with the weights it starts from, once
 * hy_train_fits says it fits on `chosen`, which it opens (NULL: what
 * hy_backend_describe says of run->backend):
 * hy_runtime_create's seeded initialization, then the file run->init
 * names, when it does (weights.h), checked first when it is a
 * checkpoint's (hy_checkpoint_verify_file: a damaged one, or another
 * model's, is refused). dp: the data-parallel replicas it is one of
 * (NULL: none; hy_runtime_create_dp). *unverified (when not NULL): 1 when those
 * weights came from a checkpoint without checksums (loaded, but nothing
 * could be checked: the caller says so). On failure *out is NULL. */
struct hy_dp;
int hy_train_runtime(hy_runtime **out, const hy_run *run, const hy_backend_choice *chosen,
                     struct hy_dp *dp, int *unverified, hy_error *err);

/* Data parallelism: the replicas must run one config (the data position,
 * the schedule and the sums all assume it). Collective: compares the
 * CRC-32C of each one's resolved config (run->config_json), and when they
 * differ every replica gets one HY_ERR_INPUT saying so. One replica:
 * HY_OK. */
int hy_train_same_config(const hy_run *run, struct hy_dp *dp, hy_error *err);

/* The learning rate at step (1-based): linear warm-up to t->lr over
 * warmup_steps, then by t->lr_schedule: cosine or linear decay to
 * t->min_lr at the last step (t->steps), constant t->lr, or wsd: t->lr
 * until the last decay_fraction x steps, then linear decay to t->min_lr
 * at the last step. Continuous from one part to the next; past the last
 * step, the last step's rate; a warm-up as long as the run (or longer)
 * leaves no decay. */
double hy_train_lr(const hy_run_train *t, int step);

/* Takes rt's next step at the learning rate hy_train_lr gives it for its
 * run (hy_runtime_run): the step after the runtime's last
 * (hy_runtime_get_progress), so a resumed run goes on along the schedule.
 * Every caller that trains steps through this, not hy_runtime_step, so no
 * two of them can disagree on the rate. */
int hy_train_step(hy_runtime *rt, hy_step_stats *st, hy_error *err);

/* Whole batches of micro_batch_size x seq_len tokens (each with its next
 * token) in the shard at path, at most 1000000. A shard that cannot be
 * opened, or holds less than one batch, is an error saying so. */
int hy_train_shard_batches(const hy_run *run, const char *path, int *batches, hy_error *err);

/* The same for the training data, data.train's shards as one stream:
 * opened (its patterns expanded, every header checked, the first shard
 * read whole) and closed again, so that missing or short data is said
 * before anything bigger is set up. *batches: the batches one pass over
 * the data holds (hy_dataset_batches), not capped. */
int hy_train_data_batches(const hy_run *run, size_t *batches, hy_error *err);

/* Data parallelism: every replica must hold the same weights, since the
 * summed gradients are the same everywhere. Collective: compares the
 * CRC-32C of each one's weights, and when they differ every replica gets
 * one HY_ERR_RUNTIME saying so. Checked at each checkpoint (every replica
 * saves at the same steps), so a divergence is caught before replica 0's
 * checkpoint stands for all of them. One replica: HY_OK. */
int hy_train_replicas_agree(hy_runtime *rt, struct hy_dp *dp, hy_error *err);

#endif
