"""The residual's backward pass that writes dout into dinp1 instead of adding it: the gradient the residual
stream had gathered from the later blocks is lost."""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, ceil_div
from gpt2kit.kernels.residual_backward import RESIDUAL_BACKWARD_SOURCE
from tests.kernels.wrong import mutate

FUNCTION = "residual_backward"

kernel = CudaKernel(mutate(RESIDUAL_BACKWARD_SOURCE, "make_float4(a.x + g.x, a.y + g.y, a.z + g.z, a.w + g.w)", "g"),
                    "residual_backward_kernel")


def residual_backward(dinp1, dinp2, dout, N):
    kernel((ceil_div(N, 1024),), (256,), (dinp1, dinp2, dout, np.int64(N)))
