/*
 * matmul.cu — dense layers and the tied LM head through cuBLASLt, CUDA
 * backend (kernels/cpu/matmul.c is the same family on the CPU).
 *
 *   forward   out[N,OC] = inp[N,C] · W[C,OC] + bias[OC]       (Conv1D layout)
 *   backward  dinp += dout · Wᵀ (= when the buffer was just zeroed: beta 0,
 *             fuse.cu),  dW += inpᵀ · dout,  dbias += Σ_n dout
 *   LM head   logits[N,V] = inp · wteᵀ,  dinp += dlogits · wte,
 *             dwte[V,C] += dlogitsᵀ · inp
 *
 * cuBLASLt is column-major and our arrays are row-major: a row-major X[R,K]
 * is the column-major Xᵀ[K,R] with the same leading dimension. So each
 * product is issued as its transpose and nothing is copied:
 *   out ᵀ[OC,N]  = Wᵀ[OC,C] · inpᵀ[C,N]     A = W   (N, ld OC), B = inp (N, ld C)
 *   dinpᵀ[C,N]  += W[C,OC] · doutᵀ[OC,N]    A = W   (T, ld OC), B = dout (N, ld OC)
 *   dWᵀ[OC,C]   += doutᵀ[OC,N] · inp[N,C]   A = dout (N, ld OC), B = inp (T, ld C)
 *   logitsᵀ[V,N] = wte[V,C] · inpᵀ[C,N]     A = wte (T, ld C),  B = inp (N, ld C)
 *   dinpᵀ[C,N]  += wteᵀ[C,V] · dlogitsᵀ     A = wte (N, ld C),  B = dlogits (N, ld V)
 *   dwteᵀ[C,V]  += inpᵀ[C,N] · dlogits[N,V] A = inp (N, ld C),  B = dlogits (T, ld V)
 * Activations and weights are bf16; the weight gradients dW and dwte are
 * fp32 outputs of the same bf16 GEMM (cuBLASLt's "BF16 A/B, FP32 C/D" with
 * CUBLAS_COMPUTE_32F), accumulated with beta = 1, so micro-batches sum in
 * fp32. The bias rides in the GEMM's epilogue (CUBLASLT_EPILOGUE_BIAS);
 * a bias pointer less than 16-byte aligned (possible for odd parameter
 * sizes in the packed parameter buffer) is broadcast into out first and
 * added with beta = 1 instead, which rounds exactly as the epilogue does.
 *
 * Algorithm choice: one hy_lt per rank holds the cuBLASLt handle, a 32 MiB
 * workspace (what NVIDIA recommends for Hopper) and a cache from everything
 * that describes a call (shape, transposes, leading dimensions, batch
 * strides, output type, epilogue, beta != 0, pointer alignments) to its
 * descriptors and the algorithm cuBLASLt's heuristic picked. The heuristic
 * is a host-side query, so the first call of a shape (normally in the eager
 * warm-up iteration) may even happen during stream capture. cuBLASLt's
 * GEMMs are deterministic for a fixed algorithm (its split-K reductions are
 * ordered), and the cache guarantees the eager iteration and every replay
 * use the same one. For a bf16 output the pick is the best candidate that
 * keeps split-K partial sums in fp32 (reduction scheme COMPUTE_TYPE or
 * none), so accumulating into bf16 rounds once. The hy_lt
 * is not locked: it belongs to one rank, whose one thread uses it.
 *
 * dbias is a column sum of dout[N,OC], done without atomics in two fixed-
 * order passes: per chunk of MM_CHUNK rows one partial sum per column into
 * scratch, then one thread per column adds the partials in chunk order
 * into dbias. Scratch: ceil(N/MM_CHUNK) · OC floats.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "check.cuh"
#include "kernels.cuh"
#include "lt.cuh"

#define HY_LT_WORKSPACE (32u << 20)
#define MM_CHUNK 64   /* rows per dbias partial */

// ----------------------------------------------------------------------------
// The cuBLASLt handle, workspace and algorithm cache

size_t hy_lt_workspace_bytes(void) { return HY_LT_WORKSPACE; }

/* Everything that selects descriptors and an algorithm. Zeroed before it
 * is filled, so memcmp compares it (there is no padding either). */
typedef struct {
    int32_t ta, tb, m, n, k, batch;
    int64_t lda, ldb, ldd, sa, sb, sd;
    int32_t tD, bias, beta_nz, pad_;
    uint32_t al_a, al_b, al_d, al_bias;
} lt_key;

typedef struct {
    lt_key key;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
} lt_entry;

struct hy_lt {
    int device;
    cublasLtHandle_t handle;
    void *workspace;
    lt_entry *entries;
    int n_entries, cap;
};

/* A cuBLASLt failure as an hy_error naming the op, the call and the shape. */
static int lt_fail(hy_error *err, cublasStatus_t st, const char *call, const hy_lt_gemm *g) {
    return hy_fail(err, HY_ERR_RUNTIME,
                   "cuBLASLt %s (%d): %s, in %s for %s (m=%d n=%d k=%d batch=%d, op %c%c, "
                   "lda=%lld ldb=%lld ldd=%lld, D %s%s)",
                   cublasLtGetStatusName(st), (int)st, cublasLtGetStatusString(st), call,
                   g->op, g->m, g->n, g->k, g->batch, g->ta == CUBLAS_OP_T ? 'T' : 'N',
                   g->tb == CUBLAS_OP_T ? 'T' : 'N', (long long)g->lda, (long long)g->ldb,
                   (long long)g->ldd, g->tD == CUDA_R_32F ? "fp32" : "bf16",
                   g->bias != NULL ? ", bias" : "");
}

/* The alignment cuBLASLt may assume for a matrix: the largest power of two
 * (up to its default of 256) dividing the address and, for a batch, the
 * batch stride in bytes too. */
static uint32_t lt_align(const void *p, int64_t stride_bytes) {
    uint64_t a = (uint64_t)(uintptr_t)p | (uint64_t)stride_bytes | 256u;
    return (uint32_t)(a & (~a + 1));
}

static void lt_key_of(const hy_lt_gemm *g, lt_key *key) {
    size_t dsz = g->tD == CUDA_R_32F ? 4 : 2;
    int batched = g->batch > 1;
    memset(key, 0, sizeof *key);
    key->ta = (int32_t)g->ta;
    key->tb = (int32_t)g->tb;
    key->m = g->m;
    key->n = g->n;
    key->k = g->k;
    key->batch = g->batch;
    key->lda = g->lda;
    key->ldb = g->ldb;
    key->ldd = g->ldd;
    key->sa = batched ? g->sa : 0;
    key->sb = batched ? g->sb : 0;
    key->sd = batched ? g->sd : 0;
    key->tD = (int32_t)g->tD;
    key->bias = g->bias != NULL;
    key->beta_nz = g->beta != 0.0f;
    key->al_a = lt_align(g->A, key->sa * 2);
    key->al_b = lt_align(g->B, key->sb * 2);
    key->al_d = lt_align(g->D, key->sd * (int64_t)dsz);
    key->al_bias = g->bias != NULL ? lt_align(g->bias, 0) : 0;
}

static void lt_entry_free(lt_entry *e) {
    if (e->la) cublasLtMatrixLayoutDestroy(e->la);
    if (e->lb) cublasLtMatrixLayoutDestroy(e->lb);
    if (e->ld) cublasLtMatrixLayoutDestroy(e->ld);
    if (e->desc) cublasLtMatmulDescDestroy(e->desc);
    e->la = e->lb = e->ld = NULL;
    e->desc = NULL;
}

/* A column-major layout of rows × cols with leading dimension ld, batched
 * when batch > 1. */
static cublasStatus_t lt_layout(cublasLtMatrixLayout_t *out, cudaDataType_t type, int rows,
                                int cols, int64_t ld, int batch, int64_t stride) {
    cublasStatus_t st = cublasLtMatrixLayoutCreate(out, type, (uint64_t)rows, (uint64_t)cols, ld);
    if (st != CUBLAS_STATUS_SUCCESS || batch <= 1) return st;
    int32_t count = batch;
    st = cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                          sizeof count);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    return cublasLtMatrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                            &stride, sizeof stride);
}

/* Builds the descriptors of one cache entry and asks the heuristic for its
 * algorithm. On failure everything made here is freed again. */
static int lt_entry_make(hy_lt *lt, const hy_lt_gemm *g, const lt_key *key, lt_entry *e,
                         hy_error *err) {
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    const char *what = "";
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res, cand[8];
    int nres = 0, ncand = 0, pick = -1;
    uint32_t mask = (uint32_t)CUBLASLT_REDUCTION_SCHEME_MASK;
    int32_t ta = (int32_t)g->ta, tb = (int32_t)g->tb;
    int a_rows = g->ta == CUBLAS_OP_N ? g->m : g->k, a_cols = g->ta == CUBLAS_OP_N ? g->k : g->m;
    int b_rows = g->tb == CUBLAS_OP_N ? g->k : g->n, b_cols = g->tb == CUBLAS_OP_N ? g->n : g->k;
    uint64_t ws = HY_LT_WORKSPACE;

    memset(e, 0, sizeof *e);
    memset(&res, 0, sizeof res);
    e->key = *key;

#define LT_TRY(call) do { st = (call); if (st != CUBLAS_STATUS_SUCCESS) { what = #call; goto fail; } } while (0)
    LT_TRY(cublasLtMatmulDescCreate(&e->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT_TRY(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_TRY(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (g->bias != NULL) {
        uint32_t epi = CUBLASLT_EPILOGUE_BIAS;
        int32_t btype = CUDA_R_16BF;
        const void *bp = g->bias;
        LT_TRY(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                              sizeof epi));
        LT_TRY(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                              &btype, sizeof btype));
        /* The heuristic reads the bias pointer's alignment from here. */
        LT_TRY(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp,
                                              sizeof bp));
    }
    LT_TRY(lt_layout(&e->la, CUDA_R_16BF, a_rows, a_cols, g->lda, g->batch, key->sa));
    LT_TRY(lt_layout(&e->lb, CUDA_R_16BF, b_rows, b_cols, g->ldb, g->batch, key->sb));
    LT_TRY(lt_layout(&e->ld, g->tD, g->m, g->n, g->ldd, g->batch, key->sd));

    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &ws, sizeof ws));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                &key->al_a, sizeof key->al_a));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                &key->al_b, sizeof key->al_b));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                &key->al_d, sizeof key->al_d));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                &key->al_d, sizeof key->al_d));
    /* The heuristic's candidates, best first. A bf16 output takes the best
     * one whose split-K partial sums (if it splits at all) are kept in fp32
     * (reduction scheme NONE or COMPUTE_TYPE) rather than added up in bf16
     * in place, when there is one; an fp32 output takes the best. Asking
     * with the full mask and reading each candidate's scheme keeps the
     * unsplit algorithms in the running, which a mask without NONE's
     * (zero) bit might filter out. */
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                &mask, sizeof mask));
    st = cublasLtMatmulAlgoGetHeuristic(lt->handle, e->desc, e->la, e->lb, e->ld, e->ld, pref, 8,
                                        cand, &ncand);
    if (st != CUBLAS_STATUS_SUCCESS) ncand = 0;
    for (int i = 0; i < ncand; i++) {
        if (cand[i].state != CUBLAS_STATUS_SUCCESS) continue;
        if (pick < 0) pick = i;   /* the best that works, whatever its scheme */
        if (g->tD == CUDA_R_32F) break;
        uint32_t scheme = 0;
        size_t got = 0;
        if (cublasLtMatmulAlgoConfigGetAttribute(&cand[i].algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                                                 &scheme, sizeof scheme, &got) != CUBLAS_STATUS_SUCCESS)
            continue;
        if (scheme == CUBLASLT_REDUCTION_SCHEME_NONE || scheme == CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE) {
            pick = i;
            break;
        }
    }
    if (pick >= 0) {
        res = cand[pick];
        nres = 1;
    }
#undef LT_TRY
    cublasLtMatmulPreferenceDestroy(pref);
    if (nres < 1) {
        lt_entry_free(e);
        return hy_fail(err, HY_ERR_RUNTIME,
                       "cuBLASLt has no algorithm for %s (m=%d n=%d k=%d batch=%d, op %c%c, "
                       "lda=%lld ldb=%lld ldd=%lld, D %s, alignments A %u B %u D %u bytes; "
                       "heuristic: %s)",
                       g->op, g->m, g->n, g->k, g->batch, g->ta == CUBLAS_OP_T ? 'T' : 'N',
                       g->tb == CUBLAS_OP_T ? 'T' : 'N', (long long)g->lda, (long long)g->ldb,
                       (long long)g->ldd, g->tD == CUDA_R_32F ? "fp32" : "bf16", key->al_a,
                       key->al_b, key->al_d, cublasLtGetStatusName(st));
    }
    e->algo = res.algo;
    return HY_OK;

fail:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    lt_entry_free(e);
    return lt_fail(err, st, what, g);
}

/* The cache entry for g, made on first sight. */
static int lt_lookup(hy_lt *lt, const hy_lt_gemm *g, lt_entry **out, hy_error *err) {
    lt_key key;
    lt_key_of(g, &key);
    for (int i = 0; i < lt->n_entries; i++) {
        if (memcmp(&lt->entries[i].key, &key, sizeof key) == 0) {
            *out = &lt->entries[i];
            return HY_OK;
        }
    }
    if (lt->n_entries == lt->cap) {
        int cap = lt->cap ? 2 * lt->cap : 32;
        lt_entry *grown = (lt_entry *)realloc(lt->entries, (size_t)cap * sizeof *grown);
        if (grown == NULL) return hy_fail(err, HY_ERR_RUNTIME, "out of memory caching a cuBLASLt plan");
        lt->entries = grown;
        lt->cap = cap;
    }
    lt_entry *e = &lt->entries[lt->n_entries];
    int rc = lt_entry_make(lt, g, &key, e, err);
    if (rc) return rc;
    lt->n_entries++;
    *out = e;
    return HY_OK;
}

int hy_lt_run(hy_lt *lt, cudaStream_t s, const hy_lt_gemm *g, hy_error *err) {
    lt_entry *e = NULL;
    int rc = lt_lookup(lt, g, &e, err);
    if (rc) return rc;
    cublasStatus_t st;
    if (g->bias != NULL) {
        const void *bp = g->bias;
        st = cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp,
                                            sizeof bp);
        if (st != CUBLAS_STATUS_SUCCESS) return lt_fail(err, st, "cublasLtMatmulDescSetAttribute(BIAS_POINTER)", g);
    }
    /* C is D: beta = 1 accumulates in place (same pointer, same layout). */
    st = cublasLtMatmul(lt->handle, e->desc, &g->alpha, g->A, e->la, g->B, e->lb, &g->beta,
                        g->D, e->ld, g->D, e->ld, &e->algo, lt->workspace, HY_LT_WORKSPACE, s);
    if (st != CUBLAS_STATUS_SUCCESS) return lt_fail(err, st, "cublasLtMatmul", g);
    return HY_OK;
}

// ----------------------------------------------------------------------------
// hy_lt: create and destroy

void hy_lt_destroy(hy_lt *lt) {
    if (lt == NULL) return;
    int prev = -1;
    int have_prev = cudaGetDevice(&prev) == cudaSuccess;
    (void)cudaSetDevice(lt->device);
    for (int i = 0; i < lt->n_entries; i++) lt_entry_free(&lt->entries[i]);
    free(lt->entries);
    if (lt->workspace) (void)cudaFree(lt->workspace);
    if (lt->handle) (void)cublasLtDestroy(lt->handle);
    if (have_prev) (void)cudaSetDevice(prev);
    (void)cudaGetLastError();
    free(lt);
}

int hy_lt_create(hy_lt **out, int device, hy_error *err) {
    *out = NULL;
    hy_lt *lt = (hy_lt *)calloc(1, sizeof *lt);
    if (lt == NULL) return hy_fail(err, HY_ERR_RUNTIME, "out of memory creating a cuBLASLt context");
    lt->device = device;

    int prev = 0, rc = HY_OK;
    cudaError_t crc = cudaGetDevice(&prev);
    if (crc != cudaSuccess) {
        free(lt);
        return HY_CUDA_FAIL(err, crc, "cudaGetDevice");
    }
    if ((crc = cudaSetDevice(device)) != cudaSuccess) {
        rc = HY_CUDA_FAIL(err, crc, "cudaSetDevice(device)");
    } else {
        cublasStatus_t st = cublasLtCreate(&lt->handle);
        if (st != CUBLAS_STATUS_SUCCESS) {
            lt->handle = NULL;
            rc = hy_fail(err, HY_ERR_RUNTIME, "cuBLASLt %s (%d): %s, in cublasLtCreate on device %d",
                         cublasLtGetStatusName(st), (int)st, cublasLtGetStatusString(st), device);
        } else if ((crc = cudaMalloc(&lt->workspace, HY_LT_WORKSPACE)) != cudaSuccess) {
            lt->workspace = NULL;
            rc = HY_CUDA_FAIL(err, crc, "cudaMalloc(cuBLASLt workspace, 32 MiB)");
        }
    }
    (void)cudaSetDevice(prev);
    if (rc) {
        hy_lt_destroy(lt);
        return rc;
    }
    *out = lt;
    return HY_OK;
}

// ----------------------------------------------------------------------------
// Kernels: bias broadcast (the unaligned-bias path) and dbias

/* out[n, o] = bias[o]. Grid (ceil(OC/256), rows): one row per blockIdx.y
 * slice, rows strided by gridDim.y. */
static __global__ void mm_bias_broadcast_kernel(hy_bf16 *out, const hy_bf16 *bias, int N, int OC) {
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OC) return;
    hy_bf16 b = bias[o];
    for (int n = blockIdx.y; n < N; n += gridDim.y) out[(size_t)n * OC + o] = b;
}

/* Per chunk of MM_CHUNK rows, the column sums of dout. Block (32, 8):
 * threadIdx.x picks the column (a warp reads 32 consecutive columns of a
 * row), threadIdx.y strides the chunk's rows; the 8 row groups are then
 * added in order. Grid (nchunks, ceil(OC/32)). */
static __global__ void mm_dbias_partial_kernel(float *partial, const hy_bf16 *dout, int N, int OC) {
    __shared__ float acc[8][33];
    int chunk = blockIdx.x;
    int o = blockIdx.y * 32 + threadIdx.x;
    int r0 = chunk * MM_CHUNK, r1 = min(r0 + MM_CHUNK, N);
    float a = 0.0f;
    if (o < OC)
        for (int r = r0 + (int)threadIdx.y; r < r1; r += 8) a += __bfloat162float(dout[(size_t)r * OC + o]);
    acc[threadIdx.y][threadIdx.x] = a;
    __syncthreads();
    if (threadIdx.y == 0 && o < OC) {
        float t = 0.0f;
        for (int y = 0; y < 8; y++) t += acc[y][threadIdx.x];
        partial[(size_t)chunk * OC + o] = t;
    }
}

/* dbias[o] += Σ_chunk partial[chunk, o], chunks in order. */
static __global__ void mm_dbias_finish_kernel(float *dbias, const float *partial, int nchunks, int OC) {
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= OC) return;
    float t = 0.0f;
    for (int c = 0; c < nchunks; c++) t += partial[(size_t)c * OC + o];
    dbias[o] += t;
}

static int mm_chunks(int N) { return (N + MM_CHUNK - 1) / MM_CHUNK; }

// ----------------------------------------------------------------------------
// Launchers

int hy_k_matmul_fwd(hy_lt *lt, cudaStream_t s, hy_bf16 *out, const hy_bf16 *inp,
                    const hy_bf16 *w, const hy_bf16 *bias, int N, int C, int OC, hy_error *err) {
    if (N <= 0 || OC <= 0 || C <= 0) return HY_OK;
    hy_lt_gemm g = hy_lt_single("matmul_fwd", CUBLAS_OP_N, CUBLAS_OP_N, OC, N, C,
                                w, OC, inp, C, out, CUDA_R_16BF, OC, 0.0f);
    if (bias != NULL && ((uintptr_t)bias & 15) != 0) {
        /* Unaligned bias: out = bias broadcast, then out += inp · W. */
        unsigned rows = (unsigned)(N < 65535 ? N : 65535);
        dim3 grid((unsigned)((OC + 255) / 256), rows);
        mm_bias_broadcast_kernel<<<grid, 256, 0, s>>>(out, bias, N, OC);
        HY_CUDA_CHECK(cudaGetLastError(), err);
        g.beta = 1.0f;
    } else {
        g.bias = bias;
    }
    return hy_lt_run(lt, s, &g, err);
}

size_t hy_k_matmul_bwd_scratch(int N, int C, int OC) {
    (void)C;
    if (N <= 0 || OC <= 0) return 0;
    return (size_t)mm_chunks(N) * (size_t)OC * sizeof(float);
}

int hy_k_matmul_bwd(hy_lt *lt, cudaStream_t s, hy_bf16 *dinp, float *dw, float *dbias,
                    const hy_bf16 *dout, const hy_bf16 *inp, const hy_bf16 *w, int N, int C,
                    int OC, int overwrite, void *scratch, hy_error *err) {
    if (N <= 0 || OC <= 0 || C <= 0) return HY_OK;
    int rc;
    if (dinp != NULL) {
        hy_lt_gemm g = hy_lt_single("matmul_bwd (dinp)", CUBLAS_OP_T, CUBLAS_OP_N, C, N, OC,
                                    w, OC, dout, OC, dinp, CUDA_R_16BF, C, overwrite ? 0.0f : 1.0f);
        if ((rc = hy_lt_run(lt, s, &g, err))) return rc;
    }
    if (dw != NULL) {
        hy_lt_gemm g = hy_lt_single("matmul_bwd (dweight)", CUBLAS_OP_N, CUBLAS_OP_T, OC, C, N,
                                    dout, OC, inp, C, dw, CUDA_R_32F, OC, 1.0f);
        if ((rc = hy_lt_run(lt, s, &g, err))) return rc;
    }
    if (dbias != NULL) {
        int nchunks = mm_chunks(N);
        float *partial = (float *)scratch;
        dim3 grid((unsigned)nchunks, (unsigned)((OC + 31) / 32));
        mm_dbias_partial_kernel<<<grid, dim3(32, 8), 0, s>>>(partial, dout, N, OC);
        HY_CUDA_CHECK(cudaGetLastError(), err);
        mm_dbias_finish_kernel<<<(unsigned)((OC + 255) / 256), 256, 0, s>>>(dbias, partial, nchunks, OC);
        HY_CUDA_CHECK(cudaGetLastError(), err);
    }
    return HY_OK;
}

int hy_k_lm_head_fwd(hy_lt *lt, cudaStream_t s, hy_bf16 *logits, const hy_bf16 *inp,
                     const hy_bf16 *wte, int N, int C, int V, hy_error *err) {
    if (N <= 0 || C <= 0 || V <= 0) return HY_OK;
    hy_lt_gemm g = hy_lt_single("lm_head_fwd", CUBLAS_OP_T, CUBLAS_OP_N, V, N, C,
                                wte, C, inp, C, logits, CUDA_R_16BF, V, 0.0f);
    return hy_lt_run(lt, s, &g, err);
}

int hy_k_lm_head_bwd(hy_lt *lt, cudaStream_t s, hy_bf16 *dinp, float *dwte,
                     const hy_bf16 *dlogits, const hy_bf16 *inp, const hy_bf16 *wte, int N,
                     int C, int V, int overwrite, hy_error *err) {
    if (N <= 0 || C <= 0 || V <= 0) return HY_OK;
    int rc;
    if (dinp != NULL) {
        hy_lt_gemm g = hy_lt_single("lm_head_bwd (dinp)", CUBLAS_OP_N, CUBLAS_OP_N, C, N, V,
                                    wte, C, dlogits, V, dinp, CUDA_R_16BF, C, overwrite ? 0.0f : 1.0f);
        if ((rc = hy_lt_run(lt, s, &g, err))) return rc;
    }
    if (dwte != NULL) {
        hy_lt_gemm g = hy_lt_single("lm_head_bwd (dwte)", CUBLAS_OP_N, CUBLAS_OP_T, C, V, N,
                                    inp, C, dlogits, V, dwte, CUDA_R_32F, C, 1.0f);
        if ((rc = hy_lt_run(lt, s, &g, err))) return rc;
    }
    return HY_OK;
}

// ----------------------------------------------------------------------------
// Preload (kernels.cuh)

int hy_k_matmul_preload(hy_error *err) {
    HY_CUDA_PRELOAD(mm_bias_broadcast_kernel, err);
    HY_CUDA_PRELOAD(mm_dbias_partial_kernel, err);
    HY_CUDA_PRELOAD(mm_dbias_finish_kernel, err);
    return HY_OK;
}
