"""Cache reordering that copies every slot, not only those of the positions a row takes: the slots past a row's
length, which it must leave as they are, get its parent's, and so do those below its start."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import kv_cache_reorder
from tests.kernels.wrong import mutate

FUNCTION = "kv_cache_reorder_forward"

source = mutate(kv_cache_reorder.REORDER_SOURCE,
                " && holds_from(i / per_position, length, start, group.max_T);", ";")
source = mutate(source, "lowest = min(lowest, group.first_slot(g));", "lowest = 0;")
source = mutate(source, "highest = max(highest, group.last_slot(g));", "highest = max_T;")
kernel = CudaKernel(source, "kv_cache_reorder_kernel", defines=kv_cache_reorder.kv_cache_reorder_kernel.defines)


def kv_cache_reorder_forward(k_cache, v_cache, rows, starts, lengths, done, layers, B, NH, max_T, HS, group):
    kv_cache_reorder.launch(kernel, k_cache, v_cache, rows, starts, lengths, done, layers, B, NH, max_T, HS, group)
