"""MatMul with bias: the linear layer of every GPT-2 block and the LM head.

    out[m, n] = sum_k inp[m, k] * weight[n, k] + bias[n]

inp (B, T, C) seen as M = B*T rows of K = C; weight (OC, C), PyTorch's (out, in)
layout; bias (OC) or None; out (B, T, OC).

A naive kernel (one thread per output, reading its row and column from global memory)
moves 2*K floats per 2*K flops and runs at a few percent of the chip. This one tiles:

* each block computes a 128 x 128 tile of out, walking K in steps of 16;
* per step the block copies a 128x16 slice of inp and of weight into shared memory,
  stored k-major so the inner loop reads contiguous rows;
* each of the 256 threads accumulates an 8 x 8 sub-tile in registers: per k it loads
  8 values of inp and 8 of weight (as float4s) and does 64 FMAs, so arithmetic, not
  memory, sets the pace;
* a thread's 8 rows and 8 columns are two groups of 4, 64 apart, so a warp's float4
  reads of shared memory hit distinct banks;
* while the block computes on one slice, the next slice is already being loaded
  into registers (software prefetch), hiding global-memory latency.

Sizes that are not multiples of the tile are handled by loading zeros past the edges
and not storing outside out. blockIdx.x walks the rows so that blocks running at the
same time share one slice of weight: the LM head's 154 MB weight streams from memory
about once.

With only a few rows (M <= 8: generating one token at a time) a 128-row tile would
be almost all padding. matmul_few_rows_kernel instead gives each output column a
warp, which reads that column's weight row once (16-byte coalesced loads) and dots it
with each input row: the weights stream through once and the time is memory time.
"""

import numpy as np

from kernel_runtime import CudaKernel, ceil_div, check_array, check_dims

TILE = 128      # rows and columns of out per block
TILE_K = 16     # depth of one shared-memory slice
THREADS = 256   # per block, each owning an 8 x 8 part of the tile
FEW_ROWS = 8    # up to this many rows, matmul_few_rows_kernel runs instead

MATMUL_SOURCE = r"""
#define LOADS_PER_THREAD (TILE * TILE_K / THREADS)  // 8

extern "C" __global__ void __launch_bounds__(THREADS)
matmul_forward_kernel(float* out, const float* inp, const float* weight, const float* bias,
                      int M, int K, int N) {
    // BEGIN SOLUTION
    __shared__ __align__(16) float inp_tile[TILE_K][TILE + 4];
    __shared__ __align__(16) float weight_tile[TILE_K][TILE + 4];

    const int row0 = blockIdx.x * TILE;
    const int col0 = blockIdx.y * TILE;
    const int tx = threadIdx.x % 16;   // this thread's columns: 4*tx.. and 64 + 4*tx..
    const int ty = threadIdx.x / 16;   // this thread's rows:    4*ty.. and 64 + 4*ty..

    // Slice loading: each thread always loads column k = threadIdx.x % 16 of the slice,
    // rows threadIdx.x / 16 + 16 * i; a warp reads two 64-byte runs per row pair.
    const int load_k = threadIdx.x % TILE_K;
    const int load_row = threadIdx.x / TILE_K;
    float inp_next[LOADS_PER_THREAD], weight_next[LOADS_PER_THREAD];

    auto load_slice = [&](int k0) {
        int k = k0 + load_k;
        #pragma unroll
        for (int i = 0; i < LOADS_PER_THREAD; i++) {
            int r = row0 + load_row + 16 * i;
            int c = col0 + load_row + 16 * i;
            inp_next[i] = (r < M && k < K) ? inp[(long long)r * K + k] : 0.0f;
            weight_next[i] = (c < N && k < K) ? weight[(long long)c * K + k] : 0.0f;
        }
    };
    auto store_slice = [&]() {
        #pragma unroll
        for (int i = 0; i < LOADS_PER_THREAD; i++) {
            inp_tile[load_k][load_row + 16 * i] = inp_next[i];
            weight_tile[load_k][load_row + 16 * i] = weight_next[i];
        }
    };

    float acc[8][8] = {};
    load_slice(0);
    store_slice();
    __syncthreads();
    for (int k0 = 0; k0 < K; k0 += TILE_K) {
        bool more = k0 + TILE_K < K;
        if (more) load_slice(k0 + TILE_K);  // in flight while we compute
        #pragma unroll
        for (int k = 0; k < TILE_K; k++) {
            float4 a_lo = *(const float4*)&inp_tile[k][4 * ty];
            float4 a_hi = *(const float4*)&inp_tile[k][64 + 4 * ty];
            float4 b_lo = *(const float4*)&weight_tile[k][4 * tx];
            float4 b_hi = *(const float4*)&weight_tile[k][64 + 4 * tx];
            float a[8] = {a_lo.x, a_lo.y, a_lo.z, a_lo.w, a_hi.x, a_hi.y, a_hi.z, a_hi.w};
            float b[8] = {b_lo.x, b_lo.y, b_lo.z, b_lo.w, b_hi.x, b_hi.y, b_hi.z, b_hi.w};
            #pragma unroll
            for (int i = 0; i < 8; i++) {
                #pragma unroll
                for (int j = 0; j < 8; j++) acc[i][j] += a[i] * b[j];
            }
        }
        __syncthreads();  // everyone is done reading this slice
        if (more) {
            store_slice();
            __syncthreads();
        }
    }

    #pragma unroll
    for (int i = 0; i < 8; i++) {
        int r = row0 + (i < 4 ? 4 * ty + i : 64 + 4 * ty + i - 4);
        if (r >= M) continue;
        #pragma unroll
        for (int j = 0; j < 8; j++) {
            int c = col0 + (j < 4 ? 4 * tx + j : 64 + 4 * tx + j - 4);
            if (c < N) out[(long long)r * N + c] = acc[i][j] + (bias != nullptr ? bias[c] : 0.0f);
        }
    }
    // END SOLUTION
}
"""

matmul_forward_kernel = CudaKernel(MATMUL_SOURCE, "matmul_forward_kernel",
                                   defines=dict(TILE=TILE, TILE_K=TILE_K, THREADS=THREADS))

MATMUL_FEW_ROWS_SOURCE = r"""
__device__ float warp_sum(float value) {
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffff, value, offset);
    return value;
}

// out (M, N) = inp (M, K) @ weight (N, K)^T + bias, for M <= FEW_ROWS; one warp per column n.
extern "C" __global__ void matmul_few_rows_kernel(float* out, const float* inp, const float* weight,
                                                  const float* bias, int M, int K, int N) {
    // BEGIN SOLUTION
    int n = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (n >= N) return;
    const float* w = weight + (long long)n * K;
    float acc[FEW_ROWS] = {};
    bool aligned = K % 4 == 0 && (((size_t)inp | (size_t)weight) % 16) == 0;
    int vector_end = aligned ? K : 0;
    for (int k = 4 * lane; k < vector_end; k += 128) {
        float4 wk = *(const float4*)(w + k);
        #pragma unroll
        for (int m = 0; m < FEW_ROWS; m++) {
            if (m < M) {
                float4 x = *(const float4*)(inp + (long long)m * K + k);
                acc[m] += wk.x * x.x + wk.y * x.y + wk.z * x.z + wk.w * x.w;
            }
        }
    }
    for (int k = vector_end + lane; k < K; k += 32) {  // unaligned or odd K: one float at a time
        float wk = w[k];
        #pragma unroll
        for (int m = 0; m < FEW_ROWS; m++) {
            if (m < M) acc[m] += wk * inp[(long long)m * K + k];
        }
    }
    #pragma unroll
    for (int m = 0; m < FEW_ROWS; m++) {
        float total = warp_sum(acc[m]);
        if (lane == 0 && m < M) out[(long long)m * N + n] = total + (bias != nullptr ? bias[n] : 0.0f);
    }
    // END SOLUTION
}
"""

matmul_few_rows_kernel = CudaKernel(MATMUL_FEW_ROWS_SOURCE, "matmul_few_rows_kernel", defines=dict(FEW_ROWS=FEW_ROWS))


def matmul_arguments(out, inp, weight, bias, B, T, C, OC) -> tuple:
    """The checked launch arguments of a matmul kernel: out, inp, weight, bias (NULL when None), M, K, N."""
    check_dims("matmul_forward", B=B, T=T, C=C, OC=OC)
    check_array("matmul_forward", "out", out, B * T * OC)
    check_array("matmul_forward", "inp", inp, B * T * C)
    check_array("matmul_forward", "weight", weight, OC * C)
    if bias is not None:
        check_array("matmul_forward", "bias", bias, OC)
    bias_pointer = bias if bias is not None else np.uint64(0)  # NULL: no bias
    return (out, inp, weight, bias_pointer, np.int32(B * T), np.int32(C), np.int32(OC))


def matmul_forward(out, inp, weight, bias, B, T, C, OC):
    args = matmul_arguments(out, inp, weight, bias, B, T, C, OC)
    if B * T <= FEW_ROWS:
        columns_per_block = THREADS // 32
        matmul_few_rows_kernel((ceil_div(OC, columns_per_block),), (THREADS,), args)
    else:
        matmul_forward_kernel((ceil_div(B * T, TILE), ceil_div(OC, TILE)), (THREADS,), args)
