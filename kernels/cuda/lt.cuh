/*
 * lt.cuh — the one cuBLASLt GEMM call of the CUDA backend, used by
 * matmul.cu (dense layers, LM head; attention.cu has its own kernels).
 * Internal to kernels/cuda: backend.cu needs only kernels.cuh.
 *
 * cuBLASLt is column-major. A row-major array X[R, K] with row stride ld is,
 * read column-major, the matrix Xᵀ [K, R] with the same ld; so every
 * row-major product of the model is written as the column-major product of
 * the transposes, with no copies (see matmul.cu for each
 * mapping). In the terms of one call, column-major throughout:
 *
 *   D[m,n] = alpha · op(A)[m,k] · op(B)[k,n] + beta · D  (+ bias[m] per column)
 *
 * op(X) = X (CUBLAS_OP_N) or Xᵀ (CUBLAS_OP_T); A's stored shape is [m,k] for
 * N and [k,m] for T (B likewise [k,n] or [n,k]). A and B are bf16; D is bf16
 * or fp32 (CUDA_R_32F: the fp32 weight gradients); every product is
 * accumulated in fp32 (CUBLAS_COMPUTE_32F). C is D itself (beta = 1 adds
 * into it). batch > 1 runs `batch` products with the pointers advanced by
 * sa, sb, sd elements each (strided batch).
 *
 * The epilogue (matmul.cu says which GELU and the rules for its matrix):
 *   CUBLASLT_EPILOGUE_DEFAULT     D = α·op(A)·op(B) + β·D
 *   CUBLASLT_EPILOGUE_BIAS        ... + bias[m] per column
 *   CUBLASLT_EPILOGUE_GELU_AUX_BIAS  aux = α·op(A)·op(B) + bias, D = gelu(aux)
 *   CUBLASLT_EPILOGUE_DGELU       D = (α·op(A)·op(B)) ⊙ gelu'(aux)
 *   CUBLASLT_EPILOGUE_DGELU_BGRAD  the same, and bgrad[m] = Σ over the n
 *                                  columns of D
 * aux is bf16 [m, n] with leading dimension ldaux (a multiple of 8), D's
 * shape; bgrad is bf16, written, not added to.
 */
#ifndef HY_CUDA_LT_CUH
#define HY_CUDA_LT_CUH

#include <stdint.h>
#include <string.h>

#include <cublasLt.h>

#include "kernels.cuh"

typedef struct {
    const char *op;          /* the op's name, for error messages */
    cublasOperation_t ta, tb;
    int m, n, k;
    int batch;               /* 1: a single product */
    const hy_bf16 *A;
    int64_t lda, sa;
    const hy_bf16 *B;
    int64_t ldb, sb;
    void *D;                 /* bf16 or fp32, as tD says */
    cudaDataType_t tD;       /* CUDA_R_16BF or CUDA_R_32F */
    int64_t ldd, sd;
    cublasLtEpilogue_t epi;  /* CUBLASLT_EPILOGUE_DEFAULT unless set */
    const hy_bf16 *bias;     /* bf16 [m], added per column (BIAS, GELU_AUX_BIAS) */
    hy_bf16 *aux;            /* GELU_AUX_BIAS: written; DGELU*: read */
    int64_t ldaux;
    hy_bf16 *bgrad;          /* DGELU_BGRAD: bf16 [m], written */
    float alpha, beta;
} hy_lt_gemm;

/* A single product (batch 1) with alpha = 1 and no bias: most of them. */
static inline hy_lt_gemm hy_lt_single(const char *op, cublasOperation_t ta, cublasOperation_t tb,
                                      int m, int n, int k, const hy_bf16 *A, int64_t lda,
                                      const hy_bf16 *B, int64_t ldb, void *D, cudaDataType_t tD,
                                      int64_t ldd, float beta) {
    hy_lt_gemm g;
    memset(&g, 0, sizeof g);
    g.op = op;
    g.ta = ta;
    g.tb = tb;
    g.m = m;
    g.n = n;
    g.k = k;
    g.batch = 1;
    g.A = A;
    g.lda = lda;
    g.B = B;
    g.ldb = ldb;
    g.D = D;
    g.tD = tD;
    g.ldd = ldd;
    g.epi = CUBLASLT_EPILOGUE_DEFAULT;
    g.alpha = 1.0f;
    g.beta = beta;
    return g;
}

/* Enqueues one (batched) GEMM on s. The algorithm is chosen by cuBLASLt's
 * heuristic the first time this shape, layout, epilogue and alignment is
 * seen and reused after that. */
int hy_lt_run(hy_lt *lt, cudaStream_t s, const hy_lt_gemm *g, hy_error *err);

/* hy_lt_run for an epilogue that cuBLASLt may not have: *ran = 1 when it
 * was enqueued, 0 (and HY_OK) when cuBLASLt refused it on this device for
 * this shape and these alignments (no algorithm, or NOT_SUPPORTED from
 * the call itself) and the caller must do the work another way. The
 * answer is remembered like the algorithm, so the eager iteration and
 * every replay decide alike. Always 0 for the GELU epilogues when the
 * rank's epilogues are off (HY_CUDA_GEMM_EPILOGUES=0 in the environment
 * when the backend was created). */
int hy_lt_try(hy_lt *lt, cudaStream_t s, const hy_lt_gemm *g, int *ran, hy_error *err);

#endif
