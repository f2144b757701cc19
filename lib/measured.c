/*
 * measured.c — see measured.h.
 */
#include "measured.h"
#include "infile.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void hy_measured_costs_free(hy_measured_costs *mc) {
    if (!mc) return;
    free(mc->n_layers);
    free(mc->fwd);
    free(mc->bwd);
    free(mc->wgrad);
    memset(mc, 0, sizeof *mc);
}

/* A member of object o at `where`; NULL with err set when absent. */
static json_t *member(const char *path, json_t *o, const char *where, const char *key,
                      hy_error *err) {
    json_t *v = json_is_object(o) ? json_object_get(o, key) : NULL;
    if (!v)
        hy_fail(err, HY_ERR_INPUT, "%s: %s%s%s is missing; give the summary.json that "
                "`hanayo profile` wrote", path, where, *where ? "." : "", key);
    return v;
}

static int get_cost(const char *path, json_t *o, const char *where, const char *key, double *out,
                    hy_error *err) {
    json_t *v = member(path, o, where, key, err);
    if (!v) return HY_ERR_INPUT;
    if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < 0)
        return hy_fail(err, HY_ERR_INPUT, "%s: %s%s%s must be a finite number >= 0 (ms)", path,
                       where, *where ? "." : "", key);
    *out = json_number_value(v);
    return HY_OK;
}

static int get_int(const char *path, json_t *o, const char *where, const char *key, int lo, int hi,
                   int *out, hy_error *err) {
    json_t *v = member(path, o, where, key, err);
    if (!v) return HY_ERR_INPUT;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return hy_fail(err, HY_ERR_INPUT, "%s: %s%s%s must be a whole number from %d to %d", path,
                       where, *where ? "." : "", key, lo, hi);
    *out = (int)json_integer_value(v);
    return HY_OK;
}

static int load_schedule(hy_measured_costs *mc, const char *path, json_t *root, hy_error *err) {
    json_t *sc = member(path, root, "", "schedule", err);
    if (!sc) return HY_ERR_INPUT;
    if (!json_is_object(sc))
        return hy_fail(err, HY_ERR_INPUT, "%s: schedule must be an object", path);
    json_t *kind = member(path, sc, "schedule", "kind", err);
    if (!kind) return HY_ERR_INPUT;
    hy_error e;
    if (!json_is_string(kind) || hy_sched_parse(json_string_value(kind), &mc->kind, &e) != HY_OK)
        return hy_fail(err, HY_ERR_INPUT, "%s: schedule.kind must be gpipe, 1f1b, interleaved "
                       "or hanayo", path);
    int rc = get_int(path, sc, "schedule", "ranks", 1, HY_MAX_RANKS, &mc->ranks, err);
    if (!rc) rc = get_int(path, sc, "schedule", "micro_batches", 1, 65536, &mc->micro_batches, err);
    if (!rc) rc = get_int(path, sc, "schedule", "waves", 0, 16, &mc->waves, err);
    if (!rc) rc = get_int(path, sc, "schedule", "chunks", 1, 64, &mc->chunks, err);
    if (!rc) rc = get_int(path, sc, "schedule", "stages", 1, 64 * HY_MAX_RANKS, &mc->stages, err);
    json_t *split = json_object_get(sc, "split_backward");   /* absent in older summaries */
    if (!rc && split && !json_is_boolean(split))
        rc = hy_fail(err, HY_ERR_INPUT, "%s: schedule.split_backward must be true or false", path);
    mc->split = split && json_is_true(split);
    if (!rc && mc->stages != mc->chunks * mc->ranks)
        rc = hy_fail(err, HY_ERR_INPUT, "%s: schedule.stages is %d but chunks x ranks is %d x %d",
                     path, mc->stages, mc->chunks, mc->ranks);
    return rc;
}

static int load_stages(hy_measured_costs *mc, const char *path, json_t *root, hy_error *err) {
    json_t *split = member(path, root, "", "split", err);
    json_t *stages = split ? member(path, root, "", "stages", err) : NULL;
    if (!stages) return HY_ERR_INPUT;
    int S = mc->stages;
    if (!json_is_array(split) || (int)json_array_size(split) != S)
        return hy_fail(err, HY_ERR_INPUT, "%s: split must be an array of %d layer counts, one "
                       "per stage of schedule", path, S);
    if (!json_is_array(stages) || (int)json_array_size(stages) != S)
        return hy_fail(err, HY_ERR_INPUT, "%s: stages must be an array of %d entries (schedule."
                       "stages), got %s", path, S, json_is_array(stages) ? "another length" : "no array");
    mc->n_layers = calloc((size_t)S, sizeof(int));
    mc->fwd = calloc((size_t)S, sizeof(double));
    mc->bwd = calloc((size_t)S, sizeof(double));
    mc->wgrad = calloc((size_t)S, sizeof(double));
    if (!mc->n_layers || !mc->fwd || !mc->bwd || !mc->wgrad)
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    for (int s = 0; s < S; s++) {
        json_t *n = json_array_get(split, (size_t)s);
        if (!json_is_integer(n) || json_integer_value(n) < 0 || json_integer_value(n) > 1024)
            return hy_fail(err, HY_ERR_INPUT, "%s: split[%d] must be a whole number from 0 to "
                           "1024", path, s);
        mc->n_layers[s] = (int)json_integer_value(n);
        char where[32];
        snprintf(where, sizeof where, "stages[%d]", s);
        json_t *e = json_array_get(stages, (size_t)s);
        if (!json_is_object(e))
            return hy_fail(err, HY_ERR_INPUT, "%s: %s must be an object", path, where);
        int rc = get_cost(path, e, where, "fwd_ms", &mc->fwd[s], err);
        if (!rc) rc = get_cost(path, e, where, "bwd_ms", &mc->bwd[s], err);
        if (!rc && mc->split) rc = get_cost(path, e, where, "wgrad_ms", &mc->wgrad[s], err);
        if (rc) return rc;
    }
    return HY_OK;
}

static int load_model(hy_measured_costs *mc, const char *path, json_t *root, hy_error *err) {
    json_t *cm = member(path, root, "", "cost_model", err);
    if (!cm) return HY_ERR_INPUT;
    if (!json_is_object(cm)) return hy_fail(err, HY_ERR_INPUT, "%s: cost_model must be an object", path);
    hy_cost_model *m = &mc->model;
    int rc = get_cost(path, cm, "cost_model", "layer_fwd_ms", &m->layer_fwd, err);
    if (!rc) rc = get_cost(path, cm, "cost_model", "layer_bwd_ms", &m->layer_bwd, err);
    if (!rc) rc = get_cost(path, cm, "cost_model", "first_fwd_ms", &m->first_fwd, err);
    if (!rc) rc = get_cost(path, cm, "cost_model", "first_bwd_ms", &m->first_bwd, err);
    if (!rc) rc = get_cost(path, cm, "cost_model", "last_fwd_ms", &m->last_fwd, err);
    if (!rc) rc = get_cost(path, cm, "cost_model", "last_bwd_ms", &m->last_bwd, err);
    m->comm = mc->comm;
    return rc;
}

int hy_measured_costs_load(hy_measured_costs *mc, const char *path, hy_error *err) {
    memset(mc, 0, sizeof *mc);
    json_error_t je;
    json_t *root = hy_infile_json(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (je.line < 1)   /* not a parse error: the file itself */
            return hy_fail(err, HY_ERR_INPUT, "--costs %s: %s", path, je.text);
        return hy_fail(err, HY_ERR_INPUT, "--costs %s: line %d, column %d: %s", path, je.line,
                       je.column, je.text);
    }
    int rc = HY_OK;
    if (!json_is_object(root))
        rc = hy_fail(err, HY_ERR_INPUT, "%s: not a profile summary (the top level must be an "
                     "object); give the summary.json that `hanayo profile` wrote", path);
    if (!rc) rc = load_schedule(mc, path, root, err);
    if (!rc) rc = get_cost(path, root, "", "comm_ms", &mc->comm, err);
    if (!rc) rc = load_stages(mc, path, root, err);
    if (!rc) rc = load_model(mc, path, root, err);
    json_decref(root);
    if (rc) hy_measured_costs_free(mc);
    return rc;
}
