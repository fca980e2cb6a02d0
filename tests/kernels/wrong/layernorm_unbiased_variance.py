"""LayerNorm dividing the squared deviations by C - 1 (torch.var's default) instead of C."""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, ceil_div
from gpt2kit.kernels.layernorm import LAYERNORM_SOURCE
from tests.kernels.wrong import mutate

FUNCTION = "layernorm_forward"

kernel = CudaKernel(mutate(LAYERNORM_SOURCE, "warp_sum(squares) / C", "warp_sum(squares) / (C - 1)"),
                    "layernorm_forward_kernel")


def layernorm_forward(out, mean, rstd, inp, weight, bias, B, T, C):
    kernel((ceil_div(B * T, 8),), (256,), (out, mean, rstd, inp, weight, bias, np.int32(B * T), np.int32(C)))
