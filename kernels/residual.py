"""Residual connection: out = inp1 + inp2, elementwise over N floats.

GPT-2 adds each block's attention and MLP output back onto the stream that entered
it. Two reads and one write per element, so the only question is bandwidth.

Each thread handles 4 consecutive elements with one 16-byte load per input and one
16-byte store, which keeps four times as many bytes in flight per thread as plain
float accesses (a memory system as fast as the H200's needs a lot in flight). The
last partial group, and arrays not 16-byte aligned (a view starting mid-allocation),
take a scalar path. out may be the same array as inp1 or inp2.
"""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, ceil_div, check_array, check_dims

RESIDUAL_SOURCE = r"""
extern "C" __global__ void residual_forward_kernel(float* out, const float* inp1,
                                                   const float* inp2, long long N) {
    // BEGIN SOLUTION
    long long i = 4 * ((long long)blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= N) return;
    bool aligned = (((size_t)out | (size_t)inp1 | (size_t)inp2) % 16) == 0;
    if (aligned && i + 4 <= N) {
        float4 a = *(const float4*)(inp1 + i);
        float4 b = *(const float4*)(inp2 + i);
        *(float4*)(out + i) = make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
    } else {
        for (long long j = i; j < N && j < i + 4; j++) out[j] = inp1[j] + inp2[j];
    }
    // END SOLUTION
}
"""

residual_forward_kernel = CudaKernel(RESIDUAL_SOURCE, "residual_forward_kernel")

BLOCK_SIZE = 256
PER_THREAD = 4


def residual_forward(out, inp1, inp2, N):
    check_dims("residual_forward", N=N)
    for name, array in (("out", out), ("inp1", inp1), ("inp2", inp2)):
        check_array("residual_forward", name, array, N)
    grid = ceil_div(N, BLOCK_SIZE * PER_THREAD)
    residual_forward_kernel((grid,), (BLOCK_SIZE,), (out, inp1, inp2, np.int64(N)))
