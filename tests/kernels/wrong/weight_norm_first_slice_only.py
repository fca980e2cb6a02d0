"""Weight norm whose norms add only the first tile row's slice: right while OC * C fits one tile of 256 rows, too
small a norm past that."""

import numpy as np

from gpt2kit.kernels import weight_norm

FUNCTION = "weight_norm_forward"


def first_slice_normalise(grid, block, args):
    weight, g, v, partials, _, R, K = args
    weight_norm.weight_norm_forward_kernel(grid, block, (weight, g, v, partials, np.int32(1), R, K))


def weight_norm_forward(weight, g, v, OC, C, K):
    weight_norm.forward(weight_norm.weight_norm_tile_sums_kernel, first_slice_normalise, weight, g, v, OC, C, K)
