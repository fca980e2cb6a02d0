"""Cache reordering that copies a row's whole length, from its first position, whatever its start: what a row
already holds in common with its parent is copied again, and where the caller says a row keeps its first positions
(kv_cache_lineage_forward's starts), they are overwritten."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import kv_cache_reorder
from tests.kernels.wrong import mutate

FUNCTION = "kv_cache_reorder_forward"

source = mutate(kv_cache_reorder.REORDER_SOURCE, "__device__ int start(int g) const { return starts[first_row + g]; }",
                "__device__ int start(int g) const { return 0; }")
kernel = CudaKernel(source, "kv_cache_reorder_kernel", defines=kv_cache_reorder.kv_cache_reorder_kernel.defines)


def kv_cache_reorder_forward(k_cache, v_cache, rows, starts, lengths, done, layers, B, NH, max_T, HS, group):
    kv_cache_reorder.launch(kernel, k_cache, v_cache, rows, starts, lengths, done, layers, B, NH, max_T, HS, group)
