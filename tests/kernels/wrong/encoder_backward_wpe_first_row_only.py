"""The encoder's backward pass whose dwpe takes only the first sequence's gradient, dout[0, t], where every
sequence's row at position t read wpe[t]."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels.encoder_backward import BLOCK_SIZE, ENCODER_BACKWARD_SOURCE, launch
from tests.kernels.wrong import mutate

FUNCTION = "encoder_backward"

kernel = CudaKernel(mutate(ENCODER_BACKWARD_SOURCE, "pe += grad[i];", "if (b0 + k0 + i == 0) pe += grad[i];"),
                    "encoder_backward_kernel", defines=dict(BLOCK_SIZE=BLOCK_SIZE))


def encoder_backward(dwte, dwpe, dout, inp, B, T, C):
    launch(kernel, dwte, dwpe, dout, inp, B, T, C)
