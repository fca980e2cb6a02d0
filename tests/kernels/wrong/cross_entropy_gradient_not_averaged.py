"""Cross-entropy whose gradient is that of the summed loss, not of the mean: dlogits is B * T times too large
(right only for one position)."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import cross_entropy
from tests.kernels.wrong import mutate

FUNCTION = "cross_entropy_forward_backward"

SOURCE = mutate(cross_entropy.CROSS_ENTROPY_SOURCE, "float grad_scale = 1.0f / rows;",
                "float grad_scale = 1.0f;")
kernel = CudaKernel(SOURCE, "cross_entropy_kernel", defines=cross_entropy.cross_entropy_kernel.defines)


def cross_entropy_forward_backward(dlogits, losses, logits, targets, B, T, V, Vp):
    cross_entropy.launch(kernel, dlogits, losses, logits, targets, B, T, V, Vp)
