"""A fused matrix-vector kernel that stops after its first chunk of rows: a batch of more than
eight rows (the chunk) leaves the rest of out unwritten."""

from gpt2kit.kernels import fused_gemv
from gpt2kit.kernel_runtime import CudaKernel
from tests.kernels.wrong import mutate

FUNCTION = "matmul_residual_forward"

SOURCE = mutate(fused_gemv.FUSED_GEMV_SOURCE, "for (int m0 = 0; m0 < M; m0 += rows_per_chunk)",
                "for (int m0 = 0; m0 < min(M, rows_per_chunk); m0 += rows_per_chunk)")
kernel = CudaKernel(SOURCE, "fused_gemv_kernel", defines=fused_gemv.matmul_residual_kernel.defines)


def matmul_residual_forward(out, inp, weight, bias, residual, B, T, C, OC):
    fused_gemv.launch_fused(kernel, FUNCTION, out, inp, None, None, weight, bias, residual, B, T, C, OC)
