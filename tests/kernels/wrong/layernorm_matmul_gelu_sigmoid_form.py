"""GELU in the epilogue as x * sigmoid(1.702 x), a common approximation that is not GPT-2's tanh
form: within 0.02 of it, far outside float32's rounding."""

from gpt2kit.kernels import fused_gemv
from gpt2kit.kernel_runtime import CudaKernel
from tests.kernels.wrong import mutate

FUNCTION = "layernorm_matmul_gelu_forward"

SOURCE = mutate(fused_gemv.FUSED_GEMV_SOURCE, "return 0.5f * x * (1.0f + tanhf(s * (x + 0.044715f * x * x * x)));",
                "return x / (1.0f + expf(-1.702f * x));")
kernel = CudaKernel(SOURCE, "fused_gemv_kernel", defines=fused_gemv.layernorm_matmul_gelu_kernel.defines)


def layernorm_matmul_gelu_forward(out, inp, ln_weight, ln_bias, weight, bias, B, T, C, OC):
    fused_gemv.launch_fused(kernel, FUNCTION, out, inp, ln_weight, ln_bias, weight, bias, None, B, T, C, OC)
