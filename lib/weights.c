/*
 * weights.c — see weights.h.
 */
#include "weights.h"

#include <assert.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "hfconfig.h"
#include "infile.h"
#include "model.h"
#include "safetensors.h"

/* The most shards a Hugging Face checkpoint may have here (Llama 3 70B
 * has 30). */
#define WT_MAX_SHARDS 256

/* Tensors Hugging Face GPT-2 files carry that are not parameters here. */
static int wt_ignorable(const char *name) {
    if (strncmp(name, "transformer.", 12) == 0) name += 12;
    size_t n = strlen(name);
    return !strcmp(name, "lm_head.weight") ||
           (n > 10 && !strcmp(name + n - 10, ".attn.bias")) ||
           (n > 17 && !strcmp(name + n - 17, ".attn.masked_bias"));
}

/* "[a, b, ...]" */
static void wt_shape_text(char *buf, size_t n, int ndim, const size_t *shape) {
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%zu", i ? ", " : "", shape[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
}

/* A file's position table of `rows` rows (its tensor `tensor`; NULL:
 * its config.json's max_position_embeddings) where m's has another count:
 * the --set that fits, and the seq_len that fits with it when the
 * config's is longer than the file's table. */
static int wt_positions_differ(const char *path, const char *tensor, int rows, const hy_model *m,
                               hy_error *err) {
    char what[160], also[64] = "";
    if (tensor) snprintf(what, sizeof what, "tensor '%s' has %d rows", tensor, rows);
    else snprintf(what, sizeof what, "max_position_embeddings is %d", rows);
    if (m->seq_len > rows) snprintf(also, sizeof also, " --set model.seq_len=%d", rows);
    return hy_fail(err, HY_ERR_INPUT, "%s: %s, the config's model.positions is %d: the learned "
                   "position table's rows; use the file's (--set model.positions=%d%s)", path,
                   what, m->positions, rows, also);
}

/* Where the values read go: each parameter's numel floats, once. */
typedef int (*wt_sink)(void *ctx, const hy_param *p, const float *v, hy_error *err);

/* Reads parameter p from f into host (p->numel floats: wte's padding rows,
 * when the file has only the real vocabulary's, stay zero) and hands it
 * to put. */
static int wt_load_tensor(wt_sink put, void *ctx, const hy_model *m, const hy_safetensors_file *f,
                          const hy_param *p, float *host, hy_error *err) {
    char prefixed[96];
    snprintf(prefixed, sizeof prefixed, "transformer.%s", p->name);
    const hy_safetensors_tensor *t = hy_safetensors_find(f, p->name);
    if (!t) t = hy_safetensors_find(f, prefixed);
    char want[48], have[160];
    /* What a file holds: wte's real rows, not its padding (model.h). */
    size_t rows = p->kind == HY_P_WTE ? (size_t)m->vocab : (size_t)p->shape[0];
    wt_shape_text(want, sizeof want, p->ndim, (const size_t[2]){ rows, (size_t)p->shape[1] });
    if (!t)
        return hy_fail(err, HY_ERR_INPUT, "%s: tensor '%s' is missing (the config's model has "
                       "it, shape %s)", f->path, p->name, want);
    int rows_ok = t->ndim >= 1 && (t->shape[0] == (size_t)p->shape[0] ||
                                   (p->kind == HY_P_WTE && t->shape[0] == (size_t)m->vocab));
    if (p->kind == HY_P_WPE && t->ndim == 2 && t->shape[1] == (size_t)p->shape[1] && !rows_ok &&
        t->shape[0] <= (size_t)INT_MAX)
        return wt_positions_differ(f->path, t->name, (int)t->shape[0], m, err);
    if (t->ndim != p->ndim || !rows_ok || (p->ndim == 2 && t->shape[1] != (size_t)p->shape[1])) {
        wt_shape_text(have, sizeof have, t->ndim, t->shape);
        return hy_fail(err, HY_ERR_INPUT, "%s: tensor '%s' has shape %s, the config's model "
                       "needs %s; check model.* in the config", f->path, t->name, have, want);
    }
    memset(host, 0, p->numel * sizeof(float));
    int rc = hy_safetensors_read_f32(f, t, host, t->numel, err);
    if (!rc) rc = hy_weights_check(f->path, t->name, host, t->numel, 0, err);
    return rc ? rc : put(ctx, p, host, err);
}

/* The model a hanayo checkpoint's weights record (checkpoint.h writes
 * "hanayo_model" and "hanayo_heads" into their metadata) must be m: a
 * BERT's tensors have a GPT's names and shapes, and the heads split
 * d_model without changing any shape. A file without them (transformers
 * writes none) is checked by its shapes alone. */
static int wt_check_model(const hy_safetensors_file *f, const hy_model *m, hy_error *err) {
    const char *kind = hy_safetensors_meta_get(f, "hanayo_model");
    const char *heads = hy_safetensors_meta_get(f, "hanayo_heads");
    char now[16];
    snprintf(now, sizeof now, "%d", m->heads);
    if (kind && strcmp(kind, hy_model_name(m->kind)) != 0)
        return hy_fail(err, HY_ERR_INPUT, "%s holds the weights of a %s model (its metadata "
                       "hanayo_model), the config's model.kind is %s: these are another "
                       "model's weights", f->path, hy_safetensors_show(kind).s,
                       hy_model_name(m->kind));
    /* A BERT file from before model.norm is a pre-LN one. */
    const char *norm = hy_safetensors_meta_get(f, "hanayo_norm");
    if (!norm && kind && m->kind == HY_MODEL_BERT) norm = "pre";
    if (norm && m->kind == HY_MODEL_BERT && strcmp(norm, hy_model_norm_name(m->norm)) != 0)
        return hy_fail(err, HY_ERR_INPUT, "%s holds the weights of a BERT with model.norm \"%s\" "
                       "(its metadata hanayo_norm, absent: \"pre\"), the config's model.norm is "
                       "\"%s\": another architecture's weights; --set model.norm=%s",
                       f->path, hy_safetensors_show(norm).s, hy_model_norm_name(m->norm),
                       hy_safetensors_show(norm).s);
    if (heads && strcmp(heads, now) != 0)
        return hy_fail(err, HY_ERR_INPUT, "%s holds the weights of a model with %s heads (its "
                       "metadata hanayo_heads), the config's model.heads is %d: the same "
                       "shapes, split otherwise; use the weights' model.heads", f->path,
                       hy_safetensors_show(heads).s, m->heads);
    return HY_OK;
}

int hy_weights_check(const char *path, const char *name, const float *v, size_t n, int nonneg,
                     hy_error *err) {
    for (size_t i = 0; i < n; i++) {
        if (isfinite(v[i]) && (!nonneg || v[i] >= 0)) continue;
        const char *what = isnan(v[i]) ? "NaN" : isinf(v[i]) ? (v[i] > 0 ? "+Inf" : "-Inf")
                                                             : "a negative value";
        return hy_fail(err, HY_ERR_INPUT, "%s: tensor '%s' holds %s at index %zu (of %zu values)%s; "
                       "the file is damaged or was written by a run that diverged: start from "
                       "other weights", path, hy_safetensors_show(name).s, what, i, n,
                       nonneg ? "; second moments are never below 0" : "");
    }
    return HY_OK;
}

/* ------------------------------------------------------------------------
 * Llama: Hugging Face names and layouts
 */

int hy_weights_hf_layout(const hy_model *m) {
    return m->kind == HY_MODEL_LLAMA || hy_model_post_ln(m);
}

int hy_weights_hf_transposed(const hy_param *p) {
    return p->ndim == 2 && !p->vocab_rows && p->kind != HY_P_WPE && p->kind != HY_P_TTE;
}

/* Post-LN BERT: the parameter's own name with BertForMaskedLM's "bert."
 * before the encoder's (not the head's "cls."), rows as the file holds
 * them ([out, in] for a Linear); q, k and v apart. */
static int wt_bert_pieces(const hy_model *m, const hy_param *p, hy_weights_piece pieces[3]) {
    const char *prefix = strncmp(p->name, "cls.", 4) == 0 ? "" : "bert.";
    if (p->kind == HY_P_QKV_W || p->kind == HY_P_QKV_B) {
        static const char *const qkv[3] = { "query", "key", "value" };
        for (int i = 0; i < 3; i++) {
            snprintf(pieces[i].name, sizeof pieces[i].name,
                     "bert.encoder.layer.%d.attention.self.%s.%s", p->layer, qkv[i],
                     p->kind == HY_P_QKV_W ? "weight" : "bias");
            pieces[i].rows = (size_t)m->d_model;
        }
        return 3;
    }
    snprintf(pieces[0].name, sizeof pieces[0].name, "%s%s", prefix, p->name);
    pieces[0].rows = p->vocab_rows ? (size_t)m->vocab
                   : hy_weights_hf_transposed(p) ? (size_t)p->shape[1] : (size_t)p->shape[0];
    return 1;
}

void hy_weights_transpose(float *dst, const float *src, size_t rows, size_t cols) {
    for (size_t r = 0; r < rows; r++)
        for (size_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
}

int hy_weights_hf_pieces(const hy_model *m, const hy_param *p, hy_weights_piece pieces[3]) {
    if (hy_model_post_ln(m)) return wt_bert_pieces(m, p, pieces);
    assert(m->kind == HY_MODEL_LLAMA);
    size_t C = (size_t)m->d_model, H = (size_t)m->heads * m->head_dim;
    size_t KV = (size_t)m->kv_heads * m->head_dim, F = (size_t)m->ffn_dim;
    const char *one = NULL, *names[3] = { NULL, NULL, NULL };
    size_t rows[3] = { 0, 0, 0 };
    int n = 1;
    switch (p->kind) {
    case HY_P_WTE: one = "model.embed_tokens.weight"; rows[0] = (size_t)m->vocab; break;
    case HY_P_LM_HEAD: one = "lm_head.weight"; rows[0] = (size_t)m->vocab; break;
    case HY_P_LNF_W: one = "model.norm.weight"; rows[0] = C; break;
    case HY_P_LN1_W: names[0] = "input_layernorm"; rows[0] = C; break;
    case HY_P_LN2_W: names[0] = "post_attention_layernorm"; rows[0] = C; break;
    case HY_P_QKV_W:
        names[0] = "self_attn.q_proj"; names[1] = "self_attn.k_proj"; names[2] = "self_attn.v_proj";
        rows[0] = H; rows[1] = rows[2] = KV; n = 3;
        break;
    case HY_P_ATTN_PROJ_W: names[0] = "self_attn.o_proj"; rows[0] = C; break;
    case HY_P_FC_W:
        names[0] = "mlp.gate_proj"; names[1] = "mlp.up_proj"; rows[0] = rows[1] = F; n = 2;
        break;
    case HY_P_MLP_PROJ_W: names[0] = "mlp.down_proj"; rows[0] = C; break;
    default: assert(0 && "not a Llama parameter"); return 0;
    }
    for (int i = 0; i < n; i++) {
        if (one) snprintf(pieces[i].name, sizeof pieces[i].name, "%s", one);
        else snprintf(pieces[i].name, sizeof pieces[i].name, "model.layers.%d.%s.weight", p->layer,
                      names[i]);
        pieces[i].rows = rows[i];
    }
    return n;
}

/* A Hugging Face checkpoint: its files, each tensor found in whichever. */
typedef struct {
    hy_safetensors_file files[WT_MAX_SHARDS];
    int n;
    char dir[PATH_MAX];   /* "" for one file */
} wt_files;

static void wt_files_close(wt_files *w) {
    for (int i = 0; i < w->n; i++) hy_safetensors_close(&w->files[i]);
    w->n = 0;
}

static const hy_safetensors_tensor *wt_find(const wt_files *w, const char *name,
                                            const hy_safetensors_file **in) {
    for (int i = 0; i < w->n; i++) {
        const hy_safetensors_tensor *t = hy_safetensors_find(&w->files[i], name);
        if (t) {
            *in = &w->files[i];
            return t;
        }
    }
    return NULL;
}

static int wt_open_one(wt_files *w, const char *path, hy_error *err) {
    if (w->n == WT_MAX_SHARDS)
        return hy_fail(err, HY_ERR_INPUT, "%s: more than %d shards", w->dir, WT_MAX_SHARDS);
    int rc = hy_safetensors_open(&w->files[w->n], path, err);
    if (!rc) w->n++;
    return rc;
}

/* dir's model.safetensors, or the shards its index names (each once). */
static int wt_open_dir(wt_files *w, const char *dir, hy_error *err) {
    char index[PATH_MAX + 64], file[PATH_MAX + 320];
    snprintf(w->dir, sizeof w->dir, "%s", dir);
    snprintf(index, sizeof index, "%s/model.safetensors.index.json", dir);
    struct stat sb;
    if (stat(index, &sb) != 0) {
        snprintf(file, sizeof file, "%s/model.safetensors", dir);
        return wt_open_one(w, file, err);
    }
    json_error_t je;
    json_t *o = hy_infile_json(index, JSON_REJECT_DUPLICATES, &je);
    if (!o) return hy_fail(err, HY_ERR_INPUT, "%s:%d: %s", index, je.line, je.text);
    json_t *map = json_object_get(o, "weight_map");
    int rc = json_is_object(map) ? HY_OK
           : hy_fail(err, HY_ERR_INPUT, "%s: no \"weight_map\" object", index);
    const char *key;
    json_t *v;
    json_object_foreach(map, key, v) {
        const char *name = json_string_value(v);
        if (rc) break;
        if (!name || strchr(name, '/') || !strcmp(name, "..") || !name[0]) {
            rc = hy_fail(err, HY_ERR_INPUT, "%s: weight_map[\"%s\"] is not a file name in %s",
                         index, hy_safetensors_show(key).s, dir);
            break;
        }
        int seen = 0;
        snprintf(file, sizeof file, "%s/%s", dir, name);
        for (int i = 0; i < w->n && !seen; i++) seen = !strcmp(w->files[i].path, file);
        if (!seen) rc = wt_open_one(w, file, err);
    }
    json_decref(o);
    return rc;
}

/* The checkpoint's config.json against m, field by field (hfconfig.h). */
static int wt_check_hf_config(const char *dir, const hy_model *m, hy_error *err) {
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/config.json", dir);
    hy_model_shape file, now = hy_model_shape_of(m);
    int rc = hy_hfconfig_read(path, &file, err);
    if (!rc && file.kind != m->kind)
        rc = hy_fail(err, HY_ERR_INPUT, "%s describes a %s model, the config's model.kind is %s",
                     path, hy_model_name(file.kind), hy_model_name(m->kind));
    if (!rc && m->kind == HY_MODEL_BERT && file.positions != m->positions)
        rc = wt_positions_differ(path, NULL, file.positions, m, err);
    for (int f = 0; f < HY_HF_FIELDS && !rc; f++) {
        if (!hy_hfconfig_field_of(m->kind, f)) continue;   /* BERT's kv heads, rope */
        if (f > HY_HF_ROPE_FACTOR && file.rope_scaling.factor == 0) break;   /* unscaled */
        double a = hy_hfconfig_value(&file, f), b = hy_hfconfig_value(&now, f);
        /* eps is a float where it is used: 1e-05 and 1e-5f are one value */
        if (f == HY_HF_NORM_EPS) a = (float)a, b = (float)b;
        if (a == b) continue;
        char fa[32], fb[32];
        snprintf(fa, sizeof fa, f == HY_HF_TIE ? (a ? "true" : "false") : "%g", a);
        snprintf(fb, sizeof fb, f == HY_HF_TIE ? (b ? "true" : "false") : "%g", b);
        rc = hy_fail(err, HY_ERR_INPUT, "%s: %s is %s, the config's %s is %s; use the "
                     "checkpoint's value (--set %s=%s)", path, hy_hfconfig_field_of(m->kind, f), fa,
                     hy_hfconfig_key(f), fb, hy_hfconfig_key(f), fa);
    }
    return rc;
}

/* Tensors a Llama file may hold that are no parameter here: RoPE's
 * inverse frequencies (older transformers saved them), and the head of a
 * tied model, which is the embedding. */
static int wt_llama_ignorable(const hy_model *m, const char *name) {
    static const char inv_freq[] = ".self_attn.rotary_emb.inv_freq";
    size_t n = strlen(name), k = sizeof inv_freq - 1;
    if (hy_model_post_ln(m)) {
        /* BertForMaskedLM's decoder is the word embedding and its bias
         * cls.predictions.bias; BertForPreTraining's pooler and
         * next-sentence head are no part of a masked-LM model; older
         * transformers saved the position ids buffer. */
        if (!strncmp(name, "bert.", 5)) name += 5;
        return !strcmp(name, "cls.predictions.decoder.weight") ||
               !strcmp(name, "cls.predictions.decoder.bias") || !strncmp(name, "pooler.", 7) ||
               !strncmp(name, "cls.seq_relationship.", 21) ||
               !strcmp(name, "embeddings.position_ids");
    }
    if (n > k && !strcmp(name + n - k, inv_freq)) return 1;
    return m->tie_embeddings && !strcmp(name, "lm_head.weight");
}

/* Does a file's tensor `name` stand for the piece named `piece`? BERT's
 * may come without BertForMaskedLM's "bert." prefix (BertModel's files). */
static int wt_piece_is(const char *piece, const char *name) {
    return !strcmp(piece, name) || (!strncmp(piece, "bert.", 5) && !strcmp(piece + 5, name));
}

/* A tensor of w by name, with or without BertForMaskedLM's "bert." prefix. */
static const hy_safetensors_tensor *wt_find_bert(const wt_files *w, const char *name,
                                                 const hy_safetensors_file **in) {
    const hy_safetensors_tensor *t = wt_find(w, name, in);
    return t || strncmp(name, "bert.", 5) ? t : wt_find(w, name + 5, in);
}

/* Is name one of m's pieces? */
static int wt_llama_known(const hy_model *m, const char *name) {
    for (int i = 0; i < m->n_params; i++) {
        hy_weights_piece pc[3];
        int n = hy_weights_hf_pieces(m, &m->params[i], pc);
        for (int k = 0; k < n; k++)
            if (wt_piece_is(pc[k].name, name)) return 1;
    }
    return 0;
}

/* Parameter p from its pieces: each read into its rows of tmp (the
 * Hugging Face layout), then into host in this layout, and put. */
static int wt_load_llama_param(wt_sink put, void *ctx, const hy_model *m, const wt_files *w,
                               const char *where, const hy_param *p, float *host, float *tmp,
                               hy_error *err) {
    hy_weights_piece pc[3];
    int n = hy_weights_hf_pieces(m, p, pc), transposed = hy_weights_hf_transposed(p);
    size_t cols = p->ndim == 2 ? (transposed ? (size_t)p->shape[0] : (size_t)p->shape[1]) : 0;
    size_t at = 0;
    int rc = HY_OK;
    memset(host, 0, p->numel * sizeof(float));
    for (int k = 0; k < n && !rc; k++) {
        const hy_safetensors_file *f = NULL;
        const hy_safetensors_tensor *t = wt_find_bert(w, pc[k].name, &f);
        char want[48], have[160];
        size_t shape[2] = { pc[k].rows, cols };
        wt_shape_text(want, sizeof want, p->ndim, shape);
        if (!t)
            return hy_fail(err, HY_ERR_INPUT, "%s: tensor '%s' is missing (the config's model has "
                           "it, shape %s)", where, pc[k].name, want);
        if (p->kind == HY_P_WPE && t->ndim == 2 && t->shape[1] == cols &&
            t->shape[0] != shape[0] && t->shape[0] <= (size_t)INT_MAX)
            return wt_positions_differ(f->path, t->name, (int)t->shape[0], m, err);
        if (t->ndim != p->ndim || t->shape[0] != shape[0] || (p->ndim == 2 && t->shape[1] != cols)) {
            wt_shape_text(have, sizeof have, t->ndim, t->shape);
            return hy_fail(err, HY_ERR_INPUT, "%s: tensor '%s' has shape %s, the config's model "
                           "needs %s; check model.* in the config", f->path, t->name, have, want);
        }
        float *into = (transposed ? tmp : host) + at;
        rc = hy_safetensors_read_f32(f, t, into, t->numel, err);
        if (!rc) rc = hy_weights_check(f->path, t->name, into, t->numel, 0, err);
        at += t->numel;
    }
    if (!rc && transposed) hy_weights_transpose(host, tmp, (size_t)p->shape[1], cols);
    return rc ? rc : put(ctx, p, host, err);
}

/* BertForMaskedLM's decoder, when a file holds it, must be what hanayo's
 * is: tied to the word embedding, its bias cls.predictions.bias. A file
 * whose decoder differs (an untied one) is refused rather than read as
 * another model. tmp: room for the largest of them, twice. */
static int wt_bert_decoder_tied(const wt_files *w, float *tmp, size_t room, hy_error *err) {
    static const char *const pairs[2][2] = {
        { "cls.predictions.decoder.weight", "bert.embeddings.word_embeddings.weight" },
        { "cls.predictions.decoder.bias", "cls.predictions.bias" },
    };
    int rc = HY_OK;
    for (int i = 0; i < 2 && !rc; i++) {
        const hy_safetensors_file *fd = NULL, *fe = NULL;
        const hy_safetensors_tensor *d = wt_find_bert(w, pairs[i][0], &fd);
        const hy_safetensors_tensor *e = wt_find_bert(w, pairs[i][1], &fe);
        if (!d || !e) continue;   /* absent: tied; a missing parameter is reported by name */
        int same = d->numel == e->numel && 2 * d->numel <= room;
        if (same) rc = hy_safetensors_read_f32(fd, d, tmp, d->numel, err);
        if (same && !rc) rc = hy_safetensors_read_f32(fe, e, tmp + d->numel, e->numel, err);
        if (same && !rc) same = !memcmp(tmp, tmp + d->numel, d->numel * sizeof(float));
        if (!rc && !same)
            rc = hy_fail(err, HY_ERR_INPUT, "%s: tensor '%s' differs from '%s': an untied "
                         "decoder, which hanayo's BERT (its decoder is the word embedding, its "
                         "bias cls.predictions.bias) cannot hold", fd->path, d->name, e->name);
    }
    return rc;
}

static int wt_load_llama(wt_sink put, void *ctx, const hy_model *m, const wt_files *w,
                         const char *where, hy_error *err) {
    int rc = HY_OK;
    for (int i = 0; i < w->n && !rc; i++) {
        const hy_safetensors_file *f = &w->files[i];
        rc = wt_check_model(f, m, err);
        for (int k = 0; k < f->n_tensors && !rc; k++) {
            const char *name = f->tensors[k].name;
            if (!wt_llama_known(m, name) && !wt_llama_ignorable(m, name))
                rc = hy_fail(err, HY_ERR_INPUT, "%s: tensor '%s' is not a parameter of the "
                             "config's model (model.layers = %d); check the config or the file",
                             f->path, hy_safetensors_show(name).s, m->layers);
        }
    }
    size_t most = hy_model_max_numel(m);
    float *host = malloc(2 * most * sizeof(float)), *tmp = malloc(most * sizeof(float));
    if (!rc && (!host || !tmp)) rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory loading %s", where);
    if (!rc && hy_model_post_ln(m)) rc = wt_bert_decoder_tied(w, host, 2 * most, err);
    for (int i = 0; i < m->n_params && !rc; i++)
        rc = wt_load_llama_param(put, ctx, m, w, where, &m->params[i], host, tmp, err);
    free(host);
    free(tmp);
    return rc;
}

static int wt_is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int wt_read_gpt(const hy_model *m, const char *path, wt_sink put, void *ctx,
                       hy_error *err);

/* Every parameter of m from path, checked, to put: a Llama's from one
 * file or a Hugging Face directory, GPT's and BERT's from one file. */
static int wt_read(const hy_model *m, const char *path, wt_sink put, void *ctx, hy_error *err) {
    int dir = wt_is_dir(path);
    if (!hy_weights_hf_layout(m)) {
        if (dir)
            return hy_fail(err, HY_ERR_INPUT, "%s is a directory; model.kind %s (model.norm "
                           "pre) reads one safetensors file (a directory is a Hugging Face "
                           "Llama's or BERT's checkpoint)", path, hy_model_name(m->kind));
        return wt_read_gpt(m, path, put, ctx, err);
    }
    wt_files *w = calloc(1, sizeof *w);
    if (!w) return hy_fail(err, HY_ERR_RUNTIME, "out of memory loading %s", path);
    int rc = dir ? wt_check_hf_config(path, m, err) : HY_OK;
    if (!rc) rc = dir ? wt_open_dir(w, path, err) : wt_open_one(w, path, err);
    if (!rc) rc = wt_load_llama(put, ctx, m, w, path, err);
    wt_files_close(w);
    free(w);
    return rc;
}

/* GPT and BERT: one file, tensors named as the parameters. */
static int wt_read_gpt(const hy_model *m, const char *path, wt_sink put, void *ctx,
                       hy_error *err) {
    hy_safetensors_file f;
    int rc = hy_safetensors_open(&f, path, err);
    if (rc) return rc;
    float *host = malloc(hy_model_max_numel(m) * sizeof(float));
    if (!host) rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory loading %s", path);
    if (!rc) rc = wt_check_model(&f, m, err);
    /* A tensor that is not a parameter is refused before any is read. */
    for (int i = 0; i < f.n_tensors && !rc; i++) {
        const char *name = f.tensors[i].name;
        if (!hy_model_find(m, name) && !wt_ignorable(name))
            rc = hy_fail(err, HY_ERR_INPUT, "%s: tensor '%s' is not a parameter of the config's "
                         "model (model.layers = %d); check the config or the file", path,
                         hy_safetensors_show(name).s, m->layers);
    }
    for (int i = 0; i < m->n_params && !rc; i++)
        rc = wt_load_tensor(put, ctx, m, &f, &m->params[i], host, err);
    free(host);
    hy_safetensors_close(&f);
    return rc;
}

static int wt_put_runtime(void *ctx, const hy_param *p, const float *v, hy_error *err) {
    return hy_runtime_put(ctx, HY_T_PARAM, p, v, p->numel, err);
}

int hy_weights_load(hy_runtime *rt, const char *path, hy_error *err) {
    int rc = wt_read(hy_runtime_model(rt), path, wt_put_runtime, rt, err);
    return rc ? rc : hy_runtime_refresh(rt, err);
}

static int wt_put_block(void *ctx, const hy_param *p, const float *v, hy_error *err) {
    (void)err;
    float *const *blocks = ctx;
    memcpy(blocks[p->stage] + p->offset, v, p->numel * sizeof(float));
    return HY_OK;
}

int hy_weights_read(const hy_model *m, const char *path, float *const *blocks, hy_error *err) {
    return wt_read(m, path, wt_put_block, (void *)blocks, err);
}
