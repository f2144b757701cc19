/*
 * check.cuh — CUDA errors as hanayo errors.
 *
 * Every CUDA runtime call in the CUDA backend goes through HY_CUDA_CHECK
 * (or, where some codes are expected and handled, HY_CUDA_FAIL): a failure
 * becomes an hy_error naming the CUDA error, the call as written and its
 * file:line, and the function returns HY_ERR_RUNTIME. Nothing here aborts
 * or prints; the error travels up to the CLI like any other (error.h).
 *
 * Included only by .cu files; lib/ never sees a CUDA header.
 */
#ifndef HY_CUDA_CHECK_CUH
#define HY_CUDA_CHECK_CUH

#include <cuda_runtime.h>

/* error.h is plain C; give its functions C linkage here even when this
 * header is included before backend.h (which has its own extern "C"). */
extern "C" {
#include "error.h"
}

/* Turns rc into an error on err and returns HY_ERR_RUNTIME. `call` is the
 * text of the failed call. cudaGetLastError() clears the runtime's record
 * of a non-sticky error, so an unrelated later call cannot report it
 * again; a sticky error (a faulted context) stays, as it must. */
static inline int hy_cuda_fail(hy_error *err, cudaError_t rc, const char *call,
                               const char *file, int line) {
    (void)cudaGetLastError();
    return hy_fail(err, HY_ERR_RUNTIME, "CUDA error %s (%d): %s, in %s at %s:%d",
                   cudaGetErrorName(rc), (int)rc, cudaGetErrorString(rc),
                   call, file, line);
}

/* For a result already in hand (after handling the codes the caller
 * expects): return HY_CUDA_FAIL(err, rc, "cudaFoo");. */
#define HY_CUDA_FAIL(err, rc, call) hy_cuda_fail((err), (rc), (call), __FILE__, __LINE__)

/* Wraps one CUDA runtime call in a function returning int (HY_OK or an
 * error status): on failure, fill err and return from that function. */
#define HY_CUDA_CHECK(call, err) do { \
    cudaError_t hy_cuda_rc_ = (call); \
    if (hy_cuda_rc_ != cudaSuccess) \
        return hy_cuda_fail((err), hy_cuda_rc_, #call, __FILE__, __LINE__); \
} while (0)

/* Loads kernel k onto the current device now, not at its first launch
 * (CUDA 13's default, lazy loading): asking for its attributes makes the
 * runtime fetch it. For the *_preload functions of kernels.cuh. */
#define HY_CUDA_PRELOAD(k, err) do { \
    cudaFuncAttributes hy_attr_; \
    HY_CUDA_CHECK(cudaFuncGetAttributes(&hy_attr_, (const void *)(k)), err); \
} while (0)

#endif
