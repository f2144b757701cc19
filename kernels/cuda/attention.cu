/*
 * attention.cu — the multi-head self-attention core, CUDA backend (what
 * sits between c_attn and c_proj; kernels/cpu/attention.c on the CPU): a
 * fused, flash-style attention, forward and backward, on the tensor cores
 * (mma.sync m16n8k16, bf16 in, fp32 accumulate).
 *
 * qkv[b,t,:] holds the NH query heads, then the NKV key heads, then the
 * NKV value heads, each hd wide (row stride (NH + 2·NKV)·hd; NKV = NH is
 * GPT-2's [q | k | v]); query head h reads kv head j = h / (NH/NKV)
 * (grouped-query attention), straight from qkv: K and V are never copied
 * per query head. out[b,t,h·hd+d]. Scores s = q·k / sqrt(hd) over keys
 * s ≤ t (causal) or all keys. Nothing T×T is ever stored: a block of 64
 * queries walks the key tiles of 64 once, keeping per row a running max m
 * and sum l of exp (the online softmax), in fp32, and the scores never
 * pass through bf16; tiles wholly above the diagonal are skipped. What the
 * backward needs from the forward is per row L = m + log2 l (the log-sum-
 * exp, in the base-2 units the kernels use: backend.h's lse) and the
 * output O itself, both handed back to it by the caller:
 *
 *   P = exp2(s·log2e − L),  D = rowsum(dO ∘ O)
 *   dV = Pᵀ dO,  dP = dO Vᵀ,  dS = P ∘ (dP − D),  dQ = dS K / √hd,  dK = dSᵀ Q / √hd
 *
 * The backward is two kernels so that each gradient element has one owner
 * (no atomics, hence deterministic): one per block of 64 keys of one kv
 * head walks, for each query head of its group in turn, the query tiles at
 * or below the diagonal for dK and dV (summed over the group in
 * registers, in a fixed order); one per block of 64 queries walks the key
 * tiles for dQ; both recompute S and P from L. The scratch holds D.
 *
 * Fragments (PTX ISA, "matrix fragments for mma.m16n8k16"): in a warp,
 * lane = 4g + t. A (16×16, row-major) regs {A[g][2t..+1], A[g+8][2t..+1],
 * A[g][2t+8..+9], A[g+8][2t+8..+9]}; B (16×8, k × n) regs {B[2t..+1][g],
 * B[2t+8..+9][g]}; the accumulator C (16×8) {C[g][2t], C[g][2t+1],
 * C[g+8][2t], C[g+8][2t+1]}. Two accumulators side by side (n 0..7 and
 * 8..15) are, rounded to bf16, exactly the A fragment of the next product
 * (P·V, dS·K, ...), so P and dS never leave registers. Each warp owns 16
 * rows of the block; tiles are staged in shared memory with rows padded by
 * 16 bytes (conflict-free fragment loads). The head size is padded with
 * zeros to HD = 32, 64 or 128 (one instantiation each); hd > 128 is
 * refused.
 *
 * Rounding: q, k, v, dO are bf16 inputs; every product accumulates in fp32;
 * P (into P·V and dV) and dS (into dQ, dK) are rounded to bf16 once as
 * tensor-core inputs, as in FlashAttention; the outputs are bf16. The
 * backward adds into dqkv (+=, kernels.cuh), or stores when it was just
 * zeroed (fuse.cu), each element by one thread.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "check.cuh"
#include "kernels.cuh"

#define FA_ROWS 64                  /* queries (or keys) per block, and per tile */
#define FA_WARPS 4                  /* 16 rows each */
#define FA_THREADS (32 * FA_WARPS)
#define FA_DOT_WARPS 8              /* rows per block of the D kernel */
#define FA_ALIGN 256
#define FA_LOG2E 1.4426950408889634f

static size_t fa_align(size_t n) { return (n + FA_ALIGN - 1) / FA_ALIGN * FA_ALIGN; }

/* What every kernel is told. Row r of sequence b: query head h at
 * qkv + (b·T + r)·ld + h·hd, key head j at (NH + j)·hd, value head j at
 * (NH + NKV + j)·hd, ld = (NH + 2·NKV)·hd; dO and O at (b·T + r)·C + h·hd,
 * C = NH·hd; L and D at (b·NH + h)·T + r. */
typedef struct {
    const hy_bf16 *qkv;
    const hy_bf16 *dout;     /* backward: dO; forward: unused */
    const hy_bf16 *o;        /* backward: the forward's output (for D) */
    hy_bf16 *out;            /* forward: out */
    float *lse;              /* forward writes, backward reads: L */
    float *dsum;             /* backward: D */
    hy_bf16 *dqkv;           /* backward: += into it */
    int T, C, NH, NKV, group, hd, BH, nblocks;
    size_t ld;               /* qkv's row stride */
    int causal;
    int overwrite;           /* backward: store into dqkv instead of adding */
    int vec_qkv, vec_do;     /* rows can be read 16 bytes at a time */
    float scale, scale_log2; /* 1/sqrt(hd), and times log2(e) */
} fa_args;

// ----------------------------------------------------------------------------
// Tensor-core pieces

static __device__ __forceinline__ void fa_mma(float c[4], const uint32_t a[4], const uint32_t b[2]) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* Two values as one register of bf16 pairs, the first in the low half. */
static __device__ __forceinline__ uint32_t fa_pack(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

static __device__ __forceinline__ uint32_t fa_pack_bf(hy_bf16 lo, hy_bf16 hi) {
    uint16_t a, b;
    memcpy(&a, &lo, 2);
    memcpy(&b, &hi, 2);
    return (uint32_t)a | ((uint32_t)b << 16);
}

static __device__ __forceinline__ uint32_t fa_word(const hy_bf16 *p) { return *(const uint32_t *)p; }

/* The A fragment of rows r0.., columns c0.. of a row-major tile (ld). */
static __device__ __forceinline__ void fa_frag_a(uint32_t a[4], const hy_bf16 *s, int ld, int r0, int c0) {
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const hy_bf16 *p = s + (r0 + g) * ld + c0 + 2 * t;
    a[0] = fa_word(p);
    a[1] = fa_word(p + 8 * ld);
    a[2] = fa_word(p + 8);
    a[3] = fa_word(p + 8 * ld + 8);
}

/* The B fragment B[k][n] = s[n0 + n][k0 + k]: the tile's rows are B's
 * columns (Kᵀ from K, for instance). */
static __device__ __forceinline__ void fa_frag_b_rows_n(uint32_t b[2], const hy_bf16 *s, int ld, int n0,
                                                        int k0) {
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const hy_bf16 *p = s + (n0 + g) * ld + k0 + 2 * t;
    b[0] = fa_word(p);
    b[1] = fa_word(p + 8);
}

/* The B fragment B[k][n] = s[k0 + k][n0 + n]: the tile's rows are B's rows
 * (V as it is, for instance); each register pairs two rows. */
static __device__ __forceinline__ void fa_frag_b_rows_k(uint32_t b[2], const hy_bf16 *s, int ld, int k0,
                                                        int n0) {
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const hy_bf16 *p = s + (k0 + 2 * t) * ld + n0 + g;
    b[0] = fa_pack_bf(p[0], p[ld]);
    b[1] = fa_pack_bf(p[8 * ld], p[9 * ld]);
}

/* Two accumulators (columns 0..7 and 8..15) as the A fragment of 16 rows
 * by those 16 columns, rounded to bf16. */
static __device__ __forceinline__ void fa_acc_to_a(uint32_t a[4], const float lo[4], const float hi[4]) {
    a[0] = fa_pack(lo[0], lo[1]);
    a[1] = fa_pack(lo[2], lo[3]);
    a[2] = fa_pack(hi[0], hi[1]);
    a[3] = fa_pack(hi[2], hi[3]);
}

/* Rows r0 .. r0+63 (those < T) of a [*, stride] array from g, columns
 * 0 .. hd−1, into a tile of HD columns (ld HD + 8); everything else 0. */
template <int HD>
static __device__ void fa_load_tile(hy_bf16 *s, const hy_bf16 *g, size_t stride, int r0, int T, int hd,
                                    int vec) {
    const int ld = HD + 8;
    if (vec) {   /* hd, stride and g all multiples of 8 elements */
        const int chunks = HD / 8;
        for (int i = threadIdx.x; i < FA_ROWS * chunks; i += FA_THREADS) {
            int r = i / chunks, c = (i % chunks) * 8;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (r0 + r < T && c < hd) v = *(const uint4 *)(g + (size_t)(r0 + r) * stride + c);
            *(uint4 *)(s + r * ld + c) = v;
        }
    } else {
        for (int i = threadIdx.x; i < FA_ROWS * HD; i += FA_THREADS) {
            int r = i / HD, c = i % HD;
            hy_bf16 v = __float2bfloat16(0.0f);
            if (r0 + r < T && c < hd) v = g[(size_t)(r0 + r) * stride + c];
            s[r * ld + c] = v;
        }
    }
}

/* A warp's 16 rows (warp·16 ..) of a tile as A fragments over all HD
 * columns: the operand it keeps in registers for a whole walk. */
template <int HD>
static __device__ __forceinline__ void fa_tile_rows(uint32_t f[HD / 16][4], const hy_bf16 *s) {
    int warp = threadIdx.x >> 5;
#pragma unroll
    for (int ks = 0; ks < HD / 16; ks++) fa_frag_a(f[ks], s, HD + 8, warp * 16, ks * 16);
}

template <int N>
static __device__ __forceinline__ void fa_zero(float acc[N][4]) {
#pragma unroll
    for (int i = 0; i < N; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
}

/* acc = f · sᵀ: the warp's 16 rows (f, over HD) against each of the 64
 * rows of tile s, 16 × 64 (S = Q Kᵀ, dP = dO Vᵀ, and their transposes). */
template <int HD>
static __device__ __forceinline__ void fa_times_rows(float acc[FA_ROWS / 8][4],
                                                     const uint32_t f[HD / 16][4], const hy_bf16 *s) {
    fa_zero<FA_ROWS / 8>(acc);
#pragma unroll
    for (int nt = 0; nt < FA_ROWS / 8; nt++)
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++) {
            uint32_t bf[2];
            fa_frag_b_rows_n(bf, s, HD + 8, nt * 8, ks * 16);
            fa_mma(acc[nt], f[ks], bf);
        }
}

/* acc += p · s: 16 × 64 values in the accumulator layout (P, Pᵀ, dS, dSᵀ),
 * rounded to bf16, times the 64 × HD tile s (V, dO, K, Q). */
template <int HD>
static __device__ __forceinline__ void fa_acc_times_tile(float acc[HD / 8][4],
                                                         const float p[FA_ROWS / 8][4],
                                                         const hy_bf16 *s) {
#pragma unroll
    for (int kk = 0; kk < FA_ROWS / 16; kk++) {
        uint32_t pa[4];
        fa_acc_to_a(pa, p[2 * kk], p[2 * kk + 1]);
#pragma unroll
        for (int dt = 0; dt < HD / 8; dt++) {
            uint32_t bf[2];
            fa_frag_b_rows_k(bf, s, HD + 8, kk * 16, dt * 8);
            fa_mma(acc[dt], pa, bf);
        }
    }
}

/* One block's place: its sequence b, its head (a query head h, or for
 * the kv kernel a kv head j), its block of 64 rows, and where the rows of
 * the heads it reads begin (row r at + r·ld, and + r·C for dO). heads is
 * how many heads the grid walks per sequence (NH, or NKV). Blocks are
 * numbered heaviest first (the longest walk starts first), heads inner. */
typedef struct {
    int b, head, blk;
    const hy_bf16 *seq;      /* qkv's row 0 of sequence b */
} fa_where;

static __device__ __forceinline__ fa_where fa_where_of(const fa_args &a, int heads, int heavy_first_desc) {
    fa_where w;
    int i = (int)blockIdx.x, bh = i % (a.BH / a.NH * heads);
    w.blk = heavy_first_desc ? a.nblocks - 1 - i / (a.BH / a.NH * heads) : i / (a.BH / a.NH * heads);
    w.b = bh / heads;
    w.head = bh % heads;
    w.seq = a.qkv + (size_t)w.b * a.T * a.ld;
    return w;
}

/* Within sequence w.b: query head h, key head j, value head j, and dO of h. */
static __device__ __forceinline__ const hy_bf16 *fa_q(const fa_args &a, const fa_where &w, int h) {
    return w.seq + (size_t)h * a.hd;
}
static __device__ __forceinline__ const hy_bf16 *fa_k(const fa_args &a, const fa_where &w, int j) {
    return w.seq + (size_t)(a.NH + j) * a.hd;
}
static __device__ __forceinline__ const hy_bf16 *fa_v(const fa_args &a, const fa_where &w, int j) {
    return w.seq + (size_t)(a.NH + a.NKV + j) * a.hd;
}
static __device__ __forceinline__ const hy_bf16 *fa_do(const fa_args &a, const fa_where &w, int h) {
    return a.dout + (size_t)w.b * a.T * a.C + (size_t)h * a.hd;
}

/* dqkv += factor · acc (or = when a.overwrite), rounded to bf16: the warp's 16 rows (rows[0] for
 * accumulator values 0 and 1, rows[1] for 2 and 3) of the head that starts
 * `col` columns into the row (h·hd for query head h, (NH + j)·hd for key
 * head j, ...), columns below hd. One thread owns each element. */
template <int HD>
static __device__ __forceinline__ void fa_add_rows(const fa_args &a, const fa_where &w, const int rows[2],
                                                   size_t col, const float acc[HD / 8][4], float factor) {
    int t = threadIdx.x & 3;
#pragma unroll
    for (int dt = 0; dt < HD / 8; dt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int row = rows[e >> 1], d = dt * 8 + 2 * t + (e & 1);
            if (row >= a.T || d >= a.hd) continue;
            hy_bf16 *p = a.dqkv + ((size_t)w.b * a.T + row) * a.ld + col + d;
            float old = a.overwrite ? 0.0f : __bfloat162float(*p);
            *p = __float2bfloat16(old + acc[dt][e] * factor);
        }
}

// ----------------------------------------------------------------------------
// Forward: one block per 64 queries of one (b, h)

template <int HD>
static __global__ void __launch_bounds__(FA_THREADS) fa_fwd_kernel(fa_args a) {
    __shared__ __align__(16) hy_bf16 sk[FA_ROWS * (HD + 8)];
    __shared__ __align__(16) hy_bf16 sv[FA_ROWS * (HD + 8)];
    fa_where w = fa_where_of(a, a.NH, 1);
    int T = a.T, C = a.C, qb = w.blk, q0 = qb * FA_ROWS, causal = a.causal, h = w.head;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const hy_bf16 *kh = fa_k(a, w, h / a.group), *vh = fa_v(a, w, h / a.group);

    /* This warp's 16 query rows as A fragments, staged through sk. */
    uint32_t qf[HD / 16][4];
    fa_load_tile<HD>(sk, fa_q(a, w, h), a.ld, q0, T, a.hd, a.vec_qkv);
    __syncthreads();
    fa_tile_rows<HD>(qf, sk);
    __syncthreads();

    float o[HD / 8][4];
    fa_zero<HD / 8>(o);
    float m[2] = { -INFINITY, -INFINITY }, l[2] = { 0.0f, 0.0f };
    const int rows[2] = { q0 + warp * 16 + g, q0 + warp * 16 + g + 8 };
    int last = causal ? qb : (T - 1) / FA_ROWS;
    for (int kb = 0; kb <= last; kb++) {
        int k0 = kb * FA_ROWS;
        fa_load_tile<HD>(sk, kh, a.ld, k0, T, a.hd, a.vec_qkv);
        fa_load_tile<HD>(sv, vh, a.ld, k0, T, a.hd, a.vec_qkv);
        __syncthreads();
        /* S = Q Kᵀ, 16 rows × 64 keys, in the log2 domain; masked -inf. */
        float s[FA_ROWS / 8][4];
        float mx[2] = { m[0], m[1] };
        fa_times_rows<HD>(s, qf, sk);
#pragma unroll
        for (int nt = 0; nt < FA_ROWS / 8; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int key = k0 + nt * 8 + 2 * t + (e & 1);
                float x = s[nt][e] * a.scale_log2;
                if (key >= T || (causal && key > rows[e >> 1])) x = -INFINITY;
                s[nt][e] = x;
                mx[e >> 1] = fmaxf(mx[e >> 1], x);
            }
        }
        /* The row's four lanes agree on its max; key 0 is in the first
         * tile of every row, so the max is finite from then on. */
#pragma unroll
        for (int r = 0; r < 2; r++) {
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        }
        float alpha[2] = { exp2f(m[0] - mx[0]), exp2f(m[1] - mx[1]) };
        m[0] = mx[0];
        m[1] = mx[1];
        l[0] *= alpha[0];
        l[1] *= alpha[1];
#pragma unroll
        for (int dt = 0; dt < HD / 8; dt++) {
            o[dt][0] *= alpha[0];
            o[dt][1] *= alpha[0];
            o[dt][2] *= alpha[1];
            o[dt][3] *= alpha[1];
        }
#pragma unroll
        for (int nt = 0; nt < FA_ROWS / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float p = exp2f(s[nt][e] - m[e >> 1]);
                s[nt][e] = p;
                l[e >> 1] += p;
            }
        fa_acc_times_tile<HD>(o, s, sv);   /* O += P V */
        __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    }
    float inv[2] = { 1.0f / l[0], 1.0f / l[1] };   /* l >= 1: the max term is exp2(0) */
#pragma unroll
    for (int dt = 0; dt < HD / 8; dt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int row = rows[e >> 1], d = dt * 8 + 2 * t + (e & 1);
            if (row >= T || d >= a.hd) continue;
            size_t at = ((size_t)w.b * T + row) * C + (size_t)h * a.hd + d;
            a.out[at] = __float2bfloat16(o[dt][e] * inv[e >> 1]);
        }
    if (t == 0)
#pragma unroll
        for (int r = 0; r < 2; r++)
            if (rows[r] < T) a.lse[((size_t)w.b * a.NH + h) * T + rows[r]] = m[r] + log2f(l[r]);
}

// ----------------------------------------------------------------------------
// Backward

/* D = rowsum(dO ∘ O), one warp per row (b, h, t), lanes over d, a fixed
 * xor tree. */
static __global__ void fa_dot_kernel(fa_args a, size_t rows) {
    int lane = threadIdx.x & 31;
    size_t r = (size_t)blockIdx.x * FA_DOT_WARPS + (threadIdx.x >> 5);
    if (r >= rows) return;
    size_t bh = r / (size_t)a.T, t = r % (size_t)a.T;
    size_t b = bh / (size_t)a.NH, h = bh % (size_t)a.NH;
    size_t at = (b * a.T + t) * a.C + h * a.hd;
    float acc = 0.0f;
    for (int d = lane; d < a.hd; d += 32)
        acc += __bfloat162float(a.dout[at + d]) * __bfloat162float(a.o[at + d]);
    for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (lane == 0) a.dsum[r] = acc;
}

/* dK and dV of 64 keys of one kv head j of sequence b: for each query
 * head of j's group in turn, the query tiles from the diagonal down. Each
 * warp owns 16 keys; the products are taken transposed (keys as rows), so
 * Pᵀ and dSᵀ are A fragments straight from the accumulators. dK and dV sum
 * over the group in registers, in the order of the heads: one owner per
 * element, and the same bits every run. */
template <int HD>
static __global__ void __launch_bounds__(FA_THREADS) fa_bwd_kv_kernel(fa_args a) {
    __shared__ __align__(16) hy_bf16 sq[FA_ROWS * (HD + 8)];
    __shared__ __align__(16) hy_bf16 sdo[FA_ROWS * (HD + 8)];
    __shared__ float slse[FA_ROWS], sdsum[FA_ROWS];
    fa_where w = fa_where_of(a, a.NKV, 0);
    int T = a.T, C = a.C, kb = w.blk, k0 = kb * FA_ROWS, causal = a.causal, j = w.head;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;

    /* This warp's 16 keys of K and of V as A fragments, staged. */
    uint32_t kf[HD / 16][4], vf[HD / 16][4];
    fa_load_tile<HD>(sq, fa_k(a, w, j), a.ld, k0, T, a.hd, a.vec_qkv);
    fa_load_tile<HD>(sdo, fa_v(a, w, j), a.ld, k0, T, a.hd, a.vec_qkv);
    __syncthreads();
    fa_tile_rows<HD>(kf, sq);
    fa_tile_rows<HD>(vf, sdo);
    __syncthreads();

    float dk[HD / 8][4], dv[HD / 8][4];
    fa_zero<HD / 8>(dk);
    fa_zero<HD / 8>(dv);
    const int keys[2] = { k0 + warp * 16 + g, k0 + warp * 16 + g + 8 };
    int nq = (T + FA_ROWS - 1) / FA_ROWS;
    for (int h = j * a.group; h < (j + 1) * a.group; h++) {
        const hy_bf16 *qh = fa_q(a, w, h), *doh = fa_do(a, w, h);
        const float *lse = a.lse + ((size_t)w.b * a.NH + h) * T;
        const float *dsum = a.dsum + ((size_t)w.b * a.NH + h) * T;
        for (int qb = causal ? kb : 0; qb < nq; qb++) {
            int q0 = qb * FA_ROWS;
            fa_load_tile<HD>(sq, qh, a.ld, q0, T, a.hd, a.vec_qkv);
            fa_load_tile<HD>(sdo, doh, (size_t)C, q0, T, a.hd, a.vec_do);
            for (int i = threadIdx.x; i < FA_ROWS; i += FA_THREADS) {
                int r = q0 + i;
                slse[i] = r < T ? lse[r] : 0.0f;
                sdsum[i] = r < T ? dsum[r] : 0.0f;
            }
            __syncthreads();
            /* Pᵀ: 16 keys × 64 queries, from Sᵀ = K Qᵀ. */
            float pt[FA_ROWS / 8][4];
            fa_times_rows<HD>(pt, kf, sq);
#pragma unroll
            for (int nt = 0; nt < FA_ROWS / 8; nt++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int qi = nt * 8 + 2 * t + (e & 1), query = q0 + qi, key = keys[e >> 1];
                    float p = exp2f(pt[nt][e] * a.scale_log2 - slse[qi]);
                    if (query >= T || key >= T || (causal && key > query)) p = 0.0f;
                    pt[nt][e] = p;
                }
            }
            fa_acc_times_tile<HD>(dv, pt, sdo);   /* dV += Pᵀ dO */
            /* dSᵀ = Pᵀ ∘ (dPᵀ − D), dPᵀ = V dOᵀ */
            float ds[FA_ROWS / 8][4];
            fa_times_rows<HD>(ds, vf, sdo);
#pragma unroll
            for (int nt = 0; nt < FA_ROWS / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int qi = nt * 8 + 2 * t + (e & 1);
                    ds[nt][e] = pt[nt][e] * (ds[nt][e] - sdsum[qi]);
                }
            fa_acc_times_tile<HD>(dk, ds, sq);   /* dK += dSᵀ Q */
            __syncthreads();
        }
    }
    fa_add_rows<HD>(a, w, keys, (size_t)(a.NH + j) * a.hd, dk, a.scale);
    fa_add_rows<HD>(a, w, keys, (size_t)(a.NH + a.NKV + j) * a.hd, dv, 1.0f);
}

/* dQ of 64 queries of one query head h of sequence b: the key tiles (of
 * h's kv head) up to the diagonal. */
template <int HD>
static __global__ void __launch_bounds__(FA_THREADS) fa_bwd_q_kernel(fa_args a) {
    __shared__ __align__(16) hy_bf16 sk[FA_ROWS * (HD + 8)];
    __shared__ __align__(16) hy_bf16 sv[FA_ROWS * (HD + 8)];
    fa_where w = fa_where_of(a, a.NH, 1);
    int T = a.T, C = a.C, qb = w.blk, q0 = qb * FA_ROWS, causal = a.causal, h = w.head;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const hy_bf16 *kh = fa_k(a, w, h / a.group), *vh = fa_v(a, w, h / a.group);
    size_t bh = (size_t)w.b * a.NH + h;

    /* This warp's 16 rows of Q and of dO as A fragments, staged. */
    uint32_t qf[HD / 16][4], dof[HD / 16][4];
    fa_load_tile<HD>(sk, fa_q(a, w, h), a.ld, q0, T, a.hd, a.vec_qkv);
    fa_load_tile<HD>(sv, fa_do(a, w, h), (size_t)C, q0, T, a.hd, a.vec_do);
    __syncthreads();
    fa_tile_rows<HD>(qf, sk);
    fa_tile_rows<HD>(dof, sv);
    __syncthreads();

    const int rows[2] = { q0 + warp * 16 + g, q0 + warp * 16 + g + 8 };
    float L[2], D[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        L[r] = rows[r] < T ? a.lse[bh * T + rows[r]] : 0.0f;
        D[r] = rows[r] < T ? a.dsum[bh * T + rows[r]] : 0.0f;
    }
    float dq[HD / 8][4];
    fa_zero<HD / 8>(dq);
    int last = causal ? qb : (T - 1) / FA_ROWS;
    for (int kb = 0; kb <= last; kb++) {
        int k0 = kb * FA_ROWS;
        fa_load_tile<HD>(sk, kh, a.ld, k0, T, a.hd, a.vec_qkv);
        fa_load_tile<HD>(sv, vh, a.ld, k0, T, a.hd, a.vec_qkv);
        __syncthreads();
        /* dS = P ∘ (dP − D): 16 rows × 64 keys, P from S = Q Kᵀ, dP = dO Vᵀ */
        float s[FA_ROWS / 8][4], ds[FA_ROWS / 8][4];
        fa_times_rows<HD>(s, qf, sk);
        fa_times_rows<HD>(ds, dof, sv);
#pragma unroll
        for (int nt = 0; nt < FA_ROWS / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int key = k0 + nt * 8 + 2 * t + (e & 1), row = rows[e >> 1];
                float p = exp2f(s[nt][e] * a.scale_log2 - L[e >> 1]);
                if (key >= T || row >= T || (causal && key > row)) p = 0.0f;
                ds[nt][e] = p * (ds[nt][e] - D[e >> 1]);
            }
        fa_acc_times_tile<HD>(dq, ds, sk);   /* dQ += dS K */
        __syncthreads();
    }
    fa_add_rows<HD>(a, w, rows, (size_t)h * a.hd, dq, a.scale);
}

// ----------------------------------------------------------------------------
// Launchers

/* The padded head size of the instantiation for hd, or 0 when none fits. */
static int fa_hd(int hd) { return hd <= 32 ? 32 : hd <= 64 ? 64 : hd <= 128 ? 128 : 0; }

/* Bytes of D: one float per (b, h, t). */
static size_t fa_rows_bytes(int B, int T, int NH) { return fa_align((size_t)B * NH * T * sizeof(float)); }

size_t hy_k_attention_scratch(int B, int T, int NH, int NKV, int hd) {
    (void)NKV;
    (void)hd;
    if (B <= 0 || T <= 0 || NH <= 0) return 0;
    return fa_rows_bytes(B, T, NH);   /* D */
}

static int fa_aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* The shape fields of a, checked. */
static int fa_args_make(fa_args *a, const hy_bf16 *qkv, int B, int T, int NH, int NKV, int hd,
                        int causal, const char *op, hy_error *err) {
    memset(a, 0, sizeof *a);
    if (fa_hd(hd) == 0)
        return hy_fail(err, HY_ERR_RUNTIME, "%s: head size %d is over the 128 the CUDA attention "
                       "supports", op, hd);
    if (NKV <= 0 || NH % NKV != 0)
        return hy_fail(err, HY_ERR_RUNTIME, "%s: %d kv heads do not divide %d query heads", op, NKV,
                       NH);
    int nblocks = (T + FA_ROWS - 1) / FA_ROWS;
    if ((size_t)B * NH * nblocks > (size_t)INT32_MAX)
        return hy_fail(err, HY_ERR_RUNTIME, "%s: %d x %d heads of %d tokens are too many blocks", op,
                       B, NH, T);
    a->qkv = qkv;
    a->T = T;
    a->C = NH * hd;
    a->NH = NH;
    a->NKV = NKV;
    a->group = NH / NKV;
    a->hd = hd;
    a->ld = (size_t)(NH + 2 * NKV) * hd;
    a->BH = B * NH;
    a->nblocks = nblocks;
    a->causal = causal != 0;
    a->vec_qkv = hd % 8 == 0 && fa_aligned16(qkv);   /* then the row stride is a multiple of 8 too */
    a->scale = 1.0f / sqrtf((float)hd);
    a->scale_log2 = a->scale * FA_LOG2E;
    return HY_OK;
}

/* One kernel per (b, head, block of 64 rows): heads query heads, or kv
 * heads for the dK, dV kernel. */
static int fa_run(void (*const k[3])(fa_args), const fa_args *a, int heads, cudaStream_t s,
                  const char *what, hy_error *err) {
    int i = fa_hd(a->hd) == 32 ? 0 : fa_hd(a->hd) == 64 ? 1 : 2;
    size_t blocks = (size_t)(a->BH / a->NH) * heads * a->nblocks;
    k[i]<<<(unsigned)blocks, FA_THREADS, 0, s>>>(*a);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? HY_OK : HY_CUDA_FAIL(err, e, what);
}

static void (*const fa_fwd[3])(fa_args) = { fa_fwd_kernel<32>, fa_fwd_kernel<64>, fa_fwd_kernel<128> };
static void (*const fa_kv[3])(fa_args) = { fa_bwd_kv_kernel<32>, fa_bwd_kv_kernel<64>,
                                           fa_bwd_kv_kernel<128> };
static void (*const fa_dq[3])(fa_args) = { fa_bwd_q_kernel<32>, fa_bwd_q_kernel<64>, fa_bwd_q_kernel<128> };

int hy_k_attention_fwd(cudaStream_t s, hy_bf16 *out, float *lse, const hy_bf16 *qkv, int B, int T,
                       int NH, int NKV, int hd, int causal, hy_error *err) {
    if (B <= 0 || T <= 0 || NH <= 0) return HY_OK;
    fa_args a;
    int rc = fa_args_make(&a, qkv, B, T, NH, NKV, hd, causal, "attention_fwd", err);
    if (rc) return rc;
    a.out = out;
    a.lse = lse;
    return fa_run(fa_fwd, &a, NH, s, "attention_fwd (kernel launch)", err);
}

int hy_k_attention_bwd(cudaStream_t s, hy_bf16 *dqkv, void *scratch, const hy_bf16 *dout,
                       const hy_bf16 *qkv, const hy_bf16 *out, const float *lse, int B, int T,
                       int NH, int NKV, int hd, int causal, int overwrite, hy_error *err) {
    if (B <= 0 || T <= 0 || NH <= 0) return HY_OK;
    fa_args a;
    int rc = fa_args_make(&a, qkv, B, T, NH, NKV, hd, causal, "attention_bwd", err);
    if (rc) return rc;
    a.lse = (float *)lse;   /* read only by the backward's kernels */
    a.o = out;
    a.dout = dout;
    a.vec_do = hd % 8 == 0 && fa_aligned16(dout);
    a.dsum = (float *)scratch;
    a.dqkv = dqkv;
    a.overwrite = overwrite != 0;
    size_t n = (size_t)a.BH * T;
    fa_dot_kernel<<<(unsigned)((n + FA_DOT_WARPS - 1) / FA_DOT_WARPS), 32 * FA_DOT_WARPS, 0, s>>>(a, n);
    HY_CUDA_CHECK(cudaGetLastError(), err);
    if ((rc = fa_run(fa_kv, &a, NKV, s, "attention_bwd (dk, dv)", err))) return rc;
    return fa_run(fa_dq, &a, NH, s, "attention_bwd (dq)", err);
}

// ----------------------------------------------------------------------------
// Preload (kernels.cuh)

int hy_k_attention_preload(hy_error *err) {
    for (int i = 0; i < 3; i++) {
        HY_CUDA_PRELOAD(fa_fwd[i], err);
        HY_CUDA_PRELOAD(fa_kv[i], err);
        HY_CUDA_PRELOAD(fa_dq[i], err);
    }
    HY_CUDA_PRELOAD(fa_dot_kernel, err);
    return HY_OK;
}
