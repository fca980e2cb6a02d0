"""Split-K matmul (milestone 3's menu): matmul_forward's contract, for the shapes whose tiles
are too few to fill the GPU.

    out[m, n] = sum_k inp[m, k] * weight[n, k] + bias[n]      (as kernels/matmul.py)

matmul.py gives each block a 128 x 128 tile of out. A prefill of a short prompt has few
rows: at M = B*T = 256 the attention projection (N = 768) is 2 x 6 = 12 tiles, so 12
blocks run on a GPU of 84 (A40) to 132 (H200) multiprocessors and the rest idle; the
MLP's projection (K = 3072) is the same 12 blocks, each walking four times as far.

Split-K cuts the other dimension as well. Every tile of out (64 x 64 here, four times
as many) is computed by `splits` blocks, block z summing only its slice of K:

    out[m, n] = bias[n] + sum over z of (sum over k in slice z of inp[m, k] * weight[n, k])

and adds its partial sums into out with atomicAdd, after a first kernel has set out to
the bias. Enough slices are taken for about two blocks per multiprocessor. The price:
out is written once per slice (read-modify-write in L2), and float additions in an
order that changes from run to run, so the last bits of out may differ between runs
(within the float32 bound of matmul_forward's spec, which assumes no order).

When matmul.py's tiles already fill the GPU, or the rows are few enough for its
matrix-vector kernel (M <= 8, decoding), this module calls matmul.py: splitting K would
only add the atomics' traffic.

The split kernel is plain shared-memory tiling: per slice of SLICE = 16 k, each of its 256
threads copies 4 consecutive k (one float4) of a row of inp and of weight into shared
memory, stored k-major, and accumulates a 4 x 4 part of the tile, rows 4 ty .. 4 ty + 3
and columns 4 tx .. 4 tx + 3: per k, two float4 loads from shared memory for 16
multiply-adds.
"""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, ceil_div, multiprocessor_count
from gpt2kit.kernels import matmul

TILE = 64        # rows and columns of out per block
SLICE = 16       # k per shared-memory slice; a block's slice of K is a multiple of it
THREADS = 256    # 16 x 16, each 4 x 4 of the tile
BLOCKS_PER_SM = 2

MATMUL_SPLIT_K_SOURCE = r"""
// out (M, N) = bias, or zeros without one: where the split kernel's slices add their sums.
extern "C" __global__ void bias_fill_kernel(float* out, const float* bias, long long MN, int N) {
    // BEGIN SOLUTION
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < MN) out[i] = bias != nullptr ? bias[i % N] : 0.0f;
    // END SOLUTION
}

// grid (ceil(M / TILE), ceil(N / TILE), splits), THREADS threads: block z adds
// inp[:, k] . weight[:, k] over k in [z * span, (z + 1) * span) into its tile of out.
// vector: K % 4 == 0 and inp and weight 16-byte aligned, so 4 consecutive k are one float4.
extern "C" __global__ void __launch_bounds__(THREADS)
matmul_split_k_kernel(float* out, const float* inp, const float* weight, int M, int K, int N, int span,
                      int vector) {
    // BEGIN SOLUTION
    __shared__ __align__(16) float inp_tile[SLICE][TILE + 4];     // k-major: row r of the tile at [k][r]
    __shared__ __align__(16) float weight_tile[SLICE][TILE + 4];
    const int row0 = blockIdx.x * TILE, col0 = blockIdx.y * TILE;
    const int k_begin = blockIdx.z * span, k_end = min(K, k_begin + span);
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;  // rows 4 ty .. 4 ty + 3, columns 4 tx .. 4 tx + 3
    // each thread copies one piece of 4 consecutive k of each operand per slice
    const int piece_row = threadIdx.x / (SLICE / 4), piece_k = 4 * (threadIdx.x % (SLICE / 4));
    auto load_piece = [&](const float* matrix, int row, int rows, int k) -> float4 {  // matrix[row][k .. k+3]
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (row >= rows) return v;
        const float* p = matrix + (long long)row * K + k;
        if (vector) {
            if (k < k_end) v = *(const float4*)p;  // k_end is a multiple of 4: all four or none
        } else {
            if (k < k_end) v.x = p[0];
            if (k + 1 < k_end) v.y = p[1];
            if (k + 2 < k_end) v.z = p[2];
            if (k + 3 < k_end) v.w = p[3];
        }
        return v;
    };
    float acc[4][4] = {};
    for (int k0 = k_begin; k0 < k_end; k0 += SLICE) {
        float4 a = load_piece(inp, row0 + piece_row, M, k0 + piece_k);
        float4 w = load_piece(weight, col0 + piece_row, N, k0 + piece_k);
        inp_tile[piece_k + 0][piece_row] = a.x; inp_tile[piece_k + 1][piece_row] = a.y;
        inp_tile[piece_k + 2][piece_row] = a.z; inp_tile[piece_k + 3][piece_row] = a.w;
        weight_tile[piece_k + 0][piece_row] = w.x; weight_tile[piece_k + 1][piece_row] = w.y;
        weight_tile[piece_k + 2][piece_row] = w.z; weight_tile[piece_k + 3][piece_row] = w.w;
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < SLICE; kk++) {
            float4 a4 = *(const float4*)&inp_tile[kk][4 * ty], w4 = *(const float4*)&weight_tile[kk][4 * tx];
            float av[4] = {a4.x, a4.y, a4.z, a4.w}, wv[4] = {w4.x, w4.y, w4.z, w4.w};
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                #pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] += av[i] * wv[j];
            }
        }
        __syncthreads();  // before the next slice overwrites the tiles
    }
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        int r = row0 + 4 * ty + i;
        #pragma unroll
        for (int j = 0; j < 4; j++) {
            int c = col0 + 4 * tx + j;
            if (r < M && c < N) atomicAdd(out + (long long)r * N + c, acc[i][j]);
        }
    }
    // END SOLUTION
}
"""

DEFINES = dict(TILE=TILE, SLICE=SLICE, THREADS=THREADS)
bias_fill_kernel = CudaKernel(MATMUL_SPLIT_K_SOURCE, "bias_fill_kernel", defines=DEFINES)
matmul_split_k_kernel = CudaKernel(MATMUL_SPLIT_K_SOURCE, "matmul_split_k_kernel", defines=DEFINES)


def matmul_forward(out, inp, weight, bias, B, T, C, OC):
    args = matmul.matmul_arguments(out, inp, weight, bias, B, T, C, OC)
    # BEGIN SOLUTION
    M, K, N = B * T, C, OC
    if M <= matmul.FEW_ROWS or ceil_div(M, matmul.TILE) * ceil_div(N, matmul.TILE) >= multiprocessor_count():
        matmul.matmul_forward(out, inp, weight, bias, B, T, C, OC)
        return
    span = split_span(M, K, N)
    launch_slices(args, span, splits=ceil_div(K, span))
    # END SOLUTION


def split_span(M: int, K: int, N: int) -> int:
    """How much of K one block sums: a multiple of SLICE, small enough that the tiles times the
    slices make about BLOCKS_PER_SM blocks per multiprocessor."""
    # BEGIN SOLUTION
    tiles, slices = ceil_div(M, TILE) * ceil_div(N, TILE), ceil_div(K, SLICE)
    splits = max(1, min(slices, ceil_div(BLOCKS_PER_SM * multiprocessor_count(), tiles)))
    return ceil_div(slices, splits) * SLICE
    # END SOLUTION


def launch_slices(args: tuple, span: int, splits: int) -> None:
    """out = bias, then `splits` blocks per tile each add the products over their `span` of K
    (args: matmul.matmul_arguments')."""
    # BEGIN SOLUTION
    out, inp, weight, bias, M, K, N = args
    vector = K % 4 == 0 and inp.data.ptr % 16 == 0 and weight.data.ptr % 16 == 0
    bias_fill_kernel((ceil_div(int(M) * int(N), 256),), (256,), (out, bias, np.int64(int(M) * int(N)), N))
    matmul_split_k_kernel((ceil_div(int(M), TILE), ceil_div(int(N), TILE), splits), (THREADS,),
                          (out, inp, weight, M, K, N, np.int32(span), np.int32(vector)))
    # END SOLUTION
