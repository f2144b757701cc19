/*
 * backend_test.h — the test ops: work that lets one test prove the
 * cross-rank protocol on both backends (tests/test_mailbox.c), and check
 * a GPU's copy of the pattern against the host's (tests/test_cuda.c).
 *
 * They are not in the production op table (backend.h's hy_backend_ops):
 * nothing in lib/ calls them. Each backend has its own table
 * (kernels/cpu/testops.c, kernels/cuda/testops.cu), which
 * hy_backend_test_ops_of hands out. The ops are enqueued like any other
 * work: recorded while the stream captures, replayed with the graph, and
 * timed as HY_OPK_OTHER. Each reads the iteration number from `*iter`
 * when it runs, so a replayed graph sees the current iteration:
 *   fill:  buf[i] = hy_pattern(key, *iter, i)
 *   check: counts i with buf[i] != hy_pattern(key, *iter, i) into *errors
 *   delay: sleeps (spins, on a GPU) hy_pattern(key, *iter, 0) % max_ns ns
 *   add:   *counter += 1
 *   foreign_wait (CUDA only; NULL on the CPU): work no stream of the
 *          backend owns, as NCCL's sums are: a side stream of the op's
 *          spins up to stall_s seconds, then records an event, and the
 *          stream waits for that event through the backend's watched
 *          event wait (graphs/signal.cu, hy_cuda_wait_event); an abort
 *          (the watchdog's) ends the spin, and the wait's release adds 1
 *          to *released (host memory, read after a sync)
 *   attention_sm90 (CUDA only; NULL on the CPU): 1 when the stream's
 *          attention_fwd and attention_bwd run the opt-in Hopper kernel
 *          (kernels/cuda/attention_sm90.cu) for this shape on 16-byte-
 *          aligned arrays, 0 when the default one: the backend's own
 *          choice (HY_CUDA_ATTENTION at its creation, the device, the
 *          shape), so tests/test_cuda.c knows what it compared
 * The index passed to the pattern is the element index cut to 32 bits.
 */
#ifndef HY_BACKEND_TEST_H
#define HY_BACKEND_TEST_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {   /* kernels/cuda/testops.cu is compiled as C++ by nvcc */
#endif

struct hy_backend_test_ops {
    int (*fill)(hy_stream *s, uint32_t *buf, size_t n, uint32_t key, const uint32_t *iter,
                hy_error *err);
    int (*check)(hy_stream *s, const uint32_t *buf, size_t n, uint32_t key, const uint32_t *iter,
                 uint32_t *errors, hy_error *err);
    int (*delay)(hy_stream *s, uint32_t key, const uint32_t *iter, uint32_t max_ns, hy_error *err);
    int (*add)(hy_stream *s, uint32_t *counter, hy_error *err);
    int (*foreign_wait)(hy_stream *s, double stall_s, int *released, hy_error *err);
    int (*attention_sm90)(hy_stream *s, int T, int NH, int NKV, int hd);
};

/* The test ops of backend be. */
static inline const hy_backend_test_ops *hy_backend_test_ops_of(const hy_backend *be) {
    return be->test_ops;
}

/* nvcc compiles hy_pattern for the device too, so the kernels of
 * kernels/cuda/testops.cu hash with this very function (tests/test_cuda.c
 * still compares what the device wrote with the host's values). */
#ifdef __CUDACC__
#define HY_HOST_DEVICE __host__ __device__
#else
#define HY_HOST_DEVICE
#endif

/* The pattern the test ops write: a 32-bit hash of (key, iteration, i). */
static inline HY_HOST_DEVICE uint32_t hy_pattern(uint32_t key, uint32_t iter, uint32_t i) {
    uint32_t h = key * 0x9E3779B1u ^ (iter + 0x7F4A7C15u) * 0x85EBCA77u ^ i * 0xC2B2AE3Du;
    h ^= h >> 16;
    h *= 0x7FEB352Du;
    h ^= h >> 15;
    h *= 0x846CA68Bu;
    h ^= h >> 16;
    return h;
}

#ifdef __cplusplus
}
#endif

#endif
