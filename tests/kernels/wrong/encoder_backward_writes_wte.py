"""The encoder's backward pass that writes dwte's rows instead of adding to them: the gradient the token
embeddings had gathered (from the language-model head, which shares wte) is lost."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels.encoder_backward import (DEFINES, ENCODER_BACKWARD_SOURCE, encoder_backward_wpe_kernel, launch_wpe,
                                              launch_wte)
from tests.kernels.wrong import mutate

FUNCTION = "encoder_backward"

kernel = CudaKernel(mutate(ENCODER_BACKWARD_SOURCE, "float sum = row[c];", "float sum = 0.0f;"),
                    "encoder_backward_wte_kernel", defines=DEFINES)


def encoder_backward(dwte, dwpe, dout, inp, B, T, C):
    launch_wte(kernel, dwte, dout, inp, B, T, C)
    launch_wpe(encoder_backward_wpe_kernel, dwpe, dout, B, T, C)
