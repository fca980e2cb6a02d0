"""GELU's backward pass in GPT-2's tanh form: dinp = gelu'(inp) * dout, elementwise over N floats.

    gelu(x)  = 0.5 * x * (1 + tanh(u)),   u = sqrt(2 / pi) * (x + 0.044715 * x^3)
    gelu'(x) = 0.5 * (1 + tanh(u)) + 0.5 * x * (1 - tanh(u)^2) * sqrt(2 / pi) * (1 + 3 * 0.044715 * x^2)

The forward pass keeps its input (the MLP's hidden layer before GELU), so the slope
is recomputed here rather than stored: one more tanhf per element costs less than
another N floats of memory traffic. dinp is written, not added to (an activation's
gradient; see kernels/layernorm_backward.py for the one that adds), and may be the
same array as dout, as llm.c runs it in place.

Bandwidth-bound like the forward pass: 4 consecutive elements per thread through
16-byte loads and stores, a scalar path for the tail and for unaligned arrays.
"""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, ceil_div, check_array, check_dims

GELU_BACKWARD_SOURCE = r"""
#define GELU_SCALE 0.7978845608028654f  // sqrt(2 / pi)

__device__ float gelu_slope(float x) {
    float u = GELU_SCALE * (x + 0.044715f * x * x * x);
    float t = tanhf(u);
    float du_dx = GELU_SCALE * (1.0f + 3.0f * 0.044715f * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du_dx;
}

extern "C" __global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, long long N) {
    // BEGIN SOLUTION
    long long i = 4 * ((long long)blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= N) return;
    bool aligned = (((size_t)dinp | (size_t)inp | (size_t)dout) % 16) == 0;
    if (aligned && i + 4 <= N) {
        float4 x = *(const float4*)(inp + i);
        float4 g = *(const float4*)(dout + i);
        *(float4*)(dinp + i) = make_float4(gelu_slope(x.x) * g.x, gelu_slope(x.y) * g.y, gelu_slope(x.z) * g.z,
                                           gelu_slope(x.w) * g.w);
    } else {
        for (long long j = i; j < N && j < i + 4; j++) dinp[j] = gelu_slope(inp[j]) * dout[j];
    }
    // END SOLUTION
}
"""

gelu_backward_kernel = CudaKernel(GELU_BACKWARD_SOURCE, "gelu_backward_kernel")

BLOCK_SIZE = 256
PER_THREAD = 4


def gelu_backward(dinp, inp, dout, N):
    check_dims("gelu_backward", N=N)
    for name, array in (("dinp", dinp), ("inp", inp), ("dout", dout)):
        check_array("gelu_backward", name, array, N)
    grid = ceil_div(N, BLOCK_SIZE * PER_THREAD)
    gelu_backward_kernel((grid,), (BLOCK_SIZE,), (dinp, inp, dout, np.int64(N)))
