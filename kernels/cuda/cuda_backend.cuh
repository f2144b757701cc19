/*
 * cuda_backend.cuh — what the CUDA backend's files share (not a public API).
 *
 * kernels/cuda/backend.cu holds memory, streams and the math entries;
 * graphs/signal.cu the cross-rank flags (stream memory operations through
 * the driver's entry points), the watchdog and abort; graphs/graph.cu
 * capture, replay and the DOT dumps; kernels/cuda/testops.cu the test ops.
 * They share the state below.
 */
#ifndef HY_CUDA_BACKEND_CUH
#define HY_CUDA_BACKEND_CUH

#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include <cuda.h>
#include <cuda_runtime.h>

#include "backend.h"
#include "check.cuh"
#include "kernels.cuh"
#include "watchdog.h"

/* ---- Driver entry points (graphs/signal.cu) ---- */

typedef CUresult (*hy_pfn_wait32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
typedef CUresult (*hy_pfn_write32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
typedef CUresult (*hy_pfn_error_name)(CUresult, const char **);
typedef CUresult (*hy_pfn_node_type)(CUgraphNode, CUgraphNodeType *);

/* The CUDA version whose signatures we ask for: 12.0's stream memory
 * operations are the capturable (v2) ones. */
#define HY_DRIVER_API_VERSION 12000

typedef struct {
    hy_pfn_wait32 wait32;
    hy_pfn_write32 write32;
    hy_pfn_error_name error_name;
    /* The runtime's cudaGraphNodeGetType fails (cudaErrorUnknown) on the
     * driver's batch memory operation nodes, which our flag waits and
     * writes become; the driver's own call names every node. */
    hy_pfn_node_type node_type;
} hy_driver;

/* Fills d; fails naming the entry point a too-old driver lacks. */
int hy_cuda_driver_load(hy_driver *d, hy_error *err);
/* A driver API failure as an error naming the call and the rank (rank < 0:
 * none). */
int hy_cuda_driver_fail(const hy_driver *d, hy_error *err, CUresult rc, const char *call, int rank);

/* ---- State ---- */


typedef enum { MEM_DEVICE, MEM_HOST } mem_kind;

typedef struct mem_block {
    void *p;
    mem_kind kind;
    int device;
    struct mem_block *next;
} mem_block;

/* A wait as the watchdog and abort need it: for a flag to hold value,
 * or (flag NULL) for `event`, recorded by work the backend does not own
 * (NCCL's sums), which an abort ends by release(ctx) instead of writing
 * the flag. */
typedef void (*hy_cuda_release_fn)(void *ctx);
typedef struct {
    hy_wait_site site;
    uint32_t *flag;
    uint32_t value;
    uint32_t then;               /* what the flag holds once the wait is over */
    hy_cuda_release_fn release;
    void *ctx;
    cudaEvent_t event;
} cuda_site;

typedef struct {
    cuda_site *v;
    size_t n, cap;
} site_list;

typedef struct cuda_stream cuda_stream;

/* The op a stream holds back for the next call to fuse with (fuse.cu). */
typedef enum { HOLD_NONE, HOLD_ZERO, HOLD_ADD, HOLD_ADAMW } hold_kind;

typedef struct {
    hold_kind kind;
    void *p;                     /* zero: p[0, bytes) */
    size_t bytes;
    hy_bf16 *acc;                /* add: acc[0, n) += x[0, n) */
    const hy_bf16 *x;
    size_t n;
    hy_adamw_batch adamw;        /* adamw: the tensors so far */
} cuda_hold;

typedef struct {
    hy_backend base;
    hy_backend_ops ops;
    hy_driver drv;
    int *dev;                    /* [ranks]: rank -> device */
    int n_devices;               /* devices on the machine */
    cudaStream_t *io;            /* [n_devices]: uploads, downloads, zero-fills and the
                                    monitor's flag writes; never holds a wait */
    int flags_on_device;
    int attention_sm90;          /* HY_CUDA_ATTENTION=sm90 when created: the Hopper
                                    attention where it applies (backend.cu's
                                    attention_sm90) */
    hy_lt **lt;                  /* [ranks]: cuBLASLt state per rank */
    volatile uint32_t *abort_word;   /* host-mapped: sleep kernels stop when set */
    /* host-mapped, beside abort_word: the test's foreign work (testops.cu)
     * stops only when its release sets this, as NCCL's would only on
     * ncclCommAbort, never on our abort word. */
    volatile uint32_t *foreign_stop;
    struct cuda_foreign *foreign;    /* the foreign_wait test op's work (testops.cu) */
    int aborted;                 /* atomics */
    pthread_mutex_t lock;        /* guards why, blocks and streams */
    char why[sizeof(((hy_error *)0)->msg)];   /* the first failure, as reported */
    mem_block *blocks;
    size_t *allocated;           /* [ranks]: device bytes dev_alloc gave each rank (under lock) */
    cuda_stream *streams;        /* every live stream, for the monitor */
    pthread_t monitor;           /* signal.cu: watchdog and abort drain */
    int monitor_started, quit;   /* quit: atomics */
} cuda_backend;

struct cuda_stream {
    hy_stream base;
    cudaStream_t s;
    int device;
    int cc_major, cc_minor;      /* the device's compute capability */
    pthread_mutex_t lock;        /* guards the fields below it against the monitor */
    int capturing;
    site_list capture;           /* waits of the graph being captured */
    const site_list *active;     /* the waits of the graph running now; NULL: none (eager
                                    waits are the host's, signal.cu) */
    volatile uint32_t *progress; /* host-mapped: waits passed in the running graph */
    volatile int *bad;           /* host-mapped: the classifier saw a bad target */
    volatile uint32_t *peek;     /* host-mapped: a device-memory flag read by the host */
    /* the monitor's view (signal.cu) */
    uint32_t seen;               /* progress when last seen moving */
    hy_watchdog since;           /* ... and how long ago, in time the process ran */
    char stalled[sizeof(((hy_error *)0)->msg)];     /* the watchdog's report, if it fired here */
    char released[sizeof(((hy_wait_site *)0)->what)]; /* the first wait an abort released */
    cuda_stream *next;           /* in the backend's list */
    void *scratch;
    size_t scratch_bytes;
    cuda_hold hold;              /* fuse.cu; touched by the stream's thread only */
};

struct hy_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    site_list sites;
    const hy_driver *drv;        /* the backend's, for the DOT dump */
};

static inline cuda_backend *cb_of(hy_backend *be) { return (cuda_backend *)be; }
static inline cuda_stream *cs_of(hy_stream *s) { return (cuda_stream *)s; }

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline int check_rank(hy_backend *be, int rank, hy_error *err) {
    if (rank < 0 || rank >= be->ranks)
        return hy_fail(err, HY_ERR_RUNTIME, "cuda backend: no rank %d (have %d)", rank, be->ranks);
    return HY_OK;
}

/* Makes rank's device current on the calling thread. */
static inline int enter_rank(hy_backend *be, int rank, hy_error *err) {
    int rc = check_rank(be, rank, err);
    if (rc) return rc;
    HY_CUDA_CHECK(cudaSetDevice(cb_of(be)->dev[rank]), err);
    return HY_OK;
}

static inline CUdeviceptr devptr(const volatile void *p) { return (CUdeviceptr)(uintptr_t)p; }

/* ---- Which attention kernel runs (backend.cu) ---- */

/* 1 when the stream's attention ops run attention_sm90.cu's kernel for
 * this shape and qkv (the backend's choice, made there for the forward
 * and the backward alike), 0 when attention.cu's. */
int hy_cuda_attention_sm90(const cuda_stream *cs, const void *qkv, int T, int NH, int NKV, int hd);

/* ---- Fusing adjacent ops (fuse.cu) ---- */

/* Enqueues the op the stream holds back, if any. */
int hy_cuda_flush(cuda_stream *cs, hy_error *err);
/* Hold back zero(p, bytes), add(acc, x, n) and adamw (which joins the
 * held batch when it can); each first flushes what it cannot join. */
int hy_cuda_hold_zero(cuda_stream *cs, void *p, size_t bytes, hy_error *err);
int hy_cuda_hold_add(cuda_stream *cs, hy_bf16 *acc, const hy_bf16 *x, size_t n, hy_error *err);
int hy_cuda_hold_adamw(cuda_stream *cs, float *param, hy_bf16 *param_compute, const float *grad,
                       float *m, float *v, size_t n, const hy_adamw_hparams *hp,
                       const float *factor, int decay, hy_error *err);
/* For an op about to write p[0, bytes) or read acc[0, n): *taken = 1 (and
 * the held zero is dropped) when the stream holds exactly that zero; *x =
 * the held add's x (and the add is dropped) when it holds exactly that add.
 * Anything else held is flushed first. */
int hy_cuda_take_zero(cuda_stream *cs, const void *p, size_t bytes, int *taken, hy_error *err);
int hy_cuda_take_add(cuda_stream *cs, const void *acc, size_t n, const hy_bf16 **x, hy_error *err);

/* Makes the stream's device current on the calling thread and enqueues
 * what the stream holds back: every entry point that takes a stream
 * starts here, except the ops that may fuse with it. */
static inline int enter_stream(cuda_stream *cs, hy_error *err) {
    HY_CUDA_CHECK(cudaSetDevice(cs->device), err);
    return hy_cuda_flush(cs, err);
}

/* The device only: for the ops that may take what the stream holds. */
static inline int enter_stream_holding(cuda_stream *cs, hy_error *err) {
    HY_CUDA_CHECK(cudaSetDevice(cs->device), err);
    return HY_OK;
}

/* Pinned host memory every device maps (backend.cu). */
int hy_cuda_host_alloc(cuda_backend *cb, size_t bytes, void **out, hy_error *err);

/* The monitor thread (signal.cu): started by create, stopped by destroy;
 * streams join its list at creation and leave it at destruction. */
int hy_cuda_monitor_start(cuda_backend *cb, hy_error *err);
void hy_cuda_monitor_stop(cuda_backend *cb);
void hy_cuda_stream_register(cuda_backend *cb, cuda_stream *cs);
void hy_cuda_stream_unregister(cuda_backend *cb, cuda_stream *cs);
/* Waits until the stream has run everything (after an abort the monitor
 * releases its waits, so this ends); aborts the backend first if the
 * stream is blocked and nothing else would end the wait. */
void hy_cuda_stream_drain(cuda_backend *cb, cuda_stream *cs);

/* How many streams a device may carry before two share a hardware queue
 * (CUDA_DEVICE_MAX_CONNECTIONS as the driver read it, 8 when unset). */
int hy_cuda_connections(void);

/* Frees what the foreign_wait test op made (testops.cu); at destroy. */
void hy_cuda_foreign_free(cuda_backend *cb);

/* backend.h entries implemented in graphs/. */
int hy_cuda_wait_flag(hy_stream *s, uint32_t *flag, uint32_t value, uint32_t then,
                      const hy_wait_site *site, hy_error *err);
int hy_cuda_write_flag(hy_stream *s, uint32_t *flag, uint32_t value, hy_error *err);
/* Makes the stream wait for `done`, recorded by work the backend does not
 * own (NCCL's sums on their side stream), under the same watchdog and
 * abort as a flag: eagerly the rank's thread polls the event first; in a
 * capture the wait is a graph edge followed by a progress write, so the
 * monitor names `site` when the stream stalls there. An abort, or the
 * watchdog, calls release(ctx), which must end the work (ncclCommAbort),
 * at most once. */
int hy_cuda_wait_event(hy_stream *s, cudaEvent_t done, const hy_wait_site *site,
                       hy_cuda_release_fn release, void *ctx, hy_error *err);
int hy_cuda_sync(hy_stream *s, hy_error *err);
void hy_cuda_abort(hy_backend *be, const char *why);
int hy_cuda_capture_begin(hy_stream *s, hy_error *err);
int hy_cuda_capture_end(hy_stream *s, hy_graph **out, hy_error *err);
int hy_cuda_graph_launch(hy_graph *g, hy_stream *s, hy_error *err);
void hy_cuda_graph_destroy(hy_graph *g);
/* Writes g as Graphviz DOT to path (cudaGraphDebugDotPrint) and counts its
 * nodes: all, kernels, memory copies and sets, stream memory operations. */
int hy_cuda_graph_dot(hy_graph *g, const char *path, hy_graph_nodes *nodes, hy_error *err);

/* The test ops' table (backend_test.h), in kernels/cuda/testops.cu. */
const hy_backend_test_ops *hy_cuda_test_ops(void);

/* ---- Gradient sums across data-parallel replicas (kernels/cuda/nccl.cu) ---- */

extern "C" int hy_cuda_reduce_connect(hy_backend *be, int rank, hy_reducer *r, hy_error *err);
extern "C" void hy_cuda_reduce_disconnect(hy_backend *be, int rank, hy_reducer *r);
extern "C" int hy_cuda_reduce_start(hy_stream *s, hy_reducer *r, int bucket, float *buf,
                                    size_t n, hy_error *err);
extern "C" int hy_cuda_reduce_wait(hy_stream *s, hy_reducer *r, int bucket, hy_error *err);

#endif
