"""Conv1d on channel-last frames: Wav2Vec2's feature encoder and positional convolution.

    out[b, t, o] = bias[o] + sum_k sum_c inp[b, t * stride + k - padding, g * Cg + c] * weight[o, c, k]

inp (B, T, C): a frame's C channels are contiguous; weight (OC, Cg, K) as PyTorch stores it, Cg = C / groups
channels per group; output channel o belongs to group g = o / OCg (OCg = OC / groups) and reads only that
group's channels; frames outside [0, T) are zeros (padding); bias (OC) or None; out (B, T_out, OC), T_out at
most (T + 2 padding - K) / stride + 1 (fewer: the last frames are dropped).

A convolution is a matmul in disguise (an implicit GEMM): per group, the rows are the B*T_out output frames,
the columns its OCg output channels, and the reduction runs over the K*Cg values of a frame's window, taken in
the order j = k * Cg + c, so that consecutive j are consecutive channels of one input frame (contiguous floats;
with C = 1, the audio, consecutive taps, also contiguous). Nothing is copied into an im2col matrix: the
shared-memory tiles are gathered straight from inp and weight. The backward pass is two more such products:

    dinp[b, t, c]   = sum over taps k that read frame t, and o in the group, of dout[b, t_out, o] * weight[o, c, k]
    dweight[o, c, k] += sum over the B*T_out rows of dout[row, o] * window[row, k * Cg + c]
    dbias[o]        += sum over the rows of dout[row, o]

tile_product is the one tiling of all three: a block computes a 64 x 64 tile of a product, walking the
reduction in slices of 16; per slice its 256 threads gather a 64 x 16 slice of each operand into shared memory
(4 elements each, zeros outside the operand), two buffers taking turns so that the next slice's loads are in
flight while this one is multiplied. Each thread then owns 16 elements of the tile. A product whose sums have
at least MIN_TENSOR_CORE_K terms runs on the tensor cores (the kernels compiled with TENSOR_CORES = 1): 8 warps
of 16 x 32, mma.sync m16n8k8 in 3xTF32 (matmul_3xtf32.py: float32's accuracy from three TF32 products), the
sums added into float32 totals every FLUSH slices because an mma truncates as it adds (matmul_tf32.py). A
shorter one (the audio's first convolution, 10 terms; tiny test cases) stays on the CUDA cores, a 4 x 4 part
a thread, two float4 reads from shared memory per 16 multiply-adds: 3xTF32 drops the low x low product, which
fp32's bound covers only for sums that are not tiny. A gather reads along whichever index is contiguous in
global memory: ALONG_K, 16 lanes take 16 consecutive reduction indices of one row (inp's windows and dout's
channels); else 64 lanes take 64 consecutive rows or columns (dout transposed, and the window columns of
dweight). Each kernel
hands tile_product two element functions, a(piece, k) and b(piece, k), over the rows (columns) it prepared once
per thread: where they start in memory, the first frame they read.

* forward: grid (row tiles, column tiles, groups); out written with the bias added.
* dinp, as a product per group and phase: frame t = s * stride + q is read only by the taps k = k0 + stride * m
  with k0 = (q + padding) % stride, from output frame t_out = s + (q + padding) / stride - m. So for each phase q
  the rows are the frames s of that phase, the reduction runs over (m, o) with no zero taps in it (a stride-2
  convolution does half the work of a transposed one over every tap), and every dinp element is written once,
  by one thread, gathered rather than scattered: no atomics. A frame no tap reads (T_out below the formula, or
  stride > K) is written 0. Grid (row tiles, column tiles, groups * stride).
* dweight: per group (OCg rows) x (K * Cg columns), reduced over the B*T_out rows of dout. The first conv has
  only 512 x 10 weights but 128k rows: 8 tiles of 64 could not fill a GPU, so the rows are cut into `splits`
  contiguous spans (a number fixed by the sizes alone, ~TARGET_BLOCKS blocks in all), each block writing its
  partial tile into a scratch array taken from CuPy's memory pool inside conv1d_backward (splits x OC x Cg x K
  floats: 2.6 MB for the first conv, about the weight's size at the positional conv, where splits = 1). Then
  dweight_sum_kernel adds the partials to dweight in split order. Summing each element in one pass (no
  scratch) would leave the first conv's dweight to 8 blocks walking 128k rows each.
* dbias: a block owns 32 columns, one per lane; its 32 warps sum every 32nd row, then the warps' sums are added
  in warp order.

Where a window is K * C contiguous floats (one group, no padding, C a multiple of 4: Wav2Vec2's feature encoder
after its first layer), the three products run on matmul_tf32.py's engine instead (128 x 128 tiles, three-stage
cp.async copies, 3xTF32), and weight is copied once a call into the windows' order, (OC, K, C):
* forward, one product an utterance: its windows are the rows of a matrix, read in place, each stride * C
  floats after the last (the engine's A_STEP);
* dweight, the same windows as the columns of dout^T's product (B_STEP), the frames split into spans whose sums
  go to slices of scratch, added up by dweight_sum_kernel as the tiles' partials are;
* dinp, an utterance at a time: each window's gradient (its dout rows times the filters) into scratch,
  (T_out, K * C: about 160 MB for 16 s at the feature encoder's second layer), which add_windows_kernel adds
  back onto the frames the windows were read from.
An utterance whose windows make fewer tiles than the GPU has multiprocessors (the K2 layers: 499 windows at
10 s, 16 tiles for 132 multiprocessors) would leave most of it idle a launch at a time, so there every
utterance's windows are first copied into one matrix (B * T_out, K * C; gather_windows_kernel) and each
product is one launch over all of them (windows_gathered); the copy moves a few MB where the launches gain
several times over.

Every sum is taken in an order fixed by the sizes alone (no atomics): the same bits on every run. Weight
gathers are strided (weight's fastest index is k); weights are small next to the frames and stay in L2. No
starter kit holds this module (Wav2Vec2's layers are the staff's: grading.handout), so it may build on the
engine of matmul_tf32.py, whose solution the kits stub.
"""

import functools

import numpy as np

from gpt2kit.kernel_runtime import (CudaKernel, KernelArgumentError, ceil_div, check_array, check_dims,
                                    multiprocessor_count)
from gpt2kit.kernel_runtime.device import cupy
from gpt2kit.kernels import matmul_tf32
from gpt2kit.kernels.matmul_backward import MIN_TENSOR_CORE_K
from gpt2kit.kernels.matmul_tf32 import TF32_HELPERS, TF32_PRODUCTS

TILE = 64          # rows and columns of a product's tile per block
TILE_K = 16        # depth of one shared-memory slice
THREADS = 256      # per product block, each owning 16 elements of the tile
OWNED = 16         # those elements: a 4 x 4 part on the CUDA cores, four mma fragments on the tensor cores
FLUSH = 4          # slices whose tensor-core sums are added into the float32 totals at a time
BIAS_COLUMNS = 32  # columns of dout per dbias block: one per lane
BIAS_WARPS = 32    # warps per dbias block, each summing every BIAS_WARPS-th row
SUM_THREADS = 256  # per dweight_sum_kernel block, one dweight element each
TARGET_BLOCKS = 1024   # dweight's row splits aim at about this many blocks in all
MIN_SPLIT_ROWS = 256   # and give each split at least this many rows
WINDOWS_TARGET_BLOCKS = 512  # the same for the engine's 128 x 128 tiles (launch_windows), four times the work each

CONV1D_SOURCE = TF32_HELPERS + TF32_PRODUCTS + r"""
#define PITCH (TILE + 8)  // floats a k-row of a shared slice: 8 more than the tile, so that a fragment's loads at
                          // rows g (8 of them) and k t (4) fall in 32 different banks
static_assert(TILE * TILE_K == 4 * THREADS, "each thread gathers four elements of each operand per slice");
#if TENSOR_CORES
#define WARP_ROWS 16  // the 8 warps in a 4 x 2 grid over the tile: each 16 rows (one mma tile) by 32 columns (four)
#define WARP_COLS 32
#define WARPS_ACROSS (TILE / WARP_COLS)
static_assert((TILE / WARP_ROWS) * WARPS_ACROSS * 32 == THREADS && WARP_COLS / 8 * 4 == OWNED,
              "the warps cover the tile, and a thread's fragments are its OWNED elements");
#else
static_assert((TILE / 4) * (TILE / 4) == THREADS && 4 * 4 == OWNED, "each thread owns a 4 x 4 part of the tile");
#endif

// Piece i (0..3) of this thread's gather of a TILE x TILE_K slice: its row (or column) in the tile, and its
// reduction index in the slice. ALONG_K: lanes take consecutive reduction indices of one row; else
// consecutive rows at one reduction index.
template <bool ALONG_K> __device__ __forceinline__ int piece_outer(int i) {
    return ALONG_K ? threadIdx.x / TILE_K + (THREADS / TILE_K) * i : threadIdx.x % TILE;
}
template <bool ALONG_K> __device__ __forceinline__ int piece_k(int i) {
    return ALONG_K ? threadIdx.x % TILE_K : threadIdx.x / TILE + (THREADS / TILE) * i;
}

// The tile row and column of this thread's element e (0..OWNED-1) of the product. On the CUDA cores a 4 x 4
// part: row 4 * (its row group) + e / 4, column 4 * (its column group) + e % 4. On the tensor cores its warp's
// fragments, with g = lane / 4 and t = lane % 4: e = 4 ni + j is value j of n tile ni, at row g (j < 2) or
// g + 8, column 8 ni + 2t + j % 2 of the warp's part.
__device__ __forceinline__ int owned_row(int e) {
#if TENSOR_CORES
    return threadIdx.x / 32 / WARPS_ACROSS * WARP_ROWS + threadIdx.x % 32 / 4 + 8 * (e % 4 / 2);
#else
    return 4 * (threadIdx.x / (TILE / 4)) + e / 4;
#endif
}
__device__ __forceinline__ int owned_column(int e) {
#if TENSOR_CORES
    return threadIdx.x / 32 % WARPS_ACROSS * WARP_COLS + 8 * (e / 4) + 2 * (threadIdx.x % 4) + e % 2;
#else
    return 4 * (threadIdx.x % (TILE / 4)) + e % 4;
#endif
}

// sums[e] += this thread's element e of A's TILE_K columns (a_tile[k][r] = A[r][k]) @ B's TILE_K rows
// (b_tile[k][n] = B[k][n]).
__device__ __forceinline__ void add_slice_product(float (&sums)[OWNED], const float (*a_tile)[PITCH],
                                                  const float (*b_tile)[PITCH]) {
#if TENSOR_CORES
    // 3xTF32 (matmul_3xtf32.py): x = high + low, both TF32, and a b = high high + high low + low high to
    // float32's accuracy, the small products added first
    const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    const int r = warp / WARPS_ACROSS * WARP_ROWS + g;  // A's fragment rows: r and r + 8
    const int c = warp % WARPS_ACROSS * WARP_COLS + g;  // B's fragment column in n tile 0
    #pragma unroll
    for (int kk = 0; kk < TILE_K; kk += 8) {
        unsigned a_high[4] = {__float_as_uint(a_tile[kk + t][r]), __float_as_uint(a_tile[kk + t][r + 8]),
                              __float_as_uint(a_tile[kk + t + 4][r]), __float_as_uint(a_tile[kk + t + 4][r + 8])};
        unsigned a_low[4];
        #pragma unroll
        for (int j = 0; j < 4; j++) {
            a_low[j] = low_part(a_high[j]);
            a_high[j] = to_tf32(__uint_as_float(a_high[j]));
        }
        #pragma unroll
        for (int ni = 0; ni < WARP_COLS / 8; ni++) {
            unsigned b_high[2] = {__float_as_uint(b_tile[kk + t][c + 8 * ni]),
                                  __float_as_uint(b_tile[kk + t + 4][c + 8 * ni])};
            const unsigned b_low[2] = {low_part(b_high[0]), low_part(b_high[1])};
            b_high[0] = to_tf32(__uint_as_float(b_high[0]));
            b_high[1] = to_tf32(__uint_as_float(b_high[1]));
            mma_tf32(&sums[4 * ni], a_low, b_high);
            mma_tf32(&sums[4 * ni], a_high, b_low);
            mma_tf32(&sums[4 * ni], a_high, b_high);
        }
    }
#else
    const int r = owned_row(0), c = owned_column(0);
    #pragma unroll
    for (int k = 0; k < TILE_K; k++) {
        const float4 a_column = *(const float4*)&a_tile[k][r];
        const float4 b_row = *(const float4*)&b_tile[k][c];
        const float a_k[4] = {a_column.x, a_column.y, a_column.z, a_column.w};
        #pragma unroll
        for (int i = 0; i < 4; i++) {  // the outer product of A's column and B's row at this k
            sums[4 * i + 0] += a_k[i] * b_row.x;
            sums[4 * i + 1] += a_k[i] * b_row.y;
            sums[4 * i + 2] += a_k[i] * b_row.z;
            sums[4 * i + 3] += a_k[i] * b_row.w;
        }
    }
#endif
}

// acc += A (TILE rows) @ B (TILE columns) over the reduction indices [k_begin, k_end): a(i, k) is A's element
// at tile row piece_outer<A_ALONG_K>(i), b(i, k) B's at tile column piece_outer<B_ALONG_K>(i), each 0 outside
// its operand (k is always inside [k_begin, k_end)). The slices take turns in two shared buffers: a thread's
// gathers of the next slice are loads in flight while the warps multiply this one, stored after it, and one
// barrier a slice both publishes them and frees the buffer just read.
template <bool A_ALONG_K, bool B_ALONG_K, class ElementA, class ElementB>
__device__ __forceinline__ void tile_product(float (&acc)[OWNED], int k_begin, int k_end, ElementA a, ElementB b) {
    __shared__ __align__(16) float a_tile[2][TILE_K][PITCH];  // a_tile[buffer][k][r] = A[r][k0 + k]
    __shared__ __align__(16) float b_tile[2][TILE_K][PITCH];  // b_tile[buffer][k][n] = B[k0 + k][n]
    float a_next[4], b_next[4];
    auto gather = [&](int k0) {
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            const int ka = k0 + piece_k<A_ALONG_K>(i), kb = k0 + piece_k<B_ALONG_K>(i);
            a_next[i] = ka < k_end ? a(i, ka) : 0.0f;
            b_next[i] = kb < k_end ? b(i, kb) : 0.0f;
        }
    };
    auto publish = [&](int buffer) {
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            a_tile[buffer][piece_k<A_ALONG_K>(i)][piece_outer<A_ALONG_K>(i)] = a_next[i];
            b_tile[buffer][piece_k<B_ALONG_K>(i)][piece_outer<B_ALONG_K>(i)] = b_next[i];
        }
    };
#if TENSOR_CORES
    float chunk[OWNED] = {};  // the sums of FLUSH slices at a time: an mma truncates as it adds (matmul_tf32.py),
                              // so each chunk is added into acc with float32's rounding
#endif
    if (k_begin < k_end) {
        gather(k_begin);
        publish(0);
    }
    __syncthreads();
    for (int k0 = k_begin, slice = 0; k0 < k_end; k0 += TILE_K, slice++) {
        const bool more = k0 + TILE_K < k_end;
        if (more) gather(k0 + TILE_K);
#if TENSOR_CORES
        add_slice_product(chunk, a_tile[slice % 2], b_tile[slice % 2]);
        if ((slice + 1) % FLUSH == 0 || !more) {
            #pragma unroll
            for (int e = 0; e < OWNED; e++) {
                acc[e] += chunk[e];
                chunk[e] = 0.0f;
            }
        }
#else
        add_slice_product(acc, a_tile[slice % 2], b_tile[slice % 2]);
#endif
        if (more) publish((slice + 1) % 2);
        __syncthreads();
    }
}

// weight_by_tap (OC, K, C) = weight (OC, C, K) with each tap's channels contiguous: a filter in the order of a
// window's floats (launch_windows). One thread an element.
extern "C" __global__ void __launch_bounds__(SUM_THREADS)
weight_by_tap_kernel(float* weight_by_tap, const float* weight, int OC, int C, int K) {
    const long long element = (long long)blockIdx.x * SUM_THREADS + threadIdx.x;
    if (element >= (long long)OC * K * C) return;
    const int c = element % C, k = element / C % K, o = element / ((long long)K * C);
    weight_by_tap[element] = weight[((long long)o * C + c) * K + k];
}

// dinp (B, T, C) = the windows' gradients (B, T_out, K * C: a window's floats in order) added back onto the frames
// they were read from: frame t gets tap k of output frame t_out = (t - k) / stride wherever that divides and
// t_out < T_out, in order of k; 0 where no window read it. One thread an element.
extern "C" __global__ void __launch_bounds__(SUM_THREADS)
add_windows_kernel(float* dinp, const float* windows, int B, int T, int C, int K, int stride, int T_out) {
    const long long element = (long long)blockIdx.x * SUM_THREADS + threadIdx.x;
    if (element >= (long long)B * T * C) return;
    const int c = element % C, t = element / C % T, b = element / ((long long)T * C);
    float sum = 0.0f;
    for (int k = t % stride; k < K && k <= t; k += stride) {  // the taps with (t - k) % stride == 0
        const int t_out = (t - k) / stride;
        if (t_out < T_out) sum += windows[((long long)b * T_out + t_out) * K * C + k * C + c];
    }
    dinp[element] = sum;
}

// windows (B, T_out, K * C) = each output frame's window copied out of inp (B, T, C), one group and no padding: row
// (b, t_out) is the K * C contiguous floats from frame t_out * stride of utterance b (add_windows_kernel's layout).
// One thread an element.
extern "C" __global__ void __launch_bounds__(SUM_THREADS)
gather_windows_kernel(float* windows, const float* inp, int B, int T, int C, int K, int stride, int T_out) {
    const long long width = (long long)K * C, element = (long long)blockIdx.x * SUM_THREADS + threadIdx.x;
    if (element >= (long long)B * T_out * width) return;
    const long long row = element / width;
    const int b = row / T_out, t_out = row - (long long)b * T_out;
    windows[element] = inp[((long long)b * T + (long long)t_out * stride) * C + (element - row * width)];
}

// out (B, T_out, OC) = the convolution, bias added (bias may be null). Grid (ceil(B * T_out / TILE),
// ceil(OCg / TILE), groups): per group g, rows (b, t_out), columns o, reduction j = k * Cg + c.
extern "C" __global__ void __launch_bounds__(THREADS)
conv1d_forward_kernel(float* out, const float* inp, const float* weight, const float* bias, int B, int T, int C,
                      int OC, int K, int stride, int padding, int groups, int T_out) {
    const int g = blockIdx.z, Cg = C / groups, OCg = OC / groups, rows = B * T_out;
    const int row0 = blockIdx.x * TILE, col0 = blockIdx.y * TILE;
    const float* frames[4];  // this thread's gather rows: their utterance's channels of group g, or null
    int first_frame[4];      // and the frame their tap 0 reads
    const float* filters[4]; // this thread's gather columns: weight[o] of their output channel, or null
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        int row = row0 + piece_outer<true>(i), b = row / T_out;
        frames[i] = row < rows ? inp + (long long)b * T * C + g * Cg : nullptr;
        first_frame[i] = (row - b * T_out) * stride - padding;
        int o = col0 + piece_outer<true>(i);
        filters[i] = o < OCg ? weight + (long long)(g * OCg + o) * Cg * K : nullptr;
    }
    auto window = [&](int i, int j) {  // inp[b, t_out * stride + k - padding, g * Cg + c]
        int k = j / Cg, c = j - k * Cg, frame = first_frame[i] + k;
        return frames[i] && frame >= 0 && frame < T ? frames[i][(long long)frame * C + c] : 0.0f;
    };
    auto tap = [&](int i, int j) {  // weight[o, c, k]
        int k = j / Cg, c = j - k * Cg;
        return filters[i] ? filters[i][c * K + k] : 0.0f;
    };
    float acc[OWNED] = {};
    tile_product<true, true>(acc, 0, K * Cg, window, tap);

    #pragma unroll
    for (int e = 0; e < OWNED; e++) {
        const int row = row0 + owned_row(e), o = col0 + owned_column(e);
        if (row < rows && o < OCg) out[(long long)row * OC + g * OCg + o] = acc[e] + (bias ? bias[g * OCg + o] : 0.0f);
    }
}

// dinp (B, T, C), written. Grid (ceil(B * ceil(T / stride) / TILE), ceil(Cg / TILE), groups * stride): block z
// takes group z % groups and the frames t = s * stride + q of phase q = z / groups; rows (b, s), columns c,
// reduction (m, o) -> m * OCg + o over the taps k = k0 + stride * m that read those frames.
extern "C" __global__ void __launch_bounds__(THREADS)
conv1d_backward_dinp_kernel(float* dinp, const float* dout, const float* weight, int B, int T, int C, int OC,
                            int K, int stride, int padding, int groups, int T_out) {
    const int g = blockIdx.z % groups, q = blockIdx.z / groups, Cg = C / groups, OCg = OC / groups;
    const int frames_of_phase = q < T ? (T - q + stride - 1) / stride : 0, rows = B * frames_of_phase;
    const int k0 = (q + padding) % stride, taps = k0 < K ? (K - k0 + stride - 1) / stride : 0;
    const int row0 = blockIdx.x * TILE, col0 = blockIdx.y * TILE;
    if (row0 >= rows) return;
    const float* grads[4];  // this thread's gather rows: their utterance's dout, channels of group g, or null
    int last_output[4];     // and the output frame their tap k0 (m = 0) comes from; tap m's is this - m
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        int row = row0 + piece_outer<true>(i), b = row / frames_of_phase;
        grads[i] = row < rows ? dout + (long long)b * T_out * OC + g * OCg : nullptr;
        last_output[i] = row - b * frames_of_phase + (q + padding) / stride;
    }
    const int c = col0 + piece_outer<false>(0);  // this thread's gather column: one channel for all four pieces
    const float* filter = c < Cg ? weight + (long long)g * OCg * Cg * K + c * K + k0 : nullptr;
    auto grad = [&](int i, int j) {  // dout[b, t_out, g * OCg + o]
        int m = j / OCg, o = j - m * OCg, t_out = last_output[i] - m;
        return grads[i] && t_out >= 0 && t_out < T_out ? grads[i][(long long)t_out * OC + o] : 0.0f;
    };
    auto tap = [&](int, int j) {  // weight[g * OCg + o, c, k0 + stride * m]
        int m = j / OCg, o = j - m * OCg;
        return filter ? filter[(long long)o * Cg * K + stride * m] : 0.0f;
    };
    float acc[OWNED] = {};
    tile_product<true, false>(acc, 0, taps * OCg, grad, tap);

    #pragma unroll
    for (int e = 0; e < OWNED; e++) {
        const int row = row0 + owned_row(e), channel = col0 + owned_column(e);
        if (row >= rows || channel >= Cg) continue;
        const int b = row / frames_of_phase, t = (row - b * frames_of_phase) * stride + q;
        dinp[((long long)b * T + t) * C + g * Cg + channel] = acc[e];
    }
}

// partials (splits, groups, OCg, K * Cg): block z's group g = z % groups sums dout^T @ window over its split's
// rows [split * split_rows, + split_rows). Grid (ceil(OCg / TILE), ceil(K * Cg / TILE), groups * splits): rows o,
// columns j = k * Cg + c, reduction over the rows (b, t_out) of dout.
extern "C" __global__ void __launch_bounds__(THREADS)
conv1d_backward_dweight_kernel(float* partials, const float* dout, const float* inp, int B, int T, int C, int OC,
                               int K, int stride, int padding, int groups, int T_out, int split_rows) {
    const int g = blockIdx.z % groups, split = blockIdx.z / groups, Cg = C / groups, OCg = OC / groups;
    const int rows = B * T_out, columns = K * Cg, row_begin = split * split_rows;
    const int row0 = blockIdx.x * TILE, col0 = blockIdx.y * TILE;
    const int o = row0 + piece_outer<false>(0), j = col0 + piece_outer<false>(0);  // this thread's gathers
    const int k = j / Cg, c = j - k * Cg;
    auto grad = [&](int, int row) {  // dout[row, g * OCg + o]
        return o < OCg ? dout[(long long)row * OC + g * OCg + o] : 0.0f;
    };
    auto window = [&](int, int row) {  // inp[b, t_out * stride + k - padding, g * Cg + c]
        int b = row / T_out, frame = (row - b * T_out) * stride + k - padding;
        return j < columns && frame >= 0 && frame < T ? inp[((long long)b * T + frame) * C + g * Cg + c] : 0.0f;
    };
    float acc[OWNED] = {};
    tile_product<false, false>(acc, row_begin, min(rows, row_begin + split_rows), grad, window);

    float* partial = partials + (long long)blockIdx.z * OCg * columns;
    #pragma unroll
    for (int e = 0; e < OWNED; e++) {
        const int out_channel = row0 + owned_row(e), column = col0 + owned_column(e);
        if (out_channel < OCg && column < columns) partial[(long long)out_channel * columns + column] = acc[e];
    }
}

// dweight (OC, Cg, K) += the splits' partials of each element, added in split order. One thread per element.
extern "C" __global__ void __launch_bounds__(SUM_THREADS)
dweight_sum_kernel(float* dweight, const float* partials, int C, int OC, int K, int groups, int splits) {
    const int Cg = C / groups;
    const long long element = (long long)blockIdx.x * SUM_THREADS + threadIdx.x, per_split = (long long)OC * Cg * K;
    if (element >= per_split) return;
    const int o = element / (Cg * K), c = element / K % Cg, k = element % K;
    const long long at = (long long)o * K * Cg + k * Cg + c;  // split 0's [g][o % OCg][j], g * OCg + o % OCg = o
    float sum = 0.0f;
    for (int split = 0; split < splits; split++) sum += partials[split * per_split + at];
    dweight[element] += sum;
}

// dbias (OC) += the sum of dout's rows. Grid ceil(OC / BIAS_COLUMNS), BIAS_COLUMNS * BIAS_WARPS threads.
extern "C" __global__ void __launch_bounds__(BIAS_COLUMNS * BIAS_WARPS)
conv1d_backward_dbias_kernel(float* dbias, const float* dout, int rows, int OC) {
    __shared__ float warp_sums[BIAS_WARPS][BIAS_COLUMNS];
    const int lane = threadIdx.x % BIAS_COLUMNS, warp = threadIdx.x / BIAS_COLUMNS;
    const int o = blockIdx.x * BIAS_COLUMNS + lane;
    float sum = 0.0f;
    if (o < OC) {
        #pragma unroll 4  // four rows' loads in flight at once; the additions keep their order
        for (int row = warp; row < rows; row += BIAS_WARPS) sum += dout[(long long)row * OC + o];
    }
    warp_sums[warp][lane] = sum;
    __syncthreads();
    if (warp == 0 && o < OC) {
        float total = 0.0f;
        for (int w = 0; w < BIAS_WARPS; w++) total += warp_sums[w][lane];
        dbias[o] += total;
    }
}
"""

DEFINES = dict(TILE=TILE, TILE_K=TILE_K, THREADS=THREADS, OWNED=OWNED, FLUSH=FLUSH, TENSOR_CORES=0,
               BIAS_COLUMNS=BIAS_COLUMNS, BIAS_WARPS=BIAS_WARPS, SUM_THREADS=SUM_THREADS)
conv1d_forward_kernel = CudaKernel(CONV1D_SOURCE, "conv1d_forward_kernel", defines=DEFINES)
conv1d_backward_dinp_kernel = CudaKernel(CONV1D_SOURCE, "conv1d_backward_dinp_kernel", defines=DEFINES)
conv1d_backward_dweight_kernel = CudaKernel(CONV1D_SOURCE, "conv1d_backward_dweight_kernel", defines=DEFINES)
dweight_sum_kernel = CudaKernel(CONV1D_SOURCE, "dweight_sum_kernel", defines=DEFINES)
conv1d_backward_dbias_kernel = CudaKernel(CONV1D_SOURCE, "conv1d_backward_dbias_kernel", defines=DEFINES)
weight_by_tap_kernel = CudaKernel(CONV1D_SOURCE, "weight_by_tap_kernel", defines=DEFINES)
add_windows_kernel = CudaKernel(CONV1D_SOURCE, "add_windows_kernel", defines=DEFINES)
gather_windows_kernel = CudaKernel(CONV1D_SOURCE, "gather_windows_kernel", defines=DEFINES)


def windows_are_rows(C, K, padding, groups) -> bool:
    """Whether a convolution's windows are rows of a matrix that matmul_tf32's engine copies 16 bytes at a time:
    one group, no padding (a window is then K * C contiguous floats, and the next output frame's starts stride * C
    floats on), C a multiple of 4, and sums long enough for the tensor cores."""
    return groups == 1 and padding == 0 and C % 4 == 0 and K * C >= MIN_TENSOR_CORE_K


@functools.lru_cache(maxsize=None)
def engine_kernels(**layout: int) -> tuple[CudaKernel, CudaKernel]:
    """matmul_tf32's flushed 3xTF32 engine with its operands laid out as `layout` says (its defines), in its large
    and small tiles, for matmul_tf32.launch_unsplit to choose from."""
    return matmul_tf32.flushed_3xtf32("large", **layout), matmul_tf32.flushed_3xtf32("small", **layout)


def filters_by_tap(weight, OC, C, K):
    """A scratch copy of weight (OC, C, K) in a window's order, (OC, K, C)."""
    weight_by_tap = cupy.empty(OC * K * C, dtype=cupy.float32)
    weight_by_tap_kernel((ceil_div(OC * K * C, SUM_THREADS),), (SUM_THREADS,),
                         (weight_by_tap, weight, *sizes(OC, C, K)))
    return weight_by_tap


def windows_gathered(B, OC, T_out) -> bool:
    """Whether the engine takes every utterance's windows in one launch, gathered into one matrix first
    (gather_windows): where one utterance's windows make fewer of its 128 x 128 tiles than the GPU has
    multiprocessors (Wav2Vec2's K2 layers, 499 windows at 10 s: 16 tiles), a launch an utterance would leave
    most of it idle. Otherwise each utterance's windows are read in place, a launch an utterance."""
    tiles = ceil_div(T_out, matmul_tf32.TILE_M) * ceil_div(OC, matmul_tf32.TILE_N)
    return B > 1 and tiles < multiprocessor_count()


def gather_windows(inp, B, T, C, K, stride, T_out):
    """Every output frame's window, (B * T_out, K * C), in scratch: the rows of one matrix for all utterances."""
    windows = cupy.empty(B * T_out * K * C, dtype=cupy.float32)
    gather_windows_kernel((ceil_div(B * T_out * K * C, SUM_THREADS),), (SUM_THREADS,),
                          (windows, inp, *sizes(B, T, C, K, stride, T_out)))
    return windows


def launch_windows(out, inp, weight, bias, B, T, C, OC, K, stride, T_out):
    """The forward pass as products on the tensor cores: each utterance's T_out windows (rows of K * C floats,
    stride * C apart, read in place) times the filters in the windows' order, one product an utterance; or, where
    windows_gathered, one product of every utterance's windows gathered. K is never split, so each sum has one
    order."""
    weight_by_tap = filters_by_tap(weight, OC, C, K)
    if windows_gathered(B, OC, T_out):
        matmul_tf32.launch_unsplit(*engine_kernels(), out, gather_windows(inp, B, T, C, K, stride, T_out),
                                   weight_by_tap, B * T_out, K * C, OC, bias=bias)
        return
    large, small = engine_kernels(A_STEP=stride * C)
    frames, outputs = inp.reshape(-1), out.reshape(-1)
    for b in range(B):
        matmul_tf32.launch_unsplit(large, small, outputs[b * T_out * OC:], frames[b * T * C:], weight_by_tap,
                                   T_out, K * C, OC, bias=bias)


@functools.lru_cache(maxsize=None)
def windows_dweight_kernel(step: int) -> CudaKernel:
    """matmul_tf32's 3xTF32 engine in 128 x 128 tiles for dweight: dout^T (its rows read across K) times one
    utterance's windows (read across K too, rows `step` floats apart), each split of K into a slice of its own."""
    return matmul_tf32.flushed_3xtf32("large", A_ALONG_K=0, B_ALONG_K=0, B_STEP=step, SLICED=1)


def windows_dweight_partials(dout, inp, B, T, C, OC, K, stride, T_out):
    """dweight's sums (in the windows' order, (OC, K * C)) in slices of scratch, for dweight_sum_kernel to add up:
    dout's rows transposed times the windows, per utterance read in place (or, where windows_gathered, all
    utterances' gathered), the frames split into spans, about WINDOWS_TARGET_BLOCKS blocks in all.
    (partials, slices)."""
    if windows_gathered(B, OC, T_out):  # one utterance of B * T_out windows, each K * C floats after the last
        inp, B, T, stride, T_out = gather_windows(inp, B, T, C, K, stride, T_out), 1, B * T_out * K, K, B * T_out
    kernel = windows_dweight_kernel(stride * C)
    tiles = ceil_div(OC, kernel.defines["TILE_M"]) * ceil_div(K * C, kernel.defines["TILE_N"])
    splits = max(1, min(ceil_div(WINDOWS_TARGET_BLOCKS, tiles * B), T_out // MIN_SPLIT_ROWS))
    partials = cupy.empty(B * splits * OC * K * C, dtype=cupy.float32)
    grads, frames = dout.reshape(-1), inp.reshape(-1)
    for b in range(B):
        matmul_tf32.launch_sliced(kernel, partials[b * splits * OC * K * C:], grads[b * T_out * OC:],
                                  frames[b * T * C:], OC, T_out, K * C, splits)
    return partials, B * splits


def windows_dinp(dinp, dout, weight, B, T, C, OC, K, stride, T_out, add_windows):
    """dinp where windows are rows: each window's gradient, its dout rows times the filters in the windows' order,
    into scratch (T_out, K * C) that every utterance reuses, then added back onto the frames the windows were read
    from (add_windows, a known-wrong version's own), an utterance at a time; or, where windows_gathered, every
    utterance's at once, (B * T_out, K * C)."""
    weight_by_tap = filters_by_tap(weight, OC, C, K)
    at_once = B if windows_gathered(B, OC, T_out) else 1
    windows = cupy.empty(at_once * T_out * K * C, dtype=cupy.float32)
    grads, frames = dout.reshape(-1), dinp.reshape(-1)
    for b in range(0, B, at_once):
        matmul_tf32.launch_unsplit(*engine_kernels(B_ALONG_K=0), windows, grads[b * T_out * OC:], weight_by_tap,
                                   at_once * T_out, OC, K * C)
        add_windows((ceil_div(at_once * T * C, SUM_THREADS),), (SUM_THREADS,),
                    (frames[b * T * C:], windows, *sizes(at_once, T, C, K, stride, T_out)))


@functools.lru_cache(maxsize=None)
def on_tensor_cores(kernel: CudaKernel) -> CudaKernel:
    """kernel's build whose products run on the tensor cores, made once for each kernel."""
    return kernel.with_defines(TENSOR_CORES=1)


def for_reduction(kernel: CudaKernel, terms: int) -> CudaKernel:
    """kernel, or its tensor-core build where each of its sums has at least MIN_TENSOR_CORE_K terms: 3xTF32 drops
    the low x low product, about 2^-22 of each term, which fp32's bound (4 sqrt(n) ulps of the terms'
    magnitudes) covers only from there."""
    return on_tensor_cores(kernel) if terms >= MIN_TENSOR_CORE_K else kernel


# The products' tensor-core builds, and the engine's for Wav2Vec2's feature encoder (stride 2, 512 channels; its
# K3 layers' windows gathered, K * C floats apart), made here where the compile checks see them
tensor_core_kernels = tuple(on_tensor_cores(kernel) for kernel in (
    conv1d_forward_kernel, conv1d_backward_dinp_kernel, conv1d_backward_dweight_kernel)) + (
    *engine_kernels(A_STEP=2 * 512), *engine_kernels(), *engine_kernels(B_ALONG_K=0),
    windows_dweight_kernel(2 * 512), windows_dweight_kernel(3 * 512))
# and their builds for Hopper's warpgroup products, which an H100 or H200 runs (matmul_tf32.for_this_gpu)
wgmma_kernels = matmul_tf32.wgmma_builds(tensor_core_kernels)


def check_conv1d(function, B, T, C, OC, K, stride, padding, groups, T_out):
    """The sizes of a convolution: positive, padding >= 0, groups dividing C and OC, T_out frames that exist."""
    check_dims(function, B=B, T=T, C=C, OC=OC, K=K, stride=stride, groups=groups, T_out=T_out)
    if padding < 0:
        raise KernelArgumentError(f"{function}: padding must be >= 0, got {padding!r}")
    if C % groups or OC % groups:
        raise KernelArgumentError(f"{function}: groups ({groups}) must divide C ({C}) and OC ({OC})")
    if T_out > (T + 2 * padding - K) // stride + 1:
        raise KernelArgumentError(f"{function}: T_out ({T_out}) is more than the {(T + 2 * padding - K) // stride + 1} "
                                  f"frames the convolution has")


def conv1d_forward(out, inp, weight, bias, B, T, C, OC, K, stride, padding, groups, T_out):
    check_conv1d("conv1d_forward", B, T, C, OC, K, stride, padding, groups, T_out)
    for name, array, size in (("out", out, B * T_out * OC), ("inp", inp, B * T * C),
                              ("weight", weight, OC * (C // groups) * K)):
        check_array("conv1d_forward", name, array, size)
    if bias is not None:
        check_array("conv1d_forward", "bias", bias, OC)
    launch_forward(out, inp, weight, bias, B, T, C, OC, K, stride, padding, groups, T_out)


def conv1d_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC, K, stride, padding, groups, T_out):
    check_conv1d("conv1d_backward", B, T, C, OC, K, stride, padding, groups, T_out)
    for name, array, size in (("dweight", dweight, OC * (C // groups) * K), ("dout", dout, B * T_out * OC),
                              ("inp", inp, B * T * C), ("weight", weight, OC * (C // groups) * K)):
        check_array("conv1d_backward", name, array, size)
    for name, array, size in (("dinp", dinp, B * T * C), ("dbias", dbias, OC)):
        if array is not None:
            check_array("conv1d_backward", name, array, size)
    launch_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC, K, stride, padding, groups, T_out)


def launch_forward(out, inp, weight, bias, B, T, C, OC, K, stride, padding, groups, T_out,
                   kernel=conv1d_forward_kernel):
    """The forward kernel on checked arguments (a known-wrong version passes its own); a convolution whose
    windows are rows of a matrix, matmul_tf32's engine (launch_windows)."""
    if windows_are_rows(C, K, padding, groups):
        launch_windows(out, inp, weight, bias, B, T, C, OC, K, stride, T_out)
        return
    grid = (ceil_div(B * T_out, TILE), ceil_div(OC // groups, TILE), groups)
    bias_pointer = bias if bias is not None else np.uint64(0)  # NULL: no bias
    for_reduction(kernel, K * (C // groups))(
        grid, (THREADS,), (out, inp, weight, bias_pointer, *sizes(B, T, C, OC, K, stride, padding, groups, T_out)))


def sizes(*values):
    return tuple(np.int32(v) for v in values)


def dweight_splits(B, C, OC, K, groups, T_out):
    """(splits, rows per split) of dweight's reduction over B*T_out rows: about TARGET_BLOCKS blocks in all,
    each split at least MIN_SPLIT_ROWS rows, a whole number of slices; from the sizes alone."""
    rows = B * T_out
    tiles = ceil_div(OC // groups, TILE) * ceil_div(K * (C // groups), TILE) * groups
    wanted = max(1, min(ceil_div(TARGET_BLOCKS, tiles), ceil_div(rows, MIN_SPLIT_ROWS)))
    split_rows = ceil_div(ceil_div(rows, wanted), TILE_K) * TILE_K
    return ceil_div(rows, split_rows), split_rows


def launch_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC, K, stride, padding, groups, T_out,
                    dinp_kernel=conv1d_backward_dinp_kernel, sum_kernel=dweight_sum_kernel,
                    add_windows=add_windows_kernel):
    """The backward kernels on checked arguments (a known-wrong version passes its own kernel for one); the
    dweight partials in a scratch array from CuPy's memory pool; no dinp, no dinp kernel; no dbias, no bias
    kernel."""
    shape = sizes(B, T, C, OC, K, stride, padding, groups, T_out)
    Cg, OCg = C // groups, OC // groups
    if windows_are_rows(C, K, padding, groups):
        partials, splits = windows_dweight_partials(dout, inp, B, T, C, OC, K, stride, T_out)
    else:
        splits, split_rows = dweight_splits(B, C, OC, K, groups, T_out)
        partials = cupy.empty(splits * OC * Cg * K, dtype=cupy.float32)
        last_split_rows = B * T_out - (splits - 1) * split_rows  # the fewest rows a split sums
        for_reduction(conv1d_backward_dweight_kernel, last_split_rows)(
            (ceil_div(OCg, TILE), ceil_div(K * Cg, TILE), groups * splits), (THREADS,),
            (partials, dout, inp, *shape, np.int32(split_rows)))
    sum_kernel((ceil_div(OC * Cg * K, SUM_THREADS),), (SUM_THREADS,),
               (dweight, partials, *sizes(C, OC, K, groups, splits)))
    if dinp is not None and windows_are_rows(C, K, padding, groups):
        windows_dinp(dinp, dout, weight, B, T, C, OC, K, stride, T_out, add_windows)
    elif dinp is not None:
        fewest_taps = K // stride  # of a phase's frames (ceil(K / stride) for the others)
        for_reduction(dinp_kernel, fewest_taps * OCg)(
            (ceil_div(B * ceil_div(T, stride), TILE), ceil_div(Cg, TILE), groups * stride), (THREADS,),
            (dinp, dout, weight, *shape))
    if dbias is not None:
        conv1d_backward_dbias_kernel((ceil_div(OC, BIAS_COLUMNS),), (BIAS_COLUMNS * BIAS_WARPS,),
                                     (dbias, dout, *sizes(B * T_out, OC)))
