/*
 * backend.h — the one device interface both backends implement (DESIGN §2).
 *
 * Everything above this header (runtime, model, schedule) is plain C and
 * knows nothing of CUDA; the CPU backend (kernels/cpu/) and the CUDA
 * backend (kernels/cuda/, graphs/) are two implementations of what is
 * declared here. This header must never include a CUDA header, so that
 * lib/ builds and runs with gcc alone.
 *
 * It grows piece by piece. The first piece is the device query: how many
 * CUDA devices this process can see, what each one is, and which pairs can
 * reach each other's memory directly (peer access, DESIGN §3). Memory,
 * streams, events, signals, capture/replay and the math ops follow.
 *
 * In a build without nvcc the CUDA entry points still exist (a stand-in,
 * kernels/cuda/stub.c, is linked instead of kernels/cuda/device.cu) and
 * answer "no CUDA devices", so callers never need #ifdefs.
 */
#ifndef HY_BACKEND_H
#define HY_BACKEND_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {   /* the CUDA backend is compiled as C++ by nvcc */
#endif

#include "error.h"   /* inside: error.h is C and has no extern "C" of its own */

/* ---------------------------------------------------------------------- */
/* Build */

/* The backends compiled into this binary, space-separated: "cpu" or
 * "cpu cuda". Compiled in is not the same as usable: a CUDA build on a
 * machine without a GPU reports "cpu cuda" and hy_device_count() == 0. */
const char *hy_backends_compiled(void);

/* ---------------------------------------------------------------------- */
/* CUDA devices */

typedef struct {
    char name[256];        /* e.g. "NVIDIA H200" */
    size_t total_mem;      /* bytes of device memory */
    int cc_major;          /* compute capability, e.g. 9.0 for Hopper */
    int cc_minor;
    int sm_count;          /* streaming multiprocessors */
} hy_device_info;

/* Sets *count to the number of CUDA devices this process can see. No CUDA
 * backend in the build, no driver installed, or no GPU present all give
 * *count = 0 and success: that is the normal state of a CPU machine, and
 * `backend: "auto"` falls back to the CPU on it. Only a driver that is
 * there but broken is an error. */
int hy_device_count(int *count, hy_error *err);

/* Fills *out for device `index` (0 .. count-1). Fails with a message that
 * says how many devices there are when the index does not exist. */
int hy_device_query(int index, hy_device_info *out, hy_error *err);

/* Sets *yes to 1 when device `a` can read and write device `b`'s memory
 * directly, else 0. A device always reaches itself (several ranks may share
 * one GPU, and then a "peer" copy is a device-to-device copy). */
int hy_device_can_access_peer(int a, int b, int *yes, hy_error *err);

#ifdef __cplusplus
}
#endif

#endif
