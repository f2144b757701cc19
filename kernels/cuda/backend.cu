/*
 * backend.cu — the CUDA backend (backend.h): memory, streams and the math
 * entries; the second implementation of the interface the CPU backend
 * implements in kernels/cpu/backend.c. The runtime drives both through the
 * same calls.
 *
 * One process, one thread per rank, one non-blocking stream per rank on the
 * rank's device (several ranks may share a device). A rank's whole
 * iteration is enqueued on its stream and captured as one CUDA graph
 * (graphs/graph.cu); cross-rank signals, the watchdog and abort are
 * graphs/signal.cu. Memory is cudaMalloc'd per rank and zeroed; flags live
 * in host-mapped pinned memory (the host can read and write them directly,
 * which the watchdog and abort use) or, with flags_on_device, in the
 * consumer's device memory, peer-mapped. Peer access is enabled between all
 * devices in use, so a copy between ranks is one cudaMemcpyAsync: a peer
 * copy over NVLink, or device-to-device on a shared GPU.
 *
 * Scratch memory the math ops need (kernels.cuh's *_scratch sizes) comes
 * from one buffer per stream, sized by `reserve` before any rank runs (an
 * allocation while ranks run could make the driver wait for the whole
 * device); an op that still finds it too small grows it outside a capture
 * only, where no stream sits at a flag (signal.cu), so that stays safe.
 *
 * Before the first iteration the backend also loads every kernel of ours
 * onto each device in use (kernels.cuh's hy_k_preload): CUDA 13 loads a
 * kernel at its first launch by default, and a load is another thing that
 * may wait for the whole device.
 *
 * The attention has two kernels of the same function: attention.cu's,
 * the default, and the opt-in Hopper one (attention_sm90.cu), taken where
 * it applies when HY_CUDA_ATTENTION=sm90 was set as the backend was
 * created; hy_cuda_attention_sm90 is the one decision, for the forward
 * and the backward alike.
 */
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cuda_backend.cuh"

/* ------------------------------------------------------------------------ */
/* Memory */

static int track(cuda_backend *cb, void *p, mem_kind kind, int device, hy_error *err) {
    mem_block *b = (mem_block *)calloc(1, sizeof *b);
    if (!b) {
        if (kind == MEM_HOST) cudaFreeHost(p);
        else cudaFree(p);
        return hy_fail(err, HY_ERR_RUNTIME, "cuda backend: out of host memory");
    }
    b->p = p;
    b->kind = kind;
    b->device = device;
    pthread_mutex_lock(&cb->lock);
    b->next = cb->blocks;
    cb->blocks = b;
    pthread_mutex_unlock(&cb->lock);
    return HY_OK;
}

static void release_block(mem_block *b) {
    if (b->kind == MEM_HOST) {
        cudaFreeHost(b->p);
    } else {
        cudaSetDevice(b->device);
        cudaFree(b->p);
    }
    free(b);
}

static int dev_alloc(cuda_backend *cb, int rank, size_t bytes, void **out, hy_error *err) {
    *out = NULL;
    int rc = enter_rank(&cb->base, rank, err);
    if (rc) return rc;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        size_t free_b = 0, total = 0;
        (void)cudaGetLastError();
        cudaMemGetInfo(&free_b, &total);
        return hy_fail(err, HY_ERR_RUNTIME, "rank %d: cudaMalloc of %zu bytes on device %d failed "
                       "(%s; %.2f of %.2f GiB free): lower schedule.micro_batch_size or "
                       "micro_batches, or spread the ranks over more devices", rank, bytes,
                       cb->dev[rank], cudaGetErrorString(e), free_b / 1073741824.0,
                       total / 1073741824.0);
    }
    /* On the io stream, waited for: the rank streams are non-blocking, so
     * nothing would order them after a memset on the legacy stream. */
    cudaStream_t io = cb->io[cb->dev[rank]];
    e = cudaMemsetAsync(p, 0, bytes ? bytes : 1, io);
    if (e == cudaSuccess) e = cudaStreamSynchronize(io);
    if (e != cudaSuccess) {
        cudaFree(p);
        return HY_CUDA_FAIL(err, e, "cudaMemsetAsync (zeroing new memory)");
    }
    rc = track(cb, p, MEM_DEVICE, cb->dev[rank], err);
    if (!rc) {
        *out = p;
        pthread_mutex_lock(&cb->lock);
        cb->allocated[rank] += bytes;
        pthread_mutex_unlock(&cb->lock);
    }
    return rc;
}

static size_t cuda_allocated(hy_backend *be, int rank) {
    cuda_backend *cb = cb_of(be);
    if (rank < 0 || rank >= be->ranks) return 0;
    pthread_mutex_lock(&cb->lock);
    size_t n = cb->allocated[rank];
    pthread_mutex_unlock(&cb->lock);
    return n;
}

/* Pinned host memory every device maps (UVA: the same address on all). */
int hy_cuda_host_alloc(cuda_backend *cb, size_t bytes, void **out, hy_error *err) {
    *out = NULL;
    void *p = NULL;
    HY_CUDA_CHECK(cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocMapped | cudaHostAllocPortable),
                  err);
    memset(p, 0, bytes ? bytes : 1);
    int rc = track(cb, p, MEM_HOST, 0, err);
    if (!rc) *out = p;
    return rc;
}

static int cuda_alloc(hy_backend *be, int rank, size_t bytes, void **out, hy_error *err) {
    return dev_alloc(cb_of(be), rank, bytes, out, err);
}

static int cuda_alloc_shared(hy_backend *be, int a, int b, size_t bytes, void **out, hy_error *err) {
    cuda_backend *cb = cb_of(be);
    int rc = check_rank(be, a, err);
    if (!rc) rc = check_rank(be, b, err);
    if (rc) return rc;
    /* In the consumer's memory: its waits poll locally, the producer's
     * writes cross the link once. */
    if (cb->flags_on_device) return dev_alloc(cb, b, bytes, out, err);
    return hy_cuda_host_alloc(cb, bytes, out, err);
}

static void cuda_free_mem(hy_backend *be, void *p) {
    if (!p) return;
    cuda_backend *cb = cb_of(be);
    pthread_mutex_lock(&cb->lock);
    mem_block **at = &cb->blocks;
    while (*at && (*at)->p != p) at = &(*at)->next;
    mem_block *found = *at;
    if (found) *at = found->next;
    pthread_mutex_unlock(&cb->lock);
    if (found) release_block(found);
}

/* upload and download. A plain cudaMemcpy from pageable memory may return
 * before its DMA lands, and the rank streams (non-blocking) would not wait
 * for it: the copy goes on the io stream and is waited for. */
static int cuda_copy_sync(hy_backend *be, int rank, void *dst, const void *src, size_t bytes,
                          hy_error *err) {
    int rc = enter_rank(be, rank, err);
    if (rc) return rc;
    cudaStream_t io = cb_of(be)->io[cb_of(be)->dev[rank]];
    HY_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, io), err);
    HY_CUDA_CHECK(cudaStreamSynchronize(io), err);
    return HY_OK;
}

static int cuda_copy(hy_stream *s, void *dst, const void *src, size_t bytes, hy_error *err) {
    cuda_stream *cs = cs_of(s);
    int rc = enter_stream(cs, err);
    if (rc) return rc;
    /* UVA: cudaMemcpyDefault finds the devices; across devices with peer
     * access this is a peer copy over NVLink, on one device a D2D copy. */
    HY_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cs->s), err);
    return HY_OK;
}

/* The stream's scratch, at least `bytes`. It grows only outside a capture
 * (normally never: `reserve` sized it). The old buffer stays allocated
 * (work already enqueued may use it) until destroy. */
static int scratch(cuda_stream *cs, size_t bytes, void **out, hy_error *err) {
    *out = cs->scratch;
    if (bytes <= cs->scratch_bytes) return HY_OK;
    if (cs->capturing)
        return hy_fail(err, HY_ERR_RUNTIME, "rank %d: an op needs %zu bytes of scratch during "
                       "capture, more than the eager iteration used (%zu)", cs->base.rank, bytes,
                       cs->scratch_bytes);
    void *p = NULL;
    int rc = dev_alloc(cb_of(cs->base.be), cs->base.rank, bytes, &p, err);
    if (rc) return rc;
    cs->scratch = p;
    cs->scratch_bytes = bytes;
    *out = p;
    return HY_OK;
}

/* ------------------------------------------------------------------------ */
/* Streams, capture, replay */

static int cuda_stream_create(hy_backend *be, int rank, hy_stream **out, hy_error *err) {
    *out = NULL;
    cuda_backend *cb = cb_of(be);
    int rc = enter_rank(be, rank, err);
    if (rc) return rc;
    cuda_stream *cs = (cuda_stream *)calloc(1, sizeof *cs);
    if (!cs) return hy_fail(err, HY_ERR_RUNTIME, "cuda backend: out of memory creating a stream");
    cs->base.be = be;
    cs->base.rank = rank;
    cs->device = cb->dev[rank];
    void *words = NULL;
    cudaError_t e = cudaDeviceGetAttribute(&cs->cc_major, cudaDevAttrComputeCapabilityMajor, cs->device);
    if (e == cudaSuccess)
        e = cudaDeviceGetAttribute(&cs->cc_minor, cudaDevAttrComputeCapabilityMinor, cs->device);
    if (e != cudaSuccess) {
        free(cs);
        return HY_CUDA_FAIL(err, e, "cudaDeviceGetAttribute (compute capability)");
    }
    e = cudaStreamCreateWithFlags(&cs->s, cudaStreamNonBlocking);
    if (e != cudaSuccess) rc = HY_CUDA_FAIL(err, e, "cudaStreamCreateWithFlags");
    if (!rc) rc = hy_cuda_host_alloc(cb, 64, &words, err);
    if (!rc && pthread_mutex_init(&cs->lock, NULL) != 0)
        rc = hy_fail(err, HY_ERR_RUNTIME, "cuda backend: pthread_mutex_init failed");
    if (rc) {
        if (cs->s) cudaStreamDestroy(cs->s);
        free(cs);
        return rc;
    }
    cs->progress = (volatile uint32_t *)words;
    cs->bad = (volatile int *)((char *)words + 32);
    cs->peek = (volatile uint32_t *)((char *)words + 48);
    hy_cuda_stream_register(cb, cs);
    *out = &cs->base;
    return HY_OK;
}

/* Never hangs: a stream still blocked at a wait is drained through an
 * abort (signal.cu) before it goes. */
static void cuda_stream_destroy(hy_stream *s) {
    if (!s) return;
    cuda_stream *cs = cs_of(s);
    cuda_backend *cb = cb_of(s->be);
    hy_cuda_stream_drain(cb, cs);
    hy_cuda_stream_unregister(cb, cs);
    cudaStreamDestroy(cs->s);
    pthread_mutex_destroy(&cs->lock);
    free(cs->capture.v);
    free(cs);
}

/* ------------------------------------------------------------------------ */
/* Hooks */

static int cuda_timestamp(hy_stream *s, uint64_t *dst, hy_error *err) {
    int rc = enter_stream(cs_of(s), err);
    return rc ? rc : hy_k_timestamp(cs_of(s)->s, dst, err);
}

static int cuda_sleep(hy_stream *s, uint64_t ns, hy_error *err) {
    int rc = enter_stream(cs_of(s), err);
    return rc ? rc : hy_k_sleep(cs_of(s)->s, ns, cb_of(s->be)->abort_word, err);
}

/* ------------------------------------------------------------------------ */
/* Math: each entry makes the rank's device current and calls kernels.cuh. */

#define HY_BF(p) ((hy_bf16 *)(p))
#define HY_CBF(p) ((const hy_bf16 *)(p))

static hy_lt *lt_of(hy_stream *s) { return cb_of(s->be)->lt[s->rank]; }

/* zero, add and adamw are held back for the next op to fuse with
 * (fuse.cu); the ops that can take them enter with enter_stream_holding. */
static int cuda_zero(hy_stream *s, void *p, size_t bytes, hy_error *err) {
    int rc = enter_stream_holding(cs_of(s), err);
    return rc ? rc : hy_cuda_hold_zero(cs_of(s), p, bytes, err);
}

static int cuda_add(hy_stream *s, void *acc, const void *x, size_t n, hy_error *err) {
    int rc = enter_stream_holding(cs_of(s), err);
    return rc ? rc : hy_cuda_hold_add(cs_of(s), HY_BF(acc), HY_CBF(x), n, err);
}

static int cuda_add_f32(hy_stream *s, float *acc, const float *x, size_t n, hy_error *err) {
    int rc = enter_stream(cs_of(s), err);
    return rc ? rc : hy_k_add_f32(cs_of(s)->s, acc, x, n, err);
}

static int cuda_embedding_fwd(hy_stream *s, void *out, const int *tokens, const void *wte,
                              const void *wpe, const void *type, int B, int T, int C,
                              hy_error *err) {
    int rc = enter_stream(cs_of(s), err);
    return rc ? rc : hy_k_embedding_fwd(cs_of(s)->s, HY_BF(out), tokens, HY_CBF(wte), HY_CBF(wpe),
                                        HY_CBF(type), B, T, C, err);
}

static int cuda_embedding_bwd(hy_stream *s, float *dwte, float *dwpe, const void *dout,
                              const int *tokens, int B, int T, int C, hy_error *err) {
    cuda_stream *cs = cs_of(s);
    void *scr = NULL;
    int rc = enter_stream(cs, err);
    if (!rc) rc = scratch(cs, hy_k_embedding_bwd_scratch(B, T, C), &scr, err);
    return rc ? rc : hy_k_embedding_bwd(cs->s, dwte, dwpe, HY_CBF(dout), tokens, B, T, C, scr, err);
}

/* LayerNorm, or RMSNorm when b is NULL. Takes a held add into exactly inp:
 * the residual and the norm in one pass. */
static int cuda_norm_fwd(hy_stream *s, void *out, float *mean, float *rstd, const void *inp,
                         const void *w, const void *b, int N, int C, float eps, hy_error *err) {
    cuda_stream *cs = cs_of(s);
    const hy_bf16 *x = NULL;
    int rc = enter_stream_holding(cs, err);
    if (!rc) rc = hy_cuda_take_add(cs, inp, (size_t)N * (size_t)C, &x, err);
    /* Without a held add the kernel only reads inp. */
    return rc ? rc : hy_k_norm_fwd(cs->s, HY_BF(out), mean, rstd, (hy_bf16 *)inp, x, HY_CBF(w),
                                   HY_CBF(b), N, C, eps, err);
}

static int cuda_layernorm_fwd(hy_stream *s, void *out, float *mean, float *rstd, const void *inp,
                              const void *w, const void *b, int N, int C, float eps,
                              hy_error *err) {
    return cuda_norm_fwd(s, out, mean, rstd, inp, w, b, N, C, eps, err);
}

static int cuda_rmsnorm_fwd(hy_stream *s, void *out, float *rstd, const void *inp, const void *w,
                            int N, int C, float eps, hy_error *err) {
    return cuda_norm_fwd(s, out, NULL, rstd, inp, w, NULL, N, C, eps, err);
}

/* LayerNorm's backward (backend.h's layernorm_bwd), or RMSNorm's when
 * mean is NULL. */
static int cuda_norm_bwd(hy_stream *s, void *dinp, float *dw, float *db, const void *dout,
                         const void *inp, const void *w, const float *mean, const float *rstd,
                         int N, int C, hy_error *err) {
    cuda_stream *cs = cs_of(s);
    void *scr = NULL;
    int rc = enter_stream(cs, err);
    if (!rc) rc = scratch(cs, hy_k_norm_bwd_scratch(N, C), &scr, err);
    return rc ? rc : hy_k_norm_bwd(cs->s, HY_BF(dinp), dw, db, HY_CBF(dout), HY_CBF(inp), HY_CBF(w),
                                   mean, rstd, N, C, scr, err);
}

static int cuda_rmsnorm_bwd(hy_stream *s, void *dinp, float *dw, const void *dout, const void *inp,
                            const void *w, const float *rstd, int N, int C, hy_error *err) {
    return cuda_norm_bwd(s, dinp, dw, NULL, dout, inp, w, NULL, rstd, N, C, err);
}

/* For the ops that add into a buffer the runtime has just zeroed: takes
 * the held zero of exactly that buffer, and says to store instead. */
static int enter_first_writer(cuda_stream *cs, const void *p, size_t elems, int *overwrite,
                              hy_error *err) {
    int rc = enter_stream_holding(cs, err);
    return rc ? rc : hy_cuda_take_zero(cs, p, elems * sizeof(hy_bf16), overwrite, err);
}

static int cuda_matmul_fwd(hy_stream *s, void *out, const void *inp, const void *w, const void *bias,
                           int N, int C, int OC, hy_error *err) {
    int rc = enter_stream(cs_of(s), err);
    return rc ? rc : hy_k_matmul_fwd(lt_of(s), cs_of(s)->s, HY_BF(out), HY_CBF(inp), HY_CBF(w),
                                     HY_CBF(bias), N, C, OC, err);
}

static int cuda_matmul_bwd(hy_stream *s, void *dinp, float *dw, float *dbias, const void *dout,
                           const void *inp, const void *w, int N, int C, int OC, hy_error *err) {
    cuda_stream *cs = cs_of(s);
    void *scr = NULL;
    int overwrite = 0;
    int rc = enter_first_writer(cs, dinp, (size_t)N * (size_t)C, &overwrite, err);
    if (!rc) rc = scratch(cs, hy_k_matmul_bwd_scratch(N, C, OC), &scr, err);
    return rc ? rc : hy_k_matmul_bwd(lt_of(s), cs->s, HY_BF(dinp), dw, dbias, HY_CBF(dout),
                                     HY_CBF(inp), HY_CBF(w), N, C, OC, overwrite, scr, err);
}

static int cuda_matmul_gelu_fwd(hy_stream *s, void *out, void *pre, const void *inp, const void *w,
                                const void *bias, int N, int C, int OC, int kind, hy_error *err) {
    int rc = enter_stream(cs_of(s), err);
    return rc ? rc : hy_k_matmul_gelu_fwd(lt_of(s), cs_of(s)->s, HY_BF(out), HY_BF(pre), HY_CBF(inp),
                                          HY_CBF(w), HY_CBF(bias), N, C, OC, kind, err);
}

/* dpre is stored, not added to: nothing to take from a held zero. */
static int cuda_matmul_gelu_bwd(hy_stream *s, void *dpre, float *dbias_pre, float *dw, float *dbias,
                                void *dgelu, const void *dout, const void *inp, const void *pre,
                                const void *w, int N, int C, int OC, int kind, hy_error *err) {
    cuda_stream *cs = cs_of(s);
    void *scr = NULL;
    int rc = enter_stream(cs, err);
    if (!rc) rc = scratch(cs, hy_k_matmul_gelu_bwd_scratch(N, C, OC), &scr, err);
    return rc ? rc : hy_k_matmul_gelu_bwd(lt_of(s), cs->s, HY_BF(dpre), dbias_pre, dw, dbias,
                                          HY_BF(dgelu), HY_CBF(dout), HY_CBF(inp), HY_CBF(pre),
                                          HY_CBF(w), N, C, OC, kind, scr, err);
}

static int cuda_gelu_fwd(hy_stream *s, void *out, const void *inp, size_t n, int kind,
                         hy_error *err) {
    int rc = enter_stream(cs_of(s), err);
    return rc ? rc : hy_k_gelu_fwd(cs_of(s)->s, HY_BF(out), HY_CBF(inp), n, kind, err);
}

static int cuda_gelu_bwd(hy_stream *s, void *dinp, const void *dout, const void *inp, size_t n,
                         int kind, hy_error *err) {
    int overwrite = 0;
    int rc = enter_first_writer(cs_of(s), dinp, n, &overwrite, err);
    return rc ? rc : hy_k_gelu_bwd(cs_of(s)->s, HY_BF(dinp), HY_CBF(dout), HY_CBF(inp), n, overwrite,
                                   kind, err);
}

static int cuda_swiglu_fwd(hy_stream *s, void *out, const void *inp, int N, int F, hy_error *err) {
    int rc = enter_stream(cs_of(s), err);
    return rc ? rc : hy_k_swiglu_fwd(cs_of(s)->s, HY_BF(out), HY_CBF(inp), N, F, err);
}

static int cuda_swiglu_bwd(hy_stream *s, void *dinp, const void *dout, const void *inp, int N, int F,
                           hy_error *err) {
    int overwrite = 0;
    int rc = enter_first_writer(cs_of(s), dinp, (size_t)N * 2 * (size_t)F, &overwrite, err);
    return rc ? rc : hy_k_swiglu_bwd(cs_of(s)->s, HY_BF(dinp), HY_CBF(dout), HY_CBF(inp), N, F,
                                     overwrite, err);
}

static int cuda_rope(hy_stream *s, void *qkv, const float *cs, int B, int T, int NH, int NKV, int hd,
                     int inverse, hy_error *err) {
    int rc = enter_stream(cs_of(s), err);
    return rc ? rc : hy_k_rope(cs_of(s)->s, HY_BF(qkv), cs, B, T, NH, NKV, hd, inverse, err);
}

/* The one place that picks the attention kernel, for the forward and
 * the backward alike: the Hopper one (attention_sm90.cu) when the backend
 * was created with HY_CUDA_ATTENTION=sm90, the stream's device and the
 * shape are ones it takes, and qkv (which the backward reads as the
 * forward did) is 16-byte aligned; else attention.cu's. Both write the
 * same out and the same base-2 L, so either backward takes either
 * forward; the backward's dout (which the forward cannot see) must also
 * be 16-byte aligned for the Hopper backward, as every activation of a
 * run is (lib/transformer.c starts each on a 256-byte boundary). */
int hy_cuda_attention_sm90(const cuda_stream *cs, const void *qkv, int T, int NH, int NKV, int hd) {
    return cb_of(cs->base.be)->attention_sm90 &&
           hy_k_attention_sm90_supported(cs->cc_major, cs->cc_minor, T, NH, NKV, hd) &&
           ((uintptr_t)qkv & 15) == 0;
}

static int cuda_attention_fwd(hy_stream *s, void *out, float *lse, const void *qkv, int B, int T,
                              int NH, int NKV, int hd, int causal, hy_error *err) {
    cuda_stream *cs = cs_of(s);
    int rc = enter_stream(cs, err);
    if (rc) return rc;
    if (hy_cuda_attention_sm90(cs, qkv, T, NH, NKV, hd))
        return hy_k_attention_sm90_fwd(cs->s, HY_BF(out), lse, HY_CBF(qkv), B, T, NH, NKV, hd,
                                       causal, err);
    return hy_k_attention_fwd(cs->s, HY_BF(out), lse, HY_CBF(qkv), B, T, NH, NKV, hd, causal, err);
}

static int cuda_attention_bwd(hy_stream *s, void *dqkv, void *scr, const void *dout, const void *qkv,
                              const void *out, const float *lse, int B, int T, int NH, int NKV,
                              int hd, int causal, hy_error *err) {
    cuda_stream *cs = cs_of(s);
    int overwrite = 0;
    size_t n = (size_t)B * T * (size_t)(NH + 2 * NKV) * hd;
    int rc = enter_first_writer(cs, dqkv, n, &overwrite, err);
    if (rc) return rc;
    if (hy_cuda_attention_sm90(cs, qkv, T, NH, NKV, hd) && ((uintptr_t)dout & 15) == 0)
        return hy_k_attention_sm90_bwd(cs->s, HY_BF(dqkv), scr, HY_CBF(dout), HY_CBF(qkv),
                                       HY_CBF(out), lse, B, T, NH, NKV, hd, causal, overwrite, err);
    return hy_k_attention_bwd(cs->s, HY_BF(dqkv), scr, HY_CBF(dout), HY_CBF(qkv), HY_CBF(out), lse,
                              B, T, NH, NKV, hd, causal, overwrite, err);
}

static int cuda_kv_append(hy_stream *s, void *kc, void *vc, const void *qkv, int B, int Tq,
                          int t0, int Tmax, int NH, int NKV, int hd, hy_error *err) {
    int rc = enter_stream(cs_of(s), err);
    return rc ? rc : hy_k_kv_append(cs_of(s)->s, HY_BF(kc), HY_BF(vc), HY_CBF(qkv), B, Tq, t0,
                                    Tmax, NH, NKV, hd, err);
}

static int cuda_attention_cached(hy_stream *s, void *out, const void *qkv, const void *kc,
                                 const void *vc, int B, int Tq, int t0, int Tmax, int NH, int NKV,
                                 int hd, hy_error *err) {
    int rc = enter_stream(cs_of(s), err);
    return rc ? rc : hy_k_attention_cached(cs_of(s)->s, HY_BF(out), HY_CBF(qkv), HY_CBF(kc),
                                           HY_CBF(vc), B, Tq, t0, Tmax, NH, NKV, hd, err);
}

static size_t cuda_attention_scratch(int B, int T, int NH, int NKV, int hd) {
    return hy_k_attention_scratch(B, T, NH, NKV, hd);
}

/* The most scratch any op of ours takes on at most `rows` rows of at most
 * `width` values: every *_scratch grows with both, and sumsq's is bounded
 * whatever its length. */
static size_t scratch_bound(size_t rows, size_t width) {
    int N = rows > (size_t)INT_MAX ? INT_MAX : (int)rows;
    int W = width > (size_t)INT_MAX ? INT_MAX : (int)width;
    size_t most = hy_k_matmul_bwd_scratch(N, W, W);
    size_t k = hy_k_norm_bwd_scratch(N, W);
    if (k > most) most = k;
    if ((k = hy_k_matmul_gelu_bwd_scratch(N, W, W)) > most) most = k;
    if ((k = hy_k_embedding_bwd_scratch(1, N, W)) > most) most = k;
    if ((k = hy_k_classifier_scratch(N)) > most) most = k;
    if ((k = hy_k_sumsq_scratch(SIZE_MAX / 2)) > most) most = k;
    return most;
}

static int cuda_reserve(hy_stream *s, size_t rows, size_t width, hy_error *err) {
    void *p = NULL;
    int rc = scratch(cs_of(s), scratch_bound(rows, width), &p, err);
    if (rc) hy_error_prefix(err, "reserving scratch: ");
    return rc;
}

static int cuda_lm_head_fwd(hy_stream *s, void *logits, const void *inp, const void *wte,
                            const void *bias, int N, int C, int V, hy_error *err) {
    int rc = enter_stream(cs_of(s), err);
    return rc ? rc : hy_k_lm_head_fwd(lt_of(s), cs_of(s)->s, HY_BF(logits), HY_CBF(inp),
                                      HY_CBF(wte), HY_CBF(bias), N, C, V, err);
}

static int cuda_lm_head_bwd(hy_stream *s, void *dinp, float *dwte, float *dbias,
                            const void *dlogits, const void *inp, const void *wte, int N, int C,
                            int V, hy_error *err) {
    int overwrite = 0;
    void *scr = NULL;
    int rc = enter_first_writer(cs_of(s), dinp, (size_t)N * (size_t)C, &overwrite, err);
    if (!rc && dbias) rc = scratch(cs_of(s), hy_k_matmul_bwd_scratch(N, C, V), &scr, err);
    return rc ? rc : hy_k_lm_head_bwd(lt_of(s), cs_of(s)->s, HY_BF(dinp), dwte, dbias,
                                      HY_CBF(dlogits), HY_CBF(inp), HY_CBF(wte), N, C, V,
                                      overwrite, scr, err);
}

static int cuda_classifier(hy_stream *s, void *logits, float *loss_acc, float *hits_acc,
                           const int *targets, int N, int V, int Vp, float grad_scale,
                           float loss_scale, hy_error *err) {
    cuda_stream *cs = cs_of(s);
    void *scr = NULL;
    int rc = enter_stream(cs, err);
    if (!rc) rc = scratch(cs, hy_k_classifier_scratch(N), &scr, err);
    return rc ? rc : hy_k_classifier(cs->s, HY_BF(logits), loss_acc, hits_acc, targets, N, V, Vp,
                                     grad_scale, loss_scale, scr, (int *)cs->bad, err);
}

static int cuda_sumsq(hy_stream *s, double *acc, const float *x, size_t n, hy_error *err) {
    cuda_stream *cs = cs_of(s);
    void *scr = NULL;
    int rc = enter_stream(cs, err);
    if (!rc) rc = scratch(cs, hy_k_sumsq_scratch(n), &scr, err);
    return rc ? rc : hy_k_sumsq(cs->s, acc, x, n, scr, err);
}

static int cuda_clip(hy_stream *s, float *factor, float *norm, const double *partials, int n,
                     float max_norm, hy_error *err) {
    int rc = enter_stream(cs_of(s), err);
    return rc ? rc : hy_k_clip(cs_of(s)->s, factor, norm, partials, n, max_norm, err);
}

static int cuda_adamw(hy_stream *s, float *param, void *param_compute, const float *grad, float *m,
                      float *v, size_t n, const hy_adamw_hparams *hp, const float *factor, int decay,
                      hy_error *err) {
    int rc = enter_stream_holding(cs_of(s), err);
    return rc ? rc : hy_cuda_hold_adamw(cs_of(s), param, HY_BF(param_compute), grad, m, v, n, hp,
                                        factor, decay, err);
}

static int cuda_to_act(hy_stream *s, void *dst, const float *src, size_t n, hy_error *err) {
    int rc = enter_stream(cs_of(s), err);
    return rc ? rc : hy_k_to_bf16(cs_of(s)->s, HY_BF(dst), src, n, err);
}

/* ------------------------------------------------------------------------ */
/* Create and destroy */

static void cuda_destroy(hy_backend *be) {
    if (!be) return;
    cuda_backend *cb = cb_of(be);
    hy_cuda_monitor_stop(cb);   /* the runtime destroyed its streams first */
    hy_cuda_foreign_free(cb);
    for (int r = 0; cb->lt && r < be->ranks; r++) {
        if (!cb->lt[r]) continue;
        cudaSetDevice(cb->dev[r]);
        hy_lt_destroy(cb->lt[r]);
    }
    free(cb->lt);
    while (cb->blocks) {
        mem_block *next = cb->blocks->next;
        release_block(cb->blocks);
        cb->blocks = next;
    }
    for (int d = 0; cb->io && d < cb->n_devices; d++) {
        if (!cb->io[d]) continue;
        cudaSetDevice(d);
        cudaStreamDestroy(cb->io[d]);
    }
    free(cb->io);
    free(cb->dev);
    free(cb->allocated);
    pthread_mutex_destroy(&cb->lock);
    free(cb);
}

static hy_backend_ops cuda_ops_init(void) {
    hy_backend_ops o;
    memset(&o, 0, sizeof o);
    o.name = "cuda";
    o.destroy = cuda_destroy;
    o.alloc = cuda_alloc;
    o.alloc_shared = cuda_alloc_shared;
    o.free_mem = cuda_free_mem;
    o.upload = cuda_copy_sync;
    o.download = cuda_copy_sync;
    o.stream_create = cuda_stream_create;
    o.stream_destroy = cuda_stream_destroy;
    o.sync = hy_cuda_sync;
    o.wait_flag = hy_cuda_wait_flag;
    o.write_flag = hy_cuda_write_flag;
    o.copy = cuda_copy;
    o.capture_begin = hy_cuda_capture_begin;
    o.capture_end = hy_cuda_capture_end;
    o.graph_launch = hy_cuda_graph_launch;
    o.graph_destroy = hy_cuda_graph_destroy;
    o.abort = hy_cuda_abort;
    o.act_size = sizeof(hy_bf16);
    o.zero = cuda_zero;
    o.add = cuda_add;
    o.add_f32 = cuda_add_f32;
    o.embedding_fwd = cuda_embedding_fwd;
    o.embedding_bwd = cuda_embedding_bwd;
    o.layernorm_fwd = cuda_layernorm_fwd;
    o.layernorm_bwd = cuda_norm_bwd;
    o.matmul_fwd = cuda_matmul_fwd;
    o.matmul_bwd = cuda_matmul_bwd;
    o.gelu_fwd = cuda_gelu_fwd;
    o.gelu_bwd = cuda_gelu_bwd;
    o.matmul_gelu_fwd = cuda_matmul_gelu_fwd;
    o.matmul_gelu_bwd = cuda_matmul_gelu_bwd;
    o.rmsnorm_fwd = cuda_rmsnorm_fwd;
    o.rmsnorm_bwd = cuda_rmsnorm_bwd;
    o.rope = cuda_rope;
    o.swiglu_fwd = cuda_swiglu_fwd;
    o.swiglu_bwd = cuda_swiglu_bwd;
    o.attention_fwd = cuda_attention_fwd;
    o.attention_bwd = cuda_attention_bwd;
    o.kv_append = cuda_kv_append;
    o.attention_cached = cuda_attention_cached;
    o.lm_head_fwd = cuda_lm_head_fwd;
    o.lm_head_bwd = cuda_lm_head_bwd;
    o.classifier = cuda_classifier;
    o.sumsq = cuda_sumsq;
    o.clip = cuda_clip;
    o.adamw = cuda_adamw;
    o.to_act = cuda_to_act;
    o.attention_scratch = cuda_attention_scratch;
    o.reserve = cuda_reserve;
    o.timestamp = cuda_timestamp;
    o.sleep = cuda_sleep;
    o.op_stats = NULL;   /* per-op timing is the profiler's job on a GPU */
    o.graph_dot = hy_cuda_graph_dot;
    o.reduce_start = hy_cuda_reduce_start;
    o.reduce_wait = hy_cuda_reduce_wait;
    o.reduce_connect = hy_cuda_reduce_connect;
    o.reduce_disconnect = hy_cuda_reduce_disconnect;
    o.allocated = cuda_allocated;
    return o;
}

void hy_backend_cuda_memory(hy_backend_memory *m) {
    /* Beyond what it allocates through dev_alloc, each rank's cuBLASLt
     * state holds its workspace. The device's context is not a rank's:
     * the free memory the plan is held against already leaves it out. */
    *m = (hy_backend_memory){ .act_size = sizeof(hy_bf16),
                              .attention_scratch = cuda_attention_scratch,
                              .scratch = scratch_bound, .flags = HY_FLAGS_HOST,
                              .rank_overhead = (double)hy_lt_workspace_bytes() };
}

/* Rank -> device, every device checked: it exists and runs our sm_90 code. */
static int map_devices(cuda_backend *cb, int ranks, const int *devices, int n_devices, hy_error *err) {
    int count = 0;
    int rc = hy_device_count(&count, err);
    if (rc) return rc;
    if (count == 0)
        return hy_fail(err, HY_ERR_INPUT, "cuda backend: no CUDA device is visible on this machine");
    cb->n_devices = count;
    /* As the config documents: ranks past the end of the list go round
     * the machine's devices. */
    for (int r = 0; r < ranks; r++) {
        int d = r < n_devices ? devices[r] : r % count;
        hy_device_info info;
        rc = hy_device_query(d, &info, err);
        if (rc) {
            hy_error_prefix(err, "rank %d: ", r);
            return rc;
        }
        if (info.cc_major < 9)
            return hy_fail(err, HY_ERR_INPUT, "rank %d: device %d (%s) has compute capability "
                           "%d.%d; this build's kernels need 9.0 or newer (Hopper)", r, d, info.name,
                           info.cc_major, info.cc_minor);
        cb->dev[r] = d;
    }
    return HY_OK;
}

/* A stream blocked at a wait in a graph blocks the hardware queue it is
 * mapped to, and streams share queues once a device has more of them than
 * CUDA_DEVICE_MAX_CONNECTIONS: one rank's wait could then hold up the work
 * of the rank it waits for. Each device carries its ranks' streams and one
 * io stream (cuBLASLt makes none), so that many must fit. The driver
 * reads the variable once, when it starts, so setting it here would be
 * too late: hanayo's main sets it to 32 before any CUDA call, and
 * device.cu does the same before the first CUDA call of a program whose
 * main did not. */
static int check_connections(const cuda_backend *cb, int ranks, hy_error *err) {
    int have = hy_cuda_connections();
    for (int d = 0; d < cb->n_devices; d++) {
        int streams = 1;
        for (int r = 0; r < ranks; r++) streams += cb->dev[r] == d;
        if (streams > 1 && streams > have)
            return hy_fail(err, HY_ERR_INPUT, "cuda backend: %d ranks on device %d need %d hardware "
                           "queues (a stream each, and one for copies), but CUDA_DEVICE_MAX_CONNECTIONS "
                           "gives %d: set it (at most 32) before the program starts, or spread the "
                           "ranks over more devices", streams - 1, d, streams, have);
    }
    return HY_OK;
}

int hy_k_preload(hy_error *err) {
    int rc = hy_k_matmul_preload(err);
    if (!rc) rc = hy_k_layernorm_preload(err);
    if (!rc) rc = hy_k_gelu_preload(err);
    if (!rc) rc = hy_k_attention_preload(err);
    if (!rc) rc = hy_k_attention_sm90_preload(err);
    if (!rc) rc = hy_k_kvcache_preload(err);
    if (!rc) rc = hy_k_rope_preload(err);
    if (!rc) rc = hy_k_swiglu_preload(err);
    if (!rc) rc = hy_k_embedding_preload(err);
    if (!rc) rc = hy_k_classifier_preload(err);
    if (!rc) rc = hy_k_adamw_preload(err);
    if (!rc) rc = hy_k_testops_preload(err);
    return rc;
}

/* Every kernel of ours loaded onto every device in use, before any rank
 * runs (the file comment says why). */
static int preload(const cuda_backend *cb, int ranks, hy_error *err) {
    for (int d = 0; d < cb->n_devices; d++) {
        int used = 0;
        for (int r = 0; r < ranks; r++) used |= cb->dev[r] == d;
        if (!used) continue;
        HY_CUDA_CHECK(cudaSetDevice(d), err);
        int rc = hy_k_preload(err);
        if (rc) {
            hy_error_prefix(err, "device %d: loading the kernels: ", d);
            return rc;
        }
    }
    return HY_OK;
}

/* One io stream per device in use (uploads, downloads, zero-fills, the
 * monitor's flag writes, the host's reads of device-memory flags). */
static int open_io(cuda_backend *cb, int ranks, hy_error *err) {
    cb->io = (cudaStream_t *)calloc((size_t)cb->n_devices, sizeof(cudaStream_t));
    if (!cb->io) return hy_fail(err, HY_ERR_RUNTIME, "cuda backend: out of memory");
    for (int r = 0; r < ranks; r++) {
        int d = cb->dev[r];
        if (cb->io[d]) continue;
        HY_CUDA_CHECK(cudaSetDevice(d), err);
        HY_CUDA_CHECK(cudaStreamCreateWithFlags(&cb->io[d], cudaStreamNonBlocking), err);
    }
    return HY_OK;
}

/* Peer access between every pair of devices in use; required for flags in
 * device memory, a speed-up otherwise (copies are staged without it). */
static int enable_peers(cuda_backend *cb, int ranks, hy_error *err) {
    for (int a = 0; a < ranks; a++) {
        for (int b = 0; b < ranks; b++) {
            int da = cb->dev[a], db = cb->dev[b], can = 0;
            if (da == db) continue;
            HY_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, da, db), err);
            if (!can) {
                if (cb->flags_on_device)
                    return hy_fail(err, HY_ERR_INPUT, "cuda backend: devices %d and %d have no "
                                   "peer access, which flags in device memory need", da, db);
                continue;
            }
            HY_CUDA_CHECK(cudaSetDevice(da), err);
            cudaError_t e = cudaDeviceEnablePeerAccess(db, 0);
            if (e == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
            else if (e != cudaSuccess) return HY_CUDA_FAIL(err, e, "cudaDeviceEnablePeerAccess");
        }
    }
    return HY_OK;
}

int hy_backend_cuda_attention(int *sm90, hy_error *err) {
    const char *v = getenv("HY_CUDA_ATTENTION");
    *sm90 = v && strcmp(v, "sm90") == 0;
    if (!v || !*v || *sm90 || strcmp(v, "mma") == 0) return HY_OK;
    return hy_fail(err, HY_ERR_INPUT, "HY_CUDA_ATTENTION=%.64s: the CUDA attention is \"mma\" (the "
                   "default, attention.cu) or \"sm90\" (the opt-in Hopper kernel, attention_sm90.cu)", v);
}

int hy_backend_cuda_create(hy_backend **out, int ranks, const int *devices, int n_devices,
                           int flags_on_device, double watchdog_s, hy_error *err) {
    *out = NULL;
    int sm90 = 0, rc0 = hy_backend_cuda_attention(&sm90, err);
    if (rc0) return rc0;
    if (ranks < 1 || ranks > 1024)
        return hy_fail(err, HY_ERR_INPUT, "cuda backend: ranks must be in 1..1024, got %d", ranks);
    if (!(watchdog_s > 0))
        return hy_fail(err, HY_ERR_INPUT, "cuda backend: watchdog_s must be > 0, got %g", watchdog_s);
    cuda_backend *cb = (cuda_backend *)calloc(1, sizeof *cb);
    if (!cb) return hy_fail(err, HY_ERR_RUNTIME, "cuda backend: out of memory");
    if (pthread_mutex_init(&cb->lock, NULL) != 0) {
        free(cb);
        return hy_fail(err, HY_ERR_RUNTIME, "cuda backend: pthread_mutex_init failed");
    }
    cb->ops = cuda_ops_init();
    cb->base.ops = &cb->ops;
    cb->base.test_ops = hy_cuda_test_ops();
    cb->base.ranks = ranks;
    cb->base.watchdog_s = watchdog_s;
    cb->flags_on_device = flags_on_device != 0;
    cb->attention_sm90 = sm90;
    cb->dev = (int *)calloc((size_t)ranks, sizeof(int));
    cb->lt = (hy_lt **)calloc((size_t)ranks, sizeof(hy_lt *));
    cb->allocated = (size_t *)calloc((size_t)ranks, sizeof(size_t));
    int rc = cb->dev && cb->lt && cb->allocated
                 ? HY_OK : hy_fail(err, HY_ERR_RUNTIME, "cuda backend: out of memory");
    if (!rc) rc = map_devices(cb, ranks, devices, n_devices, err);
    if (!rc) rc = check_connections(cb, ranks, err);
    if (!rc) rc = open_io(cb, ranks, err);
    if (!rc) rc = preload(cb, ranks, err);
    if (!rc) rc = hy_cuda_driver_load(&cb->drv, err);
    if (!rc) rc = enable_peers(cb, ranks, err);
    void *word = NULL;
    if (!rc) rc = hy_cuda_host_alloc(cb, 2 * sizeof(uint32_t), &word, err);
    if (!rc) cb->abort_word = (volatile uint32_t *)word;
    if (!rc) cb->foreign_stop = cb->abort_word + 1;
    for (int r = 0; r < ranks && !rc; r++) {
        rc = enter_rank(&cb->base, r, err);
        if (!rc) rc = hy_lt_create(&cb->lt[r], cb->dev[r], err);
        if (rc) hy_error_prefix(err, "rank %d: ", r);
    }
    if (!rc) rc = hy_cuda_monitor_start(cb, err);
    if (rc) {
        cuda_destroy(&cb->base);
        return rc;
    }
    *out = &cb->base;
    return HY_OK;
}
