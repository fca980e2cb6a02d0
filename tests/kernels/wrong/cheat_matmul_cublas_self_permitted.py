"""Cheat: grants its own recording permission for cuBLAS, launches a kernel that does nothing, then computes
the product with cupy.cublas.gemm. The recording in its own process tapes the call, but the replay that is
judged permits cuBLAS only where the item does (milestone 2's cuBLAS variant), so the tape is refused."""

from gpt2kit.kernel_runtime import recording
from tests.kernels.wrong import launch_nothing

FUNCTION = "matmul_forward"


def matmul_forward(out, inp, weight, bias, B, T, C, OC):
    import cupy.cublas

    if recording._WATCH.recording is not None:
        recording._WATCH.recording.permitted = frozenset(recording.LIBRARIES)
    launch_nothing()
    product = out.reshape(B * T, OC)
    cupy.cublas.gemm("N", "T", inp.reshape(B * T, C), weight.reshape(OC, C), out=product)
    if bias is not None:  # every row += bias, as a rank-one update
        cupy.cublas.ger(1.0, cupy.ones(B * T, dtype=cupy.float32), bias, product)
