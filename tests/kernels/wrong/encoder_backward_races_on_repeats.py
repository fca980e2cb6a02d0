"""The encoder's backward pass with one thread per (b, t, c) adding to dwte without atomics: positions holding
the same token read the same old value, and all but one of their additions are lost. (dwpe is summed right.)"""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, ceil_div

FUNCTION = "encoder_backward"

SOURCE = r"""
extern "C" __global__ void encoder_wte_racing(float* dwte, const float* dout, const int* inp, long long N, int C) {
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < N) dwte[(long long)inp[idx / C] * C + idx % C] += dout[idx];
}

extern "C" __global__ void encoder_wpe(float* dwpe, const float* dout, int B, long long TC) {
    long long tc = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (tc >= TC) return;
    for (int b = 0; b < B; b++) dwpe[tc] += dout[b * TC + tc];
}
"""
encoder_wte_racing = CudaKernel(SOURCE, "encoder_wte_racing")
encoder_wpe = CudaKernel(SOURCE, "encoder_wpe")


def encoder_backward(dwte, dwpe, dout, inp, B, T, C):
    N = B * T * C
    encoder_wte_racing((ceil_div(N, 256),), (256,), (dwte, dout, inp, np.int64(N), np.int32(C)))
    encoder_wpe((ceil_div(T * C, 256),), (256,), (dwpe, dout, np.int32(B), np.int64(T * C)))
