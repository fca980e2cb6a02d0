"""Weight norm's backward pass taking dv as dweight scaled by g / ||v||, as if the norm did not depend on v: the part
of dweight along v, which moves no weight, is kept."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import weight_norm
from gpt2kit.kernels.weight_norm import DEFINES, WEIGHT_NORM_SOURCE
from tests.kernels.wrong import mutate

FUNCTION = "weight_norm_backward"

gradients = CudaKernel(mutate(WEIGHT_NORM_SOURCE, "scale * (dweight[i] - v[i] * projection)", "scale * dweight[i]"),
                       "weight_norm_backward_kernel", defines=DEFINES)


def weight_norm_backward(dg, dv, dweight, g, v, OC, C, K):
    weight_norm.backward(weight_norm.weight_norm_tile_sums_kernel, gradients, dg, dv, dweight, g, v, OC, C, K)
