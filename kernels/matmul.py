"""MatMul with bias: the linear layer of every GPT-2 block and the LM head.

    out[m, n] = sum_k inp[m, k] * weight[n, k] + bias[n]

inp (B, T, C) seen as M = B*T rows of K = C; weight (OC, C), PyTorch's (out, in)
layout; bias (OC) or None; out (B, T, OC).

A naive kernel (one thread per output, reading its row and column from global memory)
moves 2*K floats per 2*K flops and runs at a few percent of the chip. This one tiles:

* each block computes a 128 x 128 tile of out, walking K in slices of 8;
* per slice the block copies a 128x8 slice of inp and of weight into shared memory,
  stored k-major so the inner loop reads contiguous rows; rows are K-contiguous in
  global memory, so each thread fetches 4 consecutive k with one 16-byte float4 load
  (when K % 4 == 0 and the pointers are 16-byte aligned; else four scalar loads);
* each of the 256 threads accumulates an 8 x 8 sub-tile in registers: per k it loads
  8 values of inp and 8 of weight (as float4s) and does 64 FMAs, so arithmetic, not
  memory, sets the pace;
* warp tiling: a warp owns a 32 x 64 part of the tile and its lanes' rows and columns
  are two groups of 4, so per k a warp reads one 64-byte run of inp_tile and one
  128-byte run of weight_tile: no bank conflicts, shared values are broadcast;
* double buffering: shared memory holds two slices. While the block computes on one,
  the next slice's float4s are already in flight from global memory into registers,
  and land in the other buffer; one __syncthreads per slice both publishes the new
  slice and frees the old one;
* registers are the budget: 64 accumulators + 16 operands + the slice in flight fit in
  128 registers (__launch_bounds__(256, 2)), so two blocks (16 warps) share an SM and
  one block's barrier wait is covered by the other's arithmetic.

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

from gpt2kit.kernel_runtime import CudaKernel, ceil_div, check_array, check_dims

TILE = 128      # rows and columns of out per block
TILE_K = 8      # depth of one shared-memory slice
THREADS = 256   # per block, each owning an 8 x 8 part of the tile
FEW_ROWS = 8    # up to this many rows, matmul_few_rows_kernel runs instead

MATMUL_SOURCE = r"""
#define LOADS (TILE * TILE_K / 4 / THREADS)  // float4-sized pieces of each operand's slice per thread

extern "C" __global__ void __launch_bounds__(THREADS, 2)
matmul_forward_kernel(float* out, const float* inp, const float* weight, const float* bias,
                      int M, int K, int N) {
    // BEGIN SOLUTION
    // Two slices of each operand, k-major: the block computes on one while it fills the other.
    __shared__ __align__(16) float inp_tile[2][TILE_K][TILE + 4];
    __shared__ __align__(16) float weight_tile[2][TILE_K][TILE + 4];

    const int row0 = blockIdx.x * TILE;
    const int col0 = blockIdx.y * TILE;

    // Warp tiling: the 8 warps form a 4 x 2 grid of 32 x 64 parts of the tile; in a warp,
    // lane (ty, tx) owns rows 4*ty.. and 16 + 4*ty.., columns 4*tx.. and 32 + 4*tx...
    // Per k a warp then reads 64 contiguous bytes of inp_tile and 128 of weight_tile:
    // no bank conflicts, and lanes that need the same float4 get it by broadcast.
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int ty = lane / 8, tx = lane % 8;
    const int row_in = (warp / 2) * 32 + 4 * ty;   // this thread's first row in the tile
    const int col_in = (warp % 2) * 64 + 4 * tx;   // and first column

    // Slice loading: a slice row is TILE_K / 4 pieces of 4 consecutive k. Thread t copies
    // piece t % (TILE_K / 4) of rows t / (TILE_K / 4) + ROW_STEP * i, of both operands
    // (with TILE_K = 8: a warp reads 16 rows x 32 bytes, its shared stores hit 32 banks).
    // Rows are K-contiguous, so when K % 4 == 0 and both pointers are 16-byte aligned
    // a piece is one float4 load; otherwise (odd K) it is four checked scalar loads.
    constexpr int PIECES_PER_ROW = TILE_K / 4;
    constexpr int ROW_STEP = THREADS / PIECES_PER_ROW;
    const int load_k = 4 * (threadIdx.x % PIECES_PER_ROW);
    const int load_row = threadIdx.x / PIECES_PER_ROW;
    const int k_end = K - load_k;  // piece at k0 is in range while k0 < k_end
    // Rows past the edge are never read (zeros stand in), so their pointers are not used.
    const float* inp_at = inp + (long long)(row0 + load_row) * K + load_k;
    const float* weight_at = weight + (long long)(col0 + load_row) * K + load_k;
    const long long step = (long long)ROW_STEP * K;
    float4 inp_next, weight_next;  // one piece of each operand on its way to shared memory

    auto load_piece = [&](const float* p, bool ok, int k0, bool vector) -> float4 {  // p[k0..k0+3]
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        int left = k_end - k0;  // how many of the four are inside the row
        if (vector) {
            if (ok && left > 0) v = *(const float4*)(p + k0);  // K % 4 == 0: all four or none
        } else if (ok) {
            if (left > 0) v.x = p[k0];
            if (left > 1) v.y = p[k0 + 1];
            if (left > 2) v.z = p[k0 + 2];
            if (left > 3) v.w = p[k0 + 3];
        }
        return v;
    };
    auto load = [&](int i, int k0, bool vector) {  // piece i of the slice at k0: global memory -> registers
        inp_next = load_piece(inp_at + i * step, row0 + load_row + ROW_STEP * i < M, k0, vector);
        weight_next = load_piece(weight_at + i * step, col0 + load_row + ROW_STEP * i < N, k0, vector);
    };
    auto store = [&](int i, int buf) {  // registers -> shared memory, transposed to k-major
        int r = load_row + ROW_STEP * i;
        inp_tile[buf][load_k + 0][r] = inp_next.x;
        inp_tile[buf][load_k + 1][r] = inp_next.y;
        inp_tile[buf][load_k + 2][r] = inp_next.z;
        inp_tile[buf][load_k + 3][r] = inp_next.w;
        weight_tile[buf][load_k + 0][r] = weight_next.x;
        weight_tile[buf][load_k + 1][r] = weight_next.y;
        weight_tile[buf][load_k + 2][r] = weight_next.z;
        weight_tile[buf][load_k + 3][r] = weight_next.w;
    };

    float acc[8][8] = {};
    // The main loop, written once and compiled twice (vector is a constant in each copy):
    // one copy that tests for float4 loads at every load would not fit in 128 registers.
    auto main_loop = [&](bool vector) {
        #pragma unroll
        for (int i = 0; i < LOADS; i++) {
            load(i, 0, vector);
            store(i, 0);
        }
        __syncthreads();
        int buf = 0;
        for (int k0 = 0; k0 < K; k0 += TILE_K) {
            bool more = k0 + TILE_K < K;
            #pragma unroll
            for (int k = 0; k < TILE_K; k++) {
                // The next slice's pieces, one at a time: piece i is loaded at k = i * SPAN
                // and stored SPAN steps later, its global loads in flight meanwhile.
                constexpr int SPAN = TILE_K / LOADS;
                if (more && k % SPAN == 0) {
                    if (k > 0) store(k / SPAN - 1, buf ^ 1);
                    load(k / SPAN, k0 + TILE_K, vector);
                }
                float4 a_lo = *(const float4*)&inp_tile[buf][k][row_in];
                float4 a_hi = *(const float4*)&inp_tile[buf][k][row_in + 16];
                float4 b_lo = *(const float4*)&weight_tile[buf][k][col_in];
                float4 b_hi = *(const float4*)&weight_tile[buf][k][col_in + 32];
                float a[8] = {a_lo.x, a_lo.y, a_lo.z, a_lo.w, a_hi.x, a_hi.y, a_hi.z, a_hi.w};
                float b[8] = {b_lo.x, b_lo.y, b_lo.z, b_lo.w, b_hi.x, b_hi.y, b_hi.z, b_hi.w};
                #pragma unroll
                for (int i = 0; i < 8; i++) {
                    #pragma unroll
                    for (int j = 0; j < 8; j++) acc[i][j] += a[i] * b[j];
                }
            }
            // The other buffer was last read before the previous barrier, so it could be
            // filled meanwhile: one barrier per slice both publishes it and retires this one.
            if (more) store(LOADS - 1, buf ^ 1);
            __syncthreads();
            buf ^= 1;
        }
    };
    if (K % 4 == 0 && (((size_t)inp | (size_t)weight) % 16) == 0) main_loop(true);
    else main_loop(false);

    // Out: float4 stores when every row of out starts 16-byte aligned, else scalar ones.
    const bool vector_out = N % 4 == 0 && ((size_t)out % 16) == 0 && ((size_t)bias % 16) == 0;
    #pragma unroll
    for (int jj = 0; jj < 2; jj++) {
        int c = col0 + col_in + 32 * jj;
        if (c >= N) continue;
        float b[4];
        #pragma unroll
        for (int j = 0; j < 4; j++) b[j] = (bias != nullptr && c + j < N) ? bias[c + j] : 0.0f;
        #pragma unroll
        for (int i = 0; i < 8; i++) {
            int r = row0 + row_in + (i < 4 ? i : 12 + i);
            if (r >= M) continue;
            float* o = out + (long long)r * N + c;
            float v[4];
            #pragma unroll
            for (int j = 0; j < 4; j++) v[j] = acc[i][4 * jj + j] + b[j];
            if (vector_out) {
                *(float4*)o = make_float4(v[0], v[1], v[2], v[3]);  // N % 4 == 0: all four are in out
            } else {
                #pragma unroll
                for (int j = 0; j < 4; j++) if (c + j < N) o[j] = v[j];
            }
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
    #pragma unroll 8  // eight loads of the weight row in flight per lane, not one: the time is memory latency
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
        if (m < M) {  // the same for the whole warp
            float total = warp_sum(acc[m]);
            if (lane == 0) out[(long long)m * N + n] = total + (bias != nullptr ? bias[n] : 0.0f);
        }
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
