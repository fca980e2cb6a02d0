"""Reordering the KV cache's rows in place, for beam search.

After each step of beam search, beam b of a prompt continues the hypothesis that
was beam rows[b] (its parent): its cache row must become a copy of that row. Two
beams may share a parent, and a parent may itself be overwritten (beams 0 and 1
swapping, say), so copying row by row in place would read rows already overwritten.
The usual answer is a scratch copy of the cache (a whole layer's keys and values,
320 MiB for GPT-J's five beams of 2,048 positions); here there is none:

    kv_cache_reorder_forward(k_cache, v_cache, rows, lengths, done, B, NH, max_T, HS, group)

The rows come in groups of `group` consecutive rows (a prompt's K beams), and a
row's parent is in its own group. Each thread owns one element (head, position,
dimension) of one group: it first reads that element from every parent the group
needs, into registers, and only then writes the rows whose parent is another row.
No other thread touches that element of those rows, so nothing is read after it is
overwritten, and one launch does a layer's keys and values with no scratch at all.

Consecutive threads take consecutive elements of a head's positions, so every read
and write is coalesced; float4s when HS is a multiple of 4. Only the filled
positions are copied, those below the row's length (lengths[b], read from the
device, as the decode kernels read it), so a step's copy grows with the sequence
instead of costing the whole cache. Rows whose parent is themselves are not
written. Once done[0] is set (beam search is over: kernels/beam_search.py) the
kernel returns at once. A row whose parent is outside its group gets NaN, never
another group's row.

grid (B / group * NH, 2, positions / COPY_POSITIONS): blockIdx.y is the k or the v
cache, blockIdx.z a run of COPY_POSITIONS positions; caches (B, NH, max_T, HS).
"""

import numpy as np

from kernel_runtime import CudaKernel, KernelArgumentError, ceil_div, check_array, check_dims

COPY_THREADS = 256
COPY_POSITIONS = 16
MAX_GROUP = 16  # registers a thread holds: one element of each row of its group

REORDER_SOURCE = r"""
template <typename Element>
__device__ void reorder_elements(Element* cache, const int* rows, const int* lengths, int group0, int group, int NH,
                                 int h, int max_T, int row_elements, int first, int count, int per_position) {
    Element held[MAX_GROUP];
    for (int i = first + threadIdx.x; i < first + count; i += blockDim.x) {
        int position = i / per_position;
#pragma unroll
        for (int g = 0; g < MAX_GROUP; g++) {
            int b = group0 + g, parent = g < group ? rows[b] : b;
            if (g < group && parent != b && parent >= group0 && parent < group0 + group
                && position < min(lengths[b], max_T))
                held[g] = cache[((long long)parent * NH + h) * row_elements + i];
        }
#pragma unroll
        for (int g = 0; g < MAX_GROUP; g++) {
            int b = group0 + g, parent = g < group ? rows[b] : b;
            if (g >= group || parent == b || position >= min(lengths[b], max_T)) continue;
            Element* to = &cache[((long long)b * NH + h) * row_elements + i];
            if (parent >= group0 && parent < group0 + group) {
                *to = held[g];
            } else {
                float* nan = (float*)to;
                for (int f = 0; f < (int)(sizeof(Element) / sizeof(float)); f++) nan[f] = __int_as_float(0x7fffffff);
            }
        }
    }
}

extern "C" __global__ void kv_cache_reorder_kernel(float* k_cache, float* v_cache, const int* rows,
                                                   const int* lengths, const int* done, int NH, int max_T, int HS,
                                                   int group) {
    if (*done) return;
    int group0 = blockIdx.x / NH * group, h = blockIdx.x % NH;
    int first_position = blockIdx.z * COPY_POSITIONS;
    int filled = 0;  // the longest filled row of the group: past it, nothing to copy
    for (int g = 0; g < group; g++) filled = max(filled, min(lengths[group0 + g], max_T));
    if (first_position >= filled) return;
    int positions = min(filled, first_position + COPY_POSITIONS) - first_position;
    float* cache = blockIdx.y ? v_cache : k_cache;
    if (HS % 4 == 0) {  // rows start 16-byte aligned: float4s
        int per_position = HS / 4;
        reorder_elements((float4*)cache, rows, lengths, group0, group, NH, h, max_T, max_T * per_position,
                         first_position * per_position, positions * per_position, per_position);
    } else {
        reorder_elements(cache, rows, lengths, group0, group, NH, h, max_T, max_T * HS, first_position * HS,
                         positions * HS, HS);
    }
}
"""

kv_cache_reorder_kernel = CudaKernel(REORDER_SOURCE, "kv_cache_reorder_kernel",
                                     defines=dict(COPY_POSITIONS=COPY_POSITIONS, MAX_GROUP=MAX_GROUP))


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
    kernel(grid, (COPY_THREADS,), (k_cache, v_cache, rows, lengths, done, np.int32(NH), np.int32(max_T),
                                   np.int32(HS), np.int32(group)))
