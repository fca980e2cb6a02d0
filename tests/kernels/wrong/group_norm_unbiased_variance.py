"""GroupNorm dividing the squared deviations by count - 1 (torch.var's default) instead of the group's count."""

from gpt2kit.kernels import group_norm
from gpt2kit.kernels.group_norm import GROUP_NORM_SOURCE, group_norm_kernel
from tests.kernels.wrong import mutate

FUNCTION = "group_norm_forward"

statistics = group_norm_kernel("group_norm_statistics_kernel",
                               mutate(GROUP_NORM_SOURCE, "block_sum(squares, warp_sums) / count",
                                      "block_sum(squares, warp_sums) / (count - 1.0f)"))


def group_norm_forward(out, mean, rstd, inp, weight, bias, frames, B, T, C, G):
    tile_statistics, _, normalise = group_norm.FORWARD_KERNELS
    group_norm.forward((tile_statistics, statistics, normalise), out, mean, rstd, inp, weight, bias, frames, B, T,
                       C, G)
