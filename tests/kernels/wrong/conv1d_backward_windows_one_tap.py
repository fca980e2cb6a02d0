"""Conv1d's backward pass whose dinp, where windows are rows, adds back only the first window that read a frame:
with K > stride a frame is read by several windows, and the gradients of all but one are lost."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels.conv1d import CONV1D_SOURCE, DEFINES, launch_backward
from tests.kernels.wrong import mutate

FUNCTION = "conv1d_backward"

kernel = CudaKernel(mutate(CONV1D_SOURCE, "for (int k = t % stride; k < K && k <= t; k += stride) {",
                           "for (int k = t % stride; k < K && k <= t; k += K) {"),
                    "add_windows_kernel", defines=DEFINES)


def conv1d_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC, K, stride, padding, groups, T_out):
    launch_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC, K, stride, padding, groups, T_out,
                    add_windows=kernel)
