/*
 * runtime.c — see runtime.h.
 *
 * Memory, per rank: for each stage it holds, the parameter, gradient and
 * AdamW blocks (model.h's stage blocks) and an activation stash of K_s
 * slots, K_s being the most micro-batches the schedule keeps in flight on
 * that stage; for each stage boundary the mailbox slots (the consumer's
 * stash of its stage input, mailbox.h); and per rank one set of scratch
 * buffers for the backward pass, since a rank runs one action at a time.
 * Everything is allocated before the first step; a step allocates nothing.
 */
#include "runtime.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "data.h"
#include "mailbox.h"
#include "model.h"
#include "schedule.h"
#include "weights.h"

/* The activations one layer keeps for its backward, inside a stash slot:
 * activations in the backend's compute type (act_size bytes each, void *),
 * LayerNorm statistics in fp32. */
typedef struct {
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
    void *ln1, *qkv, *att, *atty, *res2, *ln2, *fch, *fchg, *res3;
} rt_layer_acts;

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
    /* scratch, in the compute type */
    void *send, *dres, *dln, *datty, *dqkv, *dfc, *dfcg, *attn_scratch, *logits;
    int *tokens, *targets;         /* [M * N], for ranks holding stage 0 / S-1 */
    float *loss, *clip_factor, *norm;
    double *partials;              /* [P] */
    hy_adamw_hparams *hp;
    /* the replica of wte on the last stage's rank, when it is not rank 0 */
    float *wte, *dwte, *wte_m, *wte_v;
    void *wte_c;                   /* its compute copy */
    /* profiling (hy_runtime_profile): stamps[RT_STAMPS(n_actions)] */
    uint64_t *stamps;
    int status;
    hy_error err;
} rt_rank;

struct hy_runtime {
    const hy_config *cfg;
    hy_schedule sched;
    hy_model model;
    hy_mailbox mb;
    hy_backend *be;
    size_t A;                      /* bytes per activation element (backend's act_size) */
    hy_shard train;                /* opened at the first step: eval needs none */
    int train_open;
    rt_stage *stages;              /* [S] */
    rt_rank *ranks;                /* [P] */
    hy_channel *norm_ch;           /* [P * P]: a -> b at a * P + b */
    hy_channel wte_ch[2];          /* rank 0 -> last rank, last rank -> rank 0 */
    int replica_rank;              /* rank holding the wte replica, or -1 */
    int B, T, C, NH, N, M, V, Vp, S, P;
    int *batch_in, *batch_tg;      /* host staging for one micro-batch [N] */
    /* test and profiling hooks, fixed before the first step */
    int profile;                   /* timestamps around every action */
    int slow_stage;                /* stage whose every action sleeps slow_ns first, or -1 */
    uint64_t slow_ns;
    /* the step handshake between the host and the rank threads */
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int generation, done, quit;
    int eval_count;                /* > 0: the next round is an evaluation of that many batches */
    int step;
};

/* ------------------------------------------------------------------------ */
/* Shapes and stash layout
 *
 * A stash slot is carved into aligned pieces: every piece starts on a
 * 256-byte boundary, so a bf16 array of odd length never misaligns the
 * next one (vector loads on a GPU need 16-byte alignment). */

#define RT_ALIGN 256

static size_t rt_align(size_t bytes) { return (bytes + RT_ALIGN - 1) / RT_ALIGN * RT_ALIGN; }

/* Takes `bytes` from *p (NULL *p: only counts, for sizing). */
static void *rt_carve(unsigned char **p, size_t *used, size_t bytes) {
    void *at = *p ? *p + *used : NULL;
    *used += rt_align(bytes);
    return at;
}

/* The pieces of layer l's activations in a stash slot; with slot NULL only
 * the size comes back (in *used). */
static rt_layer_acts rt_layer_carve(const hy_runtime *rt, unsigned char *base, size_t *used) {
    size_t N = (size_t)rt->N, C = (size_t)rt->C, A = rt->A, f = sizeof(float);
    size_t att = (size_t)rt->B * rt->NH * rt->T * rt->T;
    unsigned char **p = &base;
    rt_layer_acts a;
    a.ln1_mean = rt_carve(p, used, N * f);
    a.ln1_rstd = rt_carve(p, used, N * f);
    a.ln2_mean = rt_carve(p, used, N * f);
    a.ln2_rstd = rt_carve(p, used, N * f);
    a.ln1 = rt_carve(p, used, N * C * A);
    a.qkv = rt_carve(p, used, 3 * N * C * A);
    a.att = rt_carve(p, used, att * A);
    a.atty = rt_carve(p, used, N * C * A);
    a.res2 = rt_carve(p, used, N * C * A);
    a.ln2 = rt_carve(p, used, N * C * A);
    a.fch = rt_carve(p, used, 4 * N * C * A);
    a.fchg = rt_carve(p, used, 4 * N * C * A);
    a.res3 = rt_carve(p, used, N * C * A);
    return a;
}

static size_t rt_layer_bytes(const hy_runtime *rt) {
    size_t used = 0;
    rt_layer_carve(rt, NULL, &used);
    return used;
}

/* The head's pieces on the last stage: ln_f's output, its statistics, and
 * d(ln_f output), which the head's backward leaves for B(m, S-1). */
typedef struct {
    void *out, *dout;
    float *mean, *rstd;
} rt_head_acts;

static size_t rt_stash_bytes(const hy_runtime *rt, int s) {
    size_t NC = (size_t)rt->N * rt->C;
    size_t n = (size_t)rt->model.n_layers[s] * rt_layer_bytes(rt);
    if (s == 0) n += rt_align(NC * rt->A);                     /* the embedding's output */
    if (s == rt->S - 1)
        n += 2 * rt_align(NC * rt->A) + 2 * rt_align((size_t)rt->N * sizeof(float));
    return n;
}

static rt_layer_acts rt_layer(const hy_runtime *rt, void *slot, int l) {
    size_t used = 0;
    return rt_layer_carve(rt, (unsigned char *)slot + (size_t)l * rt_layer_bytes(rt), &used);
}

/* The extras after the layers: the embedding output (stage 0) and the
 * head's activations (last stage). */
static unsigned char *rt_extra(const hy_runtime *rt, int s, void *slot) {
    return (unsigned char *)slot + (size_t)rt->model.n_layers[s] * rt_layer_bytes(rt);
}
static void *rt_encoded(const hy_runtime *rt, void *slot) { return rt_extra(rt, 0, slot); }
static rt_head_acts rt_head_of(const hy_runtime *rt, void *slot) {
    size_t NC = (size_t)rt->N * rt->C, used = 0;
    unsigned char *p = rt_extra(rt, rt->S - 1, slot);
    if (rt->S == 1) p += rt_align(NC * rt->A);   /* after stage 0's embedding output */
    rt_head_acts h;
    h.mean = rt_carve(&p, &used, (size_t)rt->N * sizeof(float));
    h.rstd = rt_carve(&p, &used, (size_t)rt->N * sizeof(float));
    h.out = rt_carve(&p, &used, NC * rt->A);
    h.dout = rt_carve(&p, &used, NC * rt->A);
    return h;
}

/* A parameter as the ops read it (the compute copy), and its gradient. */
static void *rt_param(const hy_runtime *rt, const hy_param *p) {
    return (unsigned char *)rt->stages[p->stage].wc + p->offset * rt->A;
}
static float *rt_grad(const hy_runtime *rt, const hy_param *p) {
    return rt->stages[p->stage].grad + p->offset;
}

/* The parameter of `kind` for global layer l. */
static const hy_param *rt_p(const hy_runtime *rt, hy_param_kind kind, int l) {
    return hy_model_param(&rt->model, kind, l);
}

/* A rank's profile stamps: one at the start of its iteration, four per
 * action (start, input received, computed, sent), three for the tail
 * (tied-embedding exchange, norm and clip, optimizer). */
#define RT_STAMPS(n_actions) (1 + 4 * (size_t)(n_actions) + 3)

/* ------------------------------------------------------------------------ */
/* One iteration of one rank, enqueued on its stream */

typedef struct {
    hy_runtime *rt;
    rt_rank *rk;
    hy_stream *st;
    const hy_backend_ops *o;
    hy_error *err;
} rt_ctx;

/* Bytes of n activations. */
static size_t rt_acts(const hy_runtime *rt, size_t n) { return n * rt->A; }

/* The tied embedding as the last stage sees it. */
static void *rt_head_wte(rt_ctx *x) {
    return x->rk->wte_c ? x->rk->wte_c : rt_param(x->rt, rt_p(x->rt, HY_P_WTE, 0));
}
static float *rt_head_dwte(rt_ctx *x) {
    return x->rk->dwte ? x->rk->dwte : rt_grad(x->rt, rt_p(x->rt, HY_P_WTE, 0));
}

static void *rt_stage_input(rt_ctx *x, int s, int m, void *slot) {
    return s == 0 ? rt_encoded(x->rt, slot) : hy_mailbox_slot(&x->rt->mb.edges[x->rt->mb.into_fwd[s]], m);
}

/* Where stage s writes its output for micro-batch m: straight into the
 * next stage's slot when it is local, else the send buffer; the last
 * stage keeps it in its stash for ln_f. */
static void *rt_stage_output(rt_ctx *x, int s, int m, void *slot) {
    hy_runtime *rt = x->rt;
    int L = rt->model.n_layers[s];
    if (s == rt->S - 1) return L > 0 ? rt_layer(rt, slot, L - 1).res3 : rt_stage_input(x, s, m, slot);
    const hy_edge *e = &rt->mb.edges[rt->mb.into_fwd[s + 1]];
    return e->local ? hy_mailbox_slot(e, m) : x->rk->send;
}

/* Profile stamp k of this rank's iteration (nothing unless profiling). */
static int rt_stamp(rt_ctx *x, size_t k) {
    if (!x->rt->profile) return HY_OK;
    return x->o->timestamp(x->st, &x->rk->stamps[k], x->err);
}

static int rt_layer_forward(rt_ctx *x, int l, const void *in, const rt_layer_acts *a, void *out) {
    hy_runtime *rt = x->rt;
    const hy_backend_ops *o = x->o;
    int N = rt->N, C = rt->C, rc;
    const void *ln1w = rt_param(rt, rt_p(rt, HY_P_LN1_W, l)), *ln1b = rt_param(rt, rt_p(rt, HY_P_LN1_B, l));
    rc = o->layernorm_fwd(x->st, a->ln1, a->ln1_mean, a->ln1_rstd, in, ln1w, ln1b, N, C, x->err);
    if (!rc) rc = o->matmul_fwd(x->st, a->qkv, a->ln1, rt_param(rt, rt_p(rt, HY_P_QKV_W, l)),
                                rt_param(rt, rt_p(rt, HY_P_QKV_B, l)), N, C, 3 * C, x->err);
    if (!rc) rc = o->attention_fwd(x->st, a->atty, a->att, a->qkv, rt->B, rt->T, C, rt->NH,
                                   rt->model.kind == HY_MODEL_GPT, x->err);
    if (!rc) rc = o->matmul_fwd(x->st, a->res2, a->atty, rt_param(rt, rt_p(rt, HY_P_ATTN_PROJ_W, l)),
                                rt_param(rt, rt_p(rt, HY_P_ATTN_PROJ_B, l)), N, C, C, x->err);
    if (!rc) rc = o->add(x->st, a->res2, in, (size_t)N * C, x->err);
    if (!rc) rc = o->layernorm_fwd(x->st, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2,
                                   rt_param(rt, rt_p(rt, HY_P_LN2_W, l)),
                                   rt_param(rt, rt_p(rt, HY_P_LN2_B, l)), N, C, x->err);
    if (!rc) rc = o->matmul_fwd(x->st, a->fch, a->ln2, rt_param(rt, rt_p(rt, HY_P_FC_W, l)),
                                rt_param(rt, rt_p(rt, HY_P_FC_B, l)), N, C, 4 * C, x->err);
    if (!rc) rc = o->gelu_fwd(x->st, a->fchg, a->fch, (size_t)N * 4 * C, x->err);
    if (!rc) rc = o->matmul_fwd(x->st, out, a->fchg, rt_param(rt, rt_p(rt, HY_P_MLP_PROJ_W, l)),
                                rt_param(rt, rt_p(rt, HY_P_MLP_PROJ_B, l)), N, 4 * C, C, x->err);
    if (!rc) rc = o->add(x->st, out, a->res2, (size_t)N * C, x->err);
    return rc;
}

/* dres holds d(layer output) and becomes d(layer input): each branch's
 * backward adds its part into it (the ops accumulate). */
static int rt_layer_backward(rt_ctx *x, int l, const void *in, const rt_layer_acts *a) {
    hy_runtime *rt = x->rt;
    rt_rank *rk = x->rk;
    const hy_backend_ops *o = x->o;
    hy_stream *st = x->st;
    int N = rt->N, C = rt->C, rc;
    size_t NC = (size_t)N * C;
    const hy_param *pmp = rt_p(rt, HY_P_MLP_PROJ_W, l), *pfc = rt_p(rt, HY_P_FC_W, l);
    const hy_param *pap = rt_p(rt, HY_P_ATTN_PROJ_W, l), *pqkv = rt_p(rt, HY_P_QKV_W, l);
    const hy_param *pln2 = rt_p(rt, HY_P_LN2_W, l), *pln1 = rt_p(rt, HY_P_LN1_W, l);
    rc = o->zero(st, rk->dfcg, rt_acts(rt, 4 * NC), x->err);
    if (!rc) rc = o->matmul_bwd(st, rk->dfcg, rt_grad(rt, pmp), rt_grad(rt, pmp + 1), rk->dres,
                                a->fchg, rt_param(rt, pmp), N, 4 * C, C, x->err);
    if (!rc) rc = o->zero(st, rk->dfc, rt_acts(rt, 4 * NC), x->err);
    if (!rc) rc = o->gelu_bwd(st, rk->dfc, rk->dfcg, a->fch, 4 * NC, x->err);
    if (!rc) rc = o->zero(st, rk->dln, rt_acts(rt, NC), x->err);
    if (!rc) rc = o->matmul_bwd(st, rk->dln, rt_grad(rt, pfc), rt_grad(rt, pfc + 1), rk->dfc,
                                a->ln2, rt_param(rt, pfc), N, C, 4 * C, x->err);
    if (!rc) rc = o->layernorm_bwd(st, rk->dres, rt_grad(rt, pln2), rt_grad(rt, pln2 + 1), rk->dln,
                                   a->res2, rt_param(rt, pln2), a->ln2_mean, a->ln2_rstd, N, C,
                                   x->err);
    if (!rc) rc = o->zero(st, rk->datty, rt_acts(rt, NC), x->err);
    if (!rc) rc = o->matmul_bwd(st, rk->datty, rt_grad(rt, pap), rt_grad(rt, pap + 1), rk->dres,
                                a->atty, rt_param(rt, pap), N, C, C, x->err);
    if (!rc) rc = o->zero(st, rk->dqkv, rt_acts(rt, 3 * NC), x->err);
    if (!rc) rc = o->attention_bwd(st, rk->dqkv, rk->attn_scratch, rk->datty, a->qkv, a->att,
                                   rt->B, rt->T, C, rt->NH, x->err);
    if (!rc) rc = o->zero(st, rk->dln, rt_acts(rt, NC), x->err);
    if (!rc) rc = o->matmul_bwd(st, rk->dln, rt_grad(rt, pqkv), rt_grad(rt, pqkv + 1), rk->dqkv,
                                a->ln1, rt_param(rt, pqkv), N, C, 3 * C, x->err);
    if (!rc) rc = o->layernorm_bwd(st, rk->dres, rt_grad(rt, pln1), rt_grad(rt, pln1 + 1), rk->dln,
                                   in, rt_param(rt, pln1), a->ln1_mean, a->ln1_rstd, N, C, x->err);
    return rc;
}

/* The last stage's head, run inside its forward: ln_f, logits, the fused
 * loss and d(logits), and the head's backward down to d(ln_f out), so the
 * logits never need stashing (llm.c does the same). */
static int rt_head(rt_ctx *x, int m, const void *h, void *slot, int train) {
    hy_runtime *rt = x->rt;
    rt_rank *rk = x->rk;
    const hy_backend_ops *o = x->o;
    int N = rt->N, C = rt->C, rc;
    rt_head_acts ha = rt_head_of(rt, slot);
    const hy_param *pw = rt_p(rt, HY_P_LNF_W, 0);
    rc = o->layernorm_fwd(x->st, ha.out, ha.mean, ha.rstd, h, rt_param(rt, pw), rt_param(rt, pw + 1),
                          N, C, x->err);
    if (!rc) rc = o->lm_head_fwd(x->st, rk->logits, ha.out, rt_head_wte(x), N, C, rt->Vp, x->err);
    if (!rc) rc = o->classifier(x->st, rk->logits, rk->loss, rk->targets + (size_t)m * N, N, rt->V,
                                rt->Vp, 1.0f / rt->M, train ? 1.0f / rt->M : 1.0f, x->err);
    if (!train) return rc;
    if (!rc) rc = o->zero(x->st, ha.dout, rt_acts(rt, (size_t)N * C), x->err);
    if (!rc) rc = o->lm_head_bwd(x->st, ha.dout, rt_head_dwte(x), rk->logits, ha.out, rt_head_wte(x),
                                 N, C, rt->Vp, x->err);
    return rc;
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
    void *slot = sg->stash[sg->stash_of[m]];
    size_t at = 1 + 4 * (size_t)k;
    if (k >= 0) rc = rt_stamp(x, at);
    if (!rc && s == rt->slow_stage) rc = x->o->sleep(x->st, rt->slow_ns, x->err);
    if (rc) return rc;
    if (s == 0) {
        const hy_param *wte = rt_p(rt, HY_P_WTE, 0), *wpe = rt_p(rt, HY_P_WPE, 0);
        rc = x->o->embedding_fwd(x->st, rt_encoded(rt, slot), x->rk->tokens + (size_t)m * N,
                                 rt_param(rt, wte), rt_param(rt, wpe), rt->B, rt->T, rt->C, x->err);
    } else {
        rc = hy_mailbox_receive(x->st, &mb->edges[mb->into_fwd[s]], m, label, x->err);
    }
    if (!rc && k >= 0) rc = rt_stamp(x, at + 1);
    const void *in = rt_stage_input(x, s, m, slot);
    void *out = rt_stage_output(x, s, m, slot);
    int L = rt->model.n_layers[s], first = rt->model.first_layer[s];
    for (int l = 0; l < L && !rc; l++) {
        rt_layer_acts acts = rt_layer(rt, slot, l);
        const void *lin = l == 0 ? in : rt_layer(rt, slot, l - 1).res3;
        rc = rt_layer_forward(x, first + l, lin, &acts, l == L - 1 ? out : acts.res3);
    }
    if (!rc && L == 0 && out != in) rc = x->o->copy(x->st, out, in, rt_acts(rt, (size_t)N * rt->C), x->err);
    if (!rc && s == rt->S - 1) rc = rt_head(x, m, out, slot, train);
    if (!rc && k >= 0) rc = rt_stamp(x, at + 2);
    if (!rc && s < rt->S - 1)
        rc = hy_mailbox_send(x->st, &mb->edges[mb->into_fwd[s + 1]], m, out, label, x->err);
    if (!rc && !train && s > 0) rc = hy_mailbox_release(x->st, &mb->edges[mb->into_fwd[s]], m, x->err);
    if (!rc && k >= 0) rc = rt_stamp(x, at + 3);
    return rc;
}

static int rt_backward(rt_ctx *x, const hy_action *a, const char *label, int k) {
    hy_runtime *rt = x->rt;
    const hy_mailbox *mb = &rt->mb;
    rt_rank *rk = x->rk;
    int s = a->stage, m = a->mb, N = rt->N, C = rt->C, rc;
    size_t NC = (size_t)N * C, at = 1 + 4 * (size_t)k;
    rt_stage *sg = &rt->stages[s];
    void *slot = sg->stash[sg->stash_of[m]];
    const void *in = rt_stage_input(x, s, m, slot);
    int L = rt->model.n_layers[s], first = rt->model.first_layer[s];
    rc = rt_stamp(x, at);
    if (!rc && s == rt->slow_stage) rc = x->o->sleep(x->st, rt->slow_ns, x->err);
    if (rc) return rc;
    if (s == rt->S - 1) {
        /* d(last layer output) from the head's d(ln_f out). */
        rt_head_acts ha = rt_head_of(rt, slot);
        const void *h = L > 0 ? rt_layer(rt, slot, L - 1).res3 : in;
        const hy_param *pw = rt_p(rt, HY_P_LNF_W, 0);
        rc = x->o->zero(x->st, rk->dres, rt_acts(rt, NC), x->err);
        if (!rc) rc = rt_stamp(x, at + 1);
        if (!rc) rc = x->o->layernorm_bwd(x->st, rk->dres, rt_grad(rt, pw), rt_grad(rt, pw + 1),
                                          ha.dout, h, rt_param(rt, pw), ha.mean, ha.rstd, N, C, x->err);
    } else {
        const hy_edge *e = &mb->edges[mb->into_bwd[s]];
        rc = hy_mailbox_receive(x->st, e, m, label, x->err);
        if (!rc) rc = rt_stamp(x, at + 1);
        if (!rc) rc = x->o->copy(x->st, rk->dres, hy_mailbox_slot(e, m), rt_acts(rt, NC), x->err);
    }
    for (int l = L - 1; l >= 0 && !rc; l--) {
        rt_layer_acts acts = rt_layer(rt, slot, l);
        const void *lin = l == 0 ? in : rt_layer(rt, slot, l - 1).res3;
        rc = rt_layer_backward(x, first + l, lin, &acts);
    }
    if (rc) return rc;
    if (s == 0) {
        const hy_param *wte = rt_p(rt, HY_P_WTE, 0), *wpe = rt_p(rt, HY_P_WPE, 0);
        rc = x->o->embedding_bwd(x->st, rt_grad(rt, wte), rt_grad(rt, wpe), rk->dres,
                                 rk->tokens + (size_t)m * N, rt->B, rt->T, C, x->err);
        if (!rc) rc = rt_stamp(x, at + 2);
    } else {
        rc = rt_stamp(x, at + 2);
        if (!rc) rc = hy_mailbox_send(x->st, &mb->edges[mb->into_bwd[s - 1]], m, rk->dres, label, x->err);
    }
    /* The stage input (a stash) and the incoming gradient are done with. */
    if (!rc && s > 0) rc = hy_mailbox_release(x->st, &mb->edges[mb->into_fwd[s]], m, x->err);
    if (!rc && s < rt->S - 1) rc = hy_mailbox_release(x->st, &mb->edges[mb->into_bwd[s]], m, x->err);
    if (!rc) rc = rt_stamp(x, at + 3);
    return rc;
}

/* The tied embedding: rank 0 and the replica's rank swap their gradients
 * and each adds the other's, so both hold the same sum (a + b == b + a in
 * floating point) and take the same AdamW step. */
static int rt_exchange_wte(rt_ctx *x) {
    hy_runtime *rt = x->rt;
    size_t n = rt_p(rt, HY_P_WTE, 0)->numel;
    int me = x->rk->rank, rc;
    if (rt->replica_rank < 0 || (me != 0 && me != rt->replica_rank)) return HY_OK;
    const hy_channel *out = &rt->wte_ch[me == 0 ? 0 : 1], *in = &rt->wte_ch[me == 0 ? 1 : 0];
    float *mine = me == 0 ? rt_grad(rt, rt_p(rt, HY_P_WTE, 0)) : x->rk->dwte;
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
            rc = x->o->sumsq(x->st, &rk->partials[me], rt->stages[s].grad, rt->model.stage_numel[s],
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
                             (float)rt->cfg->train.grad_clip, x->err);
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
        for (int i = 0; i < rt->model.n_params && !rc; i++) {
            const hy_param *p = &rt->model.params[i];
            if (p->stage != s) continue;
            rc = x->o->adamw(x->st, sg->param + p->offset,
                             rt_compute_of(rt, (unsigned char *)sg->wc + p->offset * rt->A),
                             sg->grad + p->offset, sg->m + p->offset, sg->v + p->offset, p->numel,
                             rk->hp, rk->clip_factor, p->decay, x->err);
        }
    }
    if (!rc && rk->wte) {
        const hy_param *p = rt_p(rt, HY_P_WTE, 0);
        rc = x->o->adamw(x->st, rk->wte, rt_compute_of(rt, rk->wte_c), rk->dwte, rk->wte_m,
                         rk->wte_v, p->numel, rk->hp, rk->clip_factor, p->decay, x->err);
    }
    return rc;
}

static int rt_iteration(rt_ctx *x) {
    hy_runtime *rt = x->rt;
    rt_rank *rk = x->rk;
    int me = rk->rank, rc = rt_stamp(x, 0);
    for (int s = 0; s < rt->S && !rc; s++)
        if (rt->stages[s].rank == me)
            rc = x->o->zero(x->st, rt->stages[s].grad, rt->model.stage_numel[s] * sizeof(float), x->err);
    if (!rc && rk->dwte)
        rc = x->o->zero(x->st, rk->dwte, rt_p(rt, HY_P_WTE, 0)->numel * sizeof(float), x->err);
    if (!rc && rk->loss) rc = x->o->zero(x->st, rk->loss, sizeof(float), x->err);
    const hy_schedule *sc = &rt->sched;
    int n = sc->n_actions[me];
    for (int i = 0; i < n && !rc; i++) {
        const hy_action *a = &sc->actions[me][i];
        char label[48];
        hy_action_label(a, label, sizeof label);
        rc = a->op == HY_FWD ? rt_forward(x, a, label, 1, i) : rt_backward(x, a, label, i);
        if (rc) hy_error_prefix(x->err, "rank %d, %s: ", me, label);
    }
    size_t tail = 1 + 4 * (size_t)n;
    if (!rc) rc = rt_exchange_wte(x);
    if (!rc) rc = rt_stamp(x, tail);
    if (!rc) rc = rt_clip(x);
    if (!rc) rc = rt_stamp(x, tail + 1);
    if (!rc) rc = rt_optimize(x);
    if (!rc) rc = rt_stamp(x, tail + 2);
    return rc;
}

/* Evaluation: each rank runs the forwards of its stages, micro-batch by
 * micro-batch in stage order. (m, s) ascending is a topological order of
 * the forwards, so this cannot deadlock, and a local edge's slot is read
 * right after it is written. */
static int rt_eval_iteration(rt_ctx *x, int count) {
    hy_runtime *rt = x->rt;
    int me = x->rk->rank, rc = HY_OK;
    if (x->rk->loss) rc = x->o->zero(x->st, x->rk->loss, sizeof(float), x->err);
    for (int m = 0; m < count && !rc; m++) {
        for (int s = 0; s < rt->S && !rc; s++) {
            if (rt->sched.placement[s] != me) continue;
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

static int rt_run_iteration(hy_runtime *rt, rt_rank *rk, int eval_count) {
    rt_ctx x = { rt, rk, rk->stream, rt->be->ops, &rk->err };
    const hy_backend_ops *o = rt->be->ops;
    int rc;
    if (eval_count > 0) {
        rc = rt_eval_iteration(&x, eval_count);
        if (!rc) rc = o->sync(rk->stream, &rk->err);
        return rc;
    }
    if (!rt->cfg->graph || rk->iterations == 0) {
        rc = rt_iteration(&x);                  /* eager (and the warm-up) */
    } else {
        rc = HY_OK;
        if (!rk->graph) {                       /* record once, then replay */
            rc = o->capture_begin(rk->stream, &rk->err);
            if (!rc) rc = rt_iteration(&x);
            int end = o->capture_end(rk->stream, &rk->graph, rc ? NULL : &rk->err);
            if (!rc) rc = end;
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
 * its forward and gives it back after its backward, in the rank's order. */
static int rt_plan_stashes(hy_runtime *rt, hy_error *err) {
    const hy_schedule *sc = &rt->sched;
    int M = rt->M;
    for (int s = 0; s < rt->S; s++) {
        rt->stages[s].rank = sc->placement[s];
        rt->stages[s].stash_of = malloc(sizeof(int) * (size_t)M);
        if (!rt->stages[s].stash_of) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    }
    char *busy = calloc((size_t)M, 1);
    if (!busy) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
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
                    busy[*k] = 1;
                    if (*k + 1 > used) used = *k + 1;
                } else {
                    busy[*k] = 0;
                }
            }
            rt->stages[s].slots = used;
        }
    }
    free(busy);
    return HY_OK;
}

static int rt_alloc_rank(hy_runtime *rt, rt_rank *rk, hy_error *err) {
    int r = rk->rank, rc;
    size_t f = sizeof(float), N = (size_t)rt->N, C = (size_t)rt->C, M = (size_t)rt->M;
    size_t NC = N * C, A = rt->A;
    size_t attn = rt->be->ops->attention_scratch(rt->B, rt->T, rt->C, rt->NH);
    rc = rt_alloc(rt, r, NC * A, &rk->send, err);
    if (!rc) rc = rt_alloc(rt, r, NC * A, &rk->dres, err);
    if (!rc) rc = rt_alloc(rt, r, NC * A, &rk->dln, err);
    if (!rc) rc = rt_alloc(rt, r, NC * A, &rk->datty, err);
    if (!rc) rc = rt_alloc(rt, r, 3 * NC * A, &rk->dqkv, err);
    if (!rc) rc = rt_alloc(rt, r, 4 * NC * A, &rk->dfc, err);
    if (!rc) rc = rt_alloc(rt, r, 4 * NC * A, &rk->dfcg, err);
    if (!rc) rc = rt_alloc(rt, r, attn, &rk->attn_scratch, err);
    if (!rc) rc = rt_alloc(rt, r, sizeof(double) * (size_t)rt->P, &rk->partials, err);
    if (!rc) rc = rt_alloc(rt, r, 2 * f, &rk->clip_factor, err);
    if (!rc) rk->norm = rk->clip_factor + 1;
    if (!rc) rc = rt_alloc(rt, r, sizeof(hy_adamw_hparams), &rk->hp, err);
    if (!rc) rc = rt_alloc(rt, r, RT_STAMPS(rt->sched.n_actions[r]) * sizeof(uint64_t), &rk->stamps, err);
    if (!rc && rt->sched.placement[0] == r) rc = rt_alloc(rt, r, M * N * sizeof(int), &rk->tokens, err);
    if (!rc && rt->sched.placement[rt->S - 1] == r) {
        rc = rt_alloc(rt, r, M * N * sizeof(int), &rk->targets, err);
        if (!rc) rc = rt_alloc(rt, r, N * (size_t)rt->Vp * A, &rk->logits, err);
        if (!rc) rc = rt_alloc(rt, r, f, &rk->loss, err);
    }
    if (!rc && r == rt->replica_rank) {
        size_t n = rt_p(rt, HY_P_WTE, 0)->numel;
        rc = rt_alloc(rt, r, n * f, &rk->wte, err);
        if (!rc) rc = rt_alloc(rt, r, n * f, &rk->dwte, err);
        if (!rc) rc = rt_alloc(rt, r, n * f, &rk->wte_m, err);
        if (!rc) rc = rt_alloc(rt, r, n * f, &rk->wte_v, err);
        if (!rc && A != f) rc = rt_alloc(rt, r, n * A, &rk->wte_c, err);
        else if (!rc) rk->wte_c = rk->wte;
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
    int rc = o->to_act(st, sg->wc, sg->param, rt->model.stage_numel[s], err);
    if (!rc) rc = o->sync(st, err);
    if (!rc && s == 0 && rt->replica_rank >= 0) {
        rt_rank *rk = &rt->ranks[rt->replica_rank];
        rc = o->to_act(rk->stream, rk->wte_c, rk->wte, rt_p(rt, HY_P_WTE, 0)->numel, err);
        if (!rc) rc = o->sync(rk->stream, err);
    }
    return rc;
}

static int rt_init_params(hy_runtime *rt, hy_error *err) {
    for (int s = 0; s < rt->S; s++) {
        rt_stage *sg = &rt->stages[s];
        size_t n = rt->model.stage_numel[s];
        float *host = malloc((n ? n : 1) * sizeof(float));
        if (!host) return hy_fail(err, HY_ERR_RUNTIME, "out of memory initializing stage %d", s);
        hy_model_init_stage(&rt->model, s, rt->cfg->train.seed, host);
        int rc = rt->be->ops->upload(rt->be, sg->rank, sg->param, host, n * sizeof(float), err);
        if (!rc && s == 0 && rt->replica_rank >= 0) {
            const hy_param *p = rt_p(rt, HY_P_WTE, 0);
            rc = rt->be->ops->upload(rt->be, rt->replica_rank, rt->ranks[rt->replica_rank].wte,
                                     host + p->offset, p->numel * sizeof(float), err);
        }
        free(host);
        if (!rc) rc = rt_refresh_compute(rt, s, err);
        if (rc) return rc;
    }
    return HY_OK;
}

static int rt_build(hy_runtime *rt, hy_error *err) {
    const hy_config *c = rt->cfg;
    hy_sched_params sp;
    hy_sched_params_from_config(c, &sp);
    int rc = hy_schedule_build(&rt->sched, &sp, err);
    if (!rc) rc = hy_model_build(&rt->model, c, 1, err);
    if (rc) return rc;
    rt->B = c->schedule.micro_batch_size;
    rt->T = c->model.seq_len;
    rt->C = c->model.d_model;
    rt->NH = c->model.heads;
    rt->N = rt->B * rt->T;
    rt->M = c->schedule.micro_batches;
    rt->V = rt->model.vocab;
    rt->Vp = rt->model.vocab_padded;
    rt->S = rt->sched.stages;
    rt->P = rt->sched.ranks;
    rt->slow_stage = -1;
    int last = rt->sched.placement[rt->S - 1];
    rt->replica_rank = last != rt->sched.placement[0] ? last : -1;

    hy_backend_request brq;
    hy_backend_request_from_config(c, &brq);
    rc = hy_backend_open(&brq, &rt->be, NULL, err);
    if (rc) return rc;
    rt->A = rt->be->ops->act_size;
    rc = hy_mailbox_plan(&rt->mb, &rt->sched, err);
    if (!rc) rc = hy_mailbox_alloc(&rt->mb, rt->be, (size_t)rt->N * rt->C * rt->A, err);
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
        size_t numel = rt->model.stage_numel[s], n = numel * sizeof(float);
        rc = rt_alloc(rt, sg->rank, n, &sg->param, err);
        if (!rc) rc = rt_alloc(rt, sg->rank, n, &sg->grad, err);
        if (!rc) rc = rt_alloc(rt, sg->rank, n, &sg->m, err);
        if (!rc) rc = rt_alloc(rt, sg->rank, n, &sg->v, err);
        if (!rc && rt->A != sizeof(float)) rc = rt_alloc(rt, sg->rank, numel * rt->A, &sg->wc, err);
        else if (!rc) sg->wc = sg->param;
        if (!rc) {
            sg->stash = calloc((size_t)sg->slots + 1, sizeof(void *));
            if (!sg->stash) rc = hy_fail(err, HY_ERR_RUNTIME, "out of memory");
        }
        for (int k = 0; k < sg->slots && !rc; k++)
            rc = rt_alloc(rt, sg->rank, rt_stash_bytes(rt, s), &sg->stash[k], err);
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
        size_t n = rt_p(rt, HY_P_WTE, 0)->numel * sizeof(float);
        rc = hy_channel_open(&rt->wte_ch[0], rt->be, 0, rt->replica_rank, n, err);
        if (!rc) rc = hy_channel_open(&rt->wte_ch[1], rt->be, rt->replica_rank, 0, n, err);
    }
    for (int r = 0; r < rt->P && !rc; r++)
        rc = rt->be->ops->stream_create(rt->be, r, &rt->ranks[r].stream, err);
    if (!rc) rc = rt_init_params(rt, err);
    if (!rc && c->init) rc = hy_weights_load(rt, c->init, err);
    return rc;
}

int hy_runtime_create(hy_runtime **out, const hy_config *c, hy_error *err) {
    *out = NULL;
    hy_runtime *rt = calloc(1, sizeof *rt);
    if (!rt) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    rt->cfg = c;
    pthread_mutex_init(&rt->lock, NULL);
    pthread_cond_init(&rt->cv, NULL);
    int rc = rt_build(rt, err);
    for (int r = 0; r < rt->P && !rc; r++) {
        if (pthread_create(&rt->ranks[r].thread, NULL, rt_rank_main, &rt->ranks[r]) != 0)
            rc = hy_fail(err, HY_ERR_RUNTIME, "could not start the thread of rank %d", r);
        else
            rt->ranks[r].started = 1;
    }
    if (rc) {
        hy_runtime_destroy(rt);
        return rc;
    }
    *out = rt;
    return HY_OK;
}

/* ------------------------------------------------------------------------ */
/* Steps */

static int rt_load_batches(hy_runtime *rt, hy_shard *sh, int count, hy_error *err) {
    const hy_backend_ops *o = rt->be->ops;
    size_t N = (size_t)rt->N;
    int first = rt->sched.placement[0], last = rt->sched.placement[rt->S - 1];
    for (int m = 0; m < count; m++) {
        int rc = hy_batch_next(sh, rt->B, rt->T, rt->batch_in, rt->batch_tg, err);
        if (rc) return rc;
        if (rt->model.kind == HY_MODEL_BERT)
            hy_mask_tokens(rt->batch_in, rt->batch_tg, rt->N, rt->V, rt->cfg->train.seed, rt->step,
                           rt->M, m);
        rc = o->upload(rt->be, first, rt->ranks[first].tokens + m * N, rt->batch_in, N * sizeof(int), err);
        if (!rc) rc = o->upload(rt->be, last, rt->ranks[last].targets + m * N, rt->batch_tg,
                                N * sizeof(int), err);
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

/* The training shard, opened at first use: evaluation needs none. */
static int rt_open_train(hy_runtime *rt, hy_error *err) {
    if (rt->train_open) return HY_OK;
    int rc = hy_shard_open(&rt->train, rt->cfg->data.train, rt->V, err);
    if (rc) return rc;
    /* A shard too short for one batch is refused now, not at the first
     * step: the trial read says so in the data module's words. */
    size_t pos = 0;
    rc = hy_batch_read(&rt->train, &pos, rt->B, rt->T, NULL, NULL, err);
    if (rc) {
        hy_shard_close(&rt->train);
        return rc;
    }
    rt->train_open = 1;
    return HY_OK;
}

int hy_runtime_step(hy_runtime *rt, double lr, hy_step_stats *st, hy_error *err) {
    const hy_backend_ops *o = rt->be->ops;
    double t0 = rt_now();
    rt->step++;
    hy_adamw_hparams hp = { (float)lr, (float)rt->cfg->train.beta1, (float)rt->cfg->train.beta2,
                            (float)rt->cfg->train.eps, (float)rt->cfg->train.weight_decay, rt->step };
    int rc = rt_open_train(rt, err);
    if (!rc) rc = rt_load_batches(rt, &rt->train, rt->M, err);
    for (int r = 0; r < rt->P && !rc; r++)
        rc = o->upload(rt->be, r, rt->ranks[r].hp, &hp, sizeof hp, err);
    if (rc) return rc;

    rc = rt_round(rt, 0, err);
    if (rc) return rc;

    int last = rt->sched.placement[rt->S - 1];
    float loss = 0, norm = 0;
    rc = o->download(rt->be, last, &loss, rt->ranks[last].loss, sizeof loss, err);
    if (!rc) rc = o->download(rt->be, 0, &norm, rt->ranks[0].norm, sizeof norm, err);
    if (rc) return rc;
    st->step = rt->step;
    st->loss = loss;
    st->grad_norm = norm;
    st->nonfinite = !isfinite(loss) || !isfinite(norm);
    st->updated = isfinite(norm);
    st->lr = lr;
    st->ms = (rt_now() - t0) * 1e3;
    st->tokens = (double)rt->M * rt->N;
    return HY_OK;
}

int hy_runtime_eval(hy_runtime *rt, const char *shard, int batches, double *loss, double *tokens,
                    hy_error *err) {
    hy_shard sh;
    int rc = hy_shard_open(&sh, shard, rt->V, err);
    if (rc) return rc;
    int last = rt->sched.placement[rt->S - 1];
    double sum = 0;
    for (int done = 0; done < batches && !rc;) {
        int count = batches - done < rt->M ? batches - done : rt->M;
        rc = rt_load_batches(rt, &sh, count, err);
        if (!rc) rc = rt_round(rt, count, err);
        float part = 0;
        if (!rc) rc = rt->be->ops->download(rt->be, last, &part, rt->ranks[last].loss, sizeof part, err);
        sum += part;
        done += count;
    }
    hy_shard_close(&sh);
    if (rc) return rc;
    *loss = sum / batches;
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

const hy_model *hy_runtime_model(const hy_runtime *rt) { return &rt->model; }

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
    const hy_param *p = hy_model_find(&rt->model, name);
    if (!p) {
        hy_fail(err, HY_ERR_INPUT, "no parameter named '%s'", name);
        return NULL;
    }
    size_t have = hy_model_real_numel(&rt->model, p);
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
    *data_pos = hy_shard_pos(&rt->train);
    return HY_OK;
}

int hy_runtime_set_progress(hy_runtime *rt, int step, size_t data_pos, hy_error *err) {
    int rc = rt_open_train(rt, err);
    if (!rc) rc = hy_shard_set_pos(&rt->train, data_pos, err);
    if (!rc) rt->step = step;
    return rc;
}

struct hy_backend *hy_runtime_backend(hy_runtime *rt) { return rt->be; }

const hy_schedule *hy_runtime_schedule(const hy_runtime *rt) { return &rt->sched; }

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
    return rank < 0 || rank >= rt->P ? 0 : RT_STAMPS(rt->sched.n_actions[rank]);
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
    float *host = malloc(hy_model_max_numel(&rt->model) * sizeof(float));
    if (!host) return hy_fail(err, HY_ERR_RUNTIME, "out of memory looking for non-finite gradients");
    int last = rt->sched.placement[rt->S - 1], rc;
    float loss = 0;
    rc = rt->be->ops->download(rt->be, last, &loss, rt->ranks[last].loss, sizeof loss, err);
    size_t used = 0;
    if (!rc && !isfinite(loss))
        used += (size_t)snprintf(buf, n, "loss %g on rank %d (stage %d)", (double)loss, last, rt->S - 1);
    for (int i = 0; i < rt->model.n_params && !rc && used < n; i++) {
        const hy_param *p = &rt->model.params[i];
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
            o->stream_destroy(rt->ranks[r].stream);
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
    free(rt->stages);
    free(rt->ranks);
    free(rt->norm_ch);
    free(rt->batch_in);
    free(rt->batch_tg);
    if (rt->train_open) hy_shard_close(&rt->train);
    hy_model_free(&rt->model);
    hy_schedule_free(&rt->sched);
    pthread_mutex_destroy(&rt->lock);
    pthread_cond_destroy(&rt->cv);
    free(rt);
}
