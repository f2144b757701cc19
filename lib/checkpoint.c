/*
 * checkpoint.c — see checkpoint.h.
 *
 * state.json, format 2:
 *   {"format": 2, "step": N, "loss": x, "time": "...Z", "data_position": p,
 *    "data": {"shards": [{"path": p, "bytes": n, "head_crc32c": "8 hex"}, ...],
 *             "micro_batches": M, "micro_batch_size": B, "seq_len": T},
 *    "config": {the resolved config},
 *    "files": {"model.safetensors": {"bytes": n, "crc32c": "8 hex"}, ...},
 *    "checksum": "8 hex"}
 * written with two-space indentation, "checksum" last: it is the CRC-32C of
 * every byte of the file before its own line, so the file vouches for
 * itself as well as for the others. Checkpoints of one training shard
 * written before data.train took several hold "shard", "shard_bytes" and
 * "head_crc32c" in "data" instead of "shards"; they load as a list of one.
 */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "atomicfile.h"
#include "checksum.h"
#include "hfconfig.h"
#include "infile.h"
#include "model.h"
#include "safetensors.h"
#include "weights.h"

#define HY_CKPT_FORMAT 2          /* with checksums; 1: without */
#define CK_STATE_MAX (64u << 20)  /* a state.json is a few KB; past this it is not one */
#define CK_HEAD_BYTES 65536       /* what identifies a shard: its header (data.h) and first tokens */
#define CK_CHECKSUM_LINE "\n  \"checksum\": \""
#define CK_STATE_END "\"\n}\n"

/* The files of a checkpoint that state.json vouches for. */
static const char *const CK_FILES[] = { "model.safetensors", "optimizer.safetensors", "config.json" };
#define CK_N_FILES 3

/* A parameter's shape as saved: wte without its padding rows
 * (hy_model_real_numel's values). */
static void ck_shape(const hy_model *m, const hy_param *p, size_t shape[2]) {
    shape[0] = p->vocab_rows ? (size_t)m->vocab : (size_t)p->shape[0];
    shape[1] = (size_t)p->shape[1];
}

static size_t ck_total(const hy_model *m) {
    size_t n = 0;
    for (int i = 0; i < m->n_params; i++) n += hy_model_real_numel(m, &m->params[i]);
    return n;
}

/* Adds parameter p of a Llama or post-LN BERT, whose values are at v, as
 * its Hugging Face tensors (weights.h): a transposed parameter is turned
 * in place (through a copy), then its pieces are consecutive rows of it. */
static int ck_add_hf(hy_safetensors_writer *w, const hy_model *m, const hy_param *p, float *v,
                     hy_error *err) {
    hy_weights_piece pc[3];
    int n = hy_weights_hf_pieces(m, p, pc), rc = HY_OK;
    size_t cols = p->ndim == 2 ? (size_t)p->shape[1] : 0;
    if (hy_weights_hf_transposed(p)) {
        float *copy = malloc(p->numel * sizeof(float));
        if (!copy) return hy_fail(err, HY_ERR_RUNTIME, "out of memory writing %s", p->name);
        memcpy(copy, v, p->numel * sizeof(float));
        hy_weights_transpose(v, copy, (size_t)p->shape[0], (size_t)p->shape[1]);
        free(copy);
        cols = (size_t)p->shape[0];
    }
    for (int k = 0; k < n && !rc; k++) {
        size_t shape[2] = { pc[k].rows, cols };
        rc = hy_safetensors_writer_add(w, pc[k].name, HY_ST_F32, p->ndim, shape, v, err);
        v += pc[k].rows * (p->ndim == 2 ? cols : 1);
    }
    return rc;
}

/* Writes one safetensors file holding, for each parameter, the tensors of
 * the given roles ("" prefix for the weights, "m."/"v." for moments). */
static int ck_write_tensors(hy_runtime *rt, const hy_model *m, const char *path,
                            const hy_tensor_role *roles, const char *const *prefixes, int n_roles,
                            const char *step_text, hy_file_sum *sum, hy_error *err) {
    float *buf = malloc(ck_total(m) * (size_t)n_roles * sizeof(float) + 1);
    if (!buf) return hy_fail(err, HY_ERR_RUNTIME, "out of memory writing %s", path);
    hy_safetensors_writer w;
    hy_safetensors_writer_init(&w);
    int rc = hy_safetensors_writer_set_meta(&w, "format", "pt", err);
    if (!rc) rc = hy_safetensors_writer_set_meta(&w, "hanayo_step", step_text, err);
    /* What the shapes do not tell, for weights.h to check once the file
     * has left its checkpoint: the model's kind and its heads. */
    char heads[16];
    snprintf(heads, sizeof heads, "%d", m->heads);
    if (!rc) rc = hy_safetensors_writer_set_meta(&w, "hanayo_model", hy_model_name(m->kind), err);
    if (!rc) rc = hy_safetensors_writer_set_meta(&w, "hanayo_heads", heads, err);
    if (!rc && m->kind == HY_MODEL_BERT)   /* pre- and post-LN BERT share their kind */
        rc = hy_safetensors_writer_set_meta(&w, "hanayo_norm", hy_model_norm_name(m->norm), err);
    float *at = buf;
    for (int k = 0; k < n_roles && !rc; k++) {
        for (int i = 0; i < m->n_params && !rc; i++) {
            const hy_param *p = &m->params[i];
            size_t n = hy_model_real_numel(m, p), shape[2];
            char name[96];
            snprintf(name, sizeof name, "%s%s", prefixes[k], p->name);
            ck_shape(m, p, shape);
            rc = hy_runtime_get(rt, roles[k], p, at, n, err);
            /* A Llama's and post-LN BERT's weights go out as Hugging
             * Face's, so transformers opens the checkpoint; the moments
             * stay in this layout. */
            if (!rc && hy_weights_hf_layout(m) && roles[k] == HY_T_PARAM)
                rc = ck_add_hf(&w, m, p, at, err);
            else if (!rc)
                rc = hy_safetensors_writer_add(&w, name, HY_ST_F32, p->ndim, shape, at, err);
            at += n;
        }
    }
    if (!rc) rc = hy_safetensors_write_sum(&w, path, sum, err);
    hy_safetensors_writer_free(&w);
    free(buf);
    return rc;
}

/* Writes text to path and sums it as it goes. The file is inside the
 * checkpoint's temporary directory, which is synced as a whole before it
 * is renamed into place. */
static int ck_write_text(const char *path, const char *text, hy_file_sum *sum, hy_error *err) {
    hy_atomic_file af;
    int rc = hy_atomic_open(&af, path, HY_ERR_RUNTIME, err);
    if (!rc) {
        *sum = (hy_file_sum){ 0, 0 };
        af.sum = sum;
        rc = hy_atomic_write(&af, text, strlen(text), err);
    }
    return rc ? rc : hy_atomic_commit(&af, err);
}

/* A JSON object as the text a checkpoint holds: two-space indented, in
 * insertion order, with a final newline. Takes the reference. */
static char *ck_json_text(json_t *o) {
    char *t = o ? json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
    json_decref(o);
    if (!t) return NULL;
    size_t n = strlen(t);
    char *out = realloc(t, n + 2);
    if (!out) {
        free(t);
        return NULL;
    }
    out[n] = '\n';
    out[n + 1] = '\0';
    return out;
}

/* Pre-LN BERT's config.json: the run's "model" block as a hanayo config
 * file, which `hanayo check` and `eval` read back. Not a transformers
 * config: pre-LN BERT is GPT-2's blocks made bidirectional, which no
 * Hugging Face BERT class computes (docs/runtime.md "Checkpoints" says
 * what differs); post-LN BERT writes BertForMaskedLM's. */
static json_t *ck_hanayo_config(const hy_run *run) {
    json_error_t je;
    json_t *cfg = json_loads(run->config_json, 0, &je);
    json_t *model = cfg ? json_object_get(cfg, "model") : NULL;
    json_t *o = model ? json_pack("{s:O}", "model", model) : NULL;
    json_decref(cfg);
    return o;
}

/* What identifies the data a position counts into: each training
 * shard's size and the CRC-32C of its first 64 KiB (the header, data.h:
 * magic, version, token count; then the first tokens, which tell apart
 * two shards of one size, e.g. synthesized with two seeds), in reading
 * order, and the micro-batch layout that turns steps into tokens. */
typedef struct {
    int n;                 /* shards */
    const char **path;     /* [n], the dataset's (borrowed) */
    long long *bytes;      /* [n] */
    uint32_t *head_crc;    /* [n] */
    int micro_batches;     /* of the step's global batch: replicas x schedule.micro_batches */
    int replicas;          /* data-parallel (dp.h) */
    int micro_batch_size, seq_len;
} ck_data_id;

static void ck_data_free(ck_data_id *d) {
    free(d->path);
    free(d->bytes);
    free(d->head_crc);
    memset(d, 0, sizeof *d);
}

/* One shard's size and head CRC, read raw: the file as it is on disk. */
static int ck_shard_id(const char *path, unsigned char *h, long long *bytes, uint32_t *crc,
                       hy_error *err) {
    FILE *f;
    int rc = hy_infile_fopen(path, "the training shard", &f, err);
    if (rc) return rc;
    size_t got = fread(h, 1, CK_HEAD_BYTES, f);
    struct stat sb;
    int ok = !ferror(f) && fstat(fileno(f), &sb) == 0;
    fclose(f);
    if (!ok) return hy_fail(err, HY_ERR_RUNTIME, "%s: cannot read the training shard", path);
    *bytes = (long long)sb.st_size;
    *crc = hy_crc32c(0, h, got);
    return HY_OK;
}

/* The id of the data rt reads (hy_runtime_data: the shards its patterns
 * matched when it opened them). On failure *d is empty. */
static int ck_data_of(hy_runtime *rt, ck_data_id *d, hy_error *err) {
    memset(d, 0, sizeof *d);
    const hy_run *run = hy_runtime_run(rt);
    const hy_dataset *ds;
    int rc = hy_runtime_data(rt, &ds, err);
    if (rc) return rc;
    d->replicas = hy_runtime_replicas(rt);
    d->micro_batches = d->replicas * run->sched.micro_batches;
    d->micro_batch_size = run->micro_batch_size;
    d->seq_len = run->model.seq_len;
    size_t n = (size_t)ds->n_shards;
    d->path = calloc(n, sizeof *d->path);
    d->bytes = calloc(n, sizeof *d->bytes);
    d->head_crc = calloc(n, sizeof *d->head_crc);
    unsigned char *h = malloc(CK_HEAD_BYTES);
    if (!d->path || !d->bytes || !d->head_crc || !h)
        rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    for (int i = 0; !rc && i < ds->n_shards; i++) {
        d->path[i] = ds->shards[i].path;
        rc = ck_shard_id(d->path[i], h, &d->bytes[i], &d->head_crc[i], err);
        d->n = i + 1;
    }
    free(h);
    if (rc) ck_data_free(d);
    return rc;
}

/* The "data" object of state.json. */
static json_t *ck_data_json(const ck_data_id *d) {
    json_t *shards = json_array();
    for (int i = 0; shards && i < d->n; i++) {
        char hex[9];
        hy_crc32c_text(d->head_crc[i], hex);
        if (json_array_append_new(shards, json_pack("{s:s, s:I, s:s}", "path", d->path[i],
                                                     "bytes", (json_int_t)d->bytes[i],
                                                     "head_crc32c", hex))) {
            json_decref(shards);
            return NULL;
        }
    }
    return shards ? json_pack("{s:o, s:i, s:i, s:i, s:i}", "shards", shards,
                              "micro_batches", d->micro_batches, "replicas", d->replicas,
                              "micro_batch_size", d->micro_batch_size, "seq_len", d->seq_len)
                  : NULL;
}

static json_t *ck_sum_json(const hy_file_sum *s) {
    char hex[9];
    hy_crc32c_text(s->crc, hex);
    return json_pack("{s:I, s:s}", "bytes", (json_int_t)s->size, "crc32c", hex);
}

static void ck_now(char *buf, size_t n) {
    time_t t = time(NULL);
    struct tm tm;
    if (gmtime_r(&t, &tm)) strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
    else snprintf(buf, n, "?");
}

/* state.json's text: the object, then its own checksum as the last key. */
static char *ck_state_text(const hy_run *run, int step, double loss, size_t pos,
                           const ck_data_id *d, const hy_file_sum *sums, int n_sums) {
    char when[32], hex[9];
    json_error_t je;
    json_t *cfg_obj = json_loads(run->config_json, 0, &je);
    json_t *o = json_object(), *files = json_object();
    json_t *data = ck_data_json(d);
    int bad = !o || !files || !cfg_obj || !data;
    ck_now(when, sizeof when);
    if (!bad) {
        bad |= json_object_set_new(o, "format", json_integer(HY_CKPT_FORMAT));
        bad |= json_object_set_new(o, "step", json_integer(step));
        bad |= json_object_set_new(o, "loss", isfinite(loss) ? json_real(loss) : json_null());
        bad |= json_object_set_new(o, "time", json_string(when));
        bad |= json_object_set_new(o, "data_position", json_integer((json_int_t)pos));
        bad |= json_object_set_new(o, "data", data);
        bad |= json_object_set_new(o, "config", cfg_obj);
        for (int i = 0; i < n_sums; i++)
            bad |= json_object_set_new(files, CK_FILES[i], ck_sum_json(&sums[i]));
        bad |= json_object_set_new(o, "files", files);
        data = cfg_obj = files = NULL;
    }
    json_decref(data);
    json_decref(cfg_obj);
    json_decref(files);
    char *text = bad ? NULL : ck_json_text(o);
    if (bad) json_decref(o);
    if (!text) return NULL;
    /* "...\n}\n" becomes "...,\n  \"checksum\": \"<crc of all before it>\"\n}\n". */
    size_t n = strlen(text);
    if (n < 3) {
        free(text);
        return NULL;
    }
    text[n - 3] = '\0';
    size_t head = n - 3;
    char *out = malloc(head + 64);
    if (out) {
        memcpy(out, text, head);
        memcpy(out + head, ",\n", 2);
        hy_crc32c_text(hy_crc32c(0, out, head + 2), hex);
        snprintf(out + head + 2, 62, "  \"checksum\": \"%s" CK_STATE_END, hex);
    }
    free(text);
    return out;
}

/* Creates dir and its missing parents. *made (when not NULL): the length
 * of the shortest prefix of dir it created, 0 when it created none, so a
 * run refused later can take away exactly what it added (set on failure
 * too: ck_rmdirs takes back what was made before it). */
static int ck_mkdirs(const char *dir, size_t *made, hy_error *err) {
    char buf[PATH_MAX];
    if (made) *made = 0;
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return hy_fail(err, HY_ERR_INPUT, "checkpoint.dir is too long: %s", dir);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0777) == 0) {
                if (made && !*made) *made = (size_t)(p - buf);
            } else if (errno != EEXIST) {
                int e = errno;
                return hy_fail(err, hy_errno_status(e, HY_ERR_INPUT),
                               "checkpoint.dir %s: cannot create %s: %s", dir, buf, strerror(e));
            }
            *p = c;
            if (!c) break;
        }
    }
    struct stat sb;
    if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return hy_fail(err, HY_ERR_INPUT, "checkpoint.dir %s is not a directory", dir);
    return HY_OK;
}

/* A GPT's or BERT's position table as saved: model.positions, or in a
 * checkpoint older than it model.seq_len (the table had that many rows);
 * -1 when neither is a number. */
static long long ck_saved_positions(json_t *model) {
    json_t *v = json_object_get(model, "positions");
    if (!v) v = json_object_get(model, "seq_len");
    return json_is_integer(v) ? (long long)json_integer_value(v) : -1LL;
}

/* The saved config's model.* must equal m: the kind first (a BERT's
 * tensors have a GPT's names and shapes), then the shape. A resume
 * (`resume`) holds seq_len too: the data position counts sequences of
 * it; weights alone run at any seq_len their position table covers.
 * `what` names the checkpoint's part in messages ("ck/step_000200", or
 * its weights file and the checkpoint), `advice` ends them. */
static int ck_check_model(const char *path, const char *what, json_t *state, const hy_model *m,
                          int resume, const char *advice, hy_error *err) {
    json_t *model = json_object_get(json_object_get(state, "config"), "model");
    if (!json_is_object(model))
        return hy_fail(err, HY_ERR_INPUT, "%s/state.json: no config.model section", path);
    const char *kind = json_string_value(json_object_get(model, "kind"));
    const char *want = hy_model_name(m->kind);
    if (!kind || strcmp(kind, want) != 0)
        return hy_fail(err, HY_ERR_INPUT, "%s was saved with model.kind = %s, the config has "
                       "%s; %s", what, kind ? kind : "?", want, advice);
    /* kv_heads, ffn_dim and tie_embeddings came with Llama: a checkpoint
     * older than them is a GPT's or a BERT's, whose kind fixes them. */
    static const char *const keys[] = { "layers", "d_model", "heads", "seq_len", "vocab",
                                        "kv_heads", "ffn_dim" };
    const int now[] = { m->layers, m->d_model, m->heads, m->seq_len, m->vocab, m->kv_heads,
                        m->ffn_dim };
    for (int i = 0; i < 7; i++) {
        json_t *v = json_object_get(model, keys[i]);
        if ((!v && i >= 5) || (!resume && i == 3)) continue;
        if (!json_is_integer(v) || json_integer_value(v) != now[i])
            return hy_fail(err, HY_ERR_INPUT, "%s was saved with model.%s = %lld, the config has "
                           "%d; %s", what, keys[i],
                           json_is_integer(v) ? (long long)json_integer_value(v) : -1LL, now[i],
                           advice);
    }
    long long rows = ck_saved_positions(model);
    if (m->kind != HY_MODEL_LLAMA && rows != m->positions) {
        char also[64] = "";   /* a seq_len the saved table covers */
        if (rows < m->seq_len) snprintf(also, sizeof also, " --set model.seq_len=%lld", rows);
        return hy_fail(err, HY_ERR_INPUT, "%s was saved with model.positions = %lld (its "
                       "position table's rows), the config has %d; --set model.positions=%lld%s",
                       what, rows, m->positions, rows, also);
    }
    json_t *tie = json_object_get(model, "tie_embeddings");
    if (tie && (!json_is_boolean(tie) || json_is_true(tie) != !!m->tie_embeddings))
        return hy_fail(err, HY_ERR_INPUT, "%s was saved with model.tie_embeddings = %s, the "
                       "config has %s; %s", what, json_is_true(tie) ? "true" : "false",
                       m->tie_embeddings ? "true" : "false", advice);
    if (m->kind == HY_MODEL_BERT) {
        /* A BERT saved before model.norm existed is a pre-LN one. */
        const char *norm = json_string_value(json_object_get(model, "norm"));
        if (!norm) norm = "pre";
        if (strcmp(norm, hy_model_norm_name(m->norm)) != 0)
            return hy_fail(err, HY_ERR_INPUT, "%s was saved with model.norm = %s, the config has "
                           "%s; %s", what, norm, hy_model_norm_name(m->norm), advice);
        json_t *eps = json_object_get(model, "norm_eps");
        if (m->norm == HY_NORM_POST && (!json_is_number(eps) ||
                                        (float)json_number_value(eps) != (float)m->norm_eps))
            return hy_fail(err, HY_ERR_INPUT, "%s was saved with model.norm_eps = %g, the config "
                           "has %g; %s", what, json_is_number(eps) ? json_number_value(eps) : NAN,
                           m->norm_eps, advice);
        return HY_OK;
    }
    if (m->kind != HY_MODEL_LLAMA) return HY_OK;
    /* Llama's reals change the function the weights compute, not their shapes. */
    json_t *scaling = json_object_get(model, "rope_scaling");
    const char *const reals[] = { "norm_eps", "rope_theta", "factor", "low_freq_factor",
                                  "high_freq_factor" };
    const double rnow[] = { m->norm_eps, m->rope_theta, m->rope_scaling.factor,
                            m->rope_scaling.low_freq_factor, m->rope_scaling.high_freq_factor };
    for (int i = 0; i < 5; i++) {
        json_t *v = json_object_get(i < 2 ? model : scaling, reals[i]);
        if (!json_is_number(v) || json_number_value(v) != rnow[i])
            return hy_fail(err, HY_ERR_INPUT, "%s was saved with model.%s%s = %g, the config "
                           "has %g; %s", what, i < 2 ? "" : "rope_scaling.", reals[i],
                           json_is_number(v) ? json_number_value(v) : NAN, rnow[i], advice);
    }
    json_t *orig = json_object_get(scaling, "original_max_position_embeddings");
    int orig_now = m->rope_scaling.original_max_position_embeddings;
    if (!json_is_integer(orig) || json_integer_value(orig) != orig_now)
        return hy_fail(err, HY_ERR_INPUT, "%s was saved with model.rope_scaling."
                       "original_max_position_embeddings = %lld, the config has %d; %s", what,
                       json_is_integer(orig) ? (long long)json_integer_value(orig) : -1LL,
                       orig_now, advice);
    return HY_OK;
}

/* BERT's mask id, for a resume: masking with another id mid-run trains on
 * other inputs, though the weights fit. A checkpoint older than the key
 * model.mask_token masked with the last id, model.vocab - 1 (what the
 * default for a 30522-id vocabulary, 103, silently replaced): the run
 * must say that id, or start anew from the weights. */
static int ck_check_mask(const char *path, json_t *state, const hy_model *m, hy_error *err) {
    if (m->kind != HY_MODEL_BERT) return HY_OK;
    json_t *model = json_object_get(json_object_get(state, "config"), "model");
    json_t *v = json_object_get(model, "mask_token");
    /* ck_check_model has held model.vocab to m's. */
    long long was = v ? (json_is_integer(v) ? (long long)json_integer_value(v) : -1LL)
                      : (long long)m->vocab - 1;
    if (was == m->mask_token) return HY_OK;
    if (!v)
        return hy_fail(err, HY_ERR_INPUT, "%s was saved before model.mask_token existed, when "
                       "BERT masked with the last id, model.vocab - 1 = %lld; the config has "
                       "model.mask_token = %d. Resume with --set model.mask_token=%lld to mask "
                       "as the run did, or start a new run from its weights (init = "
                       "\"%s/model.safetensors\") to mask with %d", path, was, m->mask_token,
                       was, path, m->mask_token);
    return hy_fail(err, HY_ERR_INPUT, "%s was saved with model.mask_token = %lld, the config "
                   "has %d: the run would mask with another id from here on. Resume with "
                   "--set model.mask_token=%lld, or start a new run from its weights (init = "
                   "\"%s/model.safetensors\")", path, was, m->mask_token, was, path);
}

static int ck_read_moments(hy_runtime *rt, const char *file, hy_error *err) {
    const hy_model *m = hy_runtime_model(rt);
    hy_safetensors_file f;
    int rc = hy_safetensors_open(&f, file, err);
    if (rc) return rc;
    float *buf = malloc(hy_model_max_numel(m) * sizeof(float) + 1);
    if (!buf) rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory reading %s", file);
    for (int i = 0; i < m->n_params && !rc; i++) {
        const hy_param *p = &m->params[i];
        size_t n = hy_model_real_numel(m, p);
        for (int k = 0; k < 2 && !rc; k++) {
            char name[96];
            snprintf(name, sizeof name, "%s%s", k == 0 ? "m." : "v.", p->name);
            const hy_safetensors_tensor *t = hy_safetensors_find(&f, name);
            if (!t) rc = hy_fail(err, HY_ERR_INPUT, "%s: tensor '%s' is missing", file, name);
            else if (t->numel != n)
                rc = hy_fail(err, HY_ERR_INPUT, "%s: tensor '%s' has %zu values, the model needs %zu",
                             file, name, t->numel, n);
            if (!rc) rc = hy_safetensors_read_f32(&f, t, buf, n, err);
            if (!rc) rc = hy_weights_check(file, name, buf, n, k == 1, err);
            if (!rc) rc = hy_runtime_put(rt, k == 0 ? HY_T_ADAM_M : HY_T_ADAM_V, p, buf, n, err);
        }
    }
    free(buf);
    hy_safetensors_close(&f);
    return rc;
}

static void ck_path(char *buf, size_t n, const char *dir, const char *name) {
    snprintf(buf, n, "%s/%s", dir, name);
}

/* ck_write_text of a text made for it, which it frees (NULL: the making
 * ran out of memory). */
static int ck_write_owned(const char *path, char *text, hy_file_sum *sum, hy_error *err) {
    int rc = text ? ck_write_text(path, text, sum, err)
                  : hy_fail(err, HY_ERR_RUNTIME, "out of memory writing %s", path);
    free(text);
    return rc;
}

/* ---- Saving ------------------------------------------------------------- */

/* The files of step `step` into the checkpoint's temporary directory tmp:
 * the tensors, config.json (GPT, Llama: transformers'; BERT: hanayo's),
 * then state.json with their sums. */
static int ck_write_files(hy_runtime *rt, const char *tmp, int step,
                          size_t pos, const ck_data_id *d, hy_error *err) {
    const hy_model *m = hy_runtime_model(rt);
    const hy_tensor_role w[1] = { HY_T_PARAM }, mv[2] = { HY_T_ADAM_M, HY_T_ADAM_V };
    const char *const wp[1] = { "" }, *const mvp[2] = { "m.", "v." };
    hy_file_sum sums[CK_N_FILES] = { { 0, 0 } }, self;
    char file[PATH_MAX + 64], step_text[32];
    snprintf(step_text, sizeof step_text, "%d", step);
    ck_path(file, sizeof file, tmp, CK_FILES[0]);
    int rc = ck_write_tensors(rt, m, file, w, wp, 1, step_text, &sums[0], err);
    ck_path(file, sizeof file, tmp, CK_FILES[1]);
    if (!rc) rc = ck_write_tensors(rt, m, file, mv, mvp, 2, step_text, &sums[1], err);
    ck_path(file, sizeof file, tmp, CK_FILES[2]);
    if (!rc)
        rc = ck_write_owned(file, ck_json_text(m->kind != HY_MODEL_BERT || m->norm == HY_NORM_POST
                                               ? hy_hfconfig_json(m)
                                               : ck_hanayo_config(hy_runtime_run(rt))),
                            &sums[2], err);
    ck_path(file, sizeof file, tmp, "state.json");
    if (!rc)
        rc = ck_write_owned(file, ck_state_text(hy_runtime_run(rt), step, hy_runtime_last_loss(rt),
                                                pos, d, sums, CK_N_FILES), &self, err);
    return rc;
}

int hy_checkpoint_save(hy_runtime *rt, const char *dir, char *saved, hy_error *err) {
    int step;
    size_t pos;
    ck_data_id d;
    int rc = hy_runtime_get_progress(rt, &step, &pos, err);
    if (!rc) rc = ck_mkdirs(dir, NULL, err);
    if (!rc) rc = ck_data_of(rt, &d, err);
    if (rc) return rc;
    char target[PATH_MAX];
    if (snprintf(target, sizeof target, "%s/step_%06d", dir, step) >= (int)sizeof target) {
        ck_data_free(&d);
        return hy_fail(err, HY_ERR_INPUT, "checkpoint.dir is too long: %s", dir);
    }
    hy_atomic_dir ad;
    rc = hy_atomic_dir_open(&ad, target, HY_ERR_INPUT, err);
    if (rc) {
        ck_data_free(&d);
        return rc;
    }
    rc = ck_write_files(rt, ad.tmp, step, pos, &d, err);
    ck_data_free(&d);
    /* A file that failed is in a temporary directory the user never named,
     * and gone with it now: say which checkpoint it was. */
    if (rc) {
        hy_atomic_dir_abort(&ad);
        hy_error_prefix(err, "checkpoint %s not saved (earlier checkpoints are untouched): ",
                        target);
    } else {
        /* Replacing swaps the new directory with an older one of the same
         * step in one rename, so the name never goes missing. Its errors
         * say whether they came before the rename or after. */
        rc = hy_atomic_dir_replace(&ad, err);
        if (rc) hy_error_prefix(err, "checkpoint %s: ", target);
    }
    if (!rc && saved) snprintf(saved, PATH_MAX, "%s", target);
    return rc;
}

/* ---- The checkpoints of a directory ------------------------------------- */

/* The step of a checkpoint directory's name: exactly what a save names
 * it, "step_%06d" (not the hidden temporaries a save or a removal works
 * in, nor "step_4" or "step_0000004", which would pass for step 4 beside
 * the real one); -1 otherwise. */
static int ck_step_of_name(const char *name) {
    if (strncmp(name, "step_", 5) != 0 || !name[5]) return -1;
    long long v = 0;
    for (const char *p = name + 5; *p; p++) {
        if (*p < '0' || *p > '9' || v > INT_MAX / 10) return -1;
        v = v * 10 + (*p - '0');
    }
    char canon[32];
    if (v > INT_MAX) return -1;
    snprintf(canon, sizeof canon, "step_%06d", (int)v);
    return strcmp(canon, name) == 0 ? (int)v : -1;
}

static int ck_is_dir(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int ck_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

static int ck_int_cmp(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The steps of dir's checkpoint directories, ascending, into malloc'd
 * *steps. */
static int ck_scan(const char *dir, int **steps, int *n, hy_error *err) {
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return hy_fail(err, hy_errno_status(errno, HY_ERR_INPUT), "%s: cannot list: %s", dir,
                       strerror(errno));
    int cap = 0, rc = HY_OK;
    struct dirent *e;
    char path[PATH_MAX + 300];
    while (!rc && (e = readdir(d))) {
        int s = ck_step_of_name(e->d_name);
        ck_path(path, sizeof path, dir, e->d_name);
        if (s < 0 || !ck_is_dir(path)) continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            int *grown = realloc(*steps, (size_t)cap * sizeof(int));
            if (!grown) {
                rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory listing %s", dir);
                break;
            }
            *steps = grown;
        }
        (*steps)[(*n)++] = s;
    }
    closedir(d);
    if (rc) {
        free(*steps);
        *steps = NULL;
        *n = 0;
        return rc;
    }
    if (*n) qsort(*steps, (size_t)*n, sizeof(int), ck_int_cmp);
    return HY_OK;
}

/* dir/step_%06d into buf. */
static void ck_step_path(char *buf, size_t n, const char *dir, int step) {
    snprintf(buf, n, "%s/step_%06d", dir, step);
}

/* The directory that holds checkpoint `path` (its parent), into buf. */
static void ck_parent(const char *path, char *buf, size_t n) {
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;
    while (len > 0 && path[len - 1] != '/') len--;
    while (len > 1 && path[len - 1] == '/') len--;
    if (len == 0) snprintf(buf, n, ".");
    else snprintf(buf, n, "%.*s", (int)len, path);
}

static const char *ck_base(const char *path, char *buf, size_t n) {
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--;
    size_t start = len;
    while (start > 0 && path[start - 1] != '/') start--;
    snprintf(buf, n, "%.*s", (int)(len - start), path + start);
    return buf;
}

/* What to do about a damaged checkpoint: resume from the one before it,
 * when there is one beside it. */
static void ck_advice(const char *path, char *buf, size_t n) {
    char parent[PATH_MAX], base[PATH_MAX];
    ck_parent(path, parent, sizeof parent);
    int self = ck_step_of_name(ck_base(path, base, sizeof base)), *steps = NULL, k = 0, prev = -1;
    hy_error ignored;
    if (self >= 0 && ck_scan(parent, &steps, &k, &ignored) == HY_OK)
        for (int i = 0; i < k; i++)
            if (steps[i] < self) prev = steps[i];
    free(steps);
    if (prev >= 0) {
        char p[PATH_MAX + 32];
        ck_step_path(p, sizeof p, parent, prev);
        snprintf(buf, n, "do not train on it; resume from the previous checkpoint, "
                 "--resume %s", p);
    } else {
        snprintf(buf, n, "do not train on it; no older checkpoint lies beside it");
    }
}

/* ---- Checking ----------------------------------------------------------- */

/* A checkpoint's state.json, whole. */
static int ck_read_text(const char *file, char **text, size_t *n, hy_error *err) {
    *text = NULL;
    *n = 0;
    FILE *f;
    int rc = hy_infile_fopen(file, "a checkpoint's state", &f, err);
    if (rc) return rc;
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size > CK_STATE_MAX) {
        fclose(f);
        return hy_fail(err, HY_ERR_INPUT, "%s: not a checkpoint's state (not a regular file "
                       "of at most %u bytes)", file, CK_STATE_MAX);
    }
    size_t want = (size_t)sb.st_size;
    char *buf = malloc(want + 1);
    size_t got = buf ? fread(buf, 1, want + 1, f) : 0;
    int bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return hy_fail(err, HY_ERR_RUNTIME, "%s: cannot read", file);
    }
    if (got > want) {   /* it grew while it was read: no longer what fstat saw */
        free(buf);
        return hy_fail(err, HY_ERR_INPUT, "%s: changed while it was read", file);
    }
    buf[got] = '\0';
    *text = buf;
    *n = got;
    return HY_OK;
}

/* The last occurrence of needle in text[0..n), or NULL. */
static const char *ck_last(const char *text, size_t n, const char *needle) {
    size_t k = strlen(needle);
    for (size_t i = n >= k ? n - k + 1 : 0; i-- > 0;)
        if (memcmp(text + i, needle, k) == 0) return text + i;
    return NULL;
}

/* Checks state.json's text against the checksum on its last line. *found:
 * whether it has that line at all (a format-1 state has not). */
static int ck_check_self(const char *path, const char *file, const char *text, size_t n,
                         int *found, hy_error *err) {
    const char *at = ck_last(text, n, CK_CHECKSUM_LINE);
    *found = at != NULL;
    if (!at) return HY_OK;
    size_t head = (size_t)(at - text) + 1;   /* through the newline before the line */
    const char *hex = at + strlen(CK_CHECKSUM_LINE);
    char rec[9] = "";
    uint32_t want = 0, got = hy_crc32c(0, text, head), ok = 0;
    /* The 8 digits, then exactly the end the writer puts: nothing after
     * the checksum can change unseen either. */
    if ((size_t)(hex - text) + 8 + strlen(CK_STATE_END) == n &&
        memcmp(hex + 8, CK_STATE_END, strlen(CK_STATE_END)) == 0) {
        memcpy(rec, hex, 8);
        ok = hy_crc32c_parse(rec, &want) == 0;
    }
    if (ok && want == got) return HY_OK;
    char found_hex[9], advice[PATH_MAX + 128];
    hy_crc32c_text(got, found_hex);
    ck_advice(path, advice, sizeof advice);
    return hy_fail(err, HY_ERR_INPUT, "%s: checksum mismatch: it records crc32c %s, its text "
                   "sums to %s: the file was changed or damaged; %s", file,
                   ok ? rec : "(unreadable)", found_hex, advice);
}

/* Reads the state.json of checkpoint `path`, checks it against its own
 * checksum and parses it; *format is 1 or 2. */
static int ck_state_load(const char *path, json_t **state, int *format, hy_error *err) {
    char file[PATH_MAX + 64];
    ck_path(file, sizeof file, path, "state.json");
    *state = NULL;
    char *text;
    size_t n;
    int found = 0, rc = ck_read_text(file, &text, &n, err);
    if (!rc) rc = ck_check_self(path, file, text, n, &found, err);
    if (rc) {
        free(text);
        return rc;
    }
    json_error_t je;
    json_t *o = json_loadb(text, n, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (!o) {
        char advice[PATH_MAX + 128];
        ck_advice(path, advice, sizeof advice);
        return hy_fail(err, HY_ERR_INPUT, "%s: not a checkpoint's state: %s (line %d, column "
                       "%d); %s", file, je.text, je.line, je.column, advice);
    }
    json_t *fmt = json_object_get(o, "format");
    long long f = json_is_integer(fmt) ? (long long)json_integer_value(fmt) : -1;
    if (f != 1 && f != HY_CKPT_FORMAT)
        rc = hy_fail(err, HY_ERR_INPUT, "%s: checkpoint format %lld; this hanayo reads "
                     "formats 1 and %d", file, f, HY_CKPT_FORMAT);
    else if (f >= 2 && !found)
        rc = hy_fail(err, HY_ERR_INPUT, "%s: format %lld but no \"checksum\" line: the file "
                     "was cut short or edited", file, f);
    if (rc) {
        json_decref(o);
        return rc;
    }
    *state = o;
    *format = (int)f;
    return HY_OK;
}

static int ck_known_file(const char *name) {
    for (int i = 0; i < CK_N_FILES; i++)
        if (strcmp(name, CK_FILES[i]) == 0) return 1;
    return 0;
}

/* One file against what state.json recorded for it. */
static int ck_check_file(const char *path, const char *name, json_t *rec, hy_error *err) {
    char file[PATH_MAX + 64], advice[PATH_MAX + 128], hex[9];
    ck_path(file, sizeof file, path, name);
    json_t *bytes = json_object_get(rec, "bytes");
    const char *crc_text = json_string_value(json_object_get(rec, "crc32c"));
    uint32_t want;
    if (!ck_known_file(name) || !json_is_integer(bytes) || json_integer_value(bytes) < 0 ||
        !crc_text || hy_crc32c_parse(crc_text, &want) != 0)
        return hy_fail(err, HY_ERR_INPUT, "%s/state.json: files.%s is not {\"bytes\": n, "
                       "\"crc32c\": \"8 hex digits\"} of a checkpoint file", path, name);
    long long expect = (long long)json_integer_value(bytes);
    struct stat sb;
    if (stat(file, &sb) != 0) {
        int e = errno;
        ck_advice(path, advice, sizeof advice);
        return hy_fail(err, hy_errno_status(e, HY_ERR_INPUT), "%s: %s, but state.json records "
                       "it (%lld bytes); %s", file, strerror(e), expect, advice);
    }
    if ((long long)sb.st_size != expect) {
        ck_advice(path, advice, sizeof advice);
        return hy_fail(err, HY_ERR_INPUT, "%s: %lld bytes, state.json records %lld: the file "
                       "was cut short or replaced; %s", file, (long long)sb.st_size, expect,
                       advice);
    }
    hy_file_sum s;
    int rc = hy_file_sum_of(file, &s, err);
    if (rc) return rc;
    if (s.crc == want) return HY_OK;
    hy_crc32c_text(s.crc, hex);
    ck_advice(path, advice, sizeof advice);
    return hy_fail(err, HY_ERR_INPUT, "%s: checksum mismatch: state.json records crc32c %s, "
                   "the file has %s: it is damaged; %s", file, crc_text, hex, advice);
}

/* Every file state.json vouches for, and the two that must be there. */
static int ck_check_files(const char *path, json_t *state, hy_error *err) {
    json_t *files = json_object_get(state, "files");
    if (!json_is_object(files))
        return hy_fail(err, HY_ERR_INPUT, "%s/state.json: no \"files\" object", path);
    for (int i = 0; i < 2; i++)
        if (!json_object_get(files, CK_FILES[i]))
            return hy_fail(err, HY_ERR_INPUT, "%s/state.json: files has no %s", path,
                           CK_FILES[i]);
    const char *name;
    json_t *rec;
    json_object_foreach(files, name, rec) {
        int rc = ck_check_file(path, name, rec, err);
        if (rc) return rc;
    }
    return HY_OK;
}

/* state.json and, for a checkpoint with checksums, every file. */
static int ck_verify(const char *path, json_t **state, int *unverified, hy_error *err) {
    int format = 0, rc = ck_state_load(path, state, &format, err);
    if (!rc && format >= 2) rc = ck_check_files(path, *state, err);
    if (rc) {
        json_decref(*state);
        *state = NULL;
    }
    *unverified = !rc && format < 2;
    return rc;
}

int hy_checkpoint_verify(const char *path, int *unverified, hy_error *err) {
    json_t *state = NULL;
    int rc = ck_verify(path, &state, unverified, err);
    json_decref(state);
    return rc;
}

int hy_checkpoint_verify_file(const char *file, const hy_model *m, int *unverified,
                              hy_error *err) {
    char dir[PATH_MAX], state[PATH_MAX + 64];
    ck_parent(file, dir, sizeof dir);
    if (strchr(file, '/') == NULL) snprintf(dir, sizeof dir, ".");
    ck_path(state, sizeof state, dir, "state.json");
    *unverified = 0;
    if (!ck_exists(state)) return HY_OK;
    json_t *o = NULL;
    int rc = ck_verify(dir, &o, unverified, err);
    if (rc) {
        hy_error_prefix(err, "%s lies in checkpoint %s, which fails its check: ", file, dir);
        return rc;
    }
    char what[2 * PATH_MAX + 32];
    snprintf(what, sizeof what, "%s (checkpoint %s)", file, dir);
    if (m)
        rc = ck_check_model(dir, what, o, m, 0, "these are another model's weights: use a config "
                            "of the model its state.json's config.model records", err);
    json_decref(o);
    return rc;
}

/* The names of dir's checkpoints steps[from..n), the first three, then
 * how many more, into buf. */
static void ck_names(const char *dir, const int *steps, int from, int n, char *buf, size_t cap) {
    char path[PATH_MAX + 64];
    size_t used = 0;
    buf[0] = '\0';
    for (int i = from; i < n && i < from + 3; i++) {
        ck_step_path(path, sizeof path, dir, steps[i]);
        used += (size_t)snprintf(buf + used, cap - used, "%s%s", i > from ? ", " : "", path);
        if (used >= cap) used = cap - 1;
    }
    if (n - from > 3) snprintf(buf + used, cap - used, " and %d more", n - from - 3);
}

int hy_checkpoint_resolve(const char *flag, const char *path, char *resolved, hy_error *err) {
    char state[PATH_MAX + 64];
    ck_path(state, sizeof state, path, "state.json");
    if (ck_exists(state) || !ck_is_dir(path)) {
        snprintf(resolved, PATH_MAX, "%s", path);
        return HY_OK;
    }
    int *steps = NULL, n = 0, rc = ck_scan(path, &steps, &n, err);
    if (!rc && n == 0)
        rc = hy_fail(err, HY_ERR_INPUT, "%s %s: not a checkpoint (no state.json) and holds no "
                     "step_NNNNNN checkpoints", flag, path);
    if (!rc) ck_step_path(resolved, PATH_MAX, path, steps[n - 1]);
    /* The newest must be a checkpoint: a directory of that name without
     * a state.json (a copy cut short, another tool's) is named, with the
     * newest whole one before it, instead of failing on its missing
     * file. */
    char newest[PATH_MAX + 64], prev[PATH_MAX + 64] = "", file[PATH_MAX + 128];
    for (int i = n - 1; !rc && i >= 0; i--) {
        ck_step_path(newest, sizeof newest, path, steps[i]);
        ck_path(file, sizeof file, newest, "state.json");
        if (ck_exists(file)) {
            snprintf(prev, sizeof prev, "%s", newest);
            break;
        }
    }
    if (!rc && strcmp(prev, resolved) != 0) {
        char how[2 * PATH_MAX + 256];
        int resume = strcmp(flag, "--resume") == 0;
        if (*prev && resume)
            snprintf(how, sizeof how, "the newest checkpoint before it is %s: move %s aside (or "
                     "remove it) and resume again, or resume %s into another checkpoint.dir",
                     prev, resolved, prev);
        else if (*prev)
            snprintf(how, sizeof how, "the newest checkpoint before it is %s: give %s %s, or "
                     "move %s aside", prev, flag, prev, resolved);
        else
            snprintf(how, sizeof how, "no step_NNNNNN directory in %s holds one", path);
        rc = hy_fail(err, HY_ERR_INPUT, "%s %s: its newest step directory %s holds no "
                     "state.json, so it is not a whole checkpoint; %s", flag, path, resolved,
                     how);
    }
    free(steps);
    return rc;
}

int hy_checkpoint_check_newer(const char *dir, const char *resumed, int step, hy_error *err) {
    if (!ck_is_dir(dir)) return HY_OK;
    int *steps = NULL, n = 0, rc = ck_scan(dir, &steps, &n, err);
    int first = n, newest_good = -1;
    char path[PATH_MAX + 64], state[PATH_MAX + 128];
    for (int i = n - 1; !rc && i >= 0 && steps[i] > step; i--) {
        first = i;
        ck_step_path(path, sizeof path, dir, steps[i]);
        ck_path(state, sizeof state, path, "state.json");
        if (newest_good < 0 && ck_exists(state)) newest_good = steps[i];
    }
    if (rc || first == n) {
        free(steps);
        return rc;
    }
    char names[3 * (PATH_MAX + 64) + 64];
    ck_names(dir, steps, first, n, names, sizeof names);
    char how[PATH_MAX + 128];
    if (newest_good >= 0) {
        ck_step_path(path, sizeof path, dir, newest_good);
        snprintf(how, sizeof how, "resume from the newest (--resume %s), ", path);
    } else {
        snprintf(how, sizeof how, "(none of them holds a state.json: they are not whole "
                 "checkpoints) ");
    }
    rc = hy_fail(err, HY_ERR_INPUT, "checkpoint.dir %s holds %d checkpoint%s newer than step %d, "
                 "which --resume %s continues from: %s; this run's saves would replace %s. "
                 "To go on, %sgive this run another checkpoint.dir (--set checkpoint.dir=DIR), "
                 "or remove %s first if %s to go", dir, n - first, n - first == 1 ? "" : "s",
                 step, resumed, names, n - first == 1 ? "it" : "them", how,
                 n - first == 1 ? "it" : "them", n - first == 1 ? "it is" : "they are");
    free(steps);
    return rc;
}

int hy_checkpoint_check_new_run(const char *dir, int fresh, int *beside, int *newest,
                                hy_error *err) {
    *beside = 0;
    *newest = -1;
    if (!ck_is_dir(dir)) return HY_OK;
    int *steps = NULL, n = 0, rc = ck_scan(dir, &steps, &n, err);
    if (!rc && n > 0) {
        *beside = n;
        *newest = steps[n - 1];
    }
    if (rc || n == 0 || fresh) {
        free(steps);
        return rc;
    }
    char names[3 * (PATH_MAX + 64) + 64];
    const char *them = n == 1 ? "it" : "them";
    ck_names(dir, steps, 0, n, names, sizeof names);
    rc = hy_fail(err, HY_ERR_INPUT, "checkpoint.dir %s already holds %d checkpoint%s of another "
                 "run: %s; this new run (no --resume) would save beside %s, and --resume %s "
                 "would then continue whichever run's step is newest. To go on, continue that "
                 "run with --resume %s, give this run another checkpoint.dir (--set "
                 "checkpoint.dir=DIR), remove %s first if %s to go, or pass --fresh to start "
                 "over beside %s", dir, n, n == 1 ? "" : "s", names, them, dir, dir, them,
                 n == 1 ? "it is" : "they are", them);
    free(steps);
    return rc;
}

/* ---- Loading ------------------------------------------------------------ */

/* Integer `key` of object o (`name` in messages: its path in state.json)
 * into *v: it must lie in lo..hi, else HY_ERR_INPUT naming the file and
 * the key. A number read back from a checkpoint is bounded before it is
 * used: a state.json without checksums (format 1), or one rewritten with
 * a fresh checksum, may hold anything. dflt >= lo: a missing key's value
 * (an older format without it); dflt < lo: the key must be there. */
static int ck_int_in(const char *path, json_t *o, const char *key, const char *name,
                     long long lo, long long hi, long long dflt, long long *v, hy_error *err) {
    json_t *j = json_object_get(o, key);
    if (!j && dflt >= lo) {
        *v = dflt;
        return HY_OK;
    }
    if (json_is_integer(j) && json_integer_value(j) >= lo && json_integer_value(j) <= hi) {
        *v = (long long)json_integer_value(j);
        return HY_OK;
    }
    char got[48];
    if (json_is_integer(j)) snprintf(got, sizeof got, "%lld", (long long)json_integer_value(j));
    else snprintf(got, sizeof got, "%s", j ? "not an integer" : "missing");
    return hy_fail(err, HY_ERR_INPUT, "%s/state.json: \"%s\" is %s; it must be an integer in "
                   "%lld .. %lld (the file was damaged or edited)", path, name, got, lo, hi);
}

/* The shards state.json's "data" names: "shards", or a checkpoint of one
 * shard from before data.train took several ("shard", "shard_bytes",
 * "head_crc32c"). Into saved's n, path (borrowed from the JSON), bytes
 * and head_crc; on failure it is empty. */
static int ck_saved_shards(const char *path, json_t *data, ck_data_id *saved, hy_error *err) {
    memset(saved, 0, sizeof *saved);
    json_t *list = json_object_get(data, "shards");
    int legacy = !list;
    size_t n = legacy ? 1 : json_array_size(list);
    if (!legacy && (!json_is_array(list) || n == 0 || n > INT_MAX))
        return hy_fail(err, HY_ERR_INPUT, "%s/state.json: \"data.shards\" must be a non-empty "
                       "array (the file was damaged or edited)", path);
    saved->path = calloc(n, sizeof *saved->path);
    saved->bytes = calloc(n, sizeof *saved->bytes);
    saved->head_crc = calloc(n, sizeof *saved->head_crc);
    int rc = !saved->path || !saved->bytes || !saved->head_crc
                 ? hy_fail(err, HY_ERR_RUNTIME, "out of memory") : HY_OK;
    for (size_t i = 0; !rc && i < n; i++) {
        json_t *e = legacy ? data : json_array_get(list, i);
        char name[64];
        if (legacy) snprintf(name, sizeof name, "data.shard_bytes");
        else snprintf(name, sizeof name, "data.shards[%zu].bytes", i);
        const char *crc = json_string_value(json_object_get(e, "head_crc32c"));
        saved->path[i] = json_string_value(json_object_get(e, legacy ? "shard" : "path"));
        if (!json_is_object(e) || !crc || hy_crc32c_parse(crc, &saved->head_crc[i]) != 0)
            rc = hy_fail(err, HY_ERR_INPUT, "%s/state.json: no valid \"data\" section%s", path,
                         legacy ? "" : " (a shard without its head_crc32c)");
        if (!rc) rc = ck_int_in(path, e, legacy ? "shard_bytes" : "bytes", name, 0, LLONG_MAX, -1,
                                &saved->bytes[i], err);
        saved->n = (int)i + 1;
    }
    if (rc) ck_data_free(saved);
    return rc;
}

/* Says how the data saved (was) and the data now (now) differ, if they
 * do: the shard count, or the first shard that is not the same file. */
static int ck_same_shards(const char *path, const ck_data_id *was, const ck_data_id *now,
                          hy_error *err) {
    const char *why = "its data position would count into other tokens. Resume with the "
                      "same shards in the same order, or start a new run from its weights";
    if (was->n != now->n)
        return hy_fail(err, HY_ERR_INPUT, "%s was saved reading %d shard%s (the first %s), "
                       "data.train reads %d now (the first %s): %s (init = "
                       "\"%s/model.safetensors\")", path, was->n, was->n == 1 ? "" : "s",
                       was->path[0] ? was->path[0] : "?", now->n, now->path[0], why, path);
    for (int i = 0; i < now->n; i++) {
        if (was->bytes[i] == now->bytes[i] && was->head_crc[i] == now->head_crc[i]) continue;
        char a[9], b[9], which[48] = "";
        hy_crc32c_text(was->head_crc[i], a);
        hy_crc32c_text(now->head_crc[i], b);
        if (now->n > 1) snprintf(which, sizeof which, " as shard %d of %d", i + 1, now->n);
        return hy_fail(err, HY_ERR_INPUT, "%s was saved reading %s%s (%lld bytes, first 64 KiB "
                       "crc32c %s); data.train has %s there (%lld bytes, crc32c %s): %s (init = "
                       "\"%s/model.safetensors\")", path, was->path[i] ? was->path[i] : "?",
                       which, was->bytes[i], a, now->path[i], now->bytes[i], b, why, path);
    }
    return HY_OK;
}

/* The data the checkpoint's position counts into must be what the config
 * reads now, the same way. */
static int ck_check_data(const char *path, json_t *state, hy_runtime *rt, hy_error *err) {
    json_t *data = json_object_get(state, "data");
    if (!json_is_object(data))
        return hy_fail(err, HY_ERR_INPUT, "%s/state.json: no valid \"data\" section", path);
    long long saved_mb, saved_bs, saved_rep;
    int rc = ck_int_in(path, data, "micro_batches", "data.micro_batches", 1, INT_MAX, 0,
                       &saved_mb, err);
    if (!rc) rc = ck_int_in(path, data, "micro_batch_size", "data.micro_batch_size", 1, INT_MAX,
                            0, &saved_bs, err);
    if (!rc) rc = ck_int_in(path, data, "replicas", "data.replicas", 1, INT_MAX, 1, &saved_rep,
                            err);
    ck_data_id was, now;
    if (rc) return rc;
    rc = ck_saved_shards(path, data, &was, err);
    if (rc) return rc;
    rc = ck_data_of(rt, &now, err);
    if (!rc) rc = ck_same_shards(path, &was, &now, err);
    ck_data_free(&was);
    if (rc) {
        ck_data_free(&now);
        return rc;
    }
    /* The global batch is what must stay: replicas x micro_batches may
     * be split otherwise (2 x 4 resumes as 1 x 8). */
    const hy_run *run = hy_runtime_run(rt);
    const char *how = "the same position would cut the data into other batches and the run "
                      "would not continue as it was. Resume with the same global batch, or "
                      "start a new run from its weights";
    if (saved_mb != now.micro_batches)
        rc = hy_fail(err, HY_ERR_INPUT, "%s was saved with %lld micro-batches a step (%lld "
                     "replica%s x schedule.micro_batches %lld), the run has %d (%d x %d): "
                     "%s (init = \"%s/model.safetensors\")", path, saved_mb, saved_rep,
                     saved_rep == 1 ? "" : "s", saved_mb / saved_rep,
                     now.micro_batches, now.replicas, run->sched.micro_batches, how, path);
    else if (saved_bs != now.micro_batch_size)
        rc = hy_fail(err, HY_ERR_INPUT, "%s was saved with schedule.micro_batch_size = %lld, "
                     "the config has %d: %s (init = \"%s/model.safetensors\")", path,
                     saved_bs, now.micro_batch_size, how, path);
    ck_data_free(&now);
    return rc;
}

int hy_checkpoint_load(hy_runtime *rt, const char *path, int *unverified, hy_error *err) {
    json_t *state = NULL;
    int rc = ck_verify(path, &state, unverified, err);
    if (rc) return rc;
    /* The step goes on for train.steps more at most: no count may pass
     * INT_MAX. A step_NNNNNN directory holds the step of its name. */
    const hy_run *run = hy_runtime_run(rt);
    long long step = 0, pos = 0;
    char base[PATH_MAX];
    int named = ck_step_of_name(ck_base(path, base, sizeof base));
    rc = ck_int_in(path, state, "step", "step", 0, (long long)INT_MAX - run->train.steps, -1,
                   &step, err);
    if (!rc && named >= 0 && step != named)
        rc = hy_fail(err, HY_ERR_INPUT, "%s/state.json: \"step\" is %lld, but the directory is "
                     "named for step %d (the file was damaged, edited or moved)", path, step,
                     named);
    if (!rc) rc = ck_int_in(path, state, "data_position", "data_position", 0, LLONG_MAX, -1, &pos,
                            err);
    if (!rc) rc = ck_check_model(path, path, state, hy_runtime_model(rt), 1,
                                 "resume with the checkpoint's model settings", err);
    if (!rc) rc = ck_check_mask(path, state, hy_runtime_model(rt), err);
    if (!rc && !*unverified)
        rc = ck_check_data(path, state, rt, err);
    char file[PATH_MAX + 64];
    ck_path(file, sizeof file, path, CK_FILES[0]);
    if (!rc) rc = hy_weights_load(rt, file, err);
    ck_path(file, sizeof file, path, CK_FILES[1]);
    if (!rc) rc = ck_read_moments(rt, file, err);
    /* The data opened first (its own errors), so that a failure of the
     * position is the position's: past the end of the shards. */
    int now_step;
    size_t now_pos;
    if (!rc) rc = hy_runtime_get_progress(rt, &now_step, &now_pos, err);
    if (!rc && (rc = hy_runtime_set_progress(rt, (int)step, (size_t)pos, err)))
        hy_error_prefix(err, "%s/state.json: \"data_position\": ", path);
    json_decref(state);
    return rc;
}

/* ---- The learning-rate schedule of a resume ------------------------------- */

/* A config value as a user writes it: a number in its shortest form that
 * reads back the same (5e-4, not 0.00050000000000000001), a string as
 * it is; into buf. */
static const char *ck_value_text(json_t *v, char *buf, size_t n) {
    if (json_is_string(v)) {
        snprintf(buf, n, "%s", json_string_value(v));
    } else if (json_is_integer(v)) {
        snprintf(buf, n, "%lld", (long long)json_integer_value(v));
    } else if (json_is_real(v)) {
        double x = json_real_value(v);
        for (int digits = 1; digits <= 17; digits++) {
            snprintf(buf, n, "%.*g", digits, x);
            if (strtod(buf, NULL) == x) break;
        }
    } else {
        snprintf(buf, n, "?");
    }
    return buf;
}

/* One key of config.train, saved and now: appends "train.KEY a -> b" to
 * diff when they differ (both as their JSON text). A key the checkpoint
 * does not record is taken as `dflt` (NULL: as now). */
static void ck_diff_key(json_t *saved, json_t *now, const char *key, json_t *dflt, char *diff,
                        size_t cap) {
    json_t *a = json_object_get(saved, key), *b = json_object_get(now, key);
    if (!a) a = dflt ? dflt : b;
    if (!b || json_equal(a, b)) return;
    char ta[64], tb[64];
    size_t used = strlen(diff);
    if (used + 1 < cap)
        snprintf(diff + used, cap - used, "%strain.%s %s -> %s", used ? ", " : "", key,
                 ck_value_text(a, ta, sizeof ta), ck_value_text(b, tb, sizeof tb));
}

/* The schedule config.train `was` records into *saved (which holds the
 * run's values for what it does not record), each bounded as config.c
 * bounds it: a format-1 state.json may hold anything. */
static int ck_saved_schedule(const char *path, json_t *was, hy_run_train *saved, hy_error *err) {
    json_t *sched = json_object_get(was, "lr_schedule");
    saved->lr_schedule = HY_LR_COSINE;   /* before train.lr_schedule, the only one */
    if (sched) {
        int k = HY_LR_COUNT;
        for (int i = 0; json_is_string(sched) && i < HY_LR_COUNT; i++)
            if (strcmp(json_string_value(sched), hy_lr_schedule_name((hy_lr_schedule)i)) == 0)
                k = i;
        if (k == HY_LR_COUNT)
            return hy_fail(err, HY_ERR_INPUT, "%s/state.json: config.train.lr_schedule is not "
                           "one of this hanayo's schedules", path);
        saved->lr_schedule = (hy_lr_schedule)k;
    }
    static const char *const reals[] = { "lr", "min_lr", "decay_fraction" };
    double *real_of[] = { &saved->lr, &saved->min_lr, &saved->decay_fraction };
    for (int i = 0; i < 3; i++) {
        json_t *v = json_object_get(was, reals[i]);
        if (!v) continue;
        if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < 0 ||
            json_number_value(v) > 1e3)
            return hy_fail(err, HY_ERR_INPUT, "%s/state.json: config.train.%s is not a number "
                           "in [0, 1000] (the file was damaged or edited)", path, reals[i]);
        *real_of[i] = json_number_value(v);
    }
    long long steps = saved->steps, warmup = saved->warmup_steps;
    int rc = ck_int_in(path, was, "steps", "config.train.steps", 1, INT_MAX, steps, &steps, err);
    if (!rc) rc = ck_int_in(path, was, "warmup_steps", "config.train.warmup_steps", 0, INT_MAX,
                            warmup, &warmup, err);
    saved->steps = (int)steps;
    saved->warmup_steps = (int)warmup;
    return rc;
}

int hy_checkpoint_schedule(const char *path, const hy_run *run, hy_run_train *saved, char *diff,
                           hy_error *err) {
    *saved = run->train;
    diff[0] = '\0';
    json_t *state = NULL;
    int format = 0, rc = ck_state_load(path, &state, &format, err);
    if (rc) return rc;
    json_error_t je;
    json_t *now_cfg = json_loads(run->config_json, 0, &je);
    json_t *was = json_object_get(json_object_get(state, "config"), "train");
    json_t *now = json_object_get(now_cfg, "train");
    json_t *cosine = json_string(hy_lr_schedule_name(HY_LR_COSINE));
    if (!json_is_object(now) || !cosine)
        rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory reading the run's resolved config");
    /* A checkpoint that records no training settings (another tool's)
     * has no schedule to hold the run to: nothing is compared. */
    if (!rc && json_is_object(was)) rc = ck_saved_schedule(path, was, saved, err);
    if (!rc && json_is_object(was)) {
        hy_lr_schedule k = run->train.lr_schedule;
        ck_diff_key(was, now, "lr_schedule", cosine, diff, PATH_MAX);
        ck_diff_key(was, now, "lr", NULL, diff, PATH_MAX);
        if (k != HY_LR_CONSTANT) ck_diff_key(was, now, "min_lr", NULL, diff, PATH_MAX);
        ck_diff_key(was, now, "warmup_steps", NULL, diff, PATH_MAX);
        if (k == HY_LR_WSD && saved->lr_schedule == HY_LR_WSD)
            ck_diff_key(was, now, "decay_fraction", NULL, diff, PATH_MAX);
        if (k != HY_LR_CONSTANT) ck_diff_key(was, now, "steps", NULL, diff, PATH_MAX);
    }
    json_decref(cosine);
    json_decref(now_cfg);
    json_decref(state);
    return rc;
}

/* ---- One writer, and retention ------------------------------------------ */

/* What a writer killed in a save or a removal left in dir: its hidden
 * temporaries (".step_NNNNNN.tmp.XXXXXX", atomicfile.h, and their ".old"
 * while a replace was in flight). Only the lock's holder calls this, so no
 * one is writing them. Best effort: what cannot go stays hidden. */
static int ck_remove_leftovers(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0, cap = 0;
    char **names = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, ".step_", 6) != 0 || !strstr(e->d_name, ".tmp.")) continue;
        if (n == cap) {
            char **grown = realloc(names, (size_t)(cap = cap ? 2 * cap : 8) * sizeof *names);
            if (!grown) break;
            names = grown;
        }
        if (!(names[n] = strdup(e->d_name))) break;
        n++;
    }
    closedir(d);
    int removed = 0;
    for (int i = 0; i < n; i++) {
        char path[PATH_MAX + 300];
        hy_error ignored;
        ck_path(path, sizeof path, dir, names[i]);
        if (ck_is_dir(path) ? hy_atomic_dir_remove(path, &ignored) == HY_OK : unlink(path) == 0)
            removed++;
        free(names[i]);
    }
    free(names);
    return removed;
}

/* Opens and locks dir/.lock into *fd. The file we locked must still be the
 * one under the name: a holder ending removes the name before it lets go,
 * so a lock taken on a file just unlinked would guard nothing (another run
 * could create and lock a new one); then we take the new one. */
static int ck_take_lock(const char *dir, const char *file, int *fd, hy_error *err) {
    char text[32];
    for (int tries = 0; tries < 16; tries++) {
        /* Never through a symbolic link (its target would be truncated and
         * get our pid), never anything but a regular file. */
        *fd = open(file, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
        if (*fd < 0 && errno == ELOOP)
            return hy_fail(err, HY_ERR_INPUT, "checkpoint.dir %s: %s is a symbolic link; the "
                           "lock is never taken through one (its target would get this run's "
                           "pid): remove it", dir, file);
        if (*fd < 0)
            return hy_fail(err, hy_errno_status(errno, HY_ERR_INPUT), "checkpoint.dir %s: "
                           "cannot open %s: %s", dir, file, strerror(errno));
        struct stat held, named;
        int bad = fstat(*fd, &held) != 0 ? errno : 0;
        if (bad || !S_ISREG(held.st_mode)) {
            close(*fd);
            *fd = -1;
            if (bad)
                return hy_fail(err, HY_ERR_RUNTIME, "checkpoint.dir %s: cannot stat %s: %s", dir,
                               file, strerror(bad));
            return hy_fail(err, HY_ERR_INPUT, "checkpoint.dir %s: %s is %s, not a regular file; "
                           "remove it", dir, file, hy_infile_kind(held.st_mode));
        }
        if (flock(*fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            ssize_t k = pread(*fd, text, sizeof text - 1, 0);
            text[k > 0 ? k : 0] = '\0';
            text[strcspn(text, "\n")] = '\0';
            close(*fd);
            *fd = -1;
            if (e == EWOULDBLOCK)
                return hy_fail(err, HY_ERR_INPUT, "checkpoint.dir %s is in use by another run "
                               "(pid %s holds %s): two runs would interleave their "
                               "checkpoints; give this run its own checkpoint.dir, or wait "
                               "for that one to end", dir, *text ? text : "?", file);
            return hy_fail(err, HY_ERR_RUNTIME, "checkpoint.dir %s: cannot lock %s: %s", dir,
                           file, strerror(e));
        }
        if (lstat(file, &named) == 0 && held.st_ino == named.st_ino &&
            held.st_dev == named.st_dev)
            return HY_OK;
        close(*fd);
        *fd = -1;
    }
    return hy_fail(err, HY_ERR_RUNTIME, "checkpoint.dir %s: %s keeps being replaced while it "
                   "is locked", dir, file);
}

/* Removes the directories of dir that ck_mkdirs made (made: the length
 * of the shortest; 0: none), deepest first, while they are empty (rmdir
 * refuses any other). */
static void ck_rmdirs(const char *dir, size_t made) {
    char buf[PATH_MAX];
    if (!made || snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) return;
    for (size_t len = strlen(buf); len >= made;) {
        buf[len] = '\0';
        if (rmdir(buf) != 0) break;
        while (len > 0 && buf[len - 1] != '/') len--;
        while (len > 0 && buf[len - 1] == '/') len--;
    }
}

int hy_checkpoint_lock_dir(const char *dir, hy_checkpoint_lock *lk, hy_error *err) {
    *lk = (hy_checkpoint_lock){ .fd = -1 };
    size_t made = 0;
    char file[PATH_MAX + 64], text[32];
    ck_path(file, sizeof file, dir, ".lock");
    int fd = -1, rc = ck_mkdirs(dir, &made, err);
    if (!rc) rc = ck_take_lock(dir, file, &fd, err);
    int n = snprintf(text, sizeof text, "%ld\n", (long)getpid());
    errno = 0;
    if (!rc && (ftruncate(fd, 0) != 0 || pwrite(fd, text, (size_t)n, 0) != n)) {
        /* A full disk (ENOSPC) has room for the name, not the pid: the
         * file goes again, while it is still held (see ck_take_lock). */
        int e = errno ? errno : EIO;
        unlink(file);
        close(fd);
        rc = hy_fail(err, hy_errno_status(e, HY_ERR_RUNTIME), "checkpoint.dir %s: cannot write "
                     "%s: %s", dir, file, strerror(e));
    }
    /* Refused or failed: nothing of this run stays, the directories it
     * made included (another run's lock is another's, never touched). */
    if (rc) {
        ck_rmdirs(dir, made);
        return rc;
    }
    lk->fd = fd;
    lk->made = made;
    snprintf(lk->dir, sizeof lk->dir, "%s", dir);
    lk->leftovers = ck_remove_leftovers(dir);
    return HY_OK;
}

void hy_checkpoint_unlock(hy_checkpoint_lock *lk) {
    if (lk->fd < 0) return;
    /* The name goes while we still hold it (see ck_take_lock). */
    char file[PATH_MAX + 64];
    ck_path(file, sizeof file, lk->dir, ".lock");
    unlink(file);
    close(lk->fd);
    lk->fd = -1;
    ck_rmdirs(lk->dir, lk->made);
    lk->made = 0;
}

int hy_checkpoint_prune(const char *dir, int keep, int saved_step, int *removed, hy_error *err) {
    *removed = 0;
    if (keep <= 0) return HY_OK;
    int *steps = NULL, n = 0, rc = ck_scan(dir, &steps, &n, err);
    char path[PATH_MAX + 32], mark[PATH_MAX + 64];
    for (int i = n - 1 - keep; i >= 0 && !rc; i--) {
        ck_step_path(path, sizeof path, dir, steps[i]);
        ck_path(mark, sizeof mark, path, "keep");
        if (steps[i] == saved_step || ck_exists(mark)) continue;
        rc = hy_atomic_dir_remove(path, err);
        if (!rc) (*removed)++;
    }
    free(steps);
    return rc;
}

/* ---- Finding checkpoints ----------------------------------------------- */

/* What `list` shows of checkpoint `path`: what its state.json says (read
 * as it is, unchecked) and the size of its files. */
static void ck_info(const char *path, int step, hy_checkpoint_info *in) {
    memset(in, 0, sizeof *in);
    snprintf(in->path, sizeof in->path, "%s", path);
    in->step = step;
    in->loss = NAN;
    char file[PATH_MAX + 300];
    ck_path(file, sizeof file, path, "state.json");
    json_error_t je;
    json_t *o = hy_infile_json(file, 0, &je);
    if (o) {
        json_t *f = json_object_get(o, "format"), *s = json_object_get(o, "step");
        json_t *l = json_object_get(o, "loss");
        const char *t = json_string_value(json_object_get(o, "time"));
        /* Shown as they are, but only as what an int holds (the load
         * refuses anything out of bounds, naming it). */
        in->format = json_is_integer(f) && json_integer_value(f) >= 0 &&
                     json_integer_value(f) <= INT_MAX ? (int)json_integer_value(f) : 0;
        if (json_is_integer(s) && json_integer_value(s) >= 0 && json_integer_value(s) <= INT_MAX)
            in->step = (int)json_integer_value(s);
        if (json_is_number(l)) in->loss = json_number_value(l);
        if (t) snprintf(in->time, sizeof in->time, "%s", t);
        json_decref(o);
    }
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        struct stat sb;
        ck_path(file, sizeof file, path, e->d_name);
        if (stat(file, &sb) == 0 && S_ISREG(sb.st_mode)) in->bytes += (uint64_t)sb.st_size;
    }
    if (d) closedir(d);
}

int hy_checkpoint_find(const char *dir, hy_checkpoint_info **out, int *n, hy_error *err) {
    *out = NULL;
    *n = 0;
    char state[PATH_MAX + 64], base[PATH_MAX];
    ck_path(state, sizeof state, dir, "state.json");
    if (ck_exists(state)) {
        if (!(*out = malloc(sizeof **out))) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
        ck_info(dir, ck_step_of_name(ck_base(dir, base, sizeof base)), *out);
        *n = 1;
        return HY_OK;
    }
    int *steps = NULL, k = 0, rc = ck_scan(dir, &steps, &k, err);
    if (!rc && k > 0 && !(*out = malloc((size_t)k * sizeof **out)))
        rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    for (int i = 0; i < k && !rc; i++) {
        char path[PATH_MAX + 32];
        ck_step_path(path, sizeof path, dir, steps[i]);
        ck_info(path, steps[i], &(*out)[i]);
    }
    if (!rc) *n = k;
    free(steps);
    return rc;
}

static int ck_not_hidden(const struct dirent *e) { return e->d_name[0] != '.'; }

int hy_checkpoint_find_runs(const char *dir, hy_checkpoint_run **out, int *n, hy_error *err) {
    *out = NULL;
    *n = 0;
    struct dirent **names = NULL;
    int k = scandir(dir, &names, ck_not_hidden, alphasort), rc = HY_OK;
    if (k < 0)
        return hy_fail(err, hy_errno_status(errno, HY_ERR_INPUT), "%s: cannot list: %s", dir,
                       strerror(errno));
    if (k > 0 && !(*out = calloc((size_t)k, sizeof **out)))
        rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    /* "checkpoints/" names its runs "checkpoints/tiny-gpt", not "...//...". */
    int len = (int)strlen(dir);
    while (len > 0 && dir[len - 1] == '/') len--;   /* "/" itself: "" + "/name" */
    for (int i = 0; i < k && !rc; i++) {
        hy_checkpoint_run *r = &(*out)[*n];
        char state[PATH_MAX + 64];
        if (snprintf(r->path, sizeof r->path, "%.*s/%s", len, dir, names[i]->d_name) >=
                (int)sizeof r->path || !ck_is_dir(r->path))
            continue;   /* a file, or a name no checkpoint path can have */
        /* A checkpoint itself is no run: a run is a checkpoint.dir. */
        ck_path(state, sizeof state, r->path, "state.json");
        if (ck_exists(state)) continue;
        rc = hy_checkpoint_find(r->path, &r->found, &r->n, err);
        if (!rc && r->n > 0) {
            (*n)++;
        } else {   /* none there: the next run takes the slot */
            free(r->found);
            r->found = NULL;
            r->n = 0;
        }
    }
    for (int i = 0; i < k; i++) free(names[i]);
    free(names);
    if (rc || *n == 0) {
        hy_checkpoint_runs_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return rc;
}

void hy_checkpoint_runs_free(hy_checkpoint_run *runs, int n) {
    for (int i = 0; runs && i < n; i++) free(runs[i].found);
    free(runs);
}
