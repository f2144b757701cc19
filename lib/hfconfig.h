/*
 * hfconfig.h — Hugging Face's config.json for a model: a LlamaForCausalLM's
 * or a BertForMaskedLM's read into a model shape, and the GPT2Config,
 * LlamaConfig or BertConfig a checkpoint writes beside its weights.
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

/* Field f's name in the config.json of a model of `kind` (BERT's
 * layer_norm_eps for norm_eps); NULL where that kind has none (BERT's
 * kv heads and rope fields). */
const char *hy_hfconfig_field_of(hy_model_kind kind, int f);
const char *hy_hfconfig_key(int f);

/* Field f of shape s, as a number (tie_embeddings: 0 or 1). */
double hy_hfconfig_value(const hy_model_shape *s, int f);

/* Reads the config.json at path into *s. A Llama's (model_type "llama"):
 * kind llama and every field above (Hugging Face's defaults where it
 * leaves one out: kv heads = heads, rms_norm_eps 1e-6, rope_theta 10000,
 * untied, no scaling); seq_len and positions are not properties of the
 * weights and stay 0. A BertConfig (model_type "bert"): kind bert, norm
 * post, the shape, layer_norm_eps (default 1e-12) and positions =
 * max_position_embeddings (the position embedding's rows), seq_len as
 * many. HY_ERR_INPUT naming the file and the field for a file that is
 * neither, a field missing or not a number, a
 * head_dim other than hidden_size / num_attention_heads, a rope scaling
 * other than Llama 3's; for BERT an intermediate_size other than 4 x
 * hidden_size, a hidden_act other than "gelu", a type_vocab_size other
 * than 2, a position_embedding_type other than "absolute" or an untied
 * decoder. */
int hy_hfconfig_read(const char *path, hy_model_shape *s, hy_error *err);

/* Hugging Face's config for model m (GPT2LMHeadModel, LlamaForCausalLM
 * or, for post-LN BERT, BertForMaskedLM), so transformers opens a
 * checkpoint: GPT's n_positions and BERT's max_position_embeddings are
 * the position table's rows (model.positions), a Llama's
 * max_position_embeddings its seq_len; NULL on OOM. Pre-LN BERT has none
 * (NULL). */
json_t *hy_hfconfig_json(const hy_model *m);

#endif
