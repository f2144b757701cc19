/*
 * checkpoint.h — saving and resuming training
 * (DESIGN §5 "Model, numerics, data, files").
 *
 * A checkpoint is a directory per step, <checkpoint.dir>/step_%06d/:
 *   model.safetensors      the weights, Hugging Face GPT-2 names, F32,
 *                          the vocabulary unpadded
 *   optimizer.safetensors  AdamW's moments, "m.<name>" and "v.<name>"
 *   state.json             step, training-data position, resolved config
 *   config.json            (GPT) a Hugging Face GPT2Config, so the
 *                          directory opens with GPT2LMHeadModel
 * It is written under a temporary name, fsync'd and renamed into place
 * (atomicfile.h): a crash at any moment leaves the previous checkpoints
 * intact and never a partial one under a final name. Resuming restores
 * weights, moments, step and data position, so the continued run equals
 * an uninterrupted one bit for bit on the same backend and rank layout.
 */
#ifndef HY_CHECKPOINT_H
#define HY_CHECKPOINT_H

#include "config.h"
#include "error.h"
#include "runtime.h"

/* Saves rt's state after its last step into dir/step_%06d (creating dir if
 * needed; replacing an older checkpoint of the same step). The path it
 * wrote goes to saved (when not NULL, PATH_MAX bytes). */
int hy_checkpoint_save(hy_runtime *rt, const hy_config *c, const char *dir, char *saved,
                       hy_error *err);

/* Loads checkpoint directory `path` into rt, whose config must describe
 * the same model (the keys model.* must match; errors name the key). */
int hy_checkpoint_load(hy_runtime *rt, const hy_config *c, const char *path, hy_error *err);

#endif
