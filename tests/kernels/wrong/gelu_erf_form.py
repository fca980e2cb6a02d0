"""GELU in the exact erf form x * Phi(x), not GPT-2's tanh approximation (differs by up to ~5e-4)."""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, ceil_div
from gpt2kit.kernels.gelu import GELU_SOURCE
from tests.kernels.wrong import mutate

FUNCTION = "gelu_forward"

kernel = CudaKernel(mutate(GELU_SOURCE, "0.5f * x * (1.0f + tanhf(GELU_SCALE * (x + cube)))",
                           "0.5f * x * (1.0f + erff(x * 0.70710678f))"), "gelu_forward_kernel")


def gelu_forward(out, inp, N):
    kernel((ceil_div(N, 1024),), (256,), (out, inp, np.int64(N)))
