"""Cache reordering in place without holding the parents first: a row copies its parent as the parent is
now, after an earlier row of the group may have overwritten it (two beams trading rows both end as one)."""

from kernel_runtime import CudaKernel
from kernels import kv_cache_reorder
from tests.kernels.wrong import mutate

FUNCTION = "kv_cache_reorder_forward"

kernel = CudaKernel(mutate(kv_cache_reorder.REORDER_SOURCE, "*to = held[g];",
                           "*to = cache[((long long)parent * NH + h) * row_elements + i];"),
                    "kv_cache_reorder_kernel", defines=kv_cache_reorder.kv_cache_reorder_kernel.defines)


def kv_cache_reorder_forward(k_cache, v_cache, rows, lengths, done, B, NH, max_T, HS, group):
    kv_cache_reorder.launch(kernel, k_cache, v_cache, rows, lengths, done, B, NH, max_T, HS, group)
