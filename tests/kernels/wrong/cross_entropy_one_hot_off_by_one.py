"""Cross-entropy that subtracts the one-hot at the column after the target: the target's gradient keeps +p
instead of p - 1, and its neighbour (none for the last class) gets p - 1."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import cross_entropy
from tests.kernels.wrong import mutate

FUNCTION = "cross_entropy_forward_backward"

SOURCE = mutate(cross_entropy.CROSS_ENTROPY_SOURCE, "j == target ? 1.0f : 0.0f",
                "j == target + 1 ? 1.0f : 0.0f")
kernel = CudaKernel(SOURCE, "cross_entropy_kernel", defines=cross_entropy.cross_entropy_kernel.defines)


def cross_entropy_forward_backward(dlogits, losses, logits, targets, B, T, V, Vp):
    cross_entropy.launch(kernel, dlogits, losses, logits, targets, B, T, V, Vp)
