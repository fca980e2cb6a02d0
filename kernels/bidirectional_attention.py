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

Three launches:
1. bidirectional_scores_kernel: att = q k^T / sqrt(HS) per head, in 64 x 64 tiles of
   (queries, keys); a tile of keys all at or past lengths[b] is skipped.
2. bidirectional_softmax_kernel: one warp per row of att, in place: the maximum and
   the sum of exp(x - max) over the real keys in one pass (an online softmax: when
   the running maximum grows, the running sum is rescaled), then exp(x - max) / sum
   written for the real keys and 0 for the padded ones.
3. bidirectional_values_kernel: out = att v per head, in 64 x 64 tiles of (queries,
   head channels), summing over the real keys only.

Both products are one tiling (tiled_product): a block computes a 64 x 64 tile of its
output, walking the reduction in slices of 16 copied into shared memory k-major; each
of its 256 threads accumulates a 4 x 4 part. A slice of q, k or att is 64 rows of 16
consecutive floats (each thread copies 4 of one row); a slice of v is 16 rows of 64
consecutive floats (each thread copies 4 of one row). Rows of inp are 3C floats apart,
so the copies are scalar and zeros stand in past every edge. No atomics: every sum is
taken in an order fixed by the sizes alone.
"""

import math

import numpy as np

from kernel_runtime import CudaKernel, KernelArgumentError, ceil_div, check_array, check_dims

TILE = 64      # rows and columns of a product's tile
TILE_K = 16    # depth of one shared-memory slice
THREADS = 256  # per product block, each owning a 4 x 4 part of the tile
ROWS_PER_BLOCK = 8  # softmax rows per block: one per warp
MAX_GRID_YZ = 65535  # CUDA's limit on a grid's y and z

BIDIRECTIONAL_ATTENTION_SOURCE = r"""
#define NEG_INFINITY __int_as_float(0xff800000)

// A 64 x 64 tile of out (R, N) = A (R, K) @ B (K, N) into acc: A[r][k] = a[r * a_row + k]; B[k][n] = b[n * b_row + k]
// when b_along_k (rows of B^T contiguous, as k is read for scores), else b[k * b_row + n]. The tile is (blockIdx.x,
// blockIdx.y); this thread's part is rows 4 * (threadIdx.x / 16) .., columns 4 * (threadIdx.x % 16) ...
template <bool b_along_k>
__device__ void tiled_product(float acc[4][4], const float* a, long long a_row, const float* b, long long b_row,
                              int R, int K, int N) {
    __shared__ float a_tile[TILE_K][TILE + 4];  // a_tile[k][r] = A[row0 + r][k0 + k]
    __shared__ float b_tile[TILE_K][TILE + 4];  // b_tile[k][n] = B[k0 + k][col0 + n]
    const int row0 = blockIdx.x * TILE, col0 = blockIdx.y * TILE;
    const int along_row = threadIdx.x / (TILE_K / 4), along_k = 4 * (threadIdx.x % (TILE_K / 4));  // 4 k of a row
    const int across_k = threadIdx.x / (TILE / 4), across = 4 * (threadIdx.x % (TILE / 4));        // 4 n of a k
    const int ty = threadIdx.x / (TILE / 4), tx = threadIdx.x % (TILE / 4);
    for (int k0 = 0; k0 < K; k0 += TILE_K) {
        for (int j = 0; j < 4; j++) {
            const int k = k0 + along_k + j, r = row0 + along_row;
            a_tile[along_k + j][along_row] = (r < R && k < K) ? a[r * a_row + k] : 0.0f;
            if (b_along_k) {
                const int n = col0 + along_row;
                b_tile[along_k + j][along_row] = (n < N && k < K) ? b[n * b_row + k] : 0.0f;
            } else {
                const int n = col0 + across + j, kk = k0 + across_k;
                b_tile[across_k][across + j] = (n < N && kk < K) ? b[kk * b_row + n] : 0.0f;
            }
        }
        __syncthreads();
        #pragma unroll
        for (int k = 0; k < TILE_K; k++) {
            #pragma unroll
            for (int i = 0; i < 4; i++) {
                #pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] += a_tile[k][4 * ty + i] * b_tile[k][4 * tx + j];
            }
        }
        __syncthreads();  // everyone is done with this slice before the next one overwrites it
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
    tiled_product<true>(acc, q, 3LL * C, q + C, 3LL * C, T, HS, T);
    float* out = att + (long long)blockIdx.z * T * T;
    const int ty = threadIdx.x / (TILE / 4), tx = threadIdx.x % (TILE / 4);
    for (int i = 0; i < 4; i++) {
        const int t = blockIdx.x * TILE + 4 * ty + i;
        for (int j = 0; j < 4; j++) {
            const int s = blockIdx.y * TILE + 4 * tx + j;
            if (t < T && s < T) out[(long long)t * T + s] = acc[i][j] * scale;
        }
    }
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
    tiled_product<false>(acc, att + (long long)blockIdx.z * T * T, T, v, 3LL * C, T, keys, HS);
    const int ty = threadIdx.x / (TILE / 4), tx = threadIdx.x % (TILE / 4);
    for (int i = 0; i < 4; i++) {
        const int t = blockIdx.x * TILE + 4 * ty + i;
        for (int j = 0; j < 4; j++) {
            const int d = blockIdx.y * TILE + 4 * tx + j;
            if (t < T && d < HS) out[((long long)b * T + t) * C + h * HS + d] = acc[i][j];
        }
    }
}
"""

DEFINES = dict(TILE=TILE, TILE_K=TILE_K, THREADS=THREADS, ROWS_PER_BLOCK=ROWS_PER_BLOCK)
bidirectional_scores_kernel = CudaKernel(BIDIRECTIONAL_ATTENTION_SOURCE, "bidirectional_scores_kernel",
                                         defines=DEFINES)
bidirectional_softmax_kernel = CudaKernel(BIDIRECTIONAL_ATTENTION_SOURCE, "bidirectional_softmax_kernel",
                                          defines=DEFINES)
bidirectional_values_kernel = CudaKernel(BIDIRECTIONAL_ATTENTION_SOURCE, "bidirectional_values_kernel",
                                         defines=DEFINES)


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
