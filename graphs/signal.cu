/*
 * signal.cu — the CUDA backend's cross-rank signals, watchdog and abort
 * (DESIGN §3 "Cross-rank movement", design 1).
 *
 * A flag is written by a stream memory operation (cuStreamWriteValue32),
 * which carries the default memory barrier: everything the stream wrote
 * before it is visible first. How a flag is waited for depends on whether
 * the stream is being captured:
 *
 *   - In a capture the wait is a stream memory operation too
 *     (cuStreamWaitValue32, EQ on a constant value), recorded as a graph
 *     node, so a replayed iteration carries its handshake.
 *   - Outside one (the eager warm-up iteration, graph = false, evaluation)
 *     the rank's thread waits on the host: it polls the flag (a load from
 *     host-mapped memory, or a 4-byte read through the device's io stream
 *     for a flag in device memory) and only then enqueues what follows.
 *     The thread also stores the value the wait leaves in the flag itself,
 *     at once: it runs ahead of its stream, so a store queued there could
 *     still be pending when the thread looks at the same flag again for
 *     the slot's next message, and it would take the old signal for a new
 *     one (the payload overwritten before it was read, a message lost).
 *     So no stream ever sits at a flag outside a graph, and whatever may
 *     make the driver wait for a whole device while ranks run eagerly (the
 *     first load of a cuBLASLt kernel, an allocation, a graph's
 *     instantiation on another rank) waits for work that finishes, never
 *     for a stream stuck behind a flag another rank's thread would set
 *     only after that very call returns. The host wait has the watchdog
 *     and abort of the CPU backend's.
 *
 * The stream operations are driver API calls; we get them through
 * cudaGetDriverEntryPointByVersion (the unversioned lookup is deprecated in
 * CUDA 13), so nothing links libcuda at build time and a machine without a
 * driver still runs the CPU backend.
 *
 * Liveness of a running graph: after each wait the stream writes its
 * running count of passed waits into a host-mapped progress word. One
 * monitor thread per backend watches every live stream: while a stream has
 * work left and its count stays put for watchdog_s, the stream is stuck at
 * its next wait, whose site (rank, action, edge, slot) was recorded when
 * the wait was captured; the monitor reports that and aborts the backend.
 * After an abort it releases every stream's current wait by writing the
 * value the wait expects into its flag (the run is failing; the data no
 * longer matters), again and again until every stream has drained. So no
 * rank hangs, not even one whose thread is blocked inside a launch because
 * its stream's queue is full behind a wait, or one that failed while
 * enqueueing and never reached sync. `sync` itself only polls its stream
 * and reports what the monitor saw.
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
    if (!rc) rc = hy_driver_symbol("cuGraphNodeGetType", (void **)&d->node_type, err);
    return rc;
}

int hy_cuda_driver_fail(const hy_driver *d, hy_error *err, CUresult rc, const char *call, int rank) {
    const char *name = NULL;
    if (!d->error_name || d->error_name(rc, &name) != CUDA_SUCCESS) name = "?";
    if (rank < 0)   /* not a rank's call */
        return hy_fail(err, HY_ERR_RUNTIME, "CUDA driver error %s (%d) in %s", name, (int)rc, call);
    return hy_fail(err, HY_ERR_RUNTIME, "rank %d: CUDA driver error %s (%d) in %s", rank, name,
                   (int)rc, call);
}


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

static int aborted(cuda_backend *cb) { return __atomic_load_n(&cb->aborted, __ATOMIC_SEQ_CST); }

/* The flag's value as the host sees it now. A flag in device memory is
 * read through the device's io stream, which never waits on anything. */
static int peek_flag(cuda_backend *cb, cuda_stream *cs, const uint32_t *flag, uint32_t *v,
                     hy_error *err) {
    if (!cb->flags_on_device) {
        *v = __atomic_load_n(flag, __ATOMIC_ACQUIRE);
        return HY_OK;
    }
    cudaStream_t io = cb->io[cs->device];
    HY_CUDA_CHECK(cudaMemcpyAsync((void *)cs->peek, flag, sizeof *flag, cudaMemcpyDeviceToHost, io),
                  err);
    HY_CUDA_CHECK(cudaStreamSynchronize(io), err);
    *v = *cs->peek;
    return HY_OK;
}

static int stopped_at(cuda_backend *cb, const hy_wait_site *site, hy_error *err) {
    char why[sizeof cb->why];
    pthread_mutex_lock(&cb->lock);
    memcpy(why, cb->why, sizeof why);
    pthread_mutex_unlock(&cb->lock);
    return hy_fail_cause(err, HY_ERR_RUNTIME, HY_CAUSE_STOPPED, "rank %d stopped while waiting at %s: %s",
                         site->rank, site->what, why);
}

/* Stores v into a flag from the host, at once: into host-mapped memory,
 * or through the device's io stream, which holds no waits, for a flag in
 * device memory (the caller has made cs's device current). */
static int poke_flag(cuda_backend *cb, const cuda_stream *cs, uint32_t *flag, uint32_t v,
                     hy_error *err) {
    if (!cb->flags_on_device) {
        __atomic_store_n(flag, v, __ATOMIC_SEQ_CST);
        return HY_OK;
    }
    cudaStream_t io = cb->io[cs->device];
    CUresult r = cb->drv.write32((CUstream)io, devptr(flag), v, CU_STREAM_WRITE_VALUE_DEFAULT);
    if (r != CUDA_SUCCESS) return hy_cuda_driver_fail(&cb->drv, err, r, "cuStreamWriteValue32 (io)", cs->base.rank);
    HY_CUDA_CHECK(cudaStreamSynchronize(io), err);
    return HY_OK;
}

/* Whether the wait at `at` is over: its flag holds the value (*seen: what
 * it holds), or its event has completed. */
static int site_ready(cuda_backend *cb, cuda_stream *cs, const cuda_site *at, int *ready,
                      uint32_t *seen, hy_error *err) {
    if (at->flag) {
        int rc = peek_flag(cb, cs, at->flag, seen, err);
        *ready = !rc && *seen == at->value;
        return rc;
    }
    cudaError_t q = cudaEventQuery(at->event);
    *ready = q == cudaSuccess;
    if (q == cudaSuccess || q == cudaErrorNotReady) return HY_OK;
    return hy_fail(err, HY_ERR_RUNTIME, "rank %d (device %d): %s (%s) at %s", at->site.rank,
                   cs->device, cudaGetErrorName(q), cudaGetErrorString(q), at->site.what);
}

/* The watchdog's report of a wait at `at` that lasted `waited` seconds;
 * seen: the flag's value when it could be read, else NULL. */
static void site_stalled(const cuda_backend *cb, const cuda_site *at, double waited,
                         const uint32_t *seen, char *buf, size_t n) {
    if (!at->flag) {
        snprintf(buf, n, "watchdog: rank %d waited %.2f s at %s; the work it waits for is "
                 "stalled, or a peer of it (another replica) is gone (watchdog_s = %g)",
                 at->site.rank, waited, at->site.what, cb->base.watchdog_s);
        return;
    }
    char value[48] = "";
    if (seen) snprintf(value, sizeof value, "flag is %u, ", *seen);
    snprintf(buf, n, "watchdog: rank %d waited %.2f s at %s (%swaiting for %u); the rank that "
             "should set it is stalled or failed (watchdog_s = %g)", at->site.rank, waited,
             at->site.what, value, at->value, cb->base.watchdog_s);
}

/* The eager wait: the calling (rank) thread polls until the wait is over,
 * an abort, or the watchdog, so no stream is left waiting for what may
 * never come. Spins briefly first (a neighbour's flag is often a few
 * microseconds away), then naps between looks. On the watchdog it aborts
 * the backend, as the monitor does for a graph; work of another library's
 * is ended through its release. */
static int host_wait(cuda_backend *cb, cuda_stream *cs, const cuda_site *at, hy_error *err) {
    hy_watchdog dog;   /* time the process was stopped does not count (watchdog.h) */
    hy_watchdog_start(&dog, cb->base.watchdog_s);
    for (long polls = 0;; polls++) {
        uint32_t v = 0;
        int ready = 0, rc = site_ready(cb, cs, at, &ready, &v, err);
        if (rc) return rc;
        if (ready) return at->flag && at->then != at->value ? poke_flag(cb, cs, at->flag, at->then, err)
                                                            : HY_OK;
        if (aborted(cb)) {
            if (at->release) at->release(at->ctx);
            return stopped_at(cb, &at->site, err);
        }
        if (hy_watchdog_expired(&dog)) {
            char msg[sizeof err->msg];
            site_stalled(cb, at, hy_watchdog_waited(&dog), &v, msg, sizeof msg);
            rc = hy_fail(err, HY_ERR_RUNTIME, "%s", msg);
            if (at->release) at->release(at->ctx);
            hy_cuda_abort(&cb->base, err->msg);
            return rc;
        }
        if (polls >= 256) {
            struct timespec ts = { 0, 20000 };
            nanosleep(&ts, NULL);
        }
    }
}

/* The wait of a capture: a stream memory operation on the flag, or an
 * edge from the event, then the progress word the monitor reads (each a
 * graph node). */
static int stream_wait(cuda_backend *cb, cuda_stream *cs, const cuda_site *at, hy_error *err) {
    pthread_mutex_lock(&cs->lock);
    int rc = sites_push(&cs->capture, at, err);
    size_t index = cs->capture.n;
    pthread_mutex_unlock(&cs->lock);
    if (rc) return rc;
    int rank = cs->base.rank;
    if (at->flag) {
        CUresult r = cb->drv.wait32((CUstream)cs->s, devptr(at->flag), at->value,
                                    CU_STREAM_WAIT_VALUE_EQ);
        if (r != CUDA_SUCCESS) return hy_cuda_driver_fail(&cb->drv, err, r, "cuStreamWaitValue32", rank);
        /* In a graph the stream itself is the waiter: the store follows
         * the wait in stream order. */
        if (at->then != at->value) {
            r = cb->drv.write32((CUstream)cs->s, devptr(at->flag), at->then, CU_STREAM_WRITE_VALUE_DEFAULT);
            if (r != CUDA_SUCCESS) return hy_cuda_driver_fail(&cb->drv, err, r, "cuStreamWriteValue32", rank);
        }
    } else {
        HY_CUDA_CHECK(cudaStreamWaitEvent(cs->s, at->event, 0), err);
    }
    CUresult r = cb->drv.write32((CUstream)cs->s, devptr(cs->progress), (cuuint32_t)index,
                                 CU_STREAM_WRITE_VALUE_DEFAULT);
    if (r != CUDA_SUCCESS)
        return hy_cuda_driver_fail(&cb->drv, err, r, "cuStreamWriteValue32 (progress)", rank);
    return HY_OK;
}

static int wait_at(hy_stream *s, const cuda_site *at, hy_error *err) {
    cuda_stream *cs = cs_of(s);
    cuda_backend *cb = cb_of(s->be);
    int rc = enter_stream(cs, err);
    if (rc) return rc;
    /* Only this thread starts and ends captures of its stream. */
    return cs->capturing ? stream_wait(cb, cs, at, err) : host_wait(cb, cs, at, err);
}

int hy_cuda_wait_flag(hy_stream *s, uint32_t *flag, uint32_t value, uint32_t then,
                      const hy_wait_site *site, hy_error *err) {
    cuda_site at = { *site, flag, value, then, NULL, NULL, NULL };
    return wait_at(s, &at, err);
}

int hy_cuda_wait_event(hy_stream *s, cudaEvent_t done, const hy_wait_site *site,
                       hy_cuda_release_fn release, void *ctx, hy_error *err) {
    cuda_site at = { *site, NULL, 0, 0, release, ctx, done };
    return wait_at(s, &at, err);
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
/* The monitor: watchdog and abort drain */

void hy_cuda_abort(hy_backend *be, const char *why) {
    cuda_backend *cb = cb_of(be);
    pthread_mutex_lock(&cb->lock);
    if (!cb->why[0]) snprintf(cb->why, sizeof cb->why, "%s", why);
    pthread_mutex_unlock(&cb->lock);
    __atomic_store_n(&cb->aborted, 1, __ATOMIC_SEQ_CST);
    *cb->abort_word = 1;
}

/* The wait the stream is blocked at, or NULL when it is past them all.
 * Under cs->lock. */
static const cuda_site *current_wait(const cuda_stream *cs) {
    uint32_t passed = *cs->progress;
    const site_list *l = cs->active;
    return l && passed < l->n ? &l->v[passed] : NULL;
}

/* Writes the value the wait expects into its flag (poke_flag). */
static void release_wait(cuda_backend *cb, const cuda_stream *cs, const cuda_site *at) {
    if (!at->flag) {   /* an event of another library's work */
        at->release(at->ctx);
        return;
    }
    hy_error ignored;   /* the run is failing already; the monitor tries again */
    cudaSetDevice(cs->device);
    (void)poke_flag(cb, cs, at->flag, at->value, &ignored);
}

/* One look at one stream. Under cs->lock; returns a watchdog report to
 * abort with (into why), or 0. */
static int watch(cuda_backend *cb, cuda_stream *cs, double now, char *why, size_t n) {
    double limit = cb->base.watchdog_s;
    if (cs->capturing) return 0;   /* nothing runs, and a query would break the capture */
    cudaSetDevice(cs->device);
    cudaError_t q = cudaStreamQuery(cs->s);
    if (q != cudaErrorNotReady) {   /* idle, or failed: sync reports a failure */
        if (q != cudaSuccess) (void)cudaGetLastError();
        cs->seen = *cs->progress;
        hy_watchdog_start_at(&cs->since, limit, now);
        return 0;
    }
    const cuda_site *at = current_wait(cs);
    if (aborted(cb)) {
        if (at) {
            if (!cs->released[0]) snprintf(cs->released, sizeof cs->released, "%s", at->site.what);
            release_wait(cb, cs, at);
        }
        return 0;
    }
    uint32_t p = *cs->progress;
    if (p != cs->seen) {
        cs->seen = p;
        hy_watchdog_start_at(&cs->since, limit, now);
        return 0;
    }
    /* Counts from the monitor's previous look at this stream: a pause of
     * the whole process (Ctrl-Z) between two looks is not a stall. */
    if (!hy_watchdog_expired_at(&cs->since, now) || !at) return 0;
    /* Device-memory flags cannot be read from here. */
    uint32_t seen = at->flag && !cb->flags_on_device ? *(volatile uint32_t *)at->flag : 0;
    site_stalled(cb, at, hy_watchdog_waited(&cs->since), at->flag && !cb->flags_on_device ? &seen : NULL,
                 cs->stalled, sizeof cs->stalled);
    snprintf(why, n, "%s", cs->stalled);
    return 1;
}

static void *monitor_main(void *arg) {
    cuda_backend *cb = (cuda_backend *)arg;
    char why[sizeof cb->why];
    while (!__atomic_load_n(&cb->quit, __ATOMIC_SEQ_CST)) {
        double now = hy_watchdog_now();
        int fire = 0;
        pthread_mutex_lock(&cb->lock);
        for (cuda_stream *cs = cb->streams; cs; cs = cs->next) {
            pthread_mutex_lock(&cs->lock);
            if (!fire) fire = watch(cb, cs, now, why, sizeof why);
            else watch(cb, cs, now, NULL, 0);
            pthread_mutex_unlock(&cs->lock);
        }
        pthread_mutex_unlock(&cb->lock);
        if (fire) hy_cuda_abort(&cb->base, why);
        /* Gentle while all is well; quick to drain after an abort. */
        struct timespec ts = { 0, aborted(cb) ? 100000L : 1000000L };
        nanosleep(&ts, NULL);
    }
    return NULL;
}

int hy_cuda_monitor_start(cuda_backend *cb, hy_error *err) {
    if (pthread_create(&cb->monitor, NULL, monitor_main, cb) != 0)
        return hy_fail(err, HY_ERR_RUNTIME, "cuda backend: could not start the monitor thread");
    cb->monitor_started = 1;
    return HY_OK;
}

void hy_cuda_monitor_stop(cuda_backend *cb) {
    if (!cb->monitor_started) return;
    __atomic_store_n(&cb->quit, 1, __ATOMIC_SEQ_CST);
    pthread_join(cb->monitor, NULL);
    cb->monitor_started = 0;
}

void hy_cuda_stream_register(cuda_backend *cb, cuda_stream *cs) {
    hy_watchdog_start(&cs->since, cb->base.watchdog_s);
    pthread_mutex_lock(&cb->lock);
    cs->next = cb->streams;
    cb->streams = cs;
    pthread_mutex_unlock(&cb->lock);
}

void hy_cuda_stream_unregister(cuda_backend *cb, cuda_stream *cs) {
    pthread_mutex_lock(&cb->lock);
    cuda_stream **at = &cb->streams;
    while (*at && *at != cs) at = &(*at)->next;
    if (*at) *at = cs->next;
    pthread_mutex_unlock(&cb->lock);
}

/* Polls until the stream is idle (or failed); spins briefly first, since a
 * step's tail is short. */
static cudaError_t wait_idle(cuda_stream *cs, double give_up_after) {
    double start = now_s();
    for (long polls = 0;; polls++) {
        cudaError_t q = cudaStreamQuery(cs->s);
        if (q != cudaErrorNotReady) return q;
        if (give_up_after > 0 && now_s() - start > give_up_after) return cudaErrorNotReady;
        if (polls > 64) {
            struct timespec ts = { 0, 50000 };
            nanosleep(&ts, NULL);
        }
    }
}

void hy_cuda_stream_drain(cuda_backend *cb, cuda_stream *cs) {
    cudaSetDevice(cs->device);
    /* Work still queued after its rank stopped means a wait nobody will
     * satisfy: abort, and the monitor releases it. */
    if (wait_idle(cs, 1.0) == cudaErrorNotReady) {
        hy_cuda_abort(&cb->base, "a stream was destroyed while still blocked");
        wait_idle(cs, 0);
    }
    (void)cudaGetLastError();
}

/* Waits for everything enqueued on the stream, then reports what happened
 * to it: a failure of its own, the watchdog firing on it, or an abort that
 * had to release one of its waits. */
int hy_cuda_sync(hy_stream *s, hy_error *err) {
    cuda_stream *cs = cs_of(s);
    cuda_backend *cb = cb_of(s->be);
    int rc = enter_stream(cs, err);
    if (rc) return rc;
    cudaError_t q = wait_idle(cs, 0);
    pthread_mutex_lock(&cs->lock);
    char stalled[sizeof cs->stalled], released[sizeof cs->released];
    memcpy(stalled, cs->stalled, sizeof stalled);
    memcpy(released, cs->released, sizeof released);
    cs->stalled[0] = cs->released[0] = '\0';
    cs->active = NULL;   /* no graph runs until the next launch */
    *cs->progress = 0;
    cs->seen = 0;
    hy_watchdog_start(&cs->since, cb->base.watchdog_s);
    pthread_mutex_unlock(&cs->lock);
    if (q != cudaSuccess) {
        rc = hy_fail(err, HY_ERR_RUNTIME, "rank %d (device %d): %s (%s) while running its iteration",
                     s->rank, cs->device, cudaGetErrorName(q), cudaGetErrorString(q));
        hy_cuda_abort(s->be, err->msg);
        return rc;
    }
    if (stalled[0]) return hy_fail(err, HY_ERR_RUNTIME, "%s", stalled);
    if (released[0]) {
        char why[sizeof cb->why];
        pthread_mutex_lock(&cb->lock);
        memcpy(why, cb->why, sizeof why);
        pthread_mutex_unlock(&cb->lock);
        return hy_fail_cause(err, HY_ERR_RUNTIME, HY_CAUSE_STOPPED,
                             "rank %d stopped while waiting at %s: %s", s->rank, released, why);
    }
    if (*cs->bad) {
        *cs->bad = 0;
        return hy_fail(err, HY_ERR_RUNTIME, "rank %d: a training target outside the vocabulary "
                       "reached the classifier", s->rank);
    }
    return HY_OK;
}
