/*
 * device.cu — the CUDA backend's device query (backend.h, "CUDA devices").
 *
 * How many GPUs this process can see, what each is, and which pairs have
 * peer access. The runtime asks these at start-up to place ranks on
 * devices (rank r → devices[r], default r mod count) and to decide where
 * a cross-rank copy can go peer-to-peer and where it must be staged
 * (DESIGN §3 "Cross-rank movement"). kernels/cuda/stub.c answers the same
 * calls in builds without nvcc.
 *
 * cudart is linked statically: it loads the driver (libcuda) itself at
 * the first call, so a machine with no driver runs this binary fine and
 * the first call reports "insufficient driver", which we read as zero
 * devices, not as an error.
 *
 * The driver reads CUDA_DEVICE_MAX_CONNECTIONS (hardware queues per
 * device; cuda_backend.cuh's hy_cuda_connections) once, when it starts at
 * the process's first CUDA call. hanayo's main sets it to 32 before
 * anything else. hy_device_count is the first CUDA call on every path into
 * the backend, so for a program whose main does not (a test, a benchmark)
 * it sets the same default just before that first call; a value already
 * in the environment stays.
 */
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#include "backend.h"
#include "check.cuh"
#include "cuda_backend.cuh"

#define HY_CUDA_CONNECTIONS_DEFAULT 8    /* the driver's, when the variable is unset */
#define HY_CUDA_CONNECTIONS_MAX 32       /* the driver takes no more */

const char *hy_backends_compiled(void) { return "cpu cuda"; }

int hy_cuda_connections(void) {
    const char *v = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    long n = v && *v ? strtol(v, NULL, 10) : HY_CUDA_CONNECTIONS_DEFAULT;
    if (n < 1) n = HY_CUDA_CONNECTIONS_DEFAULT;
    return n > HY_CUDA_CONNECTIONS_MAX ? HY_CUDA_CONNECTIONS_MAX : (int)n;
}

int hy_device_count(int *count, hy_error *err) {
    *count = 0;
    int n = 0;
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0);   /* before the first CUDA call: see above */
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc == cudaErrorNoDevice || rc == cudaErrorInsufficientDriver) {
        /* No GPU, or no driver at all: a CPU machine, not a failure. */
        (void)cudaGetLastError();
        return HY_OK;
    }
    if (rc != cudaSuccess) return HY_CUDA_FAIL(err, rc, "cudaGetDeviceCount(&n)");
    *count = n;
    return HY_OK;
}

/* Fails unless `index` names a device this process can see. The message
 * says how many there are, since the index usually comes from the
 * config's `devices` list. */
static int hy_check_index(int index, hy_error *err) {
    int n;
    int rc = hy_device_count(&n, err);
    if (rc) return rc;
    if (n == 0)
        return hy_fail(err, HY_ERR_RUNTIME,
                       "CUDA device %d requested, but no CUDA device is visible "
                       "(no GPU, no driver, or CUDA_VISIBLE_DEVICES hides them)", index);
    if (index < 0 || index >= n)
        return hy_fail(err, HY_ERR_INPUT,
                       "CUDA device %d does not exist: this machine has %d (0..%d)",
                       index, n, n - 1);
    return HY_OK;
}

int hy_device_query(int index, hy_device_info *out, hy_error *err) {
    int rc = hy_check_index(index, err);
    if (rc) return rc;
    cudaDeviceProp prop;
    HY_CUDA_CHECK(cudaGetDeviceProperties(&prop, index), err);
    snprintf(out->name, sizeof out->name, "%s", prop.name);
    out->total_mem = prop.totalGlobalMem;
    out->cc_major = prop.major;
    out->cc_minor = prop.minor;
    out->sm_count = prop.multiProcessorCount;
    return HY_OK;
}

int hy_device_free(int index, size_t *free_bytes, hy_error *err) {
    *free_bytes = 0;
    int rc = hy_check_index(index, err);
    if (rc) return rc;
    size_t total = 0;
    HY_CUDA_CHECK(cudaSetDevice(index), err);
    HY_CUDA_CHECK(cudaMemGetInfo(free_bytes, &total), err);
    return HY_OK;
}

int hy_device_can_access_peer(int a, int b, int *yes, hy_error *err) {
    *yes = 0;
    int rc = hy_check_index(a, err);
    if (rc) return rc;
    if ((rc = hy_check_index(b, err))) return rc;
    if (a == b) {
        /* cudaDeviceCanAccessPeer answers 0 for a device and itself, but
         * ranks sharing a GPU copy device-to-device, which is what the
         * runtime means by "peer" here. */
        *yes = 1;
        return HY_OK;
    }
    int can = 0;
    HY_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, a, b), err);
    *yes = can != 0;
    return HY_OK;
}
