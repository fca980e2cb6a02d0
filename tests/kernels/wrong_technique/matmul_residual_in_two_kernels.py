"""A "fused" matmul + residual that is matmul.py's kernel, then residual.py's."""

from gpt2kit.kernel_runtime.device import cupy
from gpt2kit.kernels.matmul import matmul_forward
from gpt2kit.kernels.residual import residual_forward

VARIANT = "matmul_residual"


def matmul_residual_forward(out, inp, weight, bias, residual, B, T, C, OC):
    product = cupy.empty((B, T, OC), cupy.float32)
    matmul_forward(product, inp, weight, bias, B, T, C, OC)
    residual_forward(out, residual, product, B * T * OC)
