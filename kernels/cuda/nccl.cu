/*
 * nccl.cu — the CUDA backend's gradient sums across data-parallel replicas
 * (backend.h, reduce_*; DESIGN §9 "Data parallelism across processes"),
 * through NCCL.
 *
 * NCCL is loaded when a run first needs it (dlopen), not linked: a
 * machine without it runs everything but data parallelism, and the build
 * needs no NCCL headers. Its ABI is small and stable since NCCL 2.0; the
 * handful of declarations we call are written out below. It is looked for
 * where users have it: $HY_NCCL_LIBRARY, then the loader's own search
 * (LD_LIBRARY_PATH, ldconfig: Debian's libnccl2), then beside the CUDA
 * toolkit's libraries (found from where cuBLASLt was loaded: ltload.cuh),
 * then the Python wheels' nvidia/nccl/lib (pip install nvidia-nccl-cu13).
 *
 * Per rank, one communicator over the replicas of that rank (its unique
 * id made by replica 0 and handed out over MPI: hy_reducer.broadcast), a
 * side stream and two events per bucket. A sum starts by recording
 * `ready` on the rank's stream, which the side stream waits for before its
 * ncclAllReduce, and `done` after it; the wait makes the rank's stream
 * wait for `done`. So the sums run beside the rank's remaining backwards,
 * one after another on the side stream, and a captured iteration records
 * the fork and the join as graph edges.
 */
#include <dlfcn.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_backend.cuh"
#include "ltload.cuh"

/* ---- The NCCL we call (nccl.h, 2.x) ---- */

typedef struct nccl_comm *nccl_comm_t;
typedef struct {
    char internal[128];          /* NCCL_UNIQUE_ID_BYTES */
} nccl_unique_id;
enum { NCCL_SUCCESS = 0, NCCL_FLOAT32 = 7, NCCL_SUM = 0 };

typedef struct {
    void *lib;
    int (*get_unique_id)(nccl_unique_id *id);
    int (*comm_init_rank)(nccl_comm_t *comm, int nranks, nccl_unique_id id, int rank);
    int (*all_reduce)(const void *send, void *recv, size_t count, int type, int op,
                      nccl_comm_t comm, cudaStream_t stream);
    int (*comm_destroy)(nccl_comm_t comm);
    int (*comm_abort)(nccl_comm_t comm);
    const char *(*error_string)(int result);
} nccl_api;

typedef struct {
    nccl_api api;
    nccl_comm_t comm;
    int device;
    cudaStream_t side;
    cudaEvent_t *ready, *done;   /* [buckets] */
    int buckets;
    int rank;
    int aborted;                 /* ncclCommAbort ran: the communicator is gone */
} nccl_rank;

/* Tries one candidate file; 1 when it loaded. */
static int nccl_try(nccl_api *a, const char *path) {
    a->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    return a->lib != NULL;
}

static int nccl_find(nccl_api *a, char *tried, size_t tried_n) {
    const char *env = getenv("HY_NCCL_LIBRARY");
    if (env && *env && nccl_try(a, env)) return 1;
    if (nccl_try(a, "libnccl.so.2")) return 1;
    char dir[4096], path[4200];
    if (hy_k_lt_dir(dir, sizeof dir)) {
        snprintf(path, sizeof path, "%s/libnccl.so.2", dir);
        if (nccl_try(a, path)) return 1;
    }
    /* The Python wheels: system, user and virtual-environment sites. */
    const char *home = getenv("HOME"), *venv = getenv("VIRTUAL_ENV");
    char patterns[4][4200];
    int n = 0;
    snprintf(patterns[n++], sizeof patterns[0],
             "/usr/local/lib/python3*/*-packages/nvidia/nccl/lib/libnccl.so.2");
    snprintf(patterns[n++], sizeof patterns[0],
             "/usr/lib/python3*/*-packages/nvidia/nccl/lib/libnccl.so.2");
    if (home)
        snprintf(patterns[n++], sizeof patterns[0],
                 "%s/.local/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2", home);
    if (venv)
        snprintf(patterns[n++], sizeof patterns[0],
                 "%s/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2", venv);
    for (int i = 0; i < n; i++) {
        glob_t g;
        int found = 0;
        if (glob(patterns[i], 0, NULL, &g) == 0)
            for (size_t k = 0; k < g.gl_pathc && !found; k++) found = nccl_try(a, g.gl_pathv[k]);
        globfree(&g);
        if (found) return 1;
    }
    snprintf(tried, tried_n, "$HY_NCCL_LIBRARY, libnccl.so.2 on the loader's path, %s/, "
             "python3*/*-packages/nvidia/nccl/lib/", hy_k_lt_dir(dir, sizeof dir) ? dir : "?");
    return 0;
}

static int nccl_load(nccl_api *a, hy_error *err) {
    memset(a, 0, sizeof *a);
    char tried[8192] = "";
    if (!nccl_find(a, tried, sizeof tried))
        return hy_fail(err, HY_ERR_INPUT, "data parallelism on GPUs needs NCCL, which was not "
                       "found (looked in %s): install it (Debian: libnccl2; pip: "
                       "nvidia-nccl-cu13) or set HY_NCCL_LIBRARY to libnccl.so.2", tried);
    a->get_unique_id = (int (*)(nccl_unique_id *))dlsym(a->lib, "ncclGetUniqueId");
    a->comm_init_rank = (int (*)(nccl_comm_t *, int, nccl_unique_id, int))
        dlsym(a->lib, "ncclCommInitRank");
    a->all_reduce = (int (*)(const void *, void *, size_t, int, int, nccl_comm_t, cudaStream_t))
        dlsym(a->lib, "ncclAllReduce");
    a->comm_destroy = (int (*)(nccl_comm_t))dlsym(a->lib, "ncclCommDestroy");
    a->comm_abort = (int (*)(nccl_comm_t))dlsym(a->lib, "ncclCommAbort");
    a->error_string = (const char *(*)(int))dlsym(a->lib, "ncclGetErrorString");
    if (!a->get_unique_id || !a->comm_init_rank || !a->all_reduce || !a->comm_destroy ||
        !a->comm_abort || !a->error_string) {
        dlclose(a->lib);
        a->lib = NULL;
        return hy_fail(err, HY_ERR_INPUT, "the NCCL found lacks ncclGetUniqueId, "
                       "ncclCommInitRank, ncclAllReduce, ncclCommDestroy, ncclCommAbort or "
                       "ncclGetErrorString: not NCCL 2.4 or later");
    }
    return HY_OK;
}

static int nccl_fail(const nccl_api *a, hy_error *err, int rc, const char *call, int rank) {
    return hy_fail(err, HY_ERR_RUNTIME, "rank %d: %s failed: %s (NCCL %d)", rank, call,
                   a->error_string ? a->error_string(rc) : "?", rc);
}

static void nccl_rank_free(nccl_rank *nr) {
    if (!nr) return;
    if (nr->device >= 0) cudaSetDevice(nr->device);
    for (int b = 0; b < nr->buckets; b++) {
        if (nr->ready && nr->ready[b]) cudaEventDestroy(nr->ready[b]);
        if (nr->done && nr->done[b]) cudaEventDestroy(nr->done[b]);
    }
    free(nr->ready);
    free(nr->done);
    if (nr->side) cudaStreamDestroy(nr->side);
    /* An aborted communicator is freed already; destroying one whose
     * peers are gone would wait for them. */
    if (nr->comm && !__atomic_load_n(&nr->aborted, __ATOMIC_SEQ_CST)) nr->api.comm_destroy(nr->comm);
    if (nr->api.lib) dlclose(nr->api.lib);
    free(nr);
}

/* Side stream and events on the rank's device. */
static int nccl_streams(nccl_rank *nr, hy_error *err) {
    HY_CUDA_CHECK(cudaStreamCreateWithFlags(&nr->side, cudaStreamNonBlocking), err);
    nr->ready = (cudaEvent_t *)calloc((size_t)nr->buckets, sizeof(cudaEvent_t));
    nr->done = (cudaEvent_t *)calloc((size_t)nr->buckets, sizeof(cudaEvent_t));
    if (!nr->ready || !nr->done) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    for (int b = 0; b < nr->buckets; b++) {
        HY_CUDA_CHECK(cudaEventCreateWithFlags(&nr->ready[b], cudaEventDisableTiming), err);
        HY_CUDA_CHECK(cudaEventCreateWithFlags(&nr->done[b], cudaEventDisableTiming), err);
    }
    return HY_OK;
}

extern "C" int hy_cuda_reduce_connect(hy_backend *be, int rank, hy_reducer *r, hy_error *err) {
    cuda_backend *cb = cb_of(be);
    if (r->device_comm) return HY_OK;
    nccl_rank *nr = (nccl_rank *)calloc(1, sizeof *nr);
    if (!nr) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    nr->device = cb->dev[rank];
    nr->buckets = r->buckets;
    nr->rank = rank;
    int rc = nccl_load(&nr->api, err);
    nccl_unique_id id;
    memset(&id, 0, sizeof id);
    if (!rc) {
        cudaError_t ce = cudaSetDevice(nr->device);
        if (ce != cudaSuccess) rc = HY_CUDA_FAIL(err, ce, "cudaSetDevice");
    }
    if (!rc && r->replica == 0) {
        int nc = nr->api.get_unique_id(&id);
        if (nc != NCCL_SUCCESS) rc = nccl_fail(&nr->api, err, nc, "ncclGetUniqueId", rank);
    }
    /* Every replica reaches the broadcast, even one whose NCCL failed
     * above: the others are in it (a failure there ends the job). */
    if (r->broadcast(r, &id, sizeof id) != 0 && !rc)
        rc = hy_fail(err, HY_ERR_RUNTIME, "rank %d: handing out the NCCL id over MPI failed", rank);
    if (!rc) {
        int nc = nr->api.comm_init_rank(&nr->comm, r->replicas, id, r->replica);
        if (nc != NCCL_SUCCESS) {
            nr->comm = NULL;
            rc = nccl_fail(&nr->api, err, nc, "ncclCommInitRank", rank);
        }
    }
    if (!rc) rc = nccl_streams(nr, err);
    if (rc) {
        nccl_rank_free(nr);
        return rc;
    }
    r->device_comm = nr;
    return HY_OK;
}

extern "C" void hy_cuda_reduce_disconnect(hy_backend *be, int rank, hy_reducer *r) {
    (void)be;
    (void)rank;
    nccl_rank_free((nccl_rank *)r->device_comm);
    r->device_comm = NULL;
}

static nccl_rank *nccl_of(hy_reducer *r, int bucket, hy_error *err) {
    nccl_rank *nr = (nccl_rank *)r->device_comm;
    if (!nr) {
        hy_fail(err, HY_ERR_RUNTIME, "a gradient sum before reduce_connect (a bug)");
        return NULL;
    }
    if (bucket < 0 || bucket >= nr->buckets) {
        hy_fail(err, HY_ERR_RUNTIME, "gradient sum %d of %d (a bug)", bucket, nr->buckets);
        return NULL;
    }
    return nr;
}

extern "C" int hy_cuda_reduce_start(hy_stream *s, hy_reducer *r, int bucket, float *buf,
                                    size_t n, hy_error *err) {
    nccl_rank *nr = nccl_of(r, bucket, err);
    if (!nr) return HY_ERR_RUNTIME;
    cudaStream_t rank_stream = cs_of(s)->s;
    HY_CUDA_CHECK(cudaEventRecord(nr->ready[bucket], rank_stream), err);
    HY_CUDA_CHECK(cudaStreamWaitEvent(nr->side, nr->ready[bucket], 0), err);
    int nc = nr->api.all_reduce(buf, buf, n, NCCL_FLOAT32, NCCL_SUM, nr->comm, nr->side);
    if (nc != NCCL_SUCCESS) return nccl_fail(&nr->api, err, nc, "ncclAllReduce", s->rank);
    HY_CUDA_CHECK(cudaEventRecord(nr->done[bucket], nr->side), err);
    return HY_OK;
}

/* The watchdog's and abort's way out of a sum whose peers never come: a
 * replica stalled or gone leaves NCCL's kernel spinning, which only
 * ncclCommAbort ends (then the side stream, and the rank's after it,
 * drain). Once per communicator; called from the monitor thread or the
 * rank's own. */
static void nccl_release(void *ctx) {
    nccl_rank *nr = (nccl_rank *)ctx;
    if (__atomic_exchange_n(&nr->aborted, 1, __ATOMIC_SEQ_CST)) return;
    nr->api.comm_abort(nr->comm);
}

extern "C" int hy_cuda_reduce_wait(hy_stream *s, hy_reducer *r, int bucket, hy_error *err) {
    nccl_rank *nr = nccl_of(r, bucket, err);
    if (!nr) return HY_ERR_RUNTIME;
    if (__atomic_load_n(&nr->aborted, __ATOMIC_SEQ_CST))
        return hy_fail(err, HY_ERR_RUNTIME, "rank %d: the gradient sums' NCCL communicator was "
                       "aborted after a stall; the run cannot go on", s->rank);
    hy_wait_site site;
    site.rank = s->rank;
    if (bucket == nr->buckets - 1)   /* the runtime's last bucket (runtime.c) */
        snprintf(site.what, sizeof site.what, "the tied embedding's gradient sum over %d "
                 "replicas (NCCL)", r->replicas);
    else
        snprintf(site.what, sizeof site.what, "the gradient sum of stage %d over %d replicas "
                 "(NCCL)", bucket, r->replicas);
    return hy_cuda_wait_event(s, nr->done[bucket], &site, nccl_release, nr, err);
}
