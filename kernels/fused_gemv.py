"""Fused matrix-vector kernels for decoding: a layer's neighbours folded into its matmul.

    layernorm_matmul_forward(out, inp, ln_weight, ln_bias, weight, bias, B, T, C, OC)
        out = layernorm(inp) @ weight^T + bias                      ln1 + qkv, lnf + LM head
    layernorm_matmul_gelu_forward(out, inp, ln_weight, ln_bias, weight, bias, B, T, C, OC)
        out = gelu(layernorm(inp) @ weight^T + bias)                ln2 + fc + GELU
    matmul_residual_forward(out, inp, weight, bias, residual, B, T, C, OC)
        out = residual + inp @ weight^T + bias                      attproj + residual, fcproj + residual

inp (B, T, C) seen as M = B*T rows; weight (OC, C) as in matmul.py; bias (OC) or None;
layernorm as in layernorm.py (biased variance, eps 1e-5), without its mean and rstd.

Generating a token runs every matmul on a handful of rows (M = the batch), so each is
a matrix-vector product: 2 flops per weight float read, and its time is the time to
stream the weights. A decode step of GPT-2 124M reads 0.5 GB of weights, a few
microseconds per layer at the card's bandwidth; but it also launches about 135
kernels, and a small kernel costs a few microseconds however little it does (the
launch, the ramp-up, the tail). Folding the layernorm that precedes a matmul, and the
GELU or residual add that follows it, into the matmul removes five of the eleven
kernels of a layer, and the trips their activations made through memory.

The kernel, written once and compiled three ways (LAYERNORM, GELU and RESIDUAL are
defines that the compiler folds away):

* split-K by warps: a column's dot products are shared by `split` warps of a block,
  each taking every split-th float4 of the weight row, so that a long row (fcproj's
  K = 3072) still has at most a few loads per lane, all in flight at once, and a
  short matrix (768 x 768) still spreads over more blocks than the card has SMs; the
  warps' sums meet in shared memory;
* rows in chunks of up to ROWS: each weight float4 is loaded once per chunk and used
  for every row of it, accumulators in registers. ROWS is compiled per launch as the
  batch rounded up to a power of two (at most 8): a kernel sized for 8 rows but given
  one holds registers it never uses, and fewer of its blocks fit on an SM;
* the products without a test a row: FULL_ROWS, the batch itself (at most 8), is
  compiled in too, and a full chunk runs a loop of exactly FULL_ROWS rows, with one
  test a piece (k < K) and none a row. With a test a row, every row's float4 and its
  8 multiply-adds came with a branch, its convergence and the shared window's address
  again: 19 instructions where 10 do, and at five rows the kernel was bound by issuing
  instructions, not by memory (ncu, GPT-J's ln1 + qkv: 44.6 M warp instructions, 8.4
  cycles between two a warp). GPT-J's five-row GEMVs now run 6-19% faster, its
  eight-row layernorm ones 40-42% (an H100). The residual kernel's full chunks of 8
  rows keep the tests: its rows come from global memory, and there the loop without
  them measured slower (GPT-2's attproj and fcproj);
* from 4 rows a chunk, each warp takes two columns: a float4 of a row, read from
  shared memory (or L1), serves both columns' weights. With one column, 8 rows read 8
  bytes of rows for every byte of weights, more than shared memory delivers when the
  weights stream at the card's bandwidth;
* the layernorm prologue: a warp per row copies the chunk's rows into shared memory
  and finds each one's mean and 1 / std (two passes over the row held there: mean,
  then variance), then the whole block applies them and the layernorm's weights, each
  weight read once a block rather than once a row (8% off the B=1 step); the dot
  products read the rows from there. Blocks walk the columns with a grid stride, so a
  block normalises its rows once for all the columns it takes. From 4 rows a chunk the
  prologue reads and writes float4s, a quarter of the instructions: at 8 rows a block
  normalises 6,144 floats before its first dot product;
* the warp's sums in one pass: with 8 rows and two columns a lane holds 16 sums, and
  summing each across the warp takes 5 shuffles, 80 in all. Exchanging halves instead
  (a lane keeps half its values and sends the other half to the lane 16 away, which
  keeps the other half; then 8 lanes away with a quarter...) takes 16;
* the epilogue: one thread per (row, column) adds the warps' sums and the bias, then
  applies GELU (the tanh form of gelu.py) or adds the residual, and stores. It loads
  its bias and residual before the dot products, so that their latency hides behind them;
* overlap with the kernel before (sm_90 and later): a block first asks L2 for its
  first columns' weights, which no kernel writes, and only then waits for the previous
  kernel's rows (gpt2kit/kernel_runtime/overlap.py). At one or two rows a chunk it also loads
  its first weights into registers before it waits.
"""

import functools

import numpy as np

from gpt2kit.kernel_runtime import (CudaKernel, KernelArgumentError, ceil_div, check_array, check_dims,
                                    multiprocessor_count, power_of_two_at_least, shared_bytes_per_block,
                                    shared_bytes_per_multiprocessor)

THREADS = 256              # 8 warps per block
ROWS = 8                   # most rows per chunk: each thread keeps a chunk's accumulators
OWN_SHARED = 1024          # bytes a kernel's own __shared__ arrays may take beside a chunk's normalised rows
RESERVED_SHARED = 1024     # bytes of an SM's shared memory the driver keeps for each block it holds
TWO_COLUMN_ROWS = 4        # from this many rows a chunk, a warp takes two columns (see _with_rows)
# From TWO_COLUMN_ROWS rows a chunk, the launch bounds ask for at most this many blocks an SM: the products' loop
# without a test a row keeps more rows' float4s in flight, and in the 80 registers of three blocks they spill
# (8-24 bytes); so built, GPT-J's five- and eight-row GEMVs measured 8-11% slower.
TWO_COLUMN_BLOCKS = 2
# Per kernel: PIECES, the float4s of a weight row each lane loads before using them (all in
# flight at once), and BLOCKS, the launch bounds' minimum of blocks an SM holds at once (with
# the layernorm, also the grid stride's cap). The residual kernel reads its rows from global
# memory, and its loads of them, hoisted for every piece and row, need the registers that
# fewer pieces leave. Both were benchmarks.sweep's fastest at B=1 and B=8 on an H200. The
# module's kernels are the one-row builds (a B=1 step's), so that the compile checks see
# launched builds; every launched build spills nothing on sm_86 or sm_90.
LAYERNORM_TUNING = dict(PIECES=8, BLOCKS=3)
RESIDUAL_TUNING = dict(PIECES=2, BLOCKS=2)

FUSED_GEMV_SOURCE = r"""
#define WARPS (THREADS / 32)
#define VALUES (WARP_COLUMNS * ROWS)  // a lane's accumulators

__device__ __forceinline__ float warp_sum(float value) {
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffff, value, offset);
    return value;
}

// The layernorm prologue's arithmetic on a float or on a float4 of a row (a quarter of the instructions).
__device__ __forceinline__ float total(float v) { return v; }
__device__ __forceinline__ float total(float4 v) { return (v.x + v.y) + (v.z + v.w); }
__device__ __forceinline__ float centred_squares(float v, float mean) { return (v - mean) * (v - mean); }
__device__ __forceinline__ float centred_squares(float4 v, float mean) {
    return (centred_squares(v.x, mean) + centred_squares(v.y, mean))
           + (centred_squares(v.z, mean) + centred_squares(v.w, mean));
}
__device__ __forceinline__ float layernormed(float v, float mean, float rstd, float scale, float shift) {
    return (v - mean) * rstd * scale + shift;
}
__device__ __forceinline__ float4 layernormed(float4 v, float mean, float rstd, float4 scale, float4 shift) {
    return make_float4(layernormed(v.x, mean, rstd, scale.x, shift.x), layernormed(v.y, mean, rstd, scale.y, shift.y),
                       layernormed(v.z, mean, rstd, scale.z, shift.z), layernormed(v.w, mean, rstd, scale.w, shift.w));
}

// by one warp: row (K floats, read as Vectors) copied to held, and statistics = {its mean, 1 / its std}; two passes
// over the copy (mean, then variance: exact for rows of large mean). The layernorm itself comes after, for all rows.
template <typename Vector>
__device__ __forceinline__ void row_statistics(float* held, float* statistics, const float* row, int K, int lane) {
    constexpr int width = sizeof(Vector) / sizeof(float);
    float sum = 0.0f;
    for (int k = width * lane; k < K; k += 32 * width) {
        const Vector v = *(const Vector*)(row + k);
        *(Vector*)(held + k) = v;
        sum += total(v);
    }
    const float mean = warp_sum(sum) / K;
    float squares = 0.0f;
    for (int k = width * lane; k < K; k += 32 * width) squares += centred_squares(*(const Vector*)(held + k), mean);
    const float rstd = rsqrtf(warp_sum(squares) / K + 1e-5f);
    if (lane == 0) {
        statistics[0] = mean;
        statistics[1] = rstd;
    }
}

// by the block: the chunk's rows (held, `rows` rows of K floats, read as Vectors) standardised with their statistics
// and scaled and shifted by the layernorm's weights, each weight read once a block, not once a row
template <typename Vector>
__device__ __forceinline__ void layernorm_rows(float* held, const float (*statistics)[2], const float* ln_weight,
                                               const float* ln_bias, int rows, int K) {
    constexpr int width = sizeof(Vector) / sizeof(float);
    for (int k = width * threadIdx.x; k < K; k += width * THREADS) {
        const Vector scale = *(const Vector*)(ln_weight + k), shift = *(const Vector*)(ln_bias + k);
        #pragma unroll
        for (int r = 0; r < ROWS; r++) {
            if (r < rows) {
                Vector* v = (Vector*)(held + r * K + k);
                *v = layernormed(*v, statistics[r][0], statistics[r][1], scale, shift);
            }
        }
    }
}

// The warp's totals of VALUES accumulators (a power of two, at most 32) in one pass: each exchange halves the
// values a lane holds (a lane keeps one half and sends the other to the lane `offset` away, which keeps the
// other half), so VALUES - 1 + log2(32 / VALUES) shuffles instead of 5 a value. Afterwards every lane holds
// the total of value lane / (32 / VALUES).
__device__ __forceinline__ float warp_totals(float (&values)[VALUES], int lane) {
    #pragma unroll
    for (int count = VALUES, offset = 16; count > 1; count /= 2, offset /= 2) {
        const bool upper = lane & offset;
        #pragma unroll
        for (int j = 0; j < count / 2; j++) {
            const float kept = upper ? values[j + count / 2] : values[j];
            const float sent = upper ? values[j] : values[j + count / 2];
            values[j] = kept + __shfl_xor_sync(0xffffffff, sent, offset);
        }
    }
    float total = values[0];
    for (int offset = 16 / VALUES; offset > 0; offset /= 2) total += __shfl_xor_sync(0xffffffff, total, offset);
    return total;
}

// wk[i] = w[k0 + i * stride ..] as float4s, zeros past K
__device__ __forceinline__ void load_pieces(float4 (&wk)[PIECES], const float* w, int k0, int stride, int K) {
    #pragma unroll
    for (int i = 0; i < PIECES; i++) {
        int k = k0 + i * stride;
        wk[i] = k < K ? __ldg((const float4*)(w + k)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
}

// BEGIN SOLUTION
// acc += the products of a batch (wk: PIECES float4s of each of the warp's columns, from k0 on) with the chunk's
// rows, each float4 of a row read once for all the warp's columns; pieces past K are skipped. CHECKED: rows
// m < rows of a chunk of up to ROWS; unchecked: a full chunk, exactly FULL_ROWS rows, compiled without a branch.
template <bool CHECKED>
__device__ __forceinline__ void batch_products(float (&acc)[VALUES], const float4 (&wk)[WARP_COLUMNS][PIECES],
                                               const float* x, int k0, int stride, int K, int rows) {
    #pragma unroll
    for (int i = 0; i < PIECES; i++) {
        const int k = k0 + i * stride;
        if (k >= K) continue;  // the same trips for every lane whenever K is a multiple of 128 * split
        #pragma unroll
        for (int m = 0; m < (CHECKED ? ROWS : FULL_ROWS); m++) {
            if (!CHECKED || m < rows) {
                const float4 xk = *(const float4*)(x + (long long)m * K + k);
                #pragma unroll
                for (int c = 0; c < WARP_COLUMNS; c++) {
                    float& a = acc[c * ROWS + m];
                    a = fmaf(wk[c][i].x, xk.x, a);
                    a = fmaf(wk[c][i].y, xk.y, a);
                    a = fmaf(wk[c][i].z, xk.z, a);
                    a = fmaf(wk[c][i].w, xk.w, a);
                }
            }
        }
    }
}
// END SOLUTION

__device__ __forceinline__ float gelu(float x) {
    const float s = 0.7978845608028654f;  // sqrt(2 / pi)
    return 0.5f * x * (1.0f + tanhf(s * (x + 0.044715f * x * x * x)));
}

// grid: blocks walking groups of WARPS / split columns; dynamic shared memory: rows_per_chunk * K floats
// when LAYERNORM, else none
// without a minimum of blocks per SM, ptxas may cap the registers low and spill
extern "C" __global__ void __launch_bounds__(THREADS, BLOCKS)
fused_gemv_kernel(float* out, const float* inp, const float* ln_weight, const float* ln_bias,
                  const float* weight, const float* bias, const float* residual,
                  int M, int K, int N, int split, int rows_per_chunk) {
    // BEGIN SOLUTION
    extern __shared__ __align__(16) float normalised[];  // LAYERNORM: the chunk's rows, rows_per_chunk x K
    __shared__ float partial[WARPS][WARP_COLUMNS][ROWS];  // each warp's sum for each of its columns and rows
#if LAYERNORM
    __shared__ float statistics[ROWS][2];                 // each row's mean and 1 / std
#endif
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int columns = WARPS / split * WARP_COLUMNS;    // per group
    const int column_in = warp / split * WARP_COLUMNS, part = warp % split;  // the warp's first column
    // float4 loads when every row starts 16-byte aligned (shared rows do when K % 4 == 0)
    const bool vector = K % 4 == 0 && (size_t)weight % 16 == 0 && (LAYERNORM || (size_t)inp % 16 == 0);
#if LAYERNORM
    // From TWO_COLUMN_ROWS rows a chunk the prologue is float4s when it can be (2% off the B=8 step); with fewer,
    // the registers that takes beside the preloaded weights would spill.
    const bool vector_rows = ROWS >= TWO_COLUMN_ROWS && K % 4 == 0
                             && ((size_t)inp | (size_t)ln_weight | (size_t)ln_bias) % 16 == 0;
#endif
    const int stride = 128 * split;                      // floats between one lane's float4s of a row
    const int first_k = 4 * (part * 32 + lane);

    // The weights are no kernel's output: the block's first columns start on their way to L2 while
    // the kernel before this one finishes (on sm_90; gpt2kit/kernel_runtime/overlap.py).
    const int first_column = blockIdx.x * columns, group_stride = gridDim.x * columns;
    if (first_column < N) {
        const float* slab = weight + (long long)first_column * K;
        const long long floats = (long long)min(columns, N - first_column) * K;
        for (long long i = 32LL * threadIdx.x; i < floats; i += 32LL * THREADS) {  // a 128-byte line each
            asm volatile("prefetch.global.L2 [%0];" :: "l"(slab + i));
        }
    }
    float4 wk[WARP_COLUMNS][PIECES];  // PIECES float4s of each weight row, all in flight together
    bool preloaded = false;           // wk holds the first group's first pieces
#if ROWS < TWO_COLUMN_ROWS
    // Below TWO_COLUMN_ROWS rows a chunk, the first pieces come into registers before the wait, so that they
    // arrive during the previous kernel's tail and the layernorm prologue (9% off the B=1 step). With more rows,
    // the registers they hold across the prologue cost more than the latency they hide.
    if (vector && first_column < N && first_k < K) {
        #pragma unroll
        for (int c = 0; c < WARP_COLUMNS; c++) {
            load_pieces(wk[c], weight + (long long)min(first_column + column_in + c, N - 1) * K, first_k, stride, K);
        }
        preloaded = true;
    }
#endif
    let_next_kernel_start();
    wait_for_previous_kernel();

    for (int m0 = 0; m0 < M; m0 += rows_per_chunk) {
        const int rows = min(rows_per_chunk, M - m0);
#if LAYERNORM
        __syncthreads();  // the previous chunk's rows are read no more
        for (int r = warp; r < rows; r += WARPS) {
            float* held = normalised + r * K;
            const float* row = inp + (long long)(m0 + r) * K;
            if (vector_rows) row_statistics<float4>(held, statistics[r], row, K, lane);
            else row_statistics<float>(held, statistics[r], row, K, lane);
        }
        __syncthreads();
        if (vector_rows) layernorm_rows<float4>(normalised, statistics, ln_weight, ln_bias, rows, K);
        else layernorm_rows<float>(normalised, statistics, ln_weight, ln_bias, rows, K);
        __syncthreads();
        const float* x = normalised;
#else
        const float* x = inp + (long long)m0 * K;
#endif
        for (int n0 = first_column; n0 < N; n0 += group_stride) {  // the same trips for all threads
            // the epilogue's operands, loaded now so that their latency hides behind the dot products
            const int out_column = n0 + threadIdx.x / ROWS, out_row = m0 + threadIdx.x % ROWS;
            const bool stores = threadIdx.x < columns * ROWS && out_row < m0 + rows && out_column < N;
            const long long at = (long long)out_row * N + out_column;
            float value = stores && bias != nullptr ? bias[out_column] : 0.0f;
#if RESIDUAL
            const float residual_value = stores ? residual[at] : 0.0f;
#endif
            // A column past N computes on the last row of weight and is not stored: no branch around the loads.
            const float* w[WARP_COLUMNS];
            #pragma unroll
            for (int c = 0; c < WARP_COLUMNS; c++) w[c] = weight + (long long)min(n0 + column_in + c, N - 1) * K;
            float acc[VALUES] = {};  // acc[c * ROWS + m]: column c, row m
            if (vector) {
                for (int k0 = first_k; k0 < K; k0 += PIECES * stride) {
                    if (!preloaded) {
                        #pragma unroll
                        for (int c = 0; c < WARP_COLUMNS; c++) load_pieces(wk[c], w[c], k0, stride, K);
                    }
                    preloaded = false;
                    // A full chunk needs no test a row: without their branches, the loads of the rows and the
                    // multiply-adds are most of the instructions (the residual kernel's 8 rows from global
                    // memory excepted: measured slower).
                    if (rows == FULL_ROWS && (LAYERNORM || FULL_ROWS < ROWS)) {
                        batch_products<false>(acc, wk, x, k0, stride, K, rows);
                    } else {
                        batch_products<true>(acc, wk, x, k0, stride, K, rows);
                    }
                }
            } else {
                for (int k = part * 32 + lane; k < K; k += 32 * split) {
                    #pragma unroll
                    for (int c = 0; c < WARP_COLUMNS; c++) {
                        const float wk1 = __ldg(w[c] + k);
                        #pragma unroll
                        for (int m = 0; m < ROWS; m++) {
                            if (m < rows) acc[c * ROWS + m] = fmaf(wk1, x[(long long)m * K + k], acc[c * ROWS + m]);
                        }
                    }
                }
            }
            const float total = warp_totals(acc, lane);
            const int lanes_per_value = 32 / VALUES;
            if (lane % lanes_per_value == 0) {
                const int j = lane / lanes_per_value;
                partial[warp][j / ROWS][j % ROWS] = total;
            }
            __syncthreads();
            if (stores) {  // the epilogue: a thread per (column, row)
                const int c = threadIdx.x / ROWS, m = threadIdx.x % ROWS;
                const int first_warp = c / WARP_COLUMNS * split;  // the warps that summed column c's parts
                for (int p = 0; p < split; p++) value += partial[first_warp + p][c % WARP_COLUMNS][m];
#if GELU
                value = gelu(value);
#endif
#if RESIDUAL
                value += residual_value;
#endif
                out[at] = value;
            }
            __syncthreads();  // partial is rewritten by the next group
        }
    }
    // END SOLUTION
}
"""


def fused_kernel(layernorm: bool, gelu: bool, residual: bool, tuning: dict | None = None) -> CudaKernel:
    """The kernel compiled with these parts, and its PIECES and BLOCKS (default: the kit's; benchmarks.sweep
    tries others)."""
    tuning = tuning or (LAYERNORM_TUNING if layernorm else RESIDUAL_TUNING)
    return CudaKernel(FUSED_GEMV_SOURCE, "fused_gemv_kernel",
                      defines=dict(THREADS=THREADS, ROWS=1, FULL_ROWS=1, WARP_COLUMNS=1,
                                   TWO_COLUMN_ROWS=TWO_COLUMN_ROWS,
                                   **tuning, LAYERNORM=int(layernorm), GELU=int(gelu), RESIDUAL=int(residual)))


layernorm_matmul_kernel = fused_kernel(layernorm=True, gelu=False, residual=False)
layernorm_matmul_gelu_kernel = fused_kernel(layernorm=True, gelu=True, residual=False)
matmul_residual_kernel = fused_kernel(layernorm=False, gelu=False, residual=True)


def split_for(K: int, OC: int, pieces: int, warp_columns: int = 1) -> int:
    """Warps per column: enough that a lane loads at most `pieces` float4s of a weight row, and that
    the column groups (`warp_columns` columns a warp) give every SM two blocks; at most the block's 8 warps."""
    split = 1
    while split < THREADS // 32 and (K > 4 * 32 * pieces * split or
                                     ceil_div(OC, THREADS // 32 // split * warp_columns) < 2 * multiprocessor_count()):
        split *= 2
    return split


@functools.cache
def _with_rows(kernel: CudaKernel, rows: int, full_rows: int) -> CudaKernel:
    """`kernel` compiled for chunks of `rows` rows (a power of two), full ones of `full_rows`. From TWO_COLUMN_ROWS
    rows on, a warp takes two columns, each float4 of a row read once for both, with half the pieces a column (the
    same loads in flight), and at most TWO_COLUMN_BLOCKS blocks share an SM. `kernel` itself where it is that
    build already (the module's kernels are the one-row builds)."""
    changes = dict(ROWS=rows, FULL_ROWS=full_rows)
    if rows >= TWO_COLUMN_ROWS:
        changes.update(WARP_COLUMNS=2, PIECES=max(1, kernel.defines["PIECES"] // 2),
                       BLOCKS=min(kernel.defines["BLOCKS"], TWO_COLUMN_BLOCKS))
    return kernel if changes.items() <= kernel.defines.items() else kernel.with_defines(**changes)


def kernel_for_rows(kernel: CudaKernel, M: int) -> CudaKernel:
    """`kernel` as a launch on M rows compiles it: for chunks of M rows rounded up to a power of two, at most ROWS
    (the accumulators' layout), whose full chunks have min(M, ROWS) rows (the products' loop)."""
    return _with_rows(kernel, min(ROWS, power_of_two_at_least(M)), min(ROWS, M))


def launch_fused(kernel, function, out, inp, ln_weight, ln_bias, weight, bias, residual, B, T, C, OC):
    """Check the arguments of `function` and launch `kernel` (one of fused_kernel's, compiled again with the
    batch's chunk of rows): its layernorm's weights are checked when the kernel has a layernorm, the
    residual when it adds one."""
    check_dims(function, B=B, T=T, C=C, OC=OC)
    M = B * T
    check_array(function, "out", out, M * OC)
    check_array(function, "inp", inp, M * C)
    check_array(function, "weight", weight, OC * C)
    if bias is not None:
        check_array(function, "bias", bias, OC)
    kernel = kernel_for_rows(kernel, M)
    chunk = kernel.defines["ROWS"]
    shared_bytes, rows_per_chunk = 0, chunk
    if kernel.defines["LAYERNORM"]:
        check_array(function, "ln_weight", ln_weight, C)
        check_array(function, "ln_bias", ln_bias, C)
        # The chunk's normalised rows share a block's shared memory with the kernel's own arrays (OWN_SHARED at
        # most): all of them where they fit (past 48 KB the launch opts in to more), so that each weight is read
        # once per chunk.
        room = shared_bytes_per_block() - OWN_SHARED
        rows_per_chunk = min(chunk, M, room // (4 * C))
        if rows_per_chunk == 0:
            raise KernelArgumentError(f"{function}: C={C} is too wide: a normalised row must fit in the "
                                      f"{room} bytes of shared memory this GPU gives a block (C <= {room // 4})")
        shared_bytes = 4 * rows_per_chunk * C
        resident = shared_bytes_per_multiprocessor() // (shared_bytes + OWN_SHARED + RESERVED_SHARED)
    if kernel.defines["RESIDUAL"]:
        check_array(function, "residual", residual, M * OC)
    split = split_for(C, OC, kernel.defines["PIECES"], kernel.defines["WARP_COLUMNS"])
    groups = ceil_div(OC, THREADS // 32 // split * kernel.defines["WARP_COLUMNS"])
    null = np.uint64(0)
    # a layernorm kernel's blocks stay resident and stride over the groups (each normalises its rows once): as
    # many as its launch bounds ask an SM to hold, or as its shared memory lets one hold
    blocks = (min(groups, min(kernel.defines["BLOCKS"], resident) * multiprocessor_count())
              if kernel.defines["LAYERNORM"] else groups)
    kernel((blocks,), (THREADS,),
           (out, inp, ln_weight if ln_weight is not None else null, ln_bias if ln_bias is not None else null,
            weight, bias if bias is not None else null, residual if residual is not None else null,
            np.int32(M), np.int32(C), np.int32(OC), np.int32(split), np.int32(rows_per_chunk)),
           shared_mem=shared_bytes)


def layernorm_matmul_forward(out, inp, ln_weight, ln_bias, weight, bias, B, T, C, OC):
    launch_fused(layernorm_matmul_kernel, "layernorm_matmul_forward", out, inp, ln_weight, ln_bias, weight, bias, None,
            B, T, C, OC)


def layernorm_matmul_gelu_forward(out, inp, ln_weight, ln_bias, weight, bias, B, T, C, OC):
    launch_fused(layernorm_matmul_gelu_kernel, "layernorm_matmul_gelu_forward", out, inp, ln_weight, ln_bias, weight,
            bias, None, B, T, C, OC)


def matmul_residual_forward(out, inp, weight, bias, residual, B, T, C, OC):
    launch_fused(matmul_residual_kernel, "matmul_residual_forward", out, inp, None, None, weight, bias, residual,
            B, T, C, OC)
