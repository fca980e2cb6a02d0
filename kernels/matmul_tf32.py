"""MatMul with bias on the tensor cores, in TF32: milestone 2's tensor-core variant.

    out[m, n] = sum_k inp[m, k] * weight[n, k] + bias[n]       (matmul.py's contract)

Tensor cores multiply small matrix tiles in one instruction. On Ampere and later
(sm_80+, so the A40's sm_86) `mma.sync.aligned.m16n8k8` takes a 16 x 8 tile of A and
an 8 x 8 tile of B in TF32 (float32's exponent, 10 bits of mantissa), multiplies them
and adds the 16 x 8 product to float32 accumulators, for a whole warp at once. The
inputs lose 13 bits of mantissa, so the results are judged under the `tf32`
precision profile (reference.precision), not fp32's.

The tensor cores are so fast that the work is feeding them: every choice below is
about moving operands global -> shared -> registers quickly enough, with few instructions.

* Each block computes a 128 x 128 tile of out with 4 warps in a 2 x 2 grid; each warp
  owns 64 x 64 of it: 4 x 8 mma tiles of 16 x 8, i.e. 128 accumulators per thread
  (about 200 registers: two blocks still fit on a multiprocessor). Big tiles mean few
  bytes loaded per multiply-add, at every level.
* K is walked in slices of 16 floats, copied global -> shared with cp.async (the copy
  runs in the background: no registers, no waiting) into a ring of STAGES = 3 buffers:
  while the warps multiply slice s, slices s + 1 and s + 2 are on their way. One
  __syncthreads per slice both publishes a landed slice and frees the buffer that is
  refilled next. 3 x (128 + 128) x 16 floats is 48 KB, the most a block may declare.
* Fragment layout, PTX ISA for m16n8k8 TF32, with g = lane / 4 and t = lane % 4: a
  thread holds A's (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4); B's (k = t, n = g)
  and (k = t + 4, n = g); and out's (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1).
  weight's rows are B's columns, stored k-contiguous: the "col" layout mma wants.
* Fragments are read with ldmatrix, made for 16-bit types: it loads four 8 x 8
  matrices of 16-bit values, each row 16 bytes, and lane l gets the 32-bit word l % 4
  of row l / 4. Read as floats, a row is 4 consecutive k of one row of inp (or weight),
  so lane (g, t) gets (row g, k t): exactly the TF32 fragment. One ldmatrix.x4 fills a
  whole A fragment (rows 0-7 and 8-15, k and k + 4), or the B fragments of two n tiles,
  where one 4-byte load per register would need four.
* Shared rows are 16 floats (64 bytes, two rows per 128-byte line of the 32 banks) and
  ldmatrix reads 8 rows x 16 bytes at a time: unchanged, rows 0, 2, 4, 6 would hit the
  same banks. So the 4 16-byte chunks of row r are stored in the order
  chunk ^ ((r / 2) % 4): 8 consecutive rows then cover all 32 banks once. cp.async
  still writes whole 16-byte chunks.
* cp.async copies raw floats, so each fragment register is rounded to TF32 (to
  nearest, ties away from zero, as cvt.rna.tf32.f32 rounds) after ldmatrix, just
  before the mma: half a TF32 ulp added to its bits and the 13 bits below TF32
  cleared, two integer operations where cvt.rna takes four on sm_90.

Edges: cp.async's source size may be smaller than its copy size, and the rest is
filled with zeros; rows past M or N and k past K load zeros that way, and nothing is
stored outside out. The 16-byte copies need K % 4 == 0 and 16-byte-aligned inp and
weight (each row then starts aligned); otherwise the same pipeline copies 4 bytes at
a time. blockIdx.x walks the rows, as in matmul.py: blocks running together share
weight's columns, so the LM head's 154 MB weight streams from memory about once.

Few tiles (a short prompt: M = 256 rows make 2 row tiles) would leave most
multiprocessors idle, so the launcher then splits K as well (split-K, as
matmul_split_k.py does): grid z is the split, block z walks its share of K's slices,
and the splits add their sums into out, which is zeros beforehand, with atomicAdd.
Enough splits are taken for BLOCKS_PER_SM blocks a multiprocessor, each walking at
least MIN_SLICES slices; the tiles of a long prompt fill the GPU alone, unsplit.
Compiled with SLICED = 1, split z stores its sums into out + z * M * N instead, a slice
of its own, for the caller to add up in split order (matmul_backward.py's dweight).

The same source, compiled with PASSES = 3, is matmul_3xtf32.py's kernel: float32
accuracy from three TF32 products per product (that file's header says how). It is
matmul_backward.py's too, for the gradients' products, whose operands lie the other
way: with A_ALONG_K = 0 (or B_ALONG_K = 0) an operand is stored k by k, each k's rows
contiguous, and is copied into shared memory as it lies, in k-rows of TILE_M floats.
ldmatrix cannot read those (it hands a lane 4 consecutive k of a row). Instead the
tile's rows are dealt out so that lane group g's fragment rows are tile rows 4g to
4g + 3 (and 32 on): which row of out an mma row stands for is the kernel's choice, so
long as the stores agree. One float4 load at k then gives a lane the values of two m
tiles (or four n tiles), as few loads as ldmatrix takes; each k-row is turned by 8
floats per k % 4, which puts a quarter warp's 8 float4s in 8 different groups of 4
banks. Across K, a thread's columns of out are runs of 4, stored as float4s. ACCUMULATE
adds the product into out (a gradient), and launch_unsplit gives a product of few
tiles a kernel of smaller tiles instead of splitting K.

An mma adds its products to its accumulators with truncation, not float32's rounding
to nearest, so over thousands of slices into one large sum the errors keep one sign
and pile up: the LM head's dinp (K = 50304), whose rows of the softmax's gradient hold
one large term and thousands of small ones of the other sign, came out 2e-4 of its
terms' magnitudes off on an H100, beyond fp32's bound. FLUSH = n starts the
accumulators from zero every n slices and adds each chunk's sums into totals with
float32 adds; matmul_backward.py compiles its kernels so.

On an H200 this runs at about 110-130 TFLOP/s at GPT-2's sizes (M = 8192, K = 768),
with mma.sync's TF32 peak there about 310. cuBLAS in TF32 mode reaches 250-300 on the
larger N with Hopper's own warpgroup instructions (wgmma), which need sm_90a and do not
exist on the A40.

So the 3xTF32 builds of 128 x 128 tiles have a wgmma build too (WGMMA = 1, made by
wgmma_build, compiled for sm_90a alone; for_this_gpu picks it on an H100 or H200, and
the A40 keeps mma.sync). `wgmma.mma_async...m64n128k8` has a warpgroup (4 warps) multiply
a 64 x 8 tile of A by an 8 x 128 tile of B into 64 float32 accumulators a thread, and
runs asynchronously: the warps issue it, go on, and wait for it later. Two warpgroups
take rows 0-63 and 64-127 of the tile.
* B is read by the tensor cores from shared memory, through a descriptor that names its
  layout. At TILE_K = 32 a row of a slice along K is 128 bytes, and SliceCopy's swizzle
  (chunk ^ row % 8) is exactly the "128-byte swizzle" a descriptor can name: B's slice
  is read where cp.async landed it. The tensor cores drop a float's 13 low bits, so the
  raw slice is B's high part as it is; only the low parts are written beside it. Across
  K a split pass writes both parts in that layout.
* A's fragments come from registers (wgmma's register form): each thread reads its
  values of the raw slice and splits them into high and low parts itself.
* Slices go in pairs. The wgmma of one slice runs while the next is split; the pair's
  products are waited for at its end and its sums added into float32 totals (FLUSH = 2:
  every 64 k). Between a wgmma and its wait nothing may touch the accumulators, or ptxas
  waits after every wgmma and the overlap is gone: they are read after the pair's wait,
  through an opaque copy (settled).
* Four raw stages of each operand and three split slices of B take 176 KB (224 KB across
  K), past the 48 KB a block may declare: the build's shared memory is dynamic, and the
  launch opts in to it (launch_engine).
On an H100 it runs GPT-2's training products at 52-72 TFLOP/s at float32's accuracy,
1.5-1.9x cuBLAS in float32.
"""

import functools
import math

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, ceil_div, device_arch, multiprocessor_count
from gpt2kit.kernels.matmul import matmul_arguments

TILE_M = 128    # rows of out per block
TILE_N = 128    # columns of out per block
WARP_M = 64     # rows of out per warp
WARP_N = 64     # columns of out per warp
TILE_K = 16     # depth of one shared-memory slice: two mma k-steps of 8
STAGES = 3      # slices in flight; shared memory: STAGES * (128 + 128) * 16 * 4 = 48 KB
THREADS = 32 * (TILE_M // WARP_M) * (TILE_N // WARP_N)  # 128: 4 warps
BLOCKS_PER_SM = 1  # split K until the blocks fill every multiprocessor once: two a multiprocessor (which fit)
                   # measured slower at T = 64-256, the extra splits' atomic adds costing more than they hide
MIN_SLICES = 4     # of TILE_K each, that a split of K walks at least: its pipeline fills

# TF32 rounding and the bookkeeping of cp.async's groups, shared with flash_attention_3xtf32.py
TF32_HELPERS = r"""
// x rounded to TF32, to nearest with ties away from zero (cvt.rna.tf32.f32's rounding, in two integer operations
// where that instruction takes four)
__device__ __forceinline__ unsigned to_tf32(float x) {
    return (__float_as_uint(x) + 0x1000u) & 0xffffe000u;  // half an ulp of TF32 added, the 13 bits below dropped
}

// What x's TF32 high part (rounded or truncated) leaves of it (exact in float32), as its TF32 low part. Its 13
// bits below TF32 are left for the tensor core to drop (it truncates an operand): with half an ulp added first,
// that is to_tf32's rounding, one operation sooner.
__device__ __forceinline__ unsigned low_after(float x, unsigned high) {
    return __float_as_uint(x - __uint_as_float(high)) + 0x1000u;
}

// x as its TF32 high part, and what that leaves as its TF32 low part
__device__ __forceinline__ void split(float x, unsigned& high, unsigned& low) {
    high = to_tf32(x);
    low = low_after(x, high);
}

__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Wait until at most `pending` of this thread's committed groups are still in flight.
template <int pending> __device__ __forceinline__ void copy_async_wait() {
    asm volatile("cp.async.wait_group %0;" :: "n"(pending) : "memory");
}
"""

# The m16n8k8 TF32 product and 3xTF32's low parts, shared with conv1d.py
TF32_PRODUCTS = r"""
// d += a (16 x 8, row) * b (8 x 8, col), inputs TF32, accumulators float32
__device__ __forceinline__ void mma_tf32(float* d, const unsigned* a, const unsigned* b) {
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// What TF32 rounding leaves of a raw float: its low part (low_after its rounded high part)
__device__ __forceinline__ unsigned low_part(unsigned raw) {
    const float x = __uint_as_float(raw);
    return low_after(x, to_tf32(x));
}
"""

# A wgmma's 64 accumulator registers, spelled out for its inline PTX: the list of them, and their operands
WGMMA_ACCUMULATORS = (
    '#define WGMMA_D "{' + ", ".join(f"%{i}" for i in range(64)) + '}"\n'
    + "#define WGMMA_D_OPERANDS " + ", ".join(f'"+f"(d[{i}])' for i in range(64)) + "\n")

MATMUL_TF32_SOURCE = TF32_HELPERS + TF32_PRODUCTS + WGMMA_ACCUMULATORS + r"""
#define WARPS_N (TILE_N / WARP_N)
#define M_TILES (WARP_M / 16)           // mma tiles per warp, down
#define N_TILES (WARP_N / 8)            // and across
#define CHUNKS (TILE_K / 4)             // 16-byte chunks per shared row of an operand along K
#define ROWS_PER_LINE (32 / TILE_K)     // such rows per 128-byte line of the 32 banks
static_assert(TILE_M * TILE_K % (4 * THREADS) == 0 && TILE_N * TILE_K % (4 * THREADS) == 0,
              "every thread copies the same number of 16-byte chunks of a slice");
static_assert(N_TILES % 2 == 0, "one ldmatrix.x4 loads the fragments of two n tiles");
static_assert(WGMMA || (A_ALONG_K || M_TILES % 2 == 0) && (B_ALONG_K || N_TILES % 4 == 0),
              "across K, one float4 holds the fragment values of two m tiles, or of four n tiles");
static_assert(!WGMMA || TILE_M == 128 && TILE_N == 128 && TILE_K == 32 && WARP_M == 16 && WARP_N == 128
              && THREADS == 256 && PASSES == 3 && STAGES >= 3 && (FLUSH == 0 || FLUSH == 2),
              "the wgmma build: two warpgroups of 64 x 128, slices of 32 (SliceCopy's swizzle is then wgmma's), "
              "3xTF32, sums flushed every pair of slices");

// Start copying 16 (or 4) bytes from global src to shared address dst; only the first
// src_bytes are read, the rest of dst is zero-filled. .cg (16 bytes only) skips L1.
__device__ __forceinline__ void copy_async16(unsigned dst, const float* src, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void copy_async4(unsigned dst, const float* src, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;"
                 :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}

// Four 8 x 8 matrices of 16-bit values from shared memory: lanes 8i .. 8i + 7 give the
// addresses of matrix i's 8 rows (16 bytes each); lane l gets word l % 4 of row l / 4 of each.
// A 16-byte row is 4 floats of a k-contiguous operand, so lane (g, t) gets (row g, k t).
__device__ __forceinline__ void load_matrices(unsigned* r, unsigned address) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(address) : "memory");
}

// Where (row, k) of a shared tile lives: its 16-byte chunk is swizzled by row (see the
// header), so that ldmatrix's 8 rows at one k hit 8 different groups of 4 banks.
__device__ __forceinline__ int swizzled(int row, int k) {
    return row * TILE_K + 4 * ((k / 4) ^ ((row / ROWS_PER_LINE) % CHUNKS)) + k % 4;
}

// BEGIN SOLUTION
// Where (row, k) of a shared tile of an operand across K lives (its k rows of ROWS floats contiguous, as in
// matmul_backward.py): the row of k is turned by 8 floats for each k % 4, so that the float4s of a quarter warp,
// lanes (g, t) at rows 4g .. 4g + 3 of k t (across_k below), lie in 8 different groups of 4 banks; 16-byte
// chunks stay whole.
template <int ROWS> __device__ __forceinline__ int rotated(int row, int k) {
    return k * ROWS + (row + 8 * (k % 4)) % ROWS;
}

// An operand across K gives lane group g the tile rows (or columns) 4g .. 4g + 3 (and 32 further on, for
// more), so that one float4 load at k holds four of its fragment values: value i of lane group g at
// across_k(i, g). A's values are i = 2 mi + half for rows g + 8 half of m tile mi, B's are i = ni for
// column g of n tile ni. Which row of out an mma row is, is ours to choose, as long as the stores follow.
__device__ __forceinline__ int across_k(int i, int g) { return 32 * (i / 4) + 4 * g + i % 4; }

// The warp tile's row of mma row g + 8 half of m tile mi, and its column of mma column j of n tile ni
// (wgmma builds read their fragments in the natural order whatever the layout)
#define NATURAL_ROWS (A_ALONG_K || WGMMA)
#define NATURAL_COLUMNS (B_ALONG_K || WGMMA)
__device__ __forceinline__ int fragment_row(int mi, int half, int g) {
    return NATURAL_ROWS ? 16 * mi + 8 * half + g : across_k(2 * mi + half, g);
}
__device__ __forceinline__ int fragment_col(int ni, int j) { return NATURAL_COLUMNS ? 8 * ni + j : across_k(ni, j); }

// RUN consecutive values of a row of out from column n, past N left out: stored, or added (ACCUMULATE), as one
// access where `wide`; several splits add theirs, in no set order, unless each has its own slice of out (SLICED).
template <int RUN> __device__ __forceinline__ void store_run(float* o, float* v, int n, int N, bool wide) {
    if (gridDim.z > 1 && !SLICED) {
        #pragma unroll
        for (int j = 0; j < RUN; j++) if (n + j < N) atomicAdd(o + j, v[j]);
    } else if (wide && n < N) {  // N a multiple of RUN: n < N means the whole run is inside
        if (ACCUMULATE && RUN == 4) {  // the run read as one access too
            const float4 held = *(const float4*)o;
            v[0] += held.x; v[1] += held.y; v[2] += held.z; v[3] += held.w;
        } else if (ACCUMULATE) {
            const float2 held = *(const float2*)o;
            v[0] += held.x; v[1] += held.y;
        }
        if (RUN == 4) *(float4*)o = make_float4(v[0], v[1], v[2], v[3]);
        else *(float2*)o = make_float2(v[0], v[1]);
    } else {
        #pragma unroll
        for (int j = 0; j < RUN; j++) if (n + j < N) o[j] = ACCUMULATE ? o[j] + v[j] : v[j];
    }
}

// One thread's share of copying an operand's slices global -> shared: ROWS rows of it (A's rows of out, or B's
// columns) from `first`, TILE_K of K a slice, zeros past its rows and past K. ALONG_K: row r's k are contiguous,
// src[r * K + k]; else each k's rows are, src[k * rows + r]. STEP, where not 0, is the floats from one row (or
// k) to the next instead of K (or rows): rows that overlap, as a convolution's windows of frames (conv1d.py).
// 16-byte copies need the contiguous length and the step multiples of 4 and src 16-byte aligned (a chunk is then
// all inside or all outside); otherwise one float at a time. A thread's chunks are LINES_APART lines of the slice
// apart: rows along K, k across it; their shared places are as far apart, since neither the swizzle nor the turn
// changes over that distance.
template <int ROWS, bool ALONG_K, int STEP> struct SliceCopy {
    static constexpr int LINE = ALONG_K ? TILE_K : ROWS;  // contiguous floats of a line of the slice
    static constexpr int LINES_APART = THREADS / (LINE / 4);
    static constexpr int COPIES = ROWS * TILE_K / (4 * THREADS);
    static_assert(LINES_APART % (ALONG_K ? 2 * CHUNKS : 4) == 0, "the swizzle, or the turn, repeats");
    const float* src;
    const float* start;  // the source of this thread's first chunk at k = 0
    long long apart;     // floats from the source of one of its chunks to the next
    int rows, K, row, k; // its first chunk's row and k in the slice
    long long step;      // floats from one row (along K) or k (across) of src to the next
    bool wide;

    __device__ __forceinline__ static int at(int r, int k) { return ALONG_K ? swizzled(r, k) : rotated<ROWS>(r, k); }

    __device__ __forceinline__ SliceCopy(const float* src, int rows, int K, int first)
        : src(src), rows(rows), K(K), step(STEP ? STEP : ALONG_K ? K : rows),
          wide((ALONG_K ? K : rows) % 4 == 0 && step % 4 == 0 && (size_t)src % 16 == 0) {
        const int line = threadIdx.x / (LINE / 4), offset = 4 * (threadIdx.x % (LINE / 4));
        row = ALONG_K ? line : offset;
        k = ALONG_K ? offset : line;
        start = src + (ALONG_K ? (first + row) * step + k : k * step + first + row);
        apart = LINES_APART * step;
    }

    __device__ __forceinline__ void start_copy(float* tile, int first, int k0) const {
        if (wide) {
            const float* from = start + (ALONG_K ? k0 : k0 * step);
            const unsigned to = (unsigned)__cvta_generic_to_shared(tile + at(row, k));
            #pragma unroll
            for (int i = 0; i < COPIES; i++) {
                const int moved = i * LINES_APART;  // lines from the first chunk
                const bool ok = first + row + (ALONG_K ? moved : 0) < rows && k0 + k + (ALONG_K ? 0 : moved) < K;
                copy_async16(to + 4 * moved * LINE, ok ? from + i * apart : src, ok ? 16 : 0);
            }
        } else {
            #pragma unroll 1
            for (int e = threadIdx.x; e < ROWS * TILE_K; e += THREADS) {  // neighbouring threads, neighbouring floats
                const int line = e / LINE, offset = e % LINE;
                const int r = ALONG_K ? line : offset, kr = ALONG_K ? offset : line;
                const bool ok = first + r < rows && k0 + kr < K;
                const float* from = src + (ALONG_K ? (first + r) * step + k0 + kr : (k0 + kr) * step + first + r);
                copy_async4((unsigned)__cvta_generic_to_shared(tile + at(r, kr)), ok ? from : src, ok ? 4 : 0);
            }
        }
    }
};

#if WGMMA
// SPLITS_OF_B (a define): B's split slices in turn; slice s's is written again at s + 3, its products done by then
#define B_SPLIT_FLOATS ((B_ALONG_K ? 1 : 2) * TILE_N * TILE_K)  // along K its low parts; across, high and low

// B's slice in the tensor cores' layout, swizzled(n, k): along K the raw slice is that layout already and its
// high part (the tensor core truncates it to TF32), so only what truncation leaves is written, rounded to TF32;
// across K (raw at rotated(n, k)) a thread takes 4 k of one column n at a time and writes both parts.
__device__ __forceinline__ void split_b(const float* raw, float* parts) {
#if B_ALONG_K
    #pragma unroll
    for (int i = threadIdx.x; i < TILE_N * TILE_K / 4; i += THREADS) {
        const float4 x = ((const float4*)raw)[i];
        const float v[4] = {x.x, x.y, x.z, x.w};
        unsigned low[4];
        #pragma unroll
        for (int j = 0; j < 4; j++) {
            low[j] = low_after(v[j], __float_as_uint(v[j]) & 0xffffe000u);  // below its truncated high part
        }
        ((uint4*)parts)[i] = make_uint4(low[0], low[1], low[2], low[3]);
    }
#else
    const int n = threadIdx.x % TILE_N;
    #pragma unroll
    for (int k = 4 * (threadIdx.x / TILE_N); k < TILE_K; k += 4 * (THREADS / TILE_N)) {
        unsigned high[4], low[4];
        #pragma unroll
        for (int j = 0; j < 4; j++) split(raw[rotated<TILE_N>(n, k + j)], high[j], low[j]);
        *(uint4*)(parts + swizzled(n, k)) = make_uint4(high[0], high[1], high[2], high[3]);
        *(uint4*)(parts + TILE_N * TILE_K + swizzled(n, k)) = make_uint4(low[0], low[1], low[2], low[3]);
    }
#endif
}

// This thread's A fragments of a slice, every k-step, split into high and low parts: wgmma's m64n8k8 TF32 layout,
// warp rows first_row + g (+ 8), k t (+ 4) of each step, from the raw slice as SliceCopy laid it
__device__ __forceinline__ void a_fragments(unsigned (&high)[TILE_K / 8][4], unsigned (&low)[TILE_K / 8][4],
                                            const float* raw, int first_row) {
    const int g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    #pragma unroll
    for (int step = 0; step < TILE_K / 8; step++) {
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            const int row = first_row + g + 8 * (i % 2), k = 8 * step + t + 4 * (i / 2);
            split(raw[A_ALONG_K ? swizzled(row, k) : rotated<TILE_M>(row, k)], high[step][i], low[step][i]);
        }
    }
}

// The shared-memory descriptor of k-step `step` of a 128 x 32 slice in the 128-byte-swizzled K-major layout: its
// start (the step's 32 bytes on along each row: the hardware applies the swizzle to the address), 1024 bytes
// between groups of 8 rows, the leading offset unused by this layout
__device__ __forceinline__ unsigned long long b_descriptor(const float* slice, int step) {
    const unsigned long long address = (unsigned long long)__cvta_generic_to_shared(slice + 8 * step);
    return ((address & 0x3FFFF) >> 4) | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);
}

// d (64 x 128 of the warpgroup) += a (registers) x b (shared memory), TF32 in, float32 sums; go_on = 0: d = a x b
__device__ __forceinline__ void wgmma_tf32(float* d, const unsigned* a, unsigned long long b, int go_on) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32 " WGMMA_D ", {%64, %65, %66, %67}, %68, p, 1, 1;"
                 "\n}\n"
                 : WGMMA_D_OPERANDS
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(go_on));
}

// x once the wgmma that writes it has been waited for: a volatile copy stays after the wait, and leaves the
// register as it is (any other touch of the accumulators inside the slice loop makes ptxas wait for every wgmma)
__device__ __forceinline__ float settled(float x) {
    float y;
    asm volatile("mov.b32 %0, %1;" : "=f"(y) : "f"(x) : "memory");
    return y;
}
#endif
// END SOLUTION

// out (M, N) = A (M, K) @ B (K, N) + bias, as matmul.py's out = inp @ weight^T + bias: A is inp and B^T weight,
// both with K contiguous. The other layouts (matmul_backward.py's): A_ALONG_K = 0 reads A from inp[k * M + m],
// B_ALONG_K = 0 reads B from weight[k * N + n]; ACCUMULATE = 1 adds the product to out (bias nullptr); A_STEP
// (B_STEP), where not 0, is the floats from one of A's rows (B's) to the next, in place of K (SliceCopy).
// grid (ceil(M / TILE_M), ceil(N / TILE_N), splits): block z sums its share of K's slices. With one split it
// stores its tile of out; with several, every split adds its sums into out (zeros beforehand, unless
// ACCUMULATE), in no set order (bias: split 0); SLICED = 1: split z stores its sums into out + z * M * N.
static_assert(!(SLICED && ACCUMULATE), "a split's slice of out is written, and the slices are added up later");
extern "C" __global__ void __launch_bounds__(THREADS)
matmul_tf32_kernel(float* out, const float* inp, const float* weight, const float* bias, int M, int K, int N) {
    // BEGIN SOLUTION
#if WGMMA  // more than the 48 KB a kernel's static arrays may have: STAGES slices of each operand, then B's splits
    extern __shared__ __align__(1024) float dynamic_shared[];
    float (*inp_tile)[TILE_M * TILE_K] = reinterpret_cast<float (*)[TILE_M * TILE_K]>(dynamic_shared);
    float (*weight_tile)[TILE_N * TILE_K] =
        reinterpret_cast<float (*)[TILE_N * TILE_K]>(dynamic_shared + STAGES * TILE_M * TILE_K);
#else
    __shared__ __align__(16) float inp_tile[STAGES][TILE_M * TILE_K];
    __shared__ __align__(16) float weight_tile[STAGES][TILE_N * TILE_K];
#endif
    const int row0 = blockIdx.x * TILE_M, col0 = blockIdx.y * TILE_N;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int warp_row = (warp / WARPS_N) * WARP_M, warp_col = (warp % WARPS_N) * WARP_N;

    const SliceCopy<TILE_M, A_ALONG_K, A_STEP> a_copy(inp, M, K, row0);
    const SliceCopy<TILE_N, B_ALONG_K, B_STEP> b_copy(weight, N, K, col0);
    const int all_slices = (K + TILE_K - 1) / TILE_K, share = (all_slices + gridDim.z - 1) / gridDim.z;
    const int first_k = blockIdx.z * share * TILE_K;  // this split walks `slices` slices from here
    const int slices = max(0, min(share, all_slices - (int)blockIdx.z * share));
    auto load_stage = [&](int slice) {  // always commits a group, even an empty one, to keep the count
        if (slice < slices) {
            a_copy.start_copy(inp_tile[slice % STAGES], row0, first_k + slice * TILE_K);
            b_copy.start_copy(weight_tile[slice % STAGES], col0, first_k + slice * TILE_K);
        }
        copy_async_commit();
    };

    // ldmatrix row addresses of this lane, per k-step, relative to a warp tile's first row
    // (a multiple of 8 rows, so the swizzle depends on the lane alone). inp: matrices rows
    // 0-7 and 8-15 at k, then at k + 4; weight: rows 0-7 at k, k + 4, then rows 8-15.
    int a_lane[TILE_K / 8], b_lane[TILE_K / 8];
    #pragma unroll
    for (int step = 0; step < TILE_K / 8; step++) {
        a_lane[step] = swizzled(lane % 16, 8 * step + 4 * (lane / 16));
        b_lane[step] = swizzled(lane % 8 + 8 * (lane / 16), 8 * step + 4 * (lane / 8 % 2));
    }

    float acc[M_TILES][N_TILES][4] = {};  // [m tile][n tile][fragment]
#if FLUSH
    float total[M_TILES][N_TILES][4] = {};  // the sums of the chunks of FLUSH slices
#endif
#if WGMMA
    // Hopper's warpgroup products (sm_90a): warpgroup 0 takes rows 0-63 of the tile, warpgroup 1 rows 64-127, one
    // m64n128k8 wgmma per k-step and pass, asynchronous. A's fragments come from registers, split there. B is read
    // by the tensor cores from shared memory in their 128-byte-swizzled K-major layout, which at TILE_K = 32 is
    // SliceCopy's along K: there the raw slice is B's high part (the tensor core drops its 13 low bits) and only
    // the low parts are written beside it; across K a split pass writes both. The wgmma of one slice run while the
    // next is split: a slice's copies land STAGES - 2 slices ahead, B's splits rotate through SPLITS_OF_B buffers,
    // and slices go in pairs whose two sets of A registers stay apart, every product waited for at the pair's end.
    float* const splits_of_b = dynamic_shared + STAGES * (TILE_M + TILE_N) * TILE_K;
    unsigned a_high[2][TILE_K / 8][4], a_low[2][TILE_K / 8][4];  // [slice of the pair][k-step][fragment]
    float* const d = &acc[0][0][0];  // wgmma's 64 accumulators: d[4 j + i] is mma fragment i of n tile j
    #pragma unroll
    for (int s = 0; s < STAGES - 2; s++) load_stage(s);
    for (int pair = 0; pair < slices; pair += 2) {
        #pragma unroll
        for (int p = 0; p < 2; p++) {
            const int slice = pair + p;
            if (slice < slices) {
                copy_async_wait<STAGES - 3>();  // this thread's copies of `slice` have landed...
                __syncthreads();  // ...and everyone's; every thread has waited for slice - 2's products
                float* const b_split = splits_of_b + (slice % SPLITS_OF_B) * B_SPLIT_FLOATS;
                split_b(weight_tile[slice % STAGES], b_split);
                asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // for the tensor cores' reads
                __syncthreads();
                load_stage(slice + STAGES - 2);  // into slice - 2's buffers
                a_fragments(a_high[p], a_low[p], inp_tile[slice % STAGES], warp_row);
                const float* b_high = B_ALONG_K ? weight_tile[slice % STAGES] : b_split;
                const float* b_low = B_ALONG_K ? b_split : b_split + TILE_N * TILE_K;
                asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
                #pragma unroll
                for (int step = 0; step < TILE_K / 8; step++) {  // low x high and high x low first, as below
                    const int go_on = (!FLUSH && pair > 0) || p > 0 || step > 0;  // else the sums start at zero
                    wgmma_tf32(d, a_low[p][step], b_descriptor(b_high, step), go_on);
                    wgmma_tf32(d, a_high[p][step], b_descriptor(b_low, step), 1);
                    wgmma_tf32(d, a_high[p][step], b_descriptor(b_high, step), 1);
                }
                asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
                if (p == 0) asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
            }
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");  // the pair's products, and its registers
#if FLUSH
        #pragma unroll
        for (int i = 0; i < 4 * N_TILES; i++) (&total[0][0][0])[i] += settled(d[i]);  // the pair's sums: 64 k
#endif
    }
#if !FLUSH
    #pragma unroll
    for (int i = 0; i < 4 * N_TILES; i++) d[i] = settled(d[i]);
#endif
#else
    #pragma unroll
    for (int s = 0; s < STAGES - 1; s++) load_stage(s);
    for (int slice = 0; slice < slices; slice++) {
        copy_async_wait<STAGES - 2>();  // this thread's copies of `slice` have landed...
        __syncthreads();                // ...and everyone's; the buffer read last round is free
        load_stage(slice + STAGES - 1);

        const float* a_floats = inp_tile[slice % STAGES];
        const float* b_floats = weight_tile[slice % STAGES];
        const unsigned a_tile = (unsigned)__cvta_generic_to_shared(a_floats);
        const unsigned b_tile = (unsigned)__cvta_generic_to_shared(b_floats);
        #pragma unroll
        for (int kk = 0; kk < TILE_K; kk += 8) {
            unsigned a[M_TILES][4], b[N_TILES][2];
#if A_ALONG_K
            #pragma unroll
            for (int mi = 0; mi < M_TILES; mi++) {  // (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4)
                load_matrices(a[mi], a_tile + 4 * ((warp_row + 16 * mi) * TILE_K + a_lane[kk / 8]));
            }
#else
            #pragma unroll
            for (int mi = 0; mi < M_TILES; mi += 2) {  // a float4: rows g, g + 8 of m tiles mi and mi + 1
                const int r = warp_row + fragment_row(mi, 0, g);
                const float4 at_t = *(const float4*)&a_floats[rotated<TILE_M>(r, kk + t)];
                const float4 at_t4 = *(const float4*)&a_floats[rotated<TILE_M>(r, kk + t + 4)];
                a[mi][0] = __float_as_uint(at_t.x); a[mi][1] = __float_as_uint(at_t.y);
                a[mi][2] = __float_as_uint(at_t4.x); a[mi][3] = __float_as_uint(at_t4.y);
                a[mi + 1][0] = __float_as_uint(at_t.z); a[mi + 1][1] = __float_as_uint(at_t.w);
                a[mi + 1][2] = __float_as_uint(at_t4.z); a[mi + 1][3] = __float_as_uint(at_t4.w);
            }
#endif
#if B_ALONG_K
            #pragma unroll
            for (int ni = 0; ni < N_TILES; ni += 2) {  // two n tiles: (t, g), (t + 4, g) of each
                unsigned r[4];
                load_matrices(r, b_tile + 4 * ((warp_col + 8 * ni) * TILE_K + b_lane[kk / 8]));
                b[ni][0] = r[0]; b[ni][1] = r[1]; b[ni + 1][0] = r[2]; b[ni + 1][1] = r[3];
            }
#else
            #pragma unroll
            for (int ni = 0; ni < N_TILES; ni += 4) {  // a float4: column g of n tiles ni .. ni + 3
                const int n = warp_col + fragment_col(ni, g);
                const float4 at_t = *(const float4*)&b_floats[rotated<TILE_N>(n, kk + t)];
                const float4 at_t4 = *(const float4*)&b_floats[rotated<TILE_N>(n, kk + t + 4)];
                b[ni][0] = __float_as_uint(at_t.x); b[ni + 1][0] = __float_as_uint(at_t.y);
                b[ni + 2][0] = __float_as_uint(at_t.z); b[ni + 3][0] = __float_as_uint(at_t.w);
                b[ni][1] = __float_as_uint(at_t4.x); b[ni + 1][1] = __float_as_uint(at_t4.y);
                b[ni + 2][1] = __float_as_uint(at_t4.z); b[ni + 3][1] = __float_as_uint(at_t4.w);
            }
#endif
#if PASSES == 3
            // 3xTF32 (matmul_3xtf32.py): x = high + low, both TF32, and a b = high high + high low + low high
            // to float32's accuracy; the small products are added first, so the large one does not swamp them.
            unsigned a_low[M_TILES][4], b_low[N_TILES][2];  // the low parts, taken while a and b are raw
            #pragma unroll
            for (int mi = 0; mi < M_TILES; mi++) {
                #pragma unroll
                for (int j = 0; j < 4; j++) a_low[mi][j] = low_part(a[mi][j]);
            }
            #pragma unroll
            for (int ni = 0; ni < N_TILES; ni++) {
                b_low[ni][0] = low_part(b[ni][0]);
                b_low[ni][1] = low_part(b[ni][1]);
            }
#endif
            #pragma unroll
            for (int mi = 0; mi < M_TILES; mi++) {  // raw floats -> TF32 (the high parts), in place
                #pragma unroll
                for (int j = 0; j < 4; j++) a[mi][j] = to_tf32(__uint_as_float(a[mi][j]));
            }
            #pragma unroll
            for (int ni = 0; ni < N_TILES; ni++) {
                b[ni][0] = to_tf32(__uint_as_float(b[ni][0]));
                b[ni][1] = to_tf32(__uint_as_float(b[ni][1]));
            }
            #pragma unroll
            for (int mi = 0; mi < M_TILES; mi++) {
                #pragma unroll
                for (int ni = 0; ni < N_TILES; ni++) {
#if PASSES == 3
                    mma_tf32(acc[mi][ni], a_low[mi], b[ni]);
                    mma_tf32(acc[mi][ni], a[mi], b_low[ni]);
#endif
                    mma_tf32(acc[mi][ni], a[mi], b[ni]);
                }
            }
        }
#if FLUSH
        if ((slice + 1) % FLUSH == 0 || slice + 1 == slices) {  // this chunk's sums into the totals, rounded to
            #pragma unroll                                      // nearest as float32 adds round
            for (int mi = 0; mi < M_TILES; mi++) {
                #pragma unroll
                for (int ni = 0; ni < N_TILES; ni++) {
                    #pragma unroll
                    for (int j = 0; j < 4; j++) {
                        total[mi][ni][j] += acc[mi][ni][j];
                        acc[mi][ni][j] = 0.0f;
                    }
                }
            }
        }
#endif
    }
#endif
    copy_async_wait<0>();  // no copy may still be writing shared memory when the block exits
#if FLUSH
    #pragma unroll
    for (int mi = 0; mi < M_TILES; mi++) {
        #pragma unroll
        for (int ni = 0; ni < N_TILES; ni++) {
            #pragma unroll
            for (int j = 0; j < 4; j++) acc[mi][ni][j] = total[mi][ni][j];
        }
    }
#endif

    // A thread's columns of out come in runs: 2t and 2t + 1 of an n tile along K, or one column of 4 n tiles
    // across it (across_k)
    constexpr int RUN = NATURAL_COLUMNS ? 2 : 4, TILES_A_RUN = NATURAL_COLUMNS ? 1 : 4;
    float* const slice_out = SLICED ? out + (long long)blockIdx.z * M * N : out;
    const bool wide = N % RUN == 0 && (size_t)slice_out % (4 * RUN) == 0;
    const bool biased = bias != nullptr && blockIdx.z == 0;  // once, by the first split
    #pragma unroll
    for (int ni = 0; ni < N_TILES; ni += TILES_A_RUN) {
        int n[RUN / 2];  // across K, the runs of columns 2t and 2t + 1, next to each other in out
        float bias_run[RUN / 2][RUN];
        #pragma unroll
        for (int e = 0; e < RUN / 2; e++) {
            n[e] = col0 + warp_col + fragment_col(ni, 2 * t + e);
            #pragma unroll
            for (int j = 0; j < RUN; j++) bias_run[e][j] = biased && n[e] + j < N ? bias[n[e] + j] : 0.0f;
        }
        #pragma unroll
        for (int mi = 0; mi < M_TILES; mi++) {
            #pragma unroll
            for (int half = 0; half < 2; half++) {  // mma rows g and g + 8
                const int m = row0 + warp_row + fragment_row(mi, half, g);
                if (m >= M) continue;
                #pragma unroll
                for (int e = 0; e < RUN / 2; e++) {
                    float v[RUN];
                    #pragma unroll
                    for (int j = 0; j < RUN; j++) {
                        v[j] = bias_run[e][j]
                               + acc[mi][ni + (NATURAL_COLUMNS ? 0 : j)][2 * half + (NATURAL_COLUMNS ? j : e)];
                    }
                    store_run<RUN>(slice_out + (long long)m * N + n[e], v, n[e], N, wide);
                }
            }
        }
    }
    // END SOLUTION
}
"""

TF32_DEFINES = dict(TILE_M=TILE_M, TILE_N=TILE_N, WARP_M=WARP_M, WARP_N=WARP_N, TILE_K=TILE_K, STAGES=STAGES,
                    THREADS=THREADS, A_ALONG_K=1, B_ALONG_K=1, A_STEP=0, B_STEP=0, ACCUMULATE=0, FLUSH=0,
                    SLICED=0, WGMMA=0)
# The wgmma build's defines (sm_90a): two warpgroups of 64 x 128, slices of 32, four in flight, 3xTF32, B's split
# slices rotating through three buffers
WGMMA_DEFINES = dict(WARP_M=16, WARP_N=128, TILE_K=32, STAGES=4, THREADS=256, PASSES=3, WGMMA=1, SPLITS_OF_B=3)


@functools.cache
def wgmma_build(kernel: CudaKernel) -> CudaKernel:
    """`kernel` (a 3xTF32 build of 128 x 128 tiles, its sums flushed as flushed_3xtf32's or never) built for
    Hopper's warpgroup products instead (sm_90a), with its own source, layout and epilogue defines."""
    defines = dict(kernel.defines, **WGMMA_DEFINES, FLUSH=2 if kernel.defines["FLUSH"] else 0)
    return type(kernel)(kernel.source, kernel.name, defines=defines, arch_specific=True)


def has_wgmma_build(kernel: CudaKernel) -> bool:
    """Whether `kernel` is a build wgmma_build can remake: 3xTF32 in 128 x 128 tiles, unflushed or flushed every
    64 k as the wgmma build's pairs of slices are."""
    d = kernel.defines
    return (d.get("PASSES") == 3 and not d["WGMMA"] and d["TILE_M"] == d["TILE_N"] == 128
            and d["FLUSH"] * d["TILE_K"] in (0, FLUSH_SLICES * TILE_K))  # unflushed, or flushed every 64 k


def wgmma_builds(kernels) -> tuple[CudaKernel, ...]:
    """The wgmma builds of those of `kernels` that have one: a module makes them beside its kernels, where the
    compile checks see them."""
    return tuple(wgmma_build(kernel) for kernel in kernels if has_wgmma_build(kernel))


def for_this_gpu(kernel: CudaKernel) -> CudaKernel:
    """The build of `kernel` that runs here: its wgmma build on an H100 or H200 (sm_90) where it has one, else
    itself (the A40's mma.sync)."""
    return wgmma_build(kernel) if has_wgmma_build(kernel) and device_arch() == "sm_90" else kernel


def launch_engine(kernel: CudaKernel, grid: tuple, args: tuple) -> None:
    """Launch a build of this source on `grid`: its THREADS, and a wgmma build's dynamic shared memory."""
    kernel(grid, (kernel.defines["THREADS"],), args,
           shared_mem=wgmma_shared_bytes(kernel.defines) if kernel.defines["WGMMA"] else 0)


def wgmma_shared_bytes(defines: dict) -> int:
    """The dynamic shared memory a wgmma build's launch takes: STAGES raw slices of each operand, and B's three
    split slices (its low parts along K, high and low across)."""
    slice_floats = defines["TILE_K"] * defines["TILE_N"]  # TILE_M too
    return 4 * slice_floats * (2 * defines["STAGES"] + defines["SPLITS_OF_B"] * (1 if defines["B_ALONG_K"] else 2))


matmul_tf32_kernel = CudaKernel(MATMUL_TF32_SOURCE, "matmul_tf32_kernel", defines=dict(TF32_DEFINES, PASSES=1))


def matmul_forward(out, inp, weight, bias, B, T, C, OC):
    args = matmul_arguments(out, inp, weight, bias, B, T, C, OC)
    # BEGIN SOLUTION
    launch_tiles(matmul_tf32_kernel, args)
    # END SOLUTION


def launch_tiles(kernel, args: tuple) -> None:
    """A grid of TILE_M x TILE_N tiles of out (args: matmul.matmul_arguments'), K split over as many blocks a
    tile as it takes to give every multiprocessor BLOCKS_PER_SM blocks when the tiles alone are too few."""
    # BEGIN SOLUTION
    out, inp, weight, bias, M, K, N = args
    kernel = for_this_gpu(kernel)
    tiles_m, tiles_n = ceil_div(int(M), kernel.defines["TILE_M"]), ceil_div(int(N), kernel.defines["TILE_N"])
    enough = BLOCKS_PER_SM * multiprocessor_count() // (tiles_m * tiles_n)  # 0 or 1: the tiles fill the GPU
    splits = max(1, min(enough, int(K) // (kernel.defines["TILE_K"] * MIN_SLICES)))
    if splits > 1:
        out.fill(0)  # the splits add their sums into it
    launch_engine(kernel, (tiles_m, tiles_n, splits), args)
    # END SOLUTION


def launch_unsplit(kernel, small_kernel, out, a, b, M: int, K: int, N: int, bias=None) -> None:
    """out (M, N) = (or +=, as the kernels were compiled) A (M, K) @ B (K, N) + bias (None: none), K never split, so
    that every sum is taken in one order: `kernel`'s tiles where they give every multiprocessor one, else
    `small_kernel`'s (each kernel's TILE_M, TILE_N and THREADS are its defines), each as this GPU runs it."""
    def tiles(k):
        return ceil_div(M, k.defines["TILE_M"]), ceil_div(N, k.defines["TILE_N"])

    chosen = for_this_gpu(kernel if math.prod(tiles(kernel)) >= multiprocessor_count() else small_kernel)
    launch_engine(chosen, tiles(chosen),
                  (out, a, b, np.uint64(0) if bias is None else bias, np.int32(M), np.int32(K), np.int32(N)))


def launch_sliced(kernel, slices, a, b, M: int, K: int, N: int, splits: int) -> None:
    """slices (splits, M, N): slice z = A (M, K) @ B (K, N) over split z of K's slices, with `kernel` compiled
    SLICED = 1, as this GPU runs it; the caller adds the slices up, in split order."""
    kernel = for_this_gpu(kernel)
    launch_engine(kernel, (ceil_div(M, kernel.defines["TILE_M"]), ceil_div(N, kernel.defines["TILE_N"]), splits),
                  (slices, a, b, np.uint64(0), np.int32(M), np.int32(K), np.int32(N)))


# The engine's 3xTF32 builds for long sums (matmul_backward.py's products, conv1d.py's windows): each chunk of
# FLUSH_SLICES slices summed apart and added into float32 totals, in 128 x 128 tiles of 8 warps of 64 x 32 (the
# totals take as many registers as the accumulators) or 64 x 64 tiles of 4 warps of 32 x 32
FLUSH_SLICES = 4
FLUSHED_TILES = {"large": dict(WARP_N=32, THREADS=256), "small": dict(TILE_M=64, TILE_N=64, WARP_M=32, WARP_N=32)}


def flushed_3xtf32(size: str, **layout: int) -> CudaKernel:
    """The engine in 3xTF32, its sums flushed every FLUSH_SLICES slices, in FLUSHED_TILES[size], with `layout`'s
    defines (the operands' layouts and steps, ACCUMULATE, SLICED)."""
    return matmul_tf32_kernel.with_defines(PASSES=3, FLUSH=FLUSH_SLICES, **layout, **FLUSHED_TILES[size])
