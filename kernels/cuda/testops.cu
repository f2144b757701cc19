/*
 * testops.cu — the test ops (backend_test.h) and backend.h's profiling
 * and test hooks on the device: the kernels that let one test prove the
 * cross-rank protocol on both backends (kernels/cpu/testops.c runs the
 * same ops on the CPU), and the CUDA backend's table of the test ops.
 *
 *   fill:      buf[i] = hy_pattern(key, *iter, i)
 *   check:     *errors += #{i : buf[i] != hy_pattern(key, *iter, i)}
 *   delay:     spin hy_pattern(key, *iter, 0) % max_ns nanoseconds
 *   add:       *counter += 1
 *   timestamp: *dst = %globaltimer (ns; one clock for every GPU's ranks)
 *   sleep:     spin ns nanoseconds, or until *abort_word != 0
 *   foreign_wait: sleep (until the release sets foreign_stop) on a side
 *              stream of its own (forked from the rank's), then an event
 *              the rank's stream waits for through hy_cuda_wait_event
 *   attention_sm90: whether the stream's attention ops run
 *              attention_sm90.cu's kernel for a shape (backend.cu decides)
 * *iter is read when the kernel runs, so a replayed graph sees the current
 * iteration. The index passed to the pattern is the element index cut to
 * 32 bits, as on the CPU. check counts with an integer atomicAdd per warp
 * (integer sums do not depend on their order). The spins read the
 * %globaltimer register and back off with __nanosleep between reads.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "backend_test.h"
#include "cuda_backend.cuh"

#define TEST_THREADS 256
#define TEST_MAX_BLOCKS 65536u

static __device__ __forceinline__ uint64_t globaltimer_ns(void) {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

static unsigned test_blocks(size_t n) {
    size_t b = (n + TEST_THREADS - 1) / TEST_THREADS;
    if (b < 1) b = 1;
    return b > TEST_MAX_BLOCKS ? TEST_MAX_BLOCKS : (unsigned)b;
}

// ----------------------------------------------------------------------------
// Kernels

static __global__ void test_fill_kernel(uint32_t *buf, size_t n, uint32_t key, const uint32_t *iter) {
    uint32_t it = *iter;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        buf[i] = hy_pattern(key, it, (uint32_t)i);
}

static __global__ void test_check_kernel(const uint32_t *buf, size_t n, uint32_t key,
                                  const uint32_t *iter, uint32_t *errors) {
    uint32_t it = *iter, bad = 0;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        bad += buf[i] != hy_pattern(key, it, (uint32_t)i);
    /* Every thread of the (full) block reaches this: no thread returned. */
    bad = __reduce_add_sync(0xffffffffu, bad);
    if ((threadIdx.x & 31) == 0 && bad != 0) atomicAdd(errors, bad);
}

static __global__ void test_delay_kernel(uint32_t key, const uint32_t *iter, uint32_t max_ns) {
    uint64_t ns = max_ns ? hy_pattern(key, *iter, 0) % max_ns : 0;
    uint64_t t0 = globaltimer_ns();
    while (globaltimer_ns() - t0 < ns) __nanosleep(100);
}

static __global__ void test_add_kernel(uint32_t *counter) { *counter += 1; }

static __global__ void timestamp_kernel(uint64_t *dst) { *dst = globaltimer_ns(); }

static __global__ void sleep_kernel(uint64_t ns, const volatile uint32_t *abort_word) {
    uint64_t t0 = globaltimer_ns();
    while (globaltimer_ns() - t0 < ns) {
        if (abort_word != NULL && *abort_word != 0) return;
        __nanosleep(1000);
    }
}

// ----------------------------------------------------------------------------
// The test ops: each makes the rank's device current and launches its kernel
// on the rank's stream.

static int cuda_test_fill(hy_stream *s, uint32_t *buf, size_t n, uint32_t key,
                          const uint32_t *iter, hy_error *err) {
    int rc = enter_stream(cs_of(s), err);
    if (rc || n == 0) return rc;
    test_fill_kernel<<<test_blocks(n), TEST_THREADS, 0, cs_of(s)->s>>>(buf, n, key, iter);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

static int cuda_test_check(hy_stream *s, const uint32_t *buf, size_t n, uint32_t key,
                           const uint32_t *iter, uint32_t *errors, hy_error *err) {
    int rc = enter_stream(cs_of(s), err);
    if (rc || n == 0) return rc;
    test_check_kernel<<<test_blocks(n), TEST_THREADS, 0, cs_of(s)->s>>>(buf, n, key, iter, errors);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

static int cuda_test_delay(hy_stream *s, uint32_t key, const uint32_t *iter, uint32_t max_ns,
                           hy_error *err) {
    int rc = enter_stream(cs_of(s), err);
    if (rc) return rc;
    test_delay_kernel<<<1, 1, 0, cs_of(s)->s>>>(key, iter, max_ns);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

static int cuda_test_add(hy_stream *s, uint32_t *counter, hy_error *err) {
    int rc = enter_stream(cs_of(s), err);
    if (rc) return rc;
    test_add_kernel<<<1, 1, 0, cs_of(s)->s>>>(counter);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

/* One foreign_wait's work, kept on the backend's list until it is
 * destroyed: a graph may replay the wait as long as the backend lives.
 * Its spin stops only when its release sets the backend's foreign_stop
 * word (never on the abort word): the watchdog must end it through the
 * release, as it must end NCCL's work. */
struct cuda_foreign {
    cudaStream_t side;
    cudaEvent_t ready, done;
    int *released;
    volatile uint32_t *stop;
    int device;
    struct cuda_foreign *next;
};

static void foreign_release(void *ctx) {
    struct cuda_foreign *f = (struct cuda_foreign *)ctx;
    *f->stop = 1;
    __atomic_add_fetch(f->released, 1, __ATOMIC_SEQ_CST);
}

void hy_cuda_foreign_free(cuda_backend *cb) {
    while (cb->foreign) {
        struct cuda_foreign *f = cb->foreign;
        cb->foreign = f->next;
        cudaSetDevice(f->device);
        if (f->side) cudaStreamDestroy(f->side);
        if (f->ready) cudaEventDestroy(f->ready);
        if (f->done) cudaEventDestroy(f->done);
        free(f);
    }
}

/* Forked from the rank's stream and joined back through the event, as
 * nccl.cu's sums are, so a capture records the spin as a branch of the
 * rank's graph. */
static int cuda_test_foreign_wait(hy_stream *s, double stall_s, int *released, hy_error *err) {
    cuda_stream *cs = cs_of(s);
    cuda_backend *cb = cb_of(s->be);
    int rc = enter_stream(cs, err);
    if (rc) return rc;
    struct cuda_foreign *f = (struct cuda_foreign *)calloc(1, sizeof *f);
    if (!f) return hy_fail(err, HY_ERR_RUNTIME, "out of memory");
    f->device = cs->device;
    f->released = released;
    f->stop = cb->foreign_stop;
    *f->stop = 0;
    pthread_mutex_lock(&cb->lock);
    f->next = cb->foreign;
    cb->foreign = f;
    pthread_mutex_unlock(&cb->lock);
    HY_CUDA_CHECK(cudaStreamCreateWithFlags(&f->side, cudaStreamNonBlocking), err);
    HY_CUDA_CHECK(cudaEventCreateWithFlags(&f->ready, cudaEventDisableTiming), err);
    HY_CUDA_CHECK(cudaEventCreateWithFlags(&f->done, cudaEventDisableTiming), err);
    HY_CUDA_CHECK(cudaEventRecord(f->ready, cs->s), err);
    HY_CUDA_CHECK(cudaStreamWaitEvent(f->side, f->ready, 0), err);
    sleep_kernel<<<1, 1, 0, f->side>>>((uint64_t)(stall_s * 1e9), f->stop);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    HY_CUDA_CHECK(cudaEventRecord(f->done, f->side), err);
    hy_wait_site site;
    site.rank = s->rank;
    snprintf(site.what, sizeof site.what, "the test's foreign work (%.1f s)", stall_s);
    return hy_cuda_wait_event(s, f->done, &site, foreign_release, f, err);
}

/* The backend's choice of attention kernel (backend.cu), for aligned arrays. */
static int cuda_test_attention_sm90(hy_stream *s, int T, int NH, int NKV, int hd) {
    return hy_cuda_attention_sm90(cs_of(s), NULL, T, NH, NKV, hd);
}

const hy_backend_test_ops *hy_cuda_test_ops(void) {
    static const hy_backend_test_ops ops = {
        .fill = cuda_test_fill,
        .check = cuda_test_check,
        .delay = cuda_test_delay,
        .add = cuda_test_add,
        .foreign_wait = cuda_test_foreign_wait,
        .attention_sm90 = cuda_test_attention_sm90,
    };
    return &ops;
}

// ----------------------------------------------------------------------------
// The hooks' launchers (backend.h, timestamp and sleep)

int hy_k_timestamp(cudaStream_t s, uint64_t *dst, hy_error *err) {
    timestamp_kernel<<<1, 1, 0, s>>>(dst);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

int hy_k_sleep(cudaStream_t s, uint64_t ns, const volatile uint32_t *abort_word, hy_error *err) {
    sleep_kernel<<<1, 1, 0, s>>>(ns, abort_word);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

// ----------------------------------------------------------------------------
// Preload (kernels.cuh)

int hy_k_testops_preload(hy_error *err) {
    HY_CUDA_PRELOAD(test_fill_kernel, err);
    HY_CUDA_PRELOAD(test_check_kernel, err);
    HY_CUDA_PRELOAD(test_delay_kernel, err);
    HY_CUDA_PRELOAD(test_add_kernel, err);
    HY_CUDA_PRELOAD(timestamp_kernel, err);
    HY_CUDA_PRELOAD(sleep_kernel, err);
    return HY_OK;
}
