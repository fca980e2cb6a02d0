"""The exact GELU and its backward pass, elementwise over N floats: Wav2Vec2's activation.

    gelu_erf(x)  = x * Phi(x),            Phi(x) = 0.5 * erfc(-x / sqrt(2))
    gelu_erf'(x) = Phi(x) + x * phi(x),   phi(x) = exp(-x^2 / 2) / sqrt(2 pi)

Phi is the standard normal distribution function, phi its density. GPT-2 uses the
tanh approximation instead (kernels/gelu.py); Wav2Vec2 was trained with this one
(torch's default, transformers' "gelu"), and the two differ by up to about 5e-4.
Phi comes from erfcf, not from 1 + erff: for x far below 0, 1 + erf(x / sqrt 2) is a
difference of two numbers near 1 and keeps none of Phi's digits, while erfc(|x| /
sqrt 2) keeps them all until it falls below float32's range (x < -13 or so).

gelu_erf_forward writes out = gelu_erf(inp); out may be the same array as inp.
gelu_erf_backward writes dinp = gelu_erf'(inp) * dout, the slope recomputed from the
forward pass's input (as kernels/gelu_backward.py does); dinp may be the same array
as dout.

Both are one elementwise map (map_four): each thread handles 4 consecutive elements
through 16-byte loads and stores, with a scalar path for the tail and for arrays
that are not 16-byte aligned.
"""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, ceil_div, check_array, check_dims

GELU_ERF_SOURCE = r"""
#define INV_SQRT2 0.70710678118654752f      // 1 / sqrt(2)
#define INV_SQRT_2PI 0.39894228040143268f   // 1 / sqrt(2 pi)

__device__ float normal_cdf(float x) { return 0.5f * erfcf(-x * INV_SQRT2); }

// gelu_erf(x); the second operand is unused (the forward pass has one input)
__device__ float gelu_erf(float x, float) { return x * normal_cdf(x); }

// gelu_erf'(x) * dout
__device__ float gelu_erf_gradient(float x, float dout) {
    float density = INV_SQRT_2PI * expf(-0.5f * x * x);
    return (normal_cdf(x) + x * density) * dout;
}

// out[i] = op(a[i], b[i]) for i < N (b nullptr: op gets 0), 4 consecutive elements per thread. Each thread reads
// its elements before writing them, so out may be a or b.
template <float (*op)(float, float)>
__device__ void map_four(float* out, const float* a, const float* b, long long N) {
    long long i = 4 * ((long long)blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= N) return;
    bool aligned = (((size_t)out | (size_t)a | (size_t)b) % 16) == 0;
    if (aligned && i + 4 <= N) {
        float4 x = *(const float4*)(a + i);
        float4 y = b != nullptr ? *(const float4*)(b + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        *(float4*)(out + i) = make_float4(op(x.x, y.x), op(x.y, y.y), op(x.z, y.z), op(x.w, y.w));
    } else {
        for (long long j = i; j < N && j < i + 4; j++) out[j] = op(a[j], b != nullptr ? b[j] : 0.0f);
    }
}

extern "C" __global__ void gelu_erf_forward_kernel(float* out, const float* inp, long long N) {
    map_four<gelu_erf>(out, inp, nullptr, N);
}

extern "C" __global__ void gelu_erf_backward_kernel(float* dinp, const float* inp, const float* dout, long long N) {
    map_four<gelu_erf_gradient>(dinp, inp, dout, N);
}
"""

gelu_erf_forward_kernel = CudaKernel(GELU_ERF_SOURCE, "gelu_erf_forward_kernel")
gelu_erf_backward_kernel = CudaKernel(GELU_ERF_SOURCE, "gelu_erf_backward_kernel")

BLOCK_SIZE = 256
PER_THREAD = 4


def gelu_erf_forward(out, inp, N):
    check_dims("gelu_erf_forward", N=N)
    for name, array in (("out", out), ("inp", inp)):
        check_array("gelu_erf_forward", name, array, N)
    gelu_erf_forward_kernel((ceil_div(N, BLOCK_SIZE * PER_THREAD),), (BLOCK_SIZE,), (out, inp, np.int64(N)))


def gelu_erf_backward(dinp, inp, dout, N):
    check_dims("gelu_erf_backward", N=N)
    for name, array in (("dinp", dinp), ("inp", inp), ("dout", dout)):
        check_array("gelu_erf_backward", name, array, N)
    gelu_erf_backward_kernel((ceil_div(N, BLOCK_SIZE * PER_THREAD),), (BLOCK_SIZE,),
                             (dinp, inp, dout, np.int64(N)))
