/*
 * fuse.cu — adjacent ops on a rank's stream, fused as they are enqueued.
 *
 * The runtime calls the backend one op at a time (backend.h), and some ops
 * are better done together with the op right after them:
 *
 *   - zero(p, n), then an op that adds into exactly p[0, n) (the dinp of
 *     matmul_bwd and lm_head_bwd, gelu_bwd, swiglu_bwd, attention_bwd): that op
 *     stores instead of adding, and the memset never runs. The GEMMs are
 *     the first writer of those buffers, so this saves writing n bytes and
 *     reading them back (beta = 1) per product;
 *   - add(acc, x, n), then layernorm_fwd or rmsnorm_fwd of exactly acc (N·C = n): one
 *     kernel forms the residual, stores it and normalises it;
 *   - adamw on tensor after tensor with the same hyper-parameters and clip
 *     factor: one launch for them all (kernels.cuh's hy_adamw_batch), so a
 *     rank's optimizer step, which calls it for every parameter in a row,
 *     is one kernel (up to 16 blocks and 1024 segments of them).
 *
 * So zero, add and adamw are held back (one held op per stream), and the
 * next call on the stream either takes the held op (fuses with it) or
 * first enqueues it as it was. Every entry point that takes a stream
 * enters it through enter_stream (cuda_backend.cuh), which does the latter;
 * only the ops above that can fuse enter through enter_stream_holding and
 * call a take_* here. A held op is therefore always enqueued before
 * anything else the stream does (a flag write, a copy, a sync, the end of
 * a capture), and the results are those of the ops one after the other,
 * bit for bit: the fused kernels round exactly as the separate ones do.
 * The decisions depend only on the sequence of calls, so the eager
 * warm-up and the captured iteration make the same ones.
 */
#include <string.h>

#include "cuda_backend.cuh"

/* Enqueues what s holds, as it was called. */
int hy_cuda_flush(cuda_stream *cs, hy_error *err) {
    const cuda_hold *h = &cs->hold;   /* read before anything is held again */
    hold_kind kind = h->kind;
    if (kind == HOLD_NONE) return HY_OK;
    cs->hold.kind = HOLD_NONE;
    int rc = HY_OK;
    if (kind == HOLD_ZERO) {
        cudaError_t e = cudaMemsetAsync(h->p, 0, h->bytes, cs->s);
        if (e != cudaSuccess) rc = HY_CUDA_FAIL(err, e, "cudaMemsetAsync (zero)");
    } else if (kind == HOLD_ADD) {
        rc = hy_k_add_bf16(cs->s, h->acc, h->x, h->n, err);
    } else {
        rc = hy_k_adamw(cs->s, &h->adamw, err);
    }
    if (rc)
        hy_error_prefix(err, "rank %d, the %s held back for the next op: ", cs->base.rank,
                        kind == HOLD_ZERO ? "zero" : kind == HOLD_ADD ? "add" : "adamw");
    return rc;
}

int hy_cuda_hold_zero(cuda_stream *cs, void *p, size_t bytes, hy_error *err) {
    int rc = hy_cuda_flush(cs, err);
    if (rc || bytes == 0) return rc;
    cs->hold.kind = HOLD_ZERO;
    cs->hold.p = p;
    cs->hold.bytes = bytes;
    return HY_OK;
}

int hy_cuda_take_zero(cuda_stream *cs, const void *p, size_t bytes, int *taken, hy_error *err) {
    *taken = p != NULL && cs->hold.kind == HOLD_ZERO && cs->hold.p == p && cs->hold.bytes == bytes;
    if (*taken) {
        cs->hold.kind = HOLD_NONE;
        return HY_OK;
    }
    return hy_cuda_flush(cs, err);
}

int hy_cuda_hold_add(cuda_stream *cs, hy_bf16 *acc, const hy_bf16 *x, size_t n, hy_error *err) {
    int rc = hy_cuda_flush(cs, err);
    if (rc || n == 0) return rc;
    cs->hold.kind = HOLD_ADD;
    cs->hold.acc = acc;
    cs->hold.x = x;
    cs->hold.n = n;
    return HY_OK;
}

int hy_cuda_take_add(cuda_stream *cs, const void *acc, size_t n, const hy_bf16 **x, hy_error *err) {
    *x = NULL;
    if (cs->hold.kind == HOLD_ADD && cs->hold.acc == acc && cs->hold.n == n) {
        *x = cs->hold.x;
        cs->hold.kind = HOLD_NONE;
        return HY_OK;
    }
    return hy_cuda_flush(cs, err);
}

int hy_cuda_hold_adamw(cuda_stream *cs, float *param, hy_bf16 *param_compute, const float *grad,
                       float *m, float *v, size_t n, const hy_adamw_hparams *hp,
                       const float *factor, int decay, hy_error *err) {
    if (cs->hold.kind == HOLD_ADAMW &&
        hy_k_adamw_batch_add(&cs->hold.adamw, param, param_compute, grad, m, v, n, hp, factor, decay))
        return HY_OK;
    int rc = hy_cuda_flush(cs, err);
    if (rc) return rc;
    cs->hold.kind = HOLD_ADAMW;
    cs->hold.adamw.segments = 0;
    hy_k_adamw_batch_add(&cs->hold.adamw, param, param_compute, grad, m, v, n, hp, factor, decay);
    return HY_OK;
}
