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
 * The MLP's GELU rides in the epilogues too (matmul_gelu_fwd/_bwd):
 *   forward   preᵀ = Wᵀ · inpᵀ + bias, outᵀ = gelu(preᵀ): GELU_AUX_BIAS,
 *             D = out, aux = pre (the pre-activation the backward needs)
 *   backward  dpreᵀ = (W · doutᵀ) ⊙ gelu'(preᵀ): DGELU, aux = pre read
 *             back; DGELU_BGRAD also sums dpreᵀ over its N columns, the
 *             fc layer's bias gradient
 * Which GELU: cuBLAS's own text (cublasLt.h, cublasLtEpilogue_t: "apply
 * GELU point-wise transform") names no formula. PyTorch, which sends
 * addmm + GELU through exactly this epilogue (_addmm_activation with
 * use_gelu), decomposes that op as gelu(approximate="tanh") on CUDA and
 * the erf form on the CPU (torch/_decomp/decompositions.py,
 * _addmm_activation), and its test holds the CUDA epilogue to the tanh
 * form (test/test_linalg.py, _test_addmm_addmv). So it is GPT-2's tanh
 * approximation, ½x(1 + tanh(sqrt(2/π)(x + 0.044715x³))), which gelu.cu
 * and the CPU compute; tests/test_cuda.c holds it to the CPU's.
 * The rules (cublasLt.h, cublasLtMatmulDescAttributes_t): the aux matrix
 * has D's shape, its leading dimension (EPILOGUE_AUX_LD) "must be
 * divisible by 8 and be no less than the number of rows in the output
 * matrix" (here OC forward, C backward: the row-major [N, width] buffer
 * read column-major), and its elements are "the same type as the type of
 * elements of the output matrix": bf16 with our bf16 D, so the stashed
 * pre-activation is bf16 as before. DGELU_BGRAD's bias gradient is the
 * row sum of D after the slope (cublasLt.h's "apply independently GELU
 * and Bias gradient" leaves that open; NVIDIA's TransformerEngine takes it
 * as fc1's bias gradient that way, transformer_engine/common/gemm/
 * cublaslt_gemm.cu), "the same type as the output elements", and
 * written, not added: bf16 into scratch, then one small kernel adds it
 * into the fp32 dbias (a per-micro-batch bias gradient rounded to bf16, as
 * PyTorch's autocast rounds it; our own column sum kept it in fp32). The heuristic reads each pointer's alignment
 * from the descriptor, so the aux and bias alignments are part of the
 * cache key. Where cuBLASLt has no algorithm for an epilogue (or refuses
 * it), or the shape breaks a rule (width not a multiple of 8, bias not
 * 16-byte aligned), the op runs as the separate passes it replaces, the
 * same choice in the eager iteration and every replay (the refusal is
 * cached like an algorithm); HY_CUDA_GEMM_EPILOGUES=0 in the environment
 * takes the separate passes always, to time one against the other.
 * What it saves, per layer and micro-batch of GPT-2 124M at B = 16 (N =
 * 16384, the hidden width 3072, 100.7 MB per [N, 3072] bf16 matrix):
 * forward the GELU pass's read of pre (it wrote out and the GEMM wrote pre
 * before; now the GEMM writes both), 101 MB; backward the product's
 * d(out) written and read back, the GELU backward's read of pre and write
 * of dpre, and the column sum's read of it against the epilogue's read
 * of pre: 503 MB down to 201 MB. 0.40 GB per layer, 4.8 GB per micro-
 * batch: about 1.2 ms of the 43.8 ms measured, at ~4 TB/s, if the
 * epilogues cost the GEMMs nothing (llm.c saw cuBLASLt's bf16 GELU
 * epilogue run slower than a separate pass on an A100: measure).
 *
 * Algorithm choice: one hy_lt per rank holds the cuBLASLt handle, a 32 MiB
 * workspace (what NVIDIA recommends for Hopper) and a cache from everything
 * that describes a call (shape, transposes, leading dimensions, batch
 * strides, output type, epilogue, beta != 0, pointer alignments) to its
 * descriptors and the algorithm cuBLASLt's heuristic picked. The heuristic
 * is a host-side query, so the first call of a shape (normally in the eager
 * warm-up iteration) may even happen during stream capture. cuBLASLt's
 * GEMMs are deterministic for a fixed algorithm (its split-K reductions are
 * ordered; cuBLAS's "Results reproducibility": the same bits on every run
 * on the same architecture and SM count, epilogues included), and the
 * cache guarantees the eager iteration and every replay
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
#include "ltload.cuh"

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
    int32_t tD, epi, beta_nz, pad_;
    int64_t ldaux;
    uint32_t al_a, al_b, al_d, al_bias, al_aux, pad2_;
} lt_key;

/* ok 0: cuBLASLt refused this call (no algorithm, or an attribute it does
 * not take: `refusal` says which), remembered so it is asked once. */
typedef struct {
    lt_key key;
    int ok;
    cublasStatus_t refusal;
    const char *refused_in;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
} lt_entry;

struct hy_lt {
    int device;
    int epilogues;   /* 0: the GELU epilogues are off (HY_CUDA_GEMM_EPILOGUES=0) */
    cublasLtHandle_t handle;
    void *workspace;
    lt_entry *entries;
    int n_entries, cap;
};

static int lt_epi_bias(cublasLtEpilogue_t e) {
    return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}

static int lt_epi_aux(cublasLtEpilogue_t e) {
    return e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS ||
           e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
}

/* For messages: ", epilogue NAME", or nothing for the plain product. */
static const char *lt_epi_name(cublasLtEpilogue_t e) {
    switch (e) {
    case CUBLASLT_EPILOGUE_BIAS: return ", epilogue BIAS";
    case CUBLASLT_EPILOGUE_GELU_AUX: return ", epilogue GELU_AUX";
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: return ", epilogue GELU_AUX_BIAS";
    case CUBLASLT_EPILOGUE_DGELU: return ", epilogue DGELU";
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: return ", epilogue DGELU_BGRAD";
    default: return "";
    }
}

/* A cuBLASLt failure as an hy_error naming the op, the call and the shape. */
static int lt_fail(hy_error *err, cublasStatus_t st, const char *call, const hy_lt_gemm *g) {
    return hy_fail(err, HY_ERR_RUNTIME,
                   "cuBLASLt %s (%d): %s, in %s for %s (m=%d n=%d k=%d batch=%d, op %c%c, "
                   "lda=%lld ldb=%lld ldd=%lld, D %s%s)",
                   cublasLtGetStatusName(st), (int)st, cublasLtGetStatusString(st), call,
                   g->op, g->m, g->n, g->k, g->batch, g->ta == CUBLAS_OP_T ? 'T' : 'N',
                   g->tb == CUBLAS_OP_T ? 'T' : 'N', (long long)g->lda, (long long)g->ldb,
                   (long long)g->ldd, g->tD == CUDA_R_32F ? "fp32" : "bf16", lt_epi_name(g->epi));
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
    key->epi = (int32_t)g->epi;
    key->beta_nz = g->beta != 0.0f;
    key->ldaux = lt_epi_aux(g->epi) ? g->ldaux : 0;
    key->al_a = lt_align(g->A, key->sa * 2);
    key->al_b = lt_align(g->B, key->sb * 2);
    key->al_d = lt_align(g->D, key->sd * (int64_t)dsz);
    key->al_bias = lt_epi_bias(g->epi) ? lt_align(g->bias, 0)
                   : g->epi == CUBLASLT_EPILOGUE_DGELU_BGRAD ? lt_align(g->bgrad, 0) : 0;
    key->al_aux = lt_epi_aux(g->epi) ? lt_align(g->aux, 0) : 0;
}

/* The epilogue's pointers into the descriptor: before the heuristic (which
 * reads their alignment from them) and before every call. */
static cublasStatus_t lt_epi_pointers(cublasLtMatmulDesc_t desc, const hy_lt_gemm *g,
                                      const char **what) {
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    const void *bp = lt_epi_bias(g->epi) ? (const void *)g->bias : (const void *)g->bgrad;
    if (lt_epi_bias(g->epi) || g->epi == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
        *what = "cublasLtMatmulDescSetAttribute(BIAS_POINTER)";
        st = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof bp);
        if (st != CUBLAS_STATUS_SUCCESS) return st;
    }
    if (lt_epi_aux(g->epi)) {
        const void *ap = g->aux;
        *what = "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_POINTER)";
        st = cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &ap,
                                            sizeof ap);
    }
    return st;
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
 * algorithm. When cuBLASLt says no (no algorithm, or an attribute value it
 * does not take) the entry is made with ok = 0 and nothing else; other
 * failures are errors. Either way what was made and not kept is freed. */
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
    e->ok = 1;

#define LT_TRY(call) do { st = (call); if (st != CUBLAS_STATUS_SUCCESS) { what = #call; goto fail; } } while (0)
    LT_TRY(cublasLtMatmulDescCreate(&e->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT_TRY(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_TRY(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (g->epi != CUBLASLT_EPILOGUE_DEFAULT) {
        uint32_t epi = (uint32_t)g->epi;
        LT_TRY(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                              sizeof epi));
    }
    if (lt_epi_bias(g->epi)) {
        /* A bias we read is bf16; the bias gradient DGELU_BGRAD writes is
         * left at its default, the output's type (bf16 too). */
        int32_t btype = CUDA_R_16BF;
        LT_TRY(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                              &btype, sizeof btype));
    }
    if (lt_epi_aux(g->epi)) {
        int64_t ldaux = g->ldaux;
        LT_TRY(cublasLtMatmulDescSetAttribute(e->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                              &ldaux, sizeof ldaux));
    }
    st = lt_epi_pointers(e->desc, g, &what);
    if (st != CUBLAS_STATUS_SUCCESS) goto fail;
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
        e->ok = 0;
        e->refusal = st;
        e->refused_in = "cublasLtMatmulAlgoGetHeuristic";
        return HY_OK;
    }
    e->algo = res.algo;
    return HY_OK;

fail:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    lt_entry_free(e);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) {
        e->ok = 0;
        e->refusal = st;
        e->refused_in = what;
        return HY_OK;
    }
    return lt_fail(err, st, what, g);
}

/* The error for a call cuBLASLt refused (hy_lt_run of an entry with ok 0). */
static int lt_refused(hy_error *err, const hy_lt_gemm *g, const lt_entry *e) {
    const lt_key *key = &e->key;
    return hy_fail(err, HY_ERR_RUNTIME,
                   "cuBLASLt has no algorithm for %s (m=%d n=%d k=%d batch=%d, op %c%c, "
                   "lda=%lld ldb=%lld ldd=%lld, D %s%s, alignments A %u B %u D %u bytes; "
                   "%s: %s)",
                   g->op, g->m, g->n, g->k, g->batch, g->ta == CUBLAS_OP_T ? 'T' : 'N',
                   g->tb == CUBLAS_OP_T ? 'T' : 'N', (long long)g->lda, (long long)g->ldb,
                   (long long)g->ldd, g->tD == CUDA_R_32F ? "fp32" : "bf16", lt_epi_name(g->epi),
                   key->al_a, key->al_b, key->al_d, e->refused_in,
                   cublasLtGetStatusName(e->refusal));
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

/* Enqueues g. tolerant: a refusal by cuBLASLt (no algorithm, an attribute
 * it does not take, or cublasLtMatmul itself answering NOT_SUPPORTED) is
 * remembered for g's key and leaves *ran 0 instead of failing. */
static int lt_call(hy_lt *lt, cudaStream_t s, const hy_lt_gemm *g, int tolerant, int *ran,
                   hy_error *err) {
    lt_entry *e = NULL;
    *ran = 0;
    int rc = lt_lookup(lt, g, &e, err);
    if (rc) return rc;
    if (!e->ok) return tolerant ? HY_OK : lt_refused(err, g, e);
    const char *what = "";
    cublasStatus_t st = lt_epi_pointers(e->desc, g, &what);
    if (st != CUBLAS_STATUS_SUCCESS) return lt_fail(err, st, what, g);
    /* C is D: beta = 1 accumulates in place (same pointer, same layout). */
    st = cublasLtMatmul(lt->handle, e->desc, &g->alpha, g->A, e->la, g->B, e->lb, &g->beta,
                        g->D, e->ld, g->D, e->ld, &e->algo, lt->workspace, HY_LT_WORKSPACE, s);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED && tolerant) {
        lt_entry_free(e);
        e->ok = 0;
        e->refusal = st;
        e->refused_in = "cublasLtMatmul";
        return HY_OK;
    }
    if (st != CUBLAS_STATUS_SUCCESS) return lt_fail(err, st, "cublasLtMatmul", g);
    *ran = 1;
    return HY_OK;
}

int hy_lt_run(hy_lt *lt, cudaStream_t s, const hy_lt_gemm *g, hy_error *err) {
    int ran = 0;
    return lt_call(lt, s, g, 0, &ran, err);
}

int hy_lt_try(hy_lt *lt, cudaStream_t s, const hy_lt_gemm *g, int *ran, hy_error *err) {
    *ran = 0;
    if (!lt->epilogues && g->epi != CUBLASLT_EPILOGUE_DEFAULT && g->epi != CUBLASLT_EPILOGUE_BIAS)
        return HY_OK;
    return lt_call(lt, s, g, 1, ran, err);
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
    if (hy_k_lt_open(err)) return HY_ERR_RUNTIME;   /* loaded at the first backend (ltload.cuh) */
    hy_lt *lt = (hy_lt *)calloc(1, sizeof *lt);
    if (lt == NULL) return hy_fail(err, HY_ERR_RUNTIME, "out of memory creating a cuBLASLt context");
    lt->device = device;
    const char *epi = getenv("HY_CUDA_GEMM_EPILOGUES");
    lt->epilogues = !(epi != NULL && strcmp(epi, "0") == 0);

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

/* dbias[o] += bgrad[o]: DGELU_BGRAD's bf16 bias gradient into the fp32 one. */
static __global__ void mm_bgrad_add_kernel(float *dbias, const hy_bf16 *bgrad, int n) {
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o < n) dbias[o] += __bfloat162float(bgrad[o]);
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

/* Runs g, a product into out [N, OC] (row-major), adding bias [OC] (NULL:
 * none) to every row: in the GEMM's epilogue, or, for a bias the epilogue
 * cannot read (not 16-byte aligned), broadcast into out first and the
 * product added onto it. */
static int mm_run_biased(hy_lt *lt, cudaStream_t s, hy_lt_gemm *g, hy_bf16 *out,
                         const hy_bf16 *bias, int N, int OC, hy_error *err) {
    if (bias != NULL && ((uintptr_t)bias & 15) != 0) {
        unsigned rows = (unsigned)(N < 65535 ? N : 65535);
        dim3 grid((unsigned)((OC + 255) / 256), rows);
        mm_bias_broadcast_kernel<<<grid, 256, 0, s>>>(out, bias, N, OC);
        HY_CUDA_CHECK(cudaGetLastError(), err);
        g->beta = 1.0f;
    } else if (bias != NULL) {
        g->epi = CUBLASLT_EPILOGUE_BIAS;
        g->bias = bias;
    }
    return hy_lt_run(lt, s, g, err);
}

int hy_k_matmul_fwd(hy_lt *lt, cudaStream_t s, hy_bf16 *out, const hy_bf16 *inp,
                    const hy_bf16 *w, const hy_bf16 *bias, int N, int C, int OC, hy_error *err) {
    if (N <= 0 || OC <= 0 || C <= 0) return HY_OK;
    hy_lt_gemm g = hy_lt_single("matmul_fwd", CUBLAS_OP_N, CUBLAS_OP_N, OC, N, C,
                                w, OC, inp, C, out, CUDA_R_16BF, OC, 0.0f);
    return mm_run_biased(lt, s, &g, out, bias, N, OC, err);
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

// ----------------------------------------------------------------------------
// The MLP's first layer and its GELU, and their backward (the epilogues)

static int mm_aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

int hy_k_matmul_gelu_fwd(hy_lt *lt, cudaStream_t s, hy_bf16 *out, hy_bf16 *pre,
                         const hy_bf16 *inp, const hy_bf16 *w, const hy_bf16 *bias, int N, int C,
                         int OC, int kind, hy_error *err) {
    int fused = 0, rc;
    hy_lt_gemm g = hy_lt_single("matmul_gelu_fwd", CUBLAS_OP_N, CUBLAS_OP_N, OC, N, C,
                                w, OC, inp, C, out, CUDA_R_16BF, OC, 0.0f);
    /* cuBLASLt's GELU epilogue is the tanh one: the erf GELU runs apart */
    if (kind == HY_GELU_TANH && N > 0 && C > 0 && OC > 0 && OC % 8 == 0 &&
        (bias == NULL || mm_aligned16(bias))) {
        g.epi = bias != NULL ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
        g.bias = bias;
        g.aux = pre;
        g.ldaux = OC;
        if ((rc = hy_lt_try(lt, s, &g, &fused, err))) return rc;
    }
    if (fused) return HY_OK;
    /* Two passes: the product (its bias in the BIAS epilogue), then GELU. */
    if ((rc = hy_k_matmul_fwd(lt, s, pre, inp, w, bias, N, C, OC, err))) return rc;
    return hy_k_gelu_fwd(s, out, pre, (size_t)N * (size_t)OC, kind, err);
}

/* Scratch: the column sums' partials from 0 (the layer's own, then, when
 * no epilogue sums it, dbias_pre's), the epilogue's bf16 bias gradient
 * after the larger of the two, so that it never shares bytes with them. */
static size_t mm_bgrad_offset(int N, int C, int OC) {
    size_t own = hy_k_matmul_bwd_scratch(N, C, OC), pre = hy_k_matmul_bwd_scratch(N, OC, C);
    size_t most = own > pre ? own : pre;
    return (most + 255) / 256 * 256;
}

size_t hy_k_matmul_gelu_bwd_scratch(int N, int C, int OC) {
    if (N <= 0 || C <= 0 || OC <= 0) return 0;
    return mm_bgrad_offset(N, C, OC) + (size_t)C * sizeof(hy_bf16);
}

/* dpre = (dout · wᵀ) ⊙ gelu'(pre), and dbias_pre += its column sums: the
 * DGELU_BGRAD epilogue when cuBLASLt has one for the shape (its bias
 * gradient, bf16, lands in scratch and is added into the fp32 one), else
 * DGELU and our column sum, else the plain product into dgelu and the
 * GELU's backward kernel. The layer's own dw and dbias first, as
 * matmul_bwd computes them. */
int hy_k_matmul_gelu_bwd(hy_lt *lt, cudaStream_t s, hy_bf16 *dpre, float *dbias_pre, float *dw,
                         float *dbias, hy_bf16 *dgelu, const hy_bf16 *dout, const hy_bf16 *inp,
                         const hy_bf16 *pre, const hy_bf16 *w, int N, int C, int OC, int kind,
                         void *scratch, hy_error *err) {
    if (N <= 0 || C <= 0 || OC <= 0) return HY_OK;
    int rc, fused = 0;
    if ((dw != NULL || dbias != NULL) &&
        (rc = hy_k_matmul_bwd(lt, s, NULL, dw, dbias, dout, inp, w, N, C, OC, 0, scratch, err)))
        return rc;
    hy_bf16 *bgrad = (hy_bf16 *)((char *)scratch + mm_bgrad_offset(N, C, OC));
    hy_lt_gemm g = hy_lt_single("matmul_gelu_bwd (dpre)", CUBLAS_OP_T, CUBLAS_OP_N, C, N, OC,
                                w, OC, dout, OC, dpre, CUDA_R_16BF, C, 0.0f);
    if (kind == HY_GELU_TANH && C % 8 == 0) {   /* the DGELU epilogues are tanh's */
        g.aux = (hy_bf16 *)pre;   /* read, not written */
        g.ldaux = C;
        if (dbias_pre != NULL) {
            g.epi = CUBLASLT_EPILOGUE_DGELU_BGRAD;
            g.bgrad = bgrad;
            if ((rc = hy_lt_try(lt, s, &g, &fused, err))) return rc;
        }
        if (!fused) {
            g.epi = CUBLASLT_EPILOGUE_DGELU;
            g.bgrad = NULL;
            if ((rc = hy_lt_try(lt, s, &g, &fused, err))) return rc;
        }
    }
    if (!fused) {
        g.epi = CUBLASLT_EPILOGUE_DEFAULT;
        g.aux = NULL;
        g.ldaux = 0;
        g.D = dgelu;
        if ((rc = hy_lt_run(lt, s, &g, err))) return rc;
        if ((rc = hy_k_gelu_bwd(s, dpre, dgelu, pre, (size_t)N * (size_t)C, 1, kind, err)))
            return rc;
    }
    if (dbias_pre == NULL) return HY_OK;
    if (g.epi == CUBLASLT_EPILOGUE_DGELU_BGRAD) {
        mm_bgrad_add_kernel<<<(unsigned)((C + 255) / 256), 256, 0, s>>>(dbias_pre, bgrad, C);
        HY_CUDA_CHECK(cudaGetLastError(), err);
        return HY_OK;
    }
    return hy_k_matmul_bwd(lt, s, NULL, NULL, dbias_pre, dpre, NULL, NULL, N, OC, C, 0, scratch,
                           err);
}

int hy_k_lm_head_fwd(hy_lt *lt, cudaStream_t s, hy_bf16 *logits, const hy_bf16 *inp,
                     const hy_bf16 *wte, const hy_bf16 *bias, int N, int C, int V,
                     hy_error *err) {
    if (N <= 0 || C <= 0 || V <= 0) return HY_OK;
    hy_lt_gemm g = hy_lt_single("lm_head_fwd", CUBLAS_OP_T, CUBLAS_OP_N, V, N, C,
                                wte, C, inp, C, logits, CUDA_R_16BF, V, 0.0f);
    return mm_run_biased(lt, s, &g, logits, bias, N, V, err);   /* post-LN BERT's decoder bias */
}

int hy_k_lm_head_bwd(hy_lt *lt, cudaStream_t s, hy_bf16 *dinp, float *dwte, float *dbias,
                     const hy_bf16 *dlogits, const hy_bf16 *inp, const hy_bf16 *wte, int N,
                     int C, int V, int overwrite, void *scratch, hy_error *err) {
    if (N <= 0 || C <= 0 || V <= 0) return HY_OK;
    int rc;
    /* the bias's gradient: matmul_bwd's column sums of dlogits */
    if (dbias != NULL &&
        (rc = hy_k_matmul_bwd(lt, s, NULL, NULL, dbias, dlogits, NULL, NULL, N, C, V, 0, scratch,
                              err)))
        return rc;
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
    HY_CUDA_PRELOAD(mm_bgrad_add_kernel, err);
    return HY_OK;
}
