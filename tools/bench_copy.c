/*
 * bench_copy.c — the mailbox path's cost, side by side with a bare copy.
 *
 * `hanayo-bench-copy [--backend cpu|cuda] [--mib N] [--rounds K]` measures,
 * in one run, on two ranks (on CUDA both on device 0, so a "peer" copy is
 * device-to-device; on a multi-GPU machine pass --devices a,b):
 *   bandwidth  K messages of N MiB from rank 0 to rank 1 through a channel
 *              (wait free, copy, write full; the consumer waits full and
 *              releases), against K bare copies of the same bytes on one
 *              stream: the ratio is what the handshake costs at the size of
 *              a GPT-2 micro-batch's activations;
 *   latency    a 4-byte ping-pong between the two ranks (round trips per
 *              second), with the flags in host-mapped and, on CUDA, in
 *              device memory.
 * Each is run eagerly and as a recorded graph replayed K times. Timings
 * are printed, never asserted.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "mailbox.h"

typedef struct {
    int cuda, flags_on_device, devices[2], n_devices;
    size_t bytes;
    int rounds;
} bench_opts;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int open_backend(const bench_opts *o, int flags_on_device, hy_backend **be, hy_error *err) {
    if (!o->cuda) return hy_backend_cpu_create(be, 2, 60.0, err);
    return hy_backend_cuda_create(be, 2, o->devices, o->n_devices, flags_on_device, 60.0, err);
}

/* One rank's side of `rounds` transfers, recorded once and replayed, or
 * enqueued eagerly. */
typedef struct {
    hy_backend *be;
    hy_channel *to1, *to0;     /* 0 -> 1 (the payload), 1 -> 0 (the pong) */
    void *src;
    int rank, rounds, graph, pingpong;
    pthread_barrier_t *recorded;   /* both sides' graphs made before either is launched */
    double seconds;
    int status;
    hy_error err;
} side;

static int enqueue_side(side *sd, hy_stream *st) {
    int rc = HY_OK;
    for (int i = 0; i < sd->rounds && !rc; i++) {
        if (sd->rank == 0) {
            rc = hy_channel_send(st, sd->to1, sd->src, "bench payload", &sd->err);
            if (!rc && sd->pingpong) {
                rc = hy_channel_receive(st, sd->to0, "bench pong", &sd->err);
                if (!rc) rc = hy_channel_release(st, sd->to0, &sd->err);
            }
        } else {
            rc = hy_channel_receive(st, sd->to1, "bench payload", &sd->err);
            if (!rc) rc = hy_channel_release(st, sd->to1, &sd->err);
            if (!rc && sd->pingpong) rc = hy_channel_send(st, sd->to0, sd->src, "bench pong", &sd->err);
        }
    }
    return rc;
}

static void *side_main(void *arg) {
    side *sd = arg;
    const hy_backend_ops *o = sd->be->ops;
    hy_stream *st = NULL;
    hy_graph *g = NULL;
    int rc = o->stream_create(sd->be, sd->rank, &st, &sd->err);
    if (!rc) rc = enqueue_side(sd, st);            /* warm-up, eager */
    if (!rc) rc = o->sync(st, &sd->err);
    if (sd->graph) {
        /* Both sides pass the barrier exactly once, failed or not, and
         * neither launches while the other may still be instantiating (a
         * launched graph sits at flags; see lib/runtime.c). */
        int capturing = !rc && (rc = o->capture_begin(st, &sd->err)) == HY_OK;
        if (capturing) {
            rc = enqueue_side(sd, st);
            int end = o->capture_end(st, &g, rc ? NULL : &sd->err);
            if (!rc) rc = end;
        }
        pthread_barrier_wait(sd->recorded);
        if (!rc) rc = o->graph_launch(g, st, &sd->err);   /* first replay: warm-up */
        if (!rc) rc = o->sync(st, &sd->err);
    }
    double t0 = now_s();
    if (!rc) rc = sd->graph ? o->graph_launch(g, st, &sd->err) : enqueue_side(sd, st);
    if (!rc) rc = o->sync(st, &sd->err);
    sd->seconds = now_s() - t0;
    if (rc) o->abort(sd->be, sd->err.msg);
    o->graph_destroy(g);
    o->stream_destroy(st);
    sd->status = rc;
    return NULL;
}

/* Seconds for `rounds` handshaked transfers of `bytes` (the slower rank). */
static int run_channel(const bench_opts *op, int flags_on_device, size_t bytes, int pingpong,
                       int graph, double *seconds, hy_error *err) {
    hy_backend *be = NULL;
    hy_channel to1, to0;
    memset(&to1, 0, sizeof to1);
    memset(&to0, 0, sizeof to0);
    int rc = open_backend(op, flags_on_device, &be, err);
    void *src0 = NULL, *src1 = NULL;
    if (!rc) rc = hy_channel_open(&to1, be, 0, 1, bytes, err);
    if (!rc) rc = hy_channel_open(&to0, be, 1, 0, bytes, err);
    if (!rc) rc = be->ops->alloc(be, 0, bytes, &src0, err);
    if (!rc) rc = be->ops->alloc(be, 1, bytes, &src1, err);
    if (rc) {
        if (be) be->ops->destroy(be);
        return rc;
    }
    side sd[2];
    pthread_t th[2];
    pthread_barrier_t recorded;
    pthread_barrier_init(&recorded, NULL, 2);
    for (int r = 0; r < 2; r++) {
        memset(&sd[r], 0, sizeof sd[r]);
        sd[r].be = be;
        sd[r].to1 = &to1;
        sd[r].to0 = &to0;
        sd[r].src = r == 0 ? src0 : src1;
        sd[r].rank = r;
        sd[r].rounds = op->rounds;
        sd[r].graph = graph;
        sd[r].pingpong = pingpong;
        sd[r].recorded = &recorded;
    }
    for (int r = 0; r < 2; r++) pthread_create(&th[r], NULL, side_main, &sd[r]);
    for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
    pthread_barrier_destroy(&recorded);
    for (int r = 0; r < 2 && !rc; r++)
        if (sd[r].status) rc = hy_fail(err, sd[r].status, "%s", sd[r].err.msg);
    *seconds = sd[0].seconds > sd[1].seconds ? sd[0].seconds : sd[1].seconds;
    hy_channel_close(&to1, be);
    hy_channel_close(&to0, be);
    be->ops->destroy(be);
    return rc;
}

/* Seconds for `rounds` bare copies of `bytes` from rank 0 to rank 1 on one
 * stream: the ceiling the mailbox path is held against. */
static int run_bare(const bench_opts *op, size_t bytes, double *seconds, hy_error *err) {
    hy_backend *be = NULL;
    int rc = open_backend(op, 0, &be, err);
    void *src = NULL, *dst = NULL;
    hy_stream *st = NULL;
    if (!rc) rc = be->ops->alloc(be, 0, bytes, &src, err);
    if (!rc) rc = be->ops->alloc(be, 1, bytes, &dst, err);
    if (!rc) rc = be->ops->stream_create(be, 0, &st, err);
    if (!rc) rc = be->ops->copy(st, dst, src, bytes, err);   /* warm-up */
    if (!rc) rc = be->ops->sync(st, err);
    double t0 = now_s();
    for (int i = 0; i < op->rounds && !rc; i++) rc = be->ops->copy(st, dst, src, bytes, err);
    if (!rc) rc = be->ops->sync(st, err);
    *seconds = now_s() - t0;
    if (be) {
        be->ops->stream_destroy(st);
        be->ops->destroy(be);
    }
    return rc;
}

static int parse(int argc, char **argv, bench_opts *o, hy_error *err) {
    memset(o, 0, sizeof *o);
    o->bytes = (size_t)12 << 20;   /* GPT-2 124M: 8 x 1024 tokens x 768 x bf16 = 12 MiB */
    o->rounds = 200;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--backend") && v) { o->cuda = !strcmp(v, "cuda"); i++;
            if (!o->cuda && strcmp(v, "cpu")) return hy_fail(err, HY_ERR_INPUT, "--backend: cpu or cuda, not '%s'", v); }
        else if (!strcmp(a, "--mib") && v) { o->bytes = (size_t)(atof(v) * 1048576.0); i++; }
        else if (!strcmp(a, "--rounds") && v) { o->rounds = atoi(v); i++; }
        else if (!strcmp(a, "--devices") && v) {
            if (sscanf(v, "%d,%d", &o->devices[0], &o->devices[1]) != 2)
                return hy_fail(err, HY_ERR_INPUT, "--devices: two device numbers, 'a,b'");
            o->n_devices = 2;
            i++;
        } else return hy_fail(err, HY_ERR_INPUT, "usage: hanayo-bench-copy [--backend cpu|cuda] "
                              "[--mib N] [--rounds K] [--devices a,b]; unknown argument '%s'", a);
    }
    if (o->rounds < 1 || o->bytes < 4) return hy_fail(err, HY_ERR_INPUT, "--rounds >= 1, --mib > 0");
    if (o->cuda && o->n_devices == 0) o->n_devices = 2;   /* devices {0, 0}: one GPU */
    return HY_OK;
}

int main(int argc, char **argv) {
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);   /* as hanayo's main, before any CUDA call */
    bench_opts o;
    hy_error err;
    if (parse(argc, argv, &o, &err)) {
        fprintf(stderr, "hanayo-bench-copy: %s\n", err.msg);
        return 2;
    }
    int gpus = 0;
    if (o.cuda && (hy_device_count(&gpus, &err) != HY_OK || gpus == 0)) {
        printf("hanayo-bench-copy: no CUDA device; nothing to measure\n");
        return 0;
    }
    printf("backend %s, devices %d,%d, %.1f MiB x %d\n", o.cuda ? "cuda" : "cpu", o.devices[0],
           o.devices[1], o.bytes / 1048576.0, o.rounds);
    double bare = 0;
    int rc = run_bare(&o, o.bytes, &bare, &err);
    if (!rc) printf("bare copy           %8.1f GB/s\n", o.bytes * (double)o.rounds / bare / 1e9);
    for (int flags = 0; flags <= o.cuda && !rc; flags++) {
        for (int graph = 0; graph <= 1 && !rc; graph++) {
            double t = 0, lat = 0;
            rc = run_channel(&o, flags, o.bytes, 0, graph, &t, &err);
            if (!rc) rc = run_channel(&o, flags, 4, 1, graph, &lat, &err);
            if (rc) break;
            printf("mailbox %-6s %-5s %8.1f GB/s  (%.2fx of the bare copy)   ping-pong %7.2f us per "
                   "round trip\n", flags ? "device" : "host", graph ? "graph" : "eager",
                   o.bytes * (double)o.rounds / t / 1e9, bare / t, lat / o.rounds * 1e6);
        }
    }
    if (rc) {
        fprintf(stderr, "hanayo-bench-copy: %s\n", err.msg);
        return 1;
    }
    return 0;
}
