/*
 * train.c — see train.h.
 */
#include "train.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "checksum.h"
#include "data.h"
#include "dp.h"
#include "memplan.h"
#include "model.h"
#include "runtime.h"
#include "weights.h"

int hy_train_fits(const hy_run *run, const hy_backend_choice *chosen, int replicas,
                  hy_error *err) {
    int P = run->sched.ranks;
    hy_memplan mp;
    memset(&mp, 0, sizeof mp);
    int *group = malloc(sizeof(int) * 2 * (size_t)P);
    double *available = malloc(sizeof(double) * (size_t)P);
    char (*names)[48] = malloc(sizeof *names * (size_t)P);
    const char **name_of = malloc(sizeof *name_of * (size_t)P);
    int n = 0, rc = group && available && names && name_of
                        ? HY_OK : hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    hy_memplan_in in = { .model = &run->model, .sched = &run->sched,
                         .micro_batch_size = run->micro_batch_size, .replicas = replicas,
                         .mem = &chosen->mem, .recompute = run->train.recompute };
    if (!rc) rc = hy_memplan_build(&mp, &in, err);
    if (!rc) rc = hy_backend_free_memory(&run->backend, chosen, group, available, group + P, &n, err);
    for (int g = 0; !rc && g < n; g++) {
        if (group[P + g] < 0) snprintf(names[g], sizeof names[g], "the host");
        else snprintf(names[g], sizeof names[g], "GPU %d", group[P + g]);
        name_of[g] = names[g];
    }
    if (!rc) rc = hy_memplan_check_pools(&mp, group, available, n, name_of, err);
    /* A way to fit that changes nothing of what is trained comes first. */
    hy_recompute fit = rc == HY_ERR_INPUT && mp.rank
                           ? hy_memplan_recompute_to_fit(&in, in.recompute + 1, group, available,
                                                         n, name_of)
                           : HY_RECOMPUTE_COUNT;
    if (fit != HY_RECOMPUTE_COUNT) {
        char was[sizeof err->msg];
        snprintf(was, sizeof was, "%s", err->msg);
        rc = hy_fail(err, HY_ERR_INPUT, "%s; it fits with train.recompute = \"%s\" (the same "
                     "training, more compute: --set train.recompute=%s)", was,
                     hy_recompute_name(fit), hy_recompute_name(fit));
    }
    hy_memplan_free(&mp);
    free(group);
    free(available);
    free(names);
    free(name_of);
    return rc;
}

int hy_train_runtime(hy_runtime **out, const hy_run *run, const hy_backend_choice *chosen,
                     struct hy_dp *dp, int *unverified, hy_error *err) {
    int unchecked = 0;
    *out = NULL;
    hy_backend_choice own;
    if (!chosen) {
        int rc = hy_backend_describe(&run->backend, &own, err);
        if (rc) return rc;
        chosen = &own;
    }
    /* The plan before any allocation: a run too large is refused, never
     * half-built or killed for memory. */
    int rc = hy_train_fits(run, chosen, hy_dp_size(dp), err);
    if (!rc) rc = hy_runtime_create_dp(out, run, chosen, dp, err);
    /* A checkpoint's weights are checked like a resume's (checkpoint.h);
     * a directory (a Llama checkpoint's) by the weights inside it. */
    if (!rc && run->init) {
        char file[PATH_MAX + 32];
        struct stat sb;
        int dir = stat(run->init, &sb) == 0 && S_ISDIR(sb.st_mode);
        snprintf(file, sizeof file, "%s%s", run->init, dir ? "/model.safetensors" : "");
        rc = hy_checkpoint_verify_file(file, &run->model, &unchecked, err);
    }
    if (unverified) *unverified = unchecked;
    if (!rc && run->init) rc = hy_weights_load(*out, run->init, err);
    if (rc) {
        hy_runtime_destroy(*out);
        *out = NULL;
    }
    return rc;
}

double hy_train_lr(const hy_run_train *t, int step) {
    double lr = t->lr, min_lr = t->min_lr;
    int warm = t->warmup_steps, total = t->steps;
    if (step <= warm) return lr * step / (warm > 0 ? warm : 1);
    if (total <= warm || t->lr_schedule == HY_LR_CONSTANT) return lr;
    /* The decay runs from `start` (lr) to the last step (min_lr): from the
     * warm-up's end, or for wsd over the last decay_fraction of the steps
     * (a real point between steps: its rate is what the line gives there),
     * never into the warm-up. */
    double start = warm;
    if (t->lr_schedule == HY_LR_WSD && total - t->decay_fraction * total > start)
        start = total - t->decay_fraction * total;
    if (step <= start) return lr;
    double progress = (step - start) / (total - start);
    if (progress > 1.0) progress = 1.0;   /* past the last step: its rate */
    if (t->lr_schedule == HY_LR_COSINE)
        return min_lr + 0.5 * (lr - min_lr) * (1.0 + cos(3.141592653589793 * progress));
    /* linear and wsd's decay: min_lr exactly at the last step. */
    return min_lr + (lr - min_lr) * (1.0 - progress);
}

int hy_train_step(hy_runtime *rt, hy_step_stats *stats, hy_error *err) {
    int last = 0;
    size_t pos = 0;
    int rc = hy_runtime_get_progress(rt, &last, &pos, err);
    return rc ? rc : hy_runtime_step(rt, hy_train_lr(&hy_runtime_run(rt)->train, last + 1), stats, err);
}

int hy_train_shard_batches(const hy_run *run, const char *path, int *batches, hy_error *err) {
    hy_shard sh;
    int rc = hy_shard_open(&sh, path, run->model.vocab, err);
    if (rc) return rc;
    size_t per = (size_t)run->micro_batch_size * run->model.seq_len;
    size_t tokens = sh.n, n = (tokens - 1) / per;
    hy_shard_close(&sh);
    if (n == 0)
        return hy_fail(err, HY_ERR_INPUT, "%s: the shard holds %zu tokens, fewer than one batch "
                       "needs: B x T + 1 = %d x %d + 1 = %zu", path, tokens,
                       run->micro_batch_size, run->model.seq_len, per + 1);
    *batches = n > 1000000 ? 1000000 : (int)n;
    return HY_OK;
}

int hy_train_data_batches(const hy_run *run, size_t *batches, hy_error *err) {
    char **paths = NULL;
    int n = 0;
    hy_dataset ds;
    int rc = hy_data_expand((const char *const *)run->data.train, run->data.n_train,
                            "data.train", &paths, &n, err);
    if (!rc) rc = hy_dataset_open(&ds, (const char *const *)paths, n, run->model.vocab, err);
    hy_data_paths_free(paths, n);
    if (rc) return rc;
    /* A trial read: too little data for one batch is said in data.h's words. */
    size_t pos = 0;
    rc = hy_dataset_read(&ds, &pos, run->micro_batch_size, run->model.seq_len, NULL, NULL, err);
    *batches = hy_dataset_batches(&ds, run->micro_batch_size, run->model.seq_len);
    hy_dataset_close(&ds);
    return rc;
}

/* The CRC-32C of every weight of rt, in the model's parameter order. */
static int train_weights_crc(hy_runtime *rt, uint32_t *crc, hy_error *err) {
    const hy_model *m = hy_runtime_model(rt);
    float *buf = malloc(hy_model_max_numel(m) * sizeof(float) + 1);
    if (!buf) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    int rc = HY_OK;
    *crc = 0;
    for (int i = 0; i < m->n_params && !rc; i++) {
        size_t n = hy_model_real_numel(m, &m->params[i]);
        rc = hy_runtime_get(rt, HY_T_PARAM, &m->params[i], buf, n, err);
        if (!rc) *crc = hy_crc32c(*crc, buf, n * sizeof(float));
    }
    free(buf);
    return rc;
}

int hy_train_replicas_agree(hy_runtime *rt, hy_dp *dp, hy_error *err) {
    if (hy_dp_size(dp) == 1) return HY_OK;
    uint32_t crc = 0;
    int same = 0, rc = train_weights_crc(rt, &crc, err);
    rc = hy_dp_agree(dp, rc, err);
    if (!rc) rc = hy_dp_same(dp, crc, &same, err);
    if (!rc && !same)
        rc = hy_dp_agree(dp, hy_fail(err, HY_ERR_RUNTIME, "the data-parallel replicas' weights "
                                     "differ (their gradient sums disagreed): the run cannot "
                                     "go on; resume from the last checkpoint"), err);
    return rc;
}

int hy_train_same_config(const hy_run *run, hy_dp *dp, hy_error *err) {
    if (hy_dp_size(dp) == 1) return HY_OK;
    uint32_t crc = hy_crc32c(0, run->config_json, strlen(run->config_json));
    int same = 0, rc = hy_dp_same(dp, crc, &same, err);
    if (!rc && !same)
        rc = hy_dp_agree(dp, hy_fail(err, HY_ERR_INPUT, "the data-parallel replicas were given "
                                     "different configs (compare `hanayo check` of each): give "
                                     "every process the same config and --set flags"), err);
    return rc;
}

