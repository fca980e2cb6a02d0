"""LayerNorm's backward pass that keeps only the mean's path back to x, dinp += rstd * (dnorm - mean(dnorm)), and
drops rstd's, the - n * mean(dnorm * n) term: as if the variance did not depend on x."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import layernorm_backward as module
from tests.kernels.wrong import mutate

FUNCTION = "layernorm_backward"

kernel = CudaKernel(mutate(module.LAYERNORM_BACKWARD_SOURCE, "s * ((dnorm - dnorm_mean) - n * dnorm_n_mean)",
                           "s * (dnorm - dnorm_mean)"), "layernorm_backward_kernel", defines=module.DEFINES)


def layernorm_backward(dinp, dweight, dbias, scratch, dout, inp, weight, mean, rstd, B, T, C):
    module.launch(kernel, module.layernorm_parameter_grads_kernel,
                  dinp, dweight, dbias, scratch, dout, inp, weight, mean, rstd, B, T, C)
