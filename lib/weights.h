/*
 * weights.h — loading a model's weights from a safetensors file with
 * Hugging Face GPT-2 names, into a runtime.
 *
 * The files are those transformers writes for GPT2LMHeadModel (and
 * hanayo's own checkpoints, checkpoint.h): tensor names as model.h gives
 * them, with or without a "transformer." prefix; F32, BF16 or F16; wte
 * with the real vocabulary's rows or with the padded vocabulary's. Every
 * parameter must be there with its shape, and every tensor must be a
 * parameter, except the ones Hugging Face files carry beside them: the
 * attention-mask buffers (".attn.bias", ".attn.masked_bias") and the tied
 * lm_head.weight. Config key `init` loads a file at start-up
 * (hy_runtime_create); a checkpoint's model.safetensors loads the same way.
 *
 * It talks to the runtime through runtime.h only: each tensor is put as it
 * is read (hy_runtime_put), then the compute copies are refreshed once
 * (hy_runtime_refresh); hy_weights_read reads the same into host blocks.
 */
#ifndef HY_WEIGHTS_H
#define HY_WEIGHTS_H

#include "error.h"
#include "runtime.h"

/* Replaces rt's weights with those of the file at path. Errors name the
 * file and the tensor: a missing parameter, a shape the config's model
 * does not have, a tensor that is not a parameter, a value that is NaN or
 * infinite (HY_ERR_INPUT); an unreadable file as safetensors.h reports
 * it. A hanayo checkpoint's weights also record their model's kind and
 * heads (metadata "hanayo_model", "hanayo_heads"), which must be the
 * config's: GPT and BERT tensors share names and shapes. Other files
 * (Hugging Face's) are checked by their shapes alone. */
int hy_weights_load(hy_runtime *rt, const char *path, hy_error *err);

/* The same checks and values into host memory instead of a runtime:
 * blocks[s] holds stage s's parameter block of m (m->stage_numel[s]
 * floats, wte's padding rows left as they were). What generation loads
 * (sample.h), which runs no training runtime. */
int hy_weights_read(const hy_model *m, const char *path, float *const *blocks, hy_error *err);

/* The n values just read from tensor `name` of the file at path must all
 * be finite and, with nonneg, >= 0 (AdamW's second moments): else
 * HY_ERR_INPUT naming the file, the tensor, the first bad value and its
 * index. A NaN or infinity in weights makes every step of a run
 * non-finite, so it is refused at the load, as the bad input it is. */
int hy_weights_check(const char *path, const char *name, const float *v, size_t n, int nonneg,
                     hy_error *err);

#endif
