/*
 * checkpoint.h — saving and resuming training, and keeping what was saved
 * honest (DESIGN §5 "Model, numerics, data, files").
 *
 * A checkpoint is a directory per step, <checkpoint.dir>/step_%06d/:
 *   model.safetensors      the weights, Hugging Face GPT-2 names, F32,
 *                          the vocabulary unpadded; its metadata names
 *                          the model's kind and heads (weights.h checks
 *                          them), which no tensor's shape tells
 *   optimizer.safetensors  AdamW's moments, "m.<name>" and "v.<name>"
 *   config.json            (GPT) a Hugging Face GPT2Config, so the
 *                          directory opens with GPT2LMHeadModel
 *   state.json             step, loss, time, training-data position and
 *                          what it was read from (each shard's path,
 *                          size and the CRC-32C of its first 64 KiB, in
 *                          reading order; the micro-batch layout), the
 *                          resolved config, and each other
 *                          file's size and CRC-32C (checksum.h, summed as
 *                          it was written); its last line is the CRC-32C
 *                          of the text before it
 * It is written under a temporary name, fsync'd and renamed into place
 * (atomicfile.h): a crash at any moment leaves the previous checkpoints
 * intact and never a partial one under a final name. Resuming restores
 * weights, moments, step and data position, so the continued run equals
 * an uninterrupted one bit for bit on the same backend and rank layout.
 *
 * Every load checks first: state.json against its own checksum, then each
 * file's size and checksum, so a flipped bit or a truncated file is
 * refused (HY_ERR_INPUT, naming the file, the checksums and the previous
 * checkpoint to resume from) instead of trained on. Checkpoints written
 * before checksums (format 1) still load, reported as unverified.
 */
#ifndef HY_CHECKPOINT_H
#define HY_CHECKPOINT_H

#include <limits.h>
#include <stdint.h>

#include "error.h"
#include "runtime.h"

/* Saves rt's state after its last step into dir/step_%06d (creating dir if
 * needed; replacing an older checkpoint of the same step), with its run's
 * resolved config (hy_runtime_run). The path it wrote goes to saved (when
 * not NULL, PATH_MAX bytes). */
int hy_checkpoint_save(hy_runtime *rt, const char *dir, char *saved, hy_error *err);

/* Checks checkpoint directory `path` (see the top) and loads it into rt,
 * whose run must describe the same model (the keys model.* must match,
 * BERT's mask_token too: a checkpoint older than that key masked with
 * model.vocab - 1; errors name the key) and read the same data the same way (the same
 * shards in the same order, each by its size and first 64 KiB;
 * micro_batches and micro_batch_size: else the data position would mean
 * other tokens). *unverified: 1 for a
 * checkpoint without checksums (loaded, but nothing could be checked). */
int hy_checkpoint_load(hy_runtime *rt, const char *path, int *unverified, hy_error *err);

/* The checks of a load without loading: state.json's own checksum and
 * every file's size and checksum. HY_ERR_INPUT naming what is wrong;
 * *unverified as above. */
int hy_checkpoint_verify(const char *path, int *unverified, hy_error *err);

/* When `file` (a weights file to start from: config key init, eval
 * --init) lies in a checkpoint directory, checks it against the
 * directory's state.json, and (m not NULL) that the checkpoint is of
 * model m: its recorded config.model must have m's kind, layers,
 * d_model, heads, vocab and (GPT, BERT) positions, not its seq_len (a
 * BERT checkpoint's tensors have a GPT's names and shapes, so only the
 * record tells them apart):
 * HY_ERR_INPUT naming the key. A file elsewhere is not a checkpoint's
 * and passes (*unverified 0): weights.h checks its tensors' shapes (and
 * the model a hanayo checkpoint's weights record, when they do). */
int hy_checkpoint_verify_file(const char *file, const hy_model *m, int *unverified,
                              hy_error *err);

/* What --resume PATH (or eval --init PATH: `flag` names it in messages)
 * means: PATH itself when it is a checkpoint (holds a state.json) or not
 * a directory (the load then says what is wrong); else the newest
 * step_NNNNNN checkpoint in it, which must hold a state.json (the load
 * verifies the rest). Into resolved, PATH_MAX bytes. */
int hy_checkpoint_resolve(const char *flag, const char *path, char *resolved, hy_error *err);

/* A run that resumes checkpoint `resumed` (after step `step`) and saves
 * into checkpoint.dir `dir`: refused (HY_ERR_INPUT) when dir holds
 * checkpoints of later steps, which its saves would replace one by one
 * (or leave beside its own, two runs' histories in one directory). The
 * message names them and the ways on: resume from the newest, give the
 * run another checkpoint.dir, or remove them. A dir that does not exist
 * yet holds none. */
int hy_checkpoint_check_newer(const char *dir, const char *resumed, int step, hy_error *err);

/* A new run (no --resume) that saves into checkpoint.dir `dir`: refused
 * (HY_ERR_INPUT) when dir already holds step_NNNNNN directories, another
 * run's: its saves would land beside them (replacing those of the same
 * step), and `--resume dir` would then continue whichever run's step is
 * newest. The message names them and the ways on: --resume to continue
 * that run, another checkpoint.dir, removing them, or --fresh. With
 * `fresh` (train --fresh: start over beside them) it passes. *beside:
 * how many it holds, *newest: the newest's step (-1: none). A dir that
 * does not exist yet holds none. */
int hy_checkpoint_check_new_run(const char *dir, int fresh, int *beside, int *newest,
                                hy_error *err);

/* The learning-rate schedule checkpoint `path` was trained with (its
 * state.json's config.train: lr, min_lr, warmup_steps, lr_schedule,
 * decay_fraction, steps) against run's, for a resume: a changed one bends
 * the curve mid-run (a longer train.steps stretches the cosine, so the
 * rate jumps at the first resumed step). *saved: run's train settings
 * with the checkpoint's schedule in them (a key the checkpoint does not
 * record, from before it existed, keeps the value it had then: cosine,
 * or run's); diff: what differs, as "train.steps 200 -> 400, train.lr
 * 0.001 -> 0.0005" ("" when nothing does, PATH_MAX bytes). Keys that
 * do not shape run's schedule are not compared: train.steps and min_lr
 * under `constant`, decay_fraction but under `wsd`. */
int hy_checkpoint_schedule(const char *path, const hy_run *run, hy_run_train *saved, char *diff,
                           hy_error *err);

/* One checkpoint, as `hanayo checkpoint list` shows it. */
typedef struct {
    char path[PATH_MAX];
    int step;
    double loss;          /* NaN when it was not recorded */
    char time[32];        /* UTC, "2026-12-03T13:05:00Z"; "" when not recorded */
    uint64_t bytes;       /* its files together */
    int format;
} hy_checkpoint_info;

/* The checkpoints in dir (its step_NNNNNN directories; or dir itself when
 * it is one), by step ascending, into a malloc'd *out. */
int hy_checkpoint_find(const char *dir, hy_checkpoint_info **out, int *n, hy_error *err);

/* The runs under dir, a directory of checkpoint.dirs ("checkpoints/"
 * holding "tiny-gpt/step_000200"): each subdirectory one level down that
 * holds step_NNNNNN checkpoints (not a hidden one, nor one that is a
 * checkpoint itself), by name, with its checkpoints, into a malloc'd
 * *out (freed by hy_checkpoint_runs_free). So a checkpoint.dir has no
 * runs under it. */
typedef struct {
    char path[PATH_MAX];
    hy_checkpoint_info *found;
    int n;
} hy_checkpoint_run;

int hy_checkpoint_find_runs(const char *dir, hy_checkpoint_run **out, int *n, hy_error *err);
void hy_checkpoint_runs_free(hy_checkpoint_run *runs, int n);

/* One writer per checkpoint.dir: an exclusive flock on dir/.lock (dir is
 * created), which holds the writer's pid while it runs. The kernel releases it when the
 * process ends however it ends, so a killed run never leaves it stuck. A
 * second run is refused (HY_ERR_INPUT) naming the directory and the pid
 * that holds it. Once it holds the lock, it removes the hidden
 * temporaries a writer killed mid-save left (leftovers: how many). */
typedef struct {
    int fd;              /* -1: not held */
    int leftovers;
    size_t made;         /* dir[0..made) was the first directory it made; 0: none */
    char dir[PATH_MAX];
} hy_checkpoint_lock;

int hy_checkpoint_lock_dir(const char *dir, hy_checkpoint_lock *lk, hy_error *err);
/* Removes the lock file, lets go, and removes the directories taking the
 * lock made if they are still empty: a run that ends leaves only its
 * checkpoints, and a run refused or failed before its first save leaves
 * nothing. (A killed run leaves the file, which the next run takes.) */
void hy_checkpoint_unlock(hy_checkpoint_lock *lk);

/* Retention: with keep > 0, removes the checkpoints of dir beyond the
 * newest keep (by step), except those whose directory holds a file named
 * `keep` and the one of saved_step (just written: never its own victim,
 * even when an older run left higher steps in dir; -1: none). Each goes
 * whole (atomicfile.h's hy_atomic_dir_remove). Called only after the new
 * checkpoint is complete and synced. *removed: how many went. */
int hy_checkpoint_prune(const char *dir, int keep, int saved_step, int *removed,
                        hy_error *err);

#endif
