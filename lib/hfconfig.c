/*
 * hfconfig.c — see hfconfig.h.
 */
#include "hfconfig.h"

#include <assert.h>
#include <string.h>

#include "infile.h"
#include "safetensors.h"

static const char *const FIELDS[HY_HF_FIELDS] = {
    "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
    "intermediate_size", "vocab_size", "rms_norm_eps", "rope_theta", "tie_word_embeddings",
    "factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings",
};

static const char *const KEYS[HY_HF_FIELDS] = {
    "model.layers", "model.d_model", "model.heads", "model.kv_heads", "model.ffn_dim",
    "model.vocab", "model.norm_eps", "model.rope_theta", "model.tie_embeddings",
    "model.rope_scaling.factor", "model.rope_scaling.low_freq_factor",
    "model.rope_scaling.high_freq_factor",
    "model.rope_scaling.original_max_position_embeddings",
};

/* BertConfig's names of the same fields; NULL where BERT has none. */
static const char *const BERT_FIELDS[HY_HF_FIELDS] = {
    "num_hidden_layers", "hidden_size", "num_attention_heads", NULL, "intermediate_size",
    "vocab_size", "layer_norm_eps", NULL, "tie_word_embeddings", NULL, NULL, NULL, NULL,
};

const char *hy_hfconfig_field(int f) { return (unsigned)f < HY_HF_FIELDS ? FIELDS[f] : "?"; }

const char *hy_hfconfig_field_of(hy_model_kind kind, int f) {
    if ((unsigned)f >= HY_HF_FIELDS) return NULL;
    return kind == HY_MODEL_BERT ? BERT_FIELDS[f] : FIELDS[f];
}
const char *hy_hfconfig_key(int f) { return (unsigned)f < HY_HF_FIELDS ? KEYS[f] : "?"; }

double hy_hfconfig_value(const hy_model_shape *s, int f) {
    switch (f) {
    case HY_HF_LAYERS: return s->layers;
    case HY_HF_D_MODEL: return s->d_model;
    case HY_HF_HEADS: return s->heads;
    case HY_HF_KV_HEADS: return s->kv_heads;
    case HY_HF_FFN_DIM: return s->ffn_dim;
    case HY_HF_VOCAB: return s->vocab;
    case HY_HF_NORM_EPS: return s->norm_eps;
    case HY_HF_ROPE_THETA: return s->rope_theta;
    case HY_HF_TIE: return s->tie_embeddings;
    case HY_HF_ROPE_FACTOR: return s->rope_scaling.factor;
    case HY_HF_ROPE_LOW: return s->rope_scaling.low_freq_factor;
    case HY_HF_ROPE_HIGH: return s->rope_scaling.high_freq_factor;
    case HY_HF_ROPE_ORIGINAL: return s->rope_scaling.original_max_position_embeddings;
    default: assert(0 && "no such field"); return 0;
    }
}

/* Field `key` of o as a number into *out; def when absent and has_def. */
static int hf_number(const char *path, json_t *o, const char *key, double def, int has_def,
                     double *out, hy_error *err) {
    json_t *v = json_object_get(o, key);
    if (!v && has_def) {
        *out = def;
        return HY_OK;
    }
    if (!json_is_number(v))
        return hy_fail(err, HY_ERR_INPUT, "%s: \"%s\" is %s, a number is needed", path, key,
                       v ? "not a number" : "missing");
    *out = json_number_value(v);
    return HY_OK;
}

/* A whole number that fits an int, for a count. */
static int hf_int(const char *path, const char *key, double v, int *out, hy_error *err) {
    if (!(v >= 0 && v <= 2147483647.0) || v != (double)(int)v)
        return hy_fail(err, HY_ERR_INPUT, "%s: \"%s\" is %g, not a count", path, key, v);
    *out = (int)v;
    return HY_OK;
}

/* The counts every kind's config gives (read into v by field), named in
 * `names` (FIELDS or BERT_FIELDS), into s. */
static int hf_counts(const char *path, const char *const *names, const double *v,
                     hy_model_shape *s, hy_error *err) {
    int rc = hf_int(path, names[HY_HF_LAYERS], v[HY_HF_LAYERS], &s->layers, err);
    if (!rc) rc = hf_int(path, names[HY_HF_D_MODEL], v[HY_HF_D_MODEL], &s->d_model, err);
    if (!rc) rc = hf_int(path, names[HY_HF_HEADS], v[HY_HF_HEADS], &s->heads, err);
    if (!rc) rc = hf_int(path, names[HY_HF_FFN_DIM], v[HY_HF_FFN_DIM], &s->ffn_dim, err);
    if (!rc) rc = hf_int(path, names[HY_HF_VOCAB], v[HY_HF_VOCAB], &s->vocab, err);
    return rc;
}

/* String field `key` of o must be `want` (absent: BertConfig's default,
 * which is want). */
static int hf_string_is(const char *path, json_t *o, const char *key, const char *want,
                        const char *why, hy_error *err) {
    json_t *v = json_object_get(o, key);
    if (!v || (json_is_string(v) && !strcmp(json_string_value(v), want))) return HY_OK;
    return hy_fail(err, HY_ERR_INPUT, "%s: \"%s\" is %s, hanayo's BERT has \"%s\" only (%s)",
                   path, key, json_is_string(v) ? hy_safetensors_show(json_string_value(v)).s
                                                : "not a string", want, why);
}

/* A BertConfig (model_type "bert"): the post-LN BERT of BertForMaskedLM. */
static int hf_read_bert(const char *path, json_t *o, hy_model_shape *s, hy_error *err) {
    double v[HY_HF_FIELDS] = { 0 }, seq = 0, types = 0;
    int rc = HY_OK;
    for (int f = 0; f < HY_HF_FIELDS && !rc; f++) {
        const char *key = BERT_FIELDS[f];
        if (!key || f == HY_HF_TIE) continue;
        rc = hf_number(path, o, key, 1e-12, f == HY_HF_NORM_EPS, &v[f], err);
    }
    json_t *tie = json_object_get(o, "tie_word_embeddings");
    if (!rc && tie && !json_is_true(tie))
        rc = hy_fail(err, HY_ERR_INPUT, "%s: \"tie_word_embeddings\" is not true; hanayo's BERT "
                     "decoder is its word embedding", path);
    if (!rc) rc = hf_number(path, o, "max_position_embeddings", 512, 1, &seq, err);
    if (!rc) rc = hf_number(path, o, "type_vocab_size", 2, 1, &types, err);
    if (!rc && types != HY_BERT_TYPE_VOCAB)
        rc = hy_fail(err, HY_ERR_INPUT, "%s: \"type_vocab_size\" is %g, hanayo's BERT has %d "
                     "token types (it reads type 0)", path, types, HY_BERT_TYPE_VOCAB);
    if (!rc) rc = hf_string_is(path, o, "hidden_act", "gelu", "the exact erf GELU", err);
    if (!rc) rc = hf_string_is(path, o, "position_embedding_type", "absolute",
                               "learned positions", err);
    memset(s, 0, sizeof *s);
    s->kind = HY_MODEL_BERT;
    s->norm = HY_NORM_POST;
    if (!rc) rc = hf_counts(path, BERT_FIELDS, v, s, err);
    if (!rc) rc = hf_int(path, "max_position_embeddings", seq, &s->positions, err);
    if (rc) return rc;
    s->seq_len = s->positions;
    if (s->ffn_dim != 4 * s->d_model)
        return hy_fail(err, HY_ERR_INPUT, "%s: \"intermediate_size\" is %d, not 4 x hidden_size "
                       "(%d), which hanayo's BERT MLP is", path, s->ffn_dim, 4 * s->d_model);
    s->kv_heads = s->heads;
    s->tie_embeddings = 1;
    s->norm_eps = v[HY_HF_NORM_EPS];
    s->rope_theta = 10000;
    s->rope_scaling = (hy_rope_scaling){ 0, 1, 4, 8192 };
    return HY_OK;
}

static int hf_read(const char *path, json_t *o, hy_model_shape *s, hy_error *err) {
    const char *type = json_string_value(json_object_get(o, "model_type"));
    if (type && !strcmp(type, "bert")) return hf_read_bert(path, o, s, err);
    if (!type || strcmp(type, "llama") != 0)
        return hy_fail(err, HY_ERR_INPUT, "%s: model_type is %s, not \"llama\" or \"bert\"; "
                       "hanayo reads LlamaForCausalLM and BertForMaskedLM checkpoints", path,
                       type ? hy_safetensors_show(type).s : "missing");
    json_t *rp = json_object_get(o, "rope_parameters");
    json_t *scaling = json_is_object(rp) ? rp : json_object_get(o, "rope_scaling");
    json_t *theta_in = json_is_object(rp) && json_object_get(rp, "rope_theta") ? rp : o;
    const char *rope_type = json_string_value(json_object_get(scaling, "rope_type"));
    if (!rope_type) rope_type = json_string_value(json_object_get(scaling, "type"));
    int scaled = json_is_object(scaling) && rope_type && strcmp(rope_type, "default") != 0;
    if (scaled && strcmp(rope_type, "llama3") != 0)
        return hy_fail(err, HY_ERR_INPUT, "%s: rope scaling \"%s\" is not supported; hanayo has "
                       "Llama 3's (\"llama3\") only", path, hy_safetensors_show(rope_type).s);
    double v[HY_HF_FIELDS] = { 0 };
    int rc = HY_OK;
    for (int f = 0; f < HY_HF_FIELDS && !rc; f++) {
        json_t *in = f >= HY_HF_ROPE_FACTOR ? scaling : f == HY_HF_ROPE_THETA ? theta_in : o;
        if (f >= HY_HF_ROPE_FACTOR && !scaled) break;
        if (f == HY_HF_TIE) {   /* LlamaConfig's default: untied */
            json_t *tie = json_object_get(o, FIELDS[f]);
            if (tie && !json_is_boolean(tie))
                rc = hy_fail(err, HY_ERR_INPUT, "%s: \"%s\" is not true or false", path, FIELDS[f]);
            v[f] = json_is_true(tie);
            continue;
        }
        int has_def = f == HY_HF_KV_HEADS || f == HY_HF_NORM_EPS || f == HY_HF_ROPE_THETA;
        double def = f == HY_HF_KV_HEADS ? v[HY_HF_HEADS] : f == HY_HF_NORM_EPS ? 1e-6 : 10000;
        rc = hf_number(path, in, FIELDS[f], def, has_def, &v[f], err);
    }
    memset(s, 0, sizeof *s);
    s->kind = HY_MODEL_LLAMA;
    if (!rc) rc = hf_counts(path, FIELDS, v, s, err);
    if (!rc) rc = hf_int(path, FIELDS[HY_HF_KV_HEADS], v[HY_HF_KV_HEADS], &s->kv_heads, err);
    if (!rc && scaled)
        rc = hf_int(path, FIELDS[HY_HF_ROPE_ORIGINAL], v[HY_HF_ROPE_ORIGINAL],
                    &s->rope_scaling.original_max_position_embeddings, err);
    if (rc) return rc;
    s->norm_eps = v[HY_HF_NORM_EPS];
    s->rope_theta = v[HY_HF_ROPE_THETA];
    s->tie_embeddings = (int)v[HY_HF_TIE];
    s->rope_scaling.factor = scaled ? v[HY_HF_ROPE_FACTOR] : 0;
    s->rope_scaling.low_freq_factor = scaled ? v[HY_HF_ROPE_LOW] : 1;
    s->rope_scaling.high_freq_factor = scaled ? v[HY_HF_ROPE_HIGH] : 4;
    if (!scaled) s->rope_scaling.original_max_position_embeddings = 8192;
    /* hanayo's head size is d_model / heads; a model with another one
     * (some Mistral and Qwen variants) has other shapes. */
    double hd = 0;
    if (s->heads > 0 && s->d_model % s->heads == 0)
        rc = hf_number(path, o, "head_dim", s->d_model / s->heads, 1, &hd, err);
    if (!rc && (s->heads <= 0 || hd != (double)(s->d_model / s->heads)))
        rc = hy_fail(err, HY_ERR_INPUT, "%s: head_dim is not hidden_size / num_attention_heads "
                     "(%d / %d); hanayo's head size is d_model / heads", path, s->d_model,
                     s->heads);
    return rc;
}

int hy_hfconfig_read(const char *path, hy_model_shape *s, hy_error *err) {
    json_error_t je;
    json_t *o = hy_infile_json(path, JSON_REJECT_DUPLICATES, &je);
    if (!o)
        return hy_fail(err, HY_ERR_INPUT, "%s: %s (a Hugging Face checkpoint's directory holds "
                       "config.json beside its safetensors)", path, je.text);
    int rc = json_is_object(o) ? hf_read(path, o, s, err)
                               : hy_fail(err, HY_ERR_INPUT, "%s: not a JSON object", path);
    json_decref(o);
    return rc;
}

json_t *hy_hfconfig_json(const hy_model *m) {
    if (m->kind == HY_MODEL_GPT)
        return json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:s, s:b}",
                         "architectures", "GPT2LMHeadModel", "model_type", "gpt2",
                         "n_layer", m->layers, "n_embd", m->d_model, "n_head", m->heads,
                         "n_positions", m->positions, "n_ctx", m->positions, "vocab_size", m->vocab,
                         "layer_norm_epsilon", 1e-5, "activation_function", "gelu_new",
                         "tie_word_embeddings", 1);
    /* pad_token_id null: BertConfig's default, 0, would make PyTorch
     * freeze row 0 of the word embeddings (padding_idx), which hanayo
     * trains like any other (its sequences are packed, never padded). */
    if (m->kind == HY_MODEL_BERT && m->norm == HY_NORM_POST)
        return json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:s, s:i, s:s, s:b, "
                         "s:s, s:n}",
                         "architectures", "BertForMaskedLM", "model_type", "bert",
                         "num_hidden_layers", m->layers, "hidden_size", m->d_model,
                         "num_attention_heads", m->heads, "intermediate_size", m->ffn_dim,
                         "max_position_embeddings", m->positions, "vocab_size", m->vocab,
                         "layer_norm_eps", m->norm_eps, "hidden_act", "gelu",
                         "type_vocab_size", HY_BERT_TYPE_VOCAB,
                         "position_embedding_type", "absolute", "tie_word_embeddings", 1,
                         "torch_dtype", "float32", "pad_token_id");
    if (m->kind != HY_MODEL_LLAMA) return NULL;
    const hy_rope_scaling *rs = &m->rope_scaling;
    json_t *scaling = rs->factor == 0 ? json_null()
                    : json_pack("{s:s, s:f, s:f, s:f, s:i}", "rope_type", "llama3",
                                "factor", rs->factor, "low_freq_factor", rs->low_freq_factor,
                                "high_freq_factor", rs->high_freq_factor,
                                "original_max_position_embeddings",
                                rs->original_max_position_embeddings);
    return json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:f, s:o, s:s, "
                     "s:b, s:b, s:b, s:s}",
                     "architectures", "LlamaForCausalLM", "model_type", "llama",
                     "num_hidden_layers", m->layers, "hidden_size", m->d_model,
                     "num_attention_heads", m->heads, "num_key_value_heads", m->kv_heads,
                     "head_dim", m->head_dim, "intermediate_size", m->ffn_dim,
                     "vocab_size", m->vocab, "max_position_embeddings", m->seq_len,
                     "rms_norm_eps", m->norm_eps, "rope_theta", m->rope_theta,
                     "rope_scaling", scaling, "hidden_act", "silu",
                     "attention_bias", 0, "mlp_bias", 0,
                     "tie_word_embeddings", m->tie_embeddings, "torch_dtype", "float32");
}
