"""The encoder's backward pass whose dwpe takes only the first sequence's gradient, dout[0, t], where every
sequence's row at position t read wpe[t]."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels.encoder_backward import (DEFINES, ENCODER_BACKWARD_SOURCE, encoder_backward_wte_kernel, launch_wpe,
                                              launch_wte)
from tests.kernels.wrong import mutate

FUNCTION = "encoder_backward"

kernel = CudaKernel(mutate(ENCODER_BACKWARD_SOURCE, "for (int b = 0; b < B; b++) sum += dout[b * TC + tc];",
                           "sum += dout[tc];"), "encoder_backward_wpe_kernel", defines=DEFINES)


def encoder_backward(dwte, dwpe, dout, inp, B, T, C):
    launch_wte(encoder_backward_wte_kernel, dwte, dout, inp, B, T, C)
    launch_wpe(kernel, dwpe, dout, B, T, C)
