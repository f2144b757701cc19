/*
 * ltload.cu — see ltload.cuh.
 *
 * The table of entry points is process state, as the CUDA driver's own
 * is: written once under pthread_once by whichever rank's thread opens a
 * backend first, only read after (pthread_once orders the writes before
 * every later reader).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>

#include "ltload.cuh"

/* The soname of the toolkit the build compiled against: libcublasLt.so.13. */
#define LT_STR2(x) #x
#define LT_STR(x) LT_STR2(x)
#define LT_SONAME "libcublasLt.so." LT_STR(CUBLAS_VER_MAJOR)

/* Each entry point the backend calls: its pointer, typed from the
 * library's declaration. */
#define LT_ENTRY_POINTS(X)                                                                          \
    X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetStatusName) X(cublasLtGetStatusString)       \
    X(cublasLtMatmul) X(cublasLtMatmulAlgoConfigGetAttribute) X(cublasLtMatmulAlgoGetHeuristic)    \
    X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute)     \
    X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy)                           \
    X(cublasLtMatmulPreferenceSetAttribute) X(cublasLtMatrixLayoutCreate)                          \
    X(cublasLtMatrixLayoutDestroy) X(cublasLtMatrixLayoutSetAttribute)

typedef struct {
    void *lib;
    int rc;               /* hy_k_lt_open's answer */
    char why[6144];       /* what was tried, when it failed */
#define LT_FIELD(name) decltype(&::name) name;
    LT_ENTRY_POINTS(LT_FIELD)
#undef LT_FIELD
} lt_table;

static lt_table lt;
static pthread_once_t lt_once = PTHREAD_ONCE_INIT;

static int lt_try(const char *path) {
    if (!path || !*path) return 0;
    lt.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    return lt.lib != NULL;
}

static void lt_load(void) {
    char dir_path[4200];
    snprintf(dir_path, sizeof dir_path, "%s/" LT_SONAME, HY_CUDA_LIBDIR);
    const char *env = getenv("HY_CUBLASLT_LIBRARY");
    if (!lt_try(env) && !lt_try(LT_SONAME) && !lt_try(dir_path)) {
        const char *last = dlerror();
        snprintf(lt.why, sizeof lt.why, "cannot load cuBLASLt: tried $HY_CUBLASLT_LIBRARY%s%.2000s%s, "
                 LT_SONAME " on the loader's path (LD_LIBRARY_PATH, the binary's run path, "
                 "ldconfig) and %.2000s (%.1000s); set LD_LIBRARY_PATH to the CUDA toolkit's library "
                 "directory or HY_CUBLASLT_LIBRARY to the file", env ? " (" : " (unset",
                 env ? env : "", ")", dir_path, last ? last : "not found");
        lt.rc = HY_ERR_RUNTIME;
        return;
    }
#define LT_RESOLVE(name)                                                                           \
    if (!lt.rc) {                                                                                  \
        *(void **)&lt.name = dlsym(lt.lib, #name);                                                 \
        if (!lt.name) {                                                                            \
            snprintf(lt.why, sizeof lt.why, "the cuBLASLt loaded (" LT_SONAME ") has no %s: "    \
                     "a toolkit older than the build's (CUDA %d)", #name, CUBLAS_VER_MAJOR);     \
            lt.rc = HY_ERR_RUNTIME;                                                                \
        }                                                                                          \
    }
    LT_ENTRY_POINTS(LT_RESOLVE)
#undef LT_RESOLVE
    if (lt.rc) {
        (void)dlclose(lt.lib);
        lt.lib = NULL;
#define LT_CLEAR(name) lt.name = NULL;
        LT_ENTRY_POINTS(LT_CLEAR)
#undef LT_CLEAR
    }
}

int hy_k_lt_open(hy_error *err) {
    int prc = pthread_once(&lt_once, lt_load);
    if (prc) return hy_fail(err, HY_ERR_RUNTIME, "pthread_once loading cuBLASLt: %s", strerror(prc));
    return lt.rc ? hy_fail(err, lt.rc, "%s", lt.why) : HY_OK;
}

int hy_k_lt_file(char *file, size_t n) {
    Dl_info info;
    if (!lt.lib || !lt.cublasLtCreate) return 0;
    if (!dladdr((const void *)lt.cublasLtCreate, &info) || !info.dli_fname) return 0;
    snprintf(file, n, "%s", info.dli_fname);
    return 1;
}

int hy_k_lt_dir(char *dir, size_t n) {
    if (!hy_k_lt_file(dir, n)) return 0;
    char *slash = strrchr(dir, '/');
    if (!slash) return 0;
    *slash = '\0';
    return 1;
}

int hy_backend_cuda_library(char *where, size_t n, hy_error *err) {
    if (n) where[0] = '\0';
    if (hy_k_lt_open(err)) return HY_ERR_RUNTIME;
    if (!hy_k_lt_file(where, n))
        return hy_fail(err, HY_ERR_RUNTIME, "cuBLASLt is loaded but dladdr cannot say from where");
    return HY_OK;
}

/* ---- The entry points, under cublasLt.h's declarations ---- */

#define LT_CALL(name, ...) (lt.name ? lt.name(__VA_ARGS__) : CUBLAS_STATUS_NOT_INITIALIZED)

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t *handle) {
    return LT_CALL(cublasLtCreate, handle);
}

cublasStatus_t CUBLASWINAPI cublasLtDestroy(cublasLtHandle_t handle) {
    return LT_CALL(cublasLtDestroy, handle);
}

const char *CUBLASWINAPI cublasLtGetStatusName(cublasStatus_t status) {
    return lt.cublasLtGetStatusName ? lt.cublasLtGetStatusName(status) : "cuBLASLt not loaded";
}

const char *CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
    return lt.cublasLtGetStatusString ? lt.cublasLtGetStatusString(status)
                                      : "cuBLASLt not loaded";
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                           const void *alpha, const void *A,
                                           cublasLtMatrixLayout_t Adesc, const void *B,
                                           cublasLtMatrixLayout_t Bdesc, const void *beta,
                                           const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                                           cublasLtMatrixLayout_t Ddesc,
                                           const cublasLtMatmulAlgo_t *algo, void *workspace,
                                           size_t workspace_bytes, cudaStream_t stream) {
    return LT_CALL(cublasLtMatmul, handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D,
                   Ddesc, algo, workspace, workspace_bytes, stream);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoConfigGetAttribute(
    const cublasLtMatmulAlgo_t *algo, cublasLtMatmulAlgoConfigAttributes_t attr, void *buf,
    size_t bytes, size_t *written) {
    return LT_CALL(cublasLtMatmulAlgoConfigGetAttribute, algo, attr, buf, bytes, written);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t pref, int requested, cublasLtMatmulHeuristicResult_t results[],
    int *returned) {
    return LT_CALL(cublasLtMatmulAlgoGetHeuristic, handle, desc, Adesc, Bdesc, Cdesc, Ddesc, pref,
                   requested, results, returned);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc,
                                                     cublasComputeType_t compute,
                                                     cudaDataType_t scale) {
    return LT_CALL(cublasLtMatmulDescCreate, desc, compute, scale);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
    return LT_CALL(cublasLtMatmulDescDestroy, desc);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           const void *buf, size_t bytes) {
    return LT_CALL(cublasLtMatmulDescSetAttribute, desc, attr, buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
    return LT_CALL(cublasLtMatmulPreferenceCreate, pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    return LT_CALL(cublasLtMatmulPreferenceDestroy, pref);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
    size_t bytes) {
    return LT_CALL(cublasLtMatmulPreferenceSetAttribute, pref, attr, buf, bytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout,
                                                       cudaDataType type, uint64_t rows,
                                                       uint64_t cols, int64_t ld) {
    return LT_CALL(cublasLtMatrixLayoutCreate, layout, type, rows, cols, ld);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
    return LT_CALL(cublasLtMatrixLayoutDestroy, layout);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                             cublasLtMatrixLayoutAttribute_t attr,
                                                             const void *buf, size_t bytes) {
    return LT_CALL(cublasLtMatrixLayoutSetAttribute, layout, attr, buf, bytes);
}
