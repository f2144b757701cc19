/*
 * attention_sm90.cu — the fused attention again, for Hopper only (sm_90a):
 * the same function as attention.cu (kernels/cpu/ops.h's attention, the
 * online softmax, L = m + log2 l per row in base 2), written for the
 * H100/H200's own machinery the way FlashAttention-3 is built (docs/cuda.md
 * "The Hopper attention kernel": its design, budgets and FLOP counts):
 *
 *   - products by warpgroup `wgmma` (bf16 in, fp32 accumulate; A from
 *     shared memory or registers, B from shared memory);
 *   - tiles brought by the bulk tensor copy engine (TMA,
 *     cp.async.bulk.tensor) into a 2- or 3-stage shared-memory ring, each
 *     stage with two mbarriers: `full` (the copy's bytes arrived) and
 *     `empty` (every consumer thread is done reading it);
 *   - three warpgroups per block: warpgroup 0 the producer (one thread
 *     issues the copies; setmaxnreg gives its registers away), 1 and 2
 *     the consumers, 64 rows each, with 240 registers a thread.
 *
 * Layout (the interface kernels.cuh gives both kernels): qkv [B, T, W],
 * W = (NH + 2·NKV)·hd: the NH query heads, then NKV key heads, then NKV
 * value heads, hd wide each; query head h reads key/value head
 * h / (NH / NKV) (grouped-query attention; K and V are never copied).
 * out [B, T, NH·hd]; lse [B, NH, T] fp32, base 2 (what attention.cu
 * writes, so one kernel's forward can feed the other's backward).
 *
 * Shared-memory tiles: a tile of R rows × hd columns is hd/64 column
 * blocks of R rows × 128 bytes, each written by one TMA box {64, R, 1}
 * with the 128-byte swizzle (16-byte chunk c of row r lands at chunk
 * c ^ (r % 8)), every block 1024-byte aligned. wgmma reads them through
 * descriptors (PTX ISA, "Matrix Descriptor Format"): K-major (the
 * contraction runs along the row: Q, K for S = Q Kᵀ) with SBO = 1024 (8
 * rows), a k-step of 16 columns = +32 bytes inside a block; N-major (the
 * contraction runs down the rows: V for P V, dO for Pᵀ dO, Q for dSᵀ Q, K
 * for dS K; the `imm-trans-b` 1) with SBO = 1024 (8 rows of the
 * contraction) and LBO = the column-block stride (the next 64 columns).
 * Rows past T come in as zeros (the tensor map's bounds are [B, T, W])
 * and are masked anyway.
 *
 * Fragments: the accumulator of m64nNk16 is, per warp w of the
 * warpgroup, rows 16w + g and 16w + g + 8 (lane = 4g + t), column pair
 * 8j + 2t, +1 in registers 4j .. 4j+3 — mma.sync's m16n8 layout repeated
 * along N — and the register A operand of m64nNk16 is mma.sync's m16k16
 * A fragment, so two accumulator blocks rounded to bf16 are the A of the
 * next product (P V, Pᵀ dO, dSᵀ Q, dS K) and P and dS never leave
 * registers, as in attention.cu.
 *
 * Forward: a block per 128 queries of one (b, h) walks key tiles of 128
 * (causal: up to the diagonal). Backward, two kernels so each gradient
 * element has one owner (deterministic, no atomics), both recomputing P
 * from L: one per 128 keys of one (b, key/value head) walks every query
 * tile of 64 of every query head of its group, for dK and dV (summing the
 * group in registers); one per 128 queries walks the key tiles of 64, for
 * dQ. D = rowsum(dO ∘ O) first, into the scratch, by attention.cu's kernel
 * (hy_k_attention_dsum: one definition for both backwards).
 *
 * Everything here is untested on hardware until a GPU check runs
 * (docs/cuda.md); attention.cu stays the default and the fallback:
 * hy_k_attention_sm90_supported says where this one may run.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <cuda.h>           /* CUtensorMap and its enums (types only: no -lcuda) */
#include <cudaTypedefs.h>   /* PFN_cuTensorMapEncodeTiled */
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "check.cuh"
#include "kernels.cuh"
#include "flash.cuh"

#define FA3_WG 128                   /* threads per warpgroup */
#define FA3_THREADS (3 * FA3_WG)      /* producer + two consumers */
#define FA3_CONSUMERS (2 * FA3_WG)
#define FA3_BIG 128                  /* rows of a block's own tile, and of the forward's key tiles */
#define FA3_SMALL 64                 /* rows of the backward's streamed tiles */
#define FA3_BOX 64                   /* bf16 columns per 128-byte swizzled row: one TMA box */
#define FA3_REGS_PRODUCER 24
#define FA3_REGS_CONSUMER 240
#define FA3_LOG2E 1.4426950408889634f

/* The compiled device code is sm_90a's only (Makefile); elsewhere the
 * kernels trap rather than compute nothing. */
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FA3_DEVICE_OK 1
#else
#define FA3_DEVICE_OK 0
#endif

/* What every kernel is told. Row t of sequence b: qkv + (b·T + t)·W,
 * out and dO + (b·T + t)·NH·hd; L and D at (b·NH + h)·T + t. */
typedef struct {
    hy_bf16 *out;           /* forward */
    float *lse;             /* forward writes, backward reads */
    float *dsum;            /* backward: D */
    hy_bf16 *dqkv;          /* backward: += (or = with overwrite) */
    int B, T, NH, NKV, hd, group, W;
    int causal, overwrite;
    int nblocks;            /* blocks of rows per (b, head) */
    float scale, scale_log2;
} fa3_args;

// ----------------------------------------------------------------------------
// Shared memory, mbarriers, TMA

static __device__ __forceinline__ uint32_t fa3_smem(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

static __device__ __forceinline__ void fa3_bar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

/* The producer's arrival, announcing `bytes` of copies to come. */
static __device__ __forceinline__ void fa3_bar_expect(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
                 : "memory");
}

static __device__ __forceinline__ void fa3_bar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

/* Until the barrier's phase of this parity has completed. */
static __device__ __forceinline__ void fa3_bar_wait(uint32_t bar, uint32_t parity) {
    asm volatile("{\n.reg .pred done;\n"
                 "FA3_WAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra FA3_WAIT;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}

/* One box {64 columns, rows, 1} at (col, row, b) of the map into dst,
 * completing on bar. */
static __device__ __forceinline__ void fa3_tma(uint32_t dst, const CUtensorMap *map, uint32_t bar, int col,
                                              int row, int b) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1, {%2, %3, %4}], [%5];" ::"r"(dst),
                 "l"((uint64_t)map), "r"(col), "r"(row), "r"(b), "r"(bar)
                 : "memory");
}

/* A tile: rows row.. of the hd columns from col, as hd/64 boxes, column
 * block c at dst + c·rows·128. */
static __device__ __forceinline__ void fa3_tma_tile(uint32_t dst, const CUtensorMap *map, uint32_t bar,
                                                   int col, int row, int b, int hd, int rows) {
    for (int c = 0; c < hd / FA3_BOX; c++)
        fa3_tma(dst + (uint32_t)(c * rows * 128), map, bar, col + c * FA3_BOX, row, b);
}

// ----------------------------------------------------------------------------
// wgmma

/* A shared-memory matrix descriptor, 128-byte swizzle (the file comment). */
static __device__ __forceinline__ uint64_t fa3_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)((lbo & 0x3FFFFu) >> 4) << 16) |
           ((uint64_t)((sbo & 0x3FFFFu) >> 4) << 32) | (1ull << 62);
}

/* K-major: rows r0.. of a tile of `rows` rows, k-step ks (16 columns). */
static __device__ __forceinline__ uint64_t fa3_desc_k(uint32_t tile, int rows, int r0, int ks) {
    return fa3_desc(tile + (uint32_t)((ks / 4) * rows * 128 + r0 * 128 + (ks % 4) * 32), 16, 1024);
}

/* N-major: the contraction over rows 16·kk .. 16·kk+15, all columns. */
static __device__ __forceinline__ uint64_t fa3_desc_n(uint32_t tile, int rows, int kk) {
    return fa3_desc(tile + (uint32_t)(kk * 16 * 128), (uint32_t)(rows * 128), 1024);
}

static __device__ __forceinline__ void fa3_fence(void) { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
static __device__ __forceinline__ void fa3_commit(void) {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
static __device__ __forceinline__ void fa3_wait_all(void) {
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}

/* Pins an accumulator's registers at this point: the products write
 * them asynchronously, so nothing may read, move or reuse them between
 * the issue and the wait. */
template <int N>
static __device__ __forceinline__ void fa3_keep(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* d (64 × N over the warpgroup) (+)= A · B, A and B in shared memory,
 * both K-major. accumulate = 0: d = A · B. */
template <int N>
__device__ __forceinline__ void fa3_mma_ss(float (&d)[N / 2], uint64_t a, uint64_t b, int accumulate);
/* d (+)= A · B, A from registers (mma.sync's A fragment), B N-major. */
template <int N>
__device__ __forceinline__ void fa3_mma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b, int accumulate);


/* The four shapes used: S-like products (N = 64 or 128 keys) and the
 * products into hd columns (64 or 128); written out because an asm
 * statement names each register. */
template <> __device__ __forceinline__ void fa3_mma_ss<64>(float (&d)[32], uint64_t a, uint64_t b, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31},"
                 " %32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                 "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                 "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "l"(a), "l"(b), "r"(accumulate));
}

template <> __device__ __forceinline__ void fa3_mma_ss<128>(float (&d)[64], uint64_t a, uint64_t b, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
                 " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
                 " %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},"
                 " %64, %65, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                 "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                 "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                 "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                 "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                 "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                 "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "l"(a), "l"(b), "r"(accumulate));
}

template <> __device__ __forceinline__ void fa3_mma_rs<64>(float (&d)[32], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31},"
                 " {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                 "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                 "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}

template <> __device__ __forceinline__ void fa3_mma_rs<128>(float (&d)[64], const uint32_t (&a)[4], uint64_t b, int accumulate) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
                 " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
                 " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
                 " %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},"
                 " {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
                 "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
                 "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                 "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
                 "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
                 "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                 "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
                 "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate));
}


// ----------------------------------------------------------------------------
// Pieces the consumers share

/* Accumulator columns 16·kk .. 16·kk+15 as the A fragment of those 16
 * columns, rounded to bf16. */
template <int N>
static __device__ __forceinline__ void fa3_to_a(uint32_t (&a)[N / 16][4], const float (&d)[N / 2]) {
#pragma unroll
    for (int kk = 0; kk < N / 16; kk++) {
        a[kk][0] = hy_k_pack_bf16x2(d[8 * kk + 0], d[8 * kk + 1]);
        a[kk][1] = hy_k_pack_bf16x2(d[8 * kk + 2], d[8 * kk + 3]);
        a[kk][2] = hy_k_pack_bf16x2(d[8 * kk + 4], d[8 * kk + 5]);
        a[kk][3] = hy_k_pack_bf16x2(d[8 * kk + 6], d[8 * kk + 7]);
    }
}

/* The accumulator's column of register i for this lane (0 .. N−1), and
 * its row among the warp's 16 (0 .. 15). */
static __device__ __forceinline__ int fa3_col(int i) { return 8 * (i >> 2) + 2 * (threadIdx.x & 3) + (i & 1); }
static __device__ __forceinline__ int fa3_row(int i) { return ((threadIdx.x & 31) >> 2) + 8 * ((i >> 1) & 1); }

/* Rows t0 .. of [*, ld] array p, columns col0 .. col0+hd−1 (+)= factor ·
 * d, rounded to bf16, rows below T only: this warp's 16 rows of the
 * consumer's 64 (t0 is the consumer's first row). Each element has one
 * owner; pairs are stored as one word. */
template <int HD>
static __device__ __forceinline__ void fa3_store_rows(hy_bf16 *p, size_t ld, int t0, int T, int col0,
                                                     const float (&d)[HD / 2], float factor, int add) {
    int warp16 = ((threadIdx.x % FA3_WG) >> 5) * 16;
#pragma unroll
    for (int i = 0; i < HD / 2; i += 2) {
        int row = t0 + warp16 + fa3_row(i);
        if (row >= T) continue;
        __nv_bfloat162 *q = (__nv_bfloat162 *)(p + (size_t)row * ld + col0 + fa3_col(i));
        float lo = d[i] * factor, hi = d[i + 1] * factor;
        if (add) {
            float2 old = __bfloat1622float2(*q);
            lo += old.x;
            hi += old.y;
        }
        *q = __floats2bfloat162_rn(lo, hi);
    }
}

// ----------------------------------------------------------------------------
// Forward: a block per 128 queries of one (b, h), key tiles of 128

template <int HD, int STAGES>
static __global__ void __launch_bounds__(FA3_THREADS, 1)
    fa3_fwd_kernel(const __grid_constant__ CUtensorMap qkv_map, const fa3_args a) {
#if FA3_DEVICE_OK
    __shared__ __align__(8) uint64_t bars[2 * STAGES + 1];
    extern __shared__ uint8_t fa3_dyn[];
    const uint32_t TILE = FA3_BIG * HD * 2;
    const uint32_t sq = (fa3_smem(fa3_dyn) + 1023u) & ~1023u, ring = sq + TILE;
    const uint32_t full = fa3_smem(bars), empty = full + 8 * STAGES, qbar = full + 16 * STAGES;
    int BH = a.B * a.NH, i0 = (int)blockIdx.x, bh = i0 % BH;
    int qb = a.nblocks - 1 - i0 / BH, b = bh / a.NH, h = bh % a.NH, kvh = h / a.group;
    int q0 = qb * FA3_BIG, nk = (a.T + FA3_BIG - 1) / FA3_BIG;
    int ntiles = a.causal ? min(qb + 1, nk) : nk;
    int wg = threadIdx.x / FA3_WG;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            fa3_bar_init(full + 8 * s, 1);
            fa3_bar_init(empty + 8 * s, FA3_CONSUMERS);
        }
        fa3_bar_init(qbar, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(FA3_REGS_PRODUCER));
        if (threadIdx.x == 0) {
            fa3_bar_expect(qbar, TILE);
            fa3_tma_tile(sq, &qkv_map, qbar, h * a.hd, q0, b, HD, FA3_BIG);
            int kcol = (a.NH + kvh) * a.hd, vcol = (a.NH + a.NKV + kvh) * a.hd;
            for (int i = 0; i < ntiles; i++) {
                int s = i % STAGES;
                if (i >= STAGES) fa3_bar_wait(empty + 8 * s, (uint32_t)((i / STAGES - 1) & 1));
                uint32_t sk = ring + (uint32_t)s * 2 * TILE;
                fa3_bar_expect(full + 8 * s, 2 * TILE);
                fa3_tma_tile(sk, &qkv_map, full + 8 * s, kcol, i * FA3_BIG, b, HD, FA3_BIG);
                fa3_tma_tile(sk + TILE, &qkv_map, full + 8 * s, vcol, i * FA3_BIG, b, HD, FA3_BIG);
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(FA3_REGS_CONSUMER));

    /* A consumer: 64 query rows, from r0 (its warp: 16 of them). */
    const int cw = wg - 1, r0 = q0 + cw * 64, warp16 = ((threadIdx.x % FA3_WG) >> 5) * 16;
    float o[HD / 2];
#pragma unroll
    for (int i = 0; i < HD / 2; i++) o[i] = 0.0f;
    float m[2] = { -INFINITY, -INFINITY }, l[2] = { 0.0f, 0.0f };
    fa3_bar_wait(qbar, 0);
    for (int it = 0; it < ntiles; it++) {
        int s = it % STAGES, k0 = it * FA3_BIG;
        uint32_t sk = ring + (uint32_t)s * 2 * TILE, sv = sk + TILE;
        fa3_bar_wait(full + 8 * s, (uint32_t)((it / STAGES) & 1));

        /* S = Q Kᵀ: 64 rows × 128 keys */
        float sc[FA3_BIG / 2];
        fa3_fence();
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++)
            fa3_mma_ss<FA3_BIG>(sc, fa3_desc_k(sq, FA3_BIG, cw * 64, ks), fa3_desc_k(sk, FA3_BIG, 0, ks), ks > 0);
        fa3_commit();
        fa3_keep(sc);
        fa3_wait_all();
        fa3_keep(sc);

        /* The online softmax in the log2 domain, masked keys −inf. */
        float mx[2] = { m[0], m[1] };
#pragma unroll
        for (int i = 0; i < FA3_BIG / 2; i++) {
            int key = k0 + fa3_col(i), row = r0 + warp16 + fa3_row(i);
            float x = sc[i] * a.scale_log2;
            if (key >= a.T || (a.causal && key > row)) x = -INFINITY;
            sc[i] = x;
            mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], x);
        }
        float alpha[2];
        hy_k_softmax_step(m, l, mx, alpha);
#pragma unroll
        for (int i = 0; i < HD / 2; i++) o[i] *= alpha[(i >> 1) & 1];
#pragma unroll
        for (int i = 0; i < FA3_BIG / 2; i++) {
            float p = exp2f(sc[i] - m[(i >> 1) & 1]);
            sc[i] = p;
            l[(i >> 1) & 1] += p;
        }
        uint32_t pa[FA3_BIG / 16][4];
        fa3_to_a<FA3_BIG>(pa, sc);

        /* O += P V */
        fa3_keep(o);
        fa3_fence();
#pragma unroll
        for (int kk = 0; kk < FA3_BIG / 16; kk++) fa3_mma_rs<HD>(o, pa[kk], fa3_desc_n(sv, FA3_BIG, kk), 1);
        fa3_commit();
        fa3_keep(o);
        fa3_wait_all();
        fa3_keep(o);
        fa3_bar_arrive(empty + 8 * s);
    }

    float inv[2], L[2];
    hy_k_softmax_end(m, l, inv, L);
#pragma unroll
    for (int i = 0; i < HD / 2; i++) o[i] *= inv[(i >> 1) & 1];
    size_t ld = (size_t)a.NH * a.hd;
    fa3_store_rows<HD>(a.out + (size_t)b * a.T * ld, ld, r0, a.T, h * a.hd, o, 1.0f, 0);
    if ((threadIdx.x & 3) == 0)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            int row = r0 + warp16 + fa3_row(2 * r);
            if (row < a.T) a.lse[(size_t)bh * a.T + row] = L[r];
        }
#else
    (void)a;
    __trap();
#endif
}

// ----------------------------------------------------------------------------
// Backward

/* dK and dV of 128 keys of one (b, key/value head): every query tile of
 * 64 (causal: from the diagonal) of every query head of the group. Each
 * consumer owns 64 keys; the products are taken transposed (keys as
 * rows), so Pᵀ and dSᵀ are A operands straight from the accumulators:
 *   Sᵀ = K Qᵀ, dPᵀ = V dOᵀ, dV += Pᵀ dO, dK += dSᵀ Q. */
template <int HD, int STAGES>
static __global__ void __launch_bounds__(FA3_THREADS, 1)
    fa3_bwd_kv_kernel(const __grid_constant__ CUtensorMap qkv_big, const __grid_constant__ CUtensorMap qkv_small,
                     const __grid_constant__ CUtensorMap do_small, const fa3_args a) {
#if FA3_DEVICE_OK
    __shared__ __align__(8) uint64_t bars[2 * STAGES + 1];
    extern __shared__ uint8_t fa3_dyn[];
    const uint32_t BIG = FA3_BIG * HD * 2, SMALL = FA3_SMALL * HD * 2;
    const uint32_t sk = (fa3_smem(fa3_dyn) + 1023u) & ~1023u, sv = sk + BIG, ring = sv + BIG;
    const uint32_t full = fa3_smem(bars), empty = full + 8 * STAGES, kvbar = full + 16 * STAGES;
    int BKV = a.B * a.NKV, i0 = (int)blockIdx.x, bk = i0 % BKV;
    int kb = i0 / BKV, b = bk / a.NKV, kvh = bk % a.NKV, k0 = kb * FA3_BIG;
    int nq = (a.T + FA3_SMALL - 1) / FA3_SMALL, first = a.causal ? k0 / FA3_SMALL : 0;
    int per_head = nq - first, steps = a.group * per_head;
    int wg = threadIdx.x / FA3_WG;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            fa3_bar_init(full + 8 * s, 1);
            fa3_bar_init(empty + 8 * s, FA3_CONSUMERS);
        }
        fa3_bar_init(kvbar, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(FA3_REGS_PRODUCER));
        if (threadIdx.x == 0) {
            fa3_bar_expect(kvbar, 2 * BIG);
            fa3_tma_tile(sk, &qkv_big, kvbar, (a.NH + kvh) * a.hd, k0, b, HD, FA3_BIG);
            fa3_tma_tile(sv, &qkv_big, kvbar, (a.NH + a.NKV + kvh) * a.hd, k0, b, HD, FA3_BIG);
            for (int i = 0; i < steps; i++) {
                int s = i % STAGES, h = kvh * a.group + i / per_head, q0 = (first + i % per_head) * FA3_SMALL;
                if (i >= STAGES) fa3_bar_wait(empty + 8 * s, (uint32_t)((i / STAGES - 1) & 1));
                uint32_t sq = ring + (uint32_t)s * 2 * SMALL;
                fa3_bar_expect(full + 8 * s, 2 * SMALL);
                fa3_tma_tile(sq, &qkv_small, full + 8 * s, h * a.hd, q0, b, HD, FA3_SMALL);
                fa3_tma_tile(sq + SMALL, &do_small, full + 8 * s, h * a.hd, q0, b, HD, FA3_SMALL);
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(FA3_REGS_CONSUMER));

    const int cw = wg - 1, kr0 = k0 + cw * 64, warp16 = ((threadIdx.x % FA3_WG) >> 5) * 16;
    float dk[HD / 2], dv[HD / 2];
#pragma unroll
    for (int i = 0; i < HD / 2; i++) dk[i] = dv[i] = 0.0f;
    fa3_bar_wait(kvbar, 0);
    for (int it = 0; it < steps; it++) {
        int s = it % STAGES, h = kvh * a.group + it / per_head, q0 = (first + it % per_head) * FA3_SMALL;
        uint32_t sq = ring + (uint32_t)s * 2 * SMALL, sdo = sq + SMALL;
        fa3_bar_wait(full + 8 * s, (uint32_t)((it / STAGES) & 1));

        float st[FA3_SMALL / 2], dpt[FA3_SMALL / 2];
        fa3_fence();
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++)
            fa3_mma_ss<FA3_SMALL>(st, fa3_desc_k(sk, FA3_BIG, cw * 64, ks), fa3_desc_k(sq, FA3_SMALL, 0, ks), ks > 0);
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++)
            fa3_mma_ss<FA3_SMALL>(dpt, fa3_desc_k(sv, FA3_BIG, cw * 64, ks), fa3_desc_k(sdo, FA3_SMALL, 0, ks), ks > 0);
        fa3_commit();
        fa3_keep(st);
        fa3_keep(dpt);
        /* L and D of this lane's query columns, read while the products run */
        const float *L = a.lse + ((size_t)b * a.NH + h) * a.T, *Dv = a.dsum + ((size_t)b * a.NH + h) * a.T;
        float lq[FA3_SMALL / 4], dd[FA3_SMALL / 4];
#pragma unroll
        for (int i = 0; i < FA3_SMALL / 4; i++) {
            int q = q0 + fa3_col(4 * (i >> 1) + (i & 1));
            lq[i] = q < a.T ? __ldg(L + q) : 0.0f;
            dd[i] = q < a.T ? __ldg(Dv + q) : 0.0f;
        }
        fa3_wait_all();
        fa3_keep(st);
        fa3_keep(dpt);

        /* Pᵀ = exp2(Sᵀ·scale·log2e − L) (0 where masked), dSᵀ = Pᵀ ∘ (dPᵀ − D) */
#pragma unroll
        for (int i = 0; i < FA3_SMALL / 2; i++) {
            int c = (i >> 2) * 2 + (i & 1);   /* into lq, dd: this lane's columns in order */
            int query = q0 + fa3_col(i), key = kr0 + warp16 + fa3_row(i);
            float p = exp2f(st[i] * a.scale_log2 - lq[c]);
            if (query >= a.T || key >= a.T || (a.causal && key > query)) p = 0.0f;
            st[i] = p;
            dpt[i] = p * (dpt[i] - dd[c]);
        }
        uint32_t pa[FA3_SMALL / 16][4], dsa[FA3_SMALL / 16][4];
        fa3_to_a<FA3_SMALL>(pa, st);
        fa3_to_a<FA3_SMALL>(dsa, dpt);

        fa3_keep(dv);
        fa3_keep(dk);
        fa3_fence();
#pragma unroll
        for (int kk = 0; kk < FA3_SMALL / 16; kk++) fa3_mma_rs<HD>(dv, pa[kk], fa3_desc_n(sdo, FA3_SMALL, kk), 1);
#pragma unroll
        for (int kk = 0; kk < FA3_SMALL / 16; kk++) fa3_mma_rs<HD>(dk, dsa[kk], fa3_desc_n(sq, FA3_SMALL, kk), 1);
        fa3_commit();
        fa3_keep(dv);
        fa3_keep(dk);
        fa3_wait_all();
        fa3_keep(dv);
        fa3_keep(dk);
        fa3_bar_arrive(empty + 8 * s);
    }
    hy_bf16 *base = a.dqkv + (size_t)b * a.T * a.W;
    fa3_store_rows<HD>(base, (size_t)a.W, kr0, a.T, (a.NH + kvh) * a.hd, dk, a.scale, !a.overwrite);
    fa3_store_rows<HD>(base, (size_t)a.W, kr0, a.T, (a.NH + a.NKV + kvh) * a.hd, dv, 1.0f, !a.overwrite);
#else
    (void)a;
    __trap();
#endif
}

/* dQ of 128 queries of one (b, h): the key tiles of 64 up to the
 * diagonal. S = Q Kᵀ, dP = dO Vᵀ, dQ += dS K. */
template <int HD, int STAGES>
static __global__ void __launch_bounds__(FA3_THREADS, 1)
    fa3_bwd_q_kernel(const __grid_constant__ CUtensorMap qkv_big, const __grid_constant__ CUtensorMap qkv_small,
                    const __grid_constant__ CUtensorMap do_big, const fa3_args a) {
#if FA3_DEVICE_OK
    __shared__ __align__(8) uint64_t bars[2 * STAGES + 1];
    extern __shared__ uint8_t fa3_dyn[];
    const uint32_t BIG = FA3_BIG * HD * 2, SMALL = FA3_SMALL * HD * 2;
    const uint32_t sq = (fa3_smem(fa3_dyn) + 1023u) & ~1023u, sdo = sq + BIG, ring = sdo + BIG;
    const uint32_t full = fa3_smem(bars), empty = full + 8 * STAGES, qbar = full + 16 * STAGES;
    int BH = a.B * a.NH, i0 = (int)blockIdx.x, bh = i0 % BH;
    int qb = a.nblocks - 1 - i0 / BH, b = bh / a.NH, h = bh % a.NH, kvh = h / a.group;
    int q0 = qb * FA3_BIG, nk = (a.T + FA3_SMALL - 1) / FA3_SMALL;
    int steps = a.causal ? min((q0 + FA3_BIG - 1) / FA3_SMALL + 1, nk) : nk;
    int wg = threadIdx.x / FA3_WG;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            fa3_bar_init(full + 8 * s, 1);
            fa3_bar_init(empty + 8 * s, FA3_CONSUMERS);
        }
        fa3_bar_init(qbar, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(FA3_REGS_PRODUCER));
        if (threadIdx.x == 0) {
            fa3_bar_expect(qbar, 2 * BIG);
            fa3_tma_tile(sq, &qkv_big, qbar, h * a.hd, q0, b, HD, FA3_BIG);
            fa3_tma_tile(sdo, &do_big, qbar, h * a.hd, q0, b, HD, FA3_BIG);
            int kcol = (a.NH + kvh) * a.hd, vcol = (a.NH + a.NKV + kvh) * a.hd;
            for (int i = 0; i < steps; i++) {
                int s = i % STAGES;
                if (i >= STAGES) fa3_bar_wait(empty + 8 * s, (uint32_t)((i / STAGES - 1) & 1));
                uint32_t sk = ring + (uint32_t)s * 2 * SMALL;
                fa3_bar_expect(full + 8 * s, 2 * SMALL);
                fa3_tma_tile(sk, &qkv_small, full + 8 * s, kcol, i * FA3_SMALL, b, HD, FA3_SMALL);
                fa3_tma_tile(sk + SMALL, &qkv_small, full + 8 * s, vcol, i * FA3_SMALL, b, HD, FA3_SMALL);
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(FA3_REGS_CONSUMER));

    const int cw = wg - 1, r0 = q0 + cw * 64, warp16 = ((threadIdx.x % FA3_WG) >> 5) * 16;
    float L[2], Dr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int row = r0 + warp16 + fa3_row(2 * r);
        L[r] = row < a.T ? a.lse[(size_t)bh * a.T + row] : 0.0f;
        Dr[r] = row < a.T ? a.dsum[(size_t)bh * a.T + row] : 0.0f;
    }
    float dq[HD / 2];
#pragma unroll
    for (int i = 0; i < HD / 2; i++) dq[i] = 0.0f;
    fa3_bar_wait(qbar, 0);
    for (int it = 0; it < steps; it++) {
        int s = it % STAGES, k0 = it * FA3_SMALL;
        uint32_t sk = ring + (uint32_t)s * 2 * SMALL, sv = sk + SMALL;
        fa3_bar_wait(full + 8 * s, (uint32_t)((it / STAGES) & 1));

        float sc[FA3_SMALL / 2], dp[FA3_SMALL / 2];
        fa3_fence();
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++)
            fa3_mma_ss<FA3_SMALL>(sc, fa3_desc_k(sq, FA3_BIG, cw * 64, ks), fa3_desc_k(sk, FA3_SMALL, 0, ks), ks > 0);
#pragma unroll
        for (int ks = 0; ks < HD / 16; ks++)
            fa3_mma_ss<FA3_SMALL>(dp, fa3_desc_k(sdo, FA3_BIG, cw * 64, ks), fa3_desc_k(sv, FA3_SMALL, 0, ks), ks > 0);
        fa3_commit();
        fa3_keep(sc);
        fa3_keep(dp);
        fa3_wait_all();
        fa3_keep(sc);
        fa3_keep(dp);

        /* dS = P ∘ (dP − D), P = exp2(S·scale·log2e − L), 0 where masked */
#pragma unroll
        for (int i = 0; i < FA3_SMALL / 2; i++) {
            int r = (i >> 1) & 1, key = k0 + fa3_col(i), row = r0 + warp16 + fa3_row(i);
            float p = exp2f(sc[i] * a.scale_log2 - L[r]);
            if (key >= a.T || row >= a.T || (a.causal && key > row)) p = 0.0f;
            dp[i] = p * (dp[i] - Dr[r]);
        }
        uint32_t dsa[FA3_SMALL / 16][4];
        fa3_to_a<FA3_SMALL>(dsa, dp);

        fa3_keep(dq);
        fa3_fence();
#pragma unroll
        for (int kk = 0; kk < FA3_SMALL / 16; kk++) fa3_mma_rs<HD>(dq, dsa[kk], fa3_desc_n(sk, FA3_SMALL, kk), 1);
        fa3_commit();
        fa3_keep(dq);
        fa3_wait_all();
        fa3_keep(dq);
        fa3_bar_arrive(empty + 8 * s);
    }
    size_t ld = (size_t)a.W;
    fa3_store_rows<HD>(a.dqkv + (size_t)b * a.T * ld, ld, r0, a.T, h * a.hd, dq, a.scale, !a.overwrite);
#else
    (void)a;
    __trap();
#endif
}

// ----------------------------------------------------------------------------
// Host: shapes, tensor maps, launchers

/* Stages of the ring: three where the tiles are small (hd 64), two where
 * three would not fit beside the block's own tiles (hd 128). */
static constexpr int fa3_stages(int hd) { return hd == 64 ? 3 : 2; }

/* Dynamic shared memory: the block's own tiles, the ring, and 1024 bytes
 * to align the first tile (the swizzle's period). */
static size_t fa3_fwd_smem(int hd) {
    size_t tile = (size_t)FA3_BIG * hd * 2;
    return 1024 + tile + (size_t)fa3_stages(hd) * 2 * tile;
}
static size_t fa3_bwd_smem(int hd) {
    return 1024 + 2 * (size_t)FA3_BIG * hd * 2 + (size_t)fa3_stages(hd) * 2 * (size_t)FA3_SMALL * hd * 2;
}

int hy_k_attention_sm90_supported(int cc_major, int cc_minor, int T, int NH, int NKV, int hd) {
    if (cc_major != 9 || cc_minor != 0) return 0;   /* sm_90a machine code runs on 9.0 only */
    if (hd != 64 && hd != 128) return 0;
    if (T <= 0 || NH <= 0 || NKV <= 0 || NH % NKV != 0) return 0;
    return 1;
}

/* cuTensorMapEncodeTiled, found once through the runtime (so the
 * program needs no -lcuda); the lookup's result is kept, success or not. */
typedef PFN_cuTensorMapEncodeTiled_v12000 fa3_encode_fn;
typedef struct {
    fa3_encode_fn fn;
    cudaError_t rc;
    cudaDriverEntryPointQueryResult found;
} fa3_encoder;

static const fa3_encoder &fa3_encoder_get(void) {
    static const fa3_encoder e = [] {
        fa3_encoder r;
        void *fn = NULL;
        r.found = cudaDriverEntryPointSymbolNotFound;
        r.rc = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                                &r.found);
        r.fn = (fa3_encode_fn)fn;
        return r;
    }();
    return e;
}

/* The map of a bf16 array [B, T, width] (row stride width), read in
 * boxes of 64 columns × rows rows, 128-byte swizzled, zeros past T. */
static int fa3_map(CUtensorMap *m, const hy_bf16 *base, int width, int T, int B, int rows, const char *op,
                  const char *what, hy_error *err) {
    const fa3_encoder &e = fa3_encoder_get();
    if (e.rc != cudaSuccess) return HY_CUDA_FAIL(err, e.rc, "cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled)");
    if (e.found != cudaDriverEntryPointSuccess || !e.fn)
        return hy_fail(err, HY_ERR_RUNTIME, "%s: the driver has no cuTensorMapEncodeTiled (query result %d)", op,
                       (int)e.found);
    cuuint64_t dims[3] = { (cuuint64_t)width, (cuuint64_t)T, (cuuint64_t)B };
    cuuint64_t strides[2] = { (cuuint64_t)width * 2, (cuuint64_t)width * 2 * (cuuint64_t)T };
    cuuint32_t box[3] = { FA3_BOX, (cuuint32_t)rows, 1 };
    cuuint32_t step[3] = { 1, 1, 1 };
    CUresult r = e.fn(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, (void *)base, dims, strides, box, step,
                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return hy_fail(err, HY_ERR_RUNTIME, "%s: cuTensorMapEncodeTiled failed (CUresult %d) for %s, a [%d, %d, %d] "
                       "bf16 array read %d rows at a time", op, (int)r, what, B, T, width, rows);
    return HY_OK;
}

static int fa3_aligned(const void *p, uintptr_t n) { return ((uintptr_t)p & (n - 1)) == 0; }

/* The arguments every kernel shares, checked: a shape this kernel takes
 * (hy_k_attention_sm90_supported, less the device), and qkv 16-byte
 * aligned (TMA's rule for a map's base). */
static int fa3_args_make(fa3_args *a, const hy_bf16 *qkv, int B, int T, int NH, int NKV, int hd, int causal,
                        const char *op, hy_error *err) {
    memset(a, 0, sizeof *a);
    if (!hy_k_attention_sm90_supported(9, 0, T, NH, NKV, hd))
        return hy_fail(err, HY_ERR_RUNTIME, "%s: %d query heads, %d key/value heads of size %d, T = %d: not a shape "
                       "the sm90 attention takes (head size 64 or 128, NH a multiple of NKV)", op, NH, NKV, hd, T);
    if (!fa3_aligned(qkv, 16))
        return hy_fail(err, HY_ERR_RUNTIME, "%s: qkv at %p is not 16-byte aligned (the bulk copies need it)", op,
                       (const void *)qkv);
    int nblocks = (T + FA3_BIG - 1) / FA3_BIG;
    if ((size_t)B * NH * nblocks > (size_t)INT32_MAX)
        return hy_fail(err, HY_ERR_RUNTIME, "%s: %d x %d heads of %d tokens are too many blocks", op, B, NH, T);
    a->B = B;
    a->T = T;
    a->NH = NH;
    a->NKV = NKV;
    a->hd = hd;
    a->group = NH / NKV;
    a->W = (NH + 2 * NKV) * hd;
    a->causal = causal != 0;
    a->nblocks = nblocks;
    a->scale = 1.0f / sqrtf((float)hd);
    a->scale_log2 = a->scale * FA3_LOG2E;
    return HY_OK;
}

/* Every kernel's dynamic shared memory (over the 48 KB default) allowed
 * on the current device: once per device, by the preload (before any
 * capture) or else at the first launch there. Setting it twice from two
 * ranks' threads is harmless. */
#define FA3_MAX_DEVICES 64
static int fa3_smem_set[FA3_MAX_DEVICES];

static int fa3_allow_smem(hy_error *err) {
    int dev = 0;
    HY_CUDA_CHECK(cudaGetDevice(&dev), err);
    if (dev >= 0 && dev < FA3_MAX_DEVICES && __atomic_load_n(&fa3_smem_set[dev], __ATOMIC_ACQUIRE)) return HY_OK;
    const cudaFuncAttribute A = cudaFuncAttributeMaxDynamicSharedMemorySize;
    HY_CUDA_CHECK(cudaFuncSetAttribute(fa3_fwd_kernel<64, fa3_stages(64)>, A, (int)fa3_fwd_smem(64)), err);
    HY_CUDA_CHECK(cudaFuncSetAttribute(fa3_fwd_kernel<128, fa3_stages(128)>, A, (int)fa3_fwd_smem(128)), err);
    HY_CUDA_CHECK(cudaFuncSetAttribute(fa3_bwd_kv_kernel<64, fa3_stages(64)>, A, (int)fa3_bwd_smem(64)), err);
    HY_CUDA_CHECK(cudaFuncSetAttribute(fa3_bwd_kv_kernel<128, fa3_stages(128)>, A, (int)fa3_bwd_smem(128)), err);
    HY_CUDA_CHECK(cudaFuncSetAttribute(fa3_bwd_q_kernel<64, fa3_stages(64)>, A, (int)fa3_bwd_smem(64)), err);
    HY_CUDA_CHECK(cudaFuncSetAttribute(fa3_bwd_q_kernel<128, fa3_stages(128)>, A, (int)fa3_bwd_smem(128)), err);
    if (dev >= 0 && dev < FA3_MAX_DEVICES) __atomic_store_n(&fa3_smem_set[dev], 1, __ATOMIC_RELEASE);
    return HY_OK;
}

/* One launch of a warp-specialized kernel, checked. */
template <typename... P, typename... A>
static int fa3_launch(void (*kernel)(P...), unsigned grid, size_t smem, cudaStream_t s, const char *what,
                      hy_error *err, const A &...args) {
    kernel<<<grid, FA3_THREADS, smem, s>>>(args...);
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? HY_OK : HY_CUDA_FAIL(err, e, what);
}

int hy_k_attention_sm90_fwd(cudaStream_t s, hy_bf16 *out, float *lse, const hy_bf16 *qkv, int B, int T, int NH,
                            int NKV, int hd, int causal, hy_error *err) {
    if (B <= 0 || T <= 0) return HY_OK;
    const char *op = "attention_sm90_fwd";
    fa3_args a;
    int rc = fa3_args_make(&a, qkv, B, T, NH, NKV, hd, causal, op, err);
    if (rc) return rc;
    if (!fa3_aligned(out, 4)) return hy_fail(err, HY_ERR_RUNTIME, "%s: out is not 4-byte aligned", op);
    a.out = out;
    a.lse = lse;
    CUtensorMap map;
    if ((rc = fa3_map(&map, qkv, a.W, T, B, FA3_BIG, op, "qkv", err))) return rc;
    if ((rc = fa3_allow_smem(err))) return rc;
    unsigned grid = (unsigned)((size_t)B * NH * a.nblocks);
    if (hd == 64)
        return fa3_launch(fa3_fwd_kernel<64, fa3_stages(64)>, grid, fa3_fwd_smem(64), s, "attention_sm90_fwd (kernel launch)",
                         err, map, a);
    return fa3_launch(fa3_fwd_kernel<128, fa3_stages(128)>, grid, fa3_fwd_smem(128), s, "attention_sm90_fwd (kernel launch)",
                     err, map, a);
}

int hy_k_attention_sm90_bwd(cudaStream_t s, hy_bf16 *dqkv, void *scratch, const hy_bf16 *dout, const hy_bf16 *qkv,
                            const hy_bf16 *out, const float *lse, int B, int T, int NH, int NKV, int hd, int causal,
                            int overwrite, hy_error *err) {
    if (B <= 0 || T <= 0) return HY_OK;
    const char *op = "attention_sm90_bwd";
    fa3_args a;
    int rc = fa3_args_make(&a, qkv, B, T, NH, NKV, hd, causal, op, err);
    if (rc) return rc;
    if (!fa3_aligned(dout, 16)) return hy_fail(err, HY_ERR_RUNTIME, "%s: dout is not 16-byte aligned", op);
    if (!fa3_aligned(dqkv, 4)) return hy_fail(err, HY_ERR_RUNTIME, "%s: dqkv is not 4-byte aligned", op);
    a.lse = (float *)lse;   /* read only here */
    a.dsum = (float *)scratch;
    a.dqkv = dqkv;
    a.overwrite = overwrite != 0;
    CUtensorMap qkv_big, qkv_small, do_big, do_small;
    if ((rc = fa3_map(&qkv_big, qkv, a.W, T, B, FA3_BIG, op, "qkv", err)) ||
        (rc = fa3_map(&qkv_small, qkv, a.W, T, B, FA3_SMALL, op, "qkv", err)) ||
        (rc = fa3_map(&do_big, dout, NH * hd, T, B, FA3_BIG, op, "dout", err)) ||
        (rc = fa3_map(&do_small, dout, NH * hd, T, B, FA3_SMALL, op, "dout", err)) ||
        (rc = fa3_allow_smem(err)))
        return rc;

    if ((rc = hy_k_attention_dsum(s, a.dsum, dout, out, B, T, NH, hd, err))) return rc;
    unsigned grid_kv = (unsigned)((size_t)B * NKV * a.nblocks), grid_q = (unsigned)((size_t)B * NH * a.nblocks);
    if (hd == 64) {
        if ((rc = fa3_launch(fa3_bwd_kv_kernel<64, fa3_stages(64)>, grid_kv, fa3_bwd_smem(64), s,
                            "attention_sm90_bwd (dk, dv)", err, qkv_big, qkv_small, do_small, a)))
            return rc;
        return fa3_launch(fa3_bwd_q_kernel<64, fa3_stages(64)>, grid_q, fa3_bwd_smem(64), s, "attention_sm90_bwd (dq)",
                         err, qkv_big, qkv_small, do_big, a);
    }
    if ((rc = fa3_launch(fa3_bwd_kv_kernel<128, fa3_stages(128)>, grid_kv, fa3_bwd_smem(128), s,
                        "attention_sm90_bwd (dk, dv)", err, qkv_big, qkv_small, do_small, a)))
        return rc;
    return fa3_launch(fa3_bwd_q_kernel<128, fa3_stages(128)>, grid_q, fa3_bwd_smem(128), s, "attention_sm90_bwd (dq)",
                     err, qkv_big, qkv_small, do_big, a);
}

// ----------------------------------------------------------------------------
// Preload (kernels.cuh): on a 9.0 device only (elsewhere there is no
// machine code to load, and nothing will launch these). Everything the
// launchers do once (the shared-memory allowance, the driver's tensor-map
// encoder looked up) happens here, before any capture: in a capture the
// launchers then only encode tensor maps on the host, passed by value as
// __grid_constant__ parameters, and enqueue kernels.

int hy_k_attention_sm90_preload(hy_error *err) {
    int dev = 0, major = 0, minor = 0;
    HY_CUDA_CHECK(cudaGetDevice(&dev), err);
    HY_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), err);
    HY_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), err);
    if (!hy_k_attention_sm90_supported(major, minor, 1, 1, 1, 64)) return HY_OK;
    HY_CUDA_PRELOAD((fa3_fwd_kernel<64, fa3_stages(64)>), err);
    HY_CUDA_PRELOAD((fa3_fwd_kernel<128, fa3_stages(128)>), err);
    HY_CUDA_PRELOAD((fa3_bwd_kv_kernel<64, fa3_stages(64)>), err);
    HY_CUDA_PRELOAD((fa3_bwd_kv_kernel<128, fa3_stages(128)>), err);
    HY_CUDA_PRELOAD((fa3_bwd_q_kernel<64, fa3_stages(64)>), err);
    HY_CUDA_PRELOAD((fa3_bwd_q_kernel<128, fa3_stages(128)>), err);
    (void)fa3_encoder_get();   /* its failure, if any, is reported where a map is made */
    return fa3_allow_smem(err);
}
