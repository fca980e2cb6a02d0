"""Cross-entropy whose gradient pass stops at the last real column: the padding columns V..Vp-1 of dlogits
keep whatever they held (here NaN; in place, the logits' padding) instead of 0."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import cross_entropy
from tests.kernels.wrong import mutate

FUNCTION = "cross_entropy_forward_backward"

SOURCE = mutate(cross_entropy.CROSS_ENTROPY_SOURCE, "g < all_groups;",
                "g < real_groups;")
kernel = CudaKernel(SOURCE, "cross_entropy_kernel", defines=cross_entropy.cross_entropy_kernel.defines)


def cross_entropy_forward_backward(dlogits, losses, logits, targets, B, T, V, Vp):
    cross_entropy.launch(kernel, dlogits, losses, logits, targets, B, T, V, Vp)
