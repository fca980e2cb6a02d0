"""Weight norm dividing by the sum of squares instead of its square root: every tap's weight scaled by 1 / ||v||
too many."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import weight_norm
from gpt2kit.kernels.weight_norm import DEFINES, WEIGHT_NORM_SOURCE
from tests.kernels.wrong import mutate

FUNCTION = "weight_norm_forward"

normalise = CudaKernel(mutate(WEIGHT_NORM_SOURCE, "sqrtf(slice_total(partials, slices, K, K))",
                              "slice_total(partials, slices, K, K)"), "weight_norm_forward_kernel", defines=DEFINES)


def weight_norm_forward(weight, g, v, OC, C, K):
    weight_norm.forward(weight_norm.weight_norm_tile_sums_kernel, normalise, weight, g, v, OC, C, K)
