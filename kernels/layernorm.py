"""LayerNorm over the channels of every (b, t) row.

    mean = sum(x) / C,  var = sum((x - mean)^2) / C   (biased, as GPT-2)
    rstd = 1 / sqrt(var + 1e-5)
    out  = (x - mean) * rstd * weight + bias

inp and out (B, T, C); weight and bias (C); mean and rstd (B, T) are outputs too
(the backward pass needs them).

Each row's mean and variance are reductions: C values summed into one. Done by one
thread, a row of 768 takes 768 dependent additions; done in parallel, partial sums
are combined in a tree of log2 steps.

* Rows up to 1024 wide (GPT-2's 768 and 1024): one warp per row, 8 rows per block.
  Each lane loads its part of the row once, as float4s, into registers (at most 8
  float4s per lane), and the warp combines the lanes' partial sums with shuffles
  (__shfl_xor_sync: a butterfly, every lane ends with the total), with no shared
  memory and no __syncthreads. The row is read from memory exactly once and written
  once, which is all a layernorm must move. When C is not a multiple of 4 or a
  pointer is not 16-byte aligned, the warp walks the row with stride 32 instead and
  reads it three times (the later passes come from cache).
* Wider rows (GPT-2 XL's 1600): one block of 256 threads per row. Each warp reduces
  its threads' partial sums with shuffles, writes one value to shared memory, and
  after a barrier the first warp reduces those (block_sum): a two-level tree.

Precision. A row whose mean is large next to its spread (mean 1e3, std 1e-3) loses
everything to rounding if x is summed directly: float32 holds 1e3 only to about
6e-5. So the kernel sums x - shift, with shift = the row's first element, and keeps
the mean as shift + offset: the differences are small and exact, and the variance is
the two-pass sum of squared deviations, never sum(x^2) - mean^2.
"""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, ceil_div, check_array, check_dims

LAYERNORM_SOURCE = r"""
#define VECTORS_PER_LANE 8  // float4s a lane keeps: rows up to 32 * 4 * 8 = 1024 wide stay in registers

__device__ float warp_sum(float value) {
    for (int offset = 16; offset > 0; offset /= 2) {
        value += __shfl_xor_sync(0xffffffff, value, offset);
    }
    return value;
}

// The sum of `value` over the block (blockDim.x a multiple of 32), returned to every thread.
__device__ float block_sum(float value) {
    __shared__ float warp_totals[32];
    __shared__ float total;
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    value = warp_sum(value);
    if (lane == 0) warp_totals[warp] = value;
    __syncthreads();
    if (warp == 0) {
        value = warp_sum(lane < blockDim.x / 32 ? warp_totals[lane] : 0.0f);
        if (lane == 0) total = value;
    }
    __syncthreads();
    value = total;
    __syncthreads();  // before a next call writes warp_totals and total again
    return value;
}

// One warp per row.
extern "C" __global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd,
                                                    const float* inp, const float* weight,
                                                    const float* bias, int N, int C) {
    // BEGIN SOLUTION
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;  // the whole warp leaves together
    const float* x = inp + (long long)row * C;
    float* y = out + (long long)row * C;
    const int vectors = C / 4;
    const bool in_registers = C % 4 == 0 && vectors <= 32 * VECTORS_PER_LANE &&
                              (((size_t)inp | (size_t)out | (size_t)weight | (size_t)bias) % 16) == 0;

    float shift = x[0];
    float4 v[VECTORS_PER_LANE];  // this lane's float4s of x - shift, when the row fits
    float sum = 0.0f;
    if (in_registers) {
        #pragma unroll
        for (int j = 0; j < VECTORS_PER_LANE; j++) {
            int i = lane + 32 * j;
            if (i < vectors) {
                float4 a = ((const float4*)x)[i];
                v[j] = make_float4(a.x - shift, a.y - shift, a.z - shift, a.w - shift);
                sum += (v[j].x + v[j].y) + (v[j].z + v[j].w);
            }
        }
    } else {
        for (int i = lane; i < C; i += 32) sum += x[i] - shift;
    }
    float offset = warp_sum(sum) / C;  // mean - shift

    float squares = 0.0f;
    if (in_registers) {
        #pragma unroll
        for (int j = 0; j < VECTORS_PER_LANE; j++) {
            if (lane + 32 * j < vectors) {
                float4 d = make_float4(v[j].x - offset, v[j].y - offset, v[j].z - offset, v[j].w - offset);
                squares += (d.x * d.x + d.y * d.y) + (d.z * d.z + d.w * d.w);
            }
        }
    } else {
        for (int i = lane; i < C; i += 32) {
            float d = (x[i] - shift) - offset;
            squares += d * d;
        }
    }
    float s = rsqrtf(warp_sum(squares) / C + 1e-5f);

    if (in_registers) {
        #pragma unroll
        for (int j = 0; j < VECTORS_PER_LANE; j++) {
            int i = lane + 32 * j;
            if (i < vectors) {
                float4 w = ((const float4*)weight)[i], b = ((const float4*)bias)[i];
                ((float4*)y)[i] = make_float4((v[j].x - offset) * s * w.x + b.x, (v[j].y - offset) * s * w.y + b.y,
                                              (v[j].z - offset) * s * w.z + b.z, (v[j].w - offset) * s * w.w + b.w);
            }
        }
    } else {
        for (int i = lane; i < C; i += 32) y[i] = ((x[i] - shift) - offset) * s * weight[i] + bias[i];
    }
    if (lane == 0) {
        mean[row] = shift + offset;
        rstd[row] = s;
    }
    // END SOLUTION
}

// One block per row, for rows wider than a warp's registers hold.
extern "C" __global__ void layernorm_wide_rows_kernel(float* out, float* mean, float* rstd,
                                                      const float* inp, const float* weight,
                                                      const float* bias, int N, int C) {
    // BEGIN SOLUTION
    int row = blockIdx.x;
    const float* x = inp + (long long)row * C;
    float* y = out + (long long)row * C;
    float shift = x[0];
    float sum = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) sum += x[i] - shift;
    float offset = block_sum(sum) / C;
    float squares = 0.0f;
    for (int i = threadIdx.x; i < C; i += blockDim.x) {
        float d = (x[i] - shift) - offset;
        squares += d * d;
    }
    float s = rsqrtf(block_sum(squares) / C + 1e-5f);
    for (int i = threadIdx.x; i < C; i += blockDim.x) y[i] = ((x[i] - shift) - offset) * s * weight[i] + bias[i];
    if (threadIdx.x == 0) {
        mean[row] = shift + offset;
        rstd[row] = s;
    }
    // END SOLUTION
}
"""

layernorm_forward_kernel = CudaKernel(LAYERNORM_SOURCE, "layernorm_forward_kernel")
layernorm_wide_rows_kernel = CudaKernel(LAYERNORM_SOURCE, "layernorm_wide_rows_kernel")

BLOCK_SIZE = 256  # 8 warps: 8 rows per block, or the threads of one wide row
WARP_ROW_LIMIT = 1024  # wider rows take a block each


def layernorm_arguments(out, mean, rstd, inp, weight, bias, B, T, C) -> tuple:
    """The checked launch arguments of a layernorm kernel: out, mean, rstd, inp, weight, bias, N = B*T, C."""
    check_dims("layernorm_forward", B=B, T=T, C=C)
    for name, array, size in (("out", out, B * T * C), ("mean", mean, B * T), ("rstd", rstd, B * T),
                              ("inp", inp, B * T * C), ("weight", weight, C), ("bias", bias, C)):
        check_array("layernorm_forward", name, array, size)
    return (out, mean, rstd, inp, weight, bias, np.int32(B * T), np.int32(C))


def layernorm_forward(out, mean, rstd, inp, weight, bias, B, T, C):
    args = layernorm_arguments(out, mean, rstd, inp, weight, bias, B, T, C)
    if C > WARP_ROW_LIMIT:
        layernorm_wide_rows_kernel((B * T,), (BLOCK_SIZE,), args)
    else:
        rows_per_block = BLOCK_SIZE // 32
        layernorm_forward_kernel((ceil_div(B * T, rows_per_block),), (BLOCK_SIZE,), args)
