/*
 * cuda_backend.cuh — what the CUDA backend's files share (not a public API).
 *
 * kernels/cuda/backend.cu holds memory, streams and the math entries;
 * graphs/signal.cu the cross-rank flags (stream memory operations through
 * the driver's entry points), the watchdog and abort; graphs/graph.cu
 * capture, replay and the DOT dumps. They share the state below.
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

/* ---- Driver entry points (graphs/signal.cu) ---- */

typedef CUresult (*hy_pfn_wait32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
typedef CUresult (*hy_pfn_write32)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
typedef CUresult (*hy_pfn_error_name)(CUresult, const char **);

/* The CUDA version whose signatures we ask for: 12.0's stream memory
 * operations are the capturable (v2) ones. */
#define HY_DRIVER_API_VERSION 12000

typedef struct {
    hy_pfn_wait32 wait32;
    hy_pfn_write32 write32;
    hy_pfn_error_name error_name;
} hy_driver;

/* Fills d; fails naming the entry point a too-old driver lacks. */
int hy_cuda_driver_load(hy_driver *d, hy_error *err);
/* A driver API failure as an error naming the call and the rank. */
int hy_cuda_driver_fail(const hy_driver *d, hy_error *err, CUresult rc, const char *call, int rank);

/* ---- State ---- */


typedef enum { MEM_DEVICE, MEM_HOST } mem_kind;

typedef struct mem_block {
    void *p;
    mem_kind kind;
    int device;
    struct mem_block *next;
} mem_block;

/* A wait as the watchdog and abort need it. */
typedef struct {
    hy_wait_site site;
    uint32_t *flag;
    uint32_t value;
} cuda_site;

typedef struct {
    cuda_site *v;
    size_t n, cap;
} site_list;

typedef struct {
    hy_backend base;
    hy_backend_ops ops;
    hy_driver drv;
    int *dev;                    /* [ranks]: rank -> device */
    int flags_on_device;
    hy_lt **lt;                  /* [ranks]: cuBLASLt state per rank */
    volatile uint32_t *abort_word;   /* host-mapped: sleep kernels stop when set */
    int aborted;                 /* atomics */
    pthread_mutex_t lock;        /* guards why and blocks */
    char why[sizeof(((hy_error *)0)->msg)];   /* the first failure, as reported */
    mem_block *blocks;
} cuda_backend;

typedef struct {
    hy_stream base;
    cudaStream_t s;
    cudaStream_t ctl;            /* for writing device-memory flags while s is blocked */
    int device;
    int capturing;
    site_list eager;             /* waits enqueued since the last sync */
    site_list capture;           /* waits of the graph being captured */
    const site_list *active;     /* the waits the stream is running now */
    volatile uint32_t *progress; /* host-mapped: waits passed in the running list */
    volatile int *bad;           /* host-mapped: the classifier saw a bad target */
    void *scratch;
    size_t scratch_bytes;
} cuda_stream;

struct hy_graph {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    site_list sites;
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

/* Makes the stream's device current on the calling thread. */
static inline int enter_stream(cuda_stream *cs, hy_error *err) {
    HY_CUDA_CHECK(cudaSetDevice(cs->device), err);
    return HY_OK;
}

/* Pinned host memory every device maps (backend.cu). */
int hy_cuda_host_alloc(cuda_backend *cb, size_t bytes, void **out, hy_error *err);

/* backend.h entries implemented in graphs/. */
int hy_cuda_wait_flag(hy_stream *s, uint32_t *flag, uint32_t value, const hy_wait_site *site,
                      hy_error *err);
int hy_cuda_write_flag(hy_stream *s, uint32_t *flag, uint32_t value, hy_error *err);
int hy_cuda_sync(hy_stream *s, hy_error *err);
void hy_cuda_abort(hy_backend *be, const char *why);
int hy_cuda_capture_begin(hy_stream *s, hy_error *err);
int hy_cuda_capture_end(hy_stream *s, hy_graph **out, hy_error *err);
int hy_cuda_graph_launch(hy_graph *g, hy_stream *s, hy_error *err);
void hy_cuda_graph_destroy(hy_graph *g);
/* Writes g as Graphviz DOT to path (cudaGraphDebugDotPrint) and counts its
 * nodes: all, kernels, memory copies and sets, stream memory operations. */
int hy_cuda_graph_dot(hy_graph *g, const char *path, hy_graph_nodes *nodes, hy_error *err);

#endif
