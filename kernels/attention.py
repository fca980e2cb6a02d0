"""Causal self-attention, and the scaled causal softmax it is built on.

    q, k, v = inp[b, t, 0:C], inp[b, t, C:2C], inp[b, t, 2C:3C], each split into NH heads of HS = C/NH
    att[b, h, t, t2] = softmax over t2 <= t of (q[b,t,h] . k[b,t2,h]) / sqrt(HS);  0 for t2 > t
    out[b, t, h*HS:(h+1)*HS] = sum over t2 of att[b, h, t, t2] * v[b, t2, h]

inp (B, T, 3C), att (B, NH, T, T) receives the probabilities, out (B, T, C). qkvr is
scratch of 3*B*T*C floats for implementations that first permute q, k and v into
(B, NH, T, HS); these kernels read the packed layout directly (each head's HS values
are already contiguous, so the loads stay coalesced) and leave it untouched.

Three launches:
1. attention_scores_kernel: att = q k^T for every head, a batched matrix product
   done in 64 x 64 tiles. Tiles entirely above the diagonal are skipped: causal
   attention never needs them.
2. softmax, in place on att: one warp per row, its maximum and sum found by warp
   shuffles (a reduction tree across the lanes). Subtracting the maximum keeps exp()
   from overflowing when scores are large (exp(89) is already infinite in float32).
   For rows up to 1024 long (T a multiple of 4, 16-byte aligned) softmax_rows_kernel
   reads each row's causal part once, as float4s, into registers, takes the maximum,
   turns the values into exp(x - max) in place, sums them, and writes the row once
   (0 above the diagonal): the least memory traffic a softmax can have. Otherwise
   softmax_forward_kernel reads the row twice: one pass finds the maximum and the sum
   together (an "online" softmax: when the running maximum grows, the running sum is
   rescaled), a second writes exp(x - max) / sum.
3. attention_values_kernel: out = att v, again tiled, summing only up to the tile's
   last query row because the later probabilities are zero.
"""

import math

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, KernelArgumentError, ceil_div, check_array, check_dims

# The maximum and the sum over a warp's 32 lanes, in every lane (kernels/attention_backward.py's too).
WARP_REDUCTIONS = r"""
__device__ float warp_max(float value) {
    for (int offset = 16; offset > 0; offset /= 2) {
        value = fmaxf(value, __shfl_xor_sync(0xffffffff, value, offset));
    }
    return value;
}

__device__ float warp_sum(float value) {
    for (int offset = 16; offset > 0; offset /= 2) {
        value += __shfl_xor_sync(0xffffffff, value, offset);
    }
    return value;
}
"""

SOFTMAX_SOURCE = WARP_REDUCTIONS + r"""
#define NEG_INFINITY __int_as_float(0xff800000)
#define VECTORS_PER_LANE 8  // float4s a lane keeps: rows up to 32 * 4 * 8 = 1024 long stay in registers

// out and inp are (N, T, T); row (n, t) is normalised over its first t + 1 entries.
// out may be inp: each lane writes only the entries it read itself.
// For T % 4 == 0, T <= 32 * 4 * VECTORS_PER_LANE, out and inp 16-byte aligned: the row in registers.
extern "C" __global__ void softmax_rows_kernel(float* out, const float* inp, float scale, int N, int T) {
    // BEGIN SOLUTION
    long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= (long long)N * T) return;
    int t = (int)(row % T);
    const float4* x = (const float4*)(inp + row * T);
    float4* y = (float4*)(out + row * T);

    float4 v[VECTORS_PER_LANE];  // this lane's columns 4i .. 4i + 3, i = lane + 32 j; -inf past t
    float row_max = NEG_INFINITY;
    #pragma unroll
    for (int j = 0; j < VECTORS_PER_LANE; j++) {
        int c = 4 * (lane + 32 * j);
        float4 a = c <= t ? x[c / 4] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);  // nothing past t is read
        v[j] = make_float4(c <= t ? scale * a.x : NEG_INFINITY, c + 1 <= t ? scale * a.y : NEG_INFINITY,
                           c + 2 <= t ? scale * a.z : NEG_INFINITY, c + 3 <= t ? scale * a.w : NEG_INFINITY);
        row_max = fmaxf(row_max, fmaxf(fmaxf(v[j].x, v[j].y), fmaxf(v[j].z, v[j].w)));
    }
    row_max = warp_max(row_max);
    float sum = 0.0f;
    #pragma unroll
    for (int j = 0; j < VECTORS_PER_LANE; j++) {  // exp(-inf) = 0 above the diagonal
        v[j] = make_float4(expf(v[j].x - row_max), expf(v[j].y - row_max), expf(v[j].z - row_max),
                           expf(v[j].w - row_max));
        sum += (v[j].x + v[j].y) + (v[j].z + v[j].w);
    }
    float inverse_sum = 1.0f / warp_sum(sum);
    #pragma unroll
    for (int j = 0; j < VECTORS_PER_LANE; j++) {
        int i = lane + 32 * j;
        if (4 * i < T) {
            y[i] = make_float4(v[j].x * inverse_sum, v[j].y * inverse_sum, v[j].z * inverse_sum,
                               v[j].w * inverse_sum);
        }
    }
    // END SOLUTION
}

// Any T: the row read twice, as described above.
extern "C" __global__ void softmax_forward_kernel(float* out, const float* inp, float scale,
                                                  int N, int T) {
    // BEGIN SOLUTION
    long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= (long long)N * T) return;
    int t = (int)(row % T);
    const float* x = inp + row * T;
    float* y = out + row * T;

    float running_max = NEG_INFINITY, running_sum = 0.0f;
    for (int i = lane; i <= t; i += 32) {
        float s = scale * x[i];
        float new_max = fmaxf(running_max, s);
        running_sum = running_sum * expf(running_max - new_max) + expf(s - new_max);
        running_max = new_max;
    }
    float row_max = warp_max(running_max);
    // lanes that saw no entry hold max -inf and sum 0, and contribute 0 here
    float row_sum = warp_sum(running_sum * expf(running_max - row_max));
    float inverse_sum = 1.0f / row_sum;

    for (int i = lane; i < T; i += 32) {
        y[i] = i <= t ? expf(scale * x[i] - row_max) * inverse_sum : 0.0f;
    }
    // END SOLUTION
}
"""

TILE = 64                 # query rows, and key columns or head dims, per block
TILE_K = 16               # depth of one shared-memory slice
THREADS = 256             # 16 x 16 threads, each owning a 4 x 4 part of the tile
SOFTMAX_BLOCK_SIZE = 256  # 8 warps, 8 rows per block
SOFTMAX_ROW_LIMIT = 1024  # rows up to this long, in registers (VECTORS_PER_LANE float4s per lane)

# A thread's 4 x 4 part of a 64 x 64 tile product, one shared-memory slice at a time (the backward pass's
# products, kernels/attention_backward.py, are made of it too).
TILE_PRODUCT_SOURCE = r"""
// acc[i][j] += sum over the slice of a[k][ty + 16 i] * b[k][tx + 16 j].
// Rows and columns interleave with stride 16 so a warp reads distinct banks.
__device__ void accumulate_slice(float acc[4][4], const float (*a)[TILE + 1],
                                 const float (*b)[TILE + 1], int ty, int tx) {
    #pragma unroll
    for (int k = 0; k < TILE_K; k++) {
        float a_k[4], b_k[4];
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            a_k[i] = a[k][ty + 16 * i];
            b_k[i] = b[k][tx + 16 * i];
        }
        #pragma unroll
        for (int i = 0; i < 4; i++) {
            #pragma unroll
            for (int j = 0; j < 4; j++) acc[i][j] += a_k[i] * b_k[j];
        }
    }
}
"""

ATTENTION_SOURCE = TILE_PRODUCT_SOURCE + r"""

// scores[b, h, t, t2] = q[b, t, h, :] . k[b, t2, h, :] for t2 <= t (unscaled).
// grid: (key tiles, query tiles, B * NH)
extern "C" __global__ void __launch_bounds__(THREADS, 2)  // two blocks per SM: no register spills
attention_scores_kernel(float* scores, const float* qkv, int T, int C, int NH) {
    // BEGIN SOLUTION
    const int row0 = blockIdx.y * TILE, col0 = blockIdx.x * TILE;
    if (col0 > row0 + TILE - 1) return;  // wholly above the diagonal
    const int HS = C / NH, b = blockIdx.z / NH, h = blockIdx.z % NH;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const float* q = qkv + (long long)b * T * 3 * C + h * HS;  // q[t * 3C + d]
    const float* k = q + C;                                      // k[t * 3C + d]
    __shared__ float q_slice[TILE_K][TILE + 1], k_slice[TILE_K][TILE + 1];

    float acc[4][4] = {};
    for (int d0 = 0; d0 < HS; d0 += TILE_K) {
        #pragma unroll
        for (int i = 0; i < TILE * TILE_K / THREADS; i++) {
            int e = threadIdx.x + THREADS * i;
            int r = e / TILE_K, kk = e % TILE_K, d = d0 + kk;  // kk fastest: coalesced
            q_slice[kk][r] = (row0 + r < T && d < HS) ? q[(long long)(row0 + r) * 3 * C + d] : 0.0f;
            k_slice[kk][r] = (col0 + r < T && d < HS) ? k[(long long)(col0 + r) * 3 * C + d] : 0.0f;
        }
        __syncthreads();
        accumulate_slice(acc, q_slice, k_slice, ty, tx);
        __syncthreads();
    }

    float* out = scores + (long long)blockIdx.z * T * T;
    #pragma unroll
    for (int i = 0; i < 4; i++) {
        int t = row0 + ty + 16 * i;
        #pragma unroll
        for (int j = 0; j < 4; j++) {
            int t2 = col0 + tx + 16 * j;
            if (t < T && t2 <= t) out[(long long)t * T + t2] = acc[i][j];
        }
    }
    // END SOLUTION
}

// out[b, t, h*HS + d] = sum over t2 <= t of att[b, h, t, t2] * v[b, t2, h, d].
// grid: (head-dim tiles, query tiles, B * NH)
extern "C" __global__ void __launch_bounds__(THREADS, 2)  // two blocks per SM: no register spills
attention_values_kernel(float* out, const float* att, const float* qkv, int T, int C, int NH) {
    // BEGIN SOLUTION
    const int row0 = blockIdx.y * TILE, d0 = blockIdx.x * TILE;
    const int HS = C / NH, b = blockIdx.z / NH, h = blockIdx.z % NH;
    const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
    const float* p = att + (long long)blockIdx.z * T * T;                  // p[t * T + t2]
    const float* v = qkv + (long long)b * T * 3 * C + 2 * C + h * HS + d0;  // v[t2 * 3C + d]
    __shared__ float p_slice[TILE_K][TILE + 1], v_slice[TILE_K][TILE + 1];

    float acc[4][4] = {};
    const int keys = min(T, row0 + TILE);  // later keys have probability 0 for every row here
    for (int k0 = 0; k0 < keys; k0 += TILE_K) {
        #pragma unroll
        for (int i = 0; i < TILE * TILE_K / THREADS; i++) {
            int e = threadIdx.x + THREADS * i;
            int r = e / TILE_K, t = row0 + r, t2 = k0 + e % TILE_K;  // keys fastest
            p_slice[e % TILE_K][r] = (t < T && t2 <= t) ? p[(long long)t * T + t2] : 0.0f;
            int key = k0 + e / TILE, d = e % TILE;                  // dims fastest
            v_slice[e / TILE][d] = (key < T && d0 + d < HS) ? v[(long long)key * 3 * C + d] : 0.0f;
        }
        __syncthreads();
        accumulate_slice(acc, p_slice, v_slice, ty, tx);
        __syncthreads();
    }

    #pragma unroll
    for (int i = 0; i < 4; i++) {
        int t = row0 + ty + 16 * i;
        #pragma unroll
        for (int j = 0; j < 4; j++) {
            int d = d0 + tx + 16 * j;
            if (t < T && d < HS) out[((long long)b * T + t) * C + h * HS + d] = acc[i][j];
        }
    }
    // END SOLUTION
}
"""

ATTENTION_DEFINES = dict(TILE=TILE, TILE_K=TILE_K, THREADS=THREADS)
softmax_rows_kernel = CudaKernel(SOFTMAX_SOURCE, "softmax_rows_kernel")
softmax_forward_kernel = CudaKernel(SOFTMAX_SOURCE, "softmax_forward_kernel")
attention_scores_kernel = CudaKernel(ATTENTION_SOURCE, "attention_scores_kernel", defines=ATTENTION_DEFINES)
attention_values_kernel = CudaKernel(ATTENTION_SOURCE, "attention_values_kernel", defines=ATTENTION_DEFINES)


def softmax_forward(out, inp, scale, N, T):
    """out[n, t, :] = causal softmax of scale * inp[n, t, :t+1], zeros after; out may be inp."""
    check_dims("softmax_forward", N=N, T=T)
    check_array("softmax_forward", "out", out, N * T * T)
    check_array("softmax_forward", "inp", inp, N * T * T)
    rows_per_block = SOFTMAX_BLOCK_SIZE // 32
    in_registers = T % 4 == 0 and T <= SOFTMAX_ROW_LIMIT and (out.data.ptr | inp.data.ptr) % 16 == 0
    kernel = softmax_rows_kernel if in_registers else softmax_forward_kernel
    kernel((ceil_div(N * T, rows_per_block),), (SOFTMAX_BLOCK_SIZE,),
           (out, inp, np.float32(scale), np.int32(N), np.int32(T)))


def attention_forward(out, qkvr, att, inp, B, T, C, NH):
    check_dims("attention_forward", B=B, T=T, C=C, NH=NH)
    if C % NH:
        raise KernelArgumentError(f"attention_forward: C={C} is not a multiple of NH={NH}")
    check_array("attention_forward", "out", out, B * T * C)
    check_array("attention_forward", "qkvr", qkvr, 3 * B * T * C)
    check_array("attention_forward", "att", att, B * NH * T * T)
    check_array("attention_forward", "inp", inp, B * T * 3 * C)
    HS = C // NH
    tiles = ceil_div(T, TILE)
    sizes = (np.int32(T), np.int32(C), np.int32(NH))
    attention_scores_kernel((tiles, tiles, B * NH), (THREADS,), (att, inp, *sizes))
    softmax_forward(att, att, 1.0 / math.sqrt(HS), B * NH, T)
    attention_values_kernel((ceil_div(HS, TILE), tiles, B * NH), (THREADS,), (out, att, inp, *sizes))
