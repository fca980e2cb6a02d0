"""The lineage's counts without the rule for two rows of one parent: they take what the parent held in common with
itself (the count on its diagonal, never kept up), where both are now whole copies of it and share its length."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import kv_cache_reorder
from tests.kernels.wrong import mutate

FUNCTION = "kv_cache_lineage_forward"

source = mutate(kv_cache_reorder.REORDER_SOURCE, "a == c ? min(lengths[first + i], lengths[first + j]) : ", "")
kernel = CudaKernel(source, "kv_cache_lineage_kernel", defines=kv_cache_reorder.kv_cache_lineage_kernel.defines)


def kv_cache_lineage_forward(shared, starts, rows, lengths, done, B, group):
    kv_cache_reorder.launch_lineage(kernel, shared, starts, rows, lengths, done, B, group)
