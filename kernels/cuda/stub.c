/*
 * stub.c — the CUDA backend's stand-in for builds without nvcc.
 *
 * The Makefile links this file instead of the .cu files beside it when
 * nvcc is missing or NO_CUDA is set (exactly one of the two is ever
 * linked). It answers every CUDA entry point of backend.h as a machine
 * with no CUDA would: zero devices, and a clear error for anything that needs one. So
 * the runtime and the CLI have no #ifdefs, and `backend: "cuda"` in a
 * CPU-only build fails with a message that says why.
 */
#include "backend.h"

static int hy_no_cuda(hy_error *err) {
    return hy_fail(err, HY_ERR_RUNTIME,
                   "no CUDA backend in this build (built without nvcc or with NO_CUDA=1; "
                   "rebuild with the CUDA toolkit installed to use GPUs)");
}

const char *hy_backends_compiled(void) { return "cpu"; }

int hy_device_count(int *count, hy_error *err) {
    (void)err;
    *count = 0;
    return HY_OK;
}

int hy_device_query(int index, hy_device_info *out, hy_error *err) {
    (void)index;
    (void)out;
    return hy_no_cuda(err);
}

int hy_backend_cuda_create(hy_backend **out, int ranks, const int *devices, int n_devices,
                           int flags_on_device, double watchdog_s, hy_error *err) {
    (void)ranks;
    (void)devices;
    (void)n_devices;
    (void)flags_on_device;
    (void)watchdog_s;
    *out = NULL;
    return hy_no_cuda(err);
}

int hy_backend_cuda_attention(int *sm90, hy_error *err) {
    (void)err;
    *sm90 = 0;
    return HY_OK;
}

int hy_backend_cuda_library(char *where, size_t n, hy_error *err) {
    if (n) where[0] = '\0';
    return hy_no_cuda(err);
}

int hy_device_free(int index, size_t *free_bytes, hy_error *err) {
    (void)index;
    *free_bytes = 0;
    return hy_no_cuda(err);
}

int hy_device_can_access_peer(int a, int b, int *yes, hy_error *err) {
    (void)a;
    (void)b;
    *yes = 0;
    return hy_no_cuda(err);
}

/* Without the CUDA kernels in the build their scratch is unknown: a plan
 * for a GPU made here counts the bf16 activations and the run's own
 * buffers, not the kernels' scratch. */
void hy_backend_cuda_memory(hy_backend_memory *m) {
    *m = (hy_backend_memory){ .act_size = 2, .attention_scratch = NULL, .scratch = NULL,
                              .flags = HY_FLAGS_HOST, .rank_overhead = 0 };
}
