"""Conv1d whose windows start at t_out * stride instead of t_out * stride - padding: the zeros of the padding
all land after the last frame, so with padding every output reads frames `padding` too late."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels.conv1d import CONV1D_SOURCE, DEFINES, launch_forward
from tests.kernels.wrong import mutate

FUNCTION = "conv1d_forward"

kernel = CudaKernel(mutate(CONV1D_SOURCE, "first_frame[i] = (row - b * T_out) * stride - padding;",
                           "first_frame[i] = (row - b * T_out) * stride;"),
                    "conv1d_forward_kernel", defines=DEFINES)


def conv1d_forward(out, inp, weight, bias, B, T, C, OC, K, stride, padding, groups, T_out):
    launch_forward(out, inp, weight, bias, B, T, C, OC, K, stride, padding, groups, T_out, kernel=kernel)
