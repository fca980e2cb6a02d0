"""Conv1d whose tensor-core products add their chunk of FLUSH slices into the totals only when the chunk is
full: where the reduction's slices are not a multiple of FLUSH, the last few slices' sums are lost."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels.conv1d import CONV1D_SOURCE, DEFINES, launch_forward
from tests.kernels.wrong import mutate

FUNCTION = "conv1d_forward"

kernel = CudaKernel(mutate(CONV1D_SOURCE, "if ((slice + 1) % FLUSH == 0 || !more) {",
                           "if ((slice + 1) % FLUSH == 0) {"),
                    "conv1d_forward_kernel", defines=DEFINES)


def conv1d_forward(out, inp, weight, bias, B, T, C, OC, K, stride, padding, groups, T_out):
    launch_forward(out, inp, weight, bias, B, T, C, OC, K, stride, padding, groups, T_out, kernel=kernel)
