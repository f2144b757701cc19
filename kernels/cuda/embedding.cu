/*
 * embedding.cu — token + learned position embedding, CUDA backend
 * (kernels/cpu/embedding.c on the CPU):
 *   forward   out[b,t,:] = wte[tokens[b,t],:] + type[:] + wpe[t,:]
 *             (bf16, summed in fp32 in that order, rounded once; wpe
 *             NULL, Llama's: no position; type NULL: no token type, else
 *             BERT's row 0)
 *   backward  dwte[tokens[b,t],:] += dout[b,t,:]               (fp32)
 *             dwpe[t,:]           += dout[b,t,:]               (fp32)
 *
 * Forward: one block per token row, threads over the C columns.
 *
 * dwpe: one thread per (t, c) adds dout[0,t,c], dout[1,t,c], ... in order
 * of b onto dwpe[t,c] — the CPU's order exactly.
 *
 * dwte without atomics (a token may occur many times, and float atomics
 * would make the sum's order, and so its bits, vary between runs):
 *   1. sort the N = B·T positions by (token, position): each position's
 *      rank is the number of positions with a smaller key, counted by one
 *      thread per position over the whole token list, tiled through shared
 *      memory. The keys are distinct, so the ranks are a permutation and
 *      sorted[rank] = position needs no atomics. Cost: N² integer compares
 *      (67 M for N = 8192, about 10 µs on an H100-class GPU; 4.3 G for
 *      N = 65536, of order a millisecond) — quadratic, but the compares
 *      are from shared memory, broadcast, and it needs no sort library;
 *   2. one block per run of equal tokens in the sorted list (the first
 *      entry of each run; the others exit at once), its threads over the
 *      columns, adds that token's rows of dout in position order onto
 *      dwte[token] — again the CPU's order, so equal inputs give the CPU's
 *      fp32 sums. A run's end is found by warp 0, 32 entries per step.
 *      Load balance follows the token histogram: a token occurring k times
 *      costs one block k row reads per column (grid.y splits C in chunks of
 *      EMB_THREADS so wide rows still spread over several blocks).
 * Scratch: N ints (the sorted positions).
 */
#include <limits.h>
#include <stddef.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "check.cuh"
#include "kernels.cuh"

#define EMB_THREADS 256
#define EMB_TILE 256   /* tokens per shared-memory tile of the rank count (== its block size) */

static unsigned emb_col_threads(int C) {
    int t = (C + 31) / 32 * 32;
    return (unsigned)(t < EMB_THREADS ? t : EMB_THREADS);
}

// ----------------------------------------------------------------------------
// Forward

/* Block n = b·T + t; threads over c. */
static __global__ void emb_fwd_kernel(hy_bf16 *out, const int *tokens, const hy_bf16 *wte,
                               const hy_bf16 *wpe, const hy_bf16 *type, int T, int C) {
    int n = blockIdx.x, t = n % T;
    const hy_bf16 *te = wte + (size_t)tokens[n] * C;
    hy_bf16 *o = out + (size_t)n * C;
    if (wpe == NULL && type == NULL) {
        for (int c = threadIdx.x; c < C; c += blockDim.x) o[c] = te[c];
        return;
    }
    const hy_bf16 *pe = wpe ? wpe + (size_t)t * C : NULL;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float v = __bfloat162float(te[c]);
        if (type) v += __bfloat162float(type[c]);
        if (pe) v += __bfloat162float(pe[c]);
        o[c] = __float2bfloat16(v);
    }
}

// ----------------------------------------------------------------------------
// Backward: dwpe

/* Grid (T, ceil(C/blockDim)): dwpe[t,c] += dout[b,t,c] for b = 0, 1, ... */
static __global__ void emb_dwpe_kernel(float *dwpe, const hy_bf16 *dout, int B, int T, int C) {
    int t = blockIdx.x;
    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float *dst = dwpe + (size_t)t * C + c;
    float acc = *dst;
    for (int b = 0; b < B; b++) acc += __bfloat162float(dout[((size_t)b * T + t) * C + c]);
    *dst = acc;
}

// ----------------------------------------------------------------------------
// Backward: dwte

/* sorted[rank(n)] = n, rank(n) = #{m : (tok[m], m) < (tok[n], n)}. Block
 * size EMB_TILE; every thread takes part in every tile load, even past N. */
static __global__ void emb_sort_kernel(int *sorted, const int *tokens, int N) {
    __shared__ int tile[EMB_TILE];
    int n = blockIdx.x * EMB_TILE + threadIdx.x;
    int tn = n < N ? tokens[n] : 0;
    int rank = 0;
    for (int base = 0; base < N; base += EMB_TILE) {
        int j = base + (int)threadIdx.x;
        tile[threadIdx.x] = j < N ? tokens[j] : INT_MAX;
        __syncthreads();
        int lim = min(EMB_TILE, N - base);
        for (int jj = 0; jj < lim; jj++) {
            int tk = tile[jj];
            rank += (tk < tn) | ((tk == tn) & (base + jj < n));
        }
        __syncthreads();
    }
    if (n < N) sorted[rank] = n;
}

/* Grid (N, ceil(C/blockDim)): block r owns the run of equal tokens that
 * starts at sorted[r] (if one does) and the columns of its blockIdx.y. */
static __global__ void emb_dwte_kernel(float *dwte, const hy_bf16 *dout, const int *tokens,
                                const int *sorted, int N, int C) {
    __shared__ int s_end;
    int r = blockIdx.x;
    int tok = tokens[sorted[r]];
    if (r > 0 && tokens[sorted[r - 1]] == tok) return;   /* not a run start: whole block */

    if (threadIdx.x < 32) {
        /* The run's end: the first index after r whose token differs (or N). */
        int lane = threadIdx.x, end = N;
        for (int base = r + 1; base < N; base += 32) {
            int i = base + lane;
            int differs = i >= N || tokens[sorted[i]] != tok;
            unsigned ball = __ballot_sync(0xffffffffu, differs);
            if (ball != 0) {
                end = base + __ffs((int)ball) - 1;
                break;
            }
        }
        if (lane == 0) s_end = end;
    }
    __syncthreads();

    int c = blockIdx.y * blockDim.x + threadIdx.x;
    if (c >= C) return;
    int end = s_end;
    float *dst = dwte + (size_t)tok * C + c;
    float acc = *dst;
#pragma unroll 4
    for (int i = r; i < end; i++) acc += __bfloat162float(dout[(size_t)sorted[i] * C + c]);
    *dst = acc;
}

// ----------------------------------------------------------------------------
// Launchers

int hy_k_embedding_fwd(cudaStream_t s, hy_bf16 *out, const int *tokens, const hy_bf16 *wte,
                       const hy_bf16 *wpe, const hy_bf16 *type, int B, int T, int C,
                       hy_error *err) {
    if (B <= 0 || T <= 0 || C <= 0) return HY_OK;
    unsigned rows = (unsigned)((size_t)B * T);
    emb_fwd_kernel<<<rows, emb_col_threads(C), 0, s>>>(out, tokens, wte, wpe, type, T, C);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

size_t hy_k_embedding_bwd_scratch(int B, int T, int C) {
    (void)C;
    if (B <= 0 || T <= 0) return 0;
    return (size_t)B * (size_t)T * sizeof(int);
}

int hy_k_embedding_bwd(cudaStream_t s, float *dwte, float *dwpe, const hy_bf16 *dout,
                       const int *tokens, int B, int T, int C, void *scratch, hy_error *err) {
    if (B <= 0 || T <= 0 || C <= 0) return HY_OK;
    unsigned threads = emb_col_threads(C);
    unsigned col_blocks = (unsigned)((C + (int)threads - 1) / (int)threads);
    if (dwpe != NULL) {
        emb_dwpe_kernel<<<dim3((unsigned)T, col_blocks), threads, 0, s>>>(dwpe, dout, B, T, C);
        HY_CUDA_CHECK(cudaGetLastError(), err);
    }
    if (dwte != NULL) {
        int N = B * T;
        int *sorted = (int *)scratch;
        emb_sort_kernel<<<(unsigned)((N + EMB_TILE - 1) / EMB_TILE), EMB_TILE, 0, s>>>(sorted, tokens, N);
        HY_CUDA_CHECK(cudaGetLastError(), err);
        emb_dwte_kernel<<<dim3((unsigned)N, col_blocks), threads, 0, s>>>(dwte, dout, tokens, sorted, N, C);
        HY_CUDA_CHECK(cudaGetLastError(), err);
    }
    return HY_OK;
}

// ----------------------------------------------------------------------------
// Preload (kernels.cuh)

int hy_k_embedding_preload(hy_error *err) {
    HY_CUDA_PRELOAD(emb_fwd_kernel, err);
    HY_CUDA_PRELOAD(emb_dwpe_kernel, err);
    HY_CUDA_PRELOAD(emb_sort_kernel, err);
    HY_CUDA_PRELOAD(emb_dwte_kernel, err);
    return HY_OK;
}
