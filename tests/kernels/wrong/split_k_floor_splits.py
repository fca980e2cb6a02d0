"""A split-K matmul that counts its slices of K rounding down: when K is not a multiple of a
block's span, the last, shorter slice is never summed."""

from gpt2kit.kernels import matmul, matmul_split_k

FUNCTION = "matmul_forward"


def matmul_forward(out, inp, weight, bias, B, T, C, OC):
    if B * T <= matmul.FEW_ROWS:
        matmul.matmul_forward(out, inp, weight, bias, B, T, C, OC)
        return
    span = matmul_split_k.split_span(B * T, C, OC)
    matmul_split_k.launch_slices(matmul.matmul_arguments(out, inp, weight, bias, B, T, C, OC), span,
                                 splits=max(1, C // span))
