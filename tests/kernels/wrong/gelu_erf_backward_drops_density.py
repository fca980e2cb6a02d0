"""The exact GELU's backward pass with the slope Phi(x) alone: x * Phi(x) differentiated as if Phi were constant,
the product rule's x * phi(x) lost."""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, ceil_div
from gpt2kit.kernels.gelu_erf import GELU_ERF_SOURCE
from tests.kernels.wrong import mutate

FUNCTION = "gelu_erf_backward"

kernel = CudaKernel(mutate(GELU_ERF_SOURCE, "return (normal_cdf(x) + x * density) * dout;",
                           "return normal_cdf(x) * dout;"), "gelu_erf_backward_kernel")


def gelu_erf_backward(dinp, inp, dout, N):
    kernel((ceil_div(N, 1024),), (256,), (dinp, inp, dout, np.int64(N)))
