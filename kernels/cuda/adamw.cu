/*
 * adamw.cu — the optimizer step, the gradient norm and clipping, and the
 * small elementwise ops, CUDA backend (kernels/cpu/adamw.c and the
 * run_sumsq / run_clip commands of kernels/cpu/math.c on the CPU).
 *
 * AdamW (PyTorch's torch.optim.AdamW), per element, t = hp->step ≥ 1,
 * f = *factor (the clip factor), all fp32 on the fp32 master weights:
 *   g = f · grad
 *   m ← β1 m + (1−β1) g,   v ← β2 v + (1−β2) g²
 *   p ← p − lr · (m/(1−β1^t) / (sqrt(v/(1−β2^t)) + eps) + λ p)
 * then the bf16 compute copy ← p (round to nearest even). One launch
 * takes a batch of tensors (kernels.cuh's hy_adamw_batch: fuse.cu gathers
 * a rank's consecutive adamw calls into one), each element finding its
 * tensor, hence its block and weight decay, by a binary search over the
 * batch's table (in shared memory). hp and factor
 * live in device memory and are read when the kernel runs, so a replayed
 * graph uses this step's lr, t and clip factor. A non-finite factor (the
 * norm overflowed, or some gradient is NaN) makes every thread return
 * before writing anything. The bias corrections are computed as on the
 * CPU, 1 − pow(β, t) in double then cast to float, once per block (thread 0,
 * shared memory): double pow is too slow to run per element.
 *
 * Gradient norm, deterministic: sumsq runs SUMSQ_THREADS × nblocks(n)
 * threads over x (grid-stride, each summing x² in double), reduces each
 * block in a fixed tree into partial[block] (scratch), then one block adds
 * the partials in a fixed order into *acc. nblocks depends on n only, never
 * on the device, so the bits are the same everywhere. Scratch:
 * min(SUMSQ_MAX_BLOCKS, ceil(n/SUMSQ_THREADS)) doubles.
 * clip: one thread sums the per-rank partials in order, stores the norm
 * and the factor min(1, max_norm/(norm + 1e-6)) (1 if max_norm ≤ 0, NaN if
 * the sum is not finite), exactly as hy_cpu_clip_factor.
 *
 * add (bf16), add_f32 and to_bf16 are grid-stride loops, 16 bytes per
 * thread and step when every pointer is 16-byte aligned.
 */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math_constants.h>

#include "check.cuh"
#include "kernels.cuh"

#define EW_THREADS 256
#define EW_MAX_BLOCKS 65536u
#define SUMSQ_THREADS 256
#define SUMSQ_MAX_BLOCKS 1024

static unsigned ew_blocks(size_t work) {
    size_t b = (work + EW_THREADS - 1) / EW_THREADS;
    if (b < 1) b = 1;
    return b > EW_MAX_BLOCKS ? EW_MAX_BLOCKS : (unsigned)b;
}

static int ew_aligned(const void *p) { return ((uintptr_t)p & 15) == 0; }

// ----------------------------------------------------------------------------
// AdamW, many tensors per launch (kernels.cuh's hy_adamw_batch)

/* The tensor of batch element i: the last k with start[k] <= i. */
static __device__ __forceinline__ int adamw_tensor(const size_t *start, int tensors, size_t i) {
    int lo = 0, hi = tensors - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) >> 1;
        if (start[mid] <= i) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

static __global__ void adamw_kernel(const hy_adamw_batch b) {
    __shared__ float bc[2];
    __shared__ size_t s_start[HY_ADAMW_TENSORS];
    __shared__ unsigned char s_decay[HY_ADAMW_TENSORS], s_block[HY_ADAMW_TENSORS];
    float f = *b.factor;
    if (!isfinite(f)) return;   /* the same for every thread: nothing is written */
    if (threadIdx.x == 0) {
        double t = (double)b.hp->step;
        bc[0] = (float)(1.0 - pow((double)b.hp->beta1, t));
        bc[1] = (float)(1.0 - pow((double)b.hp->beta2, t));
    }
    for (int k = threadIdx.x; k < b.tensors; k += blockDim.x) {
        s_start[k] = b.start[k];
        s_decay[k] = b.decay[k];
        s_block[k] = b.in_block[k];
    }
    __syncthreads();
    float lr = b.hp->lr, b1 = b.hp->beta1, b2 = b.hp->beta2, eps = b.hp->eps, wd = b.hp->weight_decay;
    float bc1 = bc[0], bc2 = bc[1];

    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < b.n; i += stride) {
        int k = adamw_tensor(s_start, b.tensors, i);
        const hy_adamw_block *blk = &b.block[s_block[k]];
        size_t j = i - blk->start;
        float g = blk->grad[j] * f;
        float mi = b1 * blk->m[j] + (1.0f - b1) * g;
        float vi = b2 * blk->v[j] + (1.0f - b2) * g * g;
        blk->m[j] = mi;
        blk->v[j] = vi;
        float mhat = mi / bc1, vhat = vi / bc2;
        float p = blk->param[j];
        p -= lr * (mhat / (sqrtf(vhat) + eps) + (s_decay[k] ? wd : 0.0f) * p);
        blk->param[j] = p;
        if (blk->param_compute != NULL) blk->param_compute[j] = __float2bfloat16(p);
    }
}

/* Whether x .. x+n continues the range that starts at base and is len long. */
#define ADAMW_FOLLOWS(x, base, len) ((base) != NULL && (x) == (base) + (len))

int hy_k_adamw_batch_add(hy_adamw_batch *b, float *param, hy_bf16 *param_compute,
                         const float *grad, float *m, float *v, size_t n,
                         const hy_adamw_hparams *hp, const float *factor, int decay) {
    if (b->tensors == 0) {
        memset(b, 0, sizeof *b);
        b->hp = hp;
        b->factor = factor;
    } else if (b->hp != hp || b->factor != factor || b->tensors == HY_ADAMW_TENSORS) {
        return 0;
    }
    hy_adamw_block *last = b->blocks ? &b->block[b->blocks - 1] : NULL;
    int follows = last && ADAMW_FOLLOWS(param, last->param, last->n) &&
                  ADAMW_FOLLOWS(grad, last->grad, last->n) && ADAMW_FOLLOWS(m, last->m, last->n) &&
                  ADAMW_FOLLOWS(v, last->v, last->n) &&
                  (param_compute == NULL ? last->param_compute == NULL
                                         : ADAMW_FOLLOWS(param_compute, last->param_compute, last->n));
    if (!follows) {
        if (b->blocks == HY_ADAMW_BLOCKS) return 0;
        last = &b->block[b->blocks++];
        *last = (hy_adamw_block){ param, param_compute, grad, m, v, b->n, 0 };
    }
    b->start[b->tensors] = b->n;
    b->decay[b->tensors] = decay != 0;
    b->in_block[b->tensors] = (unsigned char)(last - b->block);
    b->tensors++;
    last->n += n;
    b->n += n;
    return 1;
}

int hy_k_adamw(cudaStream_t s, const hy_adamw_batch *b, hy_error *err) {
    if (b->n == 0) return HY_OK;
    adamw_kernel<<<ew_blocks(b->n), EW_THREADS, 0, s>>>(*b);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

// ----------------------------------------------------------------------------
// Gradient norm: sumsq and clip

/* Sum of v over the block, fixed tree (xor butterfly in each warp, then
 * the warps' sums in order by thread 0). Valid in thread 0. */
static __device__ double sumsq_block_sum(double v) {
    __shared__ double warp_sums[32];
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    double t = 0.0;
    if (threadIdx.x == 0)
        for (int w = 0; w < nwarps; w++) t += warp_sums[w];
    return t;
}

static __global__ void sumsq_partial_kernel(double *partial, const float *x, size_t n) {
    double acc = 0.0;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        acc += (double)x[i] * x[i];
    double t = sumsq_block_sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = t;
}

static __global__ void sumsq_finish_kernel(double *acc, const double *partial, int nblocks) {
    double t = 0.0;
    for (int i = threadIdx.x; i < nblocks; i += blockDim.x) t += partial[i];
    t = sumsq_block_sum(t);
    if (threadIdx.x == 0) *acc += t;
}

static int sumsq_nblocks(size_t n) {
    size_t b = (n + SUMSQ_THREADS - 1) / SUMSQ_THREADS;
    if (b < 1) b = 1;
    return b > SUMSQ_MAX_BLOCKS ? SUMSQ_MAX_BLOCKS : (int)b;
}

size_t hy_k_sumsq_scratch(size_t n) { return (size_t)sumsq_nblocks(n) * sizeof(double); }

int hy_k_sumsq(cudaStream_t s, double *acc, const float *x, size_t n, void *scratch,
               hy_error *err) {
    if (n == 0) return HY_OK;
    int nb = sumsq_nblocks(n);
    double *partial = (double *)scratch;
    sumsq_partial_kernel<<<(unsigned)nb, SUMSQ_THREADS, 0, s>>>(partial, x, n);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    sumsq_finish_kernel<<<1, SUMSQ_THREADS, 0, s>>>(acc, partial, nb);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

/* One thread: run_clip + hy_cpu_clip_factor of the CPU backend. */
static __global__ void clip_kernel(float *factor, float *norm, const double *partials, int n,
                            float max_norm) {
    double total = 0.0;
    for (int i = 0; i < n; i++) total += partials[i];
    double rt = sqrt(total);
    *norm = (float)rt;
    float f;
    if (!isfinite(total)) {
        f = CUDART_NAN_F;
    } else if (max_norm <= 0.0f) {
        f = 1.0f;
    } else {
        double c = (double)max_norm / (rt + 1e-6);
        f = c < 1.0 ? (float)c : 1.0f;
    }
    *factor = f;
}

int hy_k_clip(cudaStream_t s, float *factor, float *norm, const double *partials, int n,
              float max_norm, hy_error *err) {
    clip_kernel<<<1, 1, 0, s>>>(factor, norm, partials, n, max_norm);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

// ----------------------------------------------------------------------------
// Elementwise: add (bf16), add_f32, to_bf16

/* 8 bf16 or 4 floats: one 16-byte access. */
struct __align__(16) ew_bf16x8 {
    __nv_bfloat162 h[4];
};

static __global__ void add_bf16_kernel(hy_bf16 *acc, const hy_bf16 *x, size_t n, size_t nvec) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t gid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t v = gid; v < nvec; v += stride) {
        ew_bf16x8 a = reinterpret_cast<const ew_bf16x8 *>(acc)[v];
        ew_bf16x8 b = reinterpret_cast<const ew_bf16x8 *>(x)[v], y;
        for (int j = 0; j < 4; j++) {
            float2 fa = __bfloat1622float2(a.h[j]), fb = __bfloat1622float2(b.h[j]);
            y.h[j] = __floats2bfloat162_rn(fa.x + fb.x, fa.y + fb.y);
        }
        reinterpret_cast<ew_bf16x8 *>(acc)[v] = y;
    }
    for (size_t i = nvec * 8 + gid; i < n; i += stride)
        acc[i] = __float2bfloat16(__bfloat162float(acc[i]) + __bfloat162float(x[i]));
}

static __global__ void add_f32_kernel(float *acc, const float *x, size_t n, size_t nvec) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t gid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t v = gid; v < nvec; v += stride) {
        float4 a = reinterpret_cast<const float4 *>(acc)[v];
        float4 b = reinterpret_cast<const float4 *>(x)[v];
        a.x += b.x;
        a.y += b.y;
        a.z += b.z;
        a.w += b.w;
        reinterpret_cast<float4 *>(acc)[v] = a;
    }
    for (size_t i = nvec * 4 + gid; i < n; i += stride) acc[i] += x[i];
}

static __global__ void to_bf16_kernel(hy_bf16 *dst, const float *src, size_t n, size_t nvec) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t gid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t v = gid; v < nvec; v += stride) {
        /* 8 floats (two 16-byte loads) → 8 bf16 (one 16-byte store) */
        float4 a = reinterpret_cast<const float4 *>(src)[2 * v];
        float4 b = reinterpret_cast<const float4 *>(src)[2 * v + 1];
        ew_bf16x8 y;
        y.h[0] = __floats2bfloat162_rn(a.x, a.y);
        y.h[1] = __floats2bfloat162_rn(a.z, a.w);
        y.h[2] = __floats2bfloat162_rn(b.x, b.y);
        y.h[3] = __floats2bfloat162_rn(b.z, b.w);
        reinterpret_cast<ew_bf16x8 *>(dst)[v] = y;
    }
    for (size_t i = nvec * 8 + gid; i < n; i += stride) dst[i] = __float2bfloat16(src[i]);
}

int hy_k_add_bf16(cudaStream_t s, hy_bf16 *acc, const hy_bf16 *x, size_t n, hy_error *err) {
    if (n == 0) return HY_OK;
    size_t nvec = ew_aligned(acc) && ew_aligned(x) ? n / 8 : 0;
    add_bf16_kernel<<<ew_blocks(nvec > 0 ? nvec : n), EW_THREADS, 0, s>>>(acc, x, n, nvec);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

int hy_k_add_f32(cudaStream_t s, float *acc, const float *x, size_t n, hy_error *err) {
    if (n == 0) return HY_OK;
    size_t nvec = ew_aligned(acc) && ew_aligned(x) ? n / 4 : 0;
    add_f32_kernel<<<ew_blocks(nvec > 0 ? nvec : n), EW_THREADS, 0, s>>>(acc, x, n, nvec);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

int hy_k_to_bf16(cudaStream_t s, hy_bf16 *dst, const float *src, size_t n, hy_error *err) {
    if (n == 0) return HY_OK;
    size_t nvec = ew_aligned(dst) && ew_aligned(src) ? n / 8 : 0;
    to_bf16_kernel<<<ew_blocks(nvec > 0 ? nvec : n), EW_THREADS, 0, s>>>(dst, src, n, nvec);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

// ----------------------------------------------------------------------------
// Preload (kernels.cuh)

int hy_k_adamw_preload(hy_error *err) {
    HY_CUDA_PRELOAD(adamw_kernel, err);
    HY_CUDA_PRELOAD(sumsq_partial_kernel, err);
    HY_CUDA_PRELOAD(sumsq_finish_kernel, err);
    HY_CUDA_PRELOAD(clip_kernel, err);
    HY_CUDA_PRELOAD(add_bf16_kernel, err);
    HY_CUDA_PRELOAD(add_f32_kernel, err);
    HY_CUDA_PRELOAD(to_bf16_kernel, err);
    return HY_OK;
}
