"""Split-K matmul (milestone 3's menu): matmul_forward's contract, for the shapes whose tiles
are too few to fill the GPU.

    out[m, n] = sum_k inp[m, k] * weight[n, k] + bias[n]      (as kernels/matmul.py)

matmul.py gives each block a 128 x 128 tile of out. A prefill of a short prompt has few
rows: at M = B*T = 256 the attention projection (N = 768) is 2 x 6 = 12 tiles, so 12
blocks run on a GPU of 108 to 132 multiprocessors and the rest idle, and the fc
projection (K = 3072) is the same 12 blocks, each walking four times as far.

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

The split kernel is plain shared-memory tiling: per slice of SLICE k, the block copies 64
rows of inp and 64 of weight into shared memory (k-major), and each of its 256 threads
accumulates a 4 x 4 part of the tile, rows ty + 16 i and columns tx + 16 j, so a warp's
reads of a shared row are 16 consecutive floats, broadcast to its two halves.
"""

import numpy as np

from kernel_runtime import CudaKernel, ceil_div, multiprocessor_count
from kernels import matmul

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
extern "C" __global__ void __launch_bounds__(THREADS)
matmul_split_k_kernel(float* out, const float* inp, const float* weight, int M, int K, int N, int span) {
    // BEGIN SOLUTION
    __shared__ float inp_tile[SLICE][TILE + 4];     // k-major: row r of the tile at [k][r]
    __shared__ float weight_tile[SLICE][TILE + 4];
    const int row0 = blockIdx.x * TILE, col0 = blockIdx.y * TILE;
    const int k_begin = blockIdx.z * span, k_end = min(K, k_begin + span);
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    float acc[4][4] = {};
    for (int k0 = k_begin; k0 < k_end; k0 += SLICE) {
        // TILE rows x SLICE k of each operand; consecutive threads read consecutive k of a row
        for (int e = threadIdx.x; e < TILE * SLICE; e += THREADS) {
            int r = e / SLICE, kk = e % SLICE, k = k0 + kk;
            bool in_k = k < k_end;
            inp_tile[kk][r] = (in_k && row0 + r < M) ? inp[(long long)(row0 + r) * K + k] : 0.0f;
            weight_tile[kk][r] = (in_k && col0 + r < N) ? weight[(long long)(col0 + r) * K + k] : 0.0f;
        }
        __syncthreads();
        #pragma unroll
        for (int kk = 0; kk < SLICE; kk++) {
            float a[4], w[4];
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                a[i] = inp_tile[kk][ty + 16 * i];
                w[i] = weight_tile[kk][tx + 16 * i];
            }
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                #pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] += a[i] * w[j];
            }
        }
        __syncthreads();  // before the next slice overwrites the tiles
    }
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        int r = row0 + ty + 16 * i;
        #pragma unroll
        for (int j = 0; j < 4; j++) {
            int c = col0 + tx + 16 * j;
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
    bias_fill_kernel((ceil_div(M * N, 256),), (256,), (out, args[3], np.int64(M * N), np.int32(N)))
    matmul_split_k_kernel((ceil_div(M, TILE), ceil_div(N, TILE), ceil_div(K, span)), (THREADS,),
                          (*args[:3], *args[4:], np.int32(span)))
    # END SOLUTION


def split_span(M: int, K: int, N: int) -> int:
    """How much of K one block sums: a multiple of SLICE, small enough that the tiles times the
    slices make about BLOCKS_PER_SM blocks per multiprocessor."""
    tiles, slices = ceil_div(M, TILE) * ceil_div(N, TILE), ceil_div(K, SLICE)
    splits = max(1, min(slices, ceil_div(BLOCKS_PER_SM * multiprocessor_count(), tiles)))
    return ceil_div(slices, splits) * SLICE
