"""MatMul's backward pass whose dweight adds up its split-K slices of scratch without the last split's: the
products over dout's last rows never reach dweight (right only while K is too short to be split)."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels.matmul_backward import (DEFINES, MATMUL_BACKWARD_SOURCE, MIN_TENSOR_CORE_K, launch,
                                              launch_on_tensor_cores)
from tests.kernels.wrong import mutate

FUNCTION = "matmul_backward"

kernel = CudaKernel(mutate(MATMUL_BACKWARD_SOURCE, "z < count; z++) {", "z < count - 1; z++) {"),
                    "add_slices_kernel", defines=DEFINES)


def matmul_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC):
    if min(B * T, OC) >= MIN_TENSOR_CORE_K:
        launch_on_tensor_cores(dinp, dweight, dbias, dout, inp, weight, B * T, C, OC, add_slices=kernel)
    else:
        launch(dinp, dweight, dbias, dout, inp, weight, B * T, C, OC)
