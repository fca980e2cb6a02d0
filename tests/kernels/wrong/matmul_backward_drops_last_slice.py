"""MatMul's backward products whose walk along K stops at the last whole slice of TILE_K: the products of a
last, partial slice are dropped (dinp's when OC is not a multiple of 16, dweight's when B*T is not)."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels.matmul_backward import DEFINES, MATMUL_BACKWARD_SOURCE, launch
from tests.kernels.wrong import mutate

FUNCTION = "matmul_backward"

SOURCE = mutate(MATMUL_BACKWARD_SOURCE, "for (int k0 = 0; k0 < K; k0 += TILE_K)",
                "for (int k0 = 0; k0 + TILE_K <= K; k0 += TILE_K)")
dinp_kernel = CudaKernel(SOURCE, "matmul_backward_dinp_kernel", defines=DEFINES)
dweight_kernel = CudaKernel(SOURCE, "matmul_backward_dweight_kernel", defines=DEFINES)


def matmul_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC):
    launch(dinp, dweight, dbias, dout, inp, weight, B * T, C, OC, dinp_kernel=dinp_kernel,
           dweight_kernel=dweight_kernel)
