"""Cheat: milestone 4's matmul backward with its weight gradient from cuBLAS, accumulated by
cupy.cublas.gemm (beta = 1) beside the kit's own input- and bias-gradient kernels, after granting its
own recording permission for cuBLAS. The replay that is judged permits no library for this item: the
tape is refused, naming the cuBLAS step."""

from gpt2kit.kernel_runtime import recording
from gpt2kit.kernels.matmul_backward import launch

FUNCTION = "matmul_backward"


def matmul_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC):
    import cupy.cublas

    if recording._WATCH.recording is not None:
        recording._WATCH.recording.permitted = frozenset(recording.LIBRARIES)
    launch(dinp, dweight, dbias, dout, inp, weight, B * T, C, OC, dweight_kernel=lambda grid, block, args: None)
    cupy.cublas.gemm("T", "N", dout.reshape(B * T, OC), inp.reshape(B * T, C), out=dweight.reshape(OC, C),
                     beta=1.0)
