/*
 * runtime.c — see runtime.h.
 *
 * Memory, per rank: for each stage it holds, the parameter, gradient and
 * AdamW blocks (model.h's stage blocks) and an activation stash of K_s
 * slots, K_s being the most micro-batches the schedule keeps in flight on
 * that stage (a slot's layout is transformer.h's); for each stage boundary
 * the mailbox slots (the consumer's stash of its stage input, mailbox.h);
 * and per rank one set of scratch buffers for the backward pass
 * (transformer.h's hy_stage_work, with what train.recompute rebuilds:
 * selective's LayerNorm and GELU outputs, full's working slot), since a
 * rank runs one action at a time.
 * Everything is allocated before the first step; a step allocates nothing.
 *
 * An action here is the plumbing around the math: profile stamps, the
 * slow-stage hook, receiving the stage input, sending the output, giving
 * mailbox slots back; the math of the stage itself is transformer.c's.
 */
#include "runtime.h"

#include <assert.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "data.h"
#include "dp.h"
#include "mailbox.h"
#include "model.h"
#include "order.h"
#include "schedule.h"
#include "transformer.h"

typedef struct {
    int rank;
    float *param, *grad, *m, *v;   /* [stage_numel] each, in the rank's memory */
    void *wc;                      /* the compute copy of param (== param when act_size is 4) */
    int slots;                     /* K_s */
    void **stash;                  /* [K_s] */
    int *stash_of;                 /* [M]: the stash slot of micro-batch m */
} rt_stage;

typedef struct {
    hy_runtime *rt;
    int rank;
    pthread_t thread;
    int started;
    hy_stream *stream;
    hy_graph *graph;
    int iterations;                /* run so far */
    /* d(stage output) in, d(stage input) out; and the output sent to another
     * rank, in the compute type; the math's own scratch */
    void *send, *dres;
    hy_stage_work work;
    int *tokens, *targets;         /* [M * N], for ranks holding stage 0 / S-1 */
    float *clip_factor, *norm;
    double *partials;              /* [P] */
    hy_adamw_hparams *hp;
    /* the replica of wte on the last stage's rank, when it is not rank 0 */
    float *wte, *dwte, *wte_m, *wte_v;
    void *wte_c;                   /* its compute copy */
    /* data parallelism: the sums of this rank's gradients over the
     * replicas (NULL: one replica), and per action the stage whose
     * gradients it completes (-1: none), where that stage's sum starts */
    hy_reducer *reducer;
    int *reduce_after;
    /* profiling (hy_runtime_profile): stamps[rt_stamp_count] */
    uint64_t *stamps;
    int status;
    hy_error err;
} rt_rank;

struct hy_runtime {
    const hy_run *run;             /* what it runs (borrowed): schedule, model, settings */
    const hy_schedule *sched;      /* &run->sched */
    const hy_model *model;         /* &run->model */
    hy_mailbox mb;
    hy_backend *be;
    hy_transformer tf;             /* the math: shapes, ops, each stage's weights and gradients */
    size_t A;                      /* bytes per activation element (backend's act_size) */
    hy_dataset train;              /* data.train, opened at the first step: eval needs none */
    int train_open;
    rt_stage *stages;              /* [S] */
    rt_rank *ranks;                /* [P] */
    hy_channel *norm_ch;           /* [P * P]: a -> b at a * P + b */
    hy_channel wte_ch[2];          /* rank 0 -> last rank, last rank -> rank 0 */
    int replica_rank;              /* rank holding the wte replica, or -1 */
    int B, T, N, M, V, S, P;
    hy_dp *dp;                     /* the replicas in other processes, or NULL */
    int replicas, replica;         /* their number, this one's index */
    int *batch_in, *batch_tg;      /* host staging for one micro-batch [N] */
    /* test and profiling hooks, fixed before the first step */
    int profile;                   /* timestamps around every action */
    int slow_stage;                /* stage whose every action sleeps slow_ns first, or -1 */
    uint64_t slow_ns;
    /* the step handshake between the host and the rank threads */
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int generation, done, quit;
    hy_record_gate recorded;       /* ranks past capture_end */
    int eval_count;                /* > 0: the next round is an evaluation of that many batches */
    int step;
    double last_loss;              /* of the last step, NaN before the first */
    long scored;                   /* positions with a target that rt_load_batches uploaded */
    double eval_accuracy;          /* of the last hy_runtime_eval, NaN before the first */
};

/* The tied embedding's parameter: in stage 0's block, and replicated on
 * the last stage's rank when that is another rank (replica_rank). */
static const hy_param *rt_wte(const hy_runtime *rt) { return hy_model_param(rt->model, HY_P_WTE, 0); }


/* The gradient sums over the replicas rank r starts, in the order its
 * stamps keep them: its stages ascending, then the tied embedding's
 * replica (bucket S) on the rank holding it. Writes them to buckets
 * (room for S + 1) when not NULL; 0 with one replica. */
static int rt_rank_buckets(const hy_runtime *rt, int r, int *buckets) {
    if (rt->replicas == 1) return 0;
    int n = 0;
    for (int s = 0; s < rt->S; s++)
        if (rt->sched->placement[s] == r) {
            if (buckets) buckets[n] = s;
            n++;
        }
    if (r == rt->replica_rank) {
        if (buckets) buckets[n] = rt->S;
        n++;
    }
    return n;
}

/* Two more stamps per sum: just before it started, after it was waited
 * for (hy_runtime_profile). */
static size_t rt_stamp_count(const hy_runtime *rt, int r) {
    return hy_stamp_count(rt->sched->n_actions[r], rt_rank_buckets(rt, r, NULL));
}

/* The index of bucket b among rank r's (rt_rank_buckets). */
static int rt_bucket_index(const hy_runtime *rt, int r, int b) {
    int j = 0;
    for (int s = 0; s < b && s < rt->S; s++) j += rt->sched->placement[s] == r;
    return j;
}

/* ------------------------------------------------------------------------ */
/* One iteration of one rank, enqueued on its stream */

typedef struct {
    hy_runtime *rt;
    rt_rank *rk;
    hy_stream *st;
    const hy_backend_ops *o;
    hy_error *err;
} rt_ctx;

static void *rt_stage_input(rt_ctx *x, int s, int m, void *slot) {
    return s == 0 ? hy_stash_embedding(&x->rt->tf, slot)
                  : hy_mailbox_slot(&x->rt->mb.edges[x->rt->mb.into_fwd[s]], m);
}

/* Where stage s writes its output for micro-batch m: straight into the
 * next stage's slot when it is local, else the send buffer; the last
 * stage keeps it in its stash slot for the head (NULL here). */
static void *rt_stage_output(rt_ctx *x, int s, int m) {
    hy_runtime *rt = x->rt;
    if (s == rt->S - 1) return NULL;
    const hy_edge *e = &rt->mb.edges[rt->mb.into_fwd[s + 1]];
    return e->local ? hy_mailbox_slot(e, m) : x->rk->send;
}

/* Profile stamp k of this rank's iteration (nothing unless profiling). */
static int rt_stamp(rt_ctx *x, size_t k) {
    if (!x->rt->profile) return HY_OK;
    assert(k < rt_stamp_count(x->rt, x->rk->rank));
    return x->o->timestamp(x->st, &x->rk->stamps[k], x->err);
}

/* Stamp `part` of action k of the rank's list (k < 0: an evaluation's
 * forward, which is not profiled). */
static int rt_stamp_action(rt_ctx *x, int k, int part) {
    return k < 0 ? HY_OK : rt_stamp(x, hy_stamp_action(k, part));
}

/* Micro-batch m's stash slot of stage sg (rt_plan_stashes). */
static void *rt_stash_slot(const rt_stage *sg, int m) {
    assert(sg->stash_of[m] >= 0 && sg->stash_of[m] < sg->slots);
    return sg->stash[sg->stash_of[m]];
}

/* F(m, s). For evaluation (train = 0) the head computes only the loss and
 * the stage input is released at once, since no backward will need it.
 * k: the action's index in the rank's list, for its profile stamps (-1:
 * none, as in evaluation). */
static int rt_forward(rt_ctx *x, const hy_action *a, const char *label, int train, int k) {
    hy_runtime *rt = x->rt;
    const hy_mailbox *mb = &rt->mb;
    int s = a->stage, m = a->mb, N = rt->N, rc = HY_OK;
    rt_stage *sg = &rt->stages[s];
    void *slot = rt_stash_slot(sg, m);
    rc = rt_stamp_action(x, k, HY_STAMP_START);
    if (!rc && s == rt->slow_stage) rc = x->o->sleep(x->st, rt->slow_ns, x->err);
    if (rc) return rc;
    if (s == 0)
        rc = hy_embed_forward(&rt->tf, x->st, slot, x->rk->tokens + (size_t)m * N, x->err);
    else
        rc = hy_mailbox_receive(x->st, &mb->edges[mb->into_fwd[s]], m, label, x->err);
    if (!rc) rc = rt_stamp_action(x, k, HY_STAMP_RECEIVED);
    const void *in = rt_stage_input(x, s, m, slot);
    void *out = rt_stage_output(x, s, m);
    const int *targets = s == rt->S - 1 ? x->rk->targets + (size_t)m * N : NULL;
    if (!rc) rc = hy_stage_forward(&rt->tf, &x->rk->work, x->st, s, in, slot, out, targets, train,
                                   x->err);
    if (!rc) rc = rt_stamp_action(x, k, HY_STAMP_COMPUTED);
    if (!rc && s < rt->S - 1)
        rc = hy_mailbox_send(x->st, &mb->edges[mb->into_fwd[s + 1]], m, out, label, x->err);
    if (!rc && !train && s > 0) rc = hy_mailbox_release(x->st, &mb->edges[mb->into_fwd[s]], m, x->err);
    if (!rc) rc = rt_stamp_action(x, k, HY_STAMP_SENT);
    return rc;
}

static int rt_backward(rt_ctx *x, const hy_action *a, const char *label, int k) {
    hy_runtime *rt = x->rt;
    const hy_mailbox *mb = &rt->mb;
    rt_rank *rk = x->rk;
    int s = a->stage, m = a->mb, N = rt->N, rc;
    size_t bytes = hy_boundary_bytes(&rt->tf);
    rt_stage *sg = &rt->stages[s];
    void *slot = rt_stash_slot(sg, m);
    const void *in = rt_stage_input(x, s, m, slot);
    rc = rt_stamp_action(x, k, HY_STAMP_START);
    if (!rc && s == rt->slow_stage) rc = x->o->sleep(x->st, rt->slow_ns, x->err);
    if (rc) return rc;
    if (s == rt->S - 1) {
        /* d(stage output) from the head, which the forward ran. */
        rc = x->o->zero(x->st, rk->dres, bytes, x->err);
        if (!rc) rc = rt_stamp_action(x, k, HY_STAMP_RECEIVED);
        /* Full recompute: the stage's activations again, from its input. */
        if (!rc) rc = hy_stage_recompute(&rt->tf, &rk->work, x->st, s, in, x->err);
        if (!rc) rc = hy_head_backward(&rt->tf, &rk->work, x->st, in, slot, rk->dres, x->err);
    } else {
        const hy_edge *e = &mb->edges[mb->into_bwd[s]];
        rc = hy_mailbox_receive(x->st, e, m, label, x->err);
        if (!rc) rc = rt_stamp_action(x, k, HY_STAMP_RECEIVED);
        if (!rc) rc = x->o->copy(x->st, rk->dres, hy_mailbox_slot(e, m), bytes, x->err);
        if (!rc) rc = hy_stage_recompute(&rt->tf, &rk->work, x->st, s, in, x->err);
    }
    if (!rc) rc = hy_stage_backward(&rt->tf, &rk->work, x->st, s, in, slot, rk->dres, x->err);
    if (rc) return rc;
    if (s == 0) {
        /* Split backward: the embeddings' gradients wait for W. */
        if (!rt->sched->split)
            rc = hy_embed_backward(&rt->tf, x->st, slot, rk->dres, rk->tokens + (size_t)m * N,
                                   x->err);
        if (!rc) rc = rt_stamp_action(x, k, HY_STAMP_COMPUTED);
    } else {
        rc = rt_stamp_action(x, k, HY_STAMP_COMPUTED);
        if (!rc) rc = hy_mailbox_send(x->st, &mb->edges[mb->into_bwd[s - 1]], m, rk->dres, label, x->err);
    }
    /* The incoming gradient is done with (it was copied into dres), and
     * the stage input (a stash) too, unless a weight pass still reads it. */
    if (!rc && s > 0 && !rt->sched->split)
        rc = hy_mailbox_release(x->st, &mb->edges[mb->into_fwd[s]], m, x->err);
    if (!rc && s < rt->S - 1) rc = hy_mailbox_release(x->st, &mb->edges[mb->into_bwd[s]], m, x->err);
    if (!rc) rc = rt_stamp_action(x, k, HY_STAMP_SENT);
    return rc;
}

/* W(m, s), split backward: the stage's weight gradients from what its F
 * and B kept; it waits for nothing on another rank and sends nothing, so
 * its "received" and "sent" stamps are its start and its end. Then the
 * stage input is done with. */
static int rt_wgrad(rt_ctx *x, const hy_action *a, int k) {
    hy_runtime *rt = x->rt;
    int s = a->stage, m = a->mb, rc;
    rt_stage *sg = &rt->stages[s];
    void *slot = rt_stash_slot(sg, m);
    const int *tokens = s == 0 ? x->rk->tokens + (size_t)m * rt->N : NULL;
    rc = rt_stamp_action(x, k, HY_STAMP_START);
    if (!rc && s == rt->slow_stage) rc = x->o->sleep(x->st, rt->slow_ns, x->err);
    if (!rc) rc = rt_stamp_action(x, k, HY_STAMP_RECEIVED);
    const void *in = rt_stage_input(x, s, m, slot);
    if (!rc) rc = hy_stage_recompute(&rt->tf, &x->rk->work, x->st, s, in, x->err);
    if (!rc) rc = hy_stage_wgrad(&rt->tf, &x->rk->work, x->st, s, in, slot, tokens, x->err);
    if (!rc) rc = rt_stamp_action(x, k, HY_STAMP_COMPUTED);
    if (!rc && s > 0) rc = hy_mailbox_release(x->st, &rt->mb.edges[rt->mb.into_fwd[s]], m, x->err);
    if (!rc) rc = rt_stamp_action(x, k, HY_STAMP_SENT);
    return rc;
}

/* The tied embedding: rank 0 and the replica's rank swap their gradients
 * and each adds the other's, so both hold the same sum (a + b == b + a in
 * floating point) and take the same AdamW step. */
static int rt_exchange_wte(rt_ctx *x) {
    hy_runtime *rt = x->rt;
    size_t n = rt_wte(rt)->numel;
    int me = x->rk->rank, rc;
    if (rt->replica_rank < 0 || (me != 0 && me != rt->replica_rank)) return HY_OK;
    const hy_channel *out = &rt->wte_ch[me == 0 ? 0 : 1], *in = &rt->wte_ch[me == 0 ? 1 : 0];
    float *mine = me == 0 ? rt->stages[0].grad + rt_wte(rt)->offset : x->rk->dwte;
    rc = hy_channel_send(x->st, out, mine, "tied embedding gradient", x->err);
    if (!rc) rc = hy_channel_receive(x->st, in, "tied embedding gradient", x->err);
    if (!rc) rc = x->o->add_f32(x->st, mine, in->slot, n, x->err);
    if (!rc) rc = hy_channel_release(x->st, in, x->err);
    return rc;
}

/* Global gradient norm: every rank's sum of squares reaches every rank,
 * each adds them in rank order (the same total everywhere), then clips.
 * A non-finite total makes the clip factor NaN on every rank alike, and
 * every rank's AdamW then skips the step (backend.h, clip): the one
 * non-finite check of a step, fused into the norm it computes anyway. */
static int rt_clip(rt_ctx *x) {
    hy_runtime *rt = x->rt;
    rt_rank *rk = x->rk;
    int me = rk->rank, P = rt->P, rc;
    rc = x->o->zero(x->st, &rk->partials[me], sizeof(double), x->err);
    for (int s = 0; s < rt->S && !rc; s++)
        if (rt->stages[s].rank == me)
            rc = x->o->sumsq(x->st, &rk->partials[me], rt->stages[s].grad, rt->model->stage_numel[s],
                             x->err);
    for (int b = 0; b < P && !rc; b++)
        if (b != me)
            rc = hy_channel_send(x->st, &rt->norm_ch[me * P + b], &rk->partials[me],
                                 "gradient-norm partial", x->err);
    for (int a = 0; a < P && !rc; a++) {
        if (a == me) continue;
        const hy_channel *ch = &rt->norm_ch[a * P + me];
        rc = hy_channel_receive(x->st, ch, "gradient-norm partial", x->err);
        if (!rc) rc = x->o->copy(x->st, &rk->partials[a], ch->slot, sizeof(double), x->err);
        if (!rc) rc = hy_channel_release(x->st, ch, x->err);
    }
    if (!rc) rc = x->o->clip(x->st, rk->clip_factor, rk->norm, rk->partials, P,
                             (float)rt->run->train.grad_clip, x->err);
    return rc;
}

/* The compute copy of n master weights, or NULL when the ops compute on
 * the masters themselves. */
static void *rt_compute_of(const hy_runtime *rt, void *copy) { return rt->A == sizeof(float) ? NULL : copy; }

static int rt_optimize(rt_ctx *x) {
    hy_runtime *rt = x->rt;
    rt_rank *rk = x->rk;
    int rc = HY_OK;
    for (int s = 0; s < rt->S && !rc; s++) {
        rt_stage *sg = &rt->stages[s];
        if (sg->rank != rk->rank) continue;
        for (int i = 0; i < rt->model->n_params && !rc; i++) {
            const hy_param *p = &rt->model->params[i];
            if (p->stage != s) continue;
            rc = x->o->adamw(x->st, sg->param + p->offset,
                             rt_compute_of(rt, (unsigned char *)sg->wc + p->offset * rt->A),
                             sg->grad + p->offset, sg->m + p->offset, sg->v + p->offset, p->numel,
                             rk->hp, rk->clip_factor, p->decay, x->err);
        }
    }
    if (!rc && rk->wte) {
        const hy_param *p = rt_wte(rt);
        rc = x->o->adamw(x->st, rk->wte, rt_compute_of(rt, rk->wte_c), rk->dwte, rk->wte_m,
                         rk->wte_v, p->numel, rk->hp, rk->clip_factor, p->decay, x->err);
    }
    return rc;
}

/* Profile stamp of bucket b's sum: its start (end = 0) or its wait's end. */
static int rt_stamp_sum(rt_ctx *x, int b, int end) {
    if (!x->rt->profile) return HY_OK;
    int r = x->rk->rank;
    return rt_stamp(x, hy_stamp_sum(x->rt->sched->n_actions[r], rt_bucket_index(x->rt, r, b), end));
}

/* Data parallelism: the sum over the replicas of stage s's gradients (its
 * bucket is s), and of the wte replica's with the last stage's (bucket S),
 * started once the action that completes them has run. */
static int rt_reduce_start(rt_ctx *x, int s) {
    hy_runtime *rt = x->rt;
    rt_rank *rk = x->rk;
    int rc = rt_stamp_sum(x, s, 0);
    if (!rc) rc = x->o->reduce_start(x->st, rk->reducer, s, rt->stages[s].grad,
                                     rt->model->stage_numel[s], x->err);
    if (!rc && s == rt->S - 1 && rk->dwte) {
        rc = rt_stamp_sum(x, rt->S, 0);
        if (!rc) rc = x->o->reduce_start(x->st, rk->reducer, rt->S, rk->dwte, rt_wte(rt)->numel,
                                         x->err);
    }
    return rc;
}

/* ... and every sum this rank started, waited for before the tied
 * embedding's exchange and the norm read the gradients. */
static int rt_reduce_wait(rt_ctx *x) {
    hy_runtime *rt = x->rt;
    rt_rank *rk = x->rk;
    int rc = HY_OK;
    for (int s = 0; s < rt->S && !rc; s++) {
        if (rt->stages[s].rank != rk->rank) continue;
        rc = x->o->reduce_wait(x->st, rk->reducer, s, x->err);
        if (!rc) rc = rt_stamp_sum(x, s, 1);
        if (!rc && s == rt->S - 1 && rk->dwte) {
            rc = x->o->reduce_wait(x->st, rk->reducer, rt->S, x->err);
            if (!rc) rc = rt_stamp_sum(x, rt->S, 1);
        }
    }
    return rc;
}

static int rt_iteration(rt_ctx *x) {
    hy_runtime *rt = x->rt;
    rt_rank *rk = x->rk;
    int me = rk->rank, rc = rt_stamp(x, 0);
    for (int s = 0; s < rt->S && !rc; s++)
        if (rt->stages[s].rank == me)
            rc = x->o->zero(x->st, rt->stages[s].grad, rt->model->stage_numel[s] * sizeof(float), x->err);
    if (!rc && rk->dwte)
        rc = x->o->zero(x->st, rk->dwte, rt_wte(rt)->numel * sizeof(float), x->err);
    if (!rc && rk->work.loss) rc = x->o->zero(x->st, rk->work.loss, HY_HEAD_SUMS_BYTES, x->err);
    const hy_schedule *sc = rt->sched;
    int n = sc->n_actions[me];
    for (int i = 0; i < n && !rc; i++) {
        const hy_action *a = &sc->actions[me][i];
        char label[48];
        hy_action_label(a, label, sizeof label);
        rc = a->op == HY_FWD ? rt_forward(x, a, label, 1, i)
           : a->op == HY_BWD ? rt_backward(x, a, label, i)
                             : rt_wgrad(x, a, i);
        if (!rc && rk->reducer && rk->reduce_after[i] >= 0) rc = rt_reduce_start(x, rk->reduce_after[i]);
        if (rc) hy_error_prefix(x->err, "rank %d, %s: ", me, label);
    }
    if (!rc && rk->reducer) rc = rt_reduce_wait(x);
    if (!rc) rc = rt_exchange_wte(x);
    if (!rc) rc = rt_stamp(x, hy_stamp_tail(n, HY_STAMP_EXCHANGED));
    if (!rc) rc = rt_clip(x);
    if (!rc) rc = rt_stamp(x, hy_stamp_tail(n, HY_STAMP_CLIPPED));
    if (!rc) rc = rt_optimize(x);
    if (!rc) rc = rt_stamp(x, hy_stamp_tail(n, HY_STAMP_OPTIMIZED));
    return rc;
}

/* Evaluation: each rank runs the forwards of its stages, micro-batch by
 * micro-batch in stage order. (m, s) ascending is a topological order of
 * the forwards, so this cannot deadlock, and a local edge's slot is read
 * right after it is written. */
static int rt_eval_iteration(rt_ctx *x, int count) {
    hy_runtime *rt = x->rt;
    int me = x->rk->rank, rc = HY_OK;
    if (x->rk->work.loss) rc = x->o->zero(x->st, x->rk->work.loss, HY_HEAD_SUMS_BYTES, x->err);
    for (int m = 0; m < count && !rc; m++) {
        for (int s = 0; s < rt->S && !rc; s++) {
            if (rt->sched->placement[s] != me) continue;
            hy_action a = { HY_FWD, m, s };
            char label[48];
            hy_action_label(&a, label, sizeof label);
            rc = rt_forward(x, &a, label, 0, -1);
            if (rc) hy_error_prefix(x->err, "rank %d, eval %s: ", me, label);
        }
    }
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Rank threads */

/* Every rank calls this once, right after recording its graph (rc: how
 * that went), and it returns when all have (hy_record_gate). A rank whose
 * own recording went well but another's failed gets a stopped error and
 * launches nothing. */
static int rt_all_recorded(hy_runtime *rt, rt_rank *rk, int rc) {
    int failed = hy_record_gate_pass(&rt->recorded, rc);
    if (rc || !failed) return rc;
    return hy_fail_cause(&rk->err, HY_ERR_RUNTIME, HY_CAUSE_STOPPED,
                         "rank %d: another rank failed to record its graph", rk->rank);
}

static int rt_run_iteration(hy_runtime *rt, rt_rank *rk, int eval_count) {
    rt_ctx x = { rt, rk, rk->stream, rt->be->ops, &rk->err };
    const hy_backend_ops *o = rt->be->ops;
    int rc;
    if (eval_count > 0) {
        rc = rt_eval_iteration(&x, eval_count);
        if (!rc) rc = o->sync(rk->stream, &rk->err);
        return rc;
    }
    if (!rt->run->graph || rk->iterations == 0) {
        rc = rt_iteration(&x);                  /* eager (and the warm-up) */
    } else {
        rc = HY_OK;
        if (!rk->graph) {                       /* record once, then replay */
            rc = o->capture_begin(rk->stream, &rk->err);
            if (!rc) rc = rt_iteration(&x);
            int end = o->capture_end(rk->stream, &rk->graph, rc ? NULL : &rk->err);
            if (!rc) rc = end;
            rc = rt_all_recorded(rt, rk, rc);
        }
        if (!rc) rc = o->graph_launch(rk->graph, rk->stream, &rk->err);
    }
    if (!rc) rc = o->sync(rk->stream, &rk->err);
    rk->iterations++;
    return rc;
}

static void *rt_rank_main(void *arg) {
    rt_rank *rk = arg;
    hy_runtime *rt = rk->rt;
    int seen = 0;
    for (;;) {
        pthread_mutex_lock(&rt->lock);
        while (rt->generation == seen && !rt->quit) pthread_cond_wait(&rt->cv, &rt->lock);
        int quit = rt->quit, eval_count = rt->eval_count;
        seen = rt->generation;
        pthread_mutex_unlock(&rt->lock);
        if (quit) break;
        int rc = rt_run_iteration(rt, rk, eval_count);
        if (rc) rt->be->ops->abort(rt->be, rk->err.msg);
        pthread_mutex_lock(&rt->lock);
        rk->status = rc;
        rt->done++;
        pthread_cond_broadcast(&rt->cv);
        pthread_mutex_unlock(&rt->lock);
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Set-up */

static int rt_alloc(hy_runtime *rt, int rank, size_t bytes, void *out, hy_error *err) {
    return rt->be->ops->alloc(rt->be, rank, bytes ? bytes : 1, (void **)out, err);
}

/* Stash slots of each stage: a micro-batch takes the lowest free slot at
 * its forward and gives it back after its backward (split: after its
 * weight pass), in the rank's order. */
static int rt_plan_stashes(hy_runtime *rt, hy_error *err) {
    const hy_schedule *sc = rt->sched;
    int M = rt->M;
    assert(M == sc->micro_batches && rt->S == sc->stages);
    for (int s = 0; s < rt->S; s++) {
        rt->stages[s].rank = sc->placement[s];
        rt->stages[s].stash_of = malloc(sizeof(int) * (size_t)M);
        if (!rt->stages[s].stash_of) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    }
    char *busy = calloc((size_t)M, 1);
    int *in_flight = malloc(sizeof(int) * (size_t)rt->S);
    if (!busy || !in_flight) {
        free(busy);
        free(in_flight);
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    }
    hy_schedule_in_flight(sc, in_flight);
    for (int r = 0; r < rt->P; r++) {
        for (int s = 0; s < rt->S; s++) {
            if (sc->placement[s] != r) continue;
            memset(busy, 0, (size_t)M);
            int used = 0;
            for (int i = 0; i < sc->n_actions[r]; i++) {
                const hy_action *a = &sc->actions[r][i];
                if (a->stage != s) continue;
                int *k = &rt->stages[s].stash_of[a->mb];
                if (a->op == HY_FWD) {
                    *k = 0;
                    while (busy[*k]) (*k)++;
                    assert(*k < M);   /* at most M micro-batches are ever in flight */
                    busy[*k] = 1;
                    if (*k + 1 > used) used = *k + 1;
                } else if (a->op == (sc->split ? HY_WGRAD : HY_BWD)) {
                    assert(busy[*k]);   /* its forward, earlier in the list, claimed it */
                    busy[*k] = 0;   /* the last pass that reads the slot */
                }
            }
            rt->stages[s].slots = used;
            assert(used == in_flight[s]);   /* what the memory plan counts (memplan.h) */
        }
    }
    free(busy);
    free(in_flight);
    return HY_OK;
}

static int rt_alloc_rank(hy_runtime *rt, rt_rank *rk, hy_error *err) {
    int r = rk->rank, rc, head = rt->sched->placement[rt->S - 1] == r;
    size_t f = sizeof(float), N = (size_t)rt->N, M = (size_t)rt->M, A = rt->A;
    rc = rt_alloc(rt, r, hy_boundary_bytes(&rt->tf), &rk->send, err);
    if (!rc) rc = rt_alloc(rt, r, hy_boundary_bytes(&rt->tf), &rk->dres, err);
    if (!rc) rc = hy_stage_work_alloc(&rt->tf, rt->be, r, head,
                                      hy_stage_work_layers(&rt->tf, rt->sched->placement, r),
                                      &rk->work, err);
    if (!rc) rc = rt_alloc(rt, r, sizeof(double) * (size_t)rt->P, &rk->partials, err);
    if (!rc) rc = rt_alloc(rt, r, 2 * f, &rk->clip_factor, err);
    if (!rc) rk->norm = rk->clip_factor + 1;
    if (!rc) rc = rt_alloc(rt, r, sizeof(hy_adamw_hparams), &rk->hp, err);
    if (!rc) rc = rt_alloc(rt, r, rt_stamp_count(rt, r) * sizeof(uint64_t), &rk->stamps, err);
    if (!rc && rt->sched->placement[0] == r) rc = rt_alloc(rt, r, M * N * sizeof(int), &rk->tokens, err);
    if (!rc && head) rc = rt_alloc(rt, r, M * N * sizeof(int), &rk->targets, err);
    if (!rc && r == rt->replica_rank) {
        size_t n = rt_wte(rt)->numel;
        rc = rt_alloc(rt, r, n * f, &rk->wte, err);
        if (!rc) rc = rt_alloc(rt, r, n * f, &rk->dwte, err);
        if (!rc) rc = rt_alloc(rt, r, n * f, &rk->wte_m, err);
        if (!rc) rc = rt_alloc(rt, r, n * f, &rk->wte_v, err);
        if (!rc && A != f) rc = rt_alloc(rt, r, n * A, &rk->wte_c, err);
        else if (!rc) rk->wte_c = rk->wte;
        /* The head reads and updates the replica, not stage 0's wte. */
        rk->work.wte = rk->wte_c;
        rk->work.dwte = rk->dwte;
    }
    return rc;
}

/* Brings the compute copies of stage s (and of the replica, for stage 0)
 * up to date with their master weights, after the host wrote them. */
static int rt_refresh_compute(hy_runtime *rt, int s, hy_error *err) {
    if (rt->A == sizeof(float)) return HY_OK;   /* the masters are the compute copy */
    const hy_backend_ops *o = rt->be->ops;
    rt_stage *sg = &rt->stages[s];
    hy_stream *st = rt->ranks[sg->rank].stream;
    int rc = o->to_act(st, sg->wc, sg->param, rt->model->stage_numel[s], err);
    if (!rc) rc = o->sync(st, err);
    if (!rc && s == 0 && rt->replica_rank >= 0) {
        rt_rank *rk = &rt->ranks[rt->replica_rank];
        rc = o->to_act(rk->stream, rk->wte_c, rk->wte, rt_wte(rt)->numel, err);
        if (!rc) rc = o->sync(rk->stream, err);
    }
    return rc;
}

static int rt_init_params(hy_runtime *rt, hy_error *err) {
    for (int s = 0; s < rt->S; s++) {
        rt_stage *sg = &rt->stages[s];
        size_t n = rt->model->stage_numel[s];
        float *host = malloc((n ? n : 1) * sizeof(float));
        if (!host) return hy_fail(err, HY_ERR_RUNTIME, "out of memory initializing stage %d", s);
        hy_model_init_stage(rt->model, s, rt->run->train.seed, host);
        int rc = rt->be->ops->upload(rt->be, sg->rank, sg->param, host, n * sizeof(float), err);
        if (!rc && s == 0 && rt->replica_rank >= 0) {
            const hy_param *p = rt_wte(rt);
            rc = rt->be->ops->upload(rt->be, rt->replica_rank, rt->ranks[rt->replica_rank].wte,
                                     host + p->offset, p->numel * sizeof(float), err);
        }
        free(host);
        if (!rc) rc = rt_refresh_compute(rt, s, err);
        if (rc) return rc;
    }
    return HY_OK;
}

/* Data parallelism: which action of each rank completes each of its
 * stages' gradients (the last B, or with a split backward the last W, of
 * the stage), so that stage's sum over the replicas starts right after it
 * while the rank goes on with its other stages' backwards. */
static int rt_plan_reduces(hy_runtime *rt, hy_error *err) {
    if (rt->replicas == 1) return HY_OK;
    const hy_backend_ops *o = rt->be->ops;
    if (!o->reduce_start || !o->reduce_wait)
        return hy_fail(err, HY_ERR_INPUT, "%d data-parallel replicas: the %s backend cannot sum "
                       "gradients across processes; use backend \"cpu\" or one process",
                       rt->replicas, o->name);
    for (int s = 0; s < rt->S; s++)
        if (rt->model->stage_numel[s] > (size_t)INT_MAX)
            return hy_fail(err, HY_ERR_INPUT, "stage %d has %zu parameters: a data-parallel sum "
                           "takes at most %d; use more stages", s, rt->model->stage_numel[s],
                           INT_MAX);
    const hy_schedule *sc = rt->sched;
    int *last = malloc(sizeof(int) * (size_t)rt->S);
    if (!last) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    for (int r = 0; r < rt->P; r++) {
        rt_rank *rk = &rt->ranks[r];
        int n = sc->n_actions[r];
        rk->reduce_after = malloc(sizeof(int) * (size_t)(n ? n : 1));
        if (!rk->reduce_after) {
            free(last);
            return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
        }
        for (int i = 0; i < n; i++) rk->reduce_after[i] = -1;
        hy_schedule_grads_done(sc, r, last);
        for (int k = 0; k < rt->S; k++)
            if (last[k] >= 0) rk->reduce_after[last[k]] = k;
    }
    free(last);
    return HY_OK;
}

/* The ranks' reducers, at the first step: making them is a collective,
 * which every replica reaches only once all are past their checks. */
static int rt_attach_reducers(hy_runtime *rt, hy_error *err) {
    if (rt->replicas == 1 || rt->ranks[0].reducer) return HY_OK;
    const hy_backend_ops *o = rt->be->ops;
    int rc = hy_dp_open_ranks(rt->dp, rt->P, rt->S + 1, err);
    for (int r = 0; r < rt->P && !rc; r++) {
        hy_reducer *red = hy_dp_reducer(rt->dp, r);
        /* A GPU backend's own communicator (NCCL), one rank after the
         * other on every replica alike. */
        if (o->reduce_connect) rc = o->reduce_connect(rt->be, r, red, err);
        if (!rc) rt->ranks[r].reducer = red;
    }
    return rc;
}

static int rt_build(hy_runtime *rt, const hy_backend_choice *chosen, hy_error *err) {
    const hy_run *run = rt->run;
    rt->B = run->micro_batch_size;
    rt->T = rt->model->seq_len;
    rt->N = rt->B * rt->T;
    rt->M = rt->sched->micro_batches;
    rt->V = rt->model->vocab;
    rt->S = rt->sched->stages;
    rt->P = rt->sched->ranks;
    rt->slow_stage = -1;
    int last = rt->sched->placement[rt->S - 1];
    /* An untied head is the last stage's own weight: nothing to replicate. */
    rt->replica_rank = rt->model->tie_embeddings && last != rt->sched->placement[0] ? last : -1;

    int rc = chosen ? hy_backend_open_chosen(&run->backend, chosen, &rt->be, err)
                    : hy_backend_open(&run->backend, &rt->be, NULL, err);
    if (!rc) rc = hy_transformer_check_ops(rt->model, rt->be->ops, err);
    if (rc) return rc;
    rt->A = rt->be->ops->act_size;
    /* The math's view of the run; each stage's weights and gradients are
     * filled in as they are allocated below. */
    rt->tf = (hy_transformer){ .model = rt->model, .ops = rt->be->ops, .act_size = rt->A,
                               .B = rt->B, .T = rt->T,
                               /* a micro-batch counts 1/(N M) of the global batch */
                               .global_micro_batches = rt->M * rt->replicas,
                               .split = rt->sched->split,
                               .recompute = rt->run->train.recompute,
                               .weights = calloc((size_t)rt->S, sizeof(void *)),
                               .grads = calloc((size_t)rt->S, sizeof(float *)) };
    if (!rt->tf.weights || !rt->tf.grads)
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory building the runtime");
    rc = hy_mailbox_plan(&rt->mb, rt->sched, err);
    if (!rc) rc = hy_mailbox_alloc(&rt->mb, rt->be, hy_boundary_bytes(&rt->tf), err);
    if (rc) return rc;

    rt->stages = calloc((size_t)rt->S, sizeof(rt_stage));
    rt->ranks = calloc((size_t)rt->P, sizeof(rt_rank));
    rt->norm_ch = calloc((size_t)rt->P * rt->P, sizeof(hy_channel));
    rt->batch_in = malloc(sizeof(int) * (size_t)rt->N);
    rt->batch_tg = malloc(sizeof(int) * (size_t)rt->N);
    if (!rt->stages || !rt->ranks || !rt->norm_ch || !rt->batch_in || !rt->batch_tg)
        return hy_fail(err, HY_ERR_RUNTIME, "out of memory building the runtime");
    rc = rt_plan_stashes(rt, err);
    for (int s = 0; s < rt->S && !rc; s++) {
        rt_stage *sg = &rt->stages[s];
        size_t numel = rt->model->stage_numel[s], n = numel * sizeof(float);
        rc = rt_alloc(rt, sg->rank, n, &sg->param, err);
        if (!rc) rc = rt_alloc(rt, sg->rank, n, &sg->grad, err);
        if (!rc) rc = rt_alloc(rt, sg->rank, n, &sg->m, err);
        if (!rc) rc = rt_alloc(rt, sg->rank, n, &sg->v, err);
        if (!rc && rt->A != sizeof(float)) rc = rt_alloc(rt, sg->rank, numel * rt->A, &sg->wc, err);
        else if (!rc) sg->wc = sg->param;
        rt->tf.weights[s] = sg->wc;
        rt->tf.grads[s] = sg->grad;
        if (!rc) {
            sg->stash = calloc((size_t)sg->slots + 1, sizeof(void *));
            if (!sg->stash) rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory");
        }
        for (int k = 0; k < sg->slots && !rc; k++)
            rc = rt_alloc(rt, sg->rank, hy_stash_bytes(&rt->tf, s), &sg->stash[k], err);
    }
    for (int r = 0; r < rt->P && !rc; r++) {
        rt->ranks[r].rt = rt;
        rt->ranks[r].rank = r;
        rc = rt_alloc_rank(rt, &rt->ranks[r], err);
    }
    for (int a = 0; a < rt->P && !rc; a++)
        for (int b = 0; b < rt->P && !rc; b++)
            if (a != b) rc = hy_channel_open(&rt->norm_ch[a * rt->P + b], rt->be, a, b, sizeof(double), err);
    if (!rc && rt->replica_rank >= 0) {
        size_t n = rt_wte(rt)->numel * sizeof(float);
        rc = hy_channel_open(&rt->wte_ch[0], rt->be, 0, rt->replica_rank, n, err);
        if (!rc) rc = hy_channel_open(&rt->wte_ch[1], rt->be, rt->replica_rank, 0, n, err);
    }
    for (int r = 0; r < rt->P && !rc; r++)
        rc = rt->be->ops->stream_create(rt->be, r, &rt->ranks[r].stream, err);
    /* The backend's scratch for every op, before any rank runs. */
    for (int r = 0; r < rt->P && !rc && rt->be->ops->reserve; r++)
        rc = rt->be->ops->reserve(rt->ranks[r].stream, (size_t)rt->N,
                                  hy_model_widest(rt->model), err);
    if (!rc) rc = rt_plan_reduces(rt, err);
    if (!rc) rc = rt_init_params(rt, err);
    return rc;
}

int hy_runtime_create(hy_runtime **out, const hy_run *run, hy_error *err) {
    return hy_runtime_create_dp(out, run, NULL, NULL, err);
}

int hy_runtime_create_dp(hy_runtime **out, const hy_run *run, const hy_backend_choice *chosen,
                         hy_dp *dp, hy_error *err) {
    *out = NULL;
    hy_runtime *rt = calloc(1, sizeof *rt);
    if (!rt) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    rt->run = run;
    rt->sched = &run->sched;
    rt->model = &run->model;
    rt->dp = dp;
    rt->replicas = hy_dp_size(dp);
    rt->replica = hy_dp_rank(dp);
    rt->last_loss = NAN;
    rt->eval_accuracy = NAN;
    pthread_mutex_init(&rt->lock, NULL);
    pthread_cond_init(&rt->cv, NULL);
    int rc = rt_build(rt, chosen, err);
    hy_record_gate_init(&rt->recorded, rt->P);   /* P is known once rt_build has begun */
    /* The rank threads take no stop signal (SIGINT, SIGTERM: they inherit
     * the mask): it goes to the thread that drives the run, whose blocking
     * call it must cut short (tools/cmd_train.c), and the ranks see the
     * stop between steps. */
    sigset_t stop, mask;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, &mask);
    for (int r = 0; r < rt->P && !rc; r++) {
        if (pthread_create(&rt->ranks[r].thread, NULL, rt_rank_main, &rt->ranks[r]) != 0)
            rc = hy_fail(err, HY_ERR_RUNTIME, "could not start the thread of rank %d", r);
        else
            rt->ranks[r].started = 1;
    }
    pthread_sigmask(SIG_SETMASK, &mask, NULL);
    if (rc) {
        hy_runtime_destroy(rt);
        return rc;
    }
    *out = rt;
    return HY_OK;
}

/* ------------------------------------------------------------------------ */
/* Steps */

/* Reads `count` micro-batches from ds onto the ranks that need them. For
 * training with replicas, this replica's share of the step's global
 * batch: it passes over the batches of the replicas before it, reads its
 * own M and passes over the rest, so the data's position moves on by
 * the whole global batch and every replica agrees on it. */
static int rt_load_batches(hy_runtime *rt, hy_dataset *ds, int count, int train, hy_error *err) {
    const hy_backend_ops *o = rt->be->ops;
    size_t N = (size_t)rt->N;
    int first = rt->sched->placement[0], last = rt->sched->placement[rt->S - 1];
    int before = train ? rt->replica * count : 0;
    int after = train ? (rt->replicas - 1 - rt->replica) * count : 0;
    for (int k = 0; k < before; k++) {
        int rc = hy_dataset_next(ds, rt->B, rt->T, NULL, NULL, err);
        if (rc) return rc;
    }
    for (int m = 0; m < count; m++) {
        int rc = hy_dataset_next(ds, rt->B, rt->T, rt->batch_in, rt->batch_tg, err);
        if (rc) return rc;
        /* BERT's masks are drawn per micro-batch of the global batch. */
        if (rt->model->kind == HY_MODEL_BERT)
            hy_mask_tokens(rt->batch_in, rt->batch_tg, rt->N, rt->V, rt->model->mask_token,
                           rt->run->train.seed, rt->step,
                           rt->M * (train ? rt->replicas : 1), before + m);
        for (size_t i = 0; i < N; i++) rt->scored += rt->batch_tg[i] != -1;
        rc = o->upload(rt->be, first, rt->ranks[first].tokens + m * N, rt->batch_in, N * sizeof(int), err);
        if (!rc) rc = o->upload(rt->be, last, rt->ranks[last].targets + m * N, rt->batch_tg,
                                N * sizeof(int), err);
        if (rc) return rc;
    }
    for (int k = 0; k < after; k++) {
        int rc = hy_dataset_next(ds, rt->B, rt->T, NULL, NULL, err);
        if (rc) return rc;
    }
    return HY_OK;
}

/* Lets every rank run one round (a training iteration, or an evaluation
 * of eval_count batches) and waits for all of them. Reports the rank that
 * failed first, not the ones its failure stopped (their errors have cause
 * HY_CAUSE_STOPPED: the backend's abort ended their waits). */
static int rt_round(hy_runtime *rt, int eval_count, hy_error *err) {
    pthread_mutex_lock(&rt->lock);
    rt->done = 0;
    rt->eval_count = eval_count;
    rt->generation++;
    pthread_cond_broadcast(&rt->cv);
    while (rt->done < rt->P) pthread_cond_wait(&rt->cv, &rt->lock);
    pthread_mutex_unlock(&rt->lock);
    const rt_rank *failed = NULL;
    for (int r = 0; r < rt->P; r++) {
        const rt_rank *rk = &rt->ranks[r];
        if (rk->status && (!failed || failed->err.cause == HY_CAUSE_STOPPED)) failed = rk;
    }
    if (!failed) return HY_OK;
    if (err) *err = failed->err;
    return failed->status;
}

static double rt_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The training data, opened at first use: evaluation needs none. Its
 * patterns are expanded here, once: the files found now are the ones
 * the run reads, and the ones its checkpoints name. */
static int rt_open_train(hy_runtime *rt, hy_error *err) {
    if (rt->train_open) return HY_OK;
    char **paths = NULL;
    int n = 0;
    int rc = hy_data_expand((const char *const *)rt->run->data.train, rt->run->data.n_train,
                            "data.train", &paths, &n, err);
    if (!rc) rc = hy_dataset_open(&rt->train, (const char *const *)paths, n, rt->V, err);
    hy_data_paths_free(paths, n);
    if (rc) return rc;
    /* Data too short for one batch is refused now, not at the first
     * step: the trial read says so in the data module's words. */
    size_t pos = 0;
    rc = hy_dataset_read(&rt->train, &pos, rt->B, rt->T, NULL, NULL, err);
    if (rc) {
        hy_dataset_close(&rt->train);
        return rc;
    }
    rt->train_open = 1;
    return HY_OK;
}

int hy_runtime_step(hy_runtime *rt, double lr, hy_step_stats *stats, hy_error *err) {
    const hy_backend_ops *o = rt->be->ops;
    double t0 = rt_now();
    rt->step++;
    hy_adamw_hparams hp = { (float)lr, (float)rt->run->train.beta1, (float)rt->run->train.beta2,
                            (float)rt->run->train.eps, (float)rt->run->train.weight_decay, rt->step };
    int rc = rt_open_train(rt, err);
    if (!rc) rc = rt_attach_reducers(rt, err);
    if (!rc) rc = rt_load_batches(rt, &rt->train, rt->M, 1, err);
    for (int r = 0; r < rt->P && !rc; r++)
        rc = o->upload(rt->be, r, rt->ranks[r].hp, &hp, sizeof hp, err);
    if (rc) return rc;

    rc = rt_round(rt, 0, err);
    if (rc) return rc;

    int last = rt->sched->placement[rt->S - 1];
    float loss = 0, norm = 0;
    rc = o->download(rt->be, last, &loss, rt->ranks[last].work.loss, sizeof loss, err);
    if (!rc) rc = o->download(rt->be, 0, &norm, rt->ranks[0].norm, sizeof norm, err);
    /* Each replica's loss is its share of the global batch's mean. */
    double total = loss;
    if (!rc) rc = hy_dp_sum(rt->dp, &total, 1, err);
    if (rc) return rc;
    loss = (float)total;
    stats->step = rt->step;
    rt->last_loss = loss;
    stats->loss = loss;
    stats->grad_norm = norm;
    stats->nonfinite = !isfinite(loss) || !isfinite(norm);
    stats->updated = isfinite(norm);
    stats->lr = lr;
    stats->ms = (rt_now() - t0) * 1e3;
    stats->tokens = (double)rt->M * rt->N * rt->replicas;
    return HY_OK;
}

int hy_runtime_eval(hy_runtime *rt, const char *shard, int batches, double *loss, double *tokens,
                    hy_error *err) {
    hy_dataset sh;
    int rc = hy_dataset_open(&sh, &shard, 1, rt->V, err);
    if (rc) return rc;
    int last = rt->sched->placement[rt->S - 1];
    double sum = 0, hits = 0;
    rt->scored = 0;
    for (int done = 0; done < batches && !rc;) {
        int count = batches - done < rt->M ? batches - done : rt->M;
        rc = rt_load_batches(rt, &sh, count, 0, err);
        if (!rc) rc = rt_round(rt, count, err);
        float part[2] = { 0, 0 };   /* loss, hits: HY_HEAD_SUMS_BYTES */
        if (!rc) rc = rt->be->ops->download(rt->be, last, part, rt->ranks[last].work.loss, sizeof part, err);
        sum += part[0];
        hits += part[1];
        done += count;
    }
    hy_dataset_close(&sh);
    if (rc) return rc;
    *loss = sum / batches;
    rt->eval_accuracy = rt->scored > 0 ? hits / (double)rt->scored : NAN;
    *tokens = (double)batches * rt->N;
    return HY_OK;
}

/* The block of `role` of stage sg, and of the replica (NULL if none). */
static float *rt_block(const rt_stage *sg, hy_tensor_role role) {
    return role == HY_T_PARAM ? sg->param : role == HY_T_GRAD ? sg->grad
         : role == HY_T_ADAM_M ? sg->m : sg->v;
}
static float *rt_replica(const rt_rank *rk, hy_tensor_role role) {
    return role == HY_T_PARAM ? rk->wte : role == HY_T_GRAD ? rk->dwte
         : role == HY_T_ADAM_M ? rk->wte_m : rk->wte_v;
}

const hy_model *hy_runtime_model(const hy_runtime *rt) { return rt->model; }

static int rt_too_many(const hy_param *p, size_t n, hy_error *err) {
    return hy_fail(err, HY_ERR_INPUT, "parameter '%s' has %zu values, not %zu", p->name, p->numel, n);
}

int hy_runtime_get(hy_runtime *rt, hy_tensor_role role, const hy_param *p, float *dst, size_t n,
                   hy_error *err) {
    if (n > p->numel) return rt_too_many(p, n, err);
    const rt_stage *sg = &rt->stages[p->stage];
    return rt->be->ops->download(rt->be, sg->rank, dst, rt_block(sg, role) + p->offset,
                                 n * sizeof(float), err);
}

int hy_runtime_put(hy_runtime *rt, hy_tensor_role role, const hy_param *p, const float *src,
                   size_t n, hy_error *err) {
    if (n > p->numel) return rt_too_many(p, n, err);
    const rt_stage *sg = &rt->stages[p->stage];
    int rc = rt->be->ops->upload(rt->be, sg->rank, rt_block(sg, role) + p->offset, src,
                                 n * sizeof(float), err);
    if (!rc && p->kind == HY_P_WTE && rt->replica_rank >= 0)
        rc = rt->be->ops->upload(rt->be, rt->replica_rank,
                                 rt_replica(&rt->ranks[rt->replica_rank], role), src,
                                 n * sizeof(float), err);
    return rc;
}

int hy_runtime_refresh(hy_runtime *rt, hy_error *err) {
    int rc = HY_OK;
    for (int s = 0; s < rt->S && !rc; s++) rc = rt_refresh_compute(rt, s, err);
    return rc;
}

/* The parameter `name` names, if it has n values (hy_model_real_numel). */
static const hy_param *rt_named(hy_runtime *rt, const char *name, size_t n, hy_error *err) {
    const hy_param *p = hy_model_find(rt->model, name);
    if (!p) {
        hy_fail(err, HY_ERR_INPUT, "no parameter named '%s'", name);
        return NULL;
    }
    size_t have = hy_model_real_numel(rt->model, p);
    if (n != have) {
        hy_fail(err, HY_ERR_INPUT, "parameter '%s' has %zu values, not %zu", name, have, n);
        return NULL;
    }
    return p;
}

int hy_runtime_read(hy_runtime *rt, hy_tensor_role role, const char *name, float *dst, size_t n,
                    hy_error *err) {
    const hy_param *p = rt_named(rt, name, n, err);
    return p ? hy_runtime_get(rt, role, p, dst, n, err) : HY_ERR_INPUT;
}

int hy_runtime_write(hy_runtime *rt, hy_tensor_role role, const char *name, const float *src,
                     size_t n, hy_error *err) {
    const hy_param *p = rt_named(rt, name, n, err);
    if (!p) return HY_ERR_INPUT;
    int rc = hy_runtime_put(rt, role, p, src, n, err);
    if (!rc && role == HY_T_PARAM) rc = rt_refresh_compute(rt, p->stage, err);
    return rc;
}

int hy_runtime_read_param(hy_runtime *rt, const char *name, float *dst, size_t n, hy_error *err) {
    return hy_runtime_read(rt, HY_T_PARAM, name, dst, n, err);
}

int hy_runtime_get_progress(hy_runtime *rt, int *step, size_t *data_pos, hy_error *err) {
    int rc = rt_open_train(rt, err);
    if (rc) return rc;
    *step = rt->step;
    *data_pos = hy_dataset_pos(&rt->train);
    return HY_OK;
}

int hy_runtime_data(hy_runtime *rt, const hy_dataset **ds, hy_error *err) {
    int rc = rt_open_train(rt, err);
    *ds = rc ? NULL : &rt->train;
    return rc;
}

int hy_runtime_set_progress(hy_runtime *rt, int step, size_t data_pos, hy_error *err) {
    int rc = rt_open_train(rt, err);
    if (!rc) rc = hy_dataset_set_pos(&rt->train, data_pos, err);
    if (!rc) rt->step = step;
    return rc;
}

struct hy_backend *hy_runtime_backend(hy_runtime *rt) { return rt->be; }

double hy_runtime_last_loss(const hy_runtime *rt) { return rt->last_loss; }

double hy_runtime_eval_accuracy(const hy_runtime *rt) { return rt->eval_accuracy; }

const hy_run *hy_runtime_run(const hy_runtime *rt) { return rt->run; }

int hy_runtime_replicas(const hy_runtime *rt) { return rt->replicas; }

const hy_schedule *hy_runtime_schedule(const hy_runtime *rt) { return rt->sched; }

/* The hooks change what a rank records, so they must be set before the
 * first step (the eager warm-up) and never after a graph exists. */
static int rt_before_first_step(hy_runtime *rt, const char *what, hy_error *err) {
    for (int r = 0; r < rt->P; r++)
        if (rt->ranks[r].iterations > 0)
            return hy_fail(err, HY_ERR_RUNTIME, "%s must be set before the first step", what);
    return HY_OK;
}

int hy_runtime_profile(hy_runtime *rt, hy_error *err) {
    int rc = rt_before_first_step(rt, "profiling", err);
    if (!rc) rt->profile = 1;
    return rc;
}

size_t hy_runtime_stamp_count(const hy_runtime *rt, int rank) {
    return rank < 0 || rank >= rt->P ? 0 : rt_stamp_count(rt, rank);
}

int hy_runtime_sums(const hy_runtime *rt, int rank, int *buckets) {
    return rank < 0 || rank >= rt->P ? 0 : rt_rank_buckets(rt, rank, buckets);
}

int hy_runtime_stamps(hy_runtime *rt, int rank, uint64_t *dst, size_t n, hy_error *err) {
    if (!rt->profile) return hy_fail(err, HY_ERR_RUNTIME, "profiling is off (hy_runtime_profile)");
    if (n != hy_runtime_stamp_count(rt, rank))
        return hy_fail(err, HY_ERR_RUNTIME, "rank %d has %zu stamps, not %zu", rank,
                       hy_runtime_stamp_count(rt, rank), n);
    return rt->be->ops->download(rt->be, rank, dst, rt->ranks[rank].stamps, n * sizeof(uint64_t), err);
}

int hy_runtime_graph_dot(hy_runtime *rt, int rank, const char *path, hy_graph_nodes *nodes,
                         hy_error *err) {
    if (rank < 0 || rank >= rt->P)
        return hy_fail(err, HY_ERR_INPUT, "no rank %d (the run has %d)", rank, rt->P);
    if (!rt->be->ops->graph_dot)
        return hy_fail(err, HY_ERR_INPUT, "the %s backend records no CUDA graphs to draw",
                       rt->be->ops->name);
    if (!rt->ranks[rank].graph)
        return hy_fail(err, HY_ERR_INPUT, "rank %d has no recorded graph (graph = false, or "
                       "fewer than two steps run)", rank);
    return rt->be->ops->graph_dot(rt->ranks[rank].graph, path, nodes, err);
}

int hy_runtime_slow_stage(hy_runtime *rt, int stage, double seconds, hy_error *err) {
    if (stage < 0 || stage >= rt->S)
        return hy_fail(err, HY_ERR_INPUT, "slow stage %d: the run has stages 0..%d", stage, rt->S - 1);
    if (!(seconds >= 0 && seconds < 60))
        return hy_fail(err, HY_ERR_INPUT, "slow stage delay %g s: must be in [0, 60)", seconds);
    int rc = rt_before_first_step(rt, "a slow stage", err);
    if (rc) return rc;
    rt->slow_stage = stage;
    rt->slow_ns = (uint64_t)(seconds * 1e9);
    return HY_OK;
}

/* Counts the values of x[0..n) that are NaN or infinite. */
static size_t rt_count_nonfinite(const float *x, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += !isfinite(x[i]);
    return bad;
}

int hy_runtime_nonfinite_where(hy_runtime *rt, char *buf, size_t n, hy_error *err) {
    float *host = malloc(hy_model_max_numel(rt->model) * sizeof(float));
    if (!host) return hy_fail(err, HY_ERR_RUNTIME, "out of memory looking for non-finite gradients");
    int last = rt->sched->placement[rt->S - 1], rc;
    float loss = 0;
    rc = rt->be->ops->download(rt->be, last, &loss, rt->ranks[last].work.loss, sizeof loss, err);
    size_t used = 0;
    if (!rc && !isfinite(loss))
        used += (size_t)snprintf(buf, n, "loss %g on rank %d (stage %d)", (double)loss, last, rt->S - 1);
    for (int i = 0; i < rt->model->n_params && !rc && used < n; i++) {
        const hy_param *p = &rt->model->params[i];
        const rt_stage *sg = &rt->stages[p->stage];
        rc = rt->be->ops->download(rt->be, sg->rank, host, sg->grad + p->offset,
                                   p->numel * sizeof(float), err);
        size_t bad = rc ? 0 : rt_count_nonfinite(host, p->numel);
        if (bad)
            used += (size_t)snprintf(buf + used, n - used, "%sgradient of %s: %zu of %zu values on "
                                     "rank %d (stage %d)", used ? "; " : "", p->name, bad, p->numel,
                                     sg->rank, p->stage);
        if (bad) break;   /* the first one found is the place to look */
    }
    free(host);
    if (!rc && used == 0) snprintf(buf, n, "no non-finite value left in the loss or gradients");
    return rc;
}

void hy_runtime_destroy(hy_runtime *rt) {
    if (!rt) return;
    pthread_mutex_lock(&rt->lock);
    rt->quit = 1;
    pthread_cond_broadcast(&rt->cv);
    pthread_mutex_unlock(&rt->lock);
    for (int r = 0; rt->ranks && r < rt->P; r++)
        if (rt->ranks[r].started) pthread_join(rt->ranks[r].thread, NULL);
    if (rt->be) {
        const hy_backend_ops *o = rt->be->ops;
        for (int r = 0; rt->ranks && r < rt->P; r++) {
            o->graph_destroy(rt->ranks[r].graph);
            /* The stream first: draining it may need the reducer's abort
             * (a sum that never ends is released through it). */
            o->stream_destroy(rt->ranks[r].stream);
            if (o->reduce_disconnect && rt->ranks[r].reducer)
                o->reduce_disconnect(rt->be, r, rt->ranks[r].reducer);
        }
        for (int i = 0; rt->norm_ch && i < rt->P * rt->P; i++)
            if (rt->norm_ch[i].full) hy_channel_close(&rt->norm_ch[i], rt->be);
        for (int i = 0; i < 2; i++)
            if (rt->wte_ch[i].full) hy_channel_close(&rt->wte_ch[i], rt->be);
        hy_mailbox_free(&rt->mb);
        o->destroy(rt->be);   /* frees every rank's memory */
    }
    for (int s = 0; rt->stages && s < rt->S; s++) {
        free(rt->stages[s].stash);
        free(rt->stages[s].stash_of);
    }
    for (int r = 0; rt->ranks && r < rt->P; r++) free(rt->ranks[r].reduce_after);
    free(rt->stages);
    free(rt->tf.weights);
    free(rt->tf.grads);
    free(rt->ranks);
    free(rt->norm_ch);
    free(rt->batch_in);
    free(rt->batch_tg);
    if (rt->train_open) hy_dataset_close(&rt->train);
    hy_record_gate_destroy(&rt->recorded);
    pthread_mutex_destroy(&rt->lock);
    pthread_cond_destroy(&rt->cv);
    free(rt);
}
