"""GroupNorm whose output takes channel c's statistics from group c % G instead of c / (C / G): groups of every G-th
channel, where torch's (and the statistics here) are C / G consecutive channels. Right when G = 1 or G = C."""

from gpt2kit.kernels import group_norm
from gpt2kit.kernels.group_norm import GROUP_NORM_SOURCE, group_norm_kernel
from tests.kernels.wrong import mutate

FUNCTION = "group_norm_forward"

normalise = group_norm_kernel("group_norm_normalise_kernel",
                              mutate(GROUP_NORM_SOURCE, "tile.column / (C / G)", "tile.column % G"))


def group_norm_forward(out, mean, rstd, inp, weight, bias, frames, B, T, C, G):
    tile_statistics, statistics, _ = group_norm.FORWARD_KERNELS
    group_norm.forward((tile_statistics, statistics, normalise), out, mean, rstd, inp, weight, bias, frames, B, T,
                       C, G)
