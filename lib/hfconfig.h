/*
 * hfconfig.h — Hugging Face's config.json for a model: a LlamaForCausalLM's
 * read into a model shape, and the GPT2Config or LlamaConfig a checkpoint
 * writes beside its weights.
 *
 * One mapping serves the three places that need it: `model.from` (the
 * config's model block read from a checkpoint's config.json, config.h),
 * `init` from a Hugging Face directory (its config.json must describe the
 * config's model, weights.h) and checkpoints (checkpoint.h), so the field
 * names and defaults cannot drift apart. Both spellings transformers has
 * used for the rope settings are read: rope_theta and rope_scaling at the
 * top (before transformers 5) and rope_parameters; the first is written,
 * which every version reads. Nothing here prints or exits.
 */
#ifndef HY_HFCONFIG_H
#define HY_HFCONFIG_H

#include <jansson.h>

#include "error.h"
#include "model.h"

/* The fields of a Llama's shape config.json gives. */
enum {
    HY_HF_LAYERS, HY_HF_D_MODEL, HY_HF_HEADS, HY_HF_KV_HEADS, HY_HF_FFN_DIM, HY_HF_VOCAB,
    HY_HF_NORM_EPS, HY_HF_ROPE_THETA, HY_HF_TIE, HY_HF_ROPE_FACTOR, HY_HF_ROPE_LOW,
    HY_HF_ROPE_HIGH, HY_HF_ROPE_ORIGINAL, HY_HF_FIELDS
};

/* Field f's name in config.json ("num_key_value_heads") and the config
 * key it sets ("model.kv_heads"). */
const char *hy_hfconfig_field(int f);
const char *hy_hfconfig_key(int f);

/* Field f of shape s, as a number (tie_embeddings: 0 or 1). */
double hy_hfconfig_value(const hy_model_shape *s, int f);

/* Reads the config.json at path into *s: kind llama and every field
 * above (Hugging Face's defaults where it leaves one out: kv heads =
 * heads, rms_norm_eps 1e-6, rope_theta 10000, untied, no scaling);
 * seq_len is not a property of the weights and stays 0. HY_ERR_INPUT
 * naming the file and the field for a file that is not a Llama's, a
 * field missing or not a number, a head_dim other than hidden_size /
 * num_attention_heads, or a rope scaling other than Llama 3's. */
int hy_hfconfig_read(const char *path, hy_model_shape *s, hy_error *err);

/* Hugging Face's config for model m (GPT2LMHeadModel or
 * LlamaForCausalLM), so transformers opens a checkpoint; NULL on OOM.
 * BERT has none (NULL). */
json_t *hy_hfconfig_json(const hy_model *m);

#endif
