/*
 * ltload.cuh — cuBLASLt opened when the CUDA backend first needs it, not
 * when the process starts.
 *
 * The library is half a gigabyte; linked, the loader maps and relocates it
 * for every process, 60-100 ms of system time, although most commands
 * (plan, check, tune, the CPU backend, every test that runs the binary)
 * never make a GEMM on a GPU. So the binary does not link it: ltload.cu
 * defines the cuBLASLt entry points the backend calls, under the library's
 * own declarations (cublasLt.h, so the compiler checks every signature),
 * each calling through a pointer that hy_k_lt_open fills once per process
 * by dlopen. Before it has, they answer CUBLAS_STATUS_NOT_INITIALIZED (and
 * the status names say the library is not loaded).
 *
 * Where it is looked for: $HY_CUBLASLT_LIBRARY, then the loader's own
 * search for the toolkit's soname (LD_LIBRARY_PATH, the binary's run path,
 * ldconfig), then the toolkit's library directory the build used.
 */
#ifndef HY_CUDA_LTLOAD_CUH
#define HY_CUDA_LTLOAD_CUH

#include <stddef.h>

#include "backend.h"   /* hy_error (C linkage) */

/* Loads cuBLASLt and resolves every entry point, once per process (any
 * thread; later calls return the first call's answer). HY_ERR_RUNTIME
 * naming what was tried when it cannot. */
int hy_k_lt_open(hy_error *err);

/* The file cuBLASLt was loaded from; 0 when it is not loaded. */
int hy_k_lt_file(char *file, size_t n);

/* Its directory, the toolkit's libraries (NCCL is looked for beside it);
 * 0 when it is not loaded. */
int hy_k_lt_dir(char *dir, size_t n);

#endif
