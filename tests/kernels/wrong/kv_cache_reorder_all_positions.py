"""Cache reordering that copies every position, not only the filled ones: the slots past a row's length,
which it must leave as they are, get its parent's."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import kv_cache_reorder
from tests.kernels.wrong import mutate

FUNCTION = "kv_cache_reorder_forward"

source = mutate(kv_cache_reorder.REORDER_SOURCE, " && i / per_position < filled;", ";")
source = mutate(source, "filled = max(filled, group.filled(g));", "filled = max_T;")
kernel = CudaKernel(source, "kv_cache_reorder_kernel", defines=kv_cache_reorder.kv_cache_reorder_kernel.defines)


def kv_cache_reorder_forward(k_cache, v_cache, rows, lengths, done, B, NH, max_T, HS, group):
    kv_cache_reorder.launch(kernel, k_cache, v_cache, rows, lengths, done, B, NH, max_T, HS, group)
