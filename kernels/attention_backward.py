"""Causal self-attention's backward pass, from the probabilities the forward pass saved.

    attention_backward(dinp, dscores, dout, inp, att, B, T, C, NH)

Per head, q, k and v are the (T, HS) slices of inp (B, T, 3C) that kernels/attention.py
reads, p the head's (T, T) slice of att, the saved probabilities (0 above the
diagonal), dy the head's slice of dout (B, T, C), and scale = 1 / sqrt(HS). Each step
of the forward pass, and beside it its backward, which runs from the bottom up:

    scores = q k^T                   dq = ds k,  dk = ds^T q
    p = softmax(scale * scores)      ds = scale * p * (dp - rowsum(p * dp))
    out = p v                        dv = p^T dy,  dp = dy v^T

The row sum comes from softmax's Jacobian, d p_i / d x_j = p_i (delta_ij - p_j): the
gradient of its input x is dx_j = sum_i dp_i p_i (delta_ij - p_j) = p_j (dp_j - sum_i p_i dp_i),
and x = scale * scores hands on scale times that.

dinp (B, T, 3C) is written with dq | dk | dv in inp's layout. dscores (B, NH, T, T)
is scratch: it gets dp, then, in place, ds. Only the causal part (key t2 <= query t)
is ever read or written: above the diagonal p is 0, and so is ds; att's entries
there are never read.

Four launches, as llm.c's train_gpt2.cu does it (matrix products around a softmax
backward kernel), reading the packed layout directly as the forward pass does. Each
output element is summed by one thread in a fixed order, with no atomics: the
results are the same, bit for bit, on every run.
1. attention_dprobabilities_kernel: dp = dy v^T in 64 x 64 tiles, those wholly above
   the diagonal skipped, as the forward pass's scores.
2. softmax_backward_kernel, in place on dscores: one warp per row, its sum of
   p * dp found by warp shuffles; then each lane rewrites the entries it read.
3. attention_dquery_kernel: dq = ds k, tiled over (queries, head dims), summing only
   the keys up to the tile's last query.
4. attention_dkey_dvalue_kernel: the block that owns 64 key positions s and 64 head
   dims sums both dk[s] = sum over t >= s of ds[t, s] q[t] and dv[s] = sum over
   t >= s of p[t, s] dy[t], from the first query that sees its first key on. These
   transposed products read ds and p down their columns; each slice of queries
   serves both sums.

A product's two operands come into shared memory as [TILE_K][TILE] slices, the summed
index first, through two loaders: load_rows where the summed index runs along a
matrix's rows in memory (dy and v for dp, ds for dq; 16 floats of a row at a time),
load_columns where it runs down its columns (k for dq; ds, p, q and dy for dk and dv;
64 consecutive floats of a row, coalesced).
"""

import math

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, KernelArgumentError, ceil_div, check_array, check_dims
from gpt2kit.kernels.attention import (ATTENTION_DEFINES, SOFTMAX_BLOCK_SIZE, THREADS, TILE, TILE_PRODUCT_SOURCE,
                                       WARP_REDUCTIONS)

ATTENTION_BACKWARD_SOURCE = TILE_PRODUCT_SOURCE + WARP_REDUCTIONS + r"""
// Whether entry (row, column) is one of a rows x columns matrix's; of a `lower` one (ds, p), only those on or
// below the diagonal are: the others are never read.
__device__ bool inside(int row, int column, int rows, int columns, bool lower) {
    return row < rows && column < columns && (!lower || column <= row);
}

// slice[kk][r] = m[row0 + r][k0 + kk], 0 outside the matrix: TILE rows, TILE_K consecutive entries of each.
// m's rows are `stride` floats apart.
__device__ void load_rows(float (*slice)[TILE + 1], const float* m, long long stride, int row0, int k0, int rows,
                          int columns, bool lower) {
    #pragma unroll
    for (int i = 0; i < TILE * TILE_K / THREADS; i++) {
        int e = threadIdx.x + THREADS * i;
        int row = row0 + e / TILE_K, column = k0 + e % TILE_K;  // along the row fastest
        slice[e % TILE_K][e / TILE_K] = inside(row, column, rows, columns, lower) ? m[row * stride + column] : 0.0f;
    }
}

// slice[kk][c] = m[k0 + kk][col0 + c], 0 outside the matrix: TILE_K rows, TILE consecutive entries of each.
__device__ void load_columns(float (*slice)[TILE + 1], const float* m, long long stride, int k0, int col0, int rows,
                             int columns, bool lower) {
    #pragma unroll
    for (int i = 0; i < TILE * TILE_K / THREADS; i++) {
        int e = threadIdx.x + THREADS * i;
        int row = k0 + e / TILE, column = col0 + e % TILE;  // along the row fastest: coalesced
        slice[e / TILE][e % TILE] = inside(row, column, rows, columns, lower) ? m[row * stride + column] : 0.0f;
    }
}

// m[row0 + ty + 16 i][col0 + tx + 16 j] = acc[i][j] for the entries inside the matrix (accumulate_slice's layout).
__device__ void store_tile(const float acc[4][4], float* m, long long stride, int row0, int col0, int rows,
                           int columns, bool lower) {
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        #pragma unroll
        for (int j = 0; j < 4; j++) {
            int row = row0 + ty + 16 * i, column = col0 + tx + 16 * j;
            if (inside(row, column, rows, columns, lower)) m[row * stride + column] = acc[i][j];
        }
    }
}

// dp[b, h, t, t2] = dy[b, t, h, :] . v[b, t2, h, :] for t2 <= t.
// grid: (key tiles, query tiles, B * NH)
extern "C" __global__ void __launch_bounds__(THREADS, 2)  // two blocks per SM: no register spills
attention_dprobabilities_kernel(float* dp, const float* dout, const float* qkv, int T, int C, int NH) {
    // BEGIN SOLUTION
    const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
    if (col0 > row0 + TILE - 1) return;  // wholly above the diagonal
    const int HS = C / NH, b = blockIdx.z / NH, h = blockIdx.z % NH;
    const float* dy = dout + (long long)b * T * C + h * HS;           // dy[t * C + d]
    const float* v = qkv + (long long)b * T * 3 * C + 2 * C + h * HS;  // v[t2 * 3C + d]
    __shared__ float dy_slice[TILE_K][TILE + 1], v_slice[TILE_K][TILE + 1];

    float acc[4][4] = {};
    for (int d0 = 0; d0 < HS; d0 += TILE_K) {
        load_rows(dy_slice, dy, C, row0, d0, T, HS, false);
        load_rows(v_slice, v, 3 * C, col0, d0, T, HS, false);
        __syncthreads();
        accumulate_slice(acc, dy_slice, v_slice, threadIdx.x / 16, threadIdx.x % 16);
        __syncthreads();
    }
    store_tile(acc, dp + (long long)blockIdx.z * T * T, T, row0, col0, T, T, true);
    // END SOLUTION
}

// dscores holds dp (N, T, T); row (n, t) becomes scale * p * (dp - sum over t2 <= t of p * dp) for t2 <= t.
// One warp per row; each lane rewrites only the entries it read.
extern "C" __global__ void softmax_backward_kernel(float* dscores, const float* att, float scale, int N, int T) {
    // BEGIN SOLUTION
    long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= (long long)N * T) return;  // the whole warp, which warp_sum needs
    int t = (int)(row % T);
    const float* p = att + row * T;
    float* g = dscores + row * T;

    float weighted = 0.0f;
    for (int i = lane; i <= t; i += 32) weighted += p[i] * g[i];
    float row_sum = warp_sum(weighted);
    for (int i = lane; i <= t; i += 32) g[i] = scale * p[i] * (g[i] - row_sum);
    // END SOLUTION
}

// dq[b, t, h, :] = sum over t2 <= t of ds[b, h, t, t2] * k[b, t2, h, :], into dinp's first C columns.
// grid: (head-dim tiles, query tiles, B * NH)
extern "C" __global__ void __launch_bounds__(THREADS, 2)  // two blocks per SM: no register spills
attention_dquery_kernel(float* dinp, const float* dscores, const float* qkv, int T, int C, int NH) {
    // BEGIN SOLUTION
    const int row0 = blockIdx.y * TILE, d0 = blockIdx.x * TILE;
    const int HS = C / NH, b = blockIdx.z / NH, h = blockIdx.z % NH;
    const long long head = (long long)b * T * 3 * C + h * HS;  // q[b, 0, h, 0] in qkv, dq's in dinp; k is C on
    const float* ds = dscores + (long long)blockIdx.z * T * T;
    __shared__ float ds_slice[TILE_K][TILE + 1], k_slice[TILE_K][TILE + 1];

    float acc[4][4] = {};
    const int keys = min(T, row0 + TILE);  // later keys are above the diagonal of every row here
    for (int k0 = 0; k0 < keys; k0 += TILE_K) {
        load_rows(ds_slice, ds, T, row0, k0, T, T, true);
        load_columns(k_slice, qkv + head + C, 3 * C, k0, d0, T, HS, false);
        __syncthreads();
        accumulate_slice(acc, ds_slice, k_slice, threadIdx.x / 16, threadIdx.x % 16);
        __syncthreads();
    }
    store_tile(acc, dinp + head, 3 * C, row0, d0, T, HS, false);
    // END SOLUTION
}

// dk[b, s, h, :] = sum over t >= s of ds[b, h, t, s] * q[b, t, h, :] and dv[b, s, h, :] = sum over t >= s of
// att[b, h, t, s] * dy[b, t, h, :], into dinp's second and third C columns.
// grid: (head-dim tiles, key tiles, B * NH)
extern "C" __global__ void __launch_bounds__(THREADS, 2)  // two blocks per SM: no register spills
attention_dkey_dvalue_kernel(float* dinp, const float* dscores, const float* att, const float* dout,
                             const float* qkv, int T, int C, int NH) {
    // BEGIN SOLUTION
    const int key0 = blockIdx.y * TILE, d0 = blockIdx.x * TILE;
    const int HS = C / NH, b = blockIdx.z / NH, h = blockIdx.z % NH;
    const long long head = (long long)b * T * 3 * C + h * HS;  // q[b, 0, h, 0] in qkv; dk is C on in dinp, dv 2C
    const long long probabilities = (long long)blockIdx.z * T * T;  // the head's ds and p
    const float* dy = dout + (long long)b * T * C + h * HS;
    __shared__ float ds_slice[TILE_K][TILE + 1], q_slice[TILE_K][TILE + 1];
    __shared__ float p_slice[TILE_K][TILE + 1], dy_slice[TILE_K][TILE + 1];

    float dk[4][4] = {}, dv[4][4] = {};
    for (int t0 = key0; t0 < T; t0 += TILE_K) {  // earlier queries see none of these keys
        load_columns(ds_slice, dscores + probabilities, T, t0, key0, T, T, true);
        load_columns(p_slice, att + probabilities, T, t0, key0, T, T, true);
        load_columns(q_slice, qkv + head, 3 * C, t0, d0, T, HS, false);
        load_columns(dy_slice, dy, C, t0, d0, T, HS, false);
        __syncthreads();
        accumulate_slice(dk, ds_slice, q_slice, threadIdx.x / 16, threadIdx.x % 16);
        accumulate_slice(dv, p_slice, dy_slice, threadIdx.x / 16, threadIdx.x % 16);
        __syncthreads();
    }
    store_tile(dk, dinp + head + C, 3 * C, key0, d0, T, HS, false);
    store_tile(dv, dinp + head + 2 * C, 3 * C, key0, d0, T, HS, false);
    // END SOLUTION
}
"""


def backward_kernels(source):
    """The four kernels of `source` (ATTENTION_BACKWARD_SOURCE, or a known-wrong mutant of it), in launch order."""
    return (CudaKernel(source, "attention_dprobabilities_kernel", defines=ATTENTION_DEFINES),
            CudaKernel(source, "softmax_backward_kernel", defines=ATTENTION_DEFINES),
            CudaKernel(source, "attention_dquery_kernel", defines=ATTENTION_DEFINES),
            CudaKernel(source, "attention_dkey_dvalue_kernel", defines=ATTENTION_DEFINES))


KERNELS = backward_kernels(ATTENTION_BACKWARD_SOURCE)


def attention_backward(dinp, dscores, dout, inp, att, B, T, C, NH):
    """dinp (B, T, 3C) = the gradients of q, k and v (written); dscores (B, NH, T, T) is scratch."""
    check_dims("attention_backward", B=B, T=T, C=C, NH=NH)
    if C % NH:
        raise KernelArgumentError(f"attention_backward: C={C} is not a multiple of NH={NH}")
    for name, array, size in (("dinp", dinp, B * T * 3 * C), ("dscores", dscores, B * NH * T * T),
                              ("dout", dout, B * T * C), ("inp", inp, B * T * 3 * C), ("att", att, B * NH * T * T)):
        check_array("attention_backward", name, array, size)
    launch(KERNELS, dinp, dscores, dout, inp, att, B, T, C, NH)


def launch(kernels, dinp, dscores, dout, inp, att, B, T, C, NH):
    """The four launches, of `kernels` (KERNELS, or a known-wrong mutant's backward_kernels)."""
    dprobabilities, softmax_backward, dquery, dkey_dvalue = kernels
    HS = C // NH
    tiles, head_tiles = ceil_div(T, TILE), ceil_div(HS, TILE)
    sizes = (np.int32(T), np.int32(C), np.int32(NH))
    dprobabilities((tiles, tiles, B * NH), (THREADS,), (dscores, dout, inp, *sizes))
    softmax_backward((ceil_div(B * NH * T, SOFTMAX_BLOCK_SIZE // 32),), (SOFTMAX_BLOCK_SIZE,),
                     (dscores, att, np.float32(1.0 / math.sqrt(HS)), np.int32(B * NH), np.int32(T)))
    dquery((head_tiles, tiles, B * NH), (THREADS,), (dinp, dscores, inp, *sizes))
    dkey_dvalue((head_tiles, tiles, B * NH), (THREADS,), (dinp, dscores, att, dout, inp, *sizes))
