/*
 * weights.c — see weights.h.
 */
#include "weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "safetensors.h"

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

/* Where the values read go: each parameter's numel floats, once. */
typedef int (*wt_sink)(void *ctx, const hy_param *p, const float *v, hy_error *err);

/* Reads parameter p from f into host (p->numel floats: wte's padding rows,
 * when the file has only the real vocabulary's, stay zero) and hands it
 * to put. */
static int wt_load_tensor(wt_sink put, void *ctx, const hy_model *m, const hy_safetensors_file *f,
                          const hy_param *p, float *host, hy_error *err) {
    char prefixed[64];
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

/* Every parameter of m from the file at path, checked, to put. */
static int wt_read(const hy_model *m, const char *path, wt_sink put, void *ctx, hy_error *err) {
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
