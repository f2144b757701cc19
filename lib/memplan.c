/*
 * memplan.c — see memplan.h.
 *
 * Every count below mirrors an allocation of runtime.c (rt_build,
 * rt_alloc_rank), transformer.c (hy_stage_work_sizes), mailbox.c
 * (hy_mailbox_alloc, hy_channel_open) or the backend (reserve, its own
 * workspaces), in their order; tests/test_memplan.c holds the sum against
 * what the CPU backend counted, so the two cannot drift apart unseen.
 */
#include "memplan.h"

#include <assert.h>
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mailbox.h"
#include "runtime.h"
#include "transformer.h"

static const char *const TERM_NAMES[HY_MEM_TERMS] = {
    "weights", "grads", "optimizer", "activations", "buffers"
};

const char *hy_mem_term_name(hy_mem_term t) {
    return (unsigned)t < HY_MEM_TERMS ? TERM_NAMES[t] : "?";
}

/* An allocation of `bytes` for rank r under term t: the backends take at
 * least one byte (rt_alloc, tf_alloc), and so does the plan. */
static void mem_add(hy_memplan *mp, int r, hy_mem_term t, size_t bytes) {
    assert(r >= 0 && r < mp->ranks);
    mp->rank[r].bytes[t] += (double)(bytes ? bytes : 1);
}

/* A handshake's flags (mailbox.c): two words per slot, in the memory the
 * backend puts them in. */
static void mem_flags(hy_memplan *mp, const hy_backend_memory *mem, int from, int to, int slots) {
    size_t bytes = 2 * (size_t)slots * sizeof(uint32_t);
    if (mem->flags == HY_FLAGS_PRODUCER) mem_add(mp, from, HY_MEM_BUFFERS, bytes);
    else if (mem->flags == HY_FLAGS_CONSUMER) mem_add(mp, to, HY_MEM_BUFFERS, bytes);
}

/* A channel from rank a to rank b of `bytes` (hy_channel_open). */
static void mem_channel(hy_memplan *mp, const hy_backend_memory *mem, int a, int b, size_t bytes) {
    mem_add(mp, b, HY_MEM_BUFFERS, bytes);
    mem_flags(mp, mem, a, b, 1);
}

/* Each stage's parameters, gradients, moments and stash. */
static void mem_stages(hy_memplan *mp, const hy_memplan_in *in, const hy_transformer *tf) {
    const hy_schedule *s = in->sched;
    size_t A = in->mem->act_size, f = sizeof(float);
    for (int st = 0; st < s->stages; st++) {
        int r = s->placement[st];
        size_t numel = in->model->stage_numel[st];
        mem_add(mp, r, HY_MEM_WEIGHTS, numel * f);
        mem_add(mp, r, HY_MEM_GRADS, numel * f);
        mem_add(mp, r, HY_MEM_OPTIMIZER, numel * f);
        mem_add(mp, r, HY_MEM_OPTIMIZER, numel * f);
        if (A != f) mem_add(mp, r, HY_MEM_WEIGHTS, numel * A);   /* the compute copy */
        for (int k = 0; k < mp->in_flight[st]; k++)
            mem_add(mp, r, HY_MEM_ACTIVATIONS, hy_stash_bytes(tf, st));
    }
}

/* Each rank's own buffers (runtime.c, rt_alloc_rank). */
static void mem_rank(hy_memplan *mp, const hy_memplan_in *in, const hy_transformer *tf, int r,
                     int replica_rank) {
    const hy_schedule *s = in->sched;
    const hy_model *m = in->model;
    size_t A = in->mem->act_size, f = sizeof(float);
    size_t N = (size_t)in->micro_batch_size * (size_t)m->seq_len, M = (size_t)s->micro_batches;
    int head = s->placement[s->stages - 1] == r;
    mem_add(mp, r, HY_MEM_BUFFERS, hy_boundary_bytes(tf));   /* send */
    mem_add(mp, r, HY_MEM_BUFFERS, hy_boundary_bytes(tf));   /* dres */
    size_t attn = in->mem->attention_scratch
                      ? in->mem->attention_scratch(in->micro_batch_size, m->seq_len, m->heads,
                                                   m->kv_heads, m->head_dim)
                      : 0;
    size_t sizes[HY_STAGE_WORK_BUFFERS];
    int n = hy_stage_work_sizes(tf, attn, head, hy_stage_work_layers(tf, s->placement, r), sizes);
    for (int i = 0; i < n; i++) mem_add(mp, r, HY_MEM_BUFFERS, sizes[i]);
    mem_add(mp, r, HY_MEM_BUFFERS, sizeof(double) * (size_t)s->ranks);   /* the norm's partials */
    mem_add(mp, r, HY_MEM_BUFFERS, 2 * f);                              /* the clip factor */
    mem_add(mp, r, HY_MEM_BUFFERS, sizeof(hy_adamw_hparams));
    /* The profile stamps, one per gradient sum with replicas: a sum per
     * stage of the rank, and one for the tied embedding's replica. */
    int sums = 0;
    for (int st = 0; in->replicas > 1 && st < s->stages; st++) sums += s->placement[st] == r;
    if (in->replicas > 1 && r == replica_rank) sums++;
    mem_add(mp, r, HY_MEM_BUFFERS, hy_stamp_count(s->n_actions[r], sums) * sizeof(uint64_t));
    if (s->placement[0] == r) mem_add(mp, r, HY_MEM_BUFFERS, M * N * sizeof(int));   /* tokens */
    if (head) mem_add(mp, r, HY_MEM_BUFFERS, M * N * sizeof(int));                  /* targets */
    if (r == replica_rank) {
        size_t wte = hy_model_param(m, HY_P_WTE, 0)->numel;
        mem_add(mp, r, HY_MEM_WEIGHTS, wte * f);
        mem_add(mp, r, HY_MEM_GRADS, wte * f);
        mem_add(mp, r, HY_MEM_OPTIMIZER, wte * f);
        mem_add(mp, r, HY_MEM_OPTIMIZER, wte * f);
        if (A != f) mem_add(mp, r, HY_MEM_WEIGHTS, wte * A);
    }
}

/* The mailboxes on every stage boundary, the ranks' norm channels and
 * the tied embedding's two channels (runtime.c, rt_build). */
static int mem_links(hy_memplan *mp, const hy_memplan_in *in, const hy_transformer *tf,
                     int replica_rank, hy_error *err) {
    const hy_schedule *s = in->sched;
    hy_mailbox mb;
    memset(&mb, 0, sizeof mb);
    int rc = hy_mailbox_plan(&mb, s, err);
    for (int i = 0; !rc && i < mb.n_edges; i++) {
        const hy_edge *e = &mb.edges[i];
        for (int k = 0; k < e->slots; k++) mem_add(mp, e->to_rank, HY_MEM_BUFFERS, hy_boundary_bytes(tf));
        if (!e->local) mem_flags(mp, in->mem, e->from_rank, e->to_rank, e->slots);
    }
    hy_mailbox_free(&mb);
    for (int a = 0; !rc && a < s->ranks; a++)
        for (int b = 0; b < s->ranks; b++)
            if (a != b) mem_channel(mp, in->mem, a, b, sizeof(double));
    if (!rc && replica_rank >= 0) {
        size_t n = hy_model_param(in->model, HY_P_WTE, 0)->numel * sizeof(float);
        mem_channel(mp, in->mem, 0, replica_rank, n);
        mem_channel(mp, in->mem, replica_rank, 0, n);
    }
    return rc;
}

int hy_memplan_build(hy_memplan *mp, const hy_memplan_in *in, hy_error *err) {
    memset(mp, 0, sizeof *mp);
    const hy_schedule *s = in->sched;
    const hy_model *m = in->model;
    assert(m->stages == s->stages);
    mp->ranks = s->ranks;
    mp->stages = s->stages;
    mp->recompute = in->recompute;
    mp->rank = calloc((size_t)s->ranks, sizeof *mp->rank);
    mp->in_flight = calloc((size_t)s->stages, sizeof *mp->in_flight);
    if (!mp->rank || !mp->in_flight) {
        hy_memplan_free(mp);
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory planning memory");
    }
    hy_schedule_in_flight(s, mp->in_flight);
    /* The math's view of the run, as the runtime makes it: only the sizes
     * are read here. */
    hy_transformer tf = { .model = m, .ops = NULL, .act_size = in->mem->act_size,
                          .B = in->micro_batch_size, .T = m->seq_len,
                          .global_micro_batches = s->micro_batches * in->replicas,
                          .split = s->split, .recompute = in->recompute };
    int last = s->placement[s->stages - 1];
    int replica_rank = m->tie_embeddings && last != s->placement[0] ? last : -1;
    mem_stages(mp, in, &tf);
    for (int r = 0; r < s->ranks; r++) mem_rank(mp, in, &tf, r, replica_rank);
    int rc = mem_links(mp, in, &tf, replica_rank, err);
    for (int r = 0; !rc && r < s->ranks; r++) {
        size_t N = (size_t)in->micro_batch_size * (size_t)m->seq_len;
        if (in->mem->scratch)   /* what reserve sizes before any rank runs */
            mp->rank[r].bytes[HY_MEM_BUFFERS] +=
                (double)in->mem->scratch(N, hy_model_widest(m));
        mp->rank[r].bytes[HY_MEM_BUFFERS] += in->mem->rank_overhead;
        for (int t = 0; t < HY_MEM_TERMS; t++) mp->rank[r].total += mp->rank[r].bytes[t];
        if (mp->rank[r].total > mp->rank[mp->peak_rank].total) mp->peak_rank = r;
    }
    if (rc) hy_memplan_free(mp);
    return rc;
}

void hy_memplan_free(hy_memplan *mp) {
    free(mp->rank);
    free(mp->in_flight);
    memset(mp, 0, sizeof *mp);
}

hy_mem_term hy_memplan_largest(const hy_memplan *mp, int r) {
    hy_mem_term best = HY_MEM_WEIGHTS;
    for (int t = 1; t < HY_MEM_TERMS; t++)
        if (mp->rank[r].bytes[t] > mp->rank[r].bytes[best]) best = (hy_mem_term)t;
    return best;
}

/* What would make rank r fit, by its largest term. */
static const char *mem_advice(hy_mem_term t) {
    switch (t) {
    case HY_MEM_ACTIVATIONS:
        return "activation recomputation (train.recompute), a smaller "
               "schedule.micro_batch_size, a schedule that keeps fewer micro-batches in flight "
               "(1f1b rather than gpipe), or more ranks";
    case HY_MEM_BUFFERS:
        return "a smaller schedule.micro_batch_size or model.seq_len (the head's logits and the "
               "working buffers grow with them), or more ranks";
    default:
        return "more ranks (schedule.ranks), so that each holds fewer layers";
    }
}

int hy_memplan_check(const hy_memplan *mp, double available, const char *what, hy_error *err) {
    int worst = -1;
    for (int r = 0; r < mp->ranks; r++)
        if (mp->rank[r].total > available &&
            (worst < 0 || mp->rank[r].total - available > mp->rank[worst].total - available))
            worst = r;
    if (worst < 0) return HY_OK;
    hy_mem_term t = hy_memplan_largest(mp, worst);
    const hy_mem_rank *k = &mp->rank[worst];
    return hy_fail(err, HY_ERR_INPUT, "the run does not fit: rank %d needs %.2f GiB, %s has "
                   "%.2f GiB (the most is %s: %.2f GiB); try %s", worst, k->total / 1073741824.0,
                   what, available / 1073741824.0, hy_mem_term_name(t),
                   k->bytes[t] / 1073741824.0, mem_advice(t));
}

int hy_memplan_check_pools(const hy_memplan *mp, const int *group, const double *available,
                           int n_groups, const char *const *names, hy_error *err) {
    int worst = -1;
    double worst_over = 0, need_of_worst = 0;
    for (int g = 0; g < n_groups; g++) {
        double need = 0;
        for (int r = 0; r < mp->ranks; r++)
            if (group[r] == g) need += mp->rank[r].total;
        if (need > available[g] && (worst < 0 || need - available[g] > worst_over)) {
            worst = g;
            worst_over = need - available[g];
            need_of_worst = need;
        }
    }
    if (worst < 0) return HY_OK;
    int hungriest = -1, n = 0;
    char ranks[256] = "";
    for (int r = 0; r < mp->ranks; r++) {
        if (group[r] != worst) continue;
        if (hungriest < 0 || mp->rank[r].total > mp->rank[hungriest].total) hungriest = r;
        size_t used = strlen(ranks);
        if (used + 16 < sizeof ranks)
            snprintf(ranks + used, sizeof ranks - used, "%s%d", n++ ? ", " : "", r);
    }
    hy_mem_term t = hy_memplan_largest(mp, hungriest);
    return hy_fail(err, HY_ERR_INPUT, "the run does not fit: %s (rank%s %s) would need %.2f GiB "
                   "and has %.2f GiB free; the most is rank %d's %s, %.2f GiB of its %.2f GiB "
                   "(hanayo plan shows every term); try %s", names[worst], n == 1 ? "" : "s",
                   ranks, need_of_worst / 1073741824.0, available[worst] / 1073741824.0, hungriest,
                   hy_mem_term_name(t), mp->rank[hungriest].bytes[t] / 1073741824.0,
                   mp->rank[hungriest].total / 1073741824.0, mem_advice(t));
}

char *hy_memplan_json(const hy_memplan *mp, double available, hy_recompute fits_with) {
    int known = available >= 0 && isfinite(available);
    json_t *o = json_object(), *ranks = json_array();
    /* Every json_* result is OR-ed into one flag: ownership passes even on
     * failure, and one failure (out of memory) fails it all. */
    int bad = !o || !ranks;
    bad |= json_object_set_new(o, "available", known ? json_real(available) : json_null());
    bad |= json_object_set_new(o, "fits", known ? json_boolean(mp->rank[mp->peak_rank].total <= available)
                                                : json_null());
    bad |= json_object_set_new(o, "recompute", json_string(hy_recompute_name(mp->recompute)));
    bad |= json_object_set_new(o, "fits_with_recompute",
                               fits_with < HY_RECOMPUTE_COUNT
                                   ? json_string(hy_recompute_name(fits_with)) : json_null());
    bad |= json_object_set_new(o, "peak_rank", json_integer(mp->peak_rank));
    for (int r = 0; r < mp->ranks && !bad; r++) {
        json_t *k = json_object();
        bad |= !k;
        bad |= json_object_set_new(k, "rank", json_integer(r));
        for (int t = 0; t < HY_MEM_TERMS; t++)
            bad |= json_object_set_new(k, TERM_NAMES[t], json_real(mp->rank[r].bytes[t]));
        bad |= json_object_set_new(k, "total", json_real(mp->rank[r].total));
        bad |= json_array_append_new(ranks, k);
    }
    bad |= json_object_set_new(o, "ranks", ranks);
    char *s = bad ? NULL : json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(o);
    return s;
}

hy_recompute hy_memplan_recompute_to_fit(const hy_memplan_in *in, hy_recompute from,
                                         const int *group, const double *available, int n_groups,
                                         const char *const *names) {
    for (int r = from; r < HY_RECOMPUTE_COUNT; r++) {
        hy_memplan_in with = *in;
        with.recompute = (hy_recompute)r;
        hy_memplan mp;
        hy_error ignored;
        if (hy_memplan_build(&mp, &with, &ignored) != HY_OK) continue;
        int fits = group ? hy_memplan_check_pools(&mp, group, available, n_groups, names,
                                                  &ignored) == HY_OK
                         : hy_memplan_check(&mp, available[0], "", &ignored) == HY_OK;
        hy_memplan_free(&mp);
        if (fits) return (hy_recompute)r;
    }
    return HY_RECOMPUTE_COUNT;
}
