"""LayerNorm's backward pass (rows held in registers) whose warps hand their column sums down one round short:
warp 1's sums, which by then hold warps 1, 3, 5 and 7's rows, never reach warp 0, so dweight and dbias miss those
rows (right only while a block has one row)."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import layernorm_backward as module
from tests.kernels.wrong import mutate

FUNCTION = "layernorm_backward"

kernel = CudaKernel(mutate(module.LAYERNORM_BACKWARD_SOURCE, "half > 0; half /= 2", "half > 1; half /= 2"),
                    "layernorm_backward_registers_kernel", defines=module.DEFINES)


def layernorm_backward(dinp, dweight, dbias, scratch, dout, inp, weight, mean, rstd, B, T, C):
    module.launch(module.rows_kernel_for(C, kernel), module.layernorm_parameter_grads_kernel,
                  dinp, dweight, dbias, scratch, dout, inp, weight, mean, rstd, B, T, C)
