"""LayerNorm's backward pass that keeps only the mean's path back to x, dinp += rstd * (dnorm - mean(dnorm)), and
drops rstd's, the - n * mean(dnorm * n) term: as if the variance did not depend on x."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import layernorm_backward as module
from tests.kernels.wrong import mutate

FUNCTION = "layernorm_backward"

kernel = CudaKernel(mutate(module.LAYERNORM_BACKWARD_SOURCE,
                           "s * ((dnorm[k] - row_dnorm_mean) - n[k] * row_dnorm_n_mean)",
                           "s * (dnorm[k] - row_dnorm_mean)"),
                    "layernorm_backward_registers_kernel", defines=module.DEFINES)


def layernorm_backward(dinp, dweight, dbias, scratch, dout, inp, weight, mean, rstd, B, T, C):
    module.launch(module.rows_kernel_for(C, kernel), module.layernorm_parameter_grads_kernel,
                  dinp, dweight, dbias, scratch, dout, inp, weight, mean, rstd, B, T, C)
