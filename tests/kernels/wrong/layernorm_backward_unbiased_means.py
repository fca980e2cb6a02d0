"""LayerNorm's backward pass dividing the row sums of dnorm and dnorm * n by C - 1 instead of C, as if the
forward pass's variance had been the unbiased one (a row of one channel then divides by zero)."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import layernorm_backward as module
from tests.kernels.wrong import mutate

FUNCTION = "layernorm_backward"

kernel = CudaKernel(mutate(module.LAYERNORM_BACKWARD_SOURCE,
                           "row_dnorm_mean = warp_sum(dnorm_sum) / C, row_dnorm_n_mean = warp_sum(dnorm_n_sum) / C",
                           "row_dnorm_mean = warp_sum(dnorm_sum) / (C - 1), "
                           "row_dnorm_n_mean = warp_sum(dnorm_n_sum) / (C - 1)"),
                    "layernorm_backward_registers_kernel", defines=module.DEFINES)


def layernorm_backward(dinp, dweight, dbias, scratch, dout, inp, weight, mean, rstd, B, T, C):
    module.launch(module.rows_kernel_for(C, kernel), module.layernorm_parameter_grads_kernel,
                  dinp, dweight, dbias, scratch, dout, inp, weight, mean, rstd, B, T, C)
