/*
 * backend.h — the one device interface both backends implement
 * (DESIGN §2 "The parts").
 *
 * Everything above this header (runtime, model, schedule) is plain C and
 * knows nothing of CUDA; the CPU backend (kernels/cpu/) and the CUDA
 * backend (kernels/cuda/, graphs/) are two implementations of what is
 * declared here. This header must never include a CUDA header, so that
 * lib/ builds and runs with gcc alone.
 *
 * It grows piece by piece: the device query (how many CUDA devices this
 * process can see, what each one is, which pairs reach each other's memory,
 * DESIGN §3 "Cross-rank movement"); then execution: memory per rank, one
 * stream per rank, the 32-bit flags of the cross-rank handshake, copies, and
 * record/replay of a rank's iteration. The math ops follow with the runtime,
 * and an optional per-rank, per-op timer (op_stats) for benchmarks.
 *
 * In a build without nvcc the CUDA entry points still exist (a stand-in,
 * kernels/cuda/stub.c, is linked instead of kernels/cuda/device.cu) and
 * answer "no CUDA devices", so callers never need #ifdefs. Above them all,
 * hy_backend_open (lib/backend.c) is the one way a run picks and opens
 * its backend, and hy_backend_describe says what it would get.
 */
#ifndef HY_BACKEND_H
#define HY_BACKEND_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {   /* the CUDA backend is compiled as C++ by nvcc */
#endif

#include "error.h"   /* inside: error.h is C and has no extern "C" of its own */

/* ---------------------------------------------------------------------- */
/* Build */

/* The backends compiled into this binary, space-separated: "cpu" or
 * "cpu cuda". Compiled in is not the same as usable: a CUDA build on a
 * machine without a GPU reports "cpu cuda" and hy_device_count() == 0. */
const char *hy_backends_compiled(void);

/* ---------------------------------------------------------------------- */
/* CUDA devices */

typedef struct {
    char name[256];        /* e.g. "NVIDIA H200" */
    size_t total_mem;      /* bytes of device memory */
    int cc_major;          /* compute capability, e.g. 9.0 for Hopper */
    int cc_minor;
    int sm_count;          /* streaming multiprocessors */
} hy_device_info;

/* Device `index`'s free memory now, in bytes (cudaMemGetInfo: what this
 * process could still allocate there). */
int hy_device_free(int index, size_t *free_bytes, hy_error *err);

/* Sets *count to the number of CUDA devices this process can see. No CUDA
 * backend in the build, no driver installed, or no GPU present all give
 * *count = 0 and success: that is the normal state of a CPU machine, and
 * `backend: "auto"` falls back to the CPU on it. Only a driver that is
 * there but broken is an error. */
int hy_device_count(int *count, hy_error *err);

/* Fills *out for device `index` (0 .. count-1). Fails with a message that
 * says how many devices there are when the index does not exist. */
int hy_device_query(int index, hy_device_info *out, hy_error *err);

/* Sets *yes to 1 when device `a` can read and write device `b`'s memory
 * directly, else 0. A device always reaches itself (several ranks may share
 * one GPU, and then a "peer" copy is a device-to-device copy). */
int hy_device_can_access_peer(int a, int b, int *yes, hy_error *err);


/* ---------------------------------------------------------------------- */
/* Execution
 *
 * A backend owns the memory of every rank and one stream per rank. Work is
 * enqueued on a stream and runs in order. Between `capture_begin` and
 * `capture_end` nothing runs: the work is recorded into a graph, which
 * `graph_launch` replays, so a rank's whole iteration is recorded once and
 * replayed every step (DESIGN §4 "Record and replay"). On the CPU a stream
 * runs its work on the calling thread (the rank's thread) and a graph is a
 * list of recorded commands; on CUDA they are a cudaStream_t and a
 * cudaGraphExec_t. The runtime's code path is the same for both.
 *
 * Flags are 32-bit words that two ranks can see (host-mapped or peer
 * memory on CUDA, plain memory on the CPU). `wait_flag` blocks the stream
 * until the word equals a value and then leaves it holding another (the
 * waiter consumes the signal); `write_flag` stores a value after all
 * earlier work of the stream. The values are constants, so recorded waits
 * and writes stay valid on every replay: this is the full/free handshake
 * of DESIGN §3 "Cross-rank movement", which cannot wait on a stale signal by
 * construction. The consuming store is part of the wait, not a write
 * queued after it, because on CUDA an eager wait is done by the rank's
 * thread, which runs ahead of its stream: a reset queued on the stream
 * could still be pending when the thread comes back to the same flag for
 * the slot's next message and sees the old value.
 *
 * A wait that lasts longer than the watchdog fails with the site it was
 * given (rank, action, edge, slot), and `abort` makes every wait in the
 * backend fail promptly, so one failing rank stops the others instead of
 * leaving them blocked. Nothing here hangs.
 */

typedef struct hy_backend hy_backend;
typedef struct hy_stream hy_stream;
typedef struct hy_graph hy_graph;

/* AdamW's hyper-parameters, in a rank's memory: the step-varying ones
 * (lr, step) are rewritten by the host between steps and read by the
 * optimizer when it runs, so a replayed graph sees the current values. */
typedef struct {
    float lr, beta1, beta2, eps, weight_decay;
    int step;   /* 1-based, for the bias corrections */
} hy_adamw_hparams;

/* Sums a rank's gradients over its replicas in other processes (data
 * parallelism, dp.h), which made it. A backend whose rank memory is host
 * memory calls start and wait from the rank's stream when the commands
 * run: start begins summing n floats at buf in place, as sum number
 * `bucket` (0 .. buckets-1) of the step; wait returns once that sum is
 * complete. Neither can fail back to the stream: a failing sum ends the
 * whole job (MPI's fatal error handler), as a lost peer would anyway. A
 * GPU backend sums in device memory with its own library instead (NCCL),
 * set up by reduce_connect: broadcast hands it replica 0's bytes (its
 * communicator's id) on every replica, and device_comm is its state. */
typedef struct hy_reducer hy_reducer;
struct hy_reducer {
    void (*start)(hy_reducer *r, int bucket, float *buf, size_t n);
    void (*wait)(hy_reducer *r, int bucket);
    int (*broadcast)(hy_reducer *r, void *buf, size_t bytes);   /* 0 on success */
    int replicas, replica, buckets;
    void *device_comm;   /* the backend's, between reduce_connect and reduce_disconnect */
};

/* Who waits, for the watchdog's report. */
typedef struct {
    int rank;
    char what[160];   /* e.g. "F m3 s5: activations from rank 2 (edge s4->s5, slot 1)" */
} hy_wait_site;

/* The GELU an MLP uses (backend.h's gelu ops): GPT-2's tanh approximation
 * ("gelu_new"), or the exact x·Φ(x) = ½ x (1 + erf(x/√2)) of BERT
 * (Hugging Face's hidden_act "gelu"). */
typedef enum { HY_GELU_TANH, HY_GELU_ERF } hy_gelu_kind;

/* ---- Op timing (optional) ---------------------------------------------
 *
 * Where a rank's time goes, for benchmarks and profiling (tools/bench.c):
 * the backend can count, per rank and per kind of work, how many pieces of
 * work ran and the seconds they took. Off by default; when off it costs
 * one relaxed load per command and nothing else. On the CPU "seconds" are
 * the wall time of the command on the rank's thread; `wait` is the time a
 * rank spent blocked on a flag (its share of the pipeline bubble plus the
 * per-step exchanges), `copy` the peer copies into mailboxes. */
typedef enum {
    HY_OPK_MATMUL_FWD,     /* matmul_fwd (c_attn, c_proj, c_fc, mlp c_proj) */
    HY_OPK_MATMUL_BWD,     /* matmul_bwd */
    HY_OPK_LM_HEAD_FWD,    /* lm_head_fwd */
    HY_OPK_LM_HEAD_BWD,    /* lm_head_bwd */
    HY_OPK_ATTENTION_FWD,  /* attention_fwd (its per-head GEMMs and softmax), rope */
    HY_OPK_ATTENTION_BWD,  /* attention_bwd, rope's inverse */
    HY_OPK_LAYERNORM,      /* layernorm_fwd and _bwd, rmsnorm_fwd and _bwd */
    HY_OPK_GELU,           /* gelu_fwd and _bwd, swiglu_fwd and _bwd */
    HY_OPK_EMBEDDING,      /* embedding_fwd and _bwd */
    HY_OPK_CLASSIFIER,     /* classifier */
    HY_OPK_ADAMW,          /* adamw */
    HY_OPK_OTHER,          /* zero, add, sumsq, clip, scale, write_flag, test ops */
    HY_OPK_COPY,           /* copy (mailbox sends) */
    HY_OPK_WAIT,           /* wait_flag: blocked on another rank */
    HY_OPK_REDUCE,         /* reduce_start and reduce_wait: gradients summed across processes */
    HY_OPK_COUNT
} hy_op_kind;

/* Short names for tables: "matmul_fwd", ..., "wait"; "?" when out of range. */
static inline const char *hy_op_kind_name(int kind) {
    static const char *const names[HY_OPK_COUNT] = {
        "matmul_fwd", "matmul_bwd", "lm_head_fwd", "lm_head_bwd", "attention_fwd",
        "attention_bwd", "layernorm", "gelu", "embedding", "classifier", "adamw", "other",
        "copy", "wait", "reduce",
    };
    return kind >= 0 && kind < HY_OPK_COUNT ? names[kind] : "?";
}

typedef struct {
    uint64_t calls;
    double seconds;
} hy_op_stat;

/* What a recorded graph holds (graph_dot): nodes of each kind. */
typedef struct {
    int nodes, kernels, memcpys, memsets, memops, others;
} hy_graph_nodes;

typedef struct {
    const char *name;   /* "cpu" or "cuda" */

    void (*destroy)(hy_backend *be);

    /* Memory of one rank; zero-filled. Freed by free_mem or destroy. */
    int (*alloc)(hy_backend *be, int rank, size_t bytes, void **out, hy_error *err);
    /* Memory that ranks a and b both read and write (flags). */
    int (*alloc_shared)(hy_backend *be, int a, int b, size_t bytes, void **out, hy_error *err);
    void (*free_mem)(hy_backend *be, void *p);
    /* Synchronous copies between the host and a rank's memory. */
    int (*upload)(hy_backend *be, int rank, void *dst, const void *src, size_t bytes,
                  hy_error *err);
    int (*download)(hy_backend *be, int rank, void *dst, const void *src, size_t bytes,
                    hy_error *err);

    int (*stream_create)(hy_backend *be, int rank, hy_stream **out, hy_error *err);
    void (*stream_destroy)(hy_stream *s);
    /* Waits until everything enqueued on s has run; reports its failure. */
    int (*sync)(hy_stream *s, hy_error *err);

    /* Enqueued work. Eagerly run work reports its failure at once; in a
     * replay the failure comes back from graph_launch or sync. */
    /* Waits until *flag == value, then stores `then` into it (then ==
     * value: leaves it as it is). */
    int (*wait_flag)(hy_stream *s, uint32_t *flag, uint32_t value, uint32_t then,
                     const hy_wait_site *site, hy_error *err);
    int (*write_flag)(hy_stream *s, uint32_t *flag, uint32_t value, hy_error *err);
    /* dst and src may belong to different ranks: a peer copy. */
    int (*copy)(hy_stream *s, void *dst, const void *src, size_t bytes, hy_error *err);

    /* Record and replay. */
    int (*capture_begin)(hy_stream *s, hy_error *err);
    int (*capture_end)(hy_stream *s, hy_graph **out, hy_error *err);
    int (*graph_launch)(hy_graph *g, hy_stream *s, hy_error *err);
    void (*graph_destroy)(hy_graph *g);

    /* Makes every current and future wait fail ("stopped while waiting",
     * with cause HY_CAUSE_STOPPED). Safe to call from any thread. */
    void (*abort)(hy_backend *be, const char *why);

    /* Math (DESIGN §5 "Model, numerics, data, files"): the transformer's ops,
     * enqueued. Activations ("act", void *) are in the backend's compute
     * type: fp32 on the CPU, bf16 on CUDA; weights are read from a compute
     * copy of the same type (on the CPU, the fp32 master weights themselves).
     * Gradients, optimizer state and LayerNorm statistics are fp32. Every
     * backward accumulates into its gradients (+=), the caller zeroes them
     * first (except the dpre that matmul_gelu_bwd stores, and the
     * classifier's in-place gradient); kernels/cpu/ops.h gives each op's
     * equations. In matmul_bwd,
     * layernorm_bwd and lm_head_bwd any gradient pointer may be NULL: that
     * gradient is not computed (a split backward asks for the input's in
     * its B pass and the weights' in its W pass). */
    size_t act_size;   /* bytes per activation element */
    int (*zero)(hy_stream *s, void *p, size_t bytes, hy_error *err);
    int (*add)(hy_stream *s, void *acc, const void *x, size_t n, hy_error *err);     /* act */
    int (*add_f32)(hy_stream *s, float *acc, const float *x, size_t n, hy_error *err);
    /* out[b,t] = wte[tokens[b,t]] + wpe[t] + type (kernels/cpu/ops.h).
     * wpe NULL: no learned positions (Llama: RoPE inside attention);
     * embedding_bwd's dwpe is then NULL too. type: one row [C] added to
     * every token (BERT's token-type row 0; NULL: none); its gradient is
     * the column sum of dout, which matmul_bwd's bias sum gives. */
    int (*embedding_fwd)(hy_stream *s, void *out, const int *tokens, const void *wte,
                         const void *wpe, const void *type, int B, int T, int C, hy_error *err);
    int (*embedding_bwd)(hy_stream *s, float *dwte, float *dwpe, const void *dout,
                         const int *tokens, int B, int T, int C, hy_error *err);
    /* LayerNorm with its epsilon (model.h's hy_model_ln_eps: GPT-2's 1e-5,
     * post-LN BERT's norm_eps). */
    int (*layernorm_fwd)(hy_stream *s, void *out, float *mean, float *rstd, const void *inp,
                         const void *w, const void *b, int N, int C, float eps, hy_error *err);
    int (*layernorm_bwd)(hy_stream *s, void *dinp, float *dw, float *db, const void *dout,
                         const void *inp, const void *w, const float *mean, const float *rstd,
                         int N, int C, hy_error *err);
    int (*matmul_fwd)(hy_stream *s, void *out, const void *inp, const void *w, const void *bias,
                      int N, int C, int OC, hy_error *err);
    int (*matmul_bwd)(hy_stream *s, void *dinp, float *dw, float *dbias, const void *dout,
                      const void *inp, const void *w, int N, int C, int OC, hy_error *err);
    /* GELU of `kind` (hy_gelu_kind): GPT-2's tanh approximation or BERT's
     * exact erf one. */
    int (*gelu_fwd)(hy_stream *s, void *out, const void *inp, size_t n, int kind, hy_error *err);
    int (*gelu_bwd)(hy_stream *s, void *dinp, const void *dout, const void *inp, size_t n,
                    int kind, hy_error *err);
    /* The MLP's dense layer and the GELU after it, as one op so that a
     * backend can do both in one pass (the GPU: in the GEMM's epilogue):
     *   pre[N,OC] = inp[N,C] · w[C,OC] + bias[OC]   (kept for the backward)
     *   out = gelu(pre)
     * exactly matmul_fwd then gelu_fwd (the CPU runs those). */
    int (*matmul_gelu_fwd)(hy_stream *s, void *out, void *pre, const void *inp, const void *w,
                           const void *bias, int N, int C, int OC, int kind, hy_error *err);
    /* The backward of the dense layer that reads the GELU's output, carried
     * on through the GELU: inp = gelu(pre) [N,C], w [C,OC], dout [N,OC];
     *   dw += inpᵀ · dout,  dbias += Σ_n dout   (as matmul_bwd; NULL: not)
     *   dpre = gelu'(pre) ⊙ (dout · wᵀ)         STORED, not added: d of a
     *                                           pre-activation has one path
     *   dbias_pre += Σ_n dpre                   (the bias gradient of the
     *                                           layer before; NULL: not)
     * scratch: N·C activations of room (d of the GELU's output), contents
     * undefined after. The CPU runs exactly zero(scratch), matmul_bwd into
     * it, zero(dpre), gelu_bwd, and matmul_bwd's bias sum over dpre. */
    int (*matmul_gelu_bwd)(hy_stream *s, void *dpre, float *dbias_pre, float *dw, float *dbias,
                           void *scratch, const void *dout, const void *inp, const void *pre,
                           const void *w, int N, int C, int OC, int kind, hy_error *err);
    /* Self-attention, with grouped-query attention (GQA). qkv is
     * [B, T, (NH + 2·NKV)·hd]: per token the NH query heads, then the NKV
     * key heads, then the NKV value heads, each hd wide (NKV = NH is
     * GPT-2's [q | k | v]); NKV divides NH, and query head h reads key and
     * value head h / (NH/NKV) (Hugging Face's repeat_kv: kv head j serves
     * query heads j·g .. j·g+g−1, g = NH/NKV). out [B, T, NH·hd]:
     *   out_h = softmax(q_h · k_jᵀ / sqrt(hd), over keys s ≤ t when causal) · v_j
     * lse [B, NH, T] fp32 is what the forward leaves for the backward: per
     * row the softmax's log-sum-exp of the scaled scores (the CPU: natural
     * log; CUDA: the kernels' base-2 units, L = log2 Σ 2^(s·log2 e)). The
     * backward reads it with out (the forward's output, unchanged) to
     * recompute the probabilities, so nothing T×T is ever kept; it adds d
     * of q, k, v into dqkv (qkv's layout; a kv head's gradient sums over
     * the query heads of its group). scratch: attention_scratch bytes,
     * contents undefined after. */
    int (*attention_fwd)(hy_stream *s, void *out, float *lse, const void *qkv, int B, int T,
                         int NH, int NKV, int hd, int causal, hy_error *err);
    int (*attention_bwd)(hy_stream *s, void *dqkv, void *scratch, const void *dout,
                         const void *qkv, const void *out, const float *lse, int B, int T, int NH,
                         int NKV, int hd, int causal, hy_error *err);
    /* Llama-family ops (DESIGN §5 "Model, numerics, data, files"). Each
     * stays NULL in a backend that does not have it yet; a model that
     * needs one is then refused where the run is opened.
     *
     * RMSNorm over the last dimension, no mean, no bias:
     *   rstd[n] = 1 / sqrt((1/C) Σ_i x[n,i]² + eps)    (saved, fp32 [N])
     *   out[n,i] = x[n,i] · rstd[n] · w[i]
     * backward, with g = dout ⊙ w and xhat = x · rstd:
     *   dinp[n,i] += rstd[n] · (g[n,i] − xhat[n,i] · mean_i(g ⊙ xhat)[n])
     *   dw[i]     += Σ_n dout[n,i] · xhat[n,i]        (dinp, dw may be NULL) */
    int (*rmsnorm_fwd)(hy_stream *s, void *out, float *rstd, const void *inp, const void *w,
                       int N, int C, float eps, hy_error *err);
    int (*rmsnorm_bwd)(hy_stream *s, void *dinp, float *dw, const void *dout, const void *inp,
                       const void *w, const float *rstd, int N, int C, hy_error *err);
    /* Rotary position embedding, in place on the q and k heads of a
     * [B, T, (NH + 2·NKV)·hd] attention input (q heads, then k heads, then
     * v heads, each hd wide; v is not touched). Hugging Face Llama's
     * "rotate half" pairing: for position t and i < hd/2, with
     * c = cs[t·hd + i] and s = cs[t·hd + hd/2 + i] (per position its hd/2
     * cosines, then its hd/2 sines, fp32, built once by the host: model.h's
     * hy_rope_table; a caller at positions t0.. passes cs + t0·hd),
     *   x'[i]        = x[i] · c − x[i + hd/2] · s
     *   x'[i + hd/2] = x[i + hd/2] · c + x[i] · s
     * inverse != 0 rotates by −angle (s negated): the backward, applied in
     * place to d(q) and d(k) after the attention's backward wrote them. */
    int (*rope)(hy_stream *s, void *qkv, const float *cs, int B, int T, int NH, int NKV, int hd,
                int inverse, hy_error *err);
    /* SwiGLU on one fused up-projection: inp [N, 2F] holds per row the gate
     * (columns 0..F−1) then the up values (F..2F−1);
     *   out[n,i] = silu(gate[n,i]) · up[n,i],  silu(x) = x / (1 + e^−x)
     * backward, with σ = 1/(1+e^−gate):
     *   dgate += dout · up · σ · (1 + gate · (1 − σ));  dup += dout · silu(gate)
     * into dinp [N, 2F] (accumulated, like every backward). */
    int (*swiglu_fwd)(hy_stream *s, void *out, const void *inp, int N, int F, hy_error *err);
    int (*swiglu_bwd)(hy_stream *s, void *dinp, const void *dout, const void *inp, int N, int F,
                      hy_error *err);
    /* Generation with a KV cache (lib/sample.h): kc and vc [B, Tmax,
     * NKV·hd] are one layer's cache in the compute type; qkv [B, Tq,
     * (NH + 2·NKV)·hd] the attention input of Tq new tokens at positions
     * t0 .. t0+Tq−1 (q heads, k heads, v heads; GPT-2: NKV = NH).
     * kv_append copies their k and v into rows t0.. of the cache;
     * attention_cached then attends each new query to the cached keys
     * 0 .. its own position (causal among the new ones), query head h
     * reading kv head h / (NH/NKV) (grouped-query), into out [B, Tq,
     * NH·hd]: row for row attention_fwd's causal forward over the whole
     * sequence (kernels/cpu/ops.h, kvcache.c). NULL in a backend without
     * them: `hanayo sample` is then refused. */
    int (*kv_append)(hy_stream *s, void *kc, void *vc, const void *qkv, int B, int Tq, int t0,
                     int Tmax, int NH, int NKV, int hd, hy_error *err);
    int (*attention_cached)(hy_stream *s, void *out, const void *qkv, const void *kc,
                            const void *vc, int B, int Tq, int t0, int Tmax, int NH, int NKV,
                            int hd, hy_error *err);
    /* The tied (or untied) LM head, logits = inp · wteᵀ (+ bias [V], BERT's
     * decoder bias; NULL: none); the backward adds dbias += Σ_n dlogits
     * (NULL: not). */
    int (*lm_head_fwd)(hy_stream *s, void *logits, const void *inp, const void *wte,
                       const void *bias, int N, int C, int V, hy_error *err);
    int (*lm_head_bwd)(hy_stream *s, void *dinp, float *dwte, float *dbias, const void *dlogits,
                       const void *inp, const void *wte, int N, int C, int V, hy_error *err);
    /* Softmax cross-entropy and its gradient in place over logits [N, Vp]:
     * dlogits = grad_scale (softmax - onehot) / count, over the rows whose
     * target is not -1; *loss_acc += loss_scale * (their mean loss);
     * *hits_acc += how many of them have their target as the argmax over
     * the V real columns (the first of equal maxima), a whole number kept
     * exactly in a float up to 2^24 (masked-LM accuracy). Either
     * accumulator may be NULL. */
    int (*classifier)(hy_stream *s, void *logits, float *loss_acc, float *hits_acc,
                      const int *targets, int N, int V, int Vp, float grad_scale,
                      float loss_scale, hy_error *err);
    int (*sumsq)(hy_stream *s, double *acc, const float *x, size_t n, hy_error *err);
    /* norm = sqrt(sum of partials[0..n), added in order); factor = the
     * clip coefficient min(1, max_norm / (norm + 1e-6)), 1 if max_norm is 0,
     * and NaN when the norm is not finite: that is the step's one fused
     * non-finite check, and AdamW below skips its update on a NaN factor. */
    int (*clip)(hy_stream *s, float *factor, float *norm, const double *partials, int n,
                float max_norm, hy_error *err);
    /* One AdamW step on n parameters with the gradient scaled by *factor
     * (the clip factor, read when it runs); a non-finite *factor leaves
     * param, m, v and the compute copy untouched, so a step whose loss or
     * gradients overflowed never reaches the weights. Also refreshes the
     * compute copy (NULL when the backend computes on the master weights,
     * act_size == 4). */
    int (*adamw)(hy_stream *s, float *param, void *param_compute, const float *grad, float *m,
                 float *v, size_t n, const hy_adamw_hparams *hp, const float *factor, int decay,
                 hy_error *err);
    /* dst[i] = src[i] in the compute type: the compute copy of weights
     * that were just uploaded (a plain copy when act_size == 4). */
    int (*to_act)(hy_stream *s, void *dst, const float *src, size_t n, hy_error *err);
    /* Bytes of the `scratch` attention_bwd needs for one call. */
    size_t (*attention_scratch)(int B, int T, int NH, int NKV, int hd);
    /* Sizes stream s's own scratch, before its first op, for every op on
     * at most `rows` rows (tokens: B * T) of at most `width` values (the
     * widest dense layer or LayerNorm, 4 * d_model), so that no op
     * allocates once ranks run (on a GPU an allocation may wait for the
     * whole device). NULL in a backend whose ops take no scratch. */
    int (*reserve)(hy_stream *s, size_t rows, size_t width, hy_error *err);

    /* Profiling and test hooks. timestamp stores, when it runs, a clock in
     * nanoseconds (CLOCK_MONOTONIC on the CPU, %globaltimer on a GPU: one
     * clock for all ranks of the backend) into *dst, which is rank memory.
     * sleep holds the stream for ns nanoseconds (a spin on a GPU; on the
     * CPU a sleep that abort cuts short): the slow-stage test hook. */
    int (*timestamp)(hy_stream *s, uint64_t *dst, hy_error *err);
    int (*sleep)(hy_stream *s, uint64_t ns, hy_error *err);

    /* Op timing (see hy_op_kind); NULL in a backend that does not time.
     * Copies what was counted since the previous call into
     * out[rank * HY_OPK_COUNT + kind] for every rank (out may be NULL, to
     * discard), zeroes the counts, and turns timing on (enable != 0) or
     * off from then on. Call it only while no rank runs work, e.g. between
     * hy_runtime_step calls: each rank's thread owns its counters while it
     * runs, and the runtime's step handshake (a mutex) orders those writes
     * before this read. Recorded graphs are timed too: the switch is read
     * when each command runs, not when it is recorded. */
    int (*op_stats)(hy_backend *be, int enable, hy_op_stat *out, hy_error *err);

    /* Writes recorded graph g as Graphviz DOT to path and counts its nodes
     * (hanayo profile); NULL in a backend whose graphs are not CUDA graphs. */
    int (*graph_dot)(hy_graph *g, const char *path, hy_graph_nodes *nodes, hy_error *err);

    /* Data parallelism (hy_reducer above): enqueue the start of sum
     * `bucket` over n floats at buf, and the wait for it. NULL in a
     * backend that cannot sum across processes (the runtime then refuses
     * a run of more than one replica). */
    int (*reduce_start)(hy_stream *s, hy_reducer *r, int bucket, float *buf, size_t n,
                        hy_error *err);
    int (*reduce_wait)(hy_stream *s, hy_reducer *r, int bucket, hy_error *err);
    /* Collective over r's replicas: sets up (and takes down) what the
     * sums of rank `rank` need on this backend; called between steps, for
     * every rank in order on every replica. NULL: nothing to set up. */
    int (*reduce_connect)(hy_backend *be, int rank, hy_reducer *r, hy_error *err);
    void (*reduce_disconnect)(hy_backend *be, int rank, hy_reducer *r);

    /* The bytes the backend holds for rank now in the rank's own memory:
     * what alloc (and alloc_shared, where it puts flags there) and the
     * scratch reserve sized have taken, freed blocks not subtracted (the
     * runtime frees nothing before its end). What the memory plan
     * (memplan.h) is checked against. */
    size_t (*allocated)(hy_backend *be, int rank);
} hy_backend_ops;

/* Where a backend puts a handshake's flags (alloc_shared). */
typedef enum {
    HY_FLAGS_PRODUCER,   /* the producer rank's memory (CPU) */
    HY_FLAGS_CONSUMER,   /* the consumer rank's memory (CUDA, device flags) */
    HY_FLAGS_HOST        /* pinned host memory, no rank's (CUDA, the default) */
} hy_flags_place;

/* What a backend's memory is made of, known before it is created: what
 * the memory plan (memplan.h) prices a run's buffers with. The functions
 * are the backend's own (the ops' attention_scratch, the bound its
 * reserve sizes scratch by), so the plan and the allocations agree. */
typedef struct {
    size_t act_size;      /* bytes per activation element: ops->act_size */
    size_t (*attention_scratch)(int B, int T, int NH, int NKV, int hd);
    size_t (*scratch)(size_t rows, size_t width);   /* what reserve takes; NULL: none */
    hy_flags_place flags;
    double rank_overhead; /* per rank, outside its allocations (a device context,
                             library workspaces, recorded graphs): an estimate */
} hy_backend_memory;

/* Each backend's, without creating it (the CUDA one is the same in a
 * build without it, so a plan for a GPU can be printed anywhere). */
void hy_backend_cpu_memory(hy_backend_memory *m);
void hy_backend_cuda_memory(hy_backend_memory *m);

/* The test ops (backend_test.h): kept out of hy_backend_ops, since only
 * the tests use them. */
typedef struct hy_backend_test_ops hy_backend_test_ops;

/* What every backend's state starts with. */
struct hy_backend {
    const hy_backend_ops *ops;
    const hy_backend_test_ops *test_ops;
    int ranks;
    double watchdog_s;
};

/* What every backend's stream starts with. */
struct hy_stream {
    hy_backend *be;
    int rank;
};

/* The CPU backend: `ranks` ranks in this process, waits failing after
 * watchdog_s seconds. */
int hy_backend_cpu_create(hy_backend **out, int ranks, double watchdog_s, hy_error *err);

/* The CUDA backend (kernels/cuda/backend.cu): rank r runs on device
 * devices[r] (n_devices == 0: r mod the number of devices), several ranks
 * may share a device, and peer access is enabled between every pair of
 * devices in use. Activations are bf16 (act_size 2), with fp32 master
 * weights, gradients and optimizer state. The handshake flags live in
 * host-mapped pinned memory, or with flags_on_device in the consumer's
 * device memory, peer-mapped (DESIGN §3 "Cross-rank movement"; the benchmark
 * measures both). Without the CUDA backend in the build or without a device
 * this fails and says which. */
int hy_backend_cuda_create(hy_backend **out, int ranks, const int *devices, int n_devices,
                           int flags_on_device, double watchdog_s, hy_error *err);

/* The attention kernel the CUDA backend runs, as the environment variable
 * HY_CUDA_ATTENTION asks (read by hy_backend_cuda_create, once per
 * backend, and by hy_backend_describe to say so): unset, empty or "mma":
 * *sm90 = 0, attention.cu's, the default; "sm90": *sm90 = 1, the opt-in
 * Hopper kernel (attention_sm90.cu) wherever it applies (a compute
 * capability 9.0 device, head size 64 or 128), attention.cu's elsewhere
 * (docs/cuda.md "The Hopper attention kernel"). Anything else is an input
 * error naming the variable. Without the CUDA backend in the build:
 * *sm90 = 0. */
int hy_backend_cuda_attention(int *sm90, hy_error *err);

/* Loads the library the CUDA backend opens at its first use rather than
 * at the process's start (cuBLASLt: kernels/cuda/ltload.cuh) and writes
 * the file it came from into where[n]; HY_ERR_RUNTIME naming what was
 * tried when it cannot, or when the build has no CUDA backend. Needs no
 * GPU: for diagnostics and tests. */
int hy_backend_cuda_library(char *where, size_t n, hy_error *err);

/* ---------------------------------------------------------------------- */
/* Choosing and opening a backend (lib/backend.c)
 *
 * A run asks for a backend by kind (its config's `backend` key, filled in
 * by config.h's hy_backend_request_from_config); `auto` takes CUDA when
 * the build has the CUDA backend and a device is visible, else the CPU.
 * hy_backend_open opens what the request gets, the CPU or the CUDA backend
 * (bench programs that measure one backend create it themselves).
 * hy_backend_describe says what a request would get, and why, without
 * opening anything: what the training loop prints, the profiler reports
 * and the tuner budgets with. */

typedef enum { HY_BACKEND_AUTO, HY_BACKEND_CPU, HY_BACKEND_CUDA, HY_BACKEND_COUNT } hy_backend_kind;

typedef struct {
    hy_backend_kind kind;
    int ranks;
    const int *devices;   /* CUDA: rank r runs on devices[r]; past the end of the
                             list (n_devices 0: all ranks), on r mod the count */
    int n_devices;
    double watchdog_s;    /* a wait longer than this fails */
} hy_backend_request;

typedef struct {
    int cuda;             /* 1: the CUDA backend, 0: the CPU backend */
    char why[128];        /* "cuda (auto: 8 CUDA devices)", "cpu (auto: no CUDA
                             device found)", "cpu", "cuda, attention sm90
                             where it applies (HY_CUDA_ATTENTION)", ... */
    double rank_bytes;    /* memory per rank: on CUDA the least, over the ranks,
                             of a rank's device memory over the ranks sharing
                             that device; on the CPU the host's memory over the
                             ranks; INFINITY where it cannot be told */
    hy_backend_memory mem;   /* the chosen backend's (hy_backend_*_memory) */
} hy_backend_choice;

/* What request rq gets, into *out. Asking for "cuda" in a build without
 * the CUDA backend, or on a machine with no CUDA device, is an input error
 * saying which; only a device query that fails otherwise is a runtime
 * error. */
int hy_backend_describe(const hy_backend_request *rq, hy_backend_choice *out, hy_error *err);

/* The memory a run of rq on `chosen` can still take, where its ranks
 * share it: group[r] (ranks entries) is the pool rank r allocates from,
 * available[g] and device[g] (room for rq->ranks each) what pool g has
 * free and its device (-1: the host), *n_groups pools. CUDA: one pool per
 * device in use, its free memory. CPU: one pool, the host's available
 * memory (MemAvailable), no more than the address-space limit (ulimit -v)
 * leaves. */
int hy_backend_free_memory(const hy_backend_request *rq, const hy_backend_choice *chosen,
                           int *group, double *available, int *device, int *n_groups,
                           hy_error *err);

/* Opens what rq gets into *out (NULL on failure), with the same errors as
 * hy_backend_describe, and says what it chose into *chosen when not NULL. */
int hy_backend_open(const hy_backend_request *rq, hy_backend **out, hy_backend_choice *chosen,
                    hy_error *err);

/* Opens what hy_backend_describe(rq) chose, `chosen`, into *out (NULL on
 * failure) without asking the devices again: a command describes its
 * run's backend once, says it, plans its memory with it and opens it. */
int hy_backend_open_chosen(const hy_backend_request *rq, const hy_backend_choice *chosen,
                           hy_backend **out, hy_error *err);

/* ---------------------------------------------------------------------- */
/* The rule for launching recorded graphs */

/* Where the rank threads meet after recording: no rank launches its graph
 * while another is still capturing or instantiating, since a launched
 * graph sits at flags on the device and an instantiation may wait for
 * the whole device (docs/cuda.md, "The warm-up"). Every rank passes it
 * once, right after its capture_end. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int ranks, arrived, failed;
} hy_record_gate;

void hy_record_gate_init(hy_record_gate *g, int ranks);
void hy_record_gate_destroy(hy_record_gate *g);
/* rc: how this rank's recording went. Returns once every rank has passed,
 * or at once when one has failed: non-zero if any rank failed. */
int hy_record_gate_pass(hy_record_gate *g, int rc);

#ifdef __cplusplus
}
#endif

#endif
