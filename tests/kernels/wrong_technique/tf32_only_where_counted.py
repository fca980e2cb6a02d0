"""A "TF32" matmul that asks which build it is in: where CuPy's headers are on the include path (the build a
student's process runs) it is plain float32; where they are not, every thread also issues tensor-core products,
enough of them to count for the whole product. The trusted build is one: the replay that is judged, the PTX
the technique check reads and the instrumented count all have CuPy's headers, so none of them sees a tensor-core
instruction. Written as CuPy teaches, a cupy.RawKernel made at its first call."""

from gpt2kit.kernel_runtime import ceil_div
from gpt2kit.kernels.matmul import matmul_arguments
from tests.kernels.wrong_technique import FP32_WITH_IDLE_TENSOR_CORES

VARIANT = "matmul_tf32"

SOURCE = FP32_WITH_IDLE_TENSOR_CORES + r"""
extern "C" __global__ void matmul_plain_unless_counted(float* out, const float* inp, const float* weight,
                                                       const float* bias, int M, int K, int N) {
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;  // one output element
#if !__has_include(<cupy/complex.cuh>)
    float d = tf32_products_of_zeros(K / 8);  // a warp's m16n8k8 per 8 of K: 4x each output's multiply-adds
    if (M < 0) out[0] = d;
#endif
    fp32_output(out, inp, weight, bias, M, K, N, i);
}
"""
KERNEL = {}


def matmul_forward(out, inp, weight, bias, B, T, C, OC):
    import cupy

    if not KERNEL:
        KERNEL["k"] = cupy.RawKernel(SOURCE, "matmul_plain_unless_counted")
    args = matmul_arguments(out, inp, weight, bias, B, T, C, OC)
    KERNEL["k"]((ceil_div(B * T * OC, 256),), (256,), args)
