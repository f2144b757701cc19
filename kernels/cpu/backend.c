/*
 * backend.c — the CPU backend's execution core (backend.h, "Execution").
 *
 * A rank's stream runs its work on the rank's own thread, in order; while
 * capturing, the same calls append commands to a list instead, and a
 * "graph" is that list, replayed command by command. Flags are 32-bit
 * words in ordinary memory, written with release stores and read with
 * acquire loads, so a consumer that sees full == 1 also sees the bytes the
 * producer copied before setting it. A blocked wait sleeps on a futex
 * (woken by the writer) in short slices, so it notices an abort or its
 * watchdog without spinning; the watchdog counts only time the process
 * ran (lib/watchdog.h), so a Ctrl-Z is not a stall.
 *
 * Op timing (backend.h, op_stats): when switched on, every command a rank
 * runs, eagerly or in a replay, is timed into that rank's row of a table
 * of (calls, seconds) per hy_op_kind. Only the rank's own thread writes its
 * row; the host reads it between steps, ordered by the runtime's step
 * handshake. When off, a command pays one relaxed atomic load.
 */
#include "backend.h"
#include "cpu_backend.h"
#include "watchdog.h"

#include <cblas.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* How long one futex sleep lasts before the wait looks at the abort flag
 * and its deadline again. */
#define HY_CPU_WAIT_SLICE_NS 20000000L

typedef enum { CMD_WAIT, CMD_WRITE, CMD_COPY, CMD_CALL, CMD_STAMP, CMD_SLEEP } cpu_cmd_kind;

typedef struct {
    cpu_cmd_kind kind;
    uint32_t *flag;             /* WAIT, WRITE */
    uint32_t value;
    uint32_t then;              /* WAIT: what the flag holds after it */
    void *dst;                  /* COPY */
    const void *src;            /* COPY */
    size_t bytes;               /* COPY */
    uint64_t *stamp;            /* STAMP */
    uint64_t ns;                /* SLEEP */
    hy_wait_site site;          /* WAIT */
    hy_op_kind op_kind;         /* CALL: what the call computes, for op timing */
    void (*fn)(const void *);   /* CALL, with its argument block */
    _Alignas(16) unsigned char args[HY_CPU_CALL_ARGS];
} cpu_cmd;

typedef struct cpu_block {
    struct cpu_block *next;
} cpu_block;

/* One rank's op timing counters. Aligned to a cache line, so that two
 * ranks updating their rows never write the same line. */
typedef struct {
    _Alignas(64) hy_op_stat k[HY_OPK_COUNT];
} cpu_stats_row;

typedef struct {
    hy_backend base;
    hy_backend_ops ops;         /* this backend's table (no global state) */
    int aborted;                /* read and written with atomics */
    int timing;                 /* op timing on; read and written with atomics */
    cpu_stats_row *stats;       /* [ranks]: row r written only by rank r's thread */
    pthread_mutex_t lock;       /* guards why and blocks */
    char why[512];
    cpu_block *blocks;          /* every allocation, freed by destroy */
    size_t *allocated;          /* [ranks]: bytes alloc gave each rank (under lock) */
} cpu_backend;

typedef struct {
    hy_stream base;
    int capturing;
    int capture_failed;
    cpu_cmd *rec;
    size_t n, cap;
} cpu_stream;

struct hy_graph {
    cpu_cmd *cmds;
    size_t n;
};

static cpu_backend *cpu_of(hy_backend *be) { return (cpu_backend *)be; }
static cpu_stream *stream_of(hy_stream *s) { return (cpu_stream *)s; }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ------------------------------------------------------------------------ */
/* Memory: every block carries a header linking it into the backend's list,
 * so destroy frees whatever the runtime did not. */

static void *cpu_block_alloc(cpu_backend *cb, size_t bytes) {
    /* Keep the payload 64-byte aligned: flags and slots should not share
     * cache lines with their neighbours' headers. */
    size_t head = 64;
    if (bytes > SIZE_MAX - head) return NULL;
    void *raw = NULL;
    if (posix_memalign(&raw, 64, head + bytes) != 0) return NULL;
    memset(raw, 0, head + bytes);
    cpu_block *b = raw;
    pthread_mutex_lock(&cb->lock);
    b->next = cb->blocks;
    cb->blocks = b;
    pthread_mutex_unlock(&cb->lock);
    return (char *)raw + head;
}

static int cpu_alloc(hy_backend *be, int rank, size_t bytes, void **out, hy_error *err) {
    if (rank < 0 || rank >= be->ranks)
        return hy_fail(err, HY_ERR_RUNTIME, "cpu backend: no rank %d (have %d)", rank, be->ranks);
    cpu_backend *cb = cpu_of(be);
    *out = cpu_block_alloc(cb, bytes);
    if (!*out)
        return hy_fail(err, HY_ERR_RUNTIME, "cpu backend: out of memory allocating %zu bytes for rank %d",
                       bytes, rank);
    pthread_mutex_lock(&cb->lock);
    cb->allocated[rank] += bytes;
    pthread_mutex_unlock(&cb->lock);
    return HY_OK;
}

static size_t cpu_allocated(hy_backend *be, int rank) {
    cpu_backend *cb = cpu_of(be);
    if (rank < 0 || rank >= be->ranks) return 0;
    pthread_mutex_lock(&cb->lock);
    size_t n = cb->allocated[rank];
    pthread_mutex_unlock(&cb->lock);
    return n;
}

static int cpu_alloc_shared(hy_backend *be, int a, int b, size_t bytes, void **out, hy_error *err) {
    (void)b;
    return cpu_alloc(be, a, bytes, out, err);
}

static void cpu_free_mem(hy_backend *be, void *p) {
    if (!p) return;
    cpu_backend *cb = cpu_of(be);
    cpu_block *target = (cpu_block *)((char *)p - 64);
    pthread_mutex_lock(&cb->lock);
    for (cpu_block **link = &cb->blocks; *link; link = &(*link)->next) {
        if (*link == target) {
            *link = target->next;
            free(target);
            break;
        }
    }
    pthread_mutex_unlock(&cb->lock);
}

static int cpu_upload(hy_backend *be, int rank, void *dst, const void *src, size_t bytes,
                      hy_error *err) {
    (void)be; (void)rank; (void)err;
    memcpy(dst, src, bytes);
    return HY_OK;
}

/* ------------------------------------------------------------------------ */
/* Running one command */

static long futex_call(uint32_t *addr, int op, uint32_t val, const struct timespec *ts) {
    return syscall(SYS_futex, addr, op, val, ts, NULL, 0);
}

static int cpu_aborted(cpu_backend *cb, const hy_wait_site *site, hy_error *err) {
    char why[sizeof cb->why];
    pthread_mutex_lock(&cb->lock);
    memcpy(why, cb->why, sizeof why);
    pthread_mutex_unlock(&cb->lock);
    return hy_fail_cause(err, HY_ERR_RUNTIME, HY_CAUSE_STOPPED,
                         "rank %d stopped while waiting at %s: %s", site->rank, site->what, why);
}

static void store_flag(uint32_t *flag, uint32_t value) {
    __atomic_store_n(flag, value, __ATOMIC_RELEASE);
    futex_call(flag, FUTEX_WAKE_PRIVATE, INT_MAX, NULL);
}

static int run_wait(cpu_backend *cb, const cpu_cmd *c, hy_error *err) {
    hy_watchdog dog;   /* time the process was stopped does not count (watchdog.h) */
    hy_watchdog_start(&dog, cb->base.watchdog_s);
    for (;;) {
        uint32_t v = __atomic_load_n(c->flag, __ATOMIC_ACQUIRE);
        if (v == c->value) {
            if (c->then != c->value) store_flag(c->flag, c->then);
            return HY_OK;
        }
        if (__atomic_load_n(&cb->aborted, __ATOMIC_ACQUIRE)) return cpu_aborted(cb, &c->site, err);
        if (hy_watchdog_expired(&dog))
            return hy_fail(err, HY_ERR_RUNTIME,
                           "watchdog: rank %d waited %.2f s at %s (flag is %u, waiting for %u); "
                           "the rank that should set it is stalled or failed "
                           "(watchdog_s = %g)",
                           c->site.rank, hy_watchdog_waited(&dog), c->site.what, v, c->value,
                           cb->base.watchdog_s);
        double left = hy_watchdog_left(&dog);
        long ns = left < HY_CPU_WAIT_SLICE_NS * 1e-9 ? (long)(left * 1e9) + 1 : HY_CPU_WAIT_SLICE_NS;
        struct timespec ts = { ns / 1000000000L, ns % 1000000000L };
        /* Returns at once if the word is no longer v (EAGAIN), and early
         * on a signal (EINTR); either way the loop looks again. */
        futex_call(c->flag, FUTEX_WAIT_PRIVATE, v, &ts);
    }
}

static void run_write(const cpu_cmd *c) { store_flag(c->flag, c->value); }

static void run_stamp(const cpu_cmd *c) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    *c->stamp = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The slow-stage hook: sleeps in slices, so an abort cuts it short and a
 * stalled rank stops as promptly as a waiting one. */
static void run_sleep(cpu_backend *cb, const cpu_cmd *c) {
    double end = now_s() + (double)c->ns * 1e-9;
    for (;;) {
        double left = end - now_s();
        if (left <= 0 || __atomic_load_n(&cb->aborted, __ATOMIC_ACQUIRE)) return;
        long ns = left < HY_CPU_WAIT_SLICE_NS * 1e-9 ? (long)(left * 1e9) + 1 : HY_CPU_WAIT_SLICE_NS;
        struct timespec ts = { ns / 1000000000L, ns % 1000000000L };
        nanosleep(&ts, NULL);
    }
}

static int run_cmd_untimed(cpu_backend *cb, const cpu_cmd *c, hy_error *err) {
    switch (c->kind) {
    case CMD_WAIT: return run_wait(cb, c, err);
    case CMD_WRITE: run_write(c); return HY_OK;
    case CMD_COPY: memcpy(c->dst, c->src, c->bytes); return HY_OK;
    case CMD_CALL: c->fn(c->args); return HY_OK;
    case CMD_STAMP: run_stamp(c); return HY_OK;
    case CMD_SLEEP: run_sleep(cb, c); return HY_OK;
    }
    return hy_fail(err, HY_ERR_RUNTIME, "cpu backend: unknown command %d", (int)c->kind);
}

static hy_op_kind cmd_op_kind(const cpu_cmd *c) {
    switch (c->kind) {
    case CMD_WAIT: return HY_OPK_WAIT;
    case CMD_COPY: return HY_OPK_COPY;
    case CMD_CALL: return c->op_kind;
    default: return HY_OPK_OTHER;
    }
}

/* Adds one timed piece of work to the rank's row. */
static void stats_add(cpu_backend *cb, int rank, hy_op_kind kind, double seconds) {
    hy_op_stat *st = &cb->stats[rank].k[kind];
    st->calls++;
    st->seconds += seconds;
}

static int timing_on(cpu_backend *cb) {
    /* Relaxed: the switch only flips between steps, and the step
     * handshake already orders it; the load is all that timing costs
     * while it is off. */
    return __atomic_load_n(&cb->timing, __ATOMIC_RELAXED);
}

/* Runs one command on the stream's rank, timed when timing is on. */
static int run_cmd(cpu_stream *cs, const cpu_cmd *c, hy_error *err) {
    cpu_backend *cb = cpu_of(cs->base.be);
    if (!timing_on(cb)) return run_cmd_untimed(cb, c, err);
    double t0 = now_s();
    int rc = run_cmd_untimed(cb, c, err);
    stats_add(cb, cs->base.rank, cmd_op_kind(c), now_s() - t0);
    return rc;
}

/* Runs c now, or records it while capturing. */
static int enqueue(hy_stream *s, const cpu_cmd *c, hy_error *err) {
    cpu_stream *cs = stream_of(s);
    if (!cs->capturing) return run_cmd(cs, c, err);
    if (cs->n == cs->cap) {
        size_t cap = cs->cap ? 2 * cs->cap : 256;
        cpu_cmd *grown = realloc(cs->rec, cap * sizeof *grown);
        if (!grown) {
            cs->capture_failed = 1;
            return hy_fail(err, HY_ERR_RUNTIME, "cpu backend: out of memory recording rank %d's graph",
                           s->rank);
        }
        cs->rec = grown;
        cs->cap = cap;
    }
    cs->rec[cs->n++] = *c;
    return HY_OK;
}

/* ------------------------------------------------------------------------ */
/* The enqueue entry points */

static int cpu_wait_flag(hy_stream *s, uint32_t *flag, uint32_t value, uint32_t then,
                         const hy_wait_site *site, hy_error *err) {
    cpu_cmd c = { .kind = CMD_WAIT, .flag = flag, .value = value, .then = then, .site = *site };
    return enqueue(s, &c, err);
}

static int cpu_write_flag(hy_stream *s, uint32_t *flag, uint32_t value, hy_error *err) {
    cpu_cmd c = { .kind = CMD_WRITE, .flag = flag, .value = value };
    return enqueue(s, &c, err);
}

static int cpu_copy(hy_stream *s, void *dst, const void *src, size_t bytes, hy_error *err) {
    cpu_cmd c = { .kind = CMD_COPY, .dst = dst, .src = src, .bytes = bytes };
    return enqueue(s, &c, err);
}

static int cpu_timestamp(hy_stream *s, uint64_t *dst, hy_error *err) {
    cpu_cmd c = { .kind = CMD_STAMP, .stamp = dst };
    return enqueue(s, &c, err);
}

static int cpu_sleep(hy_stream *s, uint64_t ns, hy_error *err) {
    cpu_cmd c = { .kind = CMD_SLEEP, .ns = ns };
    return enqueue(s, &c, err);
}

int hy_cpu_call(hy_stream *s, hy_op_kind kind, void (*fn)(const void *args), const void *args,
                size_t size, hy_error *err) {
    if (size > HY_CPU_CALL_ARGS)
        return hy_fail(err, HY_ERR_RUNTIME, "cpu backend: %zu bytes of arguments (at most %d)",
                       size, HY_CPU_CALL_ARGS);
    if ((int)kind < 0 || kind >= HY_OPK_COUNT)
        return hy_fail(err, HY_ERR_RUNTIME, "cpu backend: op kind %d out of range", (int)kind);
    if (!stream_of(s)->capturing) {   /* eager: no command to build */
        cpu_backend *cb = cpu_of(s->be);
        if (!timing_on(cb)) {
            fn(args);
        } else {
            double t0 = now_s();
            fn(args);
            stats_add(cb, s->rank, kind, now_s() - t0);
        }
        return HY_OK;
    }
    cpu_cmd c = { .kind = CMD_CALL, .op_kind = kind, .fn = fn };
    memcpy(c.args, args, size);
    return enqueue(s, &c, err);
}

/* Data parallelism: the reducer's calls, run from the stream like any
 * command (so a replay sums again), timed as "reduce". */
typedef struct {
    hy_reducer *r;
    int bucket;
    float *buf;
    size_t n;
} cpu_reduce_args;

static void run_reduce_start(const void *args) {
    const cpu_reduce_args *a = args;
    a->r->start(a->r, a->bucket, a->buf, a->n);
}

static void run_reduce_wait(const void *args) {
    const cpu_reduce_args *a = args;
    a->r->wait(a->r, a->bucket);
}

static int cpu_reduce_start(hy_stream *s, hy_reducer *r, int bucket, float *buf, size_t n,
                            hy_error *err) {
    cpu_reduce_args a = { r, bucket, buf, n };
    return HY_CALL(s, HY_OPK_REDUCE, run_reduce_start, a, err);
}

static int cpu_reduce_wait(hy_stream *s, hy_reducer *r, int bucket, hy_error *err) {
    cpu_reduce_args a = { r, bucket, NULL, 0 };
    return HY_CALL(s, HY_OPK_REDUCE, run_reduce_wait, a, err);
}

/* ------------------------------------------------------------------------ */
/* Streams, capture, replay */

static int cpu_stream_create(hy_backend *be, int rank, hy_stream **out, hy_error *err) {
    if (rank < 0 || rank >= be->ranks)
        return hy_fail(err, HY_ERR_RUNTIME, "cpu backend: no rank %d (have %d)", rank, be->ranks);
    cpu_stream *cs = calloc(1, sizeof *cs);
    if (!cs) return hy_fail(err, HY_ERR_RUNTIME, "cpu backend: out of memory creating a stream");
    cs->base.be = be;
    cs->base.rank = rank;
    *out = &cs->base;
    return HY_OK;
}

static void cpu_stream_destroy(hy_stream *s) {
    if (!s) return;
    cpu_stream *cs = stream_of(s);
    free(cs->rec);
    free(cs);
}

static int cpu_sync(hy_stream *s, hy_error *err) {
    (void)s; (void)err;   /* work already ran on the calling thread */
    return HY_OK;
}

static int cpu_capture_begin(hy_stream *s, hy_error *err) {
    cpu_stream *cs = stream_of(s);
    if (cs->capturing)
        return hy_fail(err, HY_ERR_RUNTIME, "rank %d: capture_begin while already capturing", s->rank);
    cs->capturing = 1;
    cs->capture_failed = 0;
    cs->n = 0;
    return HY_OK;
}

static int cpu_capture_end(hy_stream *s, hy_graph **out, hy_error *err) {
    cpu_stream *cs = stream_of(s);
    *out = NULL;
    if (!cs->capturing)
        return hy_fail(err, HY_ERR_RUNTIME, "rank %d: capture_end without capture_begin", s->rank);
    cs->capturing = 0;
    if (cs->capture_failed)
        return hy_fail(err, HY_ERR_RUNTIME, "rank %d: the capture failed (out of memory)", s->rank);
    hy_graph *g = calloc(1, sizeof *g);
    if (!g) return hy_fail(err, HY_ERR_RUNTIME, "cpu backend: out of memory finishing a graph");
    g->cmds = cs->rec;   /* the graph takes the recorded list */
    g->n = cs->n;
    cs->rec = NULL;
    cs->n = cs->cap = 0;
    *out = g;
    return HY_OK;
}

static int cpu_graph_launch(hy_graph *g, hy_stream *s, hy_error *err) {
    cpu_stream *cs = stream_of(s);
    for (size_t i = 0; i < g->n; i++) {
        int rc = run_cmd(cs, &g->cmds[i], err);
        if (rc) return rc;
    }
    return HY_OK;
}

static void cpu_graph_destroy(hy_graph *g) {
    if (!g) return;
    free(g->cmds);
    free(g);
}

static void cpu_abort(hy_backend *be, const char *why) {
    cpu_backend *cb = cpu_of(be);
    pthread_mutex_lock(&cb->lock);
    if (!cb->why[0]) snprintf(cb->why, sizeof cb->why, "%s", why);
    pthread_mutex_unlock(&cb->lock);
    __atomic_store_n(&cb->aborted, 1, __ATOMIC_RELEASE);
}

static int cpu_op_stats(hy_backend *be, int enable, hy_op_stat *out, hy_error *err) {
    (void)err;   /* nothing here can fail on the CPU */
    cpu_backend *cb = cpu_of(be);
    for (int r = 0; r < be->ranks; r++) {
        if (out) memcpy(out + (size_t)r * HY_OPK_COUNT, cb->stats[r].k, sizeof cb->stats[r].k);
        memset(cb->stats[r].k, 0, sizeof cb->stats[r].k);
    }
    __atomic_store_n(&cb->timing, enable != 0, __ATOMIC_RELAXED);
    return HY_OK;
}

static void cpu_destroy(hy_backend *be) {
    if (!be) return;
    cpu_backend *cb = cpu_of(be);
    free(cb->stats);
    free(cb->allocated);
    while (cb->blocks) {
        cpu_block *next = cb->blocks->next;
        free(cb->blocks);
        cb->blocks = next;
    }
    pthread_mutex_destroy(&cb->lock);
    free(cb);
}

static hy_backend_ops cpu_ops_init(void) {
    hy_backend_ops o = {
    .name = "cpu",
    .destroy = cpu_destroy,
    .alloc = cpu_alloc,
    .alloc_shared = cpu_alloc_shared,
    .free_mem = cpu_free_mem,
    .upload = cpu_upload,
    .download = cpu_upload,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .sync = cpu_sync,
    .wait_flag = cpu_wait_flag,
    .write_flag = cpu_write_flag,
    .copy = cpu_copy,
    .capture_begin = cpu_capture_begin,
    .capture_end = cpu_capture_end,
    .graph_launch = cpu_graph_launch,
    .graph_destroy = cpu_graph_destroy,
    .abort = cpu_abort,
    .timestamp = cpu_timestamp,
    .sleep = cpu_sleep,
    .op_stats = cpu_op_stats,
    .reduce_start = cpu_reduce_start,
    .reduce_wait = cpu_reduce_wait,
    .allocated = cpu_allocated,
    };
    hy_cpu_math_ops(&o);
    return o;
}

void hy_backend_cpu_memory(hy_backend_memory *m) {
    hy_backend_ops o;
    memset(&o, 0, sizeof o);
    hy_cpu_math_ops(&o);
    *m = (hy_backend_memory){ .act_size = o.act_size, .attention_scratch = o.attention_scratch,
                              .scratch = NULL, .flags = HY_FLAGS_PRODUCER, .rank_overhead = 0 };
}

int hy_backend_cpu_create(hy_backend **out, int ranks, double watchdog_s, hy_error *err) {
    *out = NULL;
    if (ranks < 1 || ranks > 1024)
        return hy_fail(err, HY_ERR_INPUT, "cpu backend: ranks must be in 1..1024, got %d", ranks);
    if (!(watchdog_s > 0))
        return hy_fail(err, HY_ERR_INPUT, "cpu backend: watchdog_s must be > 0, got %g", watchdog_s);
    cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb) return hy_fail(err, HY_ERR_RUNTIME, "cpu backend: out of memory");
    void *rows = NULL;
    size_t row_bytes = (size_t)ranks * sizeof(cpu_stats_row);
    if (posix_memalign(&rows, _Alignof(cpu_stats_row), row_bytes) != 0) {
        free(cb);
        return hy_fail(err, HY_ERR_RUNTIME, "cpu backend: out of memory");
    }
    memset(rows, 0, row_bytes);
    cb->stats = rows;
    cb->allocated = calloc((size_t)ranks, sizeof *cb->allocated);
    if (!cb->allocated || pthread_mutex_init(&cb->lock, NULL) != 0) {
        free(cb->allocated);
        free(cb->stats);
        free(cb);
        return hy_fail(err, HY_ERR_RUNTIME, "cpu backend: out of memory, or pthread_mutex_init failed");
    }
    /* One thread per rank already runs the ranks in parallel; BLAS
     * threads on top would only fight them for the cores. */
    openblas_set_num_threads(1);
    cb->ops = cpu_ops_init();
    cb->base.ops = &cb->ops;
    cb->base.test_ops = hy_cpu_test_ops();
    cb->base.ranks = ranks;
    cb->base.watchdog_s = watchdog_s;
    *out = &cb->base;
    return HY_OK;
}
