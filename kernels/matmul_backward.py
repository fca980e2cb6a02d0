"""MatMul's backward pass: the gradients of out = inp @ weight^T + bias (kernels/matmul.py).

    dinp[m, c]    = sum_o dout[m, o] * weight[o, c]      (M, C)   written
    dweight[o, c] += sum_m dout[m, o] * inp[m, c]        (OC, C)  added to
    dbias[o]      += sum_m dout[m, o]                    (OC)     added to; None: no bias

inp (B, T, C) seen as M = B*T rows; weight (OC, C); dout (B, T, OC), the gradient of
out. dinp is an activation's gradient, so it is written; dweight and dbias are a
parameter's, added to (a training step zeroes them first, and a shared weight gathers
every use's share).

Both products are matmuls of the forward's size, 2 * M * C * OC flops each, but their
operands lie differently in memory. With out (R, N) += A (R, K) @ B (K, N):

    dinp:     R = M,  K = OC, N = C: A = dout, rows of K contiguous floats;
              B = weight, rows (one per k) of N contiguous floats
    dweight:  R = OC, K = M,  N = C: A = dout^T, so A's columns are dout's rows, R
              contiguous floats per k; B = inp, N contiguous floats per k

One shared-memory tiling serves both (tiled_product): each block computes a 64 x 64
tile of out, walking K in slices of 16; per slice it copies a 64 x 16 slice of A and a
16 x 64 slice of B into shared memory, k-major, and each of its 256 threads
accumulates a 4 x 4 part of the tile: per k two float4 loads from shared memory for
16 multiply-adds. What differs is the copy. A slice row of B (and of dweight's A) is
64 contiguous floats, copied as float4s straight into its k-row of the tile; dinp's A
has its 16 k contiguous instead, so each thread copies 4 consecutive k of one row and
scatters them into four k-rows (the forward's transposing copy). Either way a warp's
global loads are runs of 64 bytes or more. Float4 loads need rows whose length is a
multiple of 4 and arrays 16-byte aligned; otherwise four checked scalar loads, and
zeros stand in past every edge. Tiles are 64, not the forward's 128: dweight's out is
only OC x C (768 x 768 is 144 tiles of 64, 36 of 128), walked along a long K = B*T.

dbias is a column sum of dout: a block owns 32 columns, one per lane, so every warp
reads 128 contiguous bytes of a row; its 32 warps take every 32nd row, and the warps'
sums are then added in warp order.

That tiling runs on the CUDA cores, at about two thirds of cuBLAS's float32 rate. The
kit's solution gives both products to the tensor cores instead, at float32 accuracy:
matmul_tf32.py's kernel with three TF32 passes (matmul_3xtf32.py says how), compiled
for the layouts above (A_ALONG_K, B_ALONG_K: dinp's weight and both of dweight's
operands are copied into shared memory k-row by k-row, and their fragments read four
at a time, each lane's rows or columns dealt out side by side), adding into
dweight (ACCUMULATE), in chunks of matmul_tf32.FLUSH_SLICES slices whose sums are added up with
float32's own rounding (the tensor cores truncate: matmul_tf32.py says what that does to
a long sum). Its tiles are 128 x 128 where they give every multiprocessor one (dinp at
B*T = 4096 rows), and 64 x 64 otherwise. dweight's tiles are few for its long K = B*T
(36 to 144 tiles of 128 x 128 at GPT-2's sizes, for 132 multiprocessors on an H100),
so its K is split instead: split z stores its sums into a slice of scratch of its own
(SLICED), allocated by the call (a captured step's graph keeps it), and
add_slices_kernel adds the slices into dweight in split order, so these sums too have
one order. A product of fewer than
MIN_TENSOR_CORE_K terms stays on the CUDA cores: 3xTF32 drops the low x low product, an
error up to about 2^-22 of each term, which fp32's bound (4 sqrt(K) float32 ulps of the
terms' magnitudes) covers only when K is not tiny (one row's dweight, K = 1, is an outer
product: tests/reference/test_three_pass_tf32.py shows both sides of the line).

Every sum here is taken in an order fixed by the sizes and the GPU's multiprocessor
count alone (no atomics), so the results are the same bits on every run.
"""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, ceil_div, check_array, check_dims

TILE = 64        # rows and columns of a product's out per block
TILE_K = 16      # depth of one shared-memory slice
THREADS = 256    # per product block, each owning a 4 x 4 part of the tile
BIAS_COLUMNS = 32  # columns of dout per dbias block: one per lane
BIAS_WARPS = 32    # warps per dbias block, each summing every BIAS_WARPS-th row
SLICE_THREADS = 256  # per block adding dweight's split-K slices, 4 floats a thread
MIN_TENSOR_CORE_K = 16  # terms a product sums at least to go to the tensor cores (the docstring says why)

MATMUL_BACKWARD_SOURCE = r"""
static_assert(TILE * TILE_K == 4 * THREADS, "each thread copies one float4 piece of each operand per slice");
static_assert((TILE / 4) * (TILE / 4) == THREADS, "each thread owns a 4 x 4 part of the tile");

// out (R, N) = A (R, K) @ B (K, N), or out += it when accumulate; b[k * N + n] = B[k][n]. a_along_k:
// a[r * K + k] = A[r][k] (rows of A contiguous), else a[k * R + r] (columns of A contiguous).
// Grid (ceil(R / TILE), ceil(N / TILE)), THREADS threads.
__device__ __forceinline__ void tiled_product(float* out, const float* a, const float* b, int R, int K, int N,
                                              bool a_along_k, bool accumulate) {
    // BEGIN SOLUTION
    __shared__ __align__(16) float a_tile[TILE_K][TILE + 4];  // a_tile[k][r] = A[row0 + r][k0 + k]
    __shared__ __align__(16) float b_tile[TILE_K][TILE + 4];  // b_tile[k][n] = B[k0 + k][col0 + n]
    const int row0 = blockIdx.x * TILE, col0 = blockIdx.y * TILE;
    const int tx = threadIdx.x % (TILE / 4), ty = threadIdx.x / (TILE / 4);  // out rows 4 ty.., columns 4 tx..

    // matrix[row][col .. col + 3] of a row-major matrix of `rows` rows of `length`, zeros past its edges;
    // vector: length % 4 == 0 and matrix 16-byte aligned, so the four are one float4 (all inside, or none).
    auto load_four = [](const float* matrix, int rows, int length, int row, int col, bool vector) -> float4 {
        const float* p = matrix + (long long)row * length + col;
        int inside = row < rows ? min(4, length - col) : 0;  // how many of the four lie in the matrix
        if (vector && inside > 0) return *(const float4*)p;
        return make_float4(inside > 0 ? p[0] : 0.0f, inside > 1 ? p[1] : 0.0f, inside > 2 ? p[2] : 0.0f,
                           inside > 3 ? p[3] : 0.0f);
    };
    const int a_length = a_along_k ? K : R;
    const bool a_vector = a_length % 4 == 0 && (size_t)a % 16 == 0;
    const bool b_vector = N % 4 == 0 && (size_t)b % 16 == 0;
    // A slice that is TILE_K rows of TILE contiguous floats: this thread's piece is row `across_k`, floats
    // `across` .. + 3 (a warp: two rows of 256 bytes). One that is TILE rows of TILE_K contiguous k (dinp's
    // A): row `along_row`, k `along_k` .. + 3 (a warp: eight rows of 64 bytes).
    const int across_k = threadIdx.x / (TILE / 4), across = 4 * (threadIdx.x % (TILE / 4));
    const int along_row = threadIdx.x / (TILE_K / 4), along_k = 4 * (threadIdx.x % (TILE_K / 4));

    float acc[4][4] = {};
    for (int k0 = 0; k0 < K; k0 += TILE_K) {
        if (a_along_k) {  // four consecutive k of one row of A, scattered into four k-rows of the tile
            float4 v = load_four(a, R, K, row0 + along_row, k0 + along_k, a_vector);
            a_tile[along_k + 0][along_row] = v.x;
            a_tile[along_k + 1][along_row] = v.y;
            a_tile[along_k + 2][along_row] = v.z;
            a_tile[along_k + 3][along_row] = v.w;
        } else {
            *(float4*)&a_tile[across_k][across] = load_four(a, K, R, k0 + across_k, row0 + across, a_vector);
        }
        *(float4*)&b_tile[across_k][across] = load_four(b, K, N, k0 + across_k, col0 + across, b_vector);
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < TILE_K; k++) {
            float4 a_column = *(const float4*)&a_tile[k][4 * ty];
            float4 b_row = *(const float4*)&b_tile[k][4 * tx];
            float a_k[4] = {a_column.x, a_column.y, a_column.z, a_column.w};
            #pragma unroll
            for (int i = 0; i < 4; i++) {  // the outer product of A's column and B's row at this k
                acc[i][0] += a_k[i] * b_row.x;
                acc[i][1] += a_k[i] * b_row.y;
                acc[i][2] += a_k[i] * b_row.z;
                acc[i][3] += a_k[i] * b_row.w;
            }
        }
        __syncthreads();  // everyone is done with this slice before the next one overwrites it
    }

    // Out: float4 accesses when every row of out starts 16-byte aligned, else one float at a time.
    const int col = col0 + 4 * tx;
    if (col >= N) return;
    const bool out_vector = N % 4 == 0 && (size_t)out % 16 == 0;
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        int row = row0 + 4 * ty + i;
        if (row >= R) break;
        float* o = out + (long long)row * N + col;
        if (out_vector) {  // N % 4 == 0: all four columns are inside out
            float4 sum = make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]);
            if (accumulate) {
                float4 old = *(const float4*)o;
                sum = make_float4(old.x + sum.x, old.y + sum.y, old.z + sum.z, old.w + sum.w);
            }
            *(float4*)o = sum;
        } else {
            #pragma unroll
            for (int j = 0; j < 4; j++) {
                if (col + j < N) o[j] = accumulate ? o[j] + acc[i][j] : acc[i][j];
            }
        }
    }
    // END SOLUTION
}

// dinp (M, C) = dout (M, OC) @ weight (OC, C), written.
extern "C" __global__ void __launch_bounds__(THREADS)
matmul_backward_dinp_kernel(float* dinp, const float* dout, const float* weight, int M, int C, int OC) {
    // BEGIN SOLUTION
    tiled_product(dinp, dout, weight, M, OC, C, /*a_along_k=*/true, /*accumulate=*/false);
    // END SOLUTION
}

// dweight (OC, C) += dout^T (OC, M) @ inp (M, C).
extern "C" __global__ void __launch_bounds__(THREADS)
matmul_backward_dweight_kernel(float* dweight, const float* dout, const float* inp, int M, int C, int OC) {
    // BEGIN SOLUTION
    tiled_product(dweight, dout, inp, OC, M, C, /*a_along_k=*/false, /*accumulate=*/true);
    // END SOLUTION
}

// dbias (OC) += the sum of dout's M rows. Grid ceil(OC / BIAS_COLUMNS), BIAS_COLUMNS * BIAS_WARPS threads.
extern "C" __global__ void __launch_bounds__(BIAS_COLUMNS * BIAS_WARPS)
matmul_backward_dbias_kernel(float* dbias, const float* dout, int M, int OC) {
    // BEGIN SOLUTION
    __shared__ float warp_sums[BIAS_WARPS][BIAS_COLUMNS];
    const int lane = threadIdx.x % BIAS_COLUMNS, warp = threadIdx.x / BIAS_COLUMNS;
    const int o = blockIdx.x * BIAS_COLUMNS + lane;
    float sum = 0.0f;
    if (o < OC) {
        #pragma unroll 4  // four rows' loads in flight at once; the additions keep their order
        for (int m = warp; m < M; m += BIAS_WARPS) sum += dout[(long long)m * OC + o];
    }
    warp_sums[warp][lane] = sum;
    __syncthreads();
    if (warp == 0 && o < OC) {
        float total = 0.0f;
        for (int w = 0; w < BIAS_WARPS; w++) total += warp_sums[w][lane];
        dbias[o] += total;
    }
    // END SOLUTION
}

// out (n floats) += slices[0] + slices[1] + ... + slices[count - 1], n floats each, one after the other, added in
// that order. Grid ceil(n / (4 * SLICE_THREADS)), SLICE_THREADS threads: 4 floats of out a thread, as float4s
// where n is a multiple of 4 and out 16-byte aligned.
extern "C" __global__ void __launch_bounds__(SLICE_THREADS)
add_slices_kernel(float* out, const float* slices, int count, long long n) {
    // BEGIN SOLUTION
    const long long first = 4 * ((long long)blockIdx.x * SLICE_THREADS + threadIdx.x);
    if (first >= n) return;
    if (n % 4 == 0 && (size_t)out % 16 == 0) {
        float4 sum = *(const float4*)(slices + first);
        for (int z = 1; z < count; z++) {
            const float4 part = *(const float4*)(slices + z * n + first);
            sum.x += part.x; sum.y += part.y; sum.z += part.z; sum.w += part.w;
        }
        float4 held = *(float4*)(out + first);
        held.x += sum.x; held.y += sum.y; held.z += sum.z; held.w += sum.w;
        *(float4*)(out + first) = held;
    } else {
        for (long long i = first; i < min(first + 4, n); i++) {
            float sum = slices[i];
            for (int z = 1; z < count; z++) sum += slices[z * n + i];
            out[i] += sum;
        }
    }
    // END SOLUTION
}
"""

DEFINES = dict(TILE=TILE, TILE_K=TILE_K, THREADS=THREADS, BIAS_COLUMNS=BIAS_COLUMNS, BIAS_WARPS=BIAS_WARPS,
               SLICE_THREADS=SLICE_THREADS)
matmul_backward_dinp_kernel = CudaKernel(MATMUL_BACKWARD_SOURCE, "matmul_backward_dinp_kernel", defines=DEFINES)
matmul_backward_dweight_kernel = CudaKernel(MATMUL_BACKWARD_SOURCE, "matmul_backward_dweight_kernel", defines=DEFINES)
matmul_backward_dbias_kernel = CudaKernel(MATMUL_BACKWARD_SOURCE, "matmul_backward_dbias_kernel", defines=DEFINES)
add_slices_kernel = CudaKernel(MATMUL_BACKWARD_SOURCE, "add_slices_kernel", defines=DEFINES)

# BEGIN SOLUTION
from gpt2kit.kernel_runtime import multiprocessor_count
from gpt2kit.kernel_runtime.device import cupy
from gpt2kit.kernels.matmul_tf32 import FLUSHED_TILES, flushed_3xtf32, launch_sliced, launch_unsplit, wgmma_builds

# The products on the tensor cores, three TF32 passes each, their sums flushed (matmul_tf32.flushed_3xtf32):
# dinp = dout @ weight reads weight across K; dweight += dout^T @ inp reads both across K and adds.
MAX_SPLITS = 8          # dweight's K is split into at most this many slices of scratch...
MIN_SPLIT_ROWS = 256    # ...each summing at least this many rows; a block's start and store cost about as much
BLOCK_START_ROWS = 192  # as summing this many rows (fitted to a sweep of 1-12 splits at the training shapes)
DWEIGHT = dict(A_ALONG_K=0, B_ALONG_K=0)
tensor_core_kernels = {
    (product, size): flushed_3xtf32(size, **layout)
    for product, layout in (("dinp", dict(B_ALONG_K=0)), ("dweight", dict(DWEIGHT, ACCUMULATE=1)))
    for size in FLUSHED_TILES}
tensor_core_kernels["dweight", "sliced"] = flushed_3xtf32("large", SLICED=1, **DWEIGHT)
# their builds for Hopper's warpgroup products, which an H100 or H200 runs (matmul_tf32.for_this_gpu), made here
# where the compile checks see them
wgmma_kernels = wgmma_builds(tensor_core_kernels.values())


def launch_on_tensor_cores(dinp, dweight, dbias, dout, inp, weight, M, C, OC, kernels=tensor_core_kernels,
                           add_slices=add_slices_kernel):
    """launch's work with the two products on the tensor cores (`kernels` as tensor_core_kernels, `add_slices` as
    add_slices_kernel: a known-wrong version passes its own) and dbias on the CUDA cores."""
    launch_unsplit(kernels["dinp", "large"], kernels["dinp", "small"], dinp, dout, weight, M, OC, C)
    sliced = kernels["dweight", "sliced"]
    splits = dweight_splits(sliced, M, C, OC)
    if splits == 1:
        launch_unsplit(kernels["dweight", "large"], kernels["dweight", "small"], dweight, dout, inp, OC, M, C)
    else:  # each split's sums into a slice of scratch of its own, then the slices added in split order
        slices = cupy.empty(splits * OC * C, dtype=np.float32)
        launch_sliced(sliced, slices, dout, inp, OC, M, C, splits)
        add_slices((ceil_div(OC * C, 4 * SLICE_THREADS),), (SLICE_THREADS,),
                   (dweight, slices, np.int32(splits), np.int64(OC * C)))
    launch_dbias(dbias, dout, M, OC)


def dweight_splits(kernel, M, C, OC):
    """Slices of K = M that dweight's tiles of `kernel` are split into: of 2 to MAX_SPLITS, each split at least
    MIN_SPLIT_ROWS rows long, the count whose blocks take the least time when they run in waves of one a
    multiprocessor, each wave as long as a split's rows plus BLOCK_START_ROWS. A count that leaves the last wave
    nearly empty loses to one that fills it (768 x 768 on 132 multiprocessors: 7 splits, 2 waves of 126; not 8,
    3 waves, the last of 24). 1 (unsplit) only for a K too short for two splits: unsplit tiles measured 1.3-1.6x
    slower than two splits at every training shape, even where both fill one wave."""
    most = min(MAX_SPLITS, M // MIN_SPLIT_ROWS)
    if most < 2:
        return 1
    tiles = ceil_div(OC, kernel.defines["TILE_M"]) * ceil_div(C, kernel.defines["TILE_N"])

    def time_in_rows(splits):
        return ceil_div(tiles * splits, multiprocessor_count()) * (M / splits + BLOCK_START_ROWS)

    return min(range(2, most + 1), key=time_in_rows)
# END SOLUTION


def matmul_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC):
    check_dims("matmul_backward", B=B, T=T, C=C, OC=OC)
    for name, array, size in (("dinp", dinp, B * T * C), ("dweight", dweight, OC * C), ("dout", dout, B * T * OC),
                              ("inp", inp, B * T * C), ("weight", weight, OC * C)):
        check_array("matmul_backward", name, array, size)
    if dbias is not None:
        check_array("matmul_backward", "dbias", dbias, OC)
    # BEGIN SOLUTION
    if min(B * T, OC) >= MIN_TENSOR_CORE_K:  # both products long enough for 3xTF32 (the docstring says why)
        launch_on_tensor_cores(dinp, dweight, dbias, dout, inp, weight, B * T, C, OC)
        return
    # END SOLUTION
    launch(dinp, dweight, dbias, dout, inp, weight, B * T, C, OC)


def launch(dinp, dweight, dbias, dout, inp, weight, M, C, OC, dinp_kernel=matmul_backward_dinp_kernel,
           dweight_kernel=matmul_backward_dweight_kernel, dbias_kernel=matmul_backward_dbias_kernel):
    """The three kernels on checked arguments, M = B*T rows (a known-wrong version passes its own kernel for one);
    no dbias, no bias kernel."""
    sizes = (np.int32(M), np.int32(C), np.int32(OC))
    dinp_kernel((ceil_div(M, TILE), ceil_div(C, TILE)), (THREADS,), (dinp, dout, weight, *sizes))
    dweight_kernel((ceil_div(OC, TILE), ceil_div(C, TILE)), (THREADS,), (dweight, dout, inp, *sizes))
    launch_dbias(dbias, dout, M, OC, dbias_kernel)


def launch_dbias(dbias, dout, M, OC, kernel=matmul_backward_dbias_kernel):
    """dbias += the sum of dout's M rows; nothing when dbias is None (no bias)."""
    if dbias is not None:
        kernel((ceil_div(OC, BIAS_COLUMNS),), (BIAS_COLUMNS * BIAS_WARPS,), (dbias, dout, np.int32(M), np.int32(OC)))
