"""LayerNorm with var = E[x^2] - E[x]^2 in one pass: fine for small means, garbage for mean 1e3."""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, ceil_div

FUNCTION = "layernorm_forward"

SOURCE = r"""
extern "C" __global__ void layernorm_one_pass(float* out, float* mean, float* rstd, const float* inp,
                                              const float* weight, const float* bias, int N, int C) {
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= N) return;
    const float* x = inp + row * C;
    float sum = 0.0f, sum_squares = 0.0f;
    for (int i = 0; i < C; i++) {
        sum += x[i];
        sum_squares += x[i] * x[i];
    }
    float m = sum / C;
    float s = rsqrtf(sum_squares / C - m * m + 1e-5f);
    for (int i = 0; i < C; i++) out[row * C + i] = (x[i] - m) * s * weight[i] + bias[i];
    mean[row] = m;
    rstd[row] = s;
}
"""
layernorm_one_pass = CudaKernel(SOURCE, "layernorm_one_pass")


def layernorm_forward(out, mean, rstd, inp, weight, bias, B, T, C):
    layernorm_one_pass((ceil_div(B * T, 64),), (64,),
                       (out, mean, rstd, inp, weight, bias, np.int32(B * T), np.int32(C)))
