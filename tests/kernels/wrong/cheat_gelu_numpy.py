"""Cheat: launches a kernel that does nothing, then computes GELU with NumPy on the host."""

import numpy as np

from tests.kernels.wrong import launch_nothing

FUNCTION = "gelu_forward"


def gelu_forward(out, inp, N):
    launch_nothing()
    x = inp.get().astype(np.float64)
    out.set((0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))).astype(np.float32))
