"""Weight norm's backward pass writing dv instead of adding to it: the gradient gathered there before is lost."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import weight_norm
from gpt2kit.kernels.weight_norm import DEFINES, WEIGHT_NORM_SOURCE
from tests.kernels.wrong import mutate

FUNCTION = "weight_norm_backward"

gradients = CudaKernel(mutate(WEIGHT_NORM_SOURCE, "dv[i] += ", "dv[i] = "), "weight_norm_backward_kernel",
                       defines=DEFINES)


def weight_norm_backward(dg, dv, dweight, g, v, OC, C, K):
    weight_norm.backward(weight_norm.weight_norm_tile_sums_kernel, gradients, dg, dv, dweight, g, v, OC, C, K)
