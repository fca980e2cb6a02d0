"""MatMul's backward products on the tensor cores in one TF32 pass instead of three: every operand loses its
low 13 bits of mantissa, an error fp32's bound does not allow (tf32's would)."""

from gpt2kit.kernels.matmul_backward import MIN_TENSOR_CORE_K, launch, launch_on_tensor_cores, tensor_core_kernels

FUNCTION = "matmul_backward"

ONE_PASS = {key: kernel.with_defines(PASSES=1) for key, kernel in tensor_core_kernels.items()}


def matmul_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC):
    if min(B * T, OC) >= MIN_TENSOR_CORE_K:
        launch_on_tensor_cores(dinp, dweight, dbias, dout, inp, weight, B * T, C, OC, kernels=ONE_PASS)
    else:
        launch(dinp, dweight, dbias, dout, inp, weight, B * T, C, OC)
