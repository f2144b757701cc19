/*
 * signal.cu — the CUDA backend's cross-rank signals, watchdog and abort
 * (DESIGN §3, design 1).
 *
 * Full/free flags are waited on and written by stream memory operations
 * (cuStreamWaitValue32 / cuStreamWriteValue32), which stream capture
 * records as graph nodes, so a replayed iteration carries its handshake.
 * They are driver API calls; we get them through
 * cudaGetDriverEntryPointByVersion (the unversioned lookup is deprecated in
 * CUDA 13), so nothing links libcuda at build time and a machine without a
 * driver still runs the CPU backend. A wait is EQ on a constant value; a
 * write carries the default memory barrier (everything the stream wrote
 * before it is visible first).
 *
 * Liveness without a host thread per wait: after each wait the stream
 * writes its running count of passed waits into a host-mapped progress
 * word. `sync` polls the stream; while it is not done it watches that
 * word, and when it stays put for watchdog_s the rank is stuck at the next
 * wait, whose site (rank, action, edge, slot) was recorded when the wait
 * was enqueued: that is the report. `abort` marks the backend; each
 * blocked rank's `sync` then releases its own current wait by writing the
 * value it waits for into its flag (the run is failing; the data no longer
 * matters) until its stream drains, and reports why it stopped.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.cuh"

static int hy_driver_symbol(const char *name, void **fn, hy_error *err) {
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    cudaError_t rc = cudaGetDriverEntryPointByVersion(name, fn, HY_DRIVER_API_VERSION,
                                                      cudaEnableDefault, &found);
    if (rc != cudaSuccess) return HY_CUDA_FAIL(err, rc, "cudaGetDriverEntryPointByVersion");
    if (found != cudaDriverEntryPointSuccess || !*fn)
        return hy_fail(err, HY_ERR_RUNTIME,
                       "cuda backend: the driver has no %s for CUDA %d.%d (result %d); "
                       "the driver is too old for stream memory operations", name,
                       HY_DRIVER_API_VERSION / 1000, HY_DRIVER_API_VERSION % 1000 / 10, (int)found);
    return HY_OK;
}

int hy_cuda_driver_load(hy_driver *d, hy_error *err) {
    int rc = hy_driver_symbol("cuStreamWaitValue32", (void **)&d->wait32, err);
    if (!rc) rc = hy_driver_symbol("cuStreamWriteValue32", (void **)&d->write32, err);
    if (!rc) rc = hy_driver_symbol("cuGetErrorName", (void **)&d->error_name, err);
    return rc;
}

int hy_cuda_driver_fail(const hy_driver *d, hy_error *err, CUresult rc, const char *call, int rank) {
    const char *name = NULL;
    if (!d->error_name || d->error_name(rc, &name) != CUDA_SUCCESS) name = "?";
    return hy_fail(err, HY_ERR_RUNTIME, "rank %d: CUDA driver error %s (%d) in %s", rank, name,
                   (int)rc, call);
}


/* ------------------------------------------------------------------------ */
/* Wait sites */

/* ------------------------------------------------------------------------ */
/* Wait sites */

static int sites_push(site_list *l, const cuda_site *s, hy_error *err) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        cuda_site *grown = (cuda_site *)realloc(l->v, cap * sizeof *grown);
        if (!grown) return hy_fail(err, HY_ERR_RUNTIME, "cuda backend: out of memory recording a wait");
        l->v = grown;
        l->cap = cap;
    }
    l->v[l->n++] = *s;
    return HY_OK;
}


/* ------------------------------------------------------------------------ */
/* Flags */

int hy_cuda_wait_flag(hy_stream *s, uint32_t *flag, uint32_t value, const hy_wait_site *site,
                          hy_error *err) {
    cuda_stream *cs = cs_of(s);
    cuda_backend *cb = cb_of(s->be);
    int rc = enter_stream(cs, err);
    if (rc) return rc;
    site_list *l = cs->capturing ? &cs->capture : &cs->eager;
    if (!cs->capturing) cs->active = &cs->eager;
    cuda_site cs_site = { *site, flag, value };
    rc = sites_push(l, &cs_site, err);
    if (rc) return rc;
    CUresult r = cb->drv.wait32((CUstream)cs->s, devptr(flag), value, CU_STREAM_WAIT_VALUE_EQ);
    if (r != CUDA_SUCCESS) return hy_cuda_driver_fail(&cb->drv, err, r, "cuStreamWaitValue32", s->rank);
    r = cb->drv.write32((CUstream)cs->s, devptr(cs->progress), (cuuint32_t)l->n,
                        CU_STREAM_WRITE_VALUE_DEFAULT);
    if (r != CUDA_SUCCESS) return hy_cuda_driver_fail(&cb->drv, err, r, "cuStreamWriteValue32 (progress)", s->rank);
    return HY_OK;
}

int hy_cuda_write_flag(hy_stream *s, uint32_t *flag, uint32_t value, hy_error *err) {
    cuda_stream *cs = cs_of(s);
    cuda_backend *cb = cb_of(s->be);
    int rc = enter_stream(cs, err);
    if (rc) return rc;
    CUresult r = cb->drv.write32((CUstream)cs->s, devptr(flag), value, CU_STREAM_WRITE_VALUE_DEFAULT);
    if (r != CUDA_SUCCESS) return hy_cuda_driver_fail(&cb->drv, err, r, "cuStreamWriteValue32", s->rank);
    return HY_OK;
}


/* ------------------------------------------------------------------------ */
/* Watchdog and abort */

static int stopped_error(cuda_backend *cb, cuda_stream *cs, const cuda_site *at, hy_error *err) {
    char why[sizeof cb->why];
    pthread_mutex_lock(&cb->lock);
    memcpy(why, cb->why, sizeof why);
    pthread_mutex_unlock(&cb->lock);
    if (at)
        return hy_fail(err, HY_ERR_RUNTIME, "rank %d stopped while waiting at %s: %s",
                       cs->base.rank, at->site.what, why);
    return hy_fail(err, HY_ERR_RUNTIME, "rank %d stopped: %s", cs->base.rank, why);
}

/* The wait the stream is blocked at, or NULL when it is past them all. */
static const cuda_site *current_wait(const cuda_stream *cs) {
    uint32_t passed = *cs->progress;
    const site_list *l = cs->active;
    return l && passed < l->n ? &l->v[passed] : NULL;
}

/* Lets a stream that an abort stopped run to its end: writes the value its
 * current wait expects into the flag (host-mapped: a store; device memory:
 * a write on the control stream, which is not blocked). */
static void release_wait(cuda_backend *cb, cuda_stream *cs, const cuda_site *at) {
    if (!cb->flags_on_device) {
        __atomic_store_n(at->flag, at->value, __ATOMIC_SEQ_CST);
        return;
    }
    cb->drv.write32((CUstream)cs->ctl, devptr(at->flag), at->value, CU_STREAM_WRITE_VALUE_DEFAULT);
}

void hy_cuda_abort(hy_backend *be, const char *why) {
    cuda_backend *cb = cb_of(be);
    pthread_mutex_lock(&cb->lock);
    if (!cb->why[0]) snprintf(cb->why, sizeof cb->why, "%s", why);
    pthread_mutex_unlock(&cb->lock);
    __atomic_store_n(&cb->aborted, 1, __ATOMIC_SEQ_CST);
    *cb->abort_word = 1;
}

/* Waits for everything enqueued on the stream, watching it: a wait that
 * makes no progress for watchdog_s is reported with its site and aborts
 * the backend; after an abort the stream is drained and the reason given. */
int hy_cuda_sync(hy_stream *s, hy_error *err) {
    cuda_stream *cs = cs_of(s);
    cuda_backend *cb = cb_of(s->be);
    int rc = enter_stream(cs, err);
    if (rc) return rc;
    uint32_t seen = *cs->progress;
    double since = now_s();
    const cuda_site *stopped_at = NULL;
    int waited_out = 0;
    for (long polls = 0;; polls++) {
        cudaError_t q = cudaStreamQuery(cs->s);
        if (q == cudaSuccess) break;
        if (q != cudaErrorNotReady) {
            rc = hy_fail(err, HY_ERR_RUNTIME, "rank %d (device %d): %s (%s) while running its "
                         "iteration", s->rank, cs->device, cudaGetErrorName(q), cudaGetErrorString(q));
            hy_cuda_abort(s->be, err->msg);
            return rc;
        }
        const cuda_site *at = current_wait(cs);
        if (__atomic_load_n(&cb->aborted, __ATOMIC_SEQ_CST)) {
            if (at) {
                if (!stopped_at) stopped_at = at;
                release_wait(cb, cs, at);
            }
        } else {
            uint32_t p = *cs->progress;
            double t = now_s();
            if (p != seen) {
                seen = p;
                since = t;
            } else if (at && t - since >= cb->base.watchdog_s) {
                rc = hy_fail(err, HY_ERR_RUNTIME,
                             "watchdog: rank %d waited %.2f s at %s (flag is %u, waiting for %u); "
                             "the rank that should set it is stalled or failed (watchdog_s = %g)",
                             s->rank, t - since, at->site.what, *(volatile uint32_t *)at->flag,
                             at->value, cb->base.watchdog_s);
                waited_out = 1;
                hy_cuda_abort(s->be, err->msg);
            }
        }
        /* Spin briefly (a step's tail is short), then poll gently. */
        if (polls > 64) {
            struct timespec ts = { 0, 50000 };
            nanosleep(&ts, NULL);
        }
    }
    cs->eager.n = 0;
    *cs->progress = 0;
    if (waited_out) return rc;
    if (stopped_at) return stopped_error(cb, cs, stopped_at, err);
    if (*cs->bad) {
        *cs->bad = 0;
        return hy_fail(err, HY_ERR_RUNTIME, "rank %d: a training target outside the vocabulary "
                       "reached the classifier", s->rank);
    }
    return HY_OK;
}

