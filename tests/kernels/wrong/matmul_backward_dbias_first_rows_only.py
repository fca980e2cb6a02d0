"""MatMul's backward pass whose dbias sums only the first block of rows: each warp adds its first row of dout
and never strides on, so rows from BIAS_WARPS on are missing from the sum."""

from gpt2kit.kernel_runtime import CudaKernel
from gpt2kit.kernels.matmul_backward import DEFINES, MATMUL_BACKWARD_SOURCE, launch
from tests.kernels.wrong import mutate

FUNCTION = "matmul_backward"

ROW_LOOP = """#pragma unroll 4  // four rows' loads in flight at once; the additions keep their order
        for (int m = warp; m < M; m += BIAS_WARPS) sum += dout[(long long)m * OC + o];"""
kernel = CudaKernel(mutate(MATMUL_BACKWARD_SOURCE, ROW_LOOP, "if (warp < M) sum = dout[(long long)warp * OC + o];"),
                    "matmul_backward_dbias_kernel", defines=DEFINES)


def matmul_backward(dinp, dweight, dbias, dout, inp, weight, B, T, C, OC):
    launch(dinp, dweight, dbias, dout, inp, weight, B * T, C, OC, dbias_kernel=kernel)
