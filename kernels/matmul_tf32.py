"""MatMul with bias on the tensor cores, in TF32: milestone 2's tensor-core variant.

    out[m, n] = sum_k inp[m, k] * weight[n, k] + bias[n]       (matmul.py's contract)

Tensor cores multiply small matrix tiles in one instruction. On Ampere and later
(sm_80+, so the A40's sm_86) `mma.sync.aligned.m16n8k8` takes a 16 x 8 tile of A and
an 8 x 8 tile of B in TF32 (float32's exponent, 10 bits of mantissa), multiplies them
and adds the 16 x 8 product to float32 accumulators, for a whole warp at once. The
inputs lose 13 bits of mantissa, so the results are judged under the `tf32`
precision profile (reference.precision), not fp32's.

* Each block computes a 64 x 64 tile of out with 4 warps in a 2 x 2 grid; each warp
  owns 32 x 32 of it: 2 x 4 mma tiles of 16 x 8, i.e. 32 accumulators per thread.
* K is walked in slices of 16. A slice of inp (64 x 16) and of weight (64 x 16) is
  converted to TF32 once (cvt.rna: rounded to nearest) as it is stored in shared
  memory; each slice feeds two k-steps of 8.
* The fragments follow the PTX ISA's layout for m16n8k8 TF32. With g = lane / 4 and
  t = lane % 4, a thread holds A's (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4); B's
  (k = t, n = g) and (k = t + 4, n = g); and out's (g, 2t), (g, 2t + 1), (g + 8, 2t),
  (g + 8, 2t + 1). weight's rows are B's columns, stored k-contiguous: the "col"
  layout that mma wants for B.
* Shared rows are padded to 20 words, so the 32 lanes' fragment reads (rows g, columns
  t) hit 32 different banks.

Sizes that are not multiples of the tile load zeros past the edges and store nothing
outside out.
"""

from kernel_runtime import CudaKernel, ceil_div
from kernels.matmul import matmul_arguments

TILE = 64       # rows and columns of out per block
TILE_K = 16     # depth of one shared-memory slice: two mma k-steps of 8
THREADS = 128   # 4 warps, 2 x 2, each owning 32 x 32 of the tile

MATMUL_TF32_SOURCE = r"""
#define PADDED (TILE_K + 4)                          // shared row length, in words
#define LOADS_PER_THREAD (TILE * TILE_K / THREADS)   // 8 values of each operand per slice

__device__ unsigned to_tf32(float x) {
    unsigned rounded;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(rounded) : "f"(x));
    return rounded;
}

extern "C" __global__ void __launch_bounds__(THREADS)
matmul_tf32_kernel(float* out, const float* inp, const float* weight, const float* bias, int M, int K, int N) {
    // BEGIN SOLUTION
    __shared__ unsigned inp_tile[TILE][PADDED];
    __shared__ unsigned weight_tile[TILE][PADDED];
    const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int warp_row = (warp / 2) * 32, warp_col = (warp % 2) * 32;
    // slice loading: thread i copies row i / 2, columns 8 * (i % 2) .. + 7, of each operand
    const int load_row = threadIdx.x / 2, load_k = (threadIdx.x % 2) * LOADS_PER_THREAD;

    float acc[2][4][4] = {};  // [m tile][n tile][fragment]
    for (int k0 = 0; k0 < K; k0 += TILE_K) {
        for (int i = 0; i < LOADS_PER_THREAD; i++) {
            int k = k0 + load_k + i, m = row0 + load_row, n = col0 + load_row;
            inp_tile[load_row][load_k + i] = to_tf32(m < M && k < K ? inp[(long long)m * K + k] : 0.0f);
            weight_tile[load_row][load_k + i] = to_tf32(n < N && k < K ? weight[(long long)n * K + k] : 0.0f);
        }
        __syncthreads();
        for (int kk = 0; kk < TILE_K; kk += 8) {
            unsigned a[2][4], b[4][2];
            for (int mi = 0; mi < 2; mi++) {
                const int r = warp_row + 16 * mi + g;
                a[mi][0] = inp_tile[r][kk + t];
                a[mi][1] = inp_tile[r + 8][kk + t];
                a[mi][2] = inp_tile[r][kk + t + 4];
                a[mi][3] = inp_tile[r + 8][kk + t + 4];
            }
            for (int ni = 0; ni < 4; ni++) {
                const int c = warp_col + 8 * ni + g;
                b[ni][0] = weight_tile[c][kk + t];
                b[ni][1] = weight_tile[c][kk + t + 4];
            }
            for (int mi = 0; mi < 2; mi++) {
                for (int ni = 0; ni < 4; ni++) {
                    float* d = acc[mi][ni];
                    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                                 : "r"(a[mi][0]), "r"(a[mi][1]), "r"(a[mi][2]), "r"(a[mi][3]),
                                   "r"(b[ni][0]), "r"(b[ni][1]));
                }
            }
        }
        __syncthreads();
    }
    for (int mi = 0; mi < 2; mi++) {
        for (int ni = 0; ni < 4; ni++) {
            for (int half = 0; half < 2; half++) {  // rows g and g + 8
                const int m = row0 + warp_row + 16 * mi + g + 8 * half;
                for (int j = 0; j < 2; j++) {       // columns 2t and 2t + 1
                    const int n = col0 + warp_col + 8 * ni + 2 * t + j;
                    if (m < M && n < N) {
                        out[(long long)m * N + n] = acc[mi][ni][2 * half + j] + (bias != nullptr ? bias[n] : 0.0f);
                    }
                }
            }
        }
    }
    // END SOLUTION
}
"""

matmul_tf32_kernel = CudaKernel(MATMUL_TF32_SOURCE, "matmul_tf32_kernel",
                                defines=dict(TILE=TILE, TILE_K=TILE_K, THREADS=THREADS))


def matmul_forward(out, inp, weight, bias, B, T, C, OC):
    args = matmul_arguments(out, inp, weight, bias, B, T, C, OC)
    matmul_tf32_kernel((ceil_div(OC, TILE), ceil_div(B * T, TILE)), (THREADS,), args)
