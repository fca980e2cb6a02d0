"""MatMul launched with one block: only the first 128 x 128 tile of out is computed."""

import numpy as np

from gpt2kit.kernels.matmul import matmul_forward_kernel

FUNCTION = "matmul_forward"


def matmul_forward(out, inp, weight, bias, B, T, C, OC):
    bias_pointer = bias if bias is not None else np.uint64(0)
    matmul_forward_kernel((1, 1), (256,), (out, inp, weight, bias_pointer, np.int32(B * T), np.int32(C), np.int32(OC)))
