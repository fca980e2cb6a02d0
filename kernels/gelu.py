"""GELU activation in GPT-2's tanh form, elementwise over N floats.

    gelu(x) = 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))

GPT-2 was trained with this approximation, not the exact x * Phi(x) (erf) form; the
two differ by up to about 5e-4, enough to fail the tests, so the form matters.
tanhf is the accurate libdevice version (no fast-math), a few ulp at most.

One read and one write per element. As in residual.py, each thread handles 4
consecutive elements through 16-byte loads and stores, with a scalar path for the
tail and for unaligned arrays. out may be the same array as inp.
"""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, ceil_div, check_array, check_dims

GELU_SOURCE = r"""
#define GELU_SCALE 0.7978845608028654f  // sqrt(2 / pi)

__device__ float gelu(float x) {
    float cube = 0.044715f * x * x * x;
    return 0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + cube)));
}

extern "C" __global__ void gelu_forward_kernel(float* out, const float* inp, long long N) {
    // BEGIN SOLUTION
    long long i = 4 * ((long long)blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= N) return;
    bool aligned = (((size_t)out | (size_t)inp) % 16) == 0;
    if (aligned && i + 4 <= N) {
        float4 x = *(const float4*)(inp + i);
        *(float4*)(out + i) = make_float4(gelu(x.x), gelu(x.y), gelu(x.z), gelu(x.w));
    } else {
        for (long long j = i; j < N && j < i + 4; j++) out[j] = gelu(inp[j]);
    }
    // END SOLUTION
}
"""

gelu_forward_kernel = CudaKernel(GELU_SOURCE, "gelu_forward_kernel")

BLOCK_SIZE = 256
PER_THREAD = 4


def gelu_forward(out, inp, N):
    check_dims("gelu_forward", N=N)
    check_array("gelu_forward", "out", out, N)
    check_array("gelu_forward", "inp", inp, N)
    grid = ceil_div(N, BLOCK_SIZE * PER_THREAD)
    gelu_forward_kernel((grid,), (BLOCK_SIZE,), (out, inp, np.int64(N)))
