"""GroupNorm's backward pass with dinp = rstd * dout * weight, as if mean and rstd were constants: the two group means
through which every value moves every other value's n are lost."""

from gpt2kit.kernels import group_norm
from gpt2kit.kernels.group_norm import GROUP_NORM_SOURCE, group_norm_kernel
from tests.kernels.wrong import mutate

FUNCTION = "group_norm_backward"

inputs = group_norm_kernel("group_norm_backward_inputs_kernel",
                           mutate(GROUP_NORM_SOURCE, "s * ((dout[tile.at(t)] * w - dnorm_mean) - n * dnorm_n_mean)",
                                  "s * dout[tile.at(t)] * w"))


def group_norm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, frames, B, T, C, G):
    tile_sums, group_means, parameter_grads, _ = group_norm.BACKWARD_KERNELS
    group_norm.backward((tile_sums, group_means, parameter_grads, inputs), dinp, dweight, dbias, dout, inp, weight,
                        mean, rstd, frames, B, T, C, G)
