"""A "tiled" matmul that is one thread per output reading global memory: right, but no shared-memory tile."""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, ceil_div
from gpt2kit.kernels.matmul import matmul_arguments

VARIANT = "matmul_tiled"

SOURCE = r"""
extern "C" __global__ void matmul_one_output_per_thread(float* out, const float* inp, const float* weight,
                                                        const float* bias, int M, int K, int N) {
    int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y;
    if (n >= N) return;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) acc += inp[(long long)m * K + k] * weight[(long long)n * K + k];
    out[(long long)m * N + n] = acc + (bias != nullptr ? bias[n] : 0.0f);
}
"""
matmul_one_output_per_thread = CudaKernel(SOURCE, "matmul_one_output_per_thread")


def matmul_forward(out, inp, weight, bias, B, T, C, OC):
    args = matmul_arguments(out, inp, weight, bias, B, T, C, OC)
    matmul_one_output_per_thread((ceil_div(OC, 128), int(np.int32(B * T))), (128,), args)
