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
 * then the bf16 compute copy ← p (round to nearest even), each step
 * rounded as the CPU rounds it (no FMA contraction, IEEE division and
 * square root). One launch takes a whole batch of tensors (kernels.cuh's
 * hy_adamw_batch: fuse.cu gathers a rank's consecutive adamw calls, which
 * are all of its parameters, into one), each thread striding over it 8
 * elements at a time and finding each element's block and weight decay by
 * a cursor it moves forward through the batch's segment table (shared
 * memory). hp and factor live in device memory and are read when the
 * kernel runs, so a replayed graph uses this step's lr, t and clip factor.
 * A non-finite factor (the norm overflowed, or some gradient is NaN) makes
 * every thread return before writing anything. The bias corrections are
 * computed as on the CPU, 1 − pow(β, t) in double then cast to float, once
 * per block (thread 0, shared memory): double pow is too slow to run per
 * element.
 *
 * The floor, by bytes: per parameter the step reads the fp32 master,
 * gradient, m and v (16 bytes) and writes the master, m, v (12) and the
 * bf16 copy (2): 30 bytes, against ~20 arithmetic operations (three
 * divisions and a square root among them), which no GPU notices. GPT-2
 * 124M (124.48 M parameters, vocabulary padded to 50304) moves 3.73 GB:
 * 0.78 ms at an H200's 4.8 TB/s, so about 0.85 ms at the ~90% of it a
 * streaming kernel reaches (measured before: 2.8 ms, one 4-byte access
 * per array and a binary search per element). Every access is 16 bytes
 * (two per fp32 array and step, one for the 8 bf16), eight loads in
 * flight per thread before the first use; the grid is as many blocks as
 * the device holds at once (4 per SM of 256 threads, 61 registers).
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
#include "pack.cuh"

#define EW_THREADS 256
#define EW_MAX_BLOCKS 65536u
#define ADAMW_THREADS 256
#define ADAMW_BLOCKS_PER_SM 4   /* 1024 threads, at most 64 registers each */
#define SUMSQ_THREADS 256
#define SUMSQ_MAX_BLOCKS 1024

static unsigned ew_blocks(size_t work) {
    size_t b = (work + EW_THREADS - 1) / EW_THREADS;
    if (b < 1) b = 1;
    return b > EW_MAX_BLOCKS ? EW_MAX_BLOCKS : (unsigned)b;
}

static int ew_aligned(const void *p) { return ((uintptr_t)p & 15) == 0; }

// ----------------------------------------------------------------------------
// AdamW, all of a rank's tensors in one launch (kernels.cuh's hy_adamw_batch)

/* AdamW's constants for one launch, read once per block. */
typedef struct {
    float f, lr, b1, b2, omb1, omb2, eps, wd, bc1, bc2;
} adamw_consts;

/* One element, rounded step by step as the CPU does it: no contraction
 * into FMAs, IEEE division and square root (the intrinsics fix that, so
 * the 16-byte path and the element path give the same bits). */
static __device__ __forceinline__ void adamw_elem(float &p, float &m, float &v, float grad,
                                                  const adamw_consts &k, int decay) {
    float g = __fmul_rn(grad, k.f);
    m = __fadd_rn(__fmul_rn(k.b1, m), __fmul_rn(k.omb1, g));
    v = __fadd_rn(__fmul_rn(k.b2, v), __fmul_rn(__fmul_rn(k.omb2, g), g));
    float mhat = __fdiv_rn(m, k.bc1), vhat = __fdiv_rn(v, k.bc2);
    float step = __fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), k.eps));
    p = __fsub_rn(p, __fmul_rn(k.lr, __fadd_rn(step, __fmul_rn(decay ? k.wd : 0.0f, p))));
}

/* Elements j .. j+7 of block blk, all of one segment: two 16-byte loads of
 * each fp32 array, all eight issued before any arithmetic, two 16-byte
 * stores of each updated array and one of the bf16 copy. Every access is
 * "streaming" (ld/st.global.cs: evict first), since each byte is touched
 * once per step. */
static __device__ __forceinline__ void adamw_vec(const hy_adamw_block &blk, size_t j,
                                                 const adamw_consts &k, int decay) {
    const float4 *gp = reinterpret_cast<const float4 *>(blk.grad + j);
    float4 *pp = reinterpret_cast<float4 *>(blk.param + j);
    float4 *mp = reinterpret_cast<float4 *>(blk.m + j);
    float4 *vp = reinterpret_cast<float4 *>(blk.v + j);
    float4 g4[2] = { __ldcs(gp), __ldcs(gp + 1) }, p4[2] = { __ldcs(pp), __ldcs(pp + 1) };
    float4 m4[2] = { __ldcs(mp), __ldcs(mp + 1) }, v4[2] = { __ldcs(vp), __ldcs(vp + 1) };
    for (int h = 0; h < 2; h++) {
        adamw_elem(p4[h].x, m4[h].x, v4[h].x, g4[h].x, k, decay);
        adamw_elem(p4[h].y, m4[h].y, v4[h].y, g4[h].y, k, decay);
        adamw_elem(p4[h].z, m4[h].z, v4[h].z, g4[h].z, k, decay);
        adamw_elem(p4[h].w, m4[h].w, v4[h].w, g4[h].w, k, decay);
        __stcs(pp + h, p4[h]);
        __stcs(mp + h, m4[h]);
        __stcs(vp + h, v4[h]);
    }
    if (blk.param_compute != NULL) {
        const float f[8] = { p4[0].x, p4[0].y, p4[0].z, p4[0].w,
                             p4[1].x, p4[1].y, p4[1].z, p4[1].w };
        hy_k_bf16x8 c = hy_k_pack8(f);
        /* The 16 bytes as one streaming store (__stcs takes a uint4). */
        __stcs(reinterpret_cast<uint4 *>(blk.param_compute + j),
               *reinterpret_cast<const uint4 *>(&c));
    }
}

/* Grid-stride over the batch in steps of HY_ADAMW_VEC elements. Each
 * thread's position only grows, so it finds its segment by walking a
 * cursor forward through the table (shared memory), never searching. A
 * step that lies inside one segment and one block's data, with the block
 * aligned, is one adamw_vec; any other (a segment or block boundary, the
 * padding, an unaligned block) goes element by element. */
static __global__ void __launch_bounds__(ADAMW_THREADS, ADAMW_BLOCKS_PER_SM)
adamw_kernel(const __grid_constant__ hy_adamw_batch b) {
    __shared__ float bc[2];
    __shared__ size_t s_end[HY_ADAMW_SEGMENTS];
    __shared__ unsigned char s_block[HY_ADAMW_SEGMENTS], s_decay[HY_ADAMW_SEGMENTS];
    __shared__ hy_adamw_block s_blk[HY_ADAMW_BLOCKS];
    float f = *b.factor;
    if (!isfinite(f)) return;   /* the same for every thread: nothing is written */
    if (threadIdx.x == 0) {
        double t = (double)b.hp->step;
        bc[0] = (float)(1.0 - pow((double)b.hp->beta1, t));
        bc[1] = (float)(1.0 - pow((double)b.hp->beta2, t));
    }
    for (int k = threadIdx.x; k < b.segments; k += blockDim.x) {
        s_end[k] = b.seg_end[k];
        s_block[k] = b.seg_block[k];
        s_decay[k] = b.seg_decay[k];
    }
    for (int k = threadIdx.x; k < b.blocks; k += blockDim.x) s_blk[k] = b.block[k];
    __syncthreads();
    adamw_consts k;
    k.f = f;
    k.lr = b.hp->lr;
    k.b1 = b.hp->beta1;
    k.b2 = b.hp->beta2;
    k.omb1 = 1.0f - k.b1;
    k.omb2 = 1.0f - k.b2;
    k.eps = b.hp->eps;
    k.wd = b.hp->weight_decay;
    k.bc1 = bc[0];
    k.bc2 = bc[1];

    size_t nvec = (b.n + HY_ADAMW_VEC - 1) / HY_ADAMW_VEC;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    int cur = 0;
    for (size_t q = (size_t)blockIdx.x * blockDim.x + threadIdx.x; q < nvec; q += stride) {
        size_t i = q * HY_ADAMW_VEC;
        while (s_end[cur] <= i) cur++;   /* i < b.n = the last segment's end */
        const hy_adamw_block &blk = s_blk[s_block[cur]];
        size_t j = i - blk.start;
        if (blk.vec && i + HY_ADAMW_VEC <= s_end[cur] && j + HY_ADAMW_VEC <= blk.n) {
            adamw_vec(blk, j, k, s_decay[cur]);
            continue;
        }
        int c = cur;
        for (int e = 0; e < HY_ADAMW_VEC && i + e < b.n; e++) {
            while (s_end[c] <= i + e) c++;
            const hy_adamw_block &eb = s_blk[s_block[c]];
            size_t je = i + e - eb.start;
            if (je >= eb.n) continue;   /* the padding before the next block */
            float p = eb.param[je], m = eb.m[je], v = eb.v[je];
            adamw_elem(p, m, v, eb.grad[je], k, s_decay[c]);
            eb.param[je] = p;
            eb.m[je] = m;
            eb.v[je] = v;
            if (eb.param_compute != NULL) eb.param_compute[je] = __float2bfloat16(p);
        }
    }
}

/* Whether x .. x+n continues the range that starts at base and is len long. */
#define ADAMW_FOLLOWS(x, base, len) ((base) != NULL && (x) == (base) + (len))

static int adamw_aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

int hy_k_adamw_batch_add(hy_adamw_batch *b, float *param, hy_bf16 *param_compute,
                         const float *grad, float *m, float *v, size_t n,
                         const hy_adamw_hparams *hp, const float *factor, int decay) {
    if (b->segments == 0) {
        memset(b, 0, sizeof *b);
        b->hp = hp;
        b->factor = factor;
    } else if (b->hp != hp || b->factor != factor) {
        return 0;
    }
    if (n == 0) return 1;
    decay = decay != 0;
    hy_adamw_block *last = b->blocks ? &b->block[b->blocks - 1] : NULL;
    int follows = last && ADAMW_FOLLOWS(param, last->param, last->n) &&
                  ADAMW_FOLLOWS(grad, last->grad, last->n) && ADAMW_FOLLOWS(m, last->m, last->n) &&
                  ADAMW_FOLLOWS(v, last->v, last->n) &&
                  (param_compute == NULL ? last->param_compute == NULL
                                         : ADAMW_FOLLOWS(param_compute, last->param_compute, last->n));
    int extend = follows && b->seg_decay[b->segments - 1] == decay;
    /* Room first: nothing changes when the tensor does not fit. */
    if ((!follows && b->blocks == HY_ADAMW_BLOCKS) || (!extend && b->segments == HY_ADAMW_SEGMENTS))
        return 0;
    if (!follows) {
        /* The new block starts at the next multiple of HY_ADAMW_VEC; the
         * gap joins the previous block's last segment as its padding. */
        size_t start = (b->n + HY_ADAMW_VEC - 1) / HY_ADAMW_VEC * HY_ADAMW_VEC;
        if (b->segments > 0) b->seg_end[b->segments - 1] = start;
        b->n = start;
        last = &b->block[b->blocks++];
        *last = (hy_adamw_block){ param, param_compute, grad, m, v, start, 0, 0 };
        last->vec = adamw_aligned16(param) && adamw_aligned16(grad) && adamw_aligned16(m) &&
                    adamw_aligned16(v) && (param_compute == NULL || adamw_aligned16(param_compute));
    }
    if (!extend) {
        b->seg_block[b->segments] = (unsigned char)(last - b->block);
        b->seg_decay[b->segments] = (unsigned char)decay;
        b->segments++;
    }
    last->n += n;
    b->n += n;
    b->seg_end[b->segments - 1] = b->n;
    return 1;
}

int hy_k_adamw(cudaStream_t s, const hy_adamw_batch *b, hy_error *err) {
    if (b->n == 0) return HY_OK;
    /* As many blocks as the device holds at once (each thread then walks
     * the batch with a stride of the whole grid), fewer for a small batch.
     * The grid only splits the work: every element's arithmetic is the
     * same whatever it is, so the bits do not depend on the device. */
    int dev = 0, sms = 0;
    HY_CUDA_CHECK(cudaGetDevice(&dev), err);
    HY_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), err);
    size_t steps = (b->n + HY_ADAMW_VEC - 1) / HY_ADAMW_VEC;
    size_t want = (steps + ADAMW_THREADS - 1) / ADAMW_THREADS;
    size_t most = (size_t)(sms > 0 ? sms : 1) * ADAMW_BLOCKS_PER_SM;
    unsigned grid = (unsigned)(want < most ? want : most);
    adamw_kernel<<<grid, ADAMW_THREADS, 0, s>>>(*b);
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
