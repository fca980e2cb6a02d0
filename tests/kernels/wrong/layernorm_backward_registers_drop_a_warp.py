"""LayerNorm's backward pass (rows held in registers) whose block adds up its warps' column sums without the last
warp's: dweight and dbias miss every WARPS-th row of a block (right only while a block has fewer rows than warps)."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import layernorm_backward as module
from tests.kernels.wrong import mutate

FUNCTION = "layernorm_backward"

kernel = CudaKernel(mutate(module.LAYERNORM_BACKWARD_SOURCE, "w < WARPS; w++", "w < WARPS - 1; w++"),
                    "layernorm_backward_registers_kernel", defines=module.DEFINES)


def layernorm_backward(dinp, dweight, dbias, scratch, dout, inp, weight, mean, rstd, B, T, C):
    module.launch(module.rows_kernel_for(C, kernel), module.layernorm_parameter_grads_kernel,
                  dinp, dweight, dbias, scratch, dout, inp, weight, mean, rstd, B, T, C)
