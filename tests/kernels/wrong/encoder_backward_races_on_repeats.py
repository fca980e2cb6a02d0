"""The encoder's backward pass with one thread per (b, t, c) adding to dwte without atomics: positions holding
the same token read the same old value, and all but one of their additions are lost."""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, ceil_div
from gpt2kit.kernels.encoder_backward import encoder_backward_wpe_kernel, launch_wpe

FUNCTION = "encoder_backward"

SOURCE = r"""
extern "C" __global__ void encoder_wte_racing(float* dwte, const float* dout, const int* inp, long long N, int C) {
    long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < N) dwte[(long long)inp[idx / C] * C + idx % C] += dout[idx];
}
"""
encoder_wte_racing = CudaKernel(SOURCE, "encoder_wte_racing")


def encoder_backward(dwte, dwpe, dout, inp, B, T, C):
    N = B * T * C
    encoder_wte_racing((ceil_div(N, 256),), (256,), (dwte, dout, inp, np.int64(N), np.int32(C)))
    launch_wpe(encoder_backward_wpe_kernel, dwpe, dout, B, T, C)
