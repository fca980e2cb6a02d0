"""Conv1d's backward pass whose dinp takes a frame's taps as k0, k0 + 1, ... instead of k0, k0 + stride, ...:
with stride > 1 each frame gathers the gradient through the wrong weights (stride 1 is right by accident)."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels.conv1d import CONV1D_SOURCE, DEFINES, launch_backward
from tests.kernels.wrong import mutate

FUNCTION = "conv1d_backward"

kernel = CudaKernel(mutate(CONV1D_SOURCE, "filter[(long long)o * Cg * K + stride * m]",
                           "filter[(long long)o * Cg * K + m]"),
                    "conv1d_backward_dinp_kernel", defines=DEFINES)


def conv1d_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC, K, stride, padding, groups, T_out):
    launch_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC, K, stride, padding, groups, T_out,
                    dinp_kernel=kernel)
