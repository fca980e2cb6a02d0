"""Cheat: launches a kernel that does nothing, then computes the product with cupy.matmul (cuBLAS)."""

from tests.kernels.wrong import launch_nothing

FUNCTION = "matmul_forward"


def matmul_forward(out, inp, weight, bias, B, T, C, OC):
    import cupy

    launch_nothing()
    result = cupy.matmul(inp.reshape(B * T, C), weight.reshape(OC, C).T)
    if bias is not None:
        result += bias
    out.reshape(B * T, OC)[...] = result
