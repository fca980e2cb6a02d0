"""The encoder's backward pass that writes dwte's rows instead of adding to them: the gradient the token
embeddings had gathered (from the language-model head, which shares wte) is lost."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels.encoder_backward import BLOCK_SIZE, ENCODER_BACKWARD_SOURCE, launch
from tests.kernels.wrong import mutate

FUNCTION = "encoder_backward"

kernel = CudaKernel(mutate(ENCODER_BACKWARD_SOURCE, "= te[i] + grad[i];", "= grad[i];"), "encoder_backward_kernel",
                    defines=dict(BLOCK_SIZE=BLOCK_SIZE))


def encoder_backward(dwte, dwpe, dout, inp, B, T, C):
    launch(kernel, dwte, dwpe, dout, inp, B, T, C)
