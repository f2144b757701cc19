/*
 * checkpoint.c — see checkpoint.h.
 */
#include "checkpoint.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "atomicfile.h"
#include "model.h"
#include "safetensors.h"
#include "weights.h"

#define HY_CKPT_FORMAT 1

/* A parameter's shape as saved: wte without its padding rows
 * (hy_model_real_numel's values). */
static void ck_shape(const hy_model *m, const hy_param *p, size_t shape[2]) {
    shape[0] = p->kind == HY_P_WTE ? (size_t)m->vocab : (size_t)p->shape[0];
    shape[1] = (size_t)p->shape[1];
}

static size_t ck_total(const hy_model *m) {
    size_t n = 0;
    for (int i = 0; i < m->n_params; i++) n += hy_model_real_numel(m, &m->params[i]);
    return n;
}

/* Writes one safetensors file holding, for each parameter, the tensors of
 * the given roles ("" prefix for the weights, "m."/"v." for moments). */
static int ck_write_tensors(hy_runtime *rt, const hy_model *m, const char *path,
                            const hy_tensor_role *roles, const char *const *prefixes, int n_roles,
                            const char *step_text, hy_error *err) {
    float *buf = malloc(ck_total(m) * (size_t)n_roles * sizeof(float) + 1);
    if (!buf) return hy_fail(err, HY_ERR_RUNTIME, "out of memory writing %s", path);
    hy_st_writer w;
    hy_st_writer_init(&w);
    int rc = hy_st_writer_set_meta(&w, "format", "pt", err);
    if (!rc) rc = hy_st_writer_set_meta(&w, "hanayo_step", step_text, err);
    float *at = buf;
    for (int k = 0; k < n_roles && !rc; k++) {
        for (int i = 0; i < m->n_params && !rc; i++) {
            const hy_param *p = &m->params[i];
            size_t n = hy_model_real_numel(m, p), shape[2];
            char name[96];
            snprintf(name, sizeof name, "%s%s", prefixes[k], p->name);
            ck_shape(m, p, shape);
            rc = hy_runtime_get(rt, roles[k], p, at, n, err);
            if (!rc) rc = hy_st_writer_add(&w, name, HY_ST_F32, p->ndim, shape, at, err);
            at += n;
        }
    }
    if (!rc) rc = hy_st_write(&w, path, err);
    hy_st_writer_free(&w);
    free(buf);
    return rc;
}

/* A plain write is enough here: the file is inside the checkpoint's
 * temporary directory, which is synced as a whole before it is renamed
 * into place. jansson checks fclose, so a full disk is caught; errno is
 * what the failing call left (0 only if jansson failed on its own). */
static int ck_write_json(const char *path, json_t *obj, hy_error *err) {
    errno = 0;
    int rc = HY_OK;
    if (json_dump_file(obj, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER) != 0) {
        int e = errno;
        rc = hy_fail(err, e ? hy_errno_status(e, HY_ERR_RUNTIME) : HY_ERR_RUNTIME,
                     "%s: cannot write: %s", path, e ? strerror(e) : "write failed");
    }
    json_decref(obj);
    return rc;
}

static int ck_write_state(const char *path, const hy_config *c, int step, size_t pos,
                          hy_error *err) {
    char *cfg = hy_config_to_json(c);
    json_error_t je;
    json_t *cfg_obj = cfg ? json_loads(cfg, 0, &je) : NULL;
    free(cfg);
    json_t *o = json_object();
    if (!o || !cfg_obj) {
        json_decref(o);
        json_decref(cfg_obj);
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory writing %s", path);
    }
    json_object_set_new(o, "format", json_integer(HY_CKPT_FORMAT));
    json_object_set_new(o, "step", json_integer(step));
    json_object_set_new(o, "data_position", json_integer((json_int_t)pos));
    json_object_set_new(o, "config", cfg_obj);
    return ck_write_json(path, o, err);
}

/* Hugging Face's GPT2Config for the model, so transformers opens it. */
static int ck_write_hf_config(const char *path, const hy_model *m, hy_error *err) {
    json_t *o = json_pack("{s:[s], s:s, s:i, s:i, s:i, s:i, s:i, s:i, s:f, s:s, s:b}",
                          "architectures", "GPT2LMHeadModel", "model_type", "gpt2",
                          "n_layer", m->layers, "n_embd", m->d_model, "n_head", m->heads,
                          "n_positions", m->seq_len, "n_ctx", m->seq_len, "vocab_size", m->vocab,
                          "layer_norm_epsilon", 1e-5, "activation_function", "gelu_new",
                          "tie_word_embeddings", 1);
    if (!o) return hy_fail(err, HY_ERR_RUNTIME, "out of memory writing %s", path);
    return ck_write_json(path, o, err);
}

static int ck_mkdirs(const char *dir, hy_error *err) {
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return hy_fail(err, HY_ERR_INPUT, "checkpoint.dir is too long: %s", dir);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return hy_fail(err, hy_errno_status(errno, HY_ERR_INPUT),
                               "checkpoint.dir %s: cannot create %s: %s", dir, buf, strerror(errno));
            *p = c;
            if (!c) break;
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return hy_fail(err, HY_ERR_INPUT, "checkpoint.dir %s is not a directory", dir);
    return HY_OK;
}

int hy_checkpoint_save(hy_runtime *rt, const hy_config *c, const char *dir, char *saved,
                       hy_error *err) {
    int step;
    size_t pos;
    int rc = hy_runtime_get_progress(rt, &step, &pos, err);
    if (!rc) rc = ck_mkdirs(dir, err);
    if (rc) return rc;
    char target[PATH_MAX], file[PATH_MAX + 64], step_text[32];
    if (snprintf(target, sizeof target, "%s/step_%06d", dir, step) >= (int)sizeof target)
        return hy_fail(err, HY_ERR_INPUT, "checkpoint.dir is too long: %s", dir);
    snprintf(step_text, sizeof step_text, "%d", step);
    const hy_model *m = hy_runtime_model(rt);
    hy_atomic_dir ad;
    rc = hy_atomic_dir_open(&ad, target, HY_ERR_INPUT, err);
    if (!rc) {
        const hy_tensor_role w[1] = { HY_T_PARAM }, mv[2] = { HY_T_ADAM_M, HY_T_ADAM_V };
        const char *const wp[1] = { "" }, *const mvp[2] = { "m.", "v." };
        snprintf(file, sizeof file, "%s/model.safetensors", ad.tmp);
        rc = ck_write_tensors(rt, m, file, w, wp, 1, step_text, err);
        snprintf(file, sizeof file, "%s/optimizer.safetensors", ad.tmp);
        if (!rc) rc = ck_write_tensors(rt, m, file, mv, mvp, 2, step_text, err);
        snprintf(file, sizeof file, "%s/state.json", ad.tmp);
        if (!rc) rc = ck_write_state(file, c, step, pos, err);
        snprintf(file, sizeof file, "%s/config.json", ad.tmp);
        if (!rc && m->kind == HY_MODEL_GPT) rc = ck_write_hf_config(file, m, err);
        /* A file that failed is in a temporary directory the user never
         * named, and gone with it now: say which checkpoint it was. */
        if (rc) {
            hy_atomic_dir_abort(&ad);
            hy_error_prefix(err, "checkpoint %s not saved (earlier checkpoints are "
                            "untouched): ", target);
        } else {
            /* Replacing swaps the new directory with an older one of the
             * same step in one rename, so the name never goes missing.
             * Its errors say whether they came before the rename or after. */
            rc = hy_atomic_dir_replace(&ad, err);
            if (rc) hy_error_prefix(err, "checkpoint %s: ", target);
        }
    }
    if (!rc && saved) snprintf(saved, PATH_MAX, "%s", target);
    return rc;
}

/* ------------------------------------------------------------------------ */

/* The saved config's model.* must equal the current one's. */
static int ck_check_model(const char *path, json_t *state, const hy_config *c, hy_error *err) {
    json_t *model = json_object_get(json_object_get(state, "config"), "model");
    if (!json_is_object(model))
        return hy_fail(err, HY_ERR_INPUT, "%s/state.json: no config.model section", path);
    static const char *const keys[] = { "layers", "d_model", "heads", "seq_len", "vocab" };
    const int now[] = { c->model.layers, c->model.d_model, c->model.heads, c->model.seq_len,
                        c->model.vocab };
    for (int i = 0; i < 5; i++) {
        json_t *v = json_object_get(model, keys[i]);
        if (!json_is_integer(v) || json_integer_value(v) != now[i])
            return hy_fail(err, HY_ERR_INPUT, "%s was saved with model.%s = %lld, the config has %d; "
                           "resume with the checkpoint's model settings", path, keys[i],
                           json_is_integer(v) ? (long long)json_integer_value(v) : -1LL, now[i]);
    }
    const char *kind = json_string_value(json_object_get(model, "kind"));
    const char *want = c->model.kind == HY_MODEL_GPT ? "gpt" : "bert";
    if (!kind || strcmp(kind, want) != 0)
        return hy_fail(err, HY_ERR_INPUT, "%s was saved with model.kind = %s, the config has %s",
                       path, kind ? kind : "?", want);
    return HY_OK;
}

static int ck_read_moments(hy_runtime *rt, const char *file, hy_error *err) {
    const hy_model *m = hy_runtime_model(rt);
    hy_st_file f;
    int rc = hy_st_open(&f, file, err);
    if (rc) return rc;
    float *buf = malloc(hy_model_max_numel(m) * sizeof(float) + 1);
    if (!buf) rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory reading %s", file);
    for (int i = 0; i < m->n_params && !rc; i++) {
        const hy_param *p = &m->params[i];
        size_t n = hy_model_real_numel(m, p);
        for (int k = 0; k < 2 && !rc; k++) {
            char name[96];
            snprintf(name, sizeof name, "%s%s", k == 0 ? "m." : "v.", p->name);
            const hy_st_tensor *t = hy_st_find(&f, name);
            if (!t) rc = hy_fail(err, HY_ERR_INPUT, "%s: tensor '%s' is missing", file, name);
            else if (t->numel != n)
                rc = hy_fail(err, HY_ERR_INPUT, "%s: tensor '%s' has %zu values, the model needs %zu",
                             file, name, t->numel, n);
            if (!rc) rc = hy_st_read_f32(&f, t, buf, n, err);
            if (!rc) rc = hy_runtime_put(rt, k == 0 ? HY_T_ADAM_M : HY_T_ADAM_V, p, buf, n, err);
        }
    }
    free(buf);
    hy_st_close(&f);
    return rc;
}

int hy_checkpoint_load(hy_runtime *rt, const hy_config *c, const char *path, hy_error *err) {
    char file[PATH_MAX + 64];
    snprintf(file, sizeof file, "%s/state.json", path);
    json_error_t je;
    json_t *state = json_load_file(file, JSON_REJECT_DUPLICATES, &je);
    if (!state && je.line > 0)
        return hy_fail(err, HY_ERR_INPUT, "%s: not a checkpoint: state.json: %s (line %d, column %d)",
                       path, je.text, je.line, je.column);
    if (!state)
        return hy_fail(err, HY_ERR_INPUT, "%s: not a checkpoint: %s", path, je.text);
    json_t *fmt = json_object_get(state, "format"), *step = json_object_get(state, "step");
    json_t *pos = json_object_get(state, "data_position");
    int rc = HY_OK;
    if (!json_is_integer(fmt) || json_integer_value(fmt) != HY_CKPT_FORMAT)
        rc = hy_fail(err, HY_ERR_INPUT, "%s: checkpoint format is not %d", file, HY_CKPT_FORMAT);
    else if (!json_is_integer(step) || json_integer_value(step) < 0 ||
             json_integer_value(step) > INT_MAX || !json_is_integer(pos) ||
             json_integer_value(pos) < 0)
        rc = hy_fail(err, HY_ERR_INPUT, "%s: step and data_position must be integers >= 0", file);
    if (!rc) rc = ck_check_model(path, state, c, err);
    snprintf(file, sizeof file, "%s/model.safetensors", path);
    if (!rc) rc = hy_weights_load(rt, file, err);
    snprintf(file, sizeof file, "%s/optimizer.safetensors", path);
    if (!rc) rc = ck_read_moments(rt, file, err);
    if (!rc)
        rc = hy_runtime_set_progress(rt, (int)json_integer_value(step),
                                     (size_t)json_integer_value(pos), err);
    json_decref(state);
    return rc;
}
