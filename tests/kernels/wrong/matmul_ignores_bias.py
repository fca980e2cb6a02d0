"""MatMul that never adds the bias."""

from gpt2kit.kernels.matmul import matmul_forward as solution

FUNCTION = "matmul_forward"


def matmul_forward(out, inp, weight, bias, B, T, C, OC):
    solution(out, inp, weight, None, B, T, C, OC)
