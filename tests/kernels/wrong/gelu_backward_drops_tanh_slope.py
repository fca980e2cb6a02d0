"""GELU's backward pass that differentiates only 0.5(1 + tanh(u)) as if tanh(u) were constant: the
x * tanh'(u) * u'(x) term of the product rule is lost."""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, ceil_div
from gpt2kit.kernels.gelu_backward import GELU_BACKWARD_SOURCE
from tests.kernels.wrong import mutate

FUNCTION = "gelu_backward"

kernel = CudaKernel(mutate(GELU_BACKWARD_SOURCE, "return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du_dx;",
                           "return 0.5f * (1.0f + t);"), "gelu_backward_kernel")


def gelu_backward(dinp, inp, dout, N):
    kernel((ceil_div(N, 1024),), (256,), (dinp, inp, dout, np.int64(N)))
