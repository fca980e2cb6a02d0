"""The residual connection's backward pass: dinp1 += dout and dinp2 += dout, elementwise over N floats.

out = inp1 + inp2 hands its gradient unchanged to both inputs. Both are added to,
not written: in GPT-2 one input is the residual stream, whose gradient also gathers
the block's branch, and the other is the branch's output. Three reads and two writes
per element: bandwidth alone. 4 consecutive elements per thread through 16-byte
accesses, a scalar path for the tail and for unaligned arrays.
"""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, ceil_div, check_array, check_dims

RESIDUAL_BACKWARD_SOURCE = r"""
extern "C" __global__ void residual_backward_kernel(float* dinp1, float* dinp2, const float* dout, long long N) {
    // BEGIN SOLUTION
    long long i = 4 * ((long long)blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= N) return;
    bool aligned = (((size_t)dinp1 | (size_t)dinp2 | (size_t)dout) % 16) == 0;
    if (aligned && i + 4 <= N) {
        float4 g = *(const float4*)(dout + i);
        float4 a = *(float4*)(dinp1 + i);
        float4 b = *(float4*)(dinp2 + i);
        *(float4*)(dinp1 + i) = make_float4(a.x + g.x, a.y + g.y, a.z + g.z, a.w + g.w);
        *(float4*)(dinp2 + i) = make_float4(b.x + g.x, b.y + g.y, b.z + g.z, b.w + g.w);
    } else {
        for (long long j = i; j < N && j < i + 4; j++) {
            dinp1[j] += dout[j];
            dinp2[j] += dout[j];
        }
    }
    // END SOLUTION
}
"""

residual_backward_kernel = CudaKernel(RESIDUAL_BACKWARD_SOURCE, "residual_backward_kernel")

BLOCK_SIZE = 256
PER_THREAD = 4


def residual_backward(dinp1, dinp2, dout, N):
    check_dims("residual_backward", N=N)
    for name, array in (("dinp1", dinp1), ("dinp2", dinp2), ("dout", dout)):
        check_array("residual_backward", name, array, N)
    grid = ceil_div(N, BLOCK_SIZE * PER_THREAD)
    residual_backward_kernel((grid,), (BLOCK_SIZE,), (dinp1, dinp2, dout, np.int64(N)))
