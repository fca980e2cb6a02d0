"""Rotary embedding that turns the values too, not only the queries and keys."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import rotary
from tests.kernels.wrong import mutate

FUNCTION = "rotary_forward"

kernel = CudaKernel(mutate(rotary.ROTARY_SOURCE, "if (column >= 2 * C || d >= rotary_dim)", "if (d >= rotary_dim)"),
                    "rotary_forward_kernel")


def rotary_forward(out, inp, positions, sin_cos, B, T, C, NH, rotary_dim):
    rotary.launch(kernel, out, inp, positions, sin_cos, B, T, C, NH, rotary_dim, sin_cos.size // rotary_dim)
