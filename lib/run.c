/*
 * run.c — see run.h.
 */
#include "run.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "order.h"

/* A copy of string s (NULL stays NULL); 0 when out of memory. */
static int run_strdup(char **dst, const char *s) {
    *dst = s ? strdup(s) : NULL;
    return !s || *dst;
}

/* A copy of n strings; 0 when out of memory (then *dst holds what was
 * copied, NULLs after it, for hy_run_free). */
static int run_strdup_list(char ***dst, int *n_dst, char *const *src, int n) {
    *dst = calloc((size_t)n, sizeof **dst);
    if (!*dst) return 0;
    *n_dst = n;
    for (int i = 0; i < n; i++)
        if (!run_strdup(&(*dst)[i], src[i])) return 0;
    return 1;
}

int hy_run_resolve(hy_run *r, const hy_config *c, hy_error *err) {
    memset(r, 0, sizeof *r);
    r->sched_params = (hy_sched_params){ .kind = c->schedule.kind, .ranks = c->schedule.ranks,
                                         .micro_batches = c->schedule.micro_batches,
                                         .waves = c->schedule.waves,
                                         .chunks = c->schedule.chunks,
                                         .split_backward = c->schedule.split_backward,
                                         .max_activations = c->schedule.max_activations };
    r->comm_cost = c->schedule.comm_cost;
    r->micro_batch_size = c->schedule.micro_batch_size;
    r->train = (hy_run_train){ .steps = c->train.steps, .lr = c->train.lr,
                               .min_lr = c->train.min_lr, .warmup_steps = c->train.warmup_steps,
                               .lr_schedule = c->train.lr_schedule,
                               .decay_fraction = c->train.decay_fraction,
                               .weight_decay = c->train.weight_decay, .beta1 = c->train.beta1,
                               .beta2 = c->train.beta2, .eps = c->train.eps,
                               .grad_clip = c->train.grad_clip, .seed = c->train.seed,
                               .log_every = c->train.log_every,
                               .on_nonfinite = c->train.on_nonfinite,
                               .eval_every = c->train.eval_every,
                               .eval_batches = c->train.eval_batches,
                               .recompute = c->train.recompute };
    r->checkpoint.every = c->checkpoint.every;
    r->checkpoint.keep = c->checkpoint.keep;
    r->graph = c->graph;
    r->watchdog_s = c->watchdog_s;
    int *devices = NULL;
    if (c->n_devices > 0 && !(devices = malloc(sizeof(int) * (size_t)c->n_devices)))
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory resolving the run");
    if (devices) memcpy(devices, c->devices, sizeof(int) * (size_t)c->n_devices);
    r->backend = (hy_backend_request){ .kind = c->backend, .ranks = c->schedule.ranks,
                                       .devices = devices, .n_devices = c->n_devices,
                                       .watchdog_s = c->watchdog_s };
    r->config_json = hy_config_to_json(c);
    if (!r->config_json || !run_strdup(&r->config_path, c->path) ||
        !run_strdup_list(&r->data.train, &r->data.n_train, c->data.train, c->data.n_train) ||
        !run_strdup(&r->data.val, c->data.val) ||
        !run_strdup(&r->init, c->init) || !run_strdup(&r->checkpoint.dir, c->checkpoint.dir)) {
        hy_run_free(r);
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory resolving the run");
    }
    int rc;
    if (c->use == HY_CONFIG_FOR_ONE_RANK) {
        /* The whole model on one rank: no schedule to order, one stage
         * (the config's split, left unchecked, is not read). */
        r->backend.ranks = 1;
        rc = hy_model_build(&r->model, &c->model, NULL, 1, 1, err);
        if (rc) hy_run_free(r);
        return rc;
    }
    hy_costs costs = hy_costs_uniform_for(r->sched_params.split_backward, r->comm_cost);
    rc = hy_order_schedule(&r->sched, &r->sched_params, &costs, err);
    if (!rc) {
        /* The config loader checked that a given split has one entry per
         * stage and sums to the layers. */
        assert(c->schedule.n_layers_per_stage == 0 ||
               c->schedule.n_layers_per_stage == r->sched.stages);
        rc = hy_model_build(&r->model, &c->model,
                            c->schedule.n_layers_per_stage ? c->schedule.layers_per_stage : NULL,
                            r->sched.stages, 1, err);
    }
    if (rc) hy_run_free(r);
    return rc;
}

void hy_run_free(hy_run *r) {
    free(r->config_path);
    free(r->config_json);
    hy_model_free(&r->model);
    hy_schedule_free(&r->sched);
    for (int i = 0; r->data.train && i < r->data.n_train; i++) free(r->data.train[i]);
    free(r->data.train);
    free(r->data.val);
    free(r->init);
    free(r->checkpoint.dir);
    free((int *)r->backend.devices);
    memset(r, 0, sizeof *r);
}

double hy_run_tokens_per_step(int micro_batches, int micro_batch_size, int seq_len,
                              int replicas) {
    return (double)replicas * micro_batches * micro_batch_size * seq_len;
}
