/*
 * kernels.cuh — the CUDA backend's math: every op of backend.h's "Math"
 * section as a host function that enqueues kernels (or cuBLASLt calls) on
 * a stream. backend.cu turns each hy_backend_ops math entry into one call
 * here; the equations are kernels/cpu/ops.h's, family by family in files
 * of the same names (matmul.cu, layernorm.cu, gelu.cu, swiglu.cu,
 * attention.cu, kvcache.cu, rope.cu, embedding.cu, classifier.cu,
 * adamw.cu), plus the opt-in Hopper attention (attention_sm90.cu) and the
 * test ops (testops.cu).
 *
 * Types: activations, activation gradients and the compute copy of the
 * weights are bf16 (hy_bf16); parameter gradients, AdamW state, the fp32
 * master weights and LayerNorm statistics are fp32; every sum is
 * accumulated in fp32 (the gradient norm in fp64).
 *
 * Rules every function here keeps:
 *   - Enqueue only: no allocation, no synchronization, no host reads of
 *     device memory, so every call can be captured into a CUDA graph.
 *     Scratch memory comes from the caller: a function that needs some
 *     has a companion *_scratch() giving its size in bytes.
 *   - Deterministic: the same inputs give the same bits on every run (no
 *     floating-point atomics; reductions in a fixed order), so a replayed
 *     graph equals the eager iteration bit for bit.
 *   - Every backward ACCUMULATES into the gradients it writes (+=), as on
 *     the CPU (those with an `overwrite` flag store instead when asked);
 *     the classifier overwrites its logits with their gradient.
 *   - Errors (a launch failure, a cuBLASLt status) return HY_ERR_RUNTIME
 *     with a message naming the op and the failed call (check.cuh); no
 *     function prints or aborts.
 *   - Every kernel a file launches is listed in its hy_k_*_preload, which
 *     loads them onto the current device (check.cuh's HY_CUDA_PRELOAD);
 *     hy_k_preload runs them all, before any rank runs (backend.cu).
 */
#ifndef HY_CUDA_KERNELS_CUH
#define HY_CUDA_KERNELS_CUH

#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend.h"   /* hy_error, hy_adamw_hparams */

typedef __nv_bfloat16 hy_bf16;

/* Loads every kernel below onto the current device (backend.cu). */
int hy_k_preload(hy_error *err);
int hy_k_matmul_preload(hy_error *err);
int hy_k_layernorm_preload(hy_error *err);
int hy_k_gelu_preload(hy_error *err);
int hy_k_swiglu_preload(hy_error *err);
int hy_k_rope_preload(hy_error *err);
int hy_k_attention_preload(hy_error *err);
int hy_k_attention_sm90_preload(hy_error *err);
int hy_k_kvcache_preload(hy_error *err);
int hy_k_embedding_preload(hy_error *err);
int hy_k_classifier_preload(hy_error *err);
int hy_k_adamw_preload(hy_error *err);
int hy_k_testops_preload(hy_error *err);

/* ---- matmul.cu: dense layers and the tied LM head through cuBLASLt ----
 *
 * One hy_lt per rank: a cuBLASLt handle, a workspace, and the algorithm
 * chosen by cuBLASLt's heuristic for each (shape, layout) the first time
 * it is seen. The first sighting happens in the eager warm-up iteration,
 * so capture only replays choices already made. */
typedef struct hy_lt hy_lt;
int hy_lt_create(hy_lt **out, int device, hy_error *err);
void hy_lt_destroy(hy_lt *lt);
/* The workspace each hy_lt holds on its device, in bytes. */
size_t hy_lt_workspace_bytes(void);

/* out[N,OC] = inp[N,C] · w[C,OC] + bias[OC]   (bias may be NULL) */
int hy_k_matmul_fwd(hy_lt *lt, cudaStream_t s, hy_bf16 *out, const hy_bf16 *inp,
                    const hy_bf16 *w, const hy_bf16 *bias, int N, int C, int OC, hy_error *err);
/* dinp[N,C] += dout · wᵀ;  dw[C,OC] += inpᵀ · dout;  dbias[OC] += Σ_n dout
 * (each output may be NULL). scratch: hy_k_matmul_bwd_scratch bytes.
 * overwrite: dinp = dout · wᵀ instead, its old contents never read (the
 * backend knows it was just zeroed: fuse.cu). */
size_t hy_k_matmul_bwd_scratch(int N, int C, int OC);
int hy_k_matmul_bwd(hy_lt *lt, cudaStream_t s, hy_bf16 *dinp, float *dw, float *dbias,
                    const hy_bf16 *dout, const hy_bf16 *inp, const hy_bf16 *w, int N, int C,
                    int OC, int overwrite, void *scratch, hy_error *err);
/* The MLP's first layer and its GELU (backend.h's matmul_gelu_fwd):
 * pre[N,OC] = inp · w + bias (kept for the backward), out = gelu(pre); one
 * GEMM with the GELU_AUX_BIAS epilogue where cuBLASLt has one (OC a
 * multiple of 8, bias 16-byte aligned) and the GELU is its tanh one, else
 * matmul_fwd and gelu_fwd (the erf GELU always: cuBLASLt has no erf
 * epilogue). */
int hy_k_matmul_gelu_fwd(hy_lt *lt, cudaStream_t s, hy_bf16 *out, hy_bf16 *pre,
                         const hy_bf16 *inp, const hy_bf16 *w, const hy_bf16 *bias, int N, int C,
                         int OC, int kind, hy_error *err);
/* Its backward through the next layer (backend.h's matmul_gelu_bwd), with
 * inp = gelu(pre) [N,C], w [C,OC], dout [N,OC]: dw += inpᵀ · dout, dbias
 * += Σ_n dout (either NULL: not), dpre = (dout · wᵀ) ⊙ gelu'(pre), stored,
 * and dbias_pre += Σ_n dpre (NULL: not). dgelu: N·C bf16 of room for d of
 * the GELU's output, used when no epilogue carries the GELU. scratch:
 * hy_k_matmul_gelu_bwd_scratch bytes. */
size_t hy_k_matmul_gelu_bwd_scratch(int N, int C, int OC);
int hy_k_matmul_gelu_bwd(hy_lt *lt, cudaStream_t s, hy_bf16 *dpre, float *dbias_pre, float *dw,
                         float *dbias, hy_bf16 *dgelu, const hy_bf16 *dout, const hy_bf16 *inp,
                         const hy_bf16 *pre, const hy_bf16 *w, int N, int C, int OC, int kind,
                         void *scratch, hy_error *err);
/* logits[N,V] = inp[N,C] · wteᵀ (wte [V,C]) + bias[V] (NULL: none; added
 * to the rounded product, one more bf16 rounding) */
int hy_k_lm_head_fwd(hy_lt *lt, cudaStream_t s, hy_bf16 *logits, const hy_bf16 *inp,
                     const hy_bf16 *wte, const hy_bf16 *bias, int N, int C, int V, hy_error *err);
/* dinp[N,C] += dlogits · wte;  dwte[V,C] += dlogitsᵀ · inp;  dbias[V] +=
 * Σ_n dlogits (each may be NULL; dbias takes hy_k_matmul_bwd_scratch(N, C,
 * V) of scratch); overwrite as in matmul_bwd */
int hy_k_lm_head_bwd(hy_lt *lt, cudaStream_t s, hy_bf16 *dinp, float *dwte, float *dbias,
                     const hy_bf16 *dlogits, const hy_bf16 *inp, const hy_bf16 *wte, int N,
                     int C, int V, int overwrite, void *scratch, hy_error *err);

/* ---- layernorm.cu ---- LayerNorm and RMSNorm (w, b: the bf16 compute
 * copy) */
/* out = LayerNorm(acc) (mean, rstd saved), or RMSNorm(acc) when b is NULL
 * (mean is then NULL: Llama's, backend.h's rmsnorm_fwd); with x not NULL
 * the residual add before it in the same pass: acc ← acc + x first
 * (rounded to bf16, as hy_k_add_bf16 does), else acc is only read. */
int hy_k_norm_fwd(cudaStream_t s, hy_bf16 *out, float *mean, float *rstd, hy_bf16 *acc,
                  const hy_bf16 *x, const hy_bf16 *w, const hy_bf16 *b, int N, int C, float eps,
                  hy_error *err);
/* The backward of either: RMSNorm's when mean is NULL (db is then NULL).
 * dinp, dw, db may each be NULL. Scratch: hy_k_norm_bwd_scratch bytes. */
size_t hy_k_norm_bwd_scratch(int N, int C);
int hy_k_norm_bwd(cudaStream_t s, hy_bf16 *dinp, float *dw, float *db, const hy_bf16 *dout,
                  const hy_bf16 *inp, const hy_bf16 *w, const float *mean, const float *rstd,
                  int N, int C, void *scratch, hy_error *err);

/* ---- gelu.cu ---- (kind: hy_gelu_kind, tanh or erf; out may alias inp) */
int hy_k_gelu_fwd(cudaStream_t s, hy_bf16 *out, const hy_bf16 *inp, size_t n, int kind,
                  hy_error *err);
/* dinp += dout · gelu'(inp); overwrite: dinp = dout · gelu'(inp) */
int hy_k_gelu_bwd(cudaStream_t s, hy_bf16 *dinp, const hy_bf16 *dout, const hy_bf16 *inp,
                  size_t n, int overwrite, int kind, hy_error *err);

/* ---- kvcache.cu ---- attention over a KV cache (generation): the cache
 * kc, vc [B, Tmax, NKV·hd], qkv [B, Tq, (NH + 2·NKV)·hd] of the new tokens at
 * positions t0.., out [B, Tq, NH·hd]; backend.h's kv_append and
 * attention_cached, kernels/cpu/ops.h's equations. No scratch. */
int hy_k_kv_append(cudaStream_t s, hy_bf16 *kc, hy_bf16 *vc, const hy_bf16 *qkv, int B, int Tq,
                   int t0, int Tmax, int NH, int NKV, int hd, hy_error *err);
int hy_k_attention_cached(cudaStream_t s, hy_bf16 *out, const hy_bf16 *qkv, const hy_bf16 *kc,
                          const hy_bf16 *vc, int B, int Tq, int t0, int Tmax, int NH, int NKV,
                          int hd, hy_error *err);

/* ---- swiglu.cu ---- inp [N, 2F] (gate, then up), out [N, F] */
int hy_k_swiglu_fwd(cudaStream_t s, hy_bf16 *out, const hy_bf16 *inp, int N, int F, hy_error *err);
/* dinp [N, 2F] += the gradients; overwrite: dinp = them */
int hy_k_swiglu_bwd(cudaStream_t s, hy_bf16 *dinp, const hy_bf16 *dout, const hy_bf16 *inp, int N,
                    int F, int overwrite, hy_error *err);

/* ---- rope.cu ---- in place on the q and k heads of qkv
 * [B,T,(NH+2·NKV)·hd]; cs: the fp32 table of lib/model.h's hy_rope_table;
 * inverse: rotate by −angle (the backward) */
int hy_k_rope(cudaStream_t s, hy_bf16 *qkv, const float *cs, int B, int T, int NH, int NKV, int hd,
              int inverse, hy_error *err);

/* ---- attention.cu ---- fused (flash-style) attention with grouped-query
 * attention (backend.h's attention_fwd/bwd): qkv [B,T,(NH+2·NKV)·hd], out
 * [B,T,NH·hd], head size hd at most 128. lse [B,NH,T] fp32: the forward's
 * per-row log-sum-exp in base 2 (L = m + log2 l), which the backward reads
 * with out. Scratch for the backward: hy_k_attention_scratch bytes (also
 * what backend.h's attention_scratch reports, and what the runtime
 * allocates). */
size_t hy_k_attention_scratch(int B, int T, int NH, int NKV, int hd);
int hy_k_attention_fwd(cudaStream_t s, hy_bf16 *out, float *lse, const hy_bf16 *qkv, int B, int T,
                       int NH, int NKV, int hd, int causal, hy_error *err);
/* dqkv += the gradients; overwrite: dqkv = them */
int hy_k_attention_bwd(cudaStream_t s, hy_bf16 *dqkv, void *scratch, const hy_bf16 *dout,
                       const hy_bf16 *qkv, const hy_bf16 *out, const float *lse, int B, int T,
                       int NH, int NKV, int hd, int causal, int overwrite, hy_error *err);

/* D = rowsum(dO ∘ O) per (b, h, t), into dsum [B,NH,T] fp32 (the
 * first B·NH·T floats of the backward's scratch): the first step of both
 * backwards, attention.cu's and attention_sm90.cu's. dout and out
 * [B,T,NH·hd]. */
int hy_k_attention_dsum(cudaStream_t s, float *dsum, const hy_bf16 *dout, const hy_bf16 *out, int B,
                        int T, int NH, int hd, hy_error *err);

/* ---- attention_sm90.cu ---- the same attention for Hopper (sm_90a:
 * wgmma, TMA, warp-specialized; docs/cuda.md "The Hopper attention
 * kernel"), opt-in (HY_CUDA_ATTENTION=sm90, read by backend.cu, which
 * alone decides which kernel runs) and untested on hardware until a GPU
 * check passes. The same layout, lse and scratch (hy_k_attention_scratch
 * bytes) as attention.cu's, so either kernel's backward takes either's
 * forward. supported: 1 where it may run (compute capability 9.0, hd 64
 * or 128, NH a multiple of NKV), else 0 and attention.cu runs. qkv and
 * dout must be 16-byte aligned. Backward: dqkv += the gradients
 * (overwrite: =). */
int hy_k_attention_sm90_supported(int cc_major, int cc_minor, int T, int NH, int NKV, int hd);
int hy_k_attention_sm90_fwd(cudaStream_t s, hy_bf16 *out, float *lse, const hy_bf16 *qkv, int B,
                            int T, int NH, int NKV, int hd, int causal, hy_error *err);
int hy_k_attention_sm90_bwd(cudaStream_t s, hy_bf16 *dqkv, void *scratch, const hy_bf16 *dout,
                            const hy_bf16 *qkv, const hy_bf16 *out, const float *lse, int B, int T,
                            int NH, int NKV, int hd, int causal, int overwrite, hy_error *err);

/* ---- embedding.cu ---- tokens [B,T] in [0, V); wpe, dwpe may be NULL;
 * type: one row [C] added to every token (BERT's token-type row 0), NULL:
 * none */
int hy_k_embedding_fwd(cudaStream_t s, hy_bf16 *out, const int *tokens, const hy_bf16 *wte,
                       const hy_bf16 *wpe, const hy_bf16 *type, int B, int T, int C,
                       hy_error *err);
size_t hy_k_embedding_bwd_scratch(int B, int T, int C);
int hy_k_embedding_bwd(cudaStream_t s, float *dwte, float *dwpe, const hy_bf16 *dout,
                       const int *tokens, int B, int T, int C, void *scratch, hy_error *err);

/* ---- classifier.cu ---- softmax + cross-entropy + gradient in place over
 * logits [N, Vp] (row stride Vp, columns >= V are padding and become 0):
 * logits ← grad_scale · (softmax − onehot) / count over rows whose target is
 * not -1 (others 0); *loss_acc += loss_scale · mean loss of those rows (+0
 * when count is 0). A target outside [0, V) and not -1 counts as ignored
 * here and raises *bad (a device int the caller may read), since a device
 * op cannot fail synchronously. */
size_t hy_k_classifier_scratch(int N);
int hy_k_classifier(cudaStream_t s, hy_bf16 *logits, float *loss_acc, float *hits_acc,
                    const int *targets, int N, int V, int Vp, float grad_scale, float loss_scale,
                    void *scratch, int *bad, hy_error *err);

/* ---- adamw.cu ---- AdamW, the gradient norm, clipping, small elementwise
 * ops. hp and factor are device pointers read when the kernel runs.
 *
 * AdamW takes many tensors in one launch: all of a rank's parameters (a
 * GPT-2 124M rank holds 148 tensors in 1 or 2 blocks), all with the same hp
 * and factor. A block is a range that is contiguous in all five arrays (a
 * stage's parameters, gradients and moments are one block each); the
 * batch lays its blocks end to end, each starting at a multiple of
 * HY_ADAMW_VEC, and cuts them into segments: maximal runs of one block
 * with one weight-decay flag (consecutive tensors with the same flag are
 * one segment; GPT-2 124M: 98). Segment k covers batch elements
 * [seg_end[k-1], seg_end[k]) (from 0 for k = 0); element i of it is
 * element i - block.start of its block, and one with i - block.start >=
 * block.n is the padding before the next block. The whole batch travels
 * as the kernel's parameter (about 10 KB: CUDA 12.1 and later take up to
 * 32 KB of parameters). */
#define HY_ADAMW_SEGMENTS 1024
#define HY_ADAMW_BLOCKS 16
#define HY_ADAMW_VEC 8   /* elements per thread and step: 16-byte accesses */

typedef struct {
    float *param;
    hy_bf16 *param_compute;   /* NULL: no compute copy */
    const float *grad;
    float *m, *v;
    size_t start, n;          /* its first element in the batch, and its length */
    int vec;                  /* every pointer 16-byte aligned: 8 elements per access */
} hy_adamw_block;

typedef struct {
    const hy_adamw_hparams *hp;
    const float *factor;
    size_t n;                 /* the batch's length: the end of its last segment */
    int blocks, segments;
    hy_adamw_block block[HY_ADAMW_BLOCKS];
    size_t seg_end[HY_ADAMW_SEGMENTS];
    unsigned char seg_block[HY_ADAMW_SEGMENTS];   /* the block of segment k */
    unsigned char seg_decay[HY_ADAMW_SEGMENTS];   /* weight decay applies to segment k */
} hy_adamw_batch;

/* Adds one tensor (n elements at param, param_compute, grad, m, v) to b,
 * which holds none when b->segments is 0. Returns 0, and changes nothing,
 * when it does not fit: another hp or factor, or no room. */
int hy_k_adamw_batch_add(hy_adamw_batch *b, float *param, hy_bf16 *param_compute,
                         const float *grad, float *m, float *v, size_t n,
                         const hy_adamw_hparams *hp, const float *factor, int decay);
int hy_k_adamw(cudaStream_t s, const hy_adamw_batch *b, hy_error *err);
/* *acc += Σ x², in double, fixed order. */
size_t hy_k_sumsq_scratch(size_t n);
int hy_k_sumsq(cudaStream_t s, double *acc, const float *x, size_t n, void *scratch,
               hy_error *err);
/* backend.h's clip: one thread. */
int hy_k_clip(cudaStream_t s, float *factor, float *norm, const double *partials, int n,
              float max_norm, hy_error *err);
int hy_k_add_bf16(cudaStream_t s, hy_bf16 *acc, const hy_bf16 *x, size_t n, hy_error *err);
int hy_k_add_f32(cudaStream_t s, float *acc, const float *x, size_t n, hy_error *err);
int hy_k_to_bf16(cudaStream_t s, hy_bf16 *dst, const float *src, size_t n, hy_error *err);

/* ---- testops.cu ---- backend.h's profiling and test hooks, on the device
 * (the test ops' table is declared in cuda_backend.cuh). */
/* *dst = %globaltimer (ns) when the kernel runs. */
int hy_k_timestamp(cudaStream_t s, uint64_t *dst, hy_error *err);
/* Spins ns nanoseconds on %globaltimer, or until *abort_word != 0. */
int hy_k_sleep(cudaStream_t s, uint64_t ns, const volatile uint32_t *abort_word, hy_error *err);

#endif
