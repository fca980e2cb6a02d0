"""MatMul's backward pass that writes dout^T @ inp into dweight instead of adding it: the gradient the weight
had gathered (GPT-2's tied token embedding gets the LM head's and the encoder's) is lost."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels.matmul_backward import DEFINES, MATMUL_BACKWARD_SOURCE, launch
from tests.kernels.wrong import mutate

FUNCTION = "matmul_backward"

kernel = CudaKernel(mutate(MATMUL_BACKWARD_SOURCE, "OC, M, C, /*a_along_k=*/false, /*accumulate=*/true);",
                           "OC, M, C, /*a_along_k=*/false, /*accumulate=*/false);"),
                    "matmul_backward_dweight_kernel", defines=DEFINES)


def matmul_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC):
    launch(dinp, dweight, dbias, dout, inp, weight, B * T, C, OC, dweight_kernel=kernel)
