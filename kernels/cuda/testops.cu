/*
 * testops.cu — backend.h's test ops and hooks on the device: the kernels
 * that let one test prove the cross-rank protocol on both backends
 * (kernels/cpu/backend.c runs the same commands on the CPU).
 *
 *   fill:      buf[i] = hy_pattern(key, *iter, i)
 *   check:     *errors += #{i : buf[i] != hy_pattern(key, *iter, i)}
 *   delay:     spin hy_pattern(key, *iter, 0) % max_ns nanoseconds
 *   add:       *counter += 1
 *   timestamp: *dst = %globaltimer (ns; one clock for every GPU's ranks)
 *   sleep:     spin ns nanoseconds, or until *abort_word != 0
 * *iter is read when the kernel runs, so a replayed graph sees the current
 * iteration. The index passed to the pattern is the element index cut to
 * 32 bits, as on the CPU. check counts with an integer atomicAdd per warp
 * (integer sums do not depend on their order). The spins read the
 * %globaltimer register and back off with __nanosleep between reads.
 */
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime.h>

#include "check.cuh"
#include "kernels.cuh"

#define TEST_THREADS 256
#define TEST_MAX_BLOCKS 65536u

/* The device copy of hy_pattern (lib/backend.h). It must stay identical,
 * operation for operation, to the host function: a test compares the two. */
static __device__ __forceinline__ uint32_t hy_pattern_dev(uint32_t key, uint32_t iter, uint32_t i) {
    uint32_t h = key * 0x9E3779B1u ^ (iter + 0x7F4A7C15u) * 0x85EBCA77u ^ i * 0xC2B2AE3Du;
    h ^= h >> 16;
    h *= 0x7FEB352Du;
    h ^= h >> 15;
    h *= 0x846CA68Bu;
    h ^= h >> 16;
    return h;
}

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
        buf[i] = hy_pattern_dev(key, it, (uint32_t)i);
}

static __global__ void test_check_kernel(const uint32_t *buf, size_t n, uint32_t key,
                                  const uint32_t *iter, uint32_t *errors) {
    uint32_t it = *iter, bad = 0;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        bad += buf[i] != hy_pattern_dev(key, it, (uint32_t)i);
    /* Every thread of the (full) block reaches this: no thread returned. */
    bad = __reduce_add_sync(0xffffffffu, bad);
    if ((threadIdx.x & 31) == 0 && bad != 0) atomicAdd(errors, bad);
}

static __global__ void test_delay_kernel(uint32_t key, const uint32_t *iter, uint32_t max_ns) {
    uint64_t ns = max_ns ? hy_pattern_dev(key, *iter, 0) % max_ns : 0;
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
// Launchers

int hy_k_test_fill(cudaStream_t s, uint32_t *buf, size_t n, uint32_t key, const uint32_t *iter,
                   hy_error *err) {
    if (n == 0) return HY_OK;
    test_fill_kernel<<<test_blocks(n), TEST_THREADS, 0, s>>>(buf, n, key, iter);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

int hy_k_test_check(cudaStream_t s, const uint32_t *buf, size_t n, uint32_t key,
                    const uint32_t *iter, uint32_t *errors, hy_error *err) {
    if (n == 0) return HY_OK;
    test_check_kernel<<<test_blocks(n), TEST_THREADS, 0, s>>>(buf, n, key, iter, errors);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

int hy_k_test_delay(cudaStream_t s, uint32_t key, const uint32_t *iter, uint32_t max_ns,
                    hy_error *err) {
    test_delay_kernel<<<1, 1, 0, s>>>(key, iter, max_ns);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

int hy_k_test_add(cudaStream_t s, uint32_t *counter, hy_error *err) {
    test_add_kernel<<<1, 1, 0, s>>>(counter);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

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
