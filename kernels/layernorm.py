"""LayerNorm over the channels of every (b, t) row.

    mean = sum(x) / C,  var = sum((x - mean)^2) / C   (biased, as GPT-2)
    rstd = 1 / sqrt(var + 1e-5)
    out  = (x - mean) * rstd * weight + bias

inp and out (B, T, C); weight and bias (C); mean and rstd (B, T) are outputs too
(the backward pass needs them).

One warp per row: each lane walks the row with stride 32, so the warp's loads are
coalesced, and the row's sums are combined with warp shuffles, no shared memory and
no __syncthreads. The row is read three times; after the first pass it comes from cache.

Precision. A row whose mean is large next to its spread (mean 1e3, std 1e-3) loses
everything to rounding if x is summed directly: float32 holds 1e3 only to about
6e-5. So the kernel sums x - shift, with shift = the row's first element, and keeps
the mean as shift + offset: the differences are small and exact, and the variance is
the two-pass sum of squared deviations, never sum(x^2) - mean^2.
"""

import numpy as np

from kernel_runtime import CudaKernel, ceil_div, check_array, check_dims

LAYERNORM_SOURCE = r"""
__device__ float warp_sum(float value) {
    for (int offset = 16; offset > 0; offset /= 2) {
        value += __shfl_xor_sync(0xffffffff, value, offset);
    }
    return value;
}

extern "C" __global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd,
                                                    const float* inp, const float* weight,
                                                    const float* bias, int N, int C) {
    // BEGIN SOLUTION
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (row >= N) return;  // the whole warp leaves together
    const float* x = inp + (long long)row * C;

    float shift = x[0];
    float sum = 0.0f;
    for (int i = lane; i < C; i += 32) sum += x[i] - shift;
    float offset = warp_sum(sum) / C;  // mean - shift

    float squares = 0.0f;
    for (int i = lane; i < C; i += 32) {
        float d = (x[i] - shift) - offset;
        squares += d * d;
    }
    float s = rsqrtf(warp_sum(squares) / C + 1e-5f);

    float* y = out + (long long)row * C;
    for (int i = lane; i < C; i += 32) {
        y[i] = ((x[i] - shift) - offset) * s * weight[i] + bias[i];
    }
    if (lane == 0) {
        mean[row] = shift + offset;
        rstd[row] = s;
    }
    // END SOLUTION
}
"""

layernorm_forward_kernel = CudaKernel(LAYERNORM_SOURCE, "layernorm_forward_kernel")

BLOCK_SIZE = 256  # 8 warps, 8 rows per block


def layernorm_arguments(out, mean, rstd, inp, weight, bias, B, T, C) -> tuple:
    """The checked launch arguments of a layernorm kernel: out, mean, rstd, inp, weight, bias, N = B*T, C."""
    check_dims("layernorm_forward", B=B, T=T, C=C)
    for name, array, size in (("out", out, B * T * C), ("mean", mean, B * T), ("rstd", rstd, B * T),
                              ("inp", inp, B * T * C), ("weight", weight, C), ("bias", bias, C)):
        check_array("layernorm_forward", name, array, size)
    return (out, mean, rstd, inp, weight, bias, np.int32(B * T), np.int32(C))


def layernorm_forward(out, mean, rstd, inp, weight, bias, B, T, C):
    args = layernorm_arguments(out, mean, rstd, inp, weight, bias, B, T, C)
    rows_per_block = BLOCK_SIZE // 32
    layernorm_forward_kernel((ceil_div(B * T, rows_per_block),), (BLOCK_SIZE,), args)
