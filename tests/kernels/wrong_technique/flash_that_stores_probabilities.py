"""A "flash" attention that is attention.py's three kernels over a T x T scratch of its own, plus a
kernel for the log-sum-exp: right, but every probability goes through memory."""

import math

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, ceil_div
from gpt2kit.kernel_runtime.device import cupy
from gpt2kit.kernels.attention import THREADS, TILE, attention_scores_kernel, attention_values_kernel, softmax_forward

VARIANT = "attention_flash"

SOURCE = r"""
// lse of row (n, t) of scores (N, T, T): log of the sum of exp(scale * s) over its first t + 1 entries
extern "C" __global__ void row_log_sum_exp(float* lse, const float* scores, float scale, int rows, int T) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= rows) return;
    int t = row % T;
    const float* s = scores + (long long)row * T;
    float top = __int_as_float(0xff800000), sum = 0.0f;  // -inf
    for (int j = 0; j <= t; j++) top = fmaxf(top, scale * s[j]);
    for (int j = 0; j <= t; j++) sum += expf(scale * s[j] - top);
    lse[row] = top + logf(sum);
}
"""
row_log_sum_exp = CudaKernel(SOURCE, "row_log_sum_exp")


def flash_attention_forward(out, lse, inp, B, T, C, NH):
    scores = cupy.empty((B * NH, T, T), np.float32)
    tiles, scale = ceil_div(T, TILE), 1.0 / math.sqrt(C // NH)
    sizes = (np.int32(T), np.int32(C), np.int32(NH))
    attention_scores_kernel((tiles, tiles, B * NH), (THREADS,), (scores, inp, *sizes))
    row_log_sum_exp((ceil_div(B * NH * T, 128),), (128,), (lse, scores, np.float32(scale), np.int32(B * NH * T),
                                                           np.int32(T)))
    softmax_forward(scores, scores, scale, B * NH, T)
    attention_values_kernel((ceil_div(C // NH, TILE), tiles, B * NH), (THREADS,), (out, scores, inp, *sizes))
