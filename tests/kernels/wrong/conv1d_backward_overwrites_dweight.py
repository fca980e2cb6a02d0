"""Conv1d's backward pass that writes the summed partials into dweight instead of adding them: the gradient
gathered so far is lost (the positional convolution's dweight is weight norm's, gathered before its step)."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels.conv1d import CONV1D_SOURCE, DEFINES, launch_backward
from tests.kernels.wrong import mutate

FUNCTION = "conv1d_backward"

kernel = CudaKernel(mutate(CONV1D_SOURCE, "dweight[element] += sum;", "dweight[element] = sum;"),
                    "dweight_sum_kernel", defines=DEFINES)


def conv1d_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC, K, stride, padding, groups, T_out):
    launch_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC, K, stride, padding, groups, T_out,
                    sum_kernel=kernel)
