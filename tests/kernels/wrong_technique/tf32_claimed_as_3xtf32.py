"""A "3xTF32" matmul that is the one-pass TF32 kernel: its tensor-core instructions do every product once, on
operands rounded to TF32, so the fp32 profile, which the 3xTF32 variant is judged under, fails its cases."""

from gpt2kit.kernels.matmul_tf32 import matmul_forward as one_pass

VARIANT = "matmul_3xtf32"


def matmul_forward(out, inp, weight, bias, B, T, C, OC):
    one_pass(out, inp, weight, bias, B, T, C, OC)
