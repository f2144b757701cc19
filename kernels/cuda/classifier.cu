/*
 * classifier.cu — fused softmax + cross-entropy + its gradient, in place
 * over the bf16 logits, CUDA backend (kernels/cpu/classifier.c on the CPU).
 *
 * For each row n of logits[N, Vp] (V real columns, Vp − V padding) with
 * target y = targets[n] in [0, V), and count = the number of such rows:
 *   mx = max_i z_i,  sum = Σ_i exp(z_i − mx)          (z = logits[n, :V], fp32)
 *   loss_n = log(sum) + mx − z_y
 *   z_i ← g · (exp(z_i − mx)/sum − [i = y]),  g = grad_scale / count   (bf16)
 * Rows with y = −1, rows with a bad target (neither −1 nor in [0, V): they
 * set *bad = 1 and are otherwise treated as ignored, since a device op
 * cannot fail synchronously), and the padding columns all become 0.
 * *loss_acc += loss_scale · (Σ_n loss_n / count), nothing when count = 0.
 * *hits_acc += the counted rows whose first maximum is at y (argmax hits).
 *
 * Three kernels, all deterministic:
 *   1. count: one block counts the counted rows (and flags bad targets)
 *      into scratch, since every row's gradient divides by count;
 *   2. rows: one block per row. Pass 1 keeps, per thread, an online
 *      (max, Σ exp) over its columns; the threads are merged by a warp xor
 *      butterfly and then warp by warp in order, identically in every
 *      thread. Pass 2 writes the gradient over the logits. The target's
 *      logit is read before the first barrier, so before any write. The
 *      row loss is formed in double and stored (double) in scratch; as on
 *      the CPU, the target's gradient is g·((e_y − sum)/sum) in double,
 *      which keeps the digits of p_y − 1 when p_y is close to 1. A row is
 *      a hit when z_y = mx and no column before y equals mx (pass 2 reads
 *      every column before writing it; __syncthreads_or joins the
 *      threads); thread 0 adds 1.0f atomically, exact in any order;
 *   3. loss: one block sums the row losses in a fixed order (double) and
 *      adds loss_scale · (float)(sum/count) to *loss_acc.
 * Scratch: 16 bytes (count) + N doubles (row losses).
 * Cost: the row is read twice and written once (bf16, 16 bytes per access
 * when Vp is a multiple of 8, as the padded vocabulary is), two expf per
 * element; for GPT-2 (N = 8192, Vp = 50304) about 0.8 GB of traffic.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math_constants.h>

#include "check.cuh"
#include "kernels.cuh"
#include "pack.cuh"

#define CLS_ROW_THREADS 512
#define CLS_ONE_THREADS 1024   /* the single-block count and loss kernels */
#define CLS_HEADER 16          /* bytes of scratch before the row losses */

// ----------------------------------------------------------------------------
// 1. count

static __global__ void cls_count_kernel(int *count, int *bad, const int *targets, int N, int V) {
    __shared__ int s_ok[32], s_bad[32];
    int ok = 0, nbad = 0;
    for (int n = threadIdx.x; n < N; n += blockDim.x) {
        int y = targets[n];
        if (y == -1) continue;
        if (y >= 0 && y < V) ok++;
        else nbad++;
    }
    for (int off = 16; off > 0; off >>= 1) {
        ok += __shfl_xor_sync(0xffffffffu, ok, off);
        nbad += __shfl_xor_sync(0xffffffffu, nbad, off);
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    if (lane == 0) {
        s_ok[warp] = ok;
        s_bad[warp] = nbad;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int tok = 0, tbad = 0;
        for (int w = 0; w < nwarps; w++) {
            tok += s_ok[w];
            tbad += s_bad[w];
        }
        *count = tok;
        if (tbad > 0 && bad != NULL) *bad = 1;
    }
}

// ----------------------------------------------------------------------------
// 2. rows

/* Merges two online-softmax states (max, Σ exp(x − max)); a state that saw
 * no column has sum 0 and adds nothing (even when both maxima are -inf). */
static __device__ __forceinline__ void cls_merge(float &m, float &s, float m2, float s2) {
    float mm = fmaxf(m, m2);
    float a = s == 0.0f ? 0.0f : s * expf(m - mm);
    float b = s2 == 0.0f ? 0.0f : s2 * expf(m2 - mm);
    m = mm;
    s = a + b;
}

/* Folds one column's logit, or (VEC) a pack of 8 of which the first `valid`
 * are real columns, into the thread's online (max, Σ exp). */
static __device__ __forceinline__ void cls_fold(float &m, float &s, const float *x, int valid) {
    float cm = x[0];
    for (int j = 1; j < valid; j++) cm = fmaxf(cm, x[j]);
    if (cm > m) {
        s *= expf(m - cm);   /* 0 while s is: no NaN from -inf - -inf, cm is finite */
        m = cm;
    }
    for (int j = 0; j < valid; j++) s += expf(x[j] - m);
}

/* x[0..8) from a pack at p (VEC), or x[0] from the one logit at p. */
template <int VEC>
static __device__ __forceinline__ void cls_read(float x[8], const hy_bf16 *p) {
    if (VEC) {
        hy_k_unpack8(hy_k_load8(p), x);
    } else {
        x[0] = __bfloat162float(*p);
    }
}

/* One block per row. VEC: Vp a multiple of 8 and the rows 16-byte aligned
 * (the padded vocabulary always is), 8 logits per access. */
template <int VEC>
static __global__ void cls_row_kernel(hy_bf16 *logits, double *losses, float *hits_acc,
                                      const int *count_p, const int *targets, int V, int Vp,
                                      float grad_scale) {
    __shared__ float s_m[32], s_s[32];
    const int W = VEC ? 8 : 1, step = W * blockDim.x;
    int n = blockIdx.x;
    hy_bf16 *z = logits + (size_t)n * Vp;
    int y = targets[n];
    if (y < 0 || y >= V) {   /* ignored (-1) or bad: the row does not count */
        for (int c = threadIdx.x * W; c < Vp; c += step) {
            if (VEC) {
                const float zero[8] = { 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f };
                *(hy_k_bf16x8 *)(z + c) = hy_k_pack8(zero);
            } else {
                z[c] = __float2bfloat16(0.0f);
            }
        }
        if (threadIdx.x == 0) losses[n] = 0.0;
        return;
    }
    float zy = __bfloat162float(z[y]);   /* before the barrier below, so before any write */

    float m = -CUDART_INF_F, s = 0.0f, x[8];
    for (int c = threadIdx.x * W; c < V; c += step) {
        cls_read<VEC>(x, z + c);
        cls_fold(m, s, x, min(W, V - c));
    }
    for (int off = 16; off > 0; off >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        cls_merge(m, s, m2, s2);
    }
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    if (lane == 0) {
        s_m[warp] = m;
        s_s[warp] = s;
    }
    __syncthreads();
    float mx = s_m[0], sum = s_s[0];
    for (int w = 1; w < nwarps; w++) cls_merge(mx, sum, s_m[w], s_s[w]);

    if (threadIdx.x == 0) losses[n] = log((double)sum) + ((double)mx - (double)zy);

    int count = *count_p;   /* >= 1: this row counts */
    double g = (double)grad_scale / count;
    float gs = (float)(g / sum);
    double ey = (double)expf(zy - mx);
    float gy = (float)(g * ((ey - sum) / sum));
    int earlier = 0;   /* a column before y holds the maximum too */
    for (int c = threadIdx.x * W; c < Vp; c += step) {
        float v[8];
        cls_read<VEC>(x, z + c);
        for (int j = 0; j < W; j++) {
            int i = c + j;
            earlier |= i < y && x[j] == mx;
            v[j] = i >= V ? 0.0f : i == y ? gy : expf(x[j] - mx) * gs;
        }
        if (VEC) {
            *(hy_k_bf16x8 *)(z + c) = hy_k_pack8(v);
        } else {
            z[c] = __float2bfloat16(v[0]);
        }
    }
    /* Every thread reaches this barrier: the early return above is per
     * block (the whole row is ignored or not). */
    int tie_before = __syncthreads_or(earlier);
    if (hits_acc != NULL && threadIdx.x == 0 && zy == mx && !tie_before) atomicAdd(hits_acc, 1.0f);
}

// ----------------------------------------------------------------------------
// 3. loss

static __global__ void cls_loss_kernel(float *loss_acc, const double *losses, const int *count_p, int N,
                                float loss_scale) {
    __shared__ double s_w[32];
    double t = 0.0;
    for (int n = threadIdx.x; n < N; n += blockDim.x) t += losses[n];
    for (int off = 16; off > 0; off >>= 1) t += __shfl_xor_sync(0xffffffffu, t, off);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    if (lane == 0) s_w[warp] = t;
    __syncthreads();
    if (threadIdx.x == 0) {
        double sum = 0.0;
        for (int w = 0; w < nwarps; w++) sum += s_w[w];
        int count = *count_p;
        if (count > 0) {
            float mean = (float)(sum / count);
            *loss_acc += loss_scale * mean;
        }
    }
}

// ----------------------------------------------------------------------------
// Launcher

size_t hy_k_classifier_scratch(int N) {
    return CLS_HEADER + (size_t)(N > 0 ? N : 0) * sizeof(double);
}

int hy_k_classifier(cudaStream_t s, hy_bf16 *logits, float *loss_acc, float *hits_acc,
                    const int *targets, int N, int V, int Vp, float grad_scale, float loss_scale,
                    void *scratch, int *bad, hy_error *err) {
    if (N <= 0) return HY_OK;
    int *count = (int *)scratch;
    double *losses = (double *)((char *)scratch + CLS_HEADER);
    cls_count_kernel<<<1, CLS_ONE_THREADS, 0, s>>>(count, bad, targets, N, V);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    if (Vp % 8 == 0 && ((uintptr_t)logits & 15) == 0)
        cls_row_kernel<1><<<(unsigned)N, CLS_ROW_THREADS, 0, s>>>(logits, losses, hits_acc, count,
                                                                  targets, V, Vp, grad_scale);
    else
        cls_row_kernel<0><<<(unsigned)N, CLS_ROW_THREADS, 0, s>>>(logits, losses, hits_acc, count,
                                                                  targets, V, Vp, grad_scale);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    if (loss_acc != NULL) {
        cls_loss_kernel<<<1, CLS_ONE_THREADS, 0, s>>>(loss_acc, losses, count, N, loss_scale);
        HY_CUDA_CHECK(cudaGetLastError(), err);
    }
    return HY_OK;
}

// ----------------------------------------------------------------------------
// Preload (kernels.cuh)

int hy_k_classifier_preload(hy_error *err) {
    HY_CUDA_PRELOAD(cls_count_kernel, err);
    HY_CUDA_PRELOAD(cls_row_kernel<0>, err);
    HY_CUDA_PRELOAD(cls_row_kernel<1>, err);
    HY_CUDA_PRELOAD(cls_loss_kernel, err);
    return HY_OK;
}
