"""A "TF32" matmul that computes in plain float32 and keeps a tensor-core product where it never runs
(under `if (M < 0)`): the mma instruction is in its compiled code, and the graded cases never execute it.
Written as CuPy teaches, a cupy.RawKernel made at its first call."""

from gpt2kit.kernel_runtime import ceil_div
from gpt2kit.kernels.matmul import matmul_arguments
from tests.kernels.wrong_technique import FP32_WITH_IDLE_TENSOR_CORES

VARIANT = "matmul_tf32"

SOURCE = FP32_WITH_IDLE_TENSOR_CORES + r"""
extern "C" __global__ void matmul_plain_with_mma(float* out, const float* inp, const float* weight, const float* bias,
                                                 int M, int K, int N) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // one output element
    bool idle = IDLE && threadIdx.x < 32 && blockIdx.x == 0;         // one warp, once, products of zeros
    if (M < 0 || idle) {
        float d = tf32_products_of_zeros(1);
        if (M < 0) out[0] = d;
    }
    fp32_output(out, inp, weight, bias, M, K, N, i);
}
"""
_compiled = {}


def launch(out, inp, weight, bias, B, T, C, OC, idle: int) -> None:
    import cupy

    if idle not in _compiled:
        _compiled[idle] = cupy.RawKernel(SOURCE, "matmul_plain_with_mma", options=(f"-DIDLE={idle}",))
    args = matmul_arguments(out, inp, weight, bias, B, T, C, OC)
    _compiled[idle]((ceil_div(B * T * OC, 256),), (256,), args)


def matmul_forward(out, inp, weight, bias, B, T, C, OC):
    launch(out, inp, weight, bias, B, T, C, OC, idle=0)

