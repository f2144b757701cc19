/*
 * transformer.c — see transformer.h.
 *
 * A stash slot of stage s holds, in this order: each of its blocks'
 * activations (tf_layer_acts: all, all but the norm and MLP-activation
 * outputs under selective recompute, none under full; with split backward
 * the gradients B keeps for W too), then on stage 0 the embedding's
 * output (split: and d of it), then on the last stage the head's
 * activations (tf_head_acts). What a slot does not keep lives in the rank's working
 * buffers (hy_stage_work), which tf_layer points the pieces at. Every
 * piece starts on a 256-byte boundary, so a bf16 array of odd length never
 * misaligns the next one (vector loads on a GPU need 16-byte alignment).
 */
#include "transformer.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* The activations one block keeps for its backward: activations in the
 * backend's compute type (act_size bytes each, void *), norm statistics in
 * fp32 (RMSNorm has no mean: Llama's means are NULL). In a Llama block
 * ln1/ln2 are the RMSNorms' outputs, qkv is after RoPE, fch is gate|up
 * before SwiGLU and fchg after it. */
typedef struct {
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd;
    float *lse;   /* the attention's per-row log-sum-exps (backend.h), [B, NH, T] */
    void *ln1, *qkv, *atty, *res2, *ln2, *fch, *fchg, *res3;
    /* Split backward: d of what each product and LayerNorm gave out, kept
     * by B for W (NULL unsplit): the MLP's projection (dproj), its fc
     * before GELU (dfc), ln_2 (dln2), the attention's projection (dattn),
     * qkv (dqkv) and ln_1 (dln1). */
    void *dproj, *dfc, *dln2, *dattn, *dqkv, *dln1;
} tf_layer_acts;

/* The head's pieces on the last stage: ln_f's output, its statistics, and
 * d(ln_f output), which the head's backward in the forward leaves for the
 * stage's backward. */
typedef struct {
    void *out, *dout;
    float *mean, *rstd;
    /* Post-LN BERT's MLM head, z = LN(gelu(dense(y))): out is z, dout
     * d(y) (its whole backward runs in the forward), pre the dense's
     * output, g the GELU's; dz and dd, d(z) and d(pre), which a split W
     * reads. NULL for other models. */
    void *pre, *g, *dz, *dd;
} tf_head_acts;

/* Post-LN BERT's part of stage 0's slot: the embeddings' sum before
 * their LayerNorm, its statistics, and room for d(sum) in the backward. */
typedef struct {
    void *sum, *dsum;
    float *mean, *rstd;
} tf_embed_acts;

/* ------------------------------------------------------------------------ */
/* Shapes and stash layout */

#define TF_ALIGN 256

static size_t tf_align(size_t bytes) { return (bytes + TF_ALIGN - 1) / TF_ALIGN * TF_ALIGN; }

static size_t tf_N(const hy_transformer *t) { return (size_t)t->B * t->T; }
static size_t tf_C(const hy_transformer *t) { return (size_t)t->model->d_model; }

/* Bytes of n activations. */
static size_t tf_acts(const hy_transformer *t, size_t n) { return n * t->act_size; }

/* Takes `bytes` from *p (NULL *p: only counts, for sizing). */
static void *tf_carve(unsigned char **p, size_t *used, size_t bytes) {
    void *at = *p ? *p + *used : NULL;
    *used += tf_align(bytes);
    return at;
}

/* What a block's part of a slot holds: every activation (none, and full
 * recompute's working slot), all but the norm outputs and the MLP's
 * activation output (selective: GELU's, or a Llama's SwiGLU's), or none
 * of them (a full-recompute stash slot). */
typedef enum { TF_KEEP_ALL, TF_KEEP_SELECTIVE, TF_KEEP_NOTHING } tf_keep;

static tf_keep tf_stash_keeps(const hy_transformer *t) {
    switch (t->recompute) {
    case HY_RECOMPUTE_SELECTIVE: return TF_KEEP_SELECTIVE;
    case HY_RECOMPUTE_FULL: return TF_KEEP_NOTHING;
    default: return TF_KEEP_ALL;
    }
}

/* The pieces of one block's activations from base, those `keep` says
 * (the rest NULL), and with grads the gradients B keeps for W; with base
 * NULL only the size comes back (in *used). */
static tf_layer_acts tf_layer_carve(const hy_transformer *t, unsigned char *base, size_t *used,
                                    tf_keep keep, int grads) {
    const hy_model *m = t->model;
    size_t N = tf_N(t), C = tf_C(t), A = t->act_size, f = sizeof(float);
    size_t Q = (size_t)hy_model_qkv_width(m), FC = (size_t)hy_model_fc_width(m);
    size_t F = (size_t)m->ffn_dim;
    size_t rows = (size_t)t->B * m->heads * t->T;   /* attention rows */
    int llama = m->kind == HY_MODEL_LLAMA, post = hy_model_post_ln(m);
    unsigned char **p = &base;
    tf_layer_acts a;
    memset(&a, 0, sizeof a);
    if (keep != TF_KEEP_NOTHING) {
        a.ln1_mean = llama ? NULL : tf_carve(p, used, N * f);
        a.ln1_rstd = tf_carve(p, used, N * f);
        a.ln2_mean = llama ? NULL : tf_carve(p, used, N * f);
        a.ln2_rstd = tf_carve(p, used, N * f);
        a.lse = tf_carve(p, used, rows * f);
        if (keep == TF_KEEP_ALL) a.ln1 = tf_carve(p, used, N * C * A);
        a.qkv = tf_carve(p, used, N * Q * A);
        a.atty = tf_carve(p, used, N * C * A);
        a.res2 = tf_carve(p, used, N * C * A);
        /* post-LN: ln2 holds the second residual sum, LN2's input */
        if (keep == TF_KEEP_ALL || post) a.ln2 = tf_carve(p, used, N * C * A);
        a.fch = tf_carve(p, used, N * FC * A);
        if (keep == TF_KEEP_ALL) a.fchg = tf_carve(p, used, N * F * A);
        a.res3 = tf_carve(p, used, N * C * A);
    }
    if (grads) {
        a.dproj = tf_carve(p, used, N * C * A);
        a.dfc = tf_carve(p, used, N * FC * A);
        a.dln2 = tf_carve(p, used, N * C * A);
        a.dattn = tf_carve(p, used, N * C * A);
        a.dqkv = tf_carve(p, used, N * Q * A);
        a.dln1 = tf_carve(p, used, N * C * A);
    }
    return a;
}

static size_t tf_layer_bytes(const hy_transformer *t, tf_keep keep, int grads) {
    size_t used = 0;
    tf_layer_carve(t, NULL, &used, keep, grads);
    return used;
}

/* A block's part of a stash slot. */
static size_t tf_stash_layer_bytes(const hy_transformer *t) {
    return tf_layer_bytes(t, tf_stash_keeps(t), t->split);
}

/* Block l (of the stage's, from 0) as its passes see it: its part of the
 * slot, and what the recompute mode keeps elsewhere, in w's working
 * buffers (selective: the norm and MLP-activation outputs; full: every
 * activation, in the working slot). */
static tf_layer_acts tf_layer(const hy_transformer *t, const hy_stage_work *w, void *slot, int l) {
    size_t used = 0;
    tf_layer_acts a;
    memset(&a, 0, sizeof a);
    if (slot)   /* NULL: no slot's part, only the working buffers (hy_stage_recompute) */
        a = tf_layer_carve(t, (unsigned char *)slot + (size_t)l * tf_stash_layer_bytes(t), &used,
                           tf_stash_keeps(t), t->split);
    if (t->recompute == HY_RECOMPUTE_SELECTIVE) {
        assert(w->ln && w->fchg);
        a.ln1 = w->ln;   /* ln_1's and then ln_2's: one is read before the other is made */
        if (!hy_model_post_ln(t->model)) a.ln2 = w->ln;
        a.fchg = w->fchg;
    } else if (t->recompute == HY_RECOMPUTE_FULL) {
        assert(w->redo);
        used = 0;
        tf_layer_acts all = tf_layer_carve(
            t, (unsigned char *)w->redo + (size_t)l * tf_layer_bytes(t, TF_KEEP_ALL, 0), &used,
            TF_KEEP_ALL, 0);
        all.dproj = a.dproj, all.dfc = a.dfc, all.dln2 = a.dln2;
        all.dattn = a.dattn, all.dqkv = a.dqkv, all.dln1 = a.dln1;
        a = all;
    }
    return a;
}

static int tf_last(const hy_transformer *t, int stage) { return stage == t->model->stages - 1; }

size_t hy_boundary_bytes(const hy_transformer *t) { return tf_acts(t, tf_N(t) * tf_C(t)); }

/* Stage 0's extras: the embedding's output (split: and d of it), and
 * post-LN BERT's embedding sum, d(sum) and statistics. */
static size_t tf_embed_bytes(const hy_transformer *t) {
    size_t n = (t->split ? 2 : 1) * tf_align(hy_boundary_bytes(t));
    if (hy_model_post_ln(t->model))
        n += 2 * tf_align(hy_boundary_bytes(t)) + 2 * tf_align(tf_N(t) * sizeof(float));
    return n;
}

/* The head's pieces: ln_f's output and d(its output), its statistics;
 * post-LN BERT's four more of [N, C] (tf_head_acts). */
static size_t tf_head_bytes(const hy_transformer *t) {
    int more = hy_model_post_ln(t->model) ? 4 : 0;
    return (size_t)(2 + more) * tf_align(hy_boundary_bytes(t)) +
           2 * tf_align(tf_N(t) * sizeof(float));
}

size_t hy_stash_bytes(const hy_transformer *t, int stage) {
    size_t n = (size_t)t->model->n_layers[stage] * tf_stash_layer_bytes(t);
    if (stage == 0) n += tf_embed_bytes(t);
    if (tf_last(t, stage)) n += tf_head_bytes(t);
    return n;
}

/* The extras after the blocks: the embedding output (stage 0) and the
 * head's activations (last stage). */
static unsigned char *tf_extra(const hy_transformer *t, int stage, void *slot) {
    return (unsigned char *)slot + (size_t)t->model->n_layers[stage] * tf_stash_layer_bytes(t);
}

void *hy_stash_embedding(const hy_transformer *t, void *slot) { return tf_extra(t, 0, slot); }

/* Split backward, stage 0: d(stage input), which W turns into the
 * embeddings' gradients. */
static void *tf_stash_dembedding(const hy_transformer *t, void *slot) {
    return tf_extra(t, 0, slot) + tf_align(hy_boundary_bytes(t));
}

/* Post-LN BERT's embedding pieces of stage 0's slot, after the output
 * (and its d). */
static tf_embed_acts tf_embed_of(const hy_transformer *t, void *slot) {
    size_t used = 0;
    unsigned char *p = tf_extra(t, 0, slot) + (t->split ? 2 : 1) * tf_align(hy_boundary_bytes(t));
    tf_embed_acts e;
    assert(hy_model_post_ln(t->model));
    e.mean = tf_carve(&p, &used, tf_N(t) * sizeof(float));
    e.rstd = tf_carve(&p, &used, tf_N(t) * sizeof(float));
    e.sum = tf_carve(&p, &used, hy_boundary_bytes(t));
    e.dsum = tf_carve(&p, &used, hy_boundary_bytes(t));
    return e;
}

static tf_head_acts tf_head_of(const hy_transformer *t, void *slot) {
    size_t used = 0;
    unsigned char *p = tf_extra(t, t->model->stages - 1, slot);
    if (t->model->stages == 1) p += tf_embed_bytes(t);   /* after the embedding's */
    tf_head_acts h;
    memset(&h, 0, sizeof h);
    h.mean = tf_carve(&p, &used, tf_N(t) * sizeof(float));
    h.rstd = tf_carve(&p, &used, tf_N(t) * sizeof(float));
    h.out = tf_carve(&p, &used, hy_boundary_bytes(t));
    h.dout = tf_carve(&p, &used, hy_boundary_bytes(t));
    if (hy_model_post_ln(t->model)) {
        h.pre = tf_carve(&p, &used, hy_boundary_bytes(t));
        h.g = tf_carve(&p, &used, hy_boundary_bytes(t));
        h.dz = tf_carve(&p, &used, hy_boundary_bytes(t));
        h.dd = tf_carve(&p, &used, hy_boundary_bytes(t));
    }
    return h;
}

/* Where the last stage's blocks leave their output: the last block's
 * residual, or the input itself when the stage has no block. */
static void *tf_final(const hy_transformer *t, const hy_stage_work *w, int stage, const void *in,
                      void *slot) {
    int L = t->model->n_layers[stage];
    return L > 0 ? tf_layer(t, w, slot, L - 1).res3 : (void *)in;
}

/* ------------------------------------------------------------------------ */
/* Parameters */

/* The parameter of `kind` of global block l. */
static const hy_param *tf_p(const hy_transformer *t, hy_param_kind kind, int l) {
    return hy_model_param(t->model, kind, l);
}

/* A parameter as the ops read it (the compute copy), and its gradient. */
static void *tf_w(const hy_transformer *t, const hy_param *p) {
    return (unsigned char *)t->weights[p->stage] + p->offset * t->act_size;
}
static float *tf_g(const hy_transformer *t, const hy_param *p) {
    return t->grads[p->stage] + p->offset;
}

/* The head's weight as the head sees it, and its gradient: an untied
 * lm_head, else the tied embedding (its replica on this rank, or stage
 * 0's own). */
static const void *tf_head_wte(const hy_transformer *t, const hy_stage_work *w) {
    const hy_param *head = tf_p(t, HY_P_LM_HEAD, 0);
    if (head) return tf_w(t, head);
    return w && w->wte ? w->wte : tf_w(t, tf_p(t, HY_P_WTE, 0));
}
static float *tf_head_dwte(const hy_transformer *t, const hy_stage_work *w) {
    const hy_param *head = tf_p(t, HY_P_LM_HEAD, 0);
    if (head) return tf_g(t, head);
    return w->dwte ? w->dwte : tf_g(t, tf_p(t, HY_P_WTE, 0));
}

/* A parameter that may be absent (a Llama's biases), as the ops read it:
 * NULL when absent. */
static void *tf_w_or_null(const hy_transformer *t, const hy_param *p) {
    return p ? tf_w(t, p) : NULL;
}

/* ------------------------------------------------------------------------ */
/* Working buffers */

static int tf_alloc(hy_backend *be, int rank, size_t bytes, void *out, hy_error *err) {
    return be->ops->alloc(be, rank, bytes ? bytes : 1, (void **)out, err);
}

const char *hy_recompute_name(hy_recompute r) {
    static const char *const names[HY_RECOMPUTE_COUNT] = { "none", "selective", "full" };
    return (unsigned)r < HY_RECOMPUTE_COUNT ? names[r] : "?";
}

double hy_recompute_share(hy_recompute r) {
    return r == HY_RECOMPUTE_FULL ? 1.0 : r == HY_RECOMPUTE_SELECTIVE ? HY_RECOMPUTE_SELECTIVE_SHARE
                                                                     : 0.0;
}

int hy_stage_work_layers(const hy_transformer *t, const int *placement, int rank) {
    int most = 0;
    for (int s = 0; s < t->model->stages; s++)
        if (placement[s] == rank && t->model->n_layers[s] > most) most = t->model->n_layers[s];
    return most;
}

/* Bytes of the RoPE table: per position, head_dim fp32 values (backend.h). */
static size_t tf_rope_bytes(const hy_transformer *t) {
    return (size_t)t->T * (size_t)t->model->head_dim * sizeof(float);
}

size_t hy_rope_bytes(const hy_transformer *t) {
    return t->model->kind == HY_MODEL_LLAMA ? tf_rope_bytes(t) : 0;
}

int hy_rope_upload(const hy_transformer *t, hy_backend *be, int rank, float *dst,
                   hy_error *err) {
    const hy_model *m = t->model;
    assert(m->kind == HY_MODEL_LLAMA);
    float *cs = malloc(tf_rope_bytes(t));
    if (!cs) return hy_fail(err, HY_ERR_RUNTIME, "rank %d: out of memory building the RoPE table",
                            rank);
    hy_rope_table(cs, t->T, m->head_dim, m->rope_theta, &m->rope_scaling);
    int rc = be->ops->upload(be, rank, dst, cs, tf_rope_bytes(t), err);
    free(cs);
    return rc;
}

/* w's buffers: their sizes, and with w where each goes (into, NULL: only
 * the sizes). Returns how many. */
static int tf_work_list(const hy_transformer *t, size_t attention_scratch, int head, int layers,
                        size_t sizes[HY_STAGE_WORK_BUFFERS], hy_stage_work *w,
                        void *into[HY_STAGE_WORK_BUFFERS]) {
    const hy_model *m = t->model;
    size_t NC = hy_boundary_bytes(t), N = tf_N(t);
    size_t Q = (size_t)hy_model_qkv_width(m), FC = (size_t)hy_model_fc_width(m);
    int llama = m->kind == HY_MODEL_LLAMA, n = 0;
#define TF_WORK(bytes, field) (sizes[n] = (bytes), w ? (void)(into[n] = &w->field) : (void)0, n++)
    TF_WORK(NC, dln);
    TF_WORK(NC, datty);
    TF_WORK(tf_acts(t, N * Q), dqkv);
    TF_WORK(tf_acts(t, N * FC), dfc);
    TF_WORK(tf_acts(t, N * FC), dfcg);   /* GELU's scratch, SwiGLU's d(output) */
    TF_WORK(attention_scratch, attn_scratch);
    TF_WORK(hy_rope_bytes(t), rope);
    if (head) {
        TF_WORK(tf_acts(t, N * (size_t)m->vocab_padded), logits);
        TF_WORK(HY_HEAD_SUMS_BYTES, loss);   /* the loss, the hits */
    }
    if (t->recompute == HY_RECOMPUTE_SELECTIVE) {
        TF_WORK(NC, ln);
        TF_WORK(tf_acts(t, N * (size_t)m->ffn_dim), fchg);
        /* a rebuild's statistics: LayerNorm's mean and rstd, RMSNorm's rstd */
        TF_WORK((llama ? 1 : 2) * N * sizeof(float), ln_stats);
    }
    if (t->recompute == HY_RECOMPUTE_FULL)
        TF_WORK((size_t)layers * tf_layer_bytes(t, TF_KEEP_ALL, 0), redo);
#undef TF_WORK
    assert(n <= HY_STAGE_WORK_BUFFERS);
    return n;
}

int hy_stage_work_sizes(const hy_transformer *t, size_t attention_scratch, int head, int layers,
                        size_t sizes[HY_STAGE_WORK_BUFFERS]) {
    return tf_work_list(t, attention_scratch, head, layers, sizes, NULL, NULL);
}

int hy_stage_work_alloc(const hy_transformer *t, hy_backend *be, int rank, int head, int layers,
                        hy_stage_work *w, hy_error *err) {
    size_t sizes[HY_STAGE_WORK_BUFFERS];
    void *into[HY_STAGE_WORK_BUFFERS];
    const hy_model *md = t->model;
    size_t attn = t->ops->attention_scratch(t->B, t->T, md->heads, md->kv_heads, md->head_dim);
    int n = tf_work_list(t, attn, head, layers, sizes, w, into);
    int rc = HY_OK;
    for (int i = 0; i < n && !rc; i++) rc = tf_alloc(be, rank, sizes[i], into[i], err);
    if (rc || t->model->kind != HY_MODEL_LLAMA) return rc;
    /* The rotations depend on the shape alone: built once here, read by
     * every block of every stage of the rank. */
    return hy_rope_upload(t, be, rank, w->rope, err);
}

int hy_transformer_check_ops(const hy_model *m, const hy_backend_ops *o, hy_error *err) {
    if (m->kind != HY_MODEL_LLAMA) return HY_OK;
    const char *missing = !o->rmsnorm_fwd ? "rmsnorm_fwd" : !o->rmsnorm_bwd ? "rmsnorm_bwd"
                        : !o->rope ? "rope" : !o->swiglu_fwd ? "swiglu_fwd"
                        : !o->swiglu_bwd ? "swiglu_bwd" : NULL;
    if (missing)
        return hy_fail(err, HY_ERR_INPUT, "model.kind llama needs the %s op, which the %s backend "
                       "does not have yet; run it with backend \"cpu\"", missing, o->name);
    return HY_OK;
}

/* ------------------------------------------------------------------------ */
/* A block */

/* Next-token models attend backwards only; BERT both ways. */
static int tf_causal(const hy_transformer *t) { return t->model->kind != HY_MODEL_BERT; }

/* The attention core of a block: over the micro-batch's T tokens, or
 * (kv) over a generation's cache after the new tokens' keys go in. */
static int tf_attention(const hy_transformer *t, hy_stream *st, const tf_layer_acts *a,
                        const hy_kv_layer *kv, hy_error *err) {
    const hy_backend_ops *o = t->ops;
    int NH = t->model->heads, NKV = t->model->kv_heads, hd = t->model->head_dim;
    if (!kv)
        return o->attention_fwd(st, a->atty, a->lse, a->qkv, t->B, t->T, NH, NKV, hd,
                                tf_causal(t), err);
    int rc = o->kv_append(st, kv->k, kv->v, a->qkv, t->B, t->T, kv->t0, kv->Tmax, NH, NKV, hd, err);
    return rc ? rc : o->attention_cached(st, a->atty, a->qkv, kv->k, kv->v, t->B, t->T, kv->t0,
                                         kv->Tmax, NH, NKV, hd, err);
}

static int tf_layer_forward(const hy_transformer *t, hy_stream *st, int l, const void *in,
                            const tf_layer_acts *a, void *out, const hy_kv_layer *kv,
                            hy_error *err) {
    const hy_backend_ops *o = t->ops;
    int N = (int)tf_N(t), C = (int)tf_C(t), rc;
    const void *ln1w = tf_w(t, tf_p(t, HY_P_LN1_W, l)), *ln1b = tf_w(t, tf_p(t, HY_P_LN1_B, l));
    float eps = hy_model_ln_eps(t->model);
    rc = o->layernorm_fwd(st, a->ln1, a->ln1_mean, a->ln1_rstd, in, ln1w, ln1b, N, C, eps, err);
    if (!rc) rc = o->matmul_fwd(st, a->qkv, a->ln1, tf_w(t, tf_p(t, HY_P_QKV_W, l)),
                                tf_w(t, tf_p(t, HY_P_QKV_B, l)), N, C, 3 * C, err);
    if (!rc) rc = tf_attention(t, st, a, kv, err);
    if (!rc) rc = o->matmul_fwd(st, a->res2, a->atty, tf_w(t, tf_p(t, HY_P_ATTN_PROJ_W, l)),
                                tf_w(t, tf_p(t, HY_P_ATTN_PROJ_B, l)), N, C, C, err);
    if (!rc) rc = o->add(st, a->res2, in, (size_t)N * C, err);
    if (!rc) rc = o->layernorm_fwd(st, a->ln2, a->ln2_mean, a->ln2_rstd, a->res2,
                                   tf_w(t, tf_p(t, HY_P_LN2_W, l)),
                                   tf_w(t, tf_p(t, HY_P_LN2_B, l)), N, C, eps, err);
    if (!rc) rc = o->matmul_gelu_fwd(st, a->fchg, a->fch, a->ln2, tf_w(t, tf_p(t, HY_P_FC_W, l)),
                                     tf_w(t, tf_p(t, HY_P_FC_B, l)), N, C, 4 * C,
                                     hy_model_gelu(t->model), err);
    if (!rc) rc = o->matmul_fwd(st, out, a->fchg, tf_w(t, tf_p(t, HY_P_MLP_PROJ_W, l)),
                                tf_w(t, tf_p(t, HY_P_MLP_PROJ_B, l)), N, 4 * C, C, err);
    if (!rc) rc = o->add(st, out, a->res2, (size_t)N * C, err);
    return rc;
}

/* Selective recompute: a norm's output (ln_1's or ln_2's: weight kind
 * wk of block l) from its input, by the forward's own op, LayerNorm or a
 * Llama's RMSNorm. The op computes its statistics again from the same
 * input, by the same code, so they and the output are the forward's bit
 * for bit (the CUDA forward's fused residual add stores the rounded sum
 * and normalises that: the same input); they go to w->ln_stats, and the
 * saved ones the norm's backward reads stay as they are. */
static int tf_rebuild_norm(const hy_transformer *t, const hy_stage_work *w, hy_stream *st,
                           hy_param_kind wk, int l, void *out, const void *in, hy_error *err) {
    const hy_param *pw = tf_p(t, wk, l);
    int N = (int)tf_N(t), C = (int)tf_C(t);
    if (t->model->kind == HY_MODEL_LLAMA)
        return t->ops->rmsnorm_fwd(st, out, w->ln_stats, in, tf_w(t, pw), N, C,
                                   (float)t->model->norm_eps, err);
    return t->ops->layernorm_fwd(st, out, w->ln_stats + N, w->ln_stats, in, tf_w(t, pw),
                                 tf_w(t, pw + 1), N, C, hy_model_ln_eps(t->model), err);
}

/* Selective recompute, before a block's backward or weight pass: the MLP
 * activation's output from its pre-activation (GELU's; a Llama's SwiGLU's
 * from gate|up) and ln_2's output from its input, by the forward's own
 * ops (on the CPU matmul_gelu_fwd is matmul_fwd then gelu_fwd), so they
 * are the forward's bit for bit. Nothing in other modes. */
static int tf_rebuild_mlp(const hy_transformer *t, const hy_stage_work *w, hy_stream *st, int l,
                          const tf_layer_acts *a, hy_error *err) {
    if (t->recompute != HY_RECOMPUTE_SELECTIVE) return HY_OK;
    const hy_backend_ops *o = t->ops;
    int rc = t->model->kind == HY_MODEL_LLAMA
                 ? o->swiglu_fwd(st, a->fchg, a->fch, (int)tf_N(t), t->model->ffn_dim, err)
                 : o->gelu_fwd(st, a->fchg, a->fch, tf_N(t) * (size_t)t->model->ffn_dim,
                               hy_model_gelu(t->model), err);
    /* post-LN: LN1's output is what the MLP read (ln2 holds a sum, kept) */
    if (!rc && hy_model_post_ln(t->model))
        return tf_rebuild_norm(t, w, st, HY_P_LN1_W, l, a->ln1, a->res2, err);
    return rc ? rc : tf_rebuild_norm(t, w, st, HY_P_LN2_W, l, a->ln2, a->res2, err);
}

/* The same for ln_1's output, once ln_2's is no longer read (they share
 * the buffer). */
static int tf_rebuild_ln1(const hy_transformer *t, const hy_stage_work *w, hy_stream *st, int l,
                          const void *in, const tf_layer_acts *a, hy_error *err) {
    if (t->recompute != HY_RECOMPUTE_SELECTIVE) return HY_OK;
    return tf_rebuild_norm(t, w, st, HY_P_LN1_W, l, a->ln1, in, err);
}

/* The gradient a block's backward adds a weight's into as it goes: none
 * under split backward, whose W pass adds them later. */
static float *tf_g_now(const hy_transformer *t, const hy_param *p) {
    return t->split ? NULL : tf_g(t, p);
}

/* dres holds d(block output) and becomes d(block input): each branch's
 * backward adds its part into it (the ops accumulate). Unsplit, every
 * product and LayerNorm adds its weights' gradient on the way and d of its
 * output is scratch; split, they compute the input's gradient alone and d
 * of each output is kept in the slot for W. */
static int tf_layer_backward(const hy_transformer *t, const hy_stage_work *w, hy_stream *st, int l,
                             const void *in, const tf_layer_acts *a, void *dres, hy_error *err) {
    const hy_backend_ops *o = t->ops;
    int N = (int)tf_N(t), C = (int)tf_C(t), NH = t->model->heads, split = t->split, rc = HY_OK;
    size_t NC = (size_t)N * C;
    const hy_param *pmp = tf_p(t, HY_P_MLP_PROJ_W, l), *pfc = tf_p(t, HY_P_FC_W, l);
    const hy_param *pap = tf_p(t, HY_P_ATTN_PROJ_W, l), *pqkv = tf_p(t, HY_P_QKV_W, l);
    const hy_param *pln2 = tf_p(t, HY_P_LN2_W, l), *pln1 = tf_p(t, HY_P_LN1_W, l);
    void *dfc = split ? a->dfc : w->dfc, *dln2 = split ? a->dln2 : w->dln;
    void *dqkv = split ? a->dqkv : w->dqkv, *dln1 = split ? a->dln1 : w->dln;
    rc = tf_rebuild_mlp(t, w, st, l, a, err);
    if (!rc && split) rc = o->copy(st, a->dproj, dres, tf_acts(t, NC), err);
    /* The MLP's projection and, through the GELU, d(fc out) (stored) with
     * the fc bias's gradient: that is why fc's own backward adds none. */
    if (!rc) rc = o->matmul_gelu_bwd(st, dfc, tf_g_now(t, pfc + 1), tf_g_now(t, pmp),
                                     tf_g_now(t, pmp + 1), w->dfcg, dres, a->fchg, a->fch,
                                     tf_w(t, pmp), N, 4 * C, C, hy_model_gelu(t->model), err);
    if (!rc) rc = o->zero(st, dln2, tf_acts(t, NC), err);
    if (!rc) rc = o->matmul_bwd(st, dln2, tf_g_now(t, pfc), NULL, dfc, a->ln2, tf_w(t, pfc), N, C,
                                4 * C, err);
    if (!rc) rc = o->layernorm_bwd(st, dres, tf_g_now(t, pln2), tf_g_now(t, pln2 + 1), dln2, a->res2,
                                   tf_w(t, pln2), a->ln2_mean, a->ln2_rstd, N, C, err);
    if (!rc && split) rc = o->copy(st, a->dattn, dres, tf_acts(t, NC), err);
    if (!rc) rc = o->zero(st, w->datty, tf_acts(t, NC), err);
    if (!rc) rc = o->matmul_bwd(st, w->datty, tf_g_now(t, pap), tf_g_now(t, pap + 1), dres, a->atty,
                                tf_w(t, pap), N, C, C, err);
    if (!rc) rc = o->zero(st, dqkv, tf_acts(t, 3 * NC), err);
    if (!rc) rc = o->attention_bwd(st, dqkv, w->attn_scratch, w->datty, a->qkv, a->atty, a->lse,
                                   t->B, t->T, NH, NH, C / NH, tf_causal(t), err);
    if (!rc) rc = tf_rebuild_ln1(t, w, st, l, in, a, err);
    if (!rc) rc = o->zero(st, dln1, tf_acts(t, NC), err);
    if (!rc) rc = o->matmul_bwd(st, dln1, tf_g_now(t, pqkv), tf_g_now(t, pqkv + 1), dqkv, a->ln1,
                                tf_w(t, pqkv), N, C, 3 * C, err);
    if (!rc) rc = o->layernorm_bwd(st, dres, tf_g_now(t, pln1), tf_g_now(t, pln1 + 1), dln1, in,
                                   tf_w(t, pln1), a->ln1_mean, a->ln1_rstd, N, C, err);
    return rc;
}

/* W of a block: every weight's gradient from what B and F kept. */
static int tf_layer_wgrad(const hy_transformer *t, const hy_stage_work *w, hy_stream *st, int l,
                          const void *in, const tf_layer_acts *a, hy_error *err) {
    const hy_backend_ops *o = t->ops;
    int N = (int)tf_N(t), C = (int)tf_C(t), rc;
    const hy_param *pmp = tf_p(t, HY_P_MLP_PROJ_W, l), *pfc = tf_p(t, HY_P_FC_W, l);
    const hy_param *pap = tf_p(t, HY_P_ATTN_PROJ_W, l), *pqkv = tf_p(t, HY_P_QKV_W, l);
    const hy_param *pln2 = tf_p(t, HY_P_LN2_W, l), *pln1 = tf_p(t, HY_P_LN1_W, l);
    rc = tf_rebuild_mlp(t, w, st, l, a, err);
    if (!rc) rc = o->matmul_bwd(st, NULL, tf_g(t, pmp), tf_g(t, pmp + 1), a->dproj, a->fchg, tf_w(t, pmp),
                       N, 4 * C, C, err);
    if (!rc) rc = o->matmul_bwd(st, NULL, tf_g(t, pfc), tf_g(t, pfc + 1), a->dfc, a->ln2,
                                tf_w(t, pfc), N, C, 4 * C, err);
    if (!rc) rc = o->layernorm_bwd(st, NULL, tf_g(t, pln2), tf_g(t, pln2 + 1), a->dln2, a->res2,
                                   tf_w(t, pln2), a->ln2_mean, a->ln2_rstd, N, C, err);
    if (!rc) rc = o->matmul_bwd(st, NULL, tf_g(t, pap), tf_g(t, pap + 1), a->dattn, a->atty,
                                tf_w(t, pap), N, C, C, err);
    if (!rc) rc = tf_rebuild_ln1(t, w, st, l, in, a, err);
    if (!rc) rc = o->matmul_bwd(st, NULL, tf_g(t, pqkv), tf_g(t, pqkv + 1), a->dqkv, a->ln1,
                                tf_w(t, pqkv), N, C, 3 * C, err);
    if (!rc) rc = o->layernorm_bwd(st, NULL, tf_g(t, pln1), tf_g(t, pln1 + 1), a->dln1, in,
                                   tf_w(t, pln1), a->ln1_mean, a->ln1_rstd, N, C, err);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* A Llama block: RMSNorm, QKV, RoPE, causal attention, O, residual;
 * RMSNorm, gate|up, SwiGLU, down, residual. No biases. */

static int tf_llama_forward(const hy_transformer *t, const float *rope, hy_stream *st, int l,
                            const void *in, const tf_layer_acts *a, void *out,
                            const hy_kv_layer *kv, hy_error *err) {
    const hy_backend_ops *o = t->ops;
    const hy_model *m = t->model;
    int N = (int)tf_N(t), C = (int)tf_C(t), Q = hy_model_qkv_width(m), F = m->ffn_dim, rc;
    float eps = (float)m->norm_eps;
    rc = o->rmsnorm_fwd(st, a->ln1, a->ln1_rstd, in, tf_w(t, tf_p(t, HY_P_LN1_W, l)), N, C, eps,
                        err);
    if (!rc) rc = o->matmul_fwd(st, a->qkv, a->ln1, tf_w(t, tf_p(t, HY_P_QKV_W, l)), NULL, N, C,
                                Q, err);
    /* the table from the first new position on (generation: kv->t0) */
    const float *cs = rope + (kv ? (size_t)kv->t0 * m->head_dim : 0);
    if (!rc) rc = o->rope(st, a->qkv, cs, t->B, t->T, m->heads, m->kv_heads, m->head_dim, 0, err);
    if (!rc) rc = tf_attention(t, st, a, kv, err);
    if (!rc) rc = o->matmul_fwd(st, a->res2, a->atty, tf_w(t, tf_p(t, HY_P_ATTN_PROJ_W, l)), NULL,
                                N, C, C, err);
    if (!rc) rc = o->add(st, a->res2, in, (size_t)N * C, err);
    if (!rc) rc = o->rmsnorm_fwd(st, a->ln2, a->ln2_rstd, a->res2,
                                 tf_w(t, tf_p(t, HY_P_LN2_W, l)), N, C, eps, err);
    if (!rc) rc = o->matmul_fwd(st, a->fch, a->ln2, tf_w(t, tf_p(t, HY_P_FC_W, l)), NULL, N, C,
                                2 * F, err);
    if (!rc) rc = o->swiglu_fwd(st, a->fchg, a->fch, N, F, err);
    if (!rc) rc = o->matmul_fwd(st, out, a->fchg, tf_w(t, tf_p(t, HY_P_MLP_PROJ_W, l)), NULL, N,
                                F, C, err);
    if (!rc) rc = o->add(st, out, a->res2, (size_t)N * C, err);
    return rc;
}

/* As tf_layer_backward, for a Llama block. RoPE's backward is the inverse
 * rotation of d(q) and d(k), in place, after the attention's. */
static int tf_llama_backward(const hy_transformer *t, const hy_stage_work *w, hy_stream *st, int l,
                             const void *in, const tf_layer_acts *a, void *dres, hy_error *err) {
    const hy_backend_ops *o = t->ops;
    const hy_model *m = t->model;
    int N = (int)tf_N(t), C = (int)tf_C(t), Q = hy_model_qkv_width(m), F = m->ffn_dim;
    int split = t->split, rc = HY_OK;
    size_t NC = (size_t)N * C;
    const hy_param *pdown = tf_p(t, HY_P_MLP_PROJ_W, l), *pgu = tf_p(t, HY_P_FC_W, l);
    const hy_param *po = tf_p(t, HY_P_ATTN_PROJ_W, l), *pqkv = tf_p(t, HY_P_QKV_W, l);
    const hy_param *pn2 = tf_p(t, HY_P_LN2_W, l), *pn1 = tf_p(t, HY_P_LN1_W, l);
    void *dfc = split ? a->dfc : w->dfc, *dln2 = split ? a->dln2 : w->dln;
    void *dqkv = split ? a->dqkv : w->dqkv, *dln1 = split ? a->dln1 : w->dln;
    rc = tf_rebuild_mlp(t, w, st, l, a, err);
    if (!rc && split) rc = o->copy(st, a->dproj, dres, tf_acts(t, NC), err);
    if (!rc) rc = o->zero(st, w->dfcg, tf_acts(t, (size_t)N * F), err);
    if (!rc) rc = o->matmul_bwd(st, w->dfcg, tf_g_now(t, pdown), NULL, dres, a->fchg,
                                tf_w(t, pdown), N, F, C, err);
    if (!rc) rc = o->zero(st, dfc, tf_acts(t, (size_t)N * 2 * F), err);
    if (!rc) rc = o->swiglu_bwd(st, dfc, w->dfcg, a->fch, N, F, err);
    if (!rc) rc = o->zero(st, dln2, tf_acts(t, NC), err);
    if (!rc) rc = o->matmul_bwd(st, dln2, tf_g_now(t, pgu), NULL, dfc, a->ln2, tf_w(t, pgu), N, C,
                                2 * F, err);
    if (!rc) rc = o->rmsnorm_bwd(st, dres, tf_g_now(t, pn2), dln2, a->res2, tf_w(t, pn2),
                                 a->ln2_rstd, N, C, err);
    if (!rc && split) rc = o->copy(st, a->dattn, dres, tf_acts(t, NC), err);
    if (!rc) rc = o->zero(st, w->datty, tf_acts(t, NC), err);
    if (!rc) rc = o->matmul_bwd(st, w->datty, tf_g_now(t, po), NULL, dres, a->atty, tf_w(t, po),
                                N, C, C, err);
    if (!rc) rc = o->zero(st, dqkv, tf_acts(t, (size_t)N * Q), err);
    if (!rc) rc = o->attention_bwd(st, dqkv, w->attn_scratch, w->datty, a->qkv, a->atty, a->lse,
                                   t->B, t->T, m->heads, m->kv_heads, m->head_dim, tf_causal(t),
                                   err);
    if (!rc) rc = o->rope(st, dqkv, w->rope, t->B, t->T, m->heads, m->kv_heads, m->head_dim, 1,
                          err);
    if (!rc) rc = tf_rebuild_ln1(t, w, st, l, in, a, err);
    if (!rc) rc = o->zero(st, dln1, tf_acts(t, NC), err);
    if (!rc) rc = o->matmul_bwd(st, dln1, tf_g_now(t, pqkv), NULL, dqkv, a->ln1, tf_w(t, pqkv), N,
                                C, Q, err);
    if (!rc) rc = o->rmsnorm_bwd(st, dres, tf_g_now(t, pn1), dln1, in, tf_w(t, pn1), a->ln1_rstd,
                                 N, C, err);
    return rc;
}

/* W of a Llama block. */
static int tf_llama_wgrad(const hy_transformer *t, const hy_stage_work *w, hy_stream *st, int l,
                          const void *in, const tf_layer_acts *a, hy_error *err) {
    const hy_backend_ops *o = t->ops;
    const hy_model *m = t->model;
    int N = (int)tf_N(t), C = (int)tf_C(t), Q = hy_model_qkv_width(m), F = m->ffn_dim, rc;
    const hy_param *pdown = tf_p(t, HY_P_MLP_PROJ_W, l), *pgu = tf_p(t, HY_P_FC_W, l);
    const hy_param *po = tf_p(t, HY_P_ATTN_PROJ_W, l), *pqkv = tf_p(t, HY_P_QKV_W, l);
    const hy_param *pn2 = tf_p(t, HY_P_LN2_W, l), *pn1 = tf_p(t, HY_P_LN1_W, l);
    rc = tf_rebuild_mlp(t, w, st, l, a, err);
    if (!rc) rc = o->matmul_bwd(st, NULL, tf_g(t, pdown), NULL, a->dproj, a->fchg, tf_w(t, pdown),
                                N, F, C, err);
    if (!rc) rc = o->matmul_bwd(st, NULL, tf_g(t, pgu), NULL, a->dfc, a->ln2, tf_w(t, pgu), N, C,
                                2 * F, err);
    if (!rc) rc = o->rmsnorm_bwd(st, NULL, tf_g(t, pn2), a->dln2, a->res2, tf_w(t, pn2),
                                 a->ln2_rstd, N, C, err);
    if (!rc) rc = o->matmul_bwd(st, NULL, tf_g(t, po), NULL, a->dattn, a->atty, tf_w(t, po), N, C,
                                C, err);
    if (!rc) rc = tf_rebuild_ln1(t, w, st, l, in, a, err);
    if (!rc) rc = o->matmul_bwd(st, NULL, tf_g(t, pqkv), NULL, a->dqkv, a->ln1, tf_w(t, pqkv), N,
                                C, Q, err);
    if (!rc) rc = o->rmsnorm_bwd(st, NULL, tf_g(t, pn1), a->dln1, in, tf_w(t, pn1), a->ln1_rstd,
                                 N, C, err);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* A post-LN BERT block (Hugging Face's BertLayer): a = proj(attn(qkv(x)));
 * h = LN1(x + a); out = LN2(h + W2 gelu(W1 h)), exact-erf GELU. Of the
 * slot's pieces ln1 is h, res2 the first sum (LN1's input), ln2 the
 * second (LN2's input) and the output goes to `out` (res3). */

static int tf_post_forward(const hy_transformer *t, hy_stream *st, int l, const void *in,
                           const tf_layer_acts *a, void *out, const hy_kv_layer *kv,
                           hy_error *err) {
    const hy_backend_ops *o = t->ops;
    int N = (int)tf_N(t), C = (int)tf_C(t), rc;
    float eps = hy_model_ln_eps(t->model);
    const hy_param *pln1 = tf_p(t, HY_P_LN1_W, l), *pln2 = tf_p(t, HY_P_LN2_W, l);
    rc = o->matmul_fwd(st, a->qkv, in, tf_w(t, tf_p(t, HY_P_QKV_W, l)),
                       tf_w(t, tf_p(t, HY_P_QKV_B, l)), N, C, 3 * C, err);
    if (!rc) rc = tf_attention(t, st, a, kv, err);
    if (!rc) rc = o->matmul_fwd(st, a->res2, a->atty, tf_w(t, tf_p(t, HY_P_ATTN_PROJ_W, l)),
                                tf_w(t, tf_p(t, HY_P_ATTN_PROJ_B, l)), N, C, C, err);
    if (!rc) rc = o->add(st, a->res2, in, (size_t)N * C, err);
    if (!rc) rc = o->layernorm_fwd(st, a->ln1, a->ln1_mean, a->ln1_rstd, a->res2, tf_w(t, pln1),
                                   tf_w(t, pln1 + 1), N, C, eps, err);
    if (!rc) rc = o->matmul_gelu_fwd(st, a->fchg, a->fch, a->ln1, tf_w(t, tf_p(t, HY_P_FC_W, l)),
                                     tf_w(t, tf_p(t, HY_P_FC_B, l)), N, C, 4 * C,
                                     hy_model_gelu(t->model), err);
    if (!rc) rc = o->matmul_fwd(st, a->ln2, a->fchg, tf_w(t, tf_p(t, HY_P_MLP_PROJ_W, l)),
                                tf_w(t, tf_p(t, HY_P_MLP_PROJ_B, l)), N, 4 * C, C, err);
    if (!rc) rc = o->add(st, a->ln2, a->ln1, (size_t)N * C, err);
    if (!rc) rc = o->layernorm_fwd(st, out, a->ln2_mean, a->ln2_rstd, a->ln2, tf_w(t, pln2),
                                   tf_w(t, pln2 + 1), N, C, eps, err);
    return rc;
}

/* B (and unsplit, the weights' gradients too) of a post-LN block. dres
 * holds d(out) and becomes d(in). Split, the slot keeps for W: d(out)
 * (dln2, LN2's), d(second sum) (dproj), d(fc pre-activation) (dfc), d(h)
 * (dln1, LN1's), d(first sum) (dattn) and d(qkv). */
static int tf_post_backward(const hy_transformer *t, const hy_stage_work *w, hy_stream *st, int l,
                            const void *in, const tf_layer_acts *a, void *dres, hy_error *err) {
    const hy_backend_ops *o = t->ops;
    int N = (int)tf_N(t), C = (int)tf_C(t), NH = t->model->heads, split = t->split, rc;
    size_t NC = (size_t)N * C;
    const hy_param *pmp = tf_p(t, HY_P_MLP_PROJ_W, l), *pfc = tf_p(t, HY_P_FC_W, l);
    const hy_param *pap = tf_p(t, HY_P_ATTN_PROJ_W, l), *pqkv = tf_p(t, HY_P_QKV_W, l);
    const hy_param *pln2 = tf_p(t, HY_P_LN2_W, l), *pln1 = tf_p(t, HY_P_LN1_W, l);
    void *dsum2 = split ? a->dproj : w->dln, *dfc = split ? a->dfc : w->dfc;
    void *dsum1 = split ? a->dattn : w->dln, *dqkv = split ? a->dqkv : w->dqkv;
    rc = tf_rebuild_mlp(t, w, st, l, a, err);
    if (!rc && split) rc = o->copy(st, a->dln2, dres, tf_acts(t, NC), err);
    /* LN2: d(second sum), whose residual part is d(h) */
    if (!rc) rc = o->zero(st, dsum2, tf_acts(t, NC), err);
    if (!rc) rc = o->layernorm_bwd(st, dsum2, tf_g_now(t, pln2), tf_g_now(t, pln2 + 1), dres,
                                   a->ln2, tf_w(t, pln2), a->ln2_mean, a->ln2_rstd, N, C, err);
    if (!rc) rc = o->copy(st, dres, dsum2, tf_acts(t, NC), err);
    if (!rc) rc = o->matmul_gelu_bwd(st, dfc, tf_g_now(t, pfc + 1), tf_g_now(t, pmp),
                                     tf_g_now(t, pmp + 1), w->dfcg, dsum2, a->fchg, a->fch,
                                     tf_w(t, pmp), N, 4 * C, C, hy_model_gelu(t->model), err);
    if (!rc) rc = o->matmul_bwd(st, dres, tf_g_now(t, pfc), NULL, dfc, a->ln1, tf_w(t, pfc), N, C,
                                4 * C, err);
    /* dres is d(h); LN1: d(first sum), whose residual part is d(in) */
    if (!rc && split) rc = o->copy(st, a->dln1, dres, tf_acts(t, NC), err);
    if (!rc) rc = o->zero(st, dsum1, tf_acts(t, NC), err);
    if (!rc) rc = o->layernorm_bwd(st, dsum1, tf_g_now(t, pln1), tf_g_now(t, pln1 + 1), dres,
                                   a->res2, tf_w(t, pln1), a->ln1_mean, a->ln1_rstd, N, C, err);
    if (!rc) rc = o->copy(st, dres, dsum1, tf_acts(t, NC), err);
    if (!rc) rc = o->zero(st, w->datty, tf_acts(t, NC), err);
    if (!rc) rc = o->matmul_bwd(st, w->datty, tf_g_now(t, pap), tf_g_now(t, pap + 1), dsum1,
                                a->atty, tf_w(t, pap), N, C, C, err);
    if (!rc) rc = o->zero(st, dqkv, tf_acts(t, 3 * NC), err);
    if (!rc) rc = o->attention_bwd(st, dqkv, w->attn_scratch, w->datty, a->qkv, a->atty, a->lse,
                                   t->B, t->T, NH, NH, C / NH, tf_causal(t), err);
    if (!rc) rc = o->matmul_bwd(st, dres, tf_g_now(t, pqkv), tf_g_now(t, pqkv + 1), dqkv, in,
                                tf_w(t, pqkv), N, C, 3 * C, err);
    return rc;
}

/* W of a post-LN block, from what B kept. */
static int tf_post_wgrad(const hy_transformer *t, const hy_stage_work *w, hy_stream *st, int l,
                         const void *in, const tf_layer_acts *a, hy_error *err) {
    const hy_backend_ops *o = t->ops;
    int N = (int)tf_N(t), C = (int)tf_C(t), rc;
    const hy_param *pmp = tf_p(t, HY_P_MLP_PROJ_W, l), *pfc = tf_p(t, HY_P_FC_W, l);
    const hy_param *pap = tf_p(t, HY_P_ATTN_PROJ_W, l), *pqkv = tf_p(t, HY_P_QKV_W, l);
    const hy_param *pln2 = tf_p(t, HY_P_LN2_W, l), *pln1 = tf_p(t, HY_P_LN1_W, l);
    rc = tf_rebuild_mlp(t, w, st, l, a, err);
    if (!rc) rc = o->layernorm_bwd(st, NULL, tf_g(t, pln2), tf_g(t, pln2 + 1), a->dln2, a->ln2,
                                   tf_w(t, pln2), a->ln2_mean, a->ln2_rstd, N, C, err);
    if (!rc) rc = o->matmul_bwd(st, NULL, tf_g(t, pmp), tf_g(t, pmp + 1), a->dproj, a->fchg,
                                tf_w(t, pmp), N, 4 * C, C, err);
    if (!rc) rc = o->matmul_bwd(st, NULL, tf_g(t, pfc), tf_g(t, pfc + 1), a->dfc, a->ln1,
                                tf_w(t, pfc), N, C, 4 * C, err);
    if (!rc) rc = o->layernorm_bwd(st, NULL, tf_g(t, pln1), tf_g(t, pln1 + 1), a->dln1, a->res2,
                                   tf_w(t, pln1), a->ln1_mean, a->ln1_rstd, N, C, err);
    if (!rc) rc = o->matmul_bwd(st, NULL, tf_g(t, pap), tf_g(t, pap + 1), a->dattn, a->atty,
                                tf_w(t, pap), N, C, C, err);
    if (!rc) rc = o->matmul_bwd(st, NULL, tf_g(t, pqkv), tf_g(t, pqkv + 1), a->dqkv, in,
                                tf_w(t, pqkv), N, C, 3 * C, err);
    return rc;
}

/* A block of the model's kind: forward, backward (B), W. Of the stage
 * work the forward needs only the RoPE table (NULL: a GPT or BERT), so
 * generation, which has no stage work, runs it too. */
static int tf_block_forward(const hy_transformer *t, const float *rope, hy_stream *st, int l,
                            const void *in, const tf_layer_acts *a, void *out,
                            const hy_kv_layer *kv, hy_error *err) {
    if (t->model->kind == HY_MODEL_LLAMA) {
        assert(rope);
        return tf_llama_forward(t, rope, st, l, in, a, out, kv, err);
    }
    if (hy_model_post_ln(t->model)) return tf_post_forward(t, st, l, in, a, out, kv, err);
    return tf_layer_forward(t, st, l, in, a, out, kv, err);
}

static int tf_block_backward(const hy_transformer *t, const hy_stage_work *w, hy_stream *st,
                             int l, const void *in, const tf_layer_acts *a, void *dres,
                             hy_error *err) {
    if (t->model->kind == HY_MODEL_LLAMA) return tf_llama_backward(t, w, st, l, in, a, dres, err);
    if (hy_model_post_ln(t->model)) return tf_post_backward(t, w, st, l, in, a, dres, err);
    return tf_layer_backward(t, w, st, l, in, a, dres, err);
}

static int tf_block_wgrad(const hy_transformer *t, const hy_stage_work *w, hy_stream *st, int l,
                          const void *in, const tf_layer_acts *a, hy_error *err) {
    if (t->model->kind == HY_MODEL_LLAMA) return tf_llama_wgrad(t, w, st, l, in, a, err);
    if (hy_model_post_ln(t->model)) return tf_post_wgrad(t, w, st, l, in, a, err);
    return tf_layer_wgrad(t, w, st, l, in, a, err);
}

/* The final norm (ln_f, or Llama's RMSNorm) of h into ha, then the
 * logits: training's head and generation's (w NULL: no replica of the
 * tied embedding, stage 0's own). */
static int tf_norm_logits(const hy_transformer *t, const hy_stage_work *w, hy_stream *st,
                          const tf_head_acts *ha, const void *h, void *logits, hy_error *err) {
    const hy_param *pw = tf_p(t, HY_P_LNF_W, 0);
    int N = (int)tf_N(t), C = (int)tf_C(t), rc;
    if (t->model->kind == HY_MODEL_LLAMA)
        rc = t->ops->rmsnorm_fwd(st, ha->out, ha->rstd, h, tf_w(t, pw), N, C,
                                 (float)t->model->norm_eps, err);
    else
        rc = t->ops->layernorm_fwd(st, ha->out, ha->mean, ha->rstd, h, tf_w(t, pw),
                                   tf_w(t, tf_p(t, HY_P_LNF_B, 0)), N, C,
                                   hy_model_ln_eps(t->model), err);
    return rc ? rc : t->ops->lm_head_fwd(st, logits, ha->out, tf_head_wte(t, w), NULL, N, C,
                                         t->model->vocab_padded, err);
}

/* ------------------------------------------------------------------------ */
/* The head */

/* Post-LN BERT's MLM head (Hugging Face's cls.predictions): z =
 * LN(gelu(dense(y))), logits = z · wteᵀ + bias, then the loss; training,
 * its whole backward down to d(y) (ha.dout), adding the decoder's and
 * (unsplit) the dense's and LayerNorm's gradients; split, those two wait
 * for W (tf_post_head_wgrad), from d(z) and d(dense out) kept. */
static int tf_post_head(const hy_transformer *t, const hy_stage_work *w, hy_stream *st,
                        const void *y, const tf_head_acts *ha, const int *targets, int train,
                        float share, hy_error *err) {
    const hy_backend_ops *o = t->ops;
    int N = (int)tf_N(t), C = (int)tf_C(t), V = t->model->vocab, Vp = t->model->vocab_padded, rc;
    size_t NC = (size_t)N * C;
    const hy_param *pd = tf_p(t, HY_P_HEAD_W, 0), *pn = tf_p(t, HY_P_LNF_W, 0);
    const hy_param *pb = tf_p(t, HY_P_HEAD_BIAS, 0);
    rc = o->matmul_gelu_fwd(st, ha->g, ha->pre, y, tf_w(t, pd), tf_w(t, pd + 1), N, C, C,
                            hy_model_gelu(t->model), err);
    if (!rc) rc = o->layernorm_fwd(st, ha->out, ha->mean, ha->rstd, ha->g, tf_w(t, pn),
                                   tf_w(t, pn + 1), N, C, hy_model_ln_eps(t->model), err);
    if (!rc) rc = o->lm_head_fwd(st, w->logits, ha->out, tf_head_wte(t, w), tf_w(t, pb), N, C, Vp,
                                 err);
    if (!rc) rc = o->classifier(st, w->logits, w->loss, w->loss + 1, targets, N, V, Vp, share,
                                train ? share : 1.0f, err);
    if (!train) return rc;
    if (!rc) rc = o->zero(st, ha->dz, tf_acts(t, NC), err);
    if (!rc) rc = o->lm_head_bwd(st, ha->dz, tf_head_dwte(t, w), tf_g(t, pb), w->logits, ha->out,
                                 tf_head_wte(t, w), N, C, Vp, err);
    /* d(gelu out) into dout for now, then d(dense out), then d(y) */
    if (!rc) rc = o->zero(st, ha->dout, tf_acts(t, NC), err);
    if (!rc) rc = o->layernorm_bwd(st, ha->dout, tf_g_now(t, pn), tf_g_now(t, pn + 1), ha->dz,
                                   ha->g, tf_w(t, pn), ha->mean, ha->rstd, N, C, err);
    if (!rc) rc = o->zero(st, ha->dd, tf_acts(t, NC), err);
    if (!rc) rc = o->gelu_bwd(st, ha->dd, ha->dout, ha->pre, NC, hy_model_gelu(t->model), err);
    if (!rc) rc = o->zero(st, ha->dout, tf_acts(t, NC), err);
    if (!rc) rc = o->matmul_bwd(st, ha->dout, tf_g_now(t, pd), tf_g_now(t, pd + 1), ha->dd, y,
                                tf_w(t, pd), N, C, C, err);
    return rc;
}

/* W of post-LN BERT's head: its LayerNorm's and dense's gradients. */
static int tf_post_head_wgrad(const hy_transformer *t, const hy_stage_work *w, hy_stream *st,
                              const void *in, void *slot, hy_error *err) {
    tf_head_acts ha = tf_head_of(t, slot);
    const void *y = tf_final(t, w, t->model->stages - 1, in, slot);
    const hy_param *pd = tf_p(t, HY_P_HEAD_W, 0), *pn = tf_p(t, HY_P_LNF_W, 0);
    int N = (int)tf_N(t), C = (int)tf_C(t);
    int rc = t->ops->layernorm_bwd(st, NULL, tf_g(t, pn), tf_g(t, pn + 1), ha.dz, ha.g,
                                   tf_w(t, pn), ha.mean, ha.rstd, N, C, err);
    return rc ? rc : t->ops->matmul_bwd(st, NULL, tf_g(t, pd), tf_g(t, pd + 1), ha.dd, y,
                                        tf_w(t, pd), N, C, C, err);
}

/* ln_f, logits, the fused loss and d(logits), and the head's backward
 * down to d(ln_f out), so the logits never need stashing (llm.c does the
 * same); post-LN BERT's is tf_post_head. h: the last block's output. */
static int tf_head(const hy_transformer *t, const hy_stage_work *w, hy_stream *st, const void *h,
                   void *slot, const int *targets, int train, hy_error *err) {
    const hy_backend_ops *o = t->ops;
    int N = (int)tf_N(t), C = (int)tf_C(t), V = t->model->vocab, Vp = t->model->vocab_padded, rc;
    float share = 1.0f / t->global_micro_batches;
    tf_head_acts ha = tf_head_of(t, slot);
    if (hy_model_post_ln(t->model))
        return tf_post_head(t, w, st, h, &ha, targets, train, share, err);
    rc = tf_norm_logits(t, w, st, &ha, h, w->logits, err);
    if (!rc) rc = o->classifier(st, w->logits, w->loss, w->loss + 1, targets, N, V, Vp, share,
                                train ? share : 1.0f, err);
    if (!train) return rc;
    if (!rc) rc = o->zero(st, ha.dout, hy_boundary_bytes(t), err);
    if (!rc) rc = o->lm_head_bwd(st, ha.dout, tf_head_dwte(t, w), NULL, w->logits, ha.out,
                                 tf_head_wte(t, w), N, C, Vp, err);
    return rc;
}

/* ln_f's backward: into dres (NULL: not) and, with `weights`, into its
 * own gradient. */
static int tf_lnf_backward(const hy_transformer *t, const hy_stage_work *w, hy_stream *st,
                           const void *in, void *slot, void *dres, int weights, hy_error *err) {
    tf_head_acts ha = tf_head_of(t, slot);
    const void *h = tf_final(t, w, t->model->stages - 1, in, slot);
    const hy_param *pw = tf_p(t, HY_P_LNF_W, 0);
    if (t->model->kind == HY_MODEL_LLAMA)
        return t->ops->rmsnorm_bwd(st, dres, weights ? tf_g(t, pw) : NULL, ha.dout, h,
                                   tf_w(t, pw), ha.rstd, (int)tf_N(t), (int)tf_C(t), err);
    return t->ops->layernorm_bwd(st, dres, weights ? tf_g(t, pw) : NULL,
                                 weights ? tf_g(t, pw + 1) : NULL, ha.dout, h, tf_w(t, pw),
                                 ha.mean, ha.rstd, (int)tf_N(t), (int)tf_C(t), err);
}

int hy_head_backward(const hy_transformer *t, const hy_stage_work *w, hy_stream *st,
                     const void *in, void *slot, void *dres, hy_error *err) {
    if (hy_model_post_ln(t->model))   /* the forward went down to d(y) */
        return t->ops->add(st, dres, tf_head_of(t, slot).dout, tf_N(t) * tf_C(t), err);
    return tf_lnf_backward(t, w, st, in, slot, dres, !t->split, err);
}

/* ------------------------------------------------------------------------ */
/* A stage */

/* Post-LN BERT: LN_emb(word[tok] + token_type[0] + position[t]), the
 * sum and its statistics kept for the backward. */
static int tf_post_embed_forward(const hy_transformer *t, hy_stream *st, void *slot,
                                 const int *tokens, hy_error *err) {
    tf_embed_acts e = tf_embed_of(t, slot);
    const hy_param *pn = tf_p(t, HY_P_LNE_W, 0);
    int C = (int)tf_C(t);
    int rc = t->ops->embedding_fwd(st, e.sum, tokens, tf_w(t, tf_p(t, HY_P_WTE, 0)),
                                   tf_w(t, tf_p(t, HY_P_WPE, 0)), tf_w(t, tf_p(t, HY_P_TTE, 0)),
                                   t->B, t->T, C, err);
    return rc ? rc : t->ops->layernorm_fwd(st, hy_stash_embedding(t, slot), e.mean, e.rstd, e.sum,
                                           tf_w(t, pn), tf_w(t, pn + 1), (int)tf_N(t), C,
                                           hy_model_ln_eps(t->model), err);
}

int hy_embed_forward(const hy_transformer *t, hy_stream *st, void *slot, const int *tokens,
                     hy_error *err) {
    if (hy_model_post_ln(t->model)) return tf_post_embed_forward(t, st, slot, tokens, err);
    return hy_embed_forward_at(t, st, hy_stash_embedding(t, slot), tokens, 0, err);
}

int hy_embed_forward_at(const hy_transformer *t, hy_stream *st, void *out, const int *tokens,
                        int t0, hy_error *err) {
    assert(t0 >= 0 && t0 + t->T <= t->model->seq_len);
    const hy_param *wte = tf_p(t, HY_P_WTE, 0), *wpe = tf_p(t, HY_P_WPE, 0);
    /* The learned positions from t0: wpe's rows are the positions. */
    const unsigned char *pos = tf_w_or_null(t, wpe);
    if (pos) pos += tf_acts(t, (size_t)t0 * tf_C(t));
    return t->ops->embedding_fwd(st, out, tokens, tf_w(t, wte), pos, NULL, t->B, t->T,
                                 (int)tf_C(t), err);
}

int hy_stage_forward(const hy_transformer *t, const hy_stage_work *w, hy_stream *st, int stage,
                     const void *in, void *slot, void *out, const int *targets, int train,
                     hy_error *err) {
    int L = t->model->n_layers[stage], first = t->model->first_layer[stage], rc = HY_OK;
    if (tf_last(t, stage)) out = tf_final(t, w, stage, in, slot);
    for (int l = 0; l < L && !rc; l++) {
        tf_layer_acts acts = tf_layer(t, w, slot, l);
        const void *lin = l == 0 ? in : tf_layer(t, w, slot, l - 1).res3;
        rc = tf_block_forward(t, w->rope, st, first + l, lin, &acts, l == L - 1 ? out : acts.res3, NULL,
                              err);
    }
    if (!rc && L == 0 && out != in) rc = t->ops->copy(st, out, in, hy_boundary_bytes(t), err);
    if (!rc && tf_last(t, stage)) rc = tf_head(t, w, st, out, slot, targets, train, err);
    return rc;
}

int hy_stage_recompute(const hy_transformer *t, const hy_stage_work *w, hy_stream *st, int stage,
                       const void *in, hy_error *err) {
    if (t->recompute != HY_RECOMPUTE_FULL) return HY_OK;
    int L = t->model->n_layers[stage], first = t->model->first_layer[stage], rc = HY_OK;
    /* The working slot is every pass's own: no stash slot is read. The
     * last block's output goes to its own place, where the head's
     * backward reads it, not to the forward's out. */
    for (int l = 0; l < L && !rc; l++) {
        tf_layer_acts acts = tf_layer(t, w, NULL, l);
        const void *lin = l == 0 ? in : tf_layer(t, w, NULL, l - 1).res3;
        rc = tf_block_forward(t, w->rope, st, first + l, lin, &acts, acts.res3, NULL, err);
    }
    return rc;
}

int hy_stage_backward(const hy_transformer *t, const hy_stage_work *w, hy_stream *st, int stage,
                      const void *in, void *slot, void *dres, hy_error *err) {
    int L = t->model->n_layers[stage], first = t->model->first_layer[stage], rc = HY_OK;
    for (int l = L - 1; l >= 0 && !rc; l--) {
        tf_layer_acts acts = tf_layer(t, w, slot, l);
        const void *lin = l == 0 ? in : tf_layer(t, w, slot, l - 1).res3;
        rc = tf_block_backward(t, w, st, first + l, lin, &acts, dres, err);
    }
    if (!rc && t->split && stage == 0)
        rc = t->ops->copy(st, tf_stash_dembedding(t, slot), dres, hy_boundary_bytes(t), err);
    return rc;
}

int hy_stage_wgrad(const hy_transformer *t, const hy_stage_work *w, hy_stream *st, int stage,
                   const void *in, void *slot, const int *tokens, hy_error *err) {
    int L = t->model->n_layers[stage], first = t->model->first_layer[stage], rc = HY_OK;
    if (tf_last(t, stage))
        rc = hy_model_post_ln(t->model) ? tf_post_head_wgrad(t, w, st, in, slot, err)
                                        : tf_lnf_backward(t, w, st, in, slot, NULL, 1, err);
    for (int l = L - 1; l >= 0 && !rc; l--) {
        tf_layer_acts acts = tf_layer(t, w, slot, l);
        const void *lin = l == 0 ? in : tf_layer(t, w, slot, l - 1).res3;
        rc = tf_block_wgrad(t, w, st, first + l, lin, &acts, err);
    }
    if (!rc && stage == 0)
        rc = hy_embed_backward(t, st, slot, tf_stash_dembedding(t, slot), tokens, err);
    return rc;
}

int hy_embed_backward(const hy_transformer *t, hy_stream *st, void *slot, const void *dres,
                      const int *tokens, hy_error *err) {
    const hy_param *wte = tf_p(t, HY_P_WTE, 0), *wpe = tf_p(t, HY_P_WPE, 0);
    int N = (int)tf_N(t), C = (int)tf_C(t), rc = HY_OK;
    if (hy_model_post_ln(t->model)) {
        /* through the embedding LayerNorm to d(sum), which every
         * embedding's gradient reads; token type row 0's is its column
         * sum (matmul_bwd's bias reduction) */
        tf_embed_acts e = tf_embed_of(t, slot);
        const hy_param *pn = tf_p(t, HY_P_LNE_W, 0);
        rc = t->ops->zero(st, e.dsum, hy_boundary_bytes(t), err);
        if (!rc) rc = t->ops->layernorm_bwd(st, e.dsum, tf_g(t, pn), tf_g(t, pn + 1), dres, e.sum,
                                            tf_w(t, pn), e.mean, e.rstd, N, C, err);
        if (!rc) rc = t->ops->matmul_bwd(st, NULL, NULL, tf_g(t, tf_p(t, HY_P_TTE, 0)), e.dsum,
                                         NULL, NULL, N, C, C, err);
        dres = e.dsum;
    }
    return rc ? rc : t->ops->embedding_bwd(st, tf_g(t, wte), wpe ? tf_g(t, wpe) : NULL, dres,
                                           tokens, t->B, t->T, C, err);
}

/* ------------------------------------------------------------------------ */
/* Generation */

size_t hy_block_work_bytes(const hy_transformer *t) { return tf_layer_bytes(t, TF_KEEP_ALL, 0); }

int hy_block_forward(const hy_transformer *t, const float *rope, hy_stream *st, int l,
                     const void *in, void *work, void *out, const hy_kv_layer *kv, hy_error *err) {
    assert(!t->split);   /* nothing is kept for a backward */
    assert(!kv || (kv->t0 >= 0 && kv->t0 + t->T <= kv->Tmax));
    size_t used = 0;
    tf_layer_acts acts = tf_layer_carve(t, work, &used, TF_KEEP_ALL, 0);
    return tf_block_forward(t, rope, st, l, in, &acts, out, kv, err);
}

int hy_head_logits(const hy_transformer *t, hy_stream *st, const void *h, void *norm,
                   float *mean, float *rstd, void *logits, hy_error *err) {
    tf_head_acts ha = { .out = norm, .dout = NULL, .mean = mean, .rstd = rstd };
    return tf_norm_logits(t, NULL, st, &ha, h, logits, err);
}
