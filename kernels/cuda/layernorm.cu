/*
 * layernorm.cu — LayerNorm over the last dimension, CUDA backend
 * (kernels/cpu/layernorm.c on the CPU), eps = 1e-5:
 *   mean = (1/C) Σ x_i,  rstd = 1/sqrt((1/C) Σ (x_i − mean)² + eps)
 *   xhat_i = (x_i − mean) · rstd,  out_i = xhat_i · w_i + b_i
 * Backward, with g_i = dout_i · w_i:
 *   dinp_i += rstd · (g_i − mean(g) − xhat_i · mean(g ⊙ xhat))
 *   dw_i   += Σ_rows dout_i · xhat_i,   db_i += Σ_rows dout_i
 *
 * Forward and dinp: one warp per row (8 rows per block), 16 bytes per
 * access when C is a multiple of 8 and the rows are aligned (else one
 * element). The forward can take the residual add before it (acc ← acc +
 * x, then the norm of acc: fuse.cu), one read of each for both. The row is
 * read from global memory once per pass (L1 keeps it between passes): the
 * statistics in fp32 with the variance taken about the mean (two passes,
 * never E[x²] − mean²), reduced by an xor butterfly so every lane holds the
 * same bits. x, w, b, dout are bf16; mean, rstd and all sums fp32.
 *
 * dw and db are column sums over the rows, done without atomics in two
 * fixed-order passes: a block of 32 columns × 8 row groups sums one chunk
 * of LN_CHUNK rows into a per-chunk partial (scratch), then one thread per
 * column adds the partials in chunk order into the fp32 dw, db. Scratch:
 * 2 · ceil(N/LN_CHUNK) · C floats. The column pass re-reads dout and inp
 * (a second read of two [N,C] bf16 arrays); fusing it into the row pass
 * would need per-column accumulators for every row a warp visits.
 *
 * RMSNorm (Llama; eps given) is the same kernels with no mean and no bias
 * (template flag RMS, mean taken as 0): rstd = 1/sqrt((1/C) Σ x_i² + eps),
 * out_i = x_i · rstd · w_i, dinp_i += rstd · (g_i − xhat_i · mean(g ⊙ xhat)),
 * dw_i += Σ_rows dout_i · xhat_i (the same two-pass column sum); its
 * forward takes the residual add before it as LayerNorm's does.
 */
#include <stddef.h>
#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "check.cuh"
#include "kernels.cuh"
#include "pack.cuh"

#define LN_WARPS 8     /* rows per block, one warp each */
#define LN_CHUNK 64    /* rows per dw/db partial */

static __device__ __forceinline__ float ln_warp_sum(float v) {
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

/* The elements of a row a lane owns: with VEC, packs of 8 at 8·lane,
 * 8·lane + 256, ... (C a multiple of 8, rows 16-byte aligned); else single
 * elements at lane, lane + 32, ... The passes over a row visit them in
 * the same order, so each lane reads back only what it wrote. */
#define LN_FOR_EACH(VEC, c, C) \
    for (int c = (VEC) ? lane * 8 : lane; c < (C); c += (VEC) ? 256 : 32)
#define LN_WIDTH(VEC) ((VEC) ? 8 : 1)

// ----------------------------------------------------------------------------
// Forward

/* One warp per row. With ADD the row is first inp ← inp + addend, rounded
 * to bf16 exactly as hy_k_add_bf16 rounds, and stored: the residual add
 * fused into the norm that follows it (fuse.cu). With RMS: RMSNorm (no
 * mean, no bias: mean and b are not read). */
template <int ADD, int VEC, int RMS>
static __global__ void ln_fwd_kernel(hy_bf16 *out, float *mean, float *rstd, hy_bf16 *inp,
                                     const hy_bf16 *addend, const hy_bf16 *w, const hy_bf16 *b, int N,
                                     int C, float eps) {
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
    if (row >= N) return;
    hy_bf16 *x = inp + (size_t)row * C;
    hy_bf16 *o = out + (size_t)row * C;
    const hy_bf16 *y = ADD ? addend + (size_t)row * C : NULL;

    float sum = 0.0f, f[8], g[8];
    LN_FOR_EACH(VEC, c, C) {
        if (VEC) {
            hy_k_bf16x8 p = hy_k_load8(x + c);
            if (ADD) {
                hy_k_bf16x8 q = hy_k_load8(y + c);
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    float2 a = __bfloat1622float2(p.h[j]), d = __bfloat1622float2(q.h[j]);
                    p.h[j] = __floats2bfloat162_rn(a.x + d.x, a.y + d.y);
                }
                *(hy_k_bf16x8 *)(x + c) = p;
            }
            hy_k_unpack8(p, f);
        } else {
            f[0] = __bfloat162float(x[c]);
            if (ADD) {
                hy_bf16 r = __float2bfloat16(f[0] + __bfloat162float(y[c]));
                x[c] = r;
                f[0] = __bfloat162float(r);
            }
        }
        for (int j = 0; j < LN_WIDTH(VEC); j++) sum += f[j];
    }
    float m = RMS ? 0.0f : ln_warp_sum(sum) / (float)C;
    float sq = 0.0f;
    LN_FOR_EACH(VEC, c, C) {
        if (VEC) hy_k_unpack8(hy_k_load8(x + c), f);
        else f[0] = __bfloat162float(x[c]);
        for (int j = 0; j < LN_WIDTH(VEC); j++) sq += (f[j] - m) * (f[j] - m);
    }
    float r = 1.0f / sqrtf(ln_warp_sum(sq) / (float)C + eps);
    LN_FOR_EACH(VEC, c, C) {
        if (VEC) {
            float wv[8], bv[8];
            hy_k_unpack8(hy_k_load8(x + c), f);
            hy_k_unpack8(hy_k_load8(w + c), wv);
            if (RMS) {
#pragma unroll
                for (int j = 0; j < 8; j++) bv[j] = 0.0f;
            } else {
                hy_k_unpack8(hy_k_load8(b + c), bv);
            }
#pragma unroll
            for (int j = 0; j < 8; j++) g[j] = (f[j] - m) * r * wv[j] + bv[j];
            *(hy_k_bf16x8 *)(o + c) = hy_k_pack8(g);
        } else {
            float xhat = (__bfloat162float(x[c]) - m) * r;
            o[c] = __float2bfloat16(xhat * __bfloat162float(w[c]) + (RMS ? 0.0f : __bfloat162float(b[c])));
        }
    }
    if (lane == 0) {
        if (mean != NULL) mean[row] = m;
        if (rstd != NULL) rstd[row] = r;
    }
}

// ----------------------------------------------------------------------------
// Backward

/* dinp[row] += rstd · (g − mean(g) − xhat · mean(g ⊙ xhat)), one warp per
 * row; RMS: RMSNorm's, with neither mean (mean is not read). */
template <int VEC, int RMS>
static __global__ void ln_bwd_dinp_kernel(hy_bf16 *dinp, const hy_bf16 *dout, const hy_bf16 *inp,
                                          const hy_bf16 *w, const float *mean, const float *rstd,
                                          int N, int C) {
    int lane = threadIdx.x & 31;
    int row = blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
    if (row >= N) return;
    size_t off = (size_t)row * C;
    const hy_bf16 *x = inp + off, *dy = dout + off;
    hy_bf16 *dx = dinp + off;
    float m = RMS ? 0.0f : mean[row], r = rstd[row];
    float xv[8], dv[8], wv[8], av[8];

    float sg = 0.0f, sgx = 0.0f;
    LN_FOR_EACH(VEC, c, C) {
        if (VEC) {
            hy_k_unpack8(hy_k_load8(x + c), xv);
            hy_k_unpack8(hy_k_load8(dy + c), dv);
            hy_k_unpack8(hy_k_load8(w + c), wv);
        } else {
            xv[0] = __bfloat162float(x[c]);
            dv[0] = __bfloat162float(dy[c]);
            wv[0] = __bfloat162float(w[c]);
        }
        for (int j = 0; j < LN_WIDTH(VEC); j++) {
            float g = dv[j] * wv[j];
            sg += g;
            sgx += g * ((xv[j] - m) * r);
        }
    }
    float mg = RMS ? 0.0f : ln_warp_sum(sg) / (float)C, mgx = ln_warp_sum(sgx) / (float)C;
    LN_FOR_EACH(VEC, c, C) {
        if (VEC) {
            hy_k_unpack8(hy_k_load8(x + c), xv);
            hy_k_unpack8(hy_k_load8(dy + c), dv);
            hy_k_unpack8(hy_k_load8(w + c), wv);
            hy_k_unpack8(hy_k_load8(dx + c), av);
            hy_k_bf16x8 p;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float v[2];
#pragma unroll
                for (int k = 0; k < 2; k++) {
                    int e = 2 * j + k;
                    float g = dv[e] * wv[e], xhat = (xv[e] - m) * r;
                    v[k] = av[e] + r * (g - mg - xhat * mgx);
                }
                p.h[j] = __floats2bfloat162_rn(v[0], v[1]);
            }
            *(hy_k_bf16x8 *)(dx + c) = p;
        } else {
            float xhat = (__bfloat162float(x[c]) - m) * r;
            float g = __bfloat162float(dy[c]) * __bfloat162float(w[c]);
            dx[c] = __float2bfloat16(__bfloat162float(dx[c]) + r * (g - mg - xhat * mgx));
        }
    }
}

/* Per chunk of LN_CHUNK rows: pw[chunk, c] = Σ dout·xhat, pb[chunk, c] =
 * Σ dout. Block (32, 8), grid (nchunks, ceil(C/32)). mean NULL: RMSNorm's
 * xhat, x · rstd. */
static __global__ void ln_bwd_partial_kernel(float *pw, float *pb, const hy_bf16 *dout,
                                      const hy_bf16 *inp, const float *mean, const float *rstd,
                                      int N, int C) {
    __shared__ float sw[8][33], sb[8][33];
    int chunk = blockIdx.x;
    int c = blockIdx.y * 32 + threadIdx.x;
    int r0 = chunk * LN_CHUNK, r1 = min(r0 + LN_CHUNK, N);
    float aw = 0.0f, ab = 0.0f;
    if (c < C) {
        for (int r = r0 + (int)threadIdx.y; r < r1; r += 8) {
            size_t off = (size_t)r * C + c;
            float d = __bfloat162float(dout[off]);
            float xhat = (__bfloat162float(inp[off]) - (mean ? mean[r] : 0.0f)) * rstd[r];
            aw += d * xhat;
            ab += d;
        }
    }
    sw[threadIdx.y][threadIdx.x] = aw;
    sb[threadIdx.y][threadIdx.x] = ab;
    __syncthreads();
    if (threadIdx.y == 0 && c < C) {
        float tw = 0.0f, tb = 0.0f;
        for (int y = 0; y < 8; y++) {
            tw += sw[y][threadIdx.x];
            tb += sb[y][threadIdx.x];
        }
        pw[(size_t)chunk * C + c] = tw;
        pb[(size_t)chunk * C + c] = tb;
    }
}

/* dw[c] += Σ_chunk pw[chunk, c]; db likewise; chunks in order. */
static __global__ void ln_bwd_finish_kernel(float *dw, float *db, const float *pw, const float *pb,
                                     int nchunks, int C) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    float tw = 0.0f, tb = 0.0f;
    for (int k = 0; k < nchunks; k++) {
        tw += pw[(size_t)k * C + c];
        tb += pb[(size_t)k * C + c];
    }
    if (dw != NULL) dw[c] += tw;
    if (db != NULL) db[c] += tb;
}

static int ln_chunks(int N) { return (N + LN_CHUNK - 1) / LN_CHUNK; }
static unsigned ln_row_blocks(int N) { return (unsigned)((N + LN_WARPS - 1) / LN_WARPS); }

// ----------------------------------------------------------------------------
// Launchers

static int ln_aligned(const void *p) { return p == NULL || ((uintptr_t)p & 15) == 0; }

/* Whether rows of C values at these arrays can be read 8 at a time. */
static int ln_vec(int C, const void *a, const void *b, const void *c, const void *d, const void *e) {
    return C % 8 == 0 && ln_aligned(a) && ln_aligned(b) && ln_aligned(c) && ln_aligned(d) &&
           ln_aligned(e);
}

#define LN_FWD(ADD, VEC, RMS) ln_fwd_kernel<ADD, VEC, RMS><<<ln_row_blocks(N), LN_WARPS * 32, 0, s>>>( \
    out, mean, rstd, acc, x, w, b, N, C, eps)

int hy_k_norm_fwd(cudaStream_t s, hy_bf16 *out, float *mean, float *rstd, hy_bf16 *acc,
                  const hy_bf16 *x, const hy_bf16 *w, const hy_bf16 *b, int N, int C, float eps,
                  hy_error *err) {
    if (N <= 0 || C <= 0) return HY_OK;
    int vec = ln_vec(C, out, acc, x, w, b), add = x != NULL, rms = b == NULL;
    switch (add * 4 + vec * 2 + rms) {
    case 0: LN_FWD(0, 0, 0); break;
    case 1: LN_FWD(0, 0, 1); break;
    case 2: LN_FWD(0, 1, 0); break;
    case 3: LN_FWD(0, 1, 1); break;
    case 4: LN_FWD(1, 0, 0); break;
    case 5: LN_FWD(1, 0, 1); break;
    case 6: LN_FWD(1, 1, 0); break;
    default: LN_FWD(1, 1, 1); break;
    }
    HY_CUDA_CHECK(cudaGetLastError(), err);
    return HY_OK;
}

size_t hy_k_norm_bwd_scratch(int N, int C) {
    if (N <= 0 || C <= 0) return 0;
    return 2 * (size_t)ln_chunks(N) * (size_t)C * sizeof(float);
}

int hy_k_norm_bwd(cudaStream_t s, hy_bf16 *dinp, float *dw, float *db, const hy_bf16 *dout,
                       const hy_bf16 *inp, const hy_bf16 *w, const float *mean, const float *rstd,
                       int N, int C, void *scratch, hy_error *err) {
    if (N <= 0 || C <= 0) return HY_OK;
    if (dinp != NULL) {
        int vec = ln_vec(C, dinp, dout, inp, w, NULL), rms = mean == NULL;
        void (*k)(hy_bf16 *, const hy_bf16 *, const hy_bf16 *, const hy_bf16 *, const float *,
                  const float *, int, int) =
            vec ? (rms ? ln_bwd_dinp_kernel<1, 1> : ln_bwd_dinp_kernel<1, 0>)
                : (rms ? ln_bwd_dinp_kernel<0, 1> : ln_bwd_dinp_kernel<0, 0>);
        k<<<ln_row_blocks(N), LN_WARPS * 32, 0, s>>>(dinp, dout, inp, w, mean, rstd, N, C);
        HY_CUDA_CHECK(cudaGetLastError(), err);
    }
    if (dw != NULL || db != NULL) {
        int nchunks = ln_chunks(N);
        float *pw = (float *)scratch, *pb = pw + (size_t)nchunks * C;
        dim3 grid((unsigned)nchunks, (unsigned)((C + 31) / 32));
        ln_bwd_partial_kernel<<<grid, dim3(32, 8), 0, s>>>(pw, pb, dout, inp, mean, rstd, N, C);
        HY_CUDA_CHECK(cudaGetLastError(), err);
        ln_bwd_finish_kernel<<<(unsigned)((C + 255) / 256), 256, 0, s>>>(dw, db, pw, pb, nchunks, C);
        HY_CUDA_CHECK(cudaGetLastError(), err);
    }
    return HY_OK;
}

// ----------------------------------------------------------------------------
// Preload (kernels.cuh)

int hy_k_layernorm_preload(hy_error *err) {
    HY_CUDA_PRELOAD((ln_fwd_kernel<0, 0, 0>), err);
    HY_CUDA_PRELOAD((ln_fwd_kernel<0, 1, 0>), err);
    HY_CUDA_PRELOAD((ln_fwd_kernel<1, 0, 0>), err);
    HY_CUDA_PRELOAD((ln_fwd_kernel<1, 1, 0>), err);
    HY_CUDA_PRELOAD((ln_fwd_kernel<0, 0, 1>), err);
    HY_CUDA_PRELOAD((ln_fwd_kernel<0, 1, 1>), err);
    HY_CUDA_PRELOAD((ln_fwd_kernel<1, 0, 1>), err);
    HY_CUDA_PRELOAD((ln_fwd_kernel<1, 1, 1>), err);
    HY_CUDA_PRELOAD((ln_bwd_dinp_kernel<0, 0>), err);
    HY_CUDA_PRELOAD((ln_bwd_dinp_kernel<1, 0>), err);
    HY_CUDA_PRELOAD((ln_bwd_dinp_kernel<0, 1>), err);
    HY_CUDA_PRELOAD((ln_bwd_dinp_kernel<1, 1>), err);
    HY_CUDA_PRELOAD(ln_bwd_partial_kernel, err);
    HY_CUDA_PRELOAD(ln_bwd_finish_kernel, err);
    return HY_OK;
}
