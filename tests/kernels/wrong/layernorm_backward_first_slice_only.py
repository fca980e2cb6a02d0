"""LayerNorm's backward pass whose dweight and dbias sum only the first block's slice of scratch: the gradients of
the first 16 rows, right while the batch fits one block, missing every later row's after that."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels import layernorm_backward as module
from tests.kernels.wrong import mutate

FUNCTION = "layernorm_backward"

kernel = CudaKernel(mutate(module.LAYERNORM_BACKWARD_SOURCE, "p < slices; p += SLICES", "p < 1; p += SLICES"),
                    "layernorm_parameter_grads_kernel", defines=module.DEFINES)


def layernorm_backward(dinp, dweight, dbias, scratch, dout, inp, weight, mean, rstd, B, T, C):
    module.launch(module.rows_kernel_for(C), kernel,
                  dinp, dweight, dbias, scratch, dout, inp, weight, mean, rstd, B, T, C)
