"""LayerNorm's backward pass (rows held in registers) that writes dinp instead of adding to it: the residual
stream's gradient that the later blocks had gathered there is lost."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import layernorm_backward as module
from tests.kernels.wrong import mutate

FUNCTION = "layernorm_backward"

kernel = CudaKernel(mutate(module.LAYERNORM_BACKWARD_SOURCE, "= dx[k] + s * ", "= s * "),
                    "layernorm_backward_registers_kernel", defines=module.DEFINES)


def layernorm_backward(dinp, dweight, dbias, scratch, dout, inp, weight, mean, rstd, B, T, C):
    module.launch(module.rows_kernel_for(C, kernel), module.layernorm_parameter_grads_kernel,
                  dinp, dweight, dbias, scratch, dout, inp, weight, mean, rstd, B, T, C)
