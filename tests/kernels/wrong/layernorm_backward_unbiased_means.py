"""LayerNorm's backward pass dividing the row sums of dnorm and dnorm * n by C - 1 instead of C, as if the
forward pass's variance had been the unbiased one (a row of one channel then divides by zero)."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import layernorm_backward as module
from tests.kernels.wrong import mutate

FUNCTION = "layernorm_backward"

kernel = CudaKernel(mutate(module.LAYERNORM_BACKWARD_SOURCE, "dnorm_mean = sums.x / C, dnorm_n_mean = sums.y / C",
                           "dnorm_mean = sums.x / (C - 1), dnorm_n_mean = sums.y / (C - 1)"),
                    "layernorm_backward_kernel", defines=module.DEFINES)


def layernorm_backward(dinp, dweight, dbias, scratch, dout, inp, weight, mean, rstd, B, T, C):
    module.launch(kernel, module.layernorm_parameter_grads_kernel,
                  dinp, dweight, dbias, scratch, dout, inp, weight, mean, rstd, B, T, C)
