"""GroupNorm on channel-last frames, forward and backward: Wav2Vec2's first feature-encoder layer.

inp and out are (B, T, C), frames of C channels; the C channels fall into G groups of
C / G consecutive channels, and each (utterance b, group g) is normalised by the
statistics of its first frames[b] frames' F * C / G values (biased variance, eps 1e-5,
as torch.nn.GroupNorm; frames (B,) int32 on the device, F = frames[b] in 1..T):

    mean[b, g] = the values' mean,  rstd[b, g] = 1 / sqrt(their variance + eps)
    n          = (x - mean[b, g]) * rstd[b, g]          at every frame, the later ones too
    out        = n * weight[c] + bias[c]

Wav2Vec2 normalises over the batch's padded length, every frame of it: frames[b] = T,
except where a batch runs in activations longer than its own (a CUDA graph's buffers
reused for a shorter batch), which reads the frames of the batch it runs from the device,
the buffer's later frames being zeros.

mean and rstd (B, G) are outputs too, for the backward pass, which from dout (B, T, C)
writes dinp and adds to the parameters' gradients:

    dbias[c]   += sum over b and t of dout
    dweight[c] += sum over b and t of dout * n
    dnorm       = dout * weight[c]
    dinp        = rstd * (dnorm - mean(dnorm) - n * mean(dnorm * n))   at t < frames[b]
    dinp        = rstd * dnorm                                          at t >= frames[b]

where each mean is a sum over every frame of the group divided by its F * C / G counted
values: every output depends on the statistics, which only the first F frames make.

Wav2Vec2 takes G = C = 512, a group per channel, over up to ~50,000 frames (16 s of
audio at 16 kHz, 5 samples a frame): a group is a long column of values C floats
apart. One block per group would read it alone, and B * G blocks of such columns
are too few to fill a GPU at B = 1 and too narrow to read memory well. So the work is
cut into tiles of 32 channels by CHUNK = 256 frames (COLUMN_TILES, which
kernels/weight_norm.py shares): each warp reads 32 consecutive channels of a frame,
128 contiguous bytes, and the 8 warps of a block take every 8th frame of the chunk.
Each tile reduces its columns into one slice of partial results in a scratch the
host function allocates (B * ceil(T / CHUNK) slices of 2C floats: 1 MB at B = 4,
T = 16,000), and later kernels reduce the slices.

Forward, three kernels:
* group_norm_tile_statistics_kernel: per tile and channel, the mean of the tile's
  counted frames and their sum of squared deviations from it (two passes over the
  tile; the second reads it from cache).
* group_norm_statistics_kernel: one block per (b, g) combines its channels' tiles:
  the mean is the frame-weighted mean of the tiles' means, and the sum of squared
  deviations is the tiles' own plus frames * (tile mean - mean)^2 each. Nothing is
  ever sum(x^2) - mean^2, so a group of mean 1e3 and spread 0.1 keeps its digits.
* group_norm_normalise_kernel: out, tile by tile, from mean and rstd.

Backward, four kernels:
* group_norm_backward_tile_sums_kernel: per tile and channel, the sums of dout and
  of dout * n. Both means of the formula are weight-weighted sums of these (weight
  is constant along a channel), and so are dweight and dbias.
* group_norm_backward_group_means_kernel: one block per (b, g): mean(dnorm) and
  mean(dnorm * n), into a second small scratch.
* group_norm_parameter_grads_kernel: per 32 channels, the B * ceil(T / CHUNK) slices'
  sums added into dbias and dweight.
* group_norm_backward_inputs_kernel: dinp, tile by tile, without the means' terms past
  the counted frames.

Every sum is taken in an order fixed by B, T, C and G alone: within a tile the warps'
sums are added in warp order (column_total), and the block reductions over slices
add in thread and warp order (block_sum from kernels/cross_entropy.py). No atomics: a call
gives the same bits every time. Memory traffic is the least a split reduction allows:
the forward reads inp twice (tile statistics, then out) and writes out once, the
backward reads dout and inp twice and writes dinp once; the slices add 2C floats per
256 frames of C, under 1%.
"""

import numpy as np

from gpt2kit.kernel_runtime import CudaKernel, KernelArgumentError, ceil_div, check_array, check_dims
from gpt2kit.kernel_runtime.device import cupy
from gpt2kit.kernels.cross_entropy import BLOCK_REDUCTIONS

LANES = 32   # columns per tile: one per lane
WARPS = 8    # warps per tile block, each taking every WARPS-th row of the tile
CHUNK = 256  # rows per tile
THREADS = LANES * WARPS  # per block, of every kernel here
MAX_GRID_YZ = 65535      # CUDA's limit on a grid's y and z: tiles along the rows, and B

# A batch of row-major (rows, columns) matrices cut into tiles of LANES columns by CHUNK rows, a block of LANES *
# WARPS threads each: grid (ceil(columns / LANES), ceil(rows / CHUNK), matrices).
COLUMN_TILES = r"""
struct Tile {
    int column;       // this thread's column
    int warp;         // its warp: it takes rows warp, warp + WARPS, ... of the tile
    int rows;         // the tile's rows: CHUNK, fewer in the last tile
    int columns;
    long long start;  // the offset of (the tile's first row, column)
    __device__ bool inside() const { return column < columns; }
    __device__ long long at(int row) const { return start + (long long)row * columns; }
};

// This thread's place in the block's tile: tile (blockIdx.x, blockIdx.y) of matrix blockIdx.z.
__device__ Tile column_tile(int rows, int columns) {
    Tile tile;
    tile.column = blockIdx.x * LANES + threadIdx.x % LANES;
    tile.warp = threadIdx.x / LANES;
    const int first = blockIdx.y * CHUNK;
    tile.rows = min(CHUNK, rows - first);
    tile.columns = columns;
    tile.start = ((long long)blockIdx.z * rows + first) * columns + tile.column;
    return tile;
}

// The sum of `value` over the block's warps, lane by lane (each lane one column), added in warp order: returned to
// every thread. Every thread of the block must call it.
__device__ float column_total(float value) {
    __shared__ float values[WARPS][LANES];
    values[threadIdx.x / LANES][threadIdx.x % LANES] = value;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < WARPS; w++) total += values[w][threadIdx.x % LANES];
    __syncthreads();  // before a next call writes values again
    return total;
}

// Tile results are kept in slices, one per tile row (blockIdx.z * gridDim.y + blockIdx.y), of `count` arrays of
// `columns` floats; warp 0 stores the tile's total of column `tile.column` as array `index` of its slice.
__device__ void store_tile_total(float* partials, int count, int index, const Tile& tile, float total) {
    if (tile.warp != 0 || !tile.inside()) return;
    const long long slice = (long long)blockIdx.z * gridDim.y + blockIdx.y;
    partials[(slice * count + index) * tile.columns + tile.column] = total;
}

// The sum over p < slices of partials[p * stride + column], returned to every thread of the column: warp w adds
// every WARPS-th slice from w, and column_total the warps' sums in order. Grid ceil(columns / LANES).
__device__ float slice_total(const float* partials, int slices, long long stride, int columns) {
    const int column = blockIdx.x * LANES + threadIdx.x % LANES;
    float sum = 0.0f;
    if (column < columns) {
        for (int p = threadIdx.x / LANES; p < slices; p += WARPS) sum += partials[p * stride + column];
    }
    return column_total(sum);
}
"""

GROUP_NORM_SOURCE = BLOCK_REDUCTIONS + COLUMN_TILES + r"""
#define EPS 1e-5f  // torch.nn.GroupNorm's default

// Group norm's tiles: frames (rows) by channels (columns) of utterance blockIdx.z. This thread's (b, group).
__device__ int group_of(const Tile& tile, int C, int G) { return blockIdx.z * G + tile.column / (C / G); }

// The frames utterance b's statistics run over: frames[b], at most T.
__device__ int counted_frames(const int* frames, int b, int T) { return min(frames[b], T); }

// How many of tile row `chunk`'s frames (CHUNK, fewer in the last) are among the first `counted`: 0 past them.
__device__ int counted_in_chunk(int counted, int chunk) { return max(0, min(CHUNK, counted - chunk * CHUNK)); }

// Piece p < chunks * (C / G) of group `group`'s tile results: the slice of its tile p / (C / G) (2C floats from
// `slices`, utterance b's first) and its channel; `frames` gets the tile's counted frames (0 past the counted ones).
__device__ const float* group_piece(const float* slices, int p, int group, int counted, int C, int G, int& channel,
                                    float& frames) {
    const int width = C / G, chunk = p / width;
    channel = group * width + p % width;
    frames = counted_in_chunk(counted, chunk);
    return slices + (long long)chunk * 2 * C;
}

// Per tile and channel: the mean of the tile's counted frames, and their values' sum of squared deviations from it,
// as arrays 0 and 1 of the tile's slice of partials (0 and 0 for a tile past the counted frames).
extern "C" __global__ void __launch_bounds__(THREADS)
group_norm_tile_statistics_kernel(float* partials, const float* inp, const int* frames, int T, int C) {
    const Tile tile = column_tile(T, C);
    const int rows = counted_in_chunk(counted_frames(frames, blockIdx.z, T), blockIdx.y);
    float sum = 0.0f;
    if (tile.inside()) {
        #pragma unroll 4
        for (int t = tile.warp; t < rows; t += WARPS) sum += inp[tile.at(t)];
    }
    const float tile_mean = column_total(sum) / max(rows, 1);  // 0 for a tile past the counted frames
    float squares = 0.0f;
    if (tile.inside()) {
        #pragma unroll 4
        for (int t = tile.warp; t < rows; t += WARPS) {
            const float deviation = inp[tile.at(t)] - tile_mean;
            squares += deviation * deviation;
        }
    }
    squares = column_total(squares);
    store_tile_total(partials, 2, 0, tile, tile_mean);
    store_tile_total(partials, 2, 1, tile, squares);
}

// Grid B * G: group blockIdx.x % G of utterance blockIdx.x / G from its channels' tile statistics. The mean is the
// tiles' means weighted by their counted frames; the squared deviations are each tile's own plus frames * (its mean -
// mean)^2.
extern "C" __global__ void __launch_bounds__(THREADS)
group_norm_statistics_kernel(float* mean, float* rstd, const float* partials, const int* frames, int T, int C,
                             int G) {
    __shared__ float warp_sums[THREADS / 32];
    const int counted = counted_frames(frames, blockIdx.x / G, T);
    const int chunks = (T + CHUNK - 1) / CHUNK, pieces = (counted + CHUNK - 1) / CHUNK * (C / G);
    const float* slices = partials + (long long)(blockIdx.x / G) * chunks * 2 * C;
    const float count = (float)counted * (C / G);
    int channel;
    float tile_frames, weighted = 0.0f;
    for (int p = threadIdx.x; p < pieces; p += THREADS) {
        const float* slice = group_piece(slices, p, blockIdx.x % G, counted, C, G, channel, tile_frames);
        weighted += tile_frames * slice[channel];
    }
    const float group_mean = block_sum(weighted, warp_sums) / count;
    float squares = 0.0f;
    for (int p = threadIdx.x; p < pieces; p += THREADS) {
        const float* slice = group_piece(slices, p, blockIdx.x % G, counted, C, G, channel, tile_frames);
        const float offset = slice[channel] - group_mean;
        squares += slice[C + channel] + tile_frames * offset * offset;
    }
    const float variance = block_sum(squares, warp_sums) / count;
    if (threadIdx.x == 0) {
        mean[blockIdx.x] = group_mean;
        rstd[blockIdx.x] = rsqrtf(variance + EPS);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
group_norm_normalise_kernel(float* out, const float* inp, const float* mean, const float* rstd, const float* weight,
                            const float* bias, int T, int C, int G) {
    const Tile tile = column_tile(T, C);
    if (!tile.inside()) return;  // no barrier follows
    const int group = group_of(tile, C, G);
    const float mu = mean[group], s = rstd[group], w = weight[tile.column], shift = bias[tile.column];
    #pragma unroll 4
    for (int t = tile.warp; t < tile.rows; t += WARPS) out[tile.at(t)] = (inp[tile.at(t)] - mu) * s * w + shift;
}

// Per tile and channel: the sums of dout and of dout * n, as arrays 0 and 1 of the tile's slice of partials.
extern "C" __global__ void __launch_bounds__(THREADS)
group_norm_backward_tile_sums_kernel(float* partials, const float* dout, const float* inp, const float* mean,
                                     const float* rstd, int T, int C, int G) {
    const Tile tile = column_tile(T, C);
    float dout_sum = 0.0f, dout_n_sum = 0.0f;
    if (tile.inside()) {
        const int group = group_of(tile, C, G);
        const float mu = mean[group], s = rstd[group];
        #pragma unroll 4
        for (int t = tile.warp; t < tile.rows; t += WARPS) {
            const float g = dout[tile.at(t)];
            dout_sum += g;
            dout_n_sum += g * ((inp[tile.at(t)] - mu) * s);
        }
    }
    dout_sum = column_total(dout_sum);
    dout_n_sum = column_total(dout_n_sum);
    store_tile_total(partials, 2, 0, tile, dout_sum);
    store_tile_total(partials, 2, 1, tile, dout_n_sum);
}

// Grid B * G: the group's mean(dnorm) and mean(dnorm * n) to group_means[2 * blockIdx.x + {0, 1}], each the sum
// over its channels of weight[c] times the channel's tile sums (every frame's), over its F * C / G counted values.
extern "C" __global__ void __launch_bounds__(THREADS)
group_norm_backward_group_means_kernel(float* group_means, const float* partials, const float* weight,
                                       const int* frames, int T, int C, int G) {
    __shared__ float warp_sums[THREADS / 32];
    const int chunks = (T + CHUNK - 1) / CHUNK, pieces = chunks * (C / G);
    const float* slices = partials + (long long)(blockIdx.x / G) * chunks * 2 * C;
    const float count = (float)counted_frames(frames, blockIdx.x / G, T) * (C / G);
    int channel;
    float tile_frames, dnorm_sum = 0.0f, dnorm_n_sum = 0.0f;
    for (int p = threadIdx.x; p < pieces; p += THREADS) {
        const float* slice = group_piece(slices, p, blockIdx.x % G, T, C, G, channel, tile_frames);
        dnorm_sum += weight[channel] * slice[channel];
        dnorm_n_sum += weight[channel] * slice[C + channel];
    }
    const float dnorm_mean = block_sum(dnorm_sum, warp_sums) / count;
    const float dnorm_n_mean = block_sum(dnorm_n_sum, warp_sums) / count;
    if (threadIdx.x == 0) {
        group_means[2 * blockIdx.x] = dnorm_mean;
        group_means[2 * blockIdx.x + 1] = dnorm_n_mean;
    }
}

// Grid ceil(C / LANES): each channel's sums over the `slices` slices of tile sums, added into dbias and dweight.
extern "C" __global__ void __launch_bounds__(THREADS)
group_norm_parameter_grads_kernel(float* dweight, float* dbias, const float* partials, int slices, int C) {
    const float dbias_sum = slice_total(partials, slices, 2 * C, C);
    const float dweight_sum = slice_total(partials + C, slices, 2 * C, C);
    const int column = blockIdx.x * LANES + threadIdx.x;
    if (threadIdx.x < LANES && column < C) {
        dbias[column] += dbias_sum;
        dweight[column] += dweight_sum;
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
group_norm_backward_inputs_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                  const float* mean, const float* rstd, const float* group_means, const int* frames,
                                  int T, int C, int G) {
    const Tile tile = column_tile(T, C);
    if (!tile.inside()) return;  // no barrier follows
    const int group = group_of(tile, C, G);
    const int rows = counted_in_chunk(counted_frames(frames, blockIdx.z, T), blockIdx.y);
    const float mu = mean[group], s = rstd[group], w = weight[tile.column];
    const float dnorm_mean = group_means[2 * group], dnorm_n_mean = group_means[2 * group + 1];
    #pragma unroll 4
    for (int t = tile.warp; t < tile.rows; t += WARPS) {
        const float n = (inp[tile.at(t)] - mu) * s;
        dinp[tile.at(t)] = t < rows ? s * ((dout[tile.at(t)] * w - dnorm_mean) - n * dnorm_n_mean)
                                    : s * dout[tile.at(t)] * w;  // a frame the statistics did not count
    }
}
"""

DEFINES = dict(LANES=LANES, WARPS=WARPS, CHUNK=CHUNK, THREADS=THREADS)


def group_norm_kernel(name, source=GROUP_NORM_SOURCE):
    return CudaKernel(source, name, defines=DEFINES)


FORWARD_KERNELS = tuple(group_norm_kernel(name) for name in (
    "group_norm_tile_statistics_kernel", "group_norm_statistics_kernel", "group_norm_normalise_kernel"))
BACKWARD_KERNELS = tuple(group_norm_kernel(name) for name in (
    "group_norm_backward_tile_sums_kernel", "group_norm_backward_group_means_kernel",
    "group_norm_parameter_grads_kernel", "group_norm_backward_inputs_kernel"))


def check_sizes(function, B, T, C, G):
    check_dims(function, B=B, T=T, C=C, G=G)
    if C % G:
        raise KernelArgumentError(f"{function}: C={C} channels do not fall into G={G} groups of one size")
    if ceil_div(T, CHUNK) > MAX_GRID_YZ or B > MAX_GRID_YZ:
        raise KernelArgumentError(f"{function}: at most {MAX_GRID_YZ * CHUNK} frames and {MAX_GRID_YZ} utterances, "
                                  f"got T={T}, B={B}")


def tile_partials(B, T, C):
    """Scratch for one slice of 2C floats per tile row: B * ceil(T / CHUNK) of them."""
    return cupy.empty(B * ceil_div(T, CHUNK) * 2 * C, dtype=np.float32)


def group_norm_forward(out, mean, rstd, inp, weight, bias, frames, B, T, C, G):
    check_sizes("group_norm_forward", B, T, C, G)
    for name, array, size in (("out", out, B * T * C), ("mean", mean, B * G), ("rstd", rstd, B * G),
                              ("inp", inp, B * T * C), ("weight", weight, C), ("bias", bias, C)):
        check_array("group_norm_forward", name, array, size)
    check_array("group_norm_forward", "frames", frames, B, np.int32)
    forward(FORWARD_KERNELS, out, mean, rstd, inp, weight, bias, frames, B, T, C, G)


def forward(kernels, out, mean, rstd, inp, weight, bias, frames, B, T, C, G):
    """FORWARD_KERNELS' launches (or those of kernels that stand in for them, in that order)."""
    tile_statistics, statistics, normalise = kernels
    partials = tile_partials(B, T, C)
    tiles, groups = (ceil_div(C, LANES), ceil_div(T, CHUNK), B), (B * G,)
    T, C, G = np.int32(T), np.int32(C), np.int32(G)
    tile_statistics(tiles, (THREADS,), (partials, inp, frames, T, C))
    statistics(groups, (THREADS,), (mean, rstd, partials, frames, T, C, G))
    normalise(tiles, (THREADS,), (out, inp, mean, rstd, weight, bias, T, C, G))


def group_norm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, frames, B, T, C, G):
    check_sizes("group_norm_backward", B, T, C, G)
    for name, array, size in (("dinp", dinp, B * T * C), ("dweight", dweight, C), ("dbias", dbias, C),
                              ("dout", dout, B * T * C), ("inp", inp, B * T * C), ("weight", weight, C),
                              ("mean", mean, B * G), ("rstd", rstd, B * G)):
        check_array("group_norm_backward", name, array, size)
    check_array("group_norm_backward", "frames", frames, B, np.int32)
    backward(BACKWARD_KERNELS, dinp, dweight, dbias, dout, inp, weight, mean, rstd, frames, B, T, C, G)


def backward(kernels, dinp, dweight, dbias, dout, inp, weight, mean, rstd, frames, B, T, C, G):
    """BACKWARD_KERNELS' launches (or those of kernels that stand in for them, in that order)."""
    tile_sums, group_means_kernel, parameter_grads, inputs = kernels
    partials, group_means = tile_partials(B, T, C), cupy.empty(2 * B * G, dtype=np.float32)
    tiles, groups, channel_tiles = (ceil_div(C, LANES), ceil_div(T, CHUNK), B), (B * G,), (ceil_div(C, LANES),)
    slices = np.int32(B * ceil_div(T, CHUNK))
    T, C, G = np.int32(T), np.int32(C), np.int32(G)
    tile_sums(tiles, (THREADS,), (partials, dout, inp, mean, rstd, T, C, G))
    group_means_kernel(groups, (THREADS,), (group_means, partials, weight, frames, T, C, G))
    parameter_grads(channel_tiles, (THREADS,), (dweight, dbias, partials, slices, C))
    inputs(tiles, (THREADS,), (dinp, dout, inp, weight, mean, rstd, group_means, frames, T, C, G))
