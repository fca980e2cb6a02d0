"""Residual launched with a grid of one block: only the first 1024 elements are written."""

import numpy as np

from gpt2kit.kernels.residual import residual_forward_kernel

FUNCTION = "residual_forward"


def residual_forward(out, inp1, inp2, N):
    residual_forward_kernel((1,), (256,), (out, inp1, inp2, np.int64(N)))
