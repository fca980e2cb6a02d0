"""Cache reordering in place without holding the parents first: each element is copied row by row, a row
from its parent as the parent is now, after an earlier row of the group may have overwritten it (two beams
trading rows both end as one)."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import kv_cache_reorder
from tests.kernels.wrong import mutate

FUNCTION = "kv_cache_reorder_forward"

ROW_BY_ROW = r"""template <typename Element>
__device__ void reorder_elements(Element* cache, const Group& group, int NH, int h, int row_elements, int first,
                                 int count, int per_position) {
    for (int i = first + threadIdx.x; i < first + count; i += blockDim.x) {
        for (int g = 0; g < group.size; g++) {
            int b = group.first_row + g, parent = group.parent(g);
            if (group.moves(g) && holds_from(i / per_position, group.length(g), group.start(g), group.max_T)) {
                const Element value = cache[((long long)parent * NH + h) * row_elements + i];
                cache[((long long)b * NH + h) * row_elements + i] = value;
            }
        }
    }
}

"""

solution = kv_cache_reorder.REORDER_SOURCE
held_first = solution[solution.index("template <typename Element>"):solution.index('extern "C"')]
kernel = CudaKernel(mutate(solution, held_first, ROW_BY_ROW), "kv_cache_reorder_kernel",
                    defines=kv_cache_reorder.kv_cache_reorder_kernel.defines)


def kv_cache_reorder_forward(k_cache, v_cache, rows, starts, lengths, done, layers, B, NH, max_T, HS, group):
    kv_cache_reorder.launch(kernel, k_cache, v_cache, rows, starts, lengths, done, layers, B, NH, max_T, HS, group)
