"""Bidirectional multi-head attention over padded utterances: Wav2Vec2's encoder.

    q, k, v = inp[b, t, 0:C], inp[b, t, C:2C], inp[b, t, 2C:3C], each split into NH heads of HS = C/NH
    att[b, h, t, s] = softmax over s < lengths[b] of (q[b,t,h] . k[b,s,h]) / sqrt(HS);  0 for s >= lengths[b]
    out[b, t, h*HS:(h+1)*HS] = sum over s of att[b, h, t, s] * v[b, s, h]

A batch of utterances is padded to its longest, T frames; utterance b has lengths[b]
(int32, on the device, at least 1) real ones. Unlike GPT-2's causal attention every
query sees every real key, before and after it; no query sees a padded key. Padded
queries are computed like the others (their outputs are defined, and the model
masks them later), so every row of att is a distribution over the real keys.

inp (B, T, 3C), att (B, NH, T, T) receives the probabilities (the backward pass reads
them), out (B, T, C). The kit provides this module whole; it builds on nothing of
kernels/attention.py, which is the students' to write.

The forward pass, three launches:
1. bidirectional_scores_kernel: att = q k^T / sqrt(HS) per head, in 64 x 64 tiles of
   (queries, keys); a tile of keys all at or past lengths[b] is skipped.
2. bidirectional_softmax_kernel: one warp per row of att, in place: the maximum and
   the sum of exp(x - max) over the real keys in one pass (an online softmax: when
   the running maximum grows, the running sum is rescaled), then exp(x - max) / sum
   written for the real keys and 0 for the padded ones.
3. bidirectional_values_kernel: out = att v per head, in 64 x 64 tiles of (queries,
   head channels), summing over the real keys only.

The backward pass, bidirectional_attention_backward(dinp, dout, inp, att, lengths, B,
T, C, NH), is causal attention's (kernels/attention_backward.py derives it) with every
real key visible: per head, with p the saved probabilities and dy dout's slice,

    dp = dy v^T,  ds = scale * p * (dp - rowsum(p * dp)),  dq = ds k,  dk = ds^T q,  dv = p^T dy

in four launches: dp over the real keys' tiles into a (B, NH, T, T) scratch; one warp
per row turning dp into ds in place (0 at padded keys); dq over the real keys; dk and
dv, whose sums run down the columns of ds and p (tiled_product reads a transposed
operand along its rows in memory), over every query. dinp (B, T, 3C) is written whole:
padded keys' dk and dv are 0, as no query saw them.

Every product is one tiling (tiled_product), on the tensor cores at float32 accuracy:
a block computes a 64 x 64 tile of its output, walking the reduction in slices of 16
copied into shared memory k-major, the next slice's loads in flight while this one is
multiplied. An operand's slice is copied along its contiguous index: 64 rows of 16
consecutive floats (q, k, att for the values), or 16 rows of 64 consecutive floats (v;
ds and p transposed), each thread copying 4. Rows of inp are 3C floats apart, so the
copies are scalar and zeros stand in past every edge. Each of the 8 warps owns 32 x 16
of the tile, two by two m16n8k8 TF32 mmas, and reads its fragments from the k-major
slices with scalar loads (rows of TILE + 8 floats put a fragment's 32 lanes in 32
banks); each value is split into a TF32 high and low part, and three mmas (low x high,
high x low, high x high) keep the sums within float32's bounds, as matmul_3xtf32.py
explains (tests/reference/test_three_pass_tf32.py emulates all six products over the
specs' cases). No atomics: every sum is taken in an order fixed by the sizes alone.
"""

import math

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, KernelArgumentError, ceil_div, check_array, check_dims
from gpt2kit.kernel_runtime.device import cupy
from gpt2kit.kernels.matmul_tf32 import TF32_HELPERS, TF32_PRODUCTS

TILE = 64      # rows and columns of a product's tile
TILE_K = 16    # depth of one shared-memory slice
THREADS = 256  # per product block: 8 warps, each owning 32 x 16 of the tile
ROWS_PER_BLOCK = 8  # softmax rows per block: one per warp
MAX_GRID_YZ = 65535  # CUDA's limit on a grid's y and z

BIDIRECTIONAL_ATTENTION_SOURCE = TF32_HELPERS + TF32_PRODUCTS + r"""
#define NEG_INFINITY __int_as_float(0xff800000)
#define TILE_ROW (TILE + 8)  // a shared k-row: a fragment's 32 lanes (k = t, row or column g) hit 32 banks

// Where this thread's j-th of its 4 values of a slice of an operand X[x][k] (x: A's rows or B's columns) lies in
// the slice, (x, k): the slice is read along X's contiguous index, so the 4 are consecutive k of one x when
// along_k, else consecutive x of one k
template <bool along_k>
__device__ __forceinline__ int2 slice_place(int j) {
    return along_k ? make_int2(threadIdx.x / (TILE_K / 4), 4 * (threadIdx.x % (TILE_K / 4)) + j)
                   : make_int2(4 * (threadIdx.x % (TILE / 4)) + j, threadIdx.x / (TILE / 4));
}

// Those 4 values of the slice from x0 and k0 of X, x_row floats from one x to the next when along_k (else from one
// k to the next); 0 past X and K
template <bool along_k>
__device__ __forceinline__ void load_slice(float v[4], const float* m, long long x_row, int x0, int X, int k0, int K) {
    #pragma unroll
    for (int j = 0; j < 4; j++) {
        const int2 place = slice_place<along_k>(j);
        const int x = x0 + place.x, k = k0 + place.y;
        v[j] = (x < X && k < K) ? m[along_k ? x * x_row + k : k * x_row + x] : 0.0f;
    }
}

// ...and into the slice's shared tile, tile[k][x]
template <bool along_k>
__device__ __forceinline__ void store_slice(float (*tile)[TILE_ROW], const float v[4]) {
    #pragma unroll
    for (int j = 0; j < 4; j++) {
        const int2 place = slice_place<along_k>(j);
        tile[place.y][place.x] = v[j];
    }
}

// A 64 x 64 tile of out (R, N) = A (R, K) @ B (K, N) into acc, on the tensor cores in three TF32 passes. A[r][k] =
// a[r * a_row + k] when a_along_k (k runs along a's rows in memory), else a[k * a_row + r]; B[k][n] = b[n * b_row + k]
// when b_along_k, else b[k * b_row + n]. The tile is (blockIdx.x, blockIdx.y). The 8 warps form a 2 x 4 grid of 32 x
// 16 parts of it, each two m16n8k8 row tiles by two column tiles: acc[2 * i + j] is row tile i, column tile j
// (rows g and g + 8, columns 2t and 2t + 1 of it, with g = lane / 4, t = lane % 4). store_tile stores it.
template <bool a_along_k, bool b_along_k>
__device__ void tiled_product(float acc[4][4], const float* a, long long a_row, const float* b, long long b_row,
                              int R, int K, int N) {
    __shared__ float a_tile[TILE_K][TILE_ROW];  // a_tile[k][r] = A[row0 + r][k0 + k]
    __shared__ float b_tile[TILE_K][TILE_ROW];  // b_tile[k][n] = B[k0 + k][col0 + n]
    const int row0 = blockIdx.x * TILE, col0 = blockIdx.y * TILE;
    const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    const int lane_row = 32 * (warp / 4) + g, lane_column = 16 * (warp % 4) + g;  // its first fragment row, column
    float a_next[4], b_next[4];
    load_slice<a_along_k>(a_next, a, a_row, row0, R, 0, K);
    load_slice<b_along_k>(b_next, b, b_row, col0, N, 0, K);
    for (int k0 = 0; k0 < K; k0 += TILE_K) {
        store_slice<a_along_k>(a_tile, a_next);
        store_slice<b_along_k>(b_tile, b_next);
        __syncthreads();
        if (k0 + TILE_K < K) {  // the next slice's loads in flight while this one is multiplied
            load_slice<a_along_k>(a_next, a, a_row, row0, R, k0 + TILE_K, K);
            load_slice<b_along_k>(b_next, b, b_row, col0, N, k0 + TILE_K, K);
        }
        #pragma unroll
        for (int k = 0; k < TILE_K; k += 8) {
            unsigned a_high[2][4], a_low[2][4], b_high[2][2], b_low[2][2];
            #pragma unroll
            for (int i = 0; i < 2; i++) {  // A's (g, t), (g + 8, t), (g, t + 4), (g + 8, t + 4); B's (t, g), (t + 4, g)
                #pragma unroll
                for (int f = 0; f < 4; f++) {
                    split(a_tile[k + t + 4 * (f / 2)][lane_row + 16 * i + 8 * (f % 2)], a_high[i][f], a_low[i][f]);
                }
                #pragma unroll
                for (int f = 0; f < 2; f++) {
                    split(b_tile[k + t + 4 * f][lane_column + 8 * i], b_high[i][f], b_low[i][f]);
                }
            }
            #pragma unroll
            for (int i = 0; i < 4; i++) mma_tf32(acc[i], a_low[i / 2], b_high[i % 2]);  // the small products first
            #pragma unroll
            for (int i = 0; i < 4; i++) mma_tf32(acc[i], a_high[i / 2], b_low[i % 2]);
            #pragma unroll
            for (int i = 0; i < 4; i++) mma_tf32(acc[i], a_high[i / 2], b_high[i % 2]);
        }
        __syncthreads();  // everyone is done with this slice before the next one overwrites it
    }
}

// rows x columns of m (row stride `stride`) from acc, times scale, at the tile (blockIdx.x, blockIdx.y) as
// tiled_product lays it out.
__device__ void store_tile(float* m, long long stride, const float acc[4][4], int rows, int columns, float scale) {
    const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, t = threadIdx.x % 4;
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        #pragma unroll
        for (int j = 0; j < 4; j++) {  // rows g, g, g + 8, g + 8 and columns 2t, 2t + 1, 2t, 2t + 1 of its mma tile
            const int r = blockIdx.x * TILE + 32 * (warp / 4) + 16 * (i / 2) + 8 * (j / 2) + g;
            const int c = blockIdx.y * TILE + 16 * (warp % 4) + 8 * (i % 2) + 2 * t + j % 2;
            if (r < rows && c < columns) m[r * stride + c] = acc[i][j] * scale;
        }
    }
}

// att[b, h] = q k^T * scale for key tiles that hold a real key. Grid (ceil(T / TILE), ceil(T / TILE), B * NH).
extern "C" __global__ void __launch_bounds__(THREADS)
bidirectional_scores_kernel(float* att, const float* inp, const int* lengths, int T, int C, int NH, float scale) {
    const int b = blockIdx.z / NH, h = blockIdx.z % NH, HS = C / NH;
    const int keys = min(lengths[b], T);
    if (blockIdx.y * TILE >= keys) return;  // only padded keys: the softmax writes their zeros
    const float* q = inp + (long long)b * T * 3 * C + h * HS;
    float acc[4][4] = {};
    tiled_product<true, true>(acc, q, 3LL * C, q + C, 3LL * C, T, HS, T);
    store_tile(att + (long long)blockIdx.z * T * T, T, acc, T, T, scale);
}

// Each row of att in place: the softmax over its first lengths[b] entries, 0 after. One warp per row; grid
// ceil(B * NH * T / ROWS_PER_BLOCK), ROWS_PER_BLOCK warps.
extern "C" __global__ void bidirectional_softmax_kernel(float* att, const int* lengths, int B, int T, int NH) {
    const long long row = (long long)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= (long long)B * NH * T) return;
    const int keys = min(lengths[row / ((long long)NH * T)], T);
    float* x = att + row * T;
    float maximum = NEG_INFINITY, sum = 0.0f;
    for (int s = lane; s < keys; s += 32) {
        const float value = x[s];
        if (value > maximum) {
            sum *= expf(maximum - value);
            maximum = value;
        }
        sum += expf(value - maximum);
    }
    for (int offset = 16; offset > 0; offset /= 2) {  // combine the lanes' (maximum, sum) pairs
        const float other_maximum = __shfl_xor_sync(0xffffffff, maximum, offset);
        const float other_sum = __shfl_xor_sync(0xffffffff, sum, offset);
        const float joint = fmaxf(maximum, other_maximum);
        sum = (sum == 0.0f ? 0.0f : sum * expf(maximum - joint)) +
              (other_sum == 0.0f ? 0.0f : other_sum * expf(other_maximum - joint));
        maximum = joint;
    }
    const float inverse = 1.0f / sum;
    for (int s = lane; s < T; s += 32) x[s] = s < keys ? expf(x[s] - maximum) * inverse : 0.0f;
}

// out[b, :, h] = att[b, h] v over the real keys. Grid (ceil(T / TILE), ceil(HS / TILE), B * NH).
extern "C" __global__ void __launch_bounds__(THREADS)
bidirectional_values_kernel(float* out, const float* att, const float* inp, const int* lengths, int T, int C,
                            int NH) {
    const int b = blockIdx.z / NH, h = blockIdx.z % NH, HS = C / NH;
    const int keys = min(lengths[b], T);
    const float* v = inp + (long long)b * T * 3 * C + 2 * C + h * HS;
    float acc[4][4] = {};
    tiled_product<true, false>(acc, att + (long long)blockIdx.z * T * T, T, v, 3LL * C, T, keys, HS);
    store_tile(out + (long long)b * T * C + h * HS, C, acc, T, HS, 1.0f);
}

// dscores[b, h, t, s] = dout[b, t, h] . v[b, s, h] for key tiles that hold a real key: dp, which the softmax's
// backward turns into ds in place. Grid (ceil(T / TILE), ceil(T / TILE), B * NH).
extern "C" __global__ void __launch_bounds__(THREADS)
bidirectional_dprobabilities_kernel(float* dscores, const float* dout, const float* inp, const int* lengths, int T,
                                    int C, int NH) {
    const int b = blockIdx.z / NH, h = blockIdx.z % NH, HS = C / NH;
    if (blockIdx.y * TILE >= min(lengths[b], T)) return;  // only padded keys: the softmax's backward writes 0
    float acc[4][4] = {};
    tiled_product<true, true>(acc, dout + (long long)b * T * C + h * HS, C,
                              inp + (long long)b * T * 3 * C + 2 * C + h * HS, 3LL * C, T, HS, T);
    store_tile(dscores + (long long)blockIdx.z * T * T, T, acc, T, T, 1.0f);
}

// Each row of dscores in place, from dp to ds = scale * p * (dp - sum over real keys of p * dp); 0 at padded keys.
// One warp per row; grid ceil(B * NH * T / ROWS_PER_BLOCK), ROWS_PER_BLOCK warps.
extern "C" __global__ void bidirectional_softmax_backward_kernel(float* dscores, const float* att, const int* lengths,
                                                                 float scale, int B, int T, int NH) {
    const long long row = (long long)blockIdx.x * ROWS_PER_BLOCK + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= (long long)B * NH * T) return;
    const int utterance = (int)(row / ((long long)NH * T)), keys = min(lengths[utterance], T);
    const float* p = att + row * T;
    float* g = dscores + row * T;
    float weighted = 0.0f;
    for (int s = lane; s < keys; s += 32) weighted += p[s] * g[s];
    for (int offset = 16; offset > 0; offset /= 2) weighted += __shfl_xor_sync(0xffffffff, weighted, offset);
    for (int s = lane; s < T; s += 32) g[s] = s < keys ? scale * p[s] * (g[s] - weighted) : 0.0f;
}

// dq[b, t, h] = sum over real keys s of ds[b, h, t, s] k[b, s, h], into dinp's first C columns.
// Grid (ceil(T / TILE), ceil(HS / TILE), B * NH).
extern "C" __global__ void __launch_bounds__(THREADS)
bidirectional_dquery_kernel(float* dinp, const float* dscores, const float* inp, const int* lengths, int T, int C,
                            int NH) {
    const int b = blockIdx.z / NH, h = blockIdx.z % NH, HS = C / NH;
    const long long head = (long long)b * T * 3 * C + h * HS;  // q's first value in inp, dq's in dinp
    float acc[4][4] = {};
    tiled_product<true, false>(acc, dscores + (long long)blockIdx.z * T * T, T, inp + head + C, 3LL * C, T,
                               min(lengths[b], T), HS);
    store_tile(dinp + head, 3LL * C, acc, T, HS, 1.0f);
}

// dk[b, s, h] = sum over queries t of ds[b, h, t, s] q[b, t, h] and dv[b, s, h] = sum over t of att[b, h, t, s]
// dout[b, t, h], into dinp's second and third C columns; 0 for padded keys, which no query saw.
// Grid (ceil(T / TILE), ceil(HS / TILE), B * NH).
extern "C" __global__ void __launch_bounds__(THREADS)
bidirectional_dkey_dvalue_kernel(float* dinp, const float* dscores, const float* att, const float* dout,
                                 const float* inp, const int* lengths, int T, int C, int NH) {
    const int b = blockIdx.z / NH, h = blockIdx.z % NH, HS = C / NH;
    const long long head = (long long)b * T * 3 * C + h * HS, probabilities = (long long)blockIdx.z * T * T;
    float dk[4][4] = {}, dv[4][4] = {};
    if (blockIdx.x * TILE < min(lengths[b], T)) {  // a tile of padded keys only keeps its zeros
        tiled_product<false, false>(dk, dscores + probabilities, T, inp + head, 3LL * C, T, T, HS);
        tiled_product<false, false>(dv, att + probabilities, T, dout + (long long)b * T * C + h * HS, C, T, T, HS);
    }
    store_tile(dinp + head + C, 3LL * C, dk, T, HS, 1.0f);
    store_tile(dinp + head + 2 * C, 3LL * C, dv, T, HS, 1.0f);
}
"""

DEFINES = dict(TILE=TILE, TILE_K=TILE_K, THREADS=THREADS, ROWS_PER_BLOCK=ROWS_PER_BLOCK)
bidirectional_scores_kernel = CudaKernel(BIDIRECTIONAL_ATTENTION_SOURCE, "bidirectional_scores_kernel",
                                         defines=DEFINES)
bidirectional_softmax_kernel = CudaKernel(BIDIRECTIONAL_ATTENTION_SOURCE, "bidirectional_softmax_kernel",
                                          defines=DEFINES)
bidirectional_values_kernel = CudaKernel(BIDIRECTIONAL_ATTENTION_SOURCE, "bidirectional_values_kernel",
                                         defines=DEFINES)
BACKWARD_KERNELS = tuple(CudaKernel(BIDIRECTIONAL_ATTENTION_SOURCE, name, defines=DEFINES) for name in (
    "bidirectional_dprobabilities_kernel", "bidirectional_softmax_backward_kernel", "bidirectional_dquery_kernel",
    "bidirectional_dkey_dvalue_kernel"))


def check_sizes(function, B, T, C, NH):
    check_dims(function, B=B, T=T, C=C, NH=NH)
    if C % NH:
        raise KernelArgumentError(f"{function}: C={C} channels do not fall into NH={NH} heads of one size")
    if B * NH > MAX_GRID_YZ:
        raise KernelArgumentError(f"{function}: at most {MAX_GRID_YZ} utterances times heads, got B={B}, NH={NH}")
    if ceil_div(T, TILE) > MAX_GRID_YZ:
        raise KernelArgumentError(f"{function}: at most {MAX_GRID_YZ * TILE} frames, got T={T}")


def bidirectional_attention_forward(out, att, inp, lengths, B, T, C, NH):
    function = "bidirectional_attention_forward"
    check_sizes(function, B, T, C, NH)
    for name, array, size in (("out", out, B * T * C), ("att", att, B * NH * T * T), ("inp", inp, B * T * 3 * C)):
        check_array(function, name, array, size)
    check_array(function, "lengths", lengths, B, np.int32)
    forward((bidirectional_scores_kernel, bidirectional_softmax_kernel, bidirectional_values_kernel), out, att, inp,
            lengths, B, T, C, NH)


def forward(kernels, out, att, inp, lengths, B, T, C, NH):
    """The three launches (or those of kernels that stand in for them, in that order)."""
    scores, softmax, values = kernels
    HS = C // NH
    sizes = (np.int32(T), np.int32(C), np.int32(NH))
    scores((ceil_div(T, TILE), ceil_div(T, TILE), B * NH), (THREADS,),
           (att, inp, lengths, *sizes, np.float32(1 / math.sqrt(HS))))
    softmax((ceil_div(B * NH * T, ROWS_PER_BLOCK),), (32 * ROWS_PER_BLOCK,),
            (att, lengths, np.int32(B), np.int32(T), np.int32(NH)))
    values((ceil_div(T, TILE), ceil_div(HS, TILE), B * NH), (THREADS,), (out, att, inp, lengths, *sizes))


def bidirectional_attention_backward(dinp, dout, inp, att, lengths, B, T, C, NH):
    function = "bidirectional_attention_backward"
    check_sizes(function, B, T, C, NH)
    for name, array, size in (("dinp", dinp, B * T * 3 * C), ("dout", dout, B * T * C), ("inp", inp, B * T * 3 * C),
                              ("att", att, B * NH * T * T)):
        check_array(function, name, array, size)
    check_array(function, "lengths", lengths, B, np.int32)
    backward(BACKWARD_KERNELS, dinp, dout, inp, att, lengths, B, T, C, NH)


def backward(kernels, dinp, dout, inp, att, lengths, B, T, C, NH):
    """The four launches (or those of kernels that stand in for them, in that order); dscores (B, NH, T, T), dp and
    then ds, in a scratch from CuPy's memory pool (a captured graph's own: kernel_runtime.device.captured)."""
    dprobabilities, softmax_backward, dquery, dkey_dvalue = kernels
    HS = C // NH
    dscores = cupy.empty(B * NH * T * T, dtype=np.float32)
    sizes = (np.int32(T), np.int32(C), np.int32(NH))
    square, head = (ceil_div(T, TILE), ceil_div(T, TILE), B * NH), (ceil_div(T, TILE), ceil_div(HS, TILE), B * NH)
    dprobabilities(square, (THREADS,), (dscores, dout, inp, lengths, *sizes))
    softmax_backward((ceil_div(B * NH * T, ROWS_PER_BLOCK),), (32 * ROWS_PER_BLOCK,),
                     (dscores, att, lengths, np.float32(1 / math.sqrt(HS)), np.int32(B), np.int32(T), np.int32(NH)))
    dquery(head, (THREADS,), (dinp, dscores, inp, lengths, *sizes))
    dkey_dvalue(head, (THREADS,), (dinp, dscores, att, dout, inp, lengths, *sizes))
