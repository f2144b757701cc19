/*
 * lt.cuh — the one cuBLASLt GEMM call of the CUDA backend, shared by
 * matmul.cu (dense layers, LM head) and attention.cu (per-head products).
 * Internal to kernels/cuda: backend.cu needs only kernels.cuh.
 *
 * cuBLASLt is column-major. A row-major array X[R, K] with row stride ld is,
 * read column-major, the matrix Xᵀ [K, R] with the same ld; so every
 * row-major product of the model is written as the column-major product of
 * the transposes, with no copies (see matmul.cu and attention.cu for each
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
 */
#ifndef HY_CUDA_LT_CUH
#define HY_CUDA_LT_CUH

#include <stdint.h>

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
    const hy_bf16 *bias;     /* bf16 [m], added per column (epilogue); NULL: none */
    float alpha, beta;
} hy_lt_gemm;

/* Enqueues one (batched) GEMM on s. The algorithm is chosen by cuBLASLt's
 * heuristic the first time this shape, layout and alignment is seen and
 * reused after that. */
int hy_lt_run(hy_lt *lt, cudaStream_t s, const hy_lt_gemm *g, hy_error *err);

#endif
