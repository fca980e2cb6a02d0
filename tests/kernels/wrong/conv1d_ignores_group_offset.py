"""Conv1d that reads group 0's channels for every group: the windows' channels are not offset by g * C / groups,
so with groups > 1 every group but the first convolves the wrong channels."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels.conv1d import CONV1D_SOURCE, DEFINES, launch_forward
from tests.kernels.wrong import mutate

FUNCTION = "conv1d_forward"

kernel = CudaKernel(mutate(CONV1D_SOURCE, "frames[i] = row < rows ? inp + (long long)b * T * C + g * Cg : nullptr;",
                           "frames[i] = row < rows ? inp + (long long)b * T * C : nullptr;"),
                    "conv1d_forward_kernel", defines=DEFINES)


def conv1d_forward(out, inp, weight, bias, B, T, C, OC, K, stride, padding, groups, T_out):
    launch_forward(out, inp, weight, bias, B, T, C, OC, K, stride, padding, groups, T_out, kernel=kernel)
