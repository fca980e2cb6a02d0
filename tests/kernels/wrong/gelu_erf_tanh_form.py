"""The exact GELU computed with GPT-2's tanh approximation instead (kernels/gelu.py's form): off by up to ~5e-4,
and by far more, relatively, in the left tail."""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, ceil_div
from gpt2kit.kernels.gelu_erf import GELU_ERF_SOURCE
from tests.kernels.wrong import mutate

FUNCTION = "gelu_erf_forward"

kernel = CudaKernel(mutate(GELU_ERF_SOURCE, "return x * normal_cdf(x);",
                           "return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));"),
                    "gelu_erf_forward_kernel")


def gelu_erf_forward(out, inp, N):
    kernel((ceil_div(N, 1024),), (256,), (out, inp, np.int64(N)))
