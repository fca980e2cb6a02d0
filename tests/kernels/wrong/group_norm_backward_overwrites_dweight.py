"""GroupNorm's backward pass writing its sum into dweight instead of adding it: the gradient gathered there before
(another micro-batch's) is lost."""

from gpt2kit.kernels import group_norm
from gpt2kit.kernels.group_norm import GROUP_NORM_SOURCE, group_norm_kernel
from tests.kernels.wrong import mutate

FUNCTION = "group_norm_backward"

parameter_grads = group_norm_kernel("group_norm_parameter_grads_kernel",
                                    mutate(GROUP_NORM_SOURCE, "dweight[column] += dweight_sum;",
                                           "dweight[column] = dweight_sum;"))


def group_norm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, frames, B, T, C, G):
    tile_sums, group_means, _, inputs = group_norm.BACKWARD_KERNELS
    group_norm.backward((tile_sums, group_means, parameter_grads, inputs), dinp, dweight, dbias, dout, inp, weight,
                        mean, rstd, frames, B, T, C, G)
