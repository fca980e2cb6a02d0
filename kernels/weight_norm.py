"""Weight normalisation along the kernel taps, forward and backward: Wav2Vec2's positional convolution.

Wav2Vec2 does not learn its positional convolution's weight (OC, C, K) directly (C here
is the channels per group, K the taps) but a direction v of the same shape and a
length g (K) per tap, torch's weight_norm with dim=2:

    norm[k]          = sqrt(sum over o and c of v[o, c, k]^2)
    weight[o, c, k]  = g[k] * v[o, c, k] / norm[k]

Each tap k is one column of v seen as a row-major matrix of R = OC * C rows by K
columns, and its norm a sum down that column. From dweight, the gradient of weight,
the backward pass adds to the gradients of g and v:

    along[k]     = sum over o and c of dweight * v / norm[k]     (dweight along the direction)
    dg[k]       += along[k]
    dv[o, c, k] += g[k] / norm[k] * (dweight - v * along[k] / norm[k])

dv is dweight's part orthogonal to v, scaled: moving v along itself changes no weight.

Wav2Vec2 base has R = 768 * 48 = 36,864 rows of K = 128 taps: 128 columns of 36,864
values 512 bytes apart, too few columns for a block each. So the columns are cut into
kernels/group_norm.py's tiles (COLUMN_TILES) of 32 columns by 256 rows, each warp
reading 32 consecutive taps of a row (128 contiguous bytes): 576 blocks here.

* weight_norm_tile_sums_kernel: per tile and column, the sum of v^2 (and, backward, of
  dweight * v) into one slice of a scratch the host function allocates (ceil(R / 256)
  slices of K floats per sum: 73 KB for Wav2Vec2's).
* weight_norm_forward_kernel and weight_norm_backward_kernel: per tile, every block
  first adds its 32 columns' slices in slice order (slice_total), then writes weight
  (forward) or adds to dv (backward) for its rows; the first tile row's blocks also
  add along to dg.

Every sum is taken in an order fixed by R and K alone: the same bits on every run.
The sums of squares are float32, as torch's: a v whose squares leave float32's range
(|v| above 1e18 or all below 1e-18) gives an infinite or zero norm there too. A column
of zeros has no direction: its weight is NaN, as torch's.
"""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, KernelArgumentError, ceil_div, check_array, check_dims
from gpt2kit.kernel_runtime.device import cupy
from gpt2kit.kernels.group_norm import CHUNK, COLUMN_TILES, DEFINES, LANES, MAX_GRID_YZ, THREADS

WEIGHT_NORM_SOURCE = COLUMN_TILES + r"""
// Per tile of v seen as (R, K): the column sums of v^2 and, when dweight is not NULL, of dweight * v, stored as
// arrays 0 and 1 of the tile's slice. Grid (ceil(K / LANES), ceil(R / CHUNK)).
extern "C" __global__ void weight_norm_tile_sums_kernel(float* partials, const float* v, const float* dweight,
                                                        int R, int K) {
    const Tile tile = column_tile(R, K);
    float squares = 0.0f, dots = 0.0f;
    if (tile.inside()) {
        for (int r = tile.warp; r < tile.rows; r += WARPS) {
            float x = v[tile.at(r)];
            squares += x * x;
            if (dweight != nullptr) dots += dweight[tile.at(r)] * x;
        }
    }
    const int sums = dweight != nullptr ? 2 : 1;
    store_tile_total(partials, sums, 0, tile, column_total(squares));
    if (dweight != nullptr) store_tile_total(partials, sums, 1, tile, column_total(dots));
}

// weight = g * v / norm, tile by tile; each block adds its columns' slices of squares (one sum per slice).
extern "C" __global__ void weight_norm_forward_kernel(float* weight, const float* g, const float* v,
                                                      const float* partials, int slices, int R, int K) {
    const Tile tile = column_tile(R, K);
    const float norm = sqrtf(slice_total(partials, slices, K, K));
    if (!tile.inside()) return;
    const float scale = g[tile.column] / norm;
    for (int r = tile.warp; r < tile.rows; r += WARPS) weight[tile.at(r)] = v[tile.at(r)] * scale;
}

// dv += g / norm * (dweight - v * along / norm), tile by tile, and dg += along from the first tile row; each block
// adds its columns' slices of squares and of dweight * v (two sums per slice).
extern "C" __global__ void weight_norm_backward_kernel(float* dg, float* dv, const float* dweight, const float* g,
                                                       const float* v, const float* partials, int slices, int R,
                                                       int K) {
    const Tile tile = column_tile(R, K);
    const float norm = sqrtf(slice_total(partials, slices, 2LL * K, K));
    const float along = slice_total(partials + K, slices, 2LL * K, K) / norm;
    if (!tile.inside()) return;
    if (blockIdx.y == 0 && tile.warp == 0) dg[tile.column] += along;
    const float scale = g[tile.column] / norm, projection = along / norm;
    for (int r = tile.warp; r < tile.rows; r += WARPS) {
        const long long i = tile.at(r);
        dv[i] += scale * (dweight[i] - v[i] * projection);
    }
}
"""

weight_norm_tile_sums_kernel = CudaKernel(WEIGHT_NORM_SOURCE, "weight_norm_tile_sums_kernel", defines=DEFINES)
weight_norm_forward_kernel = CudaKernel(WEIGHT_NORM_SOURCE, "weight_norm_forward_kernel", defines=DEFINES)
weight_norm_backward_kernel = CudaKernel(WEIGHT_NORM_SOURCE, "weight_norm_backward_kernel", defines=DEFINES)


def check_sizes(function, OC, C, K):
    check_dims(function, OC=OC, C=C, K=K)
    if ceil_div(OC * C, CHUNK) > MAX_GRID_YZ:
        raise KernelArgumentError(f"{function}: at most {MAX_GRID_YZ * CHUNK} rows OC * C, got OC={OC}, C={C}")


def tiles(OC, C, K):
    """The tile grid over v seen as (OC * C, K), and its number of slices (tile rows)."""
    grid = (ceil_div(K, LANES), ceil_div(OC * C, CHUNK))
    return grid, grid[1]


def weight_norm_forward(weight, g, v, OC, C, K):
    check_sizes("weight_norm_forward", OC, C, K)
    for name, array, size in (("weight", weight, OC * C * K), ("g", g, K), ("v", v, OC * C * K)):
        check_array("weight_norm_forward", name, array, size)
    forward(weight_norm_tile_sums_kernel, weight_norm_forward_kernel, weight, g, v, OC, C, K)


def forward(tile_sums, normalise, weight, g, v, OC, C, K):
    """The forward kernels' launches (or those of kernels that stand in for them), the squares' slices in a scratch
    from CuPy's memory pool."""
    grid, slices = tiles(OC, C, K)
    partials = cupy.empty(slices * K, dtype=np.float32)
    R, K = np.int32(OC * C), np.int32(K)
    tile_sums(grid, (THREADS,), (partials, v, np.uint64(0), R, K))
    normalise(grid, (THREADS,), (weight, g, v, partials, np.int32(slices), R, K))


def weight_norm_backward(dg, dv, dweight, g, v, OC, C, K):
    check_sizes("weight_norm_backward", OC, C, K)
    for name, array, size in (("dg", dg, K), ("dv", dv, OC * C * K), ("dweight", dweight, OC * C * K),
                              ("g", g, K), ("v", v, OC * C * K)):
        check_array("weight_norm_backward", name, array, size)
    backward(weight_norm_tile_sums_kernel, weight_norm_backward_kernel, dg, dv, dweight, g, v, OC, C, K)


def backward(tile_sums, gradients, dg, dv, dweight, g, v, OC, C, K):
    """The backward kernels' launches (or those of kernels that stand in for them), the two sums' slices in a
    scratch from CuPy's memory pool."""
    grid, slices = tiles(OC, C, K)
    partials = cupy.empty(slices * 2 * K, dtype=np.float32)
    R, K = np.int32(OC * C), np.int32(K)
    tile_sums(grid, (THREADS,), (partials, v, dweight, R, K))
    gradients(grid, (THREADS,), (dg, dv, dweight, g, v, partials, np.int32(slices), R, K))
