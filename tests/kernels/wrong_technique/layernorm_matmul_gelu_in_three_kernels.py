"""A "fused" layernorm + matmul + GELU that launches layernorm.py's, matmul.py's and gelu.py's
kernels one after the other."""

from gpt2kit.kernel_runtime.device import cupy
from gpt2kit.kernels.gelu import gelu_forward
from gpt2kit.kernels.matmul import matmul_forward
from tests.kernels.wrong_technique.layernorm_matmul_in_two_kernels import normalised

VARIANT = "layernorm_matmul_gelu"


def layernorm_matmul_gelu_forward(out, inp, ln_weight, ln_bias, weight, bias, B, T, C, OC):
    before_gelu = cupy.empty((B, T, OC), cupy.float32)
    matmul_forward(before_gelu, normalised(inp, ln_weight, ln_bias, B, T, C), weight, bias, B, T, C, OC)
    gelu_forward(out, before_gelu, B * T * OC)
