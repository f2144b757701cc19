/*
 * math.c — the CPU backend's math entries (backend.h, "Math").
 *
 * Each entry packs its arguments and enqueues a call of the kernels/cpu
 * op that computes it, so the op runs now or is recorded and replayed with
 * the rest of the rank's iteration. Values a replay must see fresh (AdamW's
 * lr and step, the clip factor) are passed by pointer and read when the
 * call runs. On the CPU the compute type is fp32, so "act" pointers are
 * float arrays.
 */
#include <math.h>
#include <string.h>

#include "cpu_backend.h"
#include "ops.h"

/* ---- elementwise --------------------------------------------------------- */

typedef struct { void *p; size_t bytes; } zero_args;
static void run_zero(const void *p) { const zero_args *a = p; memset(a->p, 0, a->bytes); }
static int cpu_zero(hy_stream *s, void *p, size_t bytes, hy_error *err) {
    zero_args a = { p, bytes };
    return HY_CALL(s, HY_OPK_OTHER, run_zero, a, err);
}

typedef struct { float *acc; const float *x; size_t n; } add_args;
static void run_add(const void *p) {
    const add_args *a = p;
    for (size_t i = 0; i < a->n; i++) a->acc[i] += a->x[i];
}
static int cpu_add(hy_stream *s, void *acc, const void *x, size_t n, hy_error *err) {
    add_args a = { acc, x, n };
    return HY_CALL(s, HY_OPK_OTHER, run_add, a, err);
}
static int cpu_add_f32(hy_stream *s, float *acc, const float *x, size_t n, hy_error *err) {
    return cpu_add(s, acc, x, n, err);
}

typedef struct { float *out; const float *inp; size_t n; const float *dout; int kind; } gelu_args;
static void run_gelu_fwd(const void *p) {
    const gelu_args *a = p;
    hy_cpu_gelu_forward(a->out, a->inp, a->n, a->kind);
}
static int cpu_gelu_fwd(hy_stream *s, void *out, const void *inp, size_t n, int kind,
                        hy_error *err) {
    gelu_args a = { out, inp, n, NULL, kind };
    return HY_CALL(s, HY_OPK_GELU, run_gelu_fwd, a, err);
}
static void run_gelu_bwd(const void *p) {
    const gelu_args *a = p;
    hy_cpu_gelu_backward(a->out, a->dout, a->inp, a->n, a->kind);
}
static int cpu_gelu_bwd(hy_stream *s, void *dinp, const void *dout, const void *inp, size_t n,
                        int kind, hy_error *err) {
    gelu_args a = { dinp, inp, n, dout, kind };
    return HY_CALL(s, HY_OPK_GELU, run_gelu_bwd, a, err);
}

typedef struct { float *out; const float *inp, *dout; int N, F; } swiglu_args;
static void run_swiglu_fwd(const void *p) {
    const swiglu_args *a = p;
    hy_cpu_swiglu_forward(a->out, a->inp, a->N, a->F);
}
static int cpu_swiglu_fwd(hy_stream *s, void *out, const void *inp, int N, int F, hy_error *err) {
    swiglu_args a = { .out = out, .inp = inp, .N = N, .F = F };
    return HY_CALL(s, HY_OPK_GELU, run_swiglu_fwd, a, err);
}
static void run_swiglu_bwd(const void *p) {
    const swiglu_args *a = p;
    hy_cpu_swiglu_backward(a->out, a->dout, a->inp, a->N, a->F);
}
static int cpu_swiglu_bwd(hy_stream *s, void *dinp, const void *dout, const void *inp, int N,
                          int F, hy_error *err) {
    swiglu_args a = { .out = dinp, .inp = inp, .dout = dout, .N = N, .F = F };
    return HY_CALL(s, HY_OPK_GELU, run_swiglu_bwd, a, err);
}

/* ---- embedding --------------------------------------------------------- */

typedef struct {
    float *out, *dwte, *dwpe;
    const float *dout, *wte, *wpe, *type;
    const int *tokens;
    int B, T, C;
} emb_args;
static void run_emb_fwd(const void *p) {
    const emb_args *a = p;
    hy_cpu_embedding_forward(a->out, a->tokens, a->wte, a->wpe, a->type, a->B, a->T, a->C);
}
static int cpu_embedding_fwd(hy_stream *s, void *out, const int *tokens, const void *wte,
                             const void *wpe, const void *type, int B, int T, int C,
                             hy_error *err) {
    emb_args a = { .out = out, .tokens = tokens, .wte = wte, .wpe = wpe, .type = type, .B = B,
                   .T = T, .C = C };
    return HY_CALL(s, HY_OPK_EMBEDDING, run_emb_fwd, a, err);
}
static void run_emb_bwd(const void *p) {
    const emb_args *a = p;
    hy_cpu_embedding_backward(a->dwte, a->dwpe, a->dout, a->tokens, a->B, a->T, a->C);
}
static int cpu_embedding_bwd(hy_stream *s, float *dwte, float *dwpe, const void *dout,
                             const int *tokens, int B, int T, int C, hy_error *err) {
    emb_args a = { .dwte = dwte, .dwpe = dwpe, .dout = dout, .tokens = tokens, .B = B, .T = T,
                   .C = C };
    return HY_CALL(s, HY_OPK_EMBEDDING, run_emb_bwd, a, err);
}

/* ---- layernorm --------------------------------------------------------- */

typedef struct {
    float *out, *mean, *rstd, *dw, *db;
    const float *inp, *w, *b, *dout;
    const float *cmean, *crstd;
    int N, C;
    float eps;
} ln_args;
static void run_ln_fwd(const void *p) {
    const ln_args *a = p;
    hy_cpu_layernorm_forward(a->out, a->mean, a->rstd, a->inp, a->w, a->b, a->N, a->C, a->eps);
}
static int cpu_layernorm_fwd(hy_stream *s, void *out, float *mean, float *rstd, const void *inp,
                             const void *w, const void *b, int N, int C, float eps,
                             hy_error *err) {
    ln_args a = { .out = out, .mean = mean, .rstd = rstd, .inp = inp, .w = w, .b = b, .N = N,
                  .C = C, .eps = eps };
    return HY_CALL(s, HY_OPK_LAYERNORM, run_ln_fwd, a, err);
}
static void run_ln_bwd(const void *p) {
    const ln_args *a = p;
    hy_cpu_layernorm_backward(a->out, a->dw, a->db, a->dout, a->inp, a->w, a->cmean, a->crstd,
                              a->N, a->C);
}
static int cpu_layernorm_bwd(hy_stream *s, void *dinp, float *dw, float *db, const void *dout,
                             const void *inp, const void *w, const float *mean, const float *rstd,
                             int N, int C, hy_error *err) {
    ln_args a = { .out = dinp, .dw = dw, .db = db, .dout = dout, .inp = inp, .w = w,
                  .cmean = mean, .crstd = rstd, .N = N, .C = C };
    return HY_CALL(s, HY_OPK_LAYERNORM, run_ln_bwd, a, err);
}

typedef struct {
    float *out, *rstd, *dw;
    const float *inp, *w, *dout, *crstd;
    int N, C;
    float eps;
} rms_args;
static void run_rms_fwd(const void *p) {
    const rms_args *a = p;
    hy_cpu_rmsnorm_forward(a->out, a->rstd, a->inp, a->w, a->N, a->C, a->eps);
}
static int cpu_rmsnorm_fwd(hy_stream *s, void *out, float *rstd, const void *inp, const void *w,
                           int N, int C, float eps, hy_error *err) {
    rms_args a = { .out = out, .rstd = rstd, .inp = inp, .w = w, .N = N, .C = C, .eps = eps };
    return HY_CALL(s, HY_OPK_LAYERNORM, run_rms_fwd, a, err);
}
static void run_rms_bwd(const void *p) {
    const rms_args *a = p;
    hy_cpu_rmsnorm_backward(a->out, a->dw, a->dout, a->inp, a->w, a->crstd, a->N, a->C);
}
static int cpu_rmsnorm_bwd(hy_stream *s, void *dinp, float *dw, const void *dout, const void *inp,
                           const void *w, const float *rstd, int N, int C, hy_error *err) {
    rms_args a = { .out = dinp, .dw = dw, .dout = dout, .inp = inp, .w = w, .crstd = rstd, .N = N,
                   .C = C };
    return HY_CALL(s, HY_OPK_LAYERNORM, run_rms_bwd, a, err);
}

/* ---- matmul and the tied head ------------------------------------------ */

typedef struct {
    float *out, *dw, *dbias;
    const float *inp, *w, *bias, *dout;
    int N, C, OC;
} mm_args;
static void run_mm_fwd(const void *p) {
    const mm_args *a = p;
    hy_cpu_matmul_forward(a->out, a->inp, a->w, a->bias, a->N, a->C, a->OC);
}
static int cpu_matmul_fwd(hy_stream *s, void *out, const void *inp, const void *w,
                          const void *bias, int N, int C, int OC, hy_error *err) {
    mm_args a = { .out = out, .inp = inp, .w = w, .bias = bias, .N = N, .C = C, .OC = OC };
    return HY_CALL(s, HY_OPK_MATMUL_FWD, run_mm_fwd, a, err);
}
static void run_mm_bwd(const void *p) {
    const mm_args *a = p;
    hy_cpu_matmul_backward(a->out, a->dw, a->dbias, a->dout, a->inp, a->w, a->N, a->C, a->OC);
}
static int cpu_matmul_bwd(hy_stream *s, void *dinp, float *dw, float *dbias, const void *dout,
                          const void *inp, const void *w, int N, int C, int OC, hy_error *err) {
    mm_args a = { .out = dinp, .dw = dw, .dbias = dbias, .dout = dout, .inp = inp, .w = w,
                  .N = N, .C = C, .OC = OC };
    return HY_CALL(s, HY_OPK_MATMUL_BWD, run_mm_bwd, a, err);
}
static void run_head_fwd(const void *p) {
    const mm_args *a = p;
    hy_cpu_lm_head_forward(a->out, a->inp, a->w, a->bias, a->N, a->C, a->OC);
}
static int cpu_lm_head_fwd(hy_stream *s, void *logits, const void *inp, const void *wte,
                           const void *bias, int N, int C, int V, hy_error *err) {
    mm_args a = { .out = logits, .inp = inp, .w = wte, .bias = bias, .N = N, .C = C, .OC = V };
    return HY_CALL(s, HY_OPK_LM_HEAD_FWD, run_head_fwd, a, err);
}
static void run_head_bwd(const void *p) {
    const mm_args *a = p;
    hy_cpu_lm_head_backward(a->out, a->dw, a->dbias, a->dout, a->inp, a->w, a->N, a->C, a->OC);
}
static int cpu_lm_head_bwd(hy_stream *s, void *dinp, float *dwte, float *dbias,
                           const void *dlogits, const void *inp, const void *wte, int N, int C,
                           int V, hy_error *err) {
    mm_args a = { .out = dinp, .dw = dwte, .dbias = dbias, .dout = dlogits, .inp = inp, .w = wte,
                  .N = N, .C = C, .OC = V };
    return HY_CALL(s, HY_OPK_LM_HEAD_BWD, run_head_bwd, a, err);
}

/* ---- the MLP's dense layer and its GELU together ------------------------ */

/* The calls it stands for, one after the other (backend.h): the same
 * commands, the same bits and the same op timing as before it existed. */
static int cpu_matmul_gelu_fwd(hy_stream *s, void *out, void *pre, const void *inp, const void *w,
                               const void *bias, int N, int C, int OC, int kind, hy_error *err) {
    int rc = cpu_matmul_fwd(s, pre, inp, w, bias, N, C, OC, err);
    return rc ? rc : cpu_gelu_fwd(s, out, pre, (size_t)N * (size_t)OC, kind, err);
}

static int cpu_matmul_gelu_bwd(hy_stream *s, void *dpre, float *dbias_pre, float *dw, float *dbias,
                               void *scratch, const void *dout, const void *inp, const void *pre,
                               const void *w, int N, int C, int OC, int kind, hy_error *err) {
    size_t n = (size_t)N * (size_t)C;
    int rc = cpu_zero(s, scratch, n * sizeof(float), err);
    if (!rc) rc = cpu_matmul_bwd(s, scratch, dw, dbias, dout, inp, w, N, C, OC, err);
    if (!rc) rc = cpu_zero(s, dpre, n * sizeof(float), err);
    if (!rc) rc = cpu_gelu_bwd(s, dpre, scratch, pre, n, kind, err);
    /* dbias_pre as the next layer's matmul_bwd summed it over dout = dpre */
    if (!rc && dbias_pre) rc = cpu_matmul_bwd(s, NULL, NULL, dbias_pre, dpre, NULL, NULL, N, OC, C, err);
    return rc;
}

/* ---- attention and RoPE ------------------------------------------------- */

typedef struct {
    float *out, *lse, *scratch;
    const float *qkv, *dout, *cout, *clse;
    int B, T, NH, NKV, hd, causal;
} attn_args;
static void run_attn_fwd(const void *p) {
    const attn_args *a = p;
    hy_cpu_attention_forward(a->out, a->lse, a->qkv, a->B, a->T, a->NH, a->NKV, a->hd, a->causal);
}
static int cpu_attention_fwd(hy_stream *s, void *out, float *lse, const void *qkv, int B, int T,
                             int NH, int NKV, int hd, int causal, hy_error *err) {
    attn_args a = { .out = out, .lse = lse, .qkv = qkv, .B = B, .T = T, .NH = NH, .NKV = NKV,
                    .hd = hd, .causal = causal };
    return HY_CALL(s, HY_OPK_ATTENTION_FWD, run_attn_fwd, a, err);
}
static void run_attn_bwd(const void *p) {
    const attn_args *a = p;
    hy_cpu_attention_backward(a->out, a->scratch, a->dout, a->qkv, a->cout, a->clse, a->B, a->T,
                              a->NH, a->NKV, a->hd, a->causal);
}
static int cpu_attention_bwd(hy_stream *s, void *dqkv, void *scratch, const void *dout,
                             const void *qkv, const void *out, const float *lse, int B, int T,
                             int NH, int NKV, int hd, int causal, hy_error *err) {
    attn_args a = { .out = dqkv, .scratch = scratch, .dout = dout, .qkv = qkv, .cout = out,
                    .clse = lse, .B = B, .T = T, .NH = NH, .NKV = NKV, .hd = hd,
                    .causal = causal };
    return HY_CALL(s, HY_OPK_ATTENTION_BWD, run_attn_bwd, a, err);
}

/* ---- attention over a KV cache ------------------------------------------ */

typedef struct {
    float *out, *kc, *vc;
    const float *qkv;
    int B, Tq, t0, Tmax, NH, NKV, hd;
} kv_args;
static void run_kv_append(const void *p) {
    const kv_args *a = p;
    hy_cpu_kv_append(a->kc, a->vc, a->qkv, a->B, a->Tq, a->t0, a->Tmax, a->NH, a->NKV, a->hd);
}
static int cpu_kv_append(hy_stream *s, void *kc, void *vc, const void *qkv, int B, int Tq,
                         int t0, int Tmax, int NH, int NKV, int hd, hy_error *err) {
    kv_args a = { .kc = kc, .vc = vc, .qkv = qkv, .B = B, .Tq = Tq, .t0 = t0, .Tmax = Tmax,
                  .NH = NH, .NKV = NKV, .hd = hd };
    return HY_CALL(s, HY_OPK_OTHER, run_kv_append, a, err);
}
static void run_attention_cached(const void *p) {
    const kv_args *a = p;
    hy_cpu_attention_cached(a->out, a->qkv, a->kc, a->vc, a->B, a->Tq, a->t0, a->Tmax, a->NH,
                            a->NKV, a->hd);
}
static int cpu_attention_cached(hy_stream *s, void *out, const void *qkv, const void *kc,
                                const void *vc, int B, int Tq, int t0, int Tmax, int NH, int NKV,
                                int hd, hy_error *err) {
    /* The op only reads the cache; the struct's pointers are shared with
     * kv_append's, which writes it. */
    kv_args a = { .out = out, .kc = (float *)kc, .vc = (float *)vc, .qkv = qkv, .B = B, .Tq = Tq,
                  .t0 = t0, .Tmax = Tmax, .NH = NH, .NKV = NKV, .hd = hd };
    return HY_CALL(s, HY_OPK_ATTENTION_FWD, run_attention_cached, a, err);
}

typedef struct {
    float *qkv;
    const float *cs;
    int B, T, NH, NKV, hd, inverse;
} rope_args;
static void run_rope(const void *p) {
    const rope_args *a = p;
    hy_cpu_rope(a->qkv, a->cs, a->B, a->T, a->NH, a->NKV, a->hd, a->inverse);
}
static int cpu_rope(hy_stream *s, void *qkv, const float *cs, int B, int T, int NH, int NKV,
                    int hd, int inverse, hy_error *err) {
    rope_args a = { qkv, cs, B, T, NH, NKV, hd, inverse };
    /* timed with the attention it belongs to */
    return HY_CALL(s, inverse ? HY_OPK_ATTENTION_BWD : HY_OPK_ATTENTION_FWD, run_rope, a, err);
}

/* ---- classifier --------------------------------------------------------- */

typedef struct {
    float *logits, *loss_acc, *hits_acc;
    const int *targets;
    int N, V, Vp;
    float grad_scale, loss_scale;
} cls_args;
static void run_classifier(const void *p) {
    const cls_args *a = p;
    float mean = 0.0f;
    int hits = 0;
    /* Targets were checked against the vocabulary when the shard was
     * opened, so the op's "bad target" answer cannot occur here. */
    int count = hy_cpu_classifier_forward_backward(a->logits, NULL, &mean, &hits, a->targets, a->N,
                                                   a->V, a->Vp, a->grad_scale);
    if (count > 0 && a->loss_acc) *a->loss_acc += a->loss_scale * mean;
    if (a->hits_acc) *a->hits_acc += (float)hits;
}
static int cpu_classifier(hy_stream *s, void *logits, float *loss_acc, float *hits_acc,
                          const int *targets, int N, int V, int Vp, float grad_scale,
                          float loss_scale, hy_error *err) {
    cls_args a = { logits, loss_acc, hits_acc, targets, N, V, Vp, grad_scale, loss_scale };
    return HY_CALL(s, HY_OPK_CLASSIFIER, run_classifier, a, err);
}

/* ---- gradient norm, clipping, AdamW ------------------------------------- */

typedef struct { double *acc; const float *x; size_t n; } sumsq_args;
static void run_sumsq(const void *p) {
    const sumsq_args *a = p;
    hy_cpu_sumsq(a->acc, a->x, a->n);
}
static int cpu_sumsq(hy_stream *s, double *acc, const float *x, size_t n, hy_error *err) {
    sumsq_args a = { acc, x, n };
    return HY_CALL(s, HY_OPK_OTHER, run_sumsq, a, err);
}

typedef struct { float *factor, *norm; const double *partials; int n; float max_norm; } clip_args;
static void run_clip(const void *p) {
    const clip_args *a = p;
    double total = 0.0;
    for (int i = 0; i < a->n; i++) total += a->partials[i];
    *a->norm = (float)sqrt(total);
    *a->factor = hy_cpu_clip_factor(total, a->max_norm);
}
static int cpu_clip(hy_stream *s, float *factor, float *norm, const double *partials, int n,
                    float max_norm, hy_error *err) {
    clip_args a = { factor, norm, partials, n, max_norm };
    return HY_CALL(s, HY_OPK_OTHER, run_clip, a, err);
}

typedef struct {
    float *param, *m, *v;
    const float *grad;
    size_t n;
    const hy_adamw_hparams *hp;
    const float *factor;
    int decay;
} adamw_args;
static void run_adamw(const void *p) {
    const adamw_args *a = p;
    float f = *a->factor;
    if (!isfinite(f)) return;   /* a non-finite step: nothing changes */
    hy_cpu_adamw_params hp = { a->hp->lr, a->hp->beta1, a->hp->beta2, a->hp->eps,
                               a->hp->weight_decay, a->hp->step };
    hy_cpu_adamw_update(a->param, a->grad, a->m, a->v, a->n, &hp, f, a->decay);
}
static int cpu_adamw(hy_stream *s, float *param, void *param_compute, const float *grad, float *m,
                     float *v, size_t n, const hy_adamw_hparams *hp, const float *factor,
                     int decay, hy_error *err) {
    (void)param_compute;   /* the fp32 master weights are the compute copy */
    adamw_args a = { param, m, v, grad, n, hp, factor, decay };
    return HY_CALL(s, HY_OPK_ADAMW, run_adamw, a, err);
}

/* The compute type is fp32: the "compute copy" is a copy. */
typedef struct { float *dst; const float *src; size_t n; } to_act_args;
static void run_to_act(const void *p) {
    const to_act_args *a = p;
    memcpy(a->dst, a->src, a->n * sizeof(float));
}
static int cpu_to_act(hy_stream *s, void *dst, const float *src, size_t n, hy_error *err) {
    to_act_args a = { dst, src, n };
    return HY_CALL(s, HY_OPK_OTHER, run_to_act, a, err);
}

/* attention.c's backward works one head at a time: its P and dP, T x T each. */
static size_t cpu_attention_scratch(int B, int T, int NH, int NKV, int hd) {
    (void)B; (void)NH; (void)NKV; (void)hd;
    return 2 * (size_t)T * (size_t)T * sizeof(float);
}

void hy_cpu_math_ops(hy_backend_ops *o) {
    o->act_size = sizeof(float);
    o->zero = cpu_zero;
    o->add = cpu_add;
    o->add_f32 = cpu_add_f32;
    o->embedding_fwd = cpu_embedding_fwd;
    o->embedding_bwd = cpu_embedding_bwd;
    o->layernorm_fwd = cpu_layernorm_fwd;
    o->layernorm_bwd = cpu_layernorm_bwd;
    o->matmul_fwd = cpu_matmul_fwd;
    o->matmul_bwd = cpu_matmul_bwd;
    o->gelu_fwd = cpu_gelu_fwd;
    o->gelu_bwd = cpu_gelu_bwd;
    o->matmul_gelu_fwd = cpu_matmul_gelu_fwd;
    o->matmul_gelu_bwd = cpu_matmul_gelu_bwd;
    o->rmsnorm_fwd = cpu_rmsnorm_fwd;
    o->rmsnorm_bwd = cpu_rmsnorm_bwd;
    o->rope = cpu_rope;
    o->swiglu_fwd = cpu_swiglu_fwd;
    o->swiglu_bwd = cpu_swiglu_bwd;
    o->attention_fwd = cpu_attention_fwd;
    o->attention_bwd = cpu_attention_bwd;
    o->kv_append = cpu_kv_append;
    o->attention_cached = cpu_attention_cached;
    o->lm_head_fwd = cpu_lm_head_fwd;
    o->lm_head_bwd = cpu_lm_head_bwd;
    o->classifier = cpu_classifier;
    o->sumsq = cpu_sumsq;
    o->clip = cpu_clip;
    o->adamw = cpu_adamw;
    o->to_act = cpu_to_act;
    o->attention_scratch = cpu_attention_scratch;
}
