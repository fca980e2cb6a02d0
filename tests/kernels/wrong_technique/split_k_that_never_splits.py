"""A "split-K" matmul that is matmul.py's, one block per tile walking the whole of K."""

from gpt2kit.kernels.matmul import matmul_forward as tiled

VARIANT = "matmul_split_k"


def matmul_forward(out, inp, weight, bias, B, T, C, OC):
    tiled(out, inp, weight, bias, B, T, C, OC)
